//! Mutable state: the current version of the resource a proposal is about.

use std::fmt;
use std::future::Future;

use serde_json::{Map, Value};

use super::authz::Principal;
use crate::claim::MAX_LABEL_BYTES;

/// A resource version as the server reads it: opaque text compared for
/// equality (an integer counter, an ETag, a timestamp).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StateVersion(String);

impl StateVersion {
    /// A version; `None` if empty, longer than [`MAX_LABEL_BYTES`] or with
    /// a control character (it is stored in the claim's proposal record).
    pub fn new(text: impl Into<String>) -> Option<Self> {
        let text = text.into();
        let ok = !text.is_empty()
            && text.len() <= MAX_LABEL_BYTES
            && !text.chars().any(char::is_control);
        ok.then_some(Self(text))
    }

    /// The version text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<i64> for StateVersion {
    fn from(v: i64) -> Self {
        Self(v.to_string())
    }
}

impl fmt::Display for StateVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a [`StateSource`] may read: the resource named by an authorised
/// proposal's scope. Only [`super::Authorized::state_scope`] makes one, so
/// state cannot be read for a proposal that was not authorised.
#[derive(Debug, Clone, Copy)]
pub struct StateScope<'a> {
    pub(crate) tool: &'a str,
    pub(crate) scope: &'a Map<String, Value>,
    pub(crate) principal: &'a Principal,
}

impl StateScope<'_> {
    /// The tool.
    pub fn tool(&self) -> &str {
        self.tool
    }

    /// The server-fixed scope fields.
    pub fn scope(&self) -> &Map<String, Value> {
        self.scope
    }

    /// One scope field as text (a string, or an integer printed).
    pub fn field(&self, name: &str) -> Option<String> {
        match self.scope.get(name)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
            _ => None,
        }
    }

    /// The authorised actor.
    pub fn principal(&self) -> &Principal {
        self.principal
    }
}

/// A state source could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("state source: {message}")]
pub struct StateError {
    message: String,
    misconfigured: bool,
    not_found: bool,
}

impl StateError {
    /// An error with `message`: the source did not answer this time (a
    /// database or service down, a timeout); a retry may succeed.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            misconfigured: false,
            not_found: false,
        }
    }

    /// The source answered, and has no resource for the scope (no row, a
    /// 404): the request names something that does not exist. Not an
    /// outage: front doors answer it as the request's fault.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            misconfigured: false,
            not_found: true,
        }
    }

    /// Whether the source found no such resource ([`StateError::not_found`]).
    pub fn is_not_found(&self) -> bool {
        self.not_found
    }

    /// An error that every retry of the same request meets: the source is
    /// wired in a way that cannot answer it (a query that returns several
    /// rows, a column of a type it cannot read). Front doors answer it as
    /// not retryable.
    pub fn misconfigured(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            misconfigured: true,
            not_found: false,
        }
    }

    /// What failed.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether a retry of the same request meets the same error
    /// ([`StateError::misconfigured`]).
    pub fn is_misconfigured(&self) -> bool {
        self.misconfigured
    }
}

/// Reads the current version of the resource an authorised proposal names.
///
/// The gate's comparison is a filter, not a lock (docs/design.md invariant 9): the
/// executor applies the version again as a write precondition.
pub trait StateSource: Send + Sync {
    /// The resource's current version. A missing resource is an error.
    fn current_version(
        &self,
        scope: StateScope<'_>,
    ) -> impl Future<Output = Result<StateVersion, StateError>> + Send;

    /// Whether proposals for `tool` have their version read and compared
    /// at all. `false` is a tool whose executor's write precondition alone
    /// decides (docs/design.md §13, `state = { source = "none" }`): the
    /// pipeline skips [`StateSource::current_version`] and the comparison,
    /// and a stale `version_seen` surfaces as the executor's
    /// [`super::ExecOutcome::PreconditionFailed`], recorded as
    /// `state_changed`. `version_seen` is still required: it is part of the
    /// operation key and the permit's precondition version.
    fn reads_state(&self, tool: &str) -> bool {
        let _ = tool;
        true
    }
}
