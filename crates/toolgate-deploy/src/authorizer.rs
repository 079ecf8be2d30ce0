//! The authoriser of a deployment: Cedar per tool, over the tool's
//! entity sources (`sql` queries and the application's `request`
//! entities).

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;
use toolgate::pipeline::{Authorizer, AuthzDecision, AuthzRequest};
use toolgate_cedar::{Attr, CedarAuthorizer, EntityError, EntityRecord, EntitySource};

use crate::db::{self, AppDb};
use crate::sources::{self, EntityQuery};

/// Cedar's entities for one tool: its `sql` entity queries, run with the
/// decision's scope and actor, and its `request` types, taken from the
/// application's request.
#[derive(Debug)]
pub struct ToolEntities {
    pub(crate) db: Option<AppDb>,
    pub(crate) queries: Vec<EntityQuery>,
    pub(crate) request_types: BTreeSet<String>,
}

impl ToolEntities {
    /// Whether entities of `entity_type` are read from the request.
    pub fn reads_from_request(&self, entity_type: &str) -> bool {
        self.request_types.contains(entity_type)
    }

    /// The `request` entities of one decision: every declared type must be
    /// sent (Cedar would otherwise decide without the attributes the
    /// policies assume), and no other type may be.
    fn request_entities(&self, request: &AuthzRequest<'_>) -> Result<Vec<EntityRecord>, String> {
        let sent = request.attributes();
        if let Some(ty) = sent.keys().find(|t| !self.request_types.contains(*t)) {
            return Err(format!(
                "the request carries a `{ty}` entity, which this tool does not read from the \
                 request"
            ));
        }
        let mut out = Vec::new();
        for ty in &self.request_types {
            let entity = sent.get(ty).and_then(Value::as_object).ok_or_else(|| {
                format!(
                    "the request carries no `{ty}` entity, which this tool reads from the \
                     request (source = \"request\")"
                )
            })?;
            let id = entity
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("the request's `{ty}` entity has no string `id`"))?;
            let mut record = EntityRecord::new(ty, id);
            for (name, value) in entity.iter().filter(|(k, _)| *k != "id") {
                record = record.attr(name.clone(), Attr::Value(value.clone()));
            }
            out.push(record);
        }
        Ok(out)
    }
}

impl EntitySource for ToolEntities {
    async fn entities(&self, request: &AuthzRequest<'_>) -> Result<Vec<EntityRecord>, EntityError> {
        let mut out = self.request_entities(request)?;
        let Some(db) = &self.db else {
            return Ok(out);
        };
        for q in &self.queries {
            let binds = sources::binds(&q.query, request.scope(), request.principal().id())
                .map_err(|e| format!("{}: {e}", q.type_name))?;
            // A failed query is the application's database not answering;
            // rows it answered that cannot be read (150 of them, a NUMERIC
            // column) deny, as every retry would meet them again: a
            // decision (`forbidden`, the detail in the log and the audit
            // entry's `authorization_error`), never a retry-later.
            let rows = db.fetch(&q.query, &binds).await.map_err(|e| match e {
                db::FetchError::Unavailable(m) => {
                    EntityError::Unavailable(format!("{}: {m}", q.type_name))
                }
                db::FetchError::Unreadable(m) => {
                    EntityError::Invalid(format!("{}: {m}", q.type_name))
                }
            })?;
            for row in &rows {
                out.push(sources::row_entity(&q.type_name, row)?);
            }
        }
        Ok(out)
    }
}

/// The authoriser of a deployment: Cedar, with each tool's mapping and
/// entity sources.
pub struct DeployAuthorizer {
    pub(crate) tools: HashMap<String, CedarAuthorizer<ToolEntities>>,
}

impl std::fmt::Debug for DeployAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeployAuthorizer")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl DeployAuthorizer {
    /// The entity source of `tool`.
    pub fn entities(&self, tool: &str) -> Option<&ToolEntities> {
        self.tools.get(tool).map(CedarAuthorizer::entity_source)
    }
}

impl Authorizer for DeployAuthorizer {
    async fn authorize(&self, request: &AuthzRequest<'_>) -> AuthzDecision {
        match self.tools.get(request.tool()) {
            Some(cedar) => cedar.authorize(request).await,
            None => AuthzDecision::Error {
                message: format!("no authoriser for tool `{}`", request.tool()),
            },
        }
    }

    fn accepts_request_entity(&self, tool: &str, entity_type: &str) -> bool {
        self.entities(tool)
            .is_some_and(|e| e.reads_from_request(entity_type))
    }
}
