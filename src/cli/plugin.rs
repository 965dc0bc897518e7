//! `diorch plugin ...`: the platform team's local tools. `check` validates a component against
//! the worlds and runs it on the built-in samples; `configmap` prints the manifest that loads it;
//! `run` replays a recorded cluster snapshot against a policy and shows where jobs would go;
//! `snapshot` records one from a cluster or the sandbox.
//!
//! `check` also lists the capabilities a mutator's change to the sample pod uses and the grants
//! it needs (see `capabilities`), and fails when `--grants` does not cover them, as the operator
//! would refuse that ConfigMap.
//!
//! Owns: the subcommand arguments and their output. Must not touch: cluster state (`snapshot`
//! only reads, through the allocator's view; every other command is offline).

pub mod publish;
pub mod record;
pub mod scaffold;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::plugin::capabilities::{self, Capability, Grants};
use crate::plugin::snapshot::{self, Snapshot};
use crate::plugin::spec::{self, FailurePolicy, PluginKind, PluginSpec};
use crate::plugin::{
    HostConfig, Job, JobPlan, Limits, NativePolicy, Node, PluginError, PluginHost,
    SchedulingPolicy as _, TaskContext, WasmPolicy, World, checks, sample,
};
use publish::RegistryArgs;

/// The policy entry point `plugin run` calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RunCall {
    /// Place each unplaced job of the snapshot (or `--job`), one after the other.
    Allocate,
    /// Re-plan all preemptible jobs of the snapshot at once.
    Optimize,
}

/// A built-in policy to compare with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Builtin {
    Binpack,
    Spread,
}

impl From<Builtin> for NativePolicy {
    fn from(b: Builtin) -> NativePolicy {
        match b {
            Builtin::Binpack => NativePolicy::BinPack,
            Builtin::Spread => NativePolicy::Spread,
        }
    }
}

#[derive(clap::Subcommand)]
pub enum PluginCommand {
    /// Validate a component against the plugin worlds, print its imports, exports and size,
    /// run it on sample inputs and show results and timings. Exits non-zero if it is unusable.
    Check {
        /// The component: a `.wasm` file (built for wasm32-wasip2) or an OCI reference
        /// (`registry.example/policies/fair:v1`, `oci://…`), pulled and verified as the operator
        /// would.
        component: String,
        #[command(flatten)]
        registry: RegistryArgs,
        /// Config string handed to a mutator.
        #[arg(long, default_value = "")]
        config: String,
        /// Task type of the sample pod handed to a mutator.
        #[arg(long, default_value = "learner")]
        task_type: String,
        /// Per-call deadline in milliseconds.
        #[arg(long, default_value_t = 50)]
        deadline_ms: u64,
        /// Memory cap in MiB.
        #[arg(long, default_value_t = 64)]
        memory_mib: usize,
        /// Mutators: the grants its ConfigMap will give (comma-separated, as in `data.grants`);
        /// the check fails if the sample change needs more.
        #[arg(long, default_value = "", value_parser = parse_grants)]
        grants: Grants,
    },
    /// Print a plugin ConfigMap (YAML) for `kubectl apply --server-side -f -` (a client-side
    /// apply's annotation cannot hold a component over ~190 KB): the component inline (a file,
    /// optionally compressed and signed) or by reference (`--image`).
    Configmap {
        /// The component file to carry inline (omit with `--image`).
        #[arg(required_unless_present = "image", conflicts_with = "image")]
        file: Option<PathBuf>,
        /// Name the component by OCI reference instead (pinned `…@sha256:…` is best: a tag is
        /// resolved when the operator loads the ConfigMap).
        #[arg(long)]
        image: Option<String>,
        /// With `--image`: the `kubernetes.io/dockerconfigjson` Secret with the registry's
        /// credentials.
        #[arg(long, requires = "image")]
        pull_secret: Option<String>,
        /// Compress the inline component (`gzip` or `zstd`), so up to ~3 MB fits a ConfigMap.
        #[arg(long, conflicts_with = "image")]
        compress: Option<crate::plugin::compress::Encoding>,
        /// Sign the inline component with this private key (`diorch plugin keygen`).
        #[arg(long, conflicts_with = "image")]
        sign: Option<PathBuf>,
        /// Ask the operator to refuse the plugin unless a trusted key signed it.
        #[arg(long)]
        require_signature: bool,
        /// Plugin name (a DNS label); the ConfigMap is `plugin-<name>`.
        #[arg(long)]
        name: String,
        #[arg(long, value_parser = ["policy", "mutator"])]
        kind: String,
        /// Namespace the operator watches for plugins.
        #[arg(long)]
        namespace: Option<String>,
        /// Mutators: comma-separated task types (default all).
        #[arg(long, default_value = "")]
        task_types: String,
        /// Mutators: lower runs first.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        order: i32,
        /// Config string handed to the plugin.
        #[arg(long, conflicts_with = "config_file")]
        config: Option<String>,
        /// Read the config string from a file.
        #[arg(long)]
        config_file: Option<PathBuf>,
        #[arg(long)]
        deadline_ms: Option<u64>,
        #[arg(long)]
        memory_mib: Option<usize>,
        #[arg(long, value_parser = ["Fail", "Ignore"], default_value = "Fail")]
        failure_policy: String,
        /// Mutators: capabilities beyond the default set (comma-separated: privileged,
        /// capabilities, securityContext, hostPath, hostNetwork, hostPID, hostIPC,
        /// serviceAccountName, containers, image, command, scheduler, volumeTypes, other).
        #[arg(long, default_value = "", value_parser = parse_grants)]
        grants: Grants,
    },
    /// Push a component to an OCI registry in the CNCF Wasm artifact layout (config
    /// `application/vnd.wasm.config.v0+json`, layer `application/wasm`) and print the reference
    /// pinned by digest; `--sign` also signs it (cosign-compatible, keyed).
    Push {
        /// The component (`.wasm`).
        file: PathBuf,
        /// Where to push: `registry.example[:port]/repository:tag`.
        reference: String,
        /// Sign what was pushed with this private key (PEM: `diorch plugin keygen`, or an
        /// unencrypted PKCS#8 / SEC1 P-256 key).
        #[arg(long)]
        sign: Option<PathBuf>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Sign a component already in a registry (by tag or digest) with a private key.
    Sign {
        reference: String,
        #[arg(long)]
        key: PathBuf,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Write a new signing key pair: `<OUT>.key` (private, mode 0600) and `<OUT>.pub` (the
    /// public key the operator trusts: put it in its trusted-keys ConfigMap).
    Keygen {
        #[arg(long, default_value = "diorch-plugin")]
        out: PathBuf,
    },
    /// Record the cluster's nodes and preemptible DIJobs as a snapshot file for `plugin run`
    /// (reads only: one list of nodes, pods and DIJobs).
    Snapshot {
        /// Kubeconfig file (default: KUBECONFIG, ~/.kube/config, in-cluster).
        #[arg(long, env = "DIORCH_KUBECONFIG")]
        kubeconfig: Option<PathBuf>,
        /// Kubeconfig context.
        #[arg(long)]
        context: Option<String>,
        /// Write here instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Run a policy component on a cluster snapshot (JSON, see `examples/snapshot.json`) and
    /// print where each job's replicas would go, the host's check of the answer and the call
    /// time. Exits non-zero on bad input or when the plugin fails (a refusal to place is an
    /// answer, not a failure).
    Run {
        /// The policy component (`.wasm`).
        file: PathBuf,
        /// The snapshot file.
        #[arg(long)]
        input: PathBuf,
        #[arg(long, value_enum, default_value = "allocate")]
        call: RunCall,
        /// Allocate only this job (`namespace/name`), placed or not.
        #[arg(long)]
        job: Option<String>,
        /// Also run a built-in policy on the same input and show the differences.
        #[arg(long, value_enum)]
        compare_builtin: Option<Builtin>,
        /// Per-call deadline in milliseconds.
        #[arg(long, default_value_t = 50)]
        deadline_ms: u64,
        /// Memory cap in MiB.
        #[arg(long, default_value_t = 64)]
        memory_mib: usize,
    },
    /// Start a plugin project in Rust, Python or JavaScript: a policy or mutator that passes its
    /// own test on a sample, built with one command (`./build.sh`: the tests, then
    /// `NAME.wasm`).
    New {
        /// The plugin's name (a DNS label): the project folder and the component's file name.
        name: String,
        #[arg(long, value_enum)]
        lang: scaffold::Lang,
        #[arg(long, value_enum, default_value = "policy")]
        world: scaffold::Kind,
        /// Where to write the project (default: ./NAME); it must not hold files yet.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The plugins/ folder of a diorch checkout, which holds the SDKs the project uses
        /// (default: the checkout this diorch was built from).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
}

fn parse_grants(text: &str) -> Result<Grants, capabilities::UnknownGrant> {
    Grants::parse(text)
}

pub async fn run(command: PluginCommand) -> anyhow::Result<()> {
    match command {
        PluginCommand::Check {
            component,
            registry,
            config,
            task_type,
            deadline_ms,
            memory_mib,
            grants,
        } => {
            let (bytes, _) = publish::read_component(&component, &registry).await?;
            let limits = Limits {
                deadline: Duration::from_millis(deadline_ms),
                memory_bytes: memory_mib << 20,
            };
            // Wasm compiles and runs are blocking work: keep them off the async runtime.
            let report = tokio::task::spawn_blocking(move || {
                check_granted(&bytes, limits, &config, &task_type, grants)
            })
            .await
            .context("the check thread failed")??;
            emit(&report.text)?;
            match report.refused {
                Some(refusal) => Err(anyhow::anyhow!("{refusal}")),
                None => Ok(()),
            }
        }
        PluginCommand::Configmap {
            file,
            image,
            pull_secret,
            compress,
            sign,
            require_signature,
            name,
            kind,
            namespace,
            task_types,
            order,
            config,
            config_file,
            deadline_ms,
            memory_mib,
            failure_policy,
            grants,
        } => {
            let config = match config_file {
                Some(path) => std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?,
                None => config.unwrap_or_default(),
            };
            let kind: PluginKind = kind.parse()?;
            let mut spec = PluginSpec::new(&name, kind);
            spec.task_types = task_types
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect();
            spec.order = order;
            spec.config = config;
            spec.deadline = deadline_ms.map(Duration::from_millis);
            spec.memory_bytes = memory_mib.map(|m| m << 20);
            spec.failure_policy = if failure_policy == "Ignore" {
                FailurePolicy::Ignore
            } else {
                FailurePolicy::Fail
            };
            spec.grants = grants;
            spec.require_signature = require_signature.then_some(true);
            let component = match (file, image) {
                (_, Some(image)) => spec::ComponentSource::Image {
                    reference: image.parse()?,
                    pull_secret,
                },
                (Some(file), None) => inline_component(&file, compress, sign.as_deref())?,
                (None, None) => anyhow::bail!("give the component file or --image"),
            };
            let cm = spec::to_configmap_from(&spec, component, namespace.as_deref());
            // Round-trip through the parser so a manifest we print is one the operator accepts.
            spec::from_configmap(&cm)?;
            emit(&serde_saphyr::to_string(&cm)?)
        }
        PluginCommand::Push {
            file,
            reference,
            sign,
            registry,
        } => {
            let pinned = publish::push(&file, &reference, sign.as_deref(), &registry).await?;
            emit(&format!("{pinned}\n"))
        }
        PluginCommand::Sign {
            reference,
            key,
            registry,
        } => {
            let pinned = publish::sign(&reference, &key, &registry).await?;
            emit(&format!("{pinned}\n"))
        }
        PluginCommand::New {
            name,
            lang,
            world,
            dir,
            sdk,
        } => {
            let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
            let sdk = sdk.unwrap_or_else(scaffold::default_sdk);
            let written = scaffold::create(&name, lang, world, &dir, &sdk)?;
            for path in written {
                println!("wrote {}", path.display());
            }
            println!(
                "next: {}/build.sh (runs the tests, then builds {name}.wasm); then diorch plugin \
                 check {name}.wasm",
                dir.display()
            );
            Ok(())
        }
        PluginCommand::Keygen { out } => publish::keygen(&out).map(|_| ()),
        PluginCommand::Snapshot {
            kubeconfig,
            context,
            output,
        } => {
            let conn = crate::cluster::connect(&crate::cluster::ClusterTarget {
                kubeconfig,
                context,
            })
            .await?;
            let snapshot = record::record(conn.client)
                .await
                .with_context(|| format!("cannot read the cluster at {}", conn.url))?;
            let text = snapshot.to_json()?;
            let summary = format!(
                "snapshot of {}: {} nodes, {} preemptible jobs ({} placed)",
                conn.url,
                snapshot.nodes.len(),
                snapshot.jobs.len(),
                snapshot.previous.len()
            );
            match output {
                Some(path) => {
                    std::fs::write(&path, text)
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    eprintln!("{summary} written to {}", path.display());
                    Ok(())
                }
                None => {
                    eprintln!("{summary}");
                    emit(&text)
                }
            }
        }
        PluginCommand::Run {
            file,
            input,
            call,
            job,
            compare_builtin,
            deadline_ms,
            memory_mib,
        } => {
            if job.is_some() && call == RunCall::Optimize {
                anyhow::bail!(
                    "--job applies to --call allocate; optimize re-plans every preemptible job"
                );
            }
            let text = std::fs::read_to_string(&input)
                .with_context(|| format!("reading {}", input.display()))?;
            let snapshot = Snapshot::from_json(&text)
                .with_context(|| format!("{} is not a usable snapshot", input.display()))?;
            if let Some(key) = &job {
                snapshot.job(key)?;
            }
            let bytes =
                std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let options = RunOptions {
                plugin_file: file.display().to_string(),
                snapshot_file: input.display().to_string(),
                call,
                job,
                compare: compare_builtin.map(NativePolicy::from),
                limits: Limits {
                    deadline: Duration::from_millis(deadline_ms),
                    memory_bytes: memory_mib << 20,
                },
            };
            let report =
                tokio::task::spawn_blocking(move || run_snapshot(&bytes, &snapshot, &options))
                    .await
                    .context("the run thread failed")??;
            emit(&report.text)?;
            if report.failures > 0 {
                anyhow::bail!(
                    "the plugin failed {} of {} calls (see above)",
                    report.failures,
                    report.calls
                );
            }
            Ok(())
        }
    }
}

/// Most component bytes a ConfigMap carries inline: the API server refuses objects over
/// ~1 MiB (etcd's 1.5 MiB request limit, less the base64 in JSON and the other fields).
pub const CONFIGMAP_INLINE_CAP: usize = 768 << 10;

/// Whether a component can travel inline in its ConfigMap, and how; else what to do instead.
pub fn inline_advice(bytes: &[u8]) -> String {
    use crate::plugin::compress::{Encoding, encode};
    if bytes.len() <= CONFIGMAP_INLINE_CAP {
        return "fits a ConfigMap as it is".to_string();
    }
    let registry = "push it to a registry (diorch plugin push) and name it with data.image \
                    (plugin configmap --image)";
    if bytes.len() > spec::INLINE_MAX_BYTES {
        return format!(
            "too big for a ConfigMap (over the {} bytes inline data may have once \
             decompressed): {registry}",
            spec::INLINE_MAX_BYTES
        );
    }
    // Both encodings, smallest first: ruzstd's encoder has one fast level, so gzip at its best
    // level packs some components (a 1.7 MiB QuickJS one: 0.62 MB against 0.88 MB) tighter.
    let mut packed: Vec<(usize, &str)> = [(Encoding::Zstd, "zstd"), (Encoding::Gzip, "gzip")]
        .into_iter()
        .filter_map(|(e, name)| encode(e, bytes).ok().map(|p| (p.len(), name)))
        .collect();
    packed.sort();
    match packed.first() {
        Some(&(len, name)) if len <= CONFIGMAP_INLINE_CAP => format!(
            "fits a ConfigMap compressed ({len} bytes with plugin configmap --compress {name})"
        ),
        Some(&(len, name)) => format!(
            "too big for a ConfigMap even compressed ({len} bytes with {name}; at most \
             {CONFIGMAP_INLINE_CAP}): {registry}"
        ),
        None => format!("too big for a ConfigMap as it is: {registry}"),
    }
}

/// The inline component of `plugin configmap`: compressed and signed as asked, or a clear
/// refusal when it cannot fit a ConfigMap, saying what to do instead.
fn inline_component(
    file: &std::path::Path,
    compress: Option<crate::plugin::compress::Encoding>,
    sign: Option<&std::path::Path>,
) -> anyhow::Result<spec::ComponentSource> {
    let raw = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    if raw.len() > spec::INLINE_MAX_BYTES {
        anyhow::bail!(
            "{} is {} bytes: over the {} bytes an inline component may have once decompressed; \
             push it to a registry (diorch plugin push) and use --image",
            file.display(),
            raw.len(),
            spec::INLINE_MAX_BYTES
        );
    }
    let encoding = compress.unwrap_or(crate::plugin::compress::Encoding::Identity);
    let bytes = crate::plugin::compress::encode(encoding, &raw)?;
    if bytes.len() > CONFIGMAP_INLINE_CAP {
        let hint = match compress {
            None => {
                "compress it (--compress zstd) or push it to a registry (diorch plugin push) \
                     and use --image"
            }
            Some(_) => "push it to a registry (diorch plugin push) and use --image",
        };
        anyhow::bail!(
            "{} is {} bytes{}: too big for a ConfigMap (at most {CONFIGMAP_INLINE_CAP} here; \
             the API server refuses objects over ~1 MiB); {hint}",
            file.display(),
            bytes.len(),
            compress.map(|c| format!(" with {c}")).unwrap_or_default()
        );
    }
    let signature = match sign {
        Some(key) => {
            let text = std::fs::read(key).with_context(|| format!("reading {}", key.display()))?;
            let key = crate::oci::sign::SigningKey::from_pem(&text)
                .with_context(|| format!("{}", key.display()))?;
            Some(key.sign(&raw)?)
        }
        None => None,
    };
    Ok(spec::ComponentSource::Inline {
        bytes,
        encoding,
        signature,
    })
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// Times `f` over a few runs and returns its last result and the best time.
fn timed<T>(runs: usize, mut f: impl FnMut() -> T) -> (T, Duration) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..runs.max(1) {
        let started = Instant::now();
        last = Some(f());
        best = best.min(started.elapsed());
    }
    // ok: runs.max(1) iterations ran, so `last` is set.
    #[allow(clippy::expect_used)]
    (last.expect("ran at least once"), best)
}

/// The `check` report; an error when the component implements neither world, fails a call or
/// (a mutator) changes the sample pod beyond the default capabilities.
pub fn check(
    bytes: &[u8],
    limits: Limits,
    config: &str,
    task_type: &str,
) -> anyhow::Result<String> {
    let report = check_granted(bytes, limits, config, task_type, Grants::NONE)?;
    match report.refused {
        Some(refusal) => Err(anyhow::anyhow!("{refusal}")),
        None => Ok(report.text),
    }
}

/// A `check` report, and for a mutator whose sample change needs grants it was not given, why
/// the operator would refuse it.
pub struct CheckReport {
    pub text: String,
    pub refused: Option<String>,
}

/// The `check` report for a mutator granted `grants` (ignored for policies); an error when
/// the component implements neither world or a call fails.
pub fn check_granted(
    bytes: &[u8],
    limits: Limits,
    config: &str,
    task_type: &str,
    grants: Grants,
) -> anyhow::Result<CheckReport> {
    let mut refused = None;
    let host = PluginHost::new(HostConfig {
        limits,
        ..HostConfig::default()
    })?;
    let mut out = String::new();
    let info = host.inspect(bytes)?;
    writeln!(out, "size:     {} bytes", bytes.len())?;
    writeln!(out, "inline:   {}", inline_advice(bytes))?;
    writeln!(out, "sha256:   {}", info.sha256)?;
    writeln!(
        out,
        "compile:  {:.1} ms",
        info.compile_time.as_secs_f64() * 1e3
    )?;
    writeln!(out, "exports:  {}", info.exports.join(", "))?;
    writeln!(out, "imports:  {}", info.imports.join(", "))?;
    writeln!(
        out,
        "limits:   deadline {:?}, memory {} MiB",
        limits.deadline,
        limits.memory_bytes >> 20
    )?;
    let policy = host.load_policy_blocking("checked", bytes, None);
    let mutator = host.load_mutator_blocking("checked", bytes, None);
    match (policy, mutator) {
        (Ok(policy), _) => {
            let world = World::SchedulingPolicy.at(policy.contract());
            writeln!(out, "world:    {world}")?;
            // A call past the deadline at one size is reported, not fatal: the policy serves
            // smaller clusters as it is, and larger ones with a longer deadline (interpreted
            // guests, Python and JS, take milliseconds per hundred nodes).
            let mut over_deadline = Vec::new();
            let mut served = 0;
            for n in [100, 1000] {
                let (job, nodes) = sample::allocate_input(n, 2);
                let (result, t) = timed(20, || policy.allocate_blocking(&job, &nodes));
                match result {
                    Ok(result) => {
                        served += 1;
                        writeln!(
                            out,
                            "allocate: job of {} replicas on {n} nodes -> {} in {} (fresh instance + call)",
                            job.total_replicas(),
                            result.join(","),
                            micros(t)
                        )?;
                    }
                    Err(PluginError::Timeout { deadline, .. }) => {
                        writeln!(
                            out,
                            "allocate: job of {} replicas on {n} nodes -> ran past the {deadline:?} deadline",
                            job.total_replicas(),
                        )?;
                        over_deadline.push(format!("allocate on {n} nodes"));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let (jobs, nodes) = sample::optimize_input(50, 100);
            let (plan, t) = timed(5, || policy.optimize_blocking(&jobs, &nodes, &[]));
            match plan {
                Ok(plan) => writeln!(
                    out,
                    "optimize: 50 jobs on 100 nodes -> {} jobs placed in {}",
                    plan.len(),
                    micros(t)
                )?,
                Err(PluginError::Timeout { deadline, .. }) => {
                    writeln!(
                        out,
                        "optimize: 50 jobs on 100 nodes -> ran past the {deadline:?} deadline"
                    )?;
                    over_deadline.push("optimize of 50 jobs on 100 nodes".to_string());
                }
                Err(e) => return Err(e.into()),
            }
            if served == 0 {
                anyhow::bail!(
                    "every allocate call ran past the {:?} deadline: measure with a longer \
                     --deadline-ms, and give the plugin that much with its ConfigMap's deadlineMs",
                    limits.deadline
                );
            }
            if !over_deadline.is_empty() {
                writeln!(
                    out,
                    "deadline: {} ran past {:?}: on clusters that large, give the plugin more with \
                     its ConfigMap's deadlineMs (measure with --deadline-ms here)",
                    over_deadline.join(" and "),
                    limits.deadline
                )?;
            }
        }
        (Err(_), Ok(mutator)) => {
            let world = World::PodMutator.at(mutator.contract());
            writeln!(out, "world:    {world}")?;
            let (mut ctx, pod): (TaskContext, _) = sample::pod(task_type);
            ctx.config = config.to_string();
            let (result, t) = timed(20, || mutator.mutate_blocking(&ctx, &pod));
            let mutated = result?;
            let before = serde_json::to_value(&pod)?;
            let after = serde_json::to_value(&mutated)?;
            let patch = json_patch::diff(&before, &after);
            writeln!(
                out,
                "mutate:   sample {task_type} pod in {} (fresh instance + call)",
                micros(t)
            )?;
            writeln!(out, "changes:  {}", serde_json::to_string(&patch)?)?;
            // The same check the operator makes on every call and at load.
            let uses = capabilities::uses(&before, &after);
            let list = |grants: bool| -> String {
                let items: Vec<String> = uses
                    .by_capability
                    .iter()
                    .filter(|(c, _)| c.grant().is_some() == grants && **c != Capability::Operator)
                    .map(|(c, change)| format!("{c} ({change})"))
                    .collect();
                if items.is_empty() {
                    "none".to_string()
                } else {
                    items.join(", ")
                }
            };
            writeln!(out, "uses:     {} (default capabilities)", list(false))?;
            writeln!(out, "needs:    {}", list(true))?;
            writeln!(
                out,
                "granted:  {}",
                if grants.is_empty() {
                    "none".to_string()
                } else {
                    grants.to_string()
                }
            )?;
            refused = uses
                .refusal(grants)
                .map(|why| format!("the operator would refuse this mutator: {why}"));
            if refused.is_none() {
                let needs = uses.needs();
                writeln!(
                    out,
                    "ConfigMap: {}",
                    if needs.is_empty() {
                        "no grants needed".to_string()
                    } else {
                        format!("data.grants must include {needs}")
                    }
                )?;
            }
        }
        (Err(p), Err(m)) => {
            return Err(anyhow::anyhow!(
                "not a diorch plugin: as a policy: {p}; as a mutator: {m}"
            ));
        }
    }
    Ok(CheckReport { text: out, refused })
}

/// What `plugin run` was asked to do, with the names to print for its inputs.
pub struct RunOptions {
    pub plugin_file: String,
    pub snapshot_file: String,
    pub call: RunCall,
    pub job: Option<String>,
    pub compare: Option<NativePolicy>,
    pub limits: Limits,
}

/// The `run` report and how its calls went.
pub struct RunReport {
    pub text: String,
    /// Plugin calls made (timing repeats not counted).
    pub calls: usize,
    /// Calls that trapped, timed out or returned an answer the host's checks refuse.
    pub failures: usize,
}

/// Timing repeats per call: the answer is deterministic, the best time is the least noisy.
const RUN_REPEATS: usize = 5;

/// Runs the policy in `bytes` on `snapshot` (blocking) and renders the report. An error means
/// the inputs are unusable (not a policy component); plugin failures are counted in the report.
pub fn run_snapshot(
    bytes: &[u8],
    snapshot: &Snapshot,
    options: &RunOptions,
) -> anyhow::Result<RunReport> {
    let host = PluginHost::new(HostConfig {
        limits: options.limits,
        ..HostConfig::default()
    })?;
    let name = std::path::Path::new(&options.plugin_file)
        .file_stem()
        .map_or_else(
            || "plugin".to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
    let started = Instant::now();
    let policy = match host.load_policy_blocking(&name, bytes, None) {
        Ok(p) => p,
        Err(e) => {
            if host.load_mutator_blocking(&name, bytes, None).is_ok() {
                anyhow::bail!(
                    "{} is a pod mutator, not a scheduling policy (try `diorch plugin check`)",
                    options.plugin_file
                );
            }
            return Err(e.into());
        }
    };
    let compile = started.elapsed();
    let mut report = RunReport {
        text: String::new(),
        calls: 0,
        failures: 0,
    };
    let out = &mut report.text;
    let schedulable = snapshot.nodes.iter().filter(|n| n.schedulable()).count();
    writeln!(
        out,
        "snapshot  {}: {} nodes ({schedulable} schedulable), {} jobs ({} unplaced), taken {}",
        options.snapshot_file,
        snapshot.nodes.len(),
        snapshot.jobs.len(),
        snapshot.unplaced_jobs().count(),
        if snapshot.taken_at.is_empty() {
            "-"
        } else {
            &snapshot.taken_at
        }
    )?;
    writeln!(
        out,
        "plugin    {}: scheduling policy, sha256 {}, compiled in {:.1} ms",
        options.plugin_file,
        &policy.sha256()[..12],
        compile.as_secs_f64() * 1e3
    )?;
    match options.call {
        RunCall::Allocate => run_allocate(&policy, snapshot, options, &mut report)?,
        RunCall::Optimize => run_optimize(&policy, snapshot, options, &mut report)?,
    }
    Ok(report)
}

fn run_allocate(
    policy: &WasmPolicy,
    snapshot: &Snapshot,
    options: &RunOptions,
    report: &mut RunReport,
) -> anyhow::Result<()> {
    let out = &mut report.text;
    let (jobs, mut nodes): (Vec<&Job>, Vec<Node>) = match &options.job {
        Some(key) => (
            vec![snapshot.job(key)?],
            // A job placed already is allocated as if re-admitted: its own usage is free again.
            snapshot.nodes_without(&[key.as_str()]),
        ),
        None => (snapshot.unplaced_jobs().collect(), snapshot.nodes.clone()),
    };
    if jobs.is_empty() {
        writeln!(
            out,
            "call      allocate: every job of the snapshot is placed; name one with --job"
        )?;
        return Ok(());
    }
    match &options.job {
        Some(key) => writeln!(
            out,
            "call      allocate {key}, as if re-admitted: its current usage counts as free"
        )?,
        None => writeln!(
            out,
            "call      allocate, {} unplaced job(s) in snapshot order; each placement uses \
             capacity the next job then lacks",
            jobs.len()
        )?,
    }
    let (mut placed, mut refused) = (0, 0);
    for job in jobs {
        writeln!(out)?;
        writeln!(out, "job {}: {}", job.key, describe_job(job))?;
        let (raw, time) = timed(RUN_REPEATS, || policy.allocate_raw(job, &nodes));
        report.calls += 1;
        let answer = raw.and_then(|alloc| checks::allocation(policy.name(), job, &nodes, &alloc));
        let before = nodes.clone();
        let ours = match answer {
            Ok(names) => {
                write_placement(out, "  ", job, &names)?;
                writeln!(out, "  check     ok: one ready node per replica")?;
                snapshot::take(&mut nodes, job, &names);
                placed += 1;
                Some(names)
            }
            Err(PluginError::Refused { error, .. }) => {
                writeln!(out, "  refused   {error}")?;
                refused += 1;
                None
            }
            Err(e) => {
                writeln!(out, "  FAILED    {} ({})", e, e.reason())?;
                report.failures += 1;
                None
            }
        };
        writeln!(
            out,
            "  time      {} (best of {RUN_REPEATS}; fresh instance + call)",
            micros(time)
        )?;
        if let Some(native) = options.compare {
            let theirs = native.allocate_now(job, &before);
            write_comparison(out, native, job, ours.as_deref(), theirs)?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "summary   {placed} placed, {refused} refused, {} failed",
        report.failures
    )?;
    Ok(())
}

fn run_optimize(
    policy: &WasmPolicy,
    snapshot: &Snapshot,
    options: &RunOptions,
    report: &mut RunReport,
) -> anyhow::Result<()> {
    let out = &mut report.text;
    let jobs: Vec<Job> = snapshot.preemptible_jobs().cloned().collect();
    if jobs.is_empty() {
        writeln!(
            out,
            "call      optimize: the snapshot has no preemptible job"
        )?;
        return Ok(());
    }
    let keys: Vec<&str> = jobs.iter().map(|j| j.key.as_str()).collect();
    // As the operator does: the jobs being re-planned give their current capacity back.
    let nodes = snapshot.nodes_without(&keys);
    writeln!(
        out,
        "call      optimize over {} preemptible job(s), previous plan of {} job(s); their \
         current usage counts as free",
        jobs.len(),
        snapshot.previous.len()
    )?;
    let previous = checks::plan_to_indices(&jobs, &nodes, &snapshot.previous);
    let (raw, time) = timed(RUN_REPEATS, || {
        policy.optimize_raw(&jobs, &nodes, &previous)
    });
    report.calls += 1;
    let answer = raw.and_then(|plan| checks::plan(policy.name(), &jobs, &nodes, &plan));
    let theirs = options.compare.map(|native| {
        (
            native,
            native.optimize_now(&jobs, &nodes, &snapshot.previous),
        )
    });
    let plan = match answer {
        Ok(plan) => plan,
        Err(e) => {
            let what = match &e {
                PluginError::Refused { error, .. } => format!("refused   {error}"),
                e => {
                    report.failures += 1;
                    format!("FAILED    {e} ({})", e.reason())
                }
            };
            writeln!(out)?;
            writeln!(out, "plan      {what}")?;
            writeln!(
                out,
                "time      {} (best of {RUN_REPEATS}; fresh instance + call)",
                micros(time)
            )?;
            if let Some((native, Ok(theirs))) = &theirs {
                writeln!(out, "{}  places {} job(s)", native.describe(), theirs.len())?;
            }
            return Ok(());
        }
    };
    let find =
        |plan: &[JobPlan], key: &str| plan.iter().find(|p| p.job == key).map(|p| p.nodes.clone());
    for job in &jobs {
        writeln!(out)?;
        writeln!(out, "job {}: {}", job.key, describe_job(job))?;
        let ours = find(&plan, &job.key);
        match &ours {
            Some(names) => write_placement(out, "  ", job, names)?,
            None => writeln!(out, "  not placed by this plan (waits for capacity)")?,
        }
        let was = find(&snapshot.previous, &job.key);
        match (&ours, &was) {
            (Some(now), Some(was)) => {
                writeln!(out, "  previous  previous → now: {}", diff(job, was, now))?;
            }
            (Some(_), None) => writeln!(out, "  previous  not in the previous plan")?,
            (None, Some(_)) => writeln!(out, "  previous  was placed by the previous plan")?,
            (None, None) => {}
        }
        if let Some((native, theirs)) = &theirs {
            let theirs = match theirs {
                Ok(plan) => Ok(find(plan, &job.key)),
                Err(e) => Err(e.clone()),
            };
            match theirs {
                Ok(Some(names)) => {
                    write_comparison(out, *native, job, ours.as_deref(), Ok(names))?;
                }
                Ok(None) => writeln!(out, "  {}  does not place it", native.describe())?,
                Err(e) => write_comparison(out, *native, job, ours.as_deref(), Err(e))?,
            }
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "check     ok: known jobs, each once, one ready node per replica"
    )?;
    writeln!(
        out,
        "time      {} (best of {RUN_REPEATS}; fresh instance + call)",
        micros(time)
    )?;
    writeln!(
        out,
        "summary   {} of {} job(s) placed",
        plan.len(),
        jobs.len()
    )?;
    Ok(())
}

fn describe_job(job: &Job) -> String {
    let tasks: Vec<String> = job
        .tasks
        .iter()
        .map(|t| format!("{}×{}", t.name, t.replicas))
        .collect();
    format!(
        "{} replicas ({}), priority {}{}",
        job.total_replicas(),
        tasks.join(", "),
        job.priority,
        if job.preemptible { ", preemptible" } else { "" }
    )
}

/// `0-3` for consecutive ranks, `0,2` otherwise.
fn ranges(ranks: &[usize]) -> String {
    let mut parts: Vec<String> = vec![];
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            ranks[i].to_string()
        } else {
            format!("{}-{}", ranks[i], ranks[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// One row per node, in order of first use: the node, its replica count and which ranks of
/// which task it runs.
fn write_placement(
    out: &mut String,
    indent: &str,
    job: &Job,
    nodes: &[String],
) -> std::fmt::Result {
    /// A node and, per task, the global ranks it runs.
    type Row<'a> = (&'a str, Vec<(&'a str, Vec<usize>)>);
    let mut rows: Vec<Row<'_>> = vec![];
    for (rank, (task, node)) in job.replicas().zip(nodes).enumerate() {
        let i = match rows.iter().position(|(n, _)| *n == node.as_str()) {
            Some(i) => i,
            None => {
                rows.push((node, vec![]));
                rows.len() - 1
            }
        };
        let row = &mut rows[i].1;
        match row.iter_mut().find(|(t, _)| *t == task.name.as_str()) {
            Some((_, ranks)) => ranks.push(rank),
            None => row.push((&task.name, vec![rank])),
        }
    }
    let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0).max(4);
    writeln!(out, "{indent}{:width$}  REPLICAS  RANKS", "NODE")?;
    for (node, tasks) in rows {
        let count: usize = tasks.iter().map(|(_, r)| r.len()).sum();
        let ranks: Vec<String> = tasks
            .iter()
            .map(|(t, r)| format!("{t} {}", ranges(r)))
            .collect();
        writeln!(
            out,
            "{indent}{node:width$}  {count:<8}  {}",
            ranks.join(", ")
        )?;
    }
    Ok(())
}

/// Where two placements of `job` differ, rank by rank.
fn diff(job: &Job, from: &[String], to: &[String]) -> String {
    const SHOWN: usize = 6;
    let moved: Vec<String> = job
        .replicas()
        .zip(from.iter().zip(to))
        .enumerate()
        .filter(|(_, (_, (a, b)))| a != b)
        .map(|(rank, (task, (a, b)))| format!("rank {rank} ({}) {a} → {b}", task.name))
        .collect();
    if moved.is_empty() {
        return "same placement".to_string();
    }
    let more = moved.len().saturating_sub(SHOWN);
    let mut text = format!(
        "{} of {} replicas differ: {}",
        moved.len(),
        job.total_replicas(),
        moved[..moved.len().min(SHOWN)].join(", ")
    );
    if more > 0 {
        let _ = write!(text, ", and {more} more");
    }
    text
}

/// The built-in policy's answer for `job` and how the plugin's differs from it.
fn write_comparison(
    out: &mut String,
    native: NativePolicy,
    job: &Job,
    ours: Option<&[String]>,
    theirs: Result<Vec<String>, PluginError>,
) -> anyhow::Result<()> {
    let name = native.describe();
    match (theirs, ours) {
        (Ok(theirs), Some(ours)) if theirs == ours => {
            writeln!(out, "  {name}  same placement")?;
        }
        (Ok(theirs), ours) => {
            writeln!(out, "  {name}")?;
            write_placement(out, "    ", job, &theirs)?;
            if let Some(ours) = ours {
                writeln!(
                    out,
                    "  diff      built-in → plugin: {}",
                    diff(job, &theirs, ours)
                )?;
            }
        }
        (Err(e), _) => writeln!(out, "  {name}  {e}")?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_says_how_a_component_travels() {
        assert_eq!(inline_advice(&[1; 1000]), "fits a ConfigMap as it is");
        // Compresses well: fits compressed.
        let advice = inline_advice(&vec![7; 4 << 20]);
        assert!(
            advice.starts_with("fits a ConfigMap compressed ("),
            "{advice}"
        );
        // Random-looking bytes do not compress: a registry.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let noise: Vec<u8> = (0..(1 << 20))
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let advice = inline_advice(&noise);
        assert!(
            advice.contains("even compressed") && advice.contains("diorch plugin push"),
            "{advice}"
        );
        let advice = inline_advice(&vec![0; spec::INLINE_MAX_BYTES + 1]);
        assert!(
            advice.contains("over the") && advice.contains("data.image"),
            "{advice}"
        );
    }
}
