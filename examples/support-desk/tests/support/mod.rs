//! Shared by the example's test targets: database URLs from the
//! environment and fresh names per run.

#![allow(dead_code, reason = "each test target uses a different subset")]

use std::io::Write;

use std::time::Duration;

use serde_json::{Map, json};
use toolgate::claim::ClaimStore;
use toolgate::contract::{self, CheckOptions, Policy};
use toolgate::pipeline::{
    Decision, DecisionParts, Executor, Gate, Principal, Request, StateVersion, decide_in,
};
use toolgate::provider::Provider;
use toolgate_cedar::CedarAuthorizer;
use toolgate_store::{AnyClaimStore, fresh_holder};
use toolgate_support_desk::cedar::{self as desk_cedar, DeskEntities};
use toolgate_support_desk::{POLICY, ReadingOnce, SupportDesk};

/// Set to `1` (CI does) to turn a missing database into a failure instead
/// of a skip.
pub const REQUIRE: &str = "TOOLGATE_REQUIRE_DATABASES";

/// The database URL in `var`, or `None` (after saying so) when it is unset
/// and databases are not required.
pub fn database_url(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                !std::env::var(REQUIRE).is_ok_and(|v| v == "1"),
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

/// 16 random bytes, to name this run's rows.
pub fn random16() -> [u8; 16] {
    *toolgate_store::fresh_holder()
        .expect("random number generator")
        .as_bytes()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The support desk on one database, with its Cedar authoriser and policy.
pub struct Desk {
    pub store: AnyClaimStore,
    pub desk: SupportDesk,
    pub authorizer: CedarAuthorizer<DeskEntities>,
    pub policy: Policy,
}

impl Desk {
    /// Connects to `url` and migrates the desk's tables.
    pub async fn open(url: &str) -> Desk {
        let store = AnyClaimStore::connect(url).await.unwrap();
        let desk = SupportDesk::on_store(&store).await.unwrap();
        let authorizer = CedarAuthorizer::new(
            desk_cedar::POLICIES,
            &desk_cedar::mapping(),
            DeskEntities(desk.clone()),
        )
        .unwrap();
        Desk {
            store,
            desk,
            authorizer,
            policy: Policy::load(POLICY).unwrap(),
        }
    }
}

/// A goodwill credit a model proposes, by `agent` on `ticket` of
/// `customer`, at version `seen`.
pub struct Proposal<'a> {
    pub agent: &'a str,
    pub customer: &'a str,
    pub ticket: &'a str,
    pub seen: i64,
    pub amount: i64,
    pub reason: &'a str,
    pub reply: &'a str,
}

impl Desk {
    /// Decides `p` with the pipeline's `decide`, through the desk's
    /// authoriser and state source, `claims` and `executor`.
    pub async fn decide<C: ClaimStore, E: Executor>(
        &self,
        claims: &C,
        executor: &E,
        p: &Proposal<'_>,
    ) -> Decision {
        let gate = Gate {
            policy: &self.policy,
            authorizer: &self.authorizer,
            state: &self.desk,
            claims,
            executor,
        };
        self.decide_on(&gate, &mut (), p).await
    }

    /// The desk's parts that read the entities and the version once, as
    /// `toolgate serve` decides: its credit and completion on the
    /// connection the read kept and the claim committed on.
    pub fn crediting(&self) -> ReadingOnce<'_, DeskEntities, SupportDesk> {
        ReadingOnce::crediting(
            &self.policy,
            &self.authorizer,
            &self.desk,
            &self.store,
            toolgate_service::ResultCap::new(usize::MAX),
        )
    }

    /// Decides `p` on `parts` with `session`, now, with a fresh holder and
    /// a 30-second lease.
    pub async fn decide_on<P: DecisionParts>(
        &self,
        parts: &P,
        session: &mut P::Session,
        p: &Proposal<'_>,
    ) -> Decision {
        let body = json!({"outcome":"action","reply":p.reply,"proposed_action":{
            "tool":"apply_goodwill_credit",
            "arguments":{"amount_minor":p.amount,"reason_code":p.reason}}});
        let proposal = contract::check(
            &self.policy,
            Provider::Envelope,
            body.to_string().as_bytes(),
            &CheckOptions::default(),
        );
        let principal = Principal::new(p.agent, ["credit:issue"]).unwrap();
        let mut scope = Map::new();
        scope.insert("customer_id".into(), json!(p.customer));
        scope.insert("ticket_id".into(), json!(p.ticket));
        let seen = StateVersion::from(p.seen);
        let request = Request {
            principal: &principal,
            scope: &toolgate::pipeline::Scope::new(scope.clone(), Some(seen.clone())),
            attributes: &Map::new(),
            approval: None,
            now: toolgate_store::now_millis(),
            holder: fresh_holder().unwrap(),
            lease: Duration::from_secs(30),
        };
        decide_in(parts, session, proposal, &request).await.unwrap()
    }
}

/// A statement's one parameter.
pub enum Arg {
    /// Bytes (a key).
    Bytes(Vec<u8>),
    /// Text.
    Text(String),
}

/// Runs `qm` (`pg` on PostgreSQL) with `arg` on the store's own pool; the
/// rows it changed.
pub async fn exec(store: &AnyClaimStore, qm: &'static str, pg: &'static str, arg: Arg) -> u64 {
    macro_rules! run {
        ($sql:expr, $pool:expr) => {
            match arg {
                Arg::Bytes(b) => sqlx::query($sql).bind(b).execute($pool).await,
                Arg::Text(t) => sqlx::query($sql).bind(t).execute($pool).await,
            }
            .unwrap()
            .rows_affected()
        };
    }
    match store {
        AnyClaimStore::Sqlite(s) => run!(qm, s.pool()),
        AnyClaimStore::Postgres(s) => run!(pg, s.pool()),
        AnyClaimStore::MySql(s) => run!(qm, s.pool()),
    }
}

/// A person edits the ticket outside the gate: its version moves on.
pub async fn edit(store: &AnyClaimStore, ticket: &str) {
    let changed = exec(
        store,
        "UPDATE tickets SET version = version + 1 WHERE id = ?",
        "UPDATE tickets SET version = version + 1 WHERE id = $1",
        Arg::Text(ticket.to_owned()),
    )
    .await;
    assert_eq!(changed, 1);
}
