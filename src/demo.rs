//! `diorch demo`: a guided first run on the sandbox. Installs the DIJob CRD and the admission
//! webhooks (by URL, with a fresh certificate), starts the operator in-process, submits DI-orchestrator's `atari-dqn-dist` sample (with sandbox annotations so
//! its pods finish), prints the job's phases live until it completes, and tells the user what
//! to run next with kubectl.
//!
//! It only uses the public Kubernetes API through the kube client, as any user tool would.

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;

use crate::api::{DIJob, crd::dijob_crd};
use crate::operator::{self, Connection, RunArgs};
use crate::sandbox::RunningSandbox;

/// Prints a line to stdout, ignoring a closed stdout (a pipe whose reader went away must not
/// panic the process, as `println!` would).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// The sample the demo submits, verbatim from DI-orchestrator v2.
pub const SAMPLE: &str = include_str!("../examples/di-orchestrator-samples/atari-dqn-dist.yaml");

/// How long each simulated worker of the demo job runs before it exits successfully.
const WORKER_RUNTIME: &str = "10s";

/// The operator's default flags, with its HTTP endpoints off (the demo needs no ports).
#[derive(Parser)]
struct DemoOperator {
    #[command(flatten)]
    args: RunArgs,
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
    #[error("cannot install the DIJob CRD: {0}")]
    InstallCrd(#[source] kube::Error),
    #[error("the DIJob CRD did not become established: {0}")]
    CrdNotEstablished(String),
    #[error("the bundled sample is not a valid DIJob: {0}")]
    Sample(String),
    #[error("cannot submit the sample DIJob: {0}")]
    Submit(#[source] kube::Error),
    #[error("cannot configure the operator: {0}")]
    Operator(String),
    #[error("the sample job did not complete within {0} s")]
    Timeout(u64),
    #[error("cannot install the admission webhooks: {0}")]
    Webhooks(String),
}

/// The webhook configurations of `examples/webhook-local.yaml`.
const LOCAL_WEBHOOKS: &str = include_str!("../examples/webhook-local.yaml");

/// Makes a certificate for 127.0.0.1 in `dir` and registers the webhooks of a local operator
/// serving on `port`, trusting that certificate's CA, as `diorch webhook-cert` would.
async fn install_webhooks(
    client: &kube::Client,
    port: u16,
    dir: &std::path::Path,
) -> Result<(), DemoError> {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let fail = |e: &dyn std::fmt::Display| DemoError::Webhooks(e.to_string());
    let bundle =
        crate::webhook::cert::generate(&["127.0.0.1".to_string()], 365).map_err(|e| fail(&e))?;
    crate::webhook::cert::write_dir_bundle(dir, &bundle).map_err(|e| fail(&e))?;
    let ca = Some(ByteString(bundle.ca.into_bytes()));
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&LOCAL_WEBHOOKS.replace("PORT", &port.to_string()))
            .map_err(|e| fail(&e))?;
    for doc in docs {
        if doc["kind"] == "MutatingWebhookConfiguration" {
            let mut c: MutatingWebhookConfiguration =
                serde_json::from_value(doc).map_err(|e| fail(&e))?;
            for w in c.webhooks.iter_mut().flatten() {
                w.client_config.ca_bundle = ca.clone();
            }
            Api::<MutatingWebhookConfiguration>::all(client.clone())
                .create(&crate::writes::post_params(), &c)
                .await
                .map_err(|e| fail(&e))?;
        } else {
            let mut c: ValidatingWebhookConfiguration =
                serde_json::from_value(doc).map_err(|e| fail(&e))?;
            for w in c.webhooks.iter_mut().flatten() {
                w.client_config.ca_bundle = ca.clone();
            }
            Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .create(&crate::writes::post_params(), &c)
                .await
                .map_err(|e| fail(&e))?;
        }
    }
    Ok(())
}

/// Parses the bundled sample and adds the sandbox annotations that make its workers finish.
pub fn sample_job() -> Result<DIJob, DemoError> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(SAMPLE).map_err(|e| DemoError::Sample(e.to_string()))?;
    let doc = docs
        .into_iter()
        .find(|d| d["kind"] == "DIJob")
        .ok_or_else(|| DemoError::Sample("no DIJob document".to_string()))?;
    let mut job: DIJob =
        serde_json::from_value(doc).map_err(|e| DemoError::Sample(e.to_string()))?;
    for task in &mut job.spec.tasks {
        let metadata = task.template.metadata.get_or_insert_with(Default::default);
        metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                "sandbox.diorch.io/exit-after".to_string(),
                WORKER_RUNTIME.to_string(),
            );
    }
    Ok(job)
}

/// Installs the CRD and submits the sample job into `default`.
pub async fn run(sandbox: &RunningSandbox) -> Result<(), DemoError> {
    let client = sandbox.client()?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = dijob_crd();
    let crd_name = crd.metadata.name.clone().unwrap_or_default();
    match crds.create(&crate::writes::post_params(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => return Err(DemoError::InstallCrd(e)),
    }
    let established = await_condition(crds, &crd_name, conditions::is_crd_established());
    tokio::time::timeout(std::time::Duration::from_secs(30), established)
        .await
        .map_err(|_| DemoError::CrdNotEstablished("timed out after 30 s".to_string()))?
        .map_err(|e| DemoError::CrdNotEstablished(e.to_string()))?;
    say!("installed CRD {crd_name}");

    // The webhook's URL must name its port before the operator binds it: take a free one.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| DemoError::Webhooks(e.to_string()))?;
    let certs = std::env::temp_dir().join(format!("diorch-demo-{}-certs", std::process::id()));
    install_webhooks(&client, port, &certs).await?;
    let webhook_addr = format!("127.0.0.1:{port}");
    let cert_dir = certs.display().to_string();
    let args = DemoOperator::try_parse_from([
        "demo",
        "--metric-addr",
        "0",
        "--probe-addr",
        "0",
        "--server-bind-address",
        "127.0.0.1:0",
        "--webhook-addr",
        &webhook_addr,
        "--webhook-cert-dir",
        &cert_dir,
    ])
    .map_err(|e| DemoError::Operator(e.to_string()))?
    .args;
    let conn = Connection {
        client: client.clone(),
        url: sandbox.url().to_string(),
        api_requests: Default::default(),
    };
    tokio::spawn(async move {
        if let Err(error) = operator::run(conn, args, std::future::pending()).await {
            tracing::error!(%error, "the operator stopped");
        }
    });
    // The sample goes through the webhooks: submit it once they listen.
    let listening = async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), listening)
        .await
        .map_err(|_| {
            DemoError::Webhooks(format!("nothing listens on {webhook_addr} after 30 s"))
        })?;
    say!("started the diorch operator (admission webhooks on https://{webhook_addr})");

    let job = sample_job()?;
    let name = job.metadata.name.clone().unwrap_or_default();
    let jobs: Api<DIJob> = Api::namespaced(client, "default");
    // Watch before submitting, so that no phase is missed.
    let (listed, is_listed) = tokio::sync::oneshot::channel();
    let following = tokio::spawn(follow(jobs.clone(), name.clone(), listed));
    let _ = is_listed.await;
    match jobs.create(&crate::writes::post_params(), &job).await {
        Ok(_) => {
            say!("submitted DIJob default/{name} (DI-orchestrator's atari-dqn-dist sample)")
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            say!("DIJob default/{name} already exists")
        }
        Err(e) => return Err(DemoError::Submit(e)),
    }

    following
        .await
        .map_err(|e| DemoError::Operator(format!("the job watch stopped: {e}")))??;

    let kubeconfig = sandbox.kubeconfig_display();
    say!();
    say!("next, in another terminal:");
    say!("  export KUBECONFIG={kubeconfig}");
    say!("  kubectl get dijobs");
    say!("  kubectl get dijob {name} -o yaml");
    say!("  kubectl describe dijob {name}");
    say!("  kubectl get pods -l diengine/job={name} -o wide");
    say!("  kubectl get nodes -o wide");
    say!("  kubectl apply -f examples/di-orchestrator-samples/dijob-serial.yaml");
    say!(
        "  kubectl apply -f examples/invalid-two-collectors.yaml   # refused by the admission webhook"
    );
    say!();
    say!("the sandbox runs until Ctrl-C");
    Ok(())
}

/// Prints the job's phase and ready replicas each time they change, until it completes.
/// `listed` fires once the watch is established.
async fn follow(
    jobs: Api<DIJob>,
    name: String,
    listed: tokio::sync::oneshot::Sender<()>,
) -> Result<(), DemoError> {
    const LIMIT: u64 = 120;
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(jobs, config).boxed();
    let mut listed = Some(listed);
    let mut last = None;
    let watch = async {
        while let Some(Ok(event)) = stream.next().await {
            let job = match event {
                watcher::Event::InitDone => {
                    if let Some(tx) = listed.take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                watcher::Event::Apply(job) | watcher::Event::InitApply(job) => job,
                _ => continue,
            };
            let status = job.status.unwrap_or_default();
            let Some(phase) = status.phase else { continue };
            let now = (phase, status.ready_replicas, status.replicas);
            if last != Some(now) {
                say!(
                    "  {name}: {phase} ({}/{} replicas ready)",
                    status.ready_replicas,
                    status.replicas
                );
                last = Some(now);
            }
            if phase.is_terminal() {
                return;
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(LIMIT), watch)
        .await
        .map_err(|_| DemoError::Timeout(LIMIT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_job_gets_exit_annotations_on_every_task() {
        let job = sample_job().expect("sample parses");
        assert_eq!(job.metadata.name.as_deref(), Some("job-with-tasks"));
        assert_eq!(job.spec.tasks.len(), 3);
        for task in &job.spec.tasks {
            let annotations = task
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.as_ref())
                .expect("annotations");
            assert_eq!(
                annotations
                    .get("sandbox.diorch.io/exit-after")
                    .map(String::as_str),
                Some(WORKER_RUNTIME)
            );
        }
    }
}
