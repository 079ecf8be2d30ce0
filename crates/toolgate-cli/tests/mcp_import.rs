//! `toolgate mcp import` against a real MCP server: the example shop
//! (examples/mcp/shop_mcp.py, the official Python SDK) as a process.
//!
//! Needs examples/mcp/install.sh; in CI (`CI=true`) or with
//! `TOOLGATE_REQUIRE_MCP_EXAMPLE=1` a missing one fails, otherwise the test
//! skips with a message.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "support/mcp_example.rs"]
mod mcp_example;

use mcp_example::{example_dir, python};

struct Shop(Child, PathBuf);

impl Drop for Shop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

#[test]
fn import_pins_every_tool_and_prints_policy_entries() {
    let Some(py) = python() else { return };
    let dir = std::env::temp_dir().join(format!("toolgate-mcp-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(&py)
        .arg(example_dir().join("shop_mcp.py"))
        .arg("--db")
        .arg(dir.join("shop.sqlite"))
        .args(["serve-http", "--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let shop = Shop(child, dir.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the shop did not start");
        std::thread::sleep(Duration::from_millis(100));
    }

    let config = dir.join("toolgate.toml");
    std::fs::write(
        &config,
        format!(
            r#"
listen = "127.0.0.1:0"
policy = "policy.toml"

[[upstreams]]
name = "shop"
url = "http://127.0.0.1:{port}/mcp"
pins = "shop.pins.toml"

[[upstreams.tools]]
name = "refund_order"
scope.order = {{ from = "argument", pointer = "/order_id" }}
version_seen = {{ from = "argument", pointer = "/expected_version" }}
"#
        ),
    )
    .unwrap();
    let run = |upstream: &str| {
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["mcp", "import", "--upstream", upstream, "--config"])
            .arg(&config)
            .output()
            .unwrap()
    };
    let out = run("shop");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("pinned 3 tool(s)"), "{stderr}");
    let pins = std::fs::read_to_string(dir.join("shop.pins.toml")).unwrap();
    assert!(
        pins.starts_with("# Pinned tools of upstream `shop`"),
        "{pins}"
    );
    for tool in ["get_order", "refund_order", "refund_status"] {
        assert!(pins.contains(&format!("name = \"{tool}\"")), "{pins}");
        assert!(stdout.contains(&format!("name = \"{tool}\"")), "{stdout}");
    }
    // The mapped tool's operation key is suggested; nothing loads until the
    // operator writes the capability.
    assert!(
        stdout.contains(r#"# operation_key = ["order", "version_seen"]"#),
        "{stdout}"
    );
    assert!(
        !stdout.lines().any(|l| l.starts_with("capability")),
        "{stdout}"
    );

    // An upstream the file does not name.
    let out = run("elsewhere");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("no [[upstreams]] entry is named \"elsewhere\"")
    );
    drop(shop);
}
