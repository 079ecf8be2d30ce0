//! What the three SQL backends share: error classification, the retry
//! budget, row decoding helpers and (as a macro, because sqlx's generic
//! executor bounds would bury the protocol) the [`ClaimStore`] impl itself.
//!
//! Each backend module supplies its SQL (`sql` submodule with the same
//! constants and the same bind order) and a contention test; the macro
//! stamps out one implementation of the protocol, so the three cannot drift.
//!
//! [`ClaimStore`]: toolgate::claim::ClaimStore

use std::time::Duration;

use toolgate::claim::{CorruptRecord, RawClaim, StoreError, StoreErrorKind, StoredClaim};

/// How many times one claim is retried after lost races or read-backs that
/// found no row, before giving up with [`StoreErrorKind::Contention`].
pub(crate) const MAX_CLAIM_ATTEMPTS: u32 = 32;

/// What one pass of the claim transaction decided.
#[expect(
    clippy::large_enum_variant,
    reason = "one value per pass, consumed at once; boxing buys nothing"
)]
pub(crate) enum Step {
    /// A final answer.
    Done(RawClaim),
    /// Lost a race or found no row: roll back and run the whole claim again.
    Retry,
    /// An infrastructure failure to surface.
    Fail(StoreError),
}

/// Where a fault hook may run (see `fault`); a no-op without the feature.
#[derive(Clone, Copy)]
pub(crate) enum Point {
    AfterInsert,
    BeforeCommit,
    #[cfg_attr(
        not(feature = "fault-injection"),
        expect(dead_code, reason = "only a fault hook asks for this point")
    )]
    AfterCommit,
}

#[cfg(feature = "fault-injection")]
impl From<Point> for crate::fault::FaultPoint {
    fn from(p: Point) -> Self {
        match p {
            Point::AfterInsert => Self::AfterInsert,
            Point::BeforeCommit => Self::BeforeCommit,
            Point::AfterCommit => Self::AfterCommit,
        }
    }
}

/// A short pause before retrying a lost race, growing with the attempt
/// number and capped, so that a crowd of losers does not retry in lockstep.
pub(crate) async fn backoff(attempt: u32) {
    let ms = (1u64 << attempt.min(6)).min(50);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Maps a driver error to a store error. Connection-level failures are
/// `Unavailable`; anything the server refused is `Database`.
pub(crate) fn map_err(what: &str, e: sqlx::Error) -> StoreError {
    let kind = match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreErrorKind::Unavailable,
        sqlx::Error::Configuration(_) => StoreErrorKind::Config,
        // The server reporting that it dropped the session: SQLSTATE class
        // 08 (connection exception), 57P (PostgreSQL operator intervention,
        // e.g. pg_terminate_backend) and 70100 (MySQL/MariaDB: connection
        // or query killed).
        sqlx::Error::Database(db)
            if db
                .code()
                .is_some_and(|c| c.starts_with("08") || c.starts_with("57P") || c == "70100") =>
        {
            StoreErrorKind::Unavailable
        }
        _ => StoreErrorKind::Database,
    };
    StoreError::new(kind, format!("{what}: {e}"))
}

/// A write of one statement, outside the claim transaction.
pub(crate) enum Write<'a> {
    /// The ownership-checked completion and, with `audit`, that entry
    /// only if the completion changed its row, in the same transaction.
    Complete {
        key: &'a toolgate::claim::OperationKey,
        holder: &'a toolgate::claim::HolderToken,
        result: &'a toolgate::claim::JsonText,
        now: toolgate::claim::UnixMillis,
        audit: Option<&'a toolgate::claim::AuditEntry>,
    },
    Reconcile {
        key: &'a toolgate::claim::OperationKey,
        resolution: toolgate::claim::Resolution,
        result: &'a toolgate::claim::JsonText,
        now: toolgate::claim::UnixMillis,
    },
    Audit(&'a toolgate::claim::AuditEntry),
}

impl Write<'_> {
    pub(crate) fn what(&self) -> &'static str {
        match self {
            Self::Complete { .. } => "completing the claim",
            Self::Reconcile { .. } => "recording a reconciliation",
            Self::Audit(_) => "appending to the audit log",
        }
    }
}

/// Why a single-statement write failed.
#[derive(Debug)]
pub(crate) enum WriteFail {
    /// A lost race (lock, deadlock, busy): nothing was written; try again.
    LostRace,
    /// Anything else; the write may or may not have taken effect.
    Failed(StoreError),
}

impl WriteFail {
    pub(crate) fn into_store_error(self, what: &str) -> StoreError {
        match self {
            Self::LostRace => StoreError::new(
                StoreErrorKind::Contention,
                format!("{what}: lost a race for the write lock"),
            ),
            Self::Failed(e) => e,
        }
    }
}

/// A claim row's columns, read by whichever driver holds the row.
pub(crate) trait ClaimColumns {
    fn bytes(&self, col: &'static str) -> Result<Vec<u8>, CorruptRecord>;
    fn opt_text(&self, col: &'static str) -> Result<Option<String>, CorruptRecord>;
    fn opt_int(&self, col: &'static str) -> Result<Option<i64>, CorruptRecord>;

    fn text(&self, col: &'static str) -> Result<String, CorruptRecord> {
        self.opt_text(col)?
            .ok_or_else(|| CorruptRecord::new(col, "is NULL"))
    }

    fn int(&self, col: &'static str) -> Result<i64, CorruptRecord> {
        self.opt_int(col)?
            .ok_or_else(|| CorruptRecord::new(col, "is NULL"))
    }
}

/// The stored claim in a row (`SELECT_CLAIM`'s columns), not yet
/// validated.
pub(crate) fn stored_claim(row: &impl ClaimColumns) -> Result<StoredClaim, CorruptRecord> {
    Ok(StoredClaim {
        key: row.bytes("operation_key")?,
        fingerprint: row.bytes("fingerprint")?,
        tool: row.text("tool")?,
        arguments: row.text("arguments")?,
        scope: row.text("scope")?,
        version_seen: row.text("version_seen")?,
        proposer: row.text("proposer")?,
        status: row.text("status")?,
        holder: row.bytes("holder")?,
        lease_expires_at: row.int("lease_expires_at")?,
        claimed_at: row.int("claimed_at")?,
        completed_at: row.opt_int("completed_at")?,
        resolution: row.opt_text("resolution")?,
        result: row.opt_text("result")?,
        executor: row.text("executor")?,
    })
}

/// Converts a `u32` limit for binding.
pub(crate) fn limit(n: u32) -> i64 {
    i64::from(n)
}

/// Stamps out the claim protocol for one backend. See the crate docs for
/// the protocol; `$sql` is the backend's SQL module and `$contention` its
/// lost-race test. `$writes` says how writes reach the database: `pooled`
/// (each claim its own transaction on a pooled connection; PostgreSQL,
/// MySQL) or `batched` (the backend supplies `claim_once` and `write_one`
/// itself; SQLite's group commit).
macro_rules! sql_claim_store {
    ($store:ident, $db:ty, $sql:ident, $contention:path, $writes:ident) => {
        mod rows {
            use sqlx::Row;
            use toolgate::claim::{CorruptRecord, StoredClaim};

            type DbRow = <$db as sqlx::Database>::Row;

            fn problem(col: &'static str, e: sqlx::Error) -> CorruptRecord {
                CorruptRecord::new(col, format!("cannot be read: {e}"))
            }

            pub(super) fn bytes(row: &DbRow, col: &'static str) -> Result<Vec<u8>, CorruptRecord> {
                row.try_get::<Vec<u8>, _>(col).map_err(|e| problem(col, e))
            }

            pub(super) fn opt_bytes(
                row: &DbRow,
                col: &'static str,
            ) -> Result<Option<Vec<u8>>, CorruptRecord> {
                row.try_get::<Option<Vec<u8>>, _>(col)
                    .map_err(|e| problem(col, e))
            }

            // Text columns are read as text, or failing that as bytes that
            // must be UTF-8: some MySQL servers report `utf8mb4_bin` columns
            // with the binary flag, which sqlx will not decode as a String.
            pub(super) fn opt_text(
                row: &DbRow,
                col: &'static str,
            ) -> Result<Option<String>, CorruptRecord> {
                match row.try_get::<Option<String>, _>(col) {
                    Ok(v) => Ok(v),
                    Err(_) => match opt_bytes(row, col)? {
                        None => Ok(None),
                        Some(b) => String::from_utf8(b)
                            .map(Some)
                            .map_err(|_| CorruptRecord::new(col, "is not UTF-8")),
                    },
                }
            }

            pub(super) fn text(row: &DbRow, col: &'static str) -> Result<String, CorruptRecord> {
                opt_text(row, col)?.ok_or_else(|| CorruptRecord::new(col, "is NULL"))
            }

            pub(super) fn int(row: &DbRow, col: &'static str) -> Result<i64, CorruptRecord> {
                row.try_get::<i64, _>(col).map_err(|e| problem(col, e))
            }

            pub(super) fn opt_int(
                row: &DbRow,
                col: &'static str,
            ) -> Result<Option<i64>, CorruptRecord> {
                row.try_get::<Option<i64>, _>(col)
                    .map_err(|e| problem(col, e))
            }

            /// The row's columns, for [`stored_claim`](crate::common::stored_claim).
            struct Columns<'r>(&'r DbRow);

            impl $crate::common::ClaimColumns for Columns<'_> {
                fn bytes(&self, col: &'static str) -> Result<Vec<u8>, CorruptRecord> {
                    bytes(self.0, col)
                }
                fn opt_text(&self, col: &'static str) -> Result<Option<String>, CorruptRecord> {
                    opt_text(self.0, col)
                }
                fn opt_int(&self, col: &'static str) -> Result<Option<i64>, CorruptRecord> {
                    opt_int(self.0, col)
                }
            }

            pub(super) fn stored(row: &DbRow) -> Result<StoredClaim, CorruptRecord> {
                $crate::common::stored_claim(&Columns(row))
            }
        }

        /// Validates a claim row (core rules, strict JSON).
        fn record(
            row: &<$db as sqlx::Database>::Row,
        ) -> Result<toolgate::claim::ClaimRecord, toolgate::claim::CorruptRecord> {
            toolgate::claim::ClaimRecord::from_stored(rows::stored(row)?)
        }

        impl $store {
            /// The pool, for operations outside the claim protocol.
            pub fn pool(&self) -> &sqlx::Pool<$db> {
                &self.pool
            }

            /// Whether a fault hook asks to report a successful COMMIT as
            /// failed (always false without the feature).
            async fn fault_after_commit(&self) -> bool {
                #[cfg(feature = "fault-injection")]
                if let Some(hook) = &self.hook {
                    return hook($crate::common::Point::AfterCommit.into(), -1).await;
                }
                false
            }

            /// Installs a fault hook (tests only).
            #[cfg(feature = "fault-injection")]
            pub fn with_fault_hook(mut self, hook: $crate::fault::FaultHook) -> Self {
                self.hook = Some(hook);
                self
            }

            /// The ownership-checked completion, with `audit` written in its
            /// transaction if given, retried on lost races and read back
            /// when its outcome is unknown.
            async fn finish(
                &self,
                key: &toolgate::claim::OperationKey,
                holder: &toolgate::claim::HolderToken,
                result: &toolgate::claim::JsonText,
                now: toolgate::claim::UnixMillis,
                audit: Option<&toolgate::claim::AuditEntry>,
            ) -> Result<toolgate::claim::Completion, toolgate::claim::StoreError> {
                use toolgate::claim::{ClaimStatus, Completion, StoreError, StoreErrorKind};
                use $crate::common::{MAX_CLAIM_ATTEMPTS, backoff};
                let write = $crate::common::Write::Complete { key, holder, result, now, audit };
                for attempt in 1..=MAX_CLAIM_ATTEMPTS {
                    match self.write_one(&write).await {
                        // For an UPDATE the count is what we want on every
                        // backend: with CLIENT_FOUND_ROWS MySQL counts rows
                        // matched, and the WHERE clause is the ownership
                        // check. (Claims never use the count.)
                        Ok(n) => {
                            return match n {
                                1 => Ok(Completion::Recorded),
                                0 => Ok(Completion::Reconcile),
                                n => Err(StoreError::new(
                                    StoreErrorKind::Invariant,
                                    format!("completion matched {n} rows"),
                                )),
                            };
                        }
                        Err($crate::common::WriteFail::LostRace) => backoff(attempt).await,
                        Err($crate::common::WriteFail::Failed(e)) => {
                            // The update may or may not have committed.
                            // Read the row back before answering: retrying
                            // blindly would turn our own success into
                            // "reconcile".
                            let failure = format!("completing the claim: {e}");
                            let row = self.read_row(key).await.map_err(|e2| {
                                StoreError::new(
                                    StoreErrorKind::OutcomeUnknown,
                                    format!("{failure}; reading the claim back: {e2}"),
                                )
                            })?;
                            match row {
                                Some(r) if r.holder == *holder && r.status == ClaimStatus::InFlight => {
                                    backoff(attempt).await;
                                }
                                Some(r)
                                    if r.holder == *holder
                                        && r.completion.as_ref().map(|c| (&c.result, c.completed_at))
                                            == Some((result, now)) =>
                                {
                                    return Ok(Completion::Recorded);
                                }
                                _ => return Ok(Completion::Reconcile),
                            }
                        }
                    }
                }
                Err(StoreError::new(
                    StoreErrorKind::Contention,
                    format!("completion still contended after {MAX_CLAIM_ATTEMPTS} attempts"),
                ))
            }

            /// A COMMIT failed for a reason other than contention: the
            /// outcome is unknown. Read the row back on another connection
            /// (the pool tests it before handing it out) with the same
            /// holder token before deciding.
            async fn after_failed_commit(
                &self,
                req: &toolgate::claim::ClaimRequest,
                commit_error: impl std::fmt::Display,
            ) -> $crate::common::Step {
                use toolgate::claim::{RawClaim, ReadBack, StoreError, StoreErrorKind};
                use $crate::common::Step;

                match self.read_row(req.key()).await {
                    // The commit did not take effect and nobody else's did.
                    Ok(None) => Step::Retry,
                    Ok(Some(row)) => match req.judge(row) {
                        ReadBack::Ours(lease) => Step::Done(RawClaim::Acquired(lease)),
                        ReadBack::Theirs(raw) => Step::Done(raw),
                    },
                    Err(e) => Step::Fail(StoreError::new(
                        StoreErrorKind::OutcomeUnknown,
                        format!(
                            "COMMIT failed ({commit_error}) and the claim could not be read back ({e})"
                        ),
                    )),
                }
            }
        }

        $crate::common::sql_claim_store!(@$writes $store, $db, $sql, $contention);

        impl toolgate::claim::ClaimStore for $store {
            async fn claim(
                &self,
                request: toolgate::claim::ClaimRequest,
            ) -> Result<toolgate::claim::RawClaim, toolgate::claim::StoreError> {
                use $crate::common::{MAX_CLAIM_ATTEMPTS, Step, backoff};
                for attempt in 1..=MAX_CLAIM_ATTEMPTS {
                    match self.claim_once(&request).await {
                        Step::Done(raw) => return Ok(raw),
                        Step::Fail(e) => return Err(e),
                        Step::Retry => backoff(attempt).await,
                    }
                }
                Err(toolgate::claim::StoreError::new(
                    toolgate::claim::StoreErrorKind::Contention,
                    format!("claim still contended after {MAX_CLAIM_ATTEMPTS} attempts"),
                ))
            }

            async fn complete(
                &self,
                key: &toolgate::claim::OperationKey,
                holder: &toolgate::claim::HolderToken,
                result: &toolgate::claim::JsonText,
                now: toolgate::claim::UnixMillis,
            ) -> Result<toolgate::claim::Completion, toolgate::claim::StoreError> {
                self.finish(key, holder, result, now, None).await
            }

            async fn complete_audited(
                &self,
                key: &toolgate::claim::OperationKey,
                holder: &toolgate::claim::HolderToken,
                result: &toolgate::claim::JsonText,
                now: toolgate::claim::UnixMillis,
                audit: &toolgate::claim::AuditEntry,
            ) -> Result<(toolgate::claim::Completion, bool), toolgate::claim::StoreError> {
                use toolgate::claim::Completion;
                // The audit row is in the completion's transaction: it is
                // there exactly when the completion is.
                self.finish(key, holder, result, now, Some(audit))
                    .await
                    .map(|c| (c, c == Completion::Recorded))
            }

            async fn fetch(
                &self,
                key: &toolgate::claim::OperationKey,
            ) -> Result<Option<toolgate::claim::ClaimRecord>, toolgate::claim::StoreError> {
                self.read_row(key).await
            }

            async fn ready(&self) -> Result<(), toolgate::claim::StoreError> {
                use toolgate::claim::OperationKey;
                // The claim lookup every decision starts with (a key that
                // cannot exist), then whatever else the backend writes and
                // lists through (SQLite: its writer thread and its pool).
                self.read_row(&OperationKey::from_bytes([0; OperationKey::LEN]))
                    .await?;
                self.backend_ready().await
            }

            async fn list_stuck(
                &self,
                now: toolgate::claim::UnixMillis,
                limit: u32,
            ) -> Result<Vec<toolgate::claim::StuckEntry>, toolgate::claim::StoreError> {
                let found = sqlx::query($sql::LIST_STUCK)
                    .bind(now.0)
                    .bind($crate::common::limit(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::common::map_err("listing stuck claims", e))?;
                Ok(found
                    .iter()
                    .map(|row| {
                        record(row).map_err(|problem| toolgate::claim::CorruptRow {
                            raw_key: rows::bytes(row, "operation_key").unwrap_or_default(),
                            problem,
                        })
                    })
                    .collect())
            }

            async fn record_reconciliation(
                &self,
                key: &toolgate::claim::OperationKey,
                outcome: &toolgate::claim::ReconcileOutcome,
                now: toolgate::claim::UnixMillis,
            ) -> Result<toolgate::claim::Reconciled, toolgate::claim::StoreError> {
                use toolgate::claim::{ReconcileOutcome, Reconciled, Resolution, StoreError, StoreErrorKind};
                let (resolution, result) = match outcome {
                    ReconcileOutcome::Applied { receipt } => (Resolution::ReconciledApplied, receipt),
                    ReconcileOutcome::NotApplied { detail } => {
                        (Resolution::ReconciledNotApplied, detail)
                    }
                };
                let write = $crate::common::Write::Reconcile { key, resolution, result, now };
                let updated = self
                    .write_one(&write)
                    .await
                    .map_err(|e| e.into_store_error("recording a reconciliation"))?;
                match updated {
                    1 => Ok(Reconciled::Recorded),
                    0 => Ok(Reconciled::NotStuck(self.read_row(key).await?)),
                    n => Err(StoreError::new(
                        StoreErrorKind::Invariant,
                        format!("reconciliation matched {n} rows"),
                    )),
                }
            }

            async fn append_audit(
                &self,
                entry: &toolgate::claim::AuditEntry,
            ) -> Result<(), toolgate::claim::StoreError> {
                self.write_one(&$crate::common::Write::Audit(entry))
                    .await
                    .map_err(|e| e.into_store_error("appending to the audit log"))?;
                Ok(())
            }

            async fn audit_trail(
                &self,
                key: &toolgate::claim::OperationKey,
                limit: u32,
            ) -> Result<Vec<toolgate::claim::AuditEntry>, toolgate::claim::StoreError> {
                use toolgate::claim::{AuditEntry, Fingerprint, OperationKey, StoreError, UnixMillis};
                let found = sqlx::query($sql::AUDIT_TRAIL)
                    .bind(key.as_bytes().as_slice())
                    .bind($crate::common::limit(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::common::map_err("reading the audit log", e))?;
                found
                    .iter()
                    .map(|row| {
                        let entry = (|| {
                            let key = rows::opt_bytes(row, "operation_key")?
                                .map(|b| OperationKey::from_slice(&b))
                                .transpose()
                                .map_err(|e| ("operation_key", e))?;
                            let fingerprint = rows::opt_bytes(row, "fingerprint")?
                                .map(|b| Fingerprint::from_slice(&b))
                                .transpose()
                                .map_err(|e| ("fingerprint", e))?;
                            AuditEntry::new(
                                UnixMillis(rows::int(row, "at")?),
                                rows::text(row, "actor")?,
                                rows::opt_text(row, "tool")?,
                                rows::text(row, "outcome")?,
                                rows::opt_text(row, "reason")?,
                                key,
                                fingerprint,
                            )?
                            .with_via(rows::opt_text(row, "via")?)
                        })();
                        entry.map_err(|p| StoreError::corrupt(&p))
                    })
                    .collect()
            }
        }
    };
    (@pooled $store:ident, $db:ty, $sql:ident, $contention:path) => {
        impl $store {
            /// Nothing beyond the claim lookup: on a pooled backend it ran
            /// on the same pool the writes and listings use.
            async fn backend_ready(&self) -> Result<(), toolgate::claim::StoreError> {
                Ok(())
            }

            async fn read_row(
                &self,
                key: &toolgate::claim::OperationKey,
            ) -> Result<Option<toolgate::claim::ClaimRecord>, toolgate::claim::StoreError> {
                let row = sqlx::query($sql::SELECT_CLAIM)
                    .bind(key.as_bytes().as_slice())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(|e| $crate::common::map_err("reading a claim", e))?;
                match row {
                    None => Ok(None),
                    Some(row) => record(&row)
                        .map(Some)
                        .map_err(|p| toolgate::claim::StoreError::corrupt(&p)),
                }
            }
        }

        /// Step 1 of the claim protocol, the conditional insert, binds
        /// encoded.
        fn claim_insert(
            req: &toolgate::claim::ClaimRequest,
        ) -> sqlx::query::Query<'static, $db, <$db as sqlx::Database>::Arguments> {
            let p = req.proposal();
            sqlx::query($sql::INSERT_CLAIM)
                .bind(req.key().as_bytes().as_slice())
                .bind(req.fingerprint().as_bytes().as_slice())
                .bind(p.tool())
                .bind(p.arguments())
                .bind(p.scope())
                .bind(p.version_seen())
                .bind(p.proposer())
                .bind(req.holder().as_bytes().as_slice())
                .bind(req.lease_expires_at().0)
                .bind(req.now().0)
                .bind(req.executor().as_str())
        }

        /// The statement for one single-statement write, binds encoded.
        fn write_query(
            w: &$crate::common::Write<'_>,
        ) -> sqlx::query::Query<'static, $db, <$db as sqlx::Database>::Arguments> {
            use $crate::common::Write;
            match w {
                // The completion's audit entry is `write_one`'s second statement.
                Write::Complete { key, holder, result, now, .. } => sqlx::query($sql::COMPLETE)
                    .bind(now.0)
                    .bind(result.as_str())
                    .bind(key.as_bytes().as_slice())
                    .bind(holder.as_bytes().as_slice()),
                Write::Reconcile { key, resolution, result, now } => sqlx::query($sql::RECONCILE)
                    .bind(now.0)
                    .bind(resolution.as_str())
                    .bind(result.as_str())
                    .bind(key.as_bytes().as_slice())
                    .bind(now.0),
                Write::Audit(entry) => sqlx::query($sql::APPEND_AUDIT)
                    .bind(entry.at().0)
                    .bind(entry.actor())
                    .bind(entry.tool())
                    .bind(entry.outcome())
                    .bind(entry.reason())
                    .bind(entry.key().map(|k| k.as_bytes().as_slice()))
                    .bind(entry.fingerprint().map(|f| f.as_bytes().as_slice()))
                    .bind(entry.via()),
            }
        }

        impl $store {

            async fn fault(
                &self,
                point: $crate::common::Point,
                tx: &mut sqlx::Transaction<'static, $db>,
            ) {
                #[cfg(feature = "fault-injection")]
                if let Some(hook) = &self.hook {
                    let id: i64 = sqlx::query_scalar($sql::CONNECTION_ID)
                        .fetch_one(&mut **tx)
                        .await
                        .unwrap_or(-1);
                    hook(point.into(), id).await;
                }
                #[cfg(not(feature = "fault-injection"))]
                let _ = (point, tx);
            }

            /// One pass of the claim transaction.
            async fn claim_once(
                &self,
                req: &toolgate::claim::ClaimRequest,
            ) -> $crate::common::Step {
                use toolgate::claim::{RawClaim, ReadBack, StoreError};
                use $crate::common::{Point, Step, map_err};

                let lost_or = |e: sqlx::Error, what: &str| {
                    if $contention(&e) {
                        Step::Retry
                    } else {
                        Step::Fail(map_err(what, e))
                    }
                };
                let mut tx = match self.pool.begin().await {
                    Ok(tx) => tx,
                    Err(e) => return lost_or(e, "beginning the claim transaction"),
                };
                // INVARIANT: no read before this insert (see the crate
                // docs), and its affected-row count is deliberately ignored:
                // on MySQL it is 1 for a duplicate too.
                let inserted = claim_insert(req)
                    .execute(&mut *tx)
                    .await;
                if let Err(e) = inserted {
                    return lost_or(e, "inserting the claim");
                }
                self.fault(Point::AfterInsert, &mut tx).await;
                let row = match sqlx::query($sql::SELECT_CLAIM)
                    .bind(req.key().as_bytes().as_slice())
                    .fetch_optional(&mut *tx)
                    .await
                {
                    Ok(row) => row,
                    Err(e) => return lost_or(e, "reading the claim back"),
                };
                // No row: the insert changed nothing and the winner's row is
                // not visible to us (an old snapshot). Retry; never a win.
                let Some(row) = row else {
                    return Step::Retry;
                };
                let row = match record(&row) {
                    Ok(row) => row,
                    Err(p) => return Step::Fail(StoreError::corrupt(&p)),
                };
                match req.judge(row) {
                    // Someone else's row: final, and this transaction wrote
                    // nothing worth keeping. Dropping `tx` rolls it back.
                    ReadBack::Theirs(raw) => Step::Done(raw),
                    ReadBack::Ours(lease) => {
                        self.fault(Point::BeforeCommit, &mut tx).await;
                        match tx.commit().await {
                            Ok(()) if self.fault_after_commit().await => {
                                let injected =
                                    sqlx::Error::Protocol("injected: commit acknowledgement lost".into());
                                self.after_failed_commit(req, injected).await
                            }
                            // Our token read back AND the commit succeeded.
                            Ok(()) => Step::Done(RawClaim::Acquired(lease)),
                            Err(e) if $contention(&e) => Step::Retry,
                            Err(e) => self.after_failed_commit(req, e).await,
                        }
                    }
                }
            }

            /// One write in its own transaction: a single statement, or a
            /// completion with an audit entry and, if it changed a row,
            /// that entry.
            async fn write_one(
                &self,
                w: &$crate::common::Write<'_>,
            ) -> Result<u64, $crate::common::WriteFail> {
                use $crate::common::{Write, WriteFail};
                let fail = |e: sqlx::Error| {
                    if $contention(&e) {
                        WriteFail::LostRace
                    } else {
                        WriteFail::Failed($crate::common::map_err(w.what(), e))
                    }
                };
                let Write::Complete { audit: Some(audit), .. } = w else {
                    return write_query(w)
                        .execute(&self.pool)
                        .await
                        .map(|done| done.rows_affected())
                        .map_err(fail);
                };
                let mut tx = self.pool.begin().await.map_err(fail)?;
                let n = write_query(w)
                    .execute(&mut *tx)
                    .await
                    .map_err(fail)?
                    .rows_affected();
                if n == 1 {
                    write_query(&Write::Audit(audit))
                        .execute(&mut *tx)
                        .await
                        .map_err(fail)?;
                }
                tx.commit().await.map_err(fail)?;
                Ok(n)
            }
        }
    };
    (@batched $store:ident, $db:ty, $sql:ident, $contention:path) => {};
}

pub(crate) use sql_claim_store;

/// Statements whose text is identical on the backends that bind with `?`
/// (SQLite and MySQL/MariaDB); each backend's `sql` module re-exports them
/// beside its own insert, which is where the dialects differ.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) mod qmark {
    pub(crate) const SELECT_CLAIM: &str = "SELECT operation_key, fingerprint, tool, arguments, \
        scope, version_seen, proposer, status, holder, lease_expires_at, claimed_at, \
        completed_at, resolution, result, executor FROM toolgate_claims WHERE operation_key = ?";
    pub(crate) const COMPLETE: &str = "UPDATE toolgate_claims \
        SET status = 'completed', completed_at = ?, resolution = 'executed', result = ? \
        WHERE operation_key = ? AND status = 'in_flight' AND holder = ?";
    pub(crate) const RECONCILE: &str = "UPDATE toolgate_claims \
        SET status = 'completed', completed_at = ?, resolution = ?, result = ? \
        WHERE operation_key = ? AND status = 'in_flight' AND lease_expires_at <= ?";
    pub(crate) const LIST_STUCK: &str = "SELECT operation_key, fingerprint, tool, arguments, \
        scope, version_seen, proposer, status, holder, lease_expires_at, claimed_at, \
        completed_at, resolution, result, executor FROM toolgate_claims \
        WHERE status = 'in_flight' AND lease_expires_at <= ? \
        ORDER BY lease_expires_at, operation_key LIMIT ?";
    pub(crate) const APPEND_AUDIT: &str = "INSERT INTO toolgate_audit \
        (at, actor, tool, outcome, reason, operation_key, fingerprint, via) \
        VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
    pub(crate) const AUDIT_TRAIL: &str = "SELECT at, actor, tool, outcome, reason, \
        operation_key, fingerprint, via FROM toolgate_audit WHERE operation_key = ? \
        ORDER BY id LIMIT ?";
}
