//! A small in-memory support desk for the HTTP tests: tickets with
//! versions, an authoriser that can revoke an agent, and an executor that
//! writes credits with the version as its precondition.

#![allow(dead_code, reason = "each test binary uses part of the support")]

pub mod databases;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStore, Completion, HolderToken, JsonText,
    MemoryClaimStore, OperationKey, RawClaim, ReconcileOutcome, Reconciled, StoreError,
    StoreErrorKind, StuckEntry, UnixMillis,
};
use toolgate::contract::Policy;
use toolgate::pipeline::{
    Authorizer, AuthzDecision, AuthzRequest, ExecError, ExecOutcome, ExecPermit, Executor,
    Principal, StateError, StateScope, StateSource, StateVersion,
};
use toolgate_http::{ApiKey, AppState, Components, ExecutionMode, KeyRing, Settings};

pub const POLICY: &str = r#"
version = 1
reply_max_bytes = 2000
abstain_message = "A colleague will follow up."

[[tools]]
name = "apply_goodwill_credit"
description = "Goodwill credit."
capability = "credit:issue"
operation_key = ["customer_id", "ticket_id", "version_seen"]
needs_approval = false
max_argument_bytes = 1024
schema = '''
{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "required": ["amount_minor", "reason_code"],
  "properties": {
    "amount_minor": {"type": "integer", "minimum": 1, "maximum": 2000},
    "reason_code": {"type": "string", "enum": ["late_delivery", "damaged_item", "wrong_item"]}
  }
}
'''

[[tools]]
name = "refund_order"
description = "Refund an order; a person approves each one."
capability = "refund:issue"
operation_key = ["customer_id", "ticket_id", "version_seen"]
needs_approval = true
max_argument_bytes = 1024
schema = '''
{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "required": ["amount_minor"],
  "properties": {
    "amount_minor": {"type": "integer", "minimum": 1, "maximum": 50000}
  }
}
'''
"#;

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

pub type TestComponents = Components<DeskRef, DeskRef, MemoryClaimStore, DeskRef>;

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

pub fn app_with(settings: Settings) -> (AppState<TestComponents>, DeskRef) {
    let desk = DeskRef::default();
    desk.set_version("t-1", "7");
    desk.set_version("t-2", "3");
    let components = Components {
        authorizer: desk.clone(),
        state: desk.clone(),
        claims: MemoryClaimStore::new(),
        executor: desk.clone(),
    };
    let policy = Policy::load(POLICY).unwrap();
    (AppState::new(policy, components, keys(), settings), desk)
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

impl ClaimStore for SwitchStore {
    async fn claim(&self, request: ClaimRequest) -> Result<RawClaim, StoreError> {
        self.up()?;
        self.inner.claim(request).await
    }

    async fn complete(
        &self,
        key: &OperationKey,
        holder: &HolderToken,
        result: &JsonText,
        now: UnixMillis,
        audit: &AuditEntry,
    ) -> Result<Completion, StoreError> {
        self.up()?;
        self.inner.complete(key, holder, result, now, audit).await
    }

    async fn fetch(&self, key: &OperationKey) -> Result<Option<ClaimRecord>, StoreError> {
        self.up()?;
        self.inner.fetch(key).await
    }

    async fn list_stuck(&self, now: UnixMillis, limit: u32) -> Result<Vec<StuckEntry>, StoreError> {
        self.up()?;
        self.inner.list_stuck(now, limit).await
    }

    async fn record_reconciliation(
        &self,
        key: &OperationKey,
        outcome: &ReconcileOutcome,
        now: UnixMillis,
    ) -> Result<Reconciled, StoreError> {
        self.up()?;
        self.inner.record_reconciliation(key, outcome, now).await
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        self.up()?;
        self.inner.append_audit(entry).await
    }

    async fn audit_trail(
        &self,
        key: &OperationKey,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.up()?;
        self.inner.audit_trail(key, limit).await
    }
}

impl toolgate::idempotency::IdempotencyStore for SwitchStore {
    async fn idem_begin(
        &self,
        principal: &str,
        key: &str,
        payload: [u8; 32],
        runner: &str,
        now: UnixMillis,
        lease_until: UnixMillis,
    ) -> Result<toolgate::idempotency::Begun, StoreError> {
        self.up()?;
        self.inner
            .idem_begin(principal, key, payload, runner, now, lease_until)
            .await
    }

    async fn idem_finish(
        &self,
        principal: &str,
        key: &str,
        runner: &str,
        answer: toolgate::idempotency::Remembered,
        now: UnixMillis,
        bounds: toolgate::idempotency::Bounds,
    ) -> Result<(), StoreError> {
        self.up()?;
        self.inner
            .idem_finish(principal, key, runner, answer, now, bounds)
            .await
    }

    async fn idem_forget(
        &self,
        principal: &str,
        key: &str,
        runner: &str,
    ) -> Result<(), StoreError> {
        self.up()?;
        self.inner.idem_forget(principal, key, runner).await
    }

    async fn idem_purge(
        &self,
        now: UnixMillis,
        bounds: toolgate::idempotency::Bounds,
    ) -> Result<(), StoreError> {
        self.up()?;
        self.inner.idem_purge(now, bounds).await
    }
}

impl toolgate::review::ReviewStore for SwitchStore {
    async fn open_session(
        &self,
        digest: [u8; 32],
        session: toolgate::review::ReviewSession,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        self.up()?;
        self.inner.open_session(digest, session, now).await
    }

    async fn session(
        &self,
        digest: [u8; 32],
        now: UnixMillis,
    ) -> Result<Option<toolgate::review::ReviewSession>, StoreError> {
        self.up()?;
        self.inner.session(digest, now).await
    }

    async fn close_session(&self, digest: [u8; 32]) -> Result<(), StoreError> {
        self.up()?;
        self.inner.close_session(digest).await
    }

    async fn open_item(
        &self,
        item: toolgate::review::NewItem,
        limits: &toolgate::review::QueueLimits,
    ) -> Result<toolgate::review::Opened, StoreError> {
        self.up()?;
        self.inner.open_item(item, limits).await
    }

    async fn request_approval(
        &self,
        item: toolgate::review::NewItem,
        now: UnixMillis,
        limits: &toolgate::review::QueueLimits,
    ) -> Result<toolgate::review::Requested, StoreError> {
        self.up()?;
        self.inner.request_approval(item, now, limits).await
    }

    async fn item(
        &self,
        id: i64,
        now: UnixMillis,
    ) -> Result<Option<toolgate::review::ReviewItem>, StoreError> {
        self.up()?;
        self.inner.item(id, now).await
    }

    async fn list_items(
        &self,
        query: &toolgate::review::ListQuery,
        now: UnixMillis,
    ) -> Result<Vec<toolgate::review::ReviewItem>, StoreError> {
        self.up()?;
        self.inner.list_items(query, now).await
    }

    async fn open_items(&self, now: UnixMillis) -> Result<u64, StoreError> {
        self.up()?;
        self.inner.open_items(now).await
    }

    async fn vote(
        &self,
        id: i64,
        reviewer: &str,
        verdict: toolgate::review::Verdict,
        note: Option<&str>,
        now: UnixMillis,
    ) -> Result<toolgate::review::Voted, StoreError> {
        self.up()?;
        self.inner.vote(id, reviewer, verdict, note, now).await
    }

    async fn close(
        &self,
        id: i64,
        reviewer: &str,
        closing: toolgate::review::Closing,
        note: Option<&str>,
        now: UnixMillis,
    ) -> Result<toolgate::review::Closed, StoreError> {
        self.up()?;
        self.inner.close(id, reviewer, closing, note, now).await
    }
}

pub type SwitchComponents = Components<DeskRef, DeskRef, SwitchStore, DeskRef>;

/// A test app on a [`SwitchStore`], with its switch.
pub fn app_with_switch() -> (AppState<SwitchComponents>, DeskRef, Arc<AtomicBool>) {
    let desk = DeskRef::default();
    desk.set_version("t-1", "7");
    let store = SwitchStore::default();
    let down = Arc::clone(&store.down);
    let components = Components {
        authorizer: desk.clone(),
        state: desk.clone(),
        claims: store,
        executor: desk.clone(),
    };
    let policy = Policy::load(POLICY).unwrap();
    (
        AppState::new(policy, components, keys(), Settings::default()),
        desk,
        down,
    )
}

pub fn app() -> (AppState<TestComponents>, DeskRef) {
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

pub fn decision_body(response: Value, ticket: &str, version: &str) -> Value {
    json!({
        "provider": "envelope",
        "response": response,
        "scope": {"customer_id": "c-1", "ticket_id": ticket, "version_seen": version}
    })
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
    state: AppState<TestComponents>,
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
