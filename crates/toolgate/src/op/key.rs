//! The operation key (docs/design.md §8, invariant 5).
//!
//! Key = SHA-256 over the RFC 8785 canonical JSON of
//! `{"scope": {<field>: <value>, …}, "tool": <name>}`, where the fields are
//! exactly the server-fixed scope fields the tool's contract names
//! (`operation_key = ["customer_id", "order_id", "version_seen"]`).

use std::fmt;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::fingerprint::canonical_json;
use crate::claim::OperationKey;

/// Why no key could be derived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// The tool names a scope field the request did not carry.
    MissingScope(String),
    /// A scope value cannot be canonicalised (an integer beyond ±(2^53−1)).
    NotCanonicalisable(String),
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingScope(field) => write!(
                f,
                "the tool's operation key names scope field `{field}`, which the request does not carry"
            ),
            Self::NotCanonicalisable(m) => write!(f, "scope is not canonicalisable: {m}"),
        }
    }
}

impl std::error::Error for KeyError {}

/// Derives the operation key of `tool` from the server-fixed `scope`.
///
/// `fields` are the scope fields the tool's contract names; `scope` maps a
/// field to its server-fixed value. Fields the tool does not name are
/// ignored, so adding context to a request never changes a key.
///
/// INVARIANT (docs/design.md invariant 5): the key is built from the tool name and
/// the named server-fixed scope fields **only** — never from the arguments,
/// the actor, the reply, the provider's call id or anything else the model
/// supplied. The consequence is deliberate: two agents (or two retries, or
/// two differently worded replies with different amounts) that reach the
/// same conclusion about the same order at the same version produce one
/// key, so one refund; the second proposal is `replayed` (same arguments) or
/// `conflict` (different arguments), never a second write. A key that
/// included the arguments would let every differently worded proposal win
/// its own claim, leaving only the executor's version precondition between
/// the customer and a duplicate refund (`toolgate bench race
/// --key-includes-arguments` shows exactly that).
pub fn operation_key(
    tool: &str,
    fields: &[String],
    scope: &Map<String, Value>,
) -> Result<OperationKey, KeyError> {
    let mut named = Map::new();
    for field in fields {
        let value = scope
            .get(field)
            .ok_or_else(|| KeyError::MissingScope(field.clone()))?;
        named.insert(field.clone(), value.clone());
    }
    let mut doc = Map::new();
    doc.insert("scope".to_owned(), Value::Object(named));
    doc.insert("tool".to_owned(), Value::String(tool.to_owned()));
    let canonical = canonical_json(&Value::Object(doc))
        .map_err(|e| KeyError::NotCanonicalisable(e.to_string()))?;
    Ok(OperationKey::from_bytes(
        Sha256::digest(canonical.as_bytes()).into(),
    ))
}
