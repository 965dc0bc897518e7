//! From a plugin ConfigMap's component source to the bytes the host loads: inline data
//! decoded within [`spec::INLINE_MAX_BYTES`], or a component pulled from an OCI registry
//! (with the credentials of the pull Secret the ConfigMap names); either way checked for a
//! signature by a trusted key when one is required (by the ConfigMap, or by the operator's
//! `--require-plugin-signatures`). An inline `data["signature"]` is checked whenever present (a
//! wrong one refuses the plugin); a registry's signatures are fetched only when required.
//!
//! Owns: the signature policy and where credentials and trusted keys come from (the
//! [`Secrets`] port; [`KubeSecrets`] reads them from the API server, named objects only).
//! Must not touch: compiling or swapping plugins (the registry), the ConfigMap format (spec),
//! the registry protocol (`crate::oci`).

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};

use super::PluginError;
use super::compress;
use super::registry::Origin;
use super::spec::{self, ComponentSource, PluginSpec};
use crate::oci::{self, PublicKey, PullRequest, Puller};

/// The Secret type whose `.dockerconfigjson` holds registry credentials.
pub const DOCKER_CONFIG_SECRET_TYPE: &str = "kubernetes.io/dockerconfigjson";
const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";
/// Trusted keys read from one object (each value may hold several PEM blocks).
const MAX_TRUSTED_KEYS: usize = 64;

/// Where registry credentials and trusted keys are read from.
pub trait Secrets: Send + Sync {
    /// The Docker config JSON of the pull Secret `name`.
    fn docker_config(&self, name: &str) -> BoxFuture<'static, Result<Vec<u8>, String>>;
    /// The public keys a signature must be made with (an empty list trusts no one).
    fn trusted_keys(&self) -> BoxFuture<'static, Result<Vec<PublicKey>, String>>;
}

/// Where the trusted keys are: every value of a Secret's or ConfigMap's data is a PEM bundle
/// of public keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    Secret(String),
    ConfigMap(String),
    /// No object: no key is trusted (a required signature is always refused).
    None,
}

impl std::str::FromStr for KeySource {
    type Err = String;
    fn from_str(s: &str) -> Result<KeySource, String> {
        match s.split_once('/') {
            Some(("secret", name)) if !name.is_empty() => Ok(KeySource::Secret(name.into())),
            Some(("configmap", name)) if !name.is_empty() => Ok(KeySource::ConfigMap(name.into())),
            _ if s.is_empty() || s == "none" => Ok(KeySource::None),
            _ => Err(format!(
                "{s:?} is not secret/NAME, configmap/NAME or none (the object holding the \
                 trusted public keys)"
            )),
        }
    }
}

/// [`Secrets`] read from the API server in the operator's namespace, each read bounded by
/// `timeout`. Only the objects named (a pull Secret in a ConfigMap, the key object in a flag)
/// are read: the operator's Role grants `get` on those names alone.
pub struct KubeSecrets {
    pub client: Client,
    pub namespace: String,
    pub keys: KeySource,
    pub timeout: Duration,
}

fn pem_values(values: impl Iterator<Item = Vec<u8>>, from: &str) -> Result<Vec<PublicKey>, String> {
    let mut keys = Vec::new();
    for value in values {
        let parsed = oci::sign::keys_from_pem_bundle(&value).map_err(|e| format!("{from}: {e}"))?;
        keys.extend(parsed);
        if keys.len() > MAX_TRUSTED_KEYS {
            return Err(format!("{from} holds more than {MAX_TRUSTED_KEYS} keys"));
        }
    }
    Ok(keys)
}

impl Secrets for KubeSecrets {
    fn docker_config(&self, name: &str) -> BoxFuture<'static, Result<Vec<u8>, String>> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let (name, timeout) = (name.to_string(), self.timeout);
        async move {
            let secret = tokio::time::timeout(timeout, api.get(&name))
                .await
                .map_err(|_| format!("reading Secret {name} took longer than {timeout:?}"))?
                .map_err(|e| format!("cannot read the pull Secret {name}: {e}"))?;
            if secret.type_.as_deref() != Some(DOCKER_CONFIG_SECRET_TYPE) {
                return Err(format!(
                    "Secret {name} has type {:?}, not {DOCKER_CONFIG_SECRET_TYPE}",
                    secret.type_.unwrap_or_default()
                ));
            }
            secret
                .data
                .and_then(|mut d| d.remove(DOCKER_CONFIG_KEY))
                .map(|b| b.0)
                .ok_or_else(|| format!("Secret {name} has no {DOCKER_CONFIG_KEY}"))
        }
        .boxed()
    }

    fn trusted_keys(&self) -> BoxFuture<'static, Result<Vec<PublicKey>, String>> {
        let (client, namespace, keys, timeout) = (
            self.client.clone(),
            self.namespace.clone(),
            self.keys.clone(),
            self.timeout,
        );
        async move {
            let late = |what: &str| format!("reading {what} took longer than {timeout:?}");
            match keys {
                KeySource::None => Ok(vec![]),
                KeySource::Secret(name) => {
                    let api: Api<Secret> = Api::namespaced(client, &namespace);
                    let secret = tokio::time::timeout(timeout, api.get(&name))
                        .await
                        .map_err(|_| late(&name))?
                        .map_err(|e| format!("cannot read the trusted keys Secret {name}: {e}"))?;
                    let values = secret.data.unwrap_or_default().into_values().map(|b| b.0);
                    pem_values(values, &format!("Secret {name}"))
                }
                KeySource::ConfigMap(name) => {
                    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
                    let cm = tokio::time::timeout(timeout, api.get(&name))
                        .await
                        .map_err(|_| late(&name))?
                        .map_err(|e| {
                            format!("cannot read the trusted keys ConfigMap {name}: {e}")
                        })?;
                    let values = cm
                        .data
                        .unwrap_or_default()
                        .into_values()
                        .map(String::into_bytes);
                    pem_values(values, &format!("ConfigMap {name}"))
                }
            }
        }
        .boxed()
    }
}

/// Keys and credentials from files (for the CLI and the simulator): a PEM bundle of trusted
/// keys, a Docker config JSON.
pub struct FileSecrets {
    pub keys: Vec<PublicKey>,
    pub docker_config: Option<Vec<u8>>,
}

impl Secrets for FileSecrets {
    fn docker_config(&self, name: &str) -> BoxFuture<'static, Result<Vec<u8>, String>> {
        let found = self
            .docker_config
            .clone()
            .ok_or_else(|| format!("no Docker config to stand in for Secret {name}"));
        async move { found }.boxed()
    }

    fn trusted_keys(&self) -> BoxFuture<'static, Result<Vec<PublicKey>, String>> {
        let keys = self.keys.clone();
        async move { Ok(keys) }.boxed()
    }
}

/// A component ready to load, and where it came from.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub bytes: Arc<[u8]>,
    pub origin: Origin,
}

/// Resolves component sources (see the module doc). Cheap to share.
pub struct Fetcher {
    pub puller: Puller,
    pub secrets: Arc<dyn Secrets>,
    /// A signature is required unless a ConfigMap says `requireSignature: "false"`.
    pub require_signatures: bool,
    /// Registries pulls may reach (`host[:port]`); empty = any.
    pub allowed_registries: Vec<String>,
}

fn refused(spec: &PluginSpec, reason: &'static str, message: impl Into<String>) -> PluginError {
    PluginError::Source {
        plugin: spec.name.clone(),
        reason,
        message: message.into(),
    }
}

impl Fetcher {
    /// Defaults for the watcher of `namespace`: any registry, the default pull bounds, no disk
    /// cache, signatures verified when offered and required by no one but a ConfigMap (which
    /// then finds no trusted key).
    pub fn for_namespace(
        client: Client,
        namespace: &str,
        timeout: Duration,
    ) -> Result<Fetcher, oci::OciError> {
        let registry = oci::RegistryClient::new(oci::Options::default())?;
        Ok(Fetcher {
            puller: Puller::new(registry, oci::PullLimits::default(), None),
            secrets: Arc::new(KubeSecrets {
                client,
                namespace: namespace.to_string(),
                keys: KeySource::None,
                timeout,
            }),
            require_signatures: false,
            allowed_registries: vec![],
        })
    }

    /// The component `source` describes for `spec`, decoded, pulled and verified.
    pub async fn fetch(
        &self,
        spec: &PluginSpec,
        source: &ComponentSource,
    ) -> Result<Fetched, PluginError> {
        let required = spec.require_signature.unwrap_or(self.require_signatures);
        match source {
            ComponentSource::Inline {
                bytes,
                encoding,
                signature,
            } => {
                let decoded =
                    compress::decode(*encoding, bytes, spec::INLINE_MAX_BYTES).map_err(|e| {
                        refused(
                            spec,
                            "InvalidPluginConfigMap",
                            format!("binaryData[\"{}\"] ({encoding}): {e}", spec::WASM_KEY),
                        )
                    })?;
                let signed_by = match (signature, required) {
                    (None, false) => None,
                    (None, true) => {
                        return Err(refused(
                            spec,
                            "SignatureRefused",
                            "a signature is required and the ConfigMap has no \
                             data[\"signature\"] (cosign sign-blob of the component)",
                        ));
                    }
                    (Some(signature), _) => {
                        Some(self.verify_inline(spec, &decoded, signature).await?)
                    }
                };
                Ok(Fetched {
                    bytes: decoded.into(),
                    origin: Origin {
                        image: None,
                        signed_by,
                    },
                })
            }
            ComponentSource::Image {
                reference,
                pull_secret,
            } => {
                if !self.allowed_registries.is_empty()
                    && !self.allowed_registries.contains(&reference.registry)
                {
                    return Err(refused(
                        spec,
                        "InvalidPluginReference",
                        format!(
                            "registry {} is not one the operator may pull from ({})",
                            reference.registry,
                            self.allowed_registries.join(", ")
                        ),
                    ));
                }
                let credentials = match pull_secret {
                    None => None,
                    Some(name) => {
                        let config = self
                            .secrets
                            .docker_config(name)
                            .await
                            .map_err(|e| refused(spec, "PullFailed", e))?;
                        oci::credentials_for(&config, &reference.registry)
                            .map_err(|e| refused(spec, e.reason(), format!("Secret {name}: {e}")))?
                    }
                };
                let trusted_keys = match required {
                    false => None,
                    true => Some(self.keys(spec).await?.into()),
                };
                let request = PullRequest {
                    credentials,
                    trusted_keys,
                };
                let pulled = self
                    .puller
                    .pull(reference, &request)
                    .await
                    .map_err(|e| refused(spec, e.reason(), format!("{reference}: {e}")))?;
                tracing::info!(plugin = %spec.name, image = %pulled.reference,
                    layer = %pulled.layer_digest, cached = pulled.layer_cached,
                    signed_by = ?pulled.signed_by, "plugin component pulled");
                Ok(Fetched {
                    bytes: pulled.bytes,
                    origin: Origin {
                        image: Some(pulled.reference.to_string()),
                        signed_by: pulled.signed_by,
                    },
                })
            }
        }
    }

    async fn keys(&self, spec: &PluginSpec) -> Result<Vec<PublicKey>, PluginError> {
        let keys = self
            .secrets
            .trusted_keys()
            .await
            .map_err(|e| refused(spec, "SignatureRefused", format!("trusted keys: {e}")))?;
        if keys.is_empty() {
            return Err(refused(
                spec,
                "SignatureRefused",
                "a signature is required but no trusted key is configured (the operator's \
                 --plugin-trusted-keys object is missing or empty)",
            ));
        }
        Ok(keys)
    }

    async fn verify_inline(
        &self,
        spec: &PluginSpec,
        component: &[u8],
        signature: &str,
    ) -> Result<String, PluginError> {
        let keys = self.keys(spec).await?;
        let mut last = None;
        for key in &keys {
            match key.verify(component, signature) {
                Ok(()) => return Ok(key.fingerprint()),
                Err(e) => last = Some(e),
            }
        }
        Err(refused(
            spec,
            "SignatureRefused",
            format!(
                "data[\"signature\"] is not a signature of this component by any of the {} \
                 trusted keys{}",
                keys.len(),
                last.map(|e| format!(" ({e})")).unwrap_or_default()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetcher(keys: Vec<PublicKey>, require: bool) -> Fetcher {
        let client = oci::RegistryClient::new(oci::Options::default()).unwrap();
        Fetcher {
            puller: Puller::new(client, oci::PullLimits::default(), None),
            secrets: Arc::new(FileSecrets {
                keys,
                docker_config: None,
            }),
            require_signatures: require,
            allowed_registries: vec!["allowed.example".into()],
        }
    }

    fn inline(
        bytes: &[u8],
        encoding: compress::Encoding,
        signature: Option<String>,
    ) -> ComponentSource {
        ComponentSource::Inline {
            bytes: compress::encode(encoding, bytes).unwrap(),
            encoding,
            signature,
        }
    }

    #[tokio::test]
    async fn inline_components_are_decoded_and_their_signatures_checked() {
        let key = oci::sign::SigningKey::generate().unwrap();
        let other = oci::sign::SigningKey::generate().unwrap();
        let component = b"\0asm component".repeat(100);
        let spec = PluginSpec::new("p", spec::PluginKind::Policy);
        let trusting = fetcher(vec![key.public_key()], false);

        let plain = trusting
            .fetch(&spec, &inline(&component, compress::Encoding::Zstd, None))
            .await
            .unwrap();
        assert_eq!(&plain.bytes[..], &component[..]);
        assert_eq!(plain.origin, Origin::default());

        let signed = inline(
            &component,
            compress::Encoding::Gzip,
            key.sign(&component).ok(),
        );
        let got = trusting.fetch(&spec, &signed).await.unwrap();
        assert_eq!(got.origin.signed_by, Some(key.public_key().fingerprint()));

        // Offered but by another key: refused even when not required.
        let forged = inline(
            &component,
            compress::Encoding::Identity,
            other.sign(&component).ok(),
        );
        let err = trusting.fetch(&spec, &forged).await.unwrap_err();
        assert_eq!(err.reason(), "SignatureRefused", "{err}");
        // A signature of other bytes.
        let swapped = inline(
            b"\0asm other",
            compress::Encoding::Identity,
            key.sign(&component).ok(),
        );
        assert_eq!(
            trusting.fetch(&spec, &swapped).await.unwrap_err().reason(),
            "SignatureRefused"
        );

        // Required: unsigned refused; the ConfigMap may opt out; no keys refuses all.
        let strict = fetcher(vec![key.public_key()], true);
        let unsigned = inline(&component, compress::Encoding::Identity, None);
        let err = strict.fetch(&spec, &unsigned).await.unwrap_err();
        assert!(err.to_string().contains("no data[\"signature\"]"), "{err}");
        let mut opted_out = spec.clone();
        opted_out.require_signature = Some(false);
        assert!(strict.fetch(&opted_out, &unsigned).await.is_ok());
        let keyless = fetcher(vec![], true);
        let err = keyless.fetch(&spec, &signed).await.unwrap_err();
        assert!(err.to_string().contains("no trusted key"), "{err}");

        // A bomb in inline data is refused by the inline cap.
        let bomb = vec![0u8; spec::INLINE_MAX_BYTES + 1];
        let err = trusting
            .fetch(&spec, &inline(&bomb, compress::Encoding::Gzip, None))
            .await
            .unwrap_err();
        assert_eq!(err.reason(), "InvalidPluginConfigMap", "{err}");
        assert!(err.to_string().contains("exceeds"), "{err}");
    }

    #[tokio::test]
    async fn registries_outside_the_allowed_list_are_not_contacted() {
        let spec = PluginSpec::new("p", spec::PluginKind::Policy);
        let source = ComponentSource::Image {
            reference: "elsewhere.example/p:v1".parse().unwrap(),
            pull_secret: None,
        };
        let err = fetcher(vec![], false)
            .fetch(&spec, &source)
            .await
            .unwrap_err();
        assert_eq!(err.reason(), "InvalidPluginReference");
        assert!(err.to_string().contains("elsewhere.example"), "{err}");
    }

    #[test]
    fn key_sources() {
        assert_eq!("secret/keys".parse(), Ok(KeySource::Secret("keys".into())));
        assert_eq!("configmap/k".parse(), Ok(KeySource::ConfigMap("k".into())));
        assert_eq!("none".parse(), Ok(KeySource::None));
        assert!("pod/x".parse::<KeySource>().is_err());
        assert!("secret/".parse::<KeySource>().is_err());
    }
}
