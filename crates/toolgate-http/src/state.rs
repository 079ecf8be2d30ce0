//! The router's state: the policy, the pluggable components, the keys, and
//! the per-process metrics. Review items, reviewer logins and the
//! `Idempotency-Key` memory are rows in the claim database.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use toolgate::claim::ClaimStore;
use toolgate::contract::Policy;
use toolgate::idempotency::IdempotencyStore;

use toolgate::contract::Checked;
use toolgate::pipeline::{
    Authorizer, Decision, Executor, Gate, GateError, Request, StateSource, decide,
};
use toolgate::review::ReviewStore;

use crate::auth::KeyRing;
use crate::limits::ResultCap;
use crate::metrics::Metrics;

/// The four pluggable components of the pipeline, as one type the handlers
/// are generic over: what a [`Gate`](toolgate::pipeline::Gate) borrows for
/// one decision, owned for the life of the sidecar.
pub trait GateComponents: Send + Sync + 'static {
    /// Live authorisation.
    type Authz: Authorizer + 'static;
    /// Current resource versions.
    type State: StateSource + 'static;
    /// Claims, results, audit, and review items (the same database, so a
    /// claim can use an approval in its own transaction).
    type Claims: ClaimStore + ReviewStore + IdempotencyStore + 'static;
    /// The in-process executor (also asked during reconciliation).
    type Exec: Executor + 'static;

    /// The authoriser.
    fn authorizer(&self) -> &Self::Authz;
    /// The state source.
    fn state(&self) -> &Self::State;
    /// The claim store.
    fn claims(&self) -> &Self::Claims;
    /// The executor.
    fn executor(&self) -> &Self::Exec;

    /// The gate of one decision: these components with `executor` (the
    /// in-process one behind the result cap, or client mode's stand-in).
    fn gate<'a, E>(
        &'a self,
        policy: &'a Policy,
        executor: &'a E,
    ) -> Gate<'a, Self::Authz, Self::State, Self::Claims, E> {
        Gate {
            policy,
            authorizer: self.authorizer(),
            state: self.state(),
            claims: self.claims(),
            executor,
        }
    }

    /// Decides one proposal on [`GateComponents::gate`]. The default is
    /// [`toolgate::pipeline::decide`]. Components whose authoriser and
    /// state source can share one read per decision override it, with
    /// sources made for that one decision and dropped with it (say, one
    /// statement for the Cedar entities and the resource's version).
    fn decide<E: Executor>(
        &self,
        policy: &Policy,
        executor: &E,
        proposal: Checked,
        request: &Request<'_>,
    ) -> impl Future<Output = Result<Decision, GateError>> + Send {
        async move { decide(&self.gate(policy, executor), proposal, request).await }
    }

    /// Decides one proposal with the in-process executor behind the result
    /// cap: the default is [`GateComponents::decide`] with
    /// `cap.wrap(self.executor())`. Components whose executor is made for
    /// one decision (say, one that writes on the connection the decision
    /// claimed on) override it, and put theirs behind `cap`.
    fn decide_in_process(
        &self,
        policy: &Policy,
        cap: ResultCap,
        proposal: Checked,
        request: &Request<'_>,
    ) -> impl Future<Output = Result<Decision, GateError>> + Send {
        async move {
            self.decide(policy, &cap.wrap(self.executor()), proposal, request)
                .await
        }
    }
}

/// The four components as plain fields: the one [`GateComponents`].
pub struct Components<A, S, C, E> {
    /// Live authorisation.
    pub authorizer: A,
    /// Current resource versions.
    pub state: S,
    /// Claims, results, audit.
    pub claims: C,
    /// The in-process executor.
    pub executor: E,
}

impl<A, S, C, E> GateComponents for Components<A, S, C, E>
where
    A: Authorizer + 'static,
    S: StateSource + 'static,
    C: ClaimStore + ReviewStore + IdempotencyStore + 'static,
    E: Executor + 'static,
{
    type Authz = A;
    type State = S;
    type Claims = C;
    type Exec = E;

    fn authorizer(&self) -> &A {
        &self.authorizer
    }
    fn state(&self) -> &S {
        &self.state
    }
    fn claims(&self) -> &C {
        &self.claims
    }
    fn executor(&self) -> &E {
        &self.executor
    }
}

/// Limits and timings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Largest request body accepted, in bytes (413 above). The default,
    /// 2 MiB, leaves room for a 1 MiB provider body sent as a JSON string
    /// (escaping grows it).
    pub body_limit: usize,
    /// Deadline for a whole request (408 after it). A decision that has
    /// started still finishes on its own task.
    pub request_timeout: Duration,
    /// How long a won claim may run before it counts as stuck (also the
    /// permit's lifetime in client mode).
    pub lease: Duration,
    /// How many `Idempotency-Key` answers are remembered per principal
    /// (the key's): the principal's oldest finished answer goes first. One
    /// principal never evicts another's.
    pub idempotency_capacity: usize,
    /// Largest result the sidecar records, in bytes of JSON text: a client
    /// completion, a reconciliation answer or an executor's receipt over it
    /// is refused (`result_too_large`) and nothing is recorded. At most
    /// [`toolgate::claim::RESULT_JSON_LIMITS`]' byte limit, the ceiling any
    /// stored result must meet (a larger value acts as that ceiling).
    pub max_result_bytes: usize,
    /// Bytes of remembered `Idempotency-Key` answers (bodies and keys) per
    /// principal; its oldest finished first out, as for the count.
    pub idempotency_max_bytes: usize,
    /// How long a connection may take to send a request's headers
    /// (slowloris); it is closed after that. Applies to [`crate::serve`].
    pub header_read_timeout: Duration,
    /// Most connections open at once. A connection that would pass it
    /// closes the longest-idle keep-alive connection to take its place; if
    /// none is idle it is served by the probe headroom, or closed. Applies
    /// to [`crate::serve`].
    pub max_connections: usize,
    /// Most connections open at once from one peer address (its IP): a
    /// peer at its limit closes its own longest-idle connection to open
    /// another, or is refused (`503 too_many_connections`). Applies to
    /// [`crate::serve`].
    pub max_connections_per_peer: usize,
    /// Connections beyond [`Settings::max_connections`] that answer only
    /// `/healthz` and `/readyz` (anything else is `503
    /// too_many_connections`), one request each: so the probes answer
    /// while every regular connection is busy. Applies to [`crate::serve`].
    pub probe_headroom: usize,
    /// Most requests one connection serves; it is then closed after its
    /// answer, and the client opens another. Applies to [`crate::serve`].
    pub max_requests_per_connection: u64,
    /// Longest a connection stays open; it is then closed once it is idle
    /// (or after the request in progress). Applies to [`crate::serve`].
    pub max_connection_age: Duration,
    /// How large the review queue may grow: open items per principal and in
    /// total, and the window that keeps a rejection to one item per
    /// principal and reason.
    pub review_queue: toolgate::review::QueueLimits,
    /// The URL reviewers open the page at (`https://review.example.com`):
    /// its scheme decides the session cookie's `Secure` flag, never the
    /// request's `Host`. `None` (the default) sets `Secure` always; only an
    /// `http://` URL leaves it off (the demo on loopback).
    pub public_url: Option<String>,
    /// Where new review items are announced (a signed POST, fire and
    /// forget); none by default.
    pub review_webhook: Option<crate::webhook::ReviewWebhook>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            body_limit: 2 * 1024 * 1024,
            request_timeout: Duration::from_secs(10),
            lease: Duration::from_secs(30),
            idempotency_capacity: 1_000,
            max_result_bytes: 64 * 1024,
            idempotency_max_bytes: 8 * 1024 * 1024,
            header_read_timeout: Duration::from_secs(10),
            max_connections: 1024,
            max_connections_per_peer: 512,
            probe_headroom: 32,
            max_requests_per_connection: 10_000,
            max_connection_age: Duration::from_secs(600),
            review_queue: toolgate::review::QueueLimits::default(),
            public_url: None,
            review_webhook: None,
        }
    }
}

pub(crate) struct Inner<P> {
    pub policy: Policy,
    pub components: P,
    pub keys: KeyRing,
    pub settings: Settings,
    pub scope_fields: BTreeSet<String>,
    pub metrics: Metrics,
    /// The review webhook's HTTP client (connection reuse across
    /// announcements).
    pub webhook_client: reqwest::Client,
    /// Every decision task holds a read guard; [`AppState::drain`] takes the
    /// write guard, so it returns once all of them have finished.
    pub tasks: Arc<tokio::sync::RwLock<()>>,
}

/// Shared state of one sidecar: cheap to clone.
pub struct AppState<P> {
    pub(crate) inner: Arc<Inner<P>>,
}

impl<P> Clone for AppState<P> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<P: GateComponents> AppState<P> {
    /// A sidecar for `policy` with `components` and `keys`.
    pub fn new(policy: Policy, components: P, keys: KeyRing, settings: Settings) -> Self {
        // The scope fields a request may carry: the ones some tool's
        // operation key names, plus the version. Anything else in a scope
        // (an `actor_id`, say) is refused: identity never comes from a body.
        let scope_fields = toolgate::pipeline::request_scope_fields(&policy);
        let metrics = Metrics::new(policy.tools().iter().map(|t| t.name()));
        Self {
            inner: Arc::new(Inner {
                policy,
                components,
                keys,
                settings,
                scope_fields,
                metrics,
                webhook_client: reqwest::Client::new(),
                tasks: Arc::new(tokio::sync::RwLock::new(())),
            }),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// The pluggable components.
    pub fn components(&self) -> &P {
        &self.inner.components
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    pub(crate) fn keys(&self) -> &KeyRing {
        &self.inner.keys
    }

    /// Waits until every decision task that has started has finished.
    pub async fn drain(&self) {
        let _all = self.inner.tasks.write().await;
    }
}
