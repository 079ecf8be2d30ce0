//! `toolgate demo`: every row's outcome and the credits per ticket, read
//! back from the database the demo kept (`--db`).

use std::path::PathBuf;
use std::process::Command;

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let bytes = *toolgate_store::fresh_holder().expect("rng").as_bytes();
        let name: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let dir = std::env::temp_dir().join(format!("toolgate-cli-demo-{name}"));
        std::fs::create_dir(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn demo(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("demo")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The row whose case column starts with `case`: (outcome, detail).
fn row<'a>(stdout: &'a str, case: &str) -> (&'a str, &'a str) {
    let line = stdout
        .lines()
        .find(|l| {
            l.split_once(' ')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(case))
        })
        .unwrap_or_else(|| panic!("no row {case:?} in\n{stdout}"));
    let rest = &line[line.find(case).unwrap() + case.len()..];
    let rest = rest.trim_start();
    let (outcome, detail) = rest.split_once("  ").unwrap_or((rest, ""));
    (outcome, detail.trim())
}

#[test]
fn every_case_ends_as_the_story_says_and_each_ticket_has_one_credit() {
    let dir = TempDir::new();
    let db = dir.0.join("demo.db");
    let (code, out, err) = demo(&["--db", db.to_str().unwrap()]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");

    let expect = [
        ("answer", "answer"),
        ("abstain (the fixed message)", "abstain"),
        ("credit 15.00 (anthropic)", "executed"),
        ("same retry", "replayed"),
        ("reworded retry (gemini)", "replayed"),
        ("20.00 on the same version", "conflict"),
        ("stale version (model read 2)", "state_changed"),
        ("refusal (openai-chat)", "refused"),
        ("truncation (openai-responses)", "truncated"),
        ("approved_by in the arguments", "rejected"),
        ("agent without credit:issue", "forbidden"),
        ("lost access, retries the credit", "forbidden"),
        ("12 parallel proposals, one ticket", "executed×1"),
        ("third credit today, 20.00 (t-300)", "pending_approval"),
    ];
    for (case, outcome) in expect {
        assert_eq!(row(&out, case).0, outcome, "{case}\n{out}");
    }
    assert_eq!(out.lines().filter(|l| l.contains("[expected")).count(), 0);
    assert!(out.contains("all 14 cases ended as expected"), "{out}");

    // What each row shows a person.
    assert!(
        row(&out, "abstain (the fixed message)")
            .1
            .contains("A colleague from the support team")
    );
    let conflict = row(&out, "20.00 on the same version").1;
    assert!(
        conflict.contains("prior proposal 15.00 late_delivery by agent-ana on version 3"),
        "{conflict}"
    );
    let stale = row(&out, "stale version (model read 2)").1;
    assert!(stale.contains("version seen 2, current 4"), "{stale}");
    assert!(
        row(&out, "approved_by in the arguments")
            .1
            .starts_with("unknown_key at /approved_by"),
        "{out}"
    );
    assert!(
        row(&out, "agent without credit:issue")
            .1
            .starts_with("missing_capability"),
        "{out}"
    );
    let lost = row(&out, "lost access, retries the credit").1;
    assert!(lost.starts_with("not_authorized"), "{lost}");
    assert!(
        !lost.contains("applied"),
        "a forbidden row carries no recorded result: {lost}"
    );
    assert!(
        row(&out, "refusal (openai-chat)")
            .1
            .contains("can't assist"),
        "{out}"
    );
    assert!(
        row(&out, "truncation (openai-responses)")
            .1
            .contains("max_output_tokens"),
        "{out}"
    );

    // The customer's third credit of the day: 15.00 + 15.00 written, 20.00
    // more would pass the policy's 40.00, so the budget is shown and a
    // person decides.
    let budget = row(&out, "third credit today, 20.00 (t-300)").1;
    assert_eq!(
        budget,
        "budget_exceeded: budget daily_credit_per_customer limit 40.00, used 30.00, \
         remaining 10.00, this credit 20.00; a person decides, nothing written"
    );

    // The credits the demo printed, and the database it kept, agree: one
    // credit on the main ticket and one on the raced ticket, none on the
    // ticket over the budget.
    assert!(out.contains("  t-100  1 credit  total 15.00"), "{out}");
    assert!(out.contains("  t-200  1 credit  total 15.00"), "{out}");
    let counts = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let url = format!("sqlite://{}", db.display());
            let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
            let rows: Vec<(String, i64)> = sqlx::query_as(
                "SELECT ticket_id, COUNT(*) FROM credits GROUP BY ticket_id ORDER BY ticket_id",
            )
            .fetch_all(&pool)
            .await
            .unwrap();
            rows
        });
    assert_eq!(counts, [("t-100".to_owned(), 1), ("t-200".to_owned(), 1)]);
}

#[test]
fn an_existing_database_is_refused_rather_than_reused() {
    let dir = TempDir::new();
    let db = dir.0.join("taken.db");
    std::fs::write(&db, b"").unwrap();
    let (code, out, err) = demo(&["--db", db.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("fresh database"), "{err}");
}
