//! The claim store on a MariaDB Galera cluster, with stores attached to
//! different nodes of one cluster (docs/deploy.md, "Running on MariaDB
//! Galera"; the rules are docs/design.md §8).
//!
//! Runs when `TOOLGATE_TEST_GALERA_URLS` lists the nodes' URLs,
//! comma-separated; CI starts `scripts/galera-cluster.sh` and sets
//! `mysql://root@127.0.0.1:4306/test,mysql://root@127.0.0.1:4307/test,mysql://root@127.0.0.1:4308/test`.
//! Skips with a message otherwise, unless `TOOLGATE_REQUIRE_GALERA=1`. (Not
//! `TOOLGATE_REQUIRE_DATABASES`: CI sets that for the whole workspace run,
//! before any cluster exists.)
//!
//! The store's own MySQL suite (`tests/mysql.rs`) runs against a single
//! node as well; there every contender shares one node, so it never meets
//! Galera's certification. These tests make the contenders meet on
//! different nodes, where a transaction can read back its own holder token
//! and still lose at COMMIT.

mod support;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::mysql::{MySqlConnection, MySqlDatabaseError, MySqlPool};
use sqlx::{Connection, Executor};
use tokio::sync::{Barrier, Mutex, MutexGuard};
use toolgate::claim::conformance::{self, Namespace};
use toolgate::claim::{
    ClaimStore, Completion, HolderToken, JsonText, OperationKey, RawClaim, StoreErrorKind,
    UnixMillis,
};
use toolgate_store::StoreOptions;
use toolgate_store::mysql::{FailoverCounts, MySqlClaimStore, is_lost_race};

/// One test at a time: the fault tests kill and pause nodes, which the
/// others must not meet, and the race counts on the order in which its
/// stores are opened to spread them over the nodes.
static SERIAL: Mutex<()> = Mutex::const_new(());

async fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().await
}

const DIR_VAR: &str = "TOOLGATE_TEST_GALERA_DIR";

const URLS_VAR: &str = "TOOLGATE_TEST_GALERA_URLS";
const REQUIRE_VAR: &str = "TOOLGATE_REQUIRE_GALERA";

/// The nodes' URLs, or `None` (after saying so) when they are not given
/// and the cluster is not required.
fn node_urls() -> Option<Vec<String>> {
    let urls: Vec<String> = std::env::var(URLS_VAR)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect();
    if urls.is_empty() {
        assert!(
            std::env::var(REQUIRE_VAR).as_deref() != Ok("1"),
            "{REQUIRE_VAR}=1 but {URLS_VAR} is not set: the Galera tests cannot run"
        );
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: {URLS_VAR} is not set, so this Galera test did not run"
        );
        return None;
    }
    assert!(
        urls.len() >= 2,
        "{URLS_VAR} names one node; these tests need two or more"
    );
    Some(urls)
}

fn number(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>())
        .map(MySqlDatabaseError::number)
}

/// Waits until the node behind `url` has applied every write set the
/// cluster committed before this call. Galera applies other nodes' write
/// sets asynchronously; `wsrep_sync_wait = 1` makes the read wait for them
/// (a causal read), which is synchronisation, not a timed wait.
async fn caught_up(url: &str) {
    // Not through the database itself: a node may not have created it yet
    // (CREATE DATABASE is replicated like any write).
    let mut conn = MySqlConnection::connect(&support::with_database(url, "information_schema"))
        .await
        .expect("connect");
    conn.execute("SET SESSION wsrep_sync_wait = 1")
        .await
        .expect("wsrep_sync_wait");
    conn.execute("SELECT 1").await.expect("causal read");
    conn.close().await.expect("close");
}

/// Waits until every node is back in one primary component of all of
/// them and synced: after a fault test, a node that rejoined may still be
/// receiving state. Polls the nodes' status; the bound only keeps a broken
/// cluster from hanging the run.
async fn all_synced(urls: &[String]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let mut synced = 0;
        for url in urls {
            let Ok(mut conn) =
                MySqlConnection::connect(&support::with_database(url, "information_schema")).await
            else {
                continue;
            };
            let status: Vec<(String, String)> = sqlx::query_as(
                "SHOW GLOBAL STATUS WHERE Variable_name IN \
                 ('wsrep_local_state_comment', 'wsrep_cluster_status', 'wsrep_cluster_size')",
            )
            .fetch_all(&mut conn)
            .await
            .unwrap_or_default();
            let get = |k: &str| {
                status
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(k))
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            if get("wsrep_local_state_comment") == "Synced"
                && get("wsrep_cluster_status") == "Primary"
                && get("wsrep_cluster_size") == urls.len().to_string()
            {
                synced += 1;
            }
            let _ = conn.close().await;
        }
        if synced == urls.len() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the cluster's nodes did not all become synced members again"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// A throwaway database, created through the first node, with one claim
/// store attached to each node.
struct Cluster {
    admin: MySqlPool,
    name: String,
    urls: Vec<String>,
    stores: Vec<Arc<MySqlClaimStore>>,
}

impl Cluster {
    async fn create() -> Option<Self> {
        let nodes = node_urls()?;
        all_synced(&nodes).await;
        let admin = MySqlPool::connect(&nodes[0])
            .await
            .unwrap_or_else(|e| panic!("{URLS_VAR} is set but its first node is unreachable: {e}"));
        let name = format!("toolgate_g_{}", support::hex(&support::random16()));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await
            .expect("create database");
        let urls: Vec<String> = nodes
            .iter()
            .map(|u| support::with_database(u, &name))
            .collect();
        // One node migrates; each other node attaches once it has applied
        // the migration. Two stores migrating at once on different nodes
        // are not serialised: the store's migration lock (GET_LOCK) is
        // local to a node on Galera.
        let mut stores = Vec::new();
        for (i, url) in urls.iter().enumerate() {
            if i > 0 {
                caught_up(url).await;
            }
            let store = MySqlClaimStore::connect(url, StoreOptions::default())
                .await
                .unwrap_or_else(|e| panic!("store on node {}: {e}", i + 1));
            stores.push(Arc::new(store));
        }
        Some(Self {
            admin,
            name,
            urls,
            stores,
        })
    }

    /// The database's URL naming every node: `mysql://root@h1:p1,h2:p2/db`.
    fn multi_host_url(&self) -> String {
        let hosts: Vec<&str> = self
            .urls
            .iter()
            .map(|u| {
                let rest = u.split_once("://").expect("scheme").1;
                let authority = rest.split(['/', '?']).next().unwrap_or(rest);
                authority.rsplit_once('@').map_or(authority, |(_, h)| h)
            })
            .collect();
        let first = &self.urls[0];
        let (scheme, rest) = first.split_once("://").expect("scheme");
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let user = authority
            .rsplit_once('@')
            .map(|(u, _)| format!("{u}@"))
            .unwrap_or_default();
        format!("{scheme}://{user}{}{tail}", hosts.join(","))
    }

    /// A store on every node, with failover, starting on the next node in
    /// turn.
    async fn multi_host_store(&self, max_connections: u32) -> MySqlClaimStore {
        let options = StoreOptions {
            max_connections,
            ..StoreOptions::default()
        };
        MySqlClaimStore::connect(&self.multi_host_url(), options)
            .await
            .unwrap_or_else(|e| panic!("multi-host store: {e}"))
    }

    async fn drop(self) {
        for store in &self.stores {
            store.pool().close().await;
        }
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {}", self.name)))
            .execute(&self.admin)
            .await
            .expect("drop database");
    }
}

/// The URLs must name distinct, synced nodes of one cluster, or the other
/// tests would not test what they say.
#[tokio::test]
async fn the_urls_name_distinct_synced_nodes_of_one_cluster() {
    let _serial = serial().await;
    let Some(urls) = node_urls() else {
        return;
    };
    let mut clusters = Vec::new();
    let mut names = Vec::new();
    for url in &urls {
        let mut conn = MySqlConnection::connect(url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let (on, name): (i64, String) =
            sqlx::query_as("SELECT CAST(@@wsrep_on AS SIGNED), @@wsrep_node_name")
                .fetch_one(&mut conn)
                .await
                .expect("wsrep variables");
        assert_eq!(on, 1, "{url}: wsrep_on is off, this is not a Galera node");
        let status: Vec<(String, String)> = sqlx::query_as(
            "SHOW GLOBAL STATUS WHERE Variable_name IN \
             ('wsrep_local_state_comment', 'wsrep_cluster_state_uuid', 'wsrep_cluster_status')",
        )
        .fetch_all(&mut conn)
        .await
        .expect("wsrep status");
        let get = |k: &str| {
            status
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("{url}: no {k}"))
        };
        assert_eq!(get("wsrep_local_state_comment"), "Synced", "{url}");
        assert_eq!(get("wsrep_cluster_status"), "Primary", "{url}");
        clusters.push(get("wsrep_cluster_state_uuid"));
        names.push(name);
    }
    clusters.dedup();
    assert_eq!(clusters.len(), 1, "the nodes are in different clusters");
    let mut distinct = names.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        names.len(),
        "a node is named twice: {names:?}"
    );
}

/// The claim's statements, by hand, on two nodes: node 2's transaction reads
/// back its own holder token, and still loses, at COMMIT, to node 1's
/// transaction that committed first (Galera's certification, MySQL error
/// 1213). The store counts 1213 as a lost race. This is why only COMMIT
/// decides a claim (docs/design.md §8).
#[tokio::test]
async fn a_read_back_of_ones_own_token_loses_at_commit_to_another_node() {
    let _serial = serial().await;
    let Some(cluster) = Cluster::create().await else {
        return;
    };
    let ns = Namespace::new(support::random16());
    let key = ns.key(210, 0);
    let (first, second) = (&cluster.urls[0], &cluster.urls[1]);
    let mut a = MySqlConnection::connect(first).await.expect("node 1");
    let mut b = MySqlConnection::connect(second).await.expect("node 2");
    let (ha, hb) = (ns.holder(), ns.holder());

    b.execute("BEGIN").await.expect("begin");
    insert_claim(&mut b, &key, &hb)
        .await
        .expect("insert on node 2");
    assert_eq!(holder_of(&mut b, &key).await, Some(hb), "node 2 reads back");

    a.execute("BEGIN").await.expect("begin");
    insert_claim(&mut a, &key, &ha)
        .await
        .expect("insert on node 1");
    assert_eq!(holder_of(&mut a, &key).await, Some(ha), "node 1 reads back");
    a.execute("COMMIT").await.expect("node 1 commits first");

    let lost = b
        .execute("COMMIT")
        .await
        .expect_err("node 2's COMMIT must fail: node 1 committed the key first");
    assert_eq!(number(&lost), Some(1213), "{lost}");
    assert!(is_lost_race(&lost), "the store must retry on {lost}");

    // The store on node 2, asked again, finds node 1's claim in flight.
    let again = conformance::request(&ns, key, 1, 1500, conformance::T0);
    match cluster.stores[1].claim(again).await.expect("claim") {
        RawClaim::InFlight(row) => assert_eq!(row.holder, ha),
        other => panic!("expected node 1's claim in flight, got {other:?}"),
    }
    drop((a, b));
    cluster.drop().await;
}

/// The claim's conditional insert, as the store makes it
/// (`toolgate_store::mysql::sql::INSERT_CLAIM`), written out with the
/// columns this test sets, so that it does not follow that statement's
/// bind list: the columns later migrations add (`executor`) have defaults.
const INSERT_CLAIM: &str = "INSERT INTO toolgate_claims \
    (operation_key, fingerprint, tool, arguments, scope, version_seen, proposer, \
     status, holder, lease_expires_at, claimed_at) \
    VALUES (?, ?, ?, ?, ?, ?, ?, 'in_flight', ?, ?, ?) \
    ON DUPLICATE KEY UPDATE operation_key = operation_key";

/// The conditional insert of a claim for `key` held by `holder`, with the
/// fingerprint and a live lease the conformance requests use, so that the
/// store's own claims meet it as the same operation in flight.
async fn insert_claim(
    conn: &mut MySqlConnection,
    key: &OperationKey,
    holder: &HolderToken,
) -> Result<(), sqlx::Error> {
    let UnixMillis(t0) = conformance::T0;
    sqlx::query(INSERT_CLAIM)
        .bind(key.as_bytes().as_slice())
        .bind(support::fingerprint().as_bytes().as_slice())
        .bind("apply_goodwill_credit")
        .bind(r#"{"amount_minor":1500,"reason_code":"late_delivery"}"#)
        .bind(r#"{"customer":"c-1","ticket":"t-9"}"#)
        .bind("7")
        .bind("agent:1")
        .bind(holder.as_bytes().as_slice())
        .bind(t0 + 3_600_000)
        .bind(t0)
        .execute(&mut *conn)
        .await
        .map(drop)
}

/// The holder token of `key`'s row, read inside the caller's transaction.
async fn holder_of(conn: &mut MySqlConnection, key: &OperationKey) -> Option<HolderToken> {
    let raw: Option<Vec<u8>> =
        sqlx::query_scalar("SELECT holder FROM toolgate_claims WHERE operation_key = ?")
            .bind(key.as_bytes().as_slice())
            .fetch_optional(&mut *conn)
            .await
            .expect("read back");
    raw.map(|b| HolderToken::from_bytes(b.try_into().expect("16-byte holder")))
}

/// Races whose attempts are spread over the nodes: for each key, attempt
/// `w` runs on node `w % nodes`, all in flight together. Exactly one attempt
/// per key wins; every other one, on whichever node, sees that winner in
/// flight. Then a fresh attempt on every node finds the same winner: a
/// node that has not applied the winning write set yet inserts, reads back
/// its own token, fails certification at COMMIT and retries, so the
/// answer does not depend on replication lag.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn races_spread_over_the_nodes_have_one_winner_each() {
    let _serial = serial().await;
    const KEYS: u32 = 24;
    const ATTEMPTS: u32 = 12;
    let Some(cluster) = Cluster::create().await else {
        return;
    };
    let nodes = cluster.stores.len();
    let ns = Arc::new(Namespace::new(support::random16()));
    let mut tasks = Vec::new();
    for k in 0..KEYS {
        for w in 0..ATTEMPTS {
            let key = ns.key(211, k);
            let req = conformance::request(&ns, key, 1, 100 + w, conformance::T0);
            let store = Arc::clone(&cluster.stores[w as usize % nodes]);
            tasks.push((k, tokio::spawn(async move { store.claim(req).await })));
        }
    }
    let mut winners: Vec<Vec<HolderToken>> = vec![Vec::new(); KEYS as usize];
    let mut seen: Vec<Vec<HolderToken>> = vec![Vec::new(); KEYS as usize];
    for (k, task) in tasks {
        match task.await.expect("task").expect("claim") {
            RawClaim::Acquired(lease) => winners[k as usize].push(lease.holder),
            RawClaim::InFlight(row) => {
                assert_eq!(row.key, ns.key(211, k));
                seen[k as usize].push(row.holder);
            }
            other => panic!("key {k}: unexpected {other:?}"),
        }
    }
    for k in 0..KEYS {
        let i = k as usize;
        assert_eq!(winners[i].len(), 1, "key {k}: winners {:?}", winners[i]);
        let winner = winners[i][0];
        assert_eq!(seen[i].len(), (ATTEMPTS - 1) as usize, "key {k}");
        assert!(
            seen[i].iter().all(|h| *h == winner),
            "key {k}: a loser saw another holder than the winner {winner:?}: {:?}",
            seen[i]
        );
        for (n, store) in cluster.stores.iter().enumerate() {
            let req = conformance::request(&ns, ns.key(211, k), 1, 1, conformance::T0);
            match store.claim(req).await.expect("claim") {
                RawClaim::InFlight(row) => {
                    assert_eq!(row.holder, winner, "key {k} on node {}", n + 1);
                }
                other => panic!("key {k} on node {}: {other:?}", n + 1),
            }
        }
    }
    cluster.drop().await;
}

/// The shared conformance suite on one store that names all three nodes
/// in its URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_multi_host_store_passes_the_conformance_suite() {
    let _serial = serial().await;
    let Some(cluster) = Cluster::create().await else {
        return;
    };
    let store = cluster.multi_host_store(16).await;
    assert_eq!(store.node_count(), cluster.urls.len());
    let store = store.with_clock(support::suite_clock);
    support::conformance(Arc::new(store)).await;
    cluster.drop().await;
}

/// What to do to the cluster while a race runs.
#[derive(Clone, Copy, Debug)]
enum Fault {
    None,
    /// `kill -9` node N once a third of the tickets are done; restart it
    /// when the race is over.
    Kill(u32),
    /// SIGSTOP node N for 10 s once a third of the tickets are done.
    Pause(u32),
}

const CLIENTS: u32 = 12;
const TICKETS: u32 = 150;

/// What one client got for one ticket.
#[derive(Debug)]
enum Got {
    /// Won the claim; `true` when the completion (the credit) was recorded.
    Won(HolderToken, bool),
    /// Saw another holder's claim, in flight or completed.
    Saw(HolderToken),
    /// A store error (only under a fault).
    Failed(StoreErrorKind, String),
}

/// The cluster script, run on the directory CI gave (`DIR_VAR`); `None`
/// after saying so when no directory is given and the cluster is not
/// required.
fn cluster_dir() -> Option<String> {
    match std::env::var(DIR_VAR) {
        Ok(dir) if !dir.is_empty() => Some(dir),
        _ => {
            assert!(
                std::env::var(REQUIRE_VAR).as_deref() != Ok("1"),
                "{REQUIRE_VAR}=1 but {DIR_VAR} is not set: the node fault tests cannot run"
            );
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {DIR_VAR} is not set, so this node fault test did not run"
            );
            None
        }
    }
}

fn script(dir: &str, args: &[&str]) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/galera-cluster.sh"
    );
    let status = std::process::Command::new("bash")
        .arg(path)
        .args(args)
        .arg(dir)
        .status()
        .expect("run scripts/galera-cluster.sh");
    assert!(status.success(), "galera-cluster.sh {args:?}: {status}");
}

/// Restarts node N when dropped, so a failing fault test leaves the
/// cluster whole for the next one.
struct Restart(Option<(String, u32)>);

impl Drop for Restart {
    fn drop(&mut self) {
        if let Some((dir, n)) = self.0.take() {
            script(&dir, &["node-start", &n.to_string()]);
        }
    }
}

/// The 12 × 150 race: twelve clients, each a store naming all three nodes
/// and starting on the next one in turn, claim each of 150 tickets
/// together; the winner completes its claim (the credit, with its audit
/// entry). Checks, per ticket: at most one winner (exactly one without a
/// fault), every other client saw that winner, at most one completion and
/// one audit entry, and every unknown commit settled by reading back.
async fn race(fault: Fault) {
    let dir = match fault {
        Fault::None => None,
        Fault::Kill(_) | Fault::Pause(_) => match cluster_dir() {
            Some(dir) => Some(dir),
            None => return,
        },
    };
    let Some(cluster) = Cluster::create().await else {
        return;
    };
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(Arc::new(cluster.multi_host_store(2).await));
    }
    let mut used: Vec<usize> = clients.iter().map(|c| c.node_in_use()).collect();
    used.sort_unstable();
    used.dedup();
    assert_eq!(used.len(), cluster.urls.len(), "clients on nodes {used:?}");

    let ns = Arc::new(Namespace::new(support::random16()));
    let barriers: Arc<Vec<Barrier>> = Arc::new(
        (0..TICKETS)
            .map(|_| Barrier::new(CLIENTS as usize))
            .collect(),
    );
    let done = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        let (client, ns, barriers, done) = (
            Arc::clone(client),
            Arc::clone(&ns),
            Arc::clone(&barriers),
            Arc::clone(&done),
        );
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::with_capacity(TICKETS as usize);
            for t in 0..TICKETS {
                barriers[t as usize].wait().await;
                got.push(one_ticket(&client, &ns, t, c as u32).await);
                if c == 0 {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
            got
        }));
    }
    // The fault, a third of the way through (client 0's progress).
    let mut restart = Restart(None);
    let fault_task = match (fault, dir) {
        (Fault::None, _) | (_, None) => None,
        (fault, Some(dir)) => {
            while done.load(Ordering::Relaxed) < TICKETS / 3 {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Some(match fault {
                Fault::Kill(n) => {
                    script(&dir, &["node-kill", &n.to_string()]);
                    restart = Restart(Some((dir, n)));
                    None
                }
                Fault::Pause(n) => Some(tokio::task::spawn_blocking(move || {
                    script(&dir, &["node-pause", &n.to_string(), "10"]);
                })),
                Fault::None => None,
            })
        }
    };
    let mut all: Vec<Vec<Got>> = Vec::new();
    for task in tasks {
        all.push(
            tokio::time::timeout(std::time::Duration::from_secs(900), task)
                .await
                .expect("the race did not end within 15 minutes")
                .expect("client task"),
        );
    }
    if let Some(Some(pause)) = fault_task {
        pause.await.expect("node-pause");
    }
    drop(restart);
    // The check below attaches a store again, and migrating (even a no-op)
    // waits on a node still catching up: let every node rejoin first.
    all_synced(&cluster.urls).await;

    let mut counts = FailoverCounts::default();
    for c in &clients {
        let n = c.failover_counts();
        counts.failovers += n.failovers;
        counts.unknown_commits += n.unknown_commits;
        counts.settled_by_read_back += n.settled_by_read_back;
        counts.unsettled += n.unsettled;
    }
    let failed: Vec<&Got> = all
        .iter()
        .flatten()
        .filter(|g| matches!(g, Got::Failed(..)))
        .collect();
    let _ = writeln!(
        std::io::stderr(),
        "race under {fault:?}: {counts:?}, {} store errors {:?}",
        failed.len(),
        failed.iter().take(5).collect::<Vec<_>>()
    );
    assert_eq!(
        counts.unsettled, 0,
        "every unknown commit must be settled by reading back: {counts:?}"
    );
    if matches!(fault, Fault::None) {
        assert!(
            failed.is_empty(),
            "store errors without a fault: {failed:?}"
        );
    }
    for f in &failed {
        let Got::Failed(kind, message) = f else {
            unreachable!()
        };
        // An attempt cut off by the fault may fail, but only as the
        // store's infrastructure errors, never as a wrong answer.
        assert!(
            matches!(
                kind,
                StoreErrorKind::Unavailable
                    | StoreErrorKind::OutcomeUnknown
                    | StoreErrorKind::Contention
                    | StoreErrorKind::Database
            ),
            "{kind:?}: {message}"
        );
    }

    // Read every ticket back on a fresh store, causally.
    let check = cluster.multi_host_store(4).await;
    for t in 0..TICKETS {
        let key = ns.key(220, t);
        let winners: Vec<(HolderToken, bool)> = all
            .iter()
            .filter_map(|g| match &g[t as usize] {
                Got::Won(h, credited) => Some((*h, *credited)),
                _ => None,
            })
            .collect();
        assert!(winners.len() <= 1, "ticket {t}: two winners {winners:?}");
        let row = check.fetch(&key).await.expect("fetch");
        let trail = check.audit_trail(&key, 10).await.expect("audit trail");
        assert!(trail.len() <= 1, "ticket {t}: {} credits", trail.len());
        match (winners.first(), row) {
            (Some((winner, credited)), Some(row)) => {
                assert_eq!(row.holder, *winner, "ticket {t}");
                if *credited {
                    assert_eq!(trail.len(), 1, "ticket {t}: the credit's audit entry");
                    assert!(row.completion.is_some(), "ticket {t}: completed");
                }
                for g in &all {
                    if let Got::Saw(h) = &g[t as usize] {
                        assert_eq!(h, winner, "ticket {t}: a loser saw another holder");
                    }
                }
            }
            (Some(_), None) => panic!("ticket {t}: a winner but no row"),
            (None, row) => {
                // Every client of this ticket failed: valid only under a
                // fault, and then whatever holds the row, no client was
                // told it won.
                assert!(!matches!(fault, Fault::None), "ticket {t}: no winner");
                if let Some(row) = row {
                    assert!(
                        all.iter().all(|g| match &g[t as usize] {
                            Got::Saw(h) => *h == row.holder,
                            _ => true,
                        }),
                        "ticket {t}"
                    );
                }
            }
        }
        if matches!(fault, Fault::None) {
            assert_eq!(winners.len(), 1, "ticket {t}");
            assert!(winners[0].1, "ticket {t}: the winner's credit");
        }
    }
    for c in clients {
        c.pool().close().await;
    }
    check.pool().close().await;
    cluster.drop().await;
}

/// One client's claim on ticket `t`, and the completion if it won.
async fn one_ticket(store: &MySqlClaimStore, ns: &Namespace, t: u32, c: u32) -> Got {
    let key = ns.key(220, t);
    let req = conformance::request(ns, key, 1, 100 + c, conformance::T0);
    let holder = *req.holder();
    match store.claim(req).await {
        Ok(RawClaim::Acquired(lease)) => {
            assert_eq!(lease.holder, holder);
            let now = conformance::T0.plus_millis(1_000);
            let result =
                JsonText::result(format!(r#"{{"credit":"{t}","client":{c}}}"#)).expect("result");
            let done = conformance::executed_completion(key, holder, result, now);
            match store.complete(done).await {
                Ok(Completion::Recorded) => Got::Won(holder, true),
                Ok(other) => panic!("ticket {t}: the winner's completion: {other:?}"),
                // The claim stays in flight for reconciliation: valid.
                Err(e) => {
                    let _ = writeln!(std::io::stderr(), "ticket {t}: completion: {e}");
                    Got::Won(holder, false)
                }
            }
        }
        Ok(RawClaim::InFlight(row)) => Got::Saw(row.holder),
        Ok(RawClaim::Completed(row)) => Got::Saw(row.holder),
        Ok(other) => panic!("ticket {t}: unexpected {other:?}"),
        Err(e) => Got::Failed(e.kind(), e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twelve_clients_over_three_nodes_make_one_credit_per_ticket() {
    let _serial = serial().await;
    race(Fault::None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_killed_mid_race_leaves_one_credit_per_ticket() {
    let _serial = serial().await;
    race(Fault::Kill(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_paused_mid_race_leaves_one_credit_per_ticket() {
    let _serial = serial().await;
    race(Fault::Pause(3)).await;
}
