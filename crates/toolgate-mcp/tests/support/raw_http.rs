//! `/mcp` spoken by hand over one TCP connection, for the tests that need
//! what no SDK sends (another caller's session id, a foreign `Origin`, a
//! body that never ends), and a decision seam that decides nothing.

#![allow(dead_code, reason = "each test target uses a different subset")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use toolgate_mcp::wire::{Decide, DecideError, DecisionForWire, GatedCall, GatedRead, ReadForWire};

/// No tool is served, so nothing is decided.
pub struct Nothing;

impl Decide for Nothing {
    async fn decide(&self, _: GatedCall) -> Result<DecisionForWire, DecideError> {
        Err(DecideError::NotServed("no tool is served here"))
    }

    async fn unknown_tool(&self, _: &toolgate::pipeline::Principal, _: &str) {}

    async fn read(&self, _: GatedRead) -> Result<ReadForWire, DecideError> {
        Err(DecideError::NotServed("no tool is served here"))
    }
}

/// One 2025-11-25 request to `/mcp` with `key` as the bearer and
/// `headers` (each ending in CRLF): the status, the session id the answer
/// names, and the whole answer as it arrived (a GET's event stream: what
/// came before the read timeout).
pub fn request(
    addr: SocketAddr,
    method: &str,
    key: &str,
    headers: &str,
    body: &str,
) -> (u16, Option<String>, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n\
         Accept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2025-11-25\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    let status = raw[9..12].parse().unwrap();
    let id = raw.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .starts_with("mcp-session-id: ")
            .then(|| l["mcp-session-id: ".len()..].trim().to_owned())
    });
    (status, id, raw)
}

/// `app` served on a loopback port until the test ends.
pub async fn listen(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The headers of a JSON POST, in `session` if given.
pub fn json_in(session: Option<&str>) -> String {
    let session = session
        .map(|id| format!("Mcp-Session-Id: {id}\r\n"))
        .unwrap_or_default();
    format!("Content-Type: application/json\r\n{session}")
}
