//! The CPU floor of the controller bench: the least CPU a kube-rs client spends to see what a
//! DI-orchestrator-compatible controller must see, and to write what it must write, for the same
//! burst of DIJobs the operator gets. It runs in a process of its own (this bench's binary again,
//! with [`ENV`] set), on one runtime thread and mimalloc, as the operator runs.
//!
//! It watches DIJobs, pods and services, decoded into the operator's own watch shapes (which
//! skip `managedFields` while parsing), and for each job: on its first event creates its 4 pods and
//! its service, then writes Pending; writes Starting once it has seen its 4 pods, and Running once
//! they all run; and an Event with each of those 4 steps, as the operator writes 4 (the issue
//! keeps them). The 8 writes of the time floor (`via_floor`), the 4 Events, and the watches a
//! controller needs to follow its pods. No cache, no decision, no allocator, no retry, no
//! decoded answer, no Event series: a lower bound, not a controller. The pods and the service are the bench's own
//! (`objects_of`), built from the job's name.
//!
//! Owns the floor client and its process protocol (a line `ready` on stdout once its watches
//! are listed). Must not touch the bench's timings: it runs only in `cpu_floor` runs.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use diorch_core::cached::{CachedJob, WatchedService};
use diorch_core::watched::WatchedPod;
use futures::{StreamExt, stream};
use kube::api::{Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::Request;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Config};
use tokio::sync::mpsc;

/// Set (to the namespace) in the floor client's environment; its kubeconfig in [`KUBECONFIG_ENV`].
pub const ENV: &str = "CONTROLLER_SCALE_CPU_FLOOR_NAMESPACE";
const KUBECONFIG_ENV: &str = "CONTROLLER_SCALE_CPU_FLOOR_KUBECONFIG";

/// The floor client, started and watching.
pub struct FloorClient {
    child: Child,
}

impl FloorClient {
    /// Starts the client on `namespace` and waits until its three watches are listed.
    pub fn start(kubeconfig: &std::path::Path, namespace: &str) -> anyhow::Result<FloorClient> {
        let mut child = Command::new(std::env::current_exe()?)
            .env(ENV, namespace)
            .env(KUBECONFIG_ENV, kubeconfig)
            // As the operator runs (benches/common `Operator::start_with`).
            .envs(crate::common::mimalloc_env())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take();
        let client = FloorClient { child };
        let mut line = String::new();
        if let Some(out) = stdout {
            BufReader::new(out).read_line(&mut line)?;
        }
        anyhow::ensure!(line.trim() == "ready", "the floor client did not start");
        Ok(client)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for FloorClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The floor client's process: runs until killed.
pub fn main(namespace: String) -> anyhow::Result<()> {
    let kubeconfig = std::env::var(KUBECONFIG_ENV)?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(kubeconfig, namespace))
}

/// What one job has got so far.
#[derive(Default)]
struct Job {
    uid: String,
    created: bool,
    pending: bool,
    starting_sent: bool,
    starting: bool,
    running_sent: bool,
    pods: HashMap<String, bool>,
}

// Moved once per event; boxing would add an allocation per event to the floor.
#[allow(clippy::large_enum_variant)]
enum Seen {
    Job(Result<watcher::Event<CachedJob>, watcher::Error>),
    Pod(Result<watcher::Event<WatchedPod>, watcher::Error>),
    /// A service's event: decoded, nothing to do.
    Service,
    /// The services' watch has listed them.
    Listed,
    /// A status write was answered: the job and the phase written.
    Written(String, &'static str),
}

async fn run(kubeconfig: String, ns: String) -> anyhow::Result<()> {
    let config = Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let client = Client::try_from(config)?;
    let cfg = watcher::Config::default;
    let jobs = watcher(Api::<CachedJob>::namespaced(client.clone(), &ns), cfg())
        .default_backoff()
        .map(Seen::Job);
    let pods = watcher(Api::<WatchedPod>::namespaced(client.clone(), &ns), cfg())
        .default_backoff()
        .map(Seen::Pod);
    let services = watcher(
        Api::<WatchedService>::namespaced(client.clone(), &ns),
        cfg(),
    )
    .default_backoff()
    .map(|event| match event {
        Ok(watcher::Event::InitDone) => Seen::Listed,
        _ => Seen::Service,
    });
    let (written_tx, mut written_rx) = mpsc::unbounded_channel();
    let written = stream::poll_fn(move |cx| written_rx.poll_recv(cx));
    let seen = stream::select(
        stream::select(jobs, pods),
        stream::select(services, written),
    );
    let mut seen = std::pin::pin!(seen);
    let mut state: HashMap<String, Job> = HashMap::new();
    let mut listed = 0;
    while let Some(event) = seen.next().await {
        match event {
            Seen::Job(Ok(watcher::Event::InitDone))
            | Seen::Pod(Ok(watcher::Event::InitDone))
            | Seen::Listed => {
                listed += 1;
                if listed == 3 {
                    println!("ready");
                }
            }
            Seen::Job(Ok(watcher::Event::Apply(job) | watcher::Event::InitApply(job))) => {
                let Some(name) = job.metadata.name.clone() else {
                    continue;
                };
                let entry = state.entry(name.clone()).or_default();
                if entry.created || name == "warmup" {
                    continue;
                }
                entry.created = true;
                entry.uid = job.metadata.uid.clone().unwrap_or_default();
                let (client, ns, uid, tx) = (
                    client.clone(),
                    ns.clone(),
                    entry.uid.clone(),
                    written_tx.clone(),
                );
                tokio::spawn(async move {
                    if create(&client, &ns, &name, &uid).await.is_ok()
                        && record(&client, &ns, &name, &uid, "Created").await.is_ok()
                        && write_phase(&client, &ns, &name, &uid, "Pending")
                            .await
                            .is_ok()
                    {
                        let _ = tx.send(Seen::Written(name, "Pending"));
                    }
                });
            }
            Seen::Pod(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                let labels = pod.metadata.labels.as_ref();
                let (Some(job), Some(name)) = (
                    labels.and_then(|l| l.get("diengine/job")).cloned(),
                    pod.metadata.name.clone(),
                ) else {
                    continue;
                };
                let running = pod.phase() == Some("Running");
                state
                    .entry(job.clone())
                    .or_default()
                    .pods
                    .insert(name, running);
                advance(&mut state, &job, &client, &ns, &written_tx);
            }
            Seen::Written(job, phase) => {
                if let Some(entry) = state.get_mut(&job) {
                    match phase {
                        "Pending" => entry.pending = true,
                        _ => entry.starting = true,
                    }
                }
                advance(&mut state, &job, &client, &ns, &written_tx);
            }
            _ => {}
        }
    }
    Ok(())
}

/// Writes Starting once all 4 pods were seen (after Pending), Running once they all run (after
/// Starting).
fn advance(
    state: &mut HashMap<String, Job>,
    job: &str,
    client: &Client,
    ns: &str,
    tx: &mpsc::UnboundedSender<Seen>,
) {
    let Some(entry) = state.get_mut(job) else {
        return;
    };
    let phase = if entry.pending && !entry.starting_sent && entry.pods.len() >= 4 {
        entry.starting_sent = true;
        "Starting"
    } else if entry.starting
        && !entry.running_sent
        && entry.pods.len() >= 4
        && entry.pods.values().all(|r| *r)
    {
        entry.running_sent = true;
        "Running"
    } else {
        return;
    };
    let (client, ns, name, tx) = (client.clone(), ns.to_string(), job.to_string(), tx.clone());
    let uid = entry.uid.clone();
    tokio::spawn(async move {
        if write_phase(&client, &ns, &name, &uid, phase).await.is_ok() {
            let _ = tx.send(Seen::Written(name, phase));
        }
    });
}

/// Creates the job's pods and service, concurrently; the answers are read, not decoded.
async fn create(client: &Client, ns: &str, name: &str, uid: &str) -> anyhow::Result<()> {
    let i: usize = name.trim_start_matches("job-").parse()?;
    let mut job = super::job(i, ns, None, false);
    job.metadata.uid = Some(uid.to_string());
    let (pods, svc) = super::objects_of(&job);
    let pp = PostParams::default();
    let mut requests = Vec::new();
    for pod in &pods {
        let url = format!("/api/v1/namespaces/{ns}/pods");
        requests.push(Request::new(url).create(&pp, serde_json::to_vec(pod)?)?);
    }
    let url = format!("/api/v1/namespaces/{ns}/services");
    requests.push(Request::new(url).create(&pp, serde_json::to_vec(&svc)?)?);
    let sent = requests.into_iter().map(|r| client.request_text(r));
    for answer in futures::future::join_all(sent).await {
        answer?;
    }
    Ok(())
}

/// A merge patch of the job's status to `phase`, with its condition, and its Event; the answers
/// are read, not decoded.
async fn write_phase(
    client: &Client,
    ns: &str,
    name: &str,
    uid: &str,
    phase: &str,
) -> anyhow::Result<()> {
    let now = jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({"status": {"phase": phase, "conditions": [
        {"type": phase, "status": "True", "reason": format!("Job{phase}"),
         "message": "floor", "lastUpdateTime": now, "lastTransitionTime": now}]}});
    let url = format!("/apis/diengine.opendilab.org/v2alpha1/namespaces/{ns}/dijobs");
    let request = Request::new(url).patch_subresource(
        "status",
        name,
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )?;
    client.request_text(request).await?;
    record(client, ns, name, uid, phase).await
}

/// An Event (events.k8s.io/v1) about the job, as the operator writes 4 on the way to Running
/// (docs/performance.md): one per status write and one for the creates; no series, no cache.
async fn record(client: &Client, ns: &str, job: &str, uid: &str, what: &str) -> anyhow::Result<()> {
    let now = jiff::Timestamp::now();
    let event = serde_json::json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": format!("{job}.{}", what.to_lowercase()), "namespace": ns},
        "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        "reportingController": "floor", "reportingInstance": "floor",
        "action": what, "reason": what, "note": format!("job {job}: {what}"), "type": "Normal",
        "regarding": {"apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
            "name": job, "namespace": ns, "uid": uid}});
    let url = format!("/apis/events.k8s.io/v1/namespaces/{ns}/events");
    let request = Request::new(url).create(&PostParams::default(), serde_json::to_vec(&event)?)?;
    client.request_text(request).await?;
    Ok(())
}
