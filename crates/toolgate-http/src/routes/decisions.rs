//! `POST /v1/decisions`: one provider response through the whole pipeline.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::Value;
use toolgate::contract::{self, CheckOptions, EnvelopeMode, MAX_ATTEMPTS};
use toolgate::decode::{self, Limits};
use toolgate::pipeline::{
    Call, CallError, ClientExecutor, Decision, Front, GateError, Note, Outcome, Pipeline,
    Principal, Refusal, Request, Settled, VERSION_SEEN, VersionSeen, decide_call,
};
use toolgate::provider::Provider;
use tracing::Instrument;

use crate::auth::{Caller, ExecutionMode};
use crate::dto::{DecisionRequest, DecisionResponse, Permit, status_of};
use crate::error::{ApiError, PROBLEM_JSON, Problem, ProblemCode};
use crate::idempotency::{Begin, IdempotencyHeader, Stored, idempotency_key};
use crate::limits::ResultCap;
use crate::state::{AppState, GateComponents};

/// Decodes a request body strictly (duplicate keys, big integers, depth)
/// and reads it into `T`, whose unknown fields are refused.
pub fn strict_body<T: DeserializeOwned>(body: &[u8], max: usize) -> Result<T, ApiError> {
    let value =
        decode::decode_strict(body, &Limits::provider_body().with_max_bytes(max)).map_err(|r| {
            ApiError::new(
                ProblemCode::InvalidBody,
                format!("{}: {} at '{}'", r.code(), r.message(), r.pointer()),
            )
        })?;
    serde_json::from_value(value)
        .map_err(|e| ApiError::new(ProblemCode::InvalidBody, e.to_string()))
}

fn stored_response(s: Stored) -> Response {
    let mut r = (s.status, s.body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(s.content_type),
    );
    r
}

const DECISION_JSON: &str = "application/json";

/// Decide one provider response. The answer is a decision whatever its
/// status (its `outcome` says what happened); a request the gate could not
/// take is a problem (`application/problem+json`).
#[utoipa::path(post, path = "/v1/decisions", tag = "decisions",
    request_body(content = DecisionRequest, content_type = "application/json"),
    params(IdempotencyHeader),
    responses(
        (status = 200, description = "`answer`, `abstain`, `replayed`, `permitted`, `refused`, `truncated`, `content_filtered`", body = DecisionResponse),
        (status = 201, description = "`executed`", body = DecisionResponse),
        (status = 202, description = "`pending_approval`", body = DecisionResponse),
        (status = 400, description = "`invalid_idempotency_key`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden` (a decision); `actor_not_allowed`: the key may not name an actor (a problem)", content(
            (DecisionResponse = "application/json"),
            (Problem = "application/problem+json"))),
        (status = 404, description = "`resource_not_found`: the tool's state source has no resource for the scope; nothing was decided or written", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`in_flight`, `state_changed`, `needs_reconciliation` (decisions); `idempotency_key_in_flight` (a problem)", content(
            (DecisionResponse = "application/json"),
            (Problem = "application/problem+json"))),
        (status = 422, description = "`conflict`, `rejected` (decisions); `invalid_body`, `unknown_provider`, `unknown_scope_field`, `invalid_scope`, `missing_scope`, `idempotency_key_reused` (problems)", content(
            (DecisionResponse = "application/json"),
            (Problem = "application/problem+json"))),
        (status = 500, description = "`corrupt_record`, `internal`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store_unavailable`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn post<P: GateComponents>(
    State(app): State<AppState<P>>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = match idempotency_key(&headers) {
        Ok(k) => k,
        Err(e) => return e.into_response(),
    };
    let guard = match &key {
        None => None,
        Some(k) => match crate::idempotency::begin(&app, caller.principal.id(), k, &body).await {
            Err(e) => return e.into_response(),
            Ok(Begin::Fresh(g)) => Some(g),
            Ok(Begin::Replay(s)) => return replay(&app, &caller, &body, s).await,
            Ok(Begin::InFlight) => {
                return ApiError::new(
                    ProblemCode::IdempotencyKeyInFlight,
                    "a request with this Idempotency-Key is still being processed; retry later",
                )
                .into_response();
            }
            Ok(Begin::Mismatch) => {
                return ApiError::new(
                    ProblemCode::IdempotencyKeyReused,
                    "this Idempotency-Key was used with a different request body",
                )
                .into_response();
            }
        },
    };
    let stored = match decide_body(&app, &caller, &body).await {
        Ok((decision, response)) => Stored {
            outcome: Some(decision.outcome()),
            status: StatusCode::from_u16(status_of(decision.outcome())).unwrap_or(StatusCode::OK),
            content_type: DECISION_JSON,
            body: serde_json::to_vec(&response).unwrap_or_default(),
        },
        // A server-side failure is not remembered: the retry should run.
        Err(e) if e.status().is_server_error() => {
            if let Some(g) = guard {
                g.forget().await;
            }
            return e.into_response();
        }
        Err(e) => Stored {
            outcome: None,
            status: e.status(),
            content_type: PROBLEM_JSON,
            body: e.body(),
        },
    };
    // Only final answers are remembered: an `in_flight`, a pending approval
    // or a claim awaiting reconciliation will read differently later, and a
    // retry must see that (the key is forgotten).
    if let Some(g) = guard {
        if matches!(
            stored.outcome,
            Some(Outcome::InFlight | Outcome::PendingApproval | Outcome::NeedsReconciliation)
        ) {
            g.forget().await;
        } else {
            g.finish(stored.clone()).await;
        }
    }
    stored_response(stored)
}

/// A repeat of a remembered request. An answer that hands out a recorded
/// result, a prior proposal or a permit is served only to a caller who
/// passes capability and live authorisation now (invariant 12): the
/// pipeline runs again, and since that operation's claim exists it can only
/// resolve to it (replay, in flight, conflict), never write. A caller who
/// lost access gets the fresh `forbidden` instead. Answers that carry none of
/// these (a rejection, a stale version, a request error) are served as they
/// were: running those again could write where the first answer did not.
async fn replay<P: GateComponents>(
    app: &AppState<P>,
    caller: &Caller,
    body: &[u8],
    stored: Stored,
) -> Response {
    let carries_claim = matches!(
        stored.outcome,
        Some(Outcome::Executed | Outcome::Replayed | Outcome::Permitted | Outcome::Conflict)
    );
    if !carries_claim {
        return stored_response(stored);
    }
    match decide_body(app, caller, body).await {
        Ok((decision, response)) if decision.outcome() == Outcome::Forbidden => {
            let status = StatusCode::from_u16(status_of(decision.outcome()))
                .unwrap_or(StatusCode::FORBIDDEN);
            stored_response(Stored {
                outcome: Some(decision.outcome()),
                status,
                content_type: DECISION_JSON,
                body: serde_json::to_vec(&response).unwrap_or_default(),
            })
        }
        Ok(_) => stored_response(stored),
        Err(e) => e.into_response(),
    }
}

/// The refusal a request error records in the audit log, if it is one:
/// every request-level refusal of a decision request is audited
/// (`refused_request`), like a decision; server-side failures are not
/// refusals (nothing was decided, a retry may succeed).
fn refusal_of(code: ProblemCode) -> Option<Refusal> {
    Some(match code {
        ProblemCode::InvalidBody => Refusal::InvalidBody,
        ProblemCode::UnknownProvider => Refusal::UnknownProvider,
        ProblemCode::UnknownScopeField => Refusal::UnknownScopeField,
        ProblemCode::InvalidScope => Refusal::InvalidScope,
        ProblemCode::MissingScope => Refusal::MissingScope,
        ProblemCode::ActorNotAllowed => Refusal::ActorNotAllowed,
        ProblemCode::UnexpectedEntities => Refusal::UnexpectedEntities,
        _ => return None,
    })
}

/// A refusal's problem code.
fn problem_of(refusal: Refusal) -> ProblemCode {
    match refusal {
        Refusal::InvalidBody => ProblemCode::InvalidBody,
        Refusal::UnknownProvider => ProblemCode::UnknownProvider,
        Refusal::UnknownScopeField => ProblemCode::UnknownScopeField,
        Refusal::InvalidScope => ProblemCode::InvalidScope,
        Refusal::MissingScope => ProblemCode::MissingScope,
        Refusal::ActorNotAllowed => ProblemCode::ActorNotAllowed,
        Refusal::UnexpectedEntities => ProblemCode::UnexpectedEntities,
    }
}

/// Decides one request. A request refused while it is read (its body,
/// actor, provider or scope shape) is audited here, under the key's
/// principal; the core audits the refusals it makes itself
/// ([`decide_call`]). A refusal whose audit entry cannot be written is
/// still answered (and logged): the caller's answer does not depend on the
/// log.
async fn decide_body<P: GateComponents>(
    app: &AppState<P>,
    caller: &Caller,
    body: &[u8],
) -> Result<(Decision, DecisionResponse), ApiError> {
    let (principal, prepared) = match read_request(app, caller, body) {
        Ok(read) => read,
        Err(e) => {
            if let Some(refusal) = refusal_of(e.code()) {
                let audited = toolgate::pipeline::audit_refusal(
                    app.components().claims(),
                    &caller.principal,
                    refusal,
                    e.tool(),
                    crate::clock::now_millis(),
                )
                .await;
                if let Err(error) = audited {
                    tracing::error!(%error, refusal = refusal.as_str(), "refusal not audited");
                }
            }
            return Err(e);
        }
    };
    run(app, principal, caller.mode, Arc::new(prepared)).await
}

/// The request's principal (a delegated actor resolved) and its proposal,
/// checked for shape.
fn read_request<P: GateComponents>(
    app: &AppState<P>,
    caller: &Caller,
    body: &[u8],
) -> Result<(Principal, Prepared), ApiError> {
    let mut req: DecisionRequest = strict_body(body, app.settings().body_limit)?;
    // Actor delegation (docs/design.md §13): only a key allowed to act for
    // users names the actor; it is then the principal every later stage
    // sees, and the key stays in the audit entry as `via`.
    let principal = match req.actor.take() {
        None => caller.principal.clone(),
        Some(_) if !caller.act_for_users => {
            return Err(ApiError::new(
                ProblemCode::ActorNotAllowed,
                "this API key may not name an actor; configure it with act_for_users = true",
            ));
        }
        Some(actor) => caller.principal.acting_for(actor).map_err(|e| {
            ApiError::new(ProblemCode::InvalidBody, format!("actor: {}", e.message()))
        })?,
    };
    Ok((principal, prepare(app, req)?))
}

/// One proposal, checked for shape, with the server-fixed facts of its
/// request.
#[derive(Debug)]
pub struct Prepared {
    pub provider: Provider,
    pub body: Vec<u8>,
    pub opts: CheckOptions,
    pub scope: serde_json::Map<String, Value>,
    /// Application-sent entities, checked for shape (not yet against the
    /// tool: that needs the proposal).
    pub entities: serde_json::Map<String, Value>,
}

fn prepare<P: GateComponents>(
    app: &AppState<P>,
    req: DecisionRequest,
) -> Result<Prepared, ApiError> {
    let provider = Provider::from_name(&req.provider).ok_or_else(|| {
        ApiError::new(
            ProblemCode::UnknownProvider,
            format!(
                "provider must be one of {}",
                Provider::ALL.map(Provider::as_str).join(", ")
            ),
        )
    })?;
    let body = match req.response {
        Value::String(s) => s.into_bytes(),
        other => {
            if req.stream {
                return Err(ApiError::new(
                    ProblemCode::InvalidBody,
                    "a stream must be sent as a string",
                ));
            }
            serde_json::to_vec(&other)
                .map_err(|e| ApiError::new(ProblemCode::InvalidBody, e.to_string()))?
        }
    };
    if req.stream && !provider.supports_stream() {
        return Err(ApiError::new(
            ProblemCode::InvalidBody,
            format!("streams are not accepted for {provider}"),
        ));
    }
    let attempt = req.attempt.unwrap_or(1);
    if !(1..=MAX_ATTEMPTS).contains(&attempt) {
        return Err(ApiError::new(
            ProblemCode::InvalidBody,
            format!("attempt must be 1 to {MAX_ATTEMPTS}"),
        ));
    }
    let mode = match req.envelope.as_deref() {
        None => EnvelopeMode::Native,
        Some(name) => crate::dto::ENVELOPE_MODES
            .into_iter()
            .find(|m| m.as_str() == name)
            .ok_or_else(|| {
                ApiError::new(
                    ProblemCode::InvalidBody,
                    "envelope must be native or structured",
                )
            })?,
    };
    // The bound every request keeps, whatever tool it proposes (or if it
    // proposes none, or one the policy does not have): known fields, and
    // values of at most 256 bytes.
    toolgate::pipeline::check_request_scope(&app.inner.scope_fields, &req.scope)
        .map_err(|r| ApiError::new(problem_of(r.refusal), r.message))?;
    check_entities(&req.entities)?;
    Ok(Prepared {
        provider,
        body,
        opts: CheckOptions {
            stream: req.stream,
            attempt,
            mode,
        },
        scope: req.scope,
        entities: req.entities,
    })
}

/// Longest entity id or type name, in bytes (a claim label's limit).
const MAX_ENTITY_LABEL_BYTES: usize = 128;
/// Deepest nesting of arrays and objects in one attribute value.
const MAX_ATTRIBUTE_DEPTH: usize = 8;

/// The shape of a decision's `entities` (docs/http-api.md): type →
/// `{"id": <string>, <attribute>: <value>, …}`, values Cedar can take as
/// attributes. Whether the proposed tool reads a type is checked once the
/// proposal is known ([`unexpected_entity`]).
fn check_entities(entities: &serde_json::Map<String, Value>) -> Result<(), ApiError> {
    let bad = |m: String| Err(ApiError::new(ProblemCode::InvalidBody, m));
    for (ty, entity) in entities {
        let type_ok = ty.len() <= MAX_ENTITY_LABEL_BYTES
            && ty.split("::").all(|part| {
                part.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            });
        if !type_ok {
            return bad(format!(
                "entities: {ty:?} is not an entity type name (Cedar identifiers joined by ::)"
            ));
        }
        let Some(obj) = entity.as_object() else {
            return bad(format!(
                "entities.{ty} must be an object with an `id` and attributes"
            ));
        };
        match obj.get("id") {
            Some(Value::String(id))
                if !id.is_empty()
                    && id.len() <= MAX_ENTITY_LABEL_BYTES
                    && !id.chars().any(char::is_control) => {}
            _ => {
                return bad(format!(
                    "entities.{ty}.id must be a string of 1 to {MAX_ENTITY_LABEL_BYTES} bytes \
                     without control characters"
                ));
            }
        }
        for (name, value) in obj.iter().filter(|(k, _)| *k != "id") {
            if let Err(why) = attribute_value(value, 0) {
                return bad(format!("entities.{ty}.{name}: {why}"));
            }
        }
    }
    Ok(())
}

fn attribute_value(value: &Value, depth: usize) -> Result<(), String> {
    if depth > MAX_ATTRIBUTE_DEPTH {
        return Err(format!("nested deeper than {MAX_ATTRIBUTE_DEPTH} levels"));
    }
    match value {
        Value::String(_) | Value::Bool(_) => Ok(()),
        Value::Number(n) if n.is_i64() => Ok(()),
        Value::Number(n) => Err(format!("{n} is not a 64-bit integer")),
        Value::Null => Err("null is not an attribute value; leave the attribute out".into()),
        Value::Array(items) => items.iter().try_for_each(|v| attribute_value(v, depth + 1)),
        Value::Object(fields) => fields
            .values()
            .try_for_each(|v| attribute_value(v, depth + 1)),
    }
}

/// Runs one prepared proposal through the pipeline on its own task (so a
/// dropped connection or an expired deadline never abandons a claim between
/// claim and completion), records metrics and reviewer items.
pub(crate) async fn run<P: GateComponents>(
    app: &AppState<P>,
    principal: Principal,
    mode: ExecutionMode,
    prepared: Arc<Prepared>,
) -> Result<(Decision, DecisionResponse), ApiError> {
    let out = on_task(
        app,
        |(d, _): &(Decision, DecisionResponse)| d,
        move |app| async move { run_inner(&app, principal, mode, prepared).await },
    )
    .await;
    out.unwrap_or_else(|e| {
        Err(ApiError::new(
            ProblemCode::Internal,
            format!("the decision task failed: {e}"),
        ))
    })
}

/// Runs one decision on its own task, so a dropped connection or an
/// expired deadline never abandons a claim between claim and completion,
/// and shutdown (which takes `tasks` for writing) waits for it; records
/// the decision's metrics. The request's span (its request id and trace
/// id) follows the decision onto its task, so its log lines carry them too.
async fn on_task<P, T, E, F, Fut>(
    app: &AppState<P>,
    decision: fn(&T) -> &Decision,
    work: F,
) -> Result<Result<T, E>, tokio::task::JoinError>
where
    P: GateComponents,
    T: Send + 'static,
    E: Send + 'static,
    F: FnOnce(AppState<P>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, E>> + Send,
{
    let task_app = app.clone();
    tokio::spawn(
        async move {
            let _running = task_app.inner.tasks.clone().read_owned().await;
            let metrics = &task_app.inner.metrics;
            metrics.started();
            let started = Instant::now();
            let out = work(task_app.clone()).await;
            metrics.finished();
            if let Ok(t) = &out {
                let d = decision(t);
                metrics.decided(d.outcome(), d.tool(), started.elapsed().as_secs_f64());
            }
            out
        }
        .instrument(tracing::Span::current()),
    )
    .await
}

/// One proposal from another front door on the same deployment (the MCP
/// gateway: a tool name and arguments already through the contract stage,
/// the scope its deployment maps): the decision `POST /v1/decisions` makes
/// for an in-process key, with the sidecar's components, executor (its
/// result cap included), lease, review queue, metrics and announcements.
/// It runs on its own task like every decision, so a caller that goes away
/// never abandons a claim between claim and completion, and shutdown waits
/// for it. Refusals are audited by the core, under `principal`.
pub async fn decide_proposal<P: GateComponents>(
    app: &AppState<P>,
    principal: Principal,
    proposal: contract::Checked,
    scope: serde_json::Map<String, Value>,
    version_seen: VersionSeen,
) -> Result<Settled, CallError> {
    let out =
        on_task(
            app,
            |settled: &Settled| &settled.decision,
            move |app| async move {
                proposal_inner(&app, &principal, proposal, &scope, version_seen).await
            },
        )
        .await;
    out.unwrap_or_else(|e| {
        Err(CallError::Gate(GateError::Store(
            toolgate::claim::StoreError::new(
                toolgate::claim::StoreErrorKind::Unavailable,
                format!("the decision task failed: {e}"),
            ),
        )))
    })
}

async fn proposal_inner<P: GateComponents>(
    app: &AppState<P>,
    principal: &Principal,
    proposal: contract::Checked,
    scope: &serde_json::Map<String, Value>,
    version_seen: VersionSeen,
) -> Result<Settled, CallError> {
    let now = crate::clock::now_millis();
    // The operating system's random source failing is an infrastructure
    // failure like a store that does not answer: nothing was decided.
    let holder = || {
        crate::clock::fresh_holder().map_err(|e| {
            CallError::Gate(GateError::Store(toolgate::claim::StoreError::new(
                toolgate::claim::StoreErrorKind::Unavailable,
                e.problem().detail,
            )))
        })
    };
    let no_entities = serde_json::Map::new();
    let call = Call {
        principal,
        proposal,
        scope,
        version_seen,
        attributes: &no_entities,
        now,
        holders: [holder()?, holder()?],
        lease: app.settings().lease,
    };
    settle(app, Exec::in_process(app), call).await
}

async fn run_inner<P: GateComponents>(
    app: &AppState<P>,
    principal: Principal,
    mode: ExecutionMode,
    prepared: Arc<Prepared>,
) -> Result<(Decision, DecisionResponse), ApiError> {
    let policy = app.policy();
    let check = contract::check(policy, prepared.provider, &prepared.body, &prepared.opts);
    // A permit names the arguments the application is to run.
    let arguments = check
        .action()
        .map(|a| (a.canonical_arguments().to_owned(), a.arguments().clone()));
    let mut scope = prepared.scope.clone();
    let version_seen = match scope.remove(VERSION_SEEN) {
        Some(v) => VersionSeen::Given(v),
        None => VersionSeen::Absent,
    };
    let now = crate::clock::now_millis();
    let call = Call {
        principal: &principal,
        proposal: check,
        scope: &scope,
        version_seen,
        attributes: &prepared.entities,
        now,
        holders: [crate::clock::fresh_holder()?, crate::clock::fresh_holder()?],
        lease: app.settings().lease,
    };
    let exec = match mode {
        ExecutionMode::InProcess => Exec::in_process(app),
        ExecutionMode::Client => Exec::Client,
    };
    let settled = settle(app, exec, call).await;
    let settled = settled.map_err(refused_or_failed)?;
    let decision = settled.decision;
    let permit = match (decision.permit(), &arguments, &settled.version_seen) {
        (Some(lease), Some((canonical, arguments)), Some(version)) => Some(Permit::new(
            lease,
            canonical,
            arguments.clone(),
            version.as_str(),
        )),
        _ => None,
    };
    let response = DecisionResponse::from_decision(
        &decision,
        permit,
        settled.review_item.and_then(|i| u64::try_from(i).ok()),
    );
    Ok((decision, response))
}

/// The core's whole decision with `exec` as this request's executor, and
/// what the operator's log and the review webhook hear of it.
async fn settle<P: GateComponents>(
    app: &AppState<P>,
    exec: Exec,
    call: Call<'_>,
) -> Result<Settled, CallError> {
    let (principal, now) = (call.principal, call.now);
    let components = app.components();
    let pipeline = Run {
        components,
        policy: app.policy(),
        exec,
    };
    let front = Front {
        policy: app.policy(),
        pipeline: &pipeline,
        store: components.claims(),
        queue: app.settings().review_queue,
        present: present_decision,
    };
    let settled = decide_call(&front, call).await?;
    for note in &settled.notes {
        log_note(principal, &settled.decision, note);
    }
    if let (true, Some(item)) = (settled.new_item, settled.review_item) {
        announce(app, item, &settled.decision, now);
    }
    let d = &settled.decision;
    tracing::info!(
        principal = principal.id(),
        outcome = d.outcome().as_str(),
        reason = d.reason().map(|r| r.as_str()),
        tool = d.tool(),
        operation_key = d.key().map(|k| k.to_hex()),
        "decision"
    );
    Ok(settled)
}

/// Which executor a decision runs with.
#[derive(Clone, Copy)]
enum Exec {
    /// The components' own, behind the result cap, which holds for the
    /// server's executor as for a client.
    InProcess(ResultCap),
    /// Client mode's stand-in: the client writes and completes.
    Client,
}

impl Exec {
    fn in_process<P: GateComponents>(app: &AppState<P>) -> Self {
        Self::InProcess(ResultCap::new(app.settings().max_result_bytes))
    }
}

/// One pipeline run on the sidecar's components (which may read once per
/// decision, [`GateComponents::decide`], or make their executor for it,
/// [`GateComponents::decide_in_process`]).
struct Run<'a, P> {
    components: &'a P,
    policy: &'a toolgate::contract::Policy,
    exec: Exec,
}

impl<P: GateComponents> Pipeline for Run<'_, P> {
    type Authz = P::Authz;

    fn authorizer(&self) -> &P::Authz {
        self.components.authorizer()
    }

    async fn decide(
        &self,
        proposal: toolgate::contract::Checked,
        request: &Request<'_>,
    ) -> Result<Decision, GateError> {
        match self.exec {
            Exec::InProcess(cap) => {
                self.components
                    .decide_in_process(self.policy, cap, proposal, request)
                    .await
            }
            Exec::Client => {
                self.components
                    .decide(self.policy, &ClientExecutor, proposal, request)
                    .await
            }
        }
    }
}

/// How a reviewer sees a decision: its response form.
fn present_decision(decision: &Decision) -> Value {
    serde_json::to_value(DecisionResponse::from_decision(decision, None, None))
        .unwrap_or(Value::Null)
}

/// A refusal as its problem; an infrastructure failure as 5xx (or the
/// request's fault where the state source says so).
fn refused_or_failed(e: CallError) -> ApiError {
    match e {
        CallError::Refused {
            refused,
            tool,
            not_audited,
        } => {
            if let Some(error) = not_audited {
                tracing::error!(%error, refusal = refused.refusal.as_str(), "refusal not audited");
            }
            let e = ApiError::new(problem_of(refused.refusal), refused.message);
            match tool {
                Some(t) => e.for_tool(&t),
                None => e,
            }
        }
        CallError::Gate(GateError::Corrupt(m)) => {
            ApiError::new(ProblemCode::CorruptRecord, m.to_string())
        }
        // What did not answer names the application's tables and hosts:
        // the operator's log, not the caller's.
        CallError::Gate(GateError::Authorizer(m)) => {
            ApiError::unavailable(format!("authoriser unavailable: {m}"))
        }
        // A state source that can never answer this request (its query
        // returns two rows, a column it cannot read): the same answer every
        // time, so not a retry-later.
        CallError::Gate(GateError::State(e)) if e.is_misconfigured() => ApiError::deployment(e),
        // The scope names a resource the state source does not have: the
        // request's fault, the same answer on every retry.
        CallError::Gate(GateError::State(e)) if e.is_not_found() => ApiError::resource_not_found(e),
        CallError::Gate(e) => ApiError::unavailable(e),
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
            tool = decision.tool(),
            reason = reason.as_str(),
            detail = detail.as_str(),
            "authorisation refused"
        ),
    }
}

/// Announces a new review item on the configured webhook, if any.
fn announce<P: GateComponents>(
    app: &AppState<P>,
    id: i64,
    decision: &Decision,
    now: toolgate::claim::UnixMillis,
) {
    crate::webhook::announce(
        app.settings().review_webhook.as_ref(),
        &app.inner.webhook_client,
        id,
        decision.outcome().as_str(),
        decision.tool(),
        now,
    );
}
