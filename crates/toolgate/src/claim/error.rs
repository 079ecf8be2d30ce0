//! Infrastructure failures of a claim store. Decisions (someone else holds
//! the claim, a completion that must reconcile) are values in `Ok`; only a
//! store that cannot answer returns a [`StoreError`].
//!
//! A store error may carry the driver's error that caused it
//! ([`std::error::Error::source`]), so a log or a caller can walk down to
//! the database's own code. The core names no driver: the cause is any
//! `Error + Send + Sync`.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

use super::record::CorruptRecord;

/// What kind of failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The URL or options are unusable.
    Config,
    /// The database could not be reached or the connection broke.
    Unavailable,
    /// The database refused a statement for a reason other than contention.
    Database,
    /// A row read back failed validation; it is not shown or used.
    Corrupt,
    /// The claim kept losing to contention (deadlocks, serialisation
    /// failures) past the retry budget.
    Contention,
    /// A COMMIT failed and the row could not be read back to learn whether
    /// it took effect. Treat the claim as needing reconciliation.
    OutcomeUnknown,
    /// Migrations failed to apply.
    Migration,
    /// The store broke one of its own invariants (for example an update
    /// that should touch at most one row touched more).
    Invariant,
}

impl StoreErrorKind {
    /// A stable snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::Unavailable => "unavailable",
            Self::Database => "database",
            Self::Corrupt => "corrupt",
            Self::Contention => "contention",
            Self::OutcomeUnknown => "outcome_unknown",
            Self::Migration => "migration",
            Self::Invariant => "invariant",
        }
    }
}

/// A claim store failure: a kind, a message, and the error that caused it
/// when there is one.
#[derive(Debug, Clone)]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
    // An `Arc`, not a `Box`: a store error is `Clone` (the protocol keeps
    // a first failure while it retries), and driver errors are not.
    source: Option<Arc<dyn Error + Send + Sync>>,
}

// By kind and message only: driver errors have no equality, and two
// failures that read the same are the same failure to whoever compares
// them (tests, a pipeline error's comparison).
impl PartialEq for StoreError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for StoreError {}

impl StoreError {
    /// A failure of `kind`.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// A failure of `kind` caused by `source` (a driver's error), which
    /// [`Error::source`] answers.
    pub fn with_source(
        kind: StoreErrorKind,
        message: impl Into<String>,
        source: impl Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            kind,
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// The same failure, same kind and cause, told with `message`.
    #[must_use]
    pub fn with_message(self, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            ..self
        }
    }

    /// A corrupt row.
    pub fn corrupt(problem: &CorruptRecord) -> Self {
        Self::new(StoreErrorKind::Corrupt, format!("corrupt row: {problem}"))
    }

    /// The kind.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Driver;

    impl fmt::Display for Driver {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("connection reset")
        }
    }

    impl Error for Driver {}

    #[test]
    fn the_cause_is_the_source_and_survives_a_clone_and_a_new_message() {
        let e = StoreError::with_source(StoreErrorKind::Unavailable, "reading a claim", Driver);
        let cause = e.source().expect("a source");
        assert!(cause.is::<Driver>());
        assert_eq!(cause.to_string(), "connection reset");
        let named = e.clone().with_message("reading a claim (node 2)");
        assert!(named.source().is_some_and(|c| c.is::<Driver>()));
        assert_eq!(named.kind(), StoreErrorKind::Unavailable);
    }

    #[test]
    fn no_cause_no_source_and_equality_ignores_the_cause() {
        let plain = StoreError::new(StoreErrorKind::Database, "refused");
        assert!(plain.source().is_none());
        let caused = StoreError::with_source(StoreErrorKind::Database, "refused", Driver);
        assert_eq!(plain, caused);
        assert_ne!(plain, StoreError::new(StoreErrorKind::Config, "refused"));
    }
}
