//! `diorch webhook-cert`: a self-signed CA and a serving certificate for the webhook Service,
//! kept in a `kubernetes.io/tls` Secret (or in files, for an operator run outside the
//! cluster), with the CA patched into `caBundle` of the webhook configurations.
//!
//! Idempotent: a certificate that covers the names and stays valid beyond the renewal margin is
//! kept, so running it again (the install's Job, the daily CronJob) changes nothing but a stale
//! caBundle; inside the margin it is replaced, and the caBundle trusts the replaced CA too until
//! the next run (`ca_bundle`). Owns only that Secret (or directory) and the caBundle fields; it
//! is an install step run with its own rights, not part of the operator's RBAC.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ObjectMeta};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Why the certificate could not be made or installed.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot generate the certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot update {0}: it changed under every one of three attempts; run again")]
    Conflict(String),
    #[error(
        "no MutatingWebhookConfiguration or ValidatingWebhookConfiguration named {0:?}: apply the webhook configurations (deploy/) first"
    )]
    NoConfiguration(String),
}

/// What `run` keeps or makes, and where: the flags of `diorch webhook-cert` (`cli::webhook_cert`
/// parses them).
#[derive(Debug, Clone)]
pub struct CertOptions {
    /// Namespace of the webhook Service and of the Secret.
    pub namespace: String,
    /// Name of the webhook Service: the certificate names `<service>.<namespace>.svc` and its
    /// shorter and longer forms.
    pub service: String,
    /// The `kubernetes.io/tls` Secret that holds tls.crt, tls.key and ca.crt.
    pub secret: String,
    /// A directory to hold tls.crt, tls.key and ca.crt instead of the Secret.
    pub out_dir: Option<PathBuf>,
    /// Name of the MutatingWebhookConfiguration and ValidatingWebhookConfiguration whose
    /// webhooks get the CA in `caBundle`.
    pub webhook_configuration: String,
    /// Extra DNS names or IP addresses the certificate is valid for.
    pub hosts: Vec<String>,
    /// Validity of a new certificate, in days.
    pub validity_days: u32,
    /// Renew a kept certificate that expires within this many days.
    pub renew_before_days: u32,
}

impl CertOptions {
    /// Every name the serving certificate must cover.
    pub fn names(&self) -> Vec<String> {
        let (s, ns) = (&self.service, &self.namespace);
        let mut names = vec![
            s.clone(),
            format!("{s}.{ns}"),
            format!("{s}.{ns}.svc"),
            format!("{s}.{ns}.svc.cluster.local"),
        ];
        names.extend(self.hosts.iter().cloned());
        names.dedup();
        names
    }
}

/// A CA and the serving certificate and key it signed, PEM-encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

/// Makes a new CA and a serving certificate for `names`, valid from an hour ago (clock skew)
/// for `days`.
pub fn generate(names: &[String], days: u32) -> Result<Bundle, CertError> {
    let now = time::OffsetDateTime::now_utc();
    let not_before = now - time::Duration::hours(1);
    let not_after = now + time::Duration::days(i64::from(days.max(1)));

    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "diorch-webhook-ca");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.not_before = not_before;
    ca.not_after = not_after;
    let ca_cert = ca.self_signed(&ca_key)?;

    let key = KeyPair::generate()?;
    let mut serving = CertificateParams::new(names.to_vec())?;
    serving.distinguished_name.push(
        DnType::CommonName,
        names.first().cloned().unwrap_or_default(),
    );
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    serving.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    serving.not_before = not_before;
    serving.not_after = not_after;
    let issuer = Issuer::new(ca, &ca_key);
    let cert = serving.signed_by(&key, &issuer)?;
    Ok(Bundle {
        ca: ca_cert.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Why an existing bundle must be replaced, or `None` when it can be kept.
pub fn needs_renewal(
    bundle: &Bundle,
    names: &[String],
    now_unix: i64,
    renew_before_days: u32,
) -> Option<String> {
    use x509_parser::extensions::GeneralName;
    if bundle.key.trim().is_empty() || bundle.ca.trim().is_empty() {
        return Some("the key or the CA is missing".into());
    }
    let Ok((_, ca_pem)) = x509_parser::pem::parse_x509_pem(bundle.ca.as_bytes()) else {
        return Some("the CA is not a PEM certificate".into());
    };
    let Ok(ca) = ca_pem.parse_x509() else {
        return Some("the CA is not an X.509 certificate".into());
    };
    let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(bundle.cert.as_bytes()) else {
        return Some("the certificate is not PEM".into());
    };
    let Ok(cert) = pem.parse_x509() else {
        return Some("the certificate is not X.509".into());
    };
    let margin = i64::from(renew_before_days) * 86_400;
    let expires = cert.validity().not_after.timestamp();
    if expires - margin <= now_unix {
        return Some(format!(
            "it expires within {renew_before_days} days (at unix time {expires})"
        ));
    }
    if ca.validity().not_after.timestamp() - margin <= now_unix {
        return Some(format!("its CA expires within {renew_before_days} days"));
    }
    let mut covered: Vec<String> = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => covered.push(d.to_string()),
                GeneralName::IPAddress(bytes) => {
                    let ip = match bytes.len() {
                        4 => <[u8; 4]>::try_from(*bytes).ok().map(IpAddr::from),
                        16 => <[u8; 16]>::try_from(*bytes).ok().map(IpAddr::from),
                        _ => None,
                    };
                    covered.extend(ip.map(|ip| ip.to_string()));
                }
                _ => {}
            }
        }
    }
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| {
            let wanted = n
                .parse::<IpAddr>()
                .map_or_else(|_| (*n).clone(), |ip| ip.to_string());
            !covered.contains(&wanted)
        })
        .collect();
    if !missing.is_empty() {
        return Some(format!("it does not cover {missing:?}"));
    }
    if !issued_by(bundle) {
        return Some("the certificate was not issued by the CA kept with it".into());
    }
    None
}

/// Whether the serving certificate's signature checks out against the CA (webpki, as a TLS
/// client would check it; names and expiry are checked separately with clearer messages).
fn issued_by(bundle: &Bundle) -> bool {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, TrustAnchor};
    let (Ok(ca), Ok(cert)) = (
        CertificateDer::from_pem_slice(bundle.ca.as_bytes()),
        CertificateDer::from_pem_slice(bundle.cert.as_bytes()),
    ) else {
        return false;
    };
    let Ok(anchor) = webpki::anchor_from_trusted_cert(&ca).map(|a: TrustAnchor<'_>| a.to_owned())
    else {
        return false;
    };
    let Ok(end_entity) = webpki::EndEntityCert::try_from(&cert) else {
        return false;
    };
    let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    let at = rustls::pki_types::UnixTime::now();
    end_entity
        .verify_for_usage(
            algorithms.all,
            &[anchor],
            &[],
            at,
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .is_ok()
}

/// What `run` did, one line each, for the command's output.
pub type Report = Vec<String>;

/// Keeps or replaces the certificate, then patches the CA into the webhook configurations.
pub async fn run(client: Client, options: &CertOptions) -> Result<Report, CertError> {
    let names = options.names();
    let now = jiff::Timestamp::now().as_second();
    let mut report = Vec::new();
    // The bundle this run replaces, if it does: its CA stays trusted a while (`ca_bundle`).
    let mut replaced = None;
    let bundle = match &options.out_dir {
        Some(dir) => {
            let existing = read_dir_bundle(dir);
            replaced.clone_from(&existing);
            keep_or_make(
                existing,
                &names,
                now,
                options,
                &mut report,
                &format!("directory {}", dir.display()),
            )
            .and_then(|(bundle, changed)| {
                if changed {
                    write_dir_bundle(dir, &bundle)?;
                } else {
                    replaced = None;
                }
                Ok(bundle)
            })?
        }
        None => {
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &options.namespace);
            let what = format!("secret {}/{}", options.namespace, options.secret);
            let current =
                secrets
                    .get_opt(&options.secret)
                    .await
                    .map_err(|source| CertError::Kube {
                        what: format!("cannot read {what}"),
                        source,
                    })?;
            let existing = current.as_ref().and_then(secret_bundle);
            replaced.clone_from(&existing);
            let (bundle, changed) =
                keep_or_make(existing, &names, now, options, &mut report, &what)?;
            if changed {
                write_secret(&secrets, current, &options.secret, &bundle)
                    .await
                    .map_err(|source| CertError::Kube {
                        what: format!("cannot write {what}"),
                        source,
                    })?;
            } else {
                replaced = None;
            }
            bundle
        }
    };
    let trusted = ca_bundle(&bundle, replaced.as_ref(), now);
    if trusted != bundle.ca {
        report.push("caBundle: the new CA and, until the next run, the replaced one".into());
    }
    let ca = base64::engine::general_purpose::STANDARD.encode(trusted.as_bytes());
    let mut found = 0;
    for (kind, plural) in [
        (
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
        ),
        (
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        ),
    ] {
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource::from_gvk_with_plural(&gvk, plural),
        );
        let what = format!("{} {}", kind.to_lowercase(), options.webhook_configuration);
        if let Some(n) = patch_ca(&api, &options.webhook_configuration, &ca, &what).await? {
            found += 1;
            report.push(format!("{what}: caBundle {n}"));
        }
    }
    if found == 0 {
        return Err(CertError::NoConfiguration(
            options.webhook_configuration.clone(),
        ));
    }
    Ok(report)
}

/// The CAs to publish in `caBundle`: the bundle's own, followed by the replaced bundle's while
/// that is still valid. A renewal writes the Secret and the caBundle at once, but the webhook
/// pods serve the old certificate until the kubelet projects the new Secret into them (up to
/// a minute or two); trusting both CAs meanwhile keeps every admission call working through the
/// rotation (with `failurePolicy: Fail` a gap would refuse every DIJob write). The next run
/// keeps the new certificate and so publishes its CA alone.
pub fn ca_bundle(bundle: &Bundle, replaced: Option<&Bundle>, now_unix: i64) -> String {
    let still_valid = |pem: &str| {
        x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .ok()
            .and_then(|(_, pem)| {
                pem.parse_x509()
                    .ok()
                    .map(|c| c.validity().not_after.timestamp() > now_unix)
            })
            .unwrap_or(false)
    };
    match replaced {
        Some(old) if old.ca.trim() != bundle.ca.trim() && still_valid(&old.ca) => {
            format!("{}\n{}\n", bundle.ca.trim_end(), old.ca.trim_end())
        }
        _ => bundle.ca.clone(),
    }
}

fn keep_or_make(
    existing: Option<Bundle>,
    names: &[String],
    now: i64,
    options: &CertOptions,
    report: &mut Report,
    what: &str,
) -> Result<(Bundle, bool), CertError> {
    let why = match &existing {
        Some(b) => needs_renewal(b, names, now, options.renew_before_days),
        None => Some("there is none".into()),
    };
    match (existing, why) {
        (Some(bundle), None) => {
            report.push(format!("{what}: kept (valid for {})", names.join(", ")));
            Ok((bundle, false))
        }
        (_, why) => {
            let why = why.unwrap_or_else(|| "there is none".into());
            let bundle = generate(names, options.validity_days)?;
            report.push(format!(
                "{what}: new certificate for {} valid {} days ({why})",
                names.join(", "),
                options.validity_days
            ));
            Ok((bundle, true))
        }
    }
}

fn secret_bundle(secret: &Secret) -> Option<Bundle> {
    let data = secret.data.as_ref()?;
    let get = |k: &str| {
        data.get(k)
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    };
    Some(Bundle {
        ca: get("ca.crt")?,
        cert: get("tls.crt")?,
        key: get("tls.key")?,
    })
}

async fn write_secret(
    secrets: &Api<Secret>,
    current: Option<Secret>,
    name: &str,
    bundle: &Bundle,
) -> Result<(), kube::Error> {
    let data = [
        ("ca.crt", &bundle.ca),
        ("tls.crt", &bundle.cert),
        ("tls.key", &bundle.key),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
    .collect();
    let labels = [(
        "app.kubernetes.io/managed-by".to_string(),
        "diorch-webhook-cert".to_string(),
    )]
    .into();
    match current {
        // The Secret's type cannot change; a Secret of another type is replaced whole.
        Some(mut s) if s.type_.as_deref() == Some("kubernetes.io/tls") => {
            s.data = Some(data);
            s.metadata
                .labels
                .get_or_insert_with(Default::default)
                .extend(labels);
            secrets
                .replace(name, &crate::writes::post_params(), &s)
                .await?;
        }
        other => {
            if other.is_some() {
                secrets.delete(name, &Default::default()).await?;
            }
            let s = Secret {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    labels: Some(labels),
                    ..Default::default()
                },
                type_: Some("kubernetes.io/tls".into()),
                data: Some(data),
                ..Default::default()
            };
            secrets.create(&crate::writes::post_params(), &s).await?;
        }
    }
    Ok(())
}

fn read_dir_bundle(dir: &Path) -> Option<Bundle> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    Some(Bundle {
        ca: read("ca.crt")?,
        cert: read("tls.crt")?,
        key: read("tls.key")?,
    })
}

/// Writes each file beside its final name and renames it, so a server re-reading the
/// directory sees whole files (a key from the old pair is refused as a mismatch and retried).
pub fn write_dir_bundle(dir: &Path, bundle: &Bundle) -> Result<(), CertError> {
    let io = |what: String| move |source| CertError::Io { what, source };
    std::fs::create_dir_all(dir).map_err(io(format!("cannot create {}", dir.display())))?;
    for (file, content, private) in [
        ("ca.crt", &bundle.ca, false),
        ("tls.key", &bundle.key, true),
        ("tls.crt", &bundle.cert, false),
    ] {
        let tmp = dir.join(format!(".{file}.tmp"));
        let path = dir.join(file);
        write_private(&tmp, content.as_bytes(), private)
            .map_err(io(format!("cannot write {}", tmp.display())))?;
        std::fs::rename(&tmp, &path).map_err(io(format!("cannot write {}", path.display())))?;
    }
    Ok(())
}

fn write_private(path: &Path, content: &[u8], private: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    options.open(path)?.write_all(content)
}

/// Sets `caBundle` (base64, as on the wire) of every webhook in the named configuration,
/// retrying on conflicts. `None` when no such configuration exists; otherwise what changed.
async fn patch_ca(
    api: &Api<DynamicObject>,
    name: &str,
    ca: &str,
    what: &str,
) -> Result<Option<String>, CertError> {
    for _ in 0..3 {
        let Some(mut config) = api.get_opt(name).await.map_err(|source| CertError::Kube {
            what: format!("cannot read {what}"),
            source,
        })?
        else {
            return Ok(None);
        };
        let webhooks = config
            .data
            .get_mut("webhooks")
            .and_then(serde_json::Value::as_array_mut);
        let mut count = 0;
        let mut stale = 0;
        for webhook in webhooks.into_iter().flatten() {
            count += 1;
            let field = &mut webhook["clientConfig"]["caBundle"];
            if field.as_str() != Some(ca) {
                stale += 1;
                *field = serde_json::Value::from(ca);
            }
        }
        if stale == 0 {
            return Ok(Some(format!("already current ({count} webhooks)")));
        }
        match api
            .replace(name, &crate::writes::post_params(), &config)
            .await
        {
            Ok(_) => return Ok(Some(format!("patched ({stale} of {count} webhooks)"))),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(source) => {
                return Err(CertError::Kube {
                    what: format!("cannot update {what}"),
                    source,
                });
            }
        }
    }
    Err(CertError::Conflict(what.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec![
            "diorch-webhook.diorch-system.svc".to_string(),
            "127.0.0.1".to_string(),
        ]
    }

    #[test]
    fn a_new_bundle_is_kept_until_it_nears_expiry_or_misses_a_name() {
        let bundle = generate(&names(), 10).expect("generate");
        let now = jiff::Timestamp::now().as_second();
        assert_eq!(needs_renewal(&bundle, &names(), now, 5), None);
        let why = needs_renewal(&bundle, &names(), now, 11).expect("near expiry");
        assert!(why.contains("expires within 11 days"), "{why}");
        let mut more = names();
        more.push("other.example".into());
        let why = needs_renewal(&bundle, &more, now, 5).expect("missing name");
        assert!(why.contains("other.example"), "{why}");
        let other = generate(&names(), 10).expect("generate");
        let mixed = Bundle {
            ca: other.ca,
            ..bundle.clone()
        };
        assert!(
            needs_renewal(&mixed, &names(), now, 5)
                .is_some_and(|w| w.contains("not issued by the CA"))
        );
        let garbage = Bundle {
            cert: "nonsense".into(),
            ..bundle
        };
        assert!(needs_renewal(&garbage, &names(), now, 5).is_some());
    }

    #[test]
    fn the_serving_certificate_chains_to_the_ca_for_rustls() {
        use rustls::client::danger::ServerCertVerifier;
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
        let bundle = generate(&names(), 10).expect("generate");
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(bundle.ca.as_bytes()).expect("ca"))
            .expect("root");
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
                .build()
                .expect("verifier");
        let cert = CertificateDer::from_pem_slice(bundle.cert.as_bytes()).expect("cert");
        for name in ["diorch-webhook.diorch-system.svc", "127.0.0.1"] {
            verifier
                .verify_server_cert(
                    &cert,
                    &[],
                    &ServerName::try_from(name).expect("name"),
                    &[],
                    UnixTime::now(),
                )
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert!(
            verifier
                .verify_server_cert(
                    &cert,
                    &[],
                    &ServerName::try_from("elsewhere.example").expect("name"),
                    &[],
                    UnixTime::now(),
                )
                .is_err()
        );
    }

    /// Whether `bundle`'s serving certificate verifies for the Service name against `ca_pem`
    /// (every certificate in it a root), as the API server checks a webhook.
    fn trusted_by(ca_pem: &str, bundle: &Bundle) -> bool {
        use rustls::client::danger::ServerCertVerifier;
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert.expect("PEM")).expect("root");
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
                .build()
                .expect("verifier");
        let cert = CertificateDer::from_pem_slice(bundle.cert.as_bytes()).expect("cert");
        verifier
            .verify_server_cert(
                &cert,
                &[],
                &ServerName::try_from("diorch-webhook.diorch-system.svc").expect("name"),
                &[],
                UnixTime::now(),
            )
            .is_ok()
    }

    #[test]
    fn a_renewal_publishes_both_cas_until_the_next_run_so_no_admission_call_fails() {
        let now = jiff::Timestamp::now().as_second();
        let old = generate(&names(), 10).expect("generate");
        let new = generate(&names(), 10).expect("generate");
        // Right after the renewal the pods may still serve the old certificate, or already the
        // new one: the caBundle must trust both.
        let during = ca_bundle(&new, Some(&old), now);
        assert!(trusted_by(&during, &old), "the old certificate is refused");
        assert!(trusted_by(&during, &new), "the new certificate is refused");
        // The next run keeps the new bundle: its CA alone, the old one no longer trusted.
        let after = ca_bundle(&new, None, now);
        assert!(trusted_by(&after, &new) && !trusted_by(&after, &old));
        // A kept bundle, or an expired or unreadable replaced CA, adds nothing.
        assert_eq!(ca_bundle(&new, Some(&new), now), new.ca);
        let far_future = now + 20 * 86_400;
        assert_eq!(ca_bundle(&new, Some(&old), far_future), new.ca);
        let garbage = Bundle {
            ca: "not a certificate".into(),
            ..old
        };
        assert_eq!(ca_bundle(&new, Some(&garbage), now), new.ca);
    }

    #[test]
    fn files_are_written_whole_and_the_key_privately() {
        let dir = tempfile::tempdir().expect("dir");
        let bundle = generate(&names(), 10).expect("generate");
        write_dir_bundle(dir.path(), &bundle).expect("write");
        assert_eq!(read_dir_bundle(dir.path()), Some(bundle));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("tls.key"))
                .expect("key")
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "key readable by others: {mode:o}");
        }
    }
}
