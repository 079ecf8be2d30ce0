//! The HTTP door accepts the deployment's signed tokens beside its API
//! keys: a person's token decides as that person, acting through the
//! client the token names, with the capabilities its scopes and groups
//! grant; a bad token is `401` as a bad key is, and keys keep working.

#[path = "../../toolgate-service/tests/support/provider.rs"]
mod provider;
mod support;

use std::time::Duration;

use axum::http::StatusCode;
use provider::{Provider, claims, sign};
use serde_json::json;
use support::http::{assert_outcome, decide};
use support::*;
use toolgate::claim::MemoryClaimStore;
use toolgate::contract::Policy;

fn gate(issuers: toolgate_service::Issuers) -> (axum::Router, std::sync::Arc<MemoryClaimStore>) {
    let desk = DeskRef::default();
    desk.set_version("t-1", "7");
    desk.set_version("t-2", "3");
    let store = SwitchStore::default();
    let inner = std::sync::Arc::clone(&store.inner);
    let service = toolgate_service::Settings {
        issuers,
        ..service_settings()
    };
    let state = new_app(
        Policy::load(POLICY).unwrap(),
        desk_components(&desk, store),
        keys(),
        Both {
            service,
            ..Both::default()
        },
    );
    (toolgate_http::router(state), inner)
}

#[tokio::test]
async fn a_persons_token_decides_as_that_person_through_its_client() {
    let p = Provider::start(&["a"]).await;
    let (app, store) = gate(p.issuers(Duration::from_secs(60)));
    let token = sign("a", &claims(&p.issuer));

    let (s, j) = decide(&app, &token, &credit_on_t1(500)).await;
    assert_outcome(s, &j, StatusCode::CREATED, "executed");
    let log = store.audit_log().unwrap();
    let entry = log.iter().find(|e| e.outcome() == "executed").unwrap();
    assert_eq!(
        (entry.actor(), entry.via()),
        ("alice", Some("claude-desktop"))
    );

    // Without the group that grants `credit:issue`: forbidden, as a key
    // without the capability is.
    let mut bare = claims(&p.issuer);
    bare["groups"] = json!([]);
    let (s, j) = decide(&app, &sign("a", &bare), &credit_on_t1(600)).await;
    assert_outcome(s, &j, StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(j["reason"], "missing_capability", "{j}");

    // A token never names another actor: that is a key's delegation.
    let mut body = credit_on_t1(700);
    body["actor"] = json!("bob");
    let (s, j) = decide(&app, &token, &body).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{j}");
    assert_eq!(j["code"], "actor_not_allowed", "{j}");

    // The keys keep working beside the tokens (on another ticket: t-1's
    // operation is alice's).
    let (s, j) = decide(&app, AGENT_KEY, &decision_body(credit(800), "t-2", "3")).await;
    assert_outcome(s, &j, StatusCode::CREATED, "executed");
}

#[tokio::test]
async fn a_bad_token_is_401_with_its_reason() {
    let p = Provider::start(&["a"]).await;
    let (app, store) = gate(p.issuers(Duration::from_secs(60)));
    let mut expired = claims(&p.issuer);
    expired["exp"] = json!(provider::now() - 600);
    let mut elsewhere = claims(&p.issuer);
    elsewhere["aud"] = json!("https://other.example");
    for (token, reason) in [
        (sign("a", &expired), "invalid_token"),
        (sign("a", &elsewhere), "invalid_token"),
        (sign("b", &claims(&p.issuer)), "unknown_key"),
    ] {
        let (s, j) = decide(&app, &token, &credit_on_t1(500)).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{j}");
        assert_eq!(j["code"], "unauthorized", "{j}");
        assert!(j["detail"].as_str().unwrap().contains(reason), "{j}");
    }
    // Nothing was decided or audited for a caller nobody authenticated.
    assert!(store.audit_log().unwrap().is_empty());

    // A deployment without issuers takes no token at all.
    let (plain, _) = gate(toolgate_service::Issuers::default());
    let (s, j) = decide(&plain, &sign("a", &claims(&p.issuer)), &credit_on_t1(500)).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{j}");
}

/// The provider's issuer, with a `review` scope granting
/// `toolgate:review`: people review through their own tokens.
fn with_review_scope(p: &Provider) -> toolgate_service::Issuers {
    let mut settings = p.settings(Some(format!("{}/jwks", p.issuer)), Duration::from_secs(60));
    settings
        .scope_capabilities
        .insert("review".into(), vec!["toolgate:review".into()]);
    toolgate_service::Issuers::new(vec![settings]).unwrap()
}

#[tokio::test]
async fn the_review_queue_names_the_person_and_four_eyes_compares_persons() {
    let p = Provider::start(&["a"]).await;
    let (app, _) = gate(with_review_scope(&p));
    let person = |sub: &str, client: &str, scope: &str| {
        let mut c = claims(&p.issuer);
        c["sub"] = json!(sub);
        c["azp"] = json!(client);
        c["scope"] = json!(scope);
        sign("a", &c)
    };
    // alice, through her assistant, proposes a refund a person approves.
    let proposer = person("alice", "claude-desktop", "refunds");
    let (s, j) = decide(
        &app,
        &proposer,
        &support::decision_body(support::refund(900), "t-1", "7"),
    )
    .await;
    assert_outcome(s, &j, StatusCode::ACCEPTED, "pending_approval");
    let item = j["review_item"].as_u64().unwrap();

    // The queue names the person and the client she acted through.
    let reviewer = person("bob", "review-console", "review");
    let (s, list) = support::http::send(
        &app,
        support::http::get("/v1/review/items?kind=pending_approval", &reviewer),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{list}");
    let listed = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"].as_u64() == Some(item))
        .unwrap_or_else(|| panic!("item {item} not listed: {list}"));
    assert_eq!(
        (&listed["proposer"], &listed["proposer_via"]),
        (&json!("alice"), &json!("claude-desktop")),
        "{listed}"
    );

    // alice again, through another client that may review: still alice,
    // so still her own proposal.
    let approve = format!("/v1/review/items/{item}/approve");
    let herself = person("alice", "review-console", "review");
    let (s, j) = support::http::send_post(&app, &approve, &herself, &json!({})).await;
    assert_eq!(
        (s, &j["code"]),
        (StatusCode::CONFLICT, &json!("self_approval")),
        "{j}"
    );
    // Her assistant's token cannot review at all.
    let (s, j) = support::http::send_post(&app, &approve, &proposer, &json!({})).await;
    assert_eq!(
        (s, &j["code"]),
        (StatusCode::FORBIDDEN, &json!("missing_capability")),
        "{j}"
    );
    // bob is another person: his vote counts, and names him.
    let (s, j) = support::http::send_post(&app, &approve, &reviewer, &json!({})).await;
    assert_eq!(s, StatusCode::OK, "{j}");
    assert_eq!(j["item"]["votes"][0]["reviewer"], "bob", "{j}");
}
