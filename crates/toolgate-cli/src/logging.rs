//! Logs of the long-running commands: JSON lines on stderr, one event per
//! line, filtered by `RUST_LOG` the way the Rust ecosystem expects.

use tracing_subscriber::EnvFilter;

/// The variable read for filter directives (`info`,
/// `warn,toolgate_http=debug`, ...).
pub const RUST_LOG: &str = "RUST_LOG";

/// What is logged when neither `--log-level` nor `RUST_LOG` says.
const DEFAULT: &str = "info";

/// Installs the JSON-lines subscriber. The filter is `level` when the
/// command line gave one (an explicit flag wins over the environment),
/// else `RUST_LOG` when set and not empty, else `info`. A `RUST_LOG` that
/// does not parse is an error rather than silently logging something else.
pub fn init(level: Option<tracing::Level>) -> Result<(), String> {
    let filter = match level {
        Some(level) => EnvFilter::new(level.as_str()),
        None => match std::env::var(RUST_LOG) {
            Ok(directives) if !directives.trim().is_empty() => EnvFilter::try_new(&directives)
                .map_err(|e| format!("{RUST_LOG}={directives:?}: {e}"))?,
            _ => EnvFilter::new(DEFAULT),
        },
    };
    // rmcp's session layer logs each session's id, which is the key to
    // that caller's result stream: never below warn, whatever was asked
    // (the most specific directive wins, so this one holds).
    let filter = filter.add_directive(
        "rmcp::transport::streamable_http_server=warn"
            .parse()
            .map_err(|e| format!("the session log directive: {e}"))?,
    );
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_current_span(false)
        .try_init()
        .map_err(|e| format!("installing the log subscriber: {e}"))
}
