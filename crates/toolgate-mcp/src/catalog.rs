//! The tools the gateway serves, and each call prepared for the decision.
//!
//! A tool is served when four things agree: the deployment maps it
//! (`[[upstreams.tools]]`), the operator pinned it, the upstream still
//! offers exactly the pinned definition (the last [`Refresh`]), and the
//! policy has a contract for it whose schema is the pinned one (closed at
//! the top level, as the policy requires). Anything else withholds the tool
//! and says why, for the operator's log; the caller only ever sees a shorter
//! list, and an unknown tool.
//!
//! What the caller is shown is the pin's description and output schema with
//! the policy's input schema: the gate's own contract, which is what the
//! arguments are checked against.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::model::{JsonObject, Tool};
use serde_json::{Map, Value};
use toolgate::contract::{Policy, check_call};
use toolgate::pipeline::Principal;

use crate::config::{ScopeSource, ToolMapping, Upstream, VersionSource};
use crate::entries::{Entry, EntryRefresh, Kind, template_matches};
use crate::pin::{Pin, PinFile, Refresh};
use crate::upstream::UpstreamClient;
use crate::wire::{GatedCall, GatedRead, VersionSeen, unknown_tool};

/// One served tool.
#[derive(Debug, Clone)]
pub struct ServedTool {
    /// The upstream it is forwarded to.
    pub upstream: String,
    /// The capability a caller needs to see and call it.
    pub capability: String,
    /// The deployment's mapping of its scope and version.
    pub mapping: ToolMapping,
    /// Whether it declares an output schema.
    pub has_output_schema: bool,
    /// Whether the policy declares it a read (`read = true`).
    pub read: bool,
    /// The definition `tools/list` shows.
    pub listed: Tool,
}

/// The served tools, by name, and the served resources, resource
/// templates and prompts.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    tools: BTreeMap<String, ServedTool>,
    entries: BTreeMap<(Kind, String), ServedEntry>,
}

/// One served resource, resource template or prompt.
#[derive(Debug, Clone)]
pub struct ServedEntry {
    /// Its pinned definition.
    pub entry: Entry,
    /// The capability a caller needs to see and use it.
    pub capability: String,
    /// The upstream's connection it is read through (the gateway's own).
    pub client: Arc<UpstreamClient>,
}

impl Catalog {
    /// Adds `upstream`'s tools that `pins`, `refresh` and `policy` agree on;
    /// returns one line per tool withheld, for the operator.
    pub fn add_upstream(
        &mut self,
        policy: &Policy,
        upstream: &Upstream,
        pins: &PinFile,
        refresh: &Refresh,
    ) -> Vec<String> {
        let mut notes: Vec<String> = refresh.withheld.iter().map(ToString::to_string).collect();
        for name in &refresh.unpinned {
            notes.push(format!(
                "tool `{name}` of upstream `{}` is not pinned: never listed",
                upstream.name
            ));
        }
        for m in &upstream.tools {
            let why = |what: String| format!("tool `{}` withheld: {what}", m.name);
            let Some(pin) = pins.pins.get(&m.name) else {
                notes.push(why(format!(
                    "no pin (run `toolgate mcp import --upstream {}`)",
                    upstream.name
                )));
                continue;
            };
            if !refresh.current.contains(&m.name) {
                // Already explained by the refresh.
                continue;
            }
            let Some(contract) = policy.tool(&m.name) else {
                notes.push(why("the policy has no [[tools]] entry for it".to_owned()));
                continue;
            };
            if !same_schema(contract.schema().source(), &pin.input_schema) {
                notes.push(why(
                    "the policy's schema is not the pinned one (closed at the top level); update the policy's entry"
                        .to_owned(),
                ));
                continue;
            }
            if let Some(s) = &m.status_tool
                && !refresh.current.contains(&s.name)
            {
                notes.push(why(format!(
                    "its status tool `{}` is not pinned and current",
                    s.name
                )));
                continue;
            }
            self.tools.insert(
                m.name.clone(),
                ServedTool {
                    upstream: upstream.name.clone(),
                    capability: contract.capability().to_owned(),
                    mapping: m.clone(),
                    has_output_schema: pin.output_schema.is_some(),
                    read: contract.is_read(),
                    listed: listed(pin, contract.schema().source()),
                },
            );
        }
        notes
    }

    /// Adds `upstream`'s pinned entries that `refresh` found current, of
    /// the kinds the deployment serves (`resources`, `prompts`); returns
    /// one line per entry withheld or not served, for the operator.
    pub fn add_entries(
        &mut self,
        upstream: &Upstream,
        pins: &PinFile,
        refresh: &EntryRefresh,
        client: &Arc<UpstreamClient>,
    ) -> Vec<String> {
        let mut notes = refresh.withheld.clone();
        let mut unserved: BTreeMap<Kind, usize> = BTreeMap::new();
        for ((kind, id), pin) in &pins.entries {
            if !refresh.current.contains(&(*kind, id.clone())) {
                continue;
            }
            let capability = match kind {
                Kind::Resource | Kind::ResourceTemplate => &upstream.resources_capability,
                Kind::Prompt => &upstream.prompts_capability,
            };
            let Some(capability) = capability else {
                *unserved.entry(*kind).or_default() += 1;
                continue;
            };
            if let Some(other) = self.entries.get(&(*kind, id.clone())) {
                notes.push(format!(
                    "{kind} `{id}` withheld: another upstream's pin of it is served ({})",
                    other.client.name()
                ));
                continue;
            }
            self.entries.insert(
                (*kind, id.clone()),
                ServedEntry {
                    entry: pin.entry.clone(),
                    capability: capability.clone(),
                    client: Arc::clone(client),
                },
            );
        }
        for (kind, n) in unserved {
            let key = if kind == Kind::Prompt {
                "prompts"
            } else {
                "resources"
            };
            notes.push(format!(
                "{n} pinned {kind}(s) not served: the upstream has no `{key} = {{ capability = … }}`"
            ));
        }
        notes
    }

    /// The served entries of `kind` `principal` may see, as pinned, in
    /// identifier order.
    pub fn entries(&self, principal: &Principal, kind: Kind) -> Vec<&Entry> {
        self.entries
            .iter()
            .filter(|((k, _), e)| *k == kind && principal.has_capability(&e.capability))
            .map(|(_, e)| &e.entry)
            .collect()
    }

    /// The served resource `uri` is, for `principal`: a pinned resource of
    /// that exact URI, else one of a pinned template it matches.
    pub fn resource(&self, principal: &Principal, uri: &str) -> Option<&ServedEntry> {
        let visible = |e: &&ServedEntry| principal.has_capability(&e.capability);
        self.entries
            .get(&(Kind::Resource, uri.to_owned()))
            .filter(visible)
            .or_else(|| {
                self.entries
                    .iter()
                    .filter(|((k, t), _)| *k == Kind::ResourceTemplate && template_matches(t, uri))
                    .map(|(_, e)| e)
                    .find(visible)
            })
    }

    /// The served prompt `name`, if `principal` may see it.
    pub fn prompt(&self, principal: &Principal, name: &str) -> Option<&ServedEntry> {
        self.entries
            .get(&(Kind::Prompt, name.to_owned()))
            .filter(|e| principal.has_capability(&e.capability))
    }

    /// How many resources, templates and prompts are served.
    pub fn entry_count(&self) -> usize {
        self.entries.len()
    }

    /// The served tool called `name`, if `principal` may see it.
    pub fn visible(&self, principal: &Principal, name: &str) -> Option<&ServedTool> {
        self.tools
            .get(name)
            .filter(|t| principal.has_capability(&t.capability))
    }

    /// The capability the served tool `name` needs.
    pub fn capability_of(&self, name: &str) -> Option<&str> {
        self.tools.get(name).map(|t| t.capability.as_str())
    }

    /// What `principal` may see, in name order.
    pub fn list(&self, principal: &Principal) -> Vec<Tool> {
        self.tools
            .values()
            .filter(|t| principal.has_capability(&t.capability))
            .map(|t| t.listed.clone())
            .collect()
    }

    /// How many tools are served.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Prepares one `tools/call` for the decision: the tool must be served
    /// and visible to `principal` (otherwise it is unknown, the same answer
    /// for a hidden tool as for one that does not exist); the arguments go
    /// through the core's contract stage; the scope fields and the version
    /// are taken where the deployment maps them. A field the call does not
    /// carry is left out, and the core answers `missing_scope`.
    pub fn prepare(
        &self,
        policy: &Policy,
        principal: &Principal,
        name: &str,
        arguments: Option<&JsonObject>,
        meta: Option<&Map<String, Value>>,
    ) -> Result<Prepared, ErrorData> {
        let served = self
            .visible(principal, name)
            .ok_or_else(|| unknown_tool(name))?;
        let empty = Map::new();
        let arguments = arguments.unwrap_or(&empty);
        let proposal = contract_stage(policy, name, arguments);
        let args_value = Value::Object(arguments.clone());
        let meta_value = |key: &str| meta.and_then(|m| m.get(key)).cloned();
        let mut scope = Map::new();
        for (field, source) in &served.mapping.scope {
            let value = match source {
                ScopeSource::Argument(pointer) => args_value.pointer(pointer).cloned(),
                // The gate fills it in from the identity, on every door
                // (`ArgumentScopes::insert_identity`).
                ScopeSource::Principal => None,
                ScopeSource::Meta(key) => meta_value(key),
            };
            if let Some(v) = value {
                scope.insert(field.clone(), v);
            }
        }
        if served.read {
            return Ok(Prepared::Read(GatedRead {
                principal: principal.clone(),
                proposal,
                scope,
                per_minute: served.mapping.rate_per_minute,
            }));
        }
        let version_seen = match &served.mapping.version_seen {
            Some(VersionSource::Argument(pointer)) => args_value
                .pointer(pointer)
                .cloned()
                .map_or(VersionSeen::Missing, VersionSeen::Read),
            Some(VersionSource::Meta(key)) => {
                meta_value(key).map_or(VersionSeen::Missing, VersionSeen::Read)
            }
            // The deployment refuses a write without one when it loads.
            None => VersionSeen::Missing,
        };
        Ok(Prepared::Write(GatedCall {
            principal: principal.clone(),
            proposal,
            scope,
            version_seen,
        }))
    }
}

/// A `tools/call` prepared for the gate: a write to decide, or a read to
/// judge and forward.
#[derive(Debug, Clone)]
pub enum Prepared {
    /// A write: one decision ([`crate::wire::Decide::decide`]).
    Write(GatedCall),
    /// A read ([`crate::wire::Decide::read`]).
    Read(GatedRead),
}

/// The core's contract stage over `(tool, arguments)`: the same strict
/// decoding, unknown-key rule, schema, canonical arguments and fingerprint
/// as every other proposal. rmcp hands the arguments over parsed (the
/// message itself went through the strict decoder first), so they are
/// written back as JSON text for the stage to decode.
fn contract_stage(
    policy: &Policy,
    tool: &str,
    arguments: &JsonObject,
) -> toolgate::contract::Checked {
    match serde_json::to_vec(arguments) {
        Ok(bytes) => check_call(policy, tool, &bytes),
        // A parsed JSON object always has a JSON text; if it ever had none,
        // the stage sees an empty text and rejects it.
        Err(_) => check_call(policy, tool, b""),
    }
}

/// The definition shown to callers: the pin's name, description and output
/// schema, with the policy's (closed) input schema.
fn listed(pin: &Pin, policy_schema: &Value) -> Tool {
    let input: JsonObject = policy_schema.as_object().cloned().unwrap_or_default();
    let mut tool = Tool::new_with_raw(
        pin.name.clone(),
        (!pin.description.is_empty()).then(|| pin.description.clone().into()),
        Arc::new(input),
    );
    tool.output_schema = pin
        .output_schema
        .as_ref()
        .and_then(Value::as_object)
        .map(|o| Arc::new(o.clone()));
    tool
}

/// Whether the policy's schema is the pinned one, allowing only the
/// top-level `"additionalProperties": false` the policy requires and an
/// upstream usually leaves out.
fn same_schema(policy: &Value, pinned: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut()
            && m.get("additionalProperties") == Some(&Value::Bool(false))
        {
            m.remove("additionalProperties");
        }
        v
    };
    strip(policy) == strip(pinned)
}
