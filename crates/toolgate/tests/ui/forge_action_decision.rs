// Nor can a stateless decision be given an action it did not come with: the
// `action` field is private, so a rejected decision cannot be turned into an
// action by setting its proposal.
use toolgate::contract::{Decision, Outcome, ProposedAction};

fn upgrade(mut rejected: Decision, action: ProposedAction) -> Decision {
    rejected.outcome = Outcome::Action;
    rejected.action = Some(action);
    rejected
}

fn main() {}
