//! Serving the admission webhooks over TLS (rustls, ring). The serving certificate is read from
//! `tls.crt` and `tls.key` in a directory and read again whenever those files change, so a
//! rotated certificate (cert-manager, `diorch webhook-cert`, the kubelet refreshing a mounted
//! Secret) is used by the next handshake without a restart.
//!
//! The listener has the limits of every operator listener (`http::listen`: connection cap,
//! handshake and header timeouts, body and request timeouts, in-flight cap) and speaks
//! HTTP/1.1 only, so ALPN offers only `http/1.1`.
//!
//! Owns the certificate files' reading and the listener's TLS set-up; the answers are
//! `webhook`'s. Touches nothing in the cluster.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use axum::Router;
use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tracing::{info, warn};

use crate::http::listen::HttpLimits;
use crate::metrics::Metrics;

/// Why a certificate could not be loaded or the listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} is not a PEM certificate chain: {reason}")]
    BadCertificate { path: PathBuf, reason: String },
    #[error("{path} is not a PEM private key (PKCS#8, PKCS#1 or SEC1): {reason}")]
    BadKey { path: PathBuf, reason: String },
    #[error("the key in {key} does not match the certificate in {cert}")]
    Mismatch { cert: PathBuf, key: PathBuf },
    #[error("cannot configure TLS: {0}")]
    Config(String),
    #[error("cannot serve the webhooks: {0}")]
    Serve(#[source] std::io::Error),
}

/// Where the PEM certificate chain and private key are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    /// `tls.crt` and `tls.key` in `dir`.
    pub fn in_dir(dir: &Path) -> CertFiles {
        CertFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }
    }
}

/// The serving certificate, swapped in whole when its files change.
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: ArcSwapOption<CertifiedKey>,
    /// The bytes last loaded (or last refused), so unchanged files are not parsed again and a
    /// broken file is reported once.
    seen: Mutex<Option<(Vec<u8>, Vec<u8>)>>,
}

impl std::fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert", &self.cert_path)
            .field("loaded", &self.current.load().is_some())
            .finish()
    }
}

/// What a reload found.
#[derive(Debug, PartialEq, Eq)]
pub enum Reload {
    /// A new certificate is in use.
    Loaded,
    /// The files did not change.
    Unchanged,
}

impl ReloadingCert {
    /// Certificates from `dir/tls.crt` and `dir/tls.key` (the layout of a `kubernetes.io/tls`
    /// Secret mounted as a volume). Nothing is read yet.
    pub fn new(dir: &Path) -> Arc<ReloadingCert> {
        ReloadingCert::from_files(CertFiles::in_dir(dir))
    }

    /// Certificates from the given files. Nothing is read yet.
    pub fn from_files(files: CertFiles) -> Arc<ReloadingCert> {
        Arc::new(ReloadingCert {
            cert_path: files.cert,
            key_path: files.key,
            current: ArcSwapOption::empty(),
            seen: Mutex::new(None),
        })
    }

    /// Whether a certificate is being served.
    pub fn is_loaded(&self) -> bool {
        self.current.load().is_some()
    }

    /// Reads the files again; a broken pair keeps the certificate in use.
    pub fn reload(&self) -> Result<Reload, TlsError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| TlsError::Read {
                path: path.to_path_buf(),
                source,
            })
        };
        let (cert, key) = (read(&self.cert_path)?, read(&self.key_path)?);
        {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if seen.as_ref().is_some_and(|(c, k)| *c == cert && *k == key) {
                return Ok(Reload::Unchanged);
            }
            *seen = Some((cert.clone(), key.clone()));
        }
        let certified = self.parse(&cert, &key)?;
        self.current.store(Some(Arc::new(certified)));
        Ok(Reload::Loaded)
    }

    fn parse(&self, cert: &[u8], key: &[u8]) -> Result<CertifiedKey, TlsError> {
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::BadCertificate {
                path: self.cert_path.clone(),
                reason: e.to_string(),
            })?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate {
                path: self.cert_path.clone(),
            });
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| TlsError::BadKey {
            path: self.key_path.clone(),
            reason: e.to_string(),
        })?;
        let signing = any_supported_type(&key).map_err(|e| TlsError::BadKey {
            path: self.key_path.clone(),
            reason: e.to_string(),
        })?;
        let certified = CertifiedKey::new(chain, signing);
        certified.keys_match().map_err(|_| TlsError::Mismatch {
            cert: self.cert_path.clone(),
            key: self.key_path.clone(),
        })?;
        Ok(certified)
    }

    /// One reload, logged (errors only when they differ from `last_error`).
    fn check(&self, metrics: Option<&Metrics>, last_error: &mut String) {
        {
            match self.reload() {
                Ok(Reload::Loaded) => {
                    info!(certificate = %self.cert_path.display(), "webhook serving certificate loaded");
                    if let Some(m) = metrics {
                        m.admission.certificate_loads.inc();
                    }
                    last_error.clear();
                }
                Ok(Reload::Unchanged) => {}
                Err(error) => {
                    let text = error.to_string();
                    if text != *last_error {
                        if self.is_loaded() {
                            warn!(%error, "cannot load the new webhook certificate; still serving the previous one");
                        } else {
                            warn!(%error, "no webhook serving certificate yet; TLS handshakes fail until one is readable");
                        }
                        *last_error = text;
                    }
                }
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.load_full()
    }
}

/// The rustls server configuration over `cert`: TLS 1.2 and 1.3, HTTP/1.1 (the listener serves
/// nothing else; the API server falls back to HTTP/1.1).
pub fn server_config(cert: Arc<ReloadingCert>) -> Result<rustls::ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Serves `router` over TLS on `listener` until `shutdown` resolves, with the certificate
/// `files` re-read every `reload_period`, within `limits`.
pub async fn serve(
    listener: std::net::TcpListener,
    files: CertFiles,
    reload_period: Duration,
    router: Router,
    limits: HttpLimits,
    metrics: Option<Arc<Metrics>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), TlsError> {
    let cert = ReloadingCert::from_files(files);
    // Loaded before the first connection is accepted; then re-read every period.
    let mut last_error = String::new();
    cert.check(metrics.as_deref(), &mut last_error);
    let watcher = tokio::spawn({
        let cert = cert.clone();
        async move {
            let mut last_error = last_error;
            loop {
                tokio::time::sleep(reload_period).await;
                cert.check(metrics.as_deref(), &mut last_error);
            }
        }
    });
    let config = Arc::new(server_config(cert)?);
    listener.set_nonblocking(true).map_err(TlsError::Serve)?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(TlsError::Serve)?;
    crate::http::listen::serve_tls(listener, config, router, limits, shutdown).await;
    watcher.abort();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::cert::{Bundle, generate};
    use http_body_util::{BodyExt, Full};

    fn write(dir: &Path, bundle: &Bundle) {
        std::fs::write(dir.join("tls.crt"), &bundle.cert).expect("cert");
        std::fs::write(dir.join("tls.key"), &bundle.key).expect("key");
    }

    /// POSTs a review trusting only `ca`; the answer's `allowed`, or the connection error.
    async fn validate(port: u16, ca: &str) -> Result<bool, String> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.as_bytes()).expect("ca"))
            .expect("root");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_only()
            .enable_http1()
            .build();
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build::<_, Full<bytes::Bytes>>(https);
        let review = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "CREATE", "name": "j", "namespace": "d",
                "kind": {"group": "diengine.opendilab.org", "version": "v2alpha1", "kind": "DIJob"},
                "resource": {"group": "diengine.opendilab.org", "version": "v2alpha1", "resource": "dijobs"},
                "userInfo": {}, "dryRun": true,
                "object": {"apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob",
                    "metadata": {"name": "j", "namespace": "d"},
                    "spec": {"tasks": [{"type": "learner", "name": "learner", "template": {}}]}}}
        });
        let request = http::Request::post(format!(
            "https://127.0.0.1:{port}{}",
            crate::webhook::VALIDATE_PATH
        ))
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(review.to_string())))
        .expect("request");
        let response = client
            .request(request)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let answer: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        assert_eq!(answer["response"]["uid"], "u");
        Ok(answer["response"]["allowed"] == true)
    }

    /// Real time: the rotation is seen over real TLS connections after real file writes; a
    /// paused clock would run the reload and the handshake timeout ahead of the sockets.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tls_round_trip_then_a_rotated_certificate_without_restart() {
        let dir = tempfile::tempdir().expect("dir");
        let names = vec!["127.0.0.1".to_string()];
        let first = generate(&names, 10).expect("first");
        write(dir.path(), &first);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let path = dir.path().to_path_buf();
        tokio::spawn(async move {
            serve(
                listener,
                CertFiles::in_dir(&path),
                Duration::from_millis(50),
                crate::webhook::router(None),
                HttpLimits::default(),
                None,
                std::future::pending(),
            )
            .await
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match validate(port, &first.ca).await {
                Ok(allowed) => {
                    assert!(allowed);
                    break;
                }
                Err(e) => assert!(std::time::Instant::now() < deadline, "{e}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let second = generate(&names, 10).expect("second");
        assert!(
            validate(port, &second.ca).await.is_err(),
            "the new CA cannot vouch for the old certificate"
        );
        write(dir.path(), &second);
        loop {
            if let Ok(allowed) = validate(port, &second.ca).await {
                assert!(allowed);
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never rotated");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            validate(port, &first.ca).await.is_err(),
            "old certificate still served"
        );
    }

    /// A client that opens a TCP connection and never completes the TLS handshake is cut off
    /// after the header timeout. Real time, for the same reason: a real TCP client.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_tls_handshake_is_cut_off() {
        use tokio::io::AsyncReadExt;
        let dir = tempfile::tempdir().expect("dir");
        write(
            dir.path(),
            &generate(&["127.0.0.1".to_string()], 10).expect("cert"),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let path = dir.path().to_path_buf();
        let limit = Duration::from_millis(500);
        let limits = HttpLimits {
            header_timeout: limit,
            ..HttpLimits::default()
        };
        tokio::spawn(async move {
            serve(
                listener,
                CertFiles::in_dir(&path),
                Duration::from_secs(60),
                crate::webhook::router(None),
                limits,
                None,
                std::future::pending(),
            )
            .await
        });
        let mut stream = loop {
            if let Ok(s) = tokio::net::TcpStream::connect(addr).await {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // Half a ClientHello, then silence.
        use tokio::io::AsyncWriteExt;
        stream
            .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00])
            .await
            .expect("write");
        let started = std::time::Instant::now();
        let mut buf = [0u8; 64];
        let closed = tokio::time::timeout(limit + Duration::from_secs(3), async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "still open after {:?}", started.elapsed());
    }

    #[test]
    fn a_broken_or_mismatched_pair_keeps_the_certificate_in_use() {
        let dir = tempfile::tempdir().expect("dir");
        let cert = ReloadingCert::new(dir.path());
        assert!(matches!(cert.reload(), Err(TlsError::Read { .. })));
        assert!(!cert.is_loaded());
        let names = vec!["127.0.0.1".to_string()];
        let (a, b) = (
            generate(&names, 10).expect("a"),
            generate(&names, 10).expect("b"),
        );
        write(dir.path(), &a);
        assert_eq!(cert.reload().expect("load"), Reload::Loaded);
        assert_eq!(cert.reload().expect("same"), Reload::Unchanged);
        let in_use = cert.current.load_full().expect("loaded");
        std::fs::write(dir.path().join("tls.key"), &b.key).expect("key");
        assert!(matches!(cert.reload(), Err(TlsError::Mismatch { .. })));
        std::fs::write(dir.path().join("tls.crt"), "not a certificate").expect("cert");
        assert!(cert.reload().is_err());
        let still = cert.current.load_full().expect("still loaded");
        assert!(Arc::ptr_eq(&in_use, &still));
    }
}
