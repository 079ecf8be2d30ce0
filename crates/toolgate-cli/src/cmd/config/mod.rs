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

use toolgate_deploy::BuiltIn;
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
