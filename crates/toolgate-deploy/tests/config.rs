//! Every start-time configuration error, with the field and message it
//! names, against a real SQLite application database.

mod support;

use std::path::Path;

use support::*;
use toolgate_deploy::{ConfigError, DeploySection, Prepared};

const GOOD_EXECUTOR: &str = "{ kind = \"client\" }";

async fn load(text: &str) -> Result<Prepared, ConfigError> {
    let section = DeploySection::from_toml(text)?;
    Prepared::load(&section, Path::new("."), &policy(), CEDAR).await
}

fn with_db(db: &str, tools: &str) -> String {
    format!("[app_db]\nurl = \"{db}\"\n{tools}")
}

fn webhook(url: &str, status_url: &str, secret: &str) -> String {
    format!(r#"{{ kind = "webhook", url = "{url}", status_url = "{status_url}", {secret} }}"#)
}

#[track_caller]
fn assert_err(r: Result<Prepared, ConfigError>, field: &str, message: &str) {
    match r {
        Ok(_) => panic!("loaded; expected {field}: {message}"),
        Err(e) => {
            assert_eq!(e.field(), field, "{e}");
            assert!(e.message().contains(message), "{e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_file_loads() {
    let db = sqlite_app_db("cfgok").await;
    let secret = secret_file("cfgok");
    let exec = webhook(
        "https://shop.example/refund",
        "https://shop.example/status",
        &format!("secret_file = \"{}\"", secret.display()),
    );
    load(&with_db(&db, &tool_toml("", &exec, &sql_state(""))))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_errors_name_the_tool_and_field() {
    let db = sqlite_app_db("cfgsql").await;
    // A named parameter no scope field binds.
    let t = tool_toml(
        "",
        GOOD_EXECUTOR,
        r#"{ source = "sql", query = "SELECT version FROM orders WHERE id = :order_no" }"#,
    );
    assert_err(
        load(&with_db(&db, &t)).await,
        "tools[refund_order].state.query",
        "`:order_no` is not a scope field of the tool's operation_key (order_id, version_seen) nor `actor`",
    );
    // A query that does not prepare against the application's database.
    let t = tool_toml(
        "",
        GOOD_EXECUTOR,
        r#"{ source = "sql", query = "SELECT version FROM orderz WHERE id = :order_id" }"#,
    );
    assert_err(
        load(&with_db(&db, &t)).await,
        "tools[refund_order].state.query",
        "does not prepare: ",
    );
    // The same for an entity query, which is named by its entity type.
    let t = tool_toml("", GOOD_EXECUTOR, &sql_state("")).replace(
        "blocked_reason FROM orders WHERE id",
        "blocked_reason FROM orders WHERE idd",
    );
    assert_err(
        load(&with_db(&db, &t)).await,
        "tools[refund_order].entities[Order].query",
        "does not prepare: ",
    );
    // A state query of two columns; an entity query without `id`.
    let t = tool_toml(
        "",
        GOOD_EXECUTOR,
        r#"{ source = "sql", query = "SELECT version, team FROM orders WHERE id = :order_id" }"#,
    );
    assert_err(
        load(&with_db(&db, &t)).await,
        "tools[refund_order].state.query",
        "must return one column (the version), not 2",
    );
    let t = tool_toml("", GOOD_EXECUTOR, &sql_state(""))
        .replace("SELECT id, team, refundable", "SELECT team, refundable");
    assert_err(
        load(&with_db(&db, &t)).await,
        "tools[refund_order].entities[Order].query",
        "must return a column `id`",
    );
    // Positional placeholders would collide with the rewritten ones.
    let t = tool_toml(
        "",
        GOOD_EXECUTOR,
        r#"{ source = "sql", query = "SELECT version FROM orders WHERE id = ?" }"#,
    );
    assert_err(
        load(&with_db(&db, &t)).await,
        "tools[refund_order].state.query",
        "positional placeholders",
    );
    // A sql source without [app_db].
    assert_err(
        load(&tool_toml("", GOOD_EXECUTOR, &sql_state(""))).await,
        "tools[refund_order].state.query",
        "add [app_db]",
    );
    // [app_db] from an unset variable; both url and url_env; a bad scheme.
    let t = tool_toml("", GOOD_EXECUTOR, &sql_state(""));
    assert_err(
        load(&format!(
            "[app_db]\nurl_env = \"TOOLGATE_DEPLOY_TEST_NEVER_SET\"\n{t}"
        ))
        .await,
        "app_db.url_env",
        "TOOLGATE_DEPLOY_TEST_NEVER_SET is not set",
    );
    assert_err(
        load(&format!("[app_db]\nurl = \"{db}\"\nurl_env = \"X\"\n{t}")).await,
        "app_db",
        "exactly one of url and url_env",
    );
    assert_err(
        load(&format!("[app_db]\nurl = \"redis://h/\"\n{t}")).await,
        "app_db.url",
        "is not sqlite:, postgres: or mysql:",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cedar_mapping_errors() {
    let db = sqlite_app_db("cfgcedar").await;
    // An entity type the mapping uses with no source.
    let t = tool_toml("", GOOD_EXECUTOR, &sql_state(""));
    let without_agent = t[..t.rfind("[[tools.entities]]").unwrap()].to_owned();
    assert_err(
        load(&with_db(&db, &without_agent)).await,
        "tools[refund_order].cedar.principal_type",
        "no [[tools.entities]] entry provides `Agent`",
    );
    let t2 = t.replace("resource_type = \"Order\"", "resource_type = \"Parcel\"");
    assert_err(
        load(&with_db(&db, &t2)).await,
        "tools[refund_order].cedar.resource_type",
        "no [[tools.entities]] entry provides `Parcel`",
    );
    let t3 = t.replace(
        "resource_field = \"order_id\"",
        "resource_field = \"customer_id\"",
    );
    assert_err(
        load(&with_db(&db, &t3)).await,
        "tools[refund_order].cedar.resource_field",
        "`customer_id` is not a scope field",
    );
    // Two sources for one type.
    let t4 = t.replace("type = \"Agent\"", "type = \"Order\"");
    assert_err(
        load(&with_db(&db, &t4)).await,
        "tools[refund_order].entities[Order].type",
        "a second source for `Order`",
    );
    // A `request` source provides its type like any other: the principal
    // from the application's request loads, and its authoriser says so.
    let t5 =
        format!("{without_agent}\n[[tools.entities]]\ntype = \"Agent\"\nsource = \"request\"\n");
    let d = load(&with_db(&db, &t5)).await.unwrap();
    let entities = d.authorizer.entities("refund_order").unwrap();
    assert!(entities.reads_from_request("Agent"));
    assert!(!entities.reads_from_request("Order"));
    // A second source for a request type is still refused.
    let t6 = format!("{t5}\n[[tools.entities]]\ntype = \"Agent\"\nsource = \"request\"\n");
    assert_err(
        load(&with_db(&db, &t6)).await,
        "tools[refund_order].entities[Agent].type",
        "a second source for `Agent`",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_and_state_errors() {
    let db = sqlite_app_db("cfgexec").await;
    let secret = secret_file("cfgexec");
    let sf = format!("secret_file = \"{}\"", secret.display());
    let state = sql_state("");
    let cases: Vec<(String, &str, &str)> = vec![
        (
            webhook("/refund", "http://h/s", &sf),
            "tools[refund_order].executor.url",
            "is not an absolute URL",
        ),
        (
            webhook("http://h/r", "ftp://h/s", &sf),
            "tools[refund_order].executor.status_url",
            "is not an http or https URL",
        ),
        (
            webhook(
                "http://h/r",
                "http://h/s",
                "secret_env = \"TOOLGATE_DEPLOY_TEST_NEVER_SET\"",
            ),
            "tools[refund_order].executor.secret_env",
            "TOOLGATE_DEPLOY_TEST_NEVER_SET is not set",
        ),
        (
            webhook(
                "http://h/r",
                "http://h/s",
                "secret_file = \"/nonexistent/secret\"",
            ),
            "tools[refund_order].executor.secret_file",
            "reading /nonexistent/secret",
        ),
        (
            webhook("http://h/r", "http://h/s", ""),
            "tools[refund_order].executor.secret_env",
            "a webhook needs a secret",
        ),
        (
            webhook("http://h/r", "http://h/s", &format!("{sf}, timeout_ms = 0")),
            "tools[refund_order].executor.timeout_ms",
            "at least 1 ms",
        ),
    ];
    for (exec, field, message) in cases {
        let exec = exec.replace(", }", " }");
        assert_err(
            load(&with_db(&db, &tool_toml("", &exec, &state))).await,
            field,
            message,
        );
    }
    // An empty secret file, and one too short to resist guessing.
    for (content, message) in [("\n", "is empty"), ("short\n", "shorter than 16 bytes")] {
        let path = temp_path("cfgshort");
        std::fs::write(&path, content).unwrap();
        let exec = webhook(
            "http://h/r",
            "http://h/s",
            &format!("secret_file = \"{}\"", path.display()),
        );
        assert_err(
            load(&with_db(&db, &tool_toml("", &exec, &state))).await,
            "tools[refund_order].executor.secret_file",
            message,
        );
    }
    // State sources: an http URL with a placeholder no scope field fills,
    // or not absolute. (`none` loads with either executor.)
    for exec in [GOOD_EXECUTOR, &webhook("http://h/r", "http://h/s", &sf)] {
        load(&with_db(
            &db,
            &tool_toml("", exec, r#"{ source = "none" }"#),
        ))
        .await
        .unwrap();
    }
    for (state, field, message) in [
        (
            r#"{ source = "http", url = "http://h/orders/{order_no}" }"#,
            "tools[refund_order].state.url",
            "`{order_no}` is not a scope field",
        ),
        (
            r#"{ source = "http", url = "/orders/{order_id}" }"#,
            "tools[refund_order].state.url",
            "is not an absolute URL",
        ),
    ] {
        assert_err(
            load(&with_db(&db, &tool_toml("", GOOD_EXECUTOR, state))).await,
            field,
            message,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_must_match_the_policy() {
    let db = sqlite_app_db("cfgtools").await;
    let t = tool_toml("", GOOD_EXECUTOR, &sql_state(""));
    assert_err(
        load(&with_db(
            &db,
            &t.replace("name = \"refund_order\"", "name = \"refund_ordr\""),
        ))
        .await,
        "tools[refund_ordr].name",
        "the policy has no tool `refund_ordr`",
    );
    assert_err(
        load(&format!("[app_db]\nurl = \"{db}\"\n")).await,
        "tools",
        "the policy's tool `refund_order` has no [[tools]] entry",
    );
    assert_err(
        load(&with_db(&db, &format!("{t}\n{t}"))).await,
        "tools[refund_order].name",
        "a second [[tools]] entry",
    );
    // Unknown fields are refused by name.
    let e = load(&with_db(&db, &t.replace("principal_type", "principal_typ")))
        .await
        .unwrap_err();
    assert!(e.message().contains("principal_typ"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_from_a_file_name_the_file() {
    let db = sqlite_app_db("cfgfiledb").await;
    let path = temp_path("cfgfile");
    let t = tool_toml(
        "",
        &webhook("refund", "http://h/s", "secret_env = \"X\""),
        &sql_state(""),
    );
    // Keys that belong to the serving program are left to it.
    std::fs::write(
        &path,
        format!("listen = \"127.0.0.1:0\"\n{}", with_db(&db, &t)),
    )
    .unwrap();
    let e = Prepared::from_file(&path, &policy(), CEDAR)
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: tools[refund_order].executor.url: `refund` is not an absolute URL: relative URL without a base",
            path.display()
        )
    );
}
