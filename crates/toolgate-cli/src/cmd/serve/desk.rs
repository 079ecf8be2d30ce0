//! The support desk's sidecar (`toolgate serve --demo`, a deployment with
//! `application = "support-desk"`, and `toolgate bench serve`): its
//! components, and how a decision holds one connection from its read to its
//! credit.

use toolgate::contract::{Checked, Policy};
use toolgate::pipeline::{Decision, Executor, Gate, GateError, Request};
use toolgate_cedar::CedarAuthorizer;
use toolgate_http::{AppState, Components, GateComponents, KeyRing, ResultCap, Settings};
use toolgate_store::{AnyClaimStore, StoreOptions};
use toolgate_support_desk::cedar::{self as desk_cedar, DeskEntities};
use toolgate_support_desk::{SeedTicket, SupportDesk, decide_reading_once, decide_reading_once_on};

/// The sidecar's components for the support desk. Each decision reads the
/// Cedar entities and the ticket's version in one statement, with sources
/// made for that decision alone ([`decide_reading_once`]).
pub struct DeskComponents(
    Components<CedarAuthorizer<DeskEntities>, SupportDesk, AnyClaimStore, SupportDesk>,
);

impl GateComponents for DeskComponents {
    type Authz = CedarAuthorizer<DeskEntities>;
    type State = SupportDesk;
    type Claims = AnyClaimStore;
    type Exec = SupportDesk;

    fn authorizer(&self) -> &Self::Authz {
        &self.0.authorizer
    }
    fn state(&self) -> &SupportDesk {
        &self.0.state
    }
    fn claims(&self) -> &AnyClaimStore {
        &self.0.claims
    }
    fn executor(&self) -> &SupportDesk {
        &self.0.executor
    }

    async fn decide<E: Executor>(
        &self,
        policy: &Policy,
        executor: &E,
        proposal: Checked,
        request: &Request<'_>,
    ) -> Result<Decision, GateError> {
        decide_reading_once(&self.gate(policy, executor), proposal, request).await
    }

    /// The credit is a transaction of the claim store's database, so the
    /// decision keeps its connection from its read through its claim to
    /// its credit and completion: one pool use per fresh credit.
    async fn decide_in_process(
        &self,
        policy: &Policy,
        cap: ResultCap,
        proposal: Checked,
        request: &Request<'_>,
    ) -> Result<Decision, GateError> {
        let held = self.claims().hold_through_completion();
        let desk = self.executor().on_held(&held);
        let executor = cap.wrap(&desk);
        let gate = Gate {
            policy,
            authorizer: self.authorizer(),
            state: self.state(),
            claims: &held,
            executor: &executor,
        };
        decide_reading_once_on(&gate, &held, proposal, request).await
    }
}

/// The support-desk sidecar on `db`: claim store, desk tables (seeded with
/// `seed` if given), Cedar authoriser. Shared with `toolgate bench serve`.
pub async fn desk_state(
    db: &str,
    create_if_missing: bool,
    policy: Policy,
    cedar: &str,
    keys: KeyRing,
    settings: Settings,
    seed: Option<&[SeedTicket]>,
) -> Result<AppState<DeskComponents>, String> {
    let options = StoreOptions {
        // A deployment's mistyped path must fail rather than start empty.
        create_if_missing,
        ..StoreOptions::default()
    };
    let store = AnyClaimStore::connect_with(db, options)
        .await
        .map_err(|e| format!("connecting to {}: {e}", toolgate_store::redact_url(db)))?;
    let desk = SupportDesk::on_store(&store)
        .await
        .map_err(|e| format!("the support desk tables: {e}"))?;
    if let Some(tickets) = seed {
        // Tickets already there stay as they are: a demo restarted on its
        // database, or a second process sharing it, must not fail here.
        desk.seed_missing(tickets)
            .await
            .map_err(|e| format!("seeding: {e}"))?;
    }
    let authorizer =
        CedarAuthorizer::new(cedar, &desk_cedar::mapping(), DeskEntities(desk.clone()))
            .map_err(|e| format!("Cedar policies: {e}"))?;
    let components = DeskComponents(Components {
        authorizer,
        state: desk.clone(),
        claims: store,
        executor: desk,
    });
    Ok(AppState::new(policy, components, keys, settings))
}
