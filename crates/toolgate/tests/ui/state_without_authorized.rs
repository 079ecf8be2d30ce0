// The state source's input can only be borrowed from an `Authorized`:
// naming a resource without one does not compile.
use toolgate::pipeline::{Principal, StateScope, StateSource};

async fn read<S: StateSource>(state: &S, principal: &Principal) {
    let scope = serde_json::Map::new();
    let _ = state
        .current_version(StateScope { tool: "apply_goodwill_credit", scope: &scope, principal })
        .await;
}

fn main() {}
