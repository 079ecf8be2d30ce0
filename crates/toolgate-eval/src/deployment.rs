//! The world of any deployment's cases: facts from the case, Cedar from the
//! deployment, writes kept in memory.
//!
//! A deployment file (docs/deploy.md) reads its entities and versions from
//! the application's database or HTTP endpoints and writes through a
//! webhook. An evaluation must do none of that: it would read whatever the
//! application holds today instead of what the case is about, and a
//! justified case would really refund someone. So here each case carries
//! its facts in its `world` (docs/eval.md):
//!
//! ```json
//! "world": {
//!   "entities": {"Order": {"id": 1001, "customer_id": 501, "team": "eu"},
//!                "Agent": {"id": "agent-ana", "team": "eu", "disabled": false}},
//!   "current_version": 4
//! }
//! ```
//!
//! Each entity is given as the row its source would have returned (one
//! object, or a list of them), read exactly as a `sql` row is read in
//! serving: `id` is the entity id, a `parent_<Type>` field a parent, every
//! other non-null field an attribute. Cedar then decides with the
//! deployment's real policies and each tool's real mapping over those
//! rows, so a case can test ownership and limits. `current_version`
//! (default: the version the model was shown) is what the state source
//! answers. The executor, [`Recorder`], records the write in memory and
//! sends nothing anywhere.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Map, Value, json};
use toolgate::claim::{ClaimRecord, ClaimStore, JsonText, ReconcileOutcome};
use toolgate::contract::Policy;
use toolgate::idempotency::IdempotencyStore;
use toolgate::pipeline::{
    Authorizer, AuthzDecision, AuthzRequest, ExecError, ExecOutcome, ExecPermit, Executor,
    StateError, StateScope, StateSource, StateVersion,
};
use toolgate::review::ReviewStore;
use toolgate_cedar::{Attr, CedarAuthorizer, EntityError, EntityRecord, EntitySource, Mapping};
use toolgate_service::{Authz, Exec, Parts, State, Store};

use crate::case::Case;
use crate::runner::{CaseSeeder, SeedError};

/// One tool of the deployment as the evaluation needs it: its Cedar
/// mapping (`[tools.cedar]`) and the entity types its sources provide
/// (`[[tools.entities]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolMapping {
    /// The policy tool.
    pub tool: String,
    /// Which Cedar types and scope field name the principal and resource.
    pub mapping: Mapping,
    /// The entity types the tool's sources provide.
    pub entity_types: Vec<String>,
    /// Whether the tool has a state source (`state = { source = "none" }`
    /// has not): without one the pipeline compares no version, and a
    /// stale case is caught by the executor's precondition, as a webhook's
    /// 409 would be in serving.
    pub reads_state: bool,
}

/// The facts of the case being decided.
#[derive(Debug, Clone)]
struct Facts {
    case: String,
    entities: Vec<EntityRecord>,
    current_version: StateVersion,
}

/// The facts of the case being decided now. Cases are decided one at a
/// time ([`crate::runner::run`]), and [`CaseSeeder::prepare`] replaces them
/// before each.
#[derive(Debug, Default)]
struct Current(Mutex<Option<Facts>>);

impl Current {
    fn get(&self) -> Option<Facts> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, facts: Facts) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(facts);
    }
}

const NO_CASE: &str = "no case is being decided";

/// The entity source: the current case's rows, all of them (they are what
/// the deployment's queries would have returned for this request).
#[derive(Debug)]
pub struct CaseEntities(Arc<Current>);

impl EntitySource for CaseEntities {
    async fn entities(
        &self,
        _request: &AuthzRequest<'_>,
    ) -> Result<Vec<EntityRecord>, EntityError> {
        self.0
            .get()
            .map(|f| f.entities)
            .ok_or_else(|| EntityError::Invalid(NO_CASE.to_owned()))
    }
}

/// Cedar per tool, with the deployment's policies and the tool's mapping,
/// over the current case's rows.
pub struct CaseAuthorizer {
    tools: HashMap<String, CedarAuthorizer<CaseEntities>>,
}

impl std::fmt::Debug for CaseAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaseAuthorizer")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Authorizer for CaseAuthorizer {
    async fn authorize(&self, request: &AuthzRequest<'_>) -> AuthzDecision {
        match self.tools.get(request.tool()) {
            Some(cedar) => cedar.authorize(request).await,
            None => AuthzDecision::Error {
                message: format!("no [[tools]] entry for tool `{}`", request.tool()),
            },
        }
    }
}

/// The state source: the current case's `current_version`, for the tools
/// that have one.
#[derive(Debug)]
pub struct CaseState {
    current: Arc<Current>,
    stateless: BTreeSet<String>,
}

impl StateSource for CaseState {
    async fn current_version(&self, _scope: StateScope<'_>) -> Result<StateVersion, StateError> {
        self.current
            .get()
            .map(|f| f.current_version)
            .ok_or_else(|| StateError::new(NO_CASE))
    }

    fn reads_state(&self, tool: &str) -> bool {
        !self.stateless.contains(tool)
    }
}

/// A write the evaluation would have made: recorded, never sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedWrite {
    /// The case that made it.
    pub case: String,
    /// The tool.
    pub tool: String,
    /// The operation key, hex.
    pub operation_key: String,
    /// The validated arguments, canonical JSON.
    pub arguments: String,
    /// The canonical scope.
    pub scope: Map<String, Value>,
    /// The version the write was conditioned on.
    pub precondition: String,
    /// The acting principal.
    pub actor: String,
}

/// The executor: applies the version precondition against the case's
/// current version, as the application's own write would, and records the
/// write in memory.
#[derive(Debug)]
pub struct Recorder {
    current: Arc<Current>,
    writes: Mutex<Vec<RecordedWrite>>,
}

impl Executor for Recorder {
    async fn execute(&self, permit: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        let facts = self.current.get().ok_or_else(|| ExecError::new(NO_CASE))?;
        if permit.precondition() != &facts.current_version {
            return Ok(ExecOutcome::PreconditionFailed {
                current: Some(facts.current_version),
            });
        }
        let mut writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        writes.push(RecordedWrite {
            case: facts.case,
            tool: permit.tool().to_owned(),
            operation_key: permit.key().to_hex(),
            arguments: permit.canonical_arguments().to_owned(),
            scope: permit.scope().clone(),
            precondition: permit.precondition().to_string(),
            actor: permit.principal().id().to_owned(),
        });
        let receipt = json!({"recorded_in_memory": true, "write": writes.len()});
        let receipt =
            JsonText::result(receipt.to_string()).map_err(|e| ExecError::new(e.to_string()))?;
        Ok(ExecOutcome::Applied { receipt })
    }

    async fn reconcile(&self, _claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        // Every write here completes or fails at once: no claim of an
        // evaluation is left in flight for reconciliation.
        Err(ExecError::new(
            "an evaluation's writes are recorded in memory: there is nothing to reconcile",
        ))
    }
}

/// The deployment under evaluation: its Cedar policies and tool mappings
/// over the current case's facts, its writes kept in memory.
#[derive(Debug)]
pub struct DeploymentUnderTest {
    /// Cedar over the case's rows.
    pub authorizer: Arc<CaseAuthorizer>,
    /// The case's current version.
    pub state: Arc<CaseState>,
    /// Writes kept in memory.
    pub executor: Arc<Recorder>,
    types: BTreeSet<String>,
    current: Arc<Current>,
}

impl DeploymentUnderTest {
    /// Parses `cedar_policies` once per tool with its mapping.
    pub fn new(cedar_policies: &str, tools: &[ToolMapping]) -> Result<Self, String> {
        let current = Arc::new(Current::default());
        let mut by_tool = HashMap::new();
        let mut types = BTreeSet::new();
        let mut stateless = BTreeSet::new();
        for t in tools {
            if !t.reads_state {
                stateless.insert(t.tool.clone());
            }
            let cedar = CedarAuthorizer::new(
                cedar_policies,
                &t.mapping,
                CaseEntities(Arc::clone(&current)),
            )
            .map_err(|e| format!("tools[{}].cedar: {e}", t.tool))?;
            by_tool.insert(t.tool.clone(), cedar);
            types.insert(t.mapping.principal_type.clone());
            types.insert(t.mapping.resource_type.clone());
            types.extend(t.entity_types.iter().cloned());
        }
        Ok(Self {
            authorizer: Arc::new(CaseAuthorizer { tools: by_tool }),
            state: Arc::new(CaseState {
                current: Arc::clone(&current),
                stateless,
            }),
            executor: Arc::new(Recorder {
                current: Arc::clone(&current),
                writes: Mutex::new(Vec::new()),
            }),
            types,
            current,
        })
    }

    /// The writes recorded so far, in order.
    pub fn writes(&self) -> Vec<RecordedWrite> {
        self.executor
            .writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// These components over `claims`, for the service under test. The
    /// deployment keeps its own handles: the seeder sets each case's facts
    /// and [`DeploymentUnderTest::writes`] reads what was written.
    pub fn components(
        &self,
        claims: impl ClaimStore + ReviewStore + IdempotencyStore + 'static,
    ) -> Parts {
        Parts {
            authorizer: Authz::shared(Arc::clone(&self.authorizer)),
            state: State::shared(Arc::clone(&self.state)),
            store: Store::new(claims),
            executor: Exec::shared(Arc::clone(&self.executor)),
        }
    }

    fn facts(&self, case: &Case) -> Result<Facts, String> {
        let at = |m: String| format!("case {} ({}): world.{m}", case.id, case.source);
        let mut facts = Facts {
            case: case.id.clone(),
            entities: Vec::new(),
            current_version: case.version_seen(),
        };
        for (k, v) in &case.world {
            match k.as_str() {
                "entities" => {
                    let Value::Object(by_type) = v else {
                        return Err(at("entities: an object of rows by entity type".into()));
                    };
                    for (type_name, rows) in by_type {
                        if !self.types.contains(type_name) {
                            return Err(at(format!(
                                "entities.{type_name}: no tool of the deployment uses this \
                                 entity type ({})",
                                self.types.iter().cloned().collect::<Vec<_>>().join(", ")
                            )));
                        }
                        let rows = match rows {
                            Value::Array(list) => list.iter().collect(),
                            row => vec![row],
                        };
                        for row in rows {
                            let entity = row_entity(type_name, row)
                                .map_err(|m| at(format!("entities.{type_name}: {m}")))?;
                            facts.entities.push(entity);
                        }
                    }
                }
                "current_version" => {
                    facts.current_version = version(v).ok_or_else(|| {
                        at("current_version: a non-empty string or a non-negative integer".into())
                    })?;
                }
                other => {
                    return Err(at(format!(
                        "{other}: unknown; a deployment's case world has `entities` and \
                         `current_version`"
                    )));
                }
            }
        }
        Ok(facts)
    }
}

impl CaseSeeder for DeploymentUnderTest {
    async fn prepare(&self, _policy: &Policy, case: &Case) -> Result<(), SeedError> {
        let facts = self.facts(case)?;
        self.current.set(facts);
        Ok(())
    }
}

/// A version as the policy's `version` scope type reads it: a string, or a
/// non-negative integer's decimal digits.
fn version(v: &Value) -> Option<StateVersion> {
    match v {
        Value::String(s) => StateVersion::new(s.clone()),
        Value::Number(n) if n.is_u64() => StateVersion::new(n.to_string()),
        _ => None,
    }
}

/// A row as an entity, as a `sql` source reads one: only what a database
/// column can hold (a string, an integer, a boolean, NULL) is accepted, so
/// a case cannot give Cedar what the deployment never could.
fn row_entity(type_name: &str, row: &Value) -> Result<EntityRecord, String> {
    let Value::Object(row) = row else {
        return Err(format!("a row is an object of columns, not {row}"));
    };
    let id_text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) if n.is_i64() => Some(n.to_string()),
        _ => None,
    };
    let id = row
        .get("id")
        .and_then(id_text)
        .ok_or("a row needs a string or integer `id`")?;
    let mut record = EntityRecord::new(type_name, id);
    for (name, value) in row {
        if name == "id" || value.is_null() {
            continue;
        }
        if let Some(parent_type) = name.strip_prefix("parent_") {
            let pid =
                id_text(value).ok_or_else(|| format!("`{name}` must be a string or integer id"))?;
            record.parents.push((parent_type.to_owned(), pid));
            continue;
        }
        match value {
            Value::String(_) | Value::Bool(_) => {}
            Value::Number(n) if n.is_i64() => {}
            other => {
                return Err(format!(
                    "`{name}`: {other} is not a column value (a string, a 64-bit integer, a \
                     boolean or null)"
                ));
            }
        }
        record = record.attr(name.clone(), Attr::Value(value.clone()));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_reads_as_a_sql_row_does() {
        let row = json!({"id": 1001, "team": "eu", "refundable": 500, "vip": true,
                         "note": null, "parent_Shop": "s-1"});
        let e = row_entity("Order", &row).unwrap();
        assert_eq!(e.id, "1001");
        assert_eq!(e.parents, vec![("Shop".to_owned(), "s-1".to_owned())]);
        let names: BTreeSet<&str> = e.attrs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, BTreeSet::from(["team", "refundable", "vip"]));
        for bad in [
            json!({"team": "eu"}),
            json!({"id": 1.5}),
            json!({"id": 1, "ratio": 0.5}),
            json!({"id": 1, "tags": ["a"]}),
            json!({"id": 1, "parent_Shop": true}),
            json!("1001"),
        ] {
            assert!(row_entity("Order", &bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn versions_are_strings_or_non_negative_integers() {
        assert_eq!(version(&json!(7)), StateVersion::new("7"));
        assert_eq!(version(&json!("etag-1")), StateVersion::new("etag-1"));
        assert_eq!(version(&json!(-1)), None);
        assert_eq!(version(&json!("")), None);
        assert_eq!(version(&json!(true)), None);
    }
}
