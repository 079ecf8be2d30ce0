//! Shared by the per-database test targets.

#![allow(dead_code, reason = "each test target uses a different subset")]

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use toolgate::claim::conformance::{self, BoxFuture, ClaimResult, Namespace};
use toolgate::claim::{
    ClaimRequest, ClaimStore, CorruptRow, Fingerprint, OperationKey, RawClaim, StoreError,
    StoreErrorKind, UnixMillis,
};

/// Set to `1` (CI does) to turn a missing or unreachable database into a
/// failure instead of a skip.
pub const REQUIRE: &str = "TOOLGATE_REQUIRE_DATABASES";

pub fn required() -> bool {
    std::env::var(REQUIRE).is_ok_and(|v| v == "1")
}

/// The database URL in `var`, or `None` (after saying so) when it is unset
/// and databases are not required.
pub fn database_url(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                !required(),
                "{REQUIRE}=1 but {var} is not set: the {what} tests cannot run"
            );
            // Straight to stderr, past the test harness's output capture,
            // so the skip is visible in a normal `cargo test` run.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {var} is not set, so this {what} test did not run"
            );
            None
        }
    }
}

/// 16 random bytes, to name this run's schema and namespace its keys.
pub fn random16() -> [u8; 16] {
    *toolgate_store::fresh_holder()
        .expect("random number generator")
        .as_bytes()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs each attempt of the race on its own tokio task.
pub fn spawn_tokio(fut: BoxFuture<ClaimResult>) -> BoxFuture<ClaimResult> {
    Box::pin(async move {
        match tokio::spawn(fut).await {
            Ok(r) => r,
            Err(e) => Err(StoreError::new(
                StoreErrorKind::Invariant,
                format!("task failed: {e}"),
            )),
        }
    })
}

/// The whole conformance suite, with a race of 16 attempts on parallel
/// tasks, then a second race with the attempts interleaved on one task.
pub async fn conformance<S: ClaimStore + 'static>(store: Arc<S>) {
    let ns = Namespace::new(random16());
    conformance::run_all(Arc::clone(&store), &ns, spawn_tokio, 16).await;
    let ns = Namespace::new(random16());
    conformance::concurrent_claims_one_winner(store, &ns, |f| f, 16).await;
}

/// A request for key `n` of the store tests' own case number (200).
pub fn request_for(ns: &Namespace, n: u32) -> (OperationKey, ClaimRequest) {
    let key = ns.key(200, n);
    let req = conformance::request(ns, key, 1, 1500, conformance::T0);
    (key, req)
}

pub fn fingerprint() -> Fingerprint {
    conformance::fingerprint(1)
}

/// After the row for `key` has been corrupted: reading it is an error,
/// claiming it is an error, and neither shows the row.
pub async fn corrupt_row_is_never_shown<S: ClaimStore>(
    store: &S,
    ns: &Namespace,
    key: OperationKey,
) {
    let err = store
        .fetch(&key)
        .await
        .expect_err("corrupt row was returned");
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
    let req = conformance::request(ns, key, 1, 1500, conformance::T0);
    let err = store.claim(req).await.expect_err("corrupt row was judged");
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
}

/// A stuck listing reports a corrupt row by its raw key, not as a record.
pub async fn stuck_listing_reports_corrupt<S: ClaimStore>(store: &S, raw_key: &[u8], field: &str) {
    let now = UnixMillis(i64::MAX);
    let entries = store.list_stuck(now, 10_000).await.expect("list_stuck");
    let found: Vec<&CorruptRow> = entries
        .iter()
        .filter_map(|e| e.as_ref().err())
        .filter(|c| c.raw_key == raw_key)
        .collect();
    assert_eq!(found.len(), 1, "corrupt row not reported: {entries:?}");
    assert_eq!(found[0].problem.field(), field);
}

pub fn expect_acquired(raw: RawClaim) -> toolgate::claim::Lease {
    match raw {
        RawClaim::Acquired(lease) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// A hook that reports the first successful COMMIT as failed.
pub fn fail_commit_once() -> (toolgate_store::fault::FaultHook, Arc<AtomicBool>) {
    use toolgate_store::fault::FaultPoint;
    let fired = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&fired);
    let hook: toolgate_store::fault::FaultHook = Arc::new(move |at, _| {
        let fail = at == FaultPoint::AfterCommit && !fired.swap(true, Ordering::SeqCst);
        Box::pin(async move { fail })
    });
    (hook, flag)
}

/// A hook that reports the `n`th successful COMMIT (counting from 1) as
/// failed.
pub fn fail_commit_number(n: usize) -> (toolgate_store::fault::FaultHook, Arc<AtomicBool>) {
    use std::sync::atomic::AtomicUsize;
    use toolgate_store::fault::FaultPoint;
    let fired = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&fired);
    let seen = AtomicUsize::new(0);
    let hook: toolgate_store::fault::FaultHook = Arc::new(move |at, _| {
        let fail = at == FaultPoint::AfterCommit && seen.fetch_add(1, Ordering::SeqCst) + 1 == n;
        if fail {
            fired.store(true, Ordering::SeqCst);
        }
        Box::pin(async move { fail })
    });
    (hook, flag)
}

/// An application write that writes nothing and says it applied.
#[derive(Debug)]
struct Applies;

impl toolgate_store::StoreWrite for Applies {
    fn postgres<'c>(&'c self, _: &'c mut sqlx::PgConnection) -> toolgate_store::WriteFuture<'c> {
        Box::pin(async { Ok(true) })
    }
    fn mysql<'c>(&'c self, _: &'c mut sqlx::MySqlConnection) -> toolgate_store::WriteFuture<'c> {
        Box::pin(async { Ok(true) })
    }
    fn sqlite(
        &self,
        _: &toolgate_store::sqlite::rusqlite::Connection,
    ) -> Result<bool, toolgate_store::sqlite::rusqlite::Error> {
        Ok(true)
    }
}

/// A write and its completion committed, but the store was told the
/// COMMIT failed (the hook fails the second COMMIT; the claim's is the
/// first): it must read the claim back, find its own completion with its
/// receipt, and answer `Recorded`, with the audit entry there once; never
/// run the write again.
pub async fn lost_write_commit_ack_is_read_back(
    store: &toolgate_store::AnyClaimStore,
    fired: &AtomicBool,
) {
    use toolgate::pipeline::AppliedCompletion;
    use toolgate_store::WriteCompleted;

    let ns = Namespace::new(random16());
    let (key, req) = request_for(&ns, 4);
    let fingerprint = *req.fingerprint();
    let lease = expect_acquired(store.claim(req).await.expect("claim"));
    assert!(
        !fired.load(Ordering::SeqCst),
        "the claim's COMMIT was failed"
    );
    let entry = toolgate::claim::AuditEntry::new(
        UnixMillis(conformance::T0.0 + 1),
        "agent-1".into(),
        Some("apply_credit".into()),
        "executed".into(),
        None,
        Some(key),
        Some(fingerprint),
    )
    .expect("entry");
    let completion =
        AppliedCompletion::new(key, lease.holder, UnixMillis(conformance::T0.0 + 1), entry);
    let receipt = toolgate::claim::JsonText::result(r#"{"applied":true}"#.into()).expect("receipt");
    let done = store
        .write_and_complete(Arc::new(Applies), &receipt, &completion)
        .await
        .expect("read back");
    assert!(fired.load(Ordering::SeqCst), "the fault never fired");
    assert_eq!(done, WriteCompleted::Recorded);
    let row = store.fetch(&key).await.expect("fetch").expect("row");
    assert!(row.completed_by(&lease.holder, &receipt), "{row:?}");
    let trail = store.audit_trail(&key, 10).await.expect("trail");
    let outcomes: Vec<&str> = trail.iter().map(|e| e.outcome()).collect();
    assert_eq!(outcomes, ["executed"]);
}

/// The claim committed but the store was told it failed: it must read the
/// row back with the same holder token, find its own token and report the
/// win — neither a false loss (the operation would then be stuck with no
/// executor) nor a blind retry.
pub async fn lost_commit_ack_is_read_back<S: ClaimStore>(store: &S, fired: &AtomicBool) {
    let ns = Namespace::new(random16());
    let (key, req) = request_for(&ns, 3);
    let holder = *req.holder();
    let lease = expect_acquired(store.claim(req).await.expect("claim"));
    assert!(fired.load(Ordering::SeqCst), "the fault never fired");
    assert_eq!(lease.holder, holder);
    let row = store.fetch(&key).await.expect("fetch").expect("row");
    assert_eq!(row.holder, holder);
    // A second attempt now sees the first as in flight.
    let (_, again) = request_for(&ns, 3);
    match store.claim(again).await.expect("claim") {
        RawClaim::InFlight(r) => assert_eq!(r.holder, holder),
        other => panic!("expected InFlight, got {other:?}"),
    }
}

/// Many races at once: `keys` operations, `workers` attempts on each, all
/// in flight together on parallel tasks (so attempts on different keys
/// contend for the same index pages and, on MySQL, gap locks). Exactly one
/// attempt per key wins and every other one sees that winner in flight.
pub async fn many_races<S: ClaimStore + 'static>(store: Arc<S>, keys: u32, workers: u32) {
    let ns = Namespace::new(random16());
    let mut tasks = Vec::new();
    for k in 0..keys {
        for w in 0..workers {
            let key = ns.key(203, k);
            let req = conformance::request(&ns, key, 1, 100 + w, conformance::T0);
            let store = Arc::clone(&store);
            tasks.push((k, tokio::spawn(async move { store.claim(req).await })));
        }
    }
    let mut winners = vec![Vec::new(); usize::try_from(keys).expect("keys")];
    let mut losers = vec![0u32; winners.len()];
    for (k, task) in tasks {
        let i = usize::try_from(k).expect("index");
        match task.await.expect("task").expect("claim") {
            RawClaim::Acquired(lease) => winners[i].push(lease.holder),
            RawClaim::InFlight(row) => {
                losers[i] += 1;
                assert_eq!(row.key, ns.key(203, k));
            }
            other => panic!("key {k}: unexpected {other:?}"),
        }
    }
    for (k, won) in winners.iter().enumerate() {
        assert_eq!(won.len(), 1, "key {k}: winners {won:?}");
        assert_eq!(losers[k], workers - 1, "key {k}");
        let key = ns.key(203, u32::try_from(k).expect("key"));
        let row = store.fetch(&key).await.expect("fetch").expect("row");
        assert_eq!(
            row.holder, won[0],
            "key {k}: stored holder is not the winner"
        );
    }
}

/// The clock the stores under test read: the epoch. The conformance suite's
/// times are synthetic ([`conformance::T0`] onwards) and an attempt's time
/// is the later of the request's and the clock's, so the suite's times
/// hold whatever the wall clock says.
pub fn suite_clock() -> UnixMillis {
    UnixMillis(0)
}

/// A minute after the request's time: the store's clock when a request
/// waited before its attempt.
pub fn a_minute_late() -> UnixMillis {
    conformance::T0.plus_millis(60_000)
}

/// A request made at T0 and attempted a minute later (the store's clock,
/// [`a_minute_late`]): the lease is counted from the attempt, not from the
/// request, so it is not born half spent (or past, for a short lease).
pub async fn lease_counts_from_the_attempt<S: ClaimStore>(store: &S) {
    let ns = Namespace::new(random16());
    let (key, req) = request_for(&ns, 5);
    let lease = expect_acquired(store.claim(req).await.expect("claim"));
    let attempted = a_minute_late();
    let expected =
        attempted.plus_millis(i64::try_from(conformance::LEASE.as_millis()).expect("lease"));
    assert_eq!(
        lease.expires_at, expected,
        "the lease was not counted from the attempt"
    );
    let row = store.fetch(&key).await.expect("fetch").expect("row");
    assert_eq!(row.claimed_at, attempted);
    assert_eq!(row.lease_expires_at, expected);
}

/// A clock that moves an hour on at every reading: every read-back finds
/// the attempt's own lease already past.
pub fn hour_per_reading(tick: &std::sync::atomic::AtomicI64) -> UnixMillis {
    conformance::T0.plus_millis(tick.fetch_add(3_600_000, Ordering::SeqCst))
}

/// Read back with its lease already past, an attempt is refused and rolled
/// back, never won: with a clock that never lets a lease live to its
/// read-back, the claim ends in contention and leaves no row.
pub async fn a_lease_past_at_read_back_is_refused<S: ClaimStore>(store: &S) {
    let ns = Namespace::new(random16());
    let (key, req) = request_for(&ns, 6);
    let err = store
        .claim(req)
        .await
        .expect_err("a claim whose lease was past at its read-back was won");
    assert_eq!(err.kind(), StoreErrorKind::Contention, "{err}");
    assert_eq!(
        store.fetch(&key).await.expect("fetch"),
        None,
        "the refused claim left a row"
    );
}

/// The policy digest the grant tests approve under.
pub const DIGEST: &str = "digest-1";

/// An approval is consumed in the claim's own transaction (docs/design.md
/// §14): a usable grant is used up by the claim that wins; a grant bound to
/// another key, expired, already used or given under another policy digest
/// answers `GrantUnusable` and leaves no claim row (the claim's insert rolls
/// back with it). A grant serves only its proposer: a claim by another
/// principal, by the proposer through a key that did not name them (`via`),
/// or by a principal who voted on the item, is refused in the same way.
/// `approve(key, expires_at, consumed_at)` inserts an approved review item
/// proposed by `agent:1` (no `via`), bound to `key`, fingerprint 1 and
/// version "7" under [`DIGEST`] and returns its id; `consumed(id)` reads
/// its `consumed_at` and `consumed_by`; `vote(id, reviewer)` writes an
/// approve vote row as a store that let it in would.
pub async fn grants_are_used_in_the_claims_transaction<S: ClaimStore>(
    store: &S,
    approve: impl AsyncFn(OperationKey, i64, Option<i64>) -> i64,
    consumed: impl AsyncFn(i64) -> (Option<i64>, Option<String>),
    vote: impl AsyncFn(i64, &str),
) {
    use toolgate::claim::GrantUse;
    let ns = Namespace::new(random16());
    let t0 = conformance::T0;
    let later = t0.plus_millis(3_600_000).0;
    let grant = |item: i64, digest: &str| GrantUse {
        item,
        policy_digest: digest.to_owned(),
    };
    let claim = async |key: OperationKey, g: GrantUse| {
        let req = conformance::request(&ns, key, 1, 1500, t0).with_grant(g);
        store.claim(req).await.expect("claim")
    };
    let no_row = async |key: OperationKey, what: &str| {
        assert_eq!(
            store.fetch(&key).await.expect("fetch"),
            None,
            "{what}: a claim row remains"
        );
    };

    // Usable: the claim wins and the grant is used up at the claim's time.
    let key = ns.key(204, 0);
    let item = approve(key, later, None).await;
    expect_acquired(claim(key, grant(item, DIGEST)).await);
    assert_eq!(
        consumed(item).await,
        (Some(t0.0), Some("agent:1".to_owned())),
        "the grant was not used up by its proposer"
    );

    // The same grant again, for another operation: unusable, nothing written.
    let other = ns.key(204, 1);
    match claim(other, grant(item, DIGEST)).await {
        RawClaim::GrantUnusable => {}
        got => panic!("a used grant unlocked another claim: {got:?}"),
    }
    no_row(other, "used grant").await;

    // Expired at the claim's time.
    let key = ns.key(204, 2);
    let expired = approve(key, t0.0, None).await;
    match claim(key, grant(expired, DIGEST)).await {
        RawClaim::GrantUnusable => {}
        got => panic!("an expired grant was used: {got:?}"),
    }
    no_row(key, "expired grant").await;
    assert_eq!(
        consumed(expired).await.0,
        None,
        "an expired grant was marked used"
    );

    // Already used by someone else.
    let key = ns.key(204, 3);
    let used = approve(key, later, Some(t0.0 - 1)).await;
    match claim(key, grant(used, DIGEST)).await {
        RawClaim::GrantUnusable => {}
        got => panic!("a consumed grant was used again: {got:?}"),
    }
    no_row(key, "consumed grant").await;

    // Given under another policy.
    let key = ns.key(204, 4);
    let item = approve(key, later, None).await;
    match claim(key, grant(item, "another-digest")).await {
        RawClaim::GrantUnusable => {}
        got => panic!("a grant under another policy digest was used: {got:?}"),
    }
    no_row(key, "other digest").await;
    assert_eq!(consumed(item).await.0, None);
    // The same grant with its own digest still works afterwards.
    expect_acquired(claim(key, grant(item, DIGEST)).await);

    // Another principal sending the same proposal, or the proposer through
    // a key acting for them: unusable, nothing written, the grant intact.
    let key = ns.key(204, 5);
    let item = approve(key, later, None).await;
    let by = |proposer: &str| {
        toolgate::claim::ProposalRecord::new(
            "refund_order".into(),
            r#"{"amount_minor":1500,"reason_code":"late_delivery"}"#.into(),
            r#"{"customer":"c-1","order":"o-9"}"#.into(),
            "7".into(),
            proposer.into(),
        )
        .expect("proposal")
    };
    let as_other = |proposer: &str, via: Option<&str>| {
        toolgate::claim::ClaimRequest::for_testing(
            key,
            conformance::fingerprint(1),
            by(proposer),
            ns.holder(),
            t0,
            conformance::LEASE,
        )
        .via_for_testing(via.map(str::to_owned))
        .with_grant(grant(item, DIGEST))
    };
    for (who, via) in [
        ("agent:2", None),
        ("agent:1", Some("svc")),
        ("reviewer", None),
    ] {
        match store.claim(as_other(who, via)).await.expect("claim") {
            RawClaim::GrantUnusable => {}
            got => panic!("{who} via {via:?} used agent:1's grant: {got:?}"),
        }
        no_row(key, "another principal's grant").await;
    }
    assert_eq!(
        consumed(item).await.0,
        None,
        "a refused claim used the grant"
    );

    // A principal who voted on the item never uses its grant, even as its
    // proposer: the claim checks the votes itself.
    vote(item, "agent:1").await;
    match claim(key, grant(item, DIGEST)).await {
        RawClaim::GrantUnusable => {}
        got => panic!("a voter used the grant: {got:?}"),
    }
    no_row(key, "a voter's grant").await;
    // Without that vote, the proposer uses it.
    let key = ns.key(204, 6);
    let item = approve(key, later, None).await;
    vote(item, "reviewer").await;
    expect_acquired(claim(key, grant(item, DIGEST)).await);
}

/// A completion checks the lease at the store's clock, not only at the
/// caller's time: a holder passing the time its decision started, after
/// the store's clock has passed the lease's end, gets `Reconcile`, and the
/// claim stays in flight for reconciliation. `set` moves the store's clock.
pub async fn completion_checks_the_lease_at_the_stores_clock<S: ClaimStore>(
    store: &S,
    set: impl Fn(UnixMillis),
) {
    let ns = Namespace::new(random16());
    let t0 = conformance::T0;
    set(t0);
    let (key, req) = request_for(&ns, 7);
    let lease = expect_acquired(store.claim(req).await.expect("claim"));
    set(lease.expires_at.plus_millis(1));
    let receipt = toolgate::claim::JsonText::result("{}".into()).expect("json");
    let completion = conformance::executed_completion(key, lease.holder, receipt, t0);
    let done = store.complete(completion).await.expect("complete");
    assert_eq!(
        done,
        toolgate::claim::Completion::Reconcile,
        "completed past the lease"
    );
    let row = store.fetch(&key).await.expect("fetch").expect("row");
    assert_eq!(row.status, toolgate::claim::ClaimStatus::InFlight);
    assert!(store.audit_trail(&key, 10).await.expect("trail").is_empty());
}

/// A hook that records the connection id of every claim transaction, at
/// the conditional insert.
pub fn record_claim_connections() -> (
    toolgate_store::fault::FaultHook,
    Arc<std::sync::Mutex<Vec<i64>>>,
) {
    use toolgate_store::fault::FaultPoint;
    let ids = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&ids);
    let hook: toolgate_store::fault::FaultHook = Arc::new(move |at, id| {
        if at == FaultPoint::AfterInsert {
            seen.lock().unwrap().push(id);
        }
        Box::pin(async { false })
    });
    (hook, ids)
}

/// The server's id of the connection `session` lends, read on it and kept
/// there for the claim.
async fn held_connection_id(session: &mut toolgate_store::Session<'_>) -> i64 {
    use toolgate_store::SessionConnection;
    match session.connection().await.expect("a connection to hold") {
        SessionConnection::Postgres(mut conn) => {
            let id: i64 = sqlx::query_scalar("SELECT CAST(pg_backend_pid() AS BIGINT)")
                .fetch_one(&mut *conn)
                .await
                .expect("pg_backend_pid");
            conn.keep();
            id
        }
        SessionConnection::MySql(mut conn) => {
            let id: i64 = sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS SIGNED)")
                .fetch_one(&mut *conn)
                .await
                .expect("CONNECTION_ID");
            conn.keep();
            id
        }
        SessionConnection::Sqlite => panic!("SQLite holds nothing"),
    }
}

/// `store` has two connections in its transaction pool and
/// [`record_claim_connections`]'s hook installed. A decision's claim
/// begins on the connection its read held (`AnyClaimStore::session`), never
/// on another decision's; a held connection goes back to the pool with the
/// claim's transaction or with the `Session`; and a decision that holds one
/// never waits on the pool for another.
pub async fn a_decision_claims_on_the_connection_it_read_on(
    store: &toolgate_store::AnyClaimStore,
    claim_ids: &std::sync::Mutex<Vec<i64>>,
) {
    let ns = Namespace::new(random16());
    let last_claim_id = || *claim_ids.lock().unwrap().last().expect("a claim ran");

    // The read's connection is its decision's claim's.
    let (_, req) = request_for(&ns, 1);
    let mut held = store.session();
    assert!(held.is_of(store));
    let read_on = held_connection_id(&mut held).await;
    expect_acquired(held.claim(req).await.expect("claim"));
    assert_eq!(
        last_claim_id(),
        read_on,
        "the claim did not begin on the read's connection"
    );
    // The claim gave it back: both connections are free again.
    let (_, again) = request_for(&ns, 5);
    let (mut a, mut b) = (store.session(), store.session());
    assert_ne!(
        held_connection_id(&mut a).await,
        held_connection_id(&mut b).await
    );
    drop((a, b));
    expect_acquired(store.claim(again).await.expect("claim after"));
    drop(held);

    // Another decision's claim never takes it: the pool hands that claim
    // the other connection.
    let (_, other) = request_for(&ns, 2);
    let mut held = store.session();
    let kept = held_connection_id(&mut held).await;
    expect_acquired(store.claim(other).await.expect("claim"));
    assert_ne!(
        last_claim_id(),
        kept,
        "a claim took another decision's connection"
    );
    drop(held);

    // Decisions that read and never claimed give their connections back.
    let (mut first, mut second) = (store.session(), store.session());
    let a = held_connection_id(&mut first).await;
    let b = held_connection_id(&mut second).await;
    assert_ne!(a, b, "two decisions read on one connection at once");
    drop((first, second));
    let (_, after) = request_for(&ns, 3);
    expect_acquired(
        store
            .claim(after)
            .await
            .expect("a claim after both were given back"),
    );

    // A decision that holds a connection never waits on the pool for
    // another: with both connections held, each decision's audit entry
    // (a transaction of its own) runs, because the call gives the
    // decision's own connection back first. Waiting instead would time out.
    let (mut first, mut second) = (store.session(), store.session());
    held_connection_id(&mut first).await;
    held_connection_id(&mut second).await;
    let (key, _) = request_for(&ns, 4);
    let entry = toolgate::claim::AuditEntry::new(
        UnixMillis(conformance::T0.0 + 1),
        "agent-1".into(),
        Some("apply_credit".into()),
        "forbidden".into(),
        Some("policy_denied".into()),
        Some(key),
        Some(fingerprint()),
    )
    .expect("entry");
    first
        .store()
        .append_audit(&entry)
        .await
        .expect("the first decision's audit entry");
    second
        .store()
        .append_audit(&entry)
        .await
        .expect("the second decision's audit entry");
    assert_eq!(store.audit_trail(&key, 10).await.expect("trail").len(), 2);
}
/// An application write that records the server's id of the connection
/// it runs on, and then applies, or finds its precondition failed.
#[derive(Debug)]
struct RecordsConnection {
    seen: std::sync::Mutex<Option<i64>>,
    applies: bool,
}

impl RecordsConnection {
    fn applying() -> Self {
        Self {
            seen: std::sync::Mutex::new(None),
            applies: true,
        }
    }

    fn failing_precondition() -> Self {
        Self {
            applies: false,
            ..Self::applying()
        }
    }

    fn seen(&self) -> Option<i64> {
        *self.seen.lock().unwrap()
    }
}

impl toolgate_store::StoreWrite for RecordsConnection {
    fn postgres<'c>(&'c self, conn: &'c mut sqlx::PgConnection) -> toolgate_store::WriteFuture<'c> {
        Box::pin(async move {
            let id: i64 = sqlx::query_scalar("SELECT CAST(pg_backend_pid() AS BIGINT)")
                .fetch_one(&mut *conn)
                .await?;
            *self.seen.lock().unwrap() = Some(id);
            Ok(self.applies)
        })
    }
    fn mysql<'c>(&'c self, conn: &'c mut sqlx::MySqlConnection) -> toolgate_store::WriteFuture<'c> {
        Box::pin(async move {
            let id: i64 = sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS SIGNED)")
                .fetch_one(&mut *conn)
                .await?;
            *self.seen.lock().unwrap() = Some(id);
            Ok(self.applies)
        })
    }
    fn sqlite(
        &self,
        _: &toolgate_store::sqlite::rusqlite::Connection,
    ) -> Result<bool, toolgate_store::sqlite::rusqlite::Error> {
        Ok(self.applies)
    }
}

/// Fails the test where `work` waits longer than a decision ever should: on
/// a pool of one connection, a decision that held it and waited for another
/// would wait for ever.
async fn within<T>(what: &str, work: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(20), work)
        .await
        .unwrap_or_else(|_| panic!("{what}: waited on a pool whose one connection it held"))
}

/// `store`'s transaction pool has ONE connection. A decision made with
/// `AnyClaimStore::session_through_completion` reads, claims, writes and
/// completes on one connection, never waiting on the pool while it holds
/// it: the write runs on the connection the read and the claim ran on; a
/// claim that is not won keeps nothing; a won claim's connection goes back
/// with any other call of the decision's, or when the decision ends.
///
/// The won claim commits with `COMMIT AND CHAIN`, and the write runs in
/// the transaction that began. `outside` (another store on the same
/// database) sees each won claim committed while its decision still holds
/// the chained transaction; a write whose precondition fails rolls back
/// only itself; and a chained transaction the decision never used is
/// rolled back before the connection serves anyone else, whose claims
/// then commit for real (a transaction left open would make them
/// savepoints of it, invisible outside).
pub async fn a_decision_completes_on_the_connection_it_claimed_on(
    store: &toolgate_store::AnyClaimStore,
    outside: &toolgate_store::AnyClaimStore,
) {
    use toolgate::pipeline::AppliedCompletion;
    use toolgate_store::WriteCompleted;

    let ns = Namespace::new(random16());
    let entry = |key: OperationKey, outcome: &str| {
        toolgate::claim::AuditEntry::new(
            UnixMillis(conformance::T0.0 + 1),
            "agent-1".into(),
            Some("apply_credit".into()),
            outcome.into(),
            None,
            Some(key),
            Some(fingerprint()),
        )
        .expect("entry")
    };
    let receipt = toolgate::claim::JsonText::result(r#"{"applied":true}"#.into()).expect("receipt");
    // The decision's write and completion of its won claim on `key`.
    let write_on = async |held: &mut toolgate_store::Session<'_>,
                          key: OperationKey,
                          holder: toolgate::claim::HolderToken,
                          write: Arc<RecordsConnection>,
                          what: &str| {
        let completion = AppliedCompletion::new(
            key,
            holder,
            UnixMillis(conformance::T0.0 + 1),
            entry(key, "executed"),
        );
        within(what, held.write_and_complete(write, &receipt, &completion))
            .await
            .expect("write and complete")
    };
    // Claim `n`'s row as another store sees it: committed, or the test fails.
    let outside_row = |n: u32, key: OperationKey| async move {
        outside
            .fetch(&key)
            .await
            .expect("fetch outside")
            .unwrap_or_else(|| panic!("claim {n} is not visible outside"))
    };
    // Another decision's claim, which the pool's one connection must serve.
    let claim_next = async |n: u32, when: &str| {
        let (_, req) = request_for(&ns, n);
        let claimed = within(when, store.claim(req)).await;
        expect_acquired(claimed.unwrap_or_else(|e| panic!("a claim {when}: {e}")));
    };

    // Read, claim, write and complete: one connection throughout.
    let (key, req) = request_for(&ns, 1);
    let mut held = store.session_through_completion();
    let read_on = within("the read", held_connection_id(&mut held)).await;
    let lease = expect_acquired(within("the claim", held.claim(req)).await.expect("claim"));
    // The won claim is committed while its decision holds the chained
    // transaction.
    let seen = outside_row(1, key).await;
    assert_eq!(
        (seen.status, seen.holder),
        (toolgate::claim::ClaimStatus::InFlight, lease.holder)
    );
    let write = Arc::new(RecordsConnection::applying());
    let done = write_on(&mut held, key, lease.holder, write.clone(), "the write").await;
    assert_eq!(done, WriteCompleted::Recorded);
    assert_eq!(
        write.seen(),
        Some(read_on),
        "the write did not run on the connection the decision read and claimed on"
    );
    let row = store.fetch(&key).await.expect("fetch").expect("row");
    assert!(row.completed_by(&lease.holder, &receipt), "{row:?}");
    // It went back with the write.
    claim_next(2, "after the write").await;
    drop(held);

    // A claim that finds another's completed row keeps nothing.
    let (_, again) = request_for(&ns, 1);
    let mut replay = store.session_through_completion();
    let theirs = within("the replay's claim", replay.claim(again))
        .await
        .expect("claim");
    assert!(!matches!(theirs, RawClaim::Acquired(_)), "{theirs:?}");
    claim_next(3, "while the replay's decision lives").await;
    drop(replay);

    // A won claim's connection goes back with any other call of the
    // decision's (here its audit entry, a transaction of its own).
    let (key, req) = request_for(&ns, 4);
    let mut won = store.session_through_completion();
    expect_acquired(within("the claim", won.claim(req)).await.expect("claim"));
    within(
        "the audit entry",
        won.store()
            .append_audit(&entry(key, "needs_reconciliation")),
    )
    .await
    .expect("audit entry");
    claim_next(5, "after the audit entry").await;
    drop(won);

    // And when the decision ends without a write: its chained transaction
    // is rolled back, its claim stays, and the next claim commits.
    let (key6, req) = request_for(&ns, 6);
    let mut ended = store.session_through_completion();
    let lease6 = expect_acquired(within("the claim", ended.claim(req)).await.expect("claim"));
    drop(ended);
    claim_next(7, "after the decision ended").await;
    assert_eq!(outside_row(6, key6).await.holder, lease6.holder);
    outside_row(7, request_for(&ns, 7).0).await;

    // A write whose precondition fails rolls back itself, not the claim
    // its transaction was chained from.
    let (key8, req) = request_for(&ns, 8);
    let mut failed = store.session_through_completion();
    let lease8 = expect_acquired(within("the claim", failed.claim(req)).await.expect("claim"));
    let write = Arc::new(RecordsConnection::failing_precondition());
    let done = write_on(&mut failed, key8, lease8.holder, write, "the failed write").await;
    assert_eq!(done, WriteCompleted::PreconditionFailed);
    let row = outside_row(8, key8).await;
    assert_eq!(
        (row.status, row.holder),
        (toolgate::claim::ClaimStatus::InFlight, lease8.holder)
    );
    drop(failed);
    claim_next(9, "after the failed write").await;
    outside_row(9, request_for(&ns, 9).0).await;
}

/// `store` is ready until `close` closes its pool, then unavailable.
pub async fn ready_until_closed<S: ClaimStore>(store: &S, close: impl AsyncFnOnce()) {
    store.ready().await.expect("a fresh store is ready");
    close().await;
    let e = store.ready().await.expect_err("a closed pool is not ready");
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
}

/// `base` with its database path replaced by `name`.
pub fn with_database(base: &str, name: &str) -> String {
    let (scheme, rest) = base.split_once("://").expect("URL has a scheme");
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, format!("?{q}")),
        None => (rest, String::new()),
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{authority}/{name}{query}")
}

/// The tests every SQL backend runs alike, written once and instantiated in
/// each backend's test target. `$db` is the target's throwaway database:
/// `create()` (`None`: not configured, so skipped; a failure when
/// databases are required), `url()`, `store()` and `drop()`. `$any` is the
/// backend's `AnyClaimStore` variant. The grant test inserts review items
/// with the target's `APPROVE`, `CONSUMED` and `VOTE` statements; `id`
/// turns the bound `APPROVE` on the store's pool into the new item's id
/// (without it, `APPROVE` returns the id: `RETURNING id`).
#[allow(unused_macros, reason = "each test target uses a different subset")]
macro_rules! backend_tests {
    ($db:ident, $any:ident, conformance: $conformance:ident, any_store: $any_store:ident $(,)?) => {
        crate::support::backend_tests!(
            $db, $any,
            conformance: $conformance,
            any_store: $any_store,
            id: |insert, pool| sqlx::Row::get::<i64, _>(&insert.fetch_one(pool).await.expect("approve"), 0),
        );
    };
    (
        $db:ident, $any:ident,
        conformance: $conformance:ident,
        any_store: $any_store:ident,
        id: |$insert:ident, $pool:ident| $id:expr $(,)?
    ) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $conformance() {
            let Some(db) = $db::create().await else {
                return;
            };
            crate::support::conformance(std::sync::Arc::new(db.store().await)).await;
            db.drop().await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $any_store() {
            let Some(db) = $db::create().await else {
                return;
            };
            let store = toolgate_store::AnyClaimStore::connect(&db.url())
                .await
                .expect("connect")
                .with_clock(crate::support::suite_clock);
            assert_eq!(store.backend(), toolgate_store::Backend::$any);
            crate::support::conformance(std::sync::Arc::new(store)).await;
            db.drop().await;
        }

        #[tokio::test]
        async fn the_lease_counts_from_the_attempt() {
            let Some(db) = $db::create().await else {
                return;
            };
            let store = db.store().await.with_clock(crate::support::a_minute_late);
            crate::support::lease_counts_from_the_attempt(&store).await;
            db.drop().await;
        }

        #[tokio::test]
        async fn grants_are_used_in_the_claims_transaction() {
            let Some(db) = $db::create().await else {
                return;
            };
            let store = db.store().await;
            let approve =
                async |key: toolgate::claim::OperationKey, expires: i64, consumed: Option<i64>| {
                    let $insert = sqlx::query(APPROVE)
                        .bind(key.as_bytes().as_slice())
                        .bind(crate::support::fingerprint().as_bytes().as_slice())
                        .bind(crate::support::DIGEST)
                        .bind(expires)
                        .bind(consumed);
                    let $pool = store.pool();
                    $id
                };
            let consumed = async |id: i64| {
                sqlx::query_as::<_, (Option<i64>, Option<String>)>(CONSUMED)
                    .bind(id)
                    .fetch_one(store.pool())
                    .await
                    .expect("consumed_at")
            };
            let vote = async |id: i64, reviewer: &str| {
                sqlx::query(VOTE)
                    .bind(id)
                    .bind(reviewer.to_owned())
                    .execute(store.pool())
                    .await
                    .expect("vote");
            };
            crate::support::grants_are_used_in_the_claims_transaction(
                &store, approve, consumed, vote,
            )
            .await;
            db.drop().await;
        }

        #[tokio::test]
        async fn completion_checks_the_lease_at_the_stores_clock() {
            use std::sync::atomic::{AtomicI64, Ordering};
            static NOW: AtomicI64 = AtomicI64::new(0);
            let Some(db) = $db::create().await else {
                return;
            };
            let store = db
                .store()
                .await
                .with_clock(|| toolgate::claim::UnixMillis(NOW.load(Ordering::SeqCst)));
            crate::support::completion_checks_the_lease_at_the_stores_clock(&store, |t| {
                NOW.store(t.0, Ordering::SeqCst);
            })
            .await;
            db.drop().await;
        }

        #[tokio::test]
        async fn a_lease_past_at_read_back_is_refused() {
            static TICK: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
            let Some(db) = $db::create().await else {
                return;
            };
            let store = db
                .store()
                .await
                .with_clock(|| crate::support::hour_per_reading(&TICK));
            crate::support::a_lease_past_at_read_back_is_refused(&store).await;
            db.drop().await;
        }

        #[tokio::test]
        async fn fault_write_commit_acknowledgement_lost_reads_back_the_completion() {
            let Some(db) = $db::create().await else {
                return;
            };
            let (hook, fired) = crate::support::fail_commit_number(2);
            let store = toolgate_store::AnyClaimStore::$any(db.store().await.with_fault_hook(hook));
            crate::support::lost_write_commit_ack_is_read_back(&store, &fired).await;
            db.drop().await;
        }

        #[tokio::test]
        async fn fault_commit_acknowledgement_lost_reads_back_our_win() {
            let Some(db) = $db::create().await else {
                return;
            };
            let (hook, fired) = crate::support::fail_commit_once();
            let store = db.store().await.with_fault_hook(hook);
            crate::support::lost_commit_ack_is_read_back(&store, &fired).await;
            db.drop().await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn many_concurrent_races_have_one_winner_each() {
            let Some(db) = $db::create().await else {
                return;
            };
            let store = std::sync::Arc::new(db.store().await);
            crate::support::many_races(store, 40, 12).await;
            db.drop().await;
        }
    };
}
#[allow(unused_imports, reason = "each test target uses a different subset")]
pub(crate) use backend_tests;

/// The tests PostgreSQL and MySQL (a server, a pool, an `admin` connection
/// that can kill the store's) run alike, beside [`backend_tests`]: the
/// target's `RAW_INSERT` writes a row no valid claim has, and its
/// `kill_once` ends the store's connection at a fault point.
#[allow(unused_macros, reason = "each test target uses a different subset")]
macro_rules! server_tests {
    ($db:ident, $any:ident) => {
        #[tokio::test]
        async fn a_decision_claims_on_the_connection_it_read_on() {
            let Some(db) = $db::create().await else {
                return;
            };
            let (hook, ids) = crate::support::record_claim_connections();
            let two = toolgate_store::StoreOptions {
                max_connections: 2,
                ..toolgate_store::StoreOptions::default()
            };
            let store = db.connect(two).await.with_fault_hook(hook);
            crate::support::a_decision_claims_on_the_connection_it_read_on(
                &toolgate_store::AnyClaimStore::$any(store),
                &ids,
            )
            .await;
            db.drop().await;
        }

        #[tokio::test]
        async fn a_decision_completes_on_the_connection_it_claimed_on() {
            let Some(db) = $db::create().await else {
                return;
            };
            let one = toolgate_store::StoreOptions {
                max_connections: 1,
                ..toolgate_store::StoreOptions::default()
            };
            let store = db.connect(one).await;
            let outside = db.store().await;
            crate::support::a_decision_completes_on_the_connection_it_claimed_on(
                &toolgate_store::AnyClaimStore::$any(store),
                &toolgate_store::AnyClaimStore::$any(outside),
            )
            .await;
            db.drop().await;
        }

        #[tokio::test]
        async fn corrupt_rows_are_errors_never_records() {
            let Some(db) = $db::create().await else {
                return;
            };
            let s = db.store().await;
            let ns = toolgate::claim::conformance::Namespace::new(crate::support::random16());
            let key = ns.key(201, 0);
            sqlx::query(RAW_INSERT)
                .bind(key.as_bytes().as_slice())
                .bind(crate::support::fingerprint().as_bytes().as_slice())
                .bind("{\"amount_minor\":")
                .bind([7u8; 16].as_slice())
                .execute(s.pool())
                .await
                .expect("raw insert");
            crate::support::corrupt_row_is_never_shown(&s, &ns, key).await;
            crate::support::stuck_listing_reports_corrupt(&s, key.as_bytes(), "arguments").await;
            let short = [9u8; 31];
            sqlx::query(RAW_INSERT)
                .bind(short.as_slice())
                .bind(crate::support::fingerprint().as_bytes().as_slice())
                .bind("{}")
                .bind([7u8; 16].as_slice())
                .execute(s.pool())
                .await
                .expect("raw insert");
            crate::support::stuck_listing_reports_corrupt(&s, &short, "operation_key").await;
            db.drop().await;
        }

        #[tokio::test]
        async fn fault_connection_killed_mid_transaction_surfaces_and_writes_nothing() {
            use std::sync::atomic::Ordering;
            use toolgate::claim::ClaimStore as _;
            let Some(db) = $db::create().await else {
                return;
            };
            let point = toolgate_store::fault::FaultPoint::AfterInsert;
            let (hook, fired) = kill_once(db.admin.clone(), point);
            let store = db.store().await.with_fault_hook(hook);
            let ns = toolgate::claim::conformance::Namespace::new(crate::support::random16());
            let (key, req) = crate::support::request_for(&ns, 1);
            let err = store
                .claim(req)
                .await
                .expect_err("a killed connection must surface");
            assert!(fired.load(Ordering::SeqCst), "the fault never fired");
            let unavailable = toolgate::claim::StoreErrorKind::Unavailable;
            assert_eq!(err.kind(), unavailable, "{err}");
            // The insert died with its transaction: no half-written claim.
            assert_eq!(store.fetch(&key).await.expect("fetch"), None);
            // And the operation can still be claimed cleanly afterwards.
            let (_, again) = crate::support::request_for(&ns, 1);
            crate::support::expect_acquired(store.claim(again).await.expect("claim"));
            db.drop().await;
        }

        #[tokio::test]
        async fn fault_commit_lost_reads_back_before_deciding() {
            use std::sync::atomic::Ordering;
            use toolgate::claim::ClaimStore as _;
            let Some(db) = $db::create().await else {
                return;
            };
            let point = toolgate_store::fault::FaultPoint::BeforeCommit;
            let (hook, fired) = kill_once(db.admin.clone(), point);
            let store = db.store().await.with_fault_hook(hook);
            let ns = toolgate::claim::conformance::Namespace::new(crate::support::random16());
            let (key, req) = crate::support::request_for(&ns, 2);
            let holder = *req.holder();
            // COMMIT fails on the dead connection; the store reads the row
            // back on a fresh one, finds none (the server rolled back),
            // retries the whole claim and wins it with the same holder token.
            let lease = crate::support::expect_acquired(store.claim(req).await.expect("claim"));
            assert!(fired.load(Ordering::SeqCst), "the fault never fired");
            assert_eq!(lease.holder, holder);
            let row = store.fetch(&key).await.expect("fetch").expect("row");
            assert_eq!(row.holder, holder);
            assert_eq!(row.status, toolgate::claim::ClaimStatus::InFlight);
            db.drop().await;
        }

        #[tokio::test]
        async fn ready_answers_while_the_store_works_and_fails_once_its_pool_is_closed() {
            let Some(db) = $db::create().await else {
                return;
            };
            let s = db.store().await;
            crate::support::ready_until_closed(&s, async || s.pool().close().await).await;
            db.drop().await;
        }
    };
}
#[allow(unused_imports, reason = "each test target uses a different subset")]
pub(crate) use server_tests;
