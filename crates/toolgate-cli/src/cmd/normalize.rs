//! `toolgate normalize encode|decode`: the storage normaliser (docs/design.md §4).

use std::process::ExitCode;

use serde_json::{Value, json};
use toolgate::decode::normalize::{self, Action};
use toolgate::decode::{Limits, decode_strict};

use crate::io::{io_failure, print_line, read_stdin_bounded};

/// Normalise a tool input for storage, or read one back. Always prints an
/// object and exits 0 (2 only for I/O errors); --explain says what was done.
///
/// Actions: kept, empty, decoded_string, unwrapped_double_encoding,
/// rejected_list, rejected_scalar, rejected_invalid_json,
/// rejected_duplicate_key, rejected_number_out_of_range, rejected_too_deep,
/// rejected_too_large.
///
/// Examples:
///   echo '{"k":"v"}' | toolgate normalize encode               # {"k":"v"}
///   echo '"{\"k\":1}"' | toolgate normalize encode --explain   # decoded_string
///   echo '"{\"k\":1}"' | toolgate normalize decode --explain   # unwrapped_double_encoding
///   echo '[1,2]' | toolgate normalize encode --explain         # rejected_list
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[arg(value_enum)]
    direction: Direction,
    /// Print {"output":<object>,"action":"<code>"} instead of the object.
    #[arg(long)]
    explain: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Direction {
    /// stdin is a JSON document naming the input value (a JSON string
    /// document is a string input); empty stdin means missing.
    Encode,
    /// stdin is the stored column text; empty stdin means missing.
    Decode,
}

pub fn run(args: Args) -> ExitCode {
    let limit = Limits::DEFAULT_MAX_BYTES;
    let input = match read_stdin_bounded(limit) {
        Ok(input) => input,
        Err(e) => return io_failure("reading stdin", &e),
    };
    let (text, action) = match args.direction {
        Direction::Encode => encode_stdin(&input),
        Direction::Decode => {
            let decoded = match std::str::from_utf8(&input) {
                Ok(s) if input.is_empty() || s.is_empty() => normalize::decode_stored(None),
                Ok(s) => normalize::decode_stored(Some(s)),
                Err(_) => normalize::Decoded {
                    object: serde_json::Map::new(),
                    action: Action::RejectedInvalidJson,
                },
            };
            (Value::Object(decoded.object).to_string(), decoded.action)
        }
    };
    let line = if args.explain {
        // The text is object JSON produced by this crate; embed it as is.
        format!(r#"{{"output":{text},"action":{}}}"#, json!(action.as_str()))
    } else {
        text
    };
    match print_line(&line) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => io_failure("writing stdout", &e),
    }
}

fn encode_stdin(input: &[u8]) -> (String, Action) {
    if input.iter().all(u8::is_ascii_whitespace) {
        let e = normalize::encode(&Value::Null);
        return (e.text, e.action);
    }
    match decode_strict(input, &Limits::provider_body()) {
        Ok(value) => {
            let e = normalize::encode(&value);
            (e.text, e.action)
        }
        Err(r) => ("{}".to_owned(), Action::from_rejection(&r)),
    }
}
