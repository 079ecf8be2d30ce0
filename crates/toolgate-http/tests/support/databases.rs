//! What the durable-store tests share: run-unique names, the database URLs
//! from the environment, and a SQLite file of their own.

use std::path::PathBuf;

use axum::Router;
use toolgate::contract::Policy;
use toolgate_http::AppState;
use toolgate_store::AnyClaimStore;

use super::{Both, DeskRef, POLICY, desk_components, keys, new_app};

/// One replica: the desk app over its own connection to the database at
/// `url`, with `policy`.
pub async fn replica_with(url: &str, desk: &DeskRef, policy: Policy) -> (Router, AppState) {
    let store = AnyClaimStore::connect(url).await.unwrap();
    let state = new_app(
        policy,
        desk_components(desk, store),
        keys(),
        Both::default(),
    );
    (toolgate_http::router(state.clone()), state)
}

/// One replica with the test policy.
pub async fn replica(url: &str, desk: &DeskRef) -> (Router, AppState) {
    replica_with(url, desk, Policy::load(POLICY).unwrap()).await
}

/// Nanoseconds since the epoch, for names unique to a run.
pub fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The database URL in `var`. Without it the test skips with a line that
/// says so, except under `TOOLGATE_REQUIRE_DATABASES=1` (CI), where a
/// missing database fails the test instead.
pub fn database_url(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("TOOLGATE_REQUIRE_DATABASES").as_deref() != Ok("1"),
                "TOOLGATE_REQUIRE_DATABASES=1 but {var} is not set: the {what} tests of {} cannot run",
                env!("CARGO_CRATE_NAME")
            );
            eprintln!("SKIPPED: {var} is not set, so this {what} test did not run");
            None
        }
    }
}

/// `TOOLGATE_TEST_POSTGRES_URL`, by [`database_url`]'s rule.
pub fn postgres_url() -> Option<String> {
    database_url("TOOLGATE_TEST_POSTGRES_URL", "PostgreSQL")
}

/// `TOOLGATE_TEST_MYSQL_URL`, by [`database_url`]'s rule.
pub fn mariadb_url() -> Option<String> {
    database_url("TOOLGATE_TEST_MYSQL_URL", "MySQL/MariaDB")
}

/// A new directory for one test's SQLite file, and that file's URL. The
/// caller removes the directory when the test has passed.
pub fn temp_sqlite(prefix: &str) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{}", std::process::id(), now_nanos()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("claims.db").display());
    (dir, url)
}

/// Every store a check runs on, in order: in memory (`None`), SQLite in a
/// file of its own, then PostgreSQL and MariaDB when their URLs are set.
/// The SQLite directory goes when the test has passed; after a failure it
/// stays for a look.
pub struct EveryStore {
    dir: PathBuf,
    urls: Vec<Option<String>>,
}

impl EveryStore {
    pub fn new(prefix: &str) -> Self {
        let (dir, sqlite) = temp_sqlite(prefix);
        let mut urls = vec![None, Some(sqlite)];
        urls.extend(postgres_url().map(Some));
        urls.extend(mariadb_url().map(Some));
        Self { dir, urls }
    }

    pub fn urls(&self) -> impl Iterator<Item = Option<&str>> {
        self.urls.iter().map(Option::as_deref)
    }
}

impl Drop for EveryStore {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A test, `$name`, of one check, `$check(url: Option<&str>)`, on every
/// store [`EveryStore`] gives (`$prefix` names its SQLite directory).
#[allow(unused_macros, reason = "each test binary uses part of the support")]
macro_rules! on_every_store {
    ($check:ident, $prefix:literal: $name:ident) => {
        #[tokio::test]
        async fn $name() {
            let stores = crate::support::databases::EveryStore::new($prefix);
            for url in stores.urls() {
                $check(url).await;
            }
        }
    };
}
#[allow(unused_imports, reason = "each test binary uses part of the support")]
pub(crate) use on_every_store;

/// Three tests of one durable check, `$check(url: &str)`: on SQLite in a
/// file of its own (`$prefix` names its directory), and on PostgreSQL and
/// MariaDB when their URLs are set.
#[allow(unused_macros, reason = "each test binary uses part of the support")]
macro_rules! on_each_backend {
    ($check:ident, $prefix:literal: $sqlite:ident, $postgres:ident, $mariadb:ident) => {
        #[tokio::test]
        async fn $sqlite() {
            let (dir, url) = crate::support::databases::temp_sqlite($prefix);
            $check(&url).await;
            let _ = std::fs::remove_dir_all(&dir);
        }

        #[tokio::test]
        async fn $postgres() {
            if let Some(url) = crate::support::databases::postgres_url() {
                $check(&url).await;
            }
        }

        #[tokio::test]
        async fn $mariadb() {
            if let Some(url) = crate::support::databases::mariadb_url() {
                $check(&url).await;
            }
        }
    };
}
#[allow(unused_imports, reason = "each test binary uses part of the support")]
pub(crate) use on_each_backend;
