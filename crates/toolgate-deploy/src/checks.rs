//! The start-time checks a deployment's queries and timeouts pass: each
//! refuses what would otherwise fail every decision later, naming the
//! field.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::config::ConfigError;
use crate::params::{self, Dialect};
use crate::{MAX_TIMEOUT_MS, db, http};

/// The field `field` of the `[[tools]]` entry for `tool`, as errors name it.
pub(crate) fn tool_field(tool: &str, field: &str) -> String {
    format!("tools[{tool}].{field}")
}

/// The wait a timeout field sets, or its default: at least 1 ms, at most
/// [`MAX_TIMEOUT_MS`].
pub(crate) fn timeout(
    field: &str,
    ms: Option<u64>,
    default_ms: u64,
) -> Result<Duration, ConfigError> {
    match ms {
        Some(0) => Err(ConfigError::new(field, "must be at least 1 ms")),
        Some(ms) if ms > MAX_TIMEOUT_MS => Err(ConfigError::new(
            field,
            format!("{ms} ms is longer than the limit, {MAX_TIMEOUT_MS} ms"),
        )),
        _ => Ok(http::timeout_or(ms, default_ms)),
    }
}

/// The named parameters of `sql` that are neither one of `keys` nor
/// `actor`, as a configuration error at `field`.
pub(crate) fn check_params(
    field: &str,
    sql: &str,
    dialect: Dialect,
    keys: &BTreeSet<&str>,
) -> Result<(), ConfigError> {
    let names = params::names(sql, dialect).map_err(|e| ConfigError::new(field, e))?;
    for name in names {
        if name != "actor" && !keys.contains(name.as_str()) {
            return Err(ConfigError::new(
                field,
                format!(
                    "`:{name}` is not a scope field of the tool's operation_key ({}) nor `actor`",
                    keys.iter().copied().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// On PostgreSQL, a parameter compared with an integer column is inferred
/// as an integer and one compared with text as text, and the two do not
/// convert: a `string` scope field bound where the database expects an
/// integer (or the reverse) would fail every decision. Caught here, at
/// start. MySQL and SQLite convert, and infer nothing.
pub(crate) fn check_param_types(
    field: &str,
    query: &db::Query,
    contract: &toolgate::contract::ToolContract,
) -> Result<(), ConfigError> {
    use toolgate::op::ScopeType;
    for (name, inferred) in query.rewritten.binds.iter().zip(&query.param_types) {
        let integer_bind = name != "actor" && contract.scope_type(name) == ScopeType::Integer;
        let wants_integer = matches!(inferred.as_str(), "INT2" | "INT4" | "INT8" | "NUMERIC");
        let wants_text = matches!(inferred.as_str(), "TEXT" | "VARCHAR" | "BPCHAR" | "NAME");
        let bound = if integer_bind { "an integer" } else { "text" };
        if (integer_bind && wants_text) || (!integer_bind && wants_integer) {
            return Err(ConfigError::new(
                field,
                format!(
                    "the database expects {inferred} for `:{name}`, which is bound as {bound} \
                     (its scope type in the policy); declare it in scope_types or cast it in \
                     the query"
                ),
            ));
        }
    }
    Ok(())
}

/// The types of an entity query's columns, as the database reported them
/// when it prepared the query: a type the row reader cannot take would
/// deny every decision that reads the entity, so it is refused now, naming
/// the entity type and the column.
pub(crate) fn check_entity_columns(
    field: &str,
    entity_type: &str,
    query: &db::Query,
    dialect: Dialect,
) -> Result<(), ConfigError> {
    for (column, ty) in query.columns.iter().zip(&query.column_types) {
        let kind = db::column_kind(dialect, ty);
        let is_id = column == "id" || column.starts_with("parent_");
        match kind {
            None => {
                return Err(ConfigError::new(
                    field,
                    format!(
                        "entity type `{entity_type}`: column `{column}` has SQL type {ty}, \
                         which no Cedar value is read from: cast it to an integer, text or \
                         boolean in the query (docs/deploy.md, type mapping)"
                    ),
                ));
            }
            Some(db::ColumnKind::Bool) if is_id => {
                return Err(ConfigError::new(
                    field,
                    format!(
                        "entity type `{entity_type}`: column `{column}` is an entity id and \
                         has SQL type {ty}: an id must be an integer or text"
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The state query's one column must hold a version: an integer or text.
pub(crate) fn check_version_column(
    field: &str,
    query: &db::Query,
    dialect: Dialect,
) -> Result<(), ConfigError> {
    for (column, ty) in query.columns.iter().zip(&query.column_types) {
        if matches!(
            db::column_kind(dialect, ty),
            None | Some(db::ColumnKind::Bool)
        ) {
            return Err(ConfigError::new(
                field,
                format!(
                    "column `{column}` has SQL type {ty}, which is not a version: return an \
                     integer or text (cast it in the query)"
                ),
            ));
        }
    }
    Ok(())
}

/// An SQL source without an open `[app_db]`: the load refuses the tool
/// rather than serving it without the source.
pub(crate) fn no_app_db(field: &str) -> ConfigError {
    ConfigError::new(field, "an SQL query needs [app_db], which is not open")
}
