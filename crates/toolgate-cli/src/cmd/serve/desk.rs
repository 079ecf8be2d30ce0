//! The support desk's sidecar (`toolgate serve --demo`, a deployment with
//! `application = "support-desk"`, and `toolgate bench serve`): its
//! components, and how a decision holds one connection from its read to its
//! credit.

use std::sync::Arc;

use toolgate::contract::{Checked, Policy};
use toolgate::pipeline::{Decision, Gate, GateError, Request};
use toolgate_cedar::CedarAuthorizer;
use toolgate_service::{
    Authz, BoxFuture, Components, Exec, ExecRef, KeyRing, ResultCap, Service, Settings, State,
    Store,
};
use toolgate_store::{AnyClaimStore, StoreOptions};
use toolgate_support_desk::cedar::{self as desk_cedar, DeskEntities};
use toolgate_support_desk::{ReadingOnce, SeedTicket, SupportDesk, decide_reading_once};

/// The service's components for the support desk. Each decision reads the
/// Cedar entities and the ticket's version in one statement, with sources
/// made for that decision alone ([`decide_reading_once`]), so the desk
/// keeps its concrete parts beside the boxed ones the service asks.
pub struct DeskComponents {
    authorizer: Arc<CedarAuthorizer<DeskEntities>>,
    desk: Arc<SupportDesk>,
    store: AnyClaimStore,
    boxed: (Authz, State, Store, Exec),
}

impl DeskComponents {
    fn new(
        authorizer: CedarAuthorizer<DeskEntities>,
        desk: SupportDesk,
        store: AnyClaimStore,
    ) -> Self {
        let authorizer = Arc::new(authorizer);
        let desk = Arc::new(desk);
        let boxed = (
            Authz::shared(Arc::clone(&authorizer)),
            State::shared(Arc::clone(&desk)),
            Store::new(store.clone()),
            Exec::shared(Arc::clone(&desk)),
        );
        Self {
            authorizer,
            desk,
            store,
            boxed,
        }
    }
}

impl Components for DeskComponents {
    fn authorizer(&self) -> &Authz {
        &self.boxed.0
    }
    fn state(&self) -> &State {
        &self.boxed.1
    }
    fn store(&self) -> &Store {
        &self.boxed.2
    }
    fn executor(&self) -> &Exec {
        &self.boxed.3
    }

    fn decide<'a>(
        &'a self,
        policy: &'a Policy,
        executor: ExecRef<'a>,
        proposal: Checked,
        request: &'a Request<'a>,
    ) -> BoxFuture<'a, Result<Decision, GateError>> {
        Box::pin(async move {
            let gate = Gate {
                policy,
                authorizer: &*self.authorizer,
                state: &*self.desk,
                claims: &self.store,
                executor: &executor,
            };
            decide_reading_once(&gate, proposal, request).await
        })
    }

    /// The credit is a transaction of the claim store's database, so the
    /// decision keeps its connection from its read through its claim to
    /// its credit and completion: one pool use per fresh credit.
    fn decide_in_process<'a>(
        &'a self,
        policy: &'a Policy,
        cap: ResultCap,
        proposal: Checked,
        request: &'a Request<'a>,
    ) -> BoxFuture<'a, Result<Decision, GateError>> {
        Box::pin(async move {
            let parts =
                ReadingOnce::crediting(policy, &self.authorizer, &self.desk, &self.store, cap);
            parts.decide(proposal, request).await
        })
    }
}

/// The support-desk service on `db`: claim store, desk tables (seeded with
/// `seed` if given), Cedar authoriser; and the desk, for its tickets.
/// Shared with `toolgate bench serve`.
pub async fn desk_state(
    db: &str,
    create_if_missing: bool,
    policy: Policy,
    cedar: &str,
    keys: KeyRing,
    settings: Settings,
    seed: Option<&[SeedTicket]>,
) -> Result<(Service, SupportDesk), String> {
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
    let components = DeskComponents::new(authorizer, desk.clone(), store);
    Ok((Service::new(policy, components, keys, settings), desk))
}
