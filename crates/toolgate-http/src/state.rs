//! The HTTP door's state: the [`Service`] it serves, and its own limits.
//! Review items, reviewer logins and the `Idempotency-Key` memory are rows
//! in the claim database, which the service holds.

use std::sync::Arc;
use std::time::Duration;

use toolgate_service::Service;

/// Limits and timings.
#[derive(Debug, Clone)]
pub struct Settings {
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
    /// (slowloris); it is closed after that. Applies to [`crate::serve`].
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
    /// Connections beyond [`Settings::max_connections`] that answer only
    /// `/healthz` and `/readyz` (anything else is `503
    /// too_many_connections`), one request each: so the probes answer
    /// while every regular connection is busy. Applies to [`crate::serve`].
    pub probe_headroom: usize,
    /// Most requests one connection serves; it is then closed after its
    /// answer, and the client opens another. Applies to [`crate::serve`].
    pub max_requests_per_connection: u64,
    /// Longest a connection stays open; it is then closed once it is idle
    /// (or after the request in progress). Applies to [`crate::serve`].
    pub max_connection_age: Duration,
}

impl Default for Settings {
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

/// Shared state of one sidecar: the service and the door's settings.
/// Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    service: Service,
    settings: Arc<Settings>,
}

impl AppState {
    /// The HTTP door to `service`, with `settings`.
    pub fn new(service: Service, settings: Settings) -> Self {
        Self {
            service,
            settings: Arc::new(settings),
        }
    }

    /// The door's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The service behind the door.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// The policy.
    pub fn policy(&self) -> &toolgate::contract::Policy {
        self.service.policy()
    }

    /// Waits until every decision task that has started has finished.
    pub async fn drain(&self) {
        self.service.drain().await;
    }
}
