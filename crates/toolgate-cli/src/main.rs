//! `toolgate`: the command line. One file per subcommand under `cmd/`.

// The served decision (the sidecar's components behind the MCP gateway's
// executor) nests enough async layers that an optimised build's layout
// query passes rustc's default depth of 128.
#![recursion_limit = "256"]

mod cmd;
mod io;
mod logging;
mod scratch;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Gate LLM tool calls: strict decoding, contracts, one write per operation.
///
/// Exit codes are part of the interface: 0 for a decision (a rejection is a
/// successful decision unless the command says otherwise), 1 where the
/// command documents it, 2 for usage and I/O errors.
///
/// The database of `serve --config` and `claims` comes from, in order:
/// --db URL, the TOOLGATE_DB_URL environment variable (which, unlike an
/// argument, does not show in `ps`), the deployment file's `db`. RUST_LOG
/// filters the logs of `serve` (default: info).
#[derive(Parser)]
#[command(name = "toolgate", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Decode(cmd::decode::Args),
    Normalize(cmd::normalize::Args),
    #[command(subcommand)]
    Bench(cmd::bench::Which),
    Check(cmd::check::Args),
    #[command(subcommand)]
    Policy(cmd::policy::Which),
    #[command(subcommand)]
    Claims(cmd::claims::Command),
    Demo(cmd::demo::Args),
    Eval(cmd::eval::Args),
    Serve(cmd::serve::Args),
    Init(cmd::init::Args),
    #[command(subcommand)]
    Keys(cmd::keys::Command),
    #[command(subcommand)]
    Config(cmd::config::Command),
    Completions(cmd::completions::Args),
    Man(cmd::man::Args),
    #[command(subcommand)]
    Mcp(cmd::mcp::Command),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap exits 2 on usage errors and 0 for --help/--version.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match cli.command {
        Command::Decode(args) => cmd::decode::run(args),
        Command::Normalize(args) => cmd::normalize::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Check(args) => cmd::check::run(args),
        Command::Policy(args) => cmd::policy::run(args),
        Command::Claims(args) => cmd::claims::run(args),
        Command::Demo(args) => cmd::demo::run(args),
        Command::Eval(args) => cmd::eval::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Init(args) => cmd::init::run(args),
        Command::Keys(args) => cmd::keys::run(args),
        Command::Config(args) => cmd::config::run(args),
        Command::Completions(args) => cmd::completions::run(&args, Cli::command()),
        Command::Man(args) => cmd::man::run(&args, Cli::command()),
        Command::Mcp(args) => cmd::mcp::run(args),
    }
}
