//! `policy export`: the policy's tools in each provider's request format, so
//! the schema the model is held to at generation time is the one the gate
//! checks. Strict mode is on and parallel tool calls are off wherever the
//! provider has the switch.
//!
//! Providers' strict modes support only a subset of JSON Schema. A keyword
//! outside that subset is still enforced by the gate, but the model is not
//! held to it while generating; each such keyword is reported as a
//! [`Warning`], so nobody mistakes the provider's guarantee for the gate's.

use serde_json::{Map, Value, json};

use super::Policy;
use super::schema::keyword_positions;
use crate::provider::Provider;

/// A keyword the provider's strict mode does not support, or a switch the
/// provider lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The tool concerned.
    pub tool: String,
    /// The keyword, if the warning is about one.
    pub keyword: Option<String>,
    /// JSON pointer inside the tool's schema.
    pub pointer: Option<String>,
    /// What it means.
    pub message: String,
}

/// Whether `provider`'s strict mode accepts `keyword`, from its public
/// documentation (structured outputs / strict function calling).
fn supported(provider: Provider, keyword: &str) -> bool {
    // Accepted by every provider.
    const BASE: &[&str] = &[
        "type",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "anyOf",
        "$ref",
        "$defs",
        "description",
        "title",
        "items",
    ];
    let extra: &[&str] = match provider {
        Provider::OpenAiChat | Provider::OpenAiResponses => &[
            "const",
            "pattern",
            "format",
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
            "minItems",
            "maxItems",
        ],
        // Anthropic strict tool use: no numeric or string-length constraints.
        Provider::Anthropic => &["const", "allOf", "default", "format", "pattern"],
        Provider::Gemini => &[
            "oneOf",
            "$id",
            "$anchor",
            "prefixItems",
            "format",
            "minimum",
            "maximum",
            "minItems",
            "maxItems",
        ],
        Provider::Envelope => &["const"],
    };
    BASE.contains(&keyword) || extra.contains(&keyword)
}

/// The request fragment for `provider`, and the warnings.
pub fn export(policy: &Policy, provider: Provider) -> (Value, Vec<Warning>) {
    let mut warnings = Vec::new();
    for tool in policy.tools() {
        let schema = tool.schema().source();
        for (keyword, pointer) in keyword_positions(schema) {
            if keyword != "$schema" && !supported(provider, &keyword) {
                warnings.push(Warning {
                    tool: tool.name().to_owned(),
                    message: format!(
                        "{provider} strict mode does not support `{keyword}`: the model is not held to it while generating; the gate still enforces it"
                    ),
                    keyword: Some(keyword),
                    pointer: Some(pointer),
                });
            }
        }
        if matches!(provider, Provider::OpenAiChat | Provider::OpenAiResponses) {
            // OpenAI strict mode requires every property to be required.
            let props = tool.properties();
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for p in props.iter().filter(|p| !required.contains(&p.as_str())) {
                warnings.push(Warning {
                    tool: tool.name().to_owned(),
                    keyword: Some("required".to_owned()),
                    pointer: Some("/required".to_owned()),
                    message: format!("{provider} strict mode requires every property to be listed in `required`; `{p}` is not (make it nullable instead)"),
                });
            }
        }
        if provider == Provider::Gemini {
            warnings.push(Warning {
                tool: tool.name().to_owned(),
                keyword: None,
                pointer: None,
                message: "gemini has no strict switch for function calling nor a parallel-calls switch: arguments are not constrained at generation time, and more than one call in a turn is rejected as multiple_actions".to_owned(),
            });
        }
    }
    // The dialect marker is the gate's business; providers may reject it.
    let schemas: Vec<Value> = policy
        .tools()
        .iter()
        .map(|t| {
            let mut s = t.schema().source().clone();
            if let Some(m) = s.as_object_mut() {
                m.remove("$schema");
            }
            s
        })
        .collect();
    let tools = policy.tools().iter().zip(schemas.iter());
    let value = match provider {
        Provider::Anthropic => json!({
            "tools": tools.map(|(t, schema)| json!({
                "name": t.name(),
                "description": t.description(),
                "input_schema": schema,
                "strict": true,
            })).collect::<Vec<_>>(),
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
        }),
        Provider::OpenAiChat | Provider::OpenAiResponses => {
            let tools = tools.map(|(t, schema)| {
                let declaration = [
                    ("name", json!(t.name())),
                    ("description", json!(t.description())),
                    ("parameters", schema.clone()),
                    ("strict", json!(true)),
                ]
                .map(|(k, v)| (k.to_owned(), v));
                let mut tool = Map::new();
                tool.insert("type".to_owned(), json!("function"));
                // Chat Completions nests the declaration; Responses inlines it.
                if provider == Provider::OpenAiChat {
                    tool.insert(
                        "function".to_owned(),
                        Value::Object(Map::from_iter(declaration)),
                    );
                } else {
                    tool.extend(declaration);
                }
                Value::Object(tool)
            });
            json!({
                "tools": tools.collect::<Vec<_>>(),
                "parallel_tool_calls": false,
            })
        }
        Provider::Gemini => json!({
            "tools": [{
                "functionDeclarations": tools.map(|(t, schema)| json!({
                    "name": t.name(),
                    "description": t.description(),
                    "parametersJsonSchema": schema,
                })).collect::<Vec<_>>(),
            }],
            "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        }),
        Provider::Envelope => json!({
            "tools": tools.map(|(t, schema)| json!({
                "name": t.name(),
                "description": t.description(),
                "arguments_schema": schema,
            })).collect::<Vec<_>>(),
        }),
    };
    (value, warnings)
}
