//! A stateless decision rendered as JSON, the shape `toolgate check` prints
//! and the provider fixtures record.

use serde_json::{Value, json};

use super::decision::Checked;
use super::vocab::RejectReason;

impl Checked {
    /// The decision as one JSON object with a fixed set of keys (absent
    /// values are `null`), as `toolgate check` prints it.
    pub fn to_json(&self) -> Value {
        let stop = self.stop.as_ref().map(|s| {
            json!({
                "class": s.class.as_str(),
                "raw": s.raw,
                "category": s.category,
                "explanation": s.explanation,
            })
        });
        let a = self.action.as_ref();
        json!({
            "outcome": self.outcome.as_str(),
            "reason": self.reason.map(RejectReason::as_str),
            "pointer": self.pointer,
            "message": self.message,
            "tool": self.tool.as_deref(),
            "call_id": a.and_then(|a| a.call_id.clone()),
            "arguments": a.map(|a| a.arguments.clone()),
            "fingerprint": a.map(|a| a.fingerprint.to_hex()),
            "capability": a.map(|a| &*a.capability),
            "needs_approval": a.map(|a| a.needs_approval),
            "reply": self.reply,
            "stop": stop,
            "attempt": self.attempt,
            "repairable": self.repairable,
        })
    }
}
