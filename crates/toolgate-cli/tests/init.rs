//! `toolgate init` from flags in an empty directory, on a SQLite
//! application database (the receivers run end to end on PostgreSQL and
//! MariaDB in scripts/receivers-e2e.sh), and `keys new --help`'s examples
//! against docs/deploy.md and `config check`.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "support/databases.rs"]
#[allow(dead_code, reason = "this test uses the module's random names only")]
mod support;

#[path = "support/mod.rs"]
mod binary;

use binary::toolgate_env as toolgate;

/// An empty directory and an application database beside it: a SQLite
/// file with the table `subscriptions`, `ends_on` a DATE column.
fn app(what: &str) -> (PathBuf, String) {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("init-{what}-{}", support::random_hex()));
    std::fs::create_dir_all(&base).expect("dir");
    let db = base.join("app.db");
    let status = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import sqlite3; c = sqlite3.connect({:?}); c.executescript('''\
             CREATE TABLE subscriptions (id INTEGER PRIMARY KEY, team TEXT NOT NULL, \
             ends_on REAL, version INTEGER NOT NULL DEFAULT 1);\
             INSERT INTO subscriptions (id, team) VALUES (42, 'eu');'''); c.commit()",
            db.display().to_string()
        ))
        .status()
        .expect("python3 makes the application's SQLite database");
    assert!(status.success());
    (base.join("gate"), format!("sqlite://{}", db.display()))
}

const FLAGS: [&str; 8] = [
    "init",
    "--tool",
    "extend_subscription",
    "--capability",
    "subscription:extend",
    "--scope",
    "subscription_id:integer",
    "--table",
];

#[test]
fn init_writes_a_deployment_that_passes_config_check() {
    let (dir, url) = app("ok");
    let d = dir.to_str().unwrap();
    let mut args = FLAGS.to_vec();
    args.extend(["subscriptions", "--executor", "client", "--dir", d]);
    let run = toolgate(&args, &[("APP_DB_URL", &url)]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    for f in [
        "policy.toml",
        "policy.cedar",
        "toolgate.toml",
        "app-backend.key",
        "app-oncall.key",
    ] {
        assert!(dir.join(f).exists(), "{f} not written");
    }
    assert!(
        !dir.join("receiver.py").exists(),
        "a client executor has no receiver"
    );
    assert!(
        run.stdout.contains("config ") && run.stdout.contains(": ok"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("  1. toolgate serve --config toolgate.toml"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("/v1/decisions"), "{}", run.stdout);
    assert!(
        run.stdout.contains("  3. curl"),
        "three commands: {}",
        run.stdout
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("app-backend.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "a key file is its owner's only");
    }
    let config = std::fs::read_to_string(dir.join("toolgate.toml")).unwrap();
    assert!(
        config.contains(
            "state = { source = \"sql\", query = \"SELECT version FROM subscriptions WHERE id = :subscription_id\" }"
        ),
        "{config}"
    );
    assert!(
        config.contains("resource_type = \"Subscription\""),
        "{config}"
    );

    // Nothing is overwritten without --force.
    let again = toolgate(&args, &[("APP_DB_URL", &url)]);
    assert_eq!(again.code, 2);
    assert!(
        again.stderr.contains("exists: nothing written"),
        "{}",
        again.stderr
    );

    // A column no reader takes is refused by the check init ran, naming
    // the tool, the entity type and the column.
    let with_real = config.replace("SELECT id, team FROM", "SELECT id, team, ends_on FROM");
    assert_ne!(with_real, config);
    std::fs::write(dir.join("real.toml"), with_real).unwrap();
    let real = toolgate(
        &["config", "check", dir.join("real.toml").to_str().unwrap()],
        &[("APP_DB_URL", &url)],
    );
    assert_eq!(real.code, 2, "{}", real.stdout);
    assert!(
        real.stderr.contains(
            "tools[extend_subscription].entities[Subscription].query: entity type \
             `Subscription`: column `ends_on` has SQL type REAL"
        ),
        "{}",
        real.stderr
    );
}

#[test]
fn init_without_a_terminal_names_the_missing_flag_and_writes_nothing() {
    let (dir, url) = app("missing");
    let run = toolgate(
        &[
            "init",
            "--capability",
            "x:y",
            "--dir",
            dir.to_str().unwrap(),
        ],
        &[("APP_DB_URL", &url)],
    );
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--tool is required"), "{}", run.stderr);
    assert!(!dir.join("policy.toml").exists());
    let mut args = FLAGS.to_vec();
    args.extend([
        "subscriptions; DROP TABLE x",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    let run = toolgate(&args, &[("APP_DB_URL", &url)]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--table"), "{}", run.stderr);
    let mut args = FLAGS.to_vec();
    args.extend(["subscriptions", "--executor", "client", "--receiver", "php"]);
    let run = toolgate(&args, &[("APP_DB_URL", &url)]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("needs --executor webhook"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_webhook_receiver_is_written_with_its_secret() {
    let (dir, url) = app("webhook");
    let mut args = FLAGS.to_vec();
    args.extend([
        "subscriptions",
        "--receiver",
        "node",
        "--receiver-port",
        "9123",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    let run = toolgate(&args, &[("APP_DB_URL", &url)]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let js = std::fs::read_to_string(dir.join("receiver.js")).unwrap();
    assert!(js.contains("const TOOL = 'extend_subscription';"), "{js}");
    assert!(js.contains("process.env.APP_DB_URL"));
    let secret = std::fs::read_to_string(dir.join("webhook.secret")).unwrap();
    assert!(secret.trim().len() >= 16);
    let config = std::fs::read_to_string(dir.join("toolgate.toml")).unwrap();
    assert!(
        config.contains("url = \"http://127.0.0.1:9123/webhook\""),
        "{config}"
    );
    assert!(
        run.stdout.contains("  1. node receiver.js"),
        "{}",
        run.stdout
    );
}

/// `keys new --help`'s example for a service acting for its users is the
/// command docs/deploy.md gives, and what it prints passes `config check`
/// beside [[tools]]; its `--mode client` example is refused there, as the
/// help says.
#[test]
fn keys_new_help_examples_agree_with_deploy_md_and_config_check() {
    let help = toolgate(&["keys", "new", "--help"], &[]);
    assert_eq!(help.code, 0);
    let joined = help.stdout.replace("\\\n", " ");
    let example = joined
        .lines()
        .find(|l| l.contains("--name shop-backend"))
        .expect("a shop-backend example");
    let example = example.trim().trim_start_matches("$ ");
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let deploy =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/deploy.md"))
            .unwrap();
    assert!(
        words(&deploy).contains(&words(example)),
        "docs/deploy.md does not give `{example}`"
    );
    assert!(!example.contains("--mode client"), "{example}");

    let (dir, url) = app("keys");
    let mut args = FLAGS.to_vec();
    args.extend([
        "subscriptions",
        "--executor",
        "client",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(toolgate(&args, &[("APP_DB_URL", &url)]).code, 0);
    let file = dir.join("toolgate.toml");
    let base = std::fs::read_to_string(&file).unwrap();
    let check = |entry: &str| {
        std::fs::write(&file, format!("{base}\n{entry}\n")).unwrap();
        toolgate(
            &["config", "check", file.to_str().unwrap()],
            &[("APP_DB_URL", &url)],
        )
    };
    let service = toolgate(
        &[
            "keys",
            "new",
            "--name",
            "shop-backend",
            "--capabilities",
            "subscription:extend",
            "--act-for-users",
        ],
        &[],
    );
    assert_eq!(service.code, 0);
    let run = check(&service.stdout);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let client = toolgate(
        &[
            "keys",
            "new",
            "--name",
            "billing",
            "--capabilities",
            "subscription:extend",
            "--mode",
            "client",
        ],
        &[],
    );
    let run = check(&client.stdout);
    assert_eq!(run.code, 2, "{}", run.stdout);
}
