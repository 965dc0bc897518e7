//! Wasm components in OCI registries, end to end: pushed to and pulled from a real registry
//! (Debian's `docker-registry`, the CNCF distribution registry, started per test), signed and
//! verified, tampered with in the registry's storage, served from the disk cache with the
//! registry gone, and pulled from a hostile registry written here (axum) that stalls, streams
//! forever, lies about sizes and digests, redirects in circles or asks for auth.
//!
//! The real-registry tests fail when `docker-registry` is missing (scripts/test.sh installs
//! it), unless `DIORCH_SKIP_REGISTRY_TESTS=1`, which makes them print `SKIPPED: …` and return.
//! Components come from `scripts/build-plugins.sh` (target/plugins/*.wasm).

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, Query, State};
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use base64::Engine as _;
use bytes::Bytes;
use diorch::oci::cache::BlobCache;
use diorch::oci::sign::{self, SigningKey};
use diorch::oci::{
    self, Digest, OciError, Options, PullLimits, PullRequest, Pulled, Puller, Reference,
    RegistryClient,
};
use diorch::plugin::fetch::{Fetcher, FileSecrets};
use diorch::plugin::spec::{ComponentSource, PluginKind, PluginSpec};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, StatusCode};
use http_body_util::{BodyExt as _, Empty};
use sha2::Digest as _;

const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
const WASM_LAYER: &str = "application/wasm";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Pushes of a ~100 KiB component to a local registry take milliseconds; this only bounds a hang.
const PUSH_TIMEOUT: Duration = Duration::from_secs(30);
/// Every failing pull from the hostile registry must end within this (its own deadline is 3 s).
const FAILURE_BOUND: Duration = Duration::from_secs(10);

fn wasm(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/plugins")
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; build the plugins first with scripts/build-plugins.sh",
            path.display()
        )
    })
}

/// `sha256:<hex>` computed here, not with the crate's `Digest`, so a bug there cannot hide.
fn sha256(bytes: &[u8]) -> String {
    let hex: String = sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

fn reference(text: &str) -> Reference {
    text.parse()
        .unwrap_or_else(|e| panic!("{text:?} is not a reference: {e}"))
}

/// A client that speaks plain HTTP to `host` (the local registries have no TLS).
fn client_for(host: &str, request_timeout: Duration) -> RegistryClient {
    RegistryClient::new(Options {
        insecure_registries: vec![host.to_string()],
        request_timeout,
        ..Options::default()
    })
    .expect("registry client")
}

fn puller(host: &str, cache: Option<BlobCache>) -> Puller {
    Puller::new(
        client_for(host, Duration::from_secs(10)),
        PullLimits::default(),
        cache,
    )
}

fn trusting(keys: &[&SigningKey]) -> PullRequest {
    PullRequest {
        credentials: None,
        trusted_keys: Some(keys.iter().map(|k| k.public_key()).collect()),
    }
}

/// A plain GET with hyper, independent of the crate's client: what the registry really stores.
async fn http_get(
    url: &str,
    accept: Option<&str>,
) -> Result<(StatusCode, HeaderMap, Bytes), String> {
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut request = Request::get(url);
    if let Some(accept) = accept {
        request = request.header(header::ACCEPT, accept);
    }
    let request = request.body(Empty::new()).map_err(|e| e.to_string())?;
    let bound = Duration::from_secs(5);
    let response = tokio::time::timeout(bound, client.request(request))
        .await
        .map_err(|_| format!("GET {url}: no answer in {bound:?}"))?
        .map_err(|e| format!("GET {url}: {e}"))?;
    let (parts, body) = response.into_parts();
    let body = tokio::time::timeout(bound, body.collect())
        .await
        .map_err(|_| format!("GET {url}: the body did not end in {bound:?}"))?
        .map_err(|e| format!("GET {url}: {e}"))?
        .to_bytes();
    Ok((parts.status, parts.headers, body))
}

/// GETs a manifest from a registry as JSON, checking its bytes hash to the digest it is served
/// as; returns that digest too.
async fn raw_manifest(
    host: &str,
    repository: &str,
    reference: &str,
) -> (String, serde_json::Value) {
    let url = format!("http://{host}/v2/{repository}/manifests/{reference}");
    let (status, headers, body) = http_get(&url, Some(OCI_MANIFEST)).await.unwrap();
    assert_eq!(
        status,
        StatusCode::OK,
        "{url}: {}",
        String::from_utf8_lossy(&body)
    );
    let served_as = headers
        .get("docker-content-digest")
        .and_then(|v| v.to_str().ok());
    assert_eq!(served_as, Some(sha256(&body).as_str()), "{url}");
    (sha256(&body), serde_json::from_slice(&body).unwrap())
}

// ---------------------------------------------------------------------------------------------
// The real registry.

// The shared registry harness (tests/common/registry.rs, the binary's `registry`), plus what these
// tests ask of it.
use crate::registry as harness;
use harness::Registry;

impl Registry {
    /// A running registry, or `None` after a reported skip (see `harness::registry_available`).
    async fn start_or_skip(test: &str) -> Option<Registry> {
        harness::registry_available(test).then(Registry::start)
    }

    /// Where the registry keeps a blob's bytes.
    fn blob_data(&self, digest: Digest) -> PathBuf {
        self.blob_file(&digest.to_string())
    }

    fn reference(&self, path: &str) -> Reference {
        reference(&format!("{}/{path}", self.host))
    }
}

/// Pushes `component` to `path` (`repository:tag`) of `registry`; returns the manifest digest.
async fn push(registry: &Registry, path: &str, component: &[u8]) -> Digest {
    let client = client_for(&registry.host, Duration::from_secs(10));
    oci::push(
        &client,
        &registry.reference(path),
        None,
        component,
        PUSH_TIMEOUT,
    )
    .await
    .unwrap_or_else(|e| panic!("push {path}: {e}\nregistry output:\n{}", registry.log()))
}

/// The ORAS project's Python SDK (`oras` on PyPI), installed by scripts/test.sh into a venv:
/// its interpreter, or `None` after a reported skip when `DIORCH_SKIP_ORAS_TESTS=1`.
fn oras_python(test: &str) -> Option<PathBuf> {
    let python = std::env::var_os("DIORCH_ORAS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_path("target/oras-venv/bin/python"));
    if python.is_file() {
        return Some(python);
    }
    assert!(
        std::env::var("DIORCH_SKIP_ORAS_TESTS").as_deref() == Ok("1"),
        "{test} needs the oras Python SDK in {} (scripts/test.sh installs it); set \
         DIORCH_SKIP_ORAS_TESTS=1 to skip",
        python.display()
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: no oras Python SDK");
    None
}

fn repo_path(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs a Python snippet with the oras SDK against `registry`; its stdout.
fn oras(python: &Path, registry: &Registry, dir: &Path, script: &str) -> String {
    let program = format!(
        "import hashlib, oras.client\n\
         c = oras.client.OrasClient(hostname={host:?}, insecure=True)\n{script}",
        host = registry.host
    );
    let out = Command::new(python)
        .arg("-c")
        .arg(program)
        .current_dir(dir)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "oras: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Interop with ORAS: a component `oras push`ed as `plugin.wasm:application/wasm` (ORAS's own
/// config media type) pulls and verifies here, and one pushed by `diorch plugin push` is pulled
/// by ORAS byte for byte.
#[tokio::test]
async fn components_travel_both_ways_with_oras() {
    let Some(python) = oras_python("components_travel_both_ways_with_oras") else {
        return;
    };
    let Some(registry) = Registry::start_or_skip("components_travel_both_ways_with_oras").await
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let component = wasm("binpack");
    std::fs::write(dir.path().join("plugin.wasm"), &component).unwrap();
    let status = oras(
        &python,
        &registry,
        dir.path(),
        &format!(
            "r = c.push(target=\"{}/by-oras/binpack:v1\", files=[\"plugin.wasm:application/wasm\"], \
             disable_path_validation=True)\nprint(r.status_code)",
            registry.host
        ),
    );
    assert_eq!(status, "201");
    let pulled = puller(&registry.host, None)
        .pull(
            &registry.reference("by-oras/binpack:v1"),
            &PullRequest::default(),
        )
        .await
        .unwrap();
    assert_eq!(&pulled.bytes[..], &component[..]);

    push(&registry, "by-diorch/binpack:v1", &component).await;
    let hashes = oras(
        &python,
        &registry,
        dir.path(),
        &format!(
            "files = c.pull(target=\"{}/by-diorch/binpack:v1\", outdir=\"out\")\n\
             print(\" \".join(hashlib.sha256(open(f, \"rb\").read()).hexdigest() for f in files))",
            registry.host
        ),
    );
    assert_eq!(hashes, Digest::of(&component).hex());
}

async fn sign(registry: &Registry, path: &str, digest: Digest, key: &SigningKey) {
    let client = client_for(&registry.host, Duration::from_secs(10));
    oci::push_signature(
        &client,
        &registry.reference(path),
        None,
        digest,
        key,
        PUSH_TIMEOUT,
    )
    .await
    .unwrap_or_else(|e| panic!("sign {path}@{digest}: {e}"));
}

#[tokio::test]
async fn a_pushed_component_pulls_back_by_tag_and_by_digest_in_the_cncf_layout() {
    let Some(registry) = Registry::start_or_skip(
        "a_pushed_component_pulls_back_by_tag_and_by_digest_in_the_cncf_layout",
    )
    .await
    else {
        return;
    };
    let component = wasm("binpack");
    let digest = push(&registry, "policies/binpack:v1", &component).await;
    let puller = puller(&registry.host, None);

    let by_tag = puller
        .pull(
            &registry.reference("policies/binpack:v1"),
            &PullRequest::default(),
        )
        .await
        .unwrap();
    assert_eq!(&by_tag.bytes[..], &component[..], "the bytes pulled by tag");
    assert_eq!(by_tag.manifest_digest, digest);
    assert_eq!(
        by_tag.reference.to_string(),
        format!("{}/policies/binpack:v1@{digest}", registry.host),
        "a tag pull is pinned to the digest it resolved to"
    );
    assert_eq!(by_tag.layer_digest.to_string(), sha256(&component));
    assert_eq!(
        (by_tag.signed_by.as_deref(), by_tag.layer_cached),
        (None, false)
    );

    let pinned = registry.reference(&format!("policies/binpack@{digest}"));
    let by_digest = puller.pull(&pinned, &PullRequest::default()).await.unwrap();
    assert_eq!(
        &by_digest.bytes[..],
        &component[..],
        "the bytes pulled by digest"
    );
    assert_eq!(by_digest.reference, pinned);
    assert_eq!(by_digest.layer_digest.to_string(), sha256(&component));

    // What the registry holds, read without the crate: the CNCF Wasm artifact layout, so
    // wkg and oras read what `diorch plugin push` writes.
    let (stored, manifest) = raw_manifest(&registry.host, "policies/binpack", "v1").await;
    assert_eq!(
        stored,
        digest.to_string(),
        "push returned another digest than it stored"
    );
    assert_eq!(manifest["schemaVersion"], 2);
    assert_eq!(manifest["mediaType"], OCI_MANIFEST);
    assert_eq!(manifest["config"]["mediaType"], WASM_CONFIG, "{manifest:#}");
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{manifest:#}");
    assert_eq!(layers[0]["mediaType"], WASM_LAYER);
    assert_eq!(layers[0]["digest"], sha256(&component));
    assert_eq!(layers[0]["size"], component.len());
    let config_url = format!(
        "http://{}/v2/policies/binpack/blobs/{}",
        registry.host,
        manifest["config"]["digest"].as_str().unwrap()
    );
    let (status, _, config) = http_get(&config_url, None).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        Some(sha256(&config).as_str()),
        manifest["config"]["digest"].as_str()
    );
    let config: serde_json::Value = serde_json::from_slice(&config).unwrap();
    assert_eq!(config["layerDigests"][0], sha256(&component), "{config:#}");
}

#[tokio::test]
async fn signatures_are_verified_against_the_trusted_keys() {
    let Some(registry) =
        Registry::start_or_skip("signatures_are_verified_against_the_trusted_keys").await
    else {
        return;
    };
    let (a, b) = (
        SigningKey::generate().unwrap(),
        SigningKey::generate().unwrap(),
    );
    let component = wasm("binpack");
    let digest = push(&registry, "policies/binpack:v1", &component).await;
    sign(&registry, "policies/binpack:v1", digest, &a).await;
    let puller = puller(&registry.host, None);
    let tagged = registry.reference("policies/binpack:v1");

    let pulled = puller.pull(&tagged, &trusting(&[&a])).await.unwrap();
    assert_eq!(pulled.signed_by, Some(a.public_key().fingerprint()));
    assert_eq!(&pulled.bytes[..], &component[..]);

    let err = puller.pull(&tagged, &trusting(&[&b])).await.unwrap_err();
    assert!(matches!(err, OciError::BadSignature(_)), "{err:?}");
    assert_eq!(err.reason(), "SignatureRefused");
    // Required with no trusted key at all: refused, never accepted.
    let err = puller.pull(&tagged, &trusting(&[])).await.unwrap_err();
    assert!(matches!(err, OciError::BadSignature(_)), "{err:?}");

    // Other bytes, so another manifest digest, never signed.
    let unsigned = push(&registry, "policies/spread:v1", &wasm("spread")).await;
    assert_ne!(unsigned, digest);
    let err = puller
        .pull(&registry.reference("policies/spread:v1"), &trusting(&[&a]))
        .await
        .unwrap_err();
    assert!(matches!(err, OciError::Unsigned(_)), "{err:?}");
    assert_eq!(err.reason(), "SignatureRefused");

    // A second signer is appended to the cosign signature manifest, not swapped in.
    sign(&registry, "policies/binpack:v1", digest, &b).await;
    let sig_tag = format!("sha256-{}.sig", digest.hex());
    let (_, signatures) = raw_manifest(&registry.host, "policies/binpack", &sig_tag).await;
    let layers = signatures["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 2, "{signatures:#}");
    // Each layer is what cosign verifies: a simple-signing payload naming the digest, and its
    // signature in the annotation, by A then by B.
    for (layer, key) in layers.iter().zip([&a, &b]) {
        assert_eq!(layer["mediaType"], sign::SIMPLE_SIGNING_MEDIA_TYPE);
        let url = format!(
            "http://{}/v2/policies/binpack/blobs/{}",
            registry.host,
            layer["digest"].as_str().unwrap()
        );
        let (status, _, payload) = http_get(&url, None).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        sign::check_payload(&payload, &digest.to_string()).unwrap();
        let signature = layer["annotations"][sign::SIGNATURE_ANNOTATION]
            .as_str()
            .unwrap();
        key.public_key().verify(&payload, signature).unwrap();
    }
    for key in [&a, &b] {
        let pulled = puller.pull(&tagged, &trusting(&[key])).await.unwrap();
        assert_eq!(pulled.signed_by, Some(key.public_key().fingerprint()));
    }
}

#[tokio::test]
async fn a_blob_tampered_with_in_the_registry_is_refused_and_never_cached() {
    let Some(registry) =
        Registry::start_or_skip("a_blob_tampered_with_in_the_registry_is_refused_and_never_cached")
            .await
    else {
        return;
    };
    let component = wasm("binpack");
    let digest = push(&registry, "policies/binpack:v1", &component).await;
    let layer = Digest::of(&component);
    let data = registry.blob_data(layer);
    assert_eq!(
        std::fs::read(&data).unwrap(),
        component,
        "the registry's layout moved"
    );
    // Same length, so only the digest check can notice.
    let tampered: Vec<u8> = component.iter().map(|b| b ^ 0x5a).collect();
    std::fs::write(&data, &tampered).unwrap();

    let cache_dir = tempfile::tempdir().unwrap();
    let cache = BlobCache::open(cache_dir.path(), 64 << 20).unwrap();
    let puller = puller(&registry.host, Some(cache.clone()));
    let pinned = registry.reference(&format!("policies/binpack@{digest}"));
    for attempt in ["first", "second"] {
        let err = puller
            .pull(&pinned, &PullRequest::default())
            .await
            .unwrap_err();
        assert!(
            matches!(err, OciError::DigestMismatch(_)),
            "{attempt} pull: {err:?}"
        );
        assert_eq!(err.reason(), "DigestMismatch");
    }
    assert_eq!(
        cache.get(layer, 64 << 20).await,
        None,
        "the layer was cached"
    );
    for entry in walk(cache_dir.path()) {
        let bytes = std::fs::read(&entry).unwrap();
        assert_ne!(
            bytes,
            tampered,
            "{} holds the tampered bytes",
            entry.display()
        );
    }
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[tokio::test]
async fn a_pinned_component_loads_from_the_disk_cache_with_the_registry_gone() {
    let Some(mut registry) = Registry::start_or_skip(
        "a_pinned_component_loads_from_the_disk_cache_with_the_registry_gone",
    )
    .await
    else {
        return;
    };
    let component = wasm("binpack");
    let digest = push(&registry, "policies/binpack:v1", &component).await;
    let pinned = registry.reference(&format!("policies/binpack@{digest}"));
    let cache_dir = tempfile::tempdir().unwrap();
    let open = || BlobCache::open(cache_dir.path(), 64 << 20).unwrap();

    let first = puller(&registry.host, Some(open()))
        .pull(&pinned, &PullRequest::default())
        .await
        .unwrap();
    assert!(!first.layer_cached, "nothing was cached yet");

    registry.stop();
    // The registry is really gone: without the cache the same pull fails.
    let err = puller(&registry.host, None)
        .pull(&pinned, &PullRequest::default())
        .await
        .unwrap_err();
    assert!(matches!(err, OciError::Network(_)), "{err:?}");

    // A new puller on the same folder, as after an operator restart.
    let again = puller(&registry.host, Some(open()))
        .pull(&pinned, &PullRequest::default())
        .await
        .unwrap();
    assert!(again.layer_cached);
    assert_eq!(&again.bytes[..], &component[..]);
    assert_eq!((again.manifest_digest, again.reference), (digest, pinned));
    // A tag needs the registry to say what it points to now.
    let err = puller(&registry.host, Some(open()))
        .pull(
            &registry.reference("policies/binpack:v1"),
            &PullRequest::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, OciError::Network(_)), "{err:?}");
}

#[tokio::test]
async fn the_fetcher_requires_a_trusted_signature_on_registry_components() {
    let Some(registry) =
        Registry::start_or_skip("the_fetcher_requires_a_trusted_signature_on_registry_components")
            .await
    else {
        return;
    };
    let (a, b) = (
        SigningKey::generate().unwrap(),
        SigningKey::generate().unwrap(),
    );
    let component = wasm("binpack");
    let digest = push(&registry, "policies/binpack:v1", &component).await;
    sign(&registry, "policies/binpack:v1", digest, &a).await;
    push(&registry, "policies/spread:v1", &wasm("spread")).await;
    let fetcher = |keys: Vec<&SigningKey>| Fetcher {
        puller: puller(&registry.host, None),
        secrets: Arc::new(FileSecrets {
            keys: keys.iter().map(|k| k.public_key()).collect(),
            docker_config: None,
        }),
        require_signatures: true,
        allowed_registries: vec![registry.host.clone()],
    };
    let image = |path: &str| ComponentSource::Image {
        reference: registry.reference(path),
        pull_secret: None,
    };
    let spec = PluginSpec::new("binpack", PluginKind::Policy);

    let fetched = fetcher(vec![&a])
        .fetch(&spec, &image("policies/binpack:v1"))
        .await
        .unwrap();
    assert_eq!(&fetched.bytes[..], &component[..]);
    assert_eq!(
        fetched.origin.image,
        Some(format!("{}/policies/binpack:v1@{digest}", registry.host))
    );
    assert_eq!(fetched.origin.signed_by, Some(a.public_key().fingerprint()));

    for (what, keys, path) in [
        ("unsigned", vec![&a], "policies/spread:v1"),
        (
            "signed by an untrusted key",
            vec![&b],
            "policies/binpack:v1",
        ),
    ] {
        let err = fetcher(keys).fetch(&spec, &image(path)).await.unwrap_err();
        assert_eq!(err.reason(), "SignatureRefused", "{what}: {err}");
    }
    // A ConfigMap may opt out of the operator-wide requirement.
    let mut opted_out = spec.clone();
    opted_out.require_signature = Some(false);
    let fetched = fetcher(vec![&a])
        .fetch(&opted_out, &image("policies/spread:v1"))
        .await
        .unwrap();
    assert_eq!(fetched.origin.signed_by, None);
}

// ---------------------------------------------------------------------------------------------
// The hostile registry: one misbehaviour per repository name.

/// What the hostile registry serves as a valid component (the pull path never parses Wasm).
const COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00 a stand-in component served by the test registry";
const TOKEN: &str = "t";
const BASIC_USER: (&str, &str) = ("alice", "s3:cret");

struct HostileState {
    port: u16,
    /// Blob requests per repository: a refused manifest must not lead to a download.
    blob_calls: Mutex<HashMap<String, usize>>,
    /// `(scope, service)` of each token request.
    token_requests: Mutex<Vec<(String, String)>>,
}

struct Hostile {
    host: String,
    state: Arc<HostileState>,
}

impl Hostile {
    async fn start() -> Hostile {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(HostileState {
            port,
            blob_calls: Mutex::default(),
            token_requests: Mutex::default(),
        });
        let app = Router::new()
            .route("/v2/{repo}/manifests/{reference}", get(hostile_manifest))
            .route("/v2/{repo}/blobs/{digest}", get(hostile_blob))
            .route("/token", get(hostile_token))
            .with_state(state.clone());
        // Ends with the test's runtime.
        tokio::spawn(async move { axum::serve(listener, app).await });
        Hostile {
            host: format!("127.0.0.1:{port}"),
            state,
        }
    }

    /// Tight bounds, so each misbehaviour is cut off fast.
    fn puller(&self) -> Puller {
        let limits = PullLimits {
            manifest_cap: 64 << 10,
            blob_cap: 1 << 20,
            timeout: Duration::from_secs(3),
        };
        Puller::new(client_for(&self.host, Duration::from_secs(1)), limits, None)
    }

    fn reference(&self, path: &str) -> Reference {
        reference(&format!("{}/{path}", self.host))
    }

    fn blob_calls(&self, repo: &str) -> usize {
        self.state
            .blob_calls
            .lock()
            .unwrap()
            .get(repo)
            .copied()
            .unwrap_or(0)
    }

    async fn pull(&self, path: &str, request: &PullRequest) -> Result<Pulled, OciError> {
        self.puller().pull(&self.reference(path), request).await
    }

    /// Pulls `path`, which must fail within [`FAILURE_BOUND`]; returns why.
    async fn refused(&self, path: &str) -> OciError {
        let started = Instant::now();
        let result = self.pull(path, &PullRequest::default()).await;
        let took = started.elapsed();
        assert!(took < FAILURE_BOUND, "{path}: the pull took {took:?}");
        match result {
            Ok(pulled) => panic!(
                "{path}: pulled {} bytes; expected a refusal",
                pulled.bytes.len()
            ),
            Err(e) => e,
        }
    }
}

/// Bytes `0, 1, 2, …` (mod 256): a layer body whose prefixes are distinguishable.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| i as u8).collect()
}

/// A Wasm artifact manifest in the CNCF layout, written by hand (not with the crate's types).
fn wasm_manifest(layer_type: &str, layer_digest: &str, layer_size: usize) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": WASM_CONFIG, "digest": sha256(b"{}"), "size": 2},
        "layers": [{"mediaType": layer_type, "digest": layer_digest, "size": layer_size}],
    }))
    .unwrap()
}

fn valid_manifest() -> Vec<u8> {
    wasm_manifest(WASM_LAYER, &sha256(COMPONENT), COMPONENT.len())
}

fn manifest_answer(body: Vec<u8>, media_type: &'static str) -> Response {
    ([(header::CONTENT_TYPE, media_type)], body).into_response()
}

fn authorized(headers: &HeaderMap, expected: &str) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(expected)
}

fn basic_authorization() -> String {
    let (user, password) = BASIC_USER;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

/// The 401 that sends a client to the auth scheme `repo` stands for.
fn challenge(state: &HostileState, repo: &str) -> Response {
    let value = match repo {
        "auth" => format!(
            r#"Bearer realm="http://127.0.0.1:{}/token",service="x""#,
            state.port
        ),
        _ => r#"Basic realm="x""#.to_string(),
    };
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, value)],
    )
        .into_response()
}

/// Whether a request to `repo` carries what its auth scheme requires (true if it has none).
fn passes_auth(repo: &str, headers: &HeaderMap) -> bool {
    match repo {
        "auth" => authorized(headers, &format!("Bearer {TOKEN}")),
        "basic" => authorized(headers, &basic_authorization()),
        _ => true,
    }
}

async fn hostile_manifest(
    State(state): State<Arc<HostileState>>,
    UrlPath((repo, reference)): UrlPath<(String, String)>,
    headers: HeaderMap,
) -> Response {
    static KIB: [u8; 1024] = [b' '; 1024];
    if !passes_auth(&repo, &headers) {
        return challenge(&state, &repo);
    }
    match repo.as_str() {
        "slow" => std::future::pending().await,
        "trickle" => {
            let endless =
                futures::stream::repeat_with(|| Ok::<_, Infallible>(Bytes::from_static(&KIB)));
            Response::new(Body::from_stream(endless))
        }
        "huge-length" => {
            // Announces 10 GiB and sends nothing: only the header can be judged.
            let silent = futures::stream::pending::<Result<Bytes, Infallible>>();
            let mut response = Response::new(Body::from_stream(silent));
            response.headers_mut().insert(
                header::CONTENT_LENGTH,
                HeaderValue::from_static("10737418240"),
            );
            response
        }
        "liar" | "liar-chunked" => manifest_answer(
            wasm_manifest(WASM_LAYER, &sha256(&pattern(100)), 100),
            OCI_MANIFEST,
        ),
        "short" => manifest_answer(
            wasm_manifest(WASM_LAYER, &sha256(&pattern(200)), 200),
            OCI_MANIFEST,
        ),
        "wrong-type" => manifest_answer(
            wasm_manifest(
                "application/vnd.oci.image.layer.v1.tar+gzip",
                &sha256(COMPONENT),
                COMPONENT.len(),
            ),
            OCI_MANIFEST,
        ),
        "big-layer" => manifest_answer(
            wasm_manifest(WASM_LAYER, &sha256(&pattern(2 << 20)), 2 << 20),
            OCI_MANIFEST,
        ),
        "index" => {
            let index = serde_json::json!({
                "schemaVersion": 2,
                "mediaType": OCI_INDEX,
                "manifests": [{
                    "mediaType": OCI_MANIFEST,
                    "digest": sha256(&valid_manifest()),
                    "size": valid_manifest().len(),
                    "platform": {"architecture": "wasm", "os": "wasip2"},
                }],
            });
            manifest_answer(serde_json::to_vec(&index).unwrap(), OCI_INDEX)
        }
        // Asked by digest: a valid manifest, but not the one asked for. Asked by tag: one
        // whose announced digest is not its own.
        "bad-digest" if reference.starts_with("sha256:") => {
            manifest_answer(valid_manifest(), OCI_MANIFEST)
        }
        "bad-digest" => {
            let mut response = manifest_answer(valid_manifest(), OCI_MANIFEST);
            let other = HeaderValue::from_str(&sha256(b"another manifest")).unwrap();
            response
                .headers_mut()
                .insert("docker-content-digest", other);
            response
        }
        "redirect-loop" | "auth" | "basic" => manifest_answer(valid_manifest(), OCI_MANIFEST),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn hostile_blob(
    State(state): State<Arc<HostileState>>,
    UrlPath((repo, digest)): UrlPath<(String, String)>,
    headers: HeaderMap,
) -> Response {
    *state
        .blob_calls
        .lock()
        .unwrap()
        .entry(repo.clone())
        .or_default() += 1;
    if !passes_auth(&repo, &headers) {
        return challenge(&state, &repo);
    }
    match repo.as_str() {
        "redirect-loop" => (
            StatusCode::TEMPORARY_REDIRECT,
            [(header::LOCATION, format!("/v2/{repo}/blobs/{digest}"))],
        )
            .into_response(),
        // 200 bytes with a Content-Length, then without one (streamed, so only counting the
        // bytes as they arrive catches it).
        "liar" => pattern(200).into_response(),
        "liar-chunked" => {
            let chunks = pattern(200)
                .chunks(50)
                .map(|c| Ok::<_, Infallible>(Bytes::copy_from_slice(c)))
                .collect::<Vec<_>>();
            Response::new(Body::from_stream(futures::stream::iter(chunks)))
        }
        "short" => pattern(100).into_response(),
        _ => COMPONENT.into_response(),
    }
}

async fn hostile_token(
    State(state): State<Arc<HostileState>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let scope = query.get("scope").cloned().unwrap_or_default();
    let service = query.get("service").cloned().unwrap_or_default();
    state.token_requests.lock().unwrap().push((scope, service));
    axum::Json(serde_json::json!({ "token": TOKEN })).into_response()
}

#[tokio::test]
async fn a_manifest_that_never_comes_times_out() {
    let hostile = Hostile::start().await;
    let err = hostile.refused("slow:v1").await;
    assert!(matches!(err, OciError::Timeout(_)), "{err:?}");
    assert_eq!(err.reason(), "PullFailed");
}

#[tokio::test]
async fn an_endless_manifest_is_cut_off_at_the_manifest_cap() {
    let hostile = Hostile::start().await;
    let err = hostile.refused("trickle:v1").await;
    // TooLarge, not Timeout: the cap stops it, not the 3 s deadline.
    assert!(matches!(err, OciError::TooLarge(_)), "{err:?}");
    assert_eq!(err.reason(), "PullLimit");
    assert!(err.to_string().contains("65536"), "{err}");
}

#[tokio::test]
async fn a_manifest_announcing_10_gib_is_refused_without_reading() {
    let hostile = Hostile::start().await;
    let err = hostile.refused("huge-length:v1").await;
    // The body never comes, so only the Content-Length can have been judged.
    assert!(matches!(err, OciError::TooLarge(_)), "{err:?}");
    assert!(err.to_string().contains("10737418240"), "{err}");
    assert_eq!(err.reason(), "PullLimit");
}

#[tokio::test]
async fn a_redirect_loop_is_followed_a_bounded_number_of_times() {
    let hostile = Hostile::start().await;
    let err = hostile.refused("redirect-loop:v1").await;
    assert!(matches!(err, OciError::Protocol(_)), "{err:?}");
    assert!(err.to_string().contains("redirects"), "{err}");
    assert_eq!(err.reason(), "PullFailed");
    // The first request and `max_redirects` (5) hops.
    assert_eq!(hostile.blob_calls("redirect-loop"), 6);
}

#[tokio::test]
async fn a_layer_larger_or_smaller_than_its_manifest_says_is_refused() {
    let hostile = Hostile::start().await;
    for repo in ["liar", "liar-chunked"] {
        let err = hostile.refused(&format!("{repo}:v1")).await;
        assert!(matches!(err, OciError::TooLarge(_)), "{repo}: {err:?}");
        assert!(
            err.to_string().contains("its manifest says"),
            "{repo}: {err}"
        );
        assert_eq!(err.reason(), "PullLimit");
    }
    let err = hostile.refused("short:v1").await;
    assert!(matches!(err, OciError::DigestMismatch(_)), "{err:?}");
    assert_eq!(err.reason(), "DigestMismatch");
}

#[tokio::test]
async fn a_manifest_that_is_no_wasm_component_is_refused_before_any_download() {
    let hostile = Hostile::start().await;
    let err = hostile.refused("wrong-type:v1").await;
    assert!(matches!(err, OciError::NotWasm(_)), "{err:?}");
    assert!(err.to_string().contains("tar+gzip"), "{err}");
    assert_eq!(err.reason(), "NotAWasmArtifact");
    assert_eq!(hostile.blob_calls("wrong-type"), 0);

    let err = hostile.refused("index:v1").await;
    assert!(matches!(err, OciError::NotWasm(_)), "{err:?}");
    assert!(err.to_string().contains("image index"), "{err}");
    assert_eq!(err.reason(), "NotAWasmArtifact");
}

#[tokio::test]
async fn a_layer_over_the_blob_cap_is_refused_before_any_download() {
    let hostile = Hostile::start().await;
    let err = hostile.refused("big-layer:v1").await;
    assert!(matches!(err, OciError::TooLarge(_)), "{err:?}");
    assert!(err.to_string().contains("2097152"), "{err}");
    assert_eq!(err.reason(), "PullLimit");
    assert_eq!(hostile.blob_calls("big-layer"), 0);
}

#[tokio::test]
async fn a_manifest_other_than_the_digest_names_is_refused() {
    let hostile = Hostile::start().await;
    let asked = sha256(b"the manifest the reference pins");
    let err = hostile.refused(&format!("bad-digest@{asked}")).await;
    assert!(matches!(err, OciError::DigestMismatch(_)), "{err:?}");
    assert_eq!(err.reason(), "DigestMismatch");
    // By tag: the registry's Docker-Content-Digest disagrees with the bytes it sent.
    let err = hostile.refused("bad-digest:v1").await;
    assert!(matches!(err, OciError::DigestMismatch(_)), "{err:?}");
    assert_eq!(hostile.blob_calls("bad-digest"), 0);
}

#[tokio::test]
async fn a_bearer_token_is_fetched_from_the_realm_and_reused() {
    let hostile = Hostile::start().await;
    let pulled = hostile
        .pull("auth:v1", &PullRequest::default())
        .await
        .unwrap();
    assert_eq!(&pulled.bytes[..], COMPONENT);
    assert_eq!(pulled.layer_digest.to_string(), sha256(COMPONENT));
    // One token, asked for pull access to this repository only, then sent on the blob
    // request too (the blob handler refuses requests without it).
    let requests = hostile.state.token_requests.lock().unwrap().clone();
    assert_eq!(
        requests,
        [("repository:auth:pull".to_string(), "x".to_string())]
    );
    assert_eq!(hostile.blob_calls("auth"), 1);
}

#[tokio::test]
async fn basic_auth_uses_the_credentials_of_a_docker_config() {
    let hostile = Hostile::start().await;
    let docker_config = |user: &str, password: &str| {
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        serde_json::to_vec(&serde_json::json!({"auths": {hostile.host.as_str(): {"auth": auth}}}))
            .unwrap()
    };
    let (user, password) = BASIC_USER;
    let credentials = oci::credentials_for(&docker_config(user, password), &hostile.host)
        .unwrap()
        .expect("an entry for the registry");
    let request = PullRequest {
        credentials: Some(credentials),
        trusted_keys: None,
    };
    let pulled = hostile.pull("basic:v1", &request).await.unwrap();
    assert_eq!(&pulled.bytes[..], COMPONENT);

    let err = hostile.refused("basic:v1").await;
    assert!(
        matches!(err, OciError::Unauthorized(_)),
        "no credentials: {err:?}"
    );
    let wrong = oci::credentials_for(&docker_config(user, "guess"), &hostile.host).unwrap();
    let request = PullRequest {
        credentials: wrong,
        trusted_keys: None,
    };
    let err = hostile.pull("basic:v1", &request).await.unwrap_err();
    assert!(
        matches!(err, OciError::Unauthorized(_)),
        "wrong password: {err:?}"
    );
    assert!(err.to_string().contains("refused"), "{err}");

    // Through the fetcher: a ConfigMap's imagePullSecret read as a Docker config.
    let fetcher = Fetcher {
        puller: hostile.puller(),
        secrets: Arc::new(FileSecrets {
            keys: vec![],
            docker_config: Some(docker_config(user, password)),
        }),
        require_signatures: false,
        allowed_registries: vec![],
    };
    let source = ComponentSource::Image {
        reference: hostile.reference("basic:v1"),
        pull_secret: Some("registry-credentials".into()),
    };
    let fetched = fetcher
        .fetch(&PluginSpec::new("p", PluginKind::Policy), &source)
        .await
        .unwrap();
    assert_eq!(&fetched.bytes[..], COMPONENT);
}
