//! `toolgate keys new`: a fresh API key and the `[[keys]]` entry that lets
//! it in. The deployment file stores only the key's SHA-256, so the key
//! itself is shown once, here, and nowhere else.

use std::process::ExitCode;

use toolgate::pipeline::Principal;
use toolgate_service::{ApiKey, ExecutionMode};

use crate::io::print_line;

/// Make API keys for `toolgate serve`.
#[derive(clap::Subcommand)]
pub enum Command {
    New(NewArgs),
}

/// Print a fresh API key and its [[keys]] entry for the deployment file.
///
/// The key is 32 bytes from the operating system's random source, written
/// as `tg_` and 64 hex digits. The deployment file keeps only its SHA-256,
/// so the key is shown once:
///
///   stdout  the [[keys]] entry (TOML), ready to append to the file that
///           `toolgate serve --config` reads;
///   stderr  the key itself, alone on one line, to hand to the agent or
///           client (it sends it as `Authorization: Bearer KEY`).
///
/// Example: make a key for an agent that may issue credits, append its
/// entry to the deployment, check the file, and keep the key:
///
///   $ toolgate keys new --name agent-ana --capabilities credit:issue \
///       >> deploy.toml 2> agent-ana.key
///   $ toolgate config check deploy.toml
///
/// A key for a service that acts for its own end users, such as a shop's
/// backend beside a deployment file's [[tools]]: each decision request
/// names the user in `"actor"`, and the capability check, Cedar and the
/// claim see that user (the key is kept in the audit as `via`). Who writes
/// is each tool's `executor` in the file, not the key's mode:
///
///   $ toolgate keys new --name shop-backend --capabilities refund:issue \
///       --act-for-users >> toolgate.toml 2> shop-backend.key
///
/// `--mode client` belongs to the built-in support-desk example
/// (`serve --demo`, `application = "support-desk"`): its client performs
/// its own writes with the permit. Beside [[tools]] it is refused; a tool
/// whose application writes itself says `executor = { kind = "client" }`.
///
///   $ toolgate keys new --name billing --capabilities credit:issue --mode client
///
/// Exit 0, or 2 for usage errors and when no randomness is available.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct NewArgs {
    /// The principal the key authenticates (its id in decisions, audit
    /// entries and Cedar policies). Default: `key-` and the first 8 hex
    /// digits of the key's digest.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Capabilities the principal holds, comma-separated: a tool's
    /// capability from the policy (credit:issue), toolgate:review,
    /// toolgate:operate or toolgate:metrics.
    #[arg(long, value_name = "CAP,...", value_delimiter = ',')]
    capabilities: Vec<String>,
    /// Who performs an action decided for this key: in_process (the
    /// server's executor; with [[tools]], each tool's `executor`) or
    /// client (the support-desk example's caller, with a permit; refused
    /// beside [[tools]]).
    #[arg(long, value_name = "MODE", default_value = "in_process",
          value_parser = ["in_process", "client"])]
    mode: String,
    /// Let the key name the actor per request (`"actor"` in
    /// POST /v1/decisions): for a service acting on behalf of its users.
    /// The actor gets this key's capabilities. Without it, a request that
    /// names an actor is refused (403 actor_not_allowed).
    #[arg(long)]
    act_for_users: bool,
}

pub fn run(command: Command) -> ExitCode {
    match command {
        Command::New(args) => new(&args),
    }
}

/// The prefix that makes a toolgate key recognisable (in a leaked file, to
/// a secret scanner).
pub const KEY_PREFIX: &str = "tg_";

/// A fresh key: the prefix and 32 random bytes in hex.
pub fn fresh_key() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    let mut key = String::with_capacity(KEY_PREFIX.len() + 64);
    key.push_str(KEY_PREFIX);
    for b in bytes {
        key.push_str(&format!("{b:02x}"));
    }
    Ok(key)
}

/// The `[[keys]]` entry for `key`, in the format `serve --config` reads.
/// Strings are written with TOML's own escaping.
pub fn snippet(
    key: &str,
    principal: &Principal,
    capabilities: &[String],
    mode: ExecutionMode,
    act_for_users: bool,
) -> String {
    let digest: String = ApiKey::digest(key)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let caps: Vec<String> = capabilities.iter().map(|c| toml_string(c)).collect();
    let mut entry = format!(
        "[[keys]]\nsha256 = \"{digest}\"\nprincipal = {}\ncapabilities = [{}]\nexecution = \"{}\"",
        toml_string(principal.id()),
        caps.join(", "),
        mode.as_str()
    );
    if act_for_users {
        entry.push_str("\nact_for_users = true");
    }
    entry
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn new(args: &NewArgs) -> ExitCode {
    let key = match fresh_key() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("toolgate keys new: the random number generator failed: {e}");
            return ExitCode::from(2);
        }
    };
    let name = args.name.clone().unwrap_or_else(|| {
        let digest = ApiKey::digest(&key);
        format!(
            "key-{}",
            digest[..4]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        )
    });
    let principal = match Principal::new(name, args.capabilities.iter().cloned()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("toolgate keys new: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(mode) = ExecutionMode::parse(&args.mode) else {
        eprintln!("toolgate keys new: --mode must be in_process or client");
        return ExitCode::from(2);
    };
    // Capabilities as given, deduplicated in the principal's order.
    let mut caps = args.capabilities.clone();
    caps.sort();
    caps.dedup();
    let entry = snippet(&key, &principal, &caps, mode, args.act_for_users);
    // The key alone on stderr (first, so it is on the terminal even when
    // stdout goes to a file): `2> NAME.key` keeps exactly the key. It is
    // written nowhere else.
    eprintln!("{key}");
    match print_line(&format!(
        "\n# {} ({}), made by `toolgate keys new`. The key went to stderr, once:\n\
         # only its SHA-256 is kept here.\n{entry}",
        principal.id(),
        mode.as_str()
    )) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => crate::io::io_failure("writing stdout", &e),
    }
}
