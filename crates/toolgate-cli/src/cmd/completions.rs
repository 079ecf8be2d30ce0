//! `toolgate completions SHELL`: a completion script from the same clap
//! definitions as `--help`, so it never lags behind the commands.

use std::process::ExitCode;

use clap_complete::Shell;

/// Print a shell completion script for toolgate.
///
/// Writes the script to stdout; install it where your shell looks. Exit 0,
/// or 2 for an unknown shell.
///
/// Examples:
///
///   # bash (system-wide, or source it from ~/.bashrc)
///   $ toolgate completions bash > /etc/bash_completion.d/toolgate
///
///   # zsh: a directory on $fpath
///   $ toolgate completions zsh > ~/.zfunc/_toolgate
///
///   # fish
///   $ toolgate completions fish > ~/.config/fish/completions/toolgate.fish
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    shell: Shell,
}

pub fn run(args: &Args, mut command: clap::Command) -> ExitCode {
    let name = command.get_name().to_owned();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, name, &mut out);
    write_stdout(&out)
}

/// Writes `bytes` to stdout; a closed pipe is an I/O error (exit 2).
fn write_stdout(bytes: &[u8]) -> ExitCode {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => crate::io::io_failure("writing stdout", &e),
    }
}
