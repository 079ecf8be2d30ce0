//! # toolgate-support-desk
//!
//! The support desk: an example application built on the toolgate library
//! crates, and what `toolgate demo`, `serve --demo`, `eval` and the
//! benchmarks run. An assistant proposes `apply_goodwill_credit` for a
//! customer's ticket; the desk holds, beside the claim store in the same
//! database:
//!
//! - its tables and migrations (`agents`, `customers`, `tickets`,
//!   `credits`; [`store`]), its state source (a ticket's version) and its
//!   executor (a credit as a conditional write, on SQLite one unit of the
//!   store's group commit);
//! - its Cedar policies and the entities they read ([`cedar`]), read in
//!   one statement with the ticket's version ([`reads`]);
//! - its tool policy ([`POLICY`]), its evaluation cases (`eval/`) and its
//!   demo data ([`demo`], [`demo_tickets`], `demo/`);
//! - the pipeline assembled on embedded SQLite for the demo and the
//!   evaluation ([`app`]).
//!
//! Nothing here is part of the library: a deployment of another tool
//! replaces all of it with its own.

pub mod app;
pub mod cedar;
pub mod demo;
mod directory;
pub mod reads;
pub mod store;

pub use app::{Desk, Proposal, SystemClockAndTokens, TicketCredits};
pub use cedar::DeskEntities;
pub use directory::{Directory, TicketFacts, TicketOwner};
pub use reads::{DeskSession, ReadingOnce, decide_reading_once};
pub use store::{SeedTicket, SupportDesk};

/// The desk's tool policy (`examples/support-desk/policy.toml`).
pub const POLICY: &str = include_str!("../policy.toml");

/// The capability `apply_goodwill_credit` needs.
pub const CREDIT_ISSUE: &str = "credit:issue";

/// The tickets `toolgate serve --demo` seeds, with their customers and
/// assigned agents.
pub fn demo_tickets() -> Vec<SeedTicket> {
    let t = |id: &str, customer: &str, agent: &str, version: i64| SeedTicket {
        id: id.to_owned(),
        customer_id: customer.to_owned(),
        assignee: agent.to_owned(),
        version,
    };
    vec![
        t("T-100", "C-1", "agent-ana", 7),
        t("T-101", "C-2", "agent-ana", 3),
        t("T-200", "C-3", "agent-ben", 1),
        t("T-300", "C-4", "agent-php", 5),
        t("T-301", "C-5", "agent-php", 1),
    ]
}
