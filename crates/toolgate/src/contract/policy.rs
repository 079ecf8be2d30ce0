//! The policy file (TOML): tools, their contracts, and the envelope's limits.
//!
//! ```toml
//! version = 1
//! reply_max_bytes = 2000
//! abstain_message = "I can't help with that here; a colleague will follow up."
//!
//! [[tools]]
//! name = "refund_order"
//! capability = "refund:issue"
//! operation_key = ["customer_id", "order_id", "version_seen"]
//! scope_types = { customer_id = "string" }   # optional; see below
//! schema = '''{ "type": "object", ... }'''
//! ```
//!
//! Loading checks everything that can be checked without a request: unknown
//! TOML keys, every schema (see [`super::schema`]), closed argument objects,
//! scope fields that could collide with model-supplied arguments. A policy
//! that loads is one the gate can enforce as written.
//!
//! Scope fields are server-fixed: a field of `operation_key` that is also an
//! argument the model supplies is a load error, because the model would
//! then name the resource it is authorised for. A front door whose
//! deployment takes a scope field from the call's arguments (the MCP
//! gateway: the model names `order_id`, and live authorisation reads that
//! order) loads the policy with [`Policy::load_with`] and those mappings
//! ([`ArgumentScopes`]): a field mapped from the argument of its own name is
//! then allowed, and every other collision is still refused.
//!
//! `scope_types` types the operation key's fields (`string`, `integer`,
//! `version`; see [`crate::op::scope`]). A field it does not name is a
//! `string`, except `version_seen`, which is a `version`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::budget::{Budget, BudgetFile, load_budgets};
use super::schema::{AuditError, Schema, escape};
use crate::decode::{Limits, decode_strict};
use crate::op::{ScopeError, ScopeType, canonical_scope};

/// Default byte limit for a reply.
pub const DEFAULT_REPLY_MAX_BYTES: usize = 4096;
/// Default byte limit for one tool call's arguments.
pub const DEFAULT_ARGUMENT_MAX_BYTES: usize = 4096;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    version: u32,
    abstain_message: String,
    reply_max_bytes: Option<usize>,
    envelope_max_bytes: Option<usize>,
    body_max_bytes: Option<usize>,
    #[serde(default)]
    tools: Vec<ToolFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolFile {
    name: String,
    #[serde(default)]
    description: String,
    capability: String,
    operation_key: Vec<String>,
    #[serde(default)]
    scope_types: BTreeMap<String, String>,
    #[serde(default)]
    needs_approval: bool,
    #[serde(default)]
    read: bool,
    approvers: Option<u32>,
    approval_ttl: Option<String>,
    max_argument_bytes: Option<usize>,
    schema: String,
    #[serde(default)]
    budgets: Vec<BudgetFile>,
}

/// Default `approval_ttl`: a day.
pub const DEFAULT_APPROVAL_TTL_MS: i64 = 24 * 60 * 60 * 1000;

/// `approval_ttl`: a whole number and a unit, `s`, `m`, `h` or `d`
/// (`"90m"`, `"24h"`), from a minute to a year.
fn approval_ttl(text: &str) -> Option<i64> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let n: i64 = digits.parse().ok().filter(|n| *n > 0)?;
    let unit_ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(unit_ms)
        .filter(|ms| (60_000..=366 * 86_400_000).contains(ms))
}

/// A policy-load error: where, which keyword, what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// Where in the policy (`tools[0] refund_order: schema`, or a
    /// TOML location).
    pub location: String,
    /// The schema keyword at fault, where there is one.
    pub keyword: Option<String>,
    /// JSON pointer inside the schema, where there is one.
    pub pointer: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.location)?;
        if let Some(k) = &self.keyword {
            write!(f, ": keyword `{k}`")?;
        }
        if let Some(p) = &self.pointer {
            write!(f, " at {}", if p.is_empty() { "/" } else { p })?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for PolicyError {}

/// One tool's contract.
#[derive(Debug)]
pub struct ToolContract {
    // Shared, not copied, into every decision that names the tool.
    name: Arc<str>,
    description: String,
    capability: Arc<str>,
    operation_key: Vec<String>,
    scope_types: BTreeMap<String, ScopeType>,
    needs_approval: bool,
    read: bool,
    approvers: u32,
    approval_ttl_ms: i64,
    digest: Arc<str>,
    argument_scopes: BTreeMap<String, String>,
    identity_scopes: BTreeSet<String>,
    max_argument_bytes: usize,
    properties: BTreeSet<String>,
    schema: Schema,
    budgets: Vec<Budget>,
}

impl ToolContract {
    /// The tool name the model must use.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Human description (exported to providers).
    pub fn description(&self) -> &str {
        &self.description
    }
    /// The capability an actor needs to use the tool.
    pub fn capability(&self) -> &str {
        &self.capability
    }
    /// The name, shared (a decision holds it without copying it).
    pub(crate) fn shared_name(&self) -> Arc<str> {
        Arc::clone(&self.name)
    }
    /// The capability, shared.
    pub(crate) fn shared_capability(&self) -> Arc<str> {
        Arc::clone(&self.capability)
    }
    /// Server-fixed scope fields that form the operation key, in order.
    pub fn operation_key(&self) -> &[String] {
        &self.operation_key
    }
    /// The type of scope field `field`: declared in `scope_types`, or the
    /// default ([`ScopeType::default_for`]).
    pub fn scope_type(&self, field: &str) -> ScopeType {
        self.scope_types
            .get(field)
            .copied()
            .unwrap_or_else(|| ScopeType::default_for(field))
    }
    /// `scope` with the operation key's fields and `version_seen` in their
    /// canonical form (docs/design.md §13): what the operation key hashes
    /// and every later stage sees. Other fields (another tool's key fields
    /// sent along) are kept as they are; they change neither this tool's
    /// key nor its resource.
    pub fn canonical_scope(
        &self,
        scope: &serde_json::Map<String, Value>,
    ) -> Result<serde_json::Map<String, Value>, ScopeError> {
        canonical_scope(scope, |f| {
            (f == crate::op::VERSION_SEEN || self.operation_key.iter().any(|k| k == f))
                .then(|| self.scope_type(f))
        })
    }
    /// The scope fields the deployment takes from the arguments (field →
    /// RFC 6901 pointer), as given to [`Policy::load_with`].
    pub fn argument_scopes(&self) -> impl Iterator<Item = (&str, &str)> {
        self.argument_scopes
            .iter()
            .map(|(f, p)| (f.as_str(), p.as_str()))
    }
    /// The scope fields the deployment takes from the caller's identity
    /// (its principal id), as given to [`Policy::load_with`]: no caller may
    /// send them, through any door.
    pub fn identity_scopes(&self) -> impl Iterator<Item = &str> {
        self.identity_scopes.iter().map(String::as_str)
    }
    /// Checks that each scope field taken from an argument holds, in its
    /// canonical form, exactly that argument's value: the resource a
    /// decision authorises and claims is then the one the arguments send.
    /// A field the scope lacks is left to the pipeline (`missing_scope`).
    /// `scope` is canonical ([`Self::canonical_scope`]).
    pub fn check_argument_scopes(
        &self,
        scope: &serde_json::Map<String, Value>,
        arguments: &Value,
    ) -> Result<(), String> {
        for (field, pointer) in &self.argument_scopes {
            let Some(given) = scope.get(field) else {
                continue;
            };
            let named = arguments.pointer(pointer).and_then(|v| {
                let mut one = serde_json::Map::new();
                one.insert(field.clone(), v.clone());
                self.canonical_scope(&one).ok()?.remove(field)
            });
            if named.as_ref() != Some(given) {
                return Err(format!(
                    "scope field `{field}` must be the argument at {pointer} (the deployment takes \
                     it from there); the scope says {given}, the arguments {}",
                    named.map_or_else(|| "nothing".to_owned(), |v| v.to_string())
                ));
            }
        }
        Ok(())
    }
    /// Whether the tool only reads (`read = true`; docs/mcp.md, "Read
    /// tools"): the MCP gateway serves it with its capability, live
    /// authorisation on the ids its operation key names, and its schema,
    /// but nothing is claimed, and a proposal of it is no write to decide.
    pub fn is_read(&self) -> bool {
        self.read
    }
    /// Whether a person must approve each operation.
    pub fn needs_approval(&self) -> bool {
        self.needs_approval
    }
    /// How many distinct reviewers must approve an operation (`approvers`,
    /// default 1; docs/design.md §14).
    pub fn approvers(&self) -> u32 {
        self.approvers
    }
    /// How long a request for approval stays open, and an approval usable,
    /// in milliseconds (`approval_ttl`, default 24 hours); after it the
    /// item counts as denied.
    pub fn approval_ttl_ms(&self) -> i64 {
        self.approval_ttl_ms
    }
    /// SHA-256 (hex) over this tool's contract as written in the policy:
    /// an approval is bound to it, so one given under another contract
    /// (another schema, capability, key or approval rule) cannot be used.
    pub fn digest(&self) -> &str {
        &self.digest
    }
    /// Byte limit for one call's arguments.
    pub fn max_argument_bytes(&self) -> usize {
        self.max_argument_bytes
    }
    /// The argument names the schema declares; any other key is `unknown_key`.
    pub fn properties(&self) -> &BTreeSet<String> {
        &self.properties
    }
    /// The audited, compiled argument schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }
    /// The tool's budgets (docs/design.md §15), in file order.
    pub fn budgets(&self) -> &[Budget] {
        &self.budgets
    }
}

/// Operation-key fields a deployment takes from the call's arguments, per
/// tool: `field` ← the argument at an RFC 6901 `pointer` (`/order_id`, or
/// `/order/id` for a member of one). See [`Policy::load_with`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArgumentScopes {
    tools: BTreeMap<String, BTreeMap<String, String>>,
    identity: BTreeMap<String, BTreeSet<String>>,
}

impl ArgumentScopes {
    /// No field taken from arguments (what [`Policy::load`] uses).
    pub fn new() -> Self {
        Self::default()
    }

    /// Says that `tool`'s scope field `field` is the argument at `pointer`.
    pub fn insert(&mut self, tool: &str, field: &str, pointer: &str) {
        self.tools
            .entry(tool.to_owned())
            .or_default()
            .insert(field.to_owned(), pointer.to_owned());
    }

    /// Says that `tool`'s scope field `field` is the caller's principal id,
    /// filled in by the gate: a caller that sends it is refused
    /// (`identity_scope_field`), whichever door the call came through.
    pub fn insert_identity(&mut self, tool: &str, field: &str) {
        self.identity
            .entry(tool.to_owned())
            .or_default()
            .insert(field.to_owned());
    }

    /// The pointer `tool`'s `field` is taken from, if it is mapped.
    pub fn get(&self, tool: &str, field: &str) -> Option<&str> {
        self.tools.get(tool)?.get(field).map(String::as_str)
    }

    fn of(&self, tool: &str) -> impl Iterator<Item = (&str, &str)> {
        self.tools
            .get(tool)
            .into_iter()
            .flatten()
            .map(|(f, p)| (f.as_str(), p.as_str()))
    }
}

/// The argument a pointer starts in: its first reference token, unescaped
/// (RFC 6901: `~1` is `/`, `~0` is `~`). `None` for a pointer that is not
/// below the root.
fn first_argument(pointer: &str) -> Option<String> {
    let token = pointer.strip_prefix('/')?.split('/').next()?;
    Some(token.replace("~1", "/").replace("~0", "~"))
}

/// A loaded policy.
#[derive(Debug)]
pub struct Policy {
    abstain_message: String,
    reply_max_bytes: usize,
    envelope_max_bytes: usize,
    body_max_bytes: usize,
    tools: Vec<ToolContract>,
}

impl Policy {
    /// Parses and checks a policy file. Every scope field is server-fixed:
    /// one that is also an argument is refused.
    pub fn load(toml_text: &str) -> Result<Self, PolicyError> {
        Self::load_with(toml_text, &ArgumentScopes::new())
    }

    /// Parses and checks a policy file for a front door that takes the
    /// scope fields in `arguments` from each call's arguments. Such a field
    /// may also be an argument when it is mapped from that very argument
    /// (`order_id` ← `/order_id`, or a member of it): the resource the
    /// model names is then the one authorised, claimed and sent. A field
    /// that is an argument but mapped from elsewhere (the caller's identity,
    /// another argument) or not mapped at all is still refused, and so is a
    /// mapping that names no field of the tool's `operation_key` or no
    /// declared argument. Mappings for tools the policy lacks are left to
    /// the front door (it serves no such tool).
    pub fn load_with(toml_text: &str, arguments: &ArgumentScopes) -> Result<Self, PolicyError> {
        let file: PolicyFile = toml::from_str(toml_text).map_err(|e| PolicyError {
            location: match e.span() {
                Some(span) => format!("policy (TOML, line {})", line_of(toml_text, span.start)),
                None => "policy (TOML)".to_owned(),
            },
            keyword: None,
            pointer: None,
            message: e.message().to_owned(),
        })?;
        let top = |message: String| PolicyError {
            location: "policy".to_owned(),
            keyword: None,
            pointer: None,
            message,
        };
        if file.version != 1 {
            return Err(top(format!(
                "version {} is not supported (expected 1)",
                file.version
            )));
        }
        if file.abstain_message.trim().is_empty() {
            return Err(top("abstain_message must not be empty".to_owned()));
        }
        let reply_max_bytes = file.reply_max_bytes.unwrap_or(DEFAULT_REPLY_MAX_BYTES);
        let envelope_max_bytes = file
            .envelope_max_bytes
            .unwrap_or(Limits::ENVELOPE_MAX_BYTES);
        let body_max_bytes = file.body_max_bytes.unwrap_or(Limits::DEFAULT_MAX_BYTES);
        if reply_max_bytes == 0 || envelope_max_bytes == 0 || body_max_bytes == 0 {
            return Err(top("byte limits must be positive".to_owned()));
        }
        if file.tools.is_empty() {
            return Err(top("a policy declares at least one tool".to_owned()));
        }
        let mut tools: Vec<ToolContract> = Vec::with_capacity(file.tools.len());
        for (i, t) in file.tools.into_iter().enumerate() {
            let contract = load_tool(i, t, arguments)?;
            if tools.iter().any(|c| c.name == contract.name) {
                return Err(top(format!("tool `{}` is declared twice", contract.name)));
            }
            // A budget's name keys its counters, so it names one budget.
            if let Some(b) = contract.budgets.iter().find(|b| {
                tools
                    .iter()
                    .any(|c| c.budgets.iter().any(|o| o.name() == b.name()))
            }) {
                return Err(top(format!(
                    "budget `{}` is declared by two tools; budget names are distinct in a policy",
                    b.name()
                )));
            }
            tools.push(contract);
        }
        Ok(Self {
            abstain_message: file.abstain_message,
            reply_max_bytes,
            envelope_max_bytes,
            body_max_bytes,
            tools,
        })
    }

    /// The application's fixed message for `abstain`.
    pub fn abstain_message(&self) -> &str {
        &self.abstain_message
    }
    /// Byte limit for a reply (UTF-8 bytes, not characters).
    pub fn reply_max_bytes(&self) -> usize {
        self.reply_max_bytes
    }
    /// Byte limit for an envelope document.
    pub fn envelope_max_bytes(&self) -> usize {
        self.envelope_max_bytes
    }
    /// Byte limit for a raw provider body, streams included.
    pub fn body_max_bytes(&self) -> usize {
        self.body_max_bytes
    }
    /// Every tool, in file order.
    pub fn tools(&self) -> &[ToolContract] {
        &self.tools
    }
    /// The tool called `name`.
    pub fn tool(&self, name: &str) -> Option<&ToolContract> {
        self.tools.iter().find(|t| &*t.name == name)
    }
}

/// A tool's name, capability and operation key, each checked, and the
/// types its key fields declare.
fn key_fields(t: &ToolFile) -> Result<BTreeMap<String, ScopeType>, (&'static str, String)> {
    if !is_identifier(&t.name) {
        return Err((
            "name",
            "a tool name is 1-64 characters of [A-Za-z0-9_-]".to_owned(),
        ));
    }
    if t.capability.trim().is_empty() {
        return Err(("capability", "must not be empty".to_owned()));
    }
    // A read may name no resource (a search): its capability decides.
    if t.operation_key.is_empty() && !t.read {
        return Err((
            "operation_key",
            "name at least one server-fixed scope field".to_owned(),
        ));
    }
    let mut seen = BTreeSet::new();
    for f in &t.operation_key {
        if !is_identifier(f) || !seen.insert(f.as_str()) {
            return Err((
                "operation_key",
                format!("`{f}` is not a distinct identifier"),
            ));
        }
    }
    let mut scope_types = BTreeMap::new();
    for (field, name) in &t.scope_types {
        if !t.operation_key.contains(field) {
            return Err((
                "scope_types",
                format!("`{field}` is not a field of this tool's operation_key"),
            ));
        }
        let ty = ScopeType::from_name(name).ok_or_else(|| {
            (
                "scope_types",
                format!(
                    "`{field}` has the unknown type {name:?} (expected one of {})",
                    ScopeType::ALL.map(ScopeType::as_str).join(", ")
                ),
            )
        })?;
        scope_types.insert(field.clone(), ty);
    }
    Ok(scope_types)
}

/// How many reviewers a tool needs and how long an approval lasts.
fn approval_terms(t: &ToolFile) -> Result<(u32, i64), (&'static str, String)> {
    if !t.needs_approval && (t.approvers.is_some() || t.approval_ttl.is_some()) {
        return Err((
            "approvers",
            "approvers and approval_ttl apply only with needs_approval = true".to_owned(),
        ));
    }
    let approvers = t.approvers.unwrap_or(1);
    if !(1..=10).contains(&approvers) {
        return Err(("approvers", "must be 1 to 10 distinct reviewers".to_owned()));
    }
    let approval_ttl_ms = match t.approval_ttl.as_deref() {
        None => DEFAULT_APPROVAL_TTL_MS,
        Some(text) => approval_ttl(text).ok_or_else(|| {
            (
                "approval_ttl",
                "a whole number and s, m, h or d (\"24h\"), from a minute to 366 days".to_owned(),
            )
        })?,
    };
    Ok((approvers, approval_ttl_ms))
}

/// A read names resources, not operations: nothing is claimed, so there is
/// no version to compare, nothing for a person to approve and no amount to
/// reserve.
fn read_terms(t: &ToolFile) -> Result<(), (&'static str, String)> {
    if t.operation_key.iter().any(|f| f == crate::op::VERSION_SEEN) {
        return Err((
            "operation_key",
            "a read tool's operation_key names the ids it reads; `version_seen` belongs to writes"
                .to_owned(),
        ));
    }
    if t.needs_approval {
        return Err((
            "needs_approval",
            "a read tool is not approved: nothing is claimed".to_owned(),
        ));
    }
    if !t.budgets.is_empty() {
        return Err((
            "budgets",
            "a read tool has no budget: nothing is reserved".to_owned(),
        ));
    }
    Ok(())
}

/// The contract as written, in a fixed order: the digest an approval is
/// bound to (docs/design.md §14).
fn contract_digest(t: &ToolFile, approvers: u32, approval_ttl_ms: i64) -> String {
    use sha2::{Digest, Sha256};
    let written = serde_json::json!({
        "name": t.name,
        "capability": t.capability,
        "operation_key": t.operation_key,
        "scope_types": t.scope_types,
        "approvers": approvers,
        "approval_ttl_ms": approval_ttl_ms,
        "max_argument_bytes": t.max_argument_bytes,
        "schema": t.schema,
        "budgets": t.budgets,
    });
    // Only when set: the digests of every write (and the approvals bound
    // to them) stay what they were.
    let mut written = written;
    if t.read {
        written["read"] = Value::Bool(true);
    }
    let hash = Sha256::digest(written.to_string().as_bytes());
    hash.iter().map(|b| format!("{b:02x}")).collect::<String>()
}

fn load_tool(
    i: usize,
    t: ToolFile,
    arguments: &ArgumentScopes,
) -> Result<ToolContract, PolicyError> {
    let location = format!("tools[{i}] {}", t.name);
    let err = |field: &str, keyword: Option<&str>, pointer: Option<String>, message: String| {
        PolicyError {
            location: format!("{location}: {field}"),
            keyword: keyword.map(str::to_owned),
            pointer,
            message,
        }
    };
    let scope_types = key_fields(&t).map_err(|(field, message)| err(field, None, None, message))?;
    // The schema is JSON inside TOML; it goes through the strict decoder like
    // everything else, so a duplicated keyword is an error, not a silent
    // last-one-wins.
    let source = decode_strict(
        t.schema.as_bytes(),
        &Limits::provider_body().with_max_bytes(1 << 20),
    )
    .map_err(|r| err("schema", None, Some(r.pointer().to_owned()), r.to_string()))?;
    let schema = Schema::compile(&source).map_err(
        |AuditError {
             keyword,
             pointer,
             message,
         }| { err("schema", Some(&keyword), Some(pointer), message) },
    )?;
    let properties = closed_object(&source).map_err(|(keyword, pointer, message)| {
        err("schema", Some(keyword), Some(pointer), message)
    })?;
    for (f, pointer) in arguments.of(&t.name) {
        if !t.operation_key.iter().any(|k| k == f) {
            return Err(err(
                "operation_key",
                None,
                None,
                format!(
                    "`{f}` is taken from the argument at {pointer:?} but is not a field of this tool's operation_key"
                ),
            ));
        }
        if !first_argument(pointer).is_some_and(|a| properties.contains(&a)) {
            return Err(err(
                "operation_key",
                None,
                None,
                format!("`{f}` is taken from {pointer:?}, which is not a declared argument"),
            ));
        }
    }
    for f in &t.operation_key {
        // Identity never comes from the model (docs/design.md invariant 1): a
        // scope field the model could also supply is a policy bug, unless
        // the deployment takes the field from that very argument, so that
        // what the model names is what is authorised and sent.
        let from_itself = arguments
            .get(&t.name, f)
            .and_then(first_argument)
            .is_some_and(|a| &a == f);
        if properties.contains(f) && !from_itself {
            return Err(err(
                "operation_key",
                None,
                None,
                format!(
                    "`{f}` is also an argument the model supplies; scope fields are server-fixed \
                     unless the deployment takes this field from that argument"
                ),
            ));
        }
    }
    if t.read {
        read_terms(&t).map_err(|(field, message)| err(field, None, None, message))?;
    }
    let budgets = load_budgets(t.budgets.clone(), &source, &t.operation_key)
        .map_err(|(field, message)| err(&field, None, None, message))?;
    let (approvers, approval_ttl_ms) =
        approval_terms(&t).map_err(|(field, message)| err(field, None, None, message))?;
    let digest = contract_digest(&t, approvers, approval_ttl_ms);
    let argument_scopes = arguments
        .of(&t.name)
        .map(|(f, p)| (f.to_owned(), p.to_owned()))
        .collect();
    let identity_scopes = arguments.identity.get(&t.name).cloned().unwrap_or_default();
    Ok(ToolContract {
        name: t.name.into(),
        description: t.description,
        capability: t.capability.into(),
        operation_key: t.operation_key,
        scope_types,
        needs_approval: t.needs_approval,
        read: t.read,
        approvers,
        approval_ttl_ms,
        digest: digest.into(),
        argument_scopes,
        identity_scopes,
        max_argument_bytes: t.max_argument_bytes.unwrap_or(DEFAULT_ARGUMENT_MAX_BYTES),
        properties,
        schema,
        budgets,
    })
}

/// A tool's arguments schema must be a closed object: `type: object`,
/// `additionalProperties: false`, and every nested object schema closed too.
/// Returns the top-level property names.
fn closed_object(schema: &Value) -> Result<BTreeSet<String>, (&'static str, String, String)> {
    let Some(map) = schema.as_object() else {
        return Err((
            "type",
            String::new(),
            "the arguments schema must be an object schema".to_owned(),
        ));
    };
    if map.get("type").and_then(Value::as_str) != Some("object") {
        return Err((
            "type",
            "/type".to_owned(),
            "the arguments schema must say \"type\": \"object\"".to_owned(),
        ));
    }
    check_closed(schema, &mut String::new())?;
    Ok(map
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default())
}

fn check_closed(
    schema: &Value,
    pointer: &mut String,
) -> Result<(), (&'static str, String, String)> {
    let Some(map) = schema.as_object() else {
        return Ok(());
    };
    let is_object = match map.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => false,
    };
    if is_object
        && map.get("additionalProperties") != Some(&Value::Bool(false))
        && map.get("unevaluatedProperties") != Some(&Value::Bool(false))
    {
        return Err((
            "additionalProperties",
            pointer.clone(),
            "argument objects are closed: set \"additionalProperties\": false".to_owned(),
        ));
    }
    // Walk only the subschema positions that can describe nested objects.
    for (key, value) in map {
        match key.as_str() {
            "properties" | "patternProperties" | "$defs" | "dependentSchemas" => {
                if let Some(members) = value.as_object() {
                    for (name, sub) in members {
                        let len = pointer.len();
                        pointer.push_str(&format!("/{key}/{}", escape(name)));
                        check_closed(sub, pointer)?;
                        pointer.truncate(len);
                    }
                }
            }
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                if let Some(items) = value.as_array() {
                    for (i, sub) in items.iter().enumerate() {
                        let len = pointer.len();
                        pointer.push_str(&format!("/{key}/{i}"));
                        check_closed(sub, pointer)?;
                        pointer.truncate(len);
                    }
                }
            }
            "items" | "additionalProperties" | "not" | "if" | "then" | "else" | "contains" => {
                let len = pointer.len();
                pointer.push_str(&format!("/{key}"));
                check_closed(value, pointer)?;
                pointer.truncate(len);
            }
            _ => {}
        }
    }
    Ok(())
}

/// A name the policy, its budgets and an MCP upstream's tools may use:
/// 1 to 64 ASCII letters, digits, `_` or `-`.
pub fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn line_of(text: &str, byte: usize) -> usize {
    text.get(..byte).map_or(0, |t| t.matches('\n').count()) + 1
}
