//! What the suites that drive the example shop share: finding the example's
//! SDKs (skipping without them, unless CI or TOOLGATE_REQUIRE_MCP_EXAMPLE=1
//! says they must run) and the shop as a process on a free port, with a
//! database of its own.

#![allow(dead_code, reason = "each test binary uses part of the support")]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use toolgate::decode::{Limits, decode_strict};
use toolgate_mcp::config::{Transport, Upstream};

#[path = "../../../toolgate-cli/tests/support/mcp_example.rs"]
mod mcp_example;
#[allow(unused_imports, reason = "each test binary uses part of the support")]
pub use mcp_example::{example_dir, python};

/// The example's Python, when the Node SDK is installed too.
pub fn python_and_node() -> Option<PathBuf> {
    mcp_example::installed(&["node/node_modules/@modelcontextprotocol/sdk"])
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A new directory of its own for `name`.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "toolgate-mcp-{name}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A shop process, killed on drop, with a database of its own.
pub struct Shop {
    pub child: Child,
    pub dir: PathBuf,
    pub port: u16,
}

impl Shop {
    /// Its SQLite database.
    pub fn db(&self) -> PathBuf {
        self.dir.join("shop.sqlite")
    }
}

impl Drop for Shop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The shop over Streamable HTTP on a free port, `extra` arguments before
/// the command; returns once it accepts connections. A port is free only
/// when asked: a test running beside this one may take it before the shop
/// binds it, and the shop then exits while the readiness probe reaches the
/// other test's listener. So the shop must still be running once its port
/// answers, or it starts again on another port.
pub fn shop(py: &Path, name: &str, extra: &[&str]) -> Shop {
    let dir = scratch(name);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let port = free_port();
        let mut child = Command::new(py)
            .arg(example_dir().join("shop_mcp.py"))
            .arg("--db")
            .arg(dir.join("shop.sqlite"))
            .args(extra)
            .args(["serve-http", "--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let exited = loop {
            assert!(Instant::now() < deadline, "the shop did not start");
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                std::thread::sleep(Duration::from_millis(100));
                match child.try_wait().unwrap() {
                    None => return Shop { child, dir, port },
                    Some(status) => break status,
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        eprintln!("the shop on port {port} exited ({exited}); starting it on another port");
    }
}

/// `shop_mcp.py count` on the database `db`: refund_order calls and refunds.
pub fn counts(py: &Path, db: &Path) -> Value {
    let out = Command::new(py)
        .arg(example_dir().join("shop_mcp.py"))
        .arg("--db")
        .arg(db)
        .arg("count")
        .output()
        .unwrap();
    decode_strict(&out.stdout, &Limits::provider_body()).unwrap()
}

/// The shop on `port` as an upstream, with no tools mapped.
pub fn http_upstream(port: u16, call_timeout: Duration) -> Upstream {
    Upstream {
        name: "shop".into(),
        transport: Transport::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
            bearer_env: None,
        },
        pins: PathBuf::from("shop.pins.toml"),
        connect_timeout: Duration::from_secs(30),
        call_timeout,
        refresh: None,
        tools: Vec::new(),
        token_exchange: None,
        resources_capability: None,
        prompts_capability: None,
    }
}
