//! `toolgate policy export|explain`: one source of truth for the gate and
//! the provider request (docs/design.md §6).

use std::path::Path;
use std::process::ExitCode;

use toolgate::contract::{Policy, explain::explain, export::export};
use toolgate::provider::Provider;

use crate::io::{io_failure, print_line};

/// Export or explain a policy's tools.
#[derive(clap::Subcommand)]
pub enum Which {
    Export(ExportArgs),
    Explain(ExplainArgs),
}

/// Print the tool definitions in a provider's request format.
///
/// stdout: one JSON object to merge into the provider request, with strict
/// mode on and parallel tool calls off where the provider has the switch.
/// stderr: one "warning:" line per schema keyword outside the provider's
/// strict-mode subset (the gate still enforces it; the model is not held to
/// it while generating). Exit 0, or 2 for usage and policy-load errors.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ExportArgs {
    /// The policy file (TOML).
    #[arg(long, value_name = "FILE")]
    policy: std::path::PathBuf,
    /// The request format.
    #[arg(long, value_parser = ["anthropic", "openai-chat", "openai-responses", "gemini"])]
    provider: String,
}

/// Print, for each tool, the worst well-formed request and its bounds.
///
/// A contract says what is well-formed, not what is justified: this shows
/// what a misbehaving model could make each tool do, and what stops it
/// (the cap, the server-fixed scope, once per state version). Exit 0, or 2
/// for usage and policy-load errors.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ExplainArgs {
    /// The policy file (TOML).
    #[arg(long, value_name = "FILE")]
    policy: std::path::PathBuf,
}

pub fn run(which: Which) -> ExitCode {
    match which {
        Which::Export(a) => run_export(&a),
        Which::Explain(a) => run_explain(&a),
    }
}

/// Reads and loads a policy file, printing any error with its location,
/// keyword and path; the error is the exit code to return.
pub fn load(path: &Path) -> Result<Policy, ExitCode> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return Err(io_failure(&format!("reading {}", path.display()), &e)),
    };
    Policy::load(&text).map_err(|e| {
        eprintln!("toolgate: policy {}: {e}", path.display());
        ExitCode::from(2)
    })
}

fn run_export(args: &ExportArgs) -> ExitCode {
    let Some(provider) = Provider::from_name(&args.provider) else {
        eprintln!("toolgate policy export: unknown provider {}", args.provider);
        return ExitCode::from(2);
    };
    let policy = match load(&args.policy) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let (value, warnings) = export(&policy, provider);
    for w in &warnings {
        let at = match (&w.keyword, &w.pointer) {
            (Some(k), Some(p)) => format!(" keyword `{k}` at {p}"),
            _ => String::new(),
        };
        eprintln!("warning: tool {}{at}: {}", w.tool, w.message);
    }
    let text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string());
    match print_line(&text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => io_failure("writing stdout", &e),
    }
}

fn run_explain(args: &ExplainArgs) -> ExitCode {
    let policy = match load(&args.policy) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let mut out = String::new();
    for e in explain(&policy) {
        out.push_str(&format!("tool {}\n", e.tool));
        out.push_str(&format!(
            "  worst well-formed request: {}{}\n",
            e.worst,
            if e.worst_passes {
                " (passes the contract)"
            } else {
                " (does NOT pass the contract: the schema has constraints this summary does not model)"
            }
        ));
        out.push_str("  bounds:\n");
        for b in &e.bounds {
            out.push_str(&format!("    - {b}\n"));
        }
        if e.unbounded.is_empty() {
            out.push_str("  unbounded arguments: none\n");
        } else {
            out.push_str(&format!(
                "  unbounded arguments (nothing caps them): {}\n",
                e.unbounded.join(", ")
            ));
        }
    }
    match print_line(out.trim_end()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => io_failure("writing stdout", &e),
    }
}
