//! `diorch replicas`: a client of the replica API (di-server compatible) of a running operator:
//! one call per command, its answer printed for people.
//!
//! Owns: the subcommands' arguments, the request each makes and how its answer is printed.
//! Must not touch: the API itself (`server`), or the cluster (it only speaks HTTP to the
//! operator).

// The flags of `diorch replicas` (no doc comment: the `Command` variant's is its help).
#[derive(clap::Args)]
pub struct ReplicasArgs {
    /// URL of the replica API.
    #[arg(long, env = "DIORCH_SERVER", default_value = "http://127.0.0.1:8081")]
    server: String,
    /// Namespace of a job given by bare name (default: the kubeconfig context's namespace,
    /// in a pod its own namespace, else `default`, as kubectl picks it).
    #[arg(short, long)]
    namespace: Option<String>,
    #[command(subcommand)]
    action: ReplicasAction,
}

#[derive(clap::Subcommand)]
pub enum ReplicasAction {
    /// List the job's replicas by rank (`--detail` adds pod, task, phase and node).
    Get {
        /// `namespace.name`, `namespace/name`, or a name in `--namespace`.
        job: String,
        #[arg(long)]
        detail: bool,
    },
    /// Scale a preemptible job out by N replicas.
    Add {
        job: String,
        replicas: u32,
        /// The elastic task, when the job has several.
        #[arg(long)]
        task: Option<String>,
    },
    /// Scale a preemptible job in by N replicas (highest ranks first), or remove named pods.
    Remove {
        job: String,
        replicas: Option<u32>,
        /// Pods to remove, comma-separated.
        #[arg(long, value_delimiter = ',')]
        pods: Vec<String>,
        #[arg(long)]
        task: Option<String>,
    },
    /// Report profilings (a JSON object), merged into the job's status.profilings.
    Profile { job: String, data: String },
}

/// Runs the command: the namespace of a bare job name filled in, then the call.
pub async fn run(args: ReplicasArgs) -> anyhow::Result<()> {
    let ReplicasArgs {
        server,
        namespace,
        action,
    } = args;
    let namespace = match namespace {
        Some(namespace) => namespace,
        // Only a default to fill in: a kubeconfig that cannot be read leaves `default`.
        None => kube::Config::infer()
            .await
            .map_or_else(|_| "default".to_string(), |c| c.default_namespace),
    };
    call_api(&server, &namespace, action).await?;
    Ok(())
}

/// `diorch replicas ...`: one call, its answer printed for people.
async fn call_api(server: &str, namespace: &str, action: ReplicasAction) -> anyhow::Result<()> {
    use crate::server::client::{api_job_id, call};
    use axum::http::Method;
    use serde_json::{Value, json};

    let path =
        |job: &str, what: &str| format!("/v2alpha1/job/{}/{what}", api_job_id(job, namespace));
    match action {
        ReplicasAction::Get { job, detail } => {
            let query = if detail { "?detail=true" } else { "" };
            let data = call(
                server,
                Method::GET,
                &format!("{}{query}", path(&job, "replicas")),
                None,
            )
            .await?;
            match data {
                Value::Array(items) if !items.is_empty() => {
                    for (rank, item) in items.iter().enumerate() {
                        match item {
                            Value::String(address) => {
                                say!("{rank}\t{}", if address.is_empty() { "-" } else { address })
                            }
                            other => say!(
                                "{}\t{}\t{}\t{}\t{}\t{}",
                                other["rank"],
                                other["address"].as_str().unwrap_or("-"),
                                other["pod"].as_str().unwrap_or("-"),
                                other["task"].as_str().unwrap_or("-"),
                                other["phase"].as_str().unwrap_or("-"),
                                other["node"].as_str().unwrap_or("-")
                            ),
                        }
                    }
                }
                _ => say!("no replicas with an address yet"),
            }
        }
        ReplicasAction::Add {
            job,
            replicas,
            task,
        } => {
            let body = json!({"replicas": replicas, "task": task});
            call(server, Method::POST, &path(&job, "replicas"), Some(&body)).await?;
            say!("requested {replicas} more replicas for {job}");
        }
        ReplicasAction::Remove {
            job,
            replicas,
            pods,
            task,
        } => {
            let body = match (replicas, pods.is_empty()) {
                (Some(n), true) => json!({"replicas": n, "task": task}),
                (None, false) => json!({"pods": pods}),
                _ => anyhow::bail!("give either a replica count or --pods, not both or neither"),
            };
            call(server, Method::DELETE, &path(&job, "replicas"), Some(&body)).await?;
            say!("requested the removal for {job}");
        }
        ReplicasAction::Profile { job, data } => {
            let data: Value = serde_json::from_str(&data)
                .map_err(|e| anyhow::anyhow!("profilings must be JSON: {e}"))?;
            call(
                server,
                Method::POST,
                &path(&job, "profilings"),
                Some(&json!({"data": data})),
            )
            .await?;
            say!("reported profilings for {job}");
        }
    }
    Ok(())
}
