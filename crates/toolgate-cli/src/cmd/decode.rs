//! `toolgate decode`: the strict decoder on stdin (docs/design.md §3).

use std::process::ExitCode;

use serde_json::json;
use toolgate::decode::{Limits, decode_strict};

use crate::io::{io_failure, print_line, read_stdin_bounded};

/// Strictly decode one JSON document from stdin.
///
/// Accepted: exit 0 and the document on stdout, compact (object keys in
/// input order). Rejected: exit 1 and one JSON line on stdout,
/// {"rejected":"<code>","pointer":"<JSON pointer or empty>","message":"..."}.
/// Usage or I/O error: exit 2.
///
/// Rejection codes: too_large, too_deep, duplicate_key, number_out_of_range,
/// invalid_json. Duplicate keys are never resolved, integers are never
/// turned into floats, and a byte-order mark, trailing bytes, NaN, Infinity,
/// invalid UTF-8 and lone surrogate escapes are invalid_json.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Reject input longer than this many bytes before parsing it.
    #[arg(long, value_name = "N", default_value_t = Limits::DEFAULT_MAX_BYTES)]
    max_bytes: usize,
    /// Accept N nested containers and reject N+1 ([] is 1, [[]] is 2,
    /// a bare scalar is 0). At most 1000.
    #[arg(long, value_name = "N", default_value_t = Limits::DEFAULT_MAX_NESTING)]
    max_nesting: usize,
    /// Largest integer magnitude accepted; the default is 2^53-1, the
    /// interoperable range of RFC 8259. Larger integers are rejected as
    /// number_out_of_range, never rounded.
    #[arg(long, value_name = "N", default_value_t = Limits::INTEROPERABLE_INTEGER)]
    max_integer: u64,
}

pub fn run(args: Args) -> ExitCode {
    let limits = match Limits::provider_body()
        .with_max_bytes(args.max_bytes)
        .with_max_integer(args.max_integer)
        .with_max_nesting(args.max_nesting)
    {
        Ok(limits) => limits,
        Err(e) => {
            eprintln!("toolgate decode: --max-nesting: {e}");
            return ExitCode::from(2);
        }
    };
    let input = match read_stdin_bounded(limits.max_bytes()) {
        Ok(input) => input,
        Err(e) => return io_failure("reading stdin", &e),
    };
    let (line, code) = match decode_strict(&input, &limits) {
        Ok(value) => (value.to_string(), 0),
        Err(r) => (
            json!({"rejected": r.code().as_str(), "pointer": r.pointer(), "message": r.message()})
                .to_string(),
            1,
        ),
    };
    match print_line(&line) {
        Ok(()) => ExitCode::from(code),
        Err(e) => io_failure("writing stdout", &e),
    }
}
