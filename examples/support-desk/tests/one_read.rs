//! One read for the entities and the ticket's version
//! (`decide_reading_once`), on SQLite, PostgreSQL and MariaDB: the version
//! read with a decision's entities answers that decision's state read and
//! no other's, a retry of a completed credit is `replayed` however the
//! version moved (docs/design.md invariant 4), and an agent the ticket is
//! not assigned to is `forbidden` before any claim (invariant 3).

mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStore, CompleteRequest, Completion, ExecutorKind,
    OperationKey, RawClaim, StoreError,
};
use toolgate::contract::Policy;
use toolgate::pipeline::{
    AppliedCompletion, AuthzDecision, AuthzRequest, Completed, Decision, DecisionParts, ExecError,
    ExecPermit, Gate, Outcome, Reason, StateError, StateScope, StateVersion,
};
use toolgate_support_desk::cedar::DeskEntities;
use toolgate_support_desk::{DeskSession, ReadingOnce, SeedTicket, SupportDesk};

const AGENT: &str = "one-read-agent";

/// A fresh ticket at version 1, with a customer of its own (the daily
/// budget per customer then holds every credit here).
async fn ticket(d: &support::Desk, name: &str) -> SeedTicket {
    let run = support::hex(&support::random16());
    let t = SeedTicket {
        id: format!("or-{name}-{run}"),
        customer_id: format!("c-or-{name}-{run}"),
        assignee: AGENT.into(),
        version: 1,
    };
    d.desk.seed(std::slice::from_ref(&t)).await.unwrap();
    t
}

/// A credit of `amount` on `t` by the assigned agent, proposed at
/// version `seen`.
async fn credit(
    d: &support::Desk,
    t: &SeedTicket,
    seen: i64,
    amount: i64,
    reply: &str,
) -> Decision {
    credit_as(d, AGENT, None, t, seen, amount, reply).await
}

/// [`credit`] proposed by `agent`, decided as `decide_reading_once`
/// decides (read and claim on one held connection), with `hook` run just
/// before the claim.
async fn credit_as(
    d: &support::Desk,
    agent: &str,
    hook: Option<Hook<'_>>,
    t: &SeedTicket,
    seen: i64,
    amount: i64,
    reply: &str,
) -> Decision {
    let proposal = support::Proposal {
        agent,
        customer: &t.customer_id,
        ticket: &t.id,
        seen,
        amount,
        reason: "late_delivery",
        reply,
    };
    let gate = Gate {
        policy: &d.policy,
        authorizer: &d.authorizer,
        state: &d.desk,
        claims: &d.store,
        executor: &d.desk,
    };
    let parts = Between::new(ReadingOnce::new(&gate), hook);
    let mut session = parts.inner.session();
    let decided = d.decide_on(&parts, &mut session, &proposal).await;
    assert!(parts.ran(), "the hook did not run before the claim");
    decided
}

fn outcome(d: &Decision) -> (Outcome, Option<Reason>) {
    (d.outcome(), d.reason())
}

/// One after another on one ticket: each decision compares `version_seen`
/// with the version its own authorisation read.
async fn each_decision_reads_its_own_version(url: &str) {
    let d = support::Desk::open(url).await;
    let t = ticket(&d, "seq").await;

    let first = credit(&d, &t, 1, 1500, "Done.").await;
    assert_eq!(outcome(&first), (Outcome::Executed, None), "{first:?}");
    assert_eq!(d.desk.ticket_version(&t.id).await.unwrap(), Some(2));

    // The retry after the version moved: the stale version looks the
    // claim up before answering, and finds the credit.
    let retry = credit(&d, &t, 1, 1500, "Did it.").await;
    assert_eq!(outcome(&retry), (Outcome::Replayed, None), "{retry:?}");

    // A new proposal at version 2 passes on its own read (the first
    // decision's read, version 1, would have stopped it).
    let second = credit(&d, &t, 2, 900, "Done.").await;
    assert_eq!(outcome(&second), (Outcome::Executed, None), "{second:?}");
    // Its retry reads version 3 with the entities and, a replay, never
    // asks for it: that read dies with the decision.
    let again = credit(&d, &t, 2, 900, "Did it.").await;
    assert_eq!(outcome(&again), (Outcome::Replayed, None), "{again:?}");

    // The ticket moves to 4 outside the gate. A proposal at version 3 is
    // stale: state_changed before any claim, with the version this
    // decision read. Had the replay's unused 3 reached it, it would have
    // passed the filter and been claimed, and the executor's precondition
    // would have closed that claim as precondition_failed.
    support::edit(&d.store, &t.id).await;
    let stale = credit(&d, &t, 3, 500, "Done.").await;
    assert_eq!(
        outcome(&stale),
        (Outcome::StateChanged, Some(Reason::VersionMismatch)),
        "{stale:?}"
    );
    assert_eq!(stale.current_version(), Some(&StateVersion::from(4)));
    let key = stale.key().expect("a bound decision has its key");
    assert!(d.store.fetch(&key).await.unwrap().is_none());

    // The first credit, retried once more three versions later.
    let late = credit(&d, &t, 1, 1500, "Did it.").await;
    assert_eq!(outcome(&late), (Outcome::Replayed, None), "{late:?}");

    assert_eq!(d.desk.credit_count(&t.id).await.unwrap(), 2);
    assert_eq!(d.desk.ticket_version(&t.id).await.unwrap(), Some(4));
}

type Hook<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// The desk's parts, with `hook` run once, just before the first claim:
/// another decision, between this decision's read of the entities and the
/// version (which its state read uses) and its claim.
struct Between<'a> {
    inner: ReadingOnce<'a, DeskEntities, SupportDesk>,
    hook: Mutex<Option<Hook<'a>>>,
}

impl<'a> Between<'a> {
    fn new(inner: ReadingOnce<'a, DeskEntities, SupportDesk>, hook: Option<Hook<'a>>) -> Self {
        Self {
            inner,
            hook: Mutex::new(hook),
        }
    }

    fn ran(&self) -> bool {
        self.hook.lock().unwrap().is_none()
    }
}

impl<'a> DecisionParts for Between<'a> {
    type Session = DeskSession<'a>;

    fn policy(&self) -> &Policy {
        self.inner.policy()
    }

    fn authorize(
        &self,
        s: &mut DeskSession<'a>,
        r: &AuthzRequest<'_>,
    ) -> impl Future<Output = AuthzDecision> + Send {
        self.inner.authorize(s, r)
    }

    fn reads_state(&self, tool: &str) -> bool {
        self.inner.reads_state(tool)
    }

    fn current_version(
        &self,
        s: &mut DeskSession<'a>,
        scope: StateScope<'_>,
    ) -> impl Future<Output = Result<StateVersion, StateError>> + Send {
        self.inner.current_version(s, scope)
    }

    fn executor_kind(&self, tool: &str) -> ExecutorKind {
        self.inner.executor_kind(tool)
    }

    async fn claim(
        &self,
        s: &mut DeskSession<'a>,
        request: ClaimRequest,
    ) -> Result<RawClaim, StoreError> {
        let hook = self.hook.lock().unwrap().take();
        if let Some(hook) = hook {
            hook.await;
        }
        self.inner.claim(s, request).await
    }

    fn fetch(
        &self,
        s: &mut DeskSession<'a>,
        key: &OperationKey,
    ) -> impl Future<Output = Result<Option<ClaimRecord>, StoreError>> + Send {
        self.inner.fetch(s, key)
    }

    fn execute_and_complete(
        &self,
        s: &mut DeskSession<'a>,
        permit: ExecPermit<'_>,
        completion: &AppliedCompletion,
    ) -> impl Future<Output = Result<Completed, ExecError>> + Send {
        self.inner.execute_and_complete(s, permit, completion)
    }

    fn complete(
        &self,
        s: &mut DeskSession<'a>,
        request: CompleteRequest,
    ) -> impl Future<Output = Result<Completion, StoreError>> + Send {
        self.inner.complete(s, request)
    }

    fn append_audit(
        &self,
        s: &mut DeskSession<'a>,
        entry: &AuditEntry,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner.append_audit(s, entry)
    }
}

/// Two decisions on one ticket, the second wholly inside the first's
/// window between its read and its state read.
async fn an_interleaved_decision_keeps_its_own_read(url: &str) {
    let d = support::Desk::open(url).await;
    let t = ticket(&d, "inner").await;

    // The outer proposal is at version 1 and reads version 1. Inside its
    // window the ticket is edited (2) and a proposal at version 2 reads 2,
    // passes and is written (3). The outer decision then compares with
    // its own read: the filter passes on a version already stale, and the
    // executor's precondition, the check that holds, writes nothing.
    let between: Hook<'_> = Box::pin(async {
        support::edit(&d.store, &t.id).await;
        let inner = credit(&d, &t, 2, 900, "Done.").await;
        assert_eq!(outcome(&inner), (Outcome::Executed, None), "{inner:?}");
    });
    let outer = credit_as(&d, AGENT, Some(between), &t, 1, 1500, "Done.").await;
    assert_eq!(
        outcome(&outer),
        (Outcome::StateChanged, Some(Reason::PreconditionFailed)),
        "{outer:?}"
    );
    assert_eq!(outer.current_version(), Some(&StateVersion::from(3)));
    assert_eq!(d.desk.credit_count(&t.id).await.unwrap(), 1);
    assert_eq!(d.desk.ticket_version(&t.id).await.unwrap(), Some(3));
}

/// A retry racing its original (invariant 4): the retry reads the
/// entities and version 1, and only then does the original claim, write
/// (version 2) and complete. The retry's
/// version, read before the original's write, matches its `version_seen`;
/// the claim step finds the original's claim, and the retry is `replayed`.
async fn a_retry_racing_its_original_is_replayed(url: &str) {
    let d = support::Desk::open(url).await;
    let t = ticket(&d, "race").await;

    let between: Hook<'_> = Box::pin(async {
        let original = credit(&d, &t, 1, 1500, "Done.").await;
        assert_eq!(
            outcome(&original),
            (Outcome::Executed, None),
            "{original:?}"
        );
    });
    let retry = credit_as(&d, AGENT, Some(between), &t, 1, 1500, "Did it.").await;
    assert_eq!(outcome(&retry), (Outcome::Replayed, None), "{retry:?}");
    assert_eq!(d.desk.credit_count(&t.id).await.unwrap(), 1);
    assert_eq!(d.desk.ticket_version(&t.id).await.unwrap(), Some(2));
}

/// Invariant 3 with the read's connection lent to the claim: authorisation
/// runs on what that read returned before the claim store is reached, so
/// an active agent the ticket is not assigned to gets `forbidden` for a
/// retry of a credit already made (no recorded result) and for a fresh
/// proposal (nothing written), and the assigned agent then claims and
/// writes as before.
async fn another_agent_is_forbidden_before_any_claim(url: &str) {
    let d = support::Desk::open(url).await;
    let t = ticket(&d, "authz").await;
    let other = format!("{AGENT}-other");
    // The other agent exists and is active: assigned a ticket of its own.
    d.desk
        .seed(&[SeedTicket {
            id: format!("{}-theirs", t.id),
            customer_id: t.customer_id.clone(),
            assignee: other.clone(),
            version: 1,
        }])
        .await
        .unwrap();

    let first = credit(&d, &t, 1, 1500, "Done.").await;
    assert_eq!(outcome(&first), (Outcome::Executed, None), "{first:?}");

    // The same operation (the key holds no actor), asked by the other
    // agent: never the recorded result.
    let retry = credit_as(&d, &other, None, &t, 1, 1500, "Did it.").await;
    assert_eq!(
        outcome(&retry),
        (Outcome::Forbidden, Some(Reason::NotAuthorized)),
        "{retry:?}"
    );
    assert_eq!(retry.result(), None);

    // A fresh proposal by the other agent writes nothing.
    let fresh = credit_as(&d, &other, None, &t, 2, 900, "Done.").await;
    assert_eq!(
        outcome(&fresh),
        (Outcome::Forbidden, Some(Reason::NotAuthorized)),
        "{fresh:?}"
    );
    assert_eq!(d.desk.credit_count(&t.id).await.unwrap(), 1);
    assert_eq!(d.desk.ticket_version(&t.id).await.unwrap(), Some(2));

    // The assigned agent's proposal at version 2 is claimed and written.
    let second = credit(&d, &t, 2, 900, "Done.").await;
    assert_eq!(outcome(&second), (Outcome::Executed, None), "{second:?}");
    assert_eq!(d.desk.credit_count(&t.id).await.unwrap(), 2);
}

async fn all_on(url: &str) {
    each_decision_reads_its_own_version(url).await;
    an_interleaved_decision_keeps_its_own_read(url).await;
    a_retry_racing_its_original_is_replayed(url).await;
    another_agent_is_forbidden_before_any_claim(url).await;
}

#[tokio::test]
async fn one_read_sqlite() {
    let path = std::env::temp_dir().join(format!(
        "toolgate-one-read-{}.db",
        support::hex(&support::random16())
    ));
    all_on(&format!("sqlite://{}", path.display())).await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

#[tokio::test]
async fn one_read_postgres() {
    if let Some(url) = support::database_url("TOOLGATE_TEST_POSTGRES_URL", "PostgreSQL") {
        all_on(&url).await;
    }
}

#[tokio::test]
async fn one_read_mysql() {
    if let Some(url) = support::database_url("TOOLGATE_TEST_MYSQL_URL", "MariaDB") {
        all_on(&url).await;
    }
}
