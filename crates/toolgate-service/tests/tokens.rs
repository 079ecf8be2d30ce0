//! Signed tokens of the deployment's issuers ([`toolgate_service::tokens`]),
//! verified against a JWKS served over real HTTP on loopback: the person
//! and the client a good token names, and each bad token refused with its
//! code; the JWKS cached, fetched again for an unknown `kid` no more often
//! than the interval allows, a cached key verifying while the JWKS is down,
//! none without one, and a rotated key picked up.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use support::provider::{AUDIENCE, Provider, b64, claims, now, sign, x};
use toolgate_service::{IssuerSettings, Issuers, TokenError};

fn code(r: Result<toolgate::pipeline::Principal, TokenError>) -> &'static str {
    match r {
        Ok(p) => panic!("accepted as {p:?}"),
        Err(e) => e.code(),
    }
}

#[tokio::test]
async fn a_good_token_names_the_person_the_client_and_what_they_may_do() {
    let p = Provider::start(&["a"]).await;
    let issuers = p.issuers(Duration::from_secs(60));
    let principal = issuers
        .verify(&sign("a", &claims(&p.issuer)))
        .await
        .unwrap();
    assert_eq!(principal.id(), "alice");
    assert_eq!(principal.via(), Some("claude-desktop"));
    assert!(principal.has_capability("refund:issue"));
    assert!(principal.has_capability("credit:issue"));
    // `openid` maps to nothing; nothing else is granted.
    assert!(!principal.has_capability("openid"));
    assert!(!principal.has_capability("toolgate:review"));
    // The claims the issuer's `attributes` names, and only those, are the
    // person's attributes for the authoriser.
    assert_eq!(
        serde_json::Value::Object(principal.attributes().clone()),
        json!({"team": "eu"})
    );
    let mut no_team = claims(&p.issuer);
    no_team["team"] = Value::Null;
    let bare = issuers.verify(&sign("a", &no_team)).await.unwrap();
    assert!(bare.attributes().is_empty(), "{bare:?}");

    // Metadata discovery finds the same keys.
    let discovered = Issuers::new(vec![p.settings(None, Duration::from_secs(60))]).unwrap();
    assert_eq!(
        discovered
            .verify(&sign("a", &claims(&p.issuer)))
            .await
            .unwrap()
            .id(),
        "alice"
    );
}

#[tokio::test]
async fn every_bad_token_is_refused_with_its_code() {
    let p = Provider::start(&["a"]).await;
    let issuers = p.issuers(Duration::from_secs(60));
    let good = claims(&p.issuer);
    let with = |k: &str, v: Value| {
        let mut c = good.clone();
        c[k] = v;
        c
    };

    let other_audience = sign("a", &with("aud", json!("https://elsewhere.example")));
    assert_eq!(code(issuers.verify(&other_audience).await), "invalid_token");
    let expired = sign("a", &with("exp", json!(now() - 120)));
    assert_eq!(code(issuers.verify(&expired).await), "invalid_token");
    let not_yet = sign("a", &with("nbf", json!(now() + 600)));
    assert_eq!(code(issuers.verify(&not_yet).await), "invalid_token");
    let mut no_exp = good.clone();
    no_exp.as_object_mut().unwrap().remove("exp");
    assert_eq!(
        code(issuers.verify(&sign("a", &no_exp)).await),
        "invalid_token"
    );
    let other_issuer = sign("a", &with("iss", json!("https://evil.example")));
    assert_eq!(code(issuers.verify(&other_issuer).await), "unknown_issuer");
    let no_subject = {
        let mut c = good.clone();
        c.as_object_mut().unwrap().remove("sub");
        sign("a", &c)
    };
    assert_eq!(code(issuers.verify(&no_subject).await), "no_principal");

    // Signed with key b, which the issuer does not publish.
    assert_eq!(code(issuers.verify(&sign("b", &good)).await), "unknown_key");
    // Key b's signature under key a's kid.
    let forged = {
        let t = sign("b", &good);
        let parts: Vec<&str> = t.split('.').collect();
        let header = b64(&json!({"alg": "EdDSA", "typ": "JWT", "kid": "a"}));
        format!("{header}.{}.{}", parts[1], parts[2])
    };
    assert_eq!(code(issuers.verify(&forged).await), "invalid_token");
    // A changed payload under a good signature.
    let tampered = {
        let t = sign("a", &good);
        let parts: Vec<&str> = t.split('.').collect();
        format!(
            "{}.{}.{}",
            parts[0],
            b64(&with("sub", json!("mallory"))),
            parts[2]
        )
    };
    assert_eq!(code(issuers.verify(&tampered).await), "invalid_token");

    // `alg: none`, and HS256 signed with the public key as the secret.
    let payload = b64(&good);
    let none = format!("{}.{payload}.", b64(&json!({"alg": "none", "kid": "a"})));
    assert_eq!(code(issuers.verify(&none).await), "malformed_token");
    assert!(!Issuers::looks_like_token(&none));
    let hs = {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("a".into());
        jsonwebtoken::encode(&header, &good, &EncodingKey::from_secret(x("a").as_bytes())).unwrap()
    };
    assert_eq!(code(issuers.verify(&hs).await), "algorithm_not_allowed");
    assert_eq!(code(issuers.verify("not.a.jwt").await), "malformed_token");
}

#[tokio::test]
async fn keys_are_cached_refetched_for_a_new_kid_and_fail_closed() {
    let p = Provider::start(&["a"]).await;
    let issuers = p.issuers(Duration::from_secs(3600));
    let token_a = sign("a", &claims(&p.issuer));
    issuers.verify(&token_a).await.unwrap();
    issuers.verify(&token_a).await.unwrap();
    assert_eq!(p.fetches.load(Ordering::SeqCst), 1, "the keys are cached");

    // An unknown kid fetches once; within the interval, never again.
    let token_b = sign("b", &claims(&p.issuer));
    assert_eq!(code(issuers.verify(&token_b).await), "unknown_key");
    assert_eq!(code(issuers.verify(&token_b).await), "unknown_key");
    assert_eq!(p.fetches.load(Ordering::SeqCst), 1, "rate-limited");

    // The JWKS goes down: the cached key still verifies.
    p.up.store(false, Ordering::SeqCst);
    issuers.verify(&token_a).await.unwrap();
    // With no cached key, nothing verifies.
    let cold = p.issuers(Duration::from_secs(3600));
    assert_eq!(code(cold.verify(&token_a).await), "keys_unavailable");
    // Within the interval it is not fetched again, and still says why:
    // the keys are unavailable, not the kid unknown.
    assert_eq!(code(cold.verify(&token_a).await), "keys_unavailable");
    p.up.store(true, Ordering::SeqCst);

    // Rotation: the issuer now publishes b only. A verifier that may fetch
    // again picks b up, and a takes no new token once the set is read.
    let rotating = p.issuers(Duration::ZERO);
    rotating.verify(&token_a).await.unwrap();
    p.serve_keys(&["b"]);
    assert_eq!(rotating.verify(&token_b).await.unwrap().id(), "alice");
    assert_eq!(code(rotating.verify(&token_a).await), "unknown_key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_jwks_holds_up_no_token_whose_key_is_cached() {
    let p = Provider::start(&["a"]).await;
    let issuers = p.issuers(Duration::ZERO);
    let token_a = sign("a", &claims(&p.issuer));
    issuers.verify(&token_a).await.unwrap();
    // A made-up kid starts a fetch the issuer does not answer yet.
    p.hold.store(true, Ordering::SeqCst);
    let pending = {
        let (issuers, token) = (issuers.clone(), sign("b", &claims(&p.issuer)));
        tokio::spawn(async move { code(issuers.verify(&token).await) })
    };
    while p.fetches.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Meanwhile the cached key verifies: the fetch holds no lock it needs.
    // (The timeout only turns a hang into a failure.)
    let verified = tokio::time::timeout(Duration::from_secs(60), issuers.verify(&token_a)).await;
    assert_eq!(
        verified.expect("held up by the fetch").unwrap().id(),
        "alice"
    );
    assert!(!pending.is_finished());
    p.hold.store(false, Ordering::SeqCst);
    assert_eq!(pending.await.unwrap(), "unknown_key");
}

#[test]
fn an_issuer_takes_asymmetric_algorithms_only() {
    let base = IssuerSettings {
        issuer: "https://id.example".into(),
        audience: AUDIENCE.into(),
        jwks_url: None,
        algorithms: vec!["RS256".into()],
        clock_skew: Duration::from_secs(60),
        principal_claim: "sub".into(),
        client_claims: vec![],
        scope_capabilities: BTreeMap::new(),
        groups_claim: None,
        group_capabilities: BTreeMap::new(),
        refetch_interval: Duration::from_secs(30),
        attributes: BTreeMap::new(),
    };
    for bad in ["HS256", "none", "rs256"] {
        let s = IssuerSettings {
            algorithms: vec![bad.into()],
            ..base.clone()
        };
        assert!(Issuers::new(vec![s]).is_err(), "{bad} was accepted");
    }
    assert!(Issuers::new(vec![base.clone(), base.clone()]).is_err());
    assert!(Issuers::new(vec![base]).is_ok());
}
