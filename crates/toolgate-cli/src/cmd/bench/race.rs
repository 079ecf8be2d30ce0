//! `toolgate bench race`: N workers, each on its own database connection,
//! propose a credit for the same ticket version, for each of M tickets,
//! through the real pipeline (Cedar authorisation, claim store, support-desk
//! executor). One operation key must admit exactly one write.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, json};
use tokio::sync::Barrier;
use toolgate::contract::{self, CheckOptions, Policy};
use toolgate::pipeline::{
    Decision, Gate, GateError, Outcome, Principal, Reason, Request, StateError, StateScope,
    StateSource, StateVersion, decide,
};
use toolgate::provider::Provider;
use toolgate_cedar::CedarAuthorizer;
use toolgate_support_desk::cedar::{self as desk_cedar, DeskEntities};
use toolgate_support_desk::{SeedTicket, SupportDesk};

use toolgate_store::{AnyClaimStore, StoreOptions, fresh_holder, now_millis};

/// The support-desk policy the race proposes against.
const POLICY: &str = toolgate_support_desk::POLICY;

/// The scope field `--key-includes-arguments` adds to the operation key.
const ARGUMENTS_FIELD: &str = "arguments_fingerprint";

/// The one agent every worker acts for (the ticket's assignee): the race is
/// about one operation, not about who may perform it.
pub(super) const AGENT: &str = "race-agent";

/// Race N workers per ticket and count winners and credits.
///
/// Each worker opens its own connection (a pool of one) and, for each of M
/// freshly seeded tickets, proposes apply_goodwill_credit against the
/// ticket's current version with its own amount and its own wording of the
/// reply. Every proposal goes through contract check, capability, Cedar
/// authorisation, operation key, state read, claim (which is also the lookup), executor
/// (a conditional write: UPDATE tickets ... WHERE id = ? AND version = ?)
/// and completion. Prints one line:
///   tickets=M winners=<claims won> credits=<credit rows>
///     duplicates=<tickets with more than one credit> elapsed_s=<s>
/// and, on mysql://, what failover did (summed over the workers' stores):
///     failovers=<moves to another node> unknown_commits=<COMMITs with an
///     unknown outcome> settled=<claims settled by reading back>
///     unsettled=<read-backs that failed too>
/// A mysql:// URL may name several hosts (a Galera cluster's nodes,
/// mysql://u@h1:4306,h2:4307,h3:4308/db): the workers' stores then start on
/// the nodes in turn, so the race spreads over them.
/// Exit 1 if any ticket has other than one winner or other than one credit.
///
/// --key-includes-arguments shows the anti-pattern: the proposal's
/// fingerprint becomes part of the operation key, so every worker's claim
/// wins, and only the executor's version precondition keeps the credits at
/// one per ticket. Then exit 1 only if a ticket has other than one credit.
///
/// URLs: sqlite://PATH, postgres://... or mysql://... Exit 2 for usage and
/// connection errors.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The database (claims and support-desk tables): sqlite://PATH,
    /// postgres://... or mysql://...
    #[arg(long, value_name = "URL")]
    db: String,
    /// Concurrent workers, each with its own connection.
    #[arg(long, value_name = "N", default_value_t = 12)]
    workers: u32,
    /// Tickets to race on.
    #[arg(long, value_name = "M", default_value_t = 150)]
    tickets: u32,
    /// The anti-pattern: put the arguments' fingerprint in the operation key.
    #[arg(long)]
    key_includes_arguments: bool,
    /// Fault-test hook: claim one operation, print its key and block before
    /// executing, so a test can SIGKILL the process mid-operation.
    #[arg(long, hide = true)]
    hold_after_claim: bool,
    /// The budget race instead: the workers propose 10.00 credits on
    /// distinct tickets of one customer against a daily budget of 100.00
    /// (`limit= reserved= executed_total= over_limit_decisions= elapsed_s=`;
    /// exit 1 if the credits pass the limit or, with demand over it, do not
    /// reach it exactly).
    #[arg(long)]
    budget: bool,
}

/// The support desk's state source, with a meeting point: in the
/// anti-pattern run every worker reads the version before any writes, so
/// all of them propose against the same version and reach the claim.
struct MeetingState {
    desk: SupportDesk,
    after_read: Option<Arc<Barrier>>,
}

impl StateSource for MeetingState {
    async fn current_version(&self, scope: StateScope<'_>) -> Result<StateVersion, StateError> {
        let v = self.desk.current_version(scope).await;
        if let Some(b) = &self.after_read {
            b.wait().await;
        }
        v
    }
}

/// Blocks forever before executing (the fault tests' hook), after printing
/// `claimed KEY` and then its text (`bench race --budget` names the
/// customer whose budget the claim reserved).
pub(super) struct Hold(pub(super) String);

impl toolgate::pipeline::Executor for Hold {
    async fn execute(
        &self,
        permit: toolgate::pipeline::ExecPermit<'_>,
    ) -> Result<toolgate::pipeline::ExecOutcome, toolgate::pipeline::ExecError> {
        println!("claimed {}{}", permit.key(), self.0);
        loop {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    }

    async fn reconcile(
        &self,
        _claim: &toolgate::claim::ClaimRecord,
    ) -> Result<toolgate::claim::ReconcileOutcome, toolgate::pipeline::ExecError> {
        Err(toolgate::pipeline::ExecError::new(
            "the hold executor never reconciles",
        ))
    }
}

pub(super) struct Worker {
    pub(super) store: AnyClaimStore,
    pub(super) desk: SupportDesk,
    pub(super) authz: CedarAuthorizer<DeskEntities>,
}

impl Worker {
    /// A worker's own store on `db` with one connection, so that workers
    /// race each other rather than share a pool, and the desk and its Cedar
    /// authoriser over it.
    pub(super) async fn connect(db: &str) -> Result<Worker, String> {
        let options = StoreOptions {
            max_connections: 1,
            ..StoreOptions::default()
        };
        let store = AnyClaimStore::connect_with(db, options)
            .await
            .map_err(|e| e.to_string())?;
        let desk = SupportDesk::on_store(&store)
            .await
            .map_err(|e| e.to_string())?;
        let authz = CedarAuthorizer::new(
            desk_cedar::POLICIES,
            &desk_cedar::mapping(),
            DeskEntities(desk.clone()),
        )
        .map_err(|e| e.to_string())?;
        Ok(Worker { store, desk, authz })
    }
}

#[derive(Default, Clone, Copy)]
struct Tally {
    won: u32,
    errors: u32,
}

pub fn run(args: Args) -> ExitCode {
    if args.workers == 0 || args.tickets == 0 {
        eprintln!("toolgate bench race: --workers and --tickets must be at least 1");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return crate::io::io_failure("starting the async runtime", &e),
    };
    match runtime.block_on(race(&args)) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("toolgate bench race: {message}");
            ExitCode::from(2)
        }
    }
}

fn policy(key_includes_arguments: bool) -> Result<Policy, String> {
    let text = if key_includes_arguments {
        let from = r#"operation_key = ["customer_id", "ticket_id", "version_seen"]"#;
        let to = format!(
            r#"operation_key = ["customer_id", "ticket_id", "version_seen", "{ARGUMENTS_FIELD}"]"#
        );
        if !POLICY.contains(from) {
            return Err("the support-desk policy's operation_key line has changed".to_owned());
        }
        POLICY.replacen(from, &to, 1)
    } else {
        POLICY.to_owned()
    };
    Policy::load(&text).map_err(|e| e.to_string())
}

/// The store at `db`, the support desk on it, and an id of this run that
/// names its tickets, so that runs on one database never share a row.
pub(super) async fn desk_for_run(db: &str) -> Result<(AnyClaimStore, SupportDesk, String), String> {
    let setup = AnyClaimStore::connect(db)
        .await
        .map_err(|e| e.to_string())?;
    let desk = SupportDesk::on_store(&setup)
        .await
        .map_err(|e| e.to_string())?;
    let run_id = fresh_holder().map_err(|e| e.to_string())?.to_hex();
    Ok((setup, desk, run_id[..12].to_owned()))
}

async fn race(args: &Args) -> Result<ExitCode, String> {
    if args.budget {
        return super::race_budget::race(
            &args.db,
            args.workers,
            args.tickets,
            args.hold_after_claim,
        )
        .await;
    }
    let policy = Arc::new(policy(args.key_includes_arguments)?);
    let (_setup, desk, run_id) = desk_for_run(&args.db).await?;
    let tickets = SeedTicket::series(
        &format!("race-{run_id}"),
        &format!("cust-{run_id}"),
        AGENT,
        args.tickets as usize,
    );
    desk.seed(&tickets).await.map_err(|e| e.to_string())?;

    // Connect the workers one after another (each runs the migrations
    // check), then start them together.
    let mut workers = Vec::new();
    let workers_n = if args.hold_after_claim {
        1
    } else {
        args.workers
    };
    for _ in 0..workers_n {
        workers.push(Worker::connect(&args.db).await?);
    }

    if args.hold_after_claim {
        return Err(hold_after_claim(&policy, &workers[0], &tickets[0], args).await);
    }

    let tickets = Arc::new(tickets);
    let start_line: Vec<Arc<Barrier>> = (0..args.tickets)
        .map(|_| Arc::new(Barrier::new(workers_n as usize)))
        .collect();
    let after_read: Vec<Arc<Barrier>> = (0..args.tickets)
        .map(|_| Arc::new(Barrier::new(workers_n as usize)))
        .collect();
    let started = Instant::now();
    let mut handles = Vec::new();
    for (w, worker) in workers.into_iter().enumerate() {
        let tickets = Arc::clone(&tickets);
        let policy = Arc::clone(&policy);
        let start_line = start_line.clone();
        let after_read = after_read.clone();
        let anti = args.key_includes_arguments;
        handles.push(tokio::spawn(async move {
            let mut tallies = Vec::with_capacity(tickets.len());
            for (i, ticket) in tickets.iter().enumerate() {
                start_line[i].wait().await;
                let state = MeetingState {
                    desk: worker.desk.clone(),
                    after_read: anti.then(|| Arc::clone(&after_read[i])),
                };
                let gate = Gate {
                    policy: &policy,
                    authorizer: &worker.authz,
                    state: &state,
                    claims: &worker.store,
                    executor: &worker.desk,
                };
                let (amount, reply) = worker_credit(w);
                let d = propose_credit(&gate, &policy, ticket, amount, &reply, anti).await;
                let mut t = Tally::default();
                match d {
                    Ok(d) if won(&d) => t.won = 1,
                    Ok(_) => {}
                    Err(e) => {
                        eprintln!("worker {w} ticket {}: {e}", ticket.id);
                        t.errors = 1;
                    }
                }
                tallies.push(t);
            }
            (tallies, failover_counts(&worker.store))
        }));
    }
    let mut per_ticket = vec![Tally::default(); tickets.len()];
    let mut failover: Option<toolgate_store::mysql::FailoverCounts> = None;
    for h in handles {
        let (tallies, counts) = h.await.map_err(|e| format!("a worker failed: {e}"))?;
        if let Some(c) = counts {
            let sum = failover.get_or_insert_default();
            sum.failovers += c.failovers;
            sum.unknown_commits += c.unknown_commits;
            sum.settled_by_read_back += c.settled_by_read_back;
            sum.unsettled += c.unsettled;
        }
        for (sum, t) in per_ticket.iter_mut().zip(tallies) {
            sum.won += t.won;
            sum.errors += t.errors;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();

    report(&desk, &tickets, &per_ticket, failover, elapsed, args).await
}

/// `--hold-after-claim`: one worker claims the first ticket and its
/// executor never returns (a process to kill mid-write); what it returns
/// if it does is the error.
async fn hold_after_claim(
    policy: &Arc<Policy>,
    w: &Worker,
    ticket: &SeedTicket,
    args: &Args,
) -> String {
    let state = MeetingState {
        desk: w.desk.clone(),
        after_read: None,
    };
    let gate = Gate {
        policy,
        authorizer: &w.authz,
        state: &state,
        claims: &w.store,
        executor: &Hold(String::new()),
    };
    let (amount, reply) = worker_credit(0);
    let d = propose_credit(
        &gate,
        policy,
        ticket,
        amount,
        &reply,
        args.key_includes_arguments,
    )
    .await;
    format!("the hold executor returned: {d:?}")
}

/// Counts the credits each ticket got and prints the run's line: exit 1
/// unless every ticket has exactly one credit (and, but for the
/// anti-pattern, one winner) and no worker failed.
async fn report(
    desk: &SupportDesk,
    tickets: &[SeedTicket],
    per_ticket: &[Tally],
    failover: Option<toolgate_store::mysql::FailoverCounts>,
    elapsed: f64,
    args: &Args,
) -> Result<ExitCode, String> {
    let mut credits_total = 0i64;
    let mut duplicates = 0u32;
    let mut bad = 0u32;
    for (ticket, tally) in tickets.iter().zip(per_ticket) {
        let credits = desk
            .credit_count(&ticket.id)
            .await
            .map_err(|e| e.to_string())?;
        credits_total += credits;
        if credits > 1 {
            duplicates += 1;
        }
        let winners_ok = args.key_includes_arguments || tally.won == 1;
        if credits != 1 || !winners_ok || tally.errors > 0 {
            bad += 1;
        }
    }
    let winners: u32 = per_ticket.iter().map(|t| t.won).sum();
    let failover = failover.map_or_else(String::new, |c| {
        format!(
            " failovers={} unknown_commits={} settled={} unsettled={}",
            c.failovers, c.unknown_commits, c.settled_by_read_back, c.unsettled
        )
    });
    println!(
        "tickets={} winners={winners} credits={credits_total} duplicates={duplicates} elapsed_s={elapsed:.3}{failover}",
        args.tickets
    );
    Ok(if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A MySQL store's failover counters; none on the other backends.
fn failover_counts(store: &AnyClaimStore) -> Option<toolgate_store::mysql::FailoverCounts> {
    match store {
        AnyClaimStore::MySql(s) => Some(s.failover_counts()),
        _ => None,
    }
}

/// Whether this decision's attempt won its claim (executed, or ran the
/// executor and lost on the precondition, or could not finish).
fn won(d: &Decision) -> bool {
    d.outcome() == Outcome::Executed
        || matches!(
            d.reason(),
            Some(Reason::PreconditionFailed | Reason::LeaseLost | Reason::ExecutorFailed)
        )
}

/// Worker `worker`'s credit: a different amount and a differently worded
/// reply per worker.
fn worker_credit(worker: usize) -> (i64, String) {
    let amount = 1 + (100 + 35 * worker as i64) % 2000;
    let reply = format!(
        "Worker {worker} here: I have applied a goodwill credit of {amount} cents for the late delivery."
    );
    (amount, reply)
}

/// One agent's goodwill credit of `amount` on `ticket`, at the ticket's
/// seeded version, through the whole pipeline (`bench race` and
/// `bench race --budget`).
pub(super) async fn propose_credit<A, S, E>(
    gate: &Gate<'_, A, S, AnyClaimStore, E>,
    policy: &Policy,
    ticket: &SeedTicket,
    amount: i64,
    reply: &str,
    key_includes_arguments: bool,
) -> Result<Decision, GateError>
where
    A: toolgate::pipeline::Authorizer,
    S: StateSource,
    E: toolgate::pipeline::Executor,
{
    let body = json!({
        "outcome": "action",
        "reply": reply,
        "proposed_action": {
            "tool": "apply_goodwill_credit",
            "arguments": {"amount_minor": amount, "reason_code": "late_delivery"},
        },
    })
    .to_string();
    let proposal = contract::check(
        policy,
        Provider::Envelope,
        body.as_bytes(),
        &CheckOptions::default(),
    );
    let mut scope = Map::new();
    scope.insert("customer_id".into(), json!(ticket.customer_id));
    scope.insert("ticket_id".into(), json!(ticket.id));
    if key_includes_arguments {
        // The anti-pattern under demonstration, not a recommendation.
        if let Some(a) = proposal.action() {
            scope.insert(ARGUMENTS_FIELD.into(), json!(a.fingerprint().to_hex()));
        }
    }
    let principal = Principal::new(AGENT, ["credit:issue"]).map_err(|e| {
        GateError::Corrupt(toolgate::claim::CorruptRecord::new(
            "principal",
            e.to_string(),
        ))
    })?;
    let seen = StateVersion::from(ticket.version);
    let holder = fresh_holder().map_err(GateError::Store)?;
    let scope = toolgate::pipeline::Scope::new(scope.clone(), Some(seen.clone()));
    let request = Request::plain(
        &principal,
        &scope,
        now_millis(),
        holder,
        Duration::from_secs(30),
    );
    decide(gate, proposal, &request).await
}
