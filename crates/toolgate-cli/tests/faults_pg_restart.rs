//! Fault test: PostgreSQL restarted in the middle of a
//! race. A private PostgreSQL instance (scripts/pg-private.sh: its own data
//! directory and port, never the shared server on 5432) backs one `toolgate
//! serve` running the support-desk example. Waves of races, three tickets
//! at a time with twelve clients each on the same ticket version, run
//! through the server; when the fourth wave starts, PostgreSQL is restarted
//! with `pg_ctl restart -m immediate` (every backend killed, crash
//! recovery from the WAL), and the waves go on. Then every ticket is raced
//! again, stuck claims are reconciled, and the test checks:
//!
//! - every answer is a decision the design allows, a problem response
//!   (`application/problem+json` with a `code`), or a connection error:
//!   nothing else, and the server never panics;
//! - per ticket, at most one `executed` over every wave and the retries, at
//!   most one credit, and the ticket's version moved once per credit;
//! - every `executed` answer's credit is in the example's `credits` table
//!   under its operation key after the restart (nothing committed is lost),
//!   and a later replay returns the same result;
//! - a claim left in flight by the restart reconciles as `applied` exactly
//!   when its credit is there.
//!
//! It needs the PostgreSQL server binaries (initdb, pg_ctl). Without them
//! it prints a skip message, unless `TOOLGATE_REQUIRE_PG_RESTART=1` (set by
//! `.ci/run`) makes that a failure.

#[path = "support/databases.rs"]
#[allow(
    dead_code,
    reason = "only its random names: this test brings its own PostgreSQL"
)]
mod support;

#[path = "support/faults.rs"]
mod faults;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use faults::{
    PATIENCE, Reply, Scratch, Server, claims_stuck_cli, claims_stuck_http, credits, http, now_ms,
    request_text, seed_tickets, versions, wait_for, write_config,
};
use serde_json::{Value, json};
use toolgate_store::AnyClaimStore;
use toolgate_support_desk::SeedTicket;

const CLIENTS: usize = 12;
const PER_WAVE: usize = 3;
/// At most this many waves; they stop two waves after the restart.
const WAVES: usize = 16;
/// The wave during which PostgreSQL restarts.
const RESTART_WAVE: usize = 3;
const LEASE_MS: u64 = 2000;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg-private.sh")
}

/// The private instance's prerequisites, or `None` after a skip message;
/// with `TOOLGATE_REQUIRE_PG_RESTART=1` a missing one fails the test.
fn prerequisites() -> Option<()> {
    let out = Command::new("bash")
        .arg(script())
        .arg("check")
        .output()
        .expect("run scripts/pg-private.sh");
    if out.status.success() {
        return Some(());
    }
    let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    let required = std::env::var("TOOLGATE_REQUIRE_PG_RESTART").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "TOOLGATE_REQUIRE_PG_RESTART=1 but a private PostgreSQL cannot be started: {why}"
    );
    eprintln!(
        "SKIPPED: a private PostgreSQL cannot be started here ({why}), so the restart test did not run"
    );
    None
}

/// A private PostgreSQL instance, stopped (and its directory removed
/// unless the test failed) when this goes out of scope.
struct PrivatePg {
    dir: PathBuf,
    port: u16,
}

impl PrivatePg {
    fn run(&self, what: &str) {
        let out = Command::new("bash")
            .arg(script())
            .args([
                what,
                &self.dir.display().to_string(),
                &self.port.to_string(),
            ])
            .output()
            .expect("run scripts/pg-private.sh");
        assert!(
            out.status.success(),
            "pg-private.sh {what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn start(dir: PathBuf) -> PrivatePg {
        // A free port: bind port 0, note it, let it go. Another process
        // could take it in between; then `start` fails and says so.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let pg = PrivatePg { dir, port };
        pg.run("start");
        pg
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn accepts(&self) -> bool {
        TcpStream::connect(("127.0.0.1", self.port)).is_ok()
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .args(["stop", &self.dir.display().to_string()])
            .status();
        if std::thread::panicking() {
            eprintln!(
                "pg restart: the private PostgreSQL's files are in {}",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// What client `i` of twelve proposes: eight the same credit, two another
/// amount, two another reason (conflicts with the first claim's).
fn arguments(i: usize) -> (u64, &'static str) {
    match i {
        0..=7 => (1500, "late_delivery"),
        8 | 9 => (900, "late_delivery"),
        _ => (1500, "damaged_item"),
    }
}

/// Races `CLIENTS` clients on each ticket of `wave` at once; `released`,
/// when given, is called as the clients are released.
fn race(
    addr: SocketAddr,
    secret: &str,
    wave: &[SeedTicket],
    released: Option<&(dyn Fn() + Sync)>,
) -> Vec<(String, usize, Reply)> {
    let parties = wave.len() * CLIENTS + usize::from(released.is_some());
    let barrier = Arc::new(Barrier::new(parties));
    std::thread::scope(|s| {
        if let Some(f) = released {
            let barrier = Arc::clone(&barrier);
            s.spawn(move || {
                barrier.wait();
                f();
            });
        }
        let handles: Vec<_> = wave
            .iter()
            .flat_map(|t| (0..CLIENTS).map(move |i| (t, i)))
            .map(|(t, i)| {
                let barrier = Arc::clone(&barrier);
                s.spawn(move || {
                    let (amount, reason) = arguments(i);
                    let body = faults::credit_body(&t.id, &t.customer_id, amount, reason);
                    let request = request_text("POST", "/v1/decisions", Some(secret), &body);
                    // Connect before the barrier so that only the requests
                    // race; nothing panics before the barrier.
                    let conn = TcpStream::connect(addr);
                    barrier.wait();
                    let reply = Reply::from(
                        conn.map_err(|e| e.to_string())
                            .and_then(|c| faults::exchange(c, &request)),
                    );
                    (t.id.clone(), i, reply)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    })
}

/// Releases the restart thread (once) when its wave never did.
struct ReleaseOnDrop<'a>(&'a Barrier, &'a AtomicBool);

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        if !self.1.swap(true, Ordering::SeqCst) {
            self.0.wait();
        }
    }
}

/// Every reply is a decision with its documented status, a problem, or a
/// connection error; counts them by label.
///
/// While PostgreSQL is down, the support desk's Cedar entities cannot be
/// read either: that is `503 store_unavailable`, never a `403 forbidden`,
/// which would tell a caller "no" (and an Idempotency-Key memory would keep
/// it) for a question nobody could ask.
fn tally(replies: &[(String, usize, Reply)], counts: &mut BTreeMap<String, usize>) {
    for (ticket, i, r) in replies {
        if let Reply::Decision { status, body } = r {
            let outcome = body["outcome"].as_str().unwrap_or_default();
            assert!(
                outcome != "forbidden",
                "{ticket} client {i}: a database outage answered {status} {body}"
            );
            assert!(
                faults::decision_status_ok(outcome, *status),
                "{ticket} client {i}: {status} {body}"
            );
        }
        *counts.entry(r.label()).or_default() += 1;
    }
}

#[test]
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
fn postgres_restart_mid_race() {
    if prerequisites().is_none() {
        return;
    }
    let run = support::random_hex()[..10].to_owned();
    let dir = Scratch::new("faults-pg", &run);
    // The instance's own directory, handed to the postgres user by the
    // script; declared after `dir` so it is stopped first.
    let pg = PrivatePg::start(dir.0.join("pg"));
    let url = pg.url();

    let agent = format!("pgr-{run}");
    let secret = format!("tg_pgr_{}", support::random_hex());
    let config = write_config(&dir.0, &agent, &secret, LEASE_MS);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tickets = rt.block_on(async {
        let store = AnyClaimStore::connect(&url).await.expect("connect");
        seed_tickets(&store, 'P', &run, PER_WAVE * WAVES, &agent).await
    });

    let (server, addr) = Server::start("pg-restart", &config, &url, &dir.0);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut during: BTreeMap<String, usize> = BTreeMap::new();
    let mut all: Vec<(String, usize, Reply)> = Vec::new();
    // The restart runs on its own thread, released with the clients of
    // wave RESTART_WAVE, while the following waves go on; the waves stop
    // two after it finished (or when the tickets run out).
    let go = Barrier::new(2);
    let gone = AtomicBool::new(false);
    let restarted = AtomicBool::new(false);
    let mut waves_during_restart = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            go.wait();
            pg.run("restart");
            restarted.store(true, Ordering::SeqCst);
        });
        let release = || {
            gone.store(true, Ordering::SeqCst);
            go.wait();
        };
        // Should a wave fail before the restart's release, the restart
        // thread is released anyway, so the scope can end and report.
        let _guard = ReleaseOnDrop(&go, &gone);
        let mut after_restart = 0;
        for (w, wave) in tickets.chunks(PER_WAVE).enumerate() {
            let released = (w == RESTART_WAVE).then_some(&release as &(dyn Fn() + Sync));
            let replies = race(addr, &secret, wave, released);
            let restarting = w >= RESTART_WAVE;
            if restarting {
                tally(&replies, &mut during);
            }
            tally(&replies, &mut counts);
            all.extend(replies);
            if restarted.load(Ordering::SeqCst) {
                after_restart += 1;
                if after_restart == 2 {
                    break;
                }
            } else if restarting {
                waves_during_restart += 1;
            }
        }
    });
    assert!(
        restarted.load(Ordering::SeqCst),
        "the waves ran out before PostgreSQL restarted"
    );
    assert!(pg.accepts(), "the private PostgreSQL is back after restart");

    // The server recovers on its own: its readiness probe answers again,
    // and every ticket is raced once more.
    wait_for(
        Instant::now() + PATIENCE,
        "/readyz after the restart",
        || matches!(http(addr, "GET", "/readyz", None, ""), Ok((200, _))),
    );
    let mut after: BTreeMap<String, usize> = BTreeMap::new();
    for wave in tickets.chunks(PER_WAVE) {
        let replies = race(addr, &secret, wave, None);
        tally(&replies, &mut after);
        for (ticket, i, r) in &replies {
            assert!(
                !matches!(r, Reply::Connection(_) | Reply::Problem { .. }),
                "{ticket} client {i}: after recovery: {r:?}"
            );
        }
        all.extend(replies);
    }

    // Claims the restart left in flight: listed once their lease passed,
    // reconciled by the support desk's own executor (applied exactly when
    // the credit is there).
    let store = rt.block_on(AnyClaimStore::connect(&url)).expect("connect");
    let credits_now = rt.block_on(credits(&store));
    // Once every lease has passed, the server's stuck listing is every
    // claim still in flight (the CLI judging leases an hour ahead).
    let mut stuck = Vec::new();
    wait_for(
        Instant::now() + PATIENCE,
        "in-flight claims to pass their lease",
        || {
            let in_flight: Vec<String> = claims_stuck_cli(&url, now_ms() + 3_600_000)
                .into_keys()
                .collect();
            stuck = claims_stuck_http(addr, &secret);
            stuck.sort();
            stuck == in_flight
        },
    );
    let (mut applied, mut not_applied) = (0, 0);
    for key in &stuck {
        let (status, text) = http(
            addr,
            "POST",
            &format!("/v1/claims/{key}/reconcile"),
            Some(&secret),
            "",
        )
        .expect("reconcile");
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).expect("JSON");
        let has_credit = credits_now.values().flatten().any(|k| k == key);
        if has_credit {
            assert_eq!(v["status"], "reconciled_applied", "{v}");
            applied += 1;
        } else {
            assert_eq!(v["status"], "reconciled_not_applied", "{v}");
            not_applied += 1;
        }
    }
    assert!(claims_stuck_http(addr, &secret).is_empty());
    server.assert_no_panic();

    // Per ticket: at most one executed, at most one credit, and the
    // executed answer's credit is there under its key.
    let credits_final = rt.block_on(credits(&store));
    let versions = rt.block_on(versions(&store));
    for t in &tickets {
        let executed: Vec<&Reply> = all
            .iter()
            .filter(|(id, _, r)| id == &t.id && r.outcome() == Some("executed"))
            .map(|(_, _, r)| r)
            .collect();
        assert!(
            executed.len() <= 1,
            "{}: {} executed answers: {executed:?}",
            t.id,
            executed.len()
        );
        let keys = credits_final.get(&t.id).cloned().unwrap_or_default();
        assert!(keys.len() <= 1, "{}: credits {keys:?}", t.id);
        assert_eq!(
            versions.get(&t.id).copied(),
            Some(1 + keys.len() as i64),
            "{}",
            t.id
        );
        if let Some(r) = executed.first() {
            assert_eq!(
                keys,
                vec![r.key().expect("key").to_owned()],
                "{}: an executed answer's credit is missing",
                t.id
            );
        }
        // Every replay of an applied write names a credit that exists.
        for (id, _, r) in &all {
            if id == &t.id
                && let Reply::Decision { body, .. } = r
                && body["outcome"] == "replayed"
                && body["result"]["applied"] == true
            {
                assert_eq!(keys, vec![r.key().expect("key").to_owned()], "{}", t.id);
            }
        }
    }
    let credited = credits_final.values().map(Vec::len).sum::<usize>();
    let figures = json!({
        "tickets": tickets.len(), "clients_per_ticket": CLIENTS,
        "waves_during_restart": waves_during_restart,
        "all_replies": counts, "from_restart_wave_on": during, "after_recovery": after,
        "credits": credited, "stuck_reconciled_applied": applied,
        "stuck_reconciled_not_applied": not_applied,
    });
    eprintln!("faults_pg_restart: {figures}");
}
