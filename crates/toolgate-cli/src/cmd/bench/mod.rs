//! `toolgate bench …`: benchmark programs that print figures (docs/design.md §11).
//!
//! Nothing here asserts a time. Each benchmark runs the thing measured and
//! its baseline side by side in one process and prints the ratio, because
//! the machines are shared and noisy.

mod check;
mod decode;
mod mcp;
mod proc;
mod race;
mod race_budget;
mod serve;
mod timing;

use std::process::ExitCode;

/// Run a benchmark and print its figures.
#[derive(clap::Subcommand)]
pub enum Which {
    Decode(decode::Args),
    Check(check::Args),
    Race(race::Args),
    Serve(serve::Args),
    Mcp(mcp::Args),
}

pub fn run(which: Which) -> ExitCode {
    match which {
        Which::Decode(a) => decode::run(a),
        Which::Check(a) => check::run(a),
        Which::Race(a) => race::run(a),
        Which::Serve(a) => serve::run(a),
        Which::Mcp(a) => mcp::run(a),
    }
}
