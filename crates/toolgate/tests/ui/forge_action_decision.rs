// Nor can a stateless decision be given an action it did not come with: its
// `outcome` and `action` fields are private, so a rejected decision cannot be
// turned into an action by setting either (and the pipeline never sees an
// `action` outcome without its proposal).
use toolgate::contract::{Checked, CheckOutcome, ProposedAction};

fn upgrade(mut rejected: Checked, action: ProposedAction) -> Checked {
    rejected.outcome = CheckOutcome::Action;
    rejected.action = Some(action);
    rejected
}

fn main() {}
