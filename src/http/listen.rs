//! The operator's HTTP listeners and their limits: the replica API, `/metrics` and the probes
//! over plain TCP, the admission webhooks over TLS (`webhook::tls`). Every listener has the
//! same bounds ([`HttpLimits`], the `--http-*` flags):
//!
//! - a connection cap: the accept loop takes a slot before it accepts, so connections past the
//!   cap wait in the kernel's backlog and cost this process nothing;
//! - a header read timeout (hyper's, which also closes idle keep-alive connections) and, for
//!   TLS, the same bound on the handshake;
//! - a body read timeout, counted from the request's start (a client sending a byte a second
//!   cannot hold a request open by trickling);
//! - a whole-request timeout until the response, and a cap on requests being handled at once;
//! - at most [`MAX_HEAD_BYTES`] of request line and headers, and [`MAX_HEADERS`] headers.
//!
//! Each request carries its TCP peer as axum's `ConnectInfo<SocketAddr>`. Owns the accept
//! loops, the per-connection HTTP/1 settings and the request-level limits; routes and answers
//! are the callers'.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum_server::accept::{Accept, DefaultAcceptor};
use axum_server::tls_rustls::RustlsAcceptor;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::Service;

/// Most bytes of request line and headers hyper buffers for one request (hyper's default is
/// about 400 KiB); a longer head is refused with 431.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most headers in one request.
pub const MAX_HEADERS: usize = 64;

/// The bounds of every listener (`--http-*` flags; each listener has its own slots).
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct HttpLimits {
    /// Longest a client may take to send a request's headers (and, for the webhooks, the TLS
    /// handshake); an idle keep-alive connection is closed after as long. Every listener.
    #[arg(long = "http-header-timeout", default_value = "10s", value_parser = crate::flags::parse_duration)]
    pub header_timeout: Duration,
    /// Longest a client may take to send a request's body, from the request's start.
    #[arg(long = "http-body-timeout", default_value = "10s", value_parser = crate::flags::parse_duration)]
    pub body_timeout: Duration,
    /// Longest a request may take until its response (503 after that), waiting for a slot
    /// included.
    #[arg(long = "http-request-timeout", default_value = "60s", value_parser = crate::flags::parse_duration)]
    pub request_timeout: Duration,
    /// Open connections per listener; more wait in the kernel's accept queue.
    #[arg(long = "http-max-connections", default_value_t = 256)]
    pub max_connections: usize,
    /// Requests handled at once per listener; more wait for a slot (within the request
    /// timeout).
    #[arg(long = "http-max-in-flight", default_value_t = 64)]
    pub max_in_flight: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            max_connections: 256,
            max_in_flight: 64,
        }
    }
}

/// Serves `router` over plain TCP on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send,
) {
    accept_loop(listener, None, router, limits, shutdown).await
}

/// Serves `router` over TLS on `listener` until `shutdown` resolves.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let acceptor = RustlsAcceptor::new(axum_server::tls_rustls::RustlsConfig::from_config(tls))
        .handshake_timeout(limits.header_timeout);
    accept_loop(listener, Some(acceptor), router, limits, shutdown).await
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<RustlsAcceptor<DefaultAcceptor>>,
    router: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let app = with_request_limits(router, &limits);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // The slot first: past the cap, connections queue in the kernel, not here.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            () = &mut shutdown => return,
        };
        let Ok(slot) = slot else { return };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::debug!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let (app, tls, header_timeout) = (app.clone(), tls.clone(), limits.header_timeout);
        tokio::spawn(async move {
            let _slot = slot;
            match tls {
                None => connection(TokioIo::new(stream), peer, app, header_timeout).await,
                Some(tls) => match tls.accept(stream, ()).await {
                    Ok((stream, _)) => {
                        connection(TokioIo::new(stream), peer, app, header_timeout).await
                    }
                    Err(error) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                },
            }
        });
    }
}

/// One HTTP/1 connection: requests get their peer address, headers must arrive within
/// `header_timeout`.
async fn connection<I>(io: I, peer: SocketAddr, app: Router, header_timeout: Duration)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        // A Router is always ready, so `call` without `poll_ready` is fine.
        let mut app = app.clone();
        app.call(request.map(Body::new))
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    if let Err(error) = builder.serve_connection(io, service).await {
        tracing::debug!(%peer, %error, "connection ended with an error");
    }
}

/// The request-level limits shared by one listener's connections.
struct Gate {
    in_flight: Semaphore,
    request_timeout: Duration,
    body_timeout: Duration,
}

/// `router` with the body deadline, the in-flight cap and the request timeout as its outermost
/// layer (so they cover routing misses, guards and handlers alike).
pub fn with_request_limits(router: Router, limits: &HttpLimits) -> Router {
    let gate = Arc::new(Gate {
        in_flight: Semaphore::new(limits.max_in_flight.max(1)),
        request_timeout: limits.request_timeout,
        body_timeout: limits.body_timeout,
    });
    router.layer(middleware::from_fn_with_state(gate, limit_request))
}

async fn limit_request(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    let deadline = tokio::time::Instant::now() + gate.request_timeout;
    let body_timeout = gate.body_timeout;
    let request = request.map(|body| Body::new(DeadlineBody::new(body, body_timeout)));
    let too_slow = || {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the request was not answered within {:?}; try again",
                gate.request_timeout
            ),
        )
            .into_response()
    };
    let Ok(Ok(_slot)) = tokio::time::timeout_at(deadline, gate.in_flight.acquire()).await else {
        return too_slow();
    };
    match tokio::time::timeout_at(deadline, next.run(request)).await {
        Ok(response) => response,
        Err(_) => too_slow(),
    }
}

/// The request body was not received in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body was not received within {0:?}")]
pub struct BodyTimeout(pub Duration);

/// Whether `error` or one of its causes is a [`BodyTimeout`].
pub fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<BodyTimeout>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// A body that fails with [`BodyTimeout`] once its deadline passes.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl DeadlineBody {
    fn new(inner: Body, limit: Duration) -> DeadlineBody {
        DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(limit)),
            limit,
        }
    }
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(BodyTimeout(this.limit).into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
