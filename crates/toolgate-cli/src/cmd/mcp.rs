//! `toolgate mcp import`: pin an MCP upstream's tools (docs/mcp.md).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use toolgate::contract::Policy;
use toolgate_mcp::config::McpSection;
use toolgate_mcp::import::{import, policy_skeleton};

use crate::io::print_line;

/// The MCP gateway's commands.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    Import(ImportArgs),
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
struct ImportArgs {
    /// The upstream's name in [[upstreams]].
    #[arg(long, value_name = "NAME")]
    upstream: String,
    /// The deployment file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

/// Runs `toolgate mcp`.
pub fn run(args: Args) -> ExitCode {
    match args.command {
        Command::Import(a) => run_import(&a),
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
    let policy = policy_of(&text, base);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
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
    for r in &imported.refused {
        eprintln!("  not pinned: {r}");
    }
    let skeleton = policy_skeleton(&imported.file, upstream, policy.as_ref());
    if !skeleton.is_empty() && print_line(skeleton.trim_end()).is_err() {
        return ExitCode::from(2);
    }
    if imported.refused.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn policy_of(config_text: &str, base: &Path) -> Option<Policy> {
    let table: toml::Table = toml::from_str(config_text).ok()?;
    let path = base.join(table.get("policy")?.as_str()?);
    Policy::load(&std::fs::read_to_string(path).ok()?).ok()
}
