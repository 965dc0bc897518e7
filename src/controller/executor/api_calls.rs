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

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::events::Recorder;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, PodCondition, PodStatus, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::runtime::events::{Event, Reporter};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{Caches, Context, Error, Requeue, Settings, reconcile_inner};
use crate::allocator::Allocator;
use crate::controller::cache::PodIndex;
use crate::controller::expectations::Expectations;
use crate::controller::queue::Queue;
use crate::controller::throttle::Throttle;
use crate::metrics::{Metrics, PhaseLabels};
use crate::plugin::registry::PluginRegistry;
use crate::plugin::{HostConfig, NativePolicy, PluginHost};
use diorch_core::api::{DIJob, DIJobStatus, Phase};
use diorch_core::build::{BuildContext, Gang, GangKind};
use diorch_core::cached::{CachedPod, CachedService};
use diorch_core::planner::{self, Action, Observed};
use diorch_core::step::WAITING_RETRY;

mod same_decisions;

const JOB_UID: &str = "job-uid";
const SVC_UID: &str = "svc-uid";
const SYNC: Duration = Duration::from_secs(60);
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

fn job_with(spec: Value) -> DIJob {
    serde_json::from_value(json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1",
        "kind": "DIJob",
        "metadata": {"name": "j", "namespace": "default", "uid": JOB_UID, "resourceVersion": "1"},
        "spec": spec,
    }))
    .expect("job")
}

fn task(name: &str, replicas: i32) -> Value {
    json!({"name": name, "type": name, "replicas": replicas,
        "template": {"spec": {"containers": [{"name": "di-container", "image": "di-engine"}]}}})
}

/// A learner and two collectors: pods `j-learner-0`, `j-collector-0`, `j-collector-1`.
fn new_job() -> DIJob {
    job_with(json!({"tasks": [task("learner", 1), task("collector", 2)]}))
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
    events: Option<mpsc::Receiver<(Event, ObjectReference)>>,
    pods: Writer<CachedPod>,
    services: Writer<CachedService>,
    nodes: Writer<Node>,
    _jobs: Writer<diorch_core::cached::CachedJob>,
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
        let (pod_store, pod_writer) = reflector::store();
        let (svc_store, svc_writer) = reflector::store();
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
        let (events, receiver) = if real_events {
            let recorder = Recorder::new(
                client.clone(),
                Reporter {
                    controller: settings.reporter.clone(),
                    instance: None,
                },
            );
            (super::spawn_event_worker(recorder), None)
        } else {
            let (tx, rx) = mpsc::channel(super::EVENT_QUEUE);
            (tx, Some(rx))
        };
        let ctx = Context {
            client,
            caches: Caches {
                jobs: job_store.clone(),
                pods: pod_store,
                index: PodIndex::default(),
                ready: Arc::new(AtomicBool::new(true)),
            },
            services: svc_store,
            expectations: Expectations::default(),
            events,
            throttle: Throttle::new(settings.qps, settings.burst),
            queue: Arc::new(Queue::new(
                metrics.controller.queue_depth.clone(),
                job_store,
            )),
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
            pods: pod_writer,
            services: svc_writer,
            nodes: node_writer,
            _jobs: job_writer,
        }
    }

    /// `pod` exists: on the server and, as the watch would show it, in the cache.
    fn with_pod(&mut self, pod: &Pod) {
        self.server
            .hold("pods", serde_json::to_value(pod).expect("pod JSON"));
        self.cache_pod(pod);
    }

    fn cache_pod(&mut self, pod: &Pod) {
        let event = watcher::Event::Apply(CachedPod::from(pod.clone()));
        self.ctx.caches.index.apply(&event);
        self.pods.apply_watcher_event(&event);
    }

    /// The watch shows `pod` gone.
    fn uncache_pod(&mut self, pod: &Pod) {
        let event = watcher::Event::Delete(CachedPod::from(pod.clone()));
        self.ctx.caches.index.apply(&event);
        self.pods.apply_watcher_event(&event);
    }

    fn with_service(&mut self, svc: &Service) {
        self.server
            .hold("services", serde_json::to_value(svc).expect("service JSON"));
        self.services
            .apply_watcher_event(&watcher::Event::Apply(CachedService::from(svc.clone())));
    }

    async fn reconcile(&self, job: &DIJob) -> Result<Requeue, Error> {
        tokio::time::timeout(BOUND, reconcile_inner(job, &self.ctx))
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
        while let Ok((event, _)) = rx.try_recv() {
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

// ---------------------------------------------------------------------------------------------
// Scenarios

/// A new job: every pod and the service are created (concurrently), then the status goes to
/// Pending with the cached resourceVersion as guard. Plain creations go first (status_first is
/// false): a rank a pod uses is recovered from the pod if the status write is lost.
#[tokio::test]
async fn a_new_job_creates_its_pods_and_service_then_writes_pending() {
    let job = new_job();
    let mut h = Harness::new(&job);

    let result = h.reconcile(&job).await;
    assert_eq!(result.expect("reconcile"), Requeue::requeue(SYNC));
    let calls = h.server.take();
    assert_calls(
        &calls,
        &[
            &[
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-1",
                "POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j",
            ],
            &[
                "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Pending rv=1",
            ],
        ],
    );

    // What each pod carries: the job label, its controller owner, and its place in the world.
    let nodes = [
        fqdn("j-learner-0"),
        fqdn("j-collector-0"),
        fqdn("j-collector-1"),
    ]
    .join(",");
    for (rank, name) in ["j-learner-0", "j-collector-0", "j-collector-1"]
        .iter()
        .enumerate()
    {
        let pod = body_of(&calls, "POST", PODS, name);
        assert_eq!(pod["metadata"]["labels"]["diengine/job"], "j", "{name}");
        assert_eq!(
            pod["metadata"]["labels"]["diengine/operator"], "di-operator",
            "{name}"
        );
        assert_eq!(
            pod["metadata"]["ownerReferences"],
            json!([{"apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob", "name": "j",
                "uid": JOB_UID, "controller": true, "blockOwnerDeletion": true}]),
            "{name}"
        );
        assert_eq!(env(pod, "DI_RANK"), rank.to_string(), "{name}");
        assert_eq!(env(pod, "DI_NODES"), nodes, "{name}");
        assert_eq!(env(pod, "DI_JOB_ID"), "default/j", "{name}");
        assert_eq!(pod["spec"]["hostname"], *name);
        assert_eq!(pod["spec"]["subdomain"], "di-j");
    }
    let svc = body_of(&calls, "POST", SERVICES, "di-j");
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["metadata"]["ownerReferences"][0]["uid"], JOB_UID);
    assert_eq!(svc["spec"]["selector"]["diengine/job"], "j");
    let status = &calls.last().expect("status write").body;
    assert_eq!(status["status"]["replicas"], 3);
    assert_eq!(
        status["status"]["ranks"],
        json!(["j-learner-0", "j-collector-0", "j-collector-1"])
    );
    // A merge patch of the status alone, guarded by the resourceVersion it was planned from:
    // neither the spec nor any other metadata goes along.
    assert_eq!(status["metadata"], json!({"resourceVersion": "1"}));
    assert_eq!(status.get("spec"), None);

    assert_eq!(
        h.events(),
        // The pass's four creates are one Event (its note lists each object).
        ["Normal SuccessfulCreate", "Normal JobPending"]
    );
}

/// A typed task without a name: one JSON patch of the DIJob (each `add` guarded by a `test`
/// of the task's type) and nothing else; the update brings the job back with its names.
#[tokio::test]
async fn an_unnamed_task_gets_a_guarded_json_patch_and_nothing_else() {
    let job = job_with(json!({"tasks": [{"type": "learner", "replicas": 1,
        "template": {"spec": {"containers": [{"name": "di-container", "image": "i"}]}}}]}));
    let mut h = Harness::new(&job);

    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    assert_calls(
        &h.server.take(),
        &[&[
            r#"PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j?&fieldManager=diorch application/json-patch+json [{"op":"test","path":"/spec/tasks/0/type","value":"learner"},{"op":"add","path":"/spec/tasks/0/name","value":"learner"}]"#,
        ]],
    );
    assert_eq!(
        h.server.job().spec.tasks[0].name.as_deref(),
        Some("learner")
    );
    assert!(h.events().is_empty());
}

/// `job` Running, `j-learner-0` failed in the cache (restarts left), the rest cached as they
/// are on the server.
fn with_failed_learner() -> (DIJob, Harness, Vec<Pod>) {
    let (job, pods) = running();
    let mut h = Harness::new(&job);
    h.with_service(&service(&job));
    let mut pods = pods;
    pods[0] = with_phase(pods[0].clone(), "Failed", false);
    for pod in &pods {
        h.with_pod(pod);
    }
    (job, h, pods)
}

/// A counted transition (Restarting) is committed first; when that write conflicts (the cache
/// is behind the stored job) nothing else is written and the job is requeued shortly, to be
/// planned again from the newer job.
#[tokio::test]
async fn a_status_conflict_stops_the_pass_before_any_pod_write() {
    let (job, mut h, _) = with_failed_learner();
    h.server.set_job_rv("2");

    let result = h.reconcile(&job).await;
    assert_eq!(
        result.expect("reconcile"),
        Requeue::requeue(Duration::from_millis(200))
    );
    assert_calls(
        &h.server.take(),
        &[&[
            "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Restarting rv=1",
        ]],
    );
    // The transition did not happen: no Event says it did.
    assert!(h.events().is_empty());
}

/// A failed pod with restarts left: Restarting (restarts 1) is written first, then the pod is
/// deleted with its uid as precondition and no grace (its containers have stopped). The next
/// pass, once the cache shows it gone, creates it again under the same name and rank, and the
/// one after that, seeing every pod, moves to Starting with a status write only.
#[tokio::test]
async fn a_failed_pod_is_deleted_after_restarting_is_written_and_recreated_next_pass() {
    let (job, mut h, pods) = with_failed_learner();

    let result = h.reconcile(&job).await;
    assert_eq!(result.expect("reconcile"), Requeue::requeue(SYNC));
    let calls = h.server.take();
    assert_calls(
        &calls,
        &[
            &[
                "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Restarting rv=1",
            ],
            &["DELETE /api/v1/namespaces/default/pods/j-learner-0? uid=uid-j-learner-0 grace=0"],
        ],
    );
    assert_eq!(calls[0].body["status"]["restarts"], 1);
    assert_eq!(
        h.events(),
        [
            "Normal SuccessfulDelete Pod/j-learner-0",
            "Warning JobRestarting"
        ]
    );

    // Pass 2: the job as stored (Restarting, rv 2), the pod gone from the cache. Its new
    // replica counts are held back (written a moment ago), so the pass comes back soon.
    h.uncache_pod(&pods[0]);
    let job = h.server.job();
    assert_eq!(job.metadata.resource_version.as_deref(), Some("2"));
    let requeue = h.reconcile(&job).await.expect("reconcile");
    assert!(requeue != Requeue::requeue(SYNC), "{requeue:?}");
    let calls = h.server.take();
    assert_calls(
        &calls,
        &[&["POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0"]],
    );
    let pod = body_of(&calls, "POST", PODS, "j-learner-0");
    assert_eq!(env(pod, "DI_RANK"), "0", "the pod keeps its rank");
    assert_eq!(h.events(), ["Normal SuccessfulCreate Pod/j-learner-0"]);

    // Pass 3: the watch shows the new pod; every pod is there again.
    let created: Pod = serde_json::from_value(h.server.object("pods", "j-learner-0")).expect("pod");
    h.cache_pod(&with_phase(created, "Pending", false));
    let job = h.server.job();
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::requeue(SYNC)
    );
    assert_calls(
        &h.server.take(),
        &[&[
            "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Starting rv=2",
        ]],
    );
    assert_eq!(h.events(), ["Normal JobStarting"]);
}

/// A Succeeded job cleans up by its cleanPodPolicy: the service always, and the pods the
/// policy names, each delete guarded by the object's uid; pods whose containers stopped go
/// without grace. Nothing else: the status (complete already) is not written again.
#[tokio::test]
async fn a_succeeded_job_deletes_its_service_and_the_pods_its_clean_pod_policy_names() {
    let svc_delete = "DELETE /api/v1/namespaces/default/services/di-j? uid=svc-uid grace=null";
    let cases: [(&str, &[&str]); 3] = [
        (
            "Running",
            &[
                "DELETE /api/v1/namespaces/default/pods/j-collector-0? uid=uid-j-collector-0 grace=null",
            ],
        ),
        (
            "All",
            &[
                "DELETE /api/v1/namespaces/default/pods/j-learner-0? uid=uid-j-learner-0 grace=0",
                "DELETE /api/v1/namespaces/default/pods/j-collector-0? uid=uid-j-collector-0 grace=null",
                "DELETE /api/v1/namespaces/default/pods/j-collector-1? uid=uid-j-collector-1 grace=0",
            ],
        ),
        ("None", &[]),
    ];
    for (policy, pod_deletes) in cases {
        let (mut job, pods) = running();
        job.spec.clean_pod_policy = serde_json::from_value(json!(policy)).expect("policy");
        let status = job.status.get_or_insert_with(Default::default);
        status.phase = Some(Phase::Succeeded);
        status.completion_timestamp = Some(Time(jiff::Timestamp::now()));
        status.ready_replicas = 0;
        status.task_status = None;
        // As a finished job's status reads: scales kept, none ready.
        for task in status
            .task_replica_status
            .iter_mut()
            .flat_map(|m| m.values_mut())
        {
            task.ready_replicas = 0;
        }
        let mut h = Harness::new(&job);
        h.with_service(&service(&job));
        let phases = [("Succeeded", false), ("Running", true), ("Failed", false)];
        for (pod, (phase, ready)) in pods.into_iter().zip(phases) {
            h.with_pod(&with_phase(pod, phase, ready));
        }

        assert_eq!(
            h.reconcile(&job).await.expect("reconcile"),
            Requeue::requeue(SYNC),
            "{policy}"
        );
        let mut group = vec![svc_delete];
        group.extend_from_slice(pod_deletes);
        assert_calls(&h.server.take(), &[&group]);
        // The pass's deletes fold into one Event; a lone delete keeps its related object.
        let events = h.events();
        let expected = if group.len() == 1 {
            "Normal SuccessfulDelete Service/di-j"
        } else {
            "Normal SuccessfulDelete"
        };
        assert_eq!(events, [expected], "{policy}");
    }
}

/// A pod create answered 409 AlreadyExists: the executor looks the holder up (a LIST by name:
/// its RBAC has no pod `get`) and never creates it twice. Held by this very job's pod (a
/// retried create the cache has not shown yet): the goal is met, no Event, no error. Held by a
/// pod that is not the job's: FailedCreate, and the pass is an error to retry with backoff.
#[tokio::test]
async fn a_pod_create_answered_already_exists_lists_the_holder_and_never_creates_twice() {
    let creates_then_status = |list: &'static str| -> Vec<Vec<&'static str>> {
        vec![
            vec![
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-1",
                "POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j",
                list,
            ],
            vec![
                "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Pending rv=1",
            ],
        ]
    };
    let list = "GET /api/v1/namespaces/default/pods?&fieldSelector=metadata.name%3Dj-collector-1";
    for ours in [true, false] {
        let job = new_job();
        let mut h = Harness::new(&job);
        // The server holds j-collector-1; the cache does not show it.
        let (pods, _) = built(&job, &BuildContext::default());
        let mut holder = serde_json::to_value(&pods[2]).expect("pod JSON");
        if !ours {
            holder["metadata"]["ownerReferences"][0]["uid"] = json!("someone-else");
        }
        h.server.hold("pods", holder);

        let result = h.reconcile(&job).await;
        let calls = h.server.take();
        let expected = creates_then_status(list);
        let groups: Vec<&[&str]> = expected.iter().map(Vec::as_slice).collect();
        assert_calls(&calls, &groups);
        // The look-up follows the refused create.
        let at = |line: &str| calls.iter().position(|c| c.line() == line);
        assert!(
            at("POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-1")
                < at(list)
        );
        let events = h.events();
        if ours {
            assert_eq!(result.expect("reconcile"), Requeue::requeue(SYNC));
            assert!(
                !events.iter().any(|e| e.contains("j-collector-1")),
                "{events:?}"
            );
        } else {
            assert!(
                matches!(&result, Err(Error::Writes { failed: 1, kind: "create", first, .. })
                    if first.contains("a pod of that name exists that this job does not own")),
                "{result:?}"
            );
            assert!(
                events.contains(&"Warning FailedCreate Pod/j-collector-1".to_string()),
                "{events:?}"
            );
        }
    }
}

/// A pod the API server refuses as invalid (422) fails the job: retrying cannot help. It fails
/// on the same pass: the Failed status is planned from the job the pass's own status write
/// returned and guarded by its new resourceVersion (the cached one is stale by then, which
/// once made the server answer 409 and the failure be dropped, the pod re-created and a
/// FailedCreate recorded on every pass). The next pass creates nothing.
#[tokio::test]
async fn an_invalid_pod_fails_the_job_on_the_same_pass_with_the_servers_message() {
    let job = job_with(json!({"tasks": [task("learner", 1)]}));
    let mut h = Harness::new(&job);
    let message = "Pod \"j-learner-0\" is invalid: spec.containers[0].image: Required value";
    h.server
        .fail("POST", "pods", "j-learner-0", 422, "Invalid", message);
    let status = "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch";

    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::requeue(SYNC)
    );
    let calls = h.server.take();
    let pending = format!("{status} phase=Pending rv=1");
    // Guarded by the resourceVersion the Pending write answered with.
    let failed = format!("{status} phase=Failed rv=2");
    assert_calls(
        &calls,
        &[
            &[
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0",
                "POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j",
            ],
            &[&pending],
            &[&failed],
        ],
    );
    let conditions = calls[3].body["status"]["conditions"].clone();
    let condition = conditions
        .as_array()
        .and_then(|c| c.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(condition["type"], "Failed");
    assert_eq!(condition["reason"], "JobFailed");
    assert_eq!(
        condition["message"],
        format!("pod j-learner-0 failed to create: {message}")
    );
    // Planned from the job as the Pending write left it (its condition and rank table), not as
    // the pass found it (no status at all).
    let types: Vec<&Value> = conditions
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| &c["type"])
        .collect();
    assert_eq!(types, [&json!("Pending"), &json!("Failed")]);
    let rest_of = |status: &Value| {
        let mut status = status.clone();
        if let Some(s) = status.as_object_mut() {
            for ended in ["phase", "conditions", "completionTimestamp"] {
                s.remove(ended);
            }
        }
        status
    };
    let rest = |call: &Call| rest_of(&call.body["status"]);
    // The failing write changes only those; the rest stays as the Pending write left it.
    assert_eq!(rest(&calls[3]), json!({}));
    let stored = serde_json::to_value(h.server.job().status).expect("status");
    assert_eq!(rest_of(&stored), rest(&calls[2]));
    assert_eq!(
        h.server.job().status.and_then(|s| s.phase),
        Some(Phase::Failed)
    );
    assert_eq!(
        h.events(),
        [
            "Warning FailedCreate Pod/j-learner-0",
            "Normal SuccessfulCreate Service/di-j",
            "Normal JobPending",
            "Warning JobFailed",
        ]
    );
    // Both transitions of the pass are counted, the failure too.
    let transitions = |phase: &'static str| {
        h.ctx
            .metrics
            .controller
            .transitions
            .get_or_create(&PhaseLabels { phase })
            .get()
    };
    assert_eq!((transitions("Pending"), transitions("Failed")), (1, 1));

    // Pass 2, over the job as stored (Failed) and its service: the pod is not created again;
    // the finished job's service goes, as for any failed job.
    let svc: CachedService =
        serde_json::from_value(h.server.object("services", "di-j")).expect("service");
    h.services.apply_watcher_event(&watcher::Event::Apply(svc));
    let job = h.server.job();
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::requeue(SYNC)
    );
    assert_calls(
        &h.server.take(),
        &[&["DELETE /api/v1/namespaces/default/services/di-j? uid=server-uid-1 grace=null"]],
    );
    assert_eq!(h.events(), ["Normal SuccessfulDelete Service/di-j"]);
}

/// A job being deleted: garbage collection removes its pods and service through the owner
/// references, so the reconcile makes no call at all, even with pods missing.
#[tokio::test]
async fn a_job_being_deleted_makes_no_call() {
    let mut job = new_job();
    job.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    let mut h = Harness::new(&job);

    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::await_change()
    );
    assert_calls(&h.server.take(), &[]);
    assert!(h.events().is_empty());
}

/// Before every cache has synced the pod cache may be half-filled (a running job's pods would
/// look gone): no call, requeued shortly.
#[tokio::test]
async fn caches_not_synced_make_no_call() {
    let job = new_job();
    let mut h = Harness::new(&job);
    h.ctx
        .caches
        .ready
        .store(false, std::sync::atomic::Ordering::Release);

    let result = h.reconcile(&job).await;
    assert_eq!(
        result.expect("reconcile"),
        Requeue::requeue(Duration::from_millis(500))
    );
    assert_calls(&h.server.take(), &[]);
    assert!(h.events().is_empty());
}

/// A steady Running job makes no call; with its service deleted by hand, the only call is
/// the service's create (the status does not change).
#[tokio::test]
async fn a_steady_job_makes_no_call_and_a_lost_service_is_created_again() {
    let (job, pods) = running();
    let mut h = Harness::new(&job);
    for pod in &pods {
        h.with_pod(pod);
    }
    let svc = service(&job);
    h.with_service(&svc);
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::requeue(SYNC)
    );
    assert_calls(&h.server.take(), &[]);
    assert!(h.events().is_empty());

    h.services
        .apply_watcher_event(&watcher::Event::Delete(CachedService::from(svc)));
    h.server.state().objects.remove("services");
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::requeue(SYNC)
    );
    assert_calls(
        &h.server.take(),
        &[&["POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j"]],
    );
    assert_eq!(h.events(), ["Normal SuccessfulCreate Service/di-j"]);
}

/// A job validation refuses: Failed with the reason, a status write only (no pod, no
/// service, no defaulting patch).
#[tokio::test]
async fn an_invalid_job_fails_with_a_status_write_only() {
    let job = job_with(json!({"tasks": [task("learner", 1), task("learner", 1)]}));
    let mut h = Harness::new(&job);

    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::requeue(SYNC)
    );
    let calls = h.server.take();
    assert_calls(
        &calls,
        &[&[
            "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Failed rv=1",
        ]],
    );
    assert_eq!(
        calls[0].body["status"]["conditions"][0]["message"],
        "the number of learner task is more than one"
    );
    assert_eq!(h.events(), ["Warning JobFailed"]);
}

/// A preemptible job that does not fit (the allocator sees no node) waits in Pending: its
/// service is created and the status says why, but no pod is written; it is tried again after
/// WAITING_RETRY at the latest.
#[tokio::test]
async fn a_preemptible_job_waiting_for_capacity_writes_no_pod() {
    let mut job = new_job();
    job.spec.preemptible = true;
    let mut h = Harness::new(&job);

    let result = h.reconcile(&job).await;
    assert_eq!(result.expect("reconcile"), Requeue::requeue(WAITING_RETRY));
    let calls = h.server.take();
    assert_calls(
        &calls,
        &[
            &["POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j"],
            &[
                "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Pending rv=1",
            ],
        ],
    );
    let allocated = &calls[1].body["status"]["conditions"][0];
    assert_eq!(
        (&allocated["type"], &allocated["status"]),
        (&json!("Allocated"), &json!("False"))
    );
    assert!(calls[1].body["status"]["allocation"].is_null());
    assert_eq!(
        h.events(),
        [
            "Normal SuccessfulCreate Service/di-j",
            "Normal JobPending",
            "Warning FailedAllocation",
        ]
    );
}

/// A preemptible job that fits: its new allocation is written first (status_first), then the
/// pods go out pinned to the allocated node, with the service.
#[tokio::test]
async fn a_placed_preemptible_job_writes_its_allocation_before_any_pod() {
    let mut job = new_job();
    job.spec.preemptible = true;
    let mut h = Harness::new(&job);
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n0"},
        "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("node");
    h.nodes.apply_watcher_event(&watcher::Event::Apply(node));

    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::requeue(SYNC)
    );
    let calls = h.server.take();
    assert_calls(
        &calls,
        &[
            &[
                "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Pending rv=1",
            ],
            &[
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-1",
                "POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j",
            ],
        ],
    );
    assert_eq!(
        calls[0].body["status"]["allocation"],
        json!(["n0", "n0", "n0"])
    );
    for name in ["j-learner-0", "j-collector-0", "j-collector-1"] {
        let pod = body_of(&calls, "POST", PODS, name);
        assert_eq!(
            pod["metadata"]["annotations"]["diengine/node"], "n0",
            "{name}"
        );
        assert_eq!(
            pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"][0]["matchFields"],
            json!([{"key": "metadata.name", "operator": "In", "values": ["n0"]}]),
            "{name}"
        );
    }
}

/// The same when the status goes first (a new allocation): the Failed status is guarded by the
/// resourceVersion the allocation's write answered with.
#[tokio::test]
async fn an_invalid_pod_after_the_allocation_is_written_fails_the_job_on_the_same_pass() {
    let mut job = new_job();
    job.spec.preemptible = true;
    let mut h = Harness::new(&job);
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n0"},
        "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("node");
    h.nodes.apply_watcher_event(&watcher::Event::Apply(node));
    h.server
        .fail("POST", "pods", "j-collector-1", 422, "Invalid", "bad pod");

    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::requeue(SYNC)
    );
    let calls = h.server.take();
    let status = "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch";
    assert_calls(
        &calls,
        &[
            &[&format!("{status} phase=Pending rv=1")],
            &[
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-1",
                "POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j",
            ],
            &[&format!("{status} phase=Failed rv=2")],
        ],
    );
    // Planned from the written status: the allocation stays (the failing patch leaves it).
    assert_eq!(calls[5].body["status"].get("allocation"), None);
    assert_eq!(
        h.server.job().status.and_then(|s| s.allocation),
        Some(vec!["n0".to_string(); 3])
    );
    assert_eq!(
        h.server.job().status.and_then(|s| s.phase),
        Some(Phase::Failed)
    );
    let events = h.events();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.starts_with("Warning FailedCreate"))
            .collect::<Vec<_>>(),
        ["Warning FailedCreate Pod/j-collector-1"]
    );
    assert_eq!(events.last().map(String::as_str), Some("Warning JobFailed"));
}

/// With a gang scheduler the PodGroup is ensured before any pod; when it exists already (409)
/// its minMember is merge-patched instead.
#[tokio::test]
async fn a_gang_scheduled_job_ensures_its_podgroup_before_the_pods() {
    let settings = || Settings {
        build: BuildContext {
            gang: Some(Gang {
                kind: GangKind::Volcano,
                scheduler_name: "volcano".into(),
            }),
            ..BuildContext::default()
        },
        ..Settings::default()
    };
    let pods_and_service: &[&str] = &[
        "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0",
        "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-0",
        "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-1",
        "POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j",
    ];
    let status: &[&str] = &[
        "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Pending rv=1",
    ];
    let groups = "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups";

    let job = new_job();
    let h = Harness::with(&job, settings(), false);
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::requeue(SYNC)
    );
    let calls = h.server.take();
    let create = format!("POST {groups}?&fieldManager=diorch name=j");
    assert_calls(&calls, &[&[&create], pods_and_service, status]);
    // The whole PodGroup: named and labelled like the job, owned by it, minMember its replicas.
    assert_eq!(
        calls[0].body,
        json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {
                "name": "j",
                "namespace": "default",
                "labels": {"diengine/job": "j", "diengine/operator": "di-operator"},
                "ownerReferences": [{
                    "apiVersion": "diengine.opendilab.org/v2alpha1",
                    "kind": "DIJob",
                    "name": "j",
                    "uid": JOB_UID,
                    "controller": true,
                    "blockOwnerDeletion": true,
                }],
            },
            "spec": {"minMember": 3},
        })
    );
    let pod = body_of(&calls, "POST", PODS, "j-learner-0");
    assert_eq!(pod["spec"]["schedulerName"], "volcano");
    assert_eq!(
        pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"],
        "j"
    );

    // The PodGroup is there already (an earlier pass, a smaller job): its minMember is set.
    let h = Harness::with(&job, settings(), false);
    h.server.hold("podgroups", json!({"apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup", "metadata": {"name": "j", "namespace": "default"}, "spec": {"minMember": 1}}));
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::requeue(SYNC)
    );
    let patch = format!(
        r#"PATCH {groups}/j?&fieldManager=diorch application/merge-patch+json {{"spec":{{"minMember":3}}}}"#
    );
    assert_calls(
        &h.server.take(),
        &[&[&create], &[&patch], pods_and_service, status],
    );
}

/// With the real Event worker the Events go to events.k8s.io on their own (interleaved with the
/// reconcile's writes, which stay exactly those pinned for a new job). kube-runtime's Recorder
/// names no field manager; the operator's client adds `diorch` in `writes::FieldManagerLayer`,
/// which this bare test client does not have (tests/e2e.rs checks it on a real server).
#[tokio::test]
async fn events_are_recorded_by_the_worker_off_the_reconciles_calls() {
    let job = new_job();
    let h = Harness::with(&job, Settings::default(), true);
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::requeue(SYNC)
    );

    // 5 writes of the reconcile and 2 Events (the creates fold into one); the worker runs on
    // its own, so wait (bounded).
    let mut seen = h.server.seen.subscribe();
    tokio::time::timeout(BOUND, seen.wait_for(|n| *n >= 7))
        .await
        .expect("the Event worker did not post 2 Events within 10 s")
        .expect("server alive");
    let calls = h.server.take();
    let (events, writes): (Vec<Call>, Vec<Call>) = calls.into_iter().partition(Call::is_event);
    assert_calls(
        &writes,
        &[
            &[
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-learner-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-0",
                "POST /api/v1/namespaces/default/pods?&fieldManager=diorch name=j-collector-1",
                "POST /api/v1/namespaces/default/services?&fieldManager=diorch name=di-j",
            ],
            &[
                "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=Pending rv=1",
            ],
        ],
    );
    let mut posted: Vec<String> = events
        .iter()
        .map(|e| {
            // kube's Recorder creates Events without a field manager (not `diorch`).
            assert_eq!(
                (e.method.as_str(), e.path.as_str()),
                ("POST", "/apis/events.k8s.io/v1/namespaces/default/events?")
            );
            assert_eq!(e.body["regarding"]["name"], "j");
            assert_eq!(e.body["reportingController"], "di-operator");
            let reason = e.body["reason"].as_str().unwrap_or_default();
            if reason == "SuccessfulCreate" {
                // DI-orchestrator's message for each object, in one note.
                let note = e.body["note"].as_str().unwrap_or_default();
                for object in [
                    "pod j-learner-0",
                    "pod j-collector-0",
                    "pod j-collector-1",
                    "service di-j",
                ] {
                    assert!(
                        note.contains(&format!("{object} was successfully created")),
                        "{note}"
                    );
                }
            }
            match e.body["related"]["name"].as_str() {
                Some(related) => format!("{reason} {related}"),
                None => reason.to_string(),
            }
        })
        .collect();
    posted.sort();
    assert_eq!(posted, ["JobPending", "SuccessfulCreate"]);
}

/// Pods of a Running job turn unready one after another: the first change of the counts is
/// written at once, the next within a second waits (no call; a pass comes back for it when
/// the second is over) and goes out with whatever the counts are then.
#[tokio::test]
async fn replica_counts_changing_again_within_a_second_wait_for_one_write() {
    let (job, pods) = running();
    let mut h = Harness::new(&job);
    let svc = service(&job);
    h.with_service(&svc);
    let unready = |i: usize| {
        pods.iter()
            .enumerate()
            .map(|(j, p)| with_phase(p.clone(), "Running", j >= i))
            .collect::<Vec<_>>()
    };
    for pod in unready(1) {
        h.with_pod(&pod);
    }
    assert_eq!(
        h.reconcile(&job).await.expect("reconcile"),
        Requeue::requeue(SYNC)
    );
    let calls = h.server.take();
    assert_calls(
        &calls,
        &[&[
            "PATCH /apis/diengine.opendilab.org/v2alpha1/namespaces/default/dijobs/j/status?&fieldManager=diorch phase=unchanged rv=1",
        ]],
    );
    let job = h.server.job();
    assert_eq!(job.status.as_ref().map(|s| s.ready_replicas), Some(2));

    for pod in unready(2) {
        h.with_pod(&pod);
    }
    let requeue = h.reconcile(&job).await.expect("reconcile");
    assert_calls(&h.server.take(), &[]);
    assert!(
        requeue != Requeue::requeue(SYNC),
        "the held-back counts must bring a pass back within the second: {requeue:?}"
    );
}

/// A pass that comes before the service's watch event (the pods' events came first) does not
/// create the service again; once the cache shows it, or the expectation is old, the
/// planner's view holds again.
#[tokio::test]
async fn a_pass_before_the_service_watch_event_creates_no_duplicate_service() {
    let job = new_job();
    let mut h = Harness::new(&job);
    h.reconcile(&job).await.expect("reconcile");
    let first = h.server.take();
    assert!(
        first
            .iter()
            .any(|c| c.method == "POST" && c.path.contains("/services")),
        "the first pass creates the service"
    );
    for name in ["j-learner-0", "j-collector-0", "j-collector-1"] {
        let pod: Pod = serde_json::from_value(h.server.object("pods", name)).expect("pod");
        h.cache_pod(&with_phase(pod, "Pending", false));
    }
    let job = h.server.job();
    h.reconcile(&job).await.expect("reconcile");
    let calls = h.server.take();
    assert!(
        !calls.iter().any(|c| c.path.contains("/services")),
        "{calls:?}"
    );
}
