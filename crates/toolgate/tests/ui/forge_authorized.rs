// A stage value cannot be built outside the pipeline: its fields are private.
use toolgate::pipeline::{Authorized, Principal, StateVersion, Validated};

fn forge(validated: Validated, principal: Principal) -> Authorized {
    Authorized {
        validated,
        principal,
        scope: serde_json::Map::new(),
        version_seen: StateVersion::from(7),
    }
}

fn main() {}
