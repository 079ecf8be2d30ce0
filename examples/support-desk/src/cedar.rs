//! The desk's Cedar side: `Agent` principals, `Ticket` resources named by
//! the `ticket_id` scope field, and the entities read live from the desk's
//! tables for each decision.

use serde_json::Value;
use toolgate::pipeline::AuthzRequest;
use toolgate_cedar::{Attr, EntityError, EntityRecord, EntitySource, Mapping};
use toolgate_store::Session;

use crate::directory::Directory;
use crate::store::SupportDesk;

/// The desk's Cedar policies (`examples/support-desk/policy.cedar`).
pub const POLICIES: &str = include_str!("../policy.cedar");

/// The desk's mapping: `Agent` principals, `Ticket` resources named by the
/// `ticket_id` scope field.
pub fn mapping() -> Mapping {
    Mapping {
        principal_type: "Agent".to_owned(),
        resource_type: "Ticket".to_owned(),
        resource_field: "ticket_id".to_owned(),
    }
}

/// The desk's entities for one decision: the acting agent with `active`,
/// and the ticket with `assignee` (an `Agent`) and `customer`, from the
/// directory's answer. An unknown agent or ticket (`None`) is left out,
/// which makes Cedar's attribute access an evaluation error and so a
/// denial.
pub fn entities(
    agent: &str,
    agent_active: Option<bool>,
    ticket: &str,
    customer_and_assignee: Option<(String, String)>,
) -> Vec<EntityRecord> {
    let mut list = Vec::with_capacity(2);
    if let Some(active) = agent_active {
        list.push(EntityRecord::new("Agent", agent).attr("active", Attr::Value(active.into())));
    }
    if let Some((customer, assignee)) = customer_and_assignee {
        list.push(
            EntityRecord::new("Ticket", ticket)
                .attr("assignee", Attr::Entity("Agent".to_owned(), assignee))
                .attr("customer", Attr::Value(customer.into())),
        );
    }
    list
}

/// Cedar entities read live from the desk's tables ([`entities`]).
/// `toolgate serve`, `demo`, `eval` and `bench race` all authorise through
/// this.
#[derive(Clone)]
pub struct DeskEntities(pub SupportDesk);

impl EntitySource for DeskEntities {
    async fn entities(&self, r: &AuthzRequest<'_>) -> Result<Vec<EntityRecord>, EntityError> {
        let (ticket, found) = read_directory(&self.0, None, r).await?;
        Ok(entities(
            r.principal().id(),
            found.agent_active,
            &ticket,
            found.ticket.map(|t| (t.customer_id, t.assignee)),
        ))
    }
}

/// The ticket a request names, and the directory's answer for it and the
/// acting agent (one statement), on the decision's session when it has
/// one.
pub(crate) async fn read_directory(
    desk: &SupportDesk,
    session: Option<&mut Session<'_>>,
    r: &AuthzRequest<'_>,
) -> Result<(String, Directory), EntityError> {
    let ticket = match r.scope().get("ticket_id") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => {
            return Err(EntityError::Invalid(
                "the scope has no ticket_id".to_owned(),
            ));
        }
    };
    // A failed read is the database not answering, not a "no".
    let agent = r.principal().id();
    let found = match session {
        Some(session) => desk.directory_in(session, agent, &ticket).await,
        None => desk.directory(agent, &ticket).await,
    }
    .map_err(|e| EntityError::Unavailable(e.to_string()))?;
    Ok((ticket, found))
}
