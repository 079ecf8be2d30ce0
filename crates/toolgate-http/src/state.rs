//! The HTTP door's state: the [`Service`] it serves, and its own limits.
//! Review items, reviewer logins and the `Idempotency-Key` memory are rows
//! in the claim database, which the service holds.

use std::sync::Arc;

use toolgate_service::{HttpLimits, Service};

/// The door's limits and timings ([`HttpLimits`], plain data beside the
/// service so that the deployment file's reader need not link the door).
pub type Settings = HttpLimits;

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
