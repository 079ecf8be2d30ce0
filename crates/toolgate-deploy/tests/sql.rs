//! The `sql` state and entity sources on each backend: SQLite always,
//! PostgreSQL and MariaDB/MySQL when TOOLGATE_TEST_POSTGRES_URL /
//! TOOLGATE_TEST_MYSQL_URL name a server (required when
//! TOOLGATE_REQUIRE_DATABASES=1). Each run creates its own tables, named
//! with the process id, and drops them.

mod support;

use std::path::Path;

use serde_json::json;
use support::*;
use toolgate::claim::MemoryClaimStore;
use toolgate::pipeline::Outcome;
use toolgate_deploy::{ConfigError, DeploySection, Prepared};

/// Runs `statements` on the database at `url` with a writable connection
/// of the test's own.
async fn exec_all(url: &str, statements: &[String]) {
    if url.starts_with("postgres") {
        run_all(sqlx::PgPool::connect(url).await.unwrap(), statements).await;
    } else if url.starts_with("mysql") {
        run_all(sqlx::MySqlPool::connect(url).await.unwrap(), statements).await;
    } else {
        let opts: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
        let pool = sqlx::SqlitePool::connect_with(opts.create_if_missing(true))
            .await
            .unwrap();
        run_all(pool, statements).await;
    }
}

/// Runs `statements` on `pool`, then closes it.
async fn run_all<DB: sqlx::Database>(pool: sqlx::Pool<DB>, statements: &[String])
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    for s in statements {
        sqlx::raw_sql(sqlx::AssertSqlSafe(s.clone()))
            .execute(&pool)
            .await
            .unwrap();
    }
    pool.close().await;
}

/// The number of order rows, read with the test's own connection.
async fn order_count(url: &str, prefix: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM {prefix}orders");
    if url.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(&pool)
            .await
            .unwrap()
    } else if url.starts_with("mysql") {
        let pool = sqlx::MySqlPool::connect(url).await.unwrap();
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(&pool)
            .await
            .unwrap()
    } else {
        let pool = sqlx::SqlitePool::connect(url).await.unwrap();
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(&pool)
            .await
            .unwrap()
    }
}

async fn load(url: &str, prefix: &str, state: &str, extra: &str) -> Result<Prepared, ConfigError> {
    let text = format!(
        "[app_db]\nurl = \"{url}\"\n{extra}\n{}",
        tool_toml(prefix, "{ kind = \"client\" }", state)
    );
    let section = DeploySection::from_toml(&text).unwrap();
    Prepared::load(&section, Path::new("."), &policy(), CEDAR).await
}

/// A query that sleeps past the limit on this backend, if it has a way to.
fn sleeping_state(url: &str, prefix: &str) -> Option<String> {
    if url.starts_with("postgres") {
        Some(format!(
            r#"{{ source = "sql", query = "SELECT version FROM {prefix}orders, (SELECT pg_sleep(5)) AS s WHERE id = :order_id" }}"#
        ))
    } else if url.starts_with("mysql") {
        Some(format!(
            r#"{{ source = "sql", query = "SELECT version FROM {prefix}orders WHERE id = :order_id AND SLEEP(5) = 0" }}"#
        ))
    } else {
        None
    }
}

async fn exercise(url: &str, backend: &str) {
    let prefix = unique(backend);
    exec_all(url, &drop_schema(&prefix)).await;
    exec_all(url, &schema(&prefix)).await;

    // State and entities: an allowed proposal is handed to the client; a
    // stale version is state_changed; another team's order, a blocked
    // order, a non-refundable one, an agent without a parent: forbidden.
    let d = load(url, &prefix, &sql_state(&prefix), "").await.unwrap();
    let ana = agent("agent-ana");
    let store = MemoryClaimStore::new();
    let ok = propose(&d, &store, &ana, json!(1), 500, "3", 1)
        .await
        .unwrap();
    assert_eq!(ok.outcome(), Outcome::Permitted, "{backend}: {ok:?}");
    let stale = propose(&d, &MemoryClaimStore::new(), &ana, json!("1"), 500, "2", 1)
        .await
        .unwrap();
    assert_eq!(
        stale.outcome(),
        Outcome::StateChanged,
        "{backend}: {stale:?}"
    );
    assert_eq!(stale.current_version().unwrap().as_str(), "3");
    for (actor, order, amount) in DENIED_REFUNDS {
        let dn = propose(
            &d,
            &MemoryClaimStore::new(),
            &agent(actor),
            json!(order),
            amount,
            "3",
            2,
        )
        .await
        .unwrap();
        assert_eq!(
            dn.outcome(),
            Outcome::Forbidden,
            "{backend} {actor} {order}: {dn:?}"
        );
    }

    // Zero rows: no such resource.
    let none = format!(
        r#"{{ source = "sql", query = "SELECT version FROM {prefix}orders WHERE id = :order_id AND version > 100" }}"#
    );
    let d = load(url, &prefix, &none, "").await.unwrap();
    let e = propose(&d, &MemoryClaimStore::new(), &ana, json!(1), 500, "3", 3)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no such resource"), "{backend}: {e}");

    // Read-only: a state query that would delete the row is refused by the
    // database (a read-only transaction, or SQLite's read-only connection).
    let delete = format!(
        r#"{{ source = "sql", query = "DELETE FROM {prefix}orders WHERE id = :order_id RETURNING version" }}"#
    );
    match load(url, &prefix, &delete, "").await {
        Ok(d) => {
            let e = propose(&d, &MemoryClaimStore::new(), &ana, json!(1), 500, "3", 4)
                .await
                .unwrap_err();
            let text = e.to_string().to_ascii_lowercase();
            assert!(
                text.contains("read-only")
                    || text.contains("readonly")
                    || text.contains("read only"),
                "{backend}: {e}"
            );
        }
        // MySQL has no DELETE … RETURNING, and MariaDB's prepared one
        // reports no result columns: refused at load either way.
        Err(e) => assert!(
            url.starts_with("mysql")
                && (e.message().contains("does not prepare")
                    || e.message().contains("must return one column")),
            "{backend}: {e}"
        ),
    }
    assert_eq!(
        order_count(url, &prefix).await,
        4,
        "{backend}: a row was deleted"
    );

    // The server's statement time limit.
    if let Some(sleeping) = sleeping_state(url, &prefix) {
        let d = load(url, &prefix, &sleeping, "statement_timeout_ms = 200")
            .await
            .unwrap();
        let e = propose(&d, &MemoryClaimStore::new(), &ana, json!(1), 500, "3", 5)
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("timeout") || text.contains("interrupted") || text.contains("max_"),
            "{backend}: {e}"
        );
    }

    // On PostgreSQL, a string-typed scope field compared with an integer
    // column is refused at load: it would fail every decision.
    if url.starts_with("postgres") {
        let by_team = format!(
            r#"{{ source = "sql", query = "SELECT version FROM {prefix}orders WHERE team = :actor AND id = :order_id" }}"#
        );
        load(url, &prefix, &by_team, "").await.unwrap();
        let by_actor = format!(
            r#"{{ source = "sql", query = "SELECT version FROM {prefix}orders WHERE id = :actor" }}"#
        );
        let e = load(url, &prefix, &by_actor, "").await.unwrap_err();
        assert_eq!(e.field(), "tools[refund_order].state.query");
        assert!(
            e.message()
                .contains("the database expects INT4 for `:actor`, which is bound as text"),
            "{e}"
        );
    }

    // Column types are read from the prepared statement: one no reader
    // takes is refused at load, naming the tool, the entity type and the
    // column, instead of denying every decision later. PostgreSQL and
    // MariaDB type columns (a DATE is refused); SQLite types values, so
    // only a declared REAL or BLOB is.
    let refused_type = if url.starts_with("sqlite") {
        "REAL"
    } else {
        "DATE"
    };
    exec_all(
        url,
        &[
            format!("DROP TABLE IF EXISTS {prefix}extras"),
            format!(
                "CREATE TABLE {prefix}extras (id INTEGER PRIMARY KEY, odd {refused_type}, \
                 fine VARCHAR(8))"
            ),
        ],
    )
    .await;
    let tools = tool_toml(&prefix, "{ kind = \"client\" }", &sql_state(&prefix));
    let with_odd = tools.replace(
        &format!(
            "SELECT id, team, parent_team AS \\\"parent_Team\\\" FROM {prefix}agents WHERE id = :actor"
        ),
        &format!(
            "SELECT a.id, a.team, a.parent_team AS \\\"parent_Team\\\", x.odd FROM {prefix}agents a \
             LEFT JOIN {prefix}extras x ON x.id = 1 WHERE a.id = :actor"
        ),
    );
    assert_ne!(with_odd, tools, "{backend}: the replacement must apply");
    let section =
        DeploySection::from_toml(&format!("[app_db]\nurl = \"{url}\"\n{with_odd}")).unwrap();
    let e = Prepared::load(&section, Path::new("."), &policy(), CEDAR)
        .await
        .unwrap_err();
    assert_eq!(
        e.field(),
        "tools[refund_order].entities[Agent].query",
        "{backend}: {e}"
    );
    assert!(
        e.message().contains(&format!(
            "entity type `Agent`: column `odd` has SQL type {refused_type}"
        )),
        "{backend}: {e}"
    );
    // The same query with the column cast to text loads.
    let cast = if url.starts_with("mysql") {
        "CHAR"
    } else {
        "TEXT"
    };
    let with_cast = with_odd.replace("x.odd FROM", &format!("CAST(x.odd AS {cast}) AS odd FROM"));
    let section =
        DeploySection::from_toml(&format!("[app_db]\nurl = \"{url}\"\n{with_cast}")).unwrap();
    Prepared::load(&section, Path::new("."), &policy(), CEDAR)
        .await
        .unwrap_or_else(|e| panic!("{backend}: {e}"));
    // A state query whose column is not a version.
    let bool_state = format!(
        r#"{{ source = "sql", query = "SELECT refundable FROM {prefix}orders WHERE id = :order_id" }}"#
    );
    let e = load(url, &prefix, &bool_state, "").await.unwrap_err();
    assert_eq!(
        e.field(),
        "tools[refund_order].state.query",
        "{backend}: {e}"
    );
    assert!(
        e.message().contains("which is not a version"),
        "{backend}: {e}"
    );
    exec_all(url, &[format!("DROP TABLE IF EXISTS {prefix}extras")]).await;

    exec_all(url, &drop_schema(&prefix)).await;
}

fn server_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var(REQUIRE).as_deref() != Ok("1"),
                "{var} is required when {REQUIRE}=1"
            );
            eprintln!("skipping: {var} is not set");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let path = temp_path("sqlite");
    let _ = std::fs::remove_file(&path);
    exercise(&format!("sqlite://{}", path.display()), "sqlite").await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    if let Some(url) = server_url("TOOLGATE_TEST_POSTGRES_URL") {
        exercise(&url, "pg").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    if let Some(url) = server_url("TOOLGATE_TEST_MYSQL_URL") {
        exercise(&url, "my").await;
    }
}
