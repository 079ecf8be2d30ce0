//! The application's database, read-only: connecting, preparing a query at
//! start, and running it in a read-only transaction under a time limit.

use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlRow};
use sqlx::pool::PoolOptions;
use sqlx::postgres::{PgConnectOptions, PgPool, PgRow};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteRow};
use sqlx::{AssertSqlSafe, Column, Executor, Row, SqlSafeStr, Statement, TypeInfo, ValueRef};

use crate::params::{self, Dialect, Rewritten};

/// Rows a query may return (an entity query names a few entities; more is
/// a query that forgot its `WHERE`).
pub const MAX_ROWS: usize = 100;

/// Why a query gave no rows to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// The database did not answer this time (down, a timeout, a pool
    /// exhausted, an error while it ran the query): a retry may succeed.
    Unavailable(String),
    /// The query answered, and its answer cannot be read: more rows than
    /// [`MAX_ROWS`], a column of a type the reader does not take (a
    /// `NUMERIC`, a `REAL`), an integer beyond i64. Every retry of the same
    /// request meets it: a deployment error, never a retry-later.
    Unreadable(String),
}

impl FetchError {
    /// What went wrong.
    pub fn message(&self) -> &str {
        match self {
            Self::Unavailable(m) | Self::Unreadable(m) => m,
        }
    }
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

/// A value bound to a named parameter: a canonical scope value or the
/// actor's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bind {
    /// A JSON integer.
    Int(i64),
    /// A JSON string.
    Text(String),
}

/// A column's value, in the types Cedar and a version can hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    /// SQL NULL.
    Null,
    /// Any integer type.
    Int(i64),
    /// Any character type.
    Text(String),
    /// A boolean.
    Bool(bool),
}

/// One row: (column name, value) in the query's column order.
pub type Cells = Vec<(String, Cell)>;

/// A query as written, rewritten for the backend.
#[derive(Debug, Clone)]
pub struct Query {
    /// The text in the deployment file (for messages).
    pub written: String,
    /// The backend's text and bind order.
    pub rewritten: Rewritten,
    /// The column names the database reported when it was prepared.
    pub columns: Vec<String>,
    /// The SQL type the database reported for each column, in the same
    /// order (SQLite: the declared type, or `NULL` for an expression).
    pub column_types: Vec<String>,
    /// The type the database inferred for each distinct parameter, in
    /// bind order, where it says (PostgreSQL); empty otherwise.
    pub param_types: Vec<String>,
}

/// A pool on a database server: `max_connections`, waiting for one as
/// long as a query may run but at least 5 s.
fn server_pool<DB: sqlx::Database>(max_connections: u32, timeout: Duration) -> PoolOptions<DB> {
    PoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(timeout.max(Duration::from_secs(5)))
}

/// Opens `pool` on `opts`, one connection at least; the error names no URL.
async fn open<DB: sqlx::Database>(
    pool: PoolOptions<DB>,
    opts: <DB::Connection as sqlx::Connection>::Options,
) -> Result<sqlx::Pool<DB>, String> {
    pool.connect_with(opts)
        .await
        .map_err(|e| format!("connecting: {e}"))
}

/// A pool on the application's database.
#[derive(Debug, Clone)]
pub enum AppDb {
    /// SQLite, opened read-only.
    Sqlite(SqlitePool, Duration),
    /// PostgreSQL.
    Postgres(PgPool, Duration),
    /// MySQL or MariaDB.
    MySql(MySqlPool, Duration),
}

impl AppDb {
    /// Connects (one connection at least, so a wrong URL or password is a
    /// start-time error). The URL is never repeated in an error: it may
    /// hold a password.
    pub async fn connect(
        url: &str,
        max_connections: u32,
        timeout: Duration,
    ) -> Result<Self, String> {
        let scheme = url.split(':').next().unwrap_or("");
        let ms = timeout.as_millis();
        match scheme {
            "sqlite" => {
                // Read-only at the connection: a query cannot write even if
                // it tries (SQLite has no read-only transaction).
                let opts = SqliteConnectOptions::from_str(url)
                    .map_err(|e| format!("not a SQLite URL: {e}"))?
                    .read_only(true)
                    .busy_timeout(timeout);
                let pool = SqlitePoolOptions::new().max_connections(max_connections);
                Ok(Self::Sqlite(open(pool, opts).await?, timeout))
            }
            "postgres" | "postgresql" => {
                let opts = PgConnectOptions::from_str(url)
                    .map_err(|e| format!("not a PostgreSQL URL: {e}"))?;
                let pool = server_pool(max_connections, timeout);
                Ok(Self::Postgres(open(pool, opts).await?, timeout))
            }
            "mysql" | "mariadb" => {
                let opts = MySqlConnectOptions::from_str(url)
                    .map_err(|e| format!("not a MySQL URL: {e}"))?;
                let pool = server_pool::<sqlx::MySql>(max_connections, timeout)
                    // The server-side limit, set once per connection: MariaDB
                    // and MySQL name it differently (seconds vs
                    // milliseconds), and neither takes it per transaction.
                    .after_connect(move |conn, _| {
                        Box::pin(async move {
                            let version: String = sqlx::query_scalar("SELECT VERSION()")
                                .fetch_one(&mut *conn)
                                .await?;
                            let set = if version.contains("MariaDB") {
                                format!(
                                    "SET SESSION max_statement_time = {}.{:03}",
                                    ms / 1000,
                                    ms % 1000
                                )
                            } else {
                                format!("SET SESSION max_execution_time = {ms}")
                            };
                            conn.execute(AssertSqlSafe(set)).await?;
                            Ok(())
                        })
                    });
                Ok(Self::MySql(open(pool, opts).await?, timeout))
            }
            _ => Err(format!(
                "scheme `{scheme}:` is not sqlite:, postgres: or mysql:"
            )),
        }
    }

    /// The backend's dialect.
    pub fn dialect(&self) -> Dialect {
        match self {
            Self::Sqlite(..) => Dialect::Sqlite,
            Self::Postgres(..) => Dialect::Postgres,
            Self::MySql(..) => Dialect::MySql,
        }
    }

    /// Rewrites and prepares `sql` against the database: a syntax error, a
    /// missing table or column is an error now, not at the first decision.
    pub async fn prepare(&self, sql: &str) -> Result<Query, String> {
        let rewritten = params::rewrite(sql, self.dialect())?;
        let text = rewritten.sql.clone();
        // A connection of its own, closed after: the statement it caches
        // was prepared without parameter types, and PostgreSQL would keep
        // the types it inferred for it.
        let (columns, column_types, params, param_types) = match self {
            Self::Sqlite(pool, _) => prepare_alone(pool, text).await?,
            Self::Postgres(pool, _) => prepare_alone(pool, text).await?,
            Self::MySql(pool, _) => prepare_alone(pool, text).await?,
        };
        // PostgreSQL counts distinct names ($n), the others each `?`: both
        // are the bind list's length.
        let distinct = rewritten.binds.len();
        if let Some(n) = params
            && n != distinct
        {
            return Err(format!(
                "the database sees {n} parameters, the query names {distinct}"
            ));
        }
        Ok(Query {
            written: sql.to_owned(),
            rewritten,
            columns,
            column_types,
            param_types,
        })
    }

    /// Runs `query` with `binds` (one per name in its bind order) in a
    /// read-only transaction, under the statement time limit.
    pub async fn fetch(&self, query: &Query, binds: &[Bind]) -> Result<Vec<Cells>, FetchError> {
        let timeout = match self {
            Self::Sqlite(_, t) | Self::Postgres(_, t) | Self::MySql(_, t) => *t,
        };
        // The client-side bound covers what the server's limit does not: a
        // pool exhausted, a network stall, SQLite (which has none).
        let work = self.fetch_inner(query, binds, timeout);
        let rows = tokio::time::timeout(timeout + Duration::from_millis(500), work)
            .await
            .map_err(|_| {
                FetchError::Unavailable(format!(
                    "the query took longer than {} ms",
                    timeout.as_millis()
                ))
            })??;
        if rows.len() > MAX_ROWS {
            return Err(FetchError::Unreadable(format!(
                "the query returned more than {MAX_ROWS} rows"
            )));
        }
        Ok(rows)
    }

    async fn fetch_inner(
        &self,
        query: &Query,
        binds: &[Bind],
        timeout: Duration,
    ) -> Result<Vec<Cells>, FetchError> {
        let down = |e: sqlx::Error| FetchError::Unavailable(e.to_string());
        let sql = query.rewritten.sql.clone();
        match self {
            Self::Sqlite(pool, _) => {
                let q = bound::<sqlx::Sqlite>(sql, binds);
                let rows = q.fetch_all(pool).await.map_err(down)?;
                read_rows(&rows, sqlite_cell)
            }
            Self::Postgres(pool, _) => {
                let mut tx = pool.begin_with("BEGIN READ ONLY").await.map_err(down)?;
                let set = format!("SET LOCAL statement_timeout = {}", timeout.as_millis());
                (&mut *tx).execute(AssertSqlSafe(set)).await.map_err(down)?;
                let q = bound::<sqlx::Postgres>(sql, binds);
                let rows = q.fetch_all(&mut *tx).await.map_err(down)?;
                tx.rollback().await.map_err(down)?;
                read_rows(&rows, pg_cell)
            }
            Self::MySql(pool, _) => {
                let mut tx = pool
                    .begin_with("START TRANSACTION READ ONLY")
                    .await
                    .map_err(down)?;
                let q = bound::<sqlx::MySql>(sql, binds);
                let rows = q.fetch_all(&mut *tx).await.map_err(down)?;
                tx.rollback().await.map_err(down)?;
                read_rows(&rows, mysql_cell)
            }
        }
    }
}

/// `sql` with `binds` bound in order.
fn bound<'a, DB>(sql: String, binds: &[Bind]) -> sqlx::query::Query<'a, DB, DB::Arguments>
where
    DB: sqlx::Database,
    i64: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    String: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    let mut q = sqlx::query(AssertSqlSafe(sql));
    for b in binds {
        q = match b {
            Bind::Int(i) => q.bind(*i),
            Bind::Text(s) => q.bind(s.clone()),
        };
    }
    q
}

/// Column names and types, parameter count and parameter types (where the
/// backend infers them) of a prepared statement.
type Described = (Vec<String>, Vec<String>, Option<usize>, Vec<String>);

/// Prepares `sql` on a connection of its own and closes it (see
/// [`AppDb::prepare`]): the same steps on every backend.
async fn prepare_alone<DB>(pool: &sqlx::Pool<DB>, sql: String) -> Result<Described, String>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let mut conn = pool.acquire().await.map_err(|e| e.to_string())?;
    let st = (&mut *conn)
        .prepare(AssertSqlSafe(sql).into_sql_str())
        .await
        .map_err(|e| e.to_string())?;
    let out = describe(&st);
    conn.close().await.map_err(|e| e.to_string())?;
    Ok(out)
}

fn describe<S: Statement>(st: &S) -> Described {
    let columns = st.columns().iter().map(|c| c.name().to_owned()).collect();
    let column_types = st
        .columns()
        .iter()
        .map(|c| c.type_info().name().to_owned())
        .collect();
    let mut types = Vec::new();
    let params = st.parameters().map(|p| match p {
        sqlx::Either::Left(list) => {
            types = list.iter().map(|t| t.name().to_owned()).collect();
            list.len()
        }
        sqlx::Either::Right(n) => n,
    });
    (columns, column_types, params, types)
}

/// What a column's values become, judged from the type the database
/// reported when the query was prepared: the same names the row readers
/// below take, so a query `config check` accepts is one they can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// Read as an integer (a Cedar long; a version).
    Int,
    /// Read as text (a Cedar string; a version).
    Text,
    /// Read as a boolean (a Cedar boolean).
    Bool,
    /// Known only per value: SQLite types values, not columns, and an
    /// expression's column has no declared type. Each value is read as
    /// what it holds (integer or text; a REAL or BLOB is refused then).
    PerValue,
}

/// The kind of a column of SQL type `type_name` on `dialect`, or `None`
/// when the readers cannot take it (a `DATE`, a `NUMERIC`, a `JSON`, …).
pub fn column_kind(dialect: Dialect, type_name: &str) -> Option<ColumnKind> {
    let upper = type_name.to_ascii_uppercase();
    match dialect {
        Dialect::Postgres => match upper.as_str() {
            "INT2" | "INT4" | "INT8" => Some(ColumnKind::Int),
            "BOOL" => Some(ColumnKind::Bool),
            "TEXT" | "VARCHAR" | "BPCHAR" | "NAME" => Some(ColumnKind::Text),
            _ => None,
        },
        Dialect::MySql => match upper.as_str() {
            // TINYINT(1), which `BOOLEAN` declares.
            "BOOLEAN" => Some(ColumnKind::Bool),
            "TINYINT" | "SMALLINT" | "MEDIUMINT" | "INT" | "BIGINT" | "TINYINT UNSIGNED"
            | "SMALLINT UNSIGNED" | "MEDIUMINT UNSIGNED" | "INT UNSIGNED" | "BIGINT UNSIGNED" => {
                Some(ColumnKind::Int)
            }
            "VARCHAR" | "CHAR" | "TEXT" | "TINYTEXT" | "MEDIUMTEXT" | "LONGTEXT" | "ENUM" => {
                Some(ColumnKind::Text)
            }
            _ => None,
        },
        // A declared REAL or BLOB column holds floats or bytes, which no
        // reader takes; every other declaration (a DATE holds text, a
        // NUMERIC integers or text) is judged per value.
        Dialect::Sqlite => match upper.as_str() {
            "BOOLEAN" => Some(ColumnKind::Bool),
            "INTEGER" => Some(ColumnKind::Int),
            "TEXT" => Some(ColumnKind::Text),
            "REAL" | "BLOB" => None,
            _ => Some(ColumnKind::PerValue),
        },
    }
}

/// The rows' cells: a value the reader cannot take is
/// [`FetchError::Unreadable`] (the same rows give the same error again).
fn read_rows<R>(rows: &[R], cell: ReadCell<R>) -> Result<Vec<Cells>, FetchError>
where
    R: Row,
    usize: sqlx::ColumnIndex<R>,
{
    rows.iter()
        .map(|r| row_cells(r, cell).map_err(FetchError::Unreadable))
        .collect()
}

/// A backend's reader of one non-NULL value, at a column index.
type ReadCell<R> = fn(&R, usize, &Sql<'_>) -> Result<Cell, String>;

/// A non-NULL value's column, as the backend types it.
struct Sql<'a> {
    /// The column's name.
    name: &'a str,
    /// The column's declared type.
    declared: &'a str,
    /// The value's own type (SQLite types values, not columns).
    actual: &'a str,
}

impl Sql<'_> {
    /// A failed read of this column.
    fn error(&self, e: sqlx::Error) -> String {
        format!("column `{}`: {e}", self.name)
    }

    /// A type no Cedar value or version is read from.
    fn unsupported(&self, type_name: &str) -> String {
        unsupported(self.name, type_name)
    }
}

/// One row's cells in column order: NULL for NULL, any other value as
/// the backend's `cell` reads it.
fn row_cells<R>(row: &R, cell: ReadCell<R>) -> Result<Cells, String>
where
    R: Row,
    usize: sqlx::ColumnIndex<R>,
{
    let mut out = Vec::with_capacity(row.len());
    for (i, col) in row.columns().iter().enumerate() {
        let name = col.name().to_owned();
        let raw = row.try_get_raw(i).map_err(|e| e.to_string())?;
        if raw.is_null() {
            out.push((name, Cell::Null));
            continue;
        }
        let actual = raw.type_info().name().to_owned();
        let sql = Sql {
            name: &name,
            declared: col.type_info().name(),
            actual: &actual,
        };
        let value = cell(row, i, &sql)?;
        out.push((name, value));
    }
    Ok(out)
}

fn unsupported(column: &str, type_name: &str) -> String {
    format!(
        "column `{column}` has SQL type {type_name}: cast it to an integer, text or boolean in the query"
    )
}

fn pg_cell(row: &PgRow, i: usize, sql: &Sql<'_>) -> Result<Cell, String> {
    let get = |e| sql.error(e);
    Ok(match sql.declared {
        "INT2" => Cell::Int(row.try_get::<i16, _>(i).map_err(get)?.into()),
        "INT4" => Cell::Int(row.try_get::<i32, _>(i).map_err(get)?.into()),
        "INT8" => Cell::Int(row.try_get::<i64, _>(i).map_err(get)?),
        "BOOL" => Cell::Bool(row.try_get::<bool, _>(i).map_err(get)?),
        "TEXT" | "VARCHAR" | "BPCHAR" | "NAME" => {
            Cell::Text(row.try_get::<String, _>(i).map_err(get)?)
        }
        other => return Err(sql.unsupported(other)),
    })
}

fn mysql_cell(row: &MySqlRow, i: usize, sql: &Sql<'_>) -> Result<Cell, String> {
    let get = |e| sql.error(e);
    Ok(match sql.declared {
        "BOOLEAN" => Cell::Bool(row.try_get::<bool, _>(i).map_err(get)?),
        "TINYINT" | "SMALLINT" | "MEDIUMINT" | "INT" | "BIGINT" => {
            Cell::Int(row.try_get::<i64, _>(i).map_err(get)?)
        }
        "TINYINT UNSIGNED" | "SMALLINT UNSIGNED" | "MEDIUMINT UNSIGNED" | "INT UNSIGNED"
        | "BIGINT UNSIGNED" => {
            let v = row.try_get::<u64, _>(i).map_err(get)?;
            Cell::Int(
                i64::try_from(v).map_err(|_| format!("column `{}`: {v} exceeds i64", sql.name))?,
            )
        }
        "VARCHAR" | "CHAR" | "TEXT" | "TINYTEXT" | "MEDIUMTEXT" | "LONGTEXT" | "ENUM" => {
            Cell::Text(row.try_get::<String, _>(i).map_err(get)?)
        }
        other => return Err(sql.unsupported(other)),
    })
}

fn sqlite_cell(row: &SqliteRow, i: usize, sql: &Sql<'_>) -> Result<Cell, String> {
    let get = |e| sql.error(e);
    // SQLite types values, not columns; a column declared BOOLEAN holds 0/1
    // integers and reads as a boolean.
    let declared = sql.declared.to_ascii_uppercase();
    Ok(match (declared.as_str(), sql.actual) {
        ("BOOLEAN", "INTEGER") => Cell::Bool(row.try_get::<bool, _>(i).map_err(get)?),
        (_, "INTEGER") => Cell::Int(row.try_get::<i64, _>(i).map_err(get)?),
        (_, "TEXT") => Cell::Text(row.try_get::<String, _>(i).map_err(get)?),
        (_, other) => return Err(sql.unsupported(other)),
    })
}
