//! The support desk assembled for `toolgate demo` and `toolgate eval`: the
//! SQLite claim store, the desk's tables, state source and executor
//! ([`crate::store`]), and its Cedar policies ([`crate::cedar`]), wired
//! into [`toolgate::pipeline::decide`].
//!
//! Both commands run on a fresh embedded SQLite database, so the few writes
//! the example's API does not offer (an agent deactivated, a ticket
//! reassigned, credits summed per ticket) are plain SQLite statements on
//! the example's tables.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use sqlx::Row;
use toolgate::claim::{HolderToken, UnixMillis};
use toolgate::contract::{CheckOptions, Policy, check};
use toolgate::pipeline::{Decision, Gate, Principal, Request, StateVersion};
use toolgate::provider::Provider;
use toolgate_cedar::CedarAuthorizer;
use toolgate_eval::case::Case;
use toolgate_eval::runner::{CaseSeeder, SeedError};
use toolgate_service::{KeyRing, Parts, Service};
use toolgate_store::AnyClaimStore;

use crate::cedar::{self, DeskEntities};
use crate::reads::decide_reading_once;
use crate::store::{SeedTicket, SupportDesk};

/// How long a won claim may run before it counts as stuck.
const LEASE: Duration = Duration::from_secs(30);

/// The wall clock and the operating system's random holder tokens.
pub struct SystemClockAndTokens;

impl SystemClockAndTokens {
    /// A fresh holder token from the operating system's generator.
    pub fn holder(&self) -> Result<HolderToken, String> {
        toolgate_store::fresh_holder().map_err(|e| e.to_string())
    }

    /// The wall clock.
    pub fn now(&self) -> UnixMillis {
        toolgate_store::now_millis()
    }
}

/// One proposal as the server sees it: who, about what, which version the
/// model read, and the provider's raw body.
#[derive(Debug, Clone, Copy)]
pub struct Proposal<'a> {
    /// The authenticated agent.
    pub actor: &'a str,
    /// Its capabilities.
    pub capabilities: &'a [&'a str],
    /// The customer.
    pub customer: &'a str,
    /// The ticket.
    pub ticket: &'a str,
    /// The ticket version the model was shown.
    pub version_seen: i64,
    /// The body's format.
    pub provider: Provider,
    /// The raw provider response.
    pub body: &'a [u8],
}

/// Credits written for one ticket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketCredits {
    /// The ticket.
    pub ticket: String,
    /// How many credit rows.
    pub count: i64,
    /// Their sum, in minor units.
    pub total_minor: i64,
}

/// The assembled support desk.
pub struct Desk {
    store: AnyClaimStore,
    desk: SupportDesk,
    authorizer: CedarAuthorizer<DeskEntities>,
    pool: sqlx::SqlitePool,
}

fn db(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

impl Desk {
    /// Opens (creating) the SQLite database at `url`, migrates the claim
    /// store and the support-desk tables, and loads the Cedar policies.
    pub async fn open(url: &str) -> Result<Self, String> {
        let store = AnyClaimStore::connect(url)
            .await
            .map_err(|e| db(&format!("opening {url}"), e))?;
        let pool = match &store {
            AnyClaimStore::Sqlite(s) => s.pool().clone(),
            #[allow(unreachable_patterns, reason = "other backends are compiled in")]
            _ => return Err(format!("{url}: the demo and eval run on embedded SQLite")),
        };
        let desk = SupportDesk::on_store(&store)
            .await
            .map_err(|e| db("the support-desk tables", e))?;
        let authorizer = CedarAuthorizer::new(
            cedar::POLICIES,
            &cedar::mapping(),
            DeskEntities(desk.clone()),
        )
        .map_err(|e| db("the Cedar policies", e))?;
        Ok(Self {
            store,
            desk,
            authorizer,
            pool,
        })
    }

    /// Creates or updates an agent.
    pub async fn seed_agent(&self, id: &str, active: bool) -> Result<(), String> {
        sqlx::query(
            "INSERT INTO agents (id, active) VALUES (?, ?) \
             ON CONFLICT (id) DO UPDATE SET active = excluded.active",
        )
        .bind(id)
        .bind(active)
        .execute(&self.pool)
        .await
        .map(drop)
        .map_err(|e| db("seeding an agent", e))
    }

    /// Creates a ticket (and its customer, and its assignee as an active
    /// agent if missing).
    pub async fn seed_ticket(
        &self,
        id: &str,
        customer: &str,
        assignee: &str,
        version: i64,
    ) -> Result<(), String> {
        let ticket = SeedTicket {
            id: id.to_owned(),
            customer_id: customer.to_owned(),
            assignee: assignee.to_owned(),
            version,
        };
        self.desk
            .seed(&[ticket])
            .await
            .map_err(|e| db("seeding a ticket", e))
    }

    /// Reassigns a ticket (the previous assignee loses access).
    pub async fn assign(&self, ticket: &str, agent: &str) -> Result<(), String> {
        let done = sqlx::query("UPDATE tickets SET assignee = ? WHERE id = ?")
            .bind(agent)
            .bind(ticket)
            .execute(&self.pool)
            .await
            .map_err(|e| db("reassigning a ticket", e))?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(format!("ticket {ticket} does not exist"))
        }
    }

    /// Credits per ticket, read from the credits table, by ticket id.
    pub async fn credits_per_ticket(&self) -> Result<Vec<TicketCredits>, String> {
        let rows = sqlx::query(
            "SELECT ticket_id, COUNT(*), SUM(amount_minor) FROM credits \
             GROUP BY ticket_id ORDER BY ticket_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db("reading credits", e))?;
        rows.iter()
            .map(|r| {
                Ok(TicketCredits {
                    ticket: r.try_get(0).map_err(|e| db("reading credits", e))?,
                    count: r.try_get(1).map_err(|e| db("reading credits", e))?,
                    total_minor: r.try_get(2).map_err(|e| db("reading credits", e))?,
                })
            })
            .collect()
    }

    /// The pipeline's pluggable parts over this database.
    pub fn parts<'a>(
        &'a self,
        policy: &'a Policy,
    ) -> Gate<'a, CedarAuthorizer<DeskEntities>, SupportDesk, AnyClaimStore, SupportDesk> {
        Gate {
            policy,
            authorizer: &self.authorizer,
            state: &self.desk,
            claims: &self.store,
            executor: &self.desk,
        }
    }

    /// The service `toolgate eval` runs cases through (with this desk as
    /// their seeder, `toolgate_eval::ServiceGate`): the decision every door
    /// makes, on this database. It is one service for every case, so its
    /// state read is the desk's own query: a version read with the
    /// entities belongs to one decision ([`crate::reads`]).
    pub fn service(&self, policy: Arc<Policy>) -> Result<Service, String> {
        let authorizer = CedarAuthorizer::new(
            cedar::POLICIES,
            &cedar::mapping(),
            DeskEntities(self.desk.clone()),
        )
        .map_err(|e| db("the Cedar policies", e))?;
        let components = Parts::new(
            authorizer,
            self.desk.clone(),
            self.store.clone(),
            self.desk.clone(),
        );
        let settings = toolgate_service::Settings {
            lease: LEASE,
            ..toolgate_service::Settings::default()
        };
        // Cases name their actor themselves: no caller authenticates.
        Ok(Service::new(
            policy,
            components,
            KeyRing::default(),
            settings,
        ))
    }

    /// Decides one proposal through the whole pipeline, reading the
    /// entities and the ticket's version in one statement
    /// ([`decide_reading_once`]).
    pub async fn decide(&self, policy: &Policy, p: &Proposal<'_>) -> Result<Decision, String> {
        let principal =
            Principal::new(p.actor, p.capabilities.iter().copied()).map_err(|e| e.to_string())?;
        let mut scope = Map::new();
        scope.insert("customer_id".into(), Value::String(p.customer.to_owned()));
        scope.insert("ticket_id".into(), Value::String(p.ticket.to_owned()));
        let version_seen = StateVersion::from(p.version_seen);
        let request = Request {
            principal: &principal,
            scope: &toolgate::pipeline::Scope::new(scope.clone(), Some(version_seen.clone())),
            attributes: &Map::new(),
            approval: None,
            now: SystemClockAndTokens.now(),
            holder: SystemClockAndTokens.holder()?,
            lease: LEASE,
        };
        let proposal = check(policy, p.provider, p.body, &CheckOptions::default());
        decide_reading_once(&self.parts(policy), proposal, &request)
            .await
            .map_err(|e| e.to_string())
    }
}

/// What the desk's tables hold for one evaluation case: the case's
/// context, with the fields of its `world` map where the world disagrees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseWorld {
    /// The agent asking (the case's actor).
    pub agent: String,
    /// Whether the agent's account is active (`world.agent_active`,
    /// default true).
    pub agent_active: bool,
    /// The ticket (`scope.ticket_id`).
    pub ticket: String,
    /// The customer the ticket belongs to (`world.ticket_customer`,
    /// default `scope.customer_id`).
    pub ticket_customer: String,
    /// The agent the ticket is assigned to (`world.assignee`, default the
    /// actor).
    pub assignee: String,
    /// The ticket's current version (`world.current_version`, default
    /// `version_seen`).
    pub current_version: i64,
    /// The customer the case's scope names (`scope.customer_id`).
    pub customer: String,
    /// Credits, in minor units, the scope's customer already received
    /// this UTC day on other tickets (`world.prior_credits`, default
    /// none). Each is written through the pipeline before the case, so
    /// the policy's budgets count them as they would in serving.
    pub prior_credits: Vec<i64>,
}

/// The agent that writes a case's `prior_credits` (an active agent with
/// `credit:issue` on tickets of its own).
pub const PRIOR_CREDITS_AGENT: &str = "eval-prior-credits";

impl CaseWorld {
    /// Reads a case's desk world. The scope must name `customer_id` and
    /// `ticket_id` as strings, `version_seen` must be an integer, and
    /// `world` may only set the four fields above: anything else is a
    /// mistake in the case, not a world to guess at.
    pub fn of(case: &Case) -> Result<Self, String> {
        let at = |m: String| format!("case {}: {m}", case.id);
        let scope_str = |name: &str| match case.context.scope.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(at(format!("scope.{name} must be a string"))),
        };
        let ticket = scope_str("ticket_id")?;
        let customer = scope_str("customer_id")?;
        let seen = case
            .context
            .version_seen
            .as_i64()
            .ok_or_else(|| at("version_seen must be an integer (a ticket version)".into()))?;
        let mut w = Self {
            agent: case.context.actor.clone(),
            agent_active: true,
            ticket,
            ticket_customer: customer.clone(),
            assignee: case.context.actor.clone(),
            current_version: seen,
            customer,
            prior_credits: Vec::new(),
        };
        for (k, v) in &case.world {
            let bad = || at(format!("world.{k}: unexpected value {v}"));
            match k.as_str() {
                "agent_active" => w.agent_active = v.as_bool().ok_or_else(bad)?,
                "ticket_customer" => w.ticket_customer = v.as_str().ok_or_else(bad)?.to_owned(),
                "assignee" => w.assignee = v.as_str().ok_or_else(bad)?.to_owned(),
                "current_version" => w.current_version = v.as_i64().ok_or_else(bad)?,
                "prior_credits" => {
                    w.prior_credits = v
                        .as_array()
                        .ok_or_else(bad)?
                        .iter()
                        .map(|a| a.as_i64().filter(|a| *a > 0).ok_or_else(bad))
                        .collect::<Result<_, _>>()?;
                }
                _ => {
                    return Err(at(format!(
                        "world.{k}: the desk's world has agent_active, ticket_customer, \
                         assignee, current_version and prior_credits"
                    )));
                }
            }
        }
        Ok(w)
    }
}

impl CaseSeeder for Desk {
    /// The actor (active or not, as the case says), then the case's own
    /// ticket with its customer, assignee and current version, then the
    /// case's prior credits.
    async fn prepare(&self, policy: &Policy, case: &Case) -> Result<(), SeedError> {
        let w = CaseWorld::of(case)?;
        self.seed_agent(&w.agent, w.agent_active).await?;
        self.seed_ticket(
            &w.ticket,
            &w.ticket_customer,
            &w.assignee,
            w.current_version,
        )
        .await
        .map_err(|e| format!("case {}: {e}", case.id))?;
        Ok(self.prior_credits(policy, case, &w).await?)
    }
}

impl Desk {
    /// Writes each of the case's prior credits as a real proposal through
    /// the pipeline, on a ticket of its own for the scope's customer, so
    /// the claim store reserves it in the policy's budgets exactly as a
    /// served credit would (in the UTC window of now, as the case's own
    /// decision a moment later). Anything but `executed` is a mistake in
    /// the case's world, not an outcome to score.
    async fn prior_credits(
        &self,
        policy: &Policy,
        case: &Case,
        w: &CaseWorld,
    ) -> Result<(), String> {
        if w.prior_credits.is_empty() {
            return Ok(());
        }
        self.seed_agent(PRIOR_CREDITS_AGENT, true).await?;
        for (n, amount) in w.prior_credits.iter().enumerate() {
            let at = |m: String| format!("case {}: world.prior_credits[{n}]: {m}", case.id);
            let ticket = format!("{}-prior-{n}", w.ticket);
            self.seed_ticket(&ticket, &w.customer, PRIOR_CREDITS_AGENT, 1)
                .await
                .map_err(at)?;
            let body = serde_json::json!({
                "outcome": "action",
                "reply": "Applied a credit.",
                "proposed_action": {"tool": "apply_goodwill_credit",
                    "arguments": {"amount_minor": amount, "reason_code": "late_delivery"}},
            })
            .to_string();
            let d = self
                .decide(
                    policy,
                    &Proposal {
                        actor: PRIOR_CREDITS_AGENT,
                        capabilities: &[crate::CREDIT_ISSUE],
                        customer: &w.customer,
                        ticket: &ticket,
                        version_seen: 1,
                        provider: Provider::Envelope,
                        body: body.as_bytes(),
                    },
                )
                .await
                .map_err(at)?;
            if d.outcome() != toolgate::pipeline::Outcome::Executed {
                return Err(at(format!(
                    "the credit of {amount} ended {} ({}), not executed",
                    d.outcome().as_str(),
                    d.reason().map_or("-", |r| r.as_str())
                )));
            }
        }
        Ok(())
    }
}
