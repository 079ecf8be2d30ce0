//! The service's own limit on what it records: the result cap
//! ([`Settings::max_result_bytes`](crate::Settings::max_result_bytes)) on
//! every way a result reaches the claim store, whichever door it came
//! through.

use toolgate::claim::{ClaimRecord, ExecutorKind, JsonText, RESULT_JSON_LIMITS, ReconcileOutcome};
use toolgate::pipeline::{
    AppliedCompletion, Completed, ExecError, ExecOutcome, ExecPermit, Executor,
};

/// The cap in force: the configured one, never above the ceiling every
/// stored result must meet when it is read back ([`RESULT_JSON_LIMITS`]).
/// So a result too large is always `result_too_large`, never a decode
/// rejection about its size.
pub fn result_cap(configured: usize) -> usize {
    configured.min(RESULT_JSON_LIMITS.max_bytes())
}

fn over_cap(what: &str, len: usize, cap: usize) -> String {
    format!(
        "result_too_large: {what} is {len} bytes of JSON, over the result cap of {cap} bytes; \
         nothing was recorded"
    )
}

/// A result over the cap: nothing was recorded (`result_too_large`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ResultTooLarge(String);

/// Refuses a result text over the cap before anything is recorded.
pub fn check_result(text: &str, configured: usize) -> Result<(), ResultTooLarge> {
    let cap = result_cap(configured);
    if text.len() > cap {
        return Err(ResultTooLarge(over_cap("the result", text.len(), cap)));
    }
    Ok(())
}

/// The service's result cap on an in-process executor's receipts
/// ([`Components::decide_in_process`](crate::Components::decide_in_process)):
/// components that make an executor for one decision put it behind the cap
/// with [`ResultCap::wrap`].
#[derive(Debug, Clone, Copy)]
pub struct ResultCap(usize);

impl ResultCap {
    /// The cap for a configured `max_result_bytes`.
    pub fn new(configured: usize) -> Self {
        Self(result_cap(configured))
    }

    /// `inner` behind the cap.
    pub fn wrap<E>(self, inner: &E) -> Capped<'_, E> {
        Capped { inner, cap: self.0 }
    }

    /// `completion` for an executor that completes in its own write's
    /// transaction: it refuses a receipt over the cap before its `COMMIT`.
    pub fn completion(self, completion: &AppliedCompletion) -> AppliedCompletion {
        completion.clone().with_receipt_cap(self.0)
    }
}

/// The server's executor with the result cap: a receipt over it is an
/// executor error, so the claim stays in flight (the write may have
/// happened downstream; the decision is `needs_reconciliation`) and
/// nothing is recorded. Reconciling asks the executor again and meets the
/// same cap, so such a claim is closed by an explicit, smaller answer.
pub struct Capped<'a, E> {
    inner: &'a E,
    cap: usize,
}

impl<'a, E> Capped<'a, E> {
    /// `inner` behind the cap for a configured `max_result_bytes`.
    pub fn new(inner: &'a E, configured: usize) -> Self {
        ResultCap::new(configured).wrap(inner)
    }

    fn check(&self, text: &JsonText) -> Result<(), ExecError> {
        let len = text.as_str().len();
        if len > self.cap {
            return Err(ExecError::new(format!(
                "{}; reconcile the claim with an explicit answer",
                over_cap("the executor's receipt", len, self.cap)
            )));
        }
        Ok(())
    }
}

impl<E: Executor> Executor for Capped<'_, E> {
    async fn execute(&self, permit: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        let outcome = self.inner.execute(permit).await?;
        if let ExecOutcome::Applied { receipt } = &outcome {
            self.check(receipt)?;
        }
        Ok(outcome)
    }

    async fn execute_and_complete(
        &self,
        permit: ExecPermit<'_>,
        completion: &AppliedCompletion,
    ) -> Result<Completed, ExecError> {
        // An executor that completes in its own write's transaction checks
        // the cap before its COMMIT; any other receipt is checked here.
        let completion = ResultCap(self.cap).completion(completion);
        let completed = self.inner.execute_and_complete(permit, &completion).await?;
        if let Completed::Outcome(ExecOutcome::Applied { receipt }) = &completed {
            self.check(receipt)?;
        }
        Ok(completed)
    }

    fn kind(&self, tool: &str) -> ExecutorKind {
        self.inner.kind(tool)
    }

    async fn reconcile(&self, claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        let outcome = self.inner.reconcile(claim).await?;
        match &outcome {
            ReconcileOutcome::Applied { receipt: t }
            | ReconcileOutcome::NotApplied { detail: t } => {
                self.check(t)?;
            }
        }
        Ok(outcome)
    }

    fn answered(
        &self,
        tool: &str,
        receipt: toolgate::claim::JsonText,
    ) -> Result<toolgate::claim::JsonText, ExecError> {
        let shaped = self.inner.answered(tool, receipt)?;
        self.check(&shaped)?;
        Ok(shaped)
    }
}
