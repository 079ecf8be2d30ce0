//! The files `toolgate init` writes, from its plan: the policy, the
//! Cedar rule, the deployment file, the webhook receivers and the first
//! request.

use std::path::Path;

use super::Plan;

const RECEIVER_PY: &str = include_str!("../../../receivers/receiver.py");
const RECEIVER_PHP: &str = include_str!("../../../receivers/receiver.php");
const RECEIVER_JS: &str = include_str!("../../../receivers/receiver.js");

/// The webhook receiver to write, in the application's language.
#[derive(Clone, Copy)]
pub(super) enum Receiver {
    Python,
    Php,
    Node,
}

impl Receiver {
    pub(super) fn parse(s: &str) -> Option<Self> {
        match s {
            "python" => Some(Self::Python),
            "php" => Some(Self::Php),
            "node" => Some(Self::Node),
            _ => None,
        }
    }

    pub(super) fn file(self) -> &'static str {
        match self {
            Self::Python => "receiver.py",
            Self::Php => "receiver.php",
            Self::Node => "receiver.js",
        }
    }

    fn template(self) -> &'static str {
        match self {
            Self::Python => RECEIVER_PY,
            Self::Php => RECEIVER_PHP,
            Self::Node => RECEIVER_JS,
        }
    }

    pub(super) fn command(self, port: u16) -> String {
        match self {
            Self::Python => "python3 receiver.py".to_owned(),
            Self::Php => format!("php -S 127.0.0.1:{port} receiver.php"),
            Self::Node => "node receiver.js".to_owned(),
        }
    }
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

pub(super) fn policy_toml(p: &Plan) -> String {
    let mut key: Vec<String> = p.scope.iter().map(|(f, _)| toml_string(f)).collect();
    key.push(toml_string("version_seen"));
    let types: Vec<String> = p
        .scope
        .iter()
        .map(|(f, t)| format!("{f} = {}", toml_string(t)))
        .collect();
    format!(
        r#"# The tool `{tool}`, written by `toolgate init` (docs/policy.md).
# The schema is what the model may choose: edit its properties. What the
# server fixes (which row, the version the model saw) is the operation key,
# never an argument.

version = 1
reply_max_bytes = 2000
abstain_message = "I can't do this here. A colleague will follow up."

[[tools]]
name = {name}
description = "Describe what {tool} does, for the model."
capability = {capability}
# One write per row and version the model read: a retry of the same turn
# replays it, the row's next version is a new operation.
operation_key = [{key}]
scope_types = {{ {types} }}
needs_approval = false
max_argument_bytes = 1024
schema = '''
{{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "properties": {{
    "note": {{"type": "string", "maxLength": 200}}
  }}
}}
'''
"#,
        tool = p.tool,
        name = toml_string(&p.tool),
        capability = toml_string(&p.capability),
        key = key.join(", "),
        types = types.join(", "),
    )
}

pub(super) fn policy_cedar(p: &Plan) -> String {
    format!(
        r#"// Who may call `{tool}`, written by `toolgate init`: an agent acts on
// rows of its own team. `{principal}` comes with each request (its id is the
// request's "actor"); `{resource}` is read from {table} for every decision
// (toolgate.toml, [[tools.entities]]). Add `forbid` rules for what must never
// happen, whatever else permits.

permit (
    principal is {principal},
    action == Action::"{tool}",
    resource is {resource}
)
when {{ principal.team == resource.team }};
"#,
        tool = p.tool,
        principal = p.principal_type,
        resource = p.resource_type,
        table = p.table,
    )
}

pub(super) fn toolgate_toml(
    p: &Plan,
    dir: &Path,
    backend_entry: &str,
    oncall_entry: &str,
) -> String {
    let field = &p.scope[0].0;
    let base = format!("http://127.0.0.1:{}", p.receiver_port);
    let executor = if p.webhook {
        format!(
            "{{ kind = \"webhook\", url = \"{base}/webhook\", status_url = \"{base}/status\", \
             secret_file = \"webhook.secret\", timeout_ms = 5000 }}"
        )
    } else {
        "{ kind = \"client\" }".to_owned()
    };
    let state = if p.http_state {
        format!("{{ source = \"http\", url = \"{base}/version/{{{field}}}\" }}")
    } else {
        format!(
            "{{ source = \"sql\", query = {} }}",
            toml_string(&format!(
                "SELECT {} FROM {} WHERE {} = :{field}",
                p.version_column, p.table, p.id_column
            ))
        )
    };
    let id = if p.id_column == "id" {
        "id".to_owned()
    } else {
        format!("{} AS id", p.id_column)
    };
    let team = if p.team_column == "team" {
        "team".to_owned()
    } else {
        format!("{} AS team", p.team_column)
    };
    let entity_query = toml_string(&format!(
        "SELECT {id}, {team} FROM {} WHERE {} = :{field}",
        p.table, p.id_column
    ));
    format!(
        r#"# The deployment of `{tool}`, written by `toolgate init`
# (docs/quickstart.md; every field is in docs/deploy.md).
#
#   {env}   the application's database, read here (version and entities)
#                and written only by the receiver
#   TOOLGATE_DB_URL  toolgate's own claim store, if not the SQLite file below

listen = "{listen}"
db = {db}
policy = "policy.toml"
cedar = "policy.cedar"
lease_ms = 30000
{backend_entry}
{oncall_entry}

[app_db]
url_env = "{env}"

[[tools]]
name = {name}
executor = {executor}
state = {state}

[tools.cedar]
principal_type = "{principal}"
resource_type = "{resource}"
resource_field = "{field}"

[[tools.entities]]
type = "{resource}"
source = "sql"
query = {entity_query}

# The agent's attributes come with each decision request, from your backend:
# "entities": {{"{principal}": {{"id": "<the actor>", "team": "..."}}}}
[[tools.entities]]
type = "{principal}"
source = "request"
"#,
        tool = p.tool,
        env = p.app_db_env,
        listen = p.listen,
        db = toml_string(&format!("sqlite://{}", dir.join("claims.db").display())),
        name = toml_string(&p.tool),
        principal = p.principal_type,
        resource = p.resource_type,
    )
}

/// The names `receiver_source` fills in the templates.
#[cfg(test)]
const PLACEHOLDERS: [&str; 7] = [
    "__TOOL__",
    "__TABLE__",
    "__ID_COLUMN__",
    "__VERSION_COLUMN__",
    "__RESOURCE_FIELD__",
    "__DB_ENV__",
    "__PORT__",
];

pub(super) fn receiver_source(p: &Plan, r: Receiver) -> String {
    r.template()
        .replace("__TOOL__", &p.tool)
        .replace("__TABLE__", &p.table)
        .replace("__ID_COLUMN__", &p.id_column)
        .replace("__VERSION_COLUMN__", &p.version_column)
        .replace("__RESOURCE_FIELD__", &p.scope[0].0)
        .replace("__DB_ENV__", &p.app_db_env)
        .replace("__PORT__", &p.receiver_port.to_string())
}

/// The first decision, as the third command: the scope with sample values.
pub(super) fn sample_request(p: &Plan) -> String {
    let mut scope = serde_json::Map::new();
    for (f, t) in &p.scope {
        let v = if *t == "integer" {
            serde_json::json!(1)
        } else {
            serde_json::json!("1")
        };
        scope.insert(f.clone(), v);
    }
    scope.insert("version_seen".into(), serde_json::json!("1"));
    let turn = serde_json::json!({
        "outcome": "action",
        "reply": "Done.",
        "proposed_action": {"tool": p.tool, "arguments": {"note": "first call"}},
    });
    serde_json::json!({
        "provider": "envelope",
        "response": turn.to_string(),
        "scope": scope,
        "actor": "agent-ana",
        "entities": {p.principal_type.clone(): {"id": "agent-ana", "team": "eu"}},
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receivers_have_every_placeholder_filled() {
        let p = Plan {
            tool: "extend_subscription".into(),
            capability: "subscription:extend".into(),
            scope: vec![("subscription_id".into(), "integer")],
            table: "subscriptions".into(),
            id_column: "id".into(),
            version_column: "version".into(),
            team_column: "team".into(),
            app_db_env: "APP_DB_URL".into(),
            webhook: true,
            http_state: false,
            receiver: None,
            receiver_port: 9100,
            listen: "127.0.0.1:8080".parse().unwrap(),
            principal_type: "Agent".into(),
            resource_type: "Subscription".into(),
        };
        for r in [Receiver::Python, Receiver::Php, Receiver::Node] {
            let s = receiver_source(&p, r);
            for placeholder in PLACEHOLDERS {
                assert!(
                    r.template().contains(placeholder),
                    "{}: {placeholder}",
                    r.file()
                );
                assert!(!s.contains(placeholder), "{}: {placeholder}", r.file());
            }
            assert!(s.contains("extend_subscription"), "{}", r.file());
        }
    }
}
