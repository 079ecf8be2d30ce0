//! The `Idempotency-Key` memory as rows in the claim database:
//! a repeat reaching another replica, or arriving after a restart, gets the
//! first answer; a key racing on two replicas has one runner and the others
//! get `409 idempotency_key_in_flight` or the answer; a key running
//! elsewhere is in flight on every replica until its lease passes, when a
//! retry takes it over; and the purge keeps the count cap. The old memory
//! lived in one process, so each replica ran the request itself. SQLite
//! always; PostgreSQL and MariaDB when `TOOLGATE_TEST_POSTGRES_URL` /
//! `TOOLGATE_TEST_MYSQL_URL` are set (and required with
//! `TOOLGATE_REQUIRE_DATABASES=1`).

mod support;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use support::databases::{now_nanos, on_each_backend, replica};
use support::*;
use toolgate::claim::UnixMillis;
use toolgate::idempotency::{Begun, Bounds, IdemBegin, IdemFinish, IdempotencyStore, Remembered};
use tower::ServiceExt;

/// Status, body text and the problem code, if any.
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it"
)]
async fn propose(app: &Router, idem: &str, body: &str) -> (StatusCode, String, Option<String>) {
    let req = Request::post("/v1/decisions")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {AGENT_KEY}"))
        .header("Idempotency-Key", idem)
        .body(Body::from(body.to_owned()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let code = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["code"].as_str().map(str::to_owned));
    (status, text, code)
}

fn now_ms() -> UnixMillis {
    UnixMillis(i64::try_from(now_nanos() / 1_000_000).unwrap())
}

fn digest(body: &str) -> [u8; 32] {
    Sha256::digest(body.as_bytes()).into()
}

async fn durable_on(url: &str) {
    let desk = DeskRef::default();
    let run = format!("{:x}", u64::from(std::process::id()) ^ now_nanos());
    let (a, _) = replica(url, &desk).await;
    let (b, b_state) = replica(url, &desk).await;
    let ticket = |n: u32| {
        let t = format!("t{n}-{run}");
        desk.set_version(&t, "7");
        t
    };

    // First on A, repeated on B: the same answer, one credit.
    let t1 = ticket(1);
    let body1 = decision_body(credit(500), &t1, "7").to_string();
    let key1 = format!("k1-{run}");
    let first = propose(&a, &key1, &body1).await;
    assert_eq!(first.0, StatusCode::CREATED, "{}", first.1);
    let again = propose(&b, &key1, &body1).await;
    assert_eq!((again.0, &again.1), (first.0, &first.1));
    assert_eq!(desk.credits_for(&t1), 1);
    // Another body under the key is refused on B.
    let other = decision_body(credit(600), &t1, "7").to_string();
    let (s, _, code) = propose(&b, &key1, &other).await;
    assert_eq!(
        (s, code.as_deref()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("idempotency_key_reused")
        )
    );
    // A restart keeps it.
    let (c, _) = replica(url, &desk).await;
    let after = propose(&c, &key1, &body1).await;
    assert_eq!((after.0, &after.1), (first.0, &first.1));

    // Twelve requests with one key on both replicas: one runs.
    let t2 = ticket(2);
    let body2 = decision_body(credit(300), &t2, "7").to_string();
    let key2 = format!("k2-{run}");
    let racing: Vec<_> = (0..12)
        .map(|i| {
            let r = if i % 2 == 0 { a.clone() } else { b.clone() };
            let (key, body) = (key2.clone(), body2.clone());
            tokio::spawn(async move { propose(&r, &key, &body).await })
        })
        .collect();
    let mut answers = Vec::new();
    for r in racing {
        answers.push(r.await.unwrap());
    }
    let executed: Vec<_> = answers
        .iter()
        .filter(|a| a.0 == StatusCode::CREATED)
        .collect();
    assert!(!executed.is_empty(), "{answers:?}");
    for a in &answers {
        assert!(
            (a.0 == StatusCode::CREATED && a.1 == executed[0].1)
                || (a.0 == StatusCode::CONFLICT
                    && a.2.as_deref() == Some("idempotency_key_in_flight")),
            "{a:?}"
        );
    }
    assert_eq!(desk.credits_for(&t2), 1);

    // A key another process holds, lease unexpired: in flight here.
    let store = b_state.service().store();
    let t3 = ticket(3);
    let body3 = decision_body(credit(200), &t3, "7").to_string();
    let key3 = format!("k3-{run}");
    let now = now_ms();
    let held = store
        .idem_begin(IdemBegin {
            principal: "agent-1",
            key: &key3,
            payload: digest(&body3),
            runner: "elsewhere",
            now,
            lease_until: UnixMillis(now.0 + 3_600_000),
        })
        .await
        .unwrap();
    assert_eq!(held, Begun::Fresh);
    for r in [&a, &b] {
        let (s, _, code) = propose(r, &key3, &body3).await;
        assert_eq!(
            (s, code.as_deref()),
            (StatusCode::CONFLICT, Some("idempotency_key_in_flight"))
        );
    }
    assert_eq!(desk.credits_for(&t3), 0);
    // Its runner finishing with a non-matching runner id changes nothing.
    store
        .idem_finish(IdemFinish {
            principal: "agent-1",
            key: &key3,
            runner: "not-the-runner",
            answer: Remembered {
                status: 200,
                content_type: "application/json".into(),
                outcome: Some("answer".into()),
                body: b"{}".to_vec(),
            },
            now,
            bounds: Bounds {
                retention_ms: 3_600_000,
                capacity: 1_000,
                max_bytes: u64::MAX,
            },
        })
        .await
        .unwrap();
    let (s, _, _) = propose(&a, &key3, &body3).await;
    assert_eq!(s, StatusCode::CONFLICT);

    // A key whose runner's lease has passed is taken over by the retry.
    let t4 = ticket(4);
    let body4 = decision_body(credit(100), &t4, "7").to_string();
    let key4 = format!("k4-{run}");
    let now = now_ms();
    store
        .idem_begin(IdemBegin {
            principal: "agent-1",
            key: &key4,
            payload: digest(&body4),
            runner: "dead",
            now: UnixMillis(now.0 - 2),
            lease_until: UnixMillis(now.0 - 1),
        })
        .await
        .unwrap();
    let (s, text, _) = propose(&a, &key4, &body4).await;
    assert_eq!(s, StatusCode::CREATED, "{text}");
    assert_eq!(desk.credits_for(&t4), 1);
    let again = propose(&b, &key4, &body4).await;
    assert_eq!((again.0, again.1), (s, text));

    quotas_are_per_principal(store, &run).await;
}

/// Each principal's quota is its own, judged on running totals: 400 keys
/// from one principal once evicted another's remembered answers. Here a
/// loud principal finishes 40 answers under a quota of 5, and a quiet one's
/// single answer stays; the loud one keeps exactly its 5 newest (so its
/// totals count each answer once, however the finishes interleave); a
/// byte quota evicts by size too; and the purge removes answers past the
/// retention.
async fn quotas_are_per_principal(store: &toolgate_service::Store, run: &str) {
    let (loud, quiet) = (format!("loud-{run}"), format!("quiet-{run}"));
    let quota = Bounds {
        retention_ms: 3_600_000,
        capacity: 5,
        max_bytes: u64::MAX,
    };
    let answer = |len: usize| Remembered {
        status: 200,
        content_type: "application/json".into(),
        outcome: Some("answer".into()),
        body: vec![b' '; len],
    };
    let t0 = now_ms().0;
    let remember = async |who: &str, key: &str, at: i64, len: usize, bounds: Bounds| {
        let begun = store
            .idem_begin(IdemBegin {
                principal: who,
                key,
                payload: [7; 32],
                runner: "r",
                now: UnixMillis(at),
                lease_until: UnixMillis(at + 60_000),
            })
            .await
            .unwrap();
        assert_eq!(begun, Begun::Fresh, "{who} {key}");
        store
            .idem_finish(IdemFinish {
                principal: who,
                key,
                runner: "r",
                answer: answer(len),
                now: UnixMillis(at),
                bounds,
            })
            .await
            .unwrap();
    };
    let replays = async |who: &str, key: &str| {
        matches!(
            store
                .idem_begin(IdemBegin {
                    principal: who,
                    key,
                    payload: [7; 32],
                    runner: "probe",
                    now: UnixMillis(t0 + 1_000),
                    lease_until: UnixMillis(t0 + 2_000),
                })
                .await
                .unwrap(),
            Begun::Replay(_)
        )
    };
    remember(&quiet, "mine", t0, 10, quota).await;
    for i in 0..40 {
        remember(&loud, &format!("k{i:02}"), t0 + 1 + i, 10, quota).await;
    }
    assert!(
        replays(&quiet, "mine").await,
        "another principal's answer was evicted"
    );
    let kept: Vec<i64> = {
        let mut kept = Vec::new();
        for i in 0..40 {
            if replays(&loud, &format!("k{i:02}")).await {
                kept.push(i);
            }
        }
        kept
    };
    assert_eq!(
        kept,
        (35..40).collect::<Vec<_>>(),
        "the loud principal's newest five stay"
    );

    // A byte quota: each answer costs its body, its key and principal and
    // 160 bytes; room for two 1,000-byte answers, not three.
    let small = format!("bytes-{run}");
    let bytes = Bounds {
        max_bytes: 2 * (1_000 + 160 + small.len() as u64 + 2) + 10,
        capacity: 1_000,
        ..quota
    };
    for (i, key) in ["b0", "b1", "b2"].into_iter().enumerate() {
        remember(&small, key, t0 + 100 + i as i64, 1_000, bytes).await;
    }
    assert!(!replays(&small, "b0").await);
    assert!(replays(&small, "b1").await && replays(&small, "b2").await);

    // Past the retention, the purge removes them (a batch at a time).
    let later = UnixMillis(t0 + 3_600_000 + 1_000);
    // Older answers on a shared database (earlier runs') go first, a
    // batch per purge: purge until the batches reach this run's.
    let mut gone = false;
    for _ in 0..2_000 {
        store.idem_purge(later, quota).await.unwrap();
        if !replays(&quiet, "mine").await {
            gone = true;
            break;
        }
    }
    assert!(gone, "an answer past the retention stayed");
}

on_each_backend!(durable_on, "toolgate-idem":
    the_memory_is_shared_by_replicas_and_survives_a_restart_on_sqlite,
    the_memory_is_shared_by_replicas_and_survives_a_restart_on_postgres,
    the_memory_is_shared_by_replicas_and_survives_a_restart_on_mariadb
);
