//! What stops a decision that is not a decision: a store, state source,
//! authoriser or audit log that could not answer, or a record that failed
//! its contract. Each carries its typed cause, which [`source`] reaches.
//!
//! [`source`]: std::error::Error::source

use super::authz::AuthorizerUnavailable;
use super::decision::Decision;
use super::state::StateError;
use crate::claim::{CorruptRecord, StoreError};

/// An infrastructure failure: a store, state source or audit log that could
/// not answer. Decisions are never errors.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The claim store failed.
    #[error("claim store: {0}")]
    Store(#[from] StoreError),
    /// The state source failed.
    #[error("{0}")]
    State(#[from] StateError),
    /// The authoriser could not reach a source it needs
    /// ([`AuthzDecision::Unavailable`](super::AuthzDecision)); nothing was
    /// decided or claimed.
    #[error("authoriser unavailable: {0}")]
    Authorizer(#[from] AuthorizerUnavailable),
    /// A record read back from storage failed the tool's contract, or a
    /// proposal record could not be built; it is never shown.
    #[error("corrupt record: {0}")]
    Corrupt(#[from] CorruptRecord),
    /// The decision was made but its audit entry could not be appended.
    #[error("decision {} made but not audited: {error}", decision.outcome())]
    Audit {
        /// The decision (an `executed` one did happen).
        decision: Box<Decision>,
        /// The store's failure.
        #[source]
        error: StoreError,
    },
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
