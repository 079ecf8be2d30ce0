//! The directory: what authorising an agent on a ticket reads (the agent's
//! `active` flag, the ticket's customer and assignee) and the ticket's
//! version, in one statement, on the pool or on the connection a decision
//! holds for its claim.

use sqlx::Row;
use toolgate::claim::StoreError;
use toolgate_store::{Session, SessionConnection};

use crate::store::{DeskPool, Sql, SupportDesk, db, on_pool};

const TICKET_FACTS: Sql = Sql {
    qm: "SELECT t.customer_id, t.assignee, a.active FROM tickets t \
         JOIN agents a ON a.id = t.assignee WHERE t.id = ?",
    pg: "SELECT t.customer_id, t.assignee, a.active FROM tickets t \
         JOIN agents a ON a.id = t.assignee WHERE t.id = $1",
};
/// What authorisation needs in one round trip: the acting agent's `active`
/// and the ticket's customer and assignee, each NULL when missing; and the
/// ticket's version, which the same decision's state read may use
/// (`crate::reads`).
const DIRECTORY: Sql = Sql {
    qm: "SELECT ag.active, t.customer_id, t.assignee, t.version \
         FROM (SELECT ? AS agent_id, ? AS ticket_id) q \
         LEFT JOIN agents ag ON ag.id = q.agent_id \
         LEFT JOIN tickets t ON t.id = q.ticket_id",
    pg: "SELECT ag.active, t.customer_id, t.assignee, t.version \
         FROM (SELECT $1::text AS agent_id, $2::text AS ticket_id) q \
         LEFT JOIN agents ag ON ag.id = q.agent_id \
         LEFT JOIN tickets t ON t.id = q.ticket_id",
};
const AGENT_ACTIVE: Sql = Sql {
    qm: "SELECT active FROM agents WHERE id = ?",
    pg: "SELECT active FROM agents WHERE id = $1",
};

/// The directory's answer for one decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directory {
    /// The acting agent's `active` flag; `None` for an unknown agent.
    pub agent_active: Option<bool>,
    /// The ticket's customer and assignee; `None` for an unknown ticket.
    pub ticket: Option<TicketOwner>,
}

/// Whose a ticket is, and its version when read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketOwner {
    /// The ticket's customer.
    pub customer_id: String,
    /// The assigned agent.
    pub assignee: String,
    /// The ticket's version, read in the same statement.
    pub version: i64,
}

/// What a ticket's directory entry says, for authorisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketFacts {
    /// The ticket's customer.
    pub customer_id: String,
    /// The assigned agent.
    pub assignee: String,
    /// Whether the assigned agent is active.
    pub assignee_active: bool,
}

/// The directory's row (`DIRECTORY`), whichever driver read it.
fn directory_from<R>(row: &R) -> Result<Directory, StoreError>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    for<'r> Option<bool>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<i64>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let get = |e| db("reading the directory", e);
    let agent_active: Option<bool> = row.try_get(0).map_err(get)?;
    let customer: Option<String> = row.try_get(1).map_err(get)?;
    let assignee: Option<String> = row.try_get(2).map_err(get)?;
    let version: Option<i64> = row.try_get(3).map_err(get)?;
    let ticket = match (customer, assignee, version) {
        (Some(customer_id), Some(assignee), Some(version)) => Some(TicketOwner {
            customer_id,
            assignee,
            version,
        }),
        _ => None,
    };
    Ok(Directory {
        agent_active,
        ticket,
    })
}

/// The directory read on one connection.
async fn directory_on<DB>(
    conn: &mut DB::Connection,
    sql: &'static str,
    agent: &str,
    ticket: &str,
) -> Result<Directory, StoreError>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> DB::Arguments: sqlx::IntoArguments<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    for<'r> Option<bool>: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    for<'r> Option<String>: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    for<'r> Option<i64>: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    let row = sqlx::query(sql)
        .bind(agent)
        .bind(ticket)
        .fetch_one(conn)
        .await
        .map_err(|e| db("reading the directory", e))?;
    directory_from(&row)
}

impl SupportDesk {
    /// The directory facts about a ticket, for authorisation.
    pub async fn ticket_facts(&self, ticket: &str) -> Result<Option<TicketFacts>, StoreError> {
        on_pool!(self, p, s => {
            let row = sqlx::query(s(&TICKET_FACTS))
                .bind(ticket)
                .fetch_optional(p)
                .await
                .map_err(|e| db("reading ticket facts", e))?;
            match row {
                None => Ok(None),
                Some(r) => Ok(Some(TicketFacts {
                    customer_id: r.try_get(0).map_err(|e| db("ticket facts", e))?,
                    assignee: r.try_get(1).map_err(|e| db("ticket facts", e))?,
                    assignee_active: r.try_get(2).map_err(|e| db("ticket facts", e))?,
                })),
            }
        })
    }

    /// What authorising `agent` on `ticket` needs, and the ticket's
    /// version, read live in one query.
    pub async fn directory(&self, agent: &str, ticket: &str) -> Result<Directory, StoreError> {
        on_pool!(self, p, s => {
            let row = sqlx::query(s(&DIRECTORY))
                .bind(agent)
                .bind(ticket)
                .fetch_one(p)
                .await
                .map_err(|e| db("reading the directory", e))?;
            directory_from(&row)
        })
    }

    /// [`SupportDesk::directory`] on one decision's connection (its
    /// `session`), which that decision's claim then begins on: one pool use
    /// fewer. A session of another store, or SQLite (which holds nothing),
    /// reads as usual.
    pub async fn directory_in(
        &self,
        session: &mut Session<'_>,
        agent: &str,
        ticket: &str,
    ) -> Result<Directory, StoreError> {
        if !session.is_of(&self.claims) {
            return self.directory(agent, ticket).await;
        }
        match session.connection().await? {
            SessionConnection::Postgres(mut conn) => {
                let found =
                    directory_on::<sqlx::Postgres>(&mut conn, DIRECTORY.pg, agent, ticket).await?;
                conn.keep();
                Ok(found)
            }
            SessionConnection::MySql(mut conn) => {
                let found =
                    directory_on::<sqlx::MySql>(&mut conn, DIRECTORY.qm, agent, ticket).await?;
                conn.keep();
                Ok(found)
            }
            SessionConnection::Sqlite => self.directory(agent, ticket).await,
        }
    }

    /// Whether an agent is active (`None`: unknown agent).
    pub async fn agent_active(&self, agent: &str) -> Result<Option<bool>, StoreError> {
        on_pool!(self, p, s => {
            let row = sqlx::query(s(&AGENT_ACTIVE))
                .bind(agent)
                .fetch_optional(p)
                .await
                .map_err(|e| db("reading an agent", e))?;
            row.map(|r| r.try_get::<bool, _>(0))
                .transpose()
                .map_err(|e| db("reading an agent", e))
        })
    }
}
