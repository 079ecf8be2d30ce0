//! `policy explain`: for each tool, the worst well-formed request a
//! misbehaving model could send, and the bounds that contain it.
//!
//! A contract says what is *well-formed*, not what is *justified*: a model
//! can send the largest amount with any listed reason. Reading the worst case
//! next to its bounds is how a reviewer decides whether the cap is right.

use serde_json::{Map, Value};

use super::{Policy, ToolContract};

/// One tool's worst case.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// The tool.
    pub tool: String,
    /// The worst well-formed arguments toolgate could construct.
    pub worst: Value,
    /// Whether `worst` passes the tool's own contract (it should; if not, the
    /// schema has constraints this explanation does not model, and says so).
    pub worst_passes: bool,
    /// One line per bound, in reading order.
    pub bounds: Vec<String>,
    /// Arguments with no upper bound: each is a finding.
    pub unbounded: Vec<String>,
}

/// Explains every tool of the policy.
pub fn explain(policy: &Policy) -> Vec<Explanation> {
    policy.tools().iter().map(explain_tool).collect()
}

fn explain_tool(tool: &ToolContract) -> Explanation {
    let schema = tool.schema().source();
    let empty = Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut worst = Map::new();
    let mut bounds = Vec::new();
    let mut unbounded = Vec::new();
    for (name, prop) in props {
        let (value, bound) = worst_value(prop);
        match bound {
            Some(b) => bounds.push(format!("{name}: {b}")),
            None => unbounded.push(name.clone()),
        }
        if let Some(v) = value {
            worst.insert(name.clone(), v);
        }
    }
    bounds.push(
        "no other argument is accepted: the object is closed and an unknown key is rejected as unknown_key".to_owned(),
    );
    bounds.push(format!(
        "capability: only actors holding `{}` may use it, checked before any state is read",
        tool.capability()
    ));
    bounds.push(format!(
        "scope: {} come from the authenticated request, never from the model",
        tool.operation_key().join(", ")
    ));
    bounds.push(format!(
        "once per state version: one write per operation key ({} + tool name); a retry replays the recorded result, a different proposal for the same key is a conflict for a person",
        tool.operation_key().join(", ")
    ));
    bounds.push(if tool.needs_approval() {
        "approval: a person approves each operation before it executes".to_owned()
    } else {
        "approval: not required, so the worst case above can execute without a person".to_owned()
    });
    if tool.budgets().is_empty() {
        bounds.push("budgets: none, so nothing caps the sum of many calls".to_owned());
    }
    for b in tool.budgets() {
        bounds.push(b.worst_case());
    }
    bounds.push(format!(
        "size: arguments over {} bytes are rejected as too_large",
        tool.max_argument_bytes()
    ));
    let worst = Value::Object(worst);
    Explanation {
        tool: tool.name().to_owned(),
        worst_passes: tool.schema().is_valid(&worst),
        worst,
        bounds,
        unbounded,
    }
}

/// The worst value for one property and a sentence for its bound (`None`
/// when nothing bounds it).
fn worst_value(prop: &Value) -> (Option<Value>, Option<String>) {
    if let Some(values) = prop.get("enum").and_then(Value::as_array) {
        let list: Vec<String> = values.iter().map(Value::to_string).collect();
        return (
            values.last().cloned(),
            Some(format!(
                "any of {} (well-formed is not justified: the gate cannot tell which one is true)",
                list.join(", ")
            )),
        );
    }
    if let Some(c) = prop.get("const") {
        return (Some(c.clone()), Some(format!("always {c}")));
    }
    let ty = prop.get("type").and_then(Value::as_str);
    match ty {
        Some("integer" | "number") => {
            let xmax = prop.get("exclusiveMaximum").and_then(Value::as_f64);
            let min = prop
                .get("minimum")
                .or_else(|| prop.get("exclusiveMinimum"))
                .map(Value::to_string);
            let lexical = if ty == Some("integer") {
                "; lexical integers only (1500.0, 1.5e3, \"1500\" are rejected)"
            } else {
                ""
            };
            let cap = match (prop.get("maximum"), xmax) {
                (Some(m), _) => Some(m.clone()),
                (None, Some(x)) if ty == Some("integer") => Some(Value::from(x.ceil() as i64 - 1)),
                _ => None,
            };
            match cap {
                Some(c) => (
                    Some(c.clone()),
                    Some(format!(
                        "up to {c} per operation (the cap){}{lexical}",
                        min.map(|m| format!(", at least {m}")).unwrap_or_default()
                    )),
                ),
                None => (None, None),
            }
        }
        Some("string") => match prop.get("maxLength") {
            Some(n) => {
                let len = n.as_u64().unwrap_or(0).min(4096) as usize;
                (
                    Some(Value::String("x".repeat(len))),
                    Some(format!("free text of at most {n} characters")),
                )
            }
            None => (None, None),
        },
        Some("boolean") => (Some(Value::Bool(true)), Some("true or false".to_owned())),
        _ => (None, None),
    }
}
