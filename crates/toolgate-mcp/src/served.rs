//! The gateway's decision on a deployment that `toolgate serve` runs: the
//! service's own decision ([`Service::decide`], the one every door calls)
//! with the deployment's components: its claim store, authoriser, state
//! sources, review queue, budgets, audit and metrics, and its executor
//! (which sends an MCP tool to its upstream). Nothing here decides: it
//! translates a [`GatedCall`] into the service's proposal and the result
//! back.

use std::future::Future;

use toolgate::pipeline::{CallError, Decision, Reason, Refusal, Rejection};
use toolgate_service::{self as service, ExecutionMode, Proposal, Service};

use std::sync::Arc;

use toolgate::pipeline::{ExecError, ReadVerdict};

use crate::executor::UpstreamExecutor;
use crate::wire::{
    Decide, DecideError, DecisionForWire, GatedCall, GatedRead, ReadForWire, VersionSeen,
};

/// The path of a review item on the reviewer page, below the deployment's
/// `public_url`.
pub fn review_url(public_url: &str, item: i64) -> String {
    format!("{}/review/items/{item}", public_url.trim_end_matches('/'))
}

/// [`Decide`] over a served deployment.
pub struct Served {
    service: Service,
    reads: Option<Arc<UpstreamExecutor>>,
}

impl Served {
    /// Decides with `service`; a read tool is not forwarded
    /// ([`Served::forwarding_reads`]).
    pub fn new(service: Service) -> Self {
        Self {
            service,
            reads: None,
        }
    }

    /// Forwards the reads the service allows through `upstreams` (the
    /// executor the service's writes go through, so a read reaches the
    /// same upstream, as the same person).
    pub fn forwarding_reads(mut self, upstreams: Arc<UpstreamExecutor>) -> Self {
        self.reads = Some(upstreams);
        self
    }
}

impl Decide for Served {
    fn decide(
        &self,
        call: GatedCall,
    ) -> impl Future<Output = Result<DecisionForWire, DecideError>> + Send {
        let service = self.service.clone();
        async move {
            let version_seen = match call.version_seen {
                VersionSeen::Read(v) => toolgate::pipeline::VersionSeen::Given(v),
                VersionSeen::Missing => toolgate::pipeline::VersionSeen::Absent,
            };
            let tool = call.proposal.action().map(|a| a.tool().to_owned());
            let fingerprint = call.proposal.action().map(|a| *a.fingerprint());
            let proposal = Proposal {
                principal: call.principal,
                proposal: call.proposal,
                scope: call.scope,
                version_seen,
                // An MCP call sends no application entities: the authoriser
                // reads its own.
                attributes: serde_json::Map::new(),
                // The gateway's executor is the deployment's (the upstream
                // for an `mcp_upstream` tool): never a permit.
                mode: ExecutionMode::InProcess,
            };
            let settled = match service.decide(proposal).await {
                Ok(s) => s,
                // A scope the core refused (already audited): the model's
                // call named no valid resource or version, which it can
                // correct, so it is answered as a rejected call.
                Err(service::DecideError::Call(CallError::Refused { refused, .. })) => {
                    let (Some(tool), Some(fingerprint)) = (tool, fingerprint) else {
                        return Err(DecideError::RefusedWithoutAction(refused.message));
                    };
                    return Ok(scope_rejection(refused, tool, fingerprint));
                }
                Err(service::DecideError::Call(CallError::Gate(e))) => {
                    return Err(DecideError::Gate(e));
                }
                Err(service::DecideError::Task(e)) => return Err(DecideError::Task(e)),
            };
            let review_url = match (&service.settings().public_url, settled.review_item) {
                (Some(base), Some(item)) => Some(review_url(base, item)),
                _ => None,
            };
            Ok(DecisionForWire {
                decision: settled.decision,
                review_url,
            })
        }
    }

    fn read(
        &self,
        call: GatedRead,
    ) -> impl Future<Output = Result<ReadForWire, DecideError>> + Send {
        self.judge_and_forward(call)
    }

    fn unknown_tool(
        &self,
        principal: &toolgate::pipeline::Principal,
        tool: &str,
    ) -> impl Future<Output = ()> + Send {
        let service = self.service.clone();
        let principal = principal.clone();
        let tool = tool.to_owned();
        async move { service.audit_unknown_tool(&principal, &tool).await }
    }
}

impl Served {
    async fn judge_and_forward(&self, call: GatedRead) -> Result<ReadForWire, DecideError> {
        let principal = call.principal.clone();
        let tool = call.proposal.action().map(|a| a.tool().to_owned());
        let fingerprint = call.proposal.action().map(|a| *a.fingerprint());
        let settled = self
            .service
            .read(service::ReadProposal {
                principal: call.principal,
                proposal: call.proposal,
                scope: call.scope,
                per_minute: call.per_minute,
            })
            .await;
        let settled = match settled {
            Ok(s) => s,
            Err(CallError::Refused { refused, .. }) => {
                let (Some(tool), Some(fingerprint)) = (tool, fingerprint) else {
                    return Err(DecideError::RefusedWithoutAction(refused.message));
                };
                return Ok(ReadForWire::Denied(scope_rejection(
                    refused,
                    tool,
                    fingerprint,
                )));
            }
            Err(CallError::Gate(e)) => return Err(DecideError::Gate(e)),
        };
        match settled.verdict {
            ReadVerdict::Denied(decision) => Ok(ReadForWire::Denied(DecisionForWire {
                decision: *decision,
                review_url: None,
            })),
            ReadVerdict::Allowed(read) => {
                let Some(upstreams) = &self.reads else {
                    return Err(DecideError::Read(ExecError::new(
                        "this gateway forwards no reads (Served::forwarding_reads)",
                    )));
                };
                upstreams
                    .read(&read, &principal)
                    .await
                    .map(ReadForWire::Forwarded)
                    .map_err(DecideError::Read)
            }
        }
    }
}

/// A scope the core refused (already audited): the model's call named no
/// valid resource, which it can correct, so it is answered as a rejected
/// call.
fn scope_rejection(
    refused: toolgate::pipeline::Refused,
    tool: String,
    fingerprint: toolgate::claim::Fingerprint,
) -> DecisionForWire {
    let reason = match refused.refusal {
        Refusal::MissingScope => Reason::MissingScope,
        _ => Reason::InvalidScope,
    };
    DecisionForWire {
        decision: Decision::Rejected(Rejection::Scope {
            reason,
            tool,
            fingerprint,
            message: refused.message,
        }),
        review_url: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_review_url_is_the_item_page_below_the_public_url() {
        assert_eq!(
            review_url("https://gate.example/", 17),
            "https://gate.example/review/items/17"
        );
        assert_eq!(
            review_url("http://127.0.0.1:8080", 3),
            "http://127.0.0.1:8080/review/items/3"
        );
    }
}
