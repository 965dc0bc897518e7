//! The demo: a guided first run on the sandbox. Installs the DIJob CRD and the admission
//! webhooks (by URL, with a certificate from `diorch webhook-cert`), starts the operator
//! binary against the sandbox (`diorch run`, as a user would), submits DI-orchestrator's
//! `atari-dqn-dist` sample (with sandbox annotations so its pods finish), prints the job's
//! phases live until it completes, and tells the user what to run next with kubectl.
//!
//! It only uses the public Kubernetes API through the kube client and the operator's command
//! line, as any user tool would; it links nothing of the operator.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;

use diorch_core::api::{DIJob, crd::dijob_crd};

use crate::RunningSandbox;

/// Where the demo's lines go (stdout in `diorch-sandbox demo`, a channel in tests).
pub type Say = Arc<dyn Fn(String) + Send + Sync>;

/// The field manager of the demo's writes.
const FIELD_MANAGER: &str = "diorch-demo";

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    }
}

/// The sample the demo submits, verbatim from DI-orchestrator v2.
pub const SAMPLE: &str =
    include_str!("../../../examples/di-orchestrator-samples/atari-dqn-dist.yaml");

/// How long each simulated worker of the demo job runs before it exits successfully.
const WORKER_RUNTIME: &str = "10s";

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Sandbox(#[from] crate::SandboxError),
    #[error("the sandbox wrote no kubeconfig for the operator")]
    NoKubeconfig,
    #[error("cannot install the DIJob CRD: {0}")]
    InstallCrd(#[source] kube::Error),
    #[error("the DIJob CRD did not become established: {0}")]
    CrdNotEstablished(String),
    #[error("the bundled sample is not a valid DIJob: {0}")]
    Sample(String),
    #[error("cannot submit the sample DIJob: {0}")]
    Submit(#[source] kube::Error),
    #[error("cannot run the operator {binary}: {message}")]
    Operator { binary: PathBuf, message: String },
    #[error("the job watch stopped: {0}")]
    Watch(String),
    #[error("the sample job did not complete within {0} s")]
    Timeout(u64),
    #[error("cannot install the admission webhooks: {0}")]
    Webhooks(String),
}

/// The webhook configurations of `examples/webhook-local.yaml`.
const LOCAL_WEBHOOKS: &str = include_str!("../../../examples/webhook-local.yaml");

/// Registers the webhooks of a local operator serving on `port`, then has `diorch webhook-cert`
/// make a certificate for 127.0.0.1 in `dir` and patch its CA into them: the steps
/// `examples/webhook-local.yaml` tells a user to take.
async fn install_webhooks(
    client: &kube::Client,
    operator: &Path,
    kubeconfig: &Path,
    port: u16,
    dir: &Path,
) -> Result<(), DemoError> {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let fail = |e: &dyn std::fmt::Display| DemoError::Webhooks(e.to_string());
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&LOCAL_WEBHOOKS.replace("PORT", &port.to_string()))
            .map_err(|e| fail(&e))?;
    for doc in docs {
        if doc["kind"] == "MutatingWebhookConfiguration" {
            create_cluster_object::<MutatingWebhookConfiguration>(client, doc).await
        } else {
            create_cluster_object::<ValidatingWebhookConfiguration>(client, doc).await
        }
        .map_err(DemoError::Webhooks)?;
    }
    let out = tokio::process::Command::new(operator)
        .arg("webhook-cert")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--out-dir")
        .arg(dir)
        .args(["--host", "127.0.0.1"])
        .output()
        .await
        .map_err(|e| operator_error(operator, &e))?;
    if !out.status.success() {
        return Err(DemoError::Webhooks(format!(
            "{} webhook-cert failed: {}",
            operator.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Decodes `doc` as a `K` and creates it: one path for both kinds of webhook configuration.
async fn create_cluster_object<K>(
    client: &kube::Client,
    doc: serde_json::Value,
) -> Result<(), String>
where
    K: kube::Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize,
{
    let object: K = serde_json::from_value(doc).map_err(|e| e.to_string())?;
    Api::<K>::all(client.clone())
        .create(&post_params(), &object)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

fn operator_error(binary: &Path, error: &dyn std::fmt::Display) -> DemoError {
    DemoError::Operator {
        binary: binary.to_path_buf(),
        message: error.to_string(),
    }
}

/// The operator binary beside this one (`target/debug/diorch` next to
/// `target/debug/diorch-sandbox`), else `diorch` from `PATH`.
pub fn default_operator() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("diorch")))
        .filter(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from("diorch"))
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

/// The demo's running operator; dropping it stops the operator.
pub struct Demo {
    operator: tokio::process::Child,
    certs: PathBuf,
}

impl Demo {
    /// Resolves when the operator process exits (it should not before Ctrl-C).
    pub async fn operator_exited(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.operator.wait().await
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.operator.start_kill();
        let _ = std::fs::remove_dir_all(&self.certs);
    }
}

/// Installs the CRD and the webhooks, starts `operator` (the `diorch` binary) against the
/// sandbox, submits the sample job into `default` and follows it to completion.
pub async fn run(sandbox: &RunningSandbox, operator: &Path, say: Say) -> Result<Demo, DemoError> {
    let kubeconfig = sandbox.kubeconfig().ok_or(DemoError::NoKubeconfig)?;
    let client = sandbox.client()?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = dijob_crd();
    let crd_name = crd.metadata.name.clone().unwrap_or_default();
    match crds.create(&post_params(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => return Err(DemoError::InstallCrd(e)),
    }
    let established = await_condition(crds, &crd_name, conditions::is_crd_established());
    tokio::time::timeout(std::time::Duration::from_secs(30), established)
        .await
        .map_err(|_| DemoError::CrdNotEstablished("timed out after 30 s".to_string()))?
        .map_err(|e| DemoError::CrdNotEstablished(e.to_string()))?;
    say(format!("installed CRD {crd_name}"));

    // The webhook's URL must name its port before the operator binds it: take a free one.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| DemoError::Webhooks(e.to_string()))?;
    let certs = std::env::temp_dir().join(format!(
        "diorch-demo-{}-{}-certs",
        std::process::id(),
        sandbox.addr().port()
    ));
    install_webhooks(&client, operator, kubeconfig, port, &certs).await?;
    let webhook_addr = format!("127.0.0.1:{port}");
    // The operator's default flags, with its metrics and probes off (the demo needs no ports).
    let child = tokio::process::Command::new(operator)
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--metric-addr", "0", "--probe-addr", "0"])
        .args(["--server-bind-address", "127.0.0.1:0"])
        .args(["--webhook-addr", &webhook_addr])
        .arg("--webhook-cert-dir")
        .arg(&certs)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| operator_error(operator, &e))?;
    let mut demo = Demo {
        operator: child,
        certs,
    };
    // The sample goes through the webhooks: submit it once they listen.
    let listening = async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::select! {
        waited = tokio::time::timeout(std::time::Duration::from_secs(30), listening) => {
            waited.map_err(|_| {
                DemoError::Webhooks(format!("nothing listens on {webhook_addr} after 30 s"))
            })?;
        }
        exited = demo.operator.wait() => {
            let status = exited.map_or_else(|e| e.to_string(), |s| s.to_string());
            return Err(operator_error(operator, &format!("exited at start: {status}")));
        }
    }
    say(format!(
        "started the diorch operator (admission webhooks on https://{webhook_addr})"
    ));

    let job = sample_job()?;
    let name = job.metadata.name.clone().unwrap_or_default();
    let jobs: Api<DIJob> = Api::namespaced(client, "default");
    // Watch before submitting, so that no phase is missed.
    let (listed, is_listed) = tokio::sync::oneshot::channel();
    let following = tokio::spawn(follow(jobs.clone(), name.clone(), listed, say.clone()));
    let _ = is_listed.await;
    match jobs.create(&post_params(), &job).await {
        Ok(_) => say(format!(
            "submitted DIJob default/{name} (DI-orchestrator's atari-dqn-dist sample)"
        )),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            say(format!("DIJob default/{name} already exists"))
        }
        Err(e) => return Err(DemoError::Submit(e)),
    }

    following
        .await
        .map_err(|e| DemoError::Watch(e.to_string()))??;

    let kubeconfig = sandbox.kubeconfig_display();
    for line in [
        String::new(),
        "next, in another terminal:".to_string(),
        format!("  export KUBECONFIG={kubeconfig}"),
        "  kubectl get dijobs".to_string(),
        format!("  kubectl get dijob {name} -o yaml"),
        format!("  kubectl describe dijob {name}"),
        format!("  kubectl get pods -l diengine/job={name} -o wide"),
        "  kubectl get nodes -o wide".to_string(),
        "  kubectl apply -f examples/di-orchestrator-samples/dijob-serial.yaml".to_string(),
        "  kubectl apply -f examples/invalid-two-collectors.yaml   # refused by the admission webhook"
            .to_string(),
        String::new(),
        "the sandbox runs until Ctrl-C".to_string(),
    ] {
        say(line);
    }
    Ok(demo)
}

/// Prints the job's phase and ready replicas each time they change, until it completes.
/// `listed` fires once the watch is established.
async fn follow(
    jobs: Api<DIJob>,
    name: String,
    listed: tokio::sync::oneshot::Sender<()>,
    say: Say,
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
                say(format!(
                    "  {name}: {phase} ({}/{} replicas ready)",
                    status.ready_replicas, status.replicas
                ));
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
