//! `toolgate mcp import`: pin what an upstream offers now.
//!
//! Connects to the upstream, lists its tools, pins each one the core's
//! schema audit accepts ([`crate::pin::pin`]) and names each one it refuses;
//! pins its resources, resource templates and prompts as listed
//! ([`crate::entries`]).
//! The pin file is written whole (a tool the upstream no longer offers drops
//! out of it). Beside it, [`policy_skeleton`] gives a policy entry per pinned
//! tool that is not in the policy yet: its description and schema, with the
//! parts only the operator can decide (capability, operation key, entities,
//! budgets) left as comments, so that the entry does not load until they
//! are written.

use std::fmt::Write as _;

use serde_json::{Value, json};
use toolgate::contract::Policy;
use toolgate::op::canonical_json;

use crate::config::{ScopeSource, Upstream};
use crate::pin::{PinError, PinFile};
use crate::upstream::{UpstreamClient, UpstreamError};

/// What an import found.
#[derive(Debug)]
pub struct Imported {
    /// The pins, ready to be written.
    pub file: PinFile,
    /// Tools that could not be pinned, and why.
    pub refused: Vec<PinError>,
    /// Resources, templates and prompts that could not be pinned, and why.
    pub refused_entries: Vec<String>,
    /// The protocol version the upstream spoke.
    pub protocol_version: Option<String>,
}

/// Lists `upstream`'s tools and pins every one the audit accepts.
pub async fn import(upstream: &Upstream) -> Result<Imported, UpstreamError> {
    let client = UpstreamClient::connect(upstream).await?;
    let protocol_version = client.protocol_version();
    let offered = client.offered().await;
    let entries = client.offered_entries().await;
    client.close().await;
    let (mut file, refused) = PinFile::pin_all(&upstream.name, &offered?);
    let refused_entries = file.pin_entries(&entries?);
    Ok(Imported {
        file,
        refused,
        refused_entries,
        protocol_version,
    })
}

/// Policy entries (the core's `[[tools]]` format) for the pinned tools the
/// policy does not have yet. The schema is the pinned one, closed at its top
/// level (`"additionalProperties": false`, which the policy requires, so an
/// argument the upstream would accept silently is refused by the gate); the
/// operation key is suggested from the upstream's `[[upstreams.tools]]`
/// mapping when there is one.
pub fn policy_skeleton(file: &PinFile, upstream: &Upstream, policy: Option<&Policy>) -> String {
    let mut out = String::new();
    for p in file.pins.values() {
        if policy.is_some_and(|pol| pol.tool(&p.name).is_some()) {
            continue;
        }
        let mut schema = p.input_schema.clone();
        if let Some(map) = schema.as_object_mut()
            && map.get("type") == Some(&json!("object"))
            && !map.contains_key("additionalProperties")
            && !map.contains_key("unevaluatedProperties")
        {
            map.insert("additionalProperties".into(), Value::Bool(false));
        }
        let schema_text = canonical_json(&schema).unwrap_or_default();
        let mapping = upstream.tools.iter().find(|t| t.name == p.name);
        let key: Vec<String> = match mapping {
            Some(m) => m
                .scope
                .keys()
                .cloned()
                .chain(
                    m.version_seen
                        .is_some()
                        .then(|| toolgate::op::VERSION_SEEN.to_owned()),
                )
                .collect(),
            None => Vec::new(),
        };
        let _ = writeln!(out, "[[tools]]");
        let _ = writeln!(out, "name = {}", toml_string(&p.name));
        let _ = writeln!(out, "description = {}", toml_string(&p.description));
        let _ = writeln!(
            out,
            "# capability = \"…\"                 # required: what a caller's key must carry to see and call it"
        );
        if key.is_empty() {
            let _ = writeln!(
                out,
                "# operation_key = [\"…\"]            # required: map each field in [[upstreams.tools]] (scope.FIELD)"
            );
        } else {
            let sources: Vec<String> = mapping
                .map(|m| {
                    m.scope
                        .iter()
                        .map(|(f, s)| match s {
                            ScopeSource::Argument(p) => format!("{f} from argument {p}"),
                            ScopeSource::Principal => format!("{f} from the principal"),
                            ScopeSource::Meta(k) => format!("{f} from _meta {k}"),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "# operation_key = {:?}   # required ({})",
                key,
                sources.join(", ")
            );
        }
        // Mapped without a version: the deployment serves it as a read.
        if mapping.is_some_and(|m| m.version_seen.is_none()) {
            let _ = writeln!(
                out,
                "read = true                       # mapped without version_seen: served unclaimed (docs/mcp.md, Read tools)"
            );
        }
        let _ = writeln!(
            out,
            "# scope_types, needs_approval, budgets: see docs/policy.md"
        );
        let _ = writeln!(out, "schema = '''{schema_text}'''");
        let _ = writeln!(out);
    }
    out
}

fn toml_string(s: &str) -> String {
    // A TOML basic string is a JSON string for everything JSON escapes.
    Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::McpSection;
    use crate::pin::Offered;
    use std::path::Path;

    #[test]
    fn the_skeleton_closes_the_schema_and_leaves_the_operators_part_commented() {
        let ups = McpSection::from_toml(
            r#"
            [[upstreams]]
            name = "shop"
            url = "http://127.0.0.1:1/mcp"
            pins = "shop.pins.toml"
            [[upstreams.tools]]
            name = "refund_order"
            scope.order_id = { from = "argument", pointer = "/order_id" }
            version_seen = { from = "argument", pointer = "/expected_version" }
            "#,
        )
        .unwrap()
        .check(Path::new("."))
        .unwrap();
        let offered = Offered {
            name: "refund_order".into(),
            description: Some("Refund \"part\" of an order.".into()),
            input_schema: json!({"type": "object", "properties": {"order_id": {"type": "integer"}}}),
            output_schema: None,
        };
        let (file, refused) = PinFile::pin_all("shop", [&offered]);
        assert_eq!(refused, []);
        let text = policy_skeleton(&file, &ups[0], None);
        assert!(
            text.contains(r#"description = "Refund \"part\" of an order.""#),
            "{text}"
        );
        assert!(text.contains(r#""additionalProperties":false"#), "{text}");
        assert!(
            text.contains(r#"# operation_key = ["order_id", "version_seen"]   # required (order_id from argument /order_id)"#),
            "{text}"
        );
        assert!(!text.contains("read = true"), "{text}");
        // Without its capability and operation key the entry does not load:
        // the operator must decide them.
        let policy = format!("version = 1\nabstain_message = \"no\"\n{text}");
        let e = Policy::load(&policy).unwrap_err();
        assert!(e.message.contains("capability"), "{e}");
    }

    #[test]
    fn a_tool_mapped_without_a_version_is_suggested_as_a_read() {
        let ups = McpSection::from_toml(
            r#"
            [[upstreams]]
            name = "shop"
            url = "http://127.0.0.1:1/mcp"
            pins = "shop.pins.toml"
            [[upstreams.tools]]
            name = "get_order"
            scope.order_id = { from = "argument", pointer = "/order_id" }
            "#,
        )
        .unwrap()
        .check(Path::new("."))
        .unwrap();
        let offered = Offered {
            name: "get_order".into(),
            description: Some("Read one order.".into()),
            input_schema: json!({"type": "object", "properties": {"order_id": {"type": "integer"}}}),
            output_schema: None,
        };
        let (file, _) = PinFile::pin_all("shop", [&offered]);
        let text = policy_skeleton(&file, &ups[0], None);
        assert!(text.contains("\nread = true "), "{text}");
        assert!(text.contains(r#"# operation_key = ["order_id"]"#), "{text}");
    }
}
