//! The support-desk example's downstream system, on the claim store's own
//! database: `agents`, `customers`, `tickets` and `credits` tables, a
//! [`StateSource`] (a ticket's version) and an [`Executor`] (a goodwill
//! credit as a conditional write).
//!
//! The credit is one transaction:
//!
//! ```sql
//! UPDATE tickets SET version = version + 1 WHERE id = ? AND version = ?;
//! -- 0 rows: precondition failed, roll back, nothing written
//! INSERT INTO credits (operation_key, ticket_id, …) VALUES (?, ?, …);
//! -- the claim's completion and its audit entry (toolgate_store::StoreWrite)
//! COMMIT;
//! ```
//!
//! In the pipeline that transaction is the claim store's: the credit and the
//! claim's completion commit together ([`Executor::execute_and_complete`]),
//! so there is never a committed credit behind a claim still in flight
//! unless the `COMMIT` itself was lost.
//!
//! The affected-row count is safe to use *here*, unlike in the claim
//! protocol: the update always changes the row it matches (the version goes
//! up), so "rows matched" (MySQL's `CLIENT_FOUND_ROWS`) and "rows changed"
//! are the same number.
//!
//! Reconciliation looks the credit up by operation key; it never writes a
//! credit.

use std::future::Future;
use std::sync::Arc;

use serde_json::{Value, json};
use sqlx::Row;
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use toolgate::claim::{
    ClaimRecord, JsonText, OperationKey, ReconcileOutcome, StoreError, StoreErrorKind,
};
use toolgate::pipeline::{
    AppliedCompletion, Completed, ExecError, ExecOutcome, ExecPermit, Executor, StateError,
    StateScope, StateSource, StateVersion,
};

use toolgate_store::sqlite::{WriteError, Writer, rusqlite};
use toolgate_store::{AnyClaimStore, Session, StoreWrite, WriteCompleted, WriteFuture, sqlx_error};

/// The example's database: the same pool as the claim store.
#[derive(Clone)]
pub enum DeskPool {
    /// SQLite, with the claim store's writer: credits join its batches
    /// instead of contending with it for the file's write lock.
    Sqlite(sqlx::SqlitePool, Writer),
    /// PostgreSQL.
    Postgres(sqlx::PgPool),
    /// MySQL or MariaDB.
    MySql(sqlx::MySqlPool),
}

/// A statement with `?` placeholders (SQLite, MySQL) and `$n` (PostgreSQL).
pub(crate) struct Sql {
    pub(crate) qm: &'static str,
    pub(crate) pg: &'static str,
}

const TICKET_VERSION: Sql = Sql {
    qm: "SELECT version FROM tickets WHERE id = ?",
    pg: "SELECT version FROM tickets WHERE id = $1",
};
const BUMP_VERSION: Sql = Sql {
    qm: "UPDATE tickets SET version = version + 1 WHERE id = ? AND version = ?",
    pg: "UPDATE tickets SET version = version + 1 WHERE id = $1 AND version = $2",
};
const INSERT_CREDIT: Sql = Sql {
    qm: "INSERT INTO credits (operation_key, ticket_id, customer_id, agent_id, amount_minor, \
         reason_code, version_seen) VALUES (?, ?, ?, ?, ?, ?, ?)",
    pg: "INSERT INTO credits (operation_key, ticket_id, customer_id, agent_id, amount_minor, \
         reason_code, version_seen) VALUES ($1, $2, $3, $4, $5, $6, $7)",
};
const CREDIT_BY_KEY: Sql = Sql {
    qm: "SELECT ticket_id, amount_minor, reason_code, version_seen FROM credits \
         WHERE operation_key = ?",
    pg: "SELECT ticket_id, amount_minor, reason_code, version_seen FROM credits \
         WHERE operation_key = $1",
};
const INSERT_TICKET: Sql = Sql {
    qm: "INSERT INTO tickets (id, customer_id, assignee, version) VALUES (?, ?, ?, ?)",
    pg: "INSERT INTO tickets (id, customer_id, assignee, version) VALUES ($1, $2, $3, $4)",
};
/// An insert that leaves an existing row as it is. Two processes seeding
/// one database at once do not fail on each other's rows: the second waits
/// for the first's row and then skips it.
struct InsertMissing {
    sqlite: &'static str,
    pg: &'static str,
    mysql: &'static str,
}

const SEED_AGENT: InsertMissing = InsertMissing {
    sqlite: "INSERT INTO agents (id, active) VALUES (?, ?) ON CONFLICT (id) DO NOTHING",
    pg: "INSERT INTO agents (id, active) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
    mysql: "INSERT INTO agents (id, active) VALUES (?, ?) ON DUPLICATE KEY UPDATE id = id",
};
const SEED_CUSTOMER: InsertMissing = InsertMissing {
    sqlite: "INSERT INTO customers (id, name) VALUES (?, ?) ON CONFLICT (id) DO NOTHING",
    pg: "INSERT INTO customers (id, name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
    mysql: "INSERT INTO customers (id, name) VALUES (?, ?) ON DUPLICATE KEY UPDATE id = id",
};
const SEED_TICKET: InsertMissing = InsertMissing {
    sqlite: "INSERT INTO tickets (id, customer_id, assignee, version) VALUES (?, ?, ?, ?) \
             ON CONFLICT (id) DO NOTHING",
    pg: "INSERT INTO tickets (id, customer_id, assignee, version) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (id) DO NOTHING",
    mysql: "INSERT INTO tickets (id, customer_id, assignee, version) VALUES (?, ?, ?, ?) \
            ON DUPLICATE KEY UPDATE id = id",
};
const COUNT_CREDITS: Sql = Sql {
    qm: "SELECT COUNT(*) FROM credits WHERE ticket_id = ?",
    pg: "SELECT COUNT(*) FROM credits WHERE ticket_id = $1",
};

/// Runs `$body` with `$p` bound to the concrete pool and `$s` to the SQL
/// picker, once per compiled-in backend.
macro_rules! on_pool {
    ($self:expr, $p:ident, $s:ident => $body:expr) => {
        match &$self.pool {
            DeskPool::Sqlite($p, ..) => {
                let $s = |q: &Sql| q.qm;
                $body
            }
            DeskPool::Postgres($p) => {
                let $s = |q: &Sql| q.pg;
                $body
            }
            DeskPool::MySql($p) => {
                let $s = |q: &Sql| q.qm;
                $body
            }
        }
    };
}
pub(crate) use on_pool;

/// A ticket to seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedTicket {
    /// Ticket id.
    pub id: String,
    /// Its customer (created if missing).
    pub customer_id: String,
    /// The assigned agent (created active if missing).
    pub assignee: String,
    /// Starting version.
    pub version: i64,
}

/// The support desk on one database.
#[derive(Clone)]
pub struct SupportDesk {
    pub(crate) pool: DeskPool,
    /// The claim store on the same database: a credit commits with its
    /// claim's completion.
    pub(crate) claims: AnyClaimStore,
}

pub(crate) fn db(what: &str, e: sqlx::Error) -> StoreError {
    sqlx_error(what, e)
}

fn migrator(sql: &'static str) -> Migrator {
    let mut m = Migrator::with_migrations(vec![Migration::new(
        1,
        "support desk tables".into(),
        MigrationType::Simple,
        sql.into_sql_str(),
        false,
    )]);
    m.dangerous_set_table_name("support_desk_migrations");
    m
}

impl SupportDesk {
    /// The support desk on the claim store's database (same pool), with its
    /// tables migrated.
    pub async fn on_store(store: &AnyClaimStore) -> Result<Self, StoreError> {
        let pool = match store {
            AnyClaimStore::Sqlite(s) => DeskPool::Sqlite(s.pool().clone(), s.writer().clone()),
            AnyClaimStore::Postgres(s) => DeskPool::Postgres(s.pool().clone()),
            AnyClaimStore::MySql(s) => DeskPool::MySql(s.pool().clone()),
        };
        let desk = Self {
            pool,
            claims: store.clone(),
        };
        desk.migrate().await?;
        Ok(desk)
    }

    /// The claim store this desk was made on (its database and pool).
    pub fn claim_store(&self) -> &AnyClaimStore {
        &self.claims
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let run = match &self.pool {
            DeskPool::Sqlite(p, ..) => {
                migrator(include_str!("../migrations/sqlite/0001_support_desk.sql"))
                    .run(p)
                    .await
            }
            DeskPool::Postgres(p) => {
                migrator(include_str!("../migrations/postgres/0001_support_desk.sql"))
                    .run(p)
                    .await
            }
            DeskPool::MySql(p) => {
                // sqlx's own lock does not hold on MariaDB (toolgate_store::mysql).
                return toolgate_store::mysql::run_migrations(
                    p,
                    &migrator(include_str!("../migrations/mysql/0001_support_desk.sql")),
                    "support desk migrations",
                )
                .await;
            }
        };
        run.map_err(|e| {
            StoreError::new(
                StoreErrorKind::Migration,
                format!("support desk migrations: {e}"),
            )
        })
    }

    /// Seeds new tickets, creating their customers and (active) agents if
    /// missing, in one transaction. A ticket that exists already is an
    /// error: the caller meant a fresh one.
    pub async fn seed(&self, tickets: &[SeedTicket]) -> Result<(), StoreError> {
        self.seed_tickets(tickets, false).await
    }

    /// Like [`SupportDesk::seed`], but a ticket that exists already is left
    /// as it is (with the version its writes moved it to). For a demo that
    /// restarts on its database, or runs as several processes sharing one:
    /// seeding again is a no-op, and processes seeding at once do not fail.
    pub async fn seed_missing(&self, tickets: &[SeedTicket]) -> Result<(), StoreError> {
        self.seed_tickets(tickets, true).await
    }

    async fn seed_tickets(&self, tickets: &[SeedTicket], keep: bool) -> Result<(), StoreError> {
        let agent = self.insert_missing(&SEED_AGENT);
        let customer = self.insert_missing(&SEED_CUSTOMER);
        on_pool!(self, p, s => {
            let ticket = if keep {
                self.insert_missing(&SEED_TICKET)
            } else {
                s(&INSERT_TICKET)
            };
            let mut tx = p.begin().await.map_err(|e| db("seeding", e))?;
            for t in tickets {
                sqlx::query(agent)
                    .bind(&t.assignee)
                    .bind(true)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| db("seeding an agent", e))?;
                sqlx::query(customer)
                    .bind(&t.customer_id)
                    .bind(format!("Customer {}", t.customer_id))
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| db("seeding a customer", e))?;
                sqlx::query(ticket)
                    .bind(&t.id)
                    .bind(&t.customer_id)
                    .bind(&t.assignee)
                    .bind(t.version)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| db("seeding a ticket", e))?;
            }
            tx.commit().await.map_err(|e| db("seeding", e))
        })
    }

    fn insert_missing(&self, q: &InsertMissing) -> &'static str {
        match &self.pool {
            DeskPool::Sqlite(..) => q.sqlite,
            DeskPool::Postgres(_) => q.pg,
            DeskPool::MySql(_) => q.mysql,
        }
    }

    /// A ticket's current version, if it exists.
    pub async fn ticket_version(&self, ticket: &str) -> Result<Option<i64>, StoreError> {
        on_pool!(self, p, s => {
            let row = sqlx::query(s(&TICKET_VERSION))
                .bind(ticket)
                .fetch_optional(p)
                .await
                .map_err(|e| db("reading a ticket", e))?;
            row.map(|r| r.try_get::<i64, _>(0))
                .transpose()
                .map_err(|e| db("reading a ticket", e))
        })
    }

    /// How many credits a ticket has.
    pub async fn credit_count(&self, ticket: &str) -> Result<i64, StoreError> {
        on_pool!(self, p, s => {
            let row = sqlx::query(s(&COUNT_CREDITS))
                .bind(ticket)
                .fetch_one(p)
                .await
                .map_err(|e| db("counting credits", e))?;
            row.try_get::<i64, _>(0).map_err(|e| db("counting credits", e))
        })
    }

    /// The credit as a transaction of its own: conditional version bump and
    /// credit row. The pipeline uses [`SupportDesk::credit_completing`];
    /// this serves a caller of [`Executor::execute`] alone.
    async fn credit(&self, c: &Credit) -> Result<ExecOutcome, StoreError> {
        let write = CreditWrite(c.clone());
        let applied = match &self.pool {
            DeskPool::Sqlite(_, writer) => writer
                .write(move |conn| write.sqlite(conn))
                .await
                .map_err(|e| match e {
                    WriteError::Unit(e) => {
                        StoreError::new(StoreErrorKind::Database, format!("crediting: {e}"))
                    }
                    e => StoreError::new(StoreErrorKind::Unavailable, format!("crediting: {e}")),
                })?,
            DeskPool::Postgres(p) => {
                let mut tx = p.begin().await.map_err(|e| db("crediting", e))?;
                let applied = write
                    .postgres(&mut tx)
                    .await
                    .map_err(|e| db("crediting", e))?;
                end(tx, applied).await?
            }
            DeskPool::MySql(p) => {
                let mut tx = p.begin().await.map_err(|e| db("crediting", e))?;
                let applied = write.mysql(&mut tx).await.map_err(|e| db("crediting", e))?;
                end(tx, applied).await?
            }
        };
        if !applied {
            return self.precondition_failed(&c.ticket_id).await;
        }
        c.receipt().map(|receipt| ExecOutcome::Applied { receipt })
    }

    /// The credit and the claim's completion in one transaction of the
    /// claim store's (`toolgate_store::StoreWrite`): one commit for both. On
    /// `held`, the decision's connection, when it holds one of this
    /// desk's claim store.
    async fn credit_completing(
        &self,
        c: Credit,
        completion: &AppliedCompletion,
        session: Option<&mut Session<'_>>,
    ) -> Result<Completed, ExecError> {
        let failed = |e: StoreError| ExecError::new(e.to_string());
        let receipt = c.receipt().map_err(failed)?;
        let ticket = c.ticket_id.clone();
        let write = Arc::new(CreditWrite(c));
        let written = match session {
            Some(session) if session.is_of(&self.claims) => {
                session
                    .write_and_complete(write, &receipt, completion)
                    .await?
            }
            other => {
                // Not this store's connection: never wait on the pool
                // while holding one.
                if let Some(session) = other {
                    session.give_back();
                }
                self.claims
                    .write_and_complete(write, &receipt, completion)
                    .await?
            }
        };
        match written {
            WriteCompleted::Recorded => Ok(Completed::Recorded { receipt }),
            WriteCompleted::LeaseLost => Ok(Completed::LeaseLost),
            WriteCompleted::PreconditionFailed => self
                .precondition_failed(&ticket)
                .await
                .map(Completed::Outcome)
                .map_err(failed),
        }
    }

    /// A failed precondition, with the version the ticket holds now.
    async fn precondition_failed(&self, ticket: &str) -> Result<ExecOutcome, StoreError> {
        let current = self.ticket_version(ticket).await?;
        Ok(ExecOutcome::PreconditionFailed {
            current: current.map(StateVersion::from),
        })
    }

    async fn credit_for(&self, key: &OperationKey) -> Result<Option<JsonText>, StoreError> {
        on_pool!(self, p, s => {
            let row = sqlx::query(s(&CREDIT_BY_KEY))
                .bind(key.as_bytes().to_vec())
                .fetch_optional(p)
                .await
                .map_err(|e| db("looking up a credit", e))?;
            match row {
                None => Ok(None),
                Some(r) => {
                    let get = |e| db("reading a credit", e);
                    let ticket: String = r.try_get(0).map_err(get)?;
                    let amount: i64 = r.try_get(1).map_err(get)?;
                    let reason: String = r.try_get(2).map_err(get)?;
                    let version: i64 = r.try_get(3).map_err(get)?;
                    receipt(&ticket, amount, &reason, version).map(Some)
                }
            }
        })
    }
}

fn receipt(ticket: &str, amount: i64, reason: &str, version: i64) -> Result<JsonText, StoreError> {
    let text = json!({
        "applied": true,
        "ticket_id": ticket,
        "amount_minor": amount,
        "reason_code": reason,
        "version_before": version,
        "version_after": version.saturating_add(1),
    })
    .to_string();
    JsonText::result(text).map_err(|e| StoreError::corrupt(&e))
}

#[derive(Debug, Clone)]
struct Credit {
    key: OperationKey,
    ticket_id: String,
    customer_id: String,
    agent_id: String,
    amount_minor: i64,
    reason_code: String,
    version: i64,
}

impl Credit {
    fn receipt(&self) -> Result<JsonText, StoreError> {
        receipt(
            &self.ticket_id,
            self.amount_minor,
            &self.reason_code,
            self.version,
        )
    }
}

/// Commits a credit's own transaction when it applied; rolls it back when
/// its precondition failed.
async fn end<DB: sqlx::Database>(
    tx: sqlx::Transaction<'_, DB>,
    applied: bool,
) -> Result<bool, StoreError> {
    if applied {
        tx.commit().await.map_err(|e| db("crediting", e))?;
    } else {
        tx.rollback().await.map_err(|e| db("crediting", e))?;
    }
    Ok(applied)
}

/// The credit's statements, on whichever connection runs them:
///
/// ```sql
/// UPDATE tickets SET version = version + 1 WHERE id = ? AND version = ?;
/// -- 0 rows: precondition failed; the caller rolls back
/// INSERT INTO credits (operation_key, ticket_id, …) VALUES (?, ?, …);
/// ```
#[derive(Debug)]
struct CreditWrite(Credit);

/// The credit's two statements on one sqlx connection, inside a
/// transaction the caller owns; whether the precondition held. `rows` is
/// the driver's affected-row count.
async fn credit_statements<DB>(
    c: &Credit,
    conn: &mut DB::Connection,
    sql: fn(&Sql) -> &'static str,
    rows: fn(&DB::QueryResult) -> u64,
) -> Result<bool, sqlx::Error>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> &'a [u8]: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let bumped = sqlx::query(sql(&BUMP_VERSION))
        .bind(c.ticket_id.as_str())
        .bind(c.version)
        .execute(&mut *conn)
        .await?;
    if rows(&bumped) != 1 {
        return Ok(false);
    }
    sqlx::query(sql(&INSERT_CREDIT))
        .bind(c.key.as_bytes().as_slice())
        .bind(c.ticket_id.as_str())
        .bind(c.customer_id.as_str())
        .bind(c.agent_id.as_str())
        .bind(c.amount_minor)
        .bind(c.reason_code.as_str())
        .bind(c.version)
        .execute(&mut *conn)
        .await?;
    Ok(true)
}

impl StoreWrite for CreditWrite {
    fn postgres<'c>(&'c self, conn: &'c mut sqlx::PgConnection) -> WriteFuture<'c> {
        Box::pin(credit_statements::<sqlx::Postgres>(
            &self.0,
            conn,
            |q| q.pg,
            sqlx::postgres::PgQueryResult::rows_affected,
        ))
    }

    fn mysql<'c>(&'c self, conn: &'c mut sqlx::MySqlConnection) -> WriteFuture<'c> {
        // The bump always changes the row it matches, so MySQL's "rows
        // matched" is the number changed (module docs).
        Box::pin(credit_statements::<sqlx::MySql>(
            &self.0,
            conn,
            |q| q.qm,
            sqlx::mysql::MySqlQueryResult::rows_affected,
        ))
    }

    fn sqlite(&self, conn: &rusqlite::Connection) -> Result<bool, rusqlite::Error> {
        let c = &self.0;
        let bumped = conn
            .prepare_cached(BUMP_VERSION.qm)?
            .execute(rusqlite::params![c.ticket_id, c.version])?;
        if bumped != 1 {
            return Ok(false);
        }
        conn.prepare_cached(INSERT_CREDIT.qm)?
            .execute(rusqlite::params![
                c.key.as_bytes().as_slice(),
                c.ticket_id,
                c.customer_id,
                c.agent_id,
                c.amount_minor,
                c.reason_code,
                c.version,
            ])?;
        Ok(true)
    }
}

fn credit_from(permit: &ExecPermit<'_>) -> Result<Credit, ExecError> {
    if permit.tool() != "apply_goodwill_credit" {
        return Err(ExecError::new(format!(
            "the support desk has no tool {}",
            permit.tool()
        )));
    }
    let field = |name: &str| {
        permit
            .field(name)
            .ok_or_else(|| ExecError::new(format!("scope field `{name}` missing")))
    };
    let args = permit.arguments();
    // The arguments passed the tool's contract, so these hold; a mismatch
    // means the policy and this executor disagree, and nothing is written.
    let amount_minor = args
        .get("amount_minor")
        .and_then(Value::as_i64)
        .ok_or_else(|| ExecError::new("amount_minor is not an integer"))?;
    let reason_code = args
        .get("reason_code")
        .and_then(Value::as_str)
        .ok_or_else(|| ExecError::new("reason_code is not a string"))?
        .to_owned();
    let version = permit
        .precondition()
        .as_str()
        .parse::<i64>()
        .map_err(|_| ExecError::new("the ticket version is not an integer"))?;
    Ok(Credit {
        key: *permit.key(),
        ticket_id: field("ticket_id")?,
        customer_id: field("customer_id")?,
        agent_id: permit.principal().id().to_owned(),
        amount_minor,
        reason_code,
        version,
    })
}

impl StateSource for SupportDesk {
    async fn current_version(&self, scope: StateScope<'_>) -> Result<StateVersion, StateError> {
        let ticket = scope
            .field("ticket_id")
            .ok_or_else(|| StateError::new("scope field `ticket_id` missing"))?;
        match self.ticket_version(&ticket).await {
            Ok(Some(v)) => Ok(StateVersion::from(v)),
            Ok(None) => Err(StateError::new(format!("ticket {ticket} does not exist"))),
            Err(e) => Err(StateError::new(e.to_string())),
        }
    }
}

impl Executor for SupportDesk {
    async fn execute(&self, permit: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        let credit = credit_from(&permit)?;
        self.credit(&credit)
            .await
            .map_err(|e| ExecError::new(e.to_string()))
    }

    async fn execute_and_complete(
        &self,
        permit: ExecPermit<'_>,
        completion: &AppliedCompletion,
    ) -> Result<Completed, ExecError> {
        let credit = credit_from(&permit)?;
        self.credit_completing(credit, completion, None).await
    }

    fn reconcile(
        &self,
        claim: &ClaimRecord,
    ) -> impl Future<Output = Result<ReconcileOutcome, ExecError>> + Send {
        let key = claim.key;
        async move {
            match self.credit_for(&key).await {
                Ok(Some(receipt)) => Ok(ReconcileOutcome::Applied { receipt }),
                Ok(None) => {
                    let detail = json!({"applied": false, "reason": "no_credit_for_operation"});
                    JsonText::result(detail.to_string())
                        .map(|detail| ReconcileOutcome::NotApplied { detail })
                        .map_err(|e| ExecError::new(e.to_string()))
                }
                Err(e) => Err(ExecError::new(e.to_string())),
            }
        }
    }
}

impl SupportDesk {
    /// The credit `permit` asks for and `completion`, in one transaction on
    /// the connection `session` kept (the decision's claim committed on
    /// it), or on the pool if it kept none.
    pub(crate) async fn credit_on(
        &self,
        session: &mut Session<'_>,
        permit: ExecPermit<'_>,
        completion: &AppliedCompletion,
    ) -> Result<Completed, ExecError> {
        let credit = credit_from(&permit)?;
        self.credit_completing(credit, completion, Some(session))
            .await
    }
}

impl SeedTicket {
    /// `n` tickets at version 1 assigned to `assignee`, each for a customer
    /// of its own (so that no customer's daily credit cap is shared):
    /// ticket `{ids}-{i}`, customer `{customers}-{i}`.
    pub fn series(ids: &str, customers: &str, assignee: &str, n: usize) -> Vec<Self> {
        (0..n)
            .map(|i| Self {
                id: format!("{ids}-{i}"),
                customer_id: format!("{customers}-{i}"),
                assignee: assignee.to_owned(),
                version: 1,
            })
            .collect()
    }
}
