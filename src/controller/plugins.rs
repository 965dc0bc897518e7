//! Feeds the registry from plugin ConfigMaps (label `diorch.io/plugin`) in one namespace: a new
//! or changed ConfigMap is loaded (compile, world check, smoke call, atomic swap), a deleted one
//! unloads its plugin, and every outcome is an Event on the ConfigMap (Warning naming the cause
//! when an upload is refused and the last good version stays).
//!
//! It also writes the outcome onto the ConfigMap's metadata, so that
//! `kubectl get cm -l diorch.io/plugin -L diorch.io/plugin-state,diorch.io/plugin-version`
//! shows health at a glance:
//! - label `diorch.io/plugin-state`: `Loaded` (the last upload serves) or `Rejected` (it was
//!   refused; an older version may still serve);
//! - label `diorch.io/plugin-version`: the first 12 hex digits of the sha256 serving now, absent
//!   while none does;
//! - annotation `diorch.io/plugin-status`: one line, `loaded version <sha256>` or
//!   `refused: <cause>; serving <sha256 prefix>` / `...; no version serves`.
//!
//! These are merge patches of metadata only, sent when the ConfigMap does not already show them;
//! a failed or timed-out write is logged and tried again with backoff (1 s doubling to 30 s)
//! until it lands, the ConfigMap goes, or a newer status replaces it. They cannot cause a
//! reload: the spec parser reads none of them, so the update they trigger compares equal to
//! what was applied (and an invalid spec is remembered by a digest of `data` and `binaryData`).
//!
//! No API call stalls the watch loop: status writes and Events run on tasks of their own, and
//! every request the watcher's client makes is bounded ([`ApiLimits::call_timeout`]): a list
//! page, a get, a patch or an Event write until its whole body is read, a watch until its
//! response headers. The watch stream itself asks the server to end it after
//! [`ApiLimits::watch_timeout`], and kube-runtime's watcher treats a stream silent for that
//! plus 5 s as a dead connection and watches again from the last resource version.
//!
//! A policy's rollout labels (`diorch.io/shadow-of`, `diorch.io/replaces`: see `plugin::spec`)
//! are part of its spec: editing one reloads the same version in its new role (hot: the old
//! one serves until the swap), and the `PluginLoaded` Event names the role.
//!
//! Loads run on tasks of their own (a pull or a compile never holds up the loop, another plugin,
//! or a reconcile); a newer spec of a ConfigMap cancels its load in flight, and a pull that
//! failed for a reason that may pass (`PullFailed`) is tried again, 10 s doubling to 5 min.
//!
//! Fail closed: once every ConfigMap of the first list was applied, and the loads of its
//! mutators have ended, the watcher tells the registry
//! ([`PluginRegistry::first_load_done`]), so pod mutations that waited for it proceed; an
//! invalid ConfigMap whose `data` says `kind: mutator` without `failurePolicy: Ignore` blocks
//! the pods of its task types until it is fixed or deleted ([`PluginRegistry::fail_closed`]).
//!
//! Owns: the watch loop, its Events and the status metadata above. Must not touch: loading
//! rules (registry), the ConfigMap format (spec) and any ConfigMap field but those three keys.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::events::Recorder;
use futures::future::BoxFuture;
use futures::{FutureExt as _, StreamExt as _};
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Patch;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Api, Client, Resource as _, ResourceExt as _};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::plugin::fetch::Fetcher;
use crate::plugin::registry::PluginRegistry;
use crate::plugin::spec::{
    self, ComponentSource, PLUGIN_LABEL, PluginSpec, STATE_LABEL, STATUS_ANNOTATION, VERSION_LABEL,
};

/// Notes longer than this are cut (the Events API caps notes at 1 KiB).
const NOTE_CAP: usize = 1000;
/// Status annotations longer than this are cut: one line for people, not a log.
const STATUS_CAP: usize = 1000;
/// Hex digits of the sha256 in the version label (a label value is at most 63 characters).
const VERSION_DIGITS: usize = 12;
/// Event writes at once; more are dropped (logged): Events explain, the status is the record.
const EVENTS_IN_FLIGHT: usize = 16;
/// ConfigMaps per list page: a component is up to 16 MiB, so a page stays readable within
/// [`ApiLimits::call_timeout`] on a slow link.
const LIST_PAGE: u32 = 8;

/// Bounds on the watcher's API calls.
#[derive(Clone, Debug)]
pub struct ApiLimits {
    /// Every request but a watch stream's body: headers and whole body of a list page, get,
    /// status patch or Event write; a watch's response headers.
    pub call_timeout: Duration,
    /// Server-side timeout of each watch request (whole seconds); a stream silent for this
    /// plus 5 s is taken for a dead connection by kube-runtime's watcher.
    pub watch_timeout: Duration,
    /// First wait before a failed status write is tried again; doubles up to `max_retry`.
    pub retry: Duration,
    pub max_retry: Duration,
}

impl Default for ApiLimits {
    fn default() -> Self {
        ApiLimits {
            call_timeout: Duration::from_secs(10),
            // Re-watching every minute costs one request; a dead connection is noticed within
            // 65 s instead of kube's default 295 s.
            watch_timeout: Duration::from_secs(60),
            retry: Duration::from_secs(1),
            max_retry: Duration::from_secs(30),
        }
    }
}

/// A valid spec and component source last handed to the registry from one ConfigMap, loaded
/// or not, so relists and no-op updates (the watcher's own status writes included) do not
/// reload. A tag is resolved again only when the ConfigMap changes.
#[derive(PartialEq, Clone)]
struct Applied {
    plugin: String,
    spec: PluginSpec,
    source: [u8; 32],
}

/// A digest of a component source: the inline bytes with their encoding and signature, or the
/// reference with its pull Secret.
fn source_digest(source: &ComponentSource) -> [u8; 32] {
    let mut h = Sha256::new();
    match source {
        ComponentSource::Inline {
            bytes,
            encoding,
            signature,
        } => {
            h.update([0]);
            h.update(encoding.to_string());
            h.update([0]);
            h.update(signature.as_deref().unwrap_or(""));
            h.update([0]);
            h.update(bytes);
        }
        ComponentSource::Image {
            reference,
            pull_secret,
        } => {
            h.update([1]);
            h.update(reference.to_string());
            h.update([0]);
            h.update(pull_secret.as_deref().unwrap_or(""));
        }
    }
    h.finalize().into()
}

/// A load running on a task of its own (fetch, compile, smoke call, swap).
struct Loading {
    generation: u64,
    applied: Applied,
    handle: tokio::task::JoinHandle<()>,
    /// For a component by reference: what to load again if the pull fails for a reason that
    /// may pass (the registry down, slow or refusing for now).
    retry: Option<(PluginSpec, ComponentSource)>,
    /// The wait before that next try.
    retry_backoff: Duration,
}

/// First wait before a failed pull is tried again; doubles up to [`PULL_RETRY_MAX`].
const PULL_RETRY: Duration = Duration::from_secs(10);
const PULL_RETRY_MAX: Duration = Duration::from_secs(300);

/// A pull that failed for a reason that may pass, to be tried again.
struct PullRetry {
    at: tokio::time::Instant,
    backoff: Duration,
    applied: Applied,
    spec: PluginSpec,
    source: ComponentSource,
}

/// A load's end, sent back to the watch loop.
struct LoadDone {
    configmap: String,
    generation: u64,
    result: Result<String, (&'static str, String)>,
}

/// How a load attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Loaded,
    /// Refused, with the cause (one line).
    Rejected(String),
}

/// What the watcher remembers about one ConfigMap.
#[derive(Default)]
struct Tracked {
    /// The last valid spec applied and how that went.
    applied: Option<(Applied, Outcome)>,
    /// The last invalid spec: a digest of its input and why it is invalid. Cleared by a valid
    /// spec; while set it is the ConfigMap's outcome.
    invalid: Option<([u8; 32], String)>,
    /// The ConfigMap's labels and annotations as last seen, to tell whether it shows its status
    /// (a standby that becomes leader writes what it could not write before).
    seen: ConfigMap,
    /// The mutator name this ConfigMap blocks while it is invalid (see the module doc).
    blocked: Option<String>,
    /// The load in flight, if any (a newer spec cancels it).
    loading: Option<Loading>,
    /// A failed pull waiting to be tried again (a newer spec replaces it).
    retry: Option<PullRetry>,
}

impl Tracked {
    /// A mutator's load is in flight.
    fn loading_mutator(&self) -> bool {
        self.loading
            .as_ref()
            .is_some_and(|l| l.applied.spec.kind == spec::PluginKind::Mutator)
    }

    fn plugin(&self) -> Option<&str> {
        self.applied.as_ref().map(|(a, _)| a.plugin.as_str())
    }

    fn outcome(&self) -> Option<Outcome> {
        match (&self.invalid, &self.applied) {
            (Some((_, cause)), _) => Some(Outcome::Rejected(cause.clone())),
            (None, Some((_, outcome))) => Some(outcome.clone()),
            (None, None) => None,
        }
    }
}

/// The three status keys as the ConfigMap should show them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StatusMeta {
    state: &'static str,
    version: Option<String>,
    note: String,
}

fn one_line_capped(text: &str, cap: usize) -> String {
    let mut line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    line.truncate(line.floor_char_boundary(cap));
    line
}

impl StatusMeta {
    /// `serving`: the full sha256 of the version serving now, if any.
    fn new(outcome: &Outcome, serving: Option<&str>) -> StatusMeta {
        let version = serving.map(|s| s.chars().take(VERSION_DIGITS).collect::<String>());
        match outcome {
            Outcome::Loaded => StatusMeta {
                state: "Loaded",
                note: match serving {
                    Some(sha) => format!("loaded version {sha}"),
                    None => "loaded".to_string(),
                },
                version,
            },
            Outcome::Rejected(cause) => {
                let tail = match &version {
                    Some(v) => format!("; serving {v}"),
                    None => "; no version serves".to_string(),
                };
                // Cut the cause, not the tail: which version serves is the point of the line.
                let cause = one_line_capped(cause, STATUS_CAP.saturating_sub(tail.len() + 9));
                StatusMeta {
                    state: "Rejected",
                    note: format!("refused: {cause}{tail}"),
                    version,
                }
            }
        }
    }

    fn shown_by(&self, cm: &ConfigMap) -> bool {
        let label = |k: &str| cm.labels().get(k).map(String::as_str);
        label(STATE_LABEL) == Some(self.state)
            && label(VERSION_LABEL) == self.version.as_deref()
            && cm.annotations().get(STATUS_ANNOTATION) == Some(&self.note)
    }

    fn patch(&self) -> serde_json::Value {
        // In a merge patch `null` deletes the key: the version label goes when none serves.
        json!({"metadata": {
            "labels": {STATE_LABEL: self.state, VERSION_LABEL: self.version},
            "annotations": {STATUS_ANNOTATION: self.note},
        }})
    }
}

/// A digest of what `spec::from_configmap` reads besides the name (`data` and `binaryData`), so
/// an invalid ConfigMap is reported once per content, not once per update.
fn input_digest(cm: &ConfigMap) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut field = |tag: u8, key: &str, value: &[u8]| {
        h.update([tag]);
        h.update((key.len() as u64).to_le_bytes());
        h.update(key.as_bytes());
        h.update((value.len() as u64).to_le_bytes());
        h.update(value);
    };
    for (k, v) in cm.data.iter().flatten() {
        field(0, k, v.as_bytes());
    }
    for (k, v) in cm.binary_data.iter().flatten() {
        field(1, k, &v.0);
    }
    h.finalize().into()
}

/// Watches plugin ConfigMaps in `namespace` until `shutdown` resolves (components by reference
/// pulled with the default bounds, no disk cache, no trusted keys).
pub async fn run(
    client: Client,
    namespace: &str,
    registry: Arc<PluginRegistry>,
    leader: crate::leader::Leadership,
    shutdown: impl Future<Output = ()>,
) {
    let limits = ApiLimits::default();
    let fetcher = match Fetcher::for_namespace(client.clone(), namespace, limits.call_timeout) {
        Ok(f) => Arc::new(f),
        Err(error) => {
            tracing::error!(%error, "cannot build the plugin fetcher; plugins are not watched");
            return;
        }
    };
    run_with(
        client, namespace, registry, fetcher, leader, limits, shutdown,
    )
    .await;
}

/// [`run`] with the given component fetcher and bounds on API calls.
pub async fn run_with(
    client: Client,
    namespace: &str,
    registry: Arc<PluginRegistry>,
    fetcher: Arc<Fetcher>,
    leader: crate::leader::Leadership,
    limits: ApiLimits,
    shutdown: impl Future<Output = ()>,
) {
    let client = bounded(client, limits.call_timeout);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "diorch-plugins".into(),
            instance: None,
        },
    );
    let config = watcher::Config::default()
        .labels(PLUGIN_LABEL)
        .page_size(LIST_PAGE)
        .timeout(u32::try_from(limits.watch_timeout.as_secs().max(1)).unwrap_or(u32::MAX));
    let stream = watcher::watcher(api.clone(), config).default_backoff();
    let mut out = Outbox {
        status: StatusWrites::new(api, limits.clone()),
        events: EventWrites {
            recorder,
            limits,
            running: tokio::task::JoinSet::new(),
        },
    };
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut ctx = Ctx {
        registry: &registry,
        fetcher: &fetcher,
        leader: &leader,
        done: done_tx,
        generation: 0,
    };
    let mut stream = std::pin::pin!(stream);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut tracked: BTreeMap<String, Tracked> = BTreeMap::new();
    let mut relisted: BTreeSet<String> = BTreeSet::new();
    let mut published_as_leader = false;
    // The first list was seen; the registry is told once its mutators' loads have ended too
    // (pod mutation waits for that; a policy's pull, however slow, holds up no pod).
    let mut first_listed = false;
    loop {
        if first_listed && tracked.values().all(|t| !t.loading_mutator()) {
            first_listed = false;
            registry.first_load_done();
        }
        let retry_at = out.status.next_retry();
        let pull_at = tracked
            .values()
            .filter_map(|t| t.retry.as_ref().map(|r| r.at))
            .min();
        let event = tokio::select! {
            () = &mut shutdown => {
                for entry in tracked.values_mut() {
                    if let Some(loading) = entry.loading.take() {
                        loading.handle.abort();
                    }
                }
                return;
            }
            Some(done) = done_rx.recv() => {
                finished(&ctx, &mut out, &mut tracked, done);
                continue;
            }
            () = leader.acquired(), if !published_as_leader => {
                // Statuses reached while standing by were not written: write them now.
                published_as_leader = true;
                for (name, entry) in &tracked {
                    publish_status(&ctx, &mut out.status, entry, name);
                }
                continue;
            }
            Some(done) = out.status.running.join_next(), if !out.status.running.is_empty() => {
                out.status.finished(done, &leader);
                continue;
            }
            () = sleep_until(retry_at), if retry_at.is_some() => {
                out.status.retry_due(&leader);
                continue;
            }
            () = sleep_until(pull_at), if pull_at.is_some() => {
                retry_pulls(&mut ctx, &mut tracked);
                continue;
            }
            event = stream.next() => event,
        };
        match event {
            None => return,
            Some(Err(error)) => {
                tracing::warn!(%error, namespace, "plugin ConfigMap watch failed; retrying");
            }
            Some(Ok(WatchEvent::Init)) => relisted.clear(),
            Some(Ok(WatchEvent::InitApply(cm))) => {
                relisted.insert(cm.name_any());
                apply(&mut ctx, &mut out, &mut tracked, &cm).await;
            }
            Some(Ok(WatchEvent::InitDone)) => {
                // ConfigMaps deleted while the watch was down.
                let gone: Vec<String> = tracked
                    .keys()
                    .filter(|k| !relisted.contains(*k))
                    .cloned()
                    .collect();
                for name in gone {
                    forget(&registry, &mut out, &mut tracked, &name).await;
                }
                first_listed = true;
            }
            Some(Ok(WatchEvent::Apply(cm))) => apply(&mut ctx, &mut out, &mut tracked, &cm).await,
            Some(Ok(WatchEvent::Delete(cm))) => {
                forget(&registry, &mut out, &mut tracked, &cm.name_any()).await;
            }
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What `apply` needs besides the state it updates.
struct Ctx<'a> {
    registry: &'a Arc<PluginRegistry>,
    fetcher: &'a Arc<Fetcher>,
    /// Every replica loads plugins; only the leader writes their status and Events.
    leader: &'a crate::leader::Leadership,
    /// Where load tasks report.
    done: tokio::sync::mpsc::UnboundedSender<LoadDone>,
    /// The last load's generation (a load's report counts only while it is the latest).
    generation: u64,
}

/// The watcher's writes, each on a task of its own so none holds up the watch loop.
struct Outbox {
    status: StatusWrites,
    events: EventWrites,
}

/// A status a ConfigMap should show and does not yet, as far as the watcher knows.
struct Pending {
    status: StatusMeta,
    /// A write is running (its result decides what happens next).
    running: bool,
    /// When to try again after a failure (`None` while running or not failed).
    retry_at: Option<tokio::time::Instant>,
    backoff: Duration,
}

/// Status writes not yet landed, by ConfigMap name (one write per ConfigMap at a time).
struct StatusWrites {
    api: Api<ConfigMap>,
    limits: ApiLimits,
    pending: BTreeMap<String, Pending>,
    running: tokio::task::JoinSet<(String, StatusMeta, Result<(), kube::Error>)>,
}

impl StatusWrites {
    fn new(api: Api<ConfigMap>, limits: ApiLimits) -> StatusWrites {
        StatusWrites {
            api,
            limits,
            pending: BTreeMap::new(),
            running: tokio::task::JoinSet::new(),
        }
    }

    /// The ConfigMap `name` should show `status`: write it (now, or after a running write or
    /// a failed one's backoff).
    fn want(&mut self, name: &str, status: StatusMeta) {
        match self.pending.get_mut(name) {
            Some(p) => {
                p.status = status;
                // Idle (a standby's superseded write): start it; else the running write or
                // the backoff decides when.
                if !p.running && p.retry_at.is_none() {
                    self.start(name);
                }
            }
            None => {
                self.pending.insert(
                    name.to_string(),
                    Pending {
                        status,
                        running: false,
                        retry_at: None,
                        backoff: self.limits.retry,
                    },
                );
                self.start(name);
            }
        }
    }

    /// It shows what it should, or is gone: nothing to write.
    fn drop_pending(&mut self, name: &str) {
        self.pending.remove(name);
    }

    fn start(&mut self, name: &str) {
        let Some(p) = self.pending.get_mut(name) else {
            return;
        };
        p.running = true;
        p.retry_at = None;
        let (api, name, status) = (self.api.clone(), name.to_string(), p.status.clone());
        let limit = self.limits.call_timeout;
        self.running.spawn(async move {
            let patch = status.patch();
            let written = tokio::time::timeout(
                limit,
                api.patch(&name, &crate::writes::patch_params(), &Patch::Merge(&patch)),
            )
            .await
            .map_err(|_| timed_out(limit))
            .and_then(|r| r.map(|_| ()));
            (name, status, written)
        });
    }

    /// A write ended: done, superseded (write the newer status), or failed (retry later).
    fn finished(
        &mut self,
        done: Result<(String, StatusMeta, Result<(), kube::Error>), tokio::task::JoinError>,
        leader: &crate::leader::Leadership,
    ) {
        // A write task only ends by returning (nothing aborts them but dropping the set).
        let Ok((name, status, written)) = done else {
            return;
        };
        let Some(p) = self.pending.get_mut(&name) else {
            return;
        };
        p.running = false;
        match written {
            Ok(()) => {
                tracing::debug!(configmap = %name, state = status.state,
                    version = ?status.version, "plugin ConfigMap status written");
                if p.status == status {
                    self.pending.remove(&name);
                } else if leader.is_leader() {
                    self.start(&name);
                }
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {
                self.pending.remove(&name);
            }
            Err(error) => {
                let wait = p.backoff;
                p.backoff = (p.backoff * 2).min(self.limits.max_retry);
                p.retry_at = Some(tokio::time::Instant::now() + wait);
                tracing::warn!(%error, configmap = %name, state = status.state, retry_in = ?wait,
                    "cannot write the plugin status onto its ConfigMap; trying again");
            }
        }
    }

    /// When the next failed write is due again.
    fn next_retry(&self) -> Option<tokio::time::Instant> {
        self.pending.values().filter_map(|p| p.retry_at).min()
    }

    /// Starts the writes whose backoff is over (a standby leaves them to the leader).
    fn retry_due(&mut self, leader: &crate::leader::Leadership) {
        let now = tokio::time::Instant::now();
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.retry_at.is_some_and(|at| at <= now))
            .map(|(name, _)| name.clone())
            .collect();
        for name in due {
            if leader.is_leader() {
                self.start(&name);
            } else {
                self.pending.remove(&name);
            }
        }
    }
}

/// Event writes, bounded in time and in number at once.
struct EventWrites {
    recorder: Recorder,
    limits: ApiLimits,
    running: tokio::task::JoinSet<()>,
}

impl EventWrites {
    fn publish(&mut self, event: Event, reference: k8s_openapi::api::core::v1::ObjectReference) {
        while self.running.try_join_next().is_some() {}
        if self.running.len() >= EVENTS_IN_FLIGHT {
            tracing::warn!(reason = %event.reason, configmap = ?reference.name,
                "too many plugin Events being written; this one is dropped");
            return;
        }
        let (recorder, limit) = (self.recorder.clone(), self.limits.call_timeout);
        self.running.spawn(async move {
            let published = tokio::time::timeout(limit, recorder.publish(&event, &reference))
                .await
                .map_err(|_| timed_out(limit))
                .and_then(|r| r);
            if let Err(error) = published {
                tracing::warn!(%error, configmap = ?reference.name, "cannot record plugin Event");
            }
        });
    }
}

fn timed_out(limit: Duration) -> kube::Error {
    kube::Error::Service(Box::new(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer from the API server within {limit:?}"),
    )))
}

/// `client` with every request bounded by `limit`: a watch until its response headers (its
/// stream is the watcher's to time out), anything else until its whole body is read.
fn bounded(client: Client, limit: Duration) -> Client {
    let namespace = client.default_namespace().to_string();
    Client::new(Bounded { client, limit }, namespace)
}

#[derive(Clone)]
struct Bounded {
    client: Client,
    limit: Duration,
}

/// Whether a request is a watch (`?watch=true`, as kube-client sends it, or `watch=1`).
fn is_watch(uri: &http::Uri) -> bool {
    uri.query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

impl tower::Service<http::Request<kube::client::Body>> for Bounded {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Self::Response, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        // `Client::send` waits for its own readiness.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let (client, limit) = (self.client.clone(), self.limit);
        let watch = is_watch(request.uri());
        async move {
            let deadline = tokio::time::Instant::now() + limit;
            let response = tokio::time::timeout_at(deadline, client.send(request))
                .await
                .map_err(|_| timed_out(limit))??;
            if watch {
                return Ok(response);
            }
            let (parts, body) = response.into_parts();
            let bytes = tokio::time::timeout_at(deadline, body.collect())
                .await
                .map_err(|_| timed_out(limit))??
                .to_bytes();
            Ok(http::Response::from_parts(
                parts,
                kube::client::Body::from(bytes),
            ))
        }
        .boxed()
    }
}

/// The ConfigMap `name` is gone: unload what it served and lift what it blocked.
async fn forget(
    registry: &PluginRegistry,
    out: &mut Outbox,
    tracked: &mut BTreeMap<String, Tracked>,
    name: &str,
) {
    out.status.drop_pending(name);
    let Some(mut entry) = tracked.remove(name) else {
        return;
    };
    if let Some(blocked) = entry.blocked.take() {
        registry.unblock(&blocked).await;
    }
    // A load that swapped its plugin in before it was cancelled is removed too.
    let cancelled = cancel(&mut entry).await;
    let applied = entry.applied.map(|(a, _)| a.plugin);
    for plugin in applied.into_iter().chain(cancelled) {
        if registry.remove(&plugin).await {
            tracing::info!(%plugin, configmap = %name, "plugin unloaded");
        }
    }
}

/// Cancels the entry's load in flight and waits for it to end; the plugin name it was loading.
async fn cancel(entry: &mut Tracked) -> Option<String> {
    let loading = entry.loading.take()?;
    loading.handle.abort();
    // Its fetch or compile is dropped at its next await; a swap it began has ended.
    let _ = loading.handle.await;
    Some(loading.applied.plugin)
}

/// Loads again the components whose pull failed for a passing reason and whose wait is over.
fn retry_pulls(ctx: &mut Ctx<'_>, tracked: &mut BTreeMap<String, Tracked>) {
    let now = tokio::time::Instant::now();
    for (name, entry) in tracked.iter_mut() {
        if entry.loading.is_some() || entry.retry.as_ref().is_none_or(|r| r.at > now) {
            continue;
        }
        let Some(retry) = entry.retry.take() else {
            continue;
        };
        tracing::info!(configmap = %name, plugin = %retry.spec.name, "trying a failed plugin pull again");
        start_load(ctx, entry, name, retry.applied, retry.spec, retry.source);
        if let Some(loading) = entry.loading.as_mut() {
            loading.retry_backoff = retry.backoff;
        }
    }
}

/// A load task ended: record its outcome if it is still the ConfigMap's latest.
fn finished(
    ctx: &Ctx<'_>,
    out: &mut Outbox,
    tracked: &mut BTreeMap<String, Tracked>,
    done: LoadDone,
) {
    let Some(entry) = tracked.get_mut(&done.configmap) else {
        return;
    };
    // A report of a cancelled or superseded load: the latest one reports on its own.
    if entry
        .loading
        .as_ref()
        .is_none_or(|l| l.generation != done.generation)
    {
        return;
    }
    let Some(loading) = entry.loading.take() else {
        return;
    };
    let outcome = match &done.result {
        Ok(_) => Outcome::Loaded,
        Err((_, message)) => Outcome::Rejected(message.clone()),
    };
    // A registry that was down, slow or refusing may answer later: try again with backoff.
    entry.retry = match (&done.result, loading.retry) {
        (Err(("PullFailed", _)), Some((spec, source))) => {
            let wait = loading.retry_backoff;
            tracing::info!(configmap = %done.configmap, retry_in = ?wait, "plugin pull failed; trying again later");
            Some(PullRetry {
                at: tokio::time::Instant::now() + wait,
                backoff: (wait * 2).min(PULL_RETRY_MAX),
                applied: loading.applied.clone(),
                spec,
                source,
            })
        }
        _ => None,
    };
    // A rollout label edit reloads the same version: the Event says what it now does.
    let role = match &loading.applied.spec.rollout {
        spec::Rollout::Own => String::new(),
        spec::Rollout::ShadowOf(of) => format!(", as a shadow of policy {of} (never applied)"),
        spec::Rollout::Replaces(of) => format!(", answering for policy {of} (promoted over it)"),
    };
    entry.applied = Some((loading.applied, outcome));
    if !ctx.leader.is_leader() {
        return;
    }
    publish_status(ctx, &mut out.status, entry, &done.configmap);
    let attempt = done.result.map(|sha| format!("loaded version {sha}{role}"));
    publish_event(out, &entry.seen, attempt);
}

/// The Event of a load attempt on its ConfigMap.
fn publish_event(
    out: &mut Outbox,
    seen: &ConfigMap,
    attempt: Result<String, (&'static str, String)>,
) {
    let (type_, reason, note) = match attempt {
        Ok(note) => (EventType::Normal, "PluginLoaded", note),
        Err((reason, message)) => (
            EventType::Warning,
            reason,
            format!("{message}; the last good version (if any) keeps serving"),
        ),
    };
    let note = one_line_capped(&note, NOTE_CAP);
    let event = Event {
        type_,
        reason: reason.into(),
        action: crate::events::action("LoadPlugin", &note),
        note: Some(note),
        secondary: None,
    };
    out.events.publish(event, seen.object_ref(&()));
}

/// Has the ConfigMap's status keys written if it does not show them yet (leader only).
fn publish_status(ctx: &Ctx<'_>, writes: &mut StatusWrites, entry: &Tracked, cm_name: &str) {
    if !ctx.leader.is_leader() {
        return;
    }
    let Some(outcome) = entry.outcome() else {
        return;
    };
    let serving = entry
        .plugin()
        .and_then(|p| ctx.registry.status_of(p))
        .and_then(|s| s.sha256);
    let status = StatusMeta::new(&outcome, serving.as_deref());
    if status.shown_by(&entry.seen) {
        writes.drop_pending(cm_name);
        return;
    }
    writes.want(cm_name, status);
}

async fn apply(
    ctx: &mut Ctx<'_>,
    out: &mut Outbox,
    tracked: &mut BTreeMap<String, Tracked>,
    cm: &ConfigMap,
) {
    let cm_name = cm.name_any();
    let entry = tracked.entry(cm_name.clone()).or_default();
    // What the Event refers to: the ConfigMap as last seen (its uid and resourceVersion too).
    entry.seen = ConfigMap {
        metadata: ObjectMeta {
            labels: cm.metadata.labels.clone(),
            annotations: cm.metadata.annotations.clone(),
            name: cm.metadata.name.clone(),
            namespace: cm.metadata.namespace.clone(),
            uid: cm.metadata.uid.clone(),
            resource_version: cm.metadata.resource_version.clone(),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let attempt = match spec::from_configmap(cm) {
        Err(e) => {
            let digest = input_digest(cm);
            if entry.invalid.as_ref().map(|(d, _)| d) == Some(&digest) {
                None
            } else {
                // The newest content is invalid: a load of older content no longer counts.
                entry.retry = None;
                if let Some(plugin) = cancel(entry).await
                    && entry.plugin() != Some(plugin.as_str())
                {
                    ctx.registry.remove(&plugin).await;
                }
                entry.invalid = Some((digest, e.to_string()));
                let blocks = spec::fail_closed_target(cm);
                if let Some(previous) = entry.blocked.take()
                    && blocks.as_ref().map(|(n, _)| n) != Some(&previous)
                {
                    ctx.registry.unblock(&previous).await;
                }
                if let Some((name, task_types)) = blocks {
                    let cause = format!("its ConfigMap {cm_name} is invalid: {e}");
                    ctx.registry.fail_closed(&name, task_types, &cause).await;
                    entry.blocked = Some(name);
                }
                Some(Err(("InvalidPluginConfigMap", e.to_string())))
            }
        }
        Ok((spec, source)) => {
            // A valid spec replaces any invalid one: its outcome is the ConfigMap's again.
            entry.invalid = None;
            if let Some(blocked) = entry.blocked.take() {
                ctx.registry.unblock(&blocked).await;
            }
            let next = Applied {
                plugin: spec.name.clone(),
                spec: spec.clone(),
                source: source_digest(&source),
            };
            let same_as_applied = entry.applied.as_ref().map(|(a, _)| a) == Some(&next);
            let same_as_loading = entry.loading.as_ref().map(|l| &l.applied) == Some(&next);
            if !same_as_loading {
                if let Some(plugin) = cancel(entry).await
                    && plugin != next.plugin
                    && entry.plugin() != Some(plugin.as_str())
                {
                    ctx.registry.remove(&plugin).await;
                }
                if !same_as_applied {
                    // A ConfigMap renaming its plugin unloads the old name.
                    if let Some(previous) = entry.plugin()
                        && previous != next.plugin
                    {
                        ctx.registry.remove(previous).await;
                    }
                    start_load(ctx, entry, &cm_name, next, spec, source);
                }
            }
            // The outcome is published when the load ends (see `finished`).
            None
        }
    };
    if !ctx.leader.is_leader() {
        return;
    }
    // Status first: it is what `kubectl get` shows, the Event only explains it.
    publish_status(ctx, &mut out.status, entry, &cm_name);
    if let Some(attempt) = attempt {
        publish_event(out, &entry.seen, attempt);
    }
}

/// Starts loading `source` for `spec` on a task of its own: pulls and compiles never hold up
/// the watch loop, other plugins' loads, or reconciles.
fn start_load(
    ctx: &mut Ctx<'_>,
    entry: &mut Tracked,
    cm_name: &str,
    applied: Applied,
    spec: PluginSpec,
    source: ComponentSource,
) {
    ctx.generation += 1;
    let generation = ctx.generation;
    let (registry, fetcher, done) = (ctx.registry.clone(), ctx.fetcher.clone(), ctx.done.clone());
    let configmap = cm_name.to_string();
    let retry =
        matches!(source, ComponentSource::Image { .. }).then(|| (spec.clone(), source.clone()));
    entry.retry = None;
    let handle = tokio::spawn(async move {
        let result = match fetcher.fetch(&spec, &source).await {
            Ok(fetched) => {
                registry
                    .apply_from(spec, fetched.bytes, fetched.origin)
                    .await
            }
            Err(e) => Err(registry.refuse(spec, e).await),
        };
        let result = result.map_err(|e| (e.reason(), e.to_string()));
        // The loop is gone when the watcher stopped: nothing to tell.
        let _ = done.send(LoadDone {
            configmap,
            generation,
            result,
        });
    });
    entry.loading = Some(Loading {
        generation,
        applied,
        handle,
        retry,
        retry_backoff: PULL_RETRY,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines() {
        let sha = "0123456789abcdef".repeat(4);
        let loaded = StatusMeta::new(&Outcome::Loaded, Some(&sha));
        assert_eq!(loaded.state, "Loaded");
        assert_eq!(loaded.version.as_deref(), Some("0123456789ab"));
        assert_eq!(loaded.note, format!("loaded version {sha}"));
        let refused = StatusMeta::new(
            &Outcome::Rejected("plugin p: not a valid component:\n  bad magic".into()),
            Some(&sha),
        );
        assert_eq!(refused.state, "Rejected");
        assert_eq!(refused.version.as_deref(), Some("0123456789ab"));
        assert_eq!(
            refused.note,
            "refused: plugin p: not a valid component: bad magic; serving 0123456789ab"
        );
        let long = StatusMeta::new(&Outcome::Rejected("x".repeat(5000)), None);
        assert!(long.note.len() <= STATUS_CAP, "{}", long.note.len());
        assert!(
            long.note.ends_with("xx; no version serves"),
            "{}",
            long.note
        );
        assert_eq!(long.version, None);
        assert_eq!(
            long.patch()["metadata"]["labels"][VERSION_LABEL],
            json!(null)
        );
    }

    #[test]
    fn shown_by_compares_the_three_keys() {
        let status = StatusMeta::new(&Outcome::Loaded, Some(&"ab".repeat(32)));
        let mut cm = ConfigMap::default();
        assert!(!status.shown_by(&cm));
        cm.metadata.labels = Some(BTreeMap::from([
            (STATE_LABEL.to_string(), "Loaded".to_string()),
            (VERSION_LABEL.to_string(), "abababababab".to_string()),
        ]));
        assert!(!status.shown_by(&cm));
        cm.metadata.annotations = Some(BTreeMap::from([(
            STATUS_ANNOTATION.to_string(),
            status.note.clone(),
        )]));
        assert!(status.shown_by(&cm));
        let none = StatusMeta::new(&Outcome::Rejected("x".into()), None);
        cm.labels_mut()
            .insert(STATE_LABEL.into(), "Rejected".into());
        cm.annotations_mut()
            .insert(STATUS_ANNOTATION.into(), none.note.clone());
        // The version label must be gone too.
        assert!(!none.shown_by(&cm));
        cm.labels_mut().remove(VERSION_LABEL);
        assert!(none.shown_by(&cm));
    }

    #[test]
    fn input_digest_sees_data_and_binary_data_only() {
        let spec = PluginSpec::new("p", spec::PluginKind::Policy);
        let cm = spec::to_configmap(&spec, vec![1, 2], Some("ns"));
        let mut labelled = cm.clone();
        labelled
            .labels_mut()
            .insert(STATE_LABEL.into(), "Rejected".into());
        assert_eq!(input_digest(&cm), input_digest(&labelled));
        let mut edited = cm.clone();
        edited
            .data
            .as_mut()
            .unwrap()
            .insert("kind".into(), "scheduler".into());
        assert_ne!(input_digest(&cm), input_digest(&edited));
        let mut bytes = cm.clone();
        bytes.binary_data = Some(BTreeMap::from([(
            spec::WASM_KEY.to_string(),
            k8s_openapi::ByteString(vec![1, 3]),
        )]));
        assert_ne!(input_digest(&cm), input_digest(&bytes));
    }
}
