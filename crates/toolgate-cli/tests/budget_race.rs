//! `toolgate bench race --budget`: 12 workers propose
//! 10.00 credits on distinct tickets of one customer against a daily budget
//! of 100.00. The credits written never pass the limit and, with demand over
//! it and amounts that divide it, reach it exactly, on SQLite, PostgreSQL and
//! MariaDB. PostgreSQL and MariaDB run when `TOOLGATE_TEST_POSTGRES_URL` /
//! `TOOLGATE_TEST_MYSQL_URL` are set, and must in CI
//! (`TOOLGATE_REQUIRE_DATABASES=1`).

#[path = "support/databases.rs"]
mod support;

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

/// Runs the race and returns its figures as (name, value) pairs.
fn race(url: &str, tickets: u32) -> Vec<(String, f64)> {
    let out = Command::new(BIN)
        .args(["bench", "race", "--budget", "--db", url, "--workers", "12"])
        .args(["--tickets", &tickets.to_string()])
        .output()
        .expect("run toolgate");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}: {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("key=value");
            (k.to_owned(), v.parse().expect("a number"))
        })
        .collect()
}

fn figure(figures: &[(String, f64)], name: &str) -> f64 {
    figures
        .iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no {name} in {figures:?}"))
        .1
}

fn the_limit_holds(url: &str) {
    // Demand 36 x 10.00 against 100.00: exactly the limit is written, and
    // every other proposal is a budget_exceeded decision.
    let f = race(url, 36);
    assert_eq!(figure(&f, "limit"), 10_000.0);
    assert_eq!(figure(&f, "executed_total"), 10_000.0, "{f:?}");
    assert_eq!(figure(&f, "reserved"), 10_000.0, "{f:?}");
    assert_eq!(figure(&f, "over_limit_decisions"), 26.0, "{f:?}");
    // Demand under the limit: all of it.
    let f = race(url, 7);
    assert_eq!(figure(&f, "executed_total"), 7_000.0, "{f:?}");
    assert_eq!(figure(&f, "over_limit_decisions"), 0.0, "{f:?}");
}

#[test]
fn sqlite_budget_race() {
    let path =
        std::env::temp_dir().join(format!("toolgate-budget-race-{}.db", support::random_hex()));
    the_limit_holds(&format!("sqlite://{}", path.display()));
    let _ = std::fs::remove_file(&path);
}

support::on_network_databases!(|url: &str| the_limit_holds(url) =>
    postgres_budget_race,
    mariadb_budget_race
);
