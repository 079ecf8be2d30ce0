//! A small in-memory support desk for the HTTP tests: tickets with
//! versions, an authoriser that can revoke an agent, and an executor that
//! writes credits with the version as its precondition.

#![allow(dead_code, reason = "each test binary uses part of the support")]

pub mod databases;
pub mod http;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStore, CompleteRequest, Completion, JsonText,
    MemoryClaimStore, OperationKey, RawClaim, ReconcileOutcome, ReconcileRequest, Reconciled,
    StoreError, StoreErrorKind, StuckEntry, UnixMillis,
};
use toolgate::contract::Policy;
use toolgate::idempotency::{Begun, Bounds, IdemBegin, IdemFinish, IdemRun, IdempotencyStore};
use toolgate::pipeline::{
    Authorizer, AuthzDecision, AuthzRequest, ExecError, ExecOutcome, ExecPermit, Executor,
    Principal, StateError, StateScope, StateSource, StateVersion,
};
use toolgate::review::{
    Closed, Closing, ListQuery, NewItem, Opened, QueueLimits, Requested, ReviewItem, ReviewSession,
    ReviewStore, ReviewerAct, Verdict, Voted,
};
use toolgate_http::{AppState, Settings};
use toolgate_service::{ApiKey, Components, ExecutionMode, KeyRing, Parts, Service};

/// The service's settings as the HTTP tests run it.
pub fn service_settings() -> toolgate_service::Settings {
    toolgate_service::Settings::default()
}

/// The HTTP door's settings and the service's, as a test sets them: either
/// converts, the other at its default.
#[derive(Clone)]
pub struct Both {
    pub http: Settings,
    pub service: toolgate_service::Settings,
}

impl Default for Both {
    fn default() -> Self {
        Self {
            http: Settings::default(),
            service: service_settings(),
        }
    }
}

impl From<Settings> for Both {
    fn from(http: Settings) -> Self {
        Self {
            http,
            ..Self::default()
        }
    }
}

impl From<toolgate_service::Settings> for Both {
    fn from(service: toolgate_service::Settings) -> Self {
        Self {
            service,
            ..Self::default()
        }
    }
}

/// The HTTP door to a service over `components`, for `keys`.
pub fn new_app(
    policy: Policy,
    components: impl Components,
    keys: KeyRing,
    settings: impl Into<Both>,
) -> AppState {
    let Both { http, service } = settings.into();
    AppState::new(Service::new(policy, components, keys, service), http)
}

pub const POLICY: &str = include_str!("policy.toml");

pub const AGENT_KEY: &str = "tg_test_agent_key";
pub const CLIENT_KEY: &str = "tg_test_client_key";
pub const REVIEWER_KEY: &str = "tg_test_reviewer_key";
pub const OPERATOR_KEY: &str = "tg_test_operator_key";
pub const NOCAP_KEY: &str = "tg_test_nocap_key";
pub const METRICS_KEY: &str = "tg_test_metrics_key";
/// A key that may both propose refunds and review (`lead-1`).
pub const LEAD_KEY: &str = "tg_test_lead_key";
/// A second reviewer (`reviewer-2`).
pub const REVIEWER2_KEY: &str = "tg_test_reviewer2_key";

#[derive(Default)]
pub struct Desk {
    pub versions: Mutex<HashMap<String, String>>,
    pub credits: Mutex<Vec<(String, String, Value)>>,
    pub revoked: Mutex<HashSet<String>>,
    /// When set, the executor fails with an unknown outcome.
    pub fail_execute: Mutex<bool>,
    /// When set, the executor panics (a decision task that fails
    /// unexpectedly: 500 `internal`).
    pub panic_execute: Mutex<bool>,
}

#[derive(Clone, Default)]
pub struct DeskRef(pub Arc<Desk>);

impl DeskRef {
    pub fn set_version(&self, ticket: &str, v: &str) {
        self.0
            .versions
            .lock()
            .unwrap()
            .insert(ticket.to_owned(), v.to_owned());
    }

    pub fn credits_for(&self, ticket: &str) -> usize {
        self.0
            .credits
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.0 == ticket)
            .count()
    }
}

impl Authorizer for DeskRef {
    async fn authorize(&self, r: &AuthzRequest<'_>) -> AuthzDecision {
        if self.0.revoked.lock().unwrap().contains(r.principal().id()) {
            AuthzDecision::Deny {
                message: "access revoked".into(),
            }
        } else {
            AuthzDecision::Allow
        }
    }
}

impl StateSource for DeskRef {
    async fn current_version(&self, s: StateScope<'_>) -> Result<StateVersion, StateError> {
        let ticket = s
            .field("ticket_id")
            .ok_or_else(|| StateError::new("no ticket_id"))?;
        let v = self.0.versions.lock().unwrap().get(&ticket).cloned();
        v.and_then(StateVersion::new)
            .ok_or_else(|| StateError::new("no such ticket"))
    }
}

impl Executor for DeskRef {
    async fn execute(&self, p: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        if *self.0.panic_execute.lock().unwrap() {
            panic!("the executor broke (as the test asked)");
        }
        if *self.0.fail_execute.lock().unwrap() {
            return Err(ExecError::new("downstream timed out"));
        }
        let ticket = p.field("ticket_id").unwrap_or_default();
        let current = self.0.versions.lock().unwrap().get(&ticket).cloned();
        if current.as_deref() != Some(p.precondition().as_str()) {
            return Ok(ExecOutcome::PreconditionFailed {
                current: current.and_then(StateVersion::new),
            });
        }
        let mut credits = self.0.credits.lock().unwrap();
        credits.push((ticket, p.key().to_hex(), p.arguments().clone()));
        let receipt = json!({"credit_id": credits.len(), "arguments": p.arguments()});
        Ok(ExecOutcome::Applied {
            receipt: JsonText::result(receipt.to_string()).unwrap(),
        })
    }

    async fn reconcile(&self, claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        let hex = claim.key.to_hex();
        let found = self.0.credits.lock().unwrap().iter().any(|c| c.1 == hex);
        let text = JsonText::result(json!({"found": found}).to_string()).unwrap();
        Ok(if found {
            ReconcileOutcome::Applied { receipt: text }
        } else {
            ReconcileOutcome::NotApplied { detail: text }
        })
    }
}

fn key(text: &str, id: &str, caps: &[&str], mode: ExecutionMode) -> ApiKey {
    ApiKey {
        sha256: ApiKey::digest(text),
        principal: Principal::new(id, caps.iter().copied()).unwrap(),
        mode,
        act_for_users: false,
    }
}

pub fn keys() -> KeyRing {
    KeyRing::new([
        key(
            AGENT_KEY,
            "agent-1",
            &["credit:issue", "refund:issue"],
            ExecutionMode::InProcess,
        ),
        key(
            CLIENT_KEY,
            "php-app",
            &["credit:issue", "refund:issue"],
            ExecutionMode::Client,
        ),
        key(
            REVIEWER_KEY,
            "reviewer-1",
            &["toolgate:review"],
            ExecutionMode::InProcess,
        ),
        key(
            OPERATOR_KEY,
            "operator-1",
            &["toolgate:operate"],
            ExecutionMode::InProcess,
        ),
        key(NOCAP_KEY, "agent-2", &[], ExecutionMode::InProcess),
        key(
            LEAD_KEY,
            "lead-1",
            &["refund:issue", "toolgate:review"],
            ExecutionMode::InProcess,
        ),
        key(
            REVIEWER2_KEY,
            "reviewer-2",
            &["toolgate:review"],
            ExecutionMode::InProcess,
        ),
        key(
            METRICS_KEY,
            "scraper",
            &["toolgate:metrics"],
            ExecutionMode::InProcess,
        ),
    ])
    .unwrap()
}

/// The test policy, keys and default settings over `components`.
pub fn test_state(components: impl Components) -> AppState {
    new_app(
        Policy::load(POLICY).unwrap(),
        components,
        keys(),
        Both::default(),
    )
}

/// The desk as authoriser, state source and executor, over `claims`.
pub fn desk_components(
    desk: &DeskRef,
    claims: impl ClaimStore + ReviewStore + IdempotencyStore + 'static,
) -> Parts {
    Parts::new(desk.clone(), desk.clone(), claims, desk.clone())
}

pub fn app_with(settings: impl Into<Both>) -> (AppState, DeskRef) {
    let desk = DeskRef::default();
    desk.set_version("t-1", "7");
    desk.set_version("t-2", "3");
    let components = desk_components(&desk, MemoryClaimStore::new());
    let policy = Policy::load(POLICY).unwrap();
    (new_app(policy, components, keys(), settings), desk)
}

/// A claim store that can be switched off: while `down` is set every call,
/// the readiness probe included, fails as a database that went away does.
#[derive(Clone, Default)]
pub struct SwitchStore {
    pub inner: Arc<MemoryClaimStore>,
    pub down: Arc<AtomicBool>,
}

impl SwitchStore {
    fn up(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "connection refused (the test switched the store off)",
            ))
        } else {
            Ok(())
        }
    }
}

/// Each method checks the switch, then asks the in-memory store.
macro_rules! switched {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {$(
        async fn $name(&self, $($arg: $ty),*) -> Result<$ret, StoreError> {
            self.up()?;
            self.inner.$name($($arg),*).await
        }
    )*};
}

impl ClaimStore for SwitchStore {
    switched! {
        claim(request: ClaimRequest) -> RawClaim;
        complete(request: CompleteRequest) -> Completion;
        fetch(key: &OperationKey) -> Option<ClaimRecord>;
        list_stuck(now: UnixMillis, limit: u32) -> Vec<StuckEntry>;
        record_reconciliation(request: ReconcileRequest<'_>) -> Reconciled;
        append_audit(entry: &AuditEntry) -> ();
        audit_trail(key: &OperationKey, limit: u32) -> Vec<AuditEntry>;
    }
}

impl IdempotencyStore for SwitchStore {
    switched! {
        idem_begin(begin: IdemBegin<'_>) -> Begun;
        idem_finish(finish: IdemFinish<'_>) -> ();
        idem_forget(run: IdemRun<'_>) -> ();
        idem_purge(now: UnixMillis, bounds: Bounds) -> ();
    }
}

impl ReviewStore for SwitchStore {
    switched! {
        open_session(digest: [u8; 32], session: ReviewSession, now: UnixMillis) -> ();
        session(digest: [u8; 32], now: UnixMillis) -> Option<ReviewSession>;
        close_session(digest: [u8; 32]) -> ();
        open_item(item: NewItem, limits: &QueueLimits) -> Opened;
        request_approval(item: NewItem, now: UnixMillis, limits: &QueueLimits) -> Requested;
        item(id: i64, now: UnixMillis) -> Option<ReviewItem>;
        list_items(query: &ListQuery, now: UnixMillis) -> Vec<ReviewItem>;
        open_items(now: UnixMillis) -> u64;
        vote(vote: ReviewerAct<'_, Verdict>) -> Voted;
        close(closing: ReviewerAct<'_, Closing>) -> Closed;
    }
}

/// A test app on a [`SwitchStore`], with its switch.
pub fn app_with_switch() -> (AppState, DeskRef, Arc<AtomicBool>) {
    let desk = DeskRef::default();
    desk.set_version("t-1", "7");
    let store = SwitchStore::default();
    let down = Arc::clone(&store.down);
    let components = desk_components(&desk, store);
    let policy = Policy::load(POLICY).unwrap();
    (
        new_app(policy, components, keys(), Both::default()),
        desk,
        down,
    )
}

/// The router of a default test app, and its desk.
pub fn app_router() -> (axum::Router, DeskRef) {
    router_with(Settings::default())
}

/// The router over the test desk with `settings`.
pub fn router_with(settings: impl Into<Both>) -> (axum::Router, DeskRef) {
    let (state, desk) = app_with(settings);
    (toolgate_http::router(state), desk)
}

pub fn app() -> (AppState, DeskRef) {
    app_with(Settings::default())
}

/// An envelope-provider body proposing `tool` with `arguments`.
pub fn action(tool: &str, arguments: Value) -> Value {
    json!({
        "outcome": "action",
        "reply": "Done: I applied it.",
        "proposed_action": {"tool": tool, "arguments": arguments}
    })
}

pub fn credit(amount: i64) -> Value {
    action(
        "apply_goodwill_credit",
        json!({"amount_minor": amount, "reason_code": "late_delivery"}),
    )
}

/// A refund of `amount` (minor units): the tool that needs a person's
/// approval.
pub fn refund(amount: i64) -> Value {
    action("refund_order", json!({"amount_minor": amount}))
}

pub fn decision_body(response: Value, ticket: &str, version: &str) -> Value {
    json!({
        "provider": "envelope",
        "response": response,
        "scope": {"customer_id": "c-1", "ticket_id": ticket, "version_seen": version}
    })
}

/// A credit of `amount` on t-1 as the model read it at version 7: the
/// desk's ticket as every test starts it.
pub fn credit_on_t1(amount: i64) -> Value {
    decision_body(credit(amount), "t-1", "7")
}

/// A sidecar serving a test app on a loopback port until `stop` is sent.
pub struct Running {
    pub addr: std::net::SocketAddr,
    pub stop: tokio::sync::oneshot::Sender<()>,
    pub server: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Binds 127.0.0.1:0 and spawns `toolgate_http::serve` on `runtime`, with
/// `grace` for the requests in progress at shutdown.
pub fn start(
    runtime: &tokio::runtime::Runtime,
    state: AppState,
    grace: std::time::Duration,
) -> Running {
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = runtime.spawn(toolgate_http::serve(
        listener,
        state,
        async {
            let _ = stop_rx.await;
        },
        grace,
    ));
    Running { addr, stop, server }
}
