//! [`Service`]: the running gate, shared by every door.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use toolgate::claim::{StoreError, StoreErrorKind, UnixMillis};
use toolgate::contract::{Checked, Policy};
use toolgate::pipeline::{
    Call, CallError, ClientExecutor, Decision, Front, GateError, Note, Pipeline, Principal,
    Refusal, Request, Settled, VersionSeen, decide_call,
};
use toolgate::review::QueueLimits;
use tracing::Instrument;

use crate::cap::ResultCap;
use crate::clock;
use crate::components::{Authz, Components, ExecRef, Store};
use crate::identity::{ApiKey, ExecutionMode, KeyRing};
use crate::metrics::Metrics;
use crate::webhook::{self, ReviewWebhook};

/// What the service itself is configured with (a door's own limits are
/// the door's).
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a won claim may run before it counts as stuck (also the
    /// permit's lifetime in client mode).
    pub lease: Duration,
    /// Largest result the service records, in bytes of JSON text: a client
    /// completion, a reconciliation answer or an executor's receipt over it
    /// is refused (`result_too_large`) and nothing is recorded. At most
    /// [`toolgate::claim::RESULT_JSON_LIMITS`]' byte limit, the ceiling any
    /// stored result must meet (a larger value acts as that ceiling).
    pub max_result_bytes: usize,
    /// How large the review queue may grow: open items per principal and in
    /// total, and the window that keeps a rejection to one item per
    /// principal and reason.
    pub review_queue: QueueLimits,
    /// The URL people open toolgate at (`https://gate.example.com`): review
    /// item links below it, and on HTTP its scheme decides the reviewer
    /// session cookie's `Secure` flag, never a request's `Host`. `None`
    /// (the default) sets `Secure` always.
    pub public_url: Option<String>,
    /// Where new review items are announced (a signed POST, fire and
    /// forget); none by default.
    pub review_webhook: Option<ReviewWebhook>,
    /// The token issuers whose signed tokens authenticate callers beside
    /// the API keys (`[[issuers]]`); none by default.
    pub issuers: crate::Issuers,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(30),
            max_result_bytes: 64 * 1024,
            review_queue: QueueLimits::default(),
            public_url: None,
            issuers: crate::Issuers::default(),
            review_webhook: None,
        }
    }
}

/// Why [`Service::decide`] has no decision to answer.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// The core refused the request (already audited), or a store, state
    /// source or authoriser could not answer.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The decision's task ended without an answer (it panicked): a bug,
    /// not the caller's fault and not a store that is down.
    #[error("the decision task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
}

/// One proposal a door hands the service. Everything in it comes from the
/// door's authentication and the deployment's mapping; the model's part is
/// only inside `proposal`.
#[derive(Debug)]
pub struct Proposal {
    /// The authenticated principal (a delegated actor already resolved).
    pub principal: Principal,
    /// The contract stage's verdict.
    pub proposal: Checked,
    /// The operation-key fields, not yet canonical.
    pub scope: Map<String, Value>,
    /// The version the model read.
    pub version_seen: VersionSeen,
    /// Entities the application sent, for the authoriser alone.
    pub attributes: Map<String, Value>,
    /// Who writes: the service's executor, or the caller (a permit).
    pub mode: ExecutionMode,
}

struct Inner {
    policy: Arc<Policy>,
    components: Box<dyn Components>,
    keys: KeyRing,
    settings: Settings,
    scope_fields: BTreeSet<String>,
    metrics: Metrics,
    /// The review webhook's HTTP client (connection reuse across
    /// announcements).
    webhook_client: reqwest::Client,
    /// Every decision task holds a read guard; [`Service::drain`] takes the
    /// write guard, so it returns once all of them have finished.
    tasks: Arc<tokio::sync::RwLock<()>>,
    read_rates: crate::reads::ReadRates,
}

/// The running gate: one deployment's policy, components and identities,
/// and the one decision function every door calls. Cheap to clone.
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

impl Service {
    /// A service deciding under `policy` with `components`, for the callers
    /// `keys` name. The policy may be shared (an evaluation runs one
    /// service per fresh database under one policy).
    pub fn new(
        policy: impl Into<Arc<Policy>>,
        components: impl Components,
        keys: KeyRing,
        settings: Settings,
    ) -> Self {
        // The scope fields a request may carry: the ones some tool's
        // operation key names, plus the version. Anything else in a scope
        // (an `actor_id`, say) is refused: identity never comes from a body.
        let policy = policy.into();
        let scope_fields = toolgate::pipeline::request_scope_fields(&policy);
        let metrics = Metrics::new(policy.tools().iter().map(|t| t.name()));
        Self {
            inner: Arc::new(Inner {
                policy,
                components: Box::new(components),
                keys,
                settings,
                scope_fields,
                metrics,
                webhook_client: reqwest::Client::new(),
                tasks: Arc::new(tokio::sync::RwLock::new(())),
                read_rates: crate::reads::ReadRates::default(),
            }),
        }
    }

    /// The tool contracts.
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// The components.
    pub fn components(&self) -> &dyn Components {
        &*self.inner.components
    }

    /// The claim database.
    pub fn store(&self) -> &Store {
        self.inner.components.store()
    }

    /// The metrics every door records into.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The scope fields a request may carry
    /// ([`toolgate::pipeline::request_scope_fields`]).
    pub fn scope_fields(&self) -> &BTreeSet<String> {
        &self.inner.scope_fields
    }

    /// The configured key `token` is, if any.
    pub fn authenticate(&self, token: &str) -> Option<&ApiKey> {
        self.inner.keys.lookup(token)
    }

    /// The principal a signed token of one of the deployment's issuers
    /// authenticates ([`crate::tokens`]): the person, acting through the
    /// client the token names, with the capabilities its scopes and groups
    /// grant. A door asks only for a bearer that is not a key and has a
    /// token's shape.
    pub async fn verify_token(&self, token: &str) -> Result<Principal, crate::TokenError> {
        self.inner.settings.issuers.verify(token).await
    }

    /// The deployment's token issuers.
    pub fn issuers(&self) -> &crate::Issuers {
        &self.inner.settings.issuers
    }

    /// The configured keys.
    pub fn keys(&self) -> &KeyRing {
        &self.inner.keys
    }

    pub(crate) fn read_rates(&self) -> &crate::reads::ReadRates {
        &self.inner.read_rates
    }

    /// Decides one proposal: the core's whole decision ([`decide_call`]:
    /// the approval loop, review items, the authoriser's words concealed,
    /// refusals audited under the principal) with the service's executor
    /// behind the result cap, or client mode's stand-in. It runs on its own
    /// task, so a door whose caller goes away never abandons a claim between
    /// claim and completion, and [`Service::drain`] waits for it. The
    /// operator's log hears of it, and a new review item is announced.
    pub async fn decide(&self, proposal: Proposal) -> Result<Settled, DecideError> {
        let service = self.clone();
        let task = tokio::spawn(
            async move {
                let _running = service.inner.tasks.clone().read_owned().await;
                let metrics = &service.inner.metrics;
                metrics.started();
                let started = Instant::now();
                let out = service.settle(proposal).await;
                metrics.finished();
                if let Ok(settled) = &out {
                    let d = &settled.decision;
                    metrics.decided(d.outcome(), d.tool(), started.elapsed().as_secs_f64());
                }
                out
            }
            // The request's span (its request id and trace id) follows the
            // decision onto its task, so its log lines carry them too.
            .instrument(tracing::Span::current()),
        );
        match task.await {
            Ok(settled) => Ok(settled?),
            Err(e) => Err(DecideError::Task(e)),
        }
    }

    async fn settle(&self, proposal: Proposal) -> Result<Settled, CallError> {
        let Proposal {
            principal,
            proposal,
            scope,
            version_seen,
            attributes,
            mode,
        } = proposal;
        let now = clock::now_millis();
        let call = Call {
            principal: &principal,
            proposal,
            scope: &scope,
            version_seen,
            attributes: &attributes,
            now,
            holders: [holder()?, holder()?],
            lease: self.inner.settings.lease,
        };
        let pipeline = Run {
            components: self.components(),
            policy: self.policy(),
            mode,
            cap: ResultCap::new(self.inner.settings.max_result_bytes),
        };
        let front = Front {
            policy: self.policy(),
            pipeline: &pipeline,
            store: self.store(),
            queue: self.inner.settings.review_queue,
        };
        let settled = decide_call(&front, call).await?;
        for note in &settled.notes {
            log_note(&principal, &settled.decision, note);
        }
        if let (true, Some(item)) = (settled.new_item, settled.review_item) {
            self.announce(item, &settled.decision, now);
        }
        let d = &settled.decision;
        tracing::info!(
            principal = principal.id(),
            // The key or client a person acted through, as the audit has it.
            via = principal.via(),
            outcome = d.outcome().as_str(),
            reason = d.reason().map(|r| r.as_str()),
            tool = d.tool(),
            operation_key = d.key().map(|k| k.to_hex()),
            "decision"
        );
        Ok(settled)
    }

    /// Records a request a door refused before it reached the core (its
    /// body, actor, provider or scope shape) in the audit log, under the
    /// caller's principal. A refusal whose entry cannot be written is still
    /// answered; the operator's log says so.
    pub async fn audit_refusal(&self, caller: &Principal, refusal: Refusal, tool: Option<&str>) {
        let audited = toolgate::pipeline::audit_refusal(
            self.store(),
            caller,
            refusal,
            tool,
            clock::now_millis(),
        )
        .await;
        if let Err(error) = audited {
            tracing::error!(%error, refusal = refusal.as_str(), "refusal not audited");
        }
    }

    /// Waits until every decision task that has started has finished.
    pub async fn drain(&self) {
        let _all = self.inner.tasks.write().await;
    }

    fn announce(&self, id: i64, decision: &Decision, now: UnixMillis) {
        webhook::announce(
            self.inner.settings.review_webhook.as_ref(),
            &self.inner.webhook_client,
            id,
            decision.outcome().as_str(),
            decision.tool(),
            now,
        );
    }
}

/// A fresh holder token; the operating system's random source failing is
/// an infrastructure failure like a store that does not answer.
fn holder() -> Result<toolgate::claim::HolderToken, CallError> {
    clock::fresh_holder().map_err(|e| {
        CallError::Gate(GateError::Store(StoreError::with_source(
            StoreErrorKind::Unavailable,
            e.to_string(),
            e,
        )))
    })
}

/// One pipeline run on the service's components with the proposal's
/// executor.
struct Run<'a> {
    components: &'a dyn Components,
    policy: &'a Policy,
    mode: ExecutionMode,
    cap: ResultCap,
}

impl Pipeline for Run<'_> {
    type Authz = Authz;

    fn authorizer(&self) -> &Authz {
        self.components.authorizer()
    }

    async fn decide(
        &self,
        proposal: Checked,
        request: &Request<'_>,
    ) -> Result<Decision, GateError> {
        match self.mode {
            ExecutionMode::InProcess => {
                self.components
                    .decide_in_process(self.policy, self.cap, proposal, request)
                    .await
            }
            ExecutionMode::Client => {
                self.components
                    .decide(self.policy, ExecRef(&ClientExecutor), proposal, request)
                    .await
            }
        }
    }
}

/// The operator's line for each note of a read.
pub(crate) fn log_read_note(principal: &Principal, note: &Note) {
    match note {
        Note::NotAudited(error) => tracing::error!(%error, "read not audited"),
        Note::Concealed { reason, detail } => tracing::info!(
            principal = principal.id(),
            via = principal.via(),
            reason = reason.as_str(),
            detail = detail.as_str(),
            "read: authorisation refused"
        ),
        Note::QueueFull | Note::ItemNotRecorded(_) => {}
    }
}

/// The operator's line for each note of a decision.
fn log_note(principal: &Principal, decision: &Decision, note: &Note) {
    match note {
        Note::NotAudited(error) => {
            tracing::error!(%error, outcome = %decision.outcome(), "decision not audited");
        }
        Note::QueueFull => tracing::warn!(
            principal = principal.id(),
            outcome = decision.outcome().as_str(),
            "review queue full: no item opened"
        ),
        Note::ItemNotRecorded(error) => tracing::error!(%error, "review item not recorded"),
        Note::Concealed { reason, detail } => tracing::info!(
            principal = principal.id(),
            via = principal.via(),
            tool = decision.tool(),
            reason = reason.as_str(),
            detail = detail.as_str(),
            "authorisation refused"
        ),
    }
}
