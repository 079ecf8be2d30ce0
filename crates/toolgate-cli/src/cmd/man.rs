//! `toolgate man`: roff man pages from the same clap definitions as
//! `--help`.

use std::path::PathBuf;
use std::process::ExitCode;

/// Print toolgate's man page, or write one page per command.
///
/// Without --dir: the page for `toolgate` itself (its commands listed) in
/// roff on stdout. With --dir DIR: toolgate.1 and a page for every
/// subcommand (toolgate-serve.1, toolgate-claims-stuck.1, ...) in DIR,
/// which must exist. Exit 0, or 2 when a page cannot be written.
///
/// Examples:
///
///   $ toolgate man | man -l -
///   $ toolgate man --dir /usr/local/share/man/man1 && mandb
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Write toolgate.1 and one page per subcommand into this directory.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

pub fn run(args: &Args, command: clap::Command) -> ExitCode {
    match &args.dir {
        None => {
            let mut out = Vec::new();
            if let Err(e) = clap_mangen::Man::new(command).render(&mut out) {
                return crate::io::io_failure("rendering the man page", &e);
            }
            write_stdout(&out)
        }
        Some(dir) => match clap_mangen::generate_to(command, dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => crate::io::io_failure(&format!("writing man pages to {}", dir.display()), &e),
        },
    }
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
