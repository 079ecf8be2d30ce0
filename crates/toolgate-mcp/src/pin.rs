//! Pinned tools: what an operator accepted from an upstream's `tools/list`,
//! and the comparison that withholds a tool whose upstream definition moved.
//!
//! `toolgate mcp import` writes one pin per upstream tool into the
//! upstream's pin file: the tool's description, its input schema (audited as
//! the core audits every policy schema, [`toolgate::contract::Schema`]), its
//! output schema if it has one, and the SHA-256 of the three as RFC 8785
//! canonical JSON (the canonicaliser the core fingerprints arguments with).
//! The output schema is pinned too because clients validate results against
//! it (a changed one changes what a result means to them, and decides
//! whether a gate error may carry `structuredContent`).
//!
//! At start and on every refresh the gateway compares the live list with the
//! pins ([`compare`]): a pinned tool whose definition's digest differs is
//! withheld, with the changes named for the operator; a tool the upstream no
//! longer offers is withheld; a tool without a pin is never listed.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use toolgate::contract::{Schema, is_identifier};
use toolgate::decode::{Limits, decode_strict};
use toolgate::op::canonical_json;

use crate::entries::{Entry, EntryPin, EntryPins, Kind};

/// The pin file format's version.
pub const PIN_FILE_VERSION: u32 = 1;
/// Largest schema a pin holds, in bytes of canonical JSON.
pub const MAX_SCHEMA_BYTES: usize = 256 * 1024;
/// Longest description a pin holds, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;
/// How many schema differences a withheld tool's report names before it
/// says "and N more".
const MAX_CHANGES_SHOWN: usize = 8;

/// One upstream tool as the operator pinned it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pin {
    /// The tool's name at the upstream.
    pub name: String,
    /// Its description (empty when the upstream gave none).
    pub description: String,
    /// Its input schema, audited.
    pub input_schema: Value,
    /// Its output schema, if it declares one.
    pub output_schema: Option<Value>,
    /// SHA-256 (hex) of the three, canonical.
    pub sha256: String,
}

/// A tool definition as an upstream lists it: what is compared with a pin.
#[derive(Debug, Clone, PartialEq)]
pub struct Offered {
    /// The tool's name.
    pub name: String,
    /// Its description, if any.
    pub description: Option<String>,
    /// Its input schema.
    pub input_schema: Value,
    /// Its output schema, if any.
    pub output_schema: Option<Value>,
}

impl Offered {
    /// The definition rmcp received from the upstream.
    pub fn from_rmcp(tool: &rmcp::model::Tool) -> Self {
        Self {
            name: tool.name.to_string(),
            description: tool.description.as_ref().map(|d| d.to_string()),
            input_schema: Value::Object((*tool.input_schema).clone()),
            output_schema: tool
                .output_schema
                .as_ref()
                .map(|s| Value::Object((**s).clone())),
        }
    }
}

/// Why a tool could not be pinned (the import names the tool and skips it;
/// an unpinned tool is never listed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinError {
    /// The tool.
    pub tool: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for PinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tool `{}`: {}", self.tool, self.message)
    }
}

impl std::error::Error for PinError {}

/// The digest of a definition: SHA-256 over the RFC 8785 canonical JSON of
/// `{"description", "inputSchema", "outputSchema"}` (absent description
/// as `""`, absent output schema as `null`).
pub fn digest(
    description: &str,
    input_schema: &Value,
    output_schema: Option<&Value>,
) -> Result<String, String> {
    let doc = json!({
        "description": description,
        "inputSchema": input_schema,
        "outputSchema": output_schema,
    });
    let canonical = canonical_json(&doc).map_err(|e| e.to_string())?;
    Ok(hex::encode(Sha256::digest(canonical.as_bytes())))
}

/// Pins `offered` after the core's schema audit: a tool whose input schema
/// the gate could not enforce exactly as written is refused.
pub fn pin(offered: &Offered) -> Result<Pin, PinError> {
    let fail = |message: String| PinError {
        tool: offered.name.clone(),
        message,
    };
    if !is_identifier(&offered.name) {
        return Err(fail(
            "a tool name the gate serves is 1-64 characters of [A-Za-z0-9_-]".to_owned(),
        ));
    }
    let description = offered.description.clone().unwrap_or_default();
    if description.len() > MAX_DESCRIPTION_BYTES {
        return Err(fail(format!(
            "the description is {} bytes; at most {MAX_DESCRIPTION_BYTES} are pinned",
            description.len()
        )));
    }
    for (what, schema) in [
        ("input", Some(&offered.input_schema)),
        ("output", offered.output_schema.as_ref()),
    ] {
        let Some(schema) = schema else { continue };
        let canonical = canonical_json(schema)
            .map_err(|e| fail(format!("the {what} schema has no canonical form: {e}")))?;
        if canonical.len() > MAX_SCHEMA_BYTES {
            return Err(fail(format!(
                "the {what} schema is {} bytes; at most {MAX_SCHEMA_BYTES} are pinned",
                canonical.len()
            )));
        }
    }
    Schema::compile(&offered.input_schema)
        .map_err(|e| fail(format!("the input schema fails the audit: {e}")))?;
    let sha256 = digest(
        &description,
        &offered.input_schema,
        offered.output_schema.as_ref(),
    )
    .map_err(|e| fail(format!("no canonical form: {e}")))?;
    Ok(Pin {
        name: offered.name.clone(),
        description,
        input_schema: offered.input_schema.clone(),
        output_schema: offered.output_schema.clone(),
        sha256,
    })
}

/// A pin file: the pins of one upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct PinFile {
    /// The upstream they were taken from.
    pub upstream: String,
    /// The pins, by tool name.
    pub pins: BTreeMap<String, Pin>,
    /// Its pinned resources, resource templates and prompts
    /// ([`crate::entries`]).
    pub entries: EntryPins,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PinFileToml {
    version: u32,
    upstream: String,
    #[serde(default)]
    tools: Vec<PinToml>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    resources: Vec<EntryToml>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    resource_templates: Vec<EntryToml>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    prompts: Vec<EntryToml>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryToml {
    sha256: String,
    /// The definition as listed, canonical JSON.
    definition: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PinToml {
    name: String,
    description: String,
    sha256: String,
    input_schema: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output_schema: Option<String>,
}

/// A pin file that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinFileError(pub String);

impl fmt::Display for PinFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PinFileError {}

impl PinFile {
    /// Pins every tool in `offered` the audit accepts; the refused ones come
    /// back beside the file, since one bad tool must not block the others.
    pub fn pin_all<'a>(
        upstream: &str,
        offered: impl IntoIterator<Item = &'a Offered>,
    ) -> (Self, Vec<PinError>) {
        let mut file = Self {
            upstream: upstream.to_owned(),
            pins: BTreeMap::new(),
            entries: EntryPins::new(),
        };
        let mut refused = Vec::new();
        for o in offered {
            match pin(o) {
                Ok(p) => {
                    file.pins.insert(p.name.clone(), p);
                }
                Err(e) => refused.push(e),
            }
        }
        (file, refused)
    }

    /// Pins every resource, resource template and prompt in `offered` that
    /// has a bounded identifier and a canonical form; one line per entry
    /// refused.
    pub fn pin_entries(&mut self, offered: &[Entry]) -> Vec<String> {
        let mut refused = Vec::new();
        for e in offered {
            match e.digest() {
                Ok(sha256) => {
                    self.entries.insert(
                        (e.kind, e.id.clone()),
                        EntryPin {
                            entry: e.clone(),
                            sha256,
                        },
                    );
                }
                Err(m) => refused.push(m),
            }
        }
        refused
    }

    /// The TOML text: a header saying where it came from, then one
    /// `[[tools]]` per pin, schemas as canonical JSON.
    pub fn to_toml(&self) -> Result<String, PinFileError> {
        let mut tools = Vec::with_capacity(self.pins.len());
        for p in self.pins.values() {
            let text = |v: &Value| canonical_json(v).map_err(|e| PinFileError(e.to_string()));
            tools.push(PinToml {
                name: p.name.clone(),
                description: p.description.clone(),
                sha256: p.sha256.clone(),
                input_schema: text(&p.input_schema)?,
                output_schema: p.output_schema.as_ref().map(text).transpose()?,
            });
        }
        let mut by_kind: BTreeMap<Kind, Vec<EntryToml>> = BTreeMap::new();
        for p in self.entries.values() {
            by_kind.entry(p.entry.kind).or_default().push(EntryToml {
                sha256: p.sha256.clone(),
                definition: canonical_json(&p.entry.definition)
                    .map_err(|e| PinFileError(e.to_string()))?,
            });
        }
        let mut take = |k: Kind| by_kind.remove(&k).unwrap_or_default();
        let body = toml::to_string(&PinFileToml {
            version: PIN_FILE_VERSION,
            upstream: self.upstream.clone(),
            tools,
            resources: take(Kind::Resource),
            resource_templates: take(Kind::ResourceTemplate),
            prompts: take(Kind::Prompt),
        })
        .map_err(|e| PinFileError(e.to_string()))?;
        Ok(format!(
            "# Pinned tools of upstream `{}`, written by `toolgate mcp import`.\n\
             # The gateway lists a tool only while the upstream's definition still\n\
             # has this digest; import again to accept a change. Do not edit by hand.\n\n{body}",
            self.upstream
        ))
    }

    /// Reads a pin file's text. Every pin is audited and its digest
    /// recomputed: an edited schema with a stale digest is refused.
    pub fn from_toml(text: &str) -> Result<Self, PinFileError> {
        let file: PinFileToml =
            toml::from_str(text).map_err(|e| PinFileError(format!("not a pin file: {e}")))?;
        if file.version != PIN_FILE_VERSION {
            return Err(PinFileError(format!(
                "pin file version {} is not supported (expected {PIN_FILE_VERSION})",
                file.version
            )));
        }
        let mut pins = BTreeMap::new();
        for t in file.tools {
            let json = |what: &str, text: &str| {
                decode_strict(
                    text.as_bytes(),
                    &Limits::provider_body().with_max_bytes(MAX_SCHEMA_BYTES),
                )
                .map_err(|r| PinFileError(format!("tool `{}`: {what}: {r}", t.name)))
            };
            let offered = Offered {
                name: t.name.clone(),
                description: Some(t.description.clone()),
                input_schema: json("input_schema", &t.input_schema)?,
                output_schema: t
                    .output_schema
                    .as_deref()
                    .map(|s| json("output_schema", s))
                    .transpose()?,
            };
            let pinned = pin(&offered).map_err(|e| PinFileError(e.to_string()))?;
            if pinned.sha256 != t.sha256 {
                return Err(PinFileError(format!(
                    "tool `{}`: sha256 does not match the pinned definition (edited by hand?); import again",
                    t.name
                )));
            }
            if pins.insert(t.name.clone(), pinned).is_some() {
                return Err(PinFileError(format!("tool `{}` is pinned twice", t.name)));
            }
        }
        let mut entries = EntryPins::new();
        for (kind, list) in [
            (Kind::Resource, file.resources),
            (Kind::ResourceTemplate, file.resource_templates),
            (Kind::Prompt, file.prompts),
        ] {
            for t in list {
                let fail = |m: String| PinFileError(format!("{}: {m}", kind.table()));
                let definition = decode_strict(
                    t.definition.as_bytes(),
                    &Limits::provider_body().with_max_bytes(crate::entries::MAX_ENTRY_BYTES),
                )
                .map_err(|r| fail(r.to_string()))?;
                let entry = Entry::of(kind, definition).map_err(fail)?;
                if entry.digest().map_err(fail)? != t.sha256 {
                    return Err(PinFileError(format!(
                        "{} `{}`: sha256 does not match the pinned definition (edited by hand?); import again",
                        kind.noun(),
                        entry.id
                    )));
                }
                let id = (kind, entry.id.clone());
                if entries
                    .insert(
                        id,
                        EntryPin {
                            entry,
                            sha256: t.sha256,
                        },
                    )
                    .is_some()
                {
                    return Err(PinFileError(format!("a {} is pinned twice", kind.noun())));
                }
            }
        }
        Ok(Self {
            upstream: file.upstream,
            pins,
            entries,
        })
    }

    /// Reads the pin file at `path`.
    pub fn read(path: &Path) -> Result<Self, PinFileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| PinFileError(format!("{}: {e}", path.display())))?;
        Self::from_toml(&text).map_err(|e| PinFileError(format!("{}: {e}", path.display())))
    }
}

/// What one comparison of an upstream's live list with its pins found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Refresh {
    /// Pinned tools whose live definition matches: these may be listed.
    pub current: Vec<String>,
    /// Pinned tools withheld, with what changed.
    pub withheld: Vec<Withheld>,
    /// Tools the upstream offers that have no pin: never listed.
    pub unpinned: Vec<String>,
}

/// A pinned tool the gateway withholds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withheld {
    /// The tool.
    pub tool: String,
    /// What changed, one line each, for the operator.
    pub changes: Vec<String>,
}

impl fmt::Display for Withheld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tool `{}` withheld: {}",
            self.tool,
            self.changes.join("; ")
        )
    }
}

/// Compares what an upstream offers now with its pins.
pub fn compare(pins: &PinFile, offered: &[Offered]) -> Refresh {
    let mut refresh = Refresh::default();
    let live: BTreeMap<&str, &Offered> = offered.iter().map(|o| (o.name.as_str(), o)).collect();
    for (name, pin) in &pins.pins {
        let Some(o) = live.get(name.as_str()) else {
            refresh.withheld.push(Withheld {
                tool: name.clone(),
                changes: vec!["the upstream no longer offers it".to_owned()],
            });
            continue;
        };
        let description = o.description.clone().unwrap_or_default();
        let same = digest(&description, &o.input_schema, o.output_schema.as_ref())
            .is_ok_and(|d| d == pin.sha256);
        if same {
            refresh.current.push(name.clone());
            continue;
        }
        let mut changes = Vec::new();
        if description != pin.description {
            changes.push(format!(
                "description changed from {:?} to {:?}",
                clip(&pin.description),
                clip(&description)
            ));
        }
        let mut diffs = Vec::new();
        diff_values("", &pin.input_schema, &o.input_schema, &mut diffs);
        changes.extend(summarise("input schema", diffs));
        let mut diffs = Vec::new();
        match (&pin.output_schema, &o.output_schema) {
            (None, None) => {}
            (Some(_), None) => diffs.push("removed".to_owned()),
            (None, Some(_)) => diffs.push("added".to_owned()),
            (Some(a), Some(b)) => diff_values("", a, b, &mut diffs),
        }
        changes.extend(summarise("output schema", diffs));
        if changes.is_empty() {
            // Same values, but no canonical form now (an integer out of
            // range): still not the pinned definition.
            changes.push("the definition has no canonical form".to_owned());
        }
        refresh.withheld.push(Withheld {
            tool: name.clone(),
            changes,
        });
    }
    refresh.unpinned = offered
        .iter()
        .filter(|o| !pins.pins.contains_key(&o.name))
        .map(|o| o.name.clone())
        .collect();
    refresh
}

fn summarise(what: &str, diffs: Vec<String>) -> Vec<String> {
    let n = diffs.len();
    let mut out: Vec<String> = diffs
        .into_iter()
        .take(MAX_CHANGES_SHOWN)
        .map(|d| format!("{what} {d}"))
        .collect();
    if n > MAX_CHANGES_SHOWN {
        out.push(format!("{what}: and {} more", n - MAX_CHANGES_SHOWN));
    }
    out
}

/// `s`, cut at `max` characters with an ellipsis: an upstream's text in
/// the operator's log or a caller's error stays bounded.
pub(crate) fn clip_to(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

fn clip(s: &str) -> String {
    clip_to(s, 80)
}

/// Where two JSON values differ, as "at /pointer: …" lines (keys added and
/// removed, values changed), recursing into objects and equal-length arrays.
fn diff_values(at: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
    if old == new {
        return;
    }
    let here = if at.is_empty() { "/" } else { at };
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => diff_objects(at, a, b, out),
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff_values(&format!("{at}/{i}"), x, y, out);
            }
        }
        _ => out.push(format!(
            "at {here}: {} became {}",
            clip(&old.to_string()),
            clip(&new.to_string())
        )),
    }
}

fn diff_objects(at: &str, a: &Map<String, Value>, b: &Map<String, Value>, out: &mut Vec<String>) {
    for (k, v) in a {
        let path = format!("{at}/{}", escape(k));
        match b.get(k) {
            None => out.push(format!("at {path}: removed")),
            Some(w) => diff_values(&path, v, w, out),
        }
    }
    for (k, w) in b {
        if !a.contains_key(k) {
            let path = format!("{at}/{}", escape(k));
            out.push(format!("at {path}: added {}", clip(&w.to_string())));
        }
    }
}

/// One JSON pointer token (RFC 6901): `~` as `~0`, `/` as `~1`.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refund() -> Offered {
        Offered {
            name: "refund_order".into(),
            description: Some("Refund part of an order.".into()),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "order_id": {"type": "integer", "minimum": 1},
                    "amount_minor": {"type": "integer", "minimum": 1, "maximum": 20000}
                },
                "required": ["order_id", "amount_minor"]
            }),
            output_schema: None,
        }
    }

    fn file(pins: &[&Offered]) -> PinFile {
        let (file, refused) = PinFile::pin_all("shop", pins.iter().copied());
        assert_eq!(refused, []);
        file
    }

    #[test]
    fn the_digest_ignores_key_order_and_whitespace_but_not_values() {
        let a = refund();
        let mut b = refund();
        // Same schema, members in another order.
        b.input_schema = json!({
            "required": ["order_id", "amount_minor"],
            "properties": {
                "amount_minor": {"maximum": 20000, "minimum": 1, "type": "integer"},
                "order_id": {"minimum": 1, "type": "integer"}
            },
            "type": "object"
        });
        assert_eq!(pin(&a).unwrap().sha256, pin(&b).unwrap().sha256);
        b.input_schema["properties"]["amount_minor"]["maximum"] = json!(20001);
        assert_ne!(pin(&a).unwrap().sha256, pin(&b).unwrap().sha256);
        let mut c = refund();
        c.description = Some("Refund all of an order.".into());
        assert_ne!(pin(&a).unwrap().sha256, pin(&c).unwrap().sha256);
        let mut d = refund();
        d.output_schema = Some(json!({"type": "object"}));
        assert_ne!(pin(&a).unwrap().sha256, pin(&d).unwrap().sha256);
    }

    /// The digest is SHA-256 over RFC 8785 text: checked against a value
    /// computed independently (Python: `hashlib.sha256(json.dumps(doc,
    /// sort_keys=True, separators=(",", ":")).encode()).hexdigest()`).
    #[test]
    fn the_digest_is_sha256_of_the_canonical_text() {
        let d = digest("d", &json!({"type": "object"}), None).unwrap();
        assert_eq!(
            d,
            hex::encode(Sha256::digest(
                br#"{"description":"d","inputSchema":{"type":"object"},"outputSchema":null}"#
            ))
        );
    }

    #[test]
    fn the_audit_refuses_what_the_gate_could_not_enforce() {
        let mut o = refund();
        o.input_schema["properties"]["order_id"]["minimun"] = json!(1);
        let e = pin(&o).unwrap_err();
        assert!(e.message.contains("minimun"), "{e}");
        let mut o = refund();
        o.input_schema["$ref"] = json!("https://example.com/schema.json");
        assert!(pin(&o).unwrap_err().message.contains("$ref"));
        let mut o = refund();
        o.name = "refund order".into();
        assert!(pin(&o).is_err());
        let mut o = refund();
        o.input_schema["properties"]["order_id"]["maximum"] = json!(1u64 << 60);
        assert!(pin(&o).unwrap_err().message.contains("canonical"));
    }

    #[test]
    fn a_pin_file_round_trips_and_refuses_a_hand_edit() {
        let mut out = refund();
        out.name = "get_order".into();
        out.output_schema =
            Some(json!({"type": "object", "properties": {"version": {"type": "integer"}}}));
        let f = file(&[&refund(), &out]);
        let text = f.to_toml().unwrap();
        assert!(text.starts_with("# Pinned tools of upstream `shop`"));
        assert_eq!(PinFile::from_toml(&text).unwrap(), f);

        let edited = text.replace("20000", "90000");
        assert_ne!(edited, text);
        let e = PinFile::from_toml(&edited).unwrap_err();
        assert!(e.0.contains("sha256 does not match"), "{e}");
        let dup = text.replace(
            "{\"minimum\":1,\"type\"",
            "{\"minimum\":1,\"minimum\":2,\"type\"",
        );
        assert_ne!(dup, text);
        assert!(
            PinFile::from_toml(&dup)
                .unwrap_err()
                .0
                .contains("duplicate")
        );
    }

    #[test]
    fn a_changed_tool_is_withheld_with_what_changed() {
        let pins = file(&[&refund()]);
        assert_eq!(
            compare(&pins, &[refund()]),
            Refresh {
                current: vec!["refund_order".into()],
                ..Refresh::default()
            }
        );

        let mut now = refund();
        now.description = Some("Refund an order, any amount.".into());
        now.input_schema["properties"]["amount_minor"]
            .as_object_mut()
            .unwrap()
            .remove("maximum");
        now.input_schema["properties"]["note"] = json!({"type": "string"});
        let r = compare(&pins, &[now]);
        assert!(r.current.is_empty());
        assert_eq!(r.withheld.len(), 1);
        let changes = &r.withheld[0].changes;
        assert_eq!(
            changes,
            &vec![
                "description changed from \"Refund part of an order.\" to \"Refund an order, any amount.\"".to_owned(),
                "input schema at /properties/amount_minor/maximum: removed".to_owned(),
                "input schema at /properties/note: added {\"type\":\"string\"}".to_owned(),
            ]
        );
        assert!(
            r.withheld[0]
                .to_string()
                .starts_with("tool `refund_order` withheld: description changed")
        );
    }

    #[test]
    fn a_vanished_tool_is_withheld_and_a_new_one_is_unpinned() {
        let pins = file(&[&refund()]);
        let mut other = refund();
        other.name = "delete_order".into();
        let r = compare(&pins, &[other]);
        assert_eq!(r.current, Vec::<String>::new());
        assert_eq!(
            r.withheld[0].changes,
            vec!["the upstream no longer offers it"]
        );
        assert_eq!(r.unpinned, vec!["delete_order".to_owned()]);
    }

    #[test]
    fn many_changes_are_summarised() {
        let pins = file(&[&refund()]);
        let mut now = refund();
        for i in 0..20 {
            now.input_schema["properties"][format!("p{i:02}")] = json!({"type": "string"});
        }
        let r = compare(&pins, &[now]);
        let changes = &r.withheld[0].changes;
        assert_eq!(changes.len(), MAX_CHANGES_SHOWN + 1);
        assert_eq!(changes.last().unwrap(), "input schema: and 12 more");
    }
}
