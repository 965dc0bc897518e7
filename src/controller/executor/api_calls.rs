//! Scenario tests that pin the exact API calls one reconcile makes (in the manner of kube-rs
//! controller-rs's `ApiServerVerifier`): the executor runs against a kube `Client` whose
//! transport is an in-process mock API server. The mock records every request (method, path
//! with query, content type, JSON body) and answers like a minimal API server: it stores the
//! job, pods, services and PodGroups written to it, enforces the status write's
//! resourceVersion, delete preconditions and name uniqueness, and returns scripted failures.
//!
//! Each test asserts the exact list of calls: groups in order (an order the executor
//! promises: status before or after the pods), calls inside a group in any order (they run
//! concurrently), each as `METHOD path detail` with the body fields that matter. Any other
//! call fails the test, and the message lists every call seen.
//!
//! Events are not API calls here: the Context's Event queue is a channel the test holds, and
//! the Events a reconcile queued are asserted from it separately (type, reason, object). One
//! test runs the real Event worker over the mock, to pin where Events go and that they stay
//! off the reconcile's own calls.
//!
//! Here: the mock API server, the fixtures and the harness; the scenarios, by concern, in
//! `api_calls/`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::events::Recorder;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodStatus, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{Caches, Context, Error, Requeue, Settings, reconcile_inner};
use crate::allocator::Allocator;
use crate::controller::cache::{PodCache, ServiceCache};
use crate::controller::expectations::Expectations;
use crate::controller::queue::Queue;
use crate::controller::throttle::Throttle;
use crate::metrics::{Metrics, PhaseLabels};
use crate::plugin::registry::PluginRegistry;
use crate::plugin::{HostConfig, NativePolicy, PluginHost};
use crate::testing::{self, JobFixture, node};
use diorch_core::api::{DIJob, DIJobStatus, Phase};
use diorch_core::build::{BuildContext, Gang, GangKind};
use diorch_core::cached::{CachedJob, CachedPod, CachedService};
use diorch_core::planner::{self, Action, Observed};
use diorch_core::step::WAITING_RETRY;

mod events;
mod failures;
mod lifecycle;
mod placement;
mod same_decisions;

const JOB_UID: &str = "job-uid";
const SVC_UID: &str = "svc-uid";
/// Longest a reconcile (or the Event worker) may take against the mock; it answers at once,
/// so only a hung executor reaches it.
const BOUND: Duration = Duration::from_secs(10);

const PODS: &str = "/api/v1/namespaces/default/pods";
const SERVICES: &str = "/api/v1/namespaces/default/services";

// ---------------------------------------------------------------------------------------------
// The mock API server

/// One request the mock received.
#[derive(Clone, Debug)]
struct Call {
    method: String,
    /// Path with query, as sent.
    path: String,
    content_type: String,
    /// `Null` for an empty body.
    body: Value,
}

impl Call {
    /// Method, path and the body fields every scenario pins, on one line: the object's name
    /// for a create, phase and resourceVersion guard for a status write, the uid precondition
    /// and grace period for a delete, the patch itself for a patch.
    fn line(&self) -> String {
        let b = &self.body;
        let s = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
        let detail = if self
            .path
            .split('?')
            .next()
            .is_some_and(|p| p.ends_with("/status"))
        {
            // A status patch names the phase only when it changes it.
            format!(
                " phase={} rv={}",
                b["status"]
                    .get("phase")
                    .map_or_else(|| "unchanged".to_string(), s),
                s(&b["metadata"]["resourceVersion"])
            )
        } else {
            match self.method.as_str() {
                "POST" => format!(" name={}", s(&b["metadata"]["name"])),
                "DELETE" => format!(
                    " uid={} grace={}",
                    s(&b["preconditions"]["uid"]),
                    s(&b["gracePeriodSeconds"])
                ),
                "PATCH" => format!(" {} {b}", self.content_type),
                _ => String::new(),
            }
        };
        format!("{} {}{detail}", self.method, self.path)
    }

    fn is_event(&self) -> bool {
        self.path.starts_with("/apis/events.k8s.io/")
    }
}

/// A scripted failure: `method` on `resource` named `name` is answered with `code`.
struct Fault {
    method: &'static str,
    resource: &'static str,
    name: String,
    code: u16,
    reason: &'static str,
    message: String,
}

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    /// The DIJob as stored, `metadata.resourceVersion` included.
    job: Value,
    /// Objects by resource (`pods`, `services`, `podgroups`, `events`) and name.
    objects: BTreeMap<&'static str, BTreeMap<String, Value>>,
    faults: Vec<Fault>,
    /// Counts routed requests, so that each created object gets a fresh uid.
    created: u64,
}

struct ApiServer {
    state: Mutex<State>,
    /// Number of calls so far, for waiting on the Event worker without sleeping.
    seen: tokio::sync::watch::Sender<usize>,
}

fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code})
}

impl ApiServer {
    fn new(job: &DIJob) -> Arc<ApiServer> {
        Arc::new(ApiServer {
            state: Mutex::new(State {
                job: serde_json::to_value(job).expect("job JSON"),
                ..State::default()
            }),
            seen: tokio::sync::watch::Sender::new(0),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A kube client whose every request this server answers.
    fn client(self: &Arc<Self>) -> Client {
        let server = self.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let server = server.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body.collect().await?.to_bytes();
                let call = Call {
                    method: parts.method.to_string(),
                    path: parts
                        .uri
                        .path_and_query()
                        .map_or_else(String::new, ToString::to_string),
                    content_type: parts
                        .headers
                        .get(http::header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string(),
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                };
                let (code, body) = server.answer(call);
                let response = http::Response::builder()
                    .status(code)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Full::new(Bytes::from(body.to_string())))
                    .expect("response");
                Ok::<_, tower::BoxError>(response)
            }
        });
        Client::new(service, "default")
    }

    fn fail(
        &self,
        method: &'static str,
        resource: &'static str,
        name: &str,
        code: u16,
        reason: &'static str,
        message: &str,
    ) {
        self.state().faults.push(Fault {
            method,
            resource,
            name: name.to_string(),
            code,
            reason,
            message: message.to_string(),
        });
    }

    /// Stores `object` as if it had been created before the test.
    fn hold(&self, resource: &'static str, object: Value) {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.state()
            .objects
            .entry(resource)
            .or_default()
            .insert(name, object);
    }

    /// The job as the server now stores it.
    fn job(&self) -> DIJob {
        serde_json::from_value(self.state().job.clone()).expect("stored job")
    }

    fn set_job_rv(&self, rv: &str) {
        self.state().job["metadata"]["resourceVersion"] = json!(rv);
    }

    /// The object `resource/name` as the server stores it.
    fn object(&self, resource: &str, name: &str) -> Value {
        let object = self
            .state()
            .objects
            .get(resource)
            .and_then(|o| o.get(name))
            .cloned();
        object.unwrap_or_else(|| panic!("the server holds no {resource} {name}"))
    }

    /// The calls so far (taken: the next `take` returns only later ones).
    fn take(&self) -> Vec<Call> {
        std::mem::take(&mut self.state().calls)
    }

    /// Records `call` and answers it the way an API server would.
    fn answer(&self, call: Call) -> (u16, Value) {
        let mut st = self.state();
        st.calls.push(call.clone());
        let answer = route(&mut st, &call);
        let n = st.calls.len();
        drop(st);
        self.seen.send_replace(n);
        answer
    }
}

fn bump(rv: &Value) -> Value {
    let n: u64 = rv.as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
    json!((n + 1).to_string())
}

fn route(st: &mut State, call: &Call) -> (u16, Value) {
    let (path, query) = call.path.split_once('?').unwrap_or((&call.path, ""));
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let Some(at) = segs.iter().position(|s| *s == "namespaces") else {
        return (
            404,
            status_body(404, "NotFound", "the mock has no route for this call"),
        );
    };
    let resource: &'static str = match segs.get(at + 2).copied() {
        Some("pods") => "pods",
        Some("services") => "services",
        Some("podgroups") => "podgroups",
        Some("events") => "events",
        Some("dijobs") => "dijobs",
        _ => {
            return (
                404,
                status_body(404, "NotFound", "the mock has no route for this call"),
            );
        }
    };
    let name = match (call.method.as_str(), segs.get(at + 3)) {
        ("POST", _) => call.body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        (_, Some(name)) => (*name).to_string(),
        _ => String::new(),
    };
    let sub = segs.get(at + 4).copied();
    if let Some(f) = st
        .faults
        .iter()
        .find(|f| f.method == call.method && f.resource == resource && f.name == name)
    {
        return (f.code, status_body(f.code, f.reason, &f.message));
    }
    st.created += 1;
    let uid = format!("server-uid-{}", st.created);
    let objects = st.objects.entry(resource).or_default();
    match (call.method.as_str(), resource, sub) {
        // Events are only answered: their names are the Recorder's business.
        ("POST", "events", None) => (201, call.body.clone()),
        ("POST", "pods" | "services" | "podgroups", None) => {
            if objects.contains_key(&name) {
                let message = format!("{resource} \"{name}\" already exists");
                return (409, status_body(409, "AlreadyExists", &message));
            }
            let mut object = call.body.clone();
            object["metadata"]["uid"] = json!(uid);
            objects.insert(name, object.clone());
            (201, object)
        }
        ("GET", "pods", None) if call.path.contains("fieldSelector=") => {
            let wanted = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("fieldSelector=metadata.name%3D"))
                .unwrap_or_default();
            let items: Vec<Value> = objects.get(wanted).cloned().into_iter().collect();
            (
                200,
                json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items}),
            )
        }
        ("DELETE", "pods" | "services", None) => {
            let Some(object) = objects.get(&name) else {
                return (
                    404,
                    status_body(404, "NotFound", &format!("{resource} \"{name}\" not found")),
                );
            };
            let want = &call.body["preconditions"]["uid"];
            if !want.is_null() && *want != object["metadata"]["uid"] {
                let message = format!(
                    "Precondition failed: UID in precondition: {want}, UID in object meta: {}",
                    object["metadata"]["uid"]
                );
                return (409, status_body(409, "Conflict", &message));
            }
            (200, objects.remove(&name).unwrap_or_default())
        }
        ("PATCH", "podgroups", None) => {
            let Some(object) = objects.get_mut(&name) else {
                return (404, status_body(404, "NotFound", "no such podgroup"));
            };
            json_patch::merge(object, &call.body);
            (200, object.clone())
        }
        ("PATCH", "dijobs", Some("status")) => {
            if call.content_type != "application/merge-patch+json" {
                return (
                    415,
                    status_body(415, "UnsupportedMediaType", &call.content_type),
                );
            }
            // The guard the executor relies on: a stale resourceVersion is a conflict.
            if call.body["metadata"]["resourceVersion"] != st.job["metadata"]["resourceVersion"] {
                let message = "Operation cannot be fulfilled on dijobs.diengine.opendilab.org \"j\": the object has been modified; please apply your changes to the latest version and try again";
                return (409, status_body(409, "Conflict", message));
            }
            // A status patch changes nothing but the status.
            json_patch::merge(&mut st.job["status"], &call.body["status"]);
            st.job["metadata"]["resourceVersion"] = bump(&st.job["metadata"]["resourceVersion"]);
            (200, st.job.clone())
        }
        ("PATCH", "dijobs", None) => {
            let patch: json_patch::Patch = match serde_json::from_value(call.body.clone()) {
                Ok(p) => p,
                Err(e) => return (400, status_body(400, "BadRequest", &e.to_string())),
            };
            let mut job = st.job.clone();
            if let Err(e) = json_patch::patch(&mut job, &patch) {
                return (422, status_body(422, "Invalid", &e.to_string()));
            }
            job["metadata"]["resourceVersion"] = bump(&job["metadata"]["resourceVersion"]);
            st.job = job.clone();
            (200, job)
        }
        _ => (
            404,
            status_body(404, "NotFound", "the mock has no route for this call"),
        ),
    }
}

/// Asserts that `calls` are exactly the `expected` groups, in order, each group's calls in any
/// order (they are issued concurrently). On a mismatch the message lists every call seen.
#[track_caller]
fn assert_calls(calls: &[Call], expected: &[&[&str]]) {
    let seen: Vec<String> = calls.iter().map(Call::line).collect();
    let total: usize = expected.iter().map(|g| g.len()).sum();
    let mut same = seen.len() == total;
    let mut at = 0;
    for group in expected {
        if !same {
            break;
        }
        let mut got: Vec<&str> = seen[at..at + group.len()]
            .iter()
            .map(String::as_str)
            .collect();
        let mut want = group.to_vec();
        got.sort_unstable();
        want.sort_unstable();
        same = got == want;
        at += group.len();
    }
    assert!(
        same,
        "the API calls differ from the pinned ones.\nexpected (groups in order, any order inside a group):\n{expected:#?}\nseen, in order:\n{seen:#?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Fixtures

/// Job `j` in `default` as the mock stores it (uid `JOB_UID`, resourceVersion 1), no task yet.
fn dijob() -> JobFixture {
    testing::job("j").uid(JOB_UID).resource_version("1")
}

/// A learner and two collectors: pods `j-learner-0`, `j-collector-0`, `j-collector-1`.
fn new_job() -> DIJob {
    dijob().task("learner", 1).task("collector", 2).build()
}

/// The pods the planner builds for `job` with nothing observed, with the uid a server would
/// give them (`uid-<name>`), and the status that pass writes (its rank table).
fn built(job: &DIJob, ctx: &BuildContext) -> (Vec<Pod>, DIJobStatus) {
    let now = Time(jiff::Timestamp::now());
    let plan = planner::plan(job, &Observed::default(), ctx, &now);
    let pods = plan
        .actions
        .into_iter()
        .filter_map(|a| match a {
            Action::CreatePod(p) => Some(*p),
            _ => None,
        })
        .map(|mut p| {
            p.metadata.uid = Some(format!(
                "uid-{}",
                p.metadata.name.as_deref().unwrap_or_default()
            ));
            p
        })
        .collect();
    (pods, plan.status.expect("a new job's status"))
}

fn with_phase(mut pod: Pod, phase: &str, ready: bool) -> Pod {
    pod.status = Some(PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..PodCondition::default()
        }]),
        ..PodStatus::default()
    });
    pod
}

fn service(job: &DIJob) -> Service {
    let mut svc = diorch_core::build::build_service(job);
    svc.metadata.uid = Some(SVC_UID.into());
    svc
}

/// `job` Running with every pod ready and its service there, its status exactly what the
/// planner computes for that, so a pass over it plans nothing.
fn running() -> (DIJob, Vec<Pod>) {
    let mut job = new_job();
    let (pods, status) = built(&job, &BuildContext::default());
    let pods: Vec<Pod> = pods
        .into_iter()
        .map(|p| with_phase(p, "Running", true))
        .collect();
    job.status = Some(DIJobStatus {
        phase: Some(Phase::Running),
        ..status
    });
    let cached: Vec<CachedPod> = pods.iter().cloned().map(CachedPod::from).collect();
    let svc = CachedService::from(service(&job));
    let observed = Observed {
        pods: cached.iter().collect(),
        service: Some(&svc),
        admission: None,
    };
    let now = Time(jiff::Timestamp::now());
    let plan = planner::plan(&job, &observed, &BuildContext::default(), &now);
    assert!(
        plan.actions.is_empty() && plan.transition.is_none(),
        "{plan:?}"
    );
    if let Some(status) = plan.status {
        job.status = Some(status);
    }
    (job, pods)
}

struct Harness {
    ctx: Context,
    server: Arc<ApiServer>,
    /// The Context's Event queue (`None` when the real Event worker drains it).
    events: Option<mpsc::Receiver<super::QueuedEvent>>,
    pods: PodCache,
    services: ServiceCache,
    nodes: Writer<Node>,
    jobs: Writer<diorch_core::cached::CachedJob>,
}

impl Harness {
    fn new(job: &DIJob) -> Harness {
        Harness::with(job, Settings::default(), false)
    }

    /// A Context as `start` builds it, over caches the test fills, an allocator and plugin
    /// registry with no plugins and no nodes, and a client to the mock holding `job`.
    fn with(job: &DIJob, settings: Settings, real_events: bool) -> Harness {
        let server = ApiServer::new(job);
        let client = server.client();
        let (job_store, job_writer) = reflector::store();
        let (pod_cache, svc_cache) = (PodCache::default(), ServiceCache::default());
        let (node_store, node_writer) = reflector::store();
        let metrics = Arc::new(Metrics::new());
        let plugins = Arc::new(PluginRegistry::new(
            PluginHost::new(HostConfig::default()).expect("plugin host"),
            NativePolicy::BinPack,
        ));
        let (allocator, _retries) = Allocator::new(
            plugins.clone(),
            node_store,
            job_store.clone(),
            crate::allocator::Settings::default(),
            metrics.clone(),
        );
        let queue = Arc::new(Queue::new(
            metrics.controller.queue_depth.clone(),
            job_store.clone(),
        ));
        let (events, receiver) = if real_events {
            let recorder = Recorder::new(
                client.clone(),
                Reporter {
                    controller: settings.reporter.clone(),
                    instance: None,
                },
            );
            (super::spawn_event_worker(recorder, queue.clone()), None)
        } else {
            let (tx, rx) = mpsc::channel(super::EVENT_QUEUE);
            (tx, Some(rx))
        };
        let ctx = Context {
            client,
            caches: Caches {
                jobs: job_store.clone(),
                pods: pod_cache.clone(),
                ready: Arc::new(AtomicBool::new(true)),
            },
            services: svc_cache.clone(),
            expectations: Expectations::default(),
            events,
            throttle: Throttle::new(settings.qps, settings.burst),
            queue,
            settings,
            metrics,
            memory: Mutex::new(HashMap::new()),
            placement: allocator,
            mutation: plugins,
        };
        Harness {
            ctx,
            server,
            events: receiver,
            pods: pod_cache,
            services: svc_cache,
            nodes: node_writer,
            jobs: job_writer,
        }
    }

    /// `pod` exists: on the server and, as the watch would show it, in the cache.
    fn with_pod(&mut self, pod: &Pod) {
        self.server
            .hold("pods", serde_json::to_value(pod).expect("pod JSON"));
        self.cache_pod(pod);
    }

    fn cache_pod(&mut self, pod: &Pod) {
        self.pods
            .apply(watcher::Event::Apply(CachedPod::from(pod.clone())));
    }

    /// The watch shows `pod` gone.
    fn uncache_pod(&mut self, pod: &Pod) {
        self.pods
            .apply(watcher::Event::Delete(CachedPod::from(pod.clone())));
    }

    fn with_service(&mut self, svc: &Service) {
        self.server
            .hold("services", serde_json::to_value(svc).expect("service JSON"));
        self.services
            .apply(watcher::Event::Apply(CachedService::from(svc.clone())));
    }

    /// `job` as the job cache holds it.
    fn cached(job: &DIJob) -> CachedJob {
        CachedJob::new(
            job.metadata.clone(),
            serde_json::value::to_raw_value(&job.spec).expect("spec JSON"),
            job.status.as_ref(),
        )
        .expect("status JSON")
    }

    /// The DIJob watch shows `job` (the resync reads the job cache).
    fn cache_job(&mut self, job: &DIJob) {
        self.jobs
            .apply_watcher_event(&watcher::Event::Apply(Harness::cached(job)));
    }

    async fn reconcile(&self, job: &DIJob) -> Result<Requeue, Error> {
        let cached = Harness::cached(job);
        tokio::time::timeout(BOUND, reconcile_inner(&cached, &self.ctx))
            .await
            .expect("the reconcile did not finish within 10 s")
    }

    /// The Events queued so far, as `Type Reason [Kind/name of the related object]`.
    fn events(&mut self) -> Vec<String> {
        let rx = self
            .events
            .as_mut()
            .expect("the test holds the Event queue");
        let mut out = Vec::new();
        while let Ok((event, _, _)) = rx.try_recv() {
            let related = event
                .secondary
                .map(|r| {
                    format!(
                        " {}/{}",
                        r.kind.unwrap_or_default(),
                        r.name.unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            out.push(format!("{:?} {}{related}", event.type_, event.reason));
        }
        out
    }
}

fn env(pod: &Value, name: &str) -> String {
    pod["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn body_of<'a>(calls: &'a [Call], method: &str, path_prefix: &str, name: &str) -> &'a Value {
    let found = calls.iter().find(|c| {
        c.method == method
            && c.path.starts_with(path_prefix)
            && (c.body["metadata"]["name"] == name || c.path.contains(&format!("/{name}?")))
    });
    &found
        .unwrap_or_else(|| panic!("no {method} {path_prefix} {name}"))
        .body
}

fn fqdn(pod: &str) -> String {
    format!("{pod}.di-j.default.svc.cluster.local")
}
