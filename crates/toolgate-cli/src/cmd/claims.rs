//! `toolgate claims`: operations on the claim store (docs/design.md §8).

use std::process::ExitCode;

use serde_json::{Value, json};
use toolgate::claim::{ClaimRecord, ClaimStore, CorruptRow, UnixMillis};
use toolgate_store::{AnyClaimStore, StoreOptions};

use crate::cmd::config::{self, Application, DbArgs};
use crate::io::{io_failure, print_line};

/// Inspect the claim store.
#[derive(clap::Subcommand)]
pub enum Command {
    Stuck(StuckArgs),
    Reconcile(ReconcileArgs),
}

/// List stuck claims: in flight past their lease, outcome unknown.
///
/// Each one needs reconciliation against the downstream system; none may be
/// executed again. Output: one JSON object per line, oldest lease first:
///
///   {"operation_key":"<hex>","fingerprint":"<hex>","tool":"...",
///    "status":"in_flight","executor":"in_process"|"client"|"webhook",
///    "holder":"<hex>","claimed_at":<ms>,
///    "lease_expires_at":<ms>,"attempt":<n>,"idempotency_key":"<hex>[.<n>]",
///    "stuck_for_ms":<ms>,
///    "proposal":{"arguments":{...},"scope":{...},"version_seen":"...",
///                "proposer":"..."}}
///
/// A row that fails validation is never shown as a claim; it is reported as
///   {"corrupt":{"raw_key":"<hex>","field":"...","message":"..."}}
///
/// Times are Unix milliseconds. Exit 0 when the listing succeeded (also
/// when it is empty), 2 for usage, connection and database errors. A
/// SQLite file that does not exist is an error, never created.
///
/// The store: --db URL, else $TOOLGATE_DB_URL, else `db` in --config FILE.
/// Example, with the password out of `ps`:
///
///   $ export TOOLGATE_DB_URL='postgres://ops:secret@db/toolgate?sslmode=verify-full'
///   $ toolgate claims stuck --limit 50
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct StuckArgs {
    #[command(flatten)]
    db: DbArgs,
    /// List at most this many claims.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    limit: u32,
    /// Judge leases as of this time (Unix milliseconds) instead of now.
    #[arg(long, value_name = "MS")]
    now: Option<i64>,
}

pub fn run(command: Command) -> ExitCode {
    match command {
        Command::Stuck(args) => stuck(args),
        Command::Reconcile(args) => reconcile(args),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    crate::io::runtime().map_err(|e| io_failure("starting the async runtime", &e))
}

/// Opens the store at `db`, which must exist: an operator's mistyped path
/// must fail, not open an empty new store that reports nothing stuck.
async fn open_existing(db: &str) -> Result<AnyClaimStore, toolgate::claim::StoreError> {
    let options = StoreOptions {
        create_if_missing: false,
        ..StoreOptions::default()
    };
    AnyClaimStore::connect_with(db, options).await
}

fn stuck(args: StuckArgs) -> ExitCode {
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let now = args.now.map_or_else(toolgate_store::now_millis, UnixMillis);
    let url = match args.db.url() {
        Ok(url) => url,
        Err(e) => {
            eprintln!("toolgate claims stuck: {e}");
            return ExitCode::from(2);
        }
    };
    let listed = runtime.block_on(async {
        let store = open_existing(&url).await?;
        store.list_stuck(now, args.limit).await
    });
    let entries = match listed {
        Ok(entries) => entries,
        Err(e) => {
            eprintln!("toolgate claims stuck: {e}");
            return ExitCode::from(2);
        }
    };
    for entry in entries {
        let line = match entry {
            Ok(record) => claim_line(&record, now),
            Err(corrupt) => corrupt_line(&corrupt),
        };
        if let Err(e) = print_line(&line.to_string()) {
            return io_failure("writing stdout", &e);
        }
    }
    ExitCode::SUCCESS
}

fn claim_line(r: &ClaimRecord, now: UnixMillis) -> Value {
    // The record passed validation, so both decode; `null` would only mean
    // the limits changed between write and read, and is shown as such.
    let arguments = r.proposal.arguments_value().unwrap_or(Value::Null);
    let scope = toolgate::decode::decode_strict(
        r.proposal.scope().as_bytes(),
        &toolgate::claim::RECORD_JSON_LIMITS,
    )
    .unwrap_or(Value::Null);
    json!({
        "operation_key": r.key.to_hex(),
        "fingerprint": r.fingerprint.to_hex(),
        "tool": r.proposal.tool(),
        "status": r.status.as_str(),
        "executor": r.executor.as_str(),
        "holder": r.holder.to_hex(),
        "claimed_at": r.claimed_at.0,
        "lease_expires_at": r.lease_expires_at.0,
        "attempt": r.attempt,
        "idempotency_key": r.idempotency_key(),
        "stuck_for_ms": now.0.saturating_sub(r.lease_expires_at.0),
        "proposal": {
            "arguments": arguments,
            "scope": scope,
            "version_seen": r.proposal.version_seen(),
            "proposer": r.proposal.proposer(),
        },
    })
}

fn corrupt_line(c: &CorruptRow) -> Value {
    let raw_key: String = c.raw_key.iter().map(|b| format!("{b:02x}")).collect();
    json!({
        "corrupt": {
            "raw_key": raw_key,
            "field": c.problem.field(),
            "message": c.problem.message(),
        }
    })
}

/// Reconcile one stuck claim: record whether the write for this operation
/// happened downstream, never execute it again.
///
/// Each claim records which executor owns its write (`claims stuck` shows
/// it), and reconciliation is routed by it:
///
///   client      the application performed the write with a permit; only
///               it (or an operator who checked its system) knows what
///               happened. Give the answer: --applied RESULT_JSON or
///               --not-applied DETAIL. Without one nothing is asked or
///               written, and the exit code is 2.
///   webhook     without an answer, the tool's status URL is asked, from the
///               [[tools]] of the deployment file given with --config.
///   mcp_upstream
///               without an answer, the tool's status tool is asked through
///               its upstream (the deployment's [[upstreams]], --config).
///               An --applied answer is recorded as the CallToolResult a
///               replay answers: the tool's output alone, or a whole
///               result; it must meet the tool's pinned output schema, and
///               an error result is refused ("answer_refused", exit 2).
///               Without --config such an answer is refused.
///   in_process  without an answer, the executor that wrote it is asked:
///               the support-desk example's (--support-desk, or a --config
///               file with application = "support-desk"); a Rust
///               application reconciles against its own executor with
///               `toolgate::pipeline::reconcile`.
///
/// With no deployment to ask (no --config, no --support-desk), only an
/// explicit answer closes a claim: nothing else answers for a write it does
/// not own.
///
/// An explicit answer is recorded for a claim of any kind. Prints one JSON
/// line:
///
///   {"operation_key":"<hex>","reconciled":"applied"|"not_applied",
///    "result":{...}}
///   {"operation_key":"<hex>","reconciled":"not_stuck","status":...}
///   {"operation_key":"<hex>","reconciled":"explicit_answer_required",
///    "executor":"client"}
///
/// A claim still within its lease, already completed, or absent is
/// "not_stuck" and nothing is asked or written. An audit entry is appended
/// either way. Exit 0 when the outcome was recorded, 1 when the claim was
/// not stuck, 2 when an explicit answer is required, and for usage,
/// connection and database errors. The store is found as for `claims stuck`
/// (--db, TOOLGATE_DB_URL, --config).
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ReconcileArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The operation key (64 hex digits).
    #[arg(value_name = "KEY")]
    key: String,
    /// Ask the support-desk example's executor about its own (in_process)
    /// claims: the demo's database, without a deployment file.
    #[arg(long)]
    support_desk: bool,
    /// Who is reconciling, for the audit log.
    #[arg(long, value_name = "NAME", default_value = "operator")]
    actor: String,
    /// Judge the lease as of this time (Unix milliseconds) instead of now.
    #[arg(long, value_name = "MS")]
    now: Option<i64>,
    /// The write happened downstream; RESULT_JSON (a JSON value, usually the
    /// downstream receipt) is recorded as the claim's result.
    #[arg(long, value_name = "RESULT_JSON", conflicts_with = "not_applied")]
    applied: Option<String>,
    /// The write did not happen downstream; DETAIL (free text: what was
    /// checked) is recorded as {"applied":false,"detail":DETAIL}.
    #[arg(long, value_name = "DETAIL")]
    not_applied: Option<String>,
}

/// The explicit answer given on the command line, if any.
fn explicit_answer(
    args: &ReconcileArgs,
) -> Result<Option<toolgate::claim::ReconcileOutcome>, String> {
    use toolgate::claim::{JsonText, ReconcileOutcome};
    use toolgate::decode::{Limits, decode_strict};

    if let Some(text) = &args.applied {
        // The receipt goes through the strict decoder like any JSON toolgate
        // stores: no duplicate keys, no rounded integers.
        let value = decode_strict(text.as_bytes(), &Limits::provider_body())
            .map_err(|r| format!("--applied: {} at '{}'", r.message(), r.pointer()))?;
        let receipt = JsonText::result(value.to_string()).map_err(|e| format!("--applied: {e}"))?;
        return Ok(Some(ReconcileOutcome::Applied { receipt }));
    }
    if let Some(detail) = &args.not_applied {
        let text = json!({"applied": false, "detail": detail}).to_string();
        let detail = JsonText::result(text).map_err(|e| format!("--not-applied: {e}"))?;
        return Ok(Some(ReconcileOutcome::NotApplied { detail }));
    }
    Ok(None)
}

fn reconcile(args: ReconcileArgs) -> ExitCode {
    use toolgate::claim::{OperationKey, ReconcileOutcome};
    use toolgate::pipeline::ReconcileReport;

    let key: OperationKey = match args.key.parse() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("toolgate claims reconcile: KEY: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let answer = match explicit_answer(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("toolgate claims reconcile: {e}");
            return ExitCode::from(2);
        }
    };
    let now = args.now.map_or_else(toolgate_store::now_millis, UnixMillis);
    let done = runtime.block_on(async {
        let url = args.db.url()?;
        let store = open_existing(&url).await.map_err(|e| e.to_string())?;
        if let (Some(answer), None) = (&answer, args.db.config()) {
            // An MCP tool's answer is checked against its pinned output
            // schema, which only the deployment names.
            if let (toolgate::claim::ReconcileOutcome::Applied { .. }, Some(c)) =
                (answer, store.fetch(&key).await.map_err(|e| e.to_string())?)
                && c.executor == toolgate::claim::ExecutorKind::McpUpstream
            {
                return Err(format!(
                    "tool {:?} is an MCP upstream's: its answer is checked against the tool's \
                     pinned output schema; name the deployment with --config FILE",
                    c.proposal.tool()
                ));
            }
            return toolgate::pipeline::reconcile_answered(
                &store,
                answer.clone(),
                &key,
                &args.actor,
                now,
            )
            .await
            .map_err(|e| e.to_string());
        }
        // Each executor is asked only about claims recorded as its own
        // kind; a client's write is nobody's but the application's. The
        // executor is the named deployment's: its [[tools]], or the example
        // (its file, or --support-desk); with none named, nobody answers.
        let file = args.db.config();
        let deployment = file
            .map(config::load)
            .transpose()
            .map_err(|e| e.to_string())?;
        let owner = match (&deployment, file) {
            (Some(d), Some(file)) => match &d.application {
                Application::Tools(section) => Owner::Tools(section, d, file),
                Application::BuiltIn => Owner::SupportDesk,
            },
            _ if args.support_desk => Owner::SupportDesk,
            _ => Owner::Nobody,
        };
        let reconciled = match owner {
            Owner::Tools(section, d, file) => {
                let base = file.parent().unwrap_or(std::path::Path::new("."));
                let wired = toolgate_deploy::Prepared::load(section, base, &d.policy, &d.cedar)
                    .await
                    .map_err(|e| e.in_file(file).to_string())?;
                // An MCP upstream's claim is asked through its status tool,
                // and an answer for it shaped and checked as its result.
                // Only for an MCP claim: a webhook claim is reconciled with an
                // upstream down too.
                let mcp = store
                    .fetch(&key)
                    .await
                    .map_err(|e| e.to_string())?
                    .is_some_and(|c| c.executor == toolgate::claim::ExecutorKind::McpUpstream);
                let upstreams = if mcp {
                    crate::cmd::serve::upstream_executor(&d.upstreams).await?
                } else {
                    toolgate_mcp::executor::UpstreamExecutor::new()
                };
                let executor = crate::cmd::serve::ServeExecutor::new(
                    wired.executor,
                    std::sync::Arc::new(upstreams),
                );
                match answer {
                    Some(a) => {
                        toolgate::pipeline::reconcile_answered_for(
                            &store,
                            &executor,
                            a,
                            &key,
                            &args.actor,
                            now,
                        )
                        .await
                    }
                    None => {
                        toolgate::pipeline::reconcile(&store, &executor, &key, &args.actor, now)
                            .await
                    }
                }
            }
            Owner::SupportDesk if answer.is_some() => {
                let Some(a) = answer else {
                    unreachable!("matched on is_some")
                };
                toolgate::pipeline::reconcile_answered(&store, a, &key, &args.actor, now).await
            }
            Owner::SupportDesk => {
                let desk = toolgate_support_desk::SupportDesk::on_store(&store)
                    .await
                    .map_err(|e| e.to_string())?;
                toolgate::pipeline::reconcile(&store, &desk, &key, &args.actor, now).await
            }
            // Every stuck claim needs an explicit answer (and one not stuck
            // says so).
            Owner::Nobody => match answer {
                Some(a) => {
                    toolgate::pipeline::reconcile_answered(&store, a, &key, &args.actor, now).await
                }
                None => {
                    toolgate::pipeline::reconcile(&store, &Nobody, &key, &args.actor, now).await
                }
            },
        };
        reconciled.map_err(|e| e.to_string())
    });
    let report = match done {
        Ok(r) => r,
        Err(e) => {
            eprintln!("toolgate claims reconcile: {e}");
            return ExitCode::from(2);
        }
    };
    let value = |text: &toolgate::claim::JsonText| text.value().unwrap_or(Value::Null);
    let (line, code) = match &report {
        ReconcileReport::Recorded(ReconcileOutcome::Applied { receipt }) => (
            json!({"operation_key": key.to_hex(), "reconciled": "applied", "result": value(receipt)}),
            ExitCode::SUCCESS,
        ),
        ReconcileReport::Recorded(ReconcileOutcome::NotApplied { detail }) => (
            json!({"operation_key": key.to_hex(), "reconciled": "not_applied", "result": value(detail)}),
            ExitCode::SUCCESS,
        ),
        ReconcileReport::NotStuck(row) => (
            json!({
                "operation_key": key.to_hex(),
                "reconciled": "not_stuck",
                "status": row.as_ref().map(|r| r.status.as_str()),
                "lease_expires_at": row.as_ref().map(|r| r.lease_expires_at.0),
            }),
            ExitCode::from(1),
        ),
        ReconcileReport::AnswerRefused { message, .. } => {
            eprintln!(
                "toolgate claims reconcile: the answer was refused: {message}; nothing was written"
            );
            (
                json!({
                    "operation_key": key.to_hex(),
                    "reconciled": "answer_refused",
                    "message": message,
                }),
                ExitCode::from(2),
            )
        }
        ReconcileReport::ExplicitAnswerRequired(row) => {
            eprintln!(
                "toolgate claims reconcile: the claim's write is owned by the {} executor{}: \
                 check the downstream system, then answer with --applied RESULT_JSON or \
                 --not-applied DETAIL; nothing was asked or written",
                row.executor,
                if args.db.config().is_none() && !args.support_desk {
                    " and no deployment was named (--config FILE asks a webhook's status URL)"
                } else {
                    ""
                }
            );
            (
                json!({
                    "operation_key": key.to_hex(),
                    "reconciled": "explicit_answer_required",
                    "executor": row.executor.as_str(),
                }),
                ExitCode::from(2),
            )
        }
    };
    if let Err(e) = print_line(&line.to_string()) {
        return io_failure("writing stdout", &e);
    }
    code
}

/// Whose executor `claims reconcile` may ask.
enum Owner<'a> {
    /// The deployment file's [[tools]] (webhook status URLs).
    Tools(
        &'a toolgate_deploy::DeploySection,
        &'a config::Deployment,
        &'a std::path::Path,
    ),
    /// The built-in support-desk example.
    SupportDesk,
    /// No deployment was named.
    Nobody,
}

/// The executor of a `claims reconcile` that names no deployment: it owns
/// no write, so the core asks it nothing (its kind is `client`, whose
/// claims only an explicit answer closes) and every claim needs an answer.
struct Nobody;

impl toolgate::pipeline::Executor for Nobody {
    async fn execute(
        &self,
        _permit: toolgate::pipeline::ExecPermit<'_>,
    ) -> Result<toolgate::pipeline::ExecOutcome, toolgate::pipeline::ExecError> {
        Err(toolgate::pipeline::ExecError::new(
            "claims reconcile never executes",
        ))
    }

    fn kind(&self, _tool: &str) -> toolgate::claim::ExecutorKind {
        toolgate::claim::ExecutorKind::Client
    }

    async fn reconcile(
        &self,
        _claim: &ClaimRecord,
    ) -> Result<toolgate::claim::ReconcileOutcome, toolgate::pipeline::ExecError> {
        Err(toolgate::pipeline::ExecError::new(
            "no deployment was named: nothing can be asked",
        ))
    }
}
