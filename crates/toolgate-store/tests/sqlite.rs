//! The claim store on SQLite: always runs, on a temporary file.

mod support;

use std::path::PathBuf;
use std::sync::Arc;

use toolgate::claim::conformance::Namespace;
use toolgate::claim::{ClaimStore, MemoryClaimStore};
use toolgate_store::sqlite::SqliteClaimStore;
use toolgate_store::{AnyClaimStore, StoreOptions};

/// A fresh database file under the system temporary directory, removed
/// (with its WAL files) when dropped.
struct TempDb(PathBuf);

impl TempDb {
    fn new() -> Self {
        let name = format!("toolgate-store-{}.db", support::hex(&support::random16()));
        Self(std::env::temp_dir().join(name))
    }

    /// Never `None`: SQLite needs no server (the shape the shared tests
    /// take, `support::backend_tests`).
    async fn create() -> Option<Self> {
        Some(Self::new())
    }

    fn url(&self) -> String {
        format!("sqlite://{}", self.0.display())
    }

    async fn store(&self) -> SqliteClaimStore {
        SqliteClaimStore::connect(&self.url(), StoreOptions::default())
            .await
            .expect("open SQLite")
            .with_clock(support::suite_clock)
    }

    /// Nothing to do before the value is dropped, which removes the files.
    async fn drop(self) {}
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.0.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Review items as migration 0003 makes them, for the grant test.
const APPROVE: &str = "INSERT INTO toolgate_review_items (created_at, kind, proposer, \
    decision, status, operation_key, fingerprint, version_seen, policy_digest, expires_at, \
    consumed_at) VALUES (1, 'pending_approval', 'agent:1', '{}', 'approved', ?, ?, '7', ?, ?, ?) \
    RETURNING id";
const CONSUMED: &str = "SELECT consumed_at, consumed_by FROM toolgate_review_items WHERE id = ?";
const VOTE: &str = "INSERT INTO toolgate_review_votes (item_id, reviewer, verdict, at) VALUES (?, ?, 'approve', 1)";

support::backend_tests!(
    TempDb,
    Sqlite,
    conformance: sqlite_passes_the_conformance_suite,
    any_store: any_store_picks_sqlite_from_the_url_and_passes,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_passes_the_conformance_suite() {
    // The reference implementation lives in the core, which links no
    // runtime; its conformance run lives here.
    support::conformance(Arc::new(MemoryClaimStore::new())).await;
}

#[tokio::test]
async fn the_database_is_a_wal_file_and_reopening_keeps_claims() {
    let db = TempDb::new();
    let ns = Namespace::new(support::random16());
    let (key, req) = support::request_for(&ns, 1);
    {
        let s = db.store().await;
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(s.pool())
            .await
            .expect("pragma");
        assert_eq!(mode, "wal");
        support::expect_acquired(s.claim(req).await.expect("claim"));
        s.pool().close().await;
    }
    // Reopening runs the migrations again (a no-op) and sees the claim.
    let s = db.store().await;
    let row = s.fetch(&key).await.expect("fetch").expect("row survives");
    assert_eq!(row.key, key);
}

#[tokio::test]
async fn only_the_operation_key_is_unique() {
    let db = TempDb::new();
    let s = db.store().await;
    let unique: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM pragma_index_list('toolgate_claims') WHERE \"unique\" = 1",
    )
    .fetch_all(s.pool())
    .await
    .expect("index list");
    assert_eq!(unique.len(), 1, "{unique:?}");
    let cols: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM pragma_index_info((SELECT name FROM pragma_index_list('toolgate_claims') WHERE \"unique\" = 1))",
    )
    .fetch_all(s.pool())
    .await
    .expect("index info");
    assert_eq!(cols, vec!["operation_key".to_owned()]);
    let stuck: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pragma_index_list('toolgate_claims') WHERE name = 'toolgate_claims_stuck' AND \"unique\" = 0",
    )
    .fetch_one(s.pool())
    .await
    .expect("stuck index");
    assert_eq!(stuck, 1);
}

const RAW_INSERT: &str = "INSERT INTO toolgate_claims (operation_key, fingerprint, tool, \
    arguments, scope, version_seen, proposer, status, holder, lease_expires_at, claimed_at) \
    VALUES (?, ?, 'apply_goodwill_credit', ?, '{}', '7', 'agent:1', 'in_flight', ?, 0, 0)";

/// Migration 0002: a row written without the `executor` column (as every
/// row before it was) reads as `in_process`; an executor kind toolgate does
/// not know is a corrupt row, never a record.
#[tokio::test]
async fn the_executor_column_defaults_to_in_process_and_rejects_unknown_kinds() {
    use toolgate::claim::{ClaimStore, ExecutorKind};
    let db = TempDb::new();
    let s = db.store().await;
    let ns = Namespace::new(support::random16());
    let old = ns.key(205, 0);
    sqlx::query(RAW_INSERT)
        .bind(old.as_bytes().as_slice())
        .bind(support::fingerprint().as_bytes().as_slice())
        .bind("{\"amount_minor\":1}")
        .bind([5u8; 16].as_slice())
        .execute(s.pool())
        .await
        .expect("raw insert");
    let row = s.fetch(&old).await.expect("fetch").expect("row");
    assert_eq!(row.executor, ExecutorKind::InProcess);

    let odd = ns.key(205, 1);
    sqlx::query(RAW_INSERT)
        .bind(odd.as_bytes().as_slice())
        .bind(support::fingerprint().as_bytes().as_slice())
        .bind("{\"amount_minor\":1}")
        .bind([6u8; 16].as_slice())
        .execute(s.pool())
        .await
        .expect("raw insert");
    sqlx::query("UPDATE toolgate_claims SET executor = 'remote' WHERE operation_key = ?")
        .bind(odd.as_bytes().as_slice())
        .execute(s.pool())
        .await
        .expect("update");
    support::corrupt_row_is_never_shown(&s, &ns, odd).await;
    support::stuck_listing_reports_corrupt(&s, odd.as_bytes(), "executor").await;
}

#[tokio::test]
async fn corrupt_rows_are_errors_never_records() {
    let db = TempDb::new();
    let s = db.store().await;
    let ns = Namespace::new(support::random16());

    // Invalid JSON in the arguments, under a valid key.
    let key = ns.key(201, 0);
    sqlx::query(RAW_INSERT)
        .bind(key.as_bytes().as_slice())
        .bind(support::fingerprint().as_bytes().as_slice())
        .bind("{\"amount_minor\":")
        .bind([7u8; 16].as_slice())
        .execute(s.pool())
        .await
        .expect("raw insert");
    support::corrupt_row_is_never_shown(&s, &ns, key).await;
    support::stuck_listing_reports_corrupt(&s, key.as_bytes(), "arguments").await;

    // Duplicate keys inside stored arguments: the strict decoder's rule.
    let key = ns.key(201, 1);
    sqlx::query(RAW_INSERT)
        .bind(key.as_bytes().as_slice())
        .bind(support::fingerprint().as_bytes().as_slice())
        .bind(r#"{"amount_minor":1500,"amount_minor":99999}"#)
        .bind([7u8; 16].as_slice())
        .execute(s.pool())
        .await
        .expect("raw insert");
    support::corrupt_row_is_never_shown(&s, &ns, key).await;

    // A key of the wrong length: only a listing can reach it.
    let short = [9u8; 31];
    sqlx::query(RAW_INSERT)
        .bind(short.as_slice())
        .bind(support::fingerprint().as_bytes().as_slice())
        .bind("{}")
        .bind([7u8; 16].as_slice())
        .execute(s.pool())
        .await
        .expect("raw insert");
    support::stuck_listing_reports_corrupt(&s, &short, "operation_key").await;
}

#[tokio::test]
async fn the_audit_table_refuses_update_and_delete() {
    let db = TempDb::new();
    let s = db.store().await;
    sqlx::query("INSERT INTO toolgate_audit (at, actor, outcome) VALUES (1, 'a', 'executed')")
        .execute(s.pool())
        .await
        .expect("insert");
    let upd = sqlx::query("UPDATE toolgate_audit SET outcome = 'replayed'")
        .execute(s.pool())
        .await;
    assert!(upd.is_err(), "update was allowed");
    let del = sqlx::query("DELETE FROM toolgate_audit")
        .execute(s.pool())
        .await;
    assert!(del.is_err(), "delete was allowed");
    let outcome: String = sqlx::query_scalar("SELECT outcome FROM toolgate_audit")
        .fetch_one(s.pool())
        .await
        .expect("select");
    assert_eq!(outcome, "executed");
}

#[tokio::test]
async fn a_bad_url_is_a_config_error() {
    for url in ["redis://localhost", "no-scheme", ""] {
        let err = AnyClaimStore::connect(url).await.err().expect("must fail");
        assert_eq!(
            err.kind(),
            toolgate::claim::StoreErrorKind::Config,
            "{url}: {err}"
        );
    }
}

/// The driver's error that made the store fail is the store error's
/// source, for a log or a caller to read its code: sqlx's when the file
/// cannot be opened, rusqlite's when a claim lookup's statement fails.
#[tokio::test]
async fn a_store_error_keeps_the_drivers_error_as_its_source() {
    use std::error::Error as _;
    use toolgate::claim::{OperationKey, StoreErrorKind};
    use toolgate_store::sqlite::rusqlite;

    let dir = std::env::temp_dir().join(format!(
        "toolgate-store-missing-{}",
        support::hex(&support::random16())
    ));
    let url = format!("sqlite://{}", dir.join("claims.db").display());
    let Err(e) = SqliteClaimStore::connect(&url, StoreOptions::default()).await else {
        panic!("a file in a missing directory cannot be opened");
    };
    let cause = e.source().expect("the driver's error");
    let sqlx_error = cause.downcast_ref::<sqlx::Error>().expect("sqlx's error");
    assert!(
        matches!(sqlx_error, sqlx::Error::Database(_)),
        "{e}: {sqlx_error:?}"
    );

    let db = TempDb::new();
    let store = db.store().await;
    sqlx::query("ALTER TABLE toolgate_claims RENAME TO toolgate_claims_moved")
        .execute(store.pool())
        .await
        .expect("rename");
    let e = store
        .fetch(&OperationKey::from_bytes([7; OperationKey::LEN]))
        .await
        .expect_err("no claims table");
    assert_eq!(e.kind(), StoreErrorKind::Database, "{e}");
    let cause = e.source().expect("the driver's error");
    let rusqlite_error = cause
        .downcast_ref::<rusqlite::Error>()
        .expect("rusqlite's error");
    assert!(
        rusqlite_error.to_string().contains("no such table"),
        "{rusqlite_error:?}"
    );
}

/// SQLite's lost race, produced by SQLite itself: a second writer with no
/// busy timeout gets SQLITE_BUSY; a constraint violation is not a race.
#[tokio::test]
async fn lost_race_codes_come_from_sqlite() {
    use toolgate_store::sqlite::is_lost_race;
    use toolgate_store::sqlite::rusqlite::Connection;

    let db = TempDb::new();
    let _store = db.store().await;
    let a = Connection::open(&db.0).expect("a");
    let b = Connection::open(&db.0).expect("b");
    b.busy_timeout(std::time::Duration::ZERO).expect("no wait");
    a.execute_batch("BEGIN IMMEDIATE")
        .expect("a holds the write lock");
    let busy = b.execute_batch("BEGIN IMMEDIATE").expect_err("busy");
    assert!(is_lost_race(&busy), "{busy}");
    a.execute_batch("ROLLBACK").expect("rollback");
    let dup = a
        .execute_batch("INSERT INTO toolgate_audit (id, at, actor, outcome) VALUES (1, 1, 'a', 'x'), (1, 1, 'a', 'x')")
        .expect_err("duplicate id");
    assert!(!is_lost_race(&dup), "{dup}");
}

async fn audit_rows(store: &SqliteClaimStore, actor: &str) -> i64 {
    sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM toolgate_audit WHERE actor = ?")
        .bind(actor.to_owned())
        .fetch_one(store.pool())
        .await
        .expect("count")
}

/// Group commit: a unit that wrote and then failed leaves nothing behind,
/// the writer carries on, and what it acknowledges is visible to readers
/// (other connections) at once.
#[tokio::test]
async fn group_commit_rolls_a_failed_unit_back_and_carries_on() {
    use toolgate_store::sqlite::WriteError;

    let db = TempDb::new();
    let store = db.store().await;
    let writer = store.writer().clone();
    let failed = writer
        .write(|conn| {
            conn.execute(
                "INSERT INTO toolgate_audit (at, actor, outcome) VALUES (1, 'gc-test', 'x')",
                [],
            )?;
            conn.execute("INSERT INTO no_such_table VALUES (1)", [])?;
            Ok(())
        })
        .await;
    assert!(matches!(failed, Err(WriteError::Unit(_))), "{failed:?}");
    assert_eq!(
        audit_rows(&store, "gc-test").await,
        0,
        "the failed unit's insert remains"
    );

    writer
        .write(|conn| {
            conn.execute(
                "INSERT INTO toolgate_audit (at, actor, outcome) VALUES (2, 'gc-test', 'y')",
                [],
            )?;
            Ok(())
        })
        .await
        .expect("the writer carries on after a failed unit");
    assert_eq!(audit_rows(&store, "gc-test").await, 1);
}

/// Many writers at once share batches: every unit is answered, and every
/// acknowledged row is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_commit_answers_every_unit_of_concurrent_batches() {
    let db = TempDb::new();
    let store = db.store().await;
    let mut tasks = Vec::new();
    for i in 0..300_i64 {
        let writer = store.writer().clone();
        tasks.push(tokio::spawn(async move {
            writer
                .write(move |conn| {
                    conn.execute(
                        "INSERT INTO toolgate_audit (at, actor, outcome) VALUES (?, 'gc-many', 'x')",
                        [i],
                    )
                })
                .await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.expect("task").expect("write"), 1);
    }
    assert_eq!(audit_rows(&store, "gc-many").await, 300);
}

/// A unit that panics fails like a unit whose statement failed: its batch
/// rolls back, and the writer (every later write) carries on.
#[tokio::test]
async fn group_commit_survives_a_panicking_unit() {
    use toolgate_store::sqlite::WriteError;

    let db = TempDb::new();
    let store = db.store().await;
    let writer = store.writer().clone();
    let panicked = writer
        .write(|conn| -> Result<(), _> {
            conn.execute(
                "INSERT INTO toolgate_audit (at, actor, outcome) VALUES (1, 'gc-panic', 'x')",
                [],
            )?;
            panic!("a bug in a unit");
        })
        .await;
    assert!(matches!(panicked, Err(WriteError::Unit(_))), "{panicked:?}");
    assert_eq!(audit_rows(&store, "gc-panic").await, 0);
    writer
        .write(|conn| {
            conn.execute(
                "INSERT INTO toolgate_audit (at, actor, outcome) VALUES (2, 'gc-panic', 'y')",
                [],
            )
        })
        .await
        .expect("the writer outlives a panicking unit");
    assert_eq!(audit_rows(&store, "gc-panic").await, 1);
}

/// The writer opens the database file itself, so an in-memory database
/// (each connection its own) is refused with a configuration error rather
/// than silently split in two.
#[tokio::test]
async fn an_in_memory_database_is_refused() {
    let err = SqliteClaimStore::connect("sqlite::memory:", StoreOptions::default())
        .await
        .err()
        .expect("an in-memory database must be refused");
    assert_eq!(err.kind(), toolgate::claim::StoreErrorKind::Config, "{err}");
    assert!(err.to_string().contains("database file"), "{err}");
}

#[tokio::test]
async fn ready_answers_while_the_store_works_and_fails_once_its_pool_is_closed() {
    let db = TempDb::new();
    let s = db.store().await;
    support::ready_until_closed(&s, async || {
        assert!(s.writer().is_running(), "the writer thread runs");
        // The pool the listings and the audit trail use: closed, not ready.
        s.pool().close().await;
    })
    .await;
}

/// A review item whose kind or reason names no code is a corrupt row:
/// reading it alone or in a listing is an error, never an item. So is one
/// whose decision does not read as a kept decision (its own read; a
/// listing reads the summary column).
#[tokio::test]
async fn a_review_item_with_an_unknown_kind_or_reason_is_corrupt() {
    use toolgate::claim::{StoreErrorKind, UnixMillis};
    use toolgate::review::{ItemDecision, ListQuery, ReviewStore};
    const ITEM: &str = "INSERT INTO toolgate_review_items (created_at, kind, reason, proposer, \
        decision, status) VALUES (1, ?, ?, 'agent:1', ?, 'open') RETURNING id";
    const KEPT: &str = r#"{"outcome":"conflict","reason":null,"tool":null,"operation_key":null,"message":null,"truncated":true}"#;
    let db = TempDb::new();
    let s = db.store().await;
    // The decision text every case but the last keeps is a good one.
    let good: i64 = sqlx::query_scalar(ITEM)
        .bind("conflict")
        .bind(None::<&str>)
        .bind(KEPT)
        .fetch_one(s.pool())
        .await
        .expect("raw insert");
    let item = s
        .item(good, UnixMillis(2))
        .await
        .expect("reads")
        .expect("there");
    assert!(
        matches!(item.decision, ItemDecision::Summary(_)),
        "{item:?}"
    );
    let bad_decision = r#"{"outcome":"conflict","permit":{"holder":"x"}}"#;
    let id: i64 = sqlx::query_scalar(ITEM)
        .bind("conflict")
        .bind(None::<&str>)
        .bind(bad_decision)
        .fetch_one(s.pool())
        .await
        .expect("raw insert");
    let err = s
        .item(id, UnixMillis(2))
        .await
        .expect_err("an item with a corrupt decision was returned");
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
    for id in [good, id] {
        sqlx::query("DELETE FROM toolgate_review_items WHERE id = ?")
            .bind(id)
            .execute(s.pool())
            .await
            .expect("raw delete");
    }
    for (kind, reason) in [("bogus", None), ("conflict", Some("no_such_reason"))] {
        let id: i64 = sqlx::query_scalar(ITEM)
            .bind(kind)
            .bind(reason)
            .bind(KEPT)
            .fetch_one(s.pool())
            .await
            .expect("raw insert");
        let err = s
            .item(id, UnixMillis(2))
            .await
            .expect_err("corrupt item was returned");
        assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
        let query = ListQuery {
            limit: 10,
            ..ListQuery::default()
        };
        let err = s
            .list_items(&query, UnixMillis(2))
            .await
            .expect_err("corrupt item was listed");
        assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
        sqlx::query("DELETE FROM toolgate_review_items WHERE id = ?")
            .bind(id)
            .execute(s.pool())
            .await
            .expect("raw delete");
    }
}
