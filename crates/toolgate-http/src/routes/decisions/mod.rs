//! `POST /v1/decisions`: one provider response through the whole pipeline.
//! The body is read and checked for shape in [`read`]; the decision is the
//! service's; this file maps it to the answer (and the `Idempotency-Key`
//! memory's replay).

mod read;

pub use read::strict_body;
use read::{Prepared, read_request};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use toolgate::contract;
use toolgate::pipeline::{
    CallError, Decision, GateError, Outcome, Principal, Refusal, VERSION_SEEN, VersionSeen,
};
use toolgate_service::{DecideError, ExecutionMode, Proposal};

use crate::auth::Caller;
use crate::dto::{DecisionRequest, DecisionResponse, Permit, status_of};
use crate::error::{ApiError, PROBLEM_JSON, Problem, ProblemCode};
use crate::idempotency::{Begin, IdempotencyHeader, Stored, idempotency_key};
use crate::state::AppState;

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
pub async fn post(
    State(app): State<AppState>,
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
async fn replay(app: &AppState, caller: &Caller, body: &[u8], stored: Stored) -> Response {
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
        ProblemCode::IdentityScopeField => Refusal::IdentityScopeField,
        _ => return None,
    })
}

/// A refusal's problem code.
pub(super) fn problem_of(refusal: Refusal) -> ProblemCode {
    match refusal {
        Refusal::InvalidBody => ProblemCode::InvalidBody,
        Refusal::UnknownProvider => ProblemCode::UnknownProvider,
        Refusal::UnknownScopeField => ProblemCode::UnknownScopeField,
        Refusal::InvalidScope => ProblemCode::InvalidScope,
        Refusal::MissingScope => ProblemCode::MissingScope,
        Refusal::ActorNotAllowed => ProblemCode::ActorNotAllowed,
        Refusal::UnexpectedEntities => ProblemCode::UnexpectedEntities,
        Refusal::IdentityScopeField => ProblemCode::IdentityScopeField,
    }
}

/// Decides one request. A request refused while it is read (its body,
/// actor, provider or scope shape) is audited here, under the key's
/// principal; the core audits the refusals it makes itself
/// (`toolgate::pipeline::decide_call`). A refusal whose audit entry cannot be written is
/// still answered (and logged): the caller's answer does not depend on the
/// log.
async fn decide_body(
    app: &AppState,
    caller: &Caller,
    body: &[u8],
) -> Result<(Decision, DecisionResponse), ApiError> {
    let (principal, prepared) = match read_request(app, caller, body) {
        Ok(read) => read,
        Err(e) => {
            if let Some(refusal) = refusal_of(e.code()) {
                app.service()
                    .audit_refusal(&caller.principal, refusal, e.tool())
                    .await;
            }
            return Err(e);
        }
    };
    run(app, principal, caller.mode, prepared).await
}

/// Decides one prepared proposal with the service (on its own task, so a
/// dropped connection or an expired deadline never abandons a claim between
/// claim and completion), and the response for it.
async fn run(
    app: &AppState,
    principal: Principal,
    mode: ExecutionMode,
    prepared: Prepared,
) -> Result<(Decision, DecisionResponse), ApiError> {
    let check = contract::check(
        app.policy(),
        prepared.provider,
        &prepared.body,
        &prepared.opts,
    );
    // A permit names the arguments the application is to run.
    let arguments = check
        .action()
        .map(|a| (a.canonical_arguments().to_owned(), a.arguments().clone()));
    let mut scope = prepared.scope;
    let version_seen = match scope.remove(VERSION_SEEN) {
        Some(v) => VersionSeen::Given(v),
        None => VersionSeen::Absent,
    };
    let proposal = Proposal {
        principal,
        proposal: check,
        scope,
        version_seen,
        attributes: prepared.entities,
        mode,
    };
    let settled = app.service().decide(proposal).await.map_err(|e| match e {
        DecideError::Call(e) => refused_or_failed(e),
        DecideError::Task(e) => ApiError::new(
            ProblemCode::Internal,
            format!("the decision task failed: {e}"),
        ),
    })?;
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
