//! Fault test: `kill -9` of a `toolgate serve` process in
//! the middle of a burst of in-process goodwill credits, then a restart on
//! the same database.
//!
//! The server runs the support-desk example from a deployment file with a
//! short lease. Sixteen client threads propose credits, two proposals per
//! ticket, until the test SIGKILLs the server mid-burst. A new server then
//! starts on the same database, and the test checks, from the example's
//! own tables (`credits`, `tickets`) and toolgate's interfaces only:
//!
//! - no ticket got two credits, and each ticket's version moved once per
//!   credit;
//! - every `executed` answer a client received has its credit, under its
//!   operation key (nothing acknowledged is lost);
//! - the claims the kill left in flight are exactly those `toolgate claims
//!   stuck` lists, and `GET /v1/claims?stuck=true` lists them once their
//!   lease has passed; a retry of one is `needs_reconciliation`, never a
//!   second execution;
//! - each reconciles (half through `toolgate claims reconcile
//!   --support-desk`, half through `POST /v1/claims/{key}/reconcile`) as
//!   `applied` exactly when the example's `credits` table holds a row for
//!   its key, and reconciling writes no credit;
//! - afterwards nothing is stuck, and a retry of every ticket is answered
//!   from its claim (a completed claim's answer matches its credit), or,
//!   for a ticket the burst never reached, executed once.
//!
//! The kill lands wherever the burst is; if it leaves no claim in flight
//! (possible in principle), another round on fresh tickets runs, up to
//! five. The test requires at least one claim left in flight over its
//! rounds, since that is what it is about.
//!
//! SQLite always runs. PostgreSQL runs on a database created for the run
//! next to `TOOLGATE_TEST_POSTGRES_URL`; unset, it prints a skip message,
//! unless `TOOLGATE_REQUIRE_DATABASES=1` (CI) makes that a failure.

#[path = "support/databases.rs"]
mod support;

#[path = "support/faults.rs"]
mod faults;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use faults::{
    BIN, FreshDatabase, PATIENCE, Reply, Scratch, Server, claims_stuck_cli, claims_stuck_http,
    credit_body, credits, http, now_ms, seed_tickets, versions, wait_for, write_config,
};
use serde_json::Value;
use toolgate_store::AnyClaimStore;
use toolgate_support_desk::SeedTicket;

/// Tickets per round; each is proposed twice.
const TICKETS: usize = 150;
const CLIENTS: usize = 16;
/// The server is killed once this many answers have come back.
const KILL_AFTER: usize = 60;
const LEASE_MS: u64 = 2000;
const MAX_ROUNDS: usize = 5;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// What one round observed, for the figures printed at the end.
#[derive(Default, Debug)]
struct Figures {
    answered_before_kill: usize,
    executed_before_kill: usize,
    connection_errors: usize,
    in_flight_after_kill: usize,
    reconciled_applied: usize,
    reconciled_not_applied: usize,
    executed_on_retry: usize,
    executed_as_next_attempt: usize,
}

/// Sixteen clients send two identical proposals per ticket, interleaved,
/// until every ticket has been sent; the server is SIGKILLed once
/// `KILL_AFTER` answers have arrived. Returns each ticket's replies.
fn burst_then_kill(
    server: &mut Server,
    addr: SocketAddr,
    secret: &str,
    tickets: &[SeedTicket],
) -> BTreeMap<String, Vec<Reply>> {
    let next = AtomicUsize::new(0);
    let answered = Arc::new((Mutex::new(0usize), Condvar::new()));
    let replies = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..CLIENTS {
            let answered = Arc::clone(&answered);
            let (next, replies) = (&next, &replies);
            s.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(t) = tickets.get(i / 2) else { break };
                    let body = credit_body(&t.id, &t.customer_id, 1500, "late_delivery");
                    let reply =
                        Reply::from(http(addr, "POST", "/v1/decisions", Some(secret), &body));
                    let (count, cv) = &*answered;
                    if !matches!(reply, Reply::Connection(_)) {
                        *count.lock().expect("lock") += 1;
                        cv.notify_all();
                    }
                    replies.lock().expect("lock").push((t.id.clone(), reply));
                }
            });
        }
        // Kill mid-burst: after KILL_AFTER answers, while the other
        // clients' requests are in the server.
        let (count, cv) = &*answered;
        let guard = cv
            .wait_timeout_while(count.lock().expect("lock"), PATIENCE, |n| *n < KILL_AFTER)
            .expect("lock")
            .0;
        drop(guard);
        server.sigkill();
    });
    let mut by_ticket: BTreeMap<String, Vec<Reply>> = BTreeMap::new();
    for (ticket, reply) in replies.into_inner().expect("lock") {
        by_ticket.entry(ticket).or_default().push(reply);
    }
    by_ticket
}

/// Checks the example's tables: at most one credit per ticket, and each
/// ticket's version moved exactly once per credit.
fn check_tables(
    credits: &BTreeMap<String, Vec<String>>,
    versions: &BTreeMap<String, i64>,
    tickets: &[SeedTicket],
) {
    for t in tickets {
        let n = credits.get(&t.id).map_or(0, Vec::len);
        assert!(
            n <= 1,
            "ticket {} got {n} credits: {:?}",
            t.id,
            credits[&t.id]
        );
        assert_eq!(
            versions.get(&t.id).copied(),
            Some(1 + n as i64),
            "ticket {}: version after {n} credit(s)",
            t.id
        );
    }
}

#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
fn reconcile_cli(url: &str, key: &str) -> Value {
    let out = Command::new(BIN)
        .args(["claims", "reconcile", "--support-desk", "--db", url, key])
        .args(["--actor", "fault-test"])
        .output()
        .expect("claims reconcile");
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["operation_key"], key, "{v}");
    v
}

#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
fn reconcile_http(addr: SocketAddr, secret: &str, key: &str) -> Value {
    let (status, text) = http(
        addr,
        "POST",
        &format!("/v1/claims/{key}/reconcile"),
        Some(secret),
        "",
    )
    .expect("POST reconcile");
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(v["operation_key"], key, "{v}");
    // The HTTP and CLI spellings of the same two answers.
    let reconciled = match v["status"].as_str() {
        Some("reconciled_applied") => "applied",
        Some("reconciled_not_applied") => "not_applied",
        other => panic!("reconcile status {other:?}: {v}"),
    };
    serde_json::json!({"reconciled": reconciled, "result": v["result"]})
}

/// One round: fresh tickets, a server, the burst and the kill, a restart
/// on the same database, and every check in the module comment.
fn round(url: &str, dir: &Scratch, run: &str, round: usize, figures: &mut Figures) {
    let agent = format!("fault-{run}");
    let secret = format!("tg_fault_{}", support::random_hex());
    let config = write_config(&dir.0, &agent, &secret, LEASE_MS);
    let rt = runtime();
    let tickets = rt.block_on(async {
        let store = AnyClaimStore::connect(url).await.expect("connect");
        seed_tickets(&store, 'K', &format!("{run}-{round}"), TICKETS, &agent).await
    });

    let (mut first, addr) = Server::start(&format!("r{round}-first"), &config, url, &dir.0);
    let replies = burst_then_kill(&mut first, addr, &secret, &tickets);
    first.assert_no_panic();
    let (second, addr) = Server::start(&format!("r{round}-restarted"), &config, url, &dir.0);

    let store = rt.block_on(AnyClaimStore::connect(url)).expect("connect");
    let credits_after_kill = rt.block_on(credits(&store));
    check_tables(
        &credits_after_kill,
        &rt.block_on(versions(&store)),
        &tickets,
    );

    // Every answer the clients got before the kill is one the design
    // allows; every `executed` one has its credit under its key.
    let mut executed: BTreeMap<&str, (&str, &Value)> = BTreeMap::new();
    for (ticket, rs) in &replies {
        for r in rs {
            match r {
                Reply::Decision { status, body } => {
                    let outcome = body["outcome"].as_str().unwrap_or_default();
                    assert!(
                        faults::decision_status_ok(outcome, *status),
                        "{ticket}: {status} {body}"
                    );
                    assert_ne!(outcome, "needs_reconciliation", "{ticket}: {body}");
                    figures.answered_before_kill += 1;
                    if outcome == "executed" {
                        figures.executed_before_kill += 1;
                        let key = r.key().expect("key");
                        assert!(
                            executed.insert(ticket, (key, &body["result"])).is_none(),
                            "{ticket}: two executed answers: {rs:?}"
                        );
                        assert_eq!(
                            credits_after_kill.get(ticket.as_str()),
                            Some(&vec![key.to_owned()]),
                            "{ticket}: an executed answer without its credit"
                        );
                    }
                }
                Reply::Problem { status, code } => {
                    panic!("{ticket}: a problem before the kill: {status} {code}")
                }
                Reply::Connection(_) => figures.connection_errors += 1,
            }
        }
    }

    // The claims the kill left in flight, whatever their lease: the CLI
    // judging leases an hour from now.
    let in_flight = claims_stuck_cli(url, now_ms() + 3_600_000);
    figures.in_flight_after_kill += in_flight.len();
    let run_tickets: BTreeSet<&str> = tickets.iter().map(|t| t.id.as_str()).collect();
    for (key, ticket) in &in_flight {
        assert!(run_tickets.contains(ticket.as_str()), "{key}: {ticket}");
        assert!(
            !executed.contains_key(ticket.as_str()),
            "{ticket}: answered executed, yet its claim is in flight"
        );
    }

    // After their lease the server lists the same claims as stuck.
    let expected: BTreeSet<String> = in_flight.keys().cloned().collect();
    let mut listed = BTreeSet::new();
    wait_for(Instant::now() + PATIENCE, "the leases to pass", || {
        listed = claims_stuck_http(addr, &secret).into_iter().collect();
        listed == expected
    });

    // A retry of a stuck claim's proposal asks for reconciliation and
    // executes nothing.
    for ticket in in_flight.values() {
        let t = tickets.iter().find(|t| &t.id == ticket).expect("ticket");
        let body = credit_body(&t.id, &t.customer_id, 1500, "late_delivery");
        let r = Reply::from(http(addr, "POST", "/v1/decisions", Some(&secret), &body));
        assert_eq!(r.outcome(), Some("needs_reconciliation"), "{ticket}: {r:?}");
    }
    assert_eq!(rt.block_on(credits(&store)), credits_after_kill);

    // Reconcile each: applied exactly when the credits table has its key.
    let mut not_applied = Vec::new();
    for (i, (key, ticket)) in in_flight.iter().enumerate() {
        let has_credit = credits_after_kill
            .get(ticket)
            .is_some_and(|keys| keys.contains(key));
        let answer = if i % 2 == 0 {
            reconcile_cli(url, key)
        } else {
            reconcile_http(addr, &secret, key)
        };
        if has_credit {
            assert_eq!(answer["reconciled"], "applied", "{ticket}: {answer}");
            assert_eq!(answer["result"]["applied"], true, "{answer}");
            assert_eq!(answer["result"]["ticket_id"], ticket.as_str(), "{answer}");
            figures.reconciled_applied += 1;
        } else {
            assert_eq!(answer["reconciled"], "not_applied", "{ticket}: {answer}");
            assert_eq!(answer["result"]["applied"], false, "{answer}");
            figures.reconciled_not_applied += 1;
            not_applied.push(ticket.clone());
        }
    }
    assert_eq!(
        rt.block_on(credits(&store)),
        credits_after_kill,
        "reconciliation wrote a credit"
    );
    assert!(claims_stuck_cli(url, now_ms() + 3_600_000).is_empty());

    // A retry of every ticket: a ticket whose write happened is answered
    // from its claim, never executed again; one the burst never claimed
    // executes once, and so does one reconciled as not applied (as the
    // operation's attempt 2).
    for t in &tickets {
        let body = credit_body(&t.id, &t.customer_id, 1500, "late_delivery");
        let r = Reply::from(http(addr, "POST", "/v1/decisions", Some(&secret), &body));
        let credit = credits_after_kill.get(&t.id).and_then(|k| k.first());
        match r.outcome() {
            Some("executed") => {
                assert!(credit.is_none(), "{}: executed a second time: {r:?}", t.id);
                if in_flight.values().any(|x| x == &t.id) {
                    assert!(not_applied.contains(&t.id), "{}", t.id);
                    not_applied.retain(|x| x != &t.id);
                    figures.executed_as_next_attempt += 1;
                } else {
                    figures.executed_on_retry += 1;
                }
            }
            Some("replayed") => {
                let Reply::Decision { body, .. } = &r else {
                    unreachable!()
                };
                let applied = body["result"]["applied"] == true;
                assert_eq!(applied, credit.is_some(), "{}: {body}", t.id);
                if let Some(key) = credit {
                    assert_eq!(r.key(), Some(key.as_str()), "{}: {body}", t.id);
                }
                if let Some((key, result)) = executed.get(t.id.as_str()) {
                    assert_eq!(r.key(), Some(*key), "{}", t.id);
                    assert_eq!(&&body["result"], result, "{}: replay differs", t.id);
                }
            }
            // A claim closed as not applied may answer with its true
            // outcome instead of a replay; either way nothing executes.
            Some(other) => {
                assert!(credit.is_none(), "{}: {other}: {r:?}", t.id);
                assert!(
                    in_flight.values().any(|x| x == &t.id),
                    "{}: unexpected {r:?}",
                    t.id
                );
            }
            None => panic!("{}: not a decision: {r:?}", t.id),
        }
    }
    assert!(
        not_applied.is_empty(),
        "reconciled as not applied, and not run again: {not_applied:?}"
    );
    let final_credits = rt.block_on(credits(&store));
    check_tables(&final_credits, &rt.block_on(versions(&store)), &tickets);
    for (ticket, keys) in &credits_after_kill {
        assert_eq!(
            final_credits.get(ticket),
            Some(keys),
            "{ticket}: credit lost"
        );
    }
    assert!(claims_stuck_cli(url, now_ms() + 3_600_000).is_empty());
    second.assert_no_panic();
}

fn kill_mid_burst(dir: &Scratch, url: &str, backend: &str) {
    let run = support::random_hex()[..10].to_owned();
    let mut figures = Figures::default();
    let mut rounds = 0;
    while rounds < MAX_ROUNDS && figures.in_flight_after_kill == 0 {
        rounds += 1;
        round(url, dir, &run, rounds, &mut figures);
    }
    assert!(
        figures.in_flight_after_kill > 0,
        "{rounds} kills left no claim in flight: the test did not test reconciliation"
    );
    eprintln!(
        "faults_kill {backend}: {rounds} round(s) of {TICKETS} tickets x 2 proposals, {CLIENTS} clients: {figures:?}"
    );
}

#[test]
fn sqlite_kill_mid_burst_then_restart() {
    let run = support::random_hex()[..10].to_owned();
    let dir = Scratch::new("faults-kill", &run);
    let url = format!("sqlite://{}", dir.0.join("toolgate.sqlite").display());
    kill_mid_burst(&dir, &url, "sqlite");
}

#[test]
fn postgres_kill_mid_burst_then_restart() {
    if let Some(url) = support::database_url("TOOLGATE_TEST_POSTGRES_URL", "PostgreSQL") {
        let dir = Scratch::new("faults-kill", &support::random_hex()[..10]);
        let fresh = FreshDatabase::create(&url, "faults");
        kill_mid_burst(&dir, &fresh.url, "postgres");
    }
}
