//! The claim store over TLS (rustls): `sslmode=verify-full` on PostgreSQL
//! and `ssl-mode=VERIFY_IDENTITY` on MySQL/MariaDB, verified against a CA
//! named in the URL, as a managed database is reached.
//!
//! Runs when `TOOLGATE_TEST_TLS_CA` names the CA that signed the local
//! servers' certificate (`scripts/db-tls-setup.sh` makes it and sets the
//! servers up; `.ci/run` calls it) and the database URLs of the other store
//! tests are set. Skips with a message otherwise, unless
//! `TOOLGATE_REQUIRE_DATABASES=1`, where anything missing fails. The script
//! also writes `wrong-ca.pem` beside the CA, a CA that signed nothing: a
//! connection that trusts only it must be refused.

mod support;

use std::io::Write;
use std::path::PathBuf;

use toolgate::claim::StoreErrorKind;
use toolgate::claim::conformance::{self, Namespace};
use toolgate_store::{AnyClaimStore, Backend, StoreOptions};

const CA_VAR: &str = "TOOLGATE_TEST_TLS_CA";

/// The CA and the unrelated one beside it, or `None` after saying why.
fn cas() -> Option<(PathBuf, PathBuf)> {
    let ca = match std::env::var(CA_VAR) {
        Ok(path) if !path.is_empty() => PathBuf::from(path),
        _ => {
            assert!(
                !support::required(),
                "{}=1 but {CA_VAR} is not set: run scripts/db-tls-setup.sh and \
                 export {CA_VAR}=target/db-tls/ca.pem",
                support::REQUIRE
            );
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {CA_VAR} is not set (scripts/db-tls-setup.sh sets the local \
                 servers up), so the database TLS tests did not run"
            );
            return None;
        }
    };
    let wrong = ca.with_file_name("wrong-ca.pem");
    for path in [&ca, &wrong] {
        assert!(
            path.is_file(),
            "{CA_VAR} is set but {} is missing: rerun scripts/db-tls-setup.sh",
            path.display()
        );
    }
    Some((ca, wrong))
}

/// `base` with `params` added to its query.
fn with_params(base: &str, params: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}{params}")
}

/// A claim, its completion by the holder and the replay of the completed
/// operation, through the TLS connection.
async fn round_trip(store: &AnyClaimStore) {
    let ns = Namespace::new(support::random16());
    conformance::completion_by_holder(store, &ns).await;
    conformance::completed_replays(store, &ns).await;
}

/// Connecting while trusting only `wrong_ca` fails as a TLS failure
/// (unavailable), and the message says the certificate was the problem.
async fn refused(url: &str) {
    let Err(err) = AnyClaimStore::connect_with(url, StoreOptions::default()).await else {
        panic!("a server certificate from another CA was accepted: {url}");
    };
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    let text = err.to_string().to_ascii_lowercase();
    assert!(
        text.contains("certificate") || text.contains("issuer"),
        "not a certificate error: {err}"
    );
}

#[tokio::test]
async fn postgres_verify_full_with_the_ca_round_trips_and_a_wrong_ca_is_refused() {
    let Some((ca, wrong)) = cas() else { return };
    let Some(base) = support::database_url("TOOLGATE_TEST_POSTGRES_URL", "PostgreSQL TLS") else {
        return;
    };
    // A schema of its own, as in tests/postgres.rs, created over TLS too.
    let tls = |ca: &PathBuf| {
        with_params(
            &base,
            &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
        )
    };
    let admin = sqlx::PgPool::connect(&tls(&ca))
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL over TLS with {}: {e}", ca.display()));
    let name = format!("toolgate_tls_{}", support::hex(&support::random16()));
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
        .execute(&admin)
        .await
        .expect("create schema");
    let url = with_params(&tls(&ca), &format!("options=-c%20search_path%3D{name}"));
    let store = AnyClaimStore::connect(&url)
        .await
        .expect("connect over TLS");
    assert_eq!(store.backend(), Backend::Postgres);
    let AnyClaimStore::Postgres(pg) = &store else {
        unreachable!()
    };
    // The session really is encrypted, not a plain fallback.
    let ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(pg.pool())
        .await
        .expect("pg_stat_ssl");
    assert!(ssl, "the store's connection is not TLS");
    round_trip(&store).await;
    refused(&tls(&wrong)).await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {name} CASCADE")))
        .execute(&admin)
        .await
        .expect("drop schema");
}

#[tokio::test]
async fn mysql_verify_identity_with_the_ca_round_trips_and_a_wrong_ca_is_refused() {
    let Some((ca, wrong)) = cas() else { return };
    let Some(base) = support::database_url("TOOLGATE_TEST_MYSQL_URL", "MySQL/MariaDB TLS") else {
        return;
    };
    let tls = |url: &str, ca: &PathBuf| {
        with_params(
            url,
            &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", ca.display()),
        )
    };
    let admin = sqlx::MySqlPool::connect(&tls(&base, &ca))
        .await
        .unwrap_or_else(|e| panic!("MySQL over TLS with {}: {e}", ca.display()));
    let name = format!("toolgate_tls_{}", support::hex(&support::random16()));
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await
        .expect("create database");
    // The same server and query, another database.
    let (scheme, rest) = base.split_once("://").expect("URL has a scheme");
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let db_url = format!("{scheme}://{authority}/{name}");
    let store = AnyClaimStore::connect(&tls(&db_url, &ca))
        .await
        .expect("connect over TLS");
    assert_eq!(store.backend(), Backend::MySql);
    let AnyClaimStore::MySql(my) = &store else {
        unreachable!()
    };
    let cipher: (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .fetch_one(my.pool())
        .await
        .expect("Ssl_cipher");
    assert!(!cipher.1.is_empty(), "the store's connection is not TLS");
    round_trip(&store).await;
    refused(&tls(&db_url, &wrong)).await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {name}")))
        .execute(&admin)
        .await
        .expect("drop database");
}
