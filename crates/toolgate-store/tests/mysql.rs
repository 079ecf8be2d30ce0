//! The claim store on MySQL/MariaDB. Runs when `TOOLGATE_TEST_MYSQL_URL`
//! is set (CI: `mysql://root@127.0.0.1:3306/test`); skips with a message
//! otherwise, unless `TOOLGATE_REQUIRE_DATABASES=1`.
//!
//! Each test creates its own database (`toolgate_t_<random>`) and points
//! the store at it, so runs never see each other's rows; the database is
//! dropped when the test passes.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::mysql::MySqlPool;
use toolgate::claim::ClaimStore;
use toolgate::claim::conformance::Namespace;
use toolgate_store::StoreOptions;
use toolgate_store::fault::{FaultHook, FaultPoint};
use toolgate_store::mysql::{MySqlClaimStore, sql};

const URL_VAR: &str = "TOOLGATE_TEST_MYSQL_URL";

/// A throwaway database on the test server.
struct Db {
    admin: MySqlPool,
    name: String,
    url: String,
}

impl Db {
    async fn create() -> Option<Self> {
        let base = support::database_url(URL_VAR, "MySQL/MariaDB")?;
        let admin = MySqlPool::connect(&base)
            .await
            .unwrap_or_else(|e| panic!("{URL_VAR} is set but MySQL is unreachable: {e}"));
        let name = format!("toolgate_t_{}", support::hex(&support::random16()));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await
            .expect("create database");
        let url = support::with_database(&base, &name);
        Some(Self { admin, name, url })
    }

    fn url(&self) -> &str {
        &self.url
    }

    async fn connect(&self, options: StoreOptions) -> MySqlClaimStore {
        MySqlClaimStore::connect(&self.url, options)
            .await
            .expect("connect to the test database")
    }

    async fn store(&self) -> MySqlClaimStore {
        self.connect(StoreOptions::default())
            .await
            .with_clock(support::suite_clock)
    }

    async fn drop(self) {
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {}", self.name)))
            .execute(&self.admin)
            .await
            .expect("drop database");
    }
}

/// Review items as migration 0003 makes them, for the grant test.
const APPROVE: &str = "INSERT INTO toolgate_review_items (created_at, kind, proposer, decision, status, operation_key, fingerprint, version_seen, policy_digest, expires_at, consumed_at) VALUES (1, 'pending_approval', 'agent:1', '{}', 'approved', ?, ?, '7', ?, ?, ?)";
const CONSUMED: &str = "SELECT consumed_at, consumed_by FROM toolgate_review_items WHERE id = ?";
const VOTE: &str = "INSERT INTO toolgate_review_votes (item_id, reviewer, verdict, at) VALUES (?, ?, 'approve', 1)";

support::backend_tests!(
    Db,
    MySql,
    conformance: mysql_passes_the_conformance_suite,
    any_store: any_store_picks_mysql_from_the_url_and_passes,
    id: |insert, pool| {
        let done = insert.execute(pool).await.expect("approve");
        i64::try_from(done.last_insert_id()).expect("id")
    },
);
support::server_tests!(Db, MySql);

#[tokio::test]
async fn only_the_operation_key_is_unique() {
    let Some(db) = Db::create().await else {
        return;
    };
    let s = db.store().await;
    let unique: Vec<(String, String)> = sqlx::query_as(
        "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'toolgate_claims' AND NON_UNIQUE = 0",
    )
    .fetch_all(s.pool())
    .await
    .expect("indexes");
    assert_eq!(
        unique,
        vec![("PRIMARY".to_owned(), "operation_key".to_owned())]
    );
    let stuck: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = DATABASE() AND INDEX_NAME = 'toolgate_claims_stuck' AND NON_UNIQUE = 1",
    )
    .fetch_one(s.pool())
    .await
    .expect("stuck index");
    assert_eq!(stuck, 1);
    db.drop().await;
}

/// The MariaDB trap, pinned: sqlx's MySQL driver sets CLIENT_FOUND_ROWS, so
/// the claim's own conditional insert reports one affected row for a new
/// row and for a duplicate alike. The count cannot decide a claim; the
/// holder token read back does (and the conformance race shows it does).
#[tokio::test]
async fn affected_rows_are_one_for_a_new_row_and_for_a_duplicate() {
    let Some(db) = Db::create().await else {
        return;
    };
    let s = db.store().await;
    let ns = Namespace::new(support::random16());
    let key = ns.key(202, 0);
    let mut counts = Vec::new();
    for holder in [[1u8; 16], [2u8; 16]] {
        let done = sqlx::query(sql::INSERT_CLAIM)
            .bind(key.as_bytes().as_slice())
            .bind(support::fingerprint().as_bytes().as_slice())
            .bind("apply_goodwill_credit")
            .bind("{}")
            .bind("{}")
            .bind("7")
            .bind("agent:1")
            .bind(holder.as_slice())
            .bind(2_i64)
            .bind(1_i64)
            .bind("in_process")
            .execute(s.pool())
            .await
            .expect("insert");
        counts.push(done.rows_affected());
    }
    assert_eq!(counts, vec![1, 1], "new row, then duplicate");
    let row = s.fetch(&key).await.expect("fetch").expect("row");
    assert_eq!(
        row.holder.as_bytes(),
        &[1u8; 16],
        "the duplicate changed the row"
    );
    db.drop().await;
}

const RAW_INSERT: &str = "INSERT INTO toolgate_claims (operation_key, fingerprint, tool, \
    arguments, scope, version_seen, proposer, status, holder, lease_expires_at, claimed_at) \
    VALUES (?, ?, 'apply_goodwill_credit', ?, '{}', '7', 'agent:1', 'in_flight', ?, 0, 0)";

#[tokio::test]
async fn the_audit_table_refuses_update_and_delete() {
    let Some(db) = Db::create().await else {
        return;
    };
    let s = db.store().await;
    sqlx::query("INSERT INTO toolgate_audit (at, actor, outcome) VALUES (1, 'a', 'executed')")
        .execute(s.pool())
        .await
        .expect("insert");
    for sql in [
        "UPDATE toolgate_audit SET outcome = 'replayed'",
        "DELETE FROM toolgate_audit",
    ] {
        let r = sqlx::query(sql).execute(s.pool()).await;
        assert!(r.is_err(), "{sql} was allowed");
    }
    let outcome: String = sqlx::query_scalar("SELECT outcome FROM toolgate_audit")
        .fetch_one(s.pool())
        .await
        .expect("select");
    assert_eq!(outcome, "executed");
    db.drop().await;
}

/// A hook that kills the claim's connection once, at `point`, from a
/// second connection, and waits until the server has let it go. The flag
/// says whether it fired, so a test cannot pass without the fault.
fn kill_once(admin: MySqlPool, point: FaultPoint) -> (FaultHook, Arc<AtomicBool>) {
    let fired = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&fired);
    let hook: FaultHook = Arc::new(move |at, pid| {
        let admin = admin.clone();
        let fired = Arc::clone(&fired);
        Box::pin(async move {
            if at != point || fired.swap(true, Ordering::SeqCst) {
                return false;
            }
            // The id is the server's own integer: safe to format in.
            sqlx::query(sqlx::AssertSqlSafe(format!("KILL {pid}")))
                .execute(&admin)
                .await
                .expect("kill");
            // Wait for the connection to go (synchronisation, not timing:
            // the test asserts nothing about how long this takes).
            loop {
                let alive: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = ?",
                )
                .bind(pid)
                .fetch_one(&admin)
                .await
                .expect("processlist");
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

/// The codes the claim treats as a lost race, produced by the server itself:
/// a real deadlock (1213) and a real lock wait timeout (1205) are lost
/// races; a duplicate key (1062) is not.
#[tokio::test]
async fn lost_race_codes_come_from_the_server() {
    use sqlx::mysql::{MySqlConnection, MySqlDatabaseError};
    use sqlx::{Connection, Executor};
    use toolgate_store::mysql::is_lost_race;

    let Some(db) = Db::create().await else {
        return;
    };
    let connect = || async { MySqlConnection::connect(&db.url).await.expect("connect") };
    let number = |e: &sqlx::Error| {
        e.as_database_error()
            .and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>())
            .map(MySqlDatabaseError::number)
    };
    let mut a = connect().await;
    let mut b = connect().await;
    a.execute("CREATE TABLE scratch (id INT PRIMARY KEY, v INT) ENGINE = InnoDB")
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
    assert_eq!(number(&victim), Some(1213), "{victim}");
    assert!(is_lost_race(&victim));
    a.execute("ROLLBACK").await.expect("rollback");
    b.execute("ROLLBACK").await.expect("rollback");

    // Lock wait timeout, shortened for this one session.
    a.execute("BEGIN").await.expect("begin");
    a.execute("UPDATE scratch SET v = 3 WHERE id = 1")
        .await
        .expect("hold");
    b.execute("SET SESSION innodb_lock_wait_timeout = 1")
        .await
        .expect("timeout");
    b.execute("BEGIN").await.expect("begin");
    let waited = b
        .execute("UPDATE scratch SET v = 4 WHERE id = 1")
        .await
        .expect_err("must time out");
    assert_eq!(number(&waited), Some(1205), "{waited}");
    assert!(is_lost_race(&waited));
    a.execute("ROLLBACK").await.expect("rollback");
    b.execute("ROLLBACK").await.expect("rollback");

    // Not a race: a plain duplicate key.
    let dup = a
        .execute("INSERT INTO scratch VALUES (1, 9)")
        .await
        .expect_err("duplicate");
    assert_eq!(number(&dup), Some(1062), "{dup}");
    assert!(!is_lost_race(&dup));
    drop((a, b));
    db.drop().await;
}

/// A principal may be 256 bytes (`MAX_LABEL_BYTES`); MySQL's VARCHAR
/// counts characters, and a column one short turned the longest valid
/// reviewer's sign-in into a store error.
#[tokio::test]
async fn a_principal_of_the_longest_valid_length_signs_in() {
    use toolgate::claim::{MAX_LABEL_BYTES, UnixMillis};
    use toolgate::review::{ReviewSession, ReviewStore, session_digest};
    let Some(db) = Db::create().await else {
        return;
    };
    let store = db.store().await;
    let principal = "r".repeat(MAX_LABEL_BYTES);
    let digest = session_digest("a-session-token");
    let session = ReviewSession {
        principal: principal.clone(),
        csrf: "csrf".to_owned(),
        expires_at: UnixMillis(2_000),
    };
    store
        .open_session(digest, session, UnixMillis(1_000))
        .await
        .expect("open a session");
    let found = store
        .session(digest, UnixMillis(1_500))
        .await
        .expect("read it")
        .expect("unexpired");
    assert_eq!(found.principal, principal);
    db.drop().await;
}
