//! Where a command's database URL comes from (`--db`, `TOOLGATE_DB_URL`,
//! the deployment file's `db`), and the URL's check before anything
//! connects.

use std::fmt;
use std::path::{Path, PathBuf};

use toolgate_store::{AnyClaimStore, Backend, redact_url};

/// The environment variable that names the database when `--db` does not:
/// unlike an argument, it does not show in `ps` to every user of the host.
pub const DB_URL_ENV: &str = "TOOLGATE_DB_URL";

/// The URL's syntax as the store reads it, and the certificate files it
/// names (`sslrootcert`, `sslcert`, `sslkey`, `ssl-ca`, ...) exist, so a
/// typo shows here rather than at the first connection.
pub(super) fn check_db_url(url: &str) -> Result<Backend, String> {
    let backend = AnyClaimStore::check_url(url).map_err(|e| e.message().to_owned())?;
    if let Some((_, query)) = url.split_once('?') {
        for (name, value) in query.split('&').filter_map(|p| p.split_once('=')) {
            let is_file = matches!(
                name.to_ascii_lowercase().as_str(),
                "sslrootcert" | "sslcert" | "sslkey" | "ssl-ca" | "ssl-cert" | "ssl-key"
            );
            // sqlx also takes the certificate itself (PEM) inline.
            if is_file && !value.starts_with("-----BEGIN") && !Path::new(value).is_file() {
                return Err(format!(
                    "{}: {name}: no such file: {value}",
                    redact_url(url)
                ));
            }
        }
    }
    Ok(backend)
}

/// Where a command's database URL came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbSource {
    Flag,
    Env,
    File(PathBuf),
}

impl fmt::Display for DbSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flag => f.write_str("--db"),
            Self::Env => f.write_str(DB_URL_ENV),
            Self::File(p) => write!(f, "`db` in {}", p.display()),
        }
    }
}

/// The database URL by precedence: `--db`, then `TOOLGATE_DB_URL` (when
/// set and not empty), then the deployment file's `db`. `None` when none
/// names one; the caller applies its default or refuses.
pub fn resolve_db(flag: Option<&str>, file: Option<(&str, &Path)>) -> Option<(String, DbSource)> {
    if let Some(url) = flag {
        return Some((url.to_owned(), DbSource::Flag));
    }
    if let Ok(url) = std::env::var(DB_URL_ENV)
        && !url.is_empty()
    {
        return Some((url, DbSource::Env));
    }
    file.map(|(url, path)| (url.to_owned(), DbSource::File(path.to_owned())))
}

/// The database flags of the operator commands (`claims stuck`,
/// `claims reconcile`).
#[derive(clap::Args)]
pub struct DbArgs {
    /// The claim store: sqlite://PATH, postgres://... or mysql://...
    /// Without it: $TOOLGATE_DB_URL, then `db` in --config's file.
    #[arg(long, value_name = "URL")]
    db: Option<String>,
    /// A deployment file (as for `serve --config`) whose `db` names the
    /// store when neither --db nor TOOLGATE_DB_URL does.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

impl DbArgs {
    /// The deployment file given with --config, if any.
    pub fn config(&self) -> Option<&Path> {
        self.config.as_deref()
    }

    /// The URL to open, or the message to print (exit 2). The file is
    /// read only when neither --db nor the environment names a database,
    /// so a broken file does not stand in the way of an explicit URL.
    pub fn url(&self) -> Result<String, String> {
        if let Some((url, _)) = resolve_db(self.db.as_deref(), None) {
            return Ok(url);
        }
        let Some(path) = &self.config else {
            return Err(format!(
                "no database: give --db URL, set {DB_URL_ENV}, or --config FILE"
            ));
        };
        super::load(path)
            .map_err(|e| e.to_string())?
            .db
            .ok_or_else(|| {
                format!(
                    "no database: {} has no `db`, and neither --db nor {DB_URL_ENV} is set",
                    path.display()
                )
            })
    }
}
