//! The support-desk executor and state source through the real pipeline, on
//! SQLite (and PostgreSQL / MariaDB when their URLs are set): the credit is a
//! conditional write that advances the ticket version, a stale precondition
//! writes nothing, and reconciliation finds the credit by operation key.

mod support;

use std::future::Future;
use std::time::Duration;

use serde_json::{Map, json};
use toolgate::claim::{ClaimStore, ReconcileOutcome};
use toolgate::contract::{self, CheckOptions, Policy};
use toolgate::pipeline::{
    Authorizer, AuthzDecision, AuthzRequest, Decision, Executor, Gate, Outcome, Principal, Reason,
    Request, StateError, StateScope, StateSource, StateVersion, decide,
};
use toolgate::provider::Provider;
use toolgate_store::{AnyClaimStore, fresh_holder};
use toolgate_support_desk::{Directory, POLICY, SeedTicket, SupportDesk, TicketOwner};

struct AllowAll;
impl Authorizer for AllowAll {
    fn authorize(&self, _r: &AuthzRequest<'_>) -> impl Future<Output = AuthzDecision> + Send {
        std::future::ready(AuthzDecision::Allow)
    }
}

/// A state source that always reports version 1: a stale read, so the
/// executor's precondition is the only guard left.
struct Stale;
impl StateSource for Stale {
    fn current_version(
        &self,
        _s: StateScope<'_>,
    ) -> impl Future<Output = Result<StateVersion, StateError>> + Send {
        std::future::ready(Ok(StateVersion::from(1)))
    }
}

async fn credit<S: StateSource>(
    store: &AnyClaimStore,
    desk: &SupportDesk,
    state: &S,
    customer: &str,
    ticket: &str,
    seen: i64,
    amount: i64,
) -> Decision {
    let policy = Policy::load(POLICY).unwrap();
    let body = json!({"outcome":"action","reply":"Done.","proposed_action":{
        "tool":"apply_goodwill_credit","arguments":{"amount_minor":amount,"reason_code":"damaged_item"}}});
    let proposal = contract::check(
        &policy,
        Provider::Envelope,
        body.to_string().as_bytes(),
        &CheckOptions::default(),
    );
    let gate = Gate {
        policy: &policy,
        authorizer: &AllowAll,
        state,
        claims: store,
        executor: desk,
    };
    let principal = Principal::new("agent-1", ["credit:issue"]).unwrap();
    let mut scope = Map::new();
    scope.insert("customer_id".into(), json!(customer));
    scope.insert("ticket_id".into(), json!(ticket));
    let seen = StateVersion::from(seen);
    let request = Request {
        principal: &principal,
        scope: &toolgate::pipeline::Scope::new(scope.clone(), Some(seen.clone())),
        attributes: &Map::new(),
        approval: None,
        now: toolgate_store::now_millis(),
        holder: fresh_holder().unwrap(),
        lease: Duration::from_secs(30),
    };
    decide(&gate, proposal, &request).await.unwrap()
}

async fn support_desk_on(url: &str) {
    let store = AnyClaimStore::connect(url).await.unwrap();
    let desk = SupportDesk::on_store(&store).await.unwrap();
    let run = support::hex(&support::random16());
    let ticket = format!("t-{run}");
    let customer = format!("c-{run}");
    desk.seed(&[SeedTicket {
        id: ticket.clone(),
        customer_id: customer.clone(),
        assignee: "agent-1".into(),
        version: 1,
    }])
    .await
    .unwrap();

    // A credit at the current version: applied, version advanced.
    let d = credit(&store, &desk, &desk, &customer, &ticket, 1, 1500).await;
    assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
    assert_eq!(d.result().unwrap()["version_after"], 2);
    assert_eq!(desk.ticket_version(&ticket).await.unwrap(), Some(2));
    assert_eq!(desk.credit_count(&ticket).await.unwrap(), 1);

    // The gate's own state read catches a stale version.
    let d = credit(&store, &desk, &desk, &customer, &ticket, 1, 900).await;
    assert_eq!(
        d.outcome(),
        Outcome::Conflict,
        "same key, other amount: {d:?}"
    );
    let d = credit(
        &store,
        &desk,
        &desk,
        &format!("{customer}-x"),
        &ticket,
        1,
        900,
    )
    .await;
    assert_eq!(
        (d.outcome(), d.reason()),
        (Outcome::StateChanged, Some(Reason::VersionMismatch))
    );

    // With a stale state read (another key for the same ticket), the
    // executor's precondition refuses the write.
    let d = credit(
        &store,
        &desk,
        &Stale,
        &format!("{customer}-y"),
        &ticket,
        1,
        700,
    )
    .await;
    assert_eq!(
        (d.outcome(), d.reason()),
        (Outcome::StateChanged, Some(Reason::PreconditionFailed)),
        "{d:?}"
    );
    assert_eq!(d.current_version().unwrap().as_str(), "2");
    assert_eq!(desk.credit_count(&ticket).await.unwrap(), 1);
    assert_eq!(desk.ticket_version(&ticket).await.unwrap(), Some(2));

    // Reconciliation asks the credits table by operation key.
    let stale_key = d.key().unwrap();
    let applied = store
        .fetch(
            &credit(&store, &desk, &desk, &customer, &ticket, 1, 1500)
                .await
                .key()
                .unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    match desk.reconcile(&applied).await.unwrap() {
        ReconcileOutcome::Applied { receipt } => {
            assert_eq!(receipt.value().unwrap()["amount_minor"], 1500);
        }
        other => panic!("{other:?}"),
    }
    let not_applied = store.fetch(&stale_key).await.unwrap().unwrap();
    assert!(matches!(
        desk.reconcile(&not_applied).await.unwrap(),
        ReconcileOutcome::NotApplied { .. }
    ));

    // The directory, as the authoriser reads it, with the version the
    // credit moved the ticket to.
    assert_eq!(
        desk.directory("agent-1", &ticket).await.unwrap(),
        Directory {
            agent_active: Some(true),
            ticket: Some(TicketOwner {
                customer_id: customer.clone(),
                assignee: "agent-1".into(),
                version: 2,
            }),
        }
    );
    assert_eq!(
        desk.directory("no-such-agent", "no-such-ticket")
            .await
            .unwrap(),
        Directory {
            agent_active: None,
            ticket: None,
        }
    );

    // Seeding again: `seed` refuses a ticket that exists; `seed_missing`
    // leaves it, and the version its credit moved it to, as it is.
    let again = SeedTicket {
        id: ticket.clone(),
        customer_id: customer.clone(),
        assignee: "agent-1".into(),
        version: 1,
    };
    assert!(desk.seed(std::slice::from_ref(&again)).await.is_err());
    desk.seed_missing(std::slice::from_ref(&again))
        .await
        .unwrap();
    assert_eq!(desk.ticket_version(&ticket).await.unwrap(), Some(2));
    assert_eq!(desk.credit_count(&ticket).await.unwrap(), 1);

    // Two seedings of the same new rows at once (two demo processes
    // starting together) both succeed.
    let fresh: Vec<SeedTicket> = (0..3)
        .map(|i| SeedTicket {
            id: format!("{ticket}-n{i}"),
            customer_id: format!("{customer}-n"),
            assignee: format!("agent-{run}"),
            version: 4,
        })
        .collect();
    let (a, b) = tokio::join!(desk.seed_missing(&fresh), desk.seed_missing(&fresh));
    a.unwrap();
    b.unwrap();
    for t in &fresh {
        assert_eq!(desk.ticket_version(&t.id).await.unwrap(), Some(4));
    }
}

#[tokio::test]
async fn sqlite_support_desk() {
    let path = std::env::temp_dir().join(format!(
        "toolgate-desk-{}.db",
        support::hex(&support::random16())
    ));
    support_desk_on(&format!("sqlite://{}", path.display())).await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn postgres_support_desk() {
    if let Some(url) = support::database_url("TOOLGATE_TEST_POSTGRES_URL", "PostgreSQL") {
        support_desk_on(&url).await;
    }
}

#[tokio::test]
async fn mysql_support_desk() {
    if let Some(url) = support::database_url("TOOLGATE_TEST_MYSQL_URL", "MariaDB") {
        support_desk_on(&url).await;
    }
}
