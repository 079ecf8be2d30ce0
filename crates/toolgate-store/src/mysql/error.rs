//! MySQL's and MariaDB's error numbers that the store reads: which are a
//! lost race. The mapping to a store error's kind is the backends' shared
//! one (`crate::common::map_err`, by SQLSTATE).

use sqlx::mysql::MySqlDatabaseError;

/// MySQL's lost-race errors: 1213 deadlock (also Galera's certification
/// failure), 1205 lock wait timeout, 1020 record changed since last read.
/// The claim rolls back and runs again on these; public so that the tests
/// can pin the codes against a real server.
pub fn is_lost_race(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.try_downcast_ref::<MySqlDatabaseError>())
        .is_some_and(|db| matches!(db.number(), 1213 | 1205 | 1020))
}
