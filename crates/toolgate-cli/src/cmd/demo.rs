//! `toolgate demo`: the support-desk story end to end on embedded SQLite
//! (docs/design.md §9). Every case goes through the real
//! pipeline — contract, capability, Cedar, the SQLite claim store, the
//! ticket's state, the credits executor — and the demo checks itself.

use std::path::PathBuf;
use std::process::ExitCode;

use futures_util::future::join_all;
use serde_json::Value;
use toolgate::contract::Policy;
use toolgate::pipeline::{Decision, Outcome, Reason};
use toolgate::provider::Provider;

use crate::io::print_line;
use crate::scratch::Scratch;
use toolgate_support_desk::demo::{
    ANA, BEN, BUDGET_TICKET, CHO, CUSTOMER, RACE_TICKET, START_VERSION, TICKET, body,
};
use toolgate_support_desk::{self as desk, Desk, Proposal};

/// Run the support-desk scenario end to end and check every outcome.
///
/// Creates a fresh embedded SQLite database (in a temporary directory,
/// removed afterwards, unless --db names a new file to keep), seeds
/// customers, agents and tickets, and sends recorded provider responses
/// through the real pipeline: an answer; an abstention (the fixed message);
/// an executed credit; the same retry (replayed); a reworded retry from
/// another provider (replayed); another amount on the same version
/// (conflict, with the prior proposal); a stale version (state_changed,
/// both versions); a refusal; a truncation; approved_by in the arguments
/// (rejected); an agent without credit:issue (forbidden); an agent who lost
/// the ticket retrying a completed credit (forbidden, not replayed);
/// twelve parallel proposals on one ticket (exactly one credit); and a
/// third credit to the same customer that day, over the policy's daily
/// budget per customer (pending_approval, the budget shown, nothing
/// written).
///
/// Prints one row per case (case, outcome, detail), then the credits per
/// ticket read from the database.
///
/// Exit 0 when every case ended as expected and each ticket holds exactly
/// the credits expected; 1 otherwise; 2 for database and I/O errors.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Keep the database in this new SQLite file (it must not exist).
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
}

/// One row of the table.
struct Row {
    case: String,
    expected: String,
    got: String,
    detail: String,
}

impl Row {
    fn ok(&self) -> bool {
        self.expected == self.got
    }
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("toolgate demo: {message}");
    ExitCode::from(2)
}

pub fn run(args: Args) -> ExitCode {
    let policy = match Policy::load(desk::POLICY) {
        Ok(p) => p,
        Err(e) => return fail(format!("built-in policy: {e}")),
    };
    // Keep the scratch directory alive until the end of the run.
    let (_scratch, url) = match &args.db {
        Some(path) => {
            if path.exists() {
                return fail(format!(
                    "{} exists; the demo needs a fresh database",
                    path.display()
                ));
            }
            (None, format!("sqlite://{}", path.display()))
        }
        None => match Scratch::new("demo") {
            Ok(s) => {
                let url = s.sqlite_url("demo.db");
                (Some(s), url)
            }
            Err(e) => return fail(format!("scratch directory: {e}")),
        },
    };
    let runtime = match crate::io::runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(format!("starting the async runtime: {e}")),
    };
    let (rows, credits) = match runtime.block_on(scenario(&url, &policy)) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    // In ticket-id order, as `credits_per_ticket` reads them.
    let expected_credits = [(TICKET, 1), (RACE_TICKET, 1)];
    let credits_ok = credits.len() == expected_credits.len()
        && credits
            .iter()
            .zip(expected_credits)
            .all(|(got, (t, n))| got.ticket == t && got.count == n);
    let text = table(&rows, &credits, &url, args.db.is_some());
    if let Err(e) = print_line(text.trim_end()) {
        return fail(format!("writing stdout: {e}"));
    }
    let mismatches = rows.iter().filter(|r| !r.ok()).count();
    if mismatches == 0 && credits_ok {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "toolgate demo: {mismatches} case(s) did not end as expected{}",
            if credits_ok {
                ""
            } else {
                "; the credits per ticket are not one each"
            }
        );
        ExitCode::from(1)
    }
}

fn table(rows: &[Row], credits: &[desk::TicketCredits], url: &str, kept: bool) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let cw = rows.iter().map(|r| r.case.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(out, "{:<3} {:<cw$}  {:<16}  detail", "#", "case", "outcome");
    for (i, r) in rows.iter().enumerate() {
        let mark = if r.ok() {
            String::new()
        } else {
            format!("  [expected {}]", r.expected)
        };
        let _ = writeln!(
            out,
            "{:<3} {:<cw$}  {:<16}  {}{mark}",
            i + 1,
            r.case,
            r.got,
            r.detail
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "credits per ticket (read from the credits table):");
    for c in credits {
        let _ = writeln!(
            out,
            "  {}  {} credit{}  total {}",
            c.ticket,
            c.count,
            if c.count == 1 { "" } else { "s" },
            money(c.total_minor)
        );
    }
    let bad = rows.iter().filter(|r| !r.ok()).count();
    let _ = writeln!(out);
    if bad == 0 {
        let _ = writeln!(out, "all {} cases ended as expected", rows.len());
    } else {
        let _ = writeln!(out, "{bad} of {} cases did NOT end as expected", rows.len());
    }
    if kept {
        let _ = writeln!(out, "database: {url}");
    }
    out
}

fn money(minor: i64) -> String {
    format!("{}.{:02}", minor / 100, minor % 100)
}

fn args_text(v: &Value) -> String {
    match (v.get("amount_minor"), v.get("reason_code")) {
        (Some(a), Some(r)) => format!(
            "{} {}",
            a.as_i64().map_or_else(|| a.to_string(), money),
            r.as_str().unwrap_or("?")
        ),
        _ => v.to_string(),
    }
}

/// The detail column: what a person needs from each outcome.
fn detail(d: &Decision) -> String {
    let quote = |s: &str| {
        let short: String = s.chars().take(110).collect();
        if short.len() < s.len() {
            format!("\"{short}…\"")
        } else {
            format!("\"{short}\"")
        }
    };
    match d.outcome() {
        Outcome::Answer | Outcome::Abstain => d.reply().map(quote).unwrap_or_default(),
        Outcome::Executed | Outcome::Replayed => {
            let what = if d.outcome() == Outcome::Executed {
                "result"
            } else {
                "recorded result"
            };
            format!(
                "{what} {}",
                d.result().map(Value::to_string).unwrap_or_default()
            )
        }
        Outcome::Conflict => {
            let prior = d.prior().map_or_else(String::new, |p| {
                format!(
                    "prior proposal {} by {} on version {}",
                    p.arguments_value()
                        .map(|v| args_text(&v))
                        .unwrap_or_default(),
                    p.proposer(),
                    p.version_seen()
                )
            });
            let result = d
                .result()
                .map_or(String::new(), |r| format!("; its result {r}"));
            format!("{prior}{result}")
        }
        Outcome::StateChanged => format!(
            "version seen {}, current {}",
            d.version_seen().map_or("?".to_owned(), ToString::to_string),
            d.current_version()
                .map_or("?".to_owned(), ToString::to_string)
        ),
        Outcome::Refused | Outcome::Truncated | Outcome::ContentFiltered => {
            let stop = d.stateless().and_then(|s| s.stop.as_ref());
            match stop {
                Some(s) => match &s.explanation {
                    Some(e) => format!(
                        "the provider refused: {}; terminal, nothing parsed",
                        quote(e)
                    ),
                    None => format!("stop {}; nothing parsed", s.raw.as_deref().unwrap_or("?")),
                },
                None => String::new(),
            }
        }
        _ => {
            let pointer = d
                .stateless()
                .and_then(|s| s.pointer.clone())
                .filter(|p| !p.is_empty())
                .map_or(String::new(), |p| format!(" at {p}"));
            // A budget's figures say what its message says, in money.
            let what = d.budget().map_or_else(
                || d.message().map(str::to_owned).unwrap_or_default(),
                |b| {
                    format!(
                        "budget {} limit {}, used {}, remaining {}, this credit {}; \
                         a person decides, nothing written",
                        b.name,
                        money(b.limit),
                        money(b.used),
                        money(b.remaining),
                        money(b.amount)
                    )
                },
            );
            format!(
                "{}{pointer}: {what}",
                d.reason().map_or("-", Reason::as_str)
            )
        }
    }
}

fn row(case: &str, expected: Outcome, d: &Decision) -> Row {
    Row {
        case: case.to_owned(),
        expected: expected.as_str().to_owned(),
        got: d.outcome().as_str().to_owned(),
        detail: detail(d),
    }
}

/// Twelve proposals at once on one ticket version, from the four
/// providers: one claim wins, one credit is written. `base` is the main
/// agent's credit; each racer sends it in one provider's shape.
async fn race_row(desk: &Desk, policy: &Policy, base: Proposal<'_>) -> Result<Row, String> {
    let bodies = [
        (Provider::Anthropic, body::ACTION_ANTHROPIC),
        (Provider::OpenAiChat, body::ACTION_OPENAI_CHAT),
        (Provider::OpenAiResponses, body::ACTION_OPENAI_RESPONSES),
        (Provider::Gemini, body::ACTION_GEMINI),
    ];
    let racers: Vec<Proposal<'_>> = (0..12)
        .map(|i| {
            let (provider, body) = bodies[i % bodies.len()];
            Proposal {
                ticket: RACE_TICKET,
                provider,
                body,
                ..base
            }
        })
        .collect();
    let decided = join_all(racers.iter().map(|p| desk.decide(policy, p))).await;
    let mut executed = 0;
    let mut others = std::collections::BTreeMap::<&str, u32>::new();
    for d in decided {
        let d = d?;
        if d.outcome() == Outcome::Executed {
            executed += 1;
        } else {
            *others.entry(d.outcome().as_str()).or_default() += 1;
        }
    }
    let rest: Vec<String> = others.iter().map(|(o, n)| format!("{o}×{n}")).collect();
    Ok(Row {
        case: "12 parallel proposals, one ticket".to_owned(),
        expected: "executed×1".to_owned(),
        got: format!("executed×{executed}"),
        detail: format!(
            "the others: {}",
            if rest.is_empty() {
                "none".to_owned()
            } else {
                rest.join(", ")
            }
        ),
    })
}

async fn scenario(
    url: &str,
    policy: &Policy,
) -> Result<(Vec<Row>, Vec<desk::TicketCredits>), String> {
    let desk = Desk::open(url).await?;
    for agent in [ANA, BEN, CHO] {
        desk.seed_agent(agent, true).await?;
    }
    for ticket in [TICKET, RACE_TICKET, BUDGET_TICKET] {
        desk.seed_ticket(ticket, CUSTOMER, ANA, START_VERSION)
            .await?;
    }
    let issuer = [desk::CREDIT_ISSUE];
    let main = |provider, body: &'static [u8]| Proposal {
        actor: ANA,
        capabilities: &issuer,
        customer: CUSTOMER,
        ticket: TICKET,
        version_seen: START_VERSION,
        provider,
        body,
    };
    let mut rows = Vec::new();
    let steps: [(&str, Outcome, Proposal<'_>); 9] = [
        (
            "answer",
            Outcome::Answer,
            main(Provider::Anthropic, body::ANSWER),
        ),
        (
            "abstain (the fixed message)",
            Outcome::Abstain,
            main(Provider::Gemini, body::ABSTAIN),
        ),
        (
            "credit 15.00 (anthropic)",
            Outcome::Executed,
            main(Provider::Anthropic, body::ACTION_ANTHROPIC),
        ),
        (
            "same retry",
            Outcome::Replayed,
            main(Provider::Anthropic, body::ACTION_ANTHROPIC),
        ),
        (
            "reworded retry (gemini)",
            Outcome::Replayed,
            main(Provider::Gemini, body::REWORDED),
        ),
        (
            "20.00 on the same version",
            Outcome::Conflict,
            main(Provider::OpenAiChat, body::DIFFERENT_AMOUNT),
        ),
        (
            "stale version (model read 2)",
            Outcome::StateChanged,
            Proposal {
                version_seen: 2,
                ..main(Provider::Anthropic, body::ACTION_ANTHROPIC)
            },
        ),
        (
            "refusal (openai-chat)",
            Outcome::Refused,
            main(Provider::OpenAiChat, body::REFUSAL),
        ),
        (
            "truncation (openai-responses)",
            Outcome::Truncated,
            main(Provider::OpenAiResponses, body::TRUNCATED),
        ),
    ];
    for (case, expected, p) in steps {
        let d = desk.decide(policy, &p).await?;
        rows.push(row(case, expected, &d));
    }
    let d = desk
        .decide(policy, &main(Provider::Anthropic, body::APPROVED_BY))
        .await?;
    rows.push(row("approved_by in the arguments", Outcome::Rejected, &d));
    let d = desk
        .decide(
            policy,
            &Proposal {
                actor: BEN,
                capabilities: &[],
                ..main(Provider::Anthropic, body::ACTION_ANTHROPIC)
            },
        )
        .await?;
    rows.push(row("agent without credit:issue", Outcome::Forbidden, &d));

    // The ticket moves to another agent; the first agent retries the
    // completed credit. Authorisation runs before the claim store is read, so the
    // recorded result is not handed back (invariant 3).
    desk.assign(TICKET, CHO).await?;
    let d = desk
        .decide(policy, &main(Provider::Anthropic, body::ACTION_ANTHROPIC))
        .await?;
    rows.push(row(
        "lost access, retries the credit",
        Outcome::Forbidden,
        &d,
    ));

    rows.push(
        race_row(
            &desk,
            policy,
            main(Provider::Anthropic, body::ACTION_ANTHROPIC),
        )
        .await?,
    );

    // The customer now holds 15.00 from each of the two tickets above; a
    // 20.00 credit on a third ticket would pass the policy's 40.00 a day
    // per customer, so a person decides and nothing is written.
    let d = desk
        .decide(
            policy,
            &Proposal {
                ticket: BUDGET_TICKET,
                ..main(Provider::OpenAiChat, body::DIFFERENT_AMOUNT)
            },
        )
        .await?;
    rows.push(row(
        "third credit today, 20.00 (t-300)",
        Outcome::PendingApproval,
        &d,
    ));
    let credits = desk.credits_per_ticket().await?;
    Ok((rows, credits))
}
