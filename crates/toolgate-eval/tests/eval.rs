//! The case format, the metrics and the shipped suite's stateless side.
//! The full pipeline over the suite (store, Cedar, executor) is exercised
//! by the CLI's tests (`crates/toolgate-cli/tests/eval.rs`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use toolgate::contract::{self, Policy};
use toolgate::pipeline::Outcome;
use toolgate_eval::case::{Case, parse_case};
use toolgate_eval::metrics::{CaseResult, Observed, RateKind, Report, Thresholds};
use toolgate_eval::runner::check_case;
use toolgate_eval::{RefuseAll, load, render, run};

fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the refuse-all gate never pends"),
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn suite_dir() -> PathBuf {
    root().join("examples/support-desk/eval")
}

fn policy() -> Policy {
    let text = std::fs::read_to_string(root().join("examples/support-desk/policy.toml")).unwrap();
    Policy::load(&text).unwrap()
}

fn suite() -> Vec<Case> {
    load(&suite_dir()).unwrap()
}

#[test]
fn shipped_suite_has_forty_cases_across_the_four_providers() {
    let cases = suite();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    for p in ["anthropic", "openai-chat", "openai-responses", "gemini"] {
        let n = cases.iter().filter(|c| c.provider.as_str() == p).count();
        assert!(n >= 5, "{p}: {n} cases");
    }
    // Justified credits under every reason code of the policy.
    for reason in ["late_delivery", "damaged_item", "wrong_item"] {
        let n = cases
            .iter()
            .filter(|c| c.labels.justified && c.labels.expected == Outcome::Executed)
            .filter(|c| String::from_utf8_lossy(&c.response).contains(reason))
            .count();
        assert!(n >= 2, "{reason}: {n} justified executed cases");
    }
    assert!(cases.iter().any(|c| c.id.starts_with("ambiguous-")));
    assert!(cases.iter().any(|c| c.id.starts_with("closed-ticket-")));
    // A ticket that belongs to someone else than the request's customer.
    assert!(
        cases
            .iter()
            .any(|c| c.world.contains_key("ticket_customer"))
    );
    assert!(cases.iter().any(|c| c.id.starts_with("over-cap-")));
    assert!(
        cases
            .iter()
            .any(|c| c.labels.expected == Outcome::Abstain && !c.labels.warrants_answer)
    );
    assert!(
        cases
            .iter()
            .any(|c| c.labels.expected == Outcome::Answer && !c.labels.justified)
    );
}

#[test]
fn the_upset_customer_case_is_well_formed_and_labelled_unjustified() {
    let cases = suite();
    let upset = cases
        .iter()
        .find(|c| c.id == "upset-max-credit-damaged-item-anthropic")
        .unwrap();
    assert!(!upset.labels.justified);
    assert_eq!(upset.labels.expected, Outcome::Executed);
    // It passes every stateless stage with the maximum under damaged_item.
    let d = check_case(&policy(), upset);
    assert_eq!(
        d.outcome(),
        contract::CheckOutcome::Action,
        "{:?}",
        d.message
    );
    let action = d.action().unwrap();
    assert_eq!(action.arguments()["amount_minor"], 2000);
    assert_eq!(action.arguments()["reason_code"], "damaged_item");
    assert!(d.reply.unwrap().contains("seemed upset"));
}

/// Each case's stateless stages end where its label says: the stateless
/// outcomes directly, and every stateful expectation (executed, forbidden,
/// state_changed) as a proposal that passed the contract.
#[test]
fn stateless_stages_agree_with_every_label() {
    let policy = policy();
    for case in suite() {
        let d = check_case(&policy, &case);
        let want = match case.labels.expected {
            Outcome::Answer => contract::CheckOutcome::Answer,
            Outcome::Abstain => contract::CheckOutcome::Abstain,
            Outcome::Rejected => contract::CheckOutcome::Rejected,
            Outcome::Refused => contract::CheckOutcome::Refused,
            Outcome::Truncated => contract::CheckOutcome::Truncated,
            Outcome::ContentFiltered => contract::CheckOutcome::ContentFiltered,
            _ => contract::CheckOutcome::Action,
        };
        assert_eq!(
            d.outcome(),
            want,
            "{}: {:?} {:?}",
            case.id,
            d.reason,
            d.message
        );
    }
}

#[test]
fn refuse_all_fails_the_release_gate_on_blocked_legitimate_actions() {
    let cases = suite();
    let thresholds = Thresholds::find(&suite_dir()).unwrap().unwrap();
    let results = block_on(run(&RefuseAll, &cases, |_| {})).unwrap();
    let report = Report::new("refuse-all", "suite", results, Some(&thresholds));
    let justified = u32::try_from(cases.iter().filter(|c| c.labels.justified).count()).unwrap();
    assert!(justified > 0);
    let blocked = report.rate(RateKind::BlockedLegitimateActions);
    assert_eq!(
        (blocked.numerator, blocked.denominator),
        (justified, justified)
    );
    assert!(!blocked.passes());
    // It passes every safety rate, which is the point: safety alone is no
    // evidence of a useful gate.
    let unjustified = report.rate(RateKind::UnjustifiedActions);
    assert_eq!((unjustified.numerator, unjustified.denominator), (0, 0));
    assert!(unjustified.passes());
    assert_eq!(report.rate(RateKind::UnsupportedReplies).denominator, 0);
    assert!(!report.passed());
    assert_eq!(report.to_json()["release_gate"], "failed");
    assert_eq!(report.to_json()["cases"], cases.len());
}

fn result(
    id: &str,
    justified: bool,
    warrants: bool,
    supported: bool,
    expected: Outcome,
    got: Outcome,
    reply: Option<&str>,
) -> CaseResult {
    CaseResult {
        id: id.to_owned(),
        provider: "anthropic".to_owned(),
        labels: toolgate_eval::case::Labels {
            justified,
            warrants_answer: warrants,
            reply_supported: supported,
            expected,
        },
        observed: Observed {
            outcome: got,
            reason: None,
            message: None,
            reply: reply.map(str::to_owned),
        },
    }
}

#[test]
fn rates_count_numerators_over_their_own_denominators() {
    use Outcome::*;
    let results = vec![
        result(
            "ok-credit",
            true,
            true,
            true,
            Executed,
            Executed,
            Some("done"),
        ),
        result(
            "upset",
            false,
            true,
            false,
            Executed,
            Executed,
            Some("upset"),
        ),
        result("blocked", true, true, true, Executed, Rejected, None),
        result("answer", false, true, true, Answer, Answer, Some("eta")),
        result("needless", false, true, true, Answer, Abstain, None),
        result("refusal", false, false, true, Refused, Refused, None),
    ];
    let t =
        Thresholds::parse("unjustified_actions = 0.4\nblocked_legitimate_actions = 0.5\n").unwrap();
    let r = Report::new("toolgate", "t", results, Some(&t));
    let get = |k| {
        let x = r.rate(k);
        (x.numerator, x.denominator)
    };
    assert_eq!(get(RateKind::UnjustifiedActions), (1, 2));
    assert_eq!(get(RateKind::BlockedLegitimateActions), (1, 2));
    assert_eq!(get(RateKind::UnsupportedReplies), (1, 3));
    assert_eq!(get(RateKind::UnnecessaryAbstentions), (1, 5));
    assert_eq!(get(RateKind::UnexpectedOutcomes), (2, 6));
    assert_eq!(r.rate(RateKind::UnjustifiedActions).cases, ["upset"]);
    // 1/2 = 0.5 > 0.4 fails; 0.5 <= 0.5 passes; unset thresholds pass.
    assert!(!r.rate(RateKind::UnjustifiedActions).passes());
    assert!(r.rate(RateKind::BlockedLegitimateActions).passes());
    assert!(!r.passed());
    let json = r.to_json();
    assert_eq!(json["counts"]["executed"], 2);
    assert_eq!(json["counts"]["in_flight"], 0);
    assert_eq!(json["rates"]["unsupported_replies"]["numerator"], 1);
    assert_eq!(json["rates"]["unsupported_replies"]["denominator"], 3);
    let junit = render::junit(&r);
    assert_eq!(junit.matches("<testcase ").count(), 6 + 5);
    assert_eq!(junit.matches("<failure ").count(), 2 + 1);
    let md = render::markdown(&r);
    assert!(
        md.contains("| unjustified_actions | 1 | 2 actions taken | 50.0% | 40.0% | FAIL |"),
        "{md}"
    );
}

#[test]
fn thresholds_must_be_fractions_and_known() {
    assert!(Thresholds::parse("unjustified_actions = 5").is_err());
    assert!(Thresholds::parse("unjustifed_actions = 0.1").is_err());
    assert!(Thresholds::parse("unjustified_actions = -0.1").is_err());
    assert_eq!(
        Thresholds::parse("unsupported_replies = 0.2")
            .unwrap()
            .unsupported_replies,
        Some(0.2)
    );
}

const CASE: &str = r#"{"id":"c1","provider":"gemini","prompt":"p",
 "context":{"actor":"a","scope":{"customer_id":"c","order_id":7},"version_seen":1,"evidence":"e"},
 "labels":{"justified":false,"warrants_answer":true,"reply_supported":true,"expected":"answer"},
 "response":{"candidates":[]}}"#;

#[test]
fn case_files_are_strictly_decoded_and_closed() {
    let c = parse_case(CASE.as_bytes(), "x").unwrap();
    assert_eq!(c.version_seen().as_str(), "1");
    assert!(c.world.is_empty());
    // No capabilities in the case: the ones the policy's tools require.
    assert_eq!(c.context.capabilities, None);
    assert_eq!(c.capabilities(&policy()), ["credit:issue"]);
    let v = CASE.replace(r#""version_seen":1"#, r#""version_seen":"etag-9""#);
    assert_eq!(
        parse_case(v.as_bytes(), "x")
            .unwrap()
            .version_seen()
            .as_str(),
        "etag-9"
    );
    // A version that is neither a string nor a non-negative integer, an
    // empty scope, or the version among the scope fields is refused.
    for (from, to) in [
        (r#""version_seen":1"#, r#""version_seen":-1"#),
        (r#""version_seen":1"#, r#""version_seen":1.5"#),
        (r#""version_seen":1"#, r#""version_seen":"""#),
        (
            r#""scope":{"customer_id":"c","order_id":7}"#,
            r#""scope":{}"#,
        ),
        (r#""order_id":7}"#, r#""order_id":7,"version_seen":1}"#),
    ] {
        let bad = CASE.replace(from, to);
        assert!(parse_case(bad.as_bytes(), "x").is_err(), "{to}");
    }
    // The old, credit-shaped labels are unknown fields now.
    let old = CASE.replace(r#""justified""#, r#""eligible""#);
    assert!(parse_case(old.as_bytes(), "x").is_err());
    // A duplicate key is an error, not the last value silently.
    let dup = CASE.replace(r#""prompt":"p","#, r#""prompt":"p","prompt":"q","#);
    assert!(
        parse_case(dup.as_bytes(), "x")
            .unwrap_err()
            .message
            .contains("duplicate_key")
    );
    // Unknown fields, outcome codes and providers are errors.
    let extra = CASE.replace(r#""prompt":"p","#, r#""prompt":"p","actor_id":"x","#);
    assert!(parse_case(extra.as_bytes(), "x").is_err());
    let bad = CASE.replace(r#""expected":"answer""#, r#""expected":"answered""#);
    assert!(
        parse_case(bad.as_bytes(), "x")
            .unwrap_err()
            .message
            .contains("answered")
    );
    let bad = CASE.replace("gemini", "bard");
    assert!(parse_case(bad.as_bytes(), "x").is_err());
    // A string response is kept byte for byte (streams, invalid bodies).
    let s = CASE.replace(r#"{"candidates":[]}"#, r#""data: x\n\n""#);
    assert_eq!(
        parse_case(s.as_bytes(), "x").unwrap().response,
        b"data: x\n\n"
    );
}

#[test]
fn a_scope_shared_by_two_cases_is_a_load_error() {
    let dir = std::env::temp_dir().join(format!("toolgate-eval-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The same scope fields in another order are the same scope.
    let second = CASE.replace(r#""id":"c1""#, r#""id":"c2""#).replace(
        r#"{"customer_id":"c","order_id":7}"#,
        r#"{"order_id":7,"customer_id":"c"}"#,
    );
    std::fs::write(
        dir.join("cases.jsonl"),
        format!("{}\n{}\n", CASE.replace('\n', ""), second.replace('\n', "")),
    )
    .unwrap();
    let e = load(&dir).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        e.message.contains("each case needs its own resource"),
        "{e}"
    );
    assert!(e.at.ends_with("cases.jsonl:2"), "{e}");
}
