//! docs/design.md §13 through the sidecar: typed scope fields, actor
//! delegation, and reconciliation routed by the executor recorded on each
//! claim.

mod support;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};
use support::http::{assert_outcome, assert_problem, complete, decide, reconcile_applied, send};
use support::*;
use toolgate::claim::MemoryClaimStore;
use toolgate::contract::Policy;
use toolgate_http::{AppState, Settings};

/// The test desk's policy with `ticket_id` typed as an integer.
fn typed_app() -> (Router, DeskRef) {
    let text = POLICY.replacen(
        r#"operation_key = ["customer_id", "ticket_id", "version_seen"]
needs_approval = false"#,
        r#"operation_key = ["customer_id", "ticket_id", "version_seen"]
scope_types = { ticket_id = "integer" }
needs_approval = false"#,
        1,
    );
    assert_ne!(text, POLICY, "the test policy's credit tool has changed");
    let desk = DeskRef::default();
    desk.set_version("42", "7");
    let components = desk_components(&desk, MemoryClaimStore::new());
    let state = new_app(
        Policy::load(&text).unwrap(),
        components,
        keys(),
        Settings::default(),
    );
    (toolgate_http::router(state), desk)
}

fn scoped(ticket: Value, customer: Value, version: Value) -> Value {
    json!({
        "provider": "envelope",
        "response": credit(1500),
        "scope": {"customer_id": customer, "ticket_id": ticket, "version_seen": version}
    })
}

#[tokio::test]
async fn an_integer_field_and_its_text_make_one_operation_key() {
    let (router, desk) = typed_app();
    let (s, first) = decide(
        &router,
        AGENT_KEY,
        &scoped(json!(42), json!("c-1"), json!(7)),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{first}");
    assert_eq!(first["outcome"], "executed");
    // `"42"` for the integer field and `"7"` for the version: the same
    // operation, replayed, not a second credit.
    let (s, second) = decide(
        &router,
        AGENT_KEY,
        &scoped(json!("42"), json!("c-1"), json!("7")),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{second}");
    assert_eq!(second["outcome"], "replayed");
    assert_eq!(second["operation_key"], first["operation_key"]);
    assert_eq!(desk.credits_for("42"), 1);
}

#[tokio::test]
async fn a_scope_value_of_the_wrong_type_is_invalid_scope() {
    let (router, desk) = typed_app();
    for (ticket, customer) in [
        (json!("042"), json!("c-1")),
        (json!("4.2"), json!("c-1")),
        (json!(4.2), json!("c-1")),
        (json!(true), json!("c-1")),
        (json!(null), json!("c-1")),
        // A string field given an integer.
        (json!(42), json!(42)),
    ] {
        let (s, j) = decide(
            &router,
            AGENT_KEY,
            &scoped(ticket.clone(), customer, json!(7)),
        )
        .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{ticket}: {j}");
        assert_eq!(j["code"], "invalid_scope", "{ticket}: {j}");
    }
    // A negative version is no version.
    let (s, j) = decide(
        &router,
        AGENT_KEY,
        &scoped(json!(42), json!("c-1"), json!(-7)),
    )
    .await;
    assert_problem(s, &j, StatusCode::UNPROCESSABLE_ENTITY, "invalid_scope");
    assert_eq!(desk.credits_for("42"), 0);
}

#[tokio::test]
async fn untyped_desk_scopes_work_as_before() {
    let (router, desk) = app_router();
    // Strings for the ids and an integer version, as the desk sends them.
    let body = json!({"provider": "envelope", "response": credit(1500),
        "scope": {"customer_id": "c-1", "ticket_id": "t-1", "version_seen": 7}});
    let (s, j) = decide(&router, AGENT_KEY, &body).await;
    assert_outcome(s, &j, StatusCode::CREATED, "executed");
    let (s, j) = decide(&router, AGENT_KEY, &credit_on_t1(1500)).await;
    assert_outcome(s, &j, StatusCode::OK, "replayed");
    assert_eq!(desk.credits_for("t-1"), 1);
}

const DELEGATING_KEY: &str = "tg_test_delegating_key";
const DELEGATING_CLIENT_KEY: &str = "tg_test_delegating_client_key";

/// The test desk with, besides the usual keys, a service key that may act
/// for its users (in-process and client mode), and a lease of `lease`.
fn delegating_app(lease: std::time::Duration) -> (AppState, DeskRef) {
    use toolgate::pipeline::Principal;
    use toolgate_service::{ApiKey, ExecutionMode, KeyRing};
    let desk = DeskRef::default();
    desk.set_version("t-1", "7");
    desk.set_version("t-2", "3");
    let components = desk_components(&desk, MemoryClaimStore::new());
    let service = |key: &str, id: &str, mode| ApiKey {
        sha256: ApiKey::digest(key),
        principal: Principal::new(id, ["credit:issue"]).unwrap(),
        mode,
        act_for_users: true,
    };
    let mut all: Vec<ApiKey> = Vec::new();
    for (text, id, caps, mode) in [
        (
            AGENT_KEY,
            "agent-1",
            "credit:issue",
            ExecutionMode::InProcess,
        ),
        (CLIENT_KEY, "php-app", "credit:issue", ExecutionMode::Client),
        (
            OPERATOR_KEY,
            "operator-1",
            "toolgate:operate",
            ExecutionMode::InProcess,
        ),
    ] {
        all.push(ApiKey {
            sha256: ApiKey::digest(text),
            principal: Principal::new(id, [caps]).unwrap(),
            mode,
            act_for_users: false,
        });
    }
    all.push(service(
        DELEGATING_KEY,
        "support-portal",
        ExecutionMode::InProcess,
    ));
    all.push(service(
        DELEGATING_CLIENT_KEY,
        "shop-backend",
        ExecutionMode::Client,
    ));
    let settings = toolgate_service::Settings {
        lease,
        ..service_settings()
    };
    let state = new_app(
        Policy::load(POLICY).unwrap(),
        components,
        KeyRing::new(all).unwrap(),
        settings,
    );
    (state, desk)
}

fn as_actor(mut body: Value, actor: &str) -> Value {
    body["actor"] = json!(actor);
    body
}

/// The claim on `key`, which must exist.
async fn claim(
    state: &AppState,
    key: &toolgate::claim::OperationKey,
) -> toolgate::claim::ClaimRecord {
    use toolgate::claim::ClaimStore;
    state
        .service()
        .store()
        .fetch(key)
        .await
        .unwrap()
        .expect("the claim")
}

async fn trail(state: &AppState, key_hex: &str) -> Vec<toolgate::claim::AuditEntry> {
    use toolgate::claim::ClaimStore;
    let key: toolgate::claim::OperationKey = key_hex.parse().unwrap();
    state
        .service()
        .store()
        .audit_trail(&key, 100)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_delegating_key_acts_as_the_actor_it_names_for_capability_cedar_and_the_claim() {
    let (state, desk) = delegating_app(std::time::Duration::from_secs(30));
    let router = toolgate_http::router(state.clone());
    // The authoriser denies agent-bob and allows agent-ana: it sees the
    // actor, not the service key (which it would allow).
    desk.0
        .revoked
        .lock()
        .unwrap()
        .insert("agent-bob".to_owned());
    let (s, j) = decide(
        &router,
        DELEGATING_KEY,
        &as_actor(decision_body(credit(1500), "t-2", "3"), "agent-bob"),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{j}");
    assert_eq!(
        (j["outcome"].as_str(), j["reason"].as_str()),
        (Some("forbidden"), Some("not_authorized"))
    );
    assert_eq!(desk.credits_for("t-2"), 0);

    let (s, j) = decide(
        &router,
        DELEGATING_KEY,
        &as_actor(credit_on_t1(1500), "agent-ana"),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{j}");
    assert_eq!(j["outcome"], "executed");
    assert_eq!(desk.credits_for("t-1"), 1);
    let key_hex = j["operation_key"].as_str().unwrap();
    // The claim's proposer is the actor; the audit entry keeps the key as `via`.
    let key: toolgate::claim::OperationKey = key_hex.parse().unwrap();
    let record = claim(&state, &key).await;
    assert_eq!(record.proposal.proposer(), "agent-ana");
    let entries = trail(&state, key_hex).await;
    let executed = entries.iter().find(|e| e.outcome() == "executed").unwrap();
    assert_eq!(executed.actor(), "agent-ana");
    assert_eq!(executed.via(), Some("support-portal"));

    // Without `actor` the delegating key acts as itself.
    let (s, j) = decide(&router, DELEGATING_KEY, &credit_on_t1(1500)).await;
    assert_outcome(s, &j, StatusCode::OK, "replayed");
    let entries = trail(&state, key_hex).await;
    let replayed = entries.iter().find(|e| e.outcome() == "replayed").unwrap();
    assert_eq!((replayed.actor(), replayed.via()), ("support-portal", None));
}

#[tokio::test]
async fn a_key_that_may_not_delegate_is_refused_when_it_names_an_actor() {
    let (state, desk) = delegating_app(std::time::Duration::from_secs(30));
    let router = toolgate_http::router(state);
    for key in [AGENT_KEY, CLIENT_KEY] {
        let (s, j) = decide(&router, key, &as_actor(credit_on_t1(1500), "agent-ana")).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{j}");
        assert_eq!(j["code"], "actor_not_allowed", "{j}");
    }
    assert_eq!(desk.credits_for("t-1"), 0);
    // A delegating key still gets a well-formed actor only.
    let (s, j) = decide(
        &router,
        DELEGATING_KEY,
        &as_actor(credit_on_t1(1500), "bad\nactor"),
    )
    .await;
    assert_problem(s, &j, StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
}

#[tokio::test]
async fn the_model_can_never_name_the_actor() {
    let (state, desk) = delegating_app(std::time::Duration::from_secs(30));
    let router = toolgate_http::router(state);
    let proposal = action(
        "apply_goodwill_credit",
        json!({"amount_minor": 1500, "reason_code": "late_delivery", "actor": "agent-ana"}),
    );
    for key in [AGENT_KEY, DELEGATING_KEY] {
        let (s, j) = decide(&router, key, &decision_body(proposal.clone(), "t-1", "7")).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{j}");
        assert_eq!(
            (j["outcome"].as_str(), j["reason"].as_str()),
            (Some("rejected"), Some("unknown_key")),
            "{j}"
        );
    }
    assert_eq!(desk.credits_for("t-1"), 0);
}

#[tokio::test]
async fn a_stuck_client_claim_is_never_answered_by_the_in_process_executor() {
    use toolgate::claim::{ClaimStatus, ExecutorKind};
    // A lease of a millisecond: the permit's claim is stuck at once.
    let (state, desk) = delegating_app(std::time::Duration::from_millis(1));
    let router = toolgate_http::router(state.clone());
    let (s, j) = decide(&router, CLIENT_KEY, &credit_on_t1(1500)).await;
    assert_outcome(s, &j, StatusCode::OK, "permitted");
    let key_hex = j["operation_key"].as_str().unwrap().to_owned();
    let key: toolgate::claim::OperationKey = key_hex.parse().unwrap();
    let record = claim(&state, &key).await;
    assert_eq!(record.executor, ExecutorKind::Client);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;

    // An empty body would ask the server's executor, which knows nothing of
    // the client's write (it would say "not found", and a person might then
    // refund by hand a second time): refused, nothing asked or written.
    let path = format!("/v1/claims/{key_hex}/reconcile");
    let empty = Request::post(&path)
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR_KEY}"))
        .body(Body::empty())
        .unwrap();
    let (s, j) = send(&router, empty).await;
    assert_eq!(s, StatusCode::CONFLICT, "{j}");
    assert_eq!(j["code"], "explicit_answer_required", "{j}");
    assert_eq!(j["claim"]["executor"], "client", "{j}");
    let record = claim(&state, &key).await;
    assert_eq!(
        record.status,
        ClaimStatus::InFlight,
        "the claim was closed anyway"
    );
    assert_eq!(desk.credits_for("t-1"), 0);

    // The application's explicit answer closes it.
    let (s, j) = reconcile_applied(&router, &key_hex, &json!({"credit_id": 77})).await;
    assert_eq!(s, StatusCode::OK, "{j}");
    assert_eq!(j["status"], "reconciled_applied");
    assert_eq!(j["result"], json!({"credit_id": 77}));
    let outcomes: Vec<String> = trail(&state, &key_hex)
        .await
        .iter()
        .map(|e| e.outcome().to_owned())
        .collect();
    assert!(
        outcomes.contains(&"explicit_answer_required".to_owned()),
        "{outcomes:?}"
    );
    assert!(
        outcomes.contains(&"reconciled_applied".to_owned()),
        "{outcomes:?}"
    );
}

#[tokio::test]
async fn a_stuck_in_process_claim_is_asked_of_its_executor() {
    use toolgate::claim::ExecutorKind;
    let (state, desk) = delegating_app(std::time::Duration::from_millis(1));
    let router = toolgate_http::router(state.clone());
    *desk.0.fail_execute.lock().unwrap() = true;
    let (s, j) = decide(&router, AGENT_KEY, &credit_on_t1(1500)).await;
    assert_outcome(s, &j, StatusCode::CONFLICT, "needs_reconciliation");
    let key_hex = j["operation_key"].as_str().unwrap().to_owned();
    let key: toolgate::claim::OperationKey = key_hex.parse().unwrap();
    let record = claim(&state, &key).await;
    assert_eq!(record.executor, ExecutorKind::InProcess);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let empty = Request::post(format!("/v1/claims/{key_hex}/reconcile"))
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR_KEY}"))
        .body(Body::empty())
        .unwrap();
    let (s, j) = send(&router, empty).await;
    assert_eq!(s, StatusCode::OK, "{j}");
    // The desk's executor looked for its credit and found none.
    assert_eq!(j["status"], "reconciled_not_applied", "{j}");
    assert_eq!(j["result"], json!({"found": false}));
}

#[tokio::test]
async fn a_delegating_client_key_completes_the_permit_it_received_for_its_user() {
    let (state, _desk) = delegating_app(std::time::Duration::from_secs(30));
    let router = toolgate_http::router(state.clone());
    let (s, j) = decide(
        &router,
        DELEGATING_CLIENT_KEY,
        &as_actor(credit_on_t1(1500), "agent-ana"),
    )
    .await;
    assert_outcome(s, &j, StatusCode::OK, "permitted");
    let key_hex = j["operation_key"].as_str().unwrap().to_owned();
    let holder = j["permit"]["holder"].as_str().unwrap().to_owned();
    let (s, done) = complete(
        &router,
        DELEGATING_CLIENT_KEY,
        &key_hex,
        &holder,
        &json!({"credit_id": 5}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{done}");
    let entries = trail(&state, &key_hex).await;
    let completed = entries
        .iter()
        .find(|e| e.outcome() == "client_completed")
        .unwrap();
    assert_eq!(
        (completed.actor(), completed.via()),
        ("agent-ana", Some("shop-backend"))
    );
}
