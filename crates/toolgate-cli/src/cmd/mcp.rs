//! `toolgate mcp import`: pin an MCP upstream's tools; `toolgate mcp
//! stdio`: serve the gateway on stdio (docs/mcp.md).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use toolgate::contract::Policy;
// Only `[[upstreams]]`: `import` runs on a file still being written, before
// its pins exist or its policy loads, so not the whole `Deployment`.
use toolgate_deploy::upstreams::{McpSection, Upstream, argument_scopes};
use toolgate_mcp::import::{import, policy_skeleton};

use crate::io::print_line;

/// The MCP gateway's commands.
#[derive(clap::Subcommand)]
pub enum Command {
    Import(ImportArgs),
    Stdio(StdioArgs),
}

/// Serve the MCP gateway on stdin/stdout, for a local agent host.
///
/// Runs the deployment file's gateway (its [[upstreams]], pins, [[tools]]
/// wiring, Cedar policies and claim store: what `toolgate serve --config`
/// serves at /mcp) for one caller: the API key in the environment variable
/// --key-env names (default TOOLGATE_KEY), which must be one of the file's
/// [[keys]]. The caller sees the tools its key's capabilities allow; every
/// tools/call is decided, claimed, sent to its upstream and recorded as
/// over HTTP, so a repeat replays and a parallel duplicate is in_flight,
/// also across a gateway on HTTP sharing the database.
///
/// Each line on stdin is one JSON-RPC message, strictly decoded before the
/// MCP layer reads it (a duplicate key or an integer beyond 2^53-1 is a
/// parse error, -32700). stdout carries only protocol messages; logs are
/// JSON lines on stderr.
///
/// An agent host's configuration, for example:
///
///   {"command": "toolgate",
///    "args": ["mcp", "stdio", "--config", "/etc/toolgate/toolgate.toml"],
///    "env": {"TOOLGATE_KEY": "tg_…"}}
///
/// Exit 0 when stdin ends (after every decision in progress is recorded),
/// 2 for a configuration, connection or key error.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct StdioArgs {
    /// The deployment file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The environment variable holding the caller's API key.
    #[arg(long, value_name = "VAR", default_value = "TOOLGATE_KEY")]
    key_env: String,
    /// Claim store database (overrides TOOLGATE_DB_URL and the file's `db`).
    #[arg(long, value_name = "URL")]
    db: Option<String>,
}

/// Pin what an MCP upstream offers now.
///
/// Connects to the upstream named in the deployment file's [[upstreams]]
/// (with the gateway's own credential), lists its tools, and writes its pin
/// file (the upstream's `pins`, relative to the deployment file): one pin
/// per tool, with its description, its input schema (audited as every
/// policy schema is), its output schema and the SHA-256 of the three. The
/// gateway lists a tool only while the upstream's definition still has that
/// digest; run the import again to accept a change.
///
///   stdout  a policy entry ([[tools]]) for each pinned tool the policy
///           does not have yet, with its description and schema; the
///           capability and operation key are left as comments for you
///           to decide, so the entry does not load until you do;
///   stderr  what was pinned, and each tool that could not be (and why).
///
/// Example:
///
///   $ toolgate mcp import --upstream shop --config toolgate.toml >> policy.toml
///
/// Exit 0 when every tool was pinned, 1 when some were refused (the others
/// are pinned), 2 for a configuration, connection or I/O error.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ImportArgs {
    /// The upstream's name in [[upstreams]].
    #[arg(long, value_name = "NAME")]
    upstream: String,
    /// The deployment file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

/// Runs `toolgate mcp`.
pub fn run(command: Command) -> ExitCode {
    match command {
        Command::Import(a) => run_import(&a),
        Command::Stdio(a) => crate::cmd::serve::run_stdio(&a.config, a.db.as_deref(), &a.key_env),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("toolgate mcp import: {message}");
    ExitCode::from(2)
}

fn run_import(args: &ImportArgs) -> ExitCode {
    let text = match std::fs::read_to_string(&args.config) {
        Ok(t) => t,
        Err(e) => return fail(&format!("{}: {e}", args.config.display())),
    };
    let base = args.config.parent().unwrap_or(Path::new("."));
    let upstreams = match McpSection::from_toml(&text).and_then(|s| s.check(base)) {
        Ok(u) => u,
        Err(e) => return fail(&e.in_file(&args.config).to_string()),
    };
    let Some(upstream) = upstreams.iter().find(|u| u.name == args.upstream) else {
        return fail(&format!(
            "{}: no [[upstreams]] entry is named {:?}",
            args.config.display(),
            args.upstream
        ));
    };
    // The policy, if the file names one that loads: its tools get no
    // skeleton. A policy that does not load yet (an entry still being
    // written) is not an error here.
    let policy = policy_of(&text, base, &upstreams);
    let runtime = match crate::io::runtime() {
        Ok(r) => r,
        Err(e) => return fail(&format!("starting the runtime: {e}")),
    };
    let imported = match runtime.block_on(import(upstream)) {
        Ok(i) => i,
        Err(e) => return fail(&e.to_string()),
    };
    let text = match imported.file.to_toml() {
        Ok(t) => t,
        Err(e) => return fail(&e.to_string()),
    };
    if let Err(e) = std::fs::write(&upstream.pins, text) {
        return fail(&format!("{}: {e}", upstream.pins.display()));
    }
    eprintln!(
        "toolgate mcp import: upstream {} (protocol {}): pinned {} tool(s) in {}",
        upstream.name,
        imported.protocol_version.as_deref().unwrap_or("unknown"),
        imported.file.pins.len(),
        upstream.pins.display()
    );
    for p in imported.file.pins.values() {
        eprintln!("  pinned {} sha256={}", p.name, p.sha256);
    }
    for p in imported.file.entries.values() {
        eprintln!(
            "  pinned {} {} sha256={}",
            p.entry.kind, p.entry.id, p.sha256
        );
    }
    for r in &imported.refused {
        eprintln!("  not pinned: {r}");
    }
    for r in &imported.refused_entries {
        eprintln!("  not pinned: {r}");
    }
    let skeleton = policy_skeleton(&imported.file, upstream, policy.as_ref());
    if !skeleton.is_empty() && print_line(skeleton.trim_end()).is_err() {
        return ExitCode::from(2);
    }
    if imported.refused.is_empty() && imported.refused_entries.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn policy_of(config_text: &str, base: &Path, upstreams: &[Upstream]) -> Option<Policy> {
    let table: toml::Table = toml::from_str(config_text).ok()?;
    let path = base.join(table.get("policy")?.as_str()?);
    Policy::load_with(
        &std::fs::read_to_string(path).ok()?,
        &argument_scopes(upstreams),
    )
    .ok()
}
