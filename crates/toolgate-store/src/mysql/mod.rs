//! MySQL and MariaDB.
//!
//! # The MariaDB trap
//!
//! sqlx's MySQL driver always sets `CLIENT_FOUND_ROWS`. With it, the
//! affected-row count of `INSERT … ON DUPLICATE KEY UPDATE operation_key =
//! operation_key` is 1 for a new row *and* for a duplicate (the duplicate's
//! row was "found"), so the count cannot tell a won claim from a lost one.
//! The claim is decided only by reading the holder token back and
//! committing; `tests/mysql.rs` pins the driver's behaviour.
//!
//! # The migration lock
//!
//! Processes sharing a database migrate one at a time under a lock of the
//! store's own ([`run_migrations`]): sqlx's, taken with a negative
//! timeout, is no lock on MariaDB (it answers NULL at once, and sqlx
//! ignores the answer).
//!
//! # Where things are
//!
//! The backend folders share one layout: `sql.rs` holds the statements,
//! `migrate.rs` applies the migrations (under that lock), `error.rs` reads
//! the driver's error codes; the claims, review queue and
//! `Idempotency-Key` memory are the pooled store's (`pooled/`), shared
//! with PostgreSQL.
//!
//! # Several nodes (MariaDB Galera)
//!
//! A URL may list several hosts, `mysql://user:pw@h1:4306,h2:4307,h3/db`
//! (sqlx reads one; [`split_hosts`] makes one URL per host). The store then
//! keeps a pool per node and uses one at a time (`pooled/nodes.rs`). When a node fails (the
//! connection lost, 2013 or 2006; not in the primary component, 1047; an
//! error during COMMIT, 1180) it is left alone for a while
//! ([`NODE_RETRY_AFTER`]) and the store moves to the next node. A unit
//! whose statements failed wrote nothing and runs again there; a COMMIT
//! that failed leaves the outcome unknown, and the protocol reads the row
//! back, on another node, with the same holder token (docs/design.md §8).
//! Reads outside a transaction (claim lookups, stuck listings, the audit
//! trail, the read-back) use connections with `wsrep_sync_wait = 1` when
//! the node is a Galera node, so they see every write the cluster
//! committed before them.

mod error;
mod migrate;
pub mod sql;

use std::str::FromStr;
use std::sync::atomic::{AtomicI64, Ordering};

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use toolgate::claim::{StoreError, StoreErrorKind};

use crate::StoreOptions;
use crate::common::{bad_url, map_err};
use crate::dialect::Dialect;
use crate::pooled::nodes::{NEXT_START, NODE_ACQUIRE_TIMEOUT, Node, Nodes, no_node};
use crate::pooled::{Pooled, PooledStore};
use crate::write::{StoreWrite, WriteFuture};

pub use crate::pooled::nodes::{FailoverCounts, NODE_RETRY_AFTER};
pub use error::is_lost_race;
pub use migrate::run_migrations;

/// The claims and audit tables, the review queue and the
/// `Idempotency-Key` memory on MySQL or MariaDB: one server, or the nodes
/// of a Galera cluster with failover between them.
///
/// Cloning gives another handle to the same connections.
pub type MySqlClaimStore = PooledStore<sqlx::MySql>;

impl Dialect for sqlx::MySql {
    const SQL: crate::sql::Sql = sql::SQL;

    fn is_lost_race(e: &sqlx::Error) -> bool {
        error::is_lost_race(e)
    }

    fn rows_affected(done: &Self::QueryResult) -> u64 {
        done.rows_affected()
    }
}

impl Pooled for sqlx::MySql {
    fn app_write<'c>(
        write: &'c dyn StoreWrite,
        conn: &'c mut sqlx::MySqlConnection,
    ) -> WriteFuture<'c> {
        write.mysql(conn)
    }

    async fn insert_id(
        pool: &MySqlPool,
        q: sqlx::query::Query<'static, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    ) -> Result<Option<i64>, StoreError> {
        let done = q
            .execute(pool)
            .await
            .map_err(|e| map_err("opening a review item", e))?;
        // Never the affected-row count (sqlx sets CLIENT_FOUND_ROWS): the
        // caller reads the live row back by its grant, and this id only says
        // whether that row is the one inserted here (a clash inserts none).
        Ok(i64::try_from(done.last_insert_id())
            .ok()
            .filter(|id| *id > 0))
    }
}

impl PooledStore<sqlx::MySql> {
    /// Connects to `url` (`mysql://…` or `mariadb://…`) and runs the
    /// migrations. The URL may list
    /// several hosts, comma-separated (the nodes of a Galera cluster): the
    /// store then starts on one of them, a different one for each store a
    /// process opens, and fails over to the others (see the module's
    /// documentation).
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        let urls = split_hosts(&mysql_scheme(url))?;
        let many = urls.len() > 1;
        let mut list = Vec::with_capacity(urls.len());
        for url in &urls {
            let connect = MySqlConnectOptions::from_str(url).map_err(|e| bad_url(url, e))?;
            let max = options.max_connections.max(1);
            // Tested as they came back to the pool (the crate's docs).
            let mut pool = MySqlPoolOptions::new()
                .max_connections(max)
                .test_before_acquire(false);
            let mut reads = MySqlPoolOptions::new()
                .max_connections(max)
                .test_before_acquire(false)
                .after_connect(|conn, _| Box::pin(async move { causal_reads(conn).await }));
            if many {
                // A node frozen mid-handshake must not hold a caller for
                // sqlx's default 30 s when another node could answer.
                pool = pool.acquire_timeout(NODE_ACQUIRE_TIMEOUT);
                reads = reads.acquire_timeout(NODE_ACQUIRE_TIMEOUT);
            }
            list.push(Node {
                // One server: its errors read as before, unnamed.
                name: if many {
                    crate::redact_url(url)
                } else {
                    String::new()
                },
                pool: pool.connect_lazy_with(connect.clone()),
                reads: reads.connect_lazy_with(connect),
                down_until: AtomicI64::new(0),
            });
        }
        let start = if many {
            NEXT_START.fetch_add(1, Ordering::Relaxed) % list.len()
        } else {
            0
        };
        let nodes = Nodes::new(list, start);
        // Migrate through the first node that answers, on a connection
        // that reads causally: a node that has not yet applied another
        // process's migrations would otherwise run them again.
        let mut last = None;
        for _ in 0..nodes.list.len() {
            let i = nodes.pick();
            let node = &nodes.list[i];
            let reached = node
                .reads
                .acquire()
                .await
                .map(drop)
                .map_err(|e| map_err("connecting to MySQL", e))
                .map_err(|e| node.named(e));
            match reached {
                Ok(()) => {
                    migrate::run(&node.reads).await?;
                    return Ok(Self::on(nodes));
                }
                Err(e) => {
                    nodes.node_failed(i, &e);
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(no_node::<sqlx::MySql>))
    }

    /// Checks `url` as [`Self::connect`] reads it, without connecting.
    pub fn check_url(url: &str) -> Result<(), StoreError> {
        // Several hosts (a Galera cluster's nodes): each must parse.
        for one in split_hosts(&mysql_scheme(url))? {
            MySqlConnectOptions::from_str(&one).map_err(|e| bad_url(url, e))?;
        }
        Ok(())
    }
}

/// `url` with the `mysql` scheme: sqlx knows only that one, and MariaDB
/// speaks it.
fn mysql_scheme(url: &str) -> String {
    match url.split_once(':') {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("mariadb") => format!("mysql:{rest}"),
        _ => url.to_owned(),
    }
}

/// On a Galera node, makes the connection's reads causal: each waits until
/// the node has applied every write set the cluster committed before it.
/// Asked per connection, so one URL list may mix servers.
async fn causal_reads(conn: &mut sqlx::MySqlConnection) -> Result<(), sqlx::Error> {
    use sqlx::Executor;
    let on: Option<(String, String)> = sqlx::query_as("SHOW VARIABLES LIKE 'wsrep_on'")
        .fetch_optional(&mut *conn)
        .await?;
    if on.is_some_and(|(_, v)| v.eq_ignore_ascii_case("ON")) {
        conn.execute("SET SESSION wsrep_sync_wait = 1").await?;
    }
    Ok(())
}

/// One URL per host of `url`: `mysql://u:p@h1:1,h2:2/db?x` gives
/// `mysql://u:p@h1:1/db?x` and `mysql://u:p@h2:2/db?x`. A URL with one host
/// comes back as it is. Errors never repeat a password.
pub fn split_hosts(url: &str) -> Result<Vec<String>, StoreError> {
    let bad = |why: &str| {
        StoreError::new(
            StoreErrorKind::Config,
            format!("{}: {why}", crate::redact_url(url)),
        )
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(vec![url.to_owned()]);
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    // The user part ends at the last `@` of the authority (a password may
    // hold an unencoded `@`, never an unencoded `/`).
    let (authority, tail) = rest.split_at(end);
    let (user, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    if !hosts.contains(',') {
        return Ok(vec![url.to_owned()]);
    }
    let list: Vec<&str> = hosts.split(',').map(str::trim).collect();
    if list.iter().any(|h| h.is_empty()) {
        return Err(bad("an empty host in the host list"));
    }
    Ok(list
        .iter()
        .map(|h| format!("{scheme}://{user}{h}{tail}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::split_hosts;

    #[test]
    fn a_host_list_gives_one_url_per_host() {
        assert_eq!(
            split_hosts("mysql://root:pw@h1:4306,h2:4307, h3/test?ssl-mode=REQUIRED").unwrap(),
            [
                "mysql://root:pw@h1:4306/test?ssl-mode=REQUIRED",
                "mysql://root:pw@h2:4307/test?ssl-mode=REQUIRED",
                "mysql://root:pw@h3/test?ssl-mode=REQUIRED",
            ]
        );
        assert_eq!(
            split_hosts("mysql://h1,h2").unwrap(),
            ["mysql://h1", "mysql://h2"]
        );
    }

    #[test]
    fn one_host_comes_back_as_it_is() {
        for url in ["mysql://root@127.0.0.1:3306/test", "mysql://u:p,w@h/db"] {
            assert_eq!(split_hosts(url).unwrap(), [url]);
        }
    }

    #[test]
    fn config_check_reads_a_host_list() {
        let url = "mysql://root:s3cret@h1:4306,h2:4307,h3:4308/test";
        assert_eq!(
            crate::AnyClaimStore::check_url(url).unwrap(),
            crate::Backend::MySql
        );
        let e = crate::AnyClaimStore::check_url("mysql://root:s3cret@h1:4306,/test").unwrap_err();
        assert!(!e.message().contains("s3cret"), "{e}");
    }

    /// Every node refusing: the error names the last one tried, with its
    /// password hidden, and says the store is unavailable.
    #[tokio::test]
    async fn no_node_answering_is_unavailable_and_the_password_stays_hidden() {
        // Ports nothing listens on: bound and dropped at once.
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .unwrap()
        };
        let url = format!(
            "mysql://root:s3cret@127.0.0.1:{},127.0.0.1:{}/test",
            free(),
            free()
        );
        let e = match super::MySqlClaimStore::connect(&url, crate::StoreOptions::default()).await {
            Ok(_) => panic!("nothing listens there"),
            Err(e) => e,
        };
        assert_eq!(
            e.kind(),
            toolgate::claim::StoreErrorKind::Unavailable,
            "{e}"
        );
        assert!(!e.message().contains("s3cret"), "{e}");
        assert!(e.message().contains("root:***@127.0.0.1:"), "{e}");
    }

    #[test]
    fn an_empty_host_is_refused_without_the_password() {
        let e = split_hosts("mysql://root:s3cret@h1,,h3/test").unwrap_err();
        assert!(e.message().contains("empty host"), "{e}");
        assert!(!e.message().contains("s3cret"), "{e}");
    }
}
