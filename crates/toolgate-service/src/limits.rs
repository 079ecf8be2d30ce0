//! The HTTP door's limits, as plain data.

use std::time::Duration;

/// The HTTP door's limits and timings. Plain data here, beside the
/// service, so that the deployment file's reader (toolgate-deploy) fills
/// them in without linking the door; `toolgate_http::Settings` is this
/// type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request body accepted, in bytes (413 above). The default,
    /// 2 MiB, leaves room for a 1 MiB provider body sent as a JSON string
    /// (escaping grows it).
    pub body_limit: usize,
    /// Deadline for a whole request (408 after it). A decision that has
    /// started still finishes on its own task.
    pub request_timeout: Duration,
    /// How many `Idempotency-Key` answers are remembered per principal
    /// (the key's): the principal's oldest finished answer goes first. One
    /// principal never evicts another's.
    pub idempotency_capacity: usize,
    /// Bytes of remembered `Idempotency-Key` answers (bodies and keys) per
    /// principal; its oldest finished first out, as for the count.
    pub idempotency_max_bytes: usize,
    /// How long a connection may take to send a request's headers
    /// (slowloris); it is closed after that. Applies to `toolgate_http::serve`.
    pub header_read_timeout: Duration,
    /// Most connections open at once. A connection that would pass it
    /// closes the longest-idle keep-alive connection to take its place; if
    /// none is idle it is served by the probe headroom, or closed. Applies
    /// to [`crate::serve`].
    pub max_connections: usize,
    /// Most connections open at once from one peer address (its IP): a
    /// peer at its limit closes its own longest-idle connection to open
    /// another, or is refused (`503 too_many_connections`). Applies to
    /// [`crate::serve`].
    pub max_connections_per_peer: usize,
    /// Connections beyond [`HttpLimits::max_connections`] that answer only
    /// `/healthz` and `/readyz` (anything else is `503
    /// too_many_connections`), one request each: so the probes answer
    /// while every regular connection is busy. Applies to `toolgate_http::serve`.
    pub probe_headroom: usize,
    /// Most requests one connection serves; it is then closed after its
    /// answer, and the client opens another. Applies to `toolgate_http::serve`.
    pub max_requests_per_connection: u64,
    /// Longest a connection stays open; it is then closed once it is idle
    /// (or after the request in progress). Applies to `toolgate_http::serve`.
    pub max_connection_age: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            body_limit: 2 * 1024 * 1024,
            request_timeout: Duration::from_secs(10),
            idempotency_capacity: 1_000,
            idempotency_max_bytes: 8 * 1024 * 1024,
            header_read_timeout: Duration::from_secs(10),
            max_connections: 1024,
            max_connections_per_peer: 512,
            probe_headroom: 32,
            max_requests_per_connection: 10_000,
            max_connection_age: Duration::from_secs(600),
        }
    }
}
