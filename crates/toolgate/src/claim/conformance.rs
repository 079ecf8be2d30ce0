//! The conformance suite every [`ClaimStore`] must pass (`testkit`
//! feature).
//!
//! Store implementations run it against a real database from their own test
//! targets:
//!
//! ```ignore
//! let store = Arc::new(MyStore::connect(url).await?);
//! conformance::run_all(store, Namespace::new(random_16_bytes), spawn_on_tokio).await;
//! ```
//!
//! Every key a check uses starts with the [`Namespace`]'s bytes, so runs
//! sharing a database do not see each other's operations; checks that list
//! (stuck claims) only look at their own namespace. Times are synthetic
//! ([`T0`] onwards): no check reads a clock or sleeps, so none is timed.
//!
//! Failures panic with a message naming the check: this is test code.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use super::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStatus, ClaimStore, CompleteRequest, Completion,
    ExecutorKind, Fingerprint, HolderToken, JsonText, OperationKey, ProposalRecord, RawClaim,
    ReconcileOutcome, ReconcileRequest, Reconciled, Resolution, StoreError, UnixMillis,
};

/// The synthetic "now" the checks start from.
pub const T0: UnixMillis = UnixMillis(1_800_000_000_000);

/// The lease the checks claim with.
pub const LEASE: Duration = Duration::from_secs(30);

/// A boxed, sendable future: what [`Spawner`] takes and gives back.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// One claim attempt's answer.
pub type ClaimResult = Result<RawClaim, StoreError>;

/// Runs a future on its own task (for example with `tokio::spawn`) and
/// resolves to its output, so the race check runs attempts in parallel.
/// The identity function is allowed too: the attempts then interleave on one
/// task, which still races them inside the database.
pub type Spawner = fn(BoxFuture<ClaimResult>) -> BoxFuture<ClaimResult>;

/// Keeps one run's operations apart from every other run's.
pub struct Namespace {
    prefix: [u8; 16],
    counter: AtomicU64,
}

impl Namespace {
    /// A namespace from 16 bytes that should be random per run.
    pub fn new(prefix: [u8; 16]) -> Self {
        Self {
            prefix,
            counter: AtomicU64::new(0),
        }
    }

    /// Whether `key` belongs to this namespace.
    pub fn owns(&self, key: &OperationKey) -> bool {
        key.as_bytes().starts_with(&self.prefix)
    }

    /// A key for `case` (one per check) and `n` (one per operation inside
    /// the check).
    pub fn key(&self, case: u8, n: u32) -> OperationKey {
        let mut bytes = [0u8; 32];
        bytes[..16].copy_from_slice(&self.prefix);
        bytes[16] = case;
        bytes[17..21].copy_from_slice(&n.to_be_bytes());
        OperationKey::from_bytes(bytes)
    }

    /// A distinct holder token. The suite's tokens need only be distinct;
    /// production tokens must also be unpredictable (see [`HolderToken`]).
    pub fn holder(&self) -> HolderToken {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.prefix[..8]);
        bytes[8..].copy_from_slice(&n.to_be_bytes());
        HolderToken::from_bytes(bytes)
    }
}

/// A fingerprint that differs per `n`.
pub fn fingerprint(n: u8) -> Fingerprint {
    Fingerprint::from_bytes([n; 32])
}

/// A valid proposal record whose arguments mention `amount`.
pub fn proposal(amount: u32) -> ProposalRecord {
    ProposalRecord::new(
        "refund_order".into(),
        format!(r#"{{"amount_minor":{amount},"reason_code":"late_delivery"}}"#),
        r#"{"customer":"c-1","order":"o-9"}"#.into(),
        "7".into(),
        "agent:1".into(),
    )
    .unwrap_or_else(|e| panic!("conformance proposal is invalid: {e}"))
}

/// A request on `key` with fingerprint `fp`, a fresh holder and time `now`.
pub fn request(
    ns: &Namespace,
    key: OperationKey,
    fp: u8,
    amount: u32,
    now: UnixMillis,
) -> ClaimRequest {
    ClaimRequest::for_testing(
        key,
        fingerprint(fp),
        proposal(amount),
        ns.holder(),
        now,
        LEASE,
    )
}

fn json(text: &str) -> JsonText {
    JsonText::result(text.to_owned())
        .unwrap_or_else(|e| panic!("conformance result is invalid: {e}"))
}

fn ok<T>(check: &str, r: Result<T, StoreError>) -> T {
    r.unwrap_or_else(|e| panic!("{check}: store error: {e}"))
}

async fn fetch<S: ClaimStore>(check: &str, store: &S, key: &OperationKey) -> ClaimRecord {
    ok(check, store.fetch(key).await).unwrap_or_else(|| panic!("{check}: row missing"))
}

/// The audit entry an executed decision on `key` appends with its
/// completion.
pub fn executed_entry(key: OperationKey, at: UnixMillis) -> AuditEntry {
    AuditEntry::new(
        at,
        "agent:1".into(),
        Some("refund_order".into()),
        "executed".into(),
        None,
        Some(key),
        Some(fingerprint(1)),
    )
    .unwrap_or_else(|e| panic!("conformance audit entry is invalid: {e}"))
}

/// `holder`'s completion of `key` with `result` at `now`, and the executed
/// entry for `key` at `now`.
pub fn executed_completion(
    key: OperationKey,
    holder: HolderToken,
    result: JsonText,
    now: UnixMillis,
) -> CompleteRequest {
    CompleteRequest {
        key,
        holder,
        result,
        now,
        audit: executed_entry(key, now),
    }
}

/// Completes with the executed entry for `key` at `now`.
async fn complete<S: ClaimStore>(
    store: &S,
    key: &OperationKey,
    holder: &HolderToken,
    result: &JsonText,
    now: UnixMillis,
) -> Result<Completion, StoreError> {
    let done = executed_completion(*key, *holder, result.clone(), now);
    store.complete(done).await
}

async fn acquire<S: ClaimStore>(check: &str, store: &S, req: ClaimRequest) -> super::Lease {
    match ok(check, store.claim(req).await) {
        RawClaim::Acquired(lease) => lease,
        other => panic!("{check}: expected Acquired, got {other:?}"),
    }
}

/// The first claim on a key wins, with the request's holder and lease, and
/// the row is in flight.
pub async fn first_claim_wins<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "first_claim_wins";
    let key = ns.key(1, 0);
    let req = request(ns, key, 1, 1500, T0);
    let holder = *req.holder();
    let expires = req.lease_expires_at();
    let lease = acquire(check, store, req).await;
    assert_eq!(lease.key, key, "{check}");
    assert_eq!(lease.holder, holder, "{check}");
    assert_eq!(lease.expires_at, expires, "{check}");
    let row = fetch(check, store, &key).await;
    assert_eq!(row.status, ClaimStatus::InFlight, "{check}");
    assert_eq!(row.holder, holder, "{check}");
    assert_eq!(row.claimed_at, T0, "{check}");
    assert_eq!(row.completion, None, "{check}");
}

/// A second attempt with the same fingerprint while the first is in flight
/// gets `InFlight`, and the row keeps the first holder.
pub async fn duplicate_in_flight<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "duplicate_in_flight";
    let key = ns.key(2, 0);
    let first = acquire(check, store, request(ns, key, 1, 1500, T0)).await;
    let later = T0.plus_millis(1_000);
    match ok(check, store.claim(request(ns, key, 1, 1500, later)).await) {
        RawClaim::InFlight(row) => assert_eq!(row.holder, first.holder, "{check}"),
        other => panic!("{check}: expected InFlight, got {other:?}"),
    }
    assert_eq!(
        fetch(check, store, &key).await.holder,
        first.holder,
        "{check}"
    );
}

/// A different fingerprint gets `Mismatch` carrying the prior proposal
/// record; once the first completes, the mismatch carries its result too.
pub async fn different_fingerprint_is_mismatch<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "different_fingerprint_is_mismatch";
    let key = ns.key(3, 0);
    let first = acquire(check, store, request(ns, key, 1, 1500, T0)).await;
    match ok(check, store.claim(request(ns, key, 2, 99, T0)).await) {
        RawClaim::Mismatch(prior) => {
            assert_eq!(prior.proposal, proposal(1500), "{check}");
            assert_eq!(prior.fingerprint, fingerprint(1), "{check}");
            assert_eq!(prior.result(), None, "{check}");
        }
        other => panic!("{check}: expected Mismatch, got {other:?}"),
    }
    let receipt = json(r#"{"refund_id":"cr-1"}"#);
    let done = ok(
        check,
        complete(store, &key, &first.holder, &receipt, T0.plus_millis(5)).await,
    );
    assert_eq!(done, Completion::Recorded, "{check}");
    match ok(check, store.claim(request(ns, key, 2, 99, T0)).await) {
        RawClaim::Mismatch(prior) => {
            assert_eq!(prior.proposal, proposal(1500), "{check}");
            assert_eq!(prior.result(), Some(&receipt), "{check}");
        }
        other => panic!("{check}: expected Mismatch, got {other:?}"),
    }
}

/// The holder completes: exactly one row records the result, and a second
/// completion by the same holder changes nothing and says reconcile.
pub async fn completion_by_holder<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "completion_by_holder";
    let key = ns.key(4, 0);
    let other_key = ns.key(4, 1);
    let lease = acquire(check, store, request(ns, key, 1, 1500, T0)).await;
    let _bystander = acquire(check, store, request(ns, other_key, 1, 1500, T0)).await;
    let receipt = json(r#"{"refund_id":"cr-7","amount_minor":1500}"#);
    let at = T0.plus_millis(10);
    let done = ok(
        check,
        complete(store, &key, &lease.holder, &receipt, at).await,
    );
    assert_eq!(done, Completion::Recorded, "{check}");
    let row = fetch(check, store, &key).await;
    assert_eq!(row.status, ClaimStatus::Completed, "{check}");
    let completion = row
        .completion
        .unwrap_or_else(|| panic!("{check}: no completion"));
    assert_eq!(completion.completed_at, at, "{check}");
    assert_eq!(completion.resolution, Resolution::Executed, "{check}");
    assert_eq!(completion.result, receipt, "{check}");
    // Exactly one row: the other claim is untouched.
    let bystander = fetch(check, store, &other_key).await;
    assert_eq!(bystander.status, ClaimStatus::InFlight, "{check}");
    let again = ok(
        check,
        complete(store, &key, &lease.holder, &json("{}"), T0.plus_millis(20)).await,
    );
    assert_eq!(again, Completion::Reconcile, "{check}");
    let row = fetch(check, store, &key).await;
    assert_eq!(
        row.result(),
        Some(&receipt),
        "{check}: second completion wrote"
    );
}

/// A holder that does not own the claim (wrong or stale token) completes:
/// no row changes and the answer is `Reconcile`.
pub async fn completion_by_wrong_holder<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "completion_by_wrong_holder";
    let key = ns.key(5, 0);
    let _lease = acquire(check, store, request(ns, key, 1, 1500, T0)).await;
    let before = fetch(check, store, &key).await;
    let stranger = ns.holder();
    let done = ok(
        check,
        complete(store, &key, &stranger, &json(r#"{"refund_id":"x"}"#), T0).await,
    );
    assert_eq!(done, Completion::Reconcile, "{check}");
    assert_eq!(
        fetch(check, store, &key).await,
        before,
        "{check}: row changed"
    );
    // No row at all: also reconcile, and nothing is created.
    let missing = ns.key(5, 1);
    let done = ok(
        check,
        complete(store, &missing, &stranger, &json("{}"), T0).await,
    );
    assert_eq!(done, Completion::Reconcile, "{check}");
    assert_eq!(ok(check, store.fetch(&missing).await), None, "{check}");
}

/// A completed operation replays its recorded result to a retry with the
/// same fingerprint, even long after the lease would have ended.
pub async fn completed_replays<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "completed_replays";
    let key = ns.key(6, 0);
    let lease = acquire(check, store, request(ns, key, 1, 1500, T0)).await;
    let receipt = json(r#"{"refund_id":"cr-9"}"#);
    let done = ok(
        check,
        complete(store, &key, &lease.holder, &receipt, T0).await,
    );
    assert_eq!(done, Completion::Recorded, "{check}");
    let much_later = T0.plus_millis(86_400_000);
    match ok(
        check,
        store.claim(request(ns, key, 1, 1500, much_later)).await,
    ) {
        RawClaim::Completed(row) => {
            assert_eq!(row.result(), Some(&receipt), "{check}");
            assert_eq!(row.holder, lease.holder, "{check}");
        }
        other => panic!("{check}: expected Completed, got {other:?}"),
    }
}

/// An in-flight claim past its lease is `Expired` for the same
/// fingerprint — never re-acquired — and the row keeps its first holder.
pub async fn expired_lease_is_never_reacquired<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "expired_lease_is_never_reacquired";
    let key = ns.key(7, 0);
    let first = acquire(check, store, request(ns, key, 1, 1500, T0)).await;
    for at in [first.expires_at, first.expires_at.plus_millis(3_600_000)] {
        match ok(check, store.claim(request(ns, key, 1, 1500, at)).await) {
            RawClaim::Expired(row) => {
                assert_eq!(row.holder, first.holder, "{check}");
                assert_eq!(row.status, ClaimStatus::InFlight, "{check}");
            }
            other => panic!("{check}: expected Expired at {at}, got {other:?}"),
        }
    }
    assert_eq!(
        fetch(check, store, &key).await.holder,
        first.holder,
        "{check}"
    );
    // A different fingerprint on the stuck operation is a conflict.
    match ok(
        check,
        store.claim(request(ns, key, 2, 10, first.expires_at)).await,
    ) {
        RawClaim::Mismatch(_) => {}
        other => panic!("{check}: expected Mismatch, got {other:?}"),
    }
}

/// Many attempts race on one key: exactly one is `Acquired`, every other
/// one sees the winner's row, and there is one row.
pub async fn concurrent_claims_one_winner<S: ClaimStore + 'static>(
    store: Arc<S>,
    ns: &Namespace,
    spawn: Spawner,
    attempts: usize,
) {
    let check = "concurrent_claims_one_winner";
    let key = ns.key(8, 0);
    let mut tasks = Vec::with_capacity(attempts);
    for i in 0..attempts {
        let store = Arc::clone(&store);
        let amount = 100 + u32::try_from(i).unwrap_or(0);
        let req = request(ns, key, 1, amount, T0);
        tasks.push(spawn(Box::pin(async move { store.claim(req).await })));
    }
    let results = JoinAll::new(tasks).await;
    let mut winners = Vec::new();
    for r in results {
        match ok(check, r) {
            RawClaim::Acquired(lease) => winners.push(lease.holder),
            RawClaim::InFlight(_) => {}
            other => panic!("{check}: unexpected {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "{check}: winners {winners:?}");
    let row = fetch(check, &*store, &key).await;
    assert_eq!(Some(&row.holder), winners.first(), "{check}");
}

/// The proposal record and the result come back byte for byte, including
/// non-ASCII text, escapes and large integers.
pub async fn records_round_trip<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "records_round_trip";
    let key = ns.key(9, 0);
    let record = ProposalRecord::new(
        "edit_order_note".into(),
        r#"{"big":9007199254740991,"neg":-12,"note":"Grüße \"quoted\" \\ \u00e9 😀","nested":{"a":[1,{}],"z":null}}"#.into(),
        r#"{"customer":"c-ß","order":"o-1"}"#.into(),
        "etag:\"W/abc\"".into(),
        "user:ünïcode".into(),
    )
    .unwrap_or_else(|e| panic!("{check}: {e}"));
    let req =
        ClaimRequest::for_testing(key, fingerprint(3), record.clone(), ns.holder(), T0, LEASE);
    let lease = acquire(check, store, req).await;
    let row = fetch(check, store, &key).await;
    assert_eq!(row.proposal, record, "{check}");
    assert_eq!(row.proposal.arguments(), record.arguments(), "{check}");
    let result = json(r#"{"ok":true,"text":"✓ done","list":[1.5,-0,2e-3]}"#);
    let done = ok(
        check,
        complete(store, &key, &lease.holder, &result, T0).await,
    );
    assert_eq!(done, Completion::Recorded, "{check}");
    let row = fetch(check, store, &key).await;
    assert_eq!(
        row.result().map(JsonText::as_str),
        Some(result.as_str()),
        "{check}"
    );
}

/// The executor kind a claim was won with comes back from every read: the
/// claim's row, the stuck listing, a replay, and after completion and
/// reconciliation (reconciliation is routed by it).
pub async fn executor_kind_round_trips<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "executor_kind_round_trips";
    for (n, kind) in (0u32..).zip(ExecutorKind::ALL) {
        let key = ns.key(14, n);
        let req = request(ns, key, 1, 100, T0).with_executor(kind);
        assert_eq!(req.executor(), kind, "{check}");
        let lease = acquire(check, store, req).await;
        assert_eq!(
            fetch(check, store, &key).await.executor,
            kind,
            "{check}: {kind}"
        );
        // Another attempt sees the winner's kind, not its own.
        let other = request(ns, key, 1, 100, T0).with_executor(ExecutorKind::Webhook);
        match ok(check, store.claim(other).await) {
            RawClaim::InFlight(r) => assert_eq!(r.executor, kind, "{check}: {kind}"),
            other => panic!("{check}: expected InFlight, got {other:?}"),
        }
        if n == 0 {
            let done = ok(
                check,
                complete(store, &key, &lease.holder, &json("{}"), T0).await,
            );
            assert_eq!(done, Completion::Recorded, "{check}");
            assert_eq!(fetch(check, store, &key).await.executor, kind, "{check}");
        }
    }
    // The stuck listing carries the kind of each stuck claim.
    let later = UnixMillis(T0.0 + 60_000);
    let stuck = ok(check, store.list_stuck(later, 1000).await);
    for (n, kind) in (1u32..).zip([ExecutorKind::Client, ExecutorKind::Webhook]) {
        let key = ns.key(14, n);
        let row = stuck
            .iter()
            .filter_map(|e| e.as_ref().ok())
            .find(|r| r.key == key)
            .unwrap_or_else(|| panic!("{check}: {kind} claim not listed as stuck"));
        assert_eq!(row.executor, kind, "{check}");
    }
    let key = ns.key(14, 1);
    let answer = ReconcileOutcome::NotApplied {
        detail: json(r#"{"applied":false}"#),
    };
    let recorded = ok(
        check,
        store
            .record_reconciliation(ReconcileRequest {
                key: &key,
                outcome: &answer,
                now: later,
            })
            .await,
    );
    assert!(matches!(recorded, Reconciled::Recorded), "{check}");
    assert_eq!(
        fetch(check, store, &key).await.executor,
        ExecutorKind::Client,
        "{check}"
    );
}

/// Audit entries are appended and read back in order, unchanged; a later
/// entry for the same key does not replace an earlier one.
pub async fn audit_is_append_only<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "audit_is_append_only";
    let key = ns.key(10, 0);
    let entry = |at: i64, outcome: &str, reason: Option<&str>| {
        AuditEntry::new(
            UnixMillis(at),
            "agent:1".into(),
            Some("refund_order".into()),
            outcome.into(),
            reason.map(str::to_owned),
            Some(key),
            Some(fingerprint(1)),
        )
        .unwrap_or_else(|e| panic!("{check}: {e}"))
    };
    let first = entry(T0.0, "executed", None);
    let second = entry(T0.0 + 1, "replayed", None);
    let third = entry(T0.0 + 1, "conflict", Some("fingerprint_mismatch"));
    for e in [&first, &second, &third] {
        ok(check, store.append_audit(e).await);
    }
    // An entry with no key is accepted (decisions before a key exists).
    let keyless = AuditEntry::new(
        T0,
        "agent:1".into(),
        None,
        "rejected".into(),
        Some("unknown_key".into()),
        None,
        None,
    )
    .unwrap_or_else(|e| panic!("{check}: {e}"));
    ok(check, store.append_audit(&keyless).await);
    // A delegated actor's entry keeps the key that named it as `via`.
    let delegated = entry(T0.0 + 2, "executed", None)
        .with_via(Some("php-app".into()))
        .unwrap_or_else(|e| panic!("{check}: {e}"));
    ok(check, store.append_audit(&delegated).await);
    let trail = ok(check, store.audit_trail(&key, 100).await);
    assert_eq!(trail[3].via(), Some("php-app"), "{check}");
    assert_eq!(trail[0].via(), None, "{check}");
    assert_eq!(
        trail,
        vec![first.clone(), second, third, delegated],
        "{check}"
    );
    let limited = ok(check, store.audit_trail(&key, 1).await);
    assert_eq!(limited, vec![first], "{check}");
}

/// A completion with its audit entry: the entry is in the trail exactly
/// when the completion is recorded. A stranger's completion and a second
/// completion with another result write no entry.
pub async fn audited_completion<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "audited_completion";
    let key = ns.key(13, 0);
    let lease = acquire(check, store, request(ns, key, 1, 100, T0)).await;
    let entry = |outcome: &str| {
        AuditEntry::new(
            T0,
            "agent:1".into(),
            Some("refund_order".into()),
            outcome.into(),
            None,
            Some(key),
            Some(fingerprint(1)),
        )
        .unwrap_or_else(|e| panic!("{check}: {e}"))
    };
    let executed = entry("executed");
    let stranger = ns.holder();
    let done = |holder, result, now, audit| CompleteRequest {
        key,
        holder,
        result,
        now,
        audit,
    };
    let by_stranger = done(stranger, json("{}"), T0, entry("stranger"));
    let done_by_stranger = ok(check, store.complete(by_stranger).await);
    assert_eq!(done_by_stranger, Completion::Reconcile, "{check}: stranger");
    assert_eq!(
        fetch(check, store, &key).await.status,
        ClaimStatus::InFlight,
        "{check}"
    );
    assert_eq!(
        ok(check, store.audit_trail(&key, 10).await),
        vec![],
        "{check}: a stranger's entry was written"
    );

    let receipt = json(r#"{"refund_id":"cr-13"}"#);
    let first = done(
        lease.holder,
        receipt.clone(),
        T0.plus_millis(1),
        executed.clone(),
    );
    assert_eq!(
        ok(check, store.complete(first).await),
        Completion::Recorded,
        "{check}"
    );
    assert_eq!(
        ok(check, store.audit_trail(&key, 10).await),
        vec![executed.clone()],
        "{check}"
    );
    let row = fetch(check, store, &key).await;
    assert_eq!(row.result(), Some(&receipt), "{check}");

    let other = done(
        lease.holder,
        json("{}"),
        T0.plus_millis(2),
        executed.clone(),
    );
    let again = ok(check, store.complete(other).await);
    assert_eq!(again, Completion::Reconcile, "{check}: another result");
    assert_eq!(
        ok(check, store.audit_trail(&key, 10).await),
        vec![executed],
        "{check}"
    );
}

/// A completion retried after a lost answer (same key, same holder, same
/// result bytes) is recorded again without writing anything: no second
/// audit entry, the first completion time kept. Another holder or another
/// result still gets `Reconcile`.
pub async fn completion_is_idempotent<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "completion_is_idempotent";
    let key = ns.key(15, 0);
    let lease = acquire(check, store, request(ns, key, 1, 100, T0)).await;
    let receipt = json(r#"{"refund_id":"cr-15","amount_minor":100}"#);
    let first_at = T0.plus_millis(1);
    let first = ok(
        check,
        complete(store, &key, &lease.holder, &receipt, first_at).await,
    );
    assert_eq!(first, Completion::Recorded, "{check}");
    let recorded = fetch(check, store, &key).await;
    // The retry, later (even past the lease): the same answer, no write.
    for at in [T0.plus_millis(2), lease.expires_at.plus_millis(1)] {
        let retry = ok(
            check,
            complete(store, &key, &lease.holder, &receipt, at).await,
        );
        assert_eq!(retry, Completion::Recorded, "{check}: retry at {at}");
    }
    assert_eq!(
        fetch(check, store, &key).await,
        recorded,
        "{check}: row rewritten"
    );
    assert_eq!(
        ok(check, store.audit_trail(&key, 10).await),
        vec![executed_entry(key, first_at)],
        "{check}: a retry appended an entry"
    );
    let other_result = json(r#"{"refund_id":"cr-other"}"#);
    let stranger = ns.holder();
    let answers = [
        ok(
            check,
            complete(store, &key, &lease.holder, &other_result, first_at).await,
        ),
        ok(
            check,
            complete(store, &key, &stranger, &receipt, first_at).await,
        ),
    ];
    assert_eq!(answers, [Completion::Reconcile; 2], "{check}");
    assert_eq!(
        fetch(check, store, &key).await,
        recorded,
        "{check}: row rewritten"
    );
    assert_eq!(
        ok(check, store.audit_trail(&key, 10).await).len(),
        1,
        "{check}"
    );
}

/// The lease is checked by the completion itself: the holder completing at
/// or after its lease's end gets `Reconcile`, the claim stays in flight for
/// reconciliation, and no audit entry is written.
pub async fn completion_after_the_lease_reconciles<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "completion_after_the_lease_reconciles";
    let key = ns.key(16, 0);
    let lease = acquire(check, store, request(ns, key, 1, 100, T0)).await;
    let before = fetch(check, store, &key).await;
    let late = ok(
        check,
        complete(store, &key, &lease.holder, &json("{}"), lease.expires_at).await,
    );
    assert_eq!(late, Completion::Reconcile, "{check}");
    assert_eq!(
        fetch(check, store, &key).await,
        before,
        "{check}: row changed"
    );
    assert!(
        ok(check, store.audit_trail(&key, 10).await).is_empty(),
        "{check}: entry written"
    );
}

/// Only in-flight claims past their lease are stuck; live and completed
/// ones are not. Reconciliation closes a stuck claim (never executing), a
/// retry then replays it, and the old holder's late completion reconciles.
pub async fn stuck_claims_and_reconciliation<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "stuck_claims_and_reconciliation";
    let stuck_key = ns.key(11, 0);
    let live_key = ns.key(11, 1);
    let done_key = ns.key(11, 2);
    let stuck = acquire(check, store, request(ns, stuck_key, 1, 1, T0)).await;
    let _live = acquire(
        check,
        store,
        request(ns, live_key, 1, 1, T0.plus_millis(60_000)),
    )
    .await;
    let done = acquire(check, store, request(ns, done_key, 1, 1, T0)).await;
    let c = ok(
        check,
        complete(store, &done_key, &done.holder, &json("{}"), T0).await,
    );
    assert_eq!(c, Completion::Recorded, "{check}");

    let now = stuck.expires_at;
    let before = T0.plus_millis(1);
    let listed: Vec<OperationKey> = ok(check, store.list_stuck(now, 10_000).await)
        .into_iter()
        .map(|e| {
            e.unwrap_or_else(|c| panic!("{check}: corrupt row {c:?}"))
                .key
        })
        .filter(|k| ns.owns(k))
        .collect();
    assert!(listed.contains(&stuck_key), "{check}: {listed:?}");
    assert!(!listed.contains(&live_key), "{check}: live listed");
    assert!(!listed.contains(&done_key), "{check}: completed listed");
    let early: Vec<OperationKey> = ok(check, store.list_stuck(before, 10_000).await)
        .into_iter()
        .filter_map(Result::ok)
        .map(|r| r.key)
        .filter(|k| ns.owns(k) && k.as_bytes()[16] == 11)
        .collect();
    assert!(early.is_empty(), "{check}: stuck before expiry {early:?}");

    // Not stuck yet: nothing is written.
    let receipt = json(r#"{"refund_id":"cr-late"}"#);
    let outcome = ReconcileOutcome::Applied {
        receipt: receipt.clone(),
    };
    match ok(
        check,
        store
            .record_reconciliation(ReconcileRequest {
                key: &live_key,
                outcome: &outcome,
                now,
            })
            .await,
    ) {
        Reconciled::NotStuck(Some(row)) => assert_eq!(row.status, ClaimStatus::InFlight),
        other => panic!("{check}: expected NotStuck, got {other:?}"),
    }
    match ok(
        check,
        store
            .record_reconciliation(ReconcileRequest {
                key: &ns.key(11, 9),
                outcome: &outcome,
                now,
            })
            .await,
    ) {
        Reconciled::NotStuck(None) => {}
        other => panic!("{check}: expected NotStuck(None), got {other:?}"),
    }
    // Stuck: closed with the downstream receipt.
    match ok(
        check,
        store
            .record_reconciliation(ReconcileRequest {
                key: &stuck_key,
                outcome: &outcome,
                now,
            })
            .await,
    ) {
        Reconciled::Recorded => {}
        other => panic!("{check}: expected Recorded, got {other:?}"),
    }
    let row = fetch(check, store, &stuck_key).await;
    assert_eq!(row.status, ClaimStatus::Completed, "{check}");
    let completion = row
        .completion
        .clone()
        .unwrap_or_else(|| panic!("{check}: no completion"));
    assert_eq!(
        completion.resolution,
        Resolution::ReconciledApplied,
        "{check}"
    );
    assert_eq!(completion.result, receipt, "{check}");
    // The old holder wakes up and completes: zero rows, reconcile.
    let late = ok(
        check,
        complete(
            store,
            &stuck_key,
            &stuck.holder,
            &json(r#"{"dup":true}"#),
            now,
        )
        .await,
    );
    assert_eq!(late, Completion::Reconcile, "{check}");
    assert_eq!(
        fetch(check, store, &stuck_key).await,
        row,
        "{check}: late write"
    );
    // Reconciling twice changes nothing.
    match ok(
        check,
        store
            .record_reconciliation(ReconcileRequest {
                key: &stuck_key,
                outcome: &outcome,
                now,
            })
            .await,
    ) {
        Reconciled::NotStuck(Some(r)) => assert_eq!(r, row, "{check}"),
        other => panic!("{check}: expected NotStuck, got {other:?}"),
    }
    // A retry now replays the reconciled result.
    match ok(check, store.claim(request(ns, stuck_key, 1, 1, now)).await) {
        RawClaim::Completed(r) => assert_eq!(r.result(), Some(&receipt), "{check}"),
        other => panic!("{check}: expected Completed, got {other:?}"),
    }
    let listed = ok(check, store.list_stuck(now, 10_000).await);
    assert!(
        !listed
            .iter()
            .filter_map(|e| e.as_ref().ok())
            .any(|r| r.key == stuck_key),
        "{check}: reconciled claim still listed"
    );
}

/// Fault: a holder stalls past its lease, an
/// operator reconciles the claim (the downstream system says the write did
/// not happen), then the old holder finishes and tries to complete. Its
/// completion matches zero rows and says `Reconcile`; the reconciliation
/// stands, and a retry is the operation's next attempt, never the stalled
/// one's completion.
pub async fn completion_after_takeover_reconciles<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "completion_after_takeover_reconciles";
    let key = ns.key(12, 0);
    let stalled = acquire(check, store, request(ns, key, 1, 1500, T0)).await;
    let later = stalled.expires_at.plus_millis(1);
    let detail = json(r#"{"downstream":"no refund found"}"#);
    let outcome = ReconcileOutcome::NotApplied {
        detail: detail.clone(),
    };
    match ok(
        check,
        store
            .record_reconciliation(ReconcileRequest {
                key: &key,
                outcome: &outcome,
                now: later,
            })
            .await,
    ) {
        Reconciled::Recorded => {}
        other => panic!("{check}: expected Recorded, got {other:?}"),
    }
    let taken_over = fetch(check, store, &key).await;
    let late = ok(
        check,
        complete(
            store,
            &key,
            &stalled.holder,
            &json(r#"{"refund_id":"cr-late"}"#),
            later,
        )
        .await,
    );
    assert_eq!(late, Completion::Reconcile, "{check}");
    assert_eq!(
        fetch(check, store, &key).await,
        taken_over,
        "{check}: late write"
    );
    let completion = taken_over
        .completion
        .unwrap_or_else(|| panic!("{check}: no completion"));
    assert_eq!(
        completion.resolution,
        Resolution::ReconciledNotApplied,
        "{check}"
    );
    assert_eq!(completion.result, detail, "{check}");
    match ok(check, store.claim(request(ns, key, 1, 1500, later)).await) {
        RawClaim::Acquired(lease) => {
            assert_eq!(lease.attempt, 2, "{check}");
            assert_ne!(lease.holder, stalled.holder, "{check}");
        }
        other => panic!("{check}: expected attempt 2 Acquired, got {other:?}"),
    }
    // The stalled holder still owns nothing.
    let late = ok(
        check,
        complete(store, &key, &stalled.holder, &json("{}"), later).await,
    );
    assert_eq!(late, Completion::Reconcile, "{check}");
}

/// A claim reconciled as not applied is taken over by the next claim on
/// its key as attempt 2, with that claim's proposal, holder and lease; the
/// closed attempt's holder can no longer complete it. A claim reconciled as
/// applied, or closed by its own execution (a failed precondition), stays
/// closed.
pub async fn not_applied_runs_again_as_the_next_attempt<S: ClaimStore>(store: &S, ns: &Namespace) {
    let check = "not_applied_runs_again_as_the_next_attempt";
    let key = ns.key(17, 0);
    let first = acquire(check, store, request(ns, key, 1, 1500, T0)).await;
    assert_eq!(first.attempt, 1, "{check}");
    assert_eq!(first.idempotency_key(), key.to_hex(), "{check}");
    let not_applied = ReconcileOutcome::NotApplied {
        detail: json(r#"{"applied":false}"#),
    };
    let at = first.expires_at;
    match ok(
        check,
        store
            .record_reconciliation(ReconcileRequest {
                key: &key,
                outcome: &not_applied,
                now: at,
            })
            .await,
    ) {
        Reconciled::Recorded => {}
        other => panic!("{check}: expected Recorded, got {other:?}"),
    }
    // Other arguments are welcome: nothing was written for the first ones.
    let second = acquire(check, store, request(ns, key, 2, 900, at)).await;
    assert_eq!(second.attempt, 2, "{check}");
    assert_eq!(
        second.idempotency_key(),
        format!("{}.2", key.to_hex()),
        "{check}"
    );
    assert_ne!(second.holder, first.holder, "{check}");
    assert_eq!(second.expires_at, at.plus_millis(30_000), "{check}");
    let row = fetch(check, store, &key).await;
    assert_eq!(row.attempt, 2, "{check}");
    assert_eq!(row.status, ClaimStatus::InFlight, "{check}");
    assert_eq!(row.completion, None, "{check}");
    assert_eq!(row.fingerprint, fingerprint(2), "{check}");
    assert!(row.proposal.arguments().contains("900"), "{check}");
    assert_eq!(row.claimed_at, at, "{check}");
    // The closed attempt's holder owns nothing now.
    let late = ok(
        check,
        complete(store, &key, &first.holder, &json("{}"), at).await,
    );
    assert_eq!(late, Completion::Reconcile, "{check}");
    // While attempt 2 is in flight, the same proposal is in flight.
    match ok(check, store.claim(request(ns, key, 2, 900, at)).await) {
        RawClaim::InFlight(r) => assert_eq!(r.attempt, 2, "{check}"),
        other => panic!("{check}: expected InFlight, got {other:?}"),
    }
    let c = ok(
        check,
        complete(store, &key, &second.holder, &json(r#"{"ok":2}"#), at).await,
    );
    assert_eq!(c, Completion::Recorded, "{check}");
    match ok(check, store.claim(request(ns, key, 2, 900, at)).await) {
        RawClaim::Completed(r) => assert_eq!(r.attempt, 2, "{check}"),
        other => panic!("{check}: expected Completed, got {other:?}"),
    }

    // Reconciled as applied: closed for good.
    let applied_key = ns.key(17, 1);
    let a = acquire(check, store, request(ns, applied_key, 1, 1, T0)).await;
    let applied = ReconcileOutcome::Applied {
        receipt: json(r#"{"refund_id":1}"#),
    };
    match ok(
        check,
        store
            .record_reconciliation(ReconcileRequest {
                key: &applied_key,
                outcome: &applied,
                now: a.expires_at,
            })
            .await,
    ) {
        Reconciled::Recorded => {}
        other => panic!("{check}: expected Recorded, got {other:?}"),
    }
    match ok(
        check,
        store
            .claim(request(ns, applied_key, 1, 1, a.expires_at))
            .await,
    ) {
        RawClaim::Completed(r) => assert_eq!(r.attempt, 1, "{check}"),
        other => panic!("{check}: expected Completed, got {other:?}"),
    }
    // Closed by its own execution with a not-applied result (a failed
    // precondition): the version moved, and the model must read again.
    let failed_key = ns.key(17, 2);
    let f = acquire(check, store, request(ns, failed_key, 1, 1, T0)).await;
    let failed = json(r#"{"applied":false,"reason":"precondition_failed"}"#);
    let c = ok(
        check,
        complete(store, &failed_key, &f.holder, &failed, T0).await,
    );
    assert_eq!(c, Completion::Recorded, "{check}");
    match ok(check, store.claim(request(ns, failed_key, 1, 1, T0)).await) {
        RawClaim::Completed(r) => assert_eq!(r.attempt, 1, "{check}"),
        other => panic!("{check}: expected Completed, got {other:?}"),
    }
}

/// Many claims race for the next attempt of one operation reconciled as not
/// applied: exactly one wins attempt 2, every other one sees it in flight.
pub async fn concurrent_next_attempts_one_winner<S: ClaimStore + 'static>(
    store: Arc<S>,
    ns: &Namespace,
    spawn: Spawner,
    attempts: usize,
) {
    let check = "concurrent_next_attempts_one_winner";
    let key = ns.key(18, 0);
    let first = acquire(check, &*store, request(ns, key, 1, 1, T0)).await;
    let at = first.expires_at;
    let not_applied = ReconcileOutcome::NotApplied {
        detail: json(r#"{"applied":false}"#),
    };
    match ok(
        check,
        store
            .record_reconciliation(ReconcileRequest {
                key: &key,
                outcome: &not_applied,
                now: at,
            })
            .await,
    ) {
        Reconciled::Recorded => {}
        other => panic!("{check}: expected Recorded, got {other:?}"),
    }
    let mut tasks = Vec::with_capacity(attempts);
    for _ in 0..attempts {
        let store = Arc::clone(&store);
        let req = request(ns, key, 1, 1, at);
        tasks.push(spawn(Box::pin(async move { store.claim(req).await })));
    }
    let mut winners = Vec::new();
    for r in JoinAll::new(tasks).await {
        match ok(check, r) {
            RawClaim::Acquired(lease) => {
                assert_eq!(lease.attempt, 2, "{check}");
                winners.push(lease.holder);
            }
            RawClaim::InFlight(r) => assert_eq!(r.attempt, 2, "{check}"),
            other => panic!("{check}: unexpected {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "{check}: winners {winners:?}");
    let row = fetch(check, &*store, &key).await;
    assert_eq!(Some(&row.holder), winners.first(), "{check}");
    assert_eq!(row.attempt, 2, "{check}");
}

/// Runs every check. `attempts` is the race width (12 or more is a fair
/// race; each attempt may take a connection of its own).
pub async fn run_all<S: ClaimStore + 'static>(
    store: Arc<S>,
    ns: &Namespace,
    spawn: Spawner,
    attempts: usize,
) {
    first_claim_wins(&*store, ns).await;
    duplicate_in_flight(&*store, ns).await;
    different_fingerprint_is_mismatch(&*store, ns).await;
    completion_by_holder(&*store, ns).await;
    completion_by_wrong_holder(&*store, ns).await;
    completed_replays(&*store, ns).await;
    expired_lease_is_never_reacquired(&*store, ns).await;
    records_round_trip(&*store, ns).await;
    audit_is_append_only(&*store, ns).await;
    executor_kind_round_trips(&*store, ns).await;
    audited_completion(&*store, ns).await;
    completion_is_idempotent(&*store, ns).await;
    completion_after_the_lease_reconciles(&*store, ns).await;
    stuck_claims_and_reconciliation(&*store, ns).await;
    completion_after_takeover_reconciles(&*store, ns).await;
    not_applied_runs_again_as_the_next_attempt(&*store, ns).await;
    concurrent_next_attempts_one_winner(Arc::clone(&store), ns, spawn, attempts).await;
    concurrent_claims_one_winner(store, ns, spawn, attempts).await;
}

/// Polls every future until all are done (the core links no runtime, so
/// it brings its own minimal join).
struct JoinAll<T> {
    pending: Vec<Option<BoxFuture<T>>>,
    done: Vec<Option<T>>,
}

impl<T> JoinAll<T> {
    fn new(futures: Vec<BoxFuture<T>>) -> Self {
        let done = futures.iter().map(|_| None).collect();
        Self {
            pending: futures.into_iter().map(Some).collect(),
            done,
        }
    }
}

// Neither field is ever pinned in place: the futures are boxed, and the
// outputs are moved out only at the end.
impl<T> Unpin for JoinAll<T> {}

impl<T> Future for JoinAll<T> {
    type Output = Vec<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<T>> {
        let this = self.get_mut();
        let mut waiting = false;
        for (slot, out) in this.pending.iter_mut().zip(this.done.iter_mut()) {
            if let Some(fut) = slot {
                match fut.as_mut().poll(cx) {
                    Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(this.done.iter_mut().filter_map(Option::take).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claim::MemoryClaimStore;

    /// The memory store's futures are ready at their first poll; this runs
    /// one to its end without a runtime.
    fn block_on<F: Future>(fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        loop {
            if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
                return out;
            }
        }
    }

    fn inline(fut: BoxFuture<ClaimResult>) -> BoxFuture<ClaimResult> {
        fut
    }

    #[test]
    fn the_memory_store_passes_the_suite() {
        let store = Arc::new(MemoryClaimStore::new());
        block_on(run_all(store, &Namespace::new([7; 16]), inline, 12));
    }
}
