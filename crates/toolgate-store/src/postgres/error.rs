//! PostgreSQL's error codes that the store reads: which SQLSTATEs are a
//! lost race. The mapping to a store error's kind is the backends' shared
//! one (`crate::common::map_err`).

/// PostgreSQL's lost-race errors: serialization_failure (40001) and
/// deadlock_detected (40P01). The claim rolls back and runs again on these;
/// public so that the tests can pin the codes against a real server.
pub fn is_lost_race(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|code| code == "40001" || code == "40P01")
}
