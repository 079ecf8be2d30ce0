//! The store tests' skip-or-require rule, restated for the CLI's database
//! tests: the store's own helper module needs its fault-injection feature,
//! which this crate's tests must not turn on.

use std::io::Write;

/// The database URL in `var`, or `None` after printing a skip message. With
/// `TOOLGATE_REQUIRE_DATABASES=1` (CI) a missing URL fails the test instead.
pub fn database_url(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let required = std::env::var("TOOLGATE_REQUIRE_DATABASES").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "TOOLGATE_REQUIRE_DATABASES=1 but {var} is not set: the {what} tests cannot run"
            );
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {var} is not set, so this {what} test did not run"
            );
            None
        }
    }
}

/// 32 random hex digits, for names that must not collide between runs.
pub fn random_hex() -> String {
    toolgate_store::fresh_holder().expect("random").to_hex()
}

/// Two tests of one check, `$check(url)`: on PostgreSQL and on MariaDB,
/// each when its URL is set ([`database_url`]'s rule).
#[allow(unused_macros, reason = "each test binary uses part of the support")]
macro_rules! on_network_databases {
    ($check:expr => $postgres:ident, $mariadb:ident) => {
        #[test]
        fn $postgres() {
            let url = crate::support::database_url("TOOLGATE_TEST_POSTGRES_URL", "PostgreSQL");
            if let Some(url) = url {
                ($check)(&url);
            }
        }

        #[test]
        fn $mariadb() {
            let url = crate::support::database_url("TOOLGATE_TEST_MYSQL_URL", "MySQL/MariaDB");
            if let Some(url) = url {
                ($check)(&url);
            }
        }
    };
}
#[allow(unused_imports, reason = "each test binary uses part of the support")]
pub(crate) use on_network_databases;
