//! `diorch plugin ...`: the platform team's local tools. `check` validates a component against
//! the worlds and runs it on the built-in samples; `configmap` prints the manifest that loads it;
//! `run` replays a recorded cluster snapshot against a policy and shows where jobs would go;
//! `snapshot` records one from a cluster or the sandbox; `shadow` shows how a policy's shadows
//! compare with it on a running operator's live decisions.
//!
//! `check` also lists the capabilities a mutator's change to the sample pod uses and the grants
//! it needs (see `capabilities`), and fails when `--grants` does not cover them, as the operator
//! would refuse that ConfigMap.
//!
//! Owns: the subcommand arguments and their output; the reports are made in the submodules
//! (`check`, `configmap`, `run`, `record` for `snapshot`, `scaffold` for `new`, `publish` for
//! `push`, `sign` and `keygen`, `shadow`). Must not touch: cluster state (`snapshot` only reads, through
//! the allocator's view; every other command is offline).

pub mod check;
pub mod configmap;
pub mod publish;
pub mod record;
pub mod run;
pub mod scaffold;
pub mod shadow;
mod timing;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

use crate::plugin::capabilities::{self, Grants};
use crate::plugin::snapshot::Snapshot;
use crate::plugin::spec::{self, FailurePolicy, PluginKind, PluginSpec};
use crate::plugin::{Limits, NativePolicy};
use configmap::inline_component;
use publish::RegistryArgs;

// What was public at `plugin::cli` stays public here, by the same names.
pub use check::{CheckReport, check, check_granted};
pub use configmap::{CONFIGMAP_INLINE_CAP, inline_advice};
pub use run::{Builtin, RunCall, RunOptions, RunReport, run_snapshot};

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
        /// Policies: load it as a shadow of this policy (label `diorch.io/shadow-of`): given
        /// every input that policy answers, never applied (`diorch plugin shadow` shows how it
        /// compares).
        #[arg(long, conflicts_with = "replaces")]
        shadow_of: Option<String>,
        /// Policies: answer for this policy instead of it (label `diorch.io/replaces`), which
        /// stays loaded; removing the label rolls back.
        #[arg(long)]
        replaces: Option<String>,
    },
    /// Show how a policy's shadows compare with it on live decisions: counts per shadow and the
    /// latest decisions where they differ (job, active placement, shadow placement, sizes), from
    /// a running operator's metrics address (`GET /v1/policies/NAME/shadow`).
    Shadow {
        /// The policy shadowed, as jobs ask for it.
        policy: String,
        /// The operator's metrics address.
        #[arg(
            long,
            env = "DIORCH_METRICS_URL",
            default_value = "https://127.0.0.1:8443"
        )]
        url: String,
        /// A bearer token allowed `get` on `/plugins` (unless the operator runs with
        /// `--server-auth none`): a file holding it.
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// Print the report as JSON instead of tables.
        #[arg(long)]
        json: bool,
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
            shadow_of,
            replaces,
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
            spec.rollout = match (shadow_of, replaces) {
                (Some(of), _) => spec::Rollout::ShadowOf(of),
                (None, Some(of)) => spec::Rollout::Replaces(of),
                (None, None) => spec::Rollout::Own,
            };
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
        PluginCommand::Shadow {
            policy,
            url,
            token_file,
            json,
        } => {
            let token = match token_file {
                Some(path) => Some(
                    std::fs::read_to_string(&path)
                        .with_context(|| format!("reading {}", path.display()))?
                        .trim()
                        .to_string(),
                ),
                None => None,
            };
            let report = shadow::fetch(&url, &policy, token.as_deref()).await?;
            if json {
                emit(&format!("{}\n", serde_json::to_string_pretty(&report)?))
            } else {
                emit(&shadow::render(&report))
            }
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

/// Writes to stdout; a closed pipe (`| head`) is not an error.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
