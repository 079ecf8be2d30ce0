//! The claim store on PostgreSQL. Runs when `TOOLGATE_TEST_POSTGRES_URL`
//! is set (CI: `postgres://postgres@127.0.0.1:5432/test`); skips with a
//! message otherwise, unless `TOOLGATE_REQUIRE_DATABASES=1`.
//!
//! Each test creates its own schema (`toolgate_t_<random>`) and points the
//! store at it through `search_path`, so runs never see each other's rows;
//! the schema is dropped when the test passes.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::postgres::PgPool;
use toolgate_store::StoreOptions;
use toolgate_store::fault::{FaultHook, FaultPoint};
use toolgate_store::postgres::PgClaimStore;

const URL_VAR: &str = "TOOLGATE_TEST_POSTGRES_URL";

/// A throwaway schema on the test server.
struct Schema {
    admin: PgPool,
    name: String,
    url: String,
}

impl Schema {
    async fn create() -> Option<Self> {
        let base = support::database_url(URL_VAR, "PostgreSQL")?;
        let admin = PgPool::connect(&base)
            .await
            .unwrap_or_else(|e| panic!("{URL_VAR} is set but PostgreSQL is unreachable: {e}"));
        let name = format!("toolgate_t_{}", support::hex(&support::random16()));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
            .execute(&admin)
            .await
            .expect("create schema");
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-c%20search_path%3D{name}");
        Some(Self { admin, name, url })
    }

    fn url(&self) -> &str {
        &self.url
    }

    async fn connect(&self, options: StoreOptions) -> PgClaimStore {
        PgClaimStore::connect(&self.url, options)
            .await
            .expect("connect to the test schema")
    }

    async fn store(&self) -> PgClaimStore {
        self.connect(StoreOptions::default())
            .await
            .with_clock(support::suite_clock)
    }

    async fn drop(self) {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA {} CASCADE",
            self.name
        )))
        .execute(&self.admin)
        .await
        .expect("drop schema");
    }
}

/// Review items as migration 0003 makes them, for the grant test.
const APPROVE: &str = "INSERT INTO toolgate_review_items (created_at, kind, proposer, decision, status, operation_key, fingerprint, version_seen, policy_digest, expires_at, consumed_at) VALUES (1, 'pending_approval', 'agent:1', '{}', 'approved', $1, $2, '7', $3, $4, $5) RETURNING id";
const CONSUMED: &str = "SELECT consumed_at, consumed_by FROM toolgate_review_items WHERE id = $1";
const VOTE: &str = "INSERT INTO toolgate_review_votes (item_id, reviewer, verdict, at) VALUES ($1, $2, 'approve', 1)";

support::backend_tests!(
    Schema,
    Postgres,
    conformance: postgres_passes_the_conformance_suite,
    any_store: any_store_picks_postgres_from_the_url_and_passes,
);
support::server_tests!(Schema, Postgres);

#[tokio::test]
async fn only_the_operation_key_is_unique() {
    let Some(schema) = Schema::create().await else {
        return;
    };
    let s = schema.store().await;
    // Straight from the catalogs: `pg_indexes` renders every index's
    // definition, which races with other tests dropping their schemas.
    let unique: Vec<(i64, String)> = sqlx::query_as(
        "SELECT CAST(i.indexrelid AS BIGINT), a.attname::text FROM pg_index i \
         JOIN pg_class t ON t.oid = i.indrelid \
         JOIN pg_namespace n ON n.oid = t.relnamespace \
         JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY (i.indkey) \
         WHERE n.nspname = current_schema() AND t.relname = 'toolgate_claims' \
         AND i.indisunique",
    )
    .fetch_all(s.pool())
    .await
    .expect("unique indexes");
    assert_eq!(unique.len(), 1, "{unique:?}");
    assert_eq!(unique[0].1, "operation_key", "{unique:?}");
    let stuck: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_index i \
         JOIN pg_class c ON c.oid = i.indexrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = current_schema() AND c.relname = 'toolgate_claims_stuck' \
         AND NOT i.indisunique",
    )
    .fetch_one(s.pool())
    .await
    .expect("stuck index");
    assert_eq!(stuck, 1);
    schema.drop().await;
}

const RAW_INSERT: &str = "INSERT INTO toolgate_claims (operation_key, fingerprint, tool, \
    arguments, scope, version_seen, proposer, status, holder, lease_expires_at, claimed_at) \
    VALUES ($1, $2, 'apply_goodwill_credit', $3, '{}', '7', 'agent:1', 'in_flight', $4, 0, 0)";

#[tokio::test]
async fn the_audit_table_refuses_update_delete_and_truncate() {
    let Some(schema) = Schema::create().await else {
        return;
    };
    let s = schema.store().await;
    sqlx::query("INSERT INTO toolgate_audit (at, actor, outcome) VALUES (1, 'a', 'executed')")
        .execute(s.pool())
        .await
        .expect("insert");
    for sql in [
        "UPDATE toolgate_audit SET outcome = 'replayed'",
        "DELETE FROM toolgate_audit",
        "TRUNCATE toolgate_audit",
    ] {
        let r = sqlx::query(sql).execute(s.pool()).await;
        assert!(r.is_err(), "{sql} was allowed");
    }
    let outcome: String = sqlx::query_scalar("SELECT outcome FROM toolgate_audit")
        .fetch_one(s.pool())
        .await
        .expect("select");
    assert_eq!(outcome, "executed");
    schema.drop().await;
}

/// A hook that terminates the claim's connection once, at `point`, from a
/// second connection, and waits until the server has let it go. The flag
/// says whether it fired, so a test cannot pass without the fault.
fn kill_once(admin: PgPool, point: FaultPoint) -> (FaultHook, Arc<AtomicBool>) {
    let fired = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&fired);
    let hook: FaultHook = Arc::new(move |at, pid| {
        let admin = admin.clone();
        let fired = Arc::clone(&fired);
        Box::pin(async move {
            if at != point || fired.swap(true, Ordering::SeqCst) {
                return false;
            }
            let pid = i32::try_from(pid).expect("backend pid");
            let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
                .bind(pid)
                .fetch_one(&admin)
                .await
                .expect("terminate");
            assert!(killed, "pg_terminate_backend({pid}) found no backend");
            // Wait for the backend to exit (synchronisation, not timing:
            // the test asserts nothing about how long this takes).
            loop {
                let alive: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
                        .bind(pid)
                        .fetch_one(&admin)
                        .await
                        .expect("pg_stat_activity");
                if alive == 0 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            false
        })
    });
    (hook, flag)
}

/// The same races with every transaction at REPEATABLE READ and at
/// SERIALIZABLE. There a conditional insert that meets a row committed after
/// the transaction's snapshot fails with 40001 instead of doing nothing, so
/// the store's retry path (roll back, claim again, read the winner) carries
/// the losers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn races_under_stricter_isolation_still_have_one_winner_each() {
    let Some(schema) = Schema::create().await else {
        return;
    };
    for level in ["repeatable%5C%20read", "serializable"] {
        let url = format!(
            "{}%20-c%20default_transaction_isolation%3D{level}",
            schema.url
        );
        let store = PgClaimStore::connect(&url, StoreOptions::default())
            .await
            .expect("connect");
        let isolation: String = sqlx::query_scalar("SHOW transaction_isolation")
            .fetch_one(store.pool())
            .await
            .expect("isolation");
        assert_eq!(isolation, level.replace("%5C%20", " "));
        support::many_races(Arc::new(store), 20, 12).await;
    }
    schema.drop().await;
}

/// The codes the claim treats as a lost race, produced by the server itself:
/// a real deadlock (40P01) and a real serialization failure (40001) are
/// lost races; a unique violation (23505) is not.
#[tokio::test]
async fn lost_race_codes_come_from_the_server() {
    use sqlx::postgres::PgConnection;
    use sqlx::{Connection, Executor};
    use toolgate_store::postgres::is_lost_race;

    let Some(schema) = Schema::create().await else {
        return;
    };
    let connect = || async { PgConnection::connect(&schema.url).await.expect("connect") };
    let code = |e: &sqlx::Error| {
        e.as_database_error()
            .and_then(|d| d.code())
            .map(|c| c.into_owned())
    };
    let mut a = connect().await;
    let mut b = connect().await;
    a.execute("CREATE TABLE scratch (id INT PRIMARY KEY, v INT)")
        .await
        .expect("create");
    a.execute("INSERT INTO scratch VALUES (1, 0), (2, 0)")
        .await
        .expect("rows");

    // Deadlock: each holds one row and asks for the other's.
    a.execute("BEGIN").await.expect("begin");
    b.execute("BEGIN").await.expect("begin");
    a.execute("UPDATE scratch SET v = 1 WHERE id = 1")
        .await
        .expect("a1");
    b.execute("UPDATE scratch SET v = 1 WHERE id = 2")
        .await
        .expect("b2");
    let (ra, rb) = tokio::join!(
        a.execute("UPDATE scratch SET v = 2 WHERE id = 2"),
        b.execute("UPDATE scratch SET v = 2 WHERE id = 1"),
    );
    let victim = [ra.err(), rb.err()]
        .into_iter()
        .flatten()
        .next()
        .expect("one side must be chosen as the deadlock victim");
    assert_eq!(code(&victim).as_deref(), Some("40P01"), "{victim}");
    assert!(is_lost_race(&victim));
    a.execute("ROLLBACK").await.expect("rollback");
    b.execute("ROLLBACK").await.expect("rollback");

    // Serialization failure: a REPEATABLE READ snapshot updates a row that
    // changed after it was taken.
    a.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .expect("begin");
    a.execute("SELECT count(*) FROM scratch")
        .await
        .expect("snapshot");
    b.execute("UPDATE scratch SET v = 5 WHERE id = 1")
        .await
        .expect("concurrent update");
    let stale = a
        .execute("UPDATE scratch SET v = 6 WHERE id = 1")
        .await
        .expect_err("must fail to serialise");
    assert_eq!(code(&stale).as_deref(), Some("40001"), "{stale}");
    assert!(is_lost_race(&stale));
    a.execute("ROLLBACK").await.expect("rollback");

    // Not a race: a plain unique violation.
    let dup = a
        .execute("INSERT INTO scratch VALUES (1, 9)")
        .await
        .expect_err("duplicate");
    assert_eq!(code(&dup).as_deref(), Some("23505"), "{dup}");
    assert!(!is_lost_race(&dup));
    drop((a, b));
    schema.drop().await;
}
