//! A proposal's scope as one typed value: the tool's key fields, each in
//! its canonical form by the tool's declared types (docs/design.md §13),
//! and the version the model read as a [`StateVersion`].
//!
//! This is the one place `version_seen` is read and canonicalised. A front
//! door hands in what its wire carried; [`Scope::canonical`] checks it once
//! against the proposed tool, and every later stage (the authoriser, the
//! operation key, the state read, the claim, the executor's precondition)
//! reads the result. A [`Scope`] made with [`Scope::new`] is not yet
//! canonical; the pipeline canonicalises it for the tool it decides.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::state::StateVersion;
use crate::contract::ToolContract;
use crate::op::ScopeError;

pub use crate::op::VERSION_SEEN;

/// What an action without a version is told, wherever it is caught.
pub(crate) const VERSION_MISSING: &str =
    "an action needs scope.version_seen: the resource version the model was shown";

/// Why a scope is not one the tool can take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeRefusal {
    /// A key field (or `version_seen`) is not of its declared type.
    #[error("{0}")]
    Field(ScopeError),
    /// `version_seen` canonicalised to no version (an empty text).
    #[error("version_seen is not a valid version")]
    Version,
}

/// A proposal's scope: its key fields and the version the model read.
#[derive(Debug, Clone, PartialEq)]
pub struct Scope {
    fields: Map<String, Value>,
    version_seen: Option<StateVersion>,
    /// The tool whose types made `fields` canonical; `None` until then.
    canonical_for: Option<Arc<str>>,
}

impl Scope {
    /// A scope as a caller holds it, not yet canonical: `fields` without
    /// `version_seen` (a field of that name is replaced by `version_seen`).
    pub fn new(mut fields: Map<String, Value>, version_seen: Option<StateVersion>) -> Self {
        fields.remove(VERSION_SEEN);
        Self {
            fields,
            version_seen,
            canonical_for: None,
        }
    }

    /// `fields` and the raw `version_seen` in their canonical forms by
    /// `contract`'s types: `42` and `"42"` one integer, `7` and `"7"` one
    /// version. Fields the tool's key does not name are kept as they are:
    /// they change neither its key nor its resource.
    pub fn canonical(
        contract: &ToolContract,
        fields: &Map<String, Value>,
        version_seen: Option<&Value>,
    ) -> Result<Self, ScopeRefusal> {
        let mut raw = fields.clone();
        raw.remove(VERSION_SEEN);
        if let Some(v) = version_seen {
            raw.insert(VERSION_SEEN.to_owned(), v.clone());
        }
        let mut fields = contract
            .canonical_scope(&raw)
            .map_err(ScopeRefusal::Field)?;
        let version_seen = match fields.remove(VERSION_SEEN) {
            None => None,
            Some(v) => {
                let text = match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                Some(StateVersion::new(text).ok_or(ScopeRefusal::Version)?)
            }
        };
        Ok(Self {
            fields,
            version_seen,
            canonical_for: Some(contract.shared_name()),
        })
    }

    /// This scope canonical for `contract`: itself if it already is, else
    /// [`Scope::canonical`] of its fields and version.
    pub fn canonical_for(&self, contract: &ToolContract) -> Result<Self, ScopeRefusal> {
        if self.canonical_for.as_deref() == Some(contract.name()) {
            return Ok(self.clone());
        }
        let version = self
            .version_seen
            .as_ref()
            .map(|v| Value::String(v.as_str().to_owned()));
        Self::canonical(contract, &self.fields, version.as_ref())
    }

    /// The key fields (and any others the caller sent), without the version.
    pub fn fields(&self) -> &Map<String, Value> {
        &self.fields
    }

    /// The version the model read, if the request named one.
    pub fn version_seen(&self) -> Option<&StateVersion> {
        self.version_seen.as_ref()
    }

    /// The fields with the version among them: what the operation key
    /// hashes and the records keep.
    pub fn to_map(&self) -> Map<String, Value> {
        let mut map = self.fields.clone();
        if let Some(v) = &self.version_seen {
            map.insert(
                VERSION_SEEN.to_owned(),
                Value::String(v.as_str().to_owned()),
            );
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::contract::Policy;

    const POLICY: &str = include_str!("../../../../fixtures/policies/refund_order.toml");

    fn fields(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn the_version_and_the_key_fields_are_canonical_once_for_the_tool() {
        let policy = Policy::load(POLICY).unwrap();
        let contract = policy.tool("refund_order").unwrap();
        let scope = Scope::canonical(
            contract,
            &fields(json!({"order_id": "42"})),
            Some(&json!(7)),
        )
        .unwrap();
        assert_eq!(scope.fields(), &fields(json!({"order_id": 42})));
        assert_eq!(scope.version_seen().map(StateVersion::as_str), Some("7"));
        assert_eq!(
            scope.to_map(),
            fields(json!({"order_id": 42, "version_seen": "7"}))
        );
        // Already canonical for the tool: the same value, not read again.
        assert_eq!(scope.canonical_for(contract).unwrap(), scope);
        // A caller's raw scope is made canonical for the tool it names.
        let raw = Scope::new(fields(json!({"order_id": 42})), StateVersion::new("7"));
        assert_eq!(raw.canonical_for(contract).unwrap(), scope);
    }

    #[test]
    fn a_malformed_field_or_version_is_refused() {
        let policy = Policy::load(POLICY).unwrap();
        let contract = policy.tool("refund_order").unwrap();
        let bad_field = Scope::canonical(
            contract,
            &fields(json!({"order_id": "042"})),
            Some(&json!(1)),
        );
        assert!(
            matches!(bad_field, Err(ScopeRefusal::Field(_))),
            "{bad_field:?}"
        );
        let bad_version = Scope::canonical(
            contract,
            &fields(json!({"order_id": 1})),
            Some(&json!(null)),
        );
        assert!(
            matches!(bad_version, Err(ScopeRefusal::Field(_))),
            "{bad_version:?}"
        );
        let missing = Scope::canonical(contract, &fields(json!({"order_id": 1})), None).unwrap();
        assert_eq!(missing.version_seen(), None);
    }
}
