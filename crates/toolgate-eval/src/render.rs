//! The report's text forms: a table for people, Markdown for a pull
//! request, JUnit XML for CI dashboards (one test case per eval case plus
//! one per rate). JSON is [`Report::to_json`].

use std::fmt::Write;

use crate::metrics::{Rate, Report};

fn percent(r: &Rate) -> String {
    r.value()
        .map_or_else(|| "n/a".to_owned(), |v| format!("{:.1}%", v * 100.0))
}

fn max(r: &Rate) -> String {
    r.max
        .map_or_else(|| "-".to_owned(), |m| format!("{:.1}%", m * 100.0))
}

fn verdict(r: &Rate) -> &'static str {
    match (r.max, r.passes()) {
        (None, _) => "-",
        (Some(_), true) => "pass",
        (Some(_), false) => "FAIL",
    }
}

fn release_line(report: &Report) -> String {
    if !report.thresholds_found {
        return "release gate: not evaluated (no thresholds.toml beside the cases)".to_owned();
    }
    let failed: Vec<&str> = report
        .rates
        .iter()
        .filter(|r| !r.passes())
        .map(|r| r.kind.as_str())
        .collect();
    if failed.is_empty() {
        "release gate: passed".to_owned()
    } else {
        format!("release gate: FAILED ({})", failed.join(", "))
    }
}

fn pad(s: &str, width: usize) -> String {
    format!("{s:<width$}")
}

/// The human-readable table (the default).
pub fn human(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "toolgate eval: {} cases from {} through gate {}",
        report.results.len(),
        report.suite,
        report.gate
    );
    let _ = writeln!(out);
    let idw = report
        .results
        .iter()
        .map(|r| r.id.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        out,
        "{}  {}  {}  outcome",
        pad("case", idw),
        pad("provider", 16),
        pad("expected", 20),
    );
    for r in &report.results {
        let mark = if r.as_expected() {
            ""
        } else {
            "  <- unexpected"
        };
        let reason = r
            .observed
            .reason
            .as_deref()
            .map_or(String::new(), |x| format!(" ({x})"));
        let _ = writeln!(
            out,
            "{}  {}  {}  {}{reason}{mark}",
            pad(&r.id, idw),
            pad(&r.provider, 16),
            pad(r.labels.expected.as_str(), 20),
            r.observed.outcome.as_str(),
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{}  {:>13}  {:>7}  {:>7}  verdict",
        pad("rate", 27),
        "n / d",
        "rate",
        "max"
    );
    for r in &report.rates {
        let _ = writeln!(
            out,
            "{}  {:>13}  {:>7}  {:>7}  {}   over {}",
            pad(r.kind.as_str(), 27),
            format!("{} / {}", r.numerator, r.denominator),
            percent(r),
            max(r),
            verdict(r),
            r.kind.denominator_name()
        );
    }
    for r in &report.rates {
        if !r.cases.is_empty() {
            let _ = writeln!(out, "  {}: {}", r.kind, r.cases.join(", "));
        }
    }
    let _ = writeln!(out);
    let counts: Vec<String> = report
        .counts()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(o, n)| format!("{o}={n}"))
        .collect();
    let _ = writeln!(out, "outcomes: {}", counts.join(" "));
    let over_budget = report.over_budget();
    if over_budget > 0 {
        let _ = writeln!(out, "over budget (budget_exceeded): {over_budget}");
    }
    if let Some(p) = report.pass_k {
        let _ = writeln!(
            out,
            "pass^{}: {} / {} cases passed every trial",
            p.k, p.passed, p.cases
        );
    }
    let _ = writeln!(out, "{}", release_line(report));
    out
}

/// Markdown: the rates and counts as tables, then unexpected outcomes.
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## toolgate eval: {} cases, gate `{}`\n",
        report.results.len(),
        report.gate
    );
    let _ = writeln!(
        out,
        "| rate | numerator | denominator | rate | max | verdict |"
    );
    let _ = writeln!(out, "|---|---:|---|---:|---:|---|");
    for r in &report.rates {
        let _ = writeln!(
            out,
            "| {} | {} | {} {} | {} | {} | {} |",
            r.kind,
            r.numerator,
            r.denominator,
            r.kind.denominator_name(),
            percent(r),
            max(r),
            verdict(r)
        );
    }
    let _ = writeln!(out, "\n| outcome | cases |");
    let _ = writeln!(out, "|---|---:|");
    for (o, n) in report.counts() {
        if n > 0 {
            let _ = writeln!(out, "| `{o}` | {n} |");
        }
    }
    let unexpected: Vec<_> = report.results.iter().filter(|r| !r.as_expected()).collect();
    if !unexpected.is_empty() {
        let _ = writeln!(out, "\n| unexpected case | expected | outcome |");
        let _ = writeln!(out, "|---|---|---|");
        for r in unexpected {
            let _ = writeln!(
                out,
                "| {} | `{}` | `{}` |",
                r.id, r.labels.expected, r.observed.outcome
            );
        }
    }
    if let Some(p) = report.pass_k {
        let _ = writeln!(out, "\npass^{}: {} / {} cases", p.k, p.passed, p.cases);
    }
    let _ = writeln!(out, "\n**{}**", release_line(report));
    out
}

fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 cannot carry most control characters at all.
            c if c.is_control() && !matches!(c, '\n' | '\t' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML: suite `cases` (one test per case: does the outcome match the
/// expected one) and suite `release-gate` (one test per rate).
pub fn junit(report: &Report) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let case_failures = report.results.iter().filter(|r| !r.as_expected()).count();
    let rate_failures = report.rates.iter().filter(|r| !r.passes()).count();
    let _ = writeln!(
        out,
        "<testsuites name=\"toolgate eval\" tests=\"{}\" failures=\"{}\">",
        report.results.len() + report.rates.len(),
        case_failures + rate_failures
    );
    let _ = writeln!(
        out,
        "  <testsuite name=\"cases\" tests=\"{}\" failures=\"{case_failures}\">",
        report.results.len()
    );
    for r in &report.results {
        let name = xml(&r.id);
        let class = xml(&r.provider);
        if r.as_expected() {
            let _ = writeln!(out, "    <testcase name=\"{name}\" classname=\"{class}\"/>");
        } else {
            let _ = writeln!(
                out,
                "    <testcase name=\"{name}\" classname=\"{class}\">\n      <failure message=\"expected {} got {}\">{}</failure>\n    </testcase>",
                r.labels.expected,
                r.observed.outcome,
                xml(r.observed.message.as_deref().unwrap_or(""))
            );
        }
    }
    let _ = writeln!(out, "  </testsuite>");
    let _ = writeln!(
        out,
        "  <testsuite name=\"release-gate\" tests=\"{}\" failures=\"{rate_failures}\">",
        report.rates.len()
    );
    for r in &report.rates {
        let detail = format!(
            "{} / {} {} = {} (max {})",
            r.numerator,
            r.denominator,
            r.kind.denominator_name(),
            percent(r),
            max(r)
        );
        if r.passes() {
            let _ = writeln!(
                out,
                "    <testcase name=\"{}\" classname=\"rates\"><system-out>{}</system-out></testcase>",
                r.kind,
                xml(&detail)
            );
        } else {
            let _ = writeln!(
                out,
                "    <testcase name=\"{}\" classname=\"rates\">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                r.kind,
                xml(&detail),
                xml(&r.cases.join(", "))
            );
        }
    }
    let _ = writeln!(out, "  </testsuite>\n</testsuites>");
    out
}
