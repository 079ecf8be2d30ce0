//! Reads through the service: the core's [`decide_read`] on the service's
//! authoriser and audit, behind an optional per-principal rate.
//!
//! The rate is counted here, in a fixed window of a minute per (principal,
//! tool), because the core reads no clock. Past it a read is `rejected`
//! (`rate_limited`) before anything is authorised; only the first refusal of
//! each window is audited, so a flood costs the caller and not the audit
//! log. The counters are bounded: past [`MAX_COUNTERS`] the windows that
//! have ended go first, then the oldest.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Map, Value};
use toolgate::contract::Checked;
use toolgate::pipeline::{
    CallError, OverRate, Principal, ReadCall, ReadSettled, ReadVerdict, decide_read,
};

use crate::clock;
use crate::service::Service;

/// How many calls of unknown (or hidden) tools one principal has audited
/// a minute; past it they are refused unaudited until the next minute.
pub const UNKNOWN_TOOLS_AUDITED_PER_MINUTE: u32 = 60;

/// Most (principal, tool) counters kept at once.
pub const MAX_COUNTERS: usize = 65_536;

const WINDOW_MS: i64 = 60_000;

/// One call of a read tool a door hands the service.
#[derive(Debug)]
pub struct ReadProposal {
    /// The authenticated principal.
    pub principal: Principal,
    /// The contract stage's verdict.
    pub proposal: Checked,
    /// The scope fields the deployment maps, not yet canonical.
    pub scope: Map<String, Value>,
    /// The tool's rate, in calls per minute per principal, if it has one.
    pub per_minute: Option<u32>,
}

/// The per-principal read counters.
#[derive(Debug, Default)]
pub(crate) struct ReadRates {
    counters: Mutex<HashMap<(String, String), Window>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: i64,
    calls: u32,
    refused: bool,
}

impl ReadRates {
    /// Counts one call at `now`: `None` within the rate, else the refusal.
    fn count(&self, principal: &str, tool: &str, per_minute: u32, now: i64) -> Option<OverRate> {
        let mut counters = self
            .counters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (principal.to_owned(), tool.to_owned());
        if counters.len() >= MAX_COUNTERS && !counters.contains_key(&key) {
            counters.retain(|_, w| now - w.start < WINDOW_MS);
            if counters.len() >= MAX_COUNTERS
                && let Some(oldest) = counters
                    .iter()
                    .min_by_key(|(_, w)| w.start)
                    .map(|(k, _)| k.clone())
            {
                counters.remove(&oldest);
            }
        }
        let window = counters.entry(key).or_insert(Window {
            start: now,
            calls: 0,
            refused: false,
        });
        if now - window.start >= WINDOW_MS {
            *window = Window {
                start: now,
                calls: 0,
                refused: false,
            };
        }
        if window.calls < per_minute {
            window.calls += 1;
            return None;
        }
        let audited = !window.refused;
        window.refused = true;
        let retry_after = ((window.start + WINDOW_MS - now).max(0) + 999) / 1000;
        Some(OverRate {
            message: format!(
                "tool {tool:?} allows {per_minute} calls a minute per principal; \
                 retry in {retry_after} s"
            ),
            audited,
        })
    }
}

impl Service {
    /// Judges one read ([`decide_read`]): capability, the rate, typed
    /// scope and live authorisation on the service's authoriser, and one
    /// audit entry. An allowed read is forwarded by the door; nothing is
    /// claimed.
    pub async fn read(&self, read: ReadProposal) -> Result<ReadSettled, CallError> {
        let now = clock::now_millis();
        // Every call of the tool counts, one the schema rejects too.
        let over_rate = match (read.per_minute, read.proposal.tool.as_deref()) {
            (Some(n), Some(tool)) => self.read_rates().count(read.principal.id(), tool, n, now.0),
            _ => None,
        };
        let settled = decide_read(
            self.policy(),
            self.components().authorizer(),
            self.store(),
            ReadCall {
                principal: &read.principal,
                proposal: read.proposal,
                scope: &read.scope,
                now,
                over_rate,
            },
        )
        .await?;
        for note in &settled.notes {
            crate::service::log_read_note(&read.principal, note);
        }
        let (outcome, reason, tool) = match &settled.verdict {
            ReadVerdict::Allowed(r) => ("read", None, Some(r.tool())),
            ReadVerdict::Denied(d) => (d.outcome().as_str(), d.reason(), d.tool()),
        };
        tracing::info!(
            principal = read.principal.id(),
            via = read.principal.via(),
            outcome,
            reason = reason.map(|r| r.as_str()),
            tool,
            "read"
        );
        Ok(settled)
    }
}

impl Service {
    /// Audits a call of a tool the caller cannot see (none of that name,
    /// or one its capabilities hide) as the decision it is answered as:
    /// `rejected`, `unknown_tool`, the name as an escaped label. At most
    /// [`UNKNOWN_TOOLS_AUDITED_PER_MINUTE`] a minute per principal: a key
    /// that floods unknown names costs itself, not the audit log.
    pub async fn audit_unknown_tool(&self, principal: &Principal, tool: &str) {
        let now = clock::now_millis();
        // One counter per principal for every unknown name: the names are
        // the caller's to vary.
        let over = self.read_rates().count(
            principal.id(),
            "\u{0}unknown tools",
            UNKNOWN_TOOLS_AUDITED_PER_MINUTE,
            now.0,
        );
        if over.is_some() {
            return;
        }
        let entry = toolgate::claim::AuditEntry::new(
            now,
            principal.id().to_owned(),
            Some(toolgate::claim::audit_label(tool)),
            toolgate::pipeline::Outcome::Rejected.as_str().to_owned(),
            Some(
                toolgate::contract::RejectReason::UnknownTool
                    .as_str()
                    .to_owned(),
            ),
            None,
            None,
        )
        .and_then(|e| e.with_via(principal.via().map(str::to_owned)));
        let appended = match entry {
            Ok(e) => toolgate::claim::ClaimStore::append_audit(self.store(), &e).await,
            Err(e) => Err(toolgate::claim::StoreError::corrupt(&e)),
        };
        if let Err(error) = appended {
            tracing::error!(%error, "unknown tool call not audited");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_refuses_past_its_count_and_audits_once_a_window() {
        let rates = ReadRates::default();
        for i in 0..3 {
            assert!(rates.count("ana", "order_status", 3, 1_000 + i).is_none());
        }
        let first = rates.count("ana", "order_status", 3, 2_000).unwrap();
        assert!(first.audited);
        assert!(first.message.contains("retry in 59 s"), "{}", first.message);
        let second = rates.count("ana", "order_status", 3, 3_000).unwrap();
        assert!(!second.audited);
        // Another principal, another tool: counted apart.
        assert!(rates.count("bo", "order_status", 3, 3_000).is_none());
        assert!(rates.count("ana", "order_lines", 3, 3_000).is_none());
        // The next window starts afresh.
        assert!(rates.count("ana", "order_status", 3, 61_000).is_none());
    }

    #[test]
    fn the_counters_stay_bounded() {
        let rates = ReadRates::default();
        for i in 0..(MAX_COUNTERS + 10) {
            let _ = rates.count(&format!("p{i}"), "t", 1, 1);
        }
        let kept = rates.counters.lock().unwrap().len();
        assert!(kept <= MAX_COUNTERS, "{kept}");
    }
}
