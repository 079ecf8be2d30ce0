//! What the durable-store tests share: run-unique names, the database URLs
//! from the environment, and a SQLite file of their own.

use std::path::PathBuf;

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

/// A new directory for one test's SQLite file, and that file's URL. The
/// caller removes the directory when the test has passed.
pub fn temp_sqlite(prefix: &str) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{}", std::process::id(), now_nanos()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("claims.db").display());
    (dir, url)
}
