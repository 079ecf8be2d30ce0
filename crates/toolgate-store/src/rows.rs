//! Rows into values: one decoder for claim rows and one for audit rows,
//! whichever driver read them. A driver only says how to read a column as
//! bytes, text or an integer ([`Columns`]); the rules (bytes from BLOB or
//! TEXT, text that must be UTF-8, integers that must be integers, and then
//! the core's validation) are here once.

use toolgate::claim::{
    AuditEntry, ClaimRecord, CorruptRecord, Fingerprint, OperationKey, StoredClaim, UnixMillis,
};

/// A row's columns, read by whichever driver holds the row.
pub(crate) trait Columns {
    fn opt_bytes(&self, col: &'static str) -> Result<Option<Vec<u8>>, CorruptRecord>;
    fn opt_text(&self, col: &'static str) -> Result<Option<String>, CorruptRecord>;
    fn opt_int(&self, col: &'static str) -> Result<Option<i64>, CorruptRecord>;

    fn bytes(&self, col: &'static str) -> Result<Vec<u8>, CorruptRecord> {
        self.opt_bytes(col)?
            .ok_or_else(|| CorruptRecord::new(col, "is NULL"))
    }

    fn text(&self, col: &'static str) -> Result<String, CorruptRecord> {
        self.opt_text(col)?
            .ok_or_else(|| CorruptRecord::new(col, "is NULL"))
    }

    fn int(&self, col: &'static str) -> Result<i64, CorruptRecord> {
        self.opt_int(col)?
            .ok_or_else(|| CorruptRecord::new(col, "is NULL"))
    }
}

/// A claim row (the `SELECT_CLAIM` columns), validated by the core's rules
/// (strict JSON included).
pub(crate) fn claim(row: &impl Columns) -> Result<ClaimRecord, CorruptRecord> {
    ClaimRecord::from_stored(StoredClaim {
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
        attempt: row.int("attempt")?,
    })
}

/// An audit row (the `AUDIT_TRAIL` columns), validated by the same
/// constructor that made the entry.
pub(crate) fn audit(row: &impl Columns) -> Result<AuditEntry, CorruptRecord> {
    let attempt = row
        .opt_int("attempt")?
        .map(|a| u32::try_from(a).ok().filter(|a| *a >= 1))
        .map(|a| a.ok_or_else(|| CorruptRecord::new("attempt", "is not a number from 1")))
        .transpose()?;
    let key = row
        .opt_bytes("operation_key")?
        .map(|b| OperationKey::from_slice(&b))
        .transpose()
        .map_err(|e| ("operation_key", e))?;
    let fingerprint = row
        .opt_bytes("fingerprint")?
        .map(|b| Fingerprint::from_slice(&b))
        .transpose()
        .map_err(|e| ("fingerprint", e))?;
    AuditEntry::new(
        UnixMillis(row.int("at")?),
        row.text("actor")?,
        row.opt_text("tool")?,
        row.text("outcome")?,
        row.opt_text("reason")?,
        key,
        fingerprint,
    )?
    .with_via(row.opt_text("via")?)
    .map(|e| e.with_attempt(attempt))
}

fn unreadable(col: &'static str, e: impl std::fmt::Display) -> CorruptRecord {
    CorruptRecord::new(col, format!("cannot be read: {e}"))
}

fn utf8(col: &'static str, bytes: Vec<u8>) -> Result<String, CorruptRecord> {
    String::from_utf8(bytes).map_err(|_| CorruptRecord::new(col, "is not UTF-8"))
}

/// A row read with sqlx (any of the three drivers).
pub(crate) struct SqlxRow<'r, R>(pub(crate) &'r R);

impl<R> Columns for SqlxRow<'_, R>
where
    R: sqlx::Row,
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    Vec<u8>: for<'d> sqlx::Decode<'d, R::Database> + sqlx::Type<R::Database>,
    String: for<'d> sqlx::Decode<'d, R::Database> + sqlx::Type<R::Database>,
    i64: for<'d> sqlx::Decode<'d, R::Database> + sqlx::Type<R::Database>,
{
    fn opt_bytes(&self, col: &'static str) -> Result<Option<Vec<u8>>, CorruptRecord> {
        self.0
            .try_get::<Option<Vec<u8>>, _>(col)
            .map_err(|e| unreadable(col, e))
    }

    // Text columns are read as text, or failing that as bytes that must be
    // UTF-8: some MySQL servers report `utf8mb4_bin` columns with the binary
    // flag, which sqlx will not decode as a String.
    fn opt_text(&self, col: &'static str) -> Result<Option<String>, CorruptRecord> {
        match self.0.try_get::<Option<String>, _>(col) {
            Ok(v) => Ok(v),
            Err(_) => self.opt_bytes(col)?.map(|b| utf8(col, b)).transpose(),
        }
    }

    fn opt_int(&self, col: &'static str) -> Result<Option<i64>, CorruptRecord> {
        self.0
            .try_get::<Option<i64>, _>(col)
            .map_err(|e| unreadable(col, e))
    }
}

/// A row read on one of SQLite's own `rusqlite` connections (the writer's
/// read-back, the hot reads).
#[cfg(feature = "sqlite")]
pub(crate) struct RusqliteRow<'a, 'r>(pub(crate) &'a rusqlite::Row<'r>);

#[cfg(feature = "sqlite")]
impl Columns for RusqliteRow<'_, '_> {
    fn opt_bytes(&self, col: &'static str) -> Result<Option<Vec<u8>>, CorruptRecord> {
        use rusqlite::types::ValueRef;
        match self.0.get_ref(col).map_err(|e| unreadable(col, e))? {
            ValueRef::Null => Ok(None),
            ValueRef::Blob(b) | ValueRef::Text(b) => Ok(Some(b.to_vec())),
            _ => Err(CorruptRecord::new(col, "is not bytes")),
        }
    }

    fn opt_text(&self, col: &'static str) -> Result<Option<String>, CorruptRecord> {
        self.opt_bytes(col)?.map(|b| utf8(col, b)).transpose()
    }

    fn opt_int(&self, col: &'static str) -> Result<Option<i64>, CorruptRecord> {
        use rusqlite::types::ValueRef;
        match self.0.get_ref(col).map_err(|e| unreadable(col, e))? {
            ValueRef::Null => Ok(None),
            ValueRef::Integer(i) => Ok(Some(i)),
            _ => Err(CorruptRecord::new(col, "is not an integer")),
        }
    }
}
