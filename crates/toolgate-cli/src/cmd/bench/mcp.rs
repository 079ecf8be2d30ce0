//! `toolgate bench mcp`: the latency a gated `tools/call` adds over the
//! same call made directly to the upstream, for a write and for a read,
//! and a write's floor, all measured in one run.
//!
//! The example shop (examples/mcp/shop_mcp.py, the official Python SDK over
//! Streamable HTTP) and a `toolgate serve --config` gateway in front of it
//! (the example deployment, examples/mcp/gateway/) run as child processes on
//! a fresh work directory. Two rmcp clients (toolgate-mcp's upstream client)
//! then call `refund_order`: one straight at the shop, one at the gateway
//! with agent-ana's key. The paths alternate call by call, so a noisy
//! neighbour hurts both alike. Each call is a new refund of one cent at the
//! order's current version, so every gated call is a fresh operation (the
//! operation key is the order and the version) and runs the whole decision:
//! contract check, Cedar over the shop's live tables, the budget, the claim,
//! the forwarded call, the completion. The direct calls refund another order
//! of the same team, carrying an operation key in `_meta` as the gateway's
//! forwarded calls do, so the shop does the same work on both paths.
//!
//! Reads are `get_order` (a `read = true` tool: capability, schema, Cedar,
//! an audit entry, no claim) on the same two paths. A write's floor is
//! what no gate can avoid: the direct call, plus one claim and completion
//! pair of the claim store's own statements (`toolgate_store::floor`) on a
//! SQLite store of the same kind in the work directory, timed in the same
//! round and added up round by round.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Map, Value, json};
use toolgate_mcp::upstream::UpstreamClient;
use toolgate_mcp::wire::{DECISION_META, OUTCOME_META};

/// Measure the latency the MCP gateway adds to a tools/call.
///
/// Starts the MCP example's shop (DIR/shop_mcp.py, Streamable HTTP, its own
/// SQLite file) and `toolgate serve --config` with the example deployment
/// (DIR/gateway/) in front of it, both on free loopback ports in a fresh
/// work directory, pins the shop's tools (`toolgate mcp import`), and then
/// calls refund_order --calls times straight at the shop and --calls times
/// through the gateway (agent-ana's key), and get_order as often on both
/// paths, alternating call by call (each round rotates which goes first),
/// after --warmup unmeasured calls per path; each round also times one
/// claim and completion of the claim store's own statements on a SQLite
/// store in the work directory (the write's floor with the direct call). Each call refunds one cent at the
/// order's current version: every gated call is a new operation that the
/// gateway authorises (Cedar over the shop's tables), budgets, claims,
/// forwards and completes; none replays. Direct calls refund order 1002,
/// gated calls order 1001 (both team eu).
///
/// Prints, latencies in milliseconds from the client's side:
///   toolgate bench mcp, <date>: <what was measured>
///   write direct: p50_ms=… p99_ms=… mean_ms=…
///   write gated:  p50_ms=… p99_ms=… mean_ms=…
///   write floor:  p50_ms=… p99_ms=… mean_ms=…   (direct + claim store pair)
///   write added:  p50_ms=… p99_ms=… ratio_p50=… ratio_p99=…
///   write over floor: p50_ms=… p99_ms=…
///   read direct:  p50_ms=… p99_ms=… mean_ms=…
///   read gated:   p50_ms=… p99_ms=… mean_ms=…
///   read added:   p50_ms=… p99_ms=… ratio_p50=… ratio_p99=…
///   calls=<N per path> gated_outcomes=executed:<N> shop={"refund_order_calls": …, "refunds": …}
/// added is gated minus direct; over floor is gated minus floor; ratio is
/// gated over direct. The goals: a read adds at most 1 ms at p50, a write
/// at most its floor + 1 ms. Any gated call
/// that does not execute, or a direct call that fails, stops the run
/// (exit 1). The work directory is removed at the end, or kept and named
/// on failure.
///
/// Needs the example's SDKs: bash examples/mcp/install.sh. --example is
/// relative to the current directory: run it from the repository's root,
/// or pass the directory.
///
/// Example:
///   toolgate bench mcp --calls 200
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Measured calls per path (direct and gated).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=3000))]
    calls: u32,
    /// Unmeasured calls per path first (connections, pools, caches).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=100))]
    warmup: u32,
    /// The MCP example's directory: shop_mcp.py and gateway/.
    #[arg(long, value_name = "DIR", default_value = "examples/mcp")]
    example: PathBuf,
    /// The Python with the example's SDK [default: DIR/.venv/bin/python,
    /// made by DIR/install.sh].
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
}

/// agent-ana's key in the example deployment (public, like the example's
/// other keys).
const ANA: &str = "tg_mcp_example_agent_ana";
/// Orders of team eu in the shop's seed: the gated path refunds one, the
/// direct path the other, so their versions move independently.
const GATED_ORDER: u64 = 1001;
const DIRECT_ORDER: u64 = 1002;
/// How long a child process may take to listen, and a call to answer.
const PATIENCE: Duration = Duration::from_secs(60);

use super::proc::Proc;

fn fail(what: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("toolgate bench mcp: {what}: {e}");
    ExitCode::from(2)
}

/// The processes and addresses of one run.
struct Setup {
    shop_url: String,
    gateway_url: String,
    shop_db: PathBuf,
    floor_db: PathBuf,
    // Fields drop in declaration order: the gateway is stopped before the
    // shop it calls.
    _gateway: Proc,
    _shop: Proc,
}

pub fn run(args: Args) -> ExitCode {
    let python = args
        .python
        .clone()
        .unwrap_or_else(|| args.example.join(".venv/bin/python"));
    if !python.exists() {
        return fail(
            "the MCP example's SDKs",
            format!(
                "{} is missing: run bash {}/install.sh (or pass --python)",
                python.display(),
                args.example.display()
            ),
        );
    }
    let work = std::env::temp_dir().join(format!(
        "toolgate-bench-mcp-{}-{}",
        std::process::id(),
        toolgate_store::now_millis().0
    ));
    if let Err(e) = std::fs::create_dir_all(&work) {
        return fail("work directory", e);
    }
    let code = match start(&args, &python, &work) {
        Err(e) => fail("starting", e),
        Ok(setup) => measure(&args, &python, &setup),
    };
    if code == ExitCode::SUCCESS {
        let _ = std::fs::remove_dir_all(&work);
    } else {
        eprintln!(
            "toolgate bench mcp: logs kept in {} (shop.log, serve.log)",
            work.display()
        );
    }
    code
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("a free port: {e}"))
}

/// Waits until something accepts connections on `port`, or `child` exits.
fn wait_listening(what: &str, child: &mut Proc, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            return Err(format!("{what} exited ({status}) before listening"));
        }
        if Instant::now() > deadline {
            return Err(format!("{what} did not listen on {port}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn log_file(work: &Path, name: &str) -> Result<std::fs::File, String> {
    std::fs::File::create(work.join(name)).map_err(|e| format!("{name}: {e}"))
}

/// The shop, the deployment pointed at it and pinned, and the gateway.
fn start(args: &Args, python: &Path, work: &Path) -> Result<Setup, String> {
    let shop_db = work.join("shop.sqlite");
    let shop_port = free_port()?;
    let shop_log = log_file(work, "shop.log")?;
    let shop_err = shop_log.try_clone().map_err(|e| format!("shop.log: {e}"))?;
    let shop = Command::new(python)
        .arg(args.example.join("shop_mcp.py"))
        .arg("--db")
        .arg(&shop_db)
        .args(["serve-http", "--port", &shop_port.to_string()])
        .stdin(Stdio::null())
        .stdout(shop_log)
        .stderr(shop_err)
        .spawn()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    let mut shop = Proc(shop);
    wait_listening("the shop", &mut shop, shop_port)?;

    let deployment = args.example.join("gateway");
    for f in ["policy.toml", "policy.cedar"] {
        std::fs::copy(deployment.join(f), work.join(f))
            .map_err(|e| format!("{}: {e}", deployment.join(f).display()))?;
    }
    let port = free_port()?;
    let text = std::fs::read_to_string(deployment.join("toolgate.toml"))
        .map_err(|e| format!("{}: {e}", deployment.join("toolgate.toml").display()))?;
    let config_text = text
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"))
        .replace("127.0.0.1:8931", &format!("127.0.0.1:{shop_port}"))
        .replace(
            "db = \"sqlite://toolgate-mcp.db\"",
            &format!("db = \"sqlite://{}\"", work.join("toolgate.db").display()),
        )
        .replace(
            "url_env = \"SHOP_DB_URL\"",
            &format!("url = \"sqlite://{}\"", shop_db.display()),
        )
        // The example's read rate would refuse a long run's reads.
        .replace("rate_per_minute = 600", "rate_per_minute = 4000000000");
    let config = work.join("toolgate.toml");
    std::fs::write(&config, config_text).map_err(|e| format!("{}: {e}", config.display()))?;

    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let import = Command::new(&exe)
        .args(["mcp", "import", "--upstream", "shop", "--config"])
        .arg(&config)
        .output()
        .map_err(|e| format!("toolgate mcp import: {e}"))?;
    if !import.status.success() {
        return Err(format!(
            "toolgate mcp import: {}",
            String::from_utf8_lossy(&import.stderr)
        ));
    }
    let gateway = Command::new(&exe)
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(log_file(work, "serve.out")?)
        .stderr(log_file(work, "serve.log")?)
        .spawn()
        .map_err(|e| format!("toolgate serve: {e}"))?;
    let mut gateway = Proc(gateway);
    wait_listening("toolgate serve", &mut gateway, port)?;
    Ok(Setup {
        shop_url: format!("http://127.0.0.1:{shop_port}/mcp"),
        gateway_url: format!("http://127.0.0.1:{port}/mcp"),
        shop_db,
        floor_db: work.join("floor.db"),
        _gateway: gateway,
        _shop: shop,
    })
}

/// One path's client, order and next version.
struct Lane {
    client: UpstreamClient,
    order: u64,
    version: u64,
    gated: bool,
}

impl Lane {
    /// One refund at the order's current version: its latency, or why it
    /// did not execute.
    async fn call(&mut self) -> Result<f64, String> {
        let arguments = match json!({
            "order_id": self.order,
            "expected_version": self.version,
            "amount_minor": 1,
            "reason": "late",
        }) {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        // The direct path's key stands where the gateway puts its own, so
        // the shop records and checks one on both paths; the gateway
        // ignores a caller's.
        let key = format!("bench-{}-{}", self.order, self.version);
        let t = Instant::now();
        let result = self.client.call("refund_order", arguments, &key).await;
        let elapsed = t.elapsed().as_secs_f64();
        let path = if self.gated { "gated" } else { "direct" };
        let result = result.map_err(|e| format!("{path} call: {e}"))?;
        let value = serde_json::to_value(&result).map_err(|e| e.to_string())?;
        let outcome = outcome_of(&value);
        if outcome != "executed" {
            return Err(format!(
                "{path} call at version {} was {outcome}, not executed: {value}",
                self.version
            ));
        }
        self.version += 1;
        Ok(elapsed)
    }
}

/// What a `tools/call` result says happened: `executed` for a result the
/// upstream gave (the gateway passes an executed call's result unchanged),
/// else the gateway's outcome from `_meta`, or `error`.
fn outcome_of(result: &Value) -> String {
    let meta = result.get("_meta");
    let marked = |key: &str| meta.and_then(|m| m.get(key));
    if let Some(outcome) = marked(OUTCOME_META).and_then(Value::as_str) {
        return outcome.to_owned();
    }
    if let Some(outcome) = marked(DECISION_META)
        .and_then(|d| d.get("outcome"))
        .and_then(Value::as_str)
    {
        return outcome.to_owned();
    }
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return "error".to_owned();
    }
    "executed".to_owned()
}

/// One `get_order` on a path: its latency, or why it was not answered.
async fn read_once(client: &UpstreamClient, order: u64, gated: bool) -> Result<f64, String> {
    let mut arguments = Map::new();
    arguments.insert("order_id".to_owned(), json!(order));
    let t = Instant::now();
    let result = client.read("get_order", arguments).await;
    let elapsed = t.elapsed().as_secs_f64();
    let path = if gated { "gated" } else { "direct" };
    let result = result.map_err(|e| format!("{path} read: {e}"))?;
    if result.is_error == Some(true) || result.structured_content.is_none() {
        let value = serde_json::to_value(&result).unwrap_or_default();
        return Err(format!("{path} read was not answered: {value}"));
    }
    Ok(elapsed)
}

/// One claim and completion of the claim store's own statements.
async fn floor_once(store: &std::sync::Arc<toolgate_store::AnyClaimStore>) -> Result<f64, String> {
    let run = toolgate_store::floor::floor(std::sync::Arc::clone(store), 1, 1)
        .await
        .map_err(|e| format!("floor: {e}"))?;
    Ok(run.elapsed.as_secs_f64())
}

/// The samples of one run, in seconds.
#[derive(Default)]
struct Samples {
    write_direct: Vec<f64>,
    write_gated: Vec<f64>,
    floor_pair: Vec<f64>,
    read_direct: Vec<f64>,
    read_gated: Vec<f64>,
}

fn measure(args: &Args, python: &Path, setup: &Setup) -> ExitCode {
    let rt = match crate::io::runtime() {
        Ok(rt) => rt,
        Err(e) => return fail("runtime", e),
    };
    let measured = rt.block_on(async {
        let direct =
            UpstreamClient::connect_http("shop", &setup.shop_url, None, PATIENCE, PATIENCE)
                .await
                .map_err(|e| format!("the shop: {e}"))?;
        let gated = UpstreamClient::connect_http(
            "gateway",
            &setup.gateway_url,
            Some(ANA),
            PATIENCE,
            PATIENCE,
        )
        .await
        .map_err(|e| format!("the gateway: {e}"))?;
        let floor_url = format!("sqlite://{}", setup.floor_db.display());
        let store = toolgate_store::AnyClaimStore::connect_with(
            &floor_url,
            toolgate_store::StoreOptions {
                create_if_missing: true,
                ..toolgate_store::StoreOptions::default()
            },
        )
        .await
        .map_err(|e| format!("the floor's store: {e}"))?;
        let store = std::sync::Arc::new(store);
        let mut paths = [
            Lane {
                client: direct,
                order: DIRECT_ORDER,
                version: 1,
                gated: false,
            },
            Lane {
                client: gated,
                order: GATED_ORDER,
                version: 1,
                gated: true,
            },
        ];
        for _ in 0..args.warmup {
            for p in &mut paths {
                p.call().await?;
                read_once(&p.client, p.order, p.gated).await?;
            }
            floor_once(&store).await?;
        }
        let n = args.calls as usize;
        let mut s = Samples::default();
        for round in 0..n {
            // Five steps a round; each round starts one step later, so no
            // path is always first (or always after the same one).
            for step in 0..5 {
                match (round + step) % 5 {
                    0 => s.write_direct.push(paths[0].call().await?),
                    1 => s.write_gated.push(paths[1].call().await?),
                    2 => s
                        .read_direct
                        .push(read_once(&paths[0].client, DIRECT_ORDER, false).await?),
                    3 => s
                        .read_gated
                        .push(read_once(&paths[1].client, GATED_ORDER, true).await?),
                    _ => s.floor_pair.push(floor_once(&store).await?),
                }
            }
        }
        let [direct, gated] = paths;
        direct.client.close().await;
        gated.client.close().await;
        Ok::<_, String>(s)
    });
    let s = match measured {
        Ok(s) => s,
        Err(e) => {
            eprintln!("toolgate bench mcp: {e}");
            return ExitCode::FAILURE;
        }
    };
    let shop = match Command::new(python)
        .arg(args.example.join("shop_mcp.py"))
        .arg("--db")
        .arg(&setup.shop_db)
        .arg("count")
        .output()
    {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        Ok(o) => return fail("shop count", String::from_utf8_lossy(&o.stderr)),
        Err(e) => return fail("shop count", e),
    };
    // The floor of round i: its direct write and its claim store pair.
    let floor: Vec<f64> = s
        .write_direct
        .iter()
        .zip(&s.floor_pair)
        .map(|(d, p)| d + p)
        .collect();
    let wd = Figures::of(s.write_direct);
    let wg = Figures::of(s.write_gated);
    let wf = Figures::of(floor);
    let rd = Figures::of(s.read_direct);
    let rg = Figures::of(s.read_gated);
    println!(
        "toolgate bench mcp, {}: refund_order (write) and get_order (read) on the example shop \
         (Python SDK, Streamable HTTP, SQLite), direct vs through toolgate serve --config \
         (SQLite claim store); {} calls per path and kind, rotating order, after {} warm-up \
         calls each; one client per path, sequential",
        utc_date(),
        args.calls,
        args.warmup
    );
    let line = |name: &str, f: &Figures| {
        println!(
            "{name} p50_ms={:.2} p99_ms={:.2} mean_ms={:.2}",
            f.p50, f.p99, f.mean
        );
    };
    let added = |name: &str, g: &Figures, d: &Figures| {
        println!(
            "{name} p50_ms={:.2} p99_ms={:.2} ratio_p50={:.2} ratio_p99={:.2}",
            g.p50 - d.p50,
            g.p99 - d.p99,
            g.p50 / d.p50,
            g.p99 / d.p99
        );
    };
    line("write direct:", &wd);
    line("write gated: ", &wg);
    line("write floor: ", &wf);
    added("write added: ", &wg, &wd);
    println!(
        "write over floor: p50_ms={:.2} p99_ms={:.2}",
        wg.p50 - wf.p50,
        wg.p99 - wf.p99
    );
    line("read direct: ", &rd);
    line("read gated:  ", &rg);
    added("read added:  ", &rg, &rd);
    println!(
        "calls={} gated_outcomes=executed:{} shop={shop}",
        args.calls, wg.count
    );
    ExitCode::SUCCESS
}

/// One path's latencies, in milliseconds.
struct Figures {
    count: usize,
    p50: f64,
    p99: f64,
    mean: f64,
}

impl Figures {
    fn of(mut seconds: Vec<f64>) -> Self {
        seconds.sort_by(f64::total_cmp);
        // Nearest rank, as `bench serve` reports.
        let pct = |p: f64| {
            let i = ((seconds.len() as f64 - 1.0) * p).round() as usize;
            seconds.get(i).copied().unwrap_or(0.0) * 1000.0
        };
        let mean = seconds.iter().sum::<f64>() / seconds.len().max(1) as f64 * 1000.0;
        Self {
            count: seconds.len(),
            p50: pct(0.50),
            p99: pct(0.99),
            mean,
        }
    }
}

/// Today's date in UTC, YYYY-MM-DD.
fn utc_date() -> String {
    let now = toolgate::claim::UnixMillis::from(SystemTime::now());
    let (year, month, day) = toolgate::calendar::civil_from_days(now.0.div_euclid(86_400_000));
    format!("{year:04}-{month:02}-{day:02}")
}
