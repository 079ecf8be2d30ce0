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
