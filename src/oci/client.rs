//! A bounded client of the OCI distribution API: manifests and blobs pulled and pushed over
//! HTTP/1.1 with rustls, anonymous, Basic or Bearer-token auth (the registry's
//! `WWW-Authenticate` challenge), redirects followed a bounded number of times.
//!
//! Why not the oras-project crate (`oci-client`): it reads manifests, token answers and error
//! bodies whole with no size cap, and its HTTP client cannot be given one, so a hostile registry
//! could exhaust the operator's memory; it also brings ~130 crates (reqwest, oci-spec, chrono,
//! regex, jsonwebtoken). The protocol subset a plugin needs is small, and every byte read
//! here is counted against a cap and every request against a deadline.
//!
//! Owns: HTTP, auth, redirects and the size and time bounds of each request. Must not touch:
//! what a manifest means (see `super`), caches, Kubernetes.

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sha2::Digest as _;

use super::{Digest, OciError, Reference};

/// Bytes of an error body or token answer kept (an excerpt goes into error messages).
const ERROR_BODY_CAP: usize = 4096;
/// A token answer larger than this is refused (Docker Hub's are ~1–4 KiB).
const TOKEN_CAP: usize = 64 << 10;
/// Longest `WWW-Authenticate` header parsed.
const CHALLENGE_CAP: usize = 4096;
const USER_AGENT: &str = concat!("diorch/", env!("CARGO_PKG_VERSION"));

/// Bounds and transport settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Registries (`host[:port]`) spoken to over plain HTTP; every other one over HTTPS.
    pub insecure_registries: Vec<String>,
    /// CA certificates (PEM) trusted besides the system's.
    pub extra_roots_pem: Vec<u8>,
    /// One request, from sending to its response headers; the body then has the rest of the
    /// operation's deadline.
    pub request_timeout: Duration,
    /// Redirects followed for one request.
    pub max_redirects: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            insecure_registries: vec![],
            extra_roots_pem: vec![],
            request_timeout: Duration::from_secs(30),
            max_redirects: 5,
        }
    }
}

/// Registry credentials (from a `kubernetes.io/dockerconfigjson` Secret or a Docker config).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password, not even in debug logs.
        write!(f, "Credentials({:?}, <redacted>)", self.username)
    }
}

/// What a request should do when the registry asks for auth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Pull,
    Push,
}

/// Talking to one repository of one registry: the auth state is per session.
pub struct Session<'a> {
    client: &'a RegistryClient,
    registry: String,
    repository: String,
    base: String,
    credentials: Option<Credentials>,
    access: Access,
    /// `Authorization` value that worked (or was issued) for this repository.
    authorization: Option<HeaderValue>,
    deadline: tokio::time::Instant,
}

type Http = HyperClient<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

#[derive(Clone)]
pub struct RegistryClient {
    http: Http,
    options: Options,
}

/// A response whose body has not been read yet.
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: hyper::body::Incoming,
}

impl RegistryClient {
    pub fn new(options: Options) -> Result<RegistryClient, OciError> {
        let mut roots = rustls::RootCertStore::empty();
        // A missing or partly unreadable system store is not fatal: a private registry may be
        // trusted through `extra_roots_pem` alone.
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        if !options.extra_roots_pem.is_empty() {
            use rustls::pki_types::pem::PemObject as _;
            let mut added = 0;
            for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&options.extra_roots_pem)
            {
                let cert =
                    cert.map_err(|e| OciError::Config(format!("registry CA certificates: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| OciError::Config(format!("registry CA certificate: {e}")))?;
                added += 1;
            }
            if added == 0 {
                return Err(OciError::Config(
                    "the registry CA file holds no PEM certificate".into(),
                ));
            }
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| OciError::Config(format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut connector = HttpConnector::new();
        connector.enforce_http(false);
        connector.set_connect_timeout(Some(options.request_timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let http = HyperClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(2)
            .build(https);
        Ok(RegistryClient { http, options })
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    fn scheme_for(&self, registry: &str) -> &'static str {
        if self
            .options
            .insecure_registries
            .iter()
            .any(|r| r == registry)
        {
            "http"
        } else {
            "https"
        }
    }

    /// A session on `reference`'s repository that must finish by `deadline`.
    pub fn session(
        &self,
        reference: &Reference,
        credentials: Option<Credentials>,
        access: Access,
        deadline: tokio::time::Instant,
    ) -> Session<'_> {
        let host = reference.api_host().to_string();
        Session {
            client: self,
            base: format!("{}://{host}", self.scheme_for(&reference.registry)),
            registry: reference.registry.clone(),
            repository: reference.repository.clone(),
            credentials,
            access,
            authorization: None,
            deadline,
        }
    }

    /// Sends one request, bounded by the request timeout and `deadline`.
    async fn send_once(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &Bytes,
        deadline: tokio::time::Instant,
    ) -> Result<Response, OciError> {
        let mut request = Request::builder().method(method.clone()).uri(uri.clone());
        if let Some(h) = request.headers_mut() {
            h.extend(headers.iter().map(|(k, v)| (k.clone(), v.clone())));
            h.insert(header::USER_AGENT, HeaderValue::from_static(USER_AGENT));
        }
        let request = request
            .body(Full::new(body.clone()))
            .map_err(|e| OciError::Protocol(format!("cannot build a request to {uri}: {e}")))?;
        let timeout = self.options.request_timeout;
        let until = deadline.min(tokio::time::Instant::now() + timeout);
        let response = tokio::time::timeout_at(until, self.http.request(request))
            .await
            .map_err(|_| {
                OciError::Timeout(format!("{method} {} did not answer in time", redact(uri)))
            })?
            .map_err(|e| {
                OciError::Network(format!("{method} {}: {}", redact(uri), error_chain(&e)))
            })?;
        let (parts, body) = response.into_parts();
        Ok(Response {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// The URI without its query (upload locations and token URLs may carry secrets there).
fn redact(uri: &Uri) -> String {
    format!(
        "{}://{}{}",
        uri.scheme_str().unwrap_or("?"),
        uri.authority().map_or("?", |a| a.as_str()),
        uri.path()
    )
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Percent-encodes a query value (RFC 3986 unreserved characters kept).
fn encode_query(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A parsed `WWW-Authenticate` challenge: its scheme and parameters.
#[derive(Debug, PartialEq, Eq)]
struct Challenge {
    scheme: String,
    params: Vec<(String, String)>,
}

impl Challenge {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Parses `Bearer realm="…",service="…",scope="…"` (quoted or token values, commas inside
/// quotes kept). Only the first challenge is read.
fn parse_challenge(header: &str) -> Option<Challenge> {
    if header.len() > CHALLENGE_CAP {
        return None;
    }
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    let mut params = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let key = key.trim().to_string();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.peek().copied() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
            value = value.trim().to_string();
        }
        params.push((key, value));
        if params.len() > 16 {
            break;
        }
    }
    Some(Challenge {
        scheme: scheme.to_string(),
        params,
    })
}

fn basic(credentials: &Credentials) -> Result<HeaderValue, OciError> {
    use base64::Engine as _;
    let token = base64::engine::general_purpose::STANDARD
        .encode(format!("{}:{}", credentials.username, credentials.password));
    HeaderValue::from_str(&format!("Basic {token}"))
        .map_err(|_| OciError::Config("registry credentials are not valid header text".into()))
}

impl Session<'_> {
    pub fn repository(&self) -> &str {
        &self.repository
    }

    pub fn registry(&self) -> &str {
        &self.registry
    }

    pub fn deadline(&self) -> tokio::time::Instant {
        self.deadline
    }

    /// `path` under `/v2/<repository>/`, as a URI of this registry.
    pub fn url(&self, path: &str) -> Result<Uri, OciError> {
        format!("{}/v2/{}/{path}", self.base, self.repository)
            .parse()
            .map_err(|e| OciError::Protocol(format!("bad URL for {path}: {e}")))
    }

    /// Resolves a `Location` header against `base` (absolute, or a path on the same server).
    pub fn resolve(&self, base: &Uri, location: &str) -> Result<Uri, OciError> {
        let bad = |e: String| OciError::Protocol(format!("bad Location {location:.200?}: {e}"));
        if location.len() > 8192 {
            return Err(bad("too long".into()));
        }
        let uri: Uri = if location.starts_with('/') {
            format!(
                "{}://{}{location}",
                base.scheme_str().unwrap_or("https"),
                base.authority().map_or("", |a| a.as_str())
            )
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(e.to_string()))?
        } else {
            location
                .parse()
                .map_err(|e: http::uri::InvalidUri| bad(e.to_string()))?
        };
        match uri.scheme_str() {
            Some("https") => Ok(uri),
            // Never from HTTPS down to plain HTTP: only a registry configured insecure may
            // send us to plain HTTP.
            Some("http") if base.scheme_str() == Some("http") => Ok(uri),
            other => Err(bad(format!("scheme {other:?} not allowed here"))),
        }
    }

    /// Sends a request, answering an auth challenge once and following redirects (the
    /// `Authorization` header is sent only to the registry's own host).
    pub async fn send(
        &mut self,
        method: Method,
        uri: Uri,
        mut headers: HeaderMap,
        body: Bytes,
    ) -> Result<Response, OciError> {
        let origin = uri.authority().cloned();
        let mut uri = uri;
        let mut challenged = false;
        let mut hops = 0;
        loop {
            let same_host = uri.authority() == origin.as_ref();
            match (&self.authorization, same_host) {
                (Some(a), true) => {
                    headers.insert(header::AUTHORIZATION, a.clone());
                }
                _ => {
                    headers.remove(header::AUTHORIZATION);
                }
            }
            let response = self
                .client
                .send_once(&method, &uri, &headers, &body, self.deadline)
                .await?;
            match response.status {
                StatusCode::UNAUTHORIZED if same_host && !challenged => {
                    challenged = true;
                    let challenge = response
                        .headers
                        .get(header::WWW_AUTHENTICATE)
                        .and_then(|v| v.to_str().ok())
                        .and_then(parse_challenge);
                    self.authorize(challenge).await?;
                }
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                    let excerpt = response.excerpt(self.deadline).await;
                    return Err(OciError::Unauthorized(format!(
                        "{} {method} {}: {}{excerpt}",
                        self.registry,
                        redact(&uri),
                        if self.credentials.is_some() {
                            "the credentials were refused"
                        } else {
                            "the registry needs credentials (name a pull Secret)"
                        }
                    )));
                }
                s if s.is_redirection() && s != StatusCode::NOT_MODIFIED => {
                    hops += 1;
                    if hops > self.client.options.max_redirects {
                        return Err(OciError::Protocol(format!(
                            "{method} {}: more than {} redirects",
                            redact(&uri),
                            self.client.options.max_redirects
                        )));
                    }
                    let location = response
                        .headers
                        .get(header::LOCATION)
                        .and_then(|v| v.to_str().ok())
                        .ok_or_else(|| {
                            OciError::Protocol(format!("{s} without a Location header"))
                        })?
                        .to_string();
                    uri = self.resolve(&uri, &location)?;
                }
                _ => return Ok(response),
            }
        }
    }

    /// Answers a challenge: Basic with the credentials, or a Bearer token from the realm.
    async fn authorize(&mut self, challenge: Option<Challenge>) -> Result<(), OciError> {
        let Some(challenge) = challenge else {
            return Err(OciError::Unauthorized(format!(
                "{}: 401 without a WWW-Authenticate challenge",
                self.registry
            )));
        };
        if challenge.scheme.eq_ignore_ascii_case("basic") {
            let credentials = self.credentials.as_ref().ok_or_else(|| {
                OciError::Unauthorized(format!(
                    "{} needs credentials (name a pull Secret)",
                    self.registry
                ))
            })?;
            self.authorization = Some(basic(credentials)?);
            return Ok(());
        }
        if !challenge.scheme.eq_ignore_ascii_case("bearer") {
            return Err(OciError::Unauthorized(format!(
                "{}: unsupported auth scheme {:.40?}",
                self.registry, challenge.scheme
            )));
        }
        let realm = challenge
            .param("realm")
            .ok_or_else(|| OciError::Protocol("Bearer challenge without a realm".into()))?;
        let actions = match self.access {
            Access::Pull => "pull",
            Access::Push => "pull,push",
        };
        let scope = format!("repository:{}:{actions}", self.repository);
        let mut url = format!("{realm}?scope={}", encode_query(&scope));
        if let Some(service) = challenge.param("service") {
            url.push_str(&format!("&service={}", encode_query(service)));
        }
        let uri: Uri = url
            .parse()
            .map_err(|e| OciError::Protocol(format!("bad token realm {realm:.200?}: {e}")))?;
        let registry_uri: Uri = self
            .base
            .parse()
            .map_err(|e| OciError::Protocol(format!("bad registry URL {}: {e}", self.base)))?;
        // The realm is where the credentials go: HTTPS unless the registry itself is plain.
        match uri.scheme_str() {
            Some("https") => {}
            Some("http") if registry_uri.scheme_str() == Some("http") => {}
            _ => {
                return Err(OciError::Protocol(format!(
                    "token realm {} is not HTTPS",
                    redact(&uri)
                )));
            }
        }
        let mut headers = HeaderMap::new();
        if let Some(c) = &self.credentials {
            headers.insert(header::AUTHORIZATION, basic(c)?);
        }
        let response = self
            .client
            .send_once(&Method::GET, &uri, &headers, &Bytes::new(), self.deadline)
            .await?;
        if !response.status.is_success() {
            let status = response.status;
            let excerpt = response.excerpt(self.deadline).await;
            return Err(OciError::Unauthorized(format!(
                "token service {} answered {status}{excerpt}",
                redact(&uri)
            )));
        }
        let body = response.read_capped(TOKEN_CAP, self.deadline).await?;
        #[derive(serde::Deserialize)]
        struct TokenAnswer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let answer: TokenAnswer = serde_json::from_slice(&body)
            .map_err(|e| OciError::Protocol(format!("token answer is not JSON: {e}")))?;
        let token = answer
            .token
            .or(answer.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| OciError::Protocol("token answer holds no token".into()))?;
        self.authorization = Some(
            HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| OciError::Protocol("the token is not valid header text".into()))?,
        );
        Ok(())
    }
}

impl Response {
    /// Reads the whole body, failing once it passes `cap` bytes or `deadline`.
    pub async fn read_capped(
        self,
        cap: usize,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<u8>, OciError> {
        let mut out = Vec::new();
        self.read_into(cap, deadline, |chunk| {
            out.extend_from_slice(chunk);
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// Streams the body into `sink`, at most `cap` bytes, by `deadline`.
    pub async fn read_into(
        self,
        cap: usize,
        deadline: tokio::time::Instant,
        mut sink: impl FnMut(&[u8]) -> Result<(), OciError>,
    ) -> Result<usize, OciError> {
        if let Some(len) = self
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            && len > cap as u64
        {
            return Err(OciError::TooLarge(format!(
                "the registry announces {len} bytes; at most {cap} are accepted"
            )));
        }
        let mut body = self.body;
        let mut read = 0usize;
        loop {
            let frame = tokio::time::timeout_at(deadline, body.frame())
                .await
                .map_err(|_| {
                    OciError::Timeout("the registry's answer did not end in time".into())
                })?;
            let Some(frame) = frame else {
                return Ok(read);
            };
            let frame = frame.map_err(|e| {
                OciError::Network(format!("reading the answer: {}", error_chain(&e)))
            })?;
            if let Ok(data) = frame.into_data() {
                read = read.saturating_add(data.len());
                if read > cap {
                    return Err(OciError::TooLarge(format!(
                        "the registry sent more than {cap} bytes"
                    )));
                }
                sink(&data)?;
            }
        }
    }

    /// `": <start of the body>"` for an error message (bounded, one line), or nothing.
    pub async fn excerpt(self, deadline: tokio::time::Instant) -> String {
        let deadline = deadline.min(tokio::time::Instant::now() + Duration::from_secs(2));
        let mut kept = Vec::new();
        let _ = self
            .read_into(usize::MAX, deadline, |chunk| {
                let room = ERROR_BODY_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if room == 0 {
                    // Enough for a message: stop reading.
                    return Err(OciError::TooLarge(String::new()));
                }
                Ok(())
            })
            .await;
        let text = String::from_utf8_lossy(&kept);
        let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if line.is_empty() {
            String::new()
        } else {
            format!(": {}", line.chars().take(300).collect::<String>())
        }
    }
}

/// Reads a blob's body into memory, checking its size and digest as it streams.
pub async fn read_verified(
    response: Response,
    expected: Digest,
    size: u64,
    deadline: tokio::time::Instant,
) -> Result<Vec<u8>, OciError> {
    let cap = usize::try_from(size).unwrap_or(usize::MAX);
    let mut hasher = sha2::Sha256::new();
    let mut out = Vec::with_capacity(cap.min(64 << 20));
    let read = response
        .read_into(cap, deadline, |chunk| {
            hasher.update(chunk);
            out.extend_from_slice(chunk);
            Ok(())
        })
        .await
        .map_err(|e| match e {
            OciError::TooLarge(_) => OciError::TooLarge(format!(
                "blob {expected} is larger than the {size} bytes its manifest says"
            )),
            e => e,
        })?;
    if read as u64 != size {
        return Err(OciError::DigestMismatch(format!(
            "blob {expected}: {read} bytes received, its manifest says {size}"
        )));
    }
    let got = Digest(hasher.finalize().into());
    if got != expected {
        return Err(OciError::DigestMismatch(format!(
            "blob {expected} has digest {got}: tampered or corrupted"
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "Bearer");
        assert_eq!(c.param("realm"), Some("https://auth.example/token"));
        assert_eq!(c.param("service"), Some("registry.example"));
        assert_eq!(c.param("scope"), Some("repository:a/b:pull,push"));
        let c = parse_challenge(r#"Basic realm=Registry"#).unwrap();
        assert_eq!(
            (c.scheme.as_str(), c.param("realm")),
            ("Basic", Some("Registry"))
        );
        let c = parse_challenge(r#"Bearer realm="a\"b""#).unwrap();
        assert_eq!(c.param("realm"), Some("a\"b"));
        assert!(parse_challenge(&"x".repeat(CHALLENGE_CAP + 1)).is_none());
        let many = format!("Bearer {}", "a=b,".repeat(1000));
        assert!(parse_challenge(&many).unwrap().params.len() <= 17);
    }

    #[test]
    fn query_encoding() {
        assert_eq!(
            encode_query("repository:a/b:pull,push"),
            "repository%3Aa%2Fb%3Apull%2Cpush"
        );
    }

    #[test]
    fn credentials_never_print_the_password() {
        let c = Credentials {
            username: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
