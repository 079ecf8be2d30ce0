//! The webhook executor against a real HTTP server on loopback playing the
//! shop, through the real pipeline (Cedar over SQLite entity queries, the
//! SQLite state source, the memory claim store): the signature the shop
//! verifies with its own HMAC, the idempotency key, every classification
//! of an answer, and reconciliation through the status URL.

mod support;

use serde_json::{Map, Value, json};
use support::*;
use toolgate::claim::{ClaimStore, ExecutorKind, MemoryClaimStore, ReconcileOutcome};
use toolgate::pipeline::StateSource;
use toolgate::pipeline::{Outcome, Reason, ReconcileReport, reconcile};
use toolgate_deploy::{DeploySection, Prepared};

/// A deployment of `refund_order` whose webhook is `/w/{mode}` on `base`,
/// with the SQLite application database at `db_url`.
async fn deployment(db_url: &str, base: &str, mode: &str, timeout_ms: u64) -> Prepared {
    let secret = secret_file(mode);
    let executor = format!(
        r#"{{ kind = "webhook", url = "{base}/w/{mode}", status_url = "{base}/status", secret_file = "{}", timeout_ms = {timeout_ms} }}"#,
        secret.display()
    );
    let text = format!(
        "[app_db]\nurl = \"{db_url}\"\n{}",
        tool_toml("", &executor, &sql_state(""))
    );
    let section = DeploySection::from_toml(&text).unwrap();
    Prepared::load(&section, std::path::Path::new("."), &policy(), CEDAR)
        .await
        .unwrap()
}

async fn one(mode: &str, timeout_ms: u64) -> (Prepared, Shop, MemoryClaimStore) {
    let db = sqlite_app_db(&format!("wh{mode}")).await;
    let (base, shop) = start_shop().await;
    let d = deployment(&db, &base, mode, timeout_ms).await;
    (d, shop, MemoryClaimStore::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_201_json_object_is_applied_and_is_the_recorded_result() {
    let (d, shop, store) = one("ok", 5000).await;
    let ana = agent("agent-ana");
    let first = propose(&d, &store, &ana, json!(1), 500, "3", 1)
        .await
        .unwrap();
    assert_eq!(first.outcome(), Outcome::Executed, "{first:?}");
    assert_eq!(
        first.result(),
        Some(&json!({"refund_id": 7, "status": "issued"}))
    );
    let key = first.key().unwrap();
    assert_eq!(
        store.fetch(&key).await.unwrap().unwrap().executor,
        ExecutorKind::Webhook
    );

    let received = shop.received.lock().unwrap().clone();
    assert_eq!(received.len(), 1);
    let r = &received[0];
    assert!(r.signature_ok, "the shop's own HMAC must verify the header");
    assert_eq!(r.idempotency_key.as_deref(), Some(key.to_hex().as_str()));
    assert_eq!(r.content_type.as_deref(), Some("application/json"));
    // The lease's end, as the claim recorded it: the last moment the shop
    // may commit this attempt.
    let lease_end = store.fetch(&key).await.unwrap().unwrap().lease_expires_at;
    assert_eq!(
        r.body,
        json!({
            "operation_key": key.to_hex(),
            "attempt": 1,
            "idempotency_key": key.to_hex(),
            "tool": "refund_order",
            "arguments": {"amount_minor": 500},
            "scope": {"order_id": 1, "version_seen": "3"},
            "precondition_version": "3",
            "actor": "agent-ana",
            "lease_expires_at": lease_end.0,
        })
    );

    // The same proposal again, with the order id as text (one key): the
    // recorded answer, and the webhook is not called a second time.
    let again = propose(&d, &store, &ana, json!("1"), 500, "3", 2)
        .await
        .unwrap();
    assert_eq!(again.outcome(), Outcome::Replayed, "{again:?}");
    assert_eq!(shop.received.lock().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_409_or_412_is_a_failed_precondition() {
    for (mode, current) in [("conflict", Some("4")), ("precondition", None)] {
        let (d, shop, store) = one(mode, 5000).await;
        let d1 = propose(&d, &store, &agent("agent-ana"), json!(1), 500, "3", 1)
            .await
            .unwrap();
        assert_eq!(d1.outcome(), Outcome::StateChanged, "{mode}: {d1:?}");
        assert_eq!(d1.reason(), Some(Reason::PreconditionFailed));
        assert_eq!(
            d1.current_version().map(|v| v.as_str().to_owned()),
            current.map(str::to_owned),
            "{mode}"
        );
        assert_eq!(shop.received.lock().unwrap().len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_outcomes_stay_in_flight_and_are_never_resent() {
    // A 5xx, a 2xx that is not a JSON object, a hang past the timeout, and
    // a 4xx refusal (the core has no "refused" outcome: it is left to
    // reconciliation, whose status URL says not applied).
    for (mode, timeout_ms, why) in [
        ("error", 5000, "HTTP 500"),
        ("text", 5000, "not valid JSON"),
        ("array", 5000, "not a JSON object"),
        ("hang", 300, "timed out"),
        ("refuse", 5000, "refused the write (HTTP 422"),
        ("fenced", 5000, "refused the attempt (HTTP 410, fenced)"),
    ] {
        let (d, shop, store) = one(mode, timeout_ms).await;
        let ana = agent("agent-ana");
        let d1 = propose(&d, &store, &ana, json!(1), 500, "3", 1)
            .await
            .unwrap();
        assert_eq!(d1.outcome(), Outcome::NeedsReconciliation, "{mode}: {d1:?}");
        assert_eq!(d1.reason(), Some(Reason::ExecutorFailed));
        let message = d1.message().map(str::to_owned).unwrap();
        assert!(message.contains(why), "{mode}: {message}");
        assert!(message.contains("not re-sent"), "{mode}: {message}");
        // A retry while the claim is in flight does not call the webhook.
        let d2 = propose(&d, &store, &ana, json!(1), 500, "3", 2)
            .await
            .unwrap();
        assert_ne!(d2.outcome(), Outcome::Executed, "{mode}");
        assert_eq!(shop.received.lock().unwrap().len(), 1, "{mode}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_unknown() {
    let db = sqlite_app_db("whrefused").await;
    let port = refused_port().await;
    let d = deployment(&db, &format!("http://127.0.0.1:{port}"), "ok", 2000).await;
    let store = MemoryClaimStore::new();
    let d1 = propose(&d, &store, &agent("agent-ana"), json!(1), 500, "3", 1)
        .await
        .unwrap();
    assert_eq!(d1.outcome(), Outcome::NeedsReconciliation, "{d1:?}");
    assert!(
        d1.message().unwrap().contains("could not connect"),
        "{d1:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_asks_the_status_url_signed() {
    let (d, shop, store) = one("hang", 300).await;
    let ana = agent("agent-ana");
    let d1 = propose(&d, &store, &ana, json!(1), 500, "3", 1)
        .await
        .unwrap();
    assert_eq!(d1.outcome(), Outcome::NeedsReconciliation);
    let key = d1.key().unwrap();

    // Answers that say nothing usable leave the claim stuck, with why.
    for (code, body, why) in [
        (500, "{}".to_owned(), "HTTP 500"),
        (
            200,
            r#"{"applied": "yes"}"#.to_owned(),
            "no boolean `applied`",
        ),
        (200, r#"{"applied": true}"#.to_owned(), "without a `result`"),
        (200, "not json".to_owned(), "not valid JSON"),
    ] {
        *shop.status_answer.lock().unwrap() = (code, body);
        let e = reconcile(&store, &d.executor, &key, "operator", later())
            .await
            .unwrap_err();
        assert!(e.to_string().contains(why), "{why}: {e}");
        assert!(store.fetch(&key).await.unwrap().unwrap().is_stuck(later()));
    }

    *shop.status_answer.lock().unwrap() = (
        200,
        json!({"applied": true, "result": {"refund_id": 7}}).to_string(),
    );
    let report = reconcile(&store, &d.executor, &key, "operator", later())
        .await
        .unwrap();
    match report {
        ReconcileReport::Recorded(ReconcileOutcome::Applied { receipt }) => {
            assert_eq!(receipt.value().unwrap(), json!({"refund_id": 7}));
        }
        other => panic!("{other:?}"),
    }
    let asked = shop.status_asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 5);
    for a in &asked {
        assert!(a.signature_ok);
        assert_eq!(a.idempotency_key.as_deref(), Some(key.to_hex().as_str()));
    }
    // Reconciled: a retry replays the result; the webhook was called once.
    let d2 = propose(&d, &store, &ana, json!(1), 500, "3", 2)
        .await
        .unwrap();
    assert_eq!(d2.outcome(), Outcome::Replayed, "{d2:?}");
    assert_eq!(d2.result(), Some(&json!({"refund_id": 7})));
    assert_eq!(shop.received.lock().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_url_saying_not_applied_closes_the_claim_as_not_applied() {
    let (d, shop, store) = one("refuse", 5000).await;
    let d1 = propose(&d, &store, &agent("agent-ana"), json!(1), 500, "3", 1)
        .await
        .unwrap();
    let key = d1.key().unwrap();
    *shop.status_answer.lock().unwrap() = (200, r#"{"applied": false}"#.to_owned());
    let report = reconcile(&store, &d.executor, &key, "operator", later())
        .await
        .unwrap();
    match report {
        ReconcileReport::Recorded(ReconcileOutcome::NotApplied { detail }) => {
            let v: Value = detail.value().unwrap();
            assert_eq!(v["applied"], json!(false));
            assert_eq!(v["attempt"], json!(1));
            assert_eq!(v["idempotency_key"], json!(key.to_hex()));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_fenced_not_applied_the_same_proposal_runs_once_as_attempt_2() {
    // The shop answers the first POST 410 fenced and every later one 201.
    let (d, shop, store) = one("second", 5000).await;
    let ana = agent("agent-ana");
    let d1 = propose(&d, &store, &ana, json!(1), 500, "3", 1)
        .await
        .unwrap();
    assert_eq!(d1.outcome(), Outcome::NeedsReconciliation, "{d1:?}");
    let key = d1.key().unwrap();
    // Still leased: the same proposal is in flight, and nothing is sent.
    let d2 = propose(&d, &store, &ana, json!(1), 500, "3", 2)
        .await
        .unwrap();
    assert_eq!(d2.outcome(), Outcome::InFlight, "{d2:?}");
    assert_eq!(shop.received.lock().unwrap().len(), 1);

    *shop.status_answer.lock().unwrap() = (200, r#"{"applied": false}"#.to_owned());
    let report = reconcile(&store, &d.executor, &key, "operator", later())
        .await
        .unwrap();
    assert!(
        matches!(
            report,
            ReconcileReport::Recorded(ReconcileOutcome::NotApplied { .. })
        ),
        "{report:?}"
    );

    // The same proposal again: a new attempt, authorised, read and sent
    // again under its own idempotency key; executed once.
    let d3 = propose(&d, &store, &ana, json!(1), 500, "3", 3)
        .await
        .unwrap();
    assert_eq!(d3.outcome(), Outcome::Executed, "{d3:?}");
    let received = shop.received.lock().unwrap().clone();
    assert_eq!(received.len(), 2);
    let attempt_2 = format!("{}.2", key.to_hex());
    assert_eq!(
        received[1].idempotency_key.as_deref(),
        Some(attempt_2.as_str())
    );
    assert_eq!(received[1].body["attempt"], json!(2));
    assert_eq!(received[1].body["idempotency_key"], json!(attempt_2));
    assert_eq!(received[1].body["operation_key"], json!(key.to_hex()));
    assert!(received[1].signature_ok);
    let row = store.fetch(&key).await.unwrap().unwrap();
    assert_eq!(row.attempt, 2);
    assert_eq!(row.idempotency_key(), attempt_2);

    // A retry now replays attempt 2's result; nothing is sent.
    let d4 = propose(&d, &store, &ana, json!(1), 500, "3", 4)
        .await
        .unwrap();
    assert_eq!(d4.outcome(), Outcome::Replayed, "{d4:?}");
    assert_eq!(shop.received.lock().unwrap().len(), 2);

    // Every attempt is audited as its own.
    let trail = store.audit_trail(&key, 100).await.unwrap();
    let seen: Vec<(&str, Option<u32>)> = trail.iter().map(|e| (e.outcome(), e.attempt())).collect();
    assert_eq!(
        seen,
        [
            ("needs_reconciliation", Some(1)),
            ("in_flight", Some(1)),
            ("reconciled_not_applied", Some(1)),
            ("executed", Some(2)),
            ("replayed", Some(2)),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cedar_sees_the_sql_entities() {
    let (d, shop, store) = one("ok", 5000).await;
    // The refunds the policies deny, and an agent the directory does not
    // know.
    for (actor, order, amount) in DENIED_REFUNDS.into_iter().chain([("agent-nobody", 1, 500)]) {
        let dn = propose(&d, &store, &agent(actor), json!(order), amount, "3", 9)
            .await
            .unwrap();
        assert_eq!(
            dn.outcome(),
            Outcome::Forbidden,
            "{actor} {order} {amount}: {dn:?}"
        );
    }
    assert!(shop.received.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_state_source_reads_the_version_by_percent_encoded_scope() {
    let db = sqlite_app_db("httpstate").await;
    let (base, shop) = start_shop().await;
    shop.versions
        .lock()
        .unwrap()
        .insert("1".into(), json!({"version": 3}));
    let text = format!(
        "[app_db]\nurl = \"{db}\"\n{}",
        tool_toml(
            "",
            "{ kind = \"client\" }",
            &format!(
                r#"{{ source = "http", url = "{base}/orders/{{order_id}}/version", secret_file = "{}" }}"#,
                secret_file("httpstate").display()
            )
        )
    );
    let section = DeploySection::from_toml(&text).unwrap();
    let d = Prepared::load(&section, std::path::Path::new("."), &policy(), CEDAR)
        .await
        .unwrap();
    let store = MemoryClaimStore::new();
    let ana = agent("agent-ana");
    let ok = propose(&d, &store, &ana, json!(1), 500, "3", 1)
        .await
        .unwrap();
    assert_eq!(ok.outcome(), Outcome::Permitted, "{ok:?}");
    let store = MemoryClaimStore::new();
    let stale = propose(&d, &store, &ana, json!(1), 500, "2", 1)
        .await
        .unwrap();
    assert_eq!(stale.outcome(), Outcome::StateChanged, "{stale:?}");

    // 404: no such resource; a bad answer: an error naming it.
    shop.versions.lock().unwrap().clear();
    let e = propose(&d, &store, &ana, json!(1), 500, "3", 2)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no such resource"), "{e}");
    shop.versions
        .lock()
        .unwrap()
        .insert("1".into(), json!({"version": 1.5}));
    let e = propose(&d, &store, &ana, json!(1), 500, "3", 3)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not a non-empty string"), "{e}");
}

/// A deployment of `refund_order` with no state read: the webhook's
/// version precondition alone decides.
async fn stateless(mode: &str) -> (Prepared, Shop, MemoryClaimStore) {
    let db = sqlite_app_db(&format!("none{mode}")).await;
    let (base, shop) = start_shop().await;
    let secret = secret_file(&format!("none{mode}"));
    let executor = format!(
        r#"{{ kind = "webhook", url = "{base}/w/{mode}", status_url = "{base}/status", secret_file = "{}" }}"#,
        secret.display()
    );
    let text = format!(
        "[app_db]\nurl = \"{db}\"\n{}",
        tool_toml("", &executor, r#"{ source = "none" }"#)
    );
    let section = DeploySection::from_toml(&text).unwrap();
    let d = Prepared::load(&section, std::path::Path::new("."), &policy(), CEDAR)
        .await
        .unwrap();
    (d, shop, MemoryClaimStore::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_state_read_a_201_executes_whatever_version_the_model_saw() {
    let (d, shop, store) = stateless("ok").await;
    assert!(!d.state.reads_state("refund_order"));
    // The order's version in the shop's table is 3; with no state read,
    // a version the gate could not check is the webhook's to judge.
    let first = propose(&d, &store, &agent("agent-ana"), json!(1), 500, "99", 1)
        .await
        .unwrap();
    assert_eq!(first.outcome(), Outcome::Executed, "{first:?}");
    let received = shop.received.lock().unwrap().clone();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body["precondition_version"], "99");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_state_read_a_409_is_state_changed() {
    let (d, shop, store) = stateless("conflict").await;
    let first = propose(&d, &store, &agent("agent-ana"), json!(1), 500, "3", 1)
        .await
        .unwrap();
    assert_eq!(first.outcome(), Outcome::StateChanged, "{first:?}");
    assert_eq!(first.reason(), Some(Reason::PreconditionFailed));
    assert_eq!(
        first.current_version().map(|v| v.as_str().to_owned()),
        Some("4".to_owned())
    );
    // Closed as not applied: a retry answers the same true outcome from the
    // claim (never `replayed`, which would claim a write) and never re-sends.
    let again = propose(&d, &store, &agent("agent-ana"), json!(1), 500, "3", 2)
        .await
        .unwrap();
    assert_eq!(
        (again.outcome(), again.reason()),
        (Outcome::StateChanged, Some(Reason::PreconditionFailed)),
        "{again:?}"
    );
    assert_eq!(shop.received.lock().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cedar_decides_on_a_request_sourced_attribute() {
    // The Agent comes from the application's request (its tier and team),
    // the Order from the shop's table.
    let db = sqlite_app_db("reqent").await;
    let (base, shop) = start_shop().await;
    let secret = secret_file("reqent");
    let executor = format!(
        r#"{{ kind = "webhook", url = "{base}/w/ok", status_url = "{base}/status", secret_file = "{}" }}"#,
        secret.display()
    );
    let tools = tool_toml("", &executor, &sql_state(""));
    let without_agent = &tools[..tools.rfind("[[tools.entities]]").unwrap()];
    let text = format!(
        "[app_db]\nurl = \"{db}\"\n{without_agent}\n[[tools.entities]]\ntype = \"Agent\"\nsource = \"request\"\n"
    );
    let cedar = r#"
permit(principal, action == Action::"refund_order", resource)
when { principal.team == resource.team && principal.tier == "senior" &&
       context.arguments.amount_minor <= principal.limits.max_refund };
"#;
    let section = DeploySection::from_toml(&text).unwrap();
    let d = Prepared::load(&section, std::path::Path::new("."), &policy(), cedar)
        .await
        .unwrap();
    let store = MemoryClaimStore::new();
    let ana = agent("agent-ana");
    let agent_entity = |tier: &str| -> Map<String, Value> {
        json!({"Agent": {"id": "agent-ana", "team": "blue", "tier": tier,
                         "limits": {"max_refund": 1000}}})
        .as_object()
        .unwrap()
        .clone()
    };
    // Ana refunds `amount` on order 1 (version 3) with `entities` sent.
    let refund = async |amount: i64, holder: u8, entities: &Map<String, Value>| {
        let facts = Facts {
            d: &d,
            store: &store,
            actor: &ana,
            order: json!(1),
            amount,
            version_seen: "3",
            holder,
        };
        propose_with(facts, entities).await.unwrap()
    };

    // A junior agent: Cedar denies on the attribute the application sent.
    let d1 = refund(500, 1, &agent_entity("junior")).await;
    assert_eq!(d1.outcome(), Outcome::Forbidden, "{d1:?}");
    assert_eq!(d1.reason(), Some(Reason::NotAuthorized), "{d1:?}");
    // Above the request-sent limit: denied too.
    let d2 = refund(5000, 2, &agent_entity("senior")).await;
    assert_eq!(d2.outcome(), Outcome::Forbidden, "{d2:?}");
    assert!(shop.received.lock().unwrap().is_empty());

    // The request-sourced entity missing: denied, naming it.
    let d3 = refund(500, 3, &Map::new()).await;
    assert_eq!(d3.outcome(), Outcome::Forbidden, "{d3:?}");
    assert_eq!(d3.reason(), Some(Reason::AuthorizationError), "{d3:?}");
    assert!(d3.message().unwrap().contains("`Agent`"), "{d3:?}");
    // A type the tool does not read from the request: denied, naming it.
    let mut extra = agent_entity("senior");
    extra.insert("Customer".into(), json!({"id": "c-1"}));
    let d4 = refund(500, 4, &extra).await;
    assert_eq!(d4.outcome(), Outcome::Forbidden, "{d4:?}");
    assert!(d4.message().unwrap().contains("`Customer`"), "{d4:?}");
    assert!(shop.received.lock().unwrap().is_empty());

    // A senior agent within the limit: executed.
    let d5 = refund(500, 5, &agent_entity("senior")).await;
    assert_eq!(d5.outcome(), Outcome::Executed, "{d5:?}");
    let received = shop.received.lock().unwrap().clone();
    assert_eq!(received.len(), 1);
    // The entities travel to Cedar alone, never in the permit.
    assert!(!received[0].body.to_string().contains("senior"));
}
