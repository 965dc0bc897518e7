//! The operator process (`diorch run`): connects to a cluster, checks that the DIJob CRD is
//! installed, and runs the controllers over reflector caches.
//!
//! Owns client construction and start-up checks. It must not contain reconcile logic (that is
//! the controller's) and must not know about the sandbox: it treats every API server alike.

use std::net::SocketAddr;
use std::sync::Arc;

use tracing::{info, warn};

use crate::allocator::{Allocator, BuiltinPolicy};
use crate::cluster::{ClusterArgs, Connection, preflight};
use crate::controller::executor::{self, Settings};
use crate::flags::{BindAddress, parse_bind_address, parse_duration};
use crate::metrics::Metrics;
use crate::plugin::registry::PluginRegistry;
use crate::plugin::{HostConfig, Limits, PluginHost};
use diorch_core::build::{BuildContext, Gang, GangKind};
use futures::StreamExt as _;

/// Why the operator could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
    #[error("cannot start the Wasm plugin host: {0}")]
    PluginHost(#[source] crate::plugin::PluginError),
    #[error("cannot serve {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    LeaderElection(#[from] crate::leader::LeaderError),
    #[error(
        "lost the leader lease; stopped so that no write follows (the pod restarts as a standby)"
    )]
    LostLease,
    #[error("plugin sources: {0}")]
    Plugins(String),
    #[error(transparent)]
    Record(#[from] crate::allocator::record::RecordError),
}

/// Where trusted plugin keys are read by default (`deploy/base/rbac.yaml` grants this name).
pub const DEFAULT_TRUSTED_KEYS: &str = "configmap/diorch-plugin-keys";
/// Bytes of pulled components and manifests kept on disk (the deploy/ volume is sized for it
/// and the compiled artifacts' 1 GiB).
const PULL_CACHE_BUDGET: u64 = 512 << 20;

/// Flags of `diorch run` (DI-orchestrator's spec section 12 names, kube-rs conventions for
/// the rest).
#[derive(Clone, Debug, clap::Args)]
pub struct RunArgs {
    /// Cluster DNS domain of services, used in the FQDNs of `DI_NODES`.
    #[arg(long, default_value = diorch_core::naming::DEFAULT_SERVICE_DOMAIN)]
    pub service_domain_name: String,
    /// URL of the replica API that workers get in `DI_SERVER_URL`.
    #[arg(
        long,
        default_value = "http://di-server.di-system.svc.cluster.local:8081"
    )]
    pub di_server_url: String,
    /// Sustained API writes per second (0 = no limit). DI-orchestrator's deployment runs with
    /// 100; client-go's default of 5 would take minutes to start a few hundred pods.
    #[arg(long, default_value_t = 100.0)]
    pub qps: f32,
    /// Writes allowed in a burst above `--qps`.
    #[arg(long, default_value_t = 200)]
    pub burst: u32,
    /// A DIJob with no reconcile for this long gets one, within twice this at most (jobs are
    /// looked at in turn, spread evenly over the period; e.g. `1m`, `30s`; `0s`: never).
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub sync_period: std::time::Duration,
    /// DIJobs reconciled at the same time (0 = no limit). Each reconcile issues its writes in
    /// parallel, so this also bounds the connections the operator opens (up to 5 each for a
    /// 4-pod job: 160 at 32, under kube-apiserver's 200 mutating requests in flight).
    #[arg(long, default_value_t = 32)]
    pub concurrency: u16,
    /// How long a DIJob's reconcile waits after something asked for it, so that the changes of
    /// its pods that come moments apart (created, scheduled, started) are looked at in one pass
    /// instead of one each (e.g. `200ms`; `0s` reconciles at once). Each new request within it
    /// waits it out again; phase changes are written this much later at most per request.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    pub reconcile_debounce: std::time::Duration,
    /// Address of the Prometheus `/metrics` endpoint and of `GET /plugins` (`0` disables it).
    /// Unless `--server-auth none`, both need a bearer token allowed `get` on their path (a
    /// SubjectAccessReview on the non-resource URL, as kube-rbac-proxy checks).
    #[arg(long, default_value = ":8443", value_parser = parse_bind_address)]
    pub metric_addr: BindAddress,
    /// Address of the `/healthz` and `/readyz` probes, and nothing else (`0` disables them).
    #[arg(long, default_value = ":8080", value_parser = parse_bind_address)]
    pub probe_addr: BindAddress,
    /// Address of the di-server compatible replica API (`0` disables it).
    #[arg(short = 's', long, default_value = ":8081", value_parser = parse_bind_address)]
    pub server_bind_address: BindAddress,
    /// Who may call the replica API: `none` (anyone, as di-server), `kubernetes` (bearer
    /// tokens checked with TokenReview, calls authorized with SubjectAccessReview on
    /// `dijobs/replicas`: `get` to read, `update` to scale or report), or `job-pods` (as
    /// `kubernetes`, and a call without a token is allowed when its TCP peer is the pod IP of a
    /// live pod of the job it names; assumes the CNI prevents pod-IP spoofing). Unless `none`,
    /// `/metrics` and `/plugins` need a token too.
    #[arg(long, value_enum, default_value_t = crate::server::auth::ServerAuth::None)]
    pub server_auth: crate::server::auth::ServerAuth,
    #[command(flatten)]
    pub http: crate::http::listen::HttpLimits,
    /// Address of the HTTPS admission webhooks (defaulting and validation of DIJobs; `0`
    /// disables them).
    #[arg(long, default_value = ":9443", value_parser = parse_bind_address)]
    pub webhook_addr: BindAddress,
    /// Directory of the webhooks' serving certificate (`tls.crt`, `tls.key`, as a mounted
    /// `kubernetes.io/tls` Secret). Re-read when it changes, so rotation needs no restart.
    #[arg(long, default_value = "/tmp/k8s-webhook-server/serving-certs")]
    pub webhook_cert_dir: std::path::PathBuf,
    /// The webhooks' certificate chain (PEM), if not `tls.crt` in `--webhook-cert-dir`.
    #[arg(long)]
    pub webhook_cert_file: Option<std::path::PathBuf>,
    /// The webhooks' private key (PEM), if not `tls.key` in `--webhook-cert-dir`.
    #[arg(long)]
    pub webhook_key_file: Option<std::path::PathBuf>,
    /// Namespace whose ConfigMaps labelled `diorch.io/plugin` are loaded as plugins (the
    /// operator's own namespace when it runs in a pod).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub plugin_namespace: String,
    /// Scheduling policy plugin for preemptible jobs without a `diorch.io/policy` annotation.
    /// Unset, or not loaded: the built-in policy places them.
    #[arg(long)]
    pub default_policy: Option<String>,
    /// Built-in policy: serves when no plugin is named or loaded, and when a plugin fails.
    #[arg(long, value_enum, default_value_t = BuiltinPolicy::Binpack)]
    pub builtin_policy: BuiltinPolicy,
    /// Default wall-clock deadline of one plugin call (a plugin's ConfigMap may override it).
    #[arg(long, default_value = "50ms", value_parser = parse_duration)]
    pub plugin_deadline: std::time::Duration,
    /// Default memory cap of one plugin call, in MiB.
    #[arg(long, default_value_t = 64)]
    pub plugin_memory_mib: usize,
    /// Memory all plugin calls may take together, in MiB: a plugin whose memory cap (plus
    /// 4 MiB of host-side copies) times the concurrent calls exceeds it is refused at load.
    /// 0: half the container's memory limit, else 256 MiB per concurrent call.
    #[arg(long, default_value_t = 0)]
    pub plugin_memory_budget_mib: usize,
    /// Plugin calls run at once (others queue); 0: the number of cores.
    #[arg(long, default_value_t = 0)]
    pub plugin_max_calls: usize,
    /// Folder where pulled components and compiled artifacts are kept across restarts (the
    /// deploy/ `emptyDir`); unset: memory only, every restart pulls and compiles again.
    #[arg(long, env = "DIORCH_PLUGIN_CACHE_DIR")]
    pub plugin_cache_dir: Option<std::path::PathBuf>,
    /// Largest component pulled from a registry, in MiB (inline ConfigMap data is capped at
    /// 16 MiB once decompressed).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub plugin_max_pull_mib: u64,
    /// Longest pull of one component (manifest, signature and layer).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub plugin_pull_timeout: std::time::Duration,
    /// Every plugin must be signed by a trusted key, unless its ConfigMap says
    /// `requireSignature: "false"`.
    #[arg(long)]
    pub require_plugin_signatures: bool,
    /// The object (in the operator's namespace) whose data values are the PEM public keys
    /// plugin signatures are checked against: `configmap/NAME`, `secret/NAME` or `none`.
    #[arg(long, default_value = DEFAULT_TRUSTED_KEYS)]
    pub plugin_trusted_keys: crate::plugin::fetch::KeySource,
    /// Registries (`host[:port]`, comma-separated) plugins may be pulled from; empty: any.
    #[arg(long, value_delimiter = ',')]
    pub plugin_allowed_registries: Vec<String>,
    /// Registries (`host[:port]`, comma-separated) spoken to over plain HTTP.
    #[arg(long, value_delimiter = ',')]
    pub plugin_insecure_registries: Vec<String>,
    /// A PEM file of CA certificates trusted for registries besides the system's.
    #[arg(long)]
    pub plugin_registry_ca: Option<std::path::PathBuf>,
    /// How often placed preemptible jobs are re-planned with their policy's `optimize` (also
    /// at once when a job ends or nodes change; `0s` turns re-planning off).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub optimize_period: std::time::Duration,
    /// A job is moved by re-planning at most once per this long, so a flapping policy cannot
    /// thrash training.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub min_reschedule_interval: std::time::Duration,
    /// Whether a preemptible job that does not fit takes room from running preemptible jobs of
    /// lower priority: `shrink` (elastic tasks toward minReplicas first, then whole jobs),
    /// `evict` (whole jobs only) or `off` (docs/preemption.md).
    #[arg(long, value_enum, default_value_t = crate::allocator::Preemption::Shrink)]
    pub preemption: crate::allocator::Preemption,
    /// A job is never evicted before its pods have run this long.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub preemption_min_run_time: std::time::Duration,
    /// A job shrunk or evicted is not preempted, grown or moved again for this long.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub preemption_cooldown: std::time::Duration,
    /// Record every policy call's input and answer to this directory (JSON lines in rotating
    /// files, format in `allocator::record`), for `diorch simulate replay DIR --policy P`.
    #[arg(long)]
    pub record_decisions: Option<std::path::PathBuf>,
    /// The recording's size cap in MiB: the oldest files are deleted past it.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub record_decisions_max_mib: u64,
    /// Gang scheduler: every job gets a PodGroup (minMember = its replicas, owned by the job)
    /// and its pods that scheduler's schedulerName, so no job ever starts partially. Unset, the
    /// allocator's all-or-nothing admission of preemptible jobs still prevents partial starts.
    #[arg(long, value_parser = gang_kind_parser())]
    pub gang_scheduler: Option<GangKind>,
    /// schedulerName of the gang scheduler (default: `volcano`, `scheduler-plugins-scheduler`).
    #[arg(long, requires = "gang_scheduler")]
    pub gang_scheduler_name: Option<String>,
    #[command(flatten)]
    pub leader: crate::leader::LeaderArgs,
}

/// `--gang-scheduler`'s values, listed in `--help` (the core's type has no clap derive).
fn gang_kind_parser() -> impl clap::builder::TypedValueParser<Value = GangKind> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(GangKind::ALL.map(GangKind::as_str))
        .try_map(|name: String| name.parse::<GangKind>())
}

impl RunArgs {
    fn settings(&self) -> Settings {
        Settings {
            build: BuildContext {
                service_domain: self.service_domain_name.clone(),
                server_url: self.di_server_url.clone(),
                gang: self.gang_scheduler.map(|kind| Gang {
                    kind,
                    scheduler_name: self
                        .gang_scheduler_name
                        .clone()
                        .unwrap_or_else(|| kind.default_scheduler_name().to_string()),
                }),
            },
            qps: self.qps,
            burst: self.burst,
            sync_period: self.sync_period,
            concurrency: self.concurrency,
            debounce: self.reconcile_debounce,
            ..Settings::default()
        }
    }

    fn allocator_settings(&self) -> crate::allocator::Settings {
        crate::allocator::Settings {
            default_policy: self.default_policy.clone(),
            optimize_period: self.optimize_period,
            min_reschedule_interval: self.min_reschedule_interval,
            preemption: self.preemption,
            preemption_min_run_time: self.preemption_min_run_time,
            preemption_cooldown: self.preemption_cooldown,
            ..crate::allocator::Settings::default()
        }
    }

    /// How the plugin watcher fetches components, as these flags say.
    pub fn plugin_fetcher(
        &self,
        client: kube::Client,
        namespace: &str,
    ) -> Result<crate::plugin::fetch::Fetcher, OperatorError> {
        use crate::oci;
        let extra_roots_pem = match &self.plugin_registry_ca {
            Some(path) => std::fs::read(path).map_err(|e| {
                OperatorError::Plugins(format!("--plugin-registry-ca {}: {e}", path.display()))
            })?,
            None => vec![],
        };
        let registry = oci::RegistryClient::new(oci::Options {
            insecure_registries: self.plugin_insecure_registries.clone(),
            extra_roots_pem,
            ..oci::Options::default()
        })
        .map_err(|e| OperatorError::Plugins(e.to_string()))?;
        let cache = match &self.plugin_cache_dir {
            Some(dir) => Some(oci::cache::BlobCache::open(dir, PULL_CACHE_BUDGET).map_err(
                |e| OperatorError::Plugins(format!("--plugin-cache-dir {}: {e}", dir.display())),
            )?),
            None => None,
        };
        let limits = oci::PullLimits {
            blob_cap: usize::try_from(self.plugin_max_pull_mib << 20).unwrap_or(usize::MAX),
            timeout: self.plugin_pull_timeout,
            ..oci::PullLimits::default()
        };
        Ok(crate::plugin::fetch::Fetcher {
            puller: oci::Puller::new(registry, limits, cache),
            secrets: Arc::new(crate::plugin::fetch::KubeSecrets {
                client,
                namespace: namespace.to_string(),
                keys: self.plugin_trusted_keys.clone(),
                timeout: crate::controller::plugins::ApiLimits::default().call_timeout,
            }),
            require_signatures: self.require_plugin_signatures,
            allowed_registries: self.plugin_allowed_registries.clone(),
        })
    }

    /// The plugin registry these flags describe (nothing loaded yet).
    pub fn plugin_registry(&self) -> Result<PluginRegistry, OperatorError> {
        let defaults = HostConfig::default();
        let calls = match self.plugin_max_calls {
            0 => defaults.max_concurrent_calls,
            n => n,
        };
        let host = PluginHost::new(HostConfig {
            limits: Limits {
                deadline: self.plugin_deadline,
                memory_bytes: self.plugin_memory_mib.saturating_mul(1 << 20),
            },
            max_concurrent_calls: calls,
            max_component_bytes: usize::try_from(self.plugin_max_pull_mib << 20)
                .unwrap_or(usize::MAX),
            cache_dir: self.plugin_cache_dir.clone(),
            memory_budget: match self.plugin_memory_budget_mib {
                0 => crate::plugin::default_memory_budget(calls),
                mib => mib.saturating_mul(1 << 20),
            },
            ..defaults
        })
        .map_err(OperatorError::PluginHost)?;
        Ok(PluginRegistry::new(host, self.builtin_policy.into()))
    }
}

/// The configuration reference of `diorch run` as a Markdown table, rendered from the clap
/// definitions (`docs/operations.md` embeds it; a test fails when it is stale).
pub fn config_reference() -> String {
    use clap::Args;
    let command = RunArgs::augment_args(ClusterArgs::augment_args(clap::Command::new("run")));
    let mut out =
        String::from("| flag | default | environment | what it does |\n|---|---|---|---|\n");
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let takes_value = arg.get_action().takes_values();
        let flag = if takes_value {
            format!("`--{long} <{}>`", arg.get_id().as_str().to_uppercase())
        } else {
            format!("`--{long}`")
        };
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let default = match (takes_value, defaults.is_empty()) {
            (false, _) => "off".to_string(),
            (true, true) => "–".to_string(),
            (true, false) => format!("`{}`", defaults.join(",")),
        };
        let env = arg
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_else(|| "–".to_string());
        let mut help = arg
            .get_long_help()
            .or_else(|| arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default()
            .replace('\n', " ")
            .replace('|', "\\|");
        let values: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        if takes_value && !values.is_empty() {
            help.push_str(&format!(" One of {}.", values.join(", ")));
        }
        out.push_str(&format!("| {flag} | {default} | {env} | {help} |\n"));
    }
    out
}

/// Longest wait for in-flight reconciles after a shutdown signal: with the lease release (at
/// most 5 s) it stays within deploy/'s 30 s termination grace period.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

/// How often the webhook certificate files are checked for a rotation.
const WEBHOOK_CERT_RELOAD: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs the operator until `shutdown` resolves: the DIJob controller, and the metrics and probe
/// endpoints.
pub async fn run(
    conn: Connection,
    args: RunArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), OperatorError> {
    preflight(&conn).await?;
    info!(server = %conn.url, "connected; running the DIJob controller");
    let metrics = Arc::new(Metrics::with_api_requests(conn.api_requests.clone()));
    // Pod mutations wait for the plugin watcher's first load (a Fail mutator is never skipped).
    let plugins = Arc::new(
        args.plugin_registry()?
            .with_metrics(metrics.clone())
            .awaiting_first_load(),
    );
    let client = conn.client.clone();
    let shadow_reports = crate::allocator::shadow::Reports::default();
    // One token authoriser (and decision cache) for every guarded endpoint.
    let tokens = crate::server::auth::token_authorizer(args.server_auth, client.clone());
    let guard = crate::server::auth::Guard {
        auth: tokens.clone(),
        metrics: metrics.clone(),
    };
    // The metrics address serves `/metrics`, `GET /plugins` and the shadow reports, each
    // guarded; the probe
    // address only what the kubelet needs.
    let metrics_router =
        crate::server::auth::guard_routes(metrics.clone().metrics_router(), &guard, "/metrics")
            .merge(crate::server::auth::guard_routes(
                crate::http::plugins::router(plugins.clone()),
                &guard,
                "/plugins",
            ))
            // Authorised as `/plugins` is: both show what the loaded plugins do.
            .merge(crate::server::auth::guard_routes(
                crate::http::plugins::shadow_router(plugins.clone(), shadow_reports.clone()),
                &guard,
                "/plugins",
            ));
    for (what, addr, router) in [
        ("metrics", args.metric_addr.0, metrics_router),
        ("probes", args.probe_addr.0, metrics.clone().probe_router()),
    ] {
        let Some(addr) = addr else { continue };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| OperatorError::Bind { what, addr, source })?;
        let bound = listener.local_addr().unwrap_or(addr);
        info!(what, address = %bound, "serving");
        let limits = args.http.clone();
        tokio::spawn(async move {
            crate::http::listen::serve(listener, router, limits, std::future::pending()).await;
            warn!(what, "endpoint stopped");
        });
    }
    if let Some(addr) = args.webhook_addr.0 {
        let listener = std::net::TcpListener::bind(addr).map_err(|source| OperatorError::Bind {
            what: "the admission webhooks",
            addr,
            source,
        })?;
        let bound = listener.local_addr().unwrap_or(addr);
        let mut files = crate::webhook::tls::CertFiles::in_dir(&args.webhook_cert_dir);
        if let Some(cert) = &args.webhook_cert_file {
            files.cert = cert.clone();
        }
        if let Some(key) = &args.webhook_key_file {
            files.key = key.clone();
        }
        info!(address = %bound, certificate = %files.cert.display(), key = %files.key.display(), "serving the admission webhooks over TLS");
        let metrics = metrics.clone();
        let limits = args.http.clone();
        tokio::spawn(async move {
            let router = crate::webhook::router(Some(metrics.clone()));
            let served = crate::webhook::tls::serve(
                listener,
                files,
                WEBHOOK_CERT_RELOAD,
                router,
                limits,
                Some(metrics),
                std::future::pending(),
            )
            .await;
            if let Err(error) = served {
                warn!(%error, "the admission webhooks stopped");
            }
        });
    }
    let mut election = if args.leader.leader_elect {
        crate::leader::Election::start(client.clone(), &args.leader, crate::leader::identity())
            .await?
    } else {
        crate::leader::Election::none()
    };
    let leadership = election.leadership.clone();
    {
        let (leadership, metrics) = (leadership.clone(), metrics.clone());
        tokio::spawn(async move {
            leadership.acquired().await;
            metrics.leader.set(1);
        });
    }
    let (stop_plugins, plugins_stopped) = tokio::sync::oneshot::channel::<()>();
    {
        let (client, namespace, plugins, leadership) = (
            client.clone(),
            args.plugin_namespace.clone(),
            plugins.clone(),
            leadership.clone(),
        );
        let fetcher = Arc::new(args.plugin_fetcher(client.clone(), &namespace)?);
        info!(namespace = %namespace, "loading plugins from ConfigMaps labelled diorch.io/plugin");
        tokio::spawn(async move {
            let limits = crate::controller::plugins::ApiLimits::default();
            crate::controller::plugins::run_with(
                client,
                &namespace,
                plugins,
                fetcher,
                leadership,
                limits,
                async {
                    let _ = plugins_stopped.await;
                },
            )
            .await;
        });
    }
    let mut settings = args.settings();
    settings.leader = leadership.clone();
    let mut allocator_settings = args.allocator_settings();
    allocator_settings.leader = leadership.clone();
    allocator_settings.shadow_reports = shadow_reports;
    // Jobs naming a PriorityClass take its value; the watch never holds readiness up (a
    // forbidden one warns and retries, and jobs keep their spec.priority's value meanwhile).
    let (classes, watch_classes) =
        crate::allocator::priorities::PriorityClasses::start(client.clone());
    tokio::spawn(watch_classes);
    allocator_settings.priority_classes = classes;
    if let Some(dir) = &args.record_decisions {
        let recorder = crate::allocator::record::Recorder::start(
            crate::allocator::record::RecordSettings {
                dir: dir.clone(),
                max_bytes: args.record_decisions_max_mib << 20,
            },
            metrics.clone(),
        )?;
        info!(dir = %dir.display(), max_mib = args.record_decisions_max_mib, "recording every policy decision");
        allocator_settings.record = Some(recorder);
    }
    // The allocator runs over the controller's DIJob cache; the controller asks it through
    // the core's `Placement` contract and never names it.
    let place = {
        let (client, plugins, metrics) = (client.clone(), plugins.clone(), metrics.clone());
        move |jobs, pods| {
            let (allocator, retries) =
                Allocator::start(client, plugins, jobs, pods, allocator_settings, metrics);
            executor::Placer {
                placement: allocator,
                retries: retries.boxed(),
            }
        }
    };
    // On the signal this replica stops leading (no new reconcile, re-plan or plugin status
    // write), the controller drains, and the clock on draining starts (below).
    let (signalled_tx, signalled) = tokio::sync::oneshot::channel::<()>();
    let shutdown = {
        let leadership = leadership.clone();
        async move {
            shutdown.await;
            leadership.step_down();
            info!("stopped leading; finishing in-flight reconciles");
            let _ = signalled_tx.send(());
        }
    };
    let (caches, controller) = executor::start(
        conn.client,
        settings,
        metrics.clone(),
        plugins,
        place,
        shutdown,
    );
    if let Some(addr) = args.server_bind_address.0 {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| OperatorError::Bind {
                what: "the replica API",
                addr,
                source,
            })?;
        let bound = listener.local_addr().unwrap_or(addr);
        info!(address = %bound, "serving the replica API");
        let auth =
            crate::server::auth::replica_api_authorizer(args.server_auth, tokens, caches.clone());
        let router = crate::server::router(crate::server::ServerState {
            caches,
            client,
            metrics,
            auth,
            on_handled: None,
            answers: Default::default(),
        });
        let limits = args.http.clone();
        tokio::spawn(async move {
            crate::http::listen::serve(listener, router, limits, std::future::pending()).await;
            warn!("the replica API stopped");
        });
    }
    // In-flight reconciles finish, for at most DRAIN_LIMIT, so the lease is released within
    // the pod's grace period. A lost lease stops everything at once.
    let draining = async move {
        if signalled.await.is_err() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(DRAIN_LIMIT).await;
    };
    tokio::select! {
        () = controller => {}
        () = draining => warn!(limit = ?DRAIN_LIMIT, "in-flight reconciles did not finish in time; stopping anyway"),
        () = election.lost() => return Err(OperatorError::LostLease),
    }
    let _ = stop_plugins.send(());
    election.release().await;
    info!("shut down");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/operations.md` embeds `config_reference()` between markers;
    /// `DIORCH_BLESS=1 cargo test config_reference` rewrites it.
    #[test]
    fn the_config_reference_in_the_docs_is_current() {
        const BEGIN: &str = "<!-- BEGIN GENERATED: diorch run --help -->\n";
        const END: &str = "<!-- END GENERATED -->";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md");
        let doc = std::fs::read_to_string(&path).expect("docs/operations.md");
        let start = doc.find(BEGIN).expect("begin marker") + BEGIN.len();
        let end = doc[start..].find(END).expect("end marker") + start;
        let want = config_reference();
        if doc[start..end] != want {
            if std::env::var_os("DIORCH_BLESS").is_some() {
                let fresh = format!("{}{want}{}", &doc[..start], &doc[end..]);
                std::fs::write(&path, fresh).expect("write docs/operations.md");
            } else {
                panic!(
                    "docs/operations.md's configuration reference is stale: run `DIORCH_BLESS=1 cargo test --lib config_reference`"
                );
            }
        }
        // Every flag of `diorch run` is there, with its default.
        for flag in [
            "--webhook-addr",
            "--leader-elect",
            "--plugin-deadline",
            "--kubeconfig",
        ] {
            assert!(want.contains(&format!("`{flag}")), "{flag} missing");
        }
        assert!(
            want.contains("| `--sync-period <SYNC_PERIOD>` | `1m` | – |"),
            "{want}"
        );
    }

    #[test]
    fn go_style_flags_parse() {
        assert_eq!(
            parse_duration("1m0s"),
            Ok(std::time::Duration::from_secs(60))
        );
        assert_eq!(
            parse_duration("30s"),
            Ok(std::time::Duration::from_secs(30))
        );
        assert!(parse_duration("soon").is_err());
        assert_eq!(
            parse_bind_address(":8443"),
            Ok(BindAddress(Some("0.0.0.0:8443".parse().expect("addr"))))
        );
        assert_eq!(parse_bind_address("0"), Ok(BindAddress(None)));
        assert!(parse_bind_address("nowhere").is_err());
    }
}
