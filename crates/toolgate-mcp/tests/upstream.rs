//! The upstream side against a real MCP server: the example shop
//! (examples/mcp/shop_mcp.py, the official Python SDK) started as a
//! process, over Streamable HTTP and as a stdio child.
//!
//! Needs examples/mcp/install.sh to have run (its virtual environment). In
//! CI (`CI=true`) or with `TOOLGATE_REQUIRE_MCP_EXAMPLE=1` a missing one
//! fails; otherwise the tests skip with a message.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use toolgate_mcp::config::{Transport, Upstream};
use toolgate_mcp::pin::{Offered, PinFile, compare};
use toolgate_mcp::upstream::{Status, UpstreamClient, UpstreamError};

mod support;
use support::{counts, example_dir, http_upstream, python, scratch, shop};

/// `shop_mcp.py count`: refund_order calls and refunds in the database.
fn count(py: &Path, db: &Path) -> (u64, u64) {
    let v = counts(py, db);
    (
        v["refund_order_calls"].as_u64().unwrap(),
        v["refunds"].as_u64().unwrap(),
    )
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

fn text(r: &rmcp::model::CallToolResult) -> String {
    r.content[0].as_text().unwrap().text.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_pins_and_calls_over_streamable_http() {
    let Some(py) = python() else { return };
    let shop = shop(&py, "http", &[]);
    let client = UpstreamClient::connect(&http_upstream(shop.port, Duration::from_secs(30)))
        .await
        .unwrap();
    // The Python SDK offers the stateless revision; rmcp takes it.
    assert_eq!(client.protocol_version().as_deref(), Some("2026-07-28"));

    let offered = client.offered().await.unwrap();
    let names: Vec<&str> = offered.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["get_order", "refund_order", "refund_status"]);
    // Every tool of the shop passes the core's schema audit and pins.
    let (pins, refused) = PinFile::pin_all("shop", &offered);
    assert_eq!(refused, []);
    let again = PinFile::from_toml(&pins.to_toml().unwrap()).unwrap();
    assert_eq!(again, pins);
    let refresh = compare(&pins, &client.offered().await.unwrap());
    assert_eq!(refresh.current.len(), 3);
    assert!(refresh.withheld.is_empty() && refresh.unpinned.is_empty());

    let order = client
        .call("get_order", args(json!({"order_id": 1001})), "read-1")
        .await
        .unwrap();
    assert_eq!(
        order.structured_content.as_ref().unwrap()["version"],
        json!(1)
    );

    let refund = args(json!({
        "order_id": 1001, "expected_version": 1, "amount_minor": 500, "reason": "damaged"
    }));
    let first = client
        .call("refund_order", refund.clone(), "key-1001-1")
        .await
        .unwrap();
    assert_eq!(first.is_error, Some(false));
    // The same key again: the upstream's own deduplication answers with the
    // stored result and writes nothing.
    let second = client
        .call("refund_order", refund.clone(), "key-1001-1")
        .await
        .unwrap();
    assert_eq!(text(&second), text(&first));
    assert_eq!(count(&py, &shop.dir.join("shop.sqlite")), (2, 1));

    // A tool error is a result, not an UpstreamError: the upstream ran it.
    let stale = client
        .call("refund_order", refund, "key-1001-other")
        .await
        .unwrap();
    assert_eq!(stale.is_error, Some(true));
    assert!(text(&stale).contains("read it again"), "{}", text(&stale));

    // Reconciliation through the status tool: applied, and a key never
    // sent is fenced ("not applied" for good).
    match client
        .status("refund_status", "operation_key", "key-1001-1")
        .await
        .unwrap()
    {
        Status::Applied(doc) => assert_eq!(doc["result"]["amount_minor"], json!(500)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        client
            .status("refund_status", "operation_key", "key-never-sent")
            .await
            .unwrap(),
        Status::NotApplied(_)
    ));
    client.close().await;
}

/// A call that gets no answer within the timeout is `Unknown`, and it may
/// well have run: here the refund commits after the gateway gave up. That
/// is why such a call goes to reconciliation and is never sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_is_unknown_and_may_have_run() {
    let Some(py) = python() else { return };
    let shop = shop(
        &py,
        "timeout",
        &["--hold-order", "1004", "--hold-ms", "1500"],
    );
    let client = UpstreamClient::connect(&http_upstream(shop.port, Duration::from_millis(300)))
        .await
        .unwrap();
    let e = client
        .call(
            "refund_order",
            args(json!({"order_id": 1004, "expected_version": 1, "amount_minor": 100, "reason": "late"})),
            "key-1004-1",
        )
        .await
        .unwrap_err();
    assert!(matches!(e, UpstreamError::Unknown(_)), "{e}");
    let db = shop.dir.join("shop.sqlite");
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&py, &db).1 == 0 {
        assert!(Instant::now() < deadline, "the held refund never committed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(count(&py, &db), (1, 1));
}

/// A new release of the upstream that widens a limit: the pinned tool is
/// withheld and the operator is told exactly what changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_upstream_schema_is_withheld() {
    let Some(py) = python() else { return };
    let before = shop(&py, "before", &[]);
    let client = UpstreamClient::connect(&http_upstream(before.port, Duration::from_secs(30)))
        .await
        .unwrap();
    let offered: Vec<Offered> = client.offered().await.unwrap();
    client.close().await;
    let (pins, refused) = PinFile::pin_all("shop", &offered);
    assert_eq!(refused, []);
    drop(before);

    let after = shop(&py, "after", &["--max-refund", "900000"]);
    let client = UpstreamClient::connect(&http_upstream(after.port, Duration::from_secs(30)))
        .await
        .unwrap();
    let refresh = compare(&pins, &client.offered().await.unwrap());
    assert_eq!(refresh.current, ["get_order", "refund_status"]);
    assert_eq!(refresh.withheld.len(), 1);
    assert_eq!(refresh.withheld[0].tool, "refund_order");
    assert_eq!(
        refresh.withheld[0].changes,
        ["input schema at /properties/amount_minor/maximum: 20000 became 900000"]
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_a_stdio_child_with_a_minimal_environment() {
    let Some(py) = python() else { return };
    let dir = scratch("stdio");
    let db = dir.join("shop.sqlite");
    let upstream = Upstream {
        name: "local".into(),
        transport: Transport::Stdio {
            command: py.display().to_string(),
            args: vec![
                example_dir().join("shop_mcp.py").display().to_string(),
                "--db".into(),
                db.display().to_string(),
                "serve-stdio".into(),
            ],
            env: BTreeMap::new(),
        },
        pins: PathBuf::from("local.pins.toml"),
        connect_timeout: Duration::from_secs(60),
        call_timeout: Duration::from_secs(30),
        refresh: None,
        tools: Vec::new(),
        token_exchange: None,
        resources_capability: None,
        prompts_capability: None,
    };
    let client = UpstreamClient::connect(&upstream).await.unwrap();
    assert_eq!(client.offered().await.unwrap().len(), 3);
    let r = client
        .call(
            "refund_order",
            args(json!({"order_id": 1006, "expected_version": 1, "amount_minor": 300, "reason": "wrong_item"})),
            "key-1006-1",
        )
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    client.close().await;
    assert_eq!(count(&py, &db), (1, 1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_missing_credential_variable_is_a_configuration_error() {
    let mut u = http_upstream(1, Duration::from_secs(1));
    u.transport = Transport::Http {
        url: "http://127.0.0.1:1/mcp".into(),
        bearer_env: Some("TOOLGATE_MCP_TEST_TOKEN_THAT_IS_NOT_SET".into()),
    };
    let e = UpstreamClient::connect(&u).await.unwrap_err();
    assert!(
        matches!(&e, UpstreamError::Config(m) if m.contains("TOOLGATE_MCP_TEST_TOKEN_THAT_IS_NOT_SET")),
        "{e}"
    );
}
