//! Infrastructure failures of a claim store. Decisions (someone else holds
//! the claim, a completion that must reconcile) are values in `Ok`; only a
//! store that cannot answer returns a [`StoreError`].

use std::fmt;

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

/// A claim store failure: a kind and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
}

impl StoreError {
    /// A failure of `kind`.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
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

impl std::error::Error for StoreError {}
