//! Statements per decision on PostgreSQL and MariaDB:
//! the support desk's fresh credit and its replay through the real
//! pipeline (Cedar over the desk's live entities, read in one statement
//! with the ticket's version by `decide_reading_once`, the desk's executor,
//! the claim store), counting every statement the sqlx
//! drivers log (`COMMIT` included, and `BEGIN` on MySQL) with a tracing subscriber
//! on sqlx's own query log, and on MariaDB the pool's pings per fresh
//! credit (the server's `Com_admin_commands`), which show that the pool
//! pings a connection only as it takes it back and that a decision's read,
//! claim and credit share one connection. The counts are the ones documented in
//! docs/benchmarks.md ("Statements per decision"); change one and the
//! other together.

mod support;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use toolgate::pipeline::{Decision, Outcome};
use toolgate_support_desk::SeedTicket;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Counts the events on sqlx's query log target: one per statement sent.
#[derive(Default)]
struct StatementLog {
    count: AtomicUsize,
    summaries: Mutex<Vec<String>>,
}

struct Summary(String);
impl Visit for Summary {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "summary" {
            self.0 = format!("{value:?}");
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "summary" {
            value.clone_into(&mut self.0);
        }
    }
}

struct Counter(Arc<StatementLog>);

impl Subscriber for Counter {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        // Asked again per event: the subscriber is this thread's only.
        tracing::subscriber::Interest::sometimes()
    }
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == "sqlx::query"
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut summary = Summary(String::new());
        event.record(&mut summary);
        // sqlx's MySQL driver sets up each new connection with one
        // `SET sql_mode=…` statement. A pool may open a connection in the
        // middle of any decision (CI saw 19 once against the documented
        // 18), and that statement is the connection's, not the decision's.
        if summary.0.starts_with("SET sql_mode=") {
            return;
        }
        self.0.count.fetch_add(1, Ordering::SeqCst);
        self.0.summaries.lock().unwrap().push(summary.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl StatementLog {
    fn take(&self) -> (usize, Vec<String>) {
        let n = self.count.swap(0, Ordering::SeqCst);
        (n, std::mem::take(&mut *self.summaries.lock().unwrap()))
    }
}

/// Statements per fresh credit and per replay, as documented, and where
/// the server counts them, the pool's pings per fresh credit.
struct Expected {
    fresh: usize,
    replay: usize,
    fresh_pings: Option<u64>,
}

/// PostgreSQL: sqlx sends `BEGIN` as a simple query its log does not
/// show (a round trip all the same), so it is not counted here.
const PG: Expected = Expected {
    fresh: 10,
    replay: 4,
    // PostgreSQL counts no pings (an empty Sync message).
    fresh_pings: None,
};

/// MySQL/MariaDB: `BEGIN` is a statement of its own, and the credit's
/// transaction has none: the claim's `COMMIT AND CHAIN` began it.
/// Pings: the store's pool pings a connection only as it takes it back
/// (`test_before_acquire(false)`), and a fresh credit uses the pool once:
/// its read, its claim, and its credit with the completion all run on the
/// connection the decision holds (`toolgate_store::Session`, made by
/// `session_through_completion`). One ping; two if the credit took a
/// connection of its own, three if the read did too, so a decision that
/// stops holding its connection fails here.
const MYSQL: Expected = Expected {
    fresh: 12,
    replay: 5,
    fresh_pings: Some(1),
};

async fn credit(d: &support::Desk, customer: &str, ticket: &str, reply: &str) -> Decision {
    let proposal = support::Proposal {
        agent: "rt-agent",
        customer,
        ticket,
        seen: 1,
        amount: 1500,
        reason: "damaged_item",
        reply,
    };
    // As `toolgate serve` decides: the decision's session holds a
    // connection, the claim begins on it, and the desk credits on it.
    let parts = d.crediting();
    let mut session = parts.session();
    d.decide_on(&parts, &mut session, &proposal).await
}

async fn count_on(url: &str, expected: &Expected) {
    let d = support::Desk::open(url).await;
    let run = support::hex(&support::random16());
    // A customer per ticket: the desk's daily budget per customer would
    // hold a third 15.00 credit to one customer for a person.
    let tickets: Vec<SeedTicket> = (0..3)
        .map(|i| SeedTicket {
            id: format!("rt-{run}-{i}"),
            customer_id: format!("c-{run}-{i}"),
            assignee: "rt-agent".into(),
            version: 1,
        })
        .collect();
    d.desk.seed(&tickets).await.unwrap();

    let log = Arc::new(StatementLog::default());
    let _guard = tracing::subscriber::set_default(Counter(Arc::clone(&log)));
    // The first credits warm the pools' connections (their set-up
    // statements and prepared statements are not a decision's); the last
    // is counted.
    let mut counter = match expected.fresh_pings {
        Some(_) => Some(
            <sqlx::MySqlConnection as sqlx::Connection>::connect(url)
                .await
                .expect("a connection to read the server's counters"),
        ),
        None => None,
    };
    for (i, ticket) in tickets.iter().enumerate() {
        let last = i + 1 == tickets.len();
        let pings_before = match (last, counter.as_mut()) {
            (true, Some(c)) => Some(mysql_pings(&d, c, Pool::Warm).await),
            _ => None,
        };
        log.take();
        let customer = &ticket.customer_id;
        let fresh = credit(&d, customer, &ticket.id, "Done.").await;
        let (fresh_n, fresh_sql) = log.take();
        assert_eq!(fresh.outcome(), Outcome::Executed, "{fresh:?}");
        if let (Some(before), Some(pings), Some(c)) =
            (pings_before, expected.fresh_pings, counter.as_mut())
        {
            let after = mysql_pings(&d, c, Pool::AsItIs).await;
            // The counter's own statement is no decision's.
            log.take();
            assert_eq!(
                after - before,
                pings,
                "pool pings per fresh credit on {}",
                toolgate_store::redact_url(url)
            );
        }
        let replay = credit(&d, customer, &ticket.id, "Did it.").await;
        let (replay_n, replay_sql) = log.take();
        assert_eq!(replay.outcome(), Outcome::Replayed, "{replay:?}");
        if i + 1 < tickets.len() {
            continue;
        }
        // The won claim commits and chains the credit's transaction, which
        // then commits: one of each, on either backend.
        let ends = |sql: &str| fresh_sql.iter().filter(|s| s.as_str() == sql).count();
        assert_eq!(
            (ends("COMMIT AND CHAIN"), ends("COMMIT")),
            (1, 1),
            "a fresh credit's commits on {}: {fresh_sql:#?}",
            toolgate_store::redact_url(url)
        );
        assert_eq!(
            (fresh_n, replay_n),
            (expected.fresh, expected.replay),
            "statements per fresh credit and per replay on {}: {fresh_sql:#?} {replay_sql:#?}",
            toolgate_store::redact_url(url)
        );
    }
}

/// How a ping count is read: `Warm` first makes the store's transaction
/// pool hold three connections, so that each acquire of the decision then
/// takes an idle connection (pinged) rather than opening one (not pinged).
#[derive(PartialEq)]
enum Pool {
    Warm,
    AsItIs,
}

/// The server's count of pings (`Com_admin_commands`), read on `counter`
/// (a connection outside any pool, which pings nothing) once every
/// connection of the store's transaction pool is idle, so every return,
/// whose ping runs in a task of its own, has happened. Other clients of
/// the server would add to the count: the database tests run one binary at
/// a time.
async fn mysql_pings(d: &support::Desk, counter: &mut sqlx::MySqlConnection, pool: Pool) -> u64 {
    let toolgate_store::AnyClaimStore::MySql(store) = &d.store else {
        panic!("pings are counted on MySQL only");
    };
    let warm = pool == Pool::Warm;
    let pool = store.pool();
    if warm {
        let three = (
            pool.acquire().await.expect("a connection"),
            pool.acquire().await.expect("a second connection"),
            pool.acquire().await.expect("a third connection"),
        );
        drop(three);
    }
    while pool.num_idle() < pool.size() as usize {
        tokio::task::yield_now().await;
    }
    let (_, count): (String, String) =
        sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Com_admin_commands'")
            .fetch_one(&mut *counter)
            .await
            .expect("Com_admin_commands");
    count.parse().expect("a count")
}

#[tokio::test]
async fn statements_per_decision_postgres() {
    let Some(url) = support::database_url("TOOLGATE_TEST_POSTGRES_URL", "PostgreSQL") else {
        return;
    };
    count_on(&url, &PG).await;
}

#[tokio::test]
async fn statements_per_decision_mysql() {
    let Some(url) = support::database_url("TOOLGATE_TEST_MYSQL_URL", "MySQL") else {
        return;
    };
    count_on(&url, &MYSQL).await;
}
