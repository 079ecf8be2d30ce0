//! The per-tool state readers and Cedar entity queries.

use std::time::Duration;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::StatusCode;
use serde_json::{Map, Value};
use toolgate::pipeline::{StateError, StateVersion};
use toolgate::sign;
use toolgate_cedar::{Attr, EntityRecord};

use crate::db::{AppDb, Bind, Cell, FetchError, Query};
use crate::http::{bounded_body, describe, signature, strict_json};

/// The binds for `query` from a canonical scope and the actor's id.
pub fn binds(query: &Query, scope: &Map<String, Value>, actor: &str) -> Result<Vec<Bind>, String> {
    query
        .rewritten
        .binds
        .iter()
        .map(|name| {
            if name == "actor" {
                return Ok(Bind::Text(actor.to_owned()));
            }
            match scope.get(name) {
                Some(Value::String(s)) => Ok(Bind::Text(s.clone())),
                Some(Value::Number(n)) => n
                    .as_i64()
                    .map(Bind::Int)
                    .ok_or_else(|| format!("scope field `{name}` ({n}) is not a 64-bit integer")),
                Some(other) => Err(format!(
                    "scope field `{name}` is {other}, not a string or an integer"
                )),
                None => Err(format!("the scope has no field `{name}`")),
            }
        })
        .collect()
}

/// Where one tool's current version comes from.
#[derive(Debug, Clone)]
pub enum StateReader {
    /// One row, one column from the application's database.
    Sql {
        /// The database.
        db: AppDb,
        /// The prepared query.
        query: Query,
    },
    /// `GET` on the application, answering `{"version": …}`.
    Http {
        /// The shared client.
        client: reqwest::Client,
        /// The URL with `{field}` placeholders.
        template: String,
        /// The secret each GET is signed with (v2, `toolgate::sign`).
        secret: Vec<u8>,
        /// Longest wait.
        timeout: Duration,
    },
}

/// Characters percent-encoded in a URL placeholder: everything but `-`,
/// `_` and `~`, so a value cannot add a path segment, a query or a
/// fragment. `.` is encoded too, and a value of one or two dots alone is
/// refused ([`fill`]): the URL standard reads `%2E%2E` as `..` when it is a
/// whole segment, and a value must never move the request up the path.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'~');

/// The `{field}` names in a URL template; `Err` on an unclosed brace.
pub fn placeholders(template: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| format!("unclosed `{{` in `{template}`"))?;
        let name = &after[..close];
        if name.is_empty() || !name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric()) {
            return Err(format!("`{{{name}}}` is not a placeholder name"));
        }
        out.push(name.to_owned());
        rest = &after[close + 1..];
    }
    Ok(out)
}

/// The template with each placeholder replaced by its percent-encoded
/// canonical value.
pub fn fill(template: &str, scope: &Map<String, Value>, actor: &str) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or("unclosed `{`")?;
        let name = &after[..close];
        let value = if name == "actor" {
            actor.to_owned()
        } else {
            match scope.get(name) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => return Err(format!("the scope has no string or integer `{name}`")),
            }
        };
        if value == "." || value == ".." {
            return Err(format!(
                "`{name}` is `{value}`, which a URL would read as a path step"
            ));
        }
        out.extend(utf8_percent_encode(&value, COMPONENT));
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The request target a GET of `url` sends on its request line: the path
/// and, when there is one, `?` and the query. The signature covers it.
fn cell_version(cell: &Cell) -> Option<StateVersion> {
    match cell {
        Cell::Int(i) => Some(StateVersion::from(*i)),
        Cell::Text(s) => StateVersion::new(s.clone()),
        Cell::Null | Cell::Bool(_) => None,
    }
}

impl StateReader {
    /// The current version of the resource `scope` names.
    pub async fn read(
        &self,
        scope: &Map<String, Value>,
        actor: &str,
    ) -> Result<StateVersion, StateError> {
        match self {
            Self::Sql { db, query } => {
                let binds = binds(query, scope, actor).map_err(StateError::new)?;
                let rows = db.fetch(query, &binds).await.map_err(|e| match e {
                    FetchError::Unavailable(m) => StateError::new(m),
                    FetchError::Unreadable(m) => StateError::misconfigured(m),
                })?;
                // Rows the query answered but that are not one version are
                // a deployment error: every retry reads the same rows.
                match rows.as_slice() {
                    [] => Err(StateError::not_found(
                        "no such resource: the state query returned no row",
                    )),
                    [row] => match row.as_slice() {
                        [(_, cell)] => cell_version(cell).ok_or_else(|| {
                            StateError::misconfigured(format!(
                                "the state query's value {cell:?} is not a version \
                                 (a non-empty string or an integer)"
                            ))
                        }),
                        _ => Err(StateError::misconfigured(format!(
                            "the state query returned {} columns, not one",
                            row.len()
                        ))),
                    },
                    _ => Err(StateError::misconfigured(format!(
                        "the state query returned {} rows, not one",
                        rows.len()
                    ))),
                }
            }
            Self::Http {
                client,
                template,
                secret,
                timeout,
            } => {
                let filled = fill(template, scope, actor).map_err(StateError::new)?;
                let url = reqwest::Url::parse(&filled)
                    .map_err(|e| StateError::new(format!("state URL: {e}")))?;
                let signature = signature(secret, "GET", &url, b"");
                let response = client
                    .get(url)
                    .timeout(*timeout)
                    .header(reqwest::header::ACCEPT, "application/json")
                    .header(sign::HEADER, signature)
                    .send()
                    .await
                    .map_err(|e| StateError::new(format!("state URL: {}", describe(&e))))?;
                let status = response.status();
                if status == StatusCode::NOT_FOUND {
                    return Err(StateError::not_found(
                        "no such resource: the state URL answered 404",
                    ));
                }
                if !status.is_success() {
                    return Err(StateError::new(format!("state URL: HTTP {status}")));
                }
                let body = bounded_body(response)
                    .await
                    .map_err(|e| StateError::new(format!("state URL: {e}")))?;
                let value =
                    strict_json(&body).map_err(|e| StateError::new(format!("state URL: {e}")))?;
                let v = value
                    .get("version")
                    .ok_or_else(|| StateError::new("state URL: the answer has no `version`"))?;
                let version = match v {
                    Value::String(s) => StateVersion::new(s.clone()),
                    Value::Number(n) if n.is_i64() || n.is_u64() => {
                        StateVersion::new(n.to_string())
                    }
                    _ => None,
                };
                version.ok_or_else(|| {
                    StateError::new(format!(
                        "state URL: `version` {v} is not a non-empty string or an integer"
                    ))
                })
            }
        }
    }
}

/// One `sql` entity query of a tool.
#[derive(Debug, Clone)]
pub struct EntityQuery {
    /// The Cedar entity type its rows are.
    pub type_name: String,
    /// The prepared query.
    pub query: Query,
}

/// A row as a Cedar entity: `id` the entity id, `parent_<Type>` a parent,
/// every other non-NULL column an attribute.
pub fn row_entity(type_name: &str, row: &[(String, Cell)]) -> Result<EntityRecord, String> {
    let text = |c: &Cell| match c {
        Cell::Int(i) => Some(i.to_string()),
        Cell::Text(s) => Some(s.clone()),
        Cell::Null | Cell::Bool(_) => None,
    };
    let id = row
        .iter()
        .find(|(name, _)| name == "id")
        .and_then(|(_, c)| text(c))
        .ok_or_else(|| format!("a {type_name} row has no string or integer `id`"))?;
    let mut record = EntityRecord::new(type_name, id);
    for (name, cell) in row {
        if name == "id" || matches!(cell, Cell::Null) {
            continue;
        }
        if let Some(parent_type) = name.strip_prefix("parent_") {
            let pid = text(cell)
                .ok_or_else(|| format!("column `{name}` must be a string or integer id"))?;
            record.parents.push((parent_type.to_owned(), pid));
            continue;
        }
        let value = match cell {
            Cell::Int(i) => Value::from(*i),
            Cell::Text(s) => Value::String(s.clone()),
            Cell::Bool(b) => Value::Bool(*b),
            Cell::Null => continue,
        };
        record = record.attr(name.clone(), Attr::Value(value));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn placeholders_are_filled_percent_encoded() {
        let mut scope = Map::new();
        scope.insert("sku".into(), json!("a/b?c#d e"));
        scope.insert("n".into(), json!(42));
        let url = fill("http://h/x/{sku}/{n}?who={actor}", &scope, "ana b.c").unwrap();
        assert_eq!(url, "http://h/x/a%2Fb%3Fc%23d%20e/42?who=ana%20b%2Ec");
        // A value of dots alone would be a path step once the URL is read.
        for dots in [".", ".."] {
            scope.insert("sku".into(), json!(dots));
            assert!(fill("http://h/x/{sku}/v", &scope, "a").is_err(), "{dots}");
        }
        scope.insert("sku".into(), json!("..."));
        let url = fill("http://h/x/{sku}/v", &scope, "a").unwrap();
        assert_eq!(
            reqwest::Url::parse(&url).unwrap().path(),
            "/x/%2E%2E%2E/v",
            "three dots are a name, kept encoded"
        );
        assert_eq!(placeholders("http://h/{sku}/{n}").unwrap(), ["sku", "n"]);
        assert!(placeholders("http://h/{sku").is_err());
        assert!(placeholders("http://h/{s-k}").is_err());
        assert!(fill("http://h/{missing}", &scope, "a").is_err());
    }

    #[test]
    fn a_row_becomes_an_entity_with_parents_and_no_null_attributes() {
        let row = vec![
            ("id".to_owned(), Cell::Int(7)),
            ("team".to_owned(), Cell::Text("blue".into())),
            ("vip".to_owned(), Cell::Bool(true)),
            ("limit".to_owned(), Cell::Int(100)),
            ("note".to_owned(), Cell::Null),
            ("parent_Team".to_owned(), Cell::Text("staff".into())),
            ("parent_Group".to_owned(), Cell::Null),
        ];
        let e = row_entity("Order", &row).unwrap();
        assert_eq!(e.id, "7");
        assert_eq!(
            e.attrs,
            vec![
                ("team".to_owned(), Attr::Value(json!("blue"))),
                ("vip".to_owned(), Attr::Value(json!(true))),
                ("limit".to_owned(), Attr::Value(json!(100))),
            ]
        );
        assert_eq!(e.parents, vec![("Team".to_owned(), "staff".to_owned())]);
        assert!(row_entity("Order", &row[1..]).is_err());
    }
}
