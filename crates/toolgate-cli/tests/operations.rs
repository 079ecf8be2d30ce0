//! The operator's commands as an operator runs them: `keys new`, `config
//! check`, where the database URL comes from (`--db`, `TOOLGATE_DB_URL`,
//! the deployment file), password redaction, `RUST_LOG`, `completions`,
//! `man`, and the line `bench serve --floor` prints. Each runs the built
//! binary with a controlled environment.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[path = "support/databases.rs"]
mod support;

#[path = "support/mod.rs"]
mod binary;

use binary::toolgate_env as toolgate;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// A fresh directory under Cargo's per-target temporary directory.
fn scratch(what: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ops-{what}-{}", support::random_hex()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// An existing (empty) SQLite database file, as operator commands need.
fn sqlite_db(dir: &Path) -> String {
    let path = dir.join("claims.db");
    std::fs::File::create(&path).expect("create the database file");
    format!("sqlite://{}", path.display())
}

fn policy() -> String {
    format!("{ROOT}/examples/support-desk/policy.toml")
}

/// `keys new` with `args`: (key, snippet).
fn new_key(args: &[&str]) -> (String, String) {
    let mut all = vec!["keys", "new"];
    all.extend_from_slice(args);
    let run = toolgate(&all, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let key = run.stderr.trim().to_owned();
    (key, run.stdout)
}

/// A deployment file in `dir` with `body` after the policy line.
fn deployment(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("deploy.toml");
    // The example's own wiring: these tests are about the file's other parts.
    let text = format!(
        "policy = {:?}\napplication = \"support-desk\"\n{body}\n",
        policy()
    );
    std::fs::write(&path, text).expect("write the deployment file");
    path
}

/// `toolgate config check` on `config`, the database from
/// TOOLGATE_DB_URL; it must pass: what it printed.
fn config_check_passes(config: &Path, db: &str) -> String {
    let run = toolgate(
        &["config", "check", config.to_str().expect("path")],
        &[("TOOLGATE_DB_URL", db)],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout
}

const GOOD_KEY: &str = "[[keys]]\nsha256 = \"2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\"\n\
                        principal = \"agent-ana\"\ncapabilities = [\"credit:issue\"]\n";

#[test]
fn keys_new_prints_a_prefixed_random_key_once_and_an_entry_with_its_digest() {
    let (key, snippet) = new_key(&["--name", "agent-ana", "--capabilities", "credit:issue"]);
    let hex = key.strip_prefix("tg_").expect("the tg_ prefix");
    assert_eq!(hex.len(), 64, "32 bytes in hex: {key}");
    assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
    assert!(
        !snippet.contains(&key),
        "the key itself is never in the entry"
    );
    assert!(snippet.contains("principal = \"agent-ana\""), "{snippet}");
    assert!(
        snippet.contains("capabilities = [\"credit:issue\"]"),
        "{snippet}"
    );
    assert!(snippet.contains("execution = \"in_process\""), "{snippet}");
    let (other, _) = new_key(&["--name", "agent-ana"]);
    assert_ne!(key, other, "two runs, two keys");
    // Without --name the principal is named after the digest.
    let (_, unnamed) = new_key(&["--mode", "client"]);
    assert!(unnamed.contains("principal = \"key-"), "{unnamed}");
    assert!(unnamed.contains("execution = \"client\""), "{unnamed}");
    // A bad capability or mode is a usage error.
    assert_eq!(toolgate(&["keys", "new", "--mode", "remote"], &[]).code, 2);
    assert_eq!(
        toolgate(&["keys", "new", "--capabilities", "a,,b"], &[]).code,
        2
    );
}

#[test]
fn keys_new_act_for_users_writes_the_flag_and_config_check_shows_it() {
    let (_, snippet) = new_key(&[
        "--name",
        "shop-backend",
        "--capabilities",
        "credit:issue",
        "--mode",
        "client",
        "--act-for-users",
    ]);
    assert!(snippet.contains("act_for_users = true"), "{snippet}");
    let (_, plain) = new_key(&["--name", "agent-ana"]);
    assert!(!plain.contains("act_for_users"), "off by default: {plain}");
    let dir = scratch("act-for-users");
    let config = deployment(&dir, &snippet);
    let db = sqlite_db(&dir);
    let checked = config_check_passes(&config, &db);
    assert!(
        checked.contains("shop-backend capabilities=[credit:issue] execution=client act_for_users"),
        "{checked}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Sends one HTTP/1.1 request and reads the status line's code.
fn http_status(addr: SocketAddr, path: &str, key: &str) -> u16 {
    let mut conn = TcpStream::connect(addr).expect("connect");
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n\
         Connection: close\r\n\r\n"
    )
    .expect("send");
    let mut text = String::new();
    conn.read_to_string(&mut text).expect("read");
    text.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"))
}

#[test]
fn a_key_from_keys_new_passes_config_check_and_authenticates_with_serve() {
    let dir = scratch("serve");
    let (key, snippet) = new_key(&["--name", "ops-1", "--capabilities", "toolgate:operate"]);
    // The entry appended as printed, to a file with no `db`: the database
    // comes from TOOLGATE_DB_URL.
    let config = deployment(&dir, &snippet);
    let db = sqlite_db(&dir);
    let checked = config_check_passes(&config, &db);
    assert!(
        checked.contains("ops-1 capabilities=[toolgate:operate] execution=in_process"),
        "{checked}"
    );
    assert!(checked.contains("from TOOLGATE_DB_URL"), "{checked}");

    let log_path = dir.join("serve.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"])
        .env("TOOLGATE_DB_URL", &db)
        // Only warnings and errors: the INFO start line must not appear.
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).expect("log file"))
        .spawn()
        .expect("spawn toolgate serve");
    let stdout = child.stdout.take().expect("stdout");
    // Lines until the start line; EOF (the server exited) ends the wait.
    let addr = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("listening on http://").map(str::to_owned));
    let statuses = addr.map(|a| {
        let addr: SocketAddr = a.parse().expect("address");
        (
            http_status(addr, "/v1/claims?stuck=true", &key),
            http_status(addr, "/v1/claims?stuck=true", "tg_not_a_configured_key"),
        )
    });
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let (with_key, without) = statuses.unwrap_or_else(|| panic!("serve did not start:\n{log}"));
    assert_eq!(with_key, 200, "the new key is refused; log:\n{log}");
    assert_eq!(without, 401);
    assert!(
        !log.contains("\"level\":\"INFO\""),
        "RUST_LOG=warn let INFO through:\n{log}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn config_check_reports_a_good_file() {
    let dir = scratch("good");
    let db = sqlite_db(&dir);
    let config = deployment(
        &dir,
        &format!("listen = \"127.0.0.1:9090\"\ndb = {db:?}\nlease_ms = 5000\n{GOOD_KEY}"),
    );
    let run = toolgate(&["config", "check", config.to_str().expect("path")], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for want in [
        "ok",
        "listen 127.0.0.1:9090",
        "(SQLite, from `db` in",
        "1 tool (apply_goodwill_credit)",
        "cedar: the support desk's policies",
        "keys: 1",
        "agent-ana capabilities=[credit:issue] execution=in_process",
        "lease 5000 ms",
    ] {
        assert!(run.stdout.contains(want), "no {want:?} in:\n{}", run.stdout);
    }
    // Nothing was started or created: the check connects to nothing.
    let gone = dir.join("never.db");
    let config = deployment(
        &dir,
        &format!("db = \"sqlite://{}\"\n{GOOD_KEY}", gone.display()),
    );
    assert_eq!(
        toolgate(&["config", "check", config.to_str().expect("path")], &[]).code,
        0
    );
    assert!(!gone.exists(), "config check created the database");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn config_check_names_the_file_and_field_of_each_problem() {
    let dir = scratch("bad");
    let db = format!("db = {:?}\n", sqlite_db(&dir));
    let missing = dir.join("no-such-ca.pem");
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "unknown field",
            format!("{db}lease = 5\n{GOOD_KEY}"),
            "lease",
        ),
        ("no keys", db.clone(), "keys"),
        (
            "bad digest",
            format!("{db}[[keys]]\nsha256 = \"abc\"\nprincipal = \"a\"\n"),
            "keys[0].sha256",
        ),
        (
            "bad execution",
            format!("{db}{GOOD_KEY}execution = \"remote\"\n"),
            "keys[0].execution",
        ),
        (
            "one principal twice",
            format!(
                "{db}{GOOD_KEY}[[keys]]\nsha256 = \"{}\"\nprincipal = \"agent-ana\"\n",
                "0".repeat(64)
            ),
            "keys: api keys: principal \"agent-ana\" has two keys",
        ),
        (
            "zero lease",
            format!("{db}lease_ms = 0\n{GOOD_KEY}"),
            "lease_ms",
        ),
        (
            "unknown scheme",
            format!("db = \"redis://127.0.0.1/0\"\n{GOOD_KEY}"),
            "db: the database URL must start with sqlite://",
        ),
        (
            "missing CA file",
            format!(
                "db = \"postgres://u@127.0.0.1/t?sslmode=verify-full&sslrootcert={}\"\n{GOOD_KEY}",
                missing.display()
            ),
            "db: postgres://u@127.0.0.1/t?sslmode=verify-full",
        ),
        (
            "bad sslmode, password hidden",
            format!("db = \"postgres://u:hunter2@127.0.0.1/t?sslmode=sometimes\"\n{GOOD_KEY}"),
            "db: postgres://u:***@127.0.0.1/t",
        ),
        (
            "bad Cedar",
            format!("{db}cedar = \"policy.cedar\"\n{GOOD_KEY}"),
            "cedar",
        ),
    ];
    std::fs::write(dir.join("policy.cedar"), "permit(principal, action,").expect("cedar");
    for (what, body, want) in cases {
        let config = deployment(&dir, &body);
        let run = toolgate(&["config", "check", config.to_str().expect("path")], &[]);
        assert_eq!(run.code, 2, "{what}: {}{}", run.stdout, run.stderr);
        let prefix = format!("toolgate config check: {}: ", config.display());
        assert!(run.stderr.starts_with(&prefix), "{what}: {}", run.stderr);
        assert!(
            run.stderr.contains(want),
            "{what}: no {want:?} in {}",
            run.stderr
        );
        assert!(!run.stderr.contains("hunter2"), "{what}: {}", run.stderr);
    }
    // The policy it names is loaded with its schema audit: an open
    // argument object is refused there.
    let open = std::fs::read_to_string(policy())
        .expect("example policy")
        .replace(
            "\"additionalProperties\": false",
            "\"additionalProperties\": true",
        );
    std::fs::write(dir.join("open-policy.toml"), open).expect("policy");
    let config = dir.join("deploy.toml");
    std::fs::write(
        &config,
        format!("policy = \"open-policy.toml\"\napplication = \"support-desk\"\n{db}{GOOD_KEY}"),
    )
    .expect("write");
    let run = toolgate(&["config", "check", config.to_str().expect("path")], &[]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains(": policy: "), "{}", run.stderr);
    assert!(
        run.stderr.contains("keyword `additionalProperties`"),
        "{}",
        run.stderr
    );
    // A file that is not there.
    let run = toolgate(&["config", "check", "/nonexistent/deploy.toml"], &[]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("/nonexistent/deploy.toml: file:"),
        "{}",
        run.stderr
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_database_comes_from_db_then_the_environment_then_the_file() {
    let dir = scratch("precedence");
    let good = sqlite_db(&dir);
    // Operator commands never create a SQLite file: a URL to a missing one
    // fails, which shows which URL was used.
    let bad = format!("sqlite://{}", dir.join("missing.db").display());
    let file_good = deployment(&dir, &format!("db = {good:?}\n{GOOD_KEY}"));
    let file_good = file_good.to_str().expect("path").to_owned();
    let stuck = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["claims", "stuck"];
        all.extend_from_slice(args);
        toolgate(&all, env)
    };
    // --db beats the environment.
    let run = stuck(&["--db", &good], &[("TOOLGATE_DB_URL", &bad)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = stuck(&["--db", &bad], &[("TOOLGATE_DB_URL", &good)]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    // The environment beats the file.
    let run = stuck(&["--config", &file_good], &[("TOOLGATE_DB_URL", &bad)]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let run = stuck(&[], &[("TOOLGATE_DB_URL", &good)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The file when nothing else names one.
    let run = stuck(&["--config", &file_good], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // An empty variable counts as unset.
    let run = stuck(&["--config", &file_good], &[("TOOLGATE_DB_URL", "")]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Nothing at all: the message says every way to name one.
    let run = stuck(&[], &[]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("--db") && run.stderr.contains("TOOLGATE_DB_URL"),
        "{}",
        run.stderr
    );
    // config check reports which one it took.
    let run = toolgate(
        &["config", "check", &file_good],
        &[("TOOLGATE_DB_URL", &good)],
    );
    assert!(
        run.stdout.contains("from TOOLGATE_DB_URL"),
        "{}",
        run.stdout
    );
    let run = toolgate(&["config", "check", &file_good, "--db", &good], &[]);
    assert!(run.stdout.contains("from --db"), "{}", run.stdout);
    let _ = std::fs::remove_dir_all(dir);
}

/// `base` (a test database URL) with its user part replaced by a user the
/// server does not know and a password.
fn with_credentials(base: &str) -> String {
    let (scheme, rest) = base.split_once("://").expect("URL has a scheme");
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://toolgate_no_such_user:hunter2@{host}")
}

#[test]
fn passwords_never_reach_error_messages() {
    // Refused while parsing (the driver's message follows the URL).
    let mut urls = vec![
        "postgres://app:hunter2@127.0.0.1:5432/toolgate?sslmode=sometimes".to_owned(),
        "mysql://app:hunter2@127.0.0.1:3306/toolgate?ssl-mode=sometimes".to_owned(),
        "postgres://127.0.0.1:5432/toolgate?user=app&password=hunter2&sslmode=sometimes".to_owned(),
    ];
    // Refused by the server: an unknown user answers at once, where an
    // unreachable host would wait out the pool's timeout.
    for (var, what) in [
        ("TOOLGATE_TEST_POSTGRES_URL", "PostgreSQL"),
        ("TOOLGATE_TEST_MYSQL_URL", "MySQL/MariaDB"),
    ] {
        if let Some(base) = support::database_url(var, what) {
            urls.push(with_credentials(&base));
        }
    }
    for url in &urls {
        for env in [false, true] {
            let run = if env {
                toolgate(&["claims", "stuck"], &[("TOOLGATE_DB_URL", url)])
            } else {
                toolgate(&["claims", "stuck", "--db", url], &[])
            };
            assert_eq!(run.code, 2, "{url}: {}", run.stderr);
            assert!(run.stderr.len() > 30, "{url}: no message: {}", run.stderr);
            assert!(!run.stderr.contains("hunter2"), "{url}: {}", run.stderr);
        }
    }
}

#[test]
fn an_unparsable_rust_log_stops_serve_before_it_starts() {
    let dir = scratch("rustlog");
    let config = deployment(&dir, &format!("db = {:?}\n{GOOD_KEY}", sqlite_db(&dir)));
    let run = toolgate(
        &["serve", "--config", config.to_str().expect("path")],
        &[("RUST_LOG", "info,toolgate=[")],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("RUST_LOG"), "{}", run.stderr);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn completions_and_man_pages_come_from_the_commands() {
    let bash = toolgate(&["completions", "bash"], &[]);
    assert_eq!(bash.code, 0, "{}", bash.stderr);
    assert!(bash.stdout.contains("complete -F"), "not a bash script");
    for sub in ["serve", "claims", "keys", "config", "completions", "man"] {
        assert!(bash.stdout.contains(sub), "bash completion lacks {sub}");
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let run = toolgate(&["completions", shell], &[]);
        assert_eq!(run.code, 0, "{shell}: {}", run.stderr);
        assert!(run.stdout.contains("serve"), "{shell}");
    }
    assert_eq!(toolgate(&["completions", "tcsh"], &[]).code, 2);

    let man = toolgate(&["man"], &[]);
    assert_eq!(man.code, 0, "{}", man.stderr);
    assert!(
        man.stdout.starts_with(".ie") || man.stdout.contains(".TH toolgate"),
        "not roff"
    );
    assert!(man.stdout.contains(".TH toolgate"), "no title");
    assert!(man.stdout.contains("serve"), "the page does not list serve");
    let dir = scratch("man");
    let run = toolgate(&["man", "--dir", dir.to_str().expect("path")], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for page in [
        "toolgate.1",
        "toolgate-serve.1",
        "toolgate-keys-new.1",
        "toolgate-config-check.1",
    ] {
        let text =
            std::fs::read_to_string(dir.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page} is not a man page");
    }
    let serve = std::fs::read_to_string(dir.join("toolgate-serve.1")).expect("serve page");
    assert!(
        serve.contains("TOOLGATE_DB_URL"),
        "the serve page lacks the help text"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The value of `name=` in a line of `name=value` pairs.
fn figure<'a>(line: &'a str, name: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name}= in {line}"))
}

#[test]
fn bench_serve_floor_alternates_rounds_and_prints_the_ratio() {
    let dir = scratch("bench-floor");
    let db = format!("sqlite://{}", dir.join("bench.db").display());
    let run = toolgate(
        &[
            "bench",
            "serve",
            "--db",
            &db,
            "--concurrency",
            "2",
            "--requests",
            "30",
            "--floor",
            "--rounds",
            "3",
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let line = run.stdout.trim();
    // Every request was a fresh credit, each executed once.
    assert_eq!(figure(line, "outcomes"), "executed:30", "{line}");
    assert_eq!(figure(line, "rounds"), "3", "{line}");
    let rounds: Vec<f64> = figure(line, "round_ratios")
        .split(',')
        .map(|r| r.parse().expect("a ratio"))
        .collect();
    assert_eq!(rounds.len(), 3, "{line}");
    for rate in [figure(line, "floor_per_s"), figure(line, "ratio")] {
        assert!(rate.parse::<f64>().expect("a number") > 0.0, "{line}");
    }

    // Rounds belong to the floor's comparison only.
    let run = toolgate(&["bench", "serve", "--db", &db, "--rounds", "3"], &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--floor"), "{}", run.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}
