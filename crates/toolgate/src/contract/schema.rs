//! Audited, compiled JSON Schemas (draft 2020-12) with toolgate's two
//! deliberate differences.
//!
//! The `jsonschema` crate ignores keywords it does not know, as the
//! specification allows. For a gate that is a hole: a typo such as
//! `minimun` asserts nothing and the schema still "works". So every schema is
//! audited before it is compiled:
//!
//! - every keyword must be one the validator implements and asserts (or a
//!   known annotation such as `description`); anything else is a load error
//!   naming the keyword and its JSON pointer;
//! - `$schema`, if present, must be draft 2020-12;
//! - `$ref` and `$dynamicRef` must be local (`#…`): nothing is ever fetched
//!   from the network or the file system (the crate is built without its
//!   `resolve-http`/`resolve-file` features too);
//! - an unknown `format` is a compile error (the validator is told not to
//!   ignore unknown formats), and known formats are asserted.
//!
//! Deliberate difference: integers are lexical. Wherever a schema says
//! `"type": "integer"` (and does not also allow `"number"`), an instance
//! number written with a fraction or an exponent (`1500.0`, `1.5e3`) is
//! rejected, although JSON Schema counts it as an integer. This is done by
//! compiling a copy of the schema in which each such position also carries
//! the private keyword [`LEXICAL_INTEGER`]; the audit refuses that keyword in
//! user schemas, so it cannot be spoofed.

use std::fmt;

use jsonschema::{Draft, Keyword, ValidationError, Validator};
use serde_json::{Map, Value};

/// The private keyword that asserts lexical integers.
pub const LEXICAL_INTEGER: &str = "x-toolgate-lexical-integer";

/// The only `$schema` value accepted.
pub const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Deepest schema nesting the audit walks; policy schemas are small.
const MAX_SCHEMA_DEPTH: usize = 64;

/// What a keyword's value is, so the audit knows where subschemas are.
#[derive(Clone, Copy)]
enum Kind {
    /// Plain value (asserted or annotation): not walked.
    Value,
    /// One subschema.
    Schema,
    /// An object whose values are subschemas.
    SchemaMap,
    /// A non-empty array of subschemas.
    SchemaArray,
    /// A reference: must be a local (`#…`) string.
    Ref,
}

/// Keywords of draft 2020-12 that the validator implements (assertions,
/// applicators, identifiers) or that are pure annotations.
const KEYWORDS: &[(&str, Kind)] = &[
    // Core
    ("$schema", Kind::Value),
    ("$id", Kind::Value),
    ("$ref", Kind::Ref),
    ("$dynamicRef", Kind::Ref),
    ("$anchor", Kind::Value),
    ("$dynamicAnchor", Kind::Value),
    ("$defs", Kind::SchemaMap),
    ("$comment", Kind::Value),
    // Applicators
    ("allOf", Kind::SchemaArray),
    ("anyOf", Kind::SchemaArray),
    ("oneOf", Kind::SchemaArray),
    ("not", Kind::Schema),
    ("if", Kind::Schema),
    ("then", Kind::Schema),
    ("else", Kind::Schema),
    ("dependentSchemas", Kind::SchemaMap),
    ("prefixItems", Kind::SchemaArray),
    ("items", Kind::Schema),
    ("contains", Kind::Schema),
    ("properties", Kind::SchemaMap),
    ("patternProperties", Kind::SchemaMap),
    ("additionalProperties", Kind::Schema),
    ("propertyNames", Kind::Schema),
    ("unevaluatedItems", Kind::Schema),
    ("unevaluatedProperties", Kind::Schema),
    // Validation
    ("type", Kind::Value),
    ("enum", Kind::Value),
    ("const", Kind::Value),
    ("multipleOf", Kind::Value),
    ("maximum", Kind::Value),
    ("exclusiveMaximum", Kind::Value),
    ("minimum", Kind::Value),
    ("exclusiveMinimum", Kind::Value),
    ("maxLength", Kind::Value),
    ("minLength", Kind::Value),
    ("pattern", Kind::Value),
    ("maxItems", Kind::Value),
    ("minItems", Kind::Value),
    ("uniqueItems", Kind::Value),
    ("maxContains", Kind::Value),
    ("minContains", Kind::Value),
    ("maxProperties", Kind::Value),
    ("minProperties", Kind::Value),
    ("required", Kind::Value),
    ("dependentRequired", Kind::Value),
    // Format (asserted: see `compile`)
    ("format", Kind::Value),
    // Meta-data annotations: they assert nothing and claim nothing.
    ("title", Kind::Value),
    ("description", Kind::Value),
    ("default", Kind::Value),
    ("deprecated", Kind::Value),
    ("readOnly", Kind::Value),
    ("writeOnly", Kind::Value),
    ("examples", Kind::Value),
];

/// Keywords the audit refuses with a specific explanation, because a
/// reader could expect them to assert something they do not.
const REFUSED: &[(&str, &str)] = &[
    (
        "contentEncoding",
        "is an annotation in draft 2020-12: the validator does not assert it",
    ),
    (
        "contentMediaType",
        "is an annotation in draft 2020-12: the validator does not assert it",
    ),
    (
        "contentSchema",
        "is an annotation in draft 2020-12: the validator does not assert it",
    ),
    (
        "$vocabulary",
        "belongs in meta-schemas; custom vocabularies are not supported",
    ),
    (
        "definitions",
        "is not a draft 2020-12 keyword (use $defs); it would be ignored",
    ),
    (
        "dependencies",
        "is not a draft 2020-12 keyword (use dependentRequired/dependentSchemas)",
    ),
    (
        "$recursiveRef",
        "is draft 2019-09; draft 2020-12 uses $dynamicRef",
    ),
    (
        "$recursiveAnchor",
        "is draft 2019-09; draft 2020-12 uses $dynamicAnchor",
    ),
    (
        "additionalItems",
        "is not a draft 2020-12 keyword (use items with prefixItems)",
    ),
];

/// Why a schema was refused at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditError {
    /// The offending keyword (`minimun`, `$ref`, `format`, …).
    pub keyword: String,
    /// JSON pointer of the keyword inside the schema.
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for AuditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "keyword `{}` at {}: {}",
            self.keyword,
            if self.pointer.is_empty() {
                "/"
            } else {
                &self.pointer
            },
            self.message
        )
    }
}

impl std::error::Error for AuditError {}

/// An instance that failed a schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The failing keyword.
    pub keyword: String,
    /// JSON pointer into the instance.
    pub instance_pointer: String,
    /// JSON pointer into the schema.
    pub schema_pointer: String,
    /// The validator's message.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (keyword `{}` at {})",
            self.message, self.keyword, self.schema_pointer
        )
    }
}

/// An audited schema, compiled once.
pub struct Schema {
    source: Value,
    validator: Validator,
    keywords_used: Vec<String>,
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schema")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Schema {
    /// Audits and compiles `source`.
    pub fn compile(source: &Value) -> Result<Self, AuditError> {
        let mut audit = Audit { used: Vec::new() };
        let rewritten = audit.walk(source, &mut String::new(), 0)?;
        let validator = jsonschema::options()
            .with_draft(Draft::Draft202012)
            .should_validate_formats(true)
            .should_ignore_unknown_formats(false)
            .with_keyword(LEXICAL_INTEGER, |_, _, _| Ok(Box::new(LexicalInteger)))
            .build(&rewritten)
            .map_err(|e| AuditError {
                keyword: e.kind().keyword().to_owned(),
                pointer: e.instance_path().as_str().to_owned(),
                message: e.to_string(),
            })?;
        audit.used.sort();
        audit.used.dedup();
        Ok(Self {
            source: source.clone(),
            validator,
            keywords_used: audit.used,
        })
    }

    /// The schema as written (without the private keyword).
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Every keyword the schema uses, sorted, for the must-fail coverage
    /// check and for provider export warnings.
    pub fn keywords_used(&self) -> &[String] {
        &self.keywords_used
    }

    /// Whether `instance` is valid.
    pub fn is_valid(&self, instance: &Value) -> bool {
        self.validator.is_valid(instance)
    }

    /// The first violation, if any.
    ///
    /// The validator's yes/no answer comes first: it is several times
    /// cheaper than building a violation, and only an instance that fails
    /// needs one. Should the two ever disagree about a failing instance,
    /// it fails closed.
    pub fn validate(&self, instance: &Value) -> Result<(), Violation> {
        if self.validator.is_valid(instance) {
            return Ok(());
        }
        match self.first_violation(instance) {
            Some(v) => Err(v),
            None => Err(Violation {
                keyword: String::new(),
                instance_pointer: String::new(),
                schema_pointer: String::new(),
                message: "the instance fails the schema".to_owned(),
            }),
        }
    }

    /// The validator's first violation, computed in full whatever
    /// [`Schema::is_valid`] says (the test suites hold the two to the same
    /// answers).
    pub fn first_violation(&self, instance: &Value) -> Option<Violation> {
        self.validator.validate(instance).err().map(|e| Violation {
            keyword: match e.kind().keyword() {
                // Report the private keyword as what the user wrote.
                LEXICAL_INTEGER => "type".to_owned(),
                k => k.to_owned(),
            },
            instance_pointer: e.instance_path().as_str().to_owned(),
            schema_pointer: e.schema_path().as_str().to_owned(),
            message: e.to_string(),
        })
    }
}

struct Audit {
    used: Vec<String>,
}

impl Audit {
    /// Checks the schema at `pointer` and returns the copy to compile.
    fn walk(
        &mut self,
        schema: &Value,
        pointer: &mut String,
        depth: usize,
    ) -> Result<Value, AuditError> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(AuditError {
                keyword: String::new(),
                pointer: pointer.clone(),
                message: format!("schema nesting deeper than {MAX_SCHEMA_DEPTH}"),
            });
        }
        let map = match schema {
            Value::Bool(_) => return Ok(schema.clone()),
            Value::Object(map) => map,
            _ => {
                return Err(AuditError {
                    keyword: String::new(),
                    pointer: pointer.clone(),
                    message: "a schema must be an object or a boolean".to_owned(),
                });
            }
        };
        let mut out = Map::new();
        for (key, value) in map {
            let len = pointer.len();
            pointer.push('/');
            pointer.push_str(&escape(key));
            let err = |message: String| AuditError {
                keyword: key.clone(),
                pointer: pointer.clone(),
                message,
            };
            let Some(kind) = KEYWORDS
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, kind)| *kind)
            else {
                let message = match REFUSED.iter().find(|(k, _)| k == key) {
                    Some((_, why)) => format!("`{key}` {why}"),
                    None => match suggestion(key) {
                        Some(s) => format!(
                            "unknown keyword `{key}` (did you mean `{s}`?); an ignored keyword asserts nothing"
                        ),
                        None => {
                            format!("unknown keyword `{key}`; an ignored keyword asserts nothing")
                        }
                    },
                };
                return Err(err(message));
            };
            self.used.push(key.clone());
            let walked = match kind {
                Kind::Value => {
                    if key == "format"
                        && let Some(name) = value.as_str()
                        && !jsonschema::options().is_known_format(Draft::Draft202012, name)
                    {
                        return Err(err(format!(
                            "format `{name}` is not one the validator asserts; an unasserted format checks nothing"
                        )));
                    }
                    if key == "$schema" && value.as_str() != Some(DRAFT_2020_12) {
                        return Err(err(format!(
                            "only draft 2020-12 is supported (`{DRAFT_2020_12}`)"
                        )));
                    }
                    value.clone()
                }
                Kind::Ref => match value.as_str() {
                    Some(r) if r.starts_with('#') => value.clone(),
                    Some(r) => {
                        return Err(err(format!(
                            "`{r}` is not a local reference (`#…`); references never reach the network or the file system"
                        )));
                    }
                    None => return Err(err("a reference must be a string".to_owned())),
                },
                Kind::Schema => self.walk(value, pointer, depth + 1)?,
                Kind::SchemaMap => {
                    let Value::Object(members) = value else {
                        return Err(err("expected an object of schemas".to_owned()));
                    };
                    let mut m = Map::new();
                    for (name, sub) in members {
                        let len = pointer.len();
                        pointer.push('/');
                        pointer.push_str(&escape(name));
                        m.insert(name.clone(), self.walk(sub, pointer, depth + 1)?);
                        pointer.truncate(len);
                    }
                    Value::Object(m)
                }
                Kind::SchemaArray => {
                    let Value::Array(items) = value else {
                        return Err(err("expected an array of schemas".to_owned()));
                    };
                    let mut v = Vec::with_capacity(items.len());
                    for (i, sub) in items.iter().enumerate() {
                        let len = pointer.len();
                        pointer.push('/');
                        pointer.push_str(&i.to_string());
                        v.push(self.walk(sub, pointer, depth + 1)?);
                        pointer.truncate(len);
                    }
                    Value::Array(v)
                }
            };
            pointer.truncate(len);
            out.insert(key.clone(), walked);
        }
        if strict_integer_position(map) {
            out.insert(LEXICAL_INTEGER.to_owned(), Value::Bool(true));
        }
        Ok(Value::Object(out))
    }
}

/// `type` names `integer` and not `number`.
fn strict_integer_position(map: &Map<String, Value>) -> bool {
    match map.get("type") {
        Some(Value::String(t)) => t == "integer",
        Some(Value::Array(ts)) => {
            ts.iter().any(|t| t == "integer") && !ts.iter().any(|t| t == "number")
        }
        _ => false,
    }
}

/// A known keyword that differs from `key` by case or by one edit, for the
/// load error's hint.
fn suggestion(key: &str) -> Option<&'static str> {
    KEYWORDS
        .iter()
        .map(|(k, _)| *k)
        .find(|k| k.eq_ignore_ascii_case(key) || edit_distance(k, key) == 1)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

pub(crate) fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Rejects numbers written as floats where the schema demands an integer.
struct LexicalInteger;

impl<'i> Keyword<'i> for LexicalInteger {
    fn validate(&self, instance: &'i Value) -> Result<(), ValidationError<'i>> {
        if self.is_valid(instance) {
            Ok(())
        } else {
            Err(ValidationError::custom(format!(
                "{instance} is not an integer: toolgate reads integers lexically, so a fraction or an exponent is not allowed"
            )))
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        match instance {
            Value::Number(n) => n.is_u64() || n.is_i64(),
            _ => true,
        }
    }
}

/// Every keyword of an (audited) schema with its JSON pointer, walking only
/// schema positions (so property names and `enum` values are not keywords).
pub fn keyword_positions(schema: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    positions(schema, &mut String::new(), &mut out, 0);
    out
}

fn positions(schema: &Value, pointer: &mut String, out: &mut Vec<(String, String)>, depth: usize) {
    let Value::Object(map) = schema else { return };
    if depth > MAX_SCHEMA_DEPTH {
        return;
    }
    for (key, value) in map {
        let len = pointer.len();
        pointer.push('/');
        pointer.push_str(&escape(key));
        out.push((key.clone(), pointer.clone()));
        match KEYWORDS
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, kind)| *kind)
        {
            Some(Kind::Schema) => positions(value, pointer, out, depth + 1),
            Some(Kind::SchemaMap) => {
                if let Value::Object(members) = value {
                    for (name, sub) in members {
                        let l = pointer.len();
                        pointer.push('/');
                        pointer.push_str(&escape(name));
                        positions(sub, pointer, out, depth + 1);
                        pointer.truncate(l);
                    }
                }
            }
            Some(Kind::SchemaArray) => {
                if let Value::Array(items) = value {
                    for (i, sub) in items.iter().enumerate() {
                        let l = pointer.len();
                        pointer.push_str(&format!("/{i}"));
                        positions(sub, pointer, out, depth + 1);
                        pointer.truncate(l);
                    }
                }
            }
            _ => {}
        }
        pointer.truncate(len);
    }
}
