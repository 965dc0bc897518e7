//! Wasm components in OCI registries: pulled by reference with every byte verified against a
//! digest, optionally checked for a cosign-style signature by a trusted key, and pushed in the
//! CNCF Wasm OCI artifact layout (config `application/vnd.wasm.config.v0+json`, one layer
//! `application/wasm`), so what `wkg`, `oras` or `wasm-to-oci` push loads and what `diorch
//! plugin push` pushes is read by them.
//!
//! The chain of trust: the manifest's sha256 is the reference's digest (or, for a tag, is
//! recorded as the digest it resolved to); the manifest names the layer's digest and size; the
//! layer's bytes must hash to it. A signature, when required, is a cosign simple-signing
//! payload naming the manifest digest, signed by one of the trusted keys (see [`sign`]).
//!
//! Bounds: a manifest is at most [`PullLimits::manifest_cap`] bytes, a layer at most
//! [`PullLimits::blob_cap`] (checked against the manifest's declared size first, then while
//! streaming: a registry that sends more than it declared is cut off), signatures at most
//! [`MAX_SIGNATURES`] layers of [`sign::MAX_PAYLOAD`] bytes; every request has a timeout and
//! the whole pull a deadline ([`PullLimits::timeout`]).
//!
//! Owns: the artifact layout, pull and push, credentials from Docker config JSON, the on-disk
//! blob cache. Must not touch: compiling or loading components (the plugin host), Kubernetes.

pub mod cache;
pub mod client;
pub mod reference;
pub mod sign;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode};
use serde::{Deserialize, Serialize};

pub use client::{Access, Credentials, Options, RegistryClient};
pub use reference::{Digest, Reference, ReferenceError};
pub use sign::PublicKey;

/// The CNCF Wasm OCI artifact config media type (what `wkg` writes).
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The CNCF Wasm layer media type.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_LIST_MEDIA_TYPE: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const OCI_EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
const OCI_IMAGE_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";

/// Config media types of Wasm artifacts accepted: the CNCF layout, `wasm-to-oci`'s, and the
/// empty config `oras push` writes by default.
const WASM_CONFIG_TYPES: &[&str] = &[
    WASM_CONFIG_MEDIA_TYPE,
    "application/vnd.wasm.config.v1+json",
    OCI_EMPTY_MEDIA_TYPE,
    "application/vnd.unknown.config.v1+json",
];
/// Layer media types of a Wasm component accepted: the CNCF layout and `wasm-to-oci`'s.
const WASM_LAYER_TYPES: &[&str] = &[
    WASM_LAYER_MEDIA_TYPE,
    "application/vnd.wasm.content.layer.v1+wasm",
    "application/vnd.module.wasm.content.layer.v1+wasm",
];
/// Signature layers read from one signature manifest (cosign appends one per signing).
pub const MAX_SIGNATURES: usize = 16;
/// Layers a manifest may list at all (parsing stops being cheap past this).
const MAX_LAYERS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OciError {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error("registry client configuration: {0}")]
    Config(String),
    #[error("registry unreachable: {0}")]
    Network(String),
    #[error("registry timed out: {0}")]
    Timeout(String),
    #[error("registry refused access: {0}")]
    Unauthorized(String),
    #[error("not found in the registry: {0}")]
    NotFound(String),
    #[error("registry answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("registry protocol error: {0}")]
    Protocol(String),
    #[error("too large: {0}")]
    TooLarge(String),
    #[error("digest mismatch: {0}")]
    DigestMismatch(String),
    #[error("not a Wasm component artifact: {0}")]
    NotWasm(String),
    #[error("unsigned: {0}")]
    Unsigned(String),
    #[error("signature refused: {0}")]
    BadSignature(String),
    #[error("credentials: {0}")]
    Credentials(String),
    #[error("cache: {0}")]
    Cache(String),
}

impl OciError {
    /// A short machine-readable reason, for Events and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            OciError::Reference(_) | OciError::Config(_) | OciError::Credentials(_) => {
                "InvalidPluginReference"
            }
            OciError::Network(_)
            | OciError::Timeout(_)
            | OciError::Status { .. }
            | OciError::Protocol(_)
            | OciError::NotFound(_)
            | OciError::Unauthorized(_)
            | OciError::Cache(_) => "PullFailed",
            OciError::TooLarge(_) => "PullLimit",
            OciError::DigestMismatch(_) => "DigestMismatch",
            OciError::NotWasm(_) => "NotAWasmArtifact",
            OciError::Unsigned(_) | OciError::BadSignature(_) => "SignatureRefused",
        }
    }
}

/// Bounds of one pull.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullLimits {
    pub manifest_cap: usize,
    pub blob_cap: usize,
    /// The whole pull (manifest, layer, signatures).
    pub timeout: Duration,
}

impl Default for PullLimits {
    fn default() -> Self {
        PullLimits {
            // The distribution spec lets registries refuse manifests over 4 MiB.
            manifest_cap: 4 << 20,
            // An interpreted (Python, JavaScript) component is 12–19 MB.
            blob_cap: 64 << 20,
            timeout: Duration::from_secs(300),
        }
    }
}

/// An OCI descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

impl Descriptor {
    fn of(media_type: &str, bytes: &[u8]) -> Descriptor {
        Descriptor {
            media_type: media_type.to_string(),
            digest: Digest::of(bytes).to_string(),
            size: bytes.len() as u64,
            annotations: None,
        }
    }
}

/// An OCI (or Docker v2) image manifest: the fields read or written here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// A component pulled and verified.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The reference pinned to the manifest digest it resolved to.
    pub reference: Reference,
    pub manifest_digest: Digest,
    pub layer_digest: Digest,
    pub bytes: Arc<[u8]>,
    /// The fingerprint of the key whose signature was verified, if one was required.
    pub signed_by: Option<String>,
    /// Whether the layer came from the disk cache (the manifest is always fetched for a tag).
    pub layer_cached: bool,
}

/// What a pull needs besides the reference.
#[derive(Debug, Clone, Default)]
pub struct PullRequest {
    pub credentials: Option<Credentials>,
    /// `Some`: a signature by one of these keys is required (an empty list refuses all).
    pub trusted_keys: Option<Arc<[PublicKey]>>,
}

/// Pulls components; cheap to clone.
#[derive(Clone)]
pub struct Puller {
    client: RegistryClient,
    limits: PullLimits,
    cache: Option<cache::BlobCache>,
}

/// The manifest types asked for (an index is refused after reading, with a clear reason).
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

fn manifest_accept() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::ACCEPT, HeaderValue::from_static(MANIFEST_ACCEPT));
    headers
}

/// Reads a manifest answer: 404 → NotFound, other failures → Status with an excerpt.
async fn expect_success(
    response: client::Response,
    what: &str,
    deadline: tokio::time::Instant,
) -> Result<client::Response, OciError> {
    match response.status {
        s if s.is_success() => Ok(response),
        StatusCode::NOT_FOUND => Err(OciError::NotFound(what.to_string())),
        s => {
            let excerpt = response.excerpt(deadline).await;
            Err(OciError::Status {
                status: s.as_u16(),
                message: format!("{what}{excerpt}"),
            })
        }
    }
}

/// Fetches and verifies the manifest `reference` names: its bytes and digest.
async fn fetch_manifest(
    session: &mut client::Session<'_>,
    reference: &str,
    pinned: Option<Digest>,
    cap: usize,
) -> Result<(Vec<u8>, Digest, Manifest), OciError> {
    let uri = session.url(&format!("manifests/{reference}"))?;
    let deadline = session.deadline();
    let response = session
        .send(Method::GET, uri, manifest_accept(), Bytes::new())
        .await?;
    let what = format!(
        "manifest {}/{}:{reference}",
        session.registry(),
        session.repository()
    );
    let response = expect_success(response, &what, deadline).await?;
    let content_type = response
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_string());
    let announced = response
        .headers
        .get("docker-content-digest")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = response
        .read_capped(cap, deadline)
        .await
        .map_err(|e| match e {
            OciError::TooLarge(m) => OciError::TooLarge(format!("{what}: {m}")),
            e => e,
        })?;
    let digest = Digest::of(&body);
    if let Some(pinned) = pinned
        && digest != pinned
    {
        return Err(OciError::DigestMismatch(format!(
            "{what}: the registry sent a manifest with digest {digest}"
        )));
    }
    if let Some(announced) = announced
        && announced.starts_with("sha256:")
        && announced != digest.to_string()
    {
        return Err(OciError::DigestMismatch(format!(
            "{what}: the registry says {announced:.80} but sent {digest}"
        )));
    }
    let manifest = parse_manifest(&body, content_type.as_deref(), &what)?;
    Ok((body, digest, manifest))
}

fn parse_manifest(
    body: &[u8],
    content_type: Option<&str>,
    what: &str,
) -> Result<Manifest, OciError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Kind {
        media_type: Option<String>,
        manifests: Option<serde::de::IgnoredAny>,
    }
    let kind: Kind = serde_json::from_slice(body)
        .map_err(|e| OciError::Protocol(format!("{what} is not JSON: {e}")))?;
    let media_type = kind.media_type.as_deref().or(content_type);
    if kind.manifests.is_some()
        || matches!(
            media_type,
            Some(OCI_INDEX_MEDIA_TYPE | DOCKER_LIST_MEDIA_TYPE)
        )
    {
        return Err(OciError::NotWasm(format!(
            "{what} is an image index (several platforms); a component is pushed as one \
             manifest (`diorch plugin push`)"
        )));
    }
    let manifest: Manifest = serde_json::from_slice(body)
        .map_err(|e| OciError::Protocol(format!("{what} is not an image manifest: {e}")))?;
    if manifest.schema_version != 2 {
        return Err(OciError::Protocol(format!(
            "{what} has schemaVersion {}; 2 is read",
            manifest.schema_version
        )));
    }
    if manifest.layers.len() > MAX_LAYERS {
        return Err(OciError::TooLarge(format!(
            "{what} lists {} layers; at most {MAX_LAYERS}",
            manifest.layers.len()
        )));
    }
    Ok(manifest)
}

/// The component layer of a Wasm artifact manifest, or why it is not one.
fn wasm_layer(manifest: &Manifest, what: &str) -> Result<(Digest, u64), OciError> {
    if !WASM_CONFIG_TYPES.contains(&manifest.config.media_type.as_str()) {
        return Err(OciError::NotWasm(format!(
            "{what} has config media type {:.100?}; a Wasm artifact has {WASM_CONFIG_MEDIA_TYPE}",
            manifest.config.media_type
        )));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(OciError::NotWasm(format!(
            "{what} has {} layers; a Wasm component artifact has exactly one",
            manifest.layers.len()
        )));
    };
    if !WASM_LAYER_TYPES.contains(&layer.media_type.as_str()) {
        return Err(OciError::NotWasm(format!(
            "{what}: its layer has media type {:.100?}, not {WASM_LAYER_MEDIA_TYPE}",
            layer.media_type
        )));
    }
    let digest: Digest = layer.digest.parse()?;
    Ok((digest, layer.size))
}

impl Puller {
    pub fn new(
        client: RegistryClient,
        limits: PullLimits,
        cache: Option<cache::BlobCache>,
    ) -> Puller {
        Puller {
            client,
            limits,
            cache,
        }
    }

    pub fn limits(&self) -> PullLimits {
        self.limits
    }

    pub fn client(&self) -> &RegistryClient {
        &self.client
    }

    /// Pulls the component `reference` names, within [`PullLimits::timeout`].
    pub async fn pull(
        &self,
        reference: &Reference,
        request: &PullRequest,
    ) -> Result<Pulled, OciError> {
        let deadline = tokio::time::Instant::now() + self.limits.timeout;
        match tokio::time::timeout_at(deadline, self.pull_by(reference, request, deadline)).await {
            Ok(result) => result,
            Err(_) => Err(OciError::Timeout(format!(
                "pulling {reference} took longer than {:?}",
                self.limits.timeout
            ))),
        }
    }

    async fn pull_by(
        &self,
        reference: &Reference,
        request: &PullRequest,
        deadline: tokio::time::Instant,
    ) -> Result<Pulled, OciError> {
        let mut session = self.client.session(
            reference,
            request.credentials.clone(),
            Access::Pull,
            deadline,
        );
        let what = reference.to_string();
        // A pinned manifest already verified once is read from the cache (verified again).
        let cached_manifest = match (&self.cache, reference.digest) {
            (Some(cache), Some(d)) => cache.get(d, self.limits.manifest_cap).await,
            _ => None,
        };
        let (manifest_digest, manifest) = match cached_manifest {
            Some(body) => {
                let manifest = parse_manifest(&body, None, &what)?;
                (Digest::of(&body), manifest)
            }
            None => {
                let (body, digest, manifest) = fetch_manifest(
                    &mut session,
                    &reference.manifest_reference(),
                    reference.digest,
                    self.limits.manifest_cap,
                )
                .await?;
                // Only a Wasm manifest is worth keeping.
                if wasm_layer(&manifest, &what).is_ok()
                    && let Some(cache) = &self.cache
                {
                    cache.put(digest, &body).await;
                }
                (digest, manifest)
            }
        };
        let (layer_digest, size) = wasm_layer(&manifest, &what)?;
        if size > self.limits.blob_cap as u64 {
            return Err(OciError::TooLarge(format!(
                "{what}: the component is {size} bytes; at most {} are accepted (the \
                 operator's --plugin-max-pull-mib)",
                self.limits.blob_cap
            )));
        }
        // Signatures are checked before the (large) layer is fetched.
        let signed_by = match &request.trusted_keys {
            Some(keys) => Some(verify_signature(&mut session, manifest_digest, keys).await?),
            None => None,
        };
        let cached = match &self.cache {
            Some(cache) => cache.get(layer_digest, self.limits.blob_cap).await,
            None => None,
        };
        let cached = cached.filter(|b| b.len() as u64 == size);
        let layer_cached = cached.is_some();
        let bytes = match cached {
            Some(bytes) => bytes,
            _ => {
                let uri = session.url(&format!("blobs/{layer_digest}"))?;
                let response = session
                    .send(Method::GET, uri, HeaderMap::new(), Bytes::new())
                    .await?;
                let response =
                    expect_success(response, &format!("{what}: blob {layer_digest}"), deadline)
                        .await?;
                let bytes = client::read_verified(response, layer_digest, size, deadline).await?;
                if let Some(cache) = &self.cache {
                    cache.put(layer_digest, &bytes).await;
                }
                bytes
            }
        };
        Ok(Pulled {
            reference: reference.pinned(manifest_digest),
            manifest_digest,
            layer_digest,
            bytes: bytes.into(),
            signed_by,
            layer_cached,
        })
    }
}

/// Finds a signature of `manifest_digest` by one of `keys` under cosign's tag
/// (`sha256-<hex>.sig`); returns the key's fingerprint.
async fn verify_signature(
    session: &mut client::Session<'_>,
    manifest_digest: Digest,
    keys: &[PublicKey],
) -> Result<String, OciError> {
    let digest_text = manifest_digest.to_string();
    let tag = sign::signature_tag(&digest_text)
        .ok_or_else(|| OciError::Protocol(format!("no signature tag for {digest_text}")))?;
    let (_, _, manifest) = match fetch_manifest(session, &tag, None, 1 << 20).await {
        Ok(found) => found,
        Err(OciError::NotFound(_)) => {
            return Err(OciError::Unsigned(format!(
                "{}/{}@{digest_text} has no signature ({tag} is missing) and the plugin \
                 requires one",
                session.registry(),
                session.repository()
            )));
        }
        Err(e) => return Err(e),
    };
    if keys.is_empty() {
        return Err(OciError::BadSignature(
            "a signature is required but no trusted key is configured".into(),
        ));
    }
    let mut reasons = Vec::new();
    for layer in manifest
        .layers
        .iter()
        .filter(|l| l.media_type == sign::SIMPLE_SIGNING_MEDIA_TYPE)
        .take(MAX_SIGNATURES)
    {
        let Some(signature) = layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(sign::SIGNATURE_ANNOTATION))
        else {
            reasons.push("a layer without a signature annotation".to_string());
            continue;
        };
        if layer.size > sign::MAX_PAYLOAD as u64 {
            reasons.push(format!("a payload of {} bytes", layer.size));
            continue;
        }
        let payload_digest: Digest = match layer.digest.parse() {
            Ok(d) => d,
            Err(e) => {
                reasons.push(e.to_string());
                continue;
            }
        };
        let uri = session.url(&format!("blobs/{payload_digest}"))?;
        let deadline = session.deadline();
        let response = session
            .send(Method::GET, uri, HeaderMap::new(), Bytes::new())
            .await?;
        let response = expect_success(
            response,
            &format!("signature payload {payload_digest}"),
            deadline,
        )
        .await?;
        let payload = client::read_verified(response, payload_digest, layer.size, deadline).await?;
        if let Err(e) = sign::check_payload(&payload, &digest_text) {
            reasons.push(e.to_string());
            continue;
        }
        let mut refused = Vec::new();
        for key in keys {
            match key.verify(&payload, signature) {
                Ok(()) => return Ok(key.fingerprint()),
                Err(e) => refused.push(e.to_string()),
            }
        }
        reasons.push(format!(
            "signed by none of the {} trusted keys ({})",
            keys.len(),
            refused.first().map_or("", String::as_str)
        ));
    }
    Err(OciError::BadSignature(format!(
        "no valid signature of {digest_text} by a trusted key: {}",
        if reasons.is_empty() {
            "the signature manifest holds no cosign signature".to_string()
        } else {
            reasons.join("; ")
        }
    )))
}

/// Pushes `bytes` as a Wasm component artifact to `reference`'s tag (`latest` when it has
/// none; a digest in it is ignored: the manifest's digest is the answer); returns the
/// manifest's digest.
pub async fn push(
    client: &RegistryClient,
    reference: &Reference,
    credentials: Option<Credentials>,
    bytes: &[u8],
    timeout: Duration,
) -> Result<Digest, OciError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut session = client.session(reference, credentials, Access::Push, deadline);
    let layer_digest = Digest::of(bytes);
    let config = serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest.to_string()],
    })
    .to_string();
    upload_blob(&mut session, config.as_bytes()).await?;
    upload_blob(&mut session, bytes).await?;
    let mut layer = Descriptor::of(WASM_LAYER_MEDIA_TYPE, bytes);
    layer.annotations = Some(BTreeMap::from([(
        "org.opencontainers.image.title".to_string(),
        "plugin.wasm".to_string(),
    )]));
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(OCI_MANIFEST_MEDIA_TYPE.to_string()),
        artifact_type: Some(WASM_CONFIG_MEDIA_TYPE.to_string()),
        config: Descriptor::of(WASM_CONFIG_MEDIA_TYPE, config.as_bytes()),
        layers: vec![layer],
        annotations: None,
    };
    let target = match (&reference.tag, &reference.digest) {
        (Some(t), _) => t.clone(),
        (None, _) => "latest".to_string(),
    };
    put_manifest(&mut session, &target, &manifest).await
}

/// Signs `manifest_digest` in `reference`'s repository with `key` and pushes the signature
/// where cosign puts it (appended to the signatures already there).
pub async fn push_signature(
    client: &RegistryClient,
    reference: &Reference,
    credentials: Option<Credentials>,
    manifest_digest: Digest,
    key: &sign::SigningKey,
    timeout: Duration,
) -> Result<(), OciError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut session = client.session(reference, credentials, Access::Push, deadline);
    let digest_text = manifest_digest.to_string();
    let tag = sign::signature_tag(&digest_text)
        .ok_or_else(|| OciError::Protocol(format!("no signature tag for {digest_text}")))?;
    let payload = sign::simple_signing_payload(&reference.repository_path(), &digest_text);
    let signature = key
        .sign(&payload)
        .map_err(|e| OciError::BadSignature(e.to_string()))?;
    let mut layers = match fetch_manifest(&mut session, &tag, None, 1 << 20).await {
        Ok((_, _, existing)) => existing.layers,
        Err(OciError::NotFound(_)) => vec![],
        Err(e) => return Err(e),
    };
    let mut layer = Descriptor::of(sign::SIMPLE_SIGNING_MEDIA_TYPE, &payload);
    layer.annotations = Some(BTreeMap::from([(
        sign::SIGNATURE_ANNOTATION.to_string(),
        signature,
    )]));
    if !layers.contains(&layer) {
        layers.push(layer);
    }
    upload_blob(&mut session, &payload).await?;
    let diff_ids: Vec<String> = layers.iter().map(|l| l.digest.clone()).collect();
    let config = serde_json::json!({
        "architecture": "", "os": "", "config": {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    })
    .to_string();
    upload_blob(&mut session, config.as_bytes()).await?;
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(OCI_MANIFEST_MEDIA_TYPE.to_string()),
        artifact_type: None,
        config: Descriptor::of(OCI_IMAGE_CONFIG_MEDIA_TYPE, config.as_bytes()),
        layers,
        annotations: None,
    };
    put_manifest(&mut session, &tag, &manifest)
        .await
        .map(|_| ())
}

async fn upload_blob(session: &mut client::Session<'_>, bytes: &[u8]) -> Result<(), OciError> {
    let digest = Digest::of(bytes);
    let deadline = session.deadline();
    let exists = session
        .send(
            Method::HEAD,
            session.url(&format!("blobs/{digest}"))?,
            HeaderMap::new(),
            Bytes::new(),
        )
        .await?;
    if exists.status.is_success() {
        return Ok(());
    }
    let start = session
        .send(
            Method::POST,
            session.url("blobs/uploads/")?,
            HeaderMap::new(),
            Bytes::new(),
        )
        .await?;
    let started_at = session.url("blobs/uploads/")?;
    let start = expect_success(start, "starting a blob upload", deadline).await?;
    let location = start
        .headers
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| OciError::Protocol("upload answer without a Location".into()))?
        .to_string();
    let upload = session.resolve(&started_at, &location)?;
    let separator = if upload.query().is_some() { '&' } else { '?' };
    let put: http::Uri = format!("{upload}{separator}digest={digest}")
        .parse()
        .map_err(|e| OciError::Protocol(format!("bad upload URL: {e}")))?;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    let done = session
        .send(Method::PUT, put, headers, Bytes::copy_from_slice(bytes))
        .await?;
    expect_success(done, &format!("uploading blob {digest}"), deadline).await?;
    Ok(())
}

async fn put_manifest(
    session: &mut client::Session<'_>,
    target: &str,
    manifest: &Manifest,
) -> Result<Digest, OciError> {
    let body = serde_json::to_vec(manifest)
        .map_err(|e| OciError::Protocol(format!("cannot encode the manifest: {e}")))?;
    let digest = Digest::of(&body);
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(OCI_MANIFEST_MEDIA_TYPE),
    );
    let deadline = session.deadline();
    let uri = session.url(&format!("manifests/{target}"))?;
    let response = session
        .send(Method::PUT, uri, headers, Bytes::from(body))
        .await?;
    expect_success(response, &format!("pushing manifest {target}"), deadline).await?;
    Ok(digest)
}

/// The credentials for `registry` in a Docker config JSON (`.dockerconfigjson` of a
/// `kubernetes.io/dockerconfigjson` Secret, or `~/.docker/config.json`): its `auths` entry
/// keyed by the registry's host (or a URL on that host), as `auth` (base64 `user:password`) or
/// `username` and `password`. Credential helpers are not run.
pub fn credentials_for(config: &[u8], registry: &str) -> Result<Option<Credentials>, OciError> {
    use base64::Engine as _;
    #[derive(Deserialize)]
    struct Config {
        #[serde(default)]
        auths: BTreeMap<String, Entry>,
    }
    #[derive(Deserialize)]
    struct Entry {
        auth: Option<String>,
        username: Option<String>,
        password: Option<String>,
    }
    if config.len() > 1 << 20 {
        return Err(OciError::Credentials(
            "the Docker config is over 1 MiB".into(),
        ));
    }
    let parsed: Config = serde_json::from_slice(config)
        .map_err(|e| OciError::Credentials(format!("not a Docker config JSON: {e}")))?;
    let host_of = |key: &str| -> String {
        let key = key
            .strip_prefix("https://")
            .or_else(|| key.strip_prefix("http://"))
            .unwrap_or(key);
        key.split('/').next().unwrap_or("").to_string()
    };
    let wanted: &[&str] = if registry == reference::DOCKER_HUB {
        &["docker.io", "index.docker.io", "registry-1.docker.io"]
    } else {
        &[registry]
    };
    let Some(entry) = parsed
        .auths
        .iter()
        .find(|(k, _)| wanted.contains(&host_of(k).as_str()))
        .map(|(_, e)| e)
    else {
        return Ok(None);
    };
    if let (Some(u), Some(p)) = (&entry.username, &entry.password) {
        return Ok(Some(Credentials {
            username: u.clone(),
            password: p.clone(),
        }));
    }
    let auth = entry
        .auth
        .as_deref()
        .ok_or_else(|| OciError::Credentials(format!("the entry for {registry} has no auth")))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .map_err(|_| OciError::Credentials(format!("the auth of {registry} is not base64")))?;
    let text = String::from_utf8(decoded)
        .map_err(|_| OciError::Credentials(format!("the auth of {registry} is not UTF-8")))?;
    let (u, p) = text.split_once(':').ok_or_else(|| {
        OciError::Credentials(format!("the auth of {registry} is not user:password"))
    })?;
    Ok(Some(Credentials {
        username: u.to_string(),
        password: p.to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(config: &str, layers: &[&str]) -> Manifest {
        Manifest {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST_MEDIA_TYPE.into()),
            artifact_type: None,
            config: Descriptor::of(config, b"{}"),
            layers: layers.iter().map(|t| Descriptor::of(t, b"\0asm")).collect(),
            annotations: None,
        }
    }

    #[test]
    fn wasm_layouts() {
        for (config, layer) in [
            (WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE),
            (
                "application/vnd.wasm.config.v1+json",
                "application/vnd.wasm.content.layer.v1+wasm",
            ),
            (OCI_EMPTY_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE),
        ] {
            let (d, size) = wasm_layer(&manifest(config, &[layer]), "m").unwrap();
            assert_eq!((d, size), (Digest::of(b"\0asm"), 4));
        }
        let e = wasm_layer(
            &manifest(OCI_IMAGE_CONFIG_MEDIA_TYPE, &[WASM_LAYER_MEDIA_TYPE]),
            "m",
        );
        assert!(matches!(e, Err(OciError::NotWasm(m)) if m.contains("config media type")));
        let e = wasm_layer(
            &manifest(
                WASM_CONFIG_MEDIA_TYPE,
                &["application/vnd.oci.image.layer.v1.tar+gzip"],
            ),
            "m",
        );
        assert!(matches!(e, Err(OciError::NotWasm(m)) if m.contains("layer has media type")));
        let e = wasm_layer(
            &manifest(
                WASM_CONFIG_MEDIA_TYPE,
                &[WASM_LAYER_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE],
            ),
            "m",
        );
        assert!(matches!(e, Err(OciError::NotWasm(m)) if m.contains("2 layers")));
    }

    #[test]
    fn manifests_parse_bounded() {
        let index = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
        assert!(matches!(
            parse_manifest(index, None, "m"),
            Err(OciError::NotWasm(_))
        ));
        let many = manifest(WASM_CONFIG_MEDIA_TYPE, &[WASM_LAYER_MEDIA_TYPE; 65]);
        let body = serde_json::to_vec(&many).unwrap();
        assert!(matches!(
            parse_manifest(&body, None, "m"),
            Err(OciError::TooLarge(_))
        ));
        let v1 =
            br#"{"schemaVersion":1,"config":{"mediaType":"a","digest":"b","size":1},"layers":[]}"#;
        assert!(matches!(
            parse_manifest(v1, None, "m"),
            Err(OciError::Protocol(_))
        ));
        assert!(matches!(
            parse_manifest(b"[", None, "m"),
            Err(OciError::Protocol(_))
        ));
    }

    #[test]
    fn docker_config_credentials() {
        use base64::Engine as _;
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3:cret");
        let config = format!(
            r#"{{"auths":{{"registry.example:5000":{{"auth":"{auth}"}},
               "https://index.docker.io/v1/":{{"username":"bob","password":"pw"}}}}}}"#
        );
        let c = credentials_for(config.as_bytes(), "registry.example:5000")
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("alice", "s3:cret")
        );
        let c = credentials_for(config.as_bytes(), "docker.io")
            .unwrap()
            .unwrap();
        assert_eq!(c.username, "bob");
        assert_eq!(
            credentials_for(config.as_bytes(), "other.example").unwrap(),
            None
        );
        assert!(credentials_for(b"not json", "x").is_err());
        let bad = r#"{"auths":{"x":{"auth":"!!"}}}"#;
        assert!(matches!(
            credentials_for(bad.as_bytes(), "x"),
            Err(OciError::Credentials(_))
        ));
    }
}
