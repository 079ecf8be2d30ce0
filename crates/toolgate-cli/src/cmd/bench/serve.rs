//! `toolgate bench serve`: decisions per second through the real HTTP
//! sidecar over loopback, on a given claim store.
//!
//! The server (the support desk, Cedar, the claim store at `--db`) runs in
//! this process on its own two-worker runtime and a loopback socket; the
//! load generator runs `--concurrency` keep-alive connections on another
//! runtime and speaks plain HTTP/1.1. The mix, by request number: one in
//! five an answer (no state), two in five a fresh credit on its own ticket
//! (claim, execute, complete), two in five a reworded replay of the credit
//! proposed 4 × concurrency fresh credits earlier, long enough ago that it
//! has usually completed (state read, then the claim reads back the completed row). Tickets are seeded with a per-run prefix, so runs
//! can repeat on the same database.
//!
//! Prints one line:
//! `decisions_per_s=… p50_ms=… p99_ms=… peak_rss_mb=… requests=… concurrency=… backend=… outcomes=…`
//! (peak RSS is the whole process: server and load generator), which with
//! `--floor` ends `floor_per_s=… ratio=… rounds=… round_ratios=…`: fresh
//! credits only, alternating with the store's bare claim and completion
//! statements (`toolgate_store::floor`) round by round.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use toolgate::contract::Policy;
use toolgate::pipeline::Principal;
use toolgate_http::{AppState, Settings};
use toolgate_service::{ApiKey, ExecutionMode, KeyRing};
use toolgate_store::floor::FloorRun;
use toolgate_store::{AnyClaimStore, StoreOptions};
use toolgate_support_desk::SeedTicket;

use crate::cmd::serve::desk_state;

/// Load the HTTP sidecar over loopback and print decisions per second.
///
/// Starts the support-desk sidecar (Cedar authorisation, the credit
/// executor, the claim store at --db) in this process on two worker
/// threads, seeds one ticket per fresh credit under a per-run prefix (runs
/// can repeat on one database), and drives it with --concurrency keep-alive
/// HTTP/1.1 connections. The mix, by request number: 1 in 5 an answer, 2 in
/// 5 a fresh credit (claim, execute, complete), 2 in 5 a reworded replay of
/// an earlier credit. Prints one line:
///   decisions_per_s=… p50_ms=… p99_ms=… peak_rss_mb=… requests=…
///     concurrency=… backend=… outcomes=<outcome>:<count>,…
/// peak_rss_mb is the whole process, server and load generator. Every
/// fresh credit must end `executed` exactly once; the outcomes show it.
/// Target: SQLite on 2 cores, >= 5000 decisions/s, p99 < 10 ms.
///
/// --floor: every request is a fresh credit (so decisions_per_s counts
/// fresh decisions only), and the store's own claim and completion
/// statements also run bare (no pipeline, no HTTP) on as many workers
/// against the same database, once per request. The two alternate in
/// --rounds rounds (the server idle while the floor runs), so a burst of
/// noise on a shared machine falls on both; the line ends with
///   floor_per_s=<pairs/s> ratio=<decisions_per_s / floor_per_s>
///     rounds=<N> round_ratios=<each round's ratio>,…
/// where both rates are over all rounds. Target: ratio >= 0.5
/// on PostgreSQL and MariaDB at 12 connections. The floor leaves its rows
/// (tool `floor`) in the database.
///
/// Examples:
///   toolgate bench serve --db sqlite:///tmp/bench.db --concurrency 16 --requests 10000
///   toolgate bench serve --db postgres://postgres@127.0.0.1/test --concurrency 12 \
///     --requests 6000 --floor
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Claim store: sqlite://PATH, postgres://... or mysql://...
    #[arg(long, value_name = "URL")]
    db: String,
    /// Parallel keep-alive connections.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=512))]
    concurrency: u32,
    /// Requests in all.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    requests: u32,
    /// Fresh decisions only, then the bare claim and completion statements
    /// on the same database: prints floor_per_s= and ratio=.
    #[arg(long)]
    floor: bool,
    /// With --floor: how many times the load and the floor alternate, each
    /// round with requests/rounds of each.
    #[arg(long, default_value_t = 6, requires = "floor",
          value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
}

const KEY: &str = "bench-agent-key";

fn fail(what: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("toolgate bench serve: {what}: {e}");
    ExitCode::from(2)
}

pub fn run(args: Args) -> ExitCode {
    let server_rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("server")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail("runtime", e),
    };
    let run_id = toolgate_store::now_millis().0;
    let agent = format!("bench-{run_id}");
    let fresh = if args.floor {
        args.requests as usize
    } else {
        (args.requests as usize).div_ceil(5) * 2 + 1
    };
    // One customer per ticket: the desk's policy caps each customer's
    // credits per day, and this bench measures the pipeline's throughput,
    // not that cap.
    let tickets = SeedTicket::series(&format!("B{run_id}"), &format!("BC{run_id}"), &agent, fresh);
    let started = server_rt.block_on(async {
        let policy = Policy::load(toolgate_support_desk::POLICY).map_err(|e| e.to_string())?;
        let principal =
            Principal::new(agent.clone(), ["credit:issue"]).map_err(|e| e.to_string())?;
        let keys = KeyRing::new([ApiKey {
            sha256: ApiKey::digest(KEY),
            principal,
            mode: ExecutionMode::InProcess,
            act_for_users: false,
        }])
        .map_err(|e| e.to_string())?;
        let (service, _) = desk_state(
            &args.db,
            true,
            policy,
            toolgate_support_desk::cedar::POLICIES,
            keys,
            toolgate_service::Settings::default(),
            Some(&tickets),
        )
        .await?;
        let state = AppState::new(service, Settings::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(toolgate_http::serve(
            listener,
            state,
            async {
                let _ = rx.await;
            },
            Duration::from_secs(2),
        ));
        Ok::<_, String>((addr, tx, server))
    });
    let (addr, stop, server) = match started {
        Ok(s) => s,
        Err(e) => return fail("starting the server", e),
    };

    let client_rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("client")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail("runtime", e),
    };
    // The customers' prefix: ticket `i` belongs to customer `BC{run_id}-{i}`.
    let load = Load {
        addr,
        concurrency: args.concurrency,
        // Each connection has about two fresh credits in flight per five
        // requests; four times the concurrency is well behind all of them.
        lag: 4 * args.concurrency as usize,
        all_fresh: args.floor,
        prefix: format!("B{run_id}"),
        customer: format!("BC{run_id}"),
    };
    let total = args.requests as usize;
    let measured = if args.floor {
        alternate(&load, &client_rt, &server_rt, &args)
    } else {
        client_rt
            .block_on(load.run(0..total))
            .map(|run| (run, String::new()))
    };
    let _ = stop.send(());
    let _ = server_rt.block_on(server);
    let (run, floor) = match measured {
        Ok(m) => m,
        Err(e) => return fail("measuring", e),
    };
    let decisions_per_s = run.per_second();
    let mut latencies = run.latencies;
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        let i = ((latencies.len() as f64 - 1.0) * p).round() as usize;
        latencies.get(i).copied().unwrap_or(0.0) * 1000.0
    };
    let backend = args.db.split(':').next().unwrap_or("?");
    let outcome_text: Vec<String> = run
        .outcomes
        .iter()
        .map(|(k, v)| format!("{k}:{v}"))
        .collect();
    println!(
        "decisions_per_s={:.0} p50_ms={:.2} p99_ms={:.2} peak_rss_mb={:.1} requests={} concurrency={} backend={backend} outcomes={}{floor}",
        decisions_per_s,
        pct(0.50),
        pct(0.99),
        peak_rss_mb(),
        latencies.len(),
        args.concurrency,
        outcome_text.join(",")
    );
    ExitCode::SUCCESS
}

/// Load and floor in turn, `args.rounds` times, on the same database: the
/// load's run over all rounds, and the line's floor part.
fn alternate(
    load: &Load,
    client_rt: &tokio::runtime::Runtime,
    server_rt: &tokio::runtime::Runtime,
    args: &Args,
) -> Result<(LoadRun, String), String> {
    // The floor runs on the server's runtime (the server idle meanwhile),
    // the same number of workers, its own pool on the same database.
    let store = server_rt
        .block_on(AnyClaimStore::connect_with(
            &args.db,
            StoreOptions {
                create_if_missing: false,
                ..StoreOptions::default()
            },
        ))
        .map_err(|e| format!("floor: {e}"))?;
    let store = Arc::new(store);
    let total = args.requests as usize;
    let rounds = args.rounds as usize;
    let mut all = LoadRun::default();
    let mut floor_all = FloorRun {
        pairs: 0,
        elapsed: Duration::ZERO,
    };
    let mut round_ratios = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let range = total * r / rounds..total * (r + 1) / rounds;
        let size = range.len();
        let run = client_rt.block_on(load.run(range))?;
        let floor = server_rt
            .block_on(toolgate_store::floor::floor(
                Arc::clone(&store),
                args.concurrency,
                size as u32,
            ))
            .map_err(|e| format!("floor: {e}"))?;
        round_ratios.push(format!("{:.2}", run.per_second() / floor.per_second()));
        floor_all.pairs += floor.pairs;
        floor_all.elapsed += floor.elapsed;
        all.absorb(run);
    }
    let floor_per_s = floor_all.per_second();
    let line = format!(
        " floor_per_s={floor_per_s:.0} ratio={:.2} rounds={rounds} round_ratios={}",
        all.per_second() / floor_per_s,
        round_ratios.join(",")
    );
    Ok((all, line))
}

/// The load generator's fixed part: where, how many connections, and the
/// names its requests use.
struct Load {
    addr: std::net::SocketAddr,
    concurrency: u32,
    lag: usize,
    all_fresh: bool,
    prefix: String,
    customer: String,
}

/// What one stretch of load measured.
#[derive(Default)]
struct LoadRun {
    latencies: Vec<f64>,
    outcomes: BTreeMap<String, usize>,
    elapsed: Duration,
}

impl LoadRun {
    /// Decisions per second.
    fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    fn absorb(&mut self, other: LoadRun) {
        self.latencies.extend(other.latencies);
        for (k, v) in other.outcomes {
            *self.outcomes.entry(k).or_default() += v;
        }
        self.elapsed += other.elapsed;
    }
}

impl Load {
    /// Sends requests `range` (by number in the mix) over `concurrency`
    /// fresh keep-alive connections and times them.
    async fn run(&self, range: std::ops::Range<usize>) -> Result<LoadRun, String> {
        let next = Arc::new(AtomicUsize::new(range.start));
        let begin = Instant::now();
        let mut workers = Vec::new();
        for _ in 0..self.concurrency {
            let next = Arc::clone(&next);
            let (addr, end, lag, all_fresh) = (self.addr, range.end, self.lag, self.all_fresh);
            let (prefix, customer) = (self.prefix.clone(), self.customer.clone());
            workers.push(tokio::spawn(async move {
                worker(addr, next, end, lag, all_fresh, &prefix, &customer).await
            }));
        }
        let mut all = LoadRun::default();
        for w in workers {
            let (latencies, outcomes) = w.await.map_err(|e| e.to_string())??;
            all.absorb(LoadRun {
                latencies,
                outcomes,
                elapsed: Duration::ZERO,
            });
        }
        all.elapsed = begin.elapsed();
        Ok(all)
    }
}

type WorkerResult = (Vec<f64>, BTreeMap<String, usize>);

/// The request for number `i` of the mix.
fn request_body(i: usize, lag: usize, all_fresh: bool, prefix: &str, customer: &str) -> Value {
    let fresh_index = |n: usize| (n / 5) * 2 + (n % 5) - 1;
    let body = |ticket: usize, reply: &str| {
        json!({"provider": "envelope",
               "response": {"outcome": "action", "reply": reply,
                            "proposed_action": {"tool": "apply_goodwill_credit",
                                "arguments": {"amount_minor": 1500, "reason_code": "late_delivery"}}},
               "scope": {"customer_id": format!("{customer}-{ticket}"), "ticket_id": format!("{prefix}-{ticket}"), "version_seen": 1}})
    };
    if all_fresh {
        return body(i, "Applied a 15.00 credit.");
    }
    match i % 5 {
        0 => json!({"provider": "envelope",
                    "response": {"outcome": "answer", "reply": "Your parcel ships today."}}),
        1 | 2 => body(fresh_index(i), "Applied a 15.00 credit."),
        // A replay (reworded) of a credit proposed `lag` fresh credits
        // earlier: far enough back that it has usually completed, so the
        // mix measures replays rather than in-flight collisions.
        _ => body(
            fresh_index(i.saturating_sub(2)).saturating_sub(lag),
            "Done: 15.00 credited.",
        ),
    }
}

#[expect(
    clippy::disallowed_methods,
    reason = "the load generator reads the sidecar's own answers, not model JSON"
)]
async fn worker(
    addr: std::net::SocketAddr,
    next: Arc<AtomicUsize>,
    total: usize,
    lag: usize,
    all_fresh: bool,
    prefix: &str,
    customer: &str,
) -> Result<WorkerResult, String> {
    let mut conn = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    conn.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut latencies = Vec::new();
    let mut outcomes = BTreeMap::new();
    let mut buf = Vec::with_capacity(8192);
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= total {
            break;
        }
        let payload = request_body(i, lag, all_fresh, prefix, customer).to_string();
        let request = format!(
            "POST /v1/decisions HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
            payload.len()
        );
        let t = Instant::now();
        conn.write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let body = read_response(&mut conn, &mut buf).await?;
        latencies.push(t.elapsed().as_secs_f64());
        let outcome = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("outcome").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| "error".to_owned());
        *outcomes.entry(outcome).or_insert(0) += 1;
    }
    Ok((latencies, outcomes))
}

/// Reads one response with a Content-Length body (the sidecar always sends
/// one) and returns the body; leftover bytes stay in `buf`.
async fn read_response(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Vec<u8>, String> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .ok_or("response without content-length")?;
            let start = end + 4;
            while buf.len() < start + len {
                read_more(conn, buf).await?;
            }
            let body = buf[start..start + len].to_vec();
            buf.drain(..start + len);
            return Ok(body);
        }
        read_more(conn, buf).await?;
    }
}

async fn read_more(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(), String> {
    let mut chunk = [0u8; 8192];
    let n = conn.read(&mut chunk).await.map_err(|e| e.to_string())?;
    if n == 0 {
        return Err("the server closed the connection".to_owned());
    }
    buf.extend_from_slice(&chunk[..n]);
    Ok(())
}

/// Peak resident set of this process (VmHWM), in MiB; 0 where /proc is
/// missing.
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}
