//! The listener limits against hostile clients: slow headers, idle connections, slow bodies,
//! oversized heads, more connections than the cap, hanging handlers. Bounds are the configured
//! limit plus slack, and each hostile client would otherwise hold on far longer than the bound.
//!
//! The timeouts are tested on virtual time (`start_paused`) over an in-memory connection
//! (`tokio::io::duplex`) served as the accept loop serves a TCP one (`served`), so a slow CI
//! changes nothing. The connection cap and the oversized heads need the accept loop and real
//! TCP, so those run in real time (with generous slack: CI shares its cores with a CPU hog): a
//! paused clock would jump ahead whenever the runtime waits for the kernel to deliver bytes.

use std::time::Instant;

use axum::extract::rejection::BytesRejection;
use axum::routing::{get, post};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::TcpStream;

use super::*;

/// Slack on top of a configured limit before a test calls it broken.
const SLACK: Duration = Duration::from_secs(3);

fn app() -> Router {
    Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route(
            "/echo",
            post(|body: Result<Bytes, BytesRejection>| async move {
                match body {
                    Ok(b) => (StatusCode::OK, b.len().to_string()),
                    Err(r) if is_body_timeout(&r) => (StatusCode::REQUEST_TIMEOUT, r.body_text()),
                    Err(r) => (r.status(), r.body_text()),
                }
            }),
        )
        .route("/hang", get(std::future::pending::<&'static str>))
        .route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
        )
}

fn limits(header: u64, body: u64, request: u64, connections: usize) -> HttpLimits {
    HttpLimits {
        header_timeout: Duration::from_millis(header),
        body_timeout: Duration::from_millis(body),
        request_timeout: Duration::from_millis(request),
        max_connections: connections,
        max_in_flight: 64,
    }
}

async fn start(limits: HttpLimits) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve(listener, app(), limits, std::future::pending()));
    addr
}

/// A client's end of an in-memory connection served as the accept loop serves a TCP one
/// (the request limits around the app, hyper's header timeout), for tests on virtual time.
fn served(limits: HttpLimits) -> DuplexStream {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let app = with_request_limits(app(), &limits);
    let peer = SocketAddr::from(([127, 0, 0, 1], 40000));
    tokio::spawn(connection(
        TokioIo::new(server),
        peer,
        app,
        limits.header_timeout,
    ));
    client
}

/// Reads until the server closes the connection (or `limit` passes): what it sent, and when.
async fn read_to_close(
    stream: &mut (impl AsyncRead + Unpin),
    limit: Duration,
) -> (String, Option<Duration>) {
    // tokio's clock: the machine's, or the paused one in the virtual-time tests.
    let started = tokio::time::Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(started + limit, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return (
                    String::from_utf8_lossy(&got).into(),
                    Some(started.elapsed()),
                );
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&got).into(), None),
        }
    }
}

/// Sends `head` and then `trickle` one byte every 100 ms (for far longer than any limit here),
/// ignoring write errors once the server has closed.
fn trickle(mut writer: impl AsyncWrite + Unpin + Send + 'static, head: String, trickle: usize) {
    tokio::spawn(async move {
        if writer.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        for _ in 0..trickle {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if writer.write_all(b"a").await.is_err() {
                return;
            }
        }
    });
}

#[tokio::test(start_paused = true)]
async fn a_client_sending_headers_a_byte_at_a_time_is_cut_off() {
    let limit = Duration::from_millis(500);
    let (mut reader, writer) = tokio::io::split(served(limits(500, 10_000, 60_000, 16)));
    // 200 bytes at 10 per second would take 20 s.
    trickle(
        writer,
        "GET /ok HTTP/1.1\r\nHost: x\r\nX-Slow: ".into(),
        200,
    );
    let started = tokio::time::Instant::now();
    let mut buf = [0u8; 1024];
    let mut got = Vec::new();
    loop {
        match tokio::time::timeout(limit + SLACK, reader.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("still open after {:?}", started.elapsed()),
        }
    }
    assert!(started.elapsed() < limit + SLACK);
    assert!(
        !String::from_utf8_lossy(&got).contains("200 OK"),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_closed_after_the_header_timeout() {
    let limit = Duration::from_millis(500);
    let limits = limits(500, 10_000, 60_000, 16);
    // Silent from the start, and idle after one request on a kept-alive connection.
    let mut silent = served(limits.clone());
    let (_, closed) = read_to_close(&mut silent, limit + SLACK).await;
    assert!(closed.is_some(), "a silent connection stayed open");
    let mut kept = served(limits);
    kept.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let (got, closed) = read_to_close(&mut kept, limit + SLACK + limit).await;
    assert!(got.starts_with("HTTP/1.1 200 OK"), "{got}");
    assert!(
        closed.is_some(),
        "an idle keep-alive connection stayed open"
    );
}

#[tokio::test(start_paused = true)]
async fn a_body_sent_a_byte_at_a_time_is_cut_off_with_408() {
    let limit = Duration::from_millis(500);
    let (mut reader, writer) = tokio::io::split(served(limits(10_000, 500, 60_000, 16)));
    trickle(
        writer,
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n".into(),
        1000,
    );
    let started = tokio::time::Instant::now();
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(limit + SLACK, reader.read(&mut buf))
        .await
        .expect("answered in time")
        .expect("read");
    let got = String::from_utf8_lossy(&buf[..n]);
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("not received within 500ms"), "{got}");
    assert!(started.elapsed() < limit + SLACK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_head_is_refused() {
    let addr = start(limits(10_000, 10_000, 60_000, 16)).await;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "GET /ok HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(MAX_HEAD_BYTES * 2)
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let (got, closed) = read_to_close(&mut stream, SLACK).await;
    assert!(closed.is_some());
    assert!(!got.contains("200 OK"), "{got}");
    // Too many headers, each small.
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let many: String = (0..MAX_HEADERS + 10)
        .map(|i| format!("X-{i}: v\r\n"))
        .collect();
    let _ = stream
        .write_all(format!("GET /ok HTTP/1.1\r\nHost: x\r\n{many}\r\n").as_bytes())
        .await;
    let (got, _) = read_to_close(&mut stream, SLACK).await;
    assert!(!got.contains("200 OK"), "{got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_wait_until_one_closes() {
    let addr = start(limits(30_000, 10_000, 60_000, 2)).await;
    let request = b"GET /peer HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut held = vec![];
    for _ in 0..2 {
        let mut c = TcpStream::connect(addr).await.expect("connect");
        c.write_all(request).await.expect("write");
        let mut buf = [0u8; 1024];
        let n = c.read(&mut buf).await.expect("read");
        let got = String::from_utf8_lossy(&buf[..n]);
        // The peer address reaches the handlers.
        let local = c.local_addr().expect("local").to_string();
        assert!(got.contains(&local), "{got}");
        held.push(c);
    }
    // More connections than the cap: the kernel queues them; nothing answers them.
    let mut waiting = vec![];
    for _ in 0..50 {
        let mut c = TcpStream::connect(addr).await.expect("connect queues");
        c.write_all(request).await.expect("write");
        waiting.push(c);
    }
    let mut buf = [0u8; 1024];
    let early = tokio::time::timeout(Duration::from_millis(500), waiting[0].read(&mut buf)).await;
    assert!(early.is_err(), "a connection past the cap was served");
    // Closing one held connection lets one waiting connection in.
    drop(held.pop());
    let mut answered = 0;
    for c in &mut waiting {
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(100), c.read(&mut buf)).await
            && n > 0
        {
            answered += 1;
        }
    }
    let deadline = Instant::now() + SLACK;
    while answered == 0 && Instant::now() < deadline {
        for c in &mut waiting {
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(50), c.read(&mut buf)).await
                && n > 0
            {
                answered += 1;
            }
        }
    }
    assert_eq!(answered, 1, "one slot freed, one connection served");
}

/// Virtual time: no socket here (the router is called in process), so the request timeout and
/// the wait for the in-flight slot run on the paused clock.
#[tokio::test(start_paused = true)]
async fn a_hanging_handler_is_cut_off_and_in_flight_requests_are_capped() {
    let limits = HttpLimits {
        max_in_flight: 1,
        request_timeout: Duration::from_millis(800),
        ..HttpLimits::default()
    };
    let app = with_request_limits(app(), &limits);
    let get = |path: &str| {
        axum::http::Request::get(path)
            .body(Body::empty())
            .expect("request")
    };
    let started = tokio::time::Instant::now();
    let hang = tokio::spawn({
        let app = app.clone();
        let request = get("/hang");
        async move { tower::ServiceExt::oneshot(app, request).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ok = tower::ServiceExt::oneshot(app, get("/ok"))
        .await
        .expect("answer");
    // The only slot was held by the hanging request until its timeout.
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(
            ok.status(),
            StatusCode::OK | StatusCode::SERVICE_UNAVAILABLE
        ),
        "{}",
        ok.status()
    );
    let hang = hang.await.expect("task").expect("answer");
    assert_eq!(hang.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() < limits.request_timeout + SLACK);
}
