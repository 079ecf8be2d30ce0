//! Scale-out check: two `toolgate serve` processes on
//! one PostgreSQL (or MariaDB) database, twelve clients per ticket split six
//! and six between them, all proposing a goodwill credit on the same ticket
//! version at the same moment.
//!
//! The two processes share nothing but the database, so the claim table
//! alone must serialise them. Per ticket the test asserts: exactly one
//! `executed` across both servers; every other answer `replayed`,
//! `in_flight`, `conflict` or `state_changed` with its docs/design.md §2 status
//! (never a 5xx, never anything else); and, read straight from the
//! database, one credit row, one claim row and one audit entry per decision.
//!
//! The servers run from one deployment file (`serve --config`), as replicas
//! behind a load balancer would. Tickets are seeded per run with fresh ids
//! through the store library, so the test repeats on the same database.
//!
//! A second test starts two `serve --demo` processes at once on a database
//! created for the run, then a third on the same one: replicas and restarts
//! must get through the migrations and the demo's seed on a shared
//! database (on MariaDB the migrations once raced; see toolgate-store's
//! `mysql` module). It needs the right to create a database.
//!
//! PostgreSQL runs when `TOOLGATE_TEST_POSTGRES_URL` is set, MariaDB when
//! `TOOLGATE_TEST_MYSQL_URL` is; unset, each prints `SKIPPED: …` and passes,
//! unless `TOOLGATE_REQUIRE_DATABASES=1`, which makes a missing database a
//! failure.

#[path = "support/databases.rs"]
mod support;

#[path = "support/faults.rs"]
mod faults;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use serde_json::{Value, json};
use toolgate_service::ApiKey;
use toolgate_store::AnyClaimStore;
use toolgate_support_desk::SupportDesk;

use faults::{
    FreshDatabase, PATIENCE, Scratch, Server, exchange, hex, http, request_text, seed_tickets,
    unhex,
};

const TICKETS: usize = 8;
const CLIENTS: usize = 12;
/// What client `i` of the twelve proposes: eight the same credit in four
/// wordings (the reply is not part of the fingerprint, so these replay one
/// another), two a different amount and two a different reason (each a
/// conflict with the others).
fn proposal(i: usize) -> (u64, &'static str, &'static str) {
    const REPLIES: [&str; 4] = [
        "Applied a 15.00 credit.",
        "Done: 15.00 credited to your account.",
        "I've added a goodwill credit of 15.00.",
        "A 15.00 credit is on its way for the late delivery.",
    ];
    match i {
        0..=7 => (1500, "late_delivery", REPLIES[i % REPLIES.len()]),
        8 | 9 => (900, "late_delivery", "Applied a 9.00 credit."),
        _ => (1500, "damaged_item", "Applied 15.00 for the damaged item."),
    }
}

/// One client's answer.
#[derive(Debug)]
struct Answer {
    client: usize,
    server: usize,
    status: u16,
    body: Value,
}

impl Answer {
    fn text(&self, field: &str) -> &str {
        self.body[field].as_str().unwrap_or_default()
    }
}

/// Twelve clients, six per server, lined up on a barrier so that their
/// proposals for `ticket` at version 1 really race.
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
fn race(servers: [SocketAddr; 2], key: &str, ticket: &str, customer: &str) -> Vec<Answer> {
    let barrier = Arc::new(Barrier::new(CLIENTS));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let barrier = Arc::clone(&barrier);
                s.spawn(move || {
                    let server = i % 2;
                    let (amount, reason, reply) = proposal(i);
                    let body = json!({
                        "provider": "envelope",
                        "response": {"outcome": "action", "reply": reply,
                            "proposed_action": {"tool": "apply_goodwill_credit",
                                "arguments": {"amount_minor": amount, "reason_code": reason}}},
                        "scope": {"customer_id": customer, "ticket_id": ticket, "version_seen": 1},
                    })
                    .to_string();
                    let request = request_text("POST", "/v1/decisions", Some(key), &body);
                    // Connect before the barrier so that only the requests
                    // race; nothing here panics before every client has
                    // reached the barrier, so no one waits there forever.
                    let conn = TcpStream::connect(servers[server]);
                    barrier.wait();
                    let (status, text) = conn
                        .map_err(|e| e.to_string())
                        .and_then(|c| exchange(c, &request))
                        .unwrap_or_else(|e| panic!("client {i} on server {server}: {e}"));
                    let body = serde_json::from_str(&text).unwrap_or_else(|e| {
                        panic!("client {i}: status {status}, body not JSON ({e}): {text}")
                    });
                    Answer {
                        client: i,
                        server,
                        status,
                        body,
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    })
}

/// The decision outcomes a race on one operation key may give, with their
/// docs/design.md §2 statuses. `state_changed` comes from a client whose claim
/// lookup ran before the winner claimed and whose state read ran after the
/// winner's write: the version moved, so nothing is claimed.
fn allowed(a: &Answer) -> bool {
    matches!(
        (a.text("outcome"), a.status),
        ("executed", 201) | ("replayed", 200) | ("in_flight", 409) | ("conflict", 422)
    ) || (a.text("outcome"), a.status, a.text("reason"))
        == ("state_changed", 409, "version_mismatch")
}

/// The raw rows behind one ticket, read straight from the shared database.
struct Rows {
    /// (operation key, amount, reason) per credit row.
    credits: Vec<(Vec<u8>, i64, String)>,
    /// (operation key, fingerprint, status) per claim row.
    claims: Vec<(Vec<u8>, Vec<u8>, String)>,
    /// The audit outcomes recorded under the ticket's operation key.
    audit: Vec<String>,
    version: i64,
}

async fn rows(store: &AnyClaimStore, ticket: &str, key: &[u8]) -> Rows {
    // The claim's scope is JSON text; the ticket id (unique per run, quoted
    // so `-1` does not match `-10`) finds every claim made for the ticket,
    // whatever its key.
    let scope_pattern = format!("%\"{ticket}\"%");
    macro_rules! read {
        ($pool:expr, $credits:literal, $claims:literal, $audit:literal, $version:literal) => {{
            let pool = $pool;
            let credits = sqlx::query_as($credits)
                .bind(ticket)
                .fetch_all(pool)
                .await
                .expect("credits");
            let claims = sqlx::query_as($claims)
                .bind(&scope_pattern)
                .fetch_all(pool)
                .await
                .expect("claims");
            let audit: Vec<(String,)> = sqlx::query_as($audit)
                .bind(key)
                .fetch_all(pool)
                .await
                .expect("audit");
            let (version,): (i64,) = sqlx::query_as($version)
                .bind(ticket)
                .fetch_one(pool)
                .await
                .expect("ticket");
            Rows {
                credits,
                claims,
                audit: audit.into_iter().map(|(o,)| o).collect(),
                version,
            }
        }};
    }
    match store {
        AnyClaimStore::Postgres(s) => read!(
            s.pool(),
            "SELECT operation_key, amount_minor, reason_code FROM credits WHERE ticket_id = $1",
            "SELECT operation_key, fingerprint, status FROM toolgate_claims WHERE scope LIKE $1",
            "SELECT outcome FROM toolgate_audit WHERE operation_key = $1",
            "SELECT version FROM tickets WHERE id = $1"
        ),
        AnyClaimStore::MySql(s) => read!(
            s.pool(),
            "SELECT operation_key, amount_minor, reason_code FROM credits WHERE ticket_id = ?",
            "SELECT operation_key, fingerprint, status FROM toolgate_claims WHERE scope LIKE ?",
            "SELECT outcome FROM toolgate_audit WHERE operation_key = ?",
            "SELECT version FROM tickets WHERE id = ?"
        ),
        AnyClaimStore::Sqlite(_) => panic!("the scale-out test needs a database server"),
    }
}

/// Checks one ticket's race; returns which server executed.
fn check_ticket(ticket: &str, answers: &[Answer], rows: &Rows) -> usize {
    let dump = || {
        answers
            .iter()
            .map(|a| {
                format!(
                    "  client {} server {}: {} {}",
                    a.client, a.server, a.status, a.body
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    for a in answers {
        assert!(allowed(a), "{ticket}: unexpected answer\n{}", dump());
    }
    let executed: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.text("outcome") == "executed")
        .collect();
    assert_eq!(executed.len(), 1, "{ticket}: one executed\n{}", dump());
    let winner = executed[0];
    let key = winner.text("operation_key");
    let fingerprint = winner.text("fingerprint");
    assert_eq!(key.len(), 64, "{ticket}: {}", dump());
    assert_eq!(
        winner.body["result"]["applied"],
        true,
        "{ticket}: {}",
        dump()
    );

    // One operation key for all twelve, whatever the arguments, the reply
    // or the server (invariant 5); the fingerprint follows the arguments
    // only, never the reply.
    let mut by_arguments: BTreeMap<(u64, &str), &str> = BTreeMap::new();
    for a in answers {
        assert_eq!(
            a.text("operation_key"),
            key,
            "{ticket}: same key\n{}",
            dump()
        );
        let (amount, reason, _) = proposal(a.client);
        let fp = *by_arguments
            .entry((amount, reason))
            .or_insert(a.text("fingerprint"));
        assert_eq!(
            a.text("fingerprint"),
            fp,
            "{ticket}: fingerprint\n{}",
            dump()
        );
        match a.text("outcome") {
            // The winner's arguments: its recorded result, or "later".
            "replayed" => {
                assert_eq!(a.text("fingerprint"), fingerprint, "{ticket}\n{}", dump());
                assert_eq!(
                    a.body["result"],
                    winner.body["result"],
                    "{ticket}\n{}",
                    dump()
                );
            }
            "in_flight" => assert_eq!(a.text("fingerprint"), fingerprint, "{ticket}\n{}", dump()),
            // Other arguments: the prior proposal (and the result once it
            // is recorded) for a person to judge.
            "conflict" => {
                assert_ne!(a.text("fingerprint"), fingerprint, "{ticket}\n{}", dump());
                assert!(a.body["prior"].is_object(), "{ticket}\n{}", dump());
                if !a.body["result"].is_null() {
                    assert_eq!(
                        a.body["result"],
                        winner.body["result"],
                        "{ticket}\n{}",
                        dump()
                    );
                }
            }
            _ => {}
        }
    }
    let fingerprints: Vec<&str> = by_arguments.values().copied().collect();
    assert_eq!(fingerprints.len(), 3, "{ticket}: {fingerprints:?}");
    assert!(
        fingerprints[0] != fingerprints[1]
            && fingerprints[1] != fingerprints[2]
            && fingerprints[0] != fingerprints[2],
        "{ticket}: three arguments, three fingerprints: {fingerprints:?}"
    );

    // The database: one credit, for the winner's arguments under the
    // winner's key; one claim, completed; one audit entry per decision.
    let (amount, reason, _) = proposal(winner.client);
    assert_eq!(
        rows.credits
            .iter()
            .map(|(k, a, r)| (hex(k), *a, r.as_str()))
            .collect::<Vec<_>>(),
        vec![(key.to_owned(), amount as i64, reason)],
        "{ticket}: credit rows"
    );
    assert_eq!(
        rows.claims
            .iter()
            .map(|(k, f, s)| (hex(k), hex(f), s.as_str()))
            .collect::<Vec<_>>(),
        vec![(key.to_owned(), fingerprint.to_owned(), "completed")],
        "{ticket}: claim rows"
    );
    let mut audited = rows.audit.clone();
    audited.sort();
    let mut answered: Vec<String> = answers
        .iter()
        .map(|a| a.text("outcome").to_owned())
        .collect();
    answered.sort();
    assert_eq!(audited, answered, "{ticket}: audit entries");
    assert_eq!(
        rows.version, 2,
        "{ticket}: one write moved the version once"
    );
    winner.server
}

/// `toolgate_decisions_total{outcome="…",tool="…"}` from one server's
/// `/metrics`, summed over tools.
fn decisions_by_outcome(addr: SocketAddr, key: &str) -> BTreeMap<String, u64> {
    let (status, text) = http(addr, "GET", "/metrics", Some(key), "").expect("metrics");
    assert_eq!(status, 200, "{text}");
    let mut by_outcome = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("toolgate_decisions_total{outcome=\"") else {
            continue;
        };
        let Some((outcome, rest)) = rest.split_once('"') else {
            continue;
        };
        let Some(n) = rest
            .rsplit_once('}')
            .and_then(|(_, n)| n.trim().parse::<u64>().ok())
        else {
            continue;
        };
        if n > 0 {
            *by_outcome.entry(outcome.to_owned()).or_insert(0) += n;
        }
    }
    by_outcome
}

/// Server A on `urls[0]`, server B on `urls[1]`: the same database, or
/// two nodes of one Galera cluster.
fn two_servers_one_credit_per_ticket(urls: [&str; 2], backend: &str) {
    let url = urls[0];
    let cluster = urls[0] != urls[1];
    let run = support::random_hex()[..12].to_owned();
    let dir = Scratch::new("scale", &run);

    // One deployment file for both replicas: the same policy, the same
    // key. The key's principal is this run's agent, assigned every ticket.
    let agent = format!("scale-{run}");
    let secret = format!("tg_scale_{}", support::random_hex());
    std::fs::write(dir.0.join("policy.toml"), toolgate_support_desk::POLICY).expect("policy");
    let config = dir.0.join("toolgate.toml");
    std::fs::write(
        &config,
        format!(
            "policy = \"policy.toml\"\napplication = \"support-desk\"\n\n[[keys]]\nsha256 = \"{}\"\nprincipal = \"{agent}\"\n\
             capabilities = [\"credit:issue\", \"toolgate:metrics\"]\n\
             execution = \"in_process\"\n",
            hex(&ApiKey::digest(&secret))
        ),
    )
    .expect("config");

    // Both start at once, as replicas do: on a fresh database their
    // migrations race too (sqlx serialises them with an advisory lock).
    // On a cluster the migrations run once first (docs/deploy.md: GET_LOCK
    // holds on one node only).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let early = cluster.then(|| {
        rt.block_on(async {
            let store = AnyClaimStore::connect(url).await.expect("migrate node 1");
            SupportDesk::on_store(&store).await.expect("desk tables");
            store
        })
    });
    let deadline = Instant::now() + PATIENCE;
    let mode = ["--config".as_ref(), config.as_os_str()];
    let mut a = Server::spawn("A", &mode, urls[0], &dir.0);
    let mut b = Server::spawn("B", &mode, urls[1], &dir.0);
    let servers = [a.ready(deadline), b.ready(deadline)];

    let store = match early {
        Some(store) => store,
        None => rt
            .block_on(AnyClaimStore::connect(url))
            .expect("connect to the shared database"),
    };
    let tickets = rt.block_on(seed_tickets(&store, 'S', &run, TICKETS, &agent));

    let mut totals: BTreeMap<String, usize> = BTreeMap::new();
    let mut executed_on = [0usize; 2];
    for t in &tickets {
        let answers = race(servers, &secret, &t.id, &t.customer_id);
        for a in &answers {
            *totals.entry(a.text("outcome").to_owned()).or_default() += 1;
        }
        // The winner's key, to find the audit entries (none: no winner,
        // which check_ticket reports).
        let key = answers
            .iter()
            .find(|a| a.text("outcome") == "executed")
            .map_or_else(Vec::new, |a| unhex(a.text("operation_key")));
        if cluster {
            // Node 1 must have applied node 2's writes before it is read.
            rt.block_on(caught_up(url));
        }
        let rows = rt.block_on(rows(&store, &t.id, &key));
        executed_on[check_ticket(&t.id, &answers, &rows)] += 1;
    }

    // Each server counted its own decisions: six per ticket each, and the
    // executions of both add up to one per ticket.
    let metrics = [
        decisions_by_outcome(servers[0], &secret),
        decisions_by_outcome(servers[1], &secret),
    ];
    for (i, m) in metrics.iter().enumerate() {
        assert_eq!(
            m.values().sum::<u64>(),
            (TICKETS * CLIENTS / 2) as u64,
            "server {i}: {m:?}"
        );
        assert_eq!(
            m.get("executed").copied().unwrap_or(0),
            executed_on[i] as u64,
            "server {i}: {m:?}"
        );
    }

    // Nothing went wrong behind a decision either: a decision whose audit
    // entry failed still answers, but logs an error.
    drop((a, b));
    for name in ["A", "B"] {
        let log = std::fs::read_to_string(dir.0.join(format!("server-{name}.log"))).expect("log");
        assert!(
            !log.contains("\"level\":\"ERROR\""),
            "server {name} logged an error:\n{log}"
        );
    }
    eprintln!(
        "scale-out {backend}: {TICKETS} tickets x {CLIENTS} clients on 2 servers: {} (executed on A {}, on B {})",
        totals
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
        executed_on[0],
        executed_on[1]
    );
}

/// Waits until the Galera node behind `url` has applied every write set
/// the cluster committed before this call: a causal read
/// (`wsrep_sync_wait = 1`), which is synchronisation, not a timed wait.
async fn caught_up(url: &str) {
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("connect for a causal read");
    sqlx::query("SET SESSION wsrep_sync_wait = 1")
        .execute(&pool)
        .await
        .expect("wsrep_sync_wait");
    sqlx::query("SELECT 1")
        .execute(&pool)
        .await
        .expect("causal read");
    pool.close().await;
}

/// `toolgate serve --demo` twice at once on a fresh database, then a third
/// time on the same one (a restart). All three must start: the claim and
/// support-desk migrations serialise across processes (on MariaDB sqlx's
/// own lock does not hold; toolgate-store takes one of its own), and the
/// demo's seed leaves rows another process made alone.
fn demo_replicas_share_a_fresh_database(url: &str) {
    let dir = Scratch::new("scale", &support::random_hex()[..12]);
    let fresh = FreshDatabase::create(url, "scale");
    let demo = ["--demo".as_ref()];
    let deadline = Instant::now() + PATIENCE;
    let mut a = Server::spawn("demo-A", &demo, &fresh.url, &dir.0);
    let mut b = Server::spawn("demo-B", &demo, &fresh.url, &dir.0);
    a.ready(deadline);
    b.ready(deadline);
    let mut again = Server::spawn("demo-restart", &demo, &fresh.url, &dir.0);
    again.ready(deadline);
    // The servers go first (declared last), then the database.
}

#[test]
fn postgres_two_servers_one_credit_per_ticket() {
    if let Some(url) = support::database_url("TOOLGATE_TEST_POSTGRES_URL", "PostgreSQL") {
        two_servers_one_credit_per_ticket([&url, &url], "postgres");
    }
}

#[test]
fn mysql_two_servers_one_credit_per_ticket() {
    if let Some(url) = support::database_url("TOOLGATE_TEST_MYSQL_URL", "MariaDB") {
        two_servers_one_credit_per_ticket([&url, &url], "mariadb");
    }
}

support::on_network_databases!(|url: &str| demo_replicas_share_a_fresh_database(url) =>
    postgres_demo_replicas_share_a_fresh_database,
    mysql_demo_replicas_share_a_fresh_database
);

/// Two servers attached to different nodes of a Galera cluster (node 1
/// and node 2 of `TOOLGATE_TEST_GALERA_URLS`), racing on the same tickets:
/// one credit per ticket still. Runs like toolgate-store's `tests/galera.rs`:
/// skipped unless the URLs are set, a failure when they are not and
/// `TOOLGATE_REQUIRE_GALERA=1`.
#[test]
fn galera_two_servers_on_two_nodes_one_credit_per_ticket() {
    let urls: Vec<String> = std::env::var("TOOLGATE_TEST_GALERA_URLS")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect();
    if urls.len() < 2 {
        assert!(
            std::env::var("TOOLGATE_REQUIRE_GALERA").as_deref() != Ok("1"),
            "TOOLGATE_REQUIRE_GALERA=1 but TOOLGATE_TEST_GALERA_URLS names fewer than two nodes"
        );
        eprintln!(
            "SKIPPED: TOOLGATE_TEST_GALERA_URLS is not set, so the Galera scale-out test did not run"
        );
        return;
    }
    two_servers_one_credit_per_ticket([&urls[0], &urls[1]], "galera");
}
