//! Pinned resources, resource templates and prompts: the rest of an
//! upstream, served as its tools are, from what the operator pinned.
//!
//! `toolgate mcp import` pins each entry an upstream lists (`resources/list`,
//! `resources/templates/list`, `prompts/list`) as its whole definition (the
//! JSON object the upstream listed) with the SHA-256 of its RFC 8785
//! canonical form. The gateway lists the pinned definitions only while the
//! upstream still lists the same ones ([`compare`]), and passes
//! `resources/read` and `prompts/get` through only for a pinned, current
//! entry: a resource by its exact URI or by a pinned template
//! ([`template_matches`]), a prompt by its name with only the arguments it
//! declares. An entry nobody pinned is never listed and never read.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;
use sha2::{Digest, Sha256};
use toolgate::op::canonical_json;

/// Largest entry definition a pin holds, in bytes of canonical JSON.
pub const MAX_ENTRY_BYTES: usize = 64 * 1024;
/// Longest URI, URI template or prompt name pinned, in bytes.
pub const MAX_ID_BYTES: usize = 2048;

/// What kind of entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `resources/list`: identified by its `uri`.
    Resource,
    /// `resources/templates/list`: identified by its `uriTemplate`.
    ResourceTemplate,
    /// `prompts/list`: identified by its `name`.
    Prompt,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Self; 3] = [Self::Resource, Self::ResourceTemplate, Self::Prompt];

    /// The pin file's table name.
    pub const fn table(self) -> &'static str {
        match self {
            Self::Resource => "resources",
            Self::ResourceTemplate => "resource_templates",
            Self::Prompt => "prompts",
        }
    }

    /// The member of the definition that identifies it.
    pub const fn id_member(self) -> &'static str {
        match self {
            Self::Resource => "uri",
            Self::ResourceTemplate => "uriTemplate",
            Self::Prompt => "name",
        }
    }

    /// How the operator's log names one.
    pub const fn noun(self) -> &'static str {
        match self {
            Self::Resource => "resource",
            Self::ResourceTemplate => "resource template",
            Self::Prompt => "prompt",
        }
    }
}

/// One entry as an upstream lists it, or as pinned.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Its kind.
    pub kind: Kind,
    /// Its URI, URI template or name.
    pub id: String,
    /// The whole definition, as listed.
    pub definition: Value,
}

impl Entry {
    /// The entry of `kind` that `definition` (a listed object) is, if it
    /// has an identifier a gateway can serve.
    pub fn of(kind: Kind, definition: Value) -> Result<Self, String> {
        let id = definition
            .get(kind.id_member())
            .and_then(Value::as_str)
            .ok_or_else(|| format!("a {} without a `{}`", kind.noun(), kind.id_member()))?
            .to_owned();
        if id.is_empty() || id.len() > MAX_ID_BYTES || id.chars().any(char::is_control) {
            return Err(format!(
                "{} {:?}: its {} must be 1-{MAX_ID_BYTES} bytes without control characters",
                kind.noun(),
                clip(&id),
                kind.id_member()
            ));
        }
        Ok(Self {
            kind,
            id,
            definition,
        })
    }

    /// SHA-256 (hex) of the definition's canonical JSON, refused over
    /// [`MAX_ENTRY_BYTES`].
    pub fn digest(&self) -> Result<String, String> {
        let canonical = canonical_json(&self.definition)
            .map_err(|e| format!("{} {:?}: no canonical form: {e}", self.kind.noun(), self.id))?;
        if canonical.len() > MAX_ENTRY_BYTES {
            return Err(format!(
                "{} {:?}: {} bytes; at most {MAX_ENTRY_BYTES} are pinned",
                self.kind.noun(),
                clip(&self.id),
                canonical.len()
            ));
        }
        Ok(hex::encode(Sha256::digest(canonical.as_bytes())))
    }

    /// For a prompt: the argument names it declares, and those it requires.
    pub fn prompt_arguments(&self) -> (BTreeSet<String>, BTreeSet<String>) {
        let mut declared = BTreeSet::new();
        let mut required = BTreeSet::new();
        for a in self
            .definition
            .get("arguments")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(name) = a.get("name").and_then(Value::as_str) else {
                continue;
            };
            declared.insert(name.to_owned());
            if a.get("required") == Some(&Value::Bool(true)) {
                required.insert(name.to_owned());
            }
        }
        (declared, required)
    }
}

/// An entry as pinned: its definition and digest.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryPin {
    /// The entry.
    pub entry: Entry,
    /// SHA-256 (hex) of its canonical definition.
    pub sha256: String,
}

/// The pinned entries of one upstream, by kind and identifier.
pub type EntryPins = BTreeMap<(Kind, String), EntryPin>;

/// What one comparison of an upstream's lists with its pinned entries found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EntryRefresh {
    /// Pinned entries the upstream still lists as pinned.
    pub current: BTreeSet<(Kind, String)>,
    /// One line per pinned entry withheld, for the operator.
    pub withheld: Vec<String>,
}

/// Compares what an upstream lists now with its pinned entries.
pub fn compare(pins: &EntryPins, offered: &[Entry]) -> EntryRefresh {
    let live: BTreeMap<(Kind, &str), &Entry> = offered
        .iter()
        .map(|e| ((e.kind, e.id.as_str()), e))
        .collect();
    let mut refresh = EntryRefresh::default();
    for ((kind, id), pin) in pins {
        match live.get(&(*kind, id.as_str())) {
            Some(e) if e.digest().is_ok_and(|d| d == pin.sha256) => {
                refresh.current.insert((*kind, id.clone()));
            }
            Some(_) => refresh.withheld.push(format!(
                "{} `{}` withheld: its definition changed (import again to accept it)",
                kind.noun(),
                clip(id)
            )),
            None => refresh.withheld.push(format!(
                "{} `{}` withheld: the upstream no longer lists it",
                kind.noun(),
                clip(id)
            )),
        }
    }
    refresh
}

/// Whether `uri` is one the RFC 6570 `template` can expand to: literal
/// text must match exactly; `{var}` (and `{var,…}`) one or more characters
/// other than `/ ? #`; `{+var}` and `{#var}` any one or more; `{/var}` and
/// `{.var}` the operator's character and then a segment; `{?…}` and `{&…}`
/// a query part from there to the end. A template this does not read (an
/// unclosed brace) matches nothing.
pub fn template_matches(template: &str, uri: &str) -> bool {
    let Some(parts) = parse_template(template) else {
        return false;
    };
    matches_from(&parts, uri)
}

#[derive(Debug, Clone, PartialEq)]
enum Part<'a> {
    Literal(&'a str),
    Simple,
    Reserved,
    Prefixed(char),
    Query,
}

fn parse_template(template: &str) -> Option<Vec<Part<'_>>> {
    let mut parts = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        match rest.find('{') {
            Some(0) => {
                let end = rest.find('}')?;
                let expr = &rest[1..end];
                let part = match expr.chars().next()? {
                    '+' | '#' => Part::Reserved,
                    c @ ('/' | '.' | ';') => Part::Prefixed(c),
                    '?' | '&' => Part::Query,
                    _ => Part::Simple,
                };
                parts.push(part);
                rest = &rest[end + 1..];
            }
            Some(i) => {
                parts.push(Part::Literal(&rest[..i]));
                rest = &rest[i..];
            }
            None => {
                if rest.contains('}') {
                    return None;
                }
                parts.push(Part::Literal(rest));
                rest = "";
            }
        }
    }
    Some(parts)
}

fn matches_from(parts: &[Part<'_>], uri: &str) -> bool {
    let Some((first, later)) = parts.split_first() else {
        return uri.is_empty();
    };
    match first {
        Part::Literal(l) => uri
            .strip_prefix(l)
            .is_some_and(|rest| matches_from(later, rest)),
        Part::Query => later.is_empty() && (uri.is_empty() || uri.starts_with('?')),
        Part::Prefixed(c) => uri
            .strip_prefix(*c)
            .is_some_and(|rest| segment(rest, later, |ch| ch != '/' && ch != '?' && ch != '#')),
        Part::Simple => segment(uri, later, |ch| ch != '/' && ch != '?' && ch != '#'),
        Part::Reserved => segment(uri, later, |_| true),
    }
}

/// A non-empty run of characters `allowed` takes, then the rest of the
/// template: every split is tried (templates are short).
fn segment(uri: &str, later: &[Part<'_>], allowed: impl Fn(char) -> bool) -> bool {
    for (i, ch) in uri.char_indices() {
        if !allowed(ch) {
            return false;
        }
        if matches_from(later, &uri[i + ch.len_utf8()..]) {
            return true;
        }
    }
    false
}

fn clip(s: &str) -> String {
    crate::pin::clip_to(s, 120)
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.noun())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn templates_match_what_they_expand_to_and_nothing_else() {
        let t = "demo://resource/dynamic/text/{resourceId}";
        assert!(template_matches(t, "demo://resource/dynamic/text/42"));
        assert!(!template_matches(t, "demo://resource/dynamic/text/"));
        assert!(!template_matches(t, "demo://resource/dynamic/text/4/2"));
        assert!(!template_matches(t, "demo://resource/dynamic/blob/42"));
        assert!(template_matches("file:///{+path}", "file:///etc/hosts"));
        assert!(template_matches(
            "orders://{id}{?expand}",
            "orders://7?expand=lines"
        ));
        assert!(template_matches("orders://{id}{?expand}", "orders://7"));
        assert!(!template_matches("orders://{id}{?expand}", "orders://7#x"));
        assert!(template_matches("a{/seg}", "a/b"));
        assert!(!template_matches("a{/seg}", "ab"));
        assert!(!template_matches("broken://{id", "broken://{id"));
        assert!(template_matches("exact://one", "exact://one"));
        assert!(!template_matches("exact://one", "exact://one/two"));
    }

    #[test]
    fn a_changed_or_vanished_entry_is_withheld() {
        let e = |d: Value| Entry::of(Kind::Resource, d).unwrap();
        let pinned = e(json!({"uri": "shop://terms", "name": "terms", "mimeType": "text/plain"}));
        let gone = e(json!({"uri": "shop://old", "name": "old"}));
        let mut pins = EntryPins::new();
        for entry in [pinned.clone(), gone] {
            let sha256 = entry.digest().unwrap();
            pins.insert((entry.kind, entry.id.clone()), EntryPin { entry, sha256 });
        }
        let same = compare(&pins, std::slice::from_ref(&pinned));
        assert!(
            same.current
                .contains(&(Kind::Resource, "shop://terms".into()))
        );
        assert_eq!(same.withheld.len(), 1, "{:?}", same.withheld);
        let changed = e(json!({"uri": "shop://terms", "name": "terms", "mimeType": "text/html"}));
        let r = compare(&pins, &[changed]);
        assert!(r.current.is_empty());
        assert!(
            r.withheld[1].contains("definition changed"),
            "{:?}",
            r.withheld
        );
    }

    #[test]
    fn an_entry_needs_a_bounded_identifier() {
        assert!(Entry::of(Kind::Prompt, json!({"description": "x"})).is_err());
        assert!(Entry::of(Kind::Prompt, json!({"name": "a\nb"})).is_err());
        assert!(Entry::of(Kind::Prompt, json!({"name": "x".repeat(3000)})).is_err());
        let p = Entry::of(
            Kind::Prompt,
            json!({"name": "greet", "arguments": [{"name": "who", "required": true}, {"name": "tone"}]}),
        )
        .unwrap();
        let (declared, required) = p.prompt_arguments();
        assert_eq!(declared.len(), 2);
        assert!(required.contains("who") && !required.contains("tone"));
    }
}
