//! What the tests of a killed `toolgate bench race` worker share
//! (race_fault.rs, budget_fault.rs): the worker that claims and is killed,
//! `toolgate claims reconcile` on its claim, and the desk's goodwill credit
//! decided in this process through the desk's Cedar policies.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolgate::claim::{OperationKey, UnixMillis};
use toolgate::contract::{self, CheckOptions, Policy};
use toolgate::pipeline::{Decision, Gate, Principal, Request, StateVersion, decide};
use toolgate::provider::Provider;
use toolgate_cedar::CedarAuthorizer;
use toolgate_store::{AnyClaimStore, fresh_holder};
use toolgate_support_desk::SupportDesk;
use toolgate_support_desk::cedar::{self as desk_cedar, DeskEntities};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

/// Starts `toolgate bench race --hold-after-claim` with `options` on one
/// ticket, waits for the line it prints once it holds its claim, and kills
/// it with SIGKILL (std's `Child::kill` on Unix): no destructor, no
/// rollback handler, no completion or release runs in the worker. Returns
/// the line after `claimed `.
pub fn claim_then_sigkill(url: &str, options: &[&str]) -> String {
    let mut child = Command::new(BIN)
        .args(["bench", "race", "--hold-after-claim", "--db", url])
        .args(options)
        .args(["--workers", "1", "--tickets", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn toolgate");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    let claimed = line
        .trim()
        .strip_prefix("claimed ")
        .unwrap_or_else(|| panic!("unexpected output {line:?}"))
        .to_owned();
    child.kill().expect("SIGKILL");
    assert!(!child.wait().expect("wait").success());
    claimed
}

/// `toolgate claims reconcile --support-desk --db URL KEY --now NOW`, then
/// `options`.
pub fn reconcile(url: &str, key: &OperationKey, now: UnixMillis, options: &[&str]) -> Output {
    Command::new(BIN)
        .args(["claims", "reconcile", "--support-desk", "--db", url])
        .arg(key.to_hex())
        .args(["--now", &now.0.to_string()])
        .args(options)
        .output()
        .expect("reconcile")
}

/// `race-agent`'s goodwill credit of `amount` on `scope` at version 1,
/// decided at `now` under `policy` with the desk's Cedar policies, the
/// desk's state and executor, and `store`'s claims.
pub async fn credit(
    policy: &Policy,
    desk: &SupportDesk,
    store: &AnyClaimStore,
    scope: &Map<String, Value>,
    amount: u64,
    now: UnixMillis,
) -> Decision {
    let authz = CedarAuthorizer::new(
        desk_cedar::POLICIES,
        &desk_cedar::mapping(),
        DeskEntities(desk.clone()),
    )
    .expect("cedar");
    let gate = Gate {
        policy,
        authorizer: &authz,
        state: desk,
        claims: store,
        executor: desk,
    };
    let body = json!({"outcome": "action", "reply": "Credited.",
        "proposed_action": {"tool": "apply_goodwill_credit",
            "arguments": {"amount_minor": amount, "reason_code": "late_delivery"}}});
    let proposal = contract::check(
        policy,
        Provider::Envelope,
        body.to_string().as_bytes(),
        &CheckOptions::default(),
    );
    let principal = Principal::new("race-agent", ["credit:issue"]).expect("principal");
    let seen = StateVersion::from(1);
    let request = Request {
        principal: &principal,
        scope: &toolgate::pipeline::Scope::new(scope.clone(), Some(seen)),
        attributes: &Map::new(),
        approval: None,
        now,
        holder: fresh_holder().expect("holder"),
        lease: Duration::from_secs(30),
    };
    decide(&gate, proposal, &request).await.expect("decide")
}
