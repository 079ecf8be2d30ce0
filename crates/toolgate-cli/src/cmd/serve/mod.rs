//! `toolgate serve`: the HTTP sidecar (toolgate-http) with a claim store from
//! a URL, on the deployment file's [[tools]] wiring (toolgate-deploy), or on
//! the support-desk example (`--demo`, or `application = "support-desk"`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use serde_json::json;
use toolgate::claim::{ClaimRecord, ReconcileOutcome};
use toolgate::contract::Policy;
use toolgate::pipeline::{ExecError, ExecOutcome, ExecPermit, Executor, ExecutorKind, Principal};
use toolgate_deploy::{DeployExecutor, ToolExecutor};
use toolgate_http::{AppState, Settings};
use toolgate_mcp::catalog::Catalog;
use toolgate_mcp::config::Upstream;
use toolgate_mcp::exchange::Exchanger;
use toolgate_mcp::executor::{AsPerson, UpstreamExecutor};
use toolgate_mcp::gateway::{Gateway, Identity};
use toolgate_mcp::http::HttpSettings;
use toolgate_mcp::pin::PinFile;
use toolgate_mcp::refresh::Watch;
use toolgate_mcp::served::Served;
use toolgate_mcp::upstream::UpstreamClient;
use toolgate_service::{ApiKey, ExecutionMode, KeyRing, Parts, Service};
use toolgate_support_desk::cedar as desk_cedar;

use toolgate_store::{AnyClaimStore, StoreOptions};

use crate::cmd::config::{self, Application, DB_URL_ENV, resolve_db};

mod desk;
pub use desk::desk_state;

/// Run the HTTP sidecar.
///
/// --config FILE: a deployment. The file (TOML) names the policy, the Cedar
/// policies, the database and the API keys (stored as SHA-256 digests):
///
///   listen = "127.0.0.1:8080"          # optional
///   db = "sqlite:///var/lib/toolgate/toolgate.db"   # or --db / TOOLGATE_DB_URL
///   policy = "policy.toml"             # relative to the config file
///   cedar = "policy.cedar"             # required with [[tools]]
///   lease_ms = 30000                   # optional
///   request_timeout_ms = 10000         # optional
///   body_limit_bytes = 2097152         # optional
///   max_result_bytes = 65536           # optional: larger results refused
///   header_read_timeout_ms = 10000     # optional: slow headers closed
///   connection_limit = 1024            # optional: idle ones give way, then 503
///   connection_limit_per_peer = 512    # optional: per client IP
///   probe_headroom = 32                # optional: /healthz, /readyz beyond it
///   max_requests_per_connection = 10000  # optional
///   max_connection_age_ms = 600000     # optional
///   idempotency_capacity = 1000        # optional: answers kept per principal
///   idempotency_max_bytes = 8388608    # optional: bytes kept per principal
///   public_url = "https://review.example.com"  # optional: cookie's Secure flag
///   [review]                           # optional: the queue, and announcements
///   max_open_items = 10000
///   max_open_items_per_principal = 1000
///   rejection_window_ms = 3600000
///   webhook_url = "https://chat.example/hooks/toolgate"
///   webhook_secret_env = "TOOLGATE_REVIEW_WEBHOOK_SECRET"
///   [[keys]]
///   sha256 = "<64 hex digits: SHA-256 of the key>"
///   principal = "agent-ana"
///   capabilities = ["refund:issue"]    # toolgate:review, toolgate:operate
///   act_for_users = true               # the key names the actor per request
///   [app_db]
///   url_env = "SHOP_DB_URL"            # the application's database
///   [[tools]]                          # one per policy tool
///   name = "refund_order"
///   executor = { kind = "webhook", url = "...", status_url = "...", secret_env = "..." }
///   state = { source = "sql", query = "SELECT version FROM orders WHERE id = :order_id" }
///   cedar = { principal_type = "Agent", resource_type = "Order", resource_field = "order_id" }
///   [[tools.entities]]
///   type = "Order"
///   source = "sql"
///   query = "SELECT id, team FROM orders WHERE id = :order_id"
///
///   [[upstreams]]                      # optional: the MCP gateway at /mcp
///   name = "shop"
///   url = "http://127.0.0.1:8931/mcp"  # or command = "…", args = […]
///   pins = "shop.pins.toml"            # toolgate mcp import --upstream shop
///   call_timeout_ms = 30000            # lease_ms must be at least this + 1000
///   [[upstreams.tools]]
///   name = "refund_order"              # its [[tools]] entry: executor = { kind = "mcp_upstream" }
///   scope.order_id = { from = "argument", pointer = "/order_id" }
///   version_seen = { from = "argument", pointer = "/expected_version" }
///   status_tool = { name = "refund_status", key_argument = "operation_key" }
///
/// Each tool's executor decides who writes: `webhook` (toolgate POSTs the
/// signed permit), `client` (the decision hands the caller a permit) or
/// `mcp_upstream` (the tool is an MCP server's: toolgate sends the
/// tools/call there). With [[upstreams]], MCP clients call the same gate
/// at /mcp (Streamable HTTP, protocol 2025-11-25 with sessions and the
/// stateless 2026-07-28), authenticated by the same [[keys]] as
/// `Authorization: Bearer <key>`; docs/mcp.md is the reference.
/// docs/deploy.md is the reference. Without [[tools]], a file may name the
/// built-in example instead: application = "support-desk" (keys then
/// choose execution = "in_process" or "client").
///
/// `toolgate keys new` makes a key and its [[keys]] entry; `toolgate config
/// check FILE` validates the file, preparing its queries against [app_db],
/// without starting anything.
///
/// The database: --db URL, else $TOOLGATE_DB_URL, else the file's `db`.
/// Prefer the variable (or the file) for a URL with a password: arguments
/// show in `ps`. Passwords are never repeated in logs or errors. TLS:
///   postgres://u:pw@host/db?sslmode=verify-full&sslrootcert=/etc/ca.pem
///   mysql://u:pw@host/db?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ca.pem
///
/// --demo: the support desk on a fresh embedded SQLite database (or --db;
/// never TOOLGATE_DB_URL, so a deployment's database in the environment
/// does not get the demo's seed), seeded with customers, tickets and
/// agents; fresh API keys are printed at start. Binds 127.0.0.1:8080
/// unless --listen says otherwise.
///
/// Prints `listening on http://ADDR` once the socket is bound. SIGTERM or
/// Ctrl-C stops it: requests in progress finish, no claim is left
/// half-written. Logs are JSON lines on stderr, filtered by RUST_LOG
/// (e.g. RUST_LOG=info,toolgate_http=debug; default info) or --log-level.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The deployment's configuration file.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "demo",
        conflicts_with = "demo"
    )]
    config: Option<PathBuf>,
    /// Run the seeded support-desk demo.
    #[arg(long)]
    demo: bool,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Claim store (and support desk) database: sqlite://PATH,
    /// postgres://... or mysql://... Overrides TOOLGATE_DB_URL and the
    /// file's `db`.
    #[arg(long, value_name = "URL")]
    db: Option<String>,
    /// error, warn, info, debug or trace. Overrides RUST_LOG.
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<tracing::Level>,
}

/// A deployment's executor: each tool's `[[tools]]` executor, except that
/// a tool with `executor = { kind = "mcp_upstream" }` goes to the MCP
/// upstream serving it. One executor for both front doors: a proposal for
/// an upstream's tool posted to `/v1/decisions` reaches that upstream too,
/// and reconciliation asks the owner of each write.
pub struct ServeExecutor {
    deploy: DeployExecutor,
    upstreams: Arc<UpstreamExecutor>,
}

impl ServeExecutor {
    /// The deployment's executor, with `upstreams` for its `mcp_upstream`
    /// tools.
    pub(crate) fn new(deploy: DeployExecutor, upstreams: Arc<UpstreamExecutor>) -> Self {
        Self { deploy, upstreams }
    }

    fn is_upstream(&self, tool: &str) -> bool {
        matches!(self.deploy.tool(tool), Some(ToolExecutor::McpUpstream))
    }
}

impl Executor for ServeExecutor {
    async fn execute(&self, permit: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        if self.is_upstream(permit.tool()) {
            self.upstreams.execute(permit).await
        } else {
            self.deploy.execute(permit).await
        }
    }

    fn kind(&self, tool: &str) -> ExecutorKind {
        self.deploy.kind(tool)
    }

    async fn reconcile(&self, claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        if self.is_upstream(claim.proposal.tool()) {
            self.upstreams.reconcile(claim).await
        } else {
            self.deploy.reconcile(claim).await
        }
    }

    fn answered(
        &self,
        tool: &str,
        receipt: toolgate::claim::JsonText,
    ) -> Result<toolgate::claim::JsonText, ExecError> {
        if self.is_upstream(tool) {
            self.upstreams.answered(tool, receipt)
        } else {
            self.deploy.answered(tool, receipt)
        }
    }
}

/// A service ready to serve through its doors: the HTTP sidecar, and with
/// [[tools]] the MCP gateway's `/mcp` beside it when the file has
/// [[upstreams]] (an empty router otherwise).
struct Ready {
    http: AppState,
    mcp: Router,
}

fn fail(what: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("toolgate serve: {what}: {e}");
    ExitCode::from(2)
}

pub fn run(args: Args) -> ExitCode {
    // JSON lines on stderr: one event per request and per decision.
    if let Err(e) = crate::logging::init(args.log_level) {
        return fail("logging", e);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail("starting the async runtime", e),
    };
    runtime.block_on(async move {
        match prepare(&args).await {
            Ok((ready, listen)) => serve(ready, listen).await,
            Err(code) => code,
        }
    })
}

struct DemoKey {
    principal: &'static str,
    capabilities: &'static [&'static str],
    mode: ExecutionMode,
}

const DEMO_KEYS: [DemoKey; 6] = [
    DemoKey {
        principal: "agent-ana",
        capabilities: &["credit:issue"],
        mode: ExecutionMode::InProcess,
    },
    DemoKey {
        principal: "agent-ben",
        capabilities: &["credit:issue"],
        mode: ExecutionMode::InProcess,
    },
    DemoKey {
        principal: "agent-cy",
        capabilities: &[],
        mode: ExecutionMode::InProcess,
    },
    DemoKey {
        principal: "agent-php",
        capabilities: &["credit:issue"],
        mode: ExecutionMode::Client,
    },
    DemoKey {
        principal: "reviewer",
        capabilities: &["toolgate:review"],
        mode: ExecutionMode::InProcess,
    },
    DemoKey {
        principal: "operator",
        capabilities: &["toolgate:operate", "toolgate:metrics"],
        mode: ExecutionMode::InProcess,
    },
];

/// What `serve` runs on besides its database's state: the policy, the Cedar
/// policies, the database URL, the keys, the door's and the service's
/// settings, and the listening address.
type ServeParts = (
    Policy,
    String,
    String,
    Vec<ApiKey>,
    (Settings, toolgate_service::Settings),
    SocketAddr,
);

/// `--demo`'s parts: a fresh database unless `--db` names one, the support
/// desk's policies and one new key per demo principal (printed: the demo's
/// user has no other way to learn them).
fn demo_parts(args: &Args, default_listen: SocketAddr) -> Result<ServeParts, ExitCode> {
    let db = match &args.db {
        Some(d) => d.clone(),
        None => {
            // A fresh file per run: the demo always starts from its seed.
            let dir = std::env::temp_dir().join(format!(
                "toolgate-demo-{}-{}",
                std::process::id(),
                toolgate_store::now_millis()
            ));
            std::fs::create_dir_all(&dir).map_err(|e| fail("creating the demo directory", e))?;
            format!("sqlite://{}", dir.join("toolgate.sqlite").display())
        }
    };
    let policy = Policy::load(toolgate_support_desk::POLICY)
        .map_err(|e| fail("the support-desk policy", e))?;
    let mut keys = Vec::new();
    println!(
        "toolgate serve --demo: support desk on {}",
        toolgate_store::redact_url(&db)
    );
    for k in &DEMO_KEYS {
        let secret = format!(
            "tg_demo_{}",
            toolgate_store::fresh_holder()
                .map_err(|e| fail("generating keys", e))?
                .to_hex()
        );
        println!(
            "demo key {} {} capabilities={} execution={}",
            k.principal,
            secret,
            k.capabilities.join(","),
            k.mode.as_str()
        );
        keys.push(ApiKey {
            sha256: ApiKey::digest(&secret),
            principal: Principal::new(k.principal, k.capabilities.iter().copied())
                .map_err(|e| fail("a demo principal", e))?,
            mode: k.mode,
            act_for_users: false,
        });
    }
    let listen = args.listen.unwrap_or(default_listen);
    Ok((
        policy,
        desk_cedar::POLICIES.to_owned(),
        db,
        keys,
        (
            Settings::default(),
            // The demo is served over plain HTTP (toolgate never speaks
            // TLS itself): its reviewer cookie cannot be `Secure`.
            toolgate_service::Settings {
                public_url: Some(format!("http://{listen}")),
                ..toolgate_service::Settings::default()
            },
        ),
        listen,
    ))
}

async fn prepare(args: &Args) -> Result<(Ready, SocketAddr), ExitCode> {
    let default_listen: SocketAddr = ([127, 0, 0, 1], 8080).into();
    let (policy, cedar, db, keys, (settings, service), listen) = if args.demo {
        demo_parts(args, default_listen)?
    } else {
        let Some(path) = &args.config else {
            return Err(fail("usage", "--config FILE or --demo"));
        };
        // One loader for `serve` and `config check`: what the check accepts
        // is what starts.
        let d = config::load(path).map_err(|e| {
            eprintln!("toolgate serve: {e}");
            ExitCode::from(2)
        })?;
        let file_db = d.db.as_deref().map(|db| (db, path.as_path()));
        let (db, _) = resolve_db(args.db.as_deref(), file_db).ok_or_else(|| {
            fail(
                "configuration",
                format!(
                    "{}: db: no database (the file's `db`, {DB_URL_ENV} or --db)",
                    path.display()
                ),
            )
        })?;
        let listen = args.listen.or(d.listen).unwrap_or(default_listen);
        if let Application::Tools(section) = &d.application {
            let keys = KeyRing::new(d.keys.into_iter().map(|k| k.key))
                .map_err(|e| fail("configuration", e))?;
            let started = async {
                let (gateway, upstreams) = McpGateway::start(&d.upstreams, &d.policy_path).await?;
                let service = tools_state(
                    &db,
                    path,
                    section,
                    d.policy,
                    &d.cedar,
                    keys.clone(),
                    d.service,
                    upstreams,
                )
                .await?;
                let mcp = gateway.router(&service, &d.http, keys);
                Ok::<_, String>((service, mcp))
            };
            let (service, mcp) = started.await.map_err(|e| {
                eprintln!("toolgate serve: {e}");
                ExitCode::from(2)
            })?;
            let ready = Ready {
                http: AppState::new(service, d.http.clone()),
                mcp,
            };
            return Ok((ready, listen));
        }
        let keys = d.keys.into_iter().map(|k| k.key).collect();
        (
            d.policy,
            d.cedar,
            db,
            keys,
            (d.http.clone(), d.service),
            listen,
        )
    };
    let keys = KeyRing::new(keys).map_err(|e| fail("configuration", e))?;
    let seed = args.demo.then(toolgate_support_desk::demo_tickets);
    let (service, desk) = desk_state(
        &db,
        args.demo,
        policy,
        &cedar,
        keys,
        service,
        seed.as_deref(),
    )
    .await
    .map_err(|e| fail("starting", e))?;
    if let Some(tickets) = &seed {
        // The version as it is now: on a database the demo has run on
        // before, a ticket keeps the version its credits moved it to.
        for t in tickets {
            let version = desk
                .ticket_version(&t.id)
                .await
                .map_err(|e| fail("reading the demo tickets", e))?
                .unwrap_or(t.version);
            println!(
                "demo ticket {} customer={} assignee={} version={version}",
                t.id, t.customer_id, t.assignee
            );
        }
    }
    let ready = Ready {
        http: AppState::new(service, settings),
        mcp: Router::new(),
    };
    Ok((ready, listen))
}

/// The sidecar on a deployment file's [[tools]]: the claim store on `db`,
/// and each tool's entity, state and executor wiring, checked against the
/// policy and prepared against the application's database before anything
/// is served. An error names the file, the tool and the field.
#[expect(
    clippy::too_many_arguments,
    reason = "one deployment's parts, each from its own section of the file"
)]
async fn tools_state(
    db: &str,
    file: &std::path::Path,
    section: &toolgate_deploy::DeploySection,
    policy: Policy,
    cedar: &str,
    keys: KeyRing,
    settings: toolgate_service::Settings,
    upstreams: Arc<UpstreamExecutor>,
) -> Result<Service, String> {
    let base = file.parent().unwrap_or(std::path::Path::new("."));
    let deployment = toolgate_deploy::Prepared::load(section, base, &policy, cedar)
        .await
        .map_err(|e| e.in_file(file).to_string())?;
    // A new SQLite claim store is created on first start, and said so
    // loudly: a mistyped path shows in the log instead of passing unseen.
    // Its directory must exist.
    let new_sqlite = db
        .strip_prefix("sqlite://")
        .map(|p| p.split('?').next().unwrap_or(p))
        .filter(|p| !std::path::Path::new(p).exists());
    if let Some(path) = new_sqlite {
        eprintln!("toolgate serve: creating a new claim store at {path}");
    }
    let options = StoreOptions {
        create_if_missing: new_sqlite.is_some(),
        ..StoreOptions::default()
    };
    let store = AnyClaimStore::connect_with(db, options)
        .await
        .map_err(|e| format!("connecting to {}: {e}", toolgate_store::redact_url(db)))?;
    let components = Parts::new(
        deployment.authorizer,
        deployment.state,
        store,
        ServeExecutor {
            deploy: deployment.executor,
            upstreams,
        },
    );
    Ok(Service::new(policy, components, keys, settings))
}

/// The MCP gateway's parts for a deployment's [[upstreams]]: a client per
/// upstream, the tools served (mapped, pinned, still offered as pinned, in
/// the policy), the watch that compares the pins again while serving, and
/// the executor that sends each tool to its upstream. A tool withheld at
/// start is said on stderr and in the log, with why.
struct McpGateway {
    watch: Option<Watch>,
    catalog: Catalog,
    allowed_hosts: Vec<String>,
    /// The upstreams called as the person, by name.
    exchangers: HashMap<String, Arc<Exchanger>>,
    /// Where the reads the service allows are forwarded (the writes'
    /// executor: the same upstream, as the same person).
    reads: Arc<UpstreamExecutor>,
}

impl McpGateway {
    /// The gateway, and the executor that sends each of its tools to its
    /// upstream (the deployment's executor wraps it).
    async fn start(
        upstreams: &[Upstream],
        policy_path: &std::path::Path,
    ) -> Result<(Self, Arc<UpstreamExecutor>), String> {
        let mut gateway = Self {
            watch: None,
            catalog: Catalog::default(),
            allowed_hosts: HttpSettings::default().allowed_hosts,
            exchangers: HashMap::new(),
            reads: Arc::new(UpstreamExecutor::new()),
        };
        let mut executor = UpstreamExecutor::new();
        if upstreams.is_empty() {
            let reads = Arc::clone(&gateway.reads);
            return Ok((gateway, reads));
        }
        // The catalog checks calls against the same policy the sidecar
        // decides with: the same file through the same loader.
        let text = std::fs::read_to_string(policy_path)
            .map_err(|e| format!("reading {}: {e}", policy_path.display()))?;
        let policy = Policy::load_with(&text, &toolgate_mcp::config::argument_scopes(upstreams))
            .map_err(|e| format!("{}: {e}", policy_path.display()))?;
        let mut watch = Watch::new(Arc::new(policy));
        for u in upstreams {
            let pins =
                PinFile::read(&u.pins).map_err(|e| format!("upstreams[{}].pins: {e}", u.name))?;
            let client = UpstreamClient::connect(u)
                .await
                .map_err(|e| format!("upstreams[{}]: {e}", u.name))?;
            let offered = client
                .offered()
                .await
                .map_err(|e| format!("upstreams[{}]: tools/list: {e}", u.name))?;
            let entries = client
                .offered_entries()
                .await
                .map_err(|e| format!("upstreams[{}]: resources and prompts: {e}", u.name))?;
            let client = Arc::new(client);
            let as_person = match &u.token_exchange {
                Some(x) => {
                    let exchanger = Arc::new(Exchanger::new(&u.name, x.clone())?);
                    gateway
                        .exchangers
                        .insert(u.name.clone(), Arc::clone(&exchanger));
                    Some(Arc::new(AsPerson::new(u.clone(), exchanger)))
                }
                None => None,
            };
            route_upstream(&mut executor, u, &pins, &client, as_person.as_ref());
            watch.add(u, pins, client, &offered, &entries);
        }
        let (catalog, notes) = watch.catalog();
        for (upstream, note) in notes {
            eprintln!("toolgate serve: upstreams[{upstream}]: {note}");
            tracing::warn!(upstream = upstream.as_str(), "{note}");
        }
        // stderr: on `mcp stdio` stdout is the protocol's.
        eprintln!(
            "toolgate: mcp gateway: {} tool(s) and {} resource(s), template(s) and prompt(s) \
             served from {} upstream(s)",
            catalog.len(),
            catalog.entry_count(),
            upstreams.len()
        );
        gateway.catalog = catalog;
        gateway.watch = Some(watch);
        gateway.reads = Arc::new(executor);
        let reads = Arc::clone(&gateway.reads);
        Ok((gateway, reads))
    }

    /// `/mcp` deciding with `service`, or no route at all for a deployment
    /// without upstreams.
    fn router(
        self,
        service: &Service,
        limits: &toolgate_service::HttpLimits,
        keys: KeyRing,
    ) -> Router {
        let Some(watch) = self.watch else {
            return Router::new();
        };
        let mut allowed_hosts = self.allowed_hosts;
        // The host reviewers reach the deployment at is one clients may
        // use too (rmcp refuses any other Host: DNS-rebinding protection).
        if let Some(host) = service.settings().public_url.as_deref().and_then(url_host) {
            allowed_hosts.push(host);
        }
        let settings = HttpSettings {
            allowed_hosts,
            body_limit: limits.body_limit,
            // The HTTP door's deadline for a whole request, for the body.
            body_timeout: limits.request_timeout,
            public_url: service.settings().public_url.clone(),
            sessions: toolgate_mcp::sessions::SessionLimits::default(),
            allowed_origins: allowed_origins(service.settings().public_url.as_deref()),
        };
        let gateway = Gateway::calling_as_person(
            Arc::clone(watch.policy()),
            self.catalog,
            Identity::Keys(keys.clone()),
            Served::new(service.clone()).forwarding_reads(self.reads),
            self.exchangers,
        );
        watch.spawn(gateway.clone());
        toolgate_mcp::http::router(gateway, keys, service.issuers().clone(), &settings)
    }
}

/// Routes each of `u`'s mapped tools to `client` (or, with token exchange,
/// to the person's own connection through `as_person`), with its status
/// tool and its pinned output schema (which an operator's answer for one of
/// its claims must meet).
fn route_upstream(
    executor: &mut UpstreamExecutor,
    u: &Upstream,
    pins: &PinFile,
    client: &Arc<UpstreamClient>,
    as_person: Option<&Arc<AsPerson>>,
) {
    for t in &u.tools {
        let status = t.status_tool.clone();
        match as_person {
            Some(p) => {
                executor.route_as_person(&t.name, Arc::clone(client), status, Arc::clone(p));
            }
            None => executor.route(&t.name, Arc::clone(client), status),
        }
        if let Some(schema) = pins
            .pins
            .get(&t.name)
            .and_then(|p| p.output_schema.as_ref())
        {
            executor.expect_output(&t.name, schema);
        }
    }
}

/// The executor `toolgate claims reconcile` asks and shapes answers with
/// for a deployment's `mcp_upstream` tools: a connection to each upstream
/// (the gateway's own credential: status tools are asked over it), each
/// tool routed with its status tool and pinned output schema.
pub(crate) async fn upstream_executor(upstreams: &[Upstream]) -> Result<UpstreamExecutor, String> {
    let mut executor = UpstreamExecutor::new();
    for u in upstreams {
        let pins =
            PinFile::read(&u.pins).map_err(|e| format!("upstreams[{}].pins: {e}", u.name))?;
        let client = Arc::new(
            UpstreamClient::connect(u)
                .await
                .map_err(|e| format!("upstreams[{}]: {e}", u.name))?,
        );
        route_upstream(&mut executor, u, &pins, &client, None);
    }
    Ok(executor)
}

/// `toolgate mcp stdio`: the gateway of the deployment at `config` on
/// stdin/stdout, for the one caller whose API key is in `key_env`, with
/// the components `serve` builds (claim store, authoriser, state sources,
/// review queue, budgets, audit). Logs go to stderr.
pub fn run_stdio(config: &std::path::Path, db: Option<&str>, key_env: &str) -> ExitCode {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        eprintln!("toolgate mcp stdio: {what}: {e}");
        ExitCode::from(2)
    };
    if let Err(e) = crate::logging::init(None) {
        return fail("logging", &e);
    }
    let Some(secret) = std::env::var(key_env).ok().filter(|k| !k.is_empty()) else {
        return fail(
            "the caller's key",
            &format!("{key_env} is not set (an API key of the file's [[keys]])"),
        );
    };
    let d = match config::load(config) {
        Ok(d) => d,
        Err(e) => return fail("configuration", &e),
    };
    let Application::Tools(section) = &d.application else {
        return fail(
            "configuration",
            &"the MCP gateway needs [[tools]] and [[upstreams]]",
        );
    };
    if d.upstreams.is_empty() {
        return fail("configuration", &"no [[upstreams]]: nothing to serve");
    }
    let file_db = d.db.as_deref().map(|db| (db, config));
    let Some((db, _)) = resolve_db(db, file_db) else {
        return fail(
            "configuration",
            &format!("db: no database (the file's `db`, {DB_URL_ENV} or --db)"),
        );
    };
    let keys = match KeyRing::new(d.keys.into_iter().map(|k| k.key)) {
        Ok(k) => k,
        Err(e) => return fail("configuration", &e),
    };
    let Some(principal) = keys.lookup(&secret).map(|k| k.principal.clone()) else {
        return fail(
            "the caller's key",
            &format!("{key_env} is not a key of the file"),
        );
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail("starting the async runtime", &e),
    };
    runtime.block_on(async move {
        let (gateway, executor) = match McpGateway::start(&d.upstreams, &d.policy_path).await {
            Ok(g) => g,
            Err(e) => return fail("starting", &e),
        };
        let McpGateway {
            watch,
            catalog,
            exchangers,
            reads,
            ..
        } = gateway;
        let service = match tools_state(
            &db, config, section, d.policy, &d.cedar, keys, d.service, executor,
        )
        .await
        {
            Ok(s) => s,
            Err(e) => return fail("starting", &e),
        };
        let Some(watch) = watch else {
            return fail("configuration", &"no [[upstreams]]: nothing to serve");
        };
        let limit = d.http.body_limit;
        // A key has no person's token: a tool called as the person is
        // refused before its decision, as on /mcp.
        let gateway = Gateway::calling_as_person(
            Arc::clone(watch.policy()),
            catalog,
            Identity::Fixed(principal),
            Served::new(service.clone()).forwarding_reads(reads),
            exchangers,
        );
        watch.spawn(gateway.clone());
        let served = toolgate_mcp::stdio::serve_lines(
            gateway,
            tokio::io::stdin(),
            tokio::io::stdout(),
            limit,
        )
        .await;
        // Every decision started finishes and is recorded before exit.
        service.drain().await;
        match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail("serving", &e),
        }
    })
}

/// `gate.example.com` (or `gate.example.com:8443`) of a URL.
/// The browser origins `/mcp` serves: the deployment's own (its
/// `public_url`), and, for a gateway on loopback (no `public_url`, or one
/// on a loopback host), pages of this machine on any port, as the `Host`
/// check allows loopback names. A page of any other site, DNS-rebound to
/// this machine or not, is refused.
fn allowed_origins(public_url: Option<&str>) -> Vec<String> {
    let own = public_url.and_then(url_origin);
    let loopback = public_url.and_then(url_host).is_none_or(|h| {
        let name = match h.find(']') {
            Some(end) => &h[..=end],
            None => h.split(':').next().unwrap_or(""),
        };
        matches!(name, "127.0.0.1" | "localhost" | "[::1]")
    });
    let mut origins: Vec<String> = own.into_iter().collect();
    if loopback {
        origins.extend(
            ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"].map(String::from),
        );
    }
    origins
}

/// `scheme://host[:port]` of `url`: the origin a browser sends for a page
/// there.
fn url_origin(url: &str) -> Option<String> {
    let scheme = url.split_once("://")?.0;
    url_host(url).map(|host| format!("{scheme}://{host}"))
}

fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let host = rest.split(['/', '?', '#']).next()?;
    (!host.is_empty()).then(|| host.to_owned())
}

async fn serve(ready: Ready, listen: SocketAddr) -> ExitCode {
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => return fail(&format!("binding {listen}"), e),
    };
    let addr = match listener.local_addr() {
        Ok(addr) => addr,
        Err(e) => return fail("reading the bound address", e),
    };
    println!("listening on http://{addr}");
    // The bound address, not the requested one: with port 0 (or several
    // processes on one host) the log must say which port this one has.
    tracing::info!(event = "start", "{}", json!({"listen": addr.to_string()}));
    match toolgate_http::serve_with(
        listener,
        ready.http,
        ready.mcp,
        shutdown_signal(),
        Duration::from_secs(5),
    )
    .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail("serving", e),
    }
}

/// SIGTERM (how service managers stop a process) or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

#[cfg(test)]
mod tests {
    use super::allowed_origins;

    #[test]
    fn a_public_gateway_serves_its_own_origin_and_a_local_one_this_machine() {
        assert_eq!(
            allowed_origins(Some("https://gate.example.com/base/")),
            ["https://gate.example.com"]
        );
        let local = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"];
        assert_eq!(allowed_origins(None), local);
        for url in [
            "http://127.0.0.1:8080",
            "http://localhost",
            "http://[::1]:9000/",
        ] {
            let origins = allowed_origins(Some(url));
            assert_eq!(origins[1..], local, "{url}");
            assert_eq!(origins[0], url.trim_end_matches('/'), "{url}");
        }
        // A name that only starts like loopback is not loopback.
        assert_eq!(
            allowed_origins(Some("https://localhost.evil.example")),
            ["https://localhost.evil.example"]
        );
    }
}
