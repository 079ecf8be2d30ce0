//! `toolgate init`: a deployment for one tool of an application, from flags
//! (or questions when run in a terminal): the policy's skeleton, a Cedar
//! rule to start from, the deployment file with its `sql` sources on the
//! application's table, two API keys, the webhook's secret and a receiver
//! in Python, PHP or Node. It ends with `config check` on what it wrote.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use toolgate::pipeline::Principal;
use toolgate_service::ExecutionMode;

use crate::cmd::{config, keys};

mod templates;

use templates::{
    Receiver, policy_cedar, policy_toml, receiver_source, sample_request, toolgate_toml,
};

/// The application's backend key and the on-call key: file names and
/// principals.
const BACKEND: &str = "app-backend";
const ONCALL: &str = "app-oncall";

/// Scaffold a deployment for one tool of your application.
///
/// Writes, into --dir (made if missing; an existing file is never
/// overwritten without --force):
///
///   policy.toml     the tool: its capability, its operation key (the scope
///                   fields and version_seen) and a schema skeleton to edit
///   policy.cedar    a rule to start from: an agent acts on resources of its
///                   own team (Agent from the request, the resource from
///                   the table)
///   toolgate.toml   the deployment: the version and entity queries on
///                   --table through [app_db] (url_env), the executor, two
///                   API keys' [[keys]] entries, a SQLite claim store
///   app-backend.key the key your backend sends (acts for its users)
///   app-oncall.key  the key that reconciles stuck claims and reads metrics
///   webhook.secret  the secret toolgate signs the webhook and state GETs with
///   receiver.py | receiver.php | receiver.js   the webhook receiver
///                   (--executor webhook): verifies the signature, writes
///                   once with the version precondition, serves the status
///                   URL that fences
///
/// Then runs `toolgate config check toolgate.toml` (which prepares the
/// queries against the database in the --app-db-env variable, so set it
/// first) and prints the next three commands. Missing flags are asked for
/// when stdin is a terminal; otherwise they are usage errors.
///
/// Example (docs/quickstart.md):
///
///   $ export APP_DB_URL=postgres://app@127.0.0.1/billing
///   $ toolgate init --tool extend_subscription --capability subscription:extend \
///       --scope subscription_id:integer --table subscriptions --receiver php
///
/// Exit 0 when the files are written and the check passes; 2 for usage
/// errors, a file that exists, and a check that fails (its error names the
/// file and field).
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The tool's name, as the model proposes it (1-64 of A-Z a-z 0-9 _ -).
    #[arg(long, value_name = "NAME")]
    tool: Option<String>,
    /// The capability an actor must hold to call it (e.g. refund:issue).
    #[arg(long, value_name = "CAP")]
    capability: Option<String>,
    /// A scope field the server fixes, with its type: FIELD:integer or
    /// FIELD:string. Repeat for more; the first names the table's row.
    #[arg(long = "scope", value_name = "FIELD:TYPE")]
    scope: Vec<String>,
    /// The application's table holding the resource the tool changes
    /// (`schema.table` allowed).
    #[arg(long, value_name = "TABLE")]
    table: Option<String>,
    /// The table's id column, compared with the first scope field.
    #[arg(long, value_name = "COLUMN", default_value = "id")]
    id_column: String,
    /// The table's version column: an integer every write adds one to.
    #[arg(long, value_name = "COLUMN", default_value = "version")]
    version_column: String,
    /// The table's column the Cedar rule compares with the agent's team.
    #[arg(long, value_name = "COLUMN", default_value = "team")]
    team_column: String,
    /// The environment variable holding the application database's URL
    /// (postgres://, mysql:// or sqlite://), read by toolgate and the
    /// receiver alike; never written into a file.
    #[arg(long, value_name = "VAR", default_value = "APP_DB_URL")]
    app_db_env: String,
    /// Who performs the write: webhook (toolgate POSTs the permit to the
    /// receiver) or client (your backend writes with the permit it gets).
    #[arg(long, value_name = "KIND", default_value = "webhook",
          value_parser = ["webhook", "client"])]
    executor: String,
    /// Where toolgate reads the resource's version before claiming: sql
    /// (a query on the table) or http (the receiver's signed GET).
    #[arg(long, value_name = "SOURCE", default_value = "sql",
          value_parser = ["sql", "http"])]
    state: String,
    /// The receiver's language (with --executor webhook).
    #[arg(long, value_name = "LANG", value_parser = ["python", "php", "node"])]
    receiver: Option<String>,
    /// The port the receiver listens on (127.0.0.1).
    #[arg(long, value_name = "PORT", default_value_t = 9100)]
    receiver_port: u16,
    /// The address `toolgate serve` listens on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: std::net::SocketAddr,
    /// Cedar's entity type for the acting agent.
    #[arg(long, value_name = "TYPE", default_value = "Agent")]
    principal_type: String,
    /// Cedar's entity type for the table's rows (default: the table's name
    /// in the singular, capitalised: subscriptions -> Subscription).
    #[arg(long, value_name = "TYPE")]
    resource_type: Option<String>,
    /// The directory to write into.
    #[arg(long, value_name = "DIR", default_value = ".")]
    dir: PathBuf,
    /// Overwrite files that exist.
    #[arg(long)]
    force: bool,
}

/// What the flags (and answers) settle.
struct Plan {
    tool: String,
    capability: String,
    scope: Vec<(String, &'static str)>,
    table: String,
    id_column: String,
    version_column: String,
    team_column: String,
    app_db_env: String,
    webhook: bool,
    http_state: bool,
    receiver: Option<Receiver>,
    receiver_port: u16,
    listen: std::net::SocketAddr,
    principal_type: String,
    resource_type: String,
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s.len() <= 63
}

fn is_type_name(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s.len() <= 64
}

/// The table's rows as a Cedar type: `billing.subscriptions` ->
/// `Subscription`.
fn singular_type(table: &str) -> String {
    let base = table.rsplit('.').next().unwrap_or(table);
    let base = base
        .strip_suffix("ies")
        .map(|b| format!("{b}y"))
        .or_else(|| base.strip_suffix('s').map(str::to_owned))
        .unwrap_or_else(|| base.to_owned());
    base.split('_')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// Asks for a missing value when stdin is a terminal; `Err` names the flag
/// otherwise.
fn ask(flag: &str, question: &str, given: Option<String>) -> Result<String, String> {
    if let Some(v) = given {
        return Ok(v);
    }
    if !std::io::stdin().is_terminal() {
        return Err(format!(
            "--{flag} is required (stdin is not a terminal to ask)"
        ));
    }
    eprint!("{question}: ");
    std::io::stderr().flush().map_err(|e| e.to_string())?;
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| format!("reading the answer: {e}"))?;
    let answer = line.trim().to_owned();
    if answer.is_empty() {
        return Err(format!("--{flag} is required"));
    }
    Ok(answer)
}

fn plan(args: Args) -> Result<(Plan, PathBuf, bool), String> {
    let tool = ask("tool", "Tool name (e.g. extend_subscription)", args.tool)?;
    if tool.is_empty()
        || tool.len() > 64
        || !tool
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!("--tool `{tool}`: 1-64 of A-Z a-z 0-9 _ -"));
    }
    let capability = ask(
        "capability",
        "Capability an actor must hold (e.g. subscription:extend)",
        args.capability,
    )?;
    Principal::new("init", [capability.clone()])
        .map_err(|e| format!("--capability `{capability}`: {e}"))?;
    let scope_text = if args.scope.is_empty() {
        ask(
            "scope",
            "Scope fields, FIELD:TYPE separated by spaces; the first names the row \
             (e.g. subscription_id:integer)",
            None,
        )?
        .split_whitespace()
        .map(str::to_owned)
        .collect()
    } else {
        args.scope
    };
    let mut scope = Vec::new();
    for s in &scope_text {
        let (field, ty) = s
            .split_once(':')
            .ok_or_else(|| format!("--scope `{s}`: write FIELD:integer or FIELD:string"))?;
        let ty = match ty {
            "integer" => "integer",
            "string" => "string",
            _ => return Err(format!("--scope `{s}`: the type is integer or string")),
        };
        if !is_identifier(field) || field == toolgate::op::VERSION_SEEN || field == "actor" {
            return Err(format!(
                "--scope `{s}`: a field is a name of letters, digits and _ \
                 (not version_seen or actor)"
            ));
        }
        if scope.iter().any(|(f, _)| f == field) {
            return Err(format!("--scope: `{field}` twice"));
        }
        scope.push((field.to_owned(), ty));
    }
    let table = ask(
        "table",
        "The application's table the tool changes",
        args.table,
    )?;
    if !table.split('.').all(is_identifier) || table.split('.').count() > 2 {
        return Err(format!("--table `{table}`: a name, or schema.name"));
    }
    for (flag, v) in [
        ("id-column", &args.id_column),
        ("version-column", &args.version_column),
        ("team-column", &args.team_column),
    ] {
        if !is_identifier(v) {
            return Err(format!(
                "--{flag} `{v}`: a column name of letters, digits and _"
            ));
        }
    }
    if !args
        .app_db_env
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_uppercase() || c == '_')
        || !args
            .app_db_env
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(format!(
            "--app-db-env `{}`: an environment variable name (A-Z 0-9 _)",
            args.app_db_env
        ));
    }
    let webhook = args.executor == "webhook";
    let receiver = match (&args.receiver, webhook) {
        (Some(r), true) => Receiver::parse(r),
        (None, true) => Some(
            Receiver::parse(&ask(
                "receiver",
                "Receiver language (python, php or node)",
                None,
            )?)
            .ok_or("--receiver is python, php or node")?,
        ),
        (Some(_), false) => {
            return Err(
                "--receiver writes a webhook receiver: it needs --executor webhook".to_owned(),
            );
        }
        (None, false) => None,
    };
    if args.state == "http" && !webhook {
        return Err(
            "--state http reads the version from the receiver: it needs --executor webhook"
                .to_owned(),
        );
    }
    let resource_type = args.resource_type.unwrap_or_else(|| singular_type(&table));
    for (flag, v) in [
        ("principal-type", &args.principal_type),
        ("resource-type", &resource_type),
    ] {
        if !is_type_name(v) {
            return Err(format!("--{flag} `{v}`: a Cedar type name (A-Z a-z 0-9 _)"));
        }
    }
    if args.principal_type == resource_type {
        return Err(format!(
            "--principal-type and --resource-type are both `{resource_type}`"
        ));
    }
    Ok((
        Plan {
            tool,
            capability,
            scope,
            table,
            id_column: args.id_column,
            version_column: args.version_column,
            team_column: args.team_column,
            app_db_env: args.app_db_env,
            webhook,
            http_state: args.state == "http",
            receiver,
            receiver_port: args.receiver_port,
            listen: args.listen,
            principal_type: args.principal_type,
            resource_type,
        },
        args.dir,
        args.force,
    ))
}

/// A secret file only its owner reads.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(path)?;
    f.write_all(text.as_bytes())
}

fn new_key(
    name: &str,
    capabilities: &[String],
    act_for_users: bool,
) -> Result<(String, String), String> {
    let key = keys::fresh_key().map_err(|e| format!("the random number generator failed: {e}"))?;
    let principal =
        Principal::new(name, capabilities.iter().cloned()).map_err(|e| e.to_string())?;
    let entry = keys::snippet(
        &key,
        &principal,
        capabilities,
        ExecutionMode::InProcess,
        act_for_users,
    );
    Ok((
        key,
        format!("\n# {name} (its key: {name}.key, made by `toolgate init`)\n{entry}"),
    ))
}

pub fn run(args: Args) -> ExitCode {
    let (p, dir, force) = match plan(args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("toolgate init: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("toolgate init: making {}: {e}", dir.display());
        return ExitCode::from(2);
    }
    let dir = match std::fs::canonicalize(&dir) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("toolgate init: {}: {e}", dir.display());
            return ExitCode::from(2);
        }
    };
    let (backend_key, backend_entry) =
        match new_key(BACKEND, std::slice::from_ref(&p.capability), true) {
            Ok(k) => k,
            Err(e) => {
                eprintln!("toolgate init: {e}");
                return ExitCode::from(2);
            }
        };
    let oncall_caps = ["toolgate:metrics".to_owned(), "toolgate:operate".to_owned()];
    let (oncall_key, oncall_entry) = match new_key(ONCALL, &oncall_caps, false) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("toolgate init: {e}");
            return ExitCode::from(2);
        }
    };
    let secret = match keys::fresh_key() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("toolgate init: the random number generator failed: {e}");
            return ExitCode::from(2);
        }
    };

    // (file, contents, private)
    let mut files: Vec<(String, String, bool)> = vec![
        ("policy.toml".into(), policy_toml(&p), false),
        ("policy.cedar".into(), policy_cedar(&p), false),
        (
            "toolgate.toml".into(),
            toolgate_toml(&p, &dir, &backend_entry, &oncall_entry),
            false,
        ),
        (format!("{BACKEND}.key"), format!("{backend_key}\n"), true),
        (format!("{ONCALL}.key"), format!("{oncall_key}\n"), true),
    ];
    if p.webhook || p.http_state {
        files.push(("webhook.secret".into(), format!("{secret}\n"), true));
    }
    if let Some(r) = p.receiver {
        files.push((r.file().into(), receiver_source(&p, r), false));
    }
    if !force && let Some((name, ..)) = files.iter().find(|(name, ..)| dir.join(name).exists()) {
        eprintln!(
            "toolgate init: {} exists: nothing written (--force overwrites)",
            dir.join(name).display()
        );
        return ExitCode::from(2);
    }
    for (name, text, private) in &files {
        let path = dir.join(name);
        let written = if *private {
            write_private(&path, text)
        } else {
            std::fs::write(&path, text)
        };
        if let Err(e) = written {
            eprintln!("toolgate init: writing {}: {e}", path.display());
            return ExitCode::from(2);
        }
        println!("wrote {}", path.display());
    }

    println!(
        "\nchecking it as `toolgate config check {}/toolgate.toml`:",
        dir.display()
    );
    let checked = config::check_file(&dir.join("toolgate.toml"));
    if checked != ExitCode::SUCCESS {
        eprintln!(
            "toolgate init: the files are written; fix what the check names (with {} set to \
             the application's database), then run `toolgate config check toolgate.toml`",
            p.app_db_env
        );
        return checked;
    }
    let mut steps = Vec::new();
    if let Some(r) = p.receiver {
        steps.push(format!(
            "{}    # the receiver, in its own terminal",
            r.command(p.receiver_port)
        ));
    }
    steps.push("toolgate serve --config toolgate.toml".to_owned());
    steps.push(format!(
        "curl -sS http://{}/v1/decisions -H \"Authorization: Bearer $(cat {BACKEND}.key)\" \
         -H 'Content-Type: application/json' -d '{}'",
        p.listen,
        sample_request(&p)
    ));
    if !p.webhook {
        // The client executor's permit is applied by the backend itself,
        // which then records the result (docs/http-api.md).
        steps.push(format!(
            "curl -sS http://{}/v1/claims/$KEY/complete -H \"Authorization: Bearer $(cat \
             {BACKEND}.key)\" -H 'Content-Type: application/json' -d '{{\"holder\":\"'$HOLDER'\",\
             \"result\":{{\"applied\":true}}}}'    # after your write, with the permit's \
             operation_key and holder",
            p.listen
        ));
    }
    println!(
        "\nnext, in {} (with {} exported, as for this check):",
        dir.display(),
        p.app_db_env
    );
    for (i, s) in steps.iter().enumerate() {
        println!("  {}. {s}", i + 1);
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_become_cedar_types() {
        assert_eq!(singular_type("subscriptions"), "Subscription");
        assert_eq!(singular_type("billing.credit_policies"), "CreditPolicy");
        assert_eq!(singular_type("stock"), "Stock");
    }
}
