//! The append-only audit log: one entry per decision (docs/design.md §8).

use super::ids::{Fingerprint, OperationKey};
use super::record::{CorruptRecord, MAX_LABEL_BYTES, UnixMillis};

/// One decision, as the audit log keeps it. Stores only ever append these;
/// no store method updates or deletes one, and the SQL backends also refuse
/// `UPDATE` and `DELETE` on the table with triggers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    at: UnixMillis,
    actor: String,
    tool: Option<String>,
    outcome: String,
    reason: Option<String>,
    key: Option<OperationKey>,
    fingerprint: Option<Fingerprint>,
    via: Option<String>,
    attempt: Option<u32>,
}

fn text(field: &'static str, value: String) -> Result<String, CorruptRecord> {
    if value.is_empty() || value.len() > MAX_LABEL_BYTES {
        return Err(CorruptRecord::new(
            field,
            format!("must be 1 to {MAX_LABEL_BYTES} bytes"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(CorruptRecord::new(field, "contains a control character"));
    }
    Ok(value)
}

fn code(field: &'static str, value: String) -> Result<String, CorruptRecord> {
    let value = text(field, value)?;
    if !value
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(CorruptRecord::new(field, "is not a snake_case code"));
    }
    Ok(value)
}

impl AuditEntry {
    /// Builds an entry. `outcome` and `reason` are stable snake_case codes
    /// (docs/design.md §2); `actor` and `tool` are labels of at most
    /// [`MAX_LABEL_BYTES`] bytes. Stores validate rows they read back with
    /// this same constructor.
    pub fn new(
        at: UnixMillis,
        actor: String,
        tool: Option<String>,
        outcome: String,
        reason: Option<String>,
        key: Option<OperationKey>,
        fingerprint: Option<Fingerprint>,
    ) -> Result<Self, CorruptRecord> {
        Ok(Self {
            at,
            actor: text("actor", actor)?,
            tool: tool.map(|t| text("tool", t)).transpose()?,
            outcome: code("outcome", outcome)?,
            reason: reason.map(|r| code("reason", r)).transpose()?,
            key,
            fingerprint,
            via: None,
            attempt: None,
        })
    }

    /// The entry with `via`: the authenticated key's own principal when it
    /// acted for `actor` (actor delegation, docs/design.md §13). Stores
    /// validate rows they read back with this same method.
    pub fn with_via(mut self, via: Option<String>) -> Result<Self, CorruptRecord> {
        self.via = via.map(|v| text("via", v)).transpose()?;
        Ok(self)
    }

    /// The entry for attempt `attempt` of its operation (docs/design.md
    /// invariant 8: every attempt is audited as its own); `None` for
    /// entries about no claim in particular.
    #[must_use]
    pub fn with_attempt(mut self, attempt: Option<u32>) -> Self {
        self.attempt = attempt;
        self
    }

    /// The attempt of the operation the entry is about, when it is about
    /// one claim attempt.
    pub fn attempt(&self) -> Option<u32> {
        self.attempt
    }

    /// When the decision was made.
    pub fn at(&self) -> UnixMillis {
        self.at
    }

    /// Who acted (the authenticated principal).
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// The delegating principal, when `actor` was named by a key allowed
    /// to act for users; `None` when the actor authenticated itself.
    pub fn via(&self) -> Option<&str> {
        self.via.as_deref()
    }

    /// The tool, if the decision concerned one.
    pub fn tool(&self) -> Option<&str> {
        self.tool.as_deref()
    }

    /// The outcome code.
    pub fn outcome(&self) -> &str {
        &self.outcome
    }

    /// The reason code, if any.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// The operation key, if one was derived.
    pub fn key(&self) -> Option<&OperationKey> {
        self.key.as_ref()
    }

    /// The fingerprint, if one was derived.
    pub fn fingerprint(&self) -> Option<&Fingerprint> {
        self.fingerprint.as_ref()
    }
}
