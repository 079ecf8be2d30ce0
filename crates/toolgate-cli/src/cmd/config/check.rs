//! `toolgate config check`: a deployment file loaded as `serve` loads it,
//! and what it holds printed one line per part.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use toolgate_store::{Backend, redact_url};

use super::db::{DB_URL_ENV, DbSource, check_db_url, resolve_db};
use super::{Application, SUPPORT_DESK};
use crate::io::{io_failure, print_line};

/// Check a deployment's configuration.
#[derive(clap::Subcommand)]
pub enum Command {
    Check(CheckArgs),
}

/// Validate a deployment file without starting anything.
///
/// Reads FILE as `toolgate serve --config FILE` does and checks every part:
/// the TOML and its fields, the policy it names (loaded with its schema
/// audit), the Cedar policies, each [[keys]] entry (digest, principal,
/// capabilities, execution mode; no principal twice), the settings, and
/// the database URL's syntax (and that certificate files it names exist),
/// and each [[tools]] entry: its executor, state source and entity sources
/// against the policy, with every SQL query prepared against the
/// application's database ([app_db]; a read-only connection, the only one
/// it makes). It never connects to the claim store and binds nothing.
///
/// The database checked is the one `serve` would use: --db, else
/// TOOLGATE_DB_URL, else the file's `db`.
///
/// Prints what it found, one line per part, and exits 0; on the first
/// problem prints `FILE: FIELD: what is wrong` on stderr and exits 2.
///
/// Example:
///
///   $ toolgate config check /etc/toolgate/deploy.toml
///   config /etc/toolgate/deploy.toml: ok
///   listen 127.0.0.1:8080
///   db postgres://toolgate:***@db.internal/toolgate?sslmode=verify-full (PostgreSQL, from `db` in ...)
///   policy /etc/toolgate/policy.toml: 1 tool (apply_goodwill_credit)
///   ...
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct CheckArgs {
    /// The deployment file (TOML), as given to `serve --config`.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Check this database URL instead of TOOLGATE_DB_URL or the file's.
    #[arg(long, value_name = "URL")]
    db: Option<String>,
}

pub fn run(command: Command) -> ExitCode {
    match command {
        Command::Check(args) => check(&args),
    }
}

/// `toolgate config check FILE` with no `--db`: what `toolgate init` ends
/// with, so the scaffold is judged by the same checks as any file.
pub fn check_file(file: &Path) -> ExitCode {
    check(&CheckArgs {
        file: file.to_path_buf(),
        db: None,
    })
}

fn check(args: &CheckArgs) -> ExitCode {
    let d = match super::load(&args.file) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("toolgate config check: {e}");
            return ExitCode::from(2);
        }
    };
    let mut out = vec![format!("config {}: ok", args.file.display())];
    out.push(match d.listen {
        Some(a) => format!("listen {a}"),
        None => "listen 127.0.0.1:8080 (default)".to_owned(),
    });
    let file_db = d.db.as_deref().map(|db| (db, args.file.as_path()));
    match resolve_db(args.db.as_deref(), file_db) {
        Some((url, source)) => match check_db_url(&url) {
            Ok(backend) => out.push(format!(
                "db {} ({}, from {source})",
                redact_url(&url),
                backend_name(backend)
            )),
            Err(message) => {
                let field = match source {
                    DbSource::File(_) => "db".to_owned(),
                    other => other.to_string(),
                };
                eprintln!(
                    "toolgate config check: {}: {field}: {message}",
                    args.file.display()
                );
                return ExitCode::from(2);
            }
        },
        None => {
            eprintln!(
                "toolgate config check: {}: db: no database: the file has no `db`, and \
                 neither --db nor {DB_URL_ENV} is set",
                args.file.display()
            );
            return ExitCode::from(2);
        }
    }
    let tools: Vec<&str> = d.policy.tools().iter().map(|t| t.name()).collect();
    out.push(format!(
        "policy {}: {} tool{} ({})",
        d.policy_path.display(),
        tools.len(),
        if tools.len() == 1 { "" } else { "s" },
        tools.join(", ")
    ));
    out.push(match &d.cedar_path {
        Some(p) => format!("cedar {}: parsed", p.display()),
        None => "cedar: the support desk's policies (built in)".to_owned(),
    });
    match &d.application {
        Application::BuiltIn => {
            out.push(format!("application {SUPPORT_DESK}: built in"));
        }
        Application::Tools(section) => {
            // The one check that needs a connection: every query is
            // prepared against the application's database, as at start.
            let base = args.file.parent().unwrap_or(Path::new("."));
            let loaded = crate::io::runtime()
                .map_err(|e| e.to_string())
                .and_then(|rt| {
                    rt.block_on(toolgate_deploy::Prepared::load(
                        section, base, &d.policy, &d.cedar,
                    ))
                    .map_err(|e| e.in_file(&args.file).to_string())
                });
            if let Err(e) = loaded {
                eprintln!("toolgate config check: {e}");
                return ExitCode::from(2);
            }
            for t in &section.tools {
                let executor = match &t.executor {
                    toolgate_deploy::ExecutorConfig::Client => "client".to_owned(),
                    toolgate_deploy::ExecutorConfig::McpUpstream => "mcp_upstream".to_owned(),
                    toolgate_deploy::ExecutorConfig::Webhook { url, .. } => {
                        format!("webhook {url}")
                    }
                };
                let entities: Vec<&str> = t.entities.iter().map(|e| e.type_name()).collect();
                out.push(format!(
                    "tool {}: executor {executor}, entities [{}], queries prepared",
                    t.name,
                    entities.join(", ")
                ));
            }
        }
    }
    out.push(format!("keys: {}", d.keys.len()));
    for k in &d.keys {
        out.push(format!(
            "  {} capabilities=[{}] execution={}{}",
            k.key.principal.id(),
            k.capabilities.join(","),
            k.key.mode.as_str(),
            if k.key.act_for_users {
                " act_for_users"
            } else {
                ""
            }
        ));
    }
    let issuers: Vec<&str> = d.service.issuers.identifiers().collect();
    if !issuers.is_empty() {
        // What a token may name as its `iss`; its keys are fetched on
        // first use, not here (a check connects to nothing).
        out.push(format!("issuers: {}", issuers.join(", ")));
    }
    let (s, service) = (&d.http, &d.service);
    out.push(format!(
        "lease {} ms, request timeout {} ms, body limit {} bytes",
        service.lease.as_millis(),
        s.request_timeout.as_millis(),
        s.body_limit
    ));
    out.push(format!(
        "result cap {} bytes, header read timeout {} ms, connection limit {} ({} per peer, \
         {} for probes beyond it), Idempotency-Key memory {} answers and {} bytes per principal",
        service.max_result_bytes,
        s.header_read_timeout.as_millis(),
        s.max_connections,
        s.max_connections_per_peer,
        s.probe_headroom,
        s.idempotency_capacity,
        s.idempotency_max_bytes
    ));
    out.push(format!(
        "review queue: {} open items, {} per principal; a rejection opens one item per \
         principal and reason per {} ms; reviewer page cookie {}",
        service.review_queue.total,
        service.review_queue.per_principal,
        service.review_queue.rejection_window_ms,
        if service
            .public_url
            .as_deref()
            .is_some_and(|u| u.to_ascii_lowercase().starts_with("http://"))
        {
            "not Secure (public_url is http://)"
        } else {
            "Secure"
        }
    ));
    match print_line(&out.join("\n")) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => io_failure("writing stdout", &e),
    }
}

fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Sqlite => "SQLite",
        Backend::Postgres => "PostgreSQL",
        Backend::MySql => "MySQL/MariaDB",
    }
}
