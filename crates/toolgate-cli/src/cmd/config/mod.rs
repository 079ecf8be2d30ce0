//! The deployment file `serve --config` runs. toolgate-deploy reads and
//! checks the whole of it ([`Deployment::load`]); [`load`] is the one call
//! of it, so `config check` accepts exactly what `serve` starts with, and
//! adds what only this binary knows: the support desk it links, how a
//! reviewer sees a decision (the HTTP door's body), and the `db` URL's
//! syntax (the claim store's). `check.rs` is `toolgate config check`,
//! `db.rs` where the database URL comes from (`--db`, `TOOLGATE_DB_URL`,
//! the file).

mod check;
mod db;

use std::path::Path;

use toolgate_deploy::{BuiltIn, HttpLimits};
use toolgate_http::Settings;
use toolgate_support_desk::cedar as desk_cedar;

pub use check::{Command, check_file, run};
use db::check_db_url;
pub use db::{DB_URL_ENV, DbArgs, resolve_db};
/// What is wrong with a deployment file, and where; the file is always
/// named and the field never empty (`line 3` for a TOML error).
pub use toolgate_deploy::{Application, ConfigError, Deployment};

/// The one built-in application a file may name: the support-desk
/// example, its wiring compiled into this binary.
pub const SUPPORT_DESK: &str = "support-desk";

/// The deployment file at `path`, loaded and checked; connects to nothing.
pub fn load(path: &Path) -> Result<Deployment, ConfigError> {
    let desk = BuiltIn {
        name: SUPPORT_DESK,
        policies: desk_cedar::POLICIES.to_owned(),
        mapping: desk_cedar::mapping(),
    };
    let d = Deployment::load(path, &desk)?;
    if let Some(db) = &d.db {
        check_db_url(db).map_err(|m| ConfigError::new("db", m).in_file(path))?;
    }
    Ok(d)
}

/// The HTTP door's settings from the file's limits. Here rather than in
/// the door, so that the door links no deployment file reader.
pub fn http_settings(limits: &HttpLimits) -> Settings {
    Settings {
        body_limit: limits.body_limit,
        request_timeout: limits.request_timeout,
        idempotency_capacity: limits.idempotency_capacity,
        idempotency_max_bytes: limits.idempotency_max_bytes,
        header_read_timeout: limits.header_read_timeout,
        max_connections: limits.max_connections,
        max_connections_per_peer: limits.max_connections_per_peer,
        probe_headroom: limits.probe_headroom,
        max_requests_per_connection: limits.max_requests_per_connection,
        max_connection_age: limits.max_connection_age,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that sets no limit serves with the door's own defaults.
    #[test]
    fn the_file_defaults_are_the_doors() {
        let (s, d) = (http_settings(&HttpLimits::default()), Settings::default());
        assert_eq!(s.body_limit, d.body_limit);
        assert_eq!(s.request_timeout, d.request_timeout);
        assert_eq!(s.idempotency_capacity, d.idempotency_capacity);
        assert_eq!(s.idempotency_max_bytes, d.idempotency_max_bytes);
        assert_eq!(s.header_read_timeout, d.header_read_timeout);
        assert_eq!(s.max_connections, d.max_connections);
        assert_eq!(s.max_connections_per_peer, d.max_connections_per_peer);
        assert_eq!(s.probe_headroom, d.probe_headroom);
        assert_eq!(s.max_requests_per_connection, d.max_requests_per_connection);
        assert_eq!(s.max_connection_age, d.max_connection_age);
    }
}
