//! What stops a decision that is not a decision: a store, state source,
//! authoriser or audit log that could not answer, or a record that failed
//! its contract. Each carries its typed cause, which [`source`] reaches.
//!
//! [`source`]: std::error::Error::source

use std::fmt;

use super::authz::AuthorizerUnavailable;
use super::decision::Decision;
use super::state::StateError;
use crate::claim::{CorruptRecord, StoreError};

/// An infrastructure failure: a store, state source or audit log that could
/// not answer. Decisions are never errors.
#[derive(Debug)]
pub enum GateError {
    /// The claim store failed.
    Store(StoreError),
    /// The state source failed.
    State(StateError),
    /// The authoriser could not reach a source it needs
    /// ([`AuthzDecision::Unavailable`](super::AuthzDecision)); nothing was
    /// decided or claimed.
    Authorizer(AuthorizerUnavailable),
    /// A record read back from storage failed the tool's contract, or a
    /// proposal record could not be built; it is never shown.
    Corrupt(CorruptRecord),
    /// The decision was made but its audit entry could not be appended.
    Audit {
        /// The decision (an `executed` one did happen).
        decision: Box<Decision>,
        /// The store's failure.
        error: StoreError,
    },
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Store(e) => write!(f, "claim store: {e}"),
            Self::State(e) => write!(f, "{e}"),
            Self::Authorizer(e) => write!(f, "authoriser unavailable: {e}"),
            Self::Corrupt(e) => write!(f, "corrupt record: {e}"),
            Self::Audit { decision, error } => write!(
                f,
                "decision {} made but not audited: {error}",
                decision.outcome()
            ),
        }
    }
}

impl std::error::Error for GateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Store(e) | Self::Audit { error: e, .. } => Some(e),
            Self::State(e) => Some(e),
            Self::Authorizer(e) => Some(e),
            Self::Corrupt(e) => Some(e),
        }
    }
}

impl From<StoreError> for GateError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<StateError> for GateError {
    fn from(e: StateError) -> Self {
        Self::State(e)
    }
}

impl From<AuthorizerUnavailable> for GateError {
    fn from(e: AuthorizerUnavailable) -> Self {
        Self::Authorizer(e)
    }
}

impl From<CorruptRecord> for GateError {
    fn from(e: CorruptRecord) -> Self {
        Self::Corrupt(e)
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn the_source_is_the_typed_cause() {
        let corrupt = GateError::from(CorruptRecord::new("result", "is not JSON"));
        assert_eq!(corrupt.to_string(), "corrupt record: result: is not JSON");
        let cause = corrupt
            .source()
            .and_then(|s| s.downcast_ref::<CorruptRecord>());
        assert_eq!(cause.map(CorruptRecord::field), Some("result"));

        let unavailable = GateError::from(AuthorizerUnavailable::new("directory: timed out"));
        assert_eq!(
            unavailable.to_string(),
            "authoriser unavailable: directory: timed out"
        );
        let cause = unavailable
            .source()
            .and_then(|s| s.downcast_ref::<AuthorizerUnavailable>());
        assert_eq!(
            cause.map(AuthorizerUnavailable::message),
            Some("directory: timed out")
        );
    }
}
