//! The registry side of `diorch plugin`: `push` (a component in the CNCF Wasm OCI layout,
//! optionally signed), `sign` (a component already pushed), `keygen` (a signing key pair), and
//! reading a component named on a command line by file or by OCI reference (for `check`, `run`
//! and `diorch simulate --policy`).
//!
//! Owns: the registry flags of the CLI and where its credentials come from (a Docker config
//! file, as `docker login` writes it). Must not touch: cluster state.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;

use crate::flags::parse_duration;
use crate::oci::{self, Credentials, Digest, PublicKey, Reference, RegistryClient};

/// How the CLI reaches registries.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RegistryArgs {
    /// Registries (`host[:port]`) spoken to over plain HTTP (repeat or comma-separate).
    #[arg(long = "insecure-registry", value_delimiter = ',')]
    pub insecure_registries: Vec<String>,
    /// Docker config JSON with registry credentials (default: $DOCKER_CONFIG/config.json, else
    /// ~/.docker/config.json, when present).
    #[arg(long)]
    pub registry_config: Option<PathBuf>,
    /// PEM CA certificates trusted for registries besides the system's.
    #[arg(long)]
    pub registry_ca: Option<PathBuf>,
    /// Pulls must be signed by one of these public keys (PEM; repeat for several).
    #[arg(long = "trusted-key")]
    pub trusted_keys: Vec<PathBuf>,
    /// Longest registry operation.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub registry_timeout: Duration,
}

impl RegistryArgs {
    pub fn client(&self) -> anyhow::Result<RegistryClient> {
        let extra_roots_pem = match &self.registry_ca {
            Some(p) => std::fs::read(p).with_context(|| format!("reading {}", p.display()))?,
            None => vec![],
        };
        Ok(RegistryClient::new(oci::Options {
            insecure_registries: self.insecure_registries.clone(),
            extra_roots_pem,
            ..oci::Options::default()
        })?)
    }

    fn docker_config_path(&self) -> Option<PathBuf> {
        if let Some(p) = &self.registry_config {
            return Some(p.clone());
        }
        let dir = std::env::var_os("DOCKER_CONFIG")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".docker")))?;
        Some(dir.join("config.json")).filter(|p| p.is_file())
    }

    /// The Docker config's bytes, if there is one.
    pub fn docker_config(&self) -> anyhow::Result<Option<Vec<u8>>> {
        match self.docker_config_path() {
            Some(p) => Ok(Some(
                std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?,
            )),
            None => Ok(None),
        }
    }

    pub fn credentials(&self, registry: &str) -> anyhow::Result<Option<Credentials>> {
        match self.docker_config()? {
            Some(config) => Ok(oci::credentials_for(&config, registry)?),
            None => Ok(None),
        }
    }

    pub fn keys(&self) -> anyhow::Result<Vec<PublicKey>> {
        let mut keys = Vec::new();
        for path in &self.trusted_keys {
            let text =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            keys.extend(
                oci::sign::keys_from_pem_bundle(&text)
                    .with_context(|| format!("{}", path.display()))?,
            );
        }
        Ok(keys)
    }
}

/// A component named on a command line: an existing file, else an OCI reference (with an
/// `oci://` prefix, or any reference whose first component is a registry host).
pub enum ComponentArg {
    File(PathBuf),
    Image(Reference),
}

impl ComponentArg {
    pub fn parse(arg: &str) -> anyhow::Result<ComponentArg> {
        if let Some(reference) = arg.strip_prefix("oci://") {
            return Ok(ComponentArg::Image(reference.parse()?));
        }
        let path = Path::new(arg);
        if path.exists() {
            return Ok(ComponentArg::File(path.to_path_buf()));
        }
        match arg.parse::<Reference>() {
            // Only an explicit registry host: a missing file must not become a Docker Hub pull.
            Ok(r) if r.registry != oci::reference::DOCKER_HUB || arg.starts_with("docker.io/") => {
                Ok(ComponentArg::Image(r))
            }
            _ => anyhow::bail!(
                "{arg}: no such file, and not an OCI reference (registry/repository:tag or @sha256:…)"
            ),
        }
    }
}

/// Reads a component from a file or a registry; for a registry, also the pinned reference.
pub async fn read_component(
    arg: &str,
    registry: &RegistryArgs,
) -> anyhow::Result<(Vec<u8>, Option<Reference>)> {
    match ComponentArg::parse(arg)? {
        ComponentArg::File(path) => {
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            Ok((bytes, None))
        }
        ComponentArg::Image(reference) => {
            let puller = oci::Puller::new(
                registry.client()?,
                oci::PullLimits {
                    timeout: registry.registry_timeout,
                    ..oci::PullLimits::default()
                },
                None,
            );
            let keys = registry.keys()?;
            let request = oci::PullRequest {
                credentials: registry.credentials(&reference.registry)?,
                trusted_keys: (!keys.is_empty()).then(|| keys.into()),
            };
            let pulled = puller
                .pull(&reference, &request)
                .await
                .with_context(|| format!("pulling {reference}"))?;
            eprintln!(
                "pulled {} ({} bytes{})",
                pulled.reference,
                pulled.bytes.len(),
                pulled
                    .signed_by
                    .as_deref()
                    .map(|k| format!(", signed by {k}"))
                    .unwrap_or_default()
            );
            Ok((pulled.bytes.to_vec(), Some(pulled.reference)))
        }
    }
}

/// Pushes `file` to `reference` and, with `sign`, signs what was pushed. Prints the pinned
/// reference (what a ConfigMap's `image` should say).
pub async fn push(
    file: &Path,
    reference: &str,
    sign: Option<&Path>,
    registry: &RegistryArgs,
) -> anyhow::Result<Reference> {
    let reference: Reference = reference.parse()?;
    if reference.digest.is_some() {
        anyhow::bail!("push to a tag (…:v1), not a digest: the digest is the registry's answer");
    }
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    if !bytes.starts_with(b"\0asm") {
        anyhow::bail!("{} is not a WebAssembly file", file.display());
    }
    let key = sign.map(read_signing_key).transpose()?;
    let client = registry.client()?;
    let credentials = registry.credentials(&reference.registry)?;
    let digest = oci::push(
        &client,
        &reference,
        credentials.clone(),
        &bytes,
        registry.registry_timeout,
    )
    .await
    .with_context(|| format!("pushing to {reference}"))?;
    let pinned = reference.pinned(digest);
    eprintln!(
        "pushed {} ({} bytes, layer {})",
        pinned,
        bytes.len(),
        Digest::of(&bytes)
    );
    if let Some(key) = key {
        sign_pushed(
            &client,
            &pinned,
            credentials,
            &key,
            registry.registry_timeout,
        )
        .await?;
    }
    Ok(pinned)
}

/// Signs the component `reference` names (resolving a tag first).
pub async fn sign(
    reference: &str,
    key: &Path,
    registry: &RegistryArgs,
) -> anyhow::Result<Reference> {
    let reference: Reference = reference.parse()?;
    let key = read_signing_key(key)?;
    let client = registry.client()?;
    let credentials = registry.credentials(&reference.registry)?;
    // Resolve and check what is signed: a Wasm artifact, by its manifest digest.
    let puller = oci::Puller::new(
        client.clone(),
        oci::PullLimits {
            timeout: registry.registry_timeout,
            ..oci::PullLimits::default()
        },
        None,
    );
    let pulled = puller
        .pull(
            &reference,
            &oci::PullRequest {
                credentials: credentials.clone(),
                trusted_keys: None,
            },
        )
        .await
        .with_context(|| format!("resolving {reference}"))?;
    sign_pushed(
        &client,
        &pulled.reference,
        credentials,
        &key,
        registry.registry_timeout,
    )
    .await?;
    Ok(pulled.reference)
}

async fn sign_pushed(
    client: &RegistryClient,
    pinned: &Reference,
    credentials: Option<Credentials>,
    key: &oci::sign::SigningKey,
    timeout: Duration,
) -> anyhow::Result<()> {
    let digest = pinned.digest.context("a pinned reference has a digest")?;
    oci::push_signature(client, pinned, credentials, digest, key, timeout)
        .await
        .with_context(|| format!("signing {pinned}"))?;
    eprintln!(
        "signed {pinned} with key {}",
        key.public_key().fingerprint()
    );
    Ok(())
}

fn read_signing_key(path: &Path) -> anyhow::Result<oci::sign::SigningKey> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    oci::sign::SigningKey::from_pem(&text).with_context(|| format!("{}", path.display()))
}

/// Writes a new ECDSA P-256 key pair: `<prefix>.key` (PKCS#8, mode 0600) and `<prefix>.pub`.
pub fn keygen(prefix: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    use std::io::Write as _;
    let key = oci::sign::SigningKey::generate()?;
    let (private, public) = (prefix.with_extension("key"), prefix.with_extension("pub"));
    for path in [&private, &public] {
        if path.exists() {
            anyhow::bail!("{} exists; not overwriting a key", path.display());
        }
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(&private)
        .and_then(|mut f| f.write_all(key.private_pem().as_bytes()))
        .with_context(|| format!("writing {}", private.display()))?;
    std::fs::write(&public, key.public_pem())
        .with_context(|| format!("writing {}", public.display()))?;
    eprintln!(
        "wrote {} and {} (key {})",
        private.display(),
        public.display(),
        key.public_key().fingerprint()
    );
    Ok((private, public))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_arguments() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.wasm");
        std::fs::write(&file, b"\0asm").unwrap();
        assert!(matches!(
            ComponentArg::parse(file.to_str().unwrap()).unwrap(),
            ComponentArg::File(_)
        ));
        assert!(matches!(
            ComponentArg::parse("registry.example:5000/p:v1").unwrap(),
            ComponentArg::Image(_)
        ));
        assert!(matches!(
            ComponentArg::parse("oci://binpack:v1").unwrap(),
            ComponentArg::Image(r) if r.repository == "library/binpack"
        ));
        // A missing file is not silently a Docker Hub pull.
        let err = ComponentArg::parse("binpack.wasm").err().unwrap();
        assert!(err.to_string().contains("no such file"), "{err}");
    }

    #[test]
    fn keygen_writes_a_usable_pair_and_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("team");
        let (private, public) = keygen(&prefix).unwrap();
        let key = read_signing_key(&private).unwrap();
        let public = oci::PublicKey::from_pem(&std::fs::read(public).unwrap()).unwrap();
        let signature = key.sign(b"m").unwrap();
        assert!(public.verify(b"m", &signature).is_ok());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&private).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(keygen(&prefix).is_err());
    }
}
