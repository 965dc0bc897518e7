//! `diorch webhook-cert`: the flags of the webhook certificate install step, and its report
//! printed one line each.
//!
//! Owns: the command's flags and output. Must not touch: the certificates and what is kept or
//! renewed (`webhook::cert` decides and writes).

use std::path::PathBuf;

use crate::cluster::ClusterArgs;
use crate::webhook::cert::{self, CertOptions};

/// Options of `diorch webhook-cert`.
#[derive(clap::Args, Debug, Clone)]
pub struct CertArgs {
    /// Namespace of the webhook Service and of the Secret.
    #[arg(long, default_value = "diorch-system")]
    pub namespace: String,
    /// Name of the webhook Service: the certificate names `<service>.<namespace>.svc` and its
    /// shorter and longer forms.
    #[arg(long, default_value = "diorch-webhook")]
    pub service: String,
    /// The `kubernetes.io/tls` Secret that holds tls.crt, tls.key and ca.crt.
    #[arg(long, default_value = "diorch-webhook-cert")]
    pub secret: String,
    /// Write tls.crt, tls.key and ca.crt into this directory instead of the Secret (for
    /// `diorch run --webhook-cert-dir` outside the cluster).
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// Name of the MutatingWebhookConfiguration and ValidatingWebhookConfiguration whose
    /// webhooks get the CA in `caBundle`.
    #[arg(long, default_value = "diorch")]
    pub webhook_configuration: String,
    /// Extra DNS names or IP addresses the certificate is valid for (repeatable), e.g.
    /// 127.0.0.1 for a webhook reached by URL.
    #[arg(long = "host")]
    pub hosts: Vec<String>,
    /// Validity of a new certificate, in days.
    #[arg(long, default_value_t = 365)]
    pub validity_days: u32,
    /// Renew a kept certificate that expires within this many days.
    #[arg(long, default_value_t = 30)]
    pub renew_before_days: u32,
}

impl From<CertArgs> for CertOptions {
    fn from(args: CertArgs) -> CertOptions {
        CertOptions {
            namespace: args.namespace,
            service: args.service,
            secret: args.secret,
            out_dir: args.out_dir,
            webhook_configuration: args.webhook_configuration,
            hosts: args.hosts,
            validity_days: args.validity_days,
            renew_before_days: args.renew_before_days,
        }
    }
}

/// Keeps or makes the certificate on the cluster `cluster` names and prints what was done.
pub async fn run(cluster: ClusterArgs, args: CertArgs) -> anyhow::Result<()> {
    let conn = crate::cluster::connect(&cluster.target()).await?;
    for line in cert::run(conn.client, &args.into()).await? {
        say!("{line}");
    }
    Ok(())
}
