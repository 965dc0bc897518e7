//! Plugin ConfigMaps against the in-process sandbox: upload, replace (hot swap), garbage upload
//! (last good version stays, Warning Event names the cause), fixed upload, delete (unload), and
//! the status labels and annotation the watcher writes back onto each ConfigMap.

use std::sync::Arc;
use std::time::{Duration, Instant};

use diorch::plugin::registry::PluginRegistry;
use diorch::plugin::spec::{self, PluginKind, PluginSpec};
use diorch::plugin::{HostConfig, NativePolicy, PluginHost};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

fn wasm(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/plugins")
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; run scripts/build-plugins.sh first",
            path.display()
        )
    })
}

/// (state label, version label, status annotation) of a ConfigMap.
async fn shown(cms: &Api<ConfigMap>, name: &str) -> (Option<String>, Option<String>, String) {
    let cm = cms.get(name).await.unwrap();
    let labels = cm.metadata.labels.unwrap_or_default();
    (
        labels.get(spec::STATE_LABEL).cloned(),
        labels.get(spec::VERSION_LABEL).cloned(),
        cm.metadata
            .annotations
            .unwrap_or_default()
            .get(spec::STATUS_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
    )
}

/// Waits until the ConfigMap shows `state` and `version`, and returns its status annotation.
async fn until_shown(
    cms: &Api<ConfigMap>,
    name: &str,
    state: &str,
    version: Option<&str>,
) -> String {
    until(
        &format!("{name} to show {state} {version:?}"),
        Duration::from_secs(10),
        async || {
            let (s, v, note) = shown(cms, name).await;
            (s.as_deref() == Some(state) && v.as_deref() == version).then_some(note)
        },
    )
    .await
}

/// Replaces the plugin ConfigMap's binary data. The watcher labels the same ConfigMap after
/// every load, so a replace can meet a newer version (409, as on a real API server): read again
/// and retry.
async fn set_binary(
    cms: &Api<ConfigMap>,
    data: Option<std::collections::BTreeMap<String, k8s_openapi::ByteString>>,
) {
    for _ in 0..20 {
        let mut current = cms.get("plugin-packer").await.unwrap();
        current.binary_data = data.clone();
        match cms
            .replace("plugin-packer", &PostParams::default(), &current)
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => panic!("replace: {e}"),
        }
    }
    panic!("the ConfigMap kept changing");
}

async fn until<T>(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(started.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmaps_load_swap_keep_last_good_and_unload() {
    let sandbox = diorch_sandbox::launch(diorch_sandbox::SandboxOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        kubeconfig_out: None,
        cluster: None,
        auth: Default::default(),
    })
    .await
    .unwrap();
    let client = sandbox.client().unwrap();
    let registry = Arc::new(PluginRegistry::new(
        PluginHost::new(HostConfig::default()).unwrap(),
        NativePolicy::BinPack,
    ));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let watcher = tokio::spawn(diorch::controller::plugins::run(
        client.clone(),
        "default",
        registry.clone(),
        diorch::leader::Leadership::always(),
        async move {
            let _ = stop_rx.await;
        },
    ));

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let spec = PluginSpec::new("packer", PluginKind::Policy);
    let cm = spec::to_configmap(&spec, wasm("binpack"), Some("default"));
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let first = until("the first version", Duration::from_secs(10), async || {
        registry
            .wasm_policy("packer")
            .map(|p| p.sha256().to_string())
    })
    .await;
    assert_eq!(
        registry.policy(Some("packer")).describe(),
        format!("packer@{}", &first[..12])
    );
    let note = until_shown(&cms, "plugin-packer", "Loaded", Some(&first[..12])).await;
    assert_eq!(note, format!("loaded version {first}"));

    // Replace: the next call uses the new version within 5 s (compile included).
    let replaced = spec::to_configmap(&spec, wasm("spread"), Some("default"));
    let started = Instant::now();
    set_binary(&cms, replaced.binary_data.clone()).await;
    let second = until("the second version", Duration::from_secs(5), async || {
        registry
            .wasm_policy("packer")
            .map(|p| p.sha256().to_string())
            .filter(|s| *s != first)
    })
    .await;
    let swap = started.elapsed();
    // Back to the first bytes: compiled already, so this measures the swap path itself.
    let started = Instant::now();
    set_binary(&cms, cm.binary_data.clone()).await;
    until(
        "the first version again",
        Duration::from_secs(5),
        async || {
            registry
                .wasm_policy("packer")
                .filter(|p| p.sha256() == first)
        },
    )
    .await;
    println!(
        "hot swap: update to first call on the new version {swap:?} (with compile), {:?} (cached)",
        started.elapsed()
    );

    // Garbage: refused, the last good version stays, a Warning Event names the cause.
    set_binary(
        &cms,
        Some(
            [(
                spec::WASM_KEY.to_string(),
                k8s_openapi::ByteString(b"garbage".to_vec()),
            )]
            .into(),
        ),
    )
    .await;
    let warning = until("a Warning Event", Duration::from_secs(10), async || {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("plugin-packer")
            })
    })
    .await;
    assert_eq!(warning.reason.as_deref(), Some("CompileError"));
    assert!(
        warning
            .note
            .as_deref()
            .unwrap()
            .contains("not a valid component"),
        "{warning:?}"
    );
    assert_eq!(registry.wasm_policy("packer").unwrap().sha256(), first);
    assert_ne!(second, first);
    let status = registry.status();
    assert!(!status[0].healthy && status[0].last_error.is_some());
    // Rejected, while the old version (still labelled) serves.
    let note = until_shown(&cms, "plugin-packer", "Rejected", Some(&first[..12])).await;
    assert!(
        note.starts_with("refused: plugin packer: not a valid component")
            && note.ends_with(&format!("; serving {}", &first[..12])),
        "{note}"
    );

    // A fixed upload: loaded and labelled, and the watcher's own writes reloaded nothing.
    set_binary(&cms, replaced.binary_data.clone()).await;
    let note = until_shown(&cms, "plugin-packer", "Loaded", Some(&second[..12])).await;
    assert_eq!(note, format!("loaded version {second}"));
    assert_eq!(registry.wasm_policy("packer").unwrap().sha256(), second);
    let settled = cms.get("plugin-packer").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = cms.get("plugin-packer").await.unwrap();
    assert_eq!(
        later.metadata.resource_version, settled.metadata.resource_version,
        "the status writes loop"
    );
    let status = registry.status_of("packer").unwrap();
    // binpack, spread, binpack, spread loaded; the garbage refused; nothing else.
    assert_eq!((status.loads, status.failed_loads), (4, 1), "{status:?}");

    // An invalid spec is reported too.
    let mut bad = spec::to_configmap(
        &PluginSpec::new("bad", PluginKind::Policy),
        wasm("binpack"),
        Some("default"),
    );
    bad.data
        .as_mut()
        .unwrap()
        .insert("kind".into(), "scheduler".into());
    cms.create(&PostParams::default(), &bad).await.unwrap();
    let note = until_shown(&cms, "plugin-bad", "Rejected", None).await;
    assert!(
        note.starts_with("refused: data[\"kind\"]") && note.ends_with("; no version serves"),
        "{note}"
    );
    until(
        "an InvalidPluginConfigMap Event",
        Duration::from_secs(10),
        async || {
            events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("InvalidPluginConfigMap")
                        && e.note.as_deref().is_some_and(|n| n.contains("kind"))
                })
        },
    )
    .await;

    // Delete: unloaded, the native policy serves.
    cms.delete("plugin-packer", &DeleteParams::default())
        .await
        .unwrap();
    until("unload", Duration::from_secs(10), async || {
        registry.wasm_policy("packer").is_none().then_some(())
    })
    .await;
    assert_eq!(
        registry.policy(Some("packer")).describe(),
        "builtin-binpack"
    );

    let _ = stop_tx.send(());
    watcher.await.unwrap();
    sandbox.stop().await;
}

/// A mutator ConfigMap that asks for more than it grants is Rejected before any pod is touched,
/// its status naming the field and the grant; granted, it loads; an unknown grant is refused
/// naming `data.grants` while the granted version keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutator_configmap_without_the_grants_its_change_needs_is_rejected() {
    use kube::api::{Patch, PatchParams};
    let sandbox = diorch_sandbox::launch(diorch_sandbox::SandboxOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        kubeconfig_out: None,
        cluster: None,
        auth: Default::default(),
    })
    .await
    .unwrap();
    let client = sandbox.client().unwrap();
    let registry = Arc::new(PluginRegistry::new(
        PluginHost::new(HostConfig::default()).unwrap(),
        NativePolicy::BinPack,
    ));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let watcher = tokio::spawn(diorch::controller::plugins::run(
        client.clone(),
        "default",
        registry.clone(),
        diorch::leader::Leadership::always(),
        async move {
            let _ = stop_rx.await;
        },
    ));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    // The ConfigMap: privileged, hostPath /, hostNetwork, another service account.
    let mut spec = PluginSpec::new("owner", PluginKind::Mutator);
    spec.config = "privileged,host-path,host-network,service-account".into();
    let cm = spec::to_configmap(&spec, wasm("hostile_mutator"), Some("default"));
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let note = until_shown(&cms, "plugin-owner", "Rejected", None).await;
    for needle in [
        "refused: plugin owner made a change it is not granted: it set spec.containers[di-container].securityContext.privileged, which needs the grant privileged in its ConfigMap (data.grants)",
        "hostPath (set spec.volumes[host-root].hostPath)",
        "hostNetwork (set spec.hostNetwork)",
        "serviceAccountName (set spec.serviceAccountName)",
        "; no version serves",
    ] {
        assert!(note.contains(needle), "{needle}: {note}");
    }
    let (ctx, pod) = diorch::plugin::sample::pod("learner");
    // A Fail mutator (the default) that did not load blocks its pods: fail closed.
    let blocked = registry.mutate_pod(&ctx, pod.clone()).await;
    assert!(
        matches!(blocked, Err(diorch::plugin::PluginError::NotLoaded { .. })),
        "{blocked:?}"
    );

    // Granted: loaded.
    let params = PatchParams::default();
    let grants = serde_json::json!({"data": {"grants": "privileged,hostPath,hostNetwork,serviceAccountName"}});
    cms.patch("plugin-owner", &params, &Patch::Merge(&grants))
        .await
        .unwrap();
    let loaded = until("the granted version", Duration::from_secs(10), async || {
        registry.status_of("owner").and_then(|s| s.sha256)
    })
    .await;
    until_shown(&cms, "plugin-owner", "Loaded", Some(&loaded[..12])).await;
    let out = registry.mutate_pod(&ctx, pod.clone()).await.unwrap();
    assert_eq!(out.spec.unwrap().host_network, Some(true));

    // An unknown grant: the ConfigMap is invalid, named by its key; the loaded version stays.
    let unknown = serde_json::json!({"data": {"grants": "privileged,root"}});
    cms.patch("plugin-owner", &params, &Patch::Merge(&unknown))
        .await
        .unwrap();
    let note = until_shown(&cms, "plugin-owner", "Rejected", Some(&loaded[..12])).await;
    assert!(
        note.starts_with(
            "refused: data[\"grants\"]: unknown grant \"root\"; grants are privileged,"
        ),
        "{note}"
    );

    let _ = stop_tx.send(());
    watcher.await.unwrap();
    sandbox.stop().await;
}

/// Replaces `data` and `binaryData` of the ConfigMap `name`, retrying on conflicts (the watcher
/// writes the same ConfigMap's status).
async fn set_content(cms: &Api<ConfigMap>, name: &str, from: &ConfigMap) {
    for _ in 0..20 {
        let mut current = cms.get(name).await.unwrap();
        current.data = from.data.clone();
        current.binary_data = from.binary_data.clone();
        match cms.replace(name, &PostParams::default(), &current).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => panic!("replace: {e}"),
        }
    }
    panic!("the ConfigMap kept changing");
}

/// Fail closed: after a restart pod mutations wait for the watcher's first list; a mutator with
/// failurePolicy Fail that does not load (a bad component, an invalid ConfigMap) refuses the
/// pods of its task types until fixed or deleted; a memory cap over the host's budget is
/// refused with a status saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_mutators_block_their_pods_and_budgets_are_enforced() {
    use diorch::plugin::spec::FailurePolicy;
    use diorch::plugin::{NativePolicy, sample};

    let sandbox = diorch_sandbox::launch(diorch_sandbox::SandboxOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        kubeconfig_out: None,
        cluster: None,
        auth: Default::default(),
    })
    .await
    .unwrap();
    let client = sandbox.client().unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // The default cap fits the budget: (32 + 4 MiB of host copies) x 2 calls <= 100 MiB.
    let host = PluginHost::new(HostConfig {
        max_concurrent_calls: 2,
        memory_budget: 100 << 20,
        limits: diorch::plugin::Limits {
            memory_bytes: 32 << 20,
            ..diorch::plugin::Limits::default()
        },
        ..HostConfig::default()
    })
    .unwrap();
    let registry = Arc::new(PluginRegistry::new(host, NativePolicy::BinPack).awaiting_first_load());

    // Present before the operator (re)starts: a Fail mutator for learners that cannot load.
    let mut envs = PluginSpec::new("envs", PluginKind::Mutator);
    envs.task_types = vec!["learner".into()];
    assert_eq!(envs.failure_policy, FailurePolicy::Fail);
    let broken = spec::to_configmap(&envs, b"garbage".to_vec(), Some("default"));
    cms.create(&PostParams::default(), &broken).await.unwrap();

    // A pod created before the watcher has listed waits for it, then is refused.
    let (learner, pod) = sample::pod("learner");
    let pending = tokio::spawn({
        let (registry, learner, pod) = (registry.clone(), learner.clone(), pod.clone());
        async move { registry.mutate_pod(&learner, pod).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !pending.is_finished(),
        "a mutation must wait for the first load"
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let watcher = tokio::spawn(diorch::controller::plugins::run(
        client.clone(),
        "default",
        registry.clone(),
        diorch::leader::Leadership::always(),
        async move {
            let _ = stop_rx.await;
        },
    ));
    let err = pending.await.unwrap().unwrap_err();
    assert_eq!(err.reason(), "NotLoaded", "{err}");
    assert!(
        err.to_string().contains("plugin envs") && err.to_string().contains("learner"),
        "{err}"
    );
    // Other task types are served.
    let (collector, collector_pod) = sample::pod("collector");
    registry
        .mutate_pod(&collector, collector_pod.clone())
        .await
        .unwrap();

    // Fixed: learners are mutated again.
    let fixed = spec::to_configmap(&envs, wasm("accel_env"), Some("default"));
    set_content(&cms, "plugin-envs", &fixed).await;
    until("the fixed mutator", Duration::from_secs(10), async || {
        registry.mutate_pod(&learner, pod.clone()).await.ok()
    })
    .await;

    // An invalid ConfigMap of a Fail mutator blocks too (it cannot say what it would do), and
    // deleting it lifts the block.
    let mut strict = PluginSpec::new("strict", PluginKind::Mutator);
    strict.task_types = vec!["collector".into()];
    let mut invalid = spec::to_configmap(&strict, wasm("accel_env"), Some("default"));
    invalid
        .data
        .as_mut()
        .unwrap()
        .insert("order".into(), "first".into());
    cms.create(&PostParams::default(), &invalid).await.unwrap();
    let err = until(
        "the invalid mutator to block",
        Duration::from_secs(10),
        async || {
            registry
                .mutate_pod(&collector, collector_pod.clone())
                .await
                .err()
        },
    )
    .await;
    assert!(
        err.to_string().contains("plugin strict") && err.to_string().contains("data[\"order\"]"),
        "{err}"
    );
    cms.delete("plugin-strict", &DeleteParams::default())
        .await
        .unwrap();
    until("the block to lift", Duration::from_secs(10), async || {
        registry
            .mutate_pod(&collector, collector_pod.clone())
            .await
            .ok()
    })
    .await;

    // (64 MiB + 4 MiB of host copies) x 2 calls > the 100 MiB budget: refused, and the
    // ConfigMap says why.
    let mut greedy = PluginSpec::new("greedy", PluginKind::Policy);
    greedy.memory_bytes = Some(64 << 20);
    let cm = spec::to_configmap(&greedy, wasm("binpack"), Some("default"));
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let note = until_shown(&cms, "plugin-greedy", "Rejected", None).await;
    assert!(
        note.contains("refused at load: memoryMiB 64")
            && note.contains("more than the plugin memory budget of 100 MiB"),
        "{note}"
    );

    let _ = stop_tx.send(());
    watcher.await.unwrap();
    sandbox.stop().await;
}

/// An HTTP proxy to the sandbox that stops answering requests of a kind, as an API server (or
/// the network to it) that stalls: a stalled request never gets an answer, not even after the
/// stall is lifted. Watch streams can be cut: they deliver nothing more, not even their end.
struct Stall {
    url: String,
    state: Arc<StallState>,
}

struct StallState {
    client: kube::Client,
    patches: std::sync::atomic::AtomicBool,
    lists: std::sync::atomic::AtomicBool,
    /// Requests that met a stall.
    stalled: std::sync::atomic::AtomicUsize,
    /// Watch streams are numbered as they start; those below this are cut.
    watches: std::sync::atomic::AtomicU64,
    cut_below: std::sync::atomic::AtomicU64,
}

impl Stall {
    async fn start(client: kube::Client) -> Stall {
        let state = Arc::new(StallState {
            client,
            patches: Default::default(),
            lists: Default::default(),
            stalled: Default::default(),
            watches: Default::default(),
            cut_below: Default::default(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Stall { url, state }
    }

    fn client(&self) -> kube::Client {
        diorch_sandbox::client_for(&self.url).unwrap()
    }

    fn stall_patches(&self, on: bool) {
        self.state
            .patches
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }

    fn stall_lists(&self, on: bool) {
        self.state
            .lists
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }

    fn stalled(&self) -> usize {
        self.state.stalled.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every watch stream open now goes silent for good (a dead connection).
    fn cut_watches(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.state
            .cut_below
            .store(self.state.watches.load(SeqCst), SeqCst);
    }
}

async fn forward(
    axum::extract::State(state): axum::extract::State<Arc<StallState>>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    use futures::StreamExt as _;
    use http_body_util::BodyExt as _;
    use std::sync::atomic::Ordering::SeqCst;
    let (parts, body) = request.into_parts();
    let watch = parts.uri.query().is_some_and(|q| q.contains("watch=true"));
    let stall = (parts.method == http::Method::PATCH && state.patches.load(SeqCst))
        || (parts.method == http::Method::GET
            && !watch
            && parts.uri.path().contains("/configmaps")
            && state.lists.load(SeqCst));
    if stall {
        state.stalled.fetch_add(1, SeqCst);
        std::future::pending::<()>().await;
    }
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let request = http::Request::from_parts(parts, kube::client::Body::from(body.to_vec()));
    let response = match state.client.send(request).await {
        Ok(response) => response,
        Err(e) => return (http::StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    if !watch {
        return response.map(axum::body::Body::new);
    }
    let number = state.watches.fetch_add(1, SeqCst);
    let (parts, body) = response.into_parts();
    let frames = futures::stream::unfold(body.into_data_stream(), move |mut inner| {
        let state = state.clone();
        async move {
            let item = inner.next().await;
            if number < state.cut_below.load(SeqCst) {
                std::future::pending::<()>().await;
            }
            item.map(|item| (item, inner))
        }
    });
    http::Response::from_parts(parts, axum::body::Body::from_stream(frames))
}

/// Short bounds, so a stall shows within the test.
fn short_limits() -> diorch::controller::plugins::ApiLimits {
    diorch::controller::plugins::ApiLimits {
        call_timeout: Duration::from_secs(1),
        watch_timeout: Duration::from_secs(2),
        retry: Duration::from_millis(100),
        max_retry: Duration::from_millis(500),
    }
}

/// A sandbox, a stalling proxy in front of it, and a registry fed by a watcher that reaches the
/// API server through the proxy only (stopped when the returned sender drops).
async fn behind_a_stall() -> (
    diorch_sandbox::RunningSandbox,
    Stall,
    Arc<PluginRegistry>,
    tokio::sync::oneshot::Sender<()>,
) {
    let sandbox = diorch_sandbox::launch(diorch_sandbox::SandboxOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        kubeconfig_out: None,
        cluster: None,
        auth: Default::default(),
    })
    .await
    .unwrap();
    let stall = Stall::start(sandbox.client().unwrap()).await;
    let registry = Arc::new(PluginRegistry::new(
        PluginHost::new(HostConfig::default()).unwrap(),
        NativePolicy::BinPack,
    ));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(diorch::controller::plugins::run_with(
        stall.client(),
        "default",
        registry.clone(),
        fetcher(&stall.client()),
        diorch::leader::Leadership::always(),
        short_limits(),
        async move {
            let _ = stopped.await;
        },
    ));
    (sandbox, stall, registry, stop)
}

/// The default component fetcher of a watcher of "default".
fn fetcher(client: &kube::Client) -> Arc<diorch::plugin::fetch::Fetcher> {
    Arc::new(
        diorch::plugin::fetch::Fetcher::for_namespace(
            client.clone(),
            "default",
            Duration::from_secs(10),
        )
        .unwrap(),
    )
}

async fn upload(cms: &Api<ConfigMap>, name: &str, component: &str) {
    let spec = PluginSpec::new(name, PluginKind::Policy);
    let cm = spec::to_configmap(&spec, wasm(component), Some("default"));
    cms.create(&PostParams::default(), &cm).await.unwrap();
}

async fn until_loaded(registry: &PluginRegistry, name: &str) -> String {
    until(
        &format!("plugin {name} loaded"),
        Duration::from_secs(20),
        async || registry.wasm_policy(name).map(|p| p.sha256().to_string()),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_writes_that_stall_hold_up_no_load_and_land_once_the_api_server_answers() {
    let (sandbox, stall, registry, _stop) = behind_a_stall().await;
    let cms: Api<ConfigMap> = Api::namespaced(sandbox.client().unwrap(), "default");
    stall.stall_patches(true);
    upload(&cms, "packer", "binpack").await;
    let packer = until_loaded(&registry, "packer").await;
    until(
        "a status write to stall",
        Duration::from_secs(20),
        async || (stall.stalled() >= 1).then_some(()),
    )
    .await;
    // The watch loop is not waiting on that write: the next upload loads.
    upload(&cms, "spreader", "spread").await;
    let spreader = until_loaded(&registry, "spreader").await;
    // Written once the API server answers again, without any new event on the ConfigMaps.
    stall.stall_patches(false);
    until_shown(&cms, "plugin-packer", "Loaded", Some(&packer[..12])).await;
    until_shown(&cms, "plugin-spreader", "Loaded", Some(&spreader[..12])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_that_stalls_is_given_up_and_the_watcher_lists_again() {
    let sandbox = diorch_sandbox::launch(diorch_sandbox::SandboxOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        kubeconfig_out: None,
        cluster: None,
        auth: Default::default(),
    })
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(sandbox.client().unwrap(), "default");
    upload(&cms, "packer", "binpack").await;
    let stall = Stall::start(sandbox.client().unwrap()).await;
    stall.stall_lists(true);
    let registry = Arc::new(PluginRegistry::new(
        PluginHost::new(HostConfig::default()).unwrap(),
        NativePolicy::BinPack,
    ));
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(diorch::controller::plugins::run_with(
        stall.client(),
        "default",
        registry.clone(),
        fetcher(&stall.client()),
        diorch::leader::Leadership::always(),
        short_limits(),
        async move {
            let _ = stopped.await;
        },
    ));
    until(
        "the first list to stall",
        Duration::from_secs(20),
        async || (stall.stalled() >= 1).then_some(()),
    )
    .await;
    stall.stall_lists(false);
    let packer = until_loaded(&registry, "packer").await;
    until_shown(&cms, "plugin-packer", "Loaded", Some(&packer[..12])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_goes_silent_is_taken_for_dead_and_watched_again() {
    let (sandbox, stall, registry, _stop) = behind_a_stall().await;
    let cms: Api<ConfigMap> = Api::namespaced(sandbox.client().unwrap(), "default");
    upload(&cms, "packer", "binpack").await;
    until_loaded(&registry, "packer").await;
    // The open watch delivers nothing more, not even its end (the server's close is lost).
    stall.cut_watches();
    upload(&cms, "spreader", "spread").await;
    // Noticed within the watch timeout (2 s) + 5 s: watched again, the upload is seen.
    until_loaded(&registry, "spreader").await;
}

/// An in-process sandbox on a free loopback port.
async fn launch() -> diorch_sandbox::RunningSandbox {
    diorch_sandbox::launch(diorch_sandbox::SandboxOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        kubeconfig_out: None,
        cluster: None,
        auth: Default::default(),
    })
    .await
    .unwrap()
}

/// A registry fed by a watcher of "default" that fetches with `fetcher`, as the operator's
/// (pod mutations wait for the first list's mutators); it runs until the returned sender is
/// dropped.
fn watch_with(
    client: &kube::Client,
    fetcher: diorch::plugin::fetch::Fetcher,
) -> (Arc<PluginRegistry>, tokio::sync::oneshot::Sender<()>) {
    let registry = Arc::new(
        PluginRegistry::new(
            PluginHost::new(HostConfig::default()).unwrap(),
            NativePolicy::BinPack,
        )
        .awaiting_first_load(),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(diorch::controller::plugins::run_with(
        client.clone(),
        "default",
        registry.clone(),
        Arc::new(fetcher),
        diorch::leader::Leadership::always(),
        diorch::controller::plugins::ApiLimits::default(),
        async move {
            let _ = stopped.await;
        },
    ));
    (registry, stop)
}

/// A pull from a registry that accepts connections and never answers runs on a task of its
/// own: another plugin's ConfigMap loads meanwhile, and reconciles (the registry's policy
/// lookup) are not held up. The stalled one is refused by its pull deadline, with a Warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_that_never_answers_holds_up_no_other_plugin() {
    use diorch::oci;
    let sandbox = launch().await;
    let client = sandbox.client().unwrap();
    // The kernel completes connections to a listener that never accepts: a registry that hangs.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host = silent.local_addr().unwrap().to_string();
    // Long enough to tell "waited for the stalled pull" from "did not" below.
    let pull_timeout = Duration::from_secs(8);
    let client_oci = oci::RegistryClient::new(oci::Options {
        insecure_registries: vec![host.clone()],
        ..oci::Options::default()
    })
    .unwrap();
    let mut fetcher = diorch::plugin::fetch::Fetcher::for_namespace(
        client.clone(),
        "default",
        Duration::from_secs(10),
    )
    .unwrap();
    fetcher.puller = oci::Puller::new(
        client_oci,
        oci::PullLimits {
            timeout: pull_timeout,
            ..oci::PullLimits::default()
        },
        None,
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let stalled = spec::to_configmap_from(
        &PluginSpec::new("stalled", PluginKind::Policy),
        spec::ComponentSource::Image {
            reference: format!("{host}/policies/stalled:v1").parse().unwrap(),
            pull_secret: None,
        },
        Some("default"),
    );
    // In the watcher's first list, as after an operator restart.
    cms.create(&PostParams::default(), &stalled).await.unwrap();
    let applied = Instant::now();
    let (registry, _stop) = watch_with(&client, fetcher);
    let spec = PluginSpec::new("packer", PluginKind::Policy);
    let bytes = wasm("binpack");
    let version: String = diorch::oci::Digest::of(&bytes).hex()[..12].to_string();
    cms.create(
        &PostParams::default(),
        &spec::to_configmap(&spec, bytes, Some("default")),
    )
    .await
    .unwrap();
    until_shown(&cms, "plugin-packer", "Loaded", Some(&version)).await;
    // Loaded while the other pull still hangs (its deadline has not passed yet).
    let loaded_after = applied.elapsed();
    assert!(
        loaded_after < pull_timeout,
        "packer loaded after {loaded_after:?}, behind the stalled pull"
    );
    assert!(registry.wasm_policy("packer").is_some());
    assert!(registry.status_of("stalled").is_none_or(|s| !s.healthy));
    // Pod mutations wait at start for the first list's mutators only: a policy's stalled pull
    // holds up no pod.
    let (ctx, pod) = diorch::plugin::sample::pod("learner");
    let mutated = tokio::time::timeout(
        Duration::from_secs(2),
        registry.mutate_pod(&ctx, pod.clone()),
    )
    .await
    .expect("a pod mutation waited for a policy's pull");
    assert_eq!(mutated.unwrap(), pod);
    // The stalled pull ends by its deadline: refused with a reason, nothing serves.
    let note = until_shown(&cms, "plugin-stalled", "Rejected", None).await;
    assert!(
        note.contains("timed out") || note.contains("took longer"),
        "{note}"
    );
    assert!(registry.wasm_policy("stalled").is_none());
    drop(silent);
}

/// Inline components may travel compressed and signed: a zstd ConfigMap signed by a trusted key
/// loads (its status names the key), an unsigned one is refused when signatures are required,
/// and a gzip bomb is refused by the inline cap, not unpacked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_and_signed_inline_components_load_and_bombs_do_not() {
    use diorch::oci;
    use diorch::plugin::compress::{self, Encoding};
    let sandbox = launch().await;
    let client = sandbox.client().unwrap();
    let key = oci::sign::SigningKey::generate().unwrap();
    let mut fetcher = diorch::plugin::fetch::Fetcher::for_namespace(
        client.clone(),
        "default",
        Duration::from_secs(10),
    )
    .unwrap();
    fetcher.secrets = Arc::new(diorch::plugin::fetch::FileSecrets {
        keys: vec![key.public_key()],
        docker_config: None,
    });
    fetcher.require_signatures = true;
    let (registry, _stop) = watch_with(&client, fetcher);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let raw = wasm("binpack");
    let packed = compress::encode(Encoding::Zstd, &raw).unwrap();
    assert!(packed.len() < raw.len(), "{} / {}", packed.len(), raw.len());
    let inline = |name: &str, bytes: Vec<u8>, encoding, signature| {
        spec::to_configmap_from(
            &PluginSpec::new(name, PluginKind::Policy),
            spec::ComponentSource::Inline {
                bytes,
                encoding,
                signature,
            },
            Some("default"),
        )
    };
    let signed = inline(
        "signed",
        packed.clone(),
        Encoding::Zstd,
        key.sign(&raw).ok(),
    );
    cms.create(&PostParams::default(), &signed).await.unwrap();
    let version = oci::Digest::of(&raw).hex()[..12].to_string();
    until_shown(&cms, "plugin-signed", "Loaded", Some(&version)).await;
    let status = registry.status_of("signed").unwrap();
    assert_eq!(status.signed_by, Some(key.public_key().fingerprint()));
    assert_eq!(status.image, None);

    let unsigned = inline("unsigned", packed, Encoding::Zstd, None);
    cms.create(&PostParams::default(), &unsigned).await.unwrap();
    let note = until_shown(&cms, "plugin-unsigned", "Rejected", None).await;
    assert!(note.contains("signature is required"), "{note}");

    // 64 MiB of zeros in ~64 KiB of gzip: refused at the 16 MiB inline cap.
    let bomb = compress::encode(Encoding::Gzip, &vec![0u8; 64 << 20]).unwrap();
    assert!(bomb.len() < 256 << 10, "{}", bomb.len());
    let bomb = inline("bomb", bomb, Encoding::Gzip, key.sign(b"x").ok());
    cms.create(&PostParams::default(), &bomb).await.unwrap();
    let note = until_shown(&cms, "plugin-bomb", "Rejected", None).await;
    assert!(note.contains("exceeds"), "{note}");
    assert!(registry.wasm_policy("bomb").is_none());
}
