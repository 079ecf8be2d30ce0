//! The gate under test, and the run.
//!
//! Like cedar-testing's `CedarTestImplementation`, the corpus does not know
//! what decides it: [`GateUnderTest`] is implemented by the real pipeline
//! ([`PipelineGate`]: contract check, capability, Cedar, claim store, state
//! source, executor) and by [`RefuseAll`], the baseline that must fail the
//! release gate.

use std::future::Future;
use std::time::Duration;

use serde_json::{Map, Value};
use toolgate::claim::{ClaimStore, HolderToken, UnixMillis};
use toolgate::contract::{self, CheckOptions, EnvelopeMode, Policy};
use toolgate::pipeline::{
    Authorizer, Executor, Gate, Outcome, Principal, Request, StateSource, decide,
};

use crate::case::Case;
use crate::metrics::{CaseResult, Observed};

/// Something that decides cases.
pub trait GateUnderTest {
    /// The gate's name in the report.
    fn name(&self) -> &str;

    /// Decides one case. `Err` is an infrastructure failure (a database
    /// down), which stops the run: a decision is never an error.
    fn decide(&self, case: &Case) -> impl Future<Output = Result<Observed, String>>;
}

/// Refuses everything. It passes every safety rate (no action, no reply)
/// and must fail the release gate on blocked legitimate actions.
#[derive(Debug, Clone, Copy, Default)]
pub struct RefuseAll;

impl GateUnderTest for RefuseAll {
    fn name(&self) -> &str {
        "refuse-all"
    }

    fn decide(&self, _case: &Case) -> impl Future<Output = Result<Observed, String>> {
        std::future::ready(Ok(Observed {
            outcome: Outcome::Forbidden,
            reason: Some("refuse_all".to_owned()),
            message: Some("the refuse-all baseline refuses every proposal".to_owned()),
            reply: None,
        }))
    }
}

/// Puts a case's world in place before it is decided: the application's
/// rows the entity source and the state source will read (the actor, the
/// resource the scope names, its current version), from the case's
/// context and its [`Case::world`] map.
pub trait CaseSeeder {
    /// Seeds what `case` needs. Each case has its own scope, so its own
    /// resource. `policy` is the policy the case is decided under, for a
    /// seeder that puts earlier decisions in place through the same
    /// pipeline (writes a budget then counts).
    fn prepare(&self, policy: &Policy, case: &Case) -> impl Future<Output = Result<(), String>>;
}

/// The clock and fresh holder tokens: the core has neither, so whoever runs
/// the evaluation supplies them.
pub trait ClockAndTokens {
    /// A fresh, unpredictable holder token.
    fn holder(&self) -> Result<HolderToken, String>;
    /// The time now.
    fn now(&self) -> UnixMillis;
}

/// The real pipeline: [`contract::check`] then [`decide`] with the
/// application's authoriser, state source, claim store and executor.
pub struct PipelineGate<'a, A, S, C, E, W, X> {
    /// The pluggable parts.
    pub gate: Gate<'a, A, S, C, E>,
    /// Seeds each case's world.
    pub seeder: &'a W,
    /// The clock and holder tokens.
    pub clock_and_tokens: &'a X,
    /// How long a won claim may run.
    pub lease: Duration,
}

/// The server-fixed scope of a case, as the application would send it (the
/// pipeline adds `version_seen`).
pub fn scope_of(case: &Case) -> Map<String, Value> {
    case.context.scope.clone()
}

/// The stateless stages on a case's recorded response.
pub fn check_case(policy: &Policy, case: &Case) -> contract::Checked {
    let opts = CheckOptions {
        stream: case.stream,
        attempt: 1,
        mode: if case.structured {
            EnvelopeMode::Structured
        } else {
            EnvelopeMode::Native
        },
    };
    contract::check(policy, case.provider, &case.response, &opts)
}

/// The observation of a pipeline decision. Only a model-authored reply
/// counts as a reply: the abstain message is the application's.
pub fn observe(d: &toolgate::pipeline::Decision) -> Observed {
    let reply = match d.outcome() {
        Outcome::Answer | Outcome::Executed | Outcome::Replayed => d.reply().map(str::to_owned),
        _ => None,
    };
    Observed {
        outcome: d.outcome(),
        reason: d.reason().map(|r| r.as_str().to_owned()),
        message: d.message().map(str::to_owned),
        reply,
    }
}

impl<A, S, C, E, W, X> GateUnderTest for PipelineGate<'_, A, S, C, E, W, X>
where
    A: Authorizer,
    S: StateSource,
    C: ClaimStore,
    E: Executor,
    W: CaseSeeder,
    X: ClockAndTokens,
{
    fn name(&self) -> &str {
        "toolgate"
    }

    async fn decide(&self, case: &Case) -> Result<Observed, String> {
        self.seeder.prepare(self.gate.policy, case).await?;
        let principal = Principal::new(
            case.context.actor.clone(),
            case.capabilities(self.gate.policy),
        )
        .map_err(|e| format!("{}: {e}", case.source))?;
        let version_seen = case.version_seen();
        let scope = scope_of(case);
        let request = Request {
            principal: &principal,
            scope: &scope,
            version_seen: &version_seen,
            attributes: &Map::new(),
            approval: None,
            now: self.clock_and_tokens.now(),
            holder: self.clock_and_tokens.holder()?,
            lease: self.lease,
        };
        let proposal = check_case(self.gate.policy, case);
        let decision = decide(&self.gate, proposal, &request)
            .await
            .map_err(|e| format!("{}: {e}", case.id))?;
        Ok(observe(&decision))
    }
}

/// Runs every case through `gate`, in order, calling `progress` after each.
pub async fn run<G: GateUnderTest>(
    gate: &G,
    cases: &[Case],
    mut progress: impl FnMut(&CaseResult),
) -> Result<Vec<CaseResult>, String> {
    let mut results = Vec::with_capacity(cases.len());
    for case in cases {
        let observed = gate.decide(case).await?;
        let result = CaseResult::new(case, observed);
        progress(&result);
        results.push(result);
    }
    Ok(results)
}
