//! The decision a review item keeps: typed in memory, JSON text in a row,
//! read back by the store as strictly as a claim record.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{MAX_DECISION_BYTES, MAX_SUMMARY_BYTES};
use crate::claim::CorruptRecord;
use crate::pipeline::{Decision, DecisionView, Outcome, Reason};

/// The decision a review item was opened with, as a reviewer sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum ItemDecision {
    /// The decision's flat view, and the proposal's arguments beside it
    /// (the decision carries only their fingerprint).
    Whole {
        /// The decision.
        view: Box<DecisionView>,
        /// The proposal's arguments, when the door had them.
        arguments: Option<Value>,
    },
    /// What fits of a decision too large to keep (over
    /// [`MAX_DECISION_BYTES`]) or to list (over [`MAX_SUMMARY_BYTES`]).
    Summary(Summary),
}

/// A decision's summary: its codes, tool, key and the start of its message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// The outcome.
    pub outcome: Option<Outcome>,
    /// The reason.
    pub reason: Option<Reason>,
    /// The tool, as an audit label (a model's tool name may be anything).
    pub tool: Option<String>,
    /// The operation key (hex).
    pub operation_key: Option<String>,
    /// The start of the message.
    pub message: Option<String>,
    /// Always `true`: the mark a reader tells a summary by.
    truncated: bool,
}

/// Members the HTTP door's response has beside the view, kept as null:
/// items were first stored in that form, and one text for old and new rows
/// needs no migration.
const NULL_AFTER: [(&str, &str); 2] = [("prior", "permit"), ("stateless", "review_item")];

impl ItemDecision {
    /// `decision` with the proposal's `arguments`.
    pub fn of(decision: &Decision, arguments: Option<&Value>) -> Self {
        Self::Whole {
            view: Box::new(decision.view()),
            arguments: arguments.cloned(),
        }
    }

    /// The JSON a reviewer reads: the view's members in order (with
    /// `permit` and `review_item` null after `prior` and `stateless`), then
    /// `arguments`; or the summary's.
    pub fn to_value(&self) -> Value {
        match self {
            Self::Whole { view, arguments } => {
                let Ok(Value::Object(members)) = serde_json::to_value(view) else {
                    return Value::Null;
                };
                let mut copy = Map::new();
                for (name, value) in members {
                    let after = NULL_AFTER.iter().find(|(a, _)| *a == name);
                    copy.insert(name, value);
                    if let Some((_, null)) = after {
                        copy.insert((*null).to_owned(), Value::Null);
                    }
                }
                if let Some(a) = arguments {
                    copy.insert("arguments".to_owned(), a.clone());
                }
                Value::Object(copy)
            }
            Self::Summary(s) => serde_json::to_value(s).unwrap_or(Value::Null),
        }
    }

    /// The text a row keeps: the whole decision if it fits
    /// [`MAX_DECISION_BYTES`], else its summary.
    pub fn to_text(&self) -> String {
        self.bounded(MAX_DECISION_BYTES, 1024).1
    }

    /// What a listing carries: the decision if its text fits
    /// [`MAX_SUMMARY_BYTES`], else its summary.
    pub fn listed(&self) -> Self {
        self.bounded(MAX_SUMMARY_BYTES, 512).0
    }

    /// The decision or its summary (the message cut to `message_max`
    /// bytes), whichever text fits `max`; and that text.
    fn bounded(&self, max: usize, message_max: usize) -> (Self, String) {
        let text = self.to_value().to_string();
        if text.len() <= max {
            return (self.clone(), text);
        }
        let summary = Self::Summary(self.summary(message_max));
        let text = summary.to_value().to_string();
        (summary, text)
    }

    fn summary(&self, message_max: usize) -> Summary {
        let cut = |m: &str| {
            let mut end = m.len().min(message_max);
            while !m.is_char_boundary(end) {
                end -= 1;
            }
            m[..end].to_owned()
        };
        match self {
            Self::Whole { view, .. } => Summary {
                outcome: Some(view.outcome),
                reason: view.reason,
                tool: view.tool.as_deref().map(crate::claim::audit_label),
                operation_key: view.operation_key.clone(),
                message: view.message.as_deref().map(cut),
                truncated: true,
            },
            Self::Summary(s) => Summary {
                message: s.message.as_deref().map(cut),
                ..s.clone()
            },
        }
    }

    /// Reads a row's text back: a decision's view (with `permit` and
    /// `review_item` null, and the proposal's `arguments`), or a summary.
    /// Anything else is a corrupt row.
    pub fn decode(text: &str) -> Result<Self, CorruptRecord> {
        let bad = |why: String| CorruptRecord::new("decision", why);
        let limits = crate::decode::Limits::provider_body().with_max_bytes(MAX_DECISION_BYTES * 4);
        let value = crate::decode::decode_strict(text.as_bytes(), &limits)
            .map_err(|e| bad(e.to_string()))?;
        let Value::Object(mut members) = value else {
            return Err(bad("not a JSON object".into()));
        };
        if members.get("truncated") == Some(&Value::Bool(true)) {
            let summary = Summary::deserialize(Value::Object(members))
                .map_err(|e| bad(format!("a summary: {e}")))?;
            return Ok(Self::Summary(summary));
        }
        for (_, null) in NULL_AFTER {
            match members.remove(null) {
                None | Some(Value::Null) => {}
                Some(_) => return Err(bad(format!("`{null}` is kept as null"))),
            }
        }
        let arguments = members.remove("arguments");
        let view = DecisionView::deserialize(Value::Object(members))
            .map_err(|e| bad(format!("a decision: {e}")))?;
        Ok(Self::Whole {
            view: Box::new(view),
            arguments,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Rejection;

    fn unknown_tool(message: &str) -> Decision {
        Decision::Rejected(Rejection::UnknownTool {
            tool: "drop_tables".into(),
            message: message.into(),
        })
    }

    #[test]
    fn a_kept_decision_reads_back_as_itself() {
        let kept = ItemDecision::of(&unknown_tool("no such tool"), Some(&serde_json::json!([1])));
        let text = kept.to_text();
        assert!(text.contains(r#""permit":null"#), "{text}");
        assert_eq!(ItemDecision::decode(&text), Ok(kept.clone()));
        assert_eq!(kept.listed(), kept);
    }

    #[test]
    fn a_large_decision_is_kept_and_listed_as_its_summary() {
        let kept = ItemDecision::of(&unknown_tool(&"é".repeat(20_000)), None);
        let text = kept.to_text();
        assert!(text.len() < MAX_DECISION_BYTES, "{}", text.len());
        let ItemDecision::Summary(stored) = ItemDecision::decode(&text).expect("reads") else {
            panic!("kept whole: {text}");
        };
        assert_eq!(stored.outcome, Some(Outcome::Rejected));
        assert_eq!(
            stored.reason,
            Some(Reason::Contract(crate::contract::RejectReason::UnknownTool))
        );
        assert_eq!(stored.message.as_deref().map(str::len), Some(1024));
        let ItemDecision::Summary(listed) = kept.listed() else {
            panic!("listed whole");
        };
        assert_eq!(listed.message.as_deref().map(str::len), Some(512));
        assert!(kept.listed().to_text().len() <= MAX_SUMMARY_BYTES);
    }

    #[test]
    fn a_row_that_is_not_a_kept_decision_is_corrupt() {
        for text in [
            "not json",
            "[]",
            "{}",
            r#"{"outcome":"no_such_outcome"}"#,
            r#"{"outcome":"rejected","permit":{"holder":"x"}}"#,
            r#"{"outcome":"rejected","extra":1}"#,
            r#"{"truncated":true,"outcome":"rejected","extra":1}"#,
        ] {
            assert!(ItemDecision::decode(text).is_err(), "{text}");
        }
    }
}
