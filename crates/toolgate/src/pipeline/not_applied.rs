//! The result the pipeline records when it closes a claim whose write did
//! not happen, typed: written by the completion after a failed
//! precondition, read back when a retry finds the closed claim.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::codes::Reason;
use super::state::StateVersion;

/// Why the pipeline closed a claim without its write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum NotAppliedReason {
    /// The executor's version precondition failed.
    PreconditionFailed,
}

impl From<NotAppliedReason> for Reason {
    fn from(r: NotAppliedReason) -> Self {
        match r {
            NotAppliedReason::PreconditionFailed => Self::PreconditionFailed,
        }
    }
}

/// `"applied": false`, the flag every not-applied result carries (and
/// the claim stores read to give budget reservations back): it serialises
/// as `false` and reads only `false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NotWritten;

impl Serialize for NotWritten {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(false)
    }
}

impl<'de> Deserialize<'de> for NotWritten {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if bool::deserialize(d)? {
            Err(serde::de::Error::custom("`applied` is true"))
        } else {
            Ok(Self)
        }
    }
}

/// A claim's recorded result when the pipeline closed it without a write:
/// `{"applied": false, "reason": "precondition_failed", "version_seen":
/// …, "current_version": …}`. A retry of the operation answers from it as
/// `state_changed`, never as `replayed` (which says the write happened).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NotApplied {
    applied: NotWritten,
    reason: NotAppliedReason,
    version_seen: String,
    current_version: Option<String>,
}

impl NotApplied {
    /// The result of a failed precondition: the version the model read
    /// and, if the executor said, the current one.
    pub(crate) fn precondition_failed(
        version_seen: &StateVersion,
        current: Option<&StateVersion>,
    ) -> Self {
        Self {
            applied: NotWritten,
            reason: NotAppliedReason::PreconditionFailed,
            version_seen: version_seen.as_str().to_owned(),
            current_version: current.map(|v| v.as_str().to_owned()),
        }
    }

    /// The result as JSON, as the decision shows it and the claim records
    /// it.
    pub(crate) fn to_value(&self) -> Result<Value, serde_json::Error> {
        serde_json::to_value(self)
    }

    /// A recorded result read back, if it is one of these.
    pub(crate) fn read(result: &Value) -> Option<Self> {
        result
            .is_object()
            .then(|| Self::deserialize(result).ok())
            .flatten()
    }

    /// Why nothing was written.
    pub(crate) fn reason(&self) -> Reason {
        self.reason.into()
    }

    /// The current version the executor reported, if any.
    pub(crate) fn current_version(&self) -> Option<StateVersion> {
        self.current_version.as_deref().and_then(StateVersion::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_reads_back_as_itself_and_names_the_reason_code() {
        let seen = StateVersion::new("7").unwrap();
        let current = StateVersion::new("9").unwrap();
        let r = NotApplied::precondition_failed(&seen, Some(&current));
        let value = r.to_value().unwrap();
        assert_eq!(
            value.to_string(),
            r#"{"applied":false,"reason":"precondition_failed","version_seen":"7","current_version":"9"}"#
        );
        assert_eq!(value["reason"], Reason::PreconditionFailed.as_str());
        assert_eq!(NotApplied::read(&value), Some(r));

        let none = NotApplied::precondition_failed(&seen, None)
            .to_value()
            .unwrap();
        assert_eq!(none["current_version"], Value::Null);
        assert_eq!(
            NotApplied::read(&none).and_then(|r| r.current_version()),
            None
        );
    }

    #[test]
    fn a_receipt_is_not_a_not_applied_result() {
        for receipt in [
            serde_json::json!({"applied": true, "reason": "precondition_failed", "version_seen": "1"}),
            serde_json::json!({"applied": false, "reason": "other", "version_seen": "1"}),
            serde_json::json!({"receipt_id": 4}),
            serde_json::json!([false, "precondition_failed", "1", null]),
        ] {
            assert_eq!(NotApplied::read(&receipt), None, "{receipt}");
        }
    }
}
