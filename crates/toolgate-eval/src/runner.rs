//! The gate under test, and the run.
//!
//! Like cedar-testing's `CedarTestImplementation`, the corpus does not know
//! what decides it: [`GateUnderTest`] is implemented by the running service
//! ([`ServiceGate`]: the decision every door makes, on the deployment's
//! Cedar, claim store, state source and executor) and by [`RefuseAll`], the
//! baseline that must fail the release gate.

use std::future::Future;

use serde_json::{Map, Value};
use toolgate::contract::{self, CheckOptions, EnvelopeMode, Policy};
use toolgate::pipeline::{CallError, Outcome, Principal, VersionSeen};
use toolgate_service::{DecideError, ExecutionMode, Proposal, Service};

use crate::case::Case;
use crate::metrics::{CaseResult, Observed};

/// Something that decides cases.
pub trait GateUnderTest {
    /// The gate's name in the report.
    fn name(&self) -> &str;

    /// Decides one case. `Err` is an infrastructure failure (a database
    /// down), which stops the run: a decision is never an error.
    fn decide(&self, case: &Case) -> impl Future<Output = Result<Observed, EvalError>>;
}

/// Refuses everything. It passes every safety rate (no action, no reply)
/// and must fail the release gate on blocked legitimate actions.
#[derive(Debug, Clone, Copy, Default)]
pub struct RefuseAll;

impl GateUnderTest for RefuseAll {
    fn name(&self) -> &str {
        "refuse-all"
    }

    fn decide(&self, _case: &Case) -> impl Future<Output = Result<Observed, EvalError>> {
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
    fn prepare(&self, policy: &Policy, case: &Case) -> impl Future<Output = Result<(), SeedError>>;
}

/// The gate a deployment runs, with each case's world seeded first: its
/// [`Service`], deciding as every door does ([`Service::decide`]: the
/// approval loop, review items and the authoriser's words concealed).
pub struct ServiceGate<'a, W> {
    /// The running gate.
    pub service: &'a Service,
    /// Seeds each case's world.
    pub seeder: &'a W,
}

/// The server-fixed scope of a case, as the application would send it (the
/// version the model read travels beside it).
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

impl<W: CaseSeeder> GateUnderTest for ServiceGate<'_, W> {
    fn name(&self) -> &str {
        "toolgate"
    }

    async fn decide(&self, case: &Case) -> Result<Observed, EvalError> {
        let policy = self.service.policy();
        self.seeder
            .prepare(policy, case)
            .await
            .map_err(|source| EvalError::Seed {
                case: case.id.clone(),
                source,
            })?;
        let principal = Principal::new(case.context.actor.clone(), case.capabilities(policy))
            .map_err(|source| EvalError::Principal {
                case: format!("{} ({})", case.id, case.source),
                source,
            })?;
        let proposal = Proposal {
            principal,
            proposal: check_case(policy, case),
            scope: scope_of(case),
            version_seen: VersionSeen::Given(Value::String(
                case.version_seen().as_str().to_owned(),
            )),
            attributes: Map::new(),
            mode: ExecutionMode::InProcess,
        };
        match self.service.decide(proposal).await {
            Ok(settled) => Ok(observe(&settled.decision)),
            // A request the gate cannot take is what a door answers with a
            // problem: scored as a rejection with the refusal's code.
            Err(DecideError::Call(CallError::Refused { refused, .. })) => Ok(Observed {
                outcome: Outcome::Rejected,
                reason: Some(refused.refusal.as_str().to_owned()),
                message: Some(refused.message),
                reply: None,
            }),
            Err(source) => Err(EvalError::Decide {
                case: case.id.clone(),
                source,
            }),
        }
    }
}

/// What stops an evaluation: a case whose world cannot be put in place, or
/// a gate that cannot decide (a database down). A decision is never one.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The case's world could not be seeded.
    #[error("case {case}: {source}")]
    Seed {
        /// The case.
        case: String,
        /// Why.
        source: SeedError,
    },
    /// The case's actor or capabilities are not a principal.
    #[error("{case}: {source}")]
    Principal {
        /// The case and its file.
        case: String,
        /// Why.
        source: toolgate::pipeline::PrincipalError,
    },
    /// The gate could not decide.
    #[error("case {case}: {source}")]
    Decide {
        /// The case.
        case: String,
        /// Why.
        source: DecideError,
    },
}

/// Why a case's world could not be put in place: the seeder's own error,
/// kept as the cause.
pub type SeedError = Box<dyn std::error::Error + Send + Sync>;

/// Runs every case through `gate`, in order, calling `progress` after each.
pub async fn run<G: GateUnderTest>(
    gate: &G,
    cases: &[Case],
    mut progress: impl FnMut(&CaseResult),
) -> Result<Vec<CaseResult>, EvalError> {
    let mut results = Vec::with_capacity(cases.len());
    for case in cases {
        let observed = gate.decide(case).await?;
        let result = CaseResult::new(case, observed);
        progress(&result);
        results.push(result);
    }
    Ok(results)
}
