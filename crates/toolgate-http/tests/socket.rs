//! Over a real socket: graceful shutdown lets a decision in progress finish
//! (its claim completed, its response delivered) before `serve` returns,
//! and an oversized body does not take the server down.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use support::*;
use toolgate_http::{AppState, Settings};

/// Writes `request` on a new connection and reads until the server closes
/// it: the whole answer as text.
fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn raw_post(addr: SocketAddr, key: &str, body: &str) -> String {
    let request = format!(
        "POST /v1/decisions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    exchange(addr, request.as_bytes())
}

/// The test app served on a loopback port, with `grace` to finish the
/// decisions in progress at shutdown.
fn serve(state: AppState, grace: Duration) -> (tokio::runtime::Runtime, Running) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let running = support::start(&runtime, state, grace);
    (runtime, running)
}

/// Asks the server to stop and waits until `serve` has returned.
fn stop(runtime: &tokio::runtime::Runtime, running: Running) {
    running.stop.send(()).unwrap();
    runtime.block_on(running.server).unwrap().unwrap();
}

#[test]
fn shutdown_waits_for_the_decision_in_progress() {
    let (state, desk) = app();
    let (
        runtime,
        Running {
            addr,
            stop: stop_tx,
            server,
        },
    ) = serve(state, Duration::from_secs(30));
    // Block the executor: the decision will sit between claim and
    // completion until the test lets go.
    let held = desk.0.credits.lock().unwrap();
    let body = credit_on_t1(900).to_string();
    let client = std::thread::spawn(move || raw_post(addr, AGENT_KEY, &body));
    // Wait until the request is inside the executor (it has claimed).
    let mut in_executor = false;
    for _ in 0..2000 {
        let m = metrics(addr);
        if m.contains("toolgate_decisions_in_progress 1") {
            in_executor = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(in_executor, "the decision never started");
    // Ask to stop while the decision is in progress, then let it finish.
    stop_tx.send(()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !server.is_finished(),
        "serve returned with a decision in progress"
    );
    drop(held);
    let response = client.join().unwrap();
    assert!(response.starts_with("HTTP/1.1 201"), "{response}");
    runtime.block_on(server).unwrap().unwrap();
    assert_eq!(desk.credits_for("t-1"), 1);
}

fn metrics(addr: SocketAddr) -> String {
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {METRICS_KEY}\r\nConnection: close\r\n\r\n"
    );
    exchange(addr, request.as_bytes())
}

#[test]
fn an_oversized_body_on_the_wire_is_refused_and_the_server_stays_up() {
    let (runtime, running) = serve(app().0, Duration::from_secs(1));
    let addr = running.addr;
    for key in [AGENT_KEY, "wrong"] {
        let mut s = TcpStream::connect(addr).unwrap();
        let big = vec![b'a'; 3_000_000];
        let head = format!(
            "POST /v1/decisions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            big.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        // The server may answer and close before the whole body is sent.
        let _ = s.write_all(&big);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(
            out.starts_with("HTTP/1.1 413") || out.starts_with("HTTP/1.1 401"),
            "{key}: {}",
            out.lines().next().unwrap_or("")
        );
    }
    let ok = raw_post(addr, AGENT_KEY, &credit_on_t1(5).to_string());
    assert!(ok.starts_with("HTTP/1.1 201"), "{ok}");
    stop(&runtime, running);
}

/// What hyper answers before the router sees a request: a status line
/// with an empty body, then the connection closed (docs/http-api.md,
/// "Where the HTTP library answers first"). Pinned so that the documented
/// exceptions to "every error is a problem" stay exactly these.
#[test]
fn requests_hyper_cannot_parse_get_the_documented_bare_answers() {
    let (runtime, running) = serve(app().0, Duration::from_secs(1));
    let addr = running.addr;
    let raw = |request: &[u8]| exchange(addr, request);
    let bad_line = raw(b"NOT A REQUEST LINE\r\n\r\n");
    let big_header = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(500 * 1024)
    );
    let too_large = raw(big_header.as_bytes());
    let many: String = (0..120).map(|i| format!("X-H{i}: v\r\n")).collect();
    let too_many = raw(format!("GET /healthz HTTP/1.1\r\nHost: x\r\n{many}\r\n").as_bytes());
    for (answer, status) in [(&bad_line, "400"), (&too_large, "431"), (&too_many, "431")] {
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{}",
            answer.lines().next().unwrap_or("")
        );
        assert!(
            answer.to_ascii_lowercase().contains("content-length: 0"),
            "{answer}"
        );
    }
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/http-api.md"
    ))
    .unwrap();
    assert!(doc.contains("**Where the HTTP library answers first.**"));
    assert!(
        doc.contains("`431 Request Header\nFields Too Large`")
            || doc.contains("`431 Request Header Fields Too Large`")
    );
    stop(&runtime, running);
}

/// A body of one chunk every 20 ms for as long as the client reads: an
/// event stream, as `GET /mcp` keeps open.
struct Ticks(tokio::time::Interval);

impl http_body::Body for Ticks {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.0.poll_tick(cx).map(|_| {
            Some(Ok(http_body::Frame::data(axum::body::Bytes::from_static(
                b"data: tick\n\n",
            ))))
        })
    }
}

#[test]
fn a_connection_streaming_its_answer_is_never_the_idle_one_closed() {
    let (state, _) = app_with(Settings {
        max_connections: 1,
        max_connections_per_peer: 1,
        probe_headroom: 0,
        ..Settings::default()
    });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let beside = axum::Router::new().route(
        "/stream",
        axum::routing::get(|| async {
            axum::body::Body::new(Ticks(tokio::time::interval(Duration::from_millis(20))))
        }),
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = runtime.spawn(toolgate_http::serve_with(
        listener,
        state,
        beside,
        async {
            let _ = stop_rx.await;
        },
        Duration::from_secs(1),
    ));
    // The one slot: a stream, its head sent, its body still coming.
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
        .write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 512];
    while !String::from_utf8_lossy(&seen).contains("tick") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended");
        seen.extend_from_slice(&buf[..n]);
    }
    // A newcomer finds no idle connection to close: refused, and the
    // stream goes on.
    let answer = exchange(addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        answer.is_empty() || answer.contains("503"),
        "the newcomer took the streaming connection's slot: {answer}"
    );
    let before = seen.len();
    while seen.len() == before {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the stream was closed for the newcomer");
        seen.extend_from_slice(&buf[..n]);
    }
    drop(stream);
    stop_tx.send(()).unwrap();
    runtime.block_on(server).unwrap().unwrap();
}
