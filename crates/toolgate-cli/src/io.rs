//! Shared stdin/stdout handling for subcommands, and their async runtime.

use std::io::{self, Read, Write};
use std::process::ExitCode;

/// Reads at most `limit + 1` bytes from stdin: enough to tell that the
/// input is over the limit without ever holding more than that in memory.
pub fn read_stdin_bounded(limit: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    io::stdin()
        .lock()
        .take(limit.saturating_add(1) as u64)
        .read_to_end(&mut buf)?;
    Ok(buf)
}

/// Writes one line to stdout; a closed pipe or full disk is an I/O error.
pub fn print_line(line: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(line.as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Reports an I/O failure and gives the I/O exit code.
pub fn io_failure(what: &str, e: &io::Error) -> ExitCode {
    eprintln!("toolgate: {what}: {e}");
    ExitCode::from(2)
}

/// The runtime of a command's async part: one thread, as the command does
/// one thing at a time (`serve` and the benches build their own).
pub fn runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}
