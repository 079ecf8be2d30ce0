// A proposed action cannot be built outside `contract::check`: its fields are
// private, so an "action" that skipped schema validation, the unknown-key
// rule and the fingerprint cannot reach `pipeline::decide`.
use std::sync::Arc;

use toolgate::claim::Fingerprint;
use toolgate::contract::ProposedAction;

fn forge(fingerprint: Fingerprint) -> ProposedAction {
    ProposedAction {
        tool: Arc::from("refund_order"),
        call_id: None,
        arguments: serde_json::json!({ "amount_minor": 1_000_000 }),
        canonical_arguments: String::new(),
        fingerprint,
        capability: Arc::from("refund:issue"),
        needs_approval: false,
    }
}

fn main() {}
