//! The reviewer page's HTML: the queue, an item's card and the login form,
//! every text escaped, no script.

use serde::Deserialize;
use serde_json::Value;
use toolgate::pipeline::{BudgetReport, Outcome, PriorProposal, Reason};
use toolgate::review::{ItemStatus, ListQuery, Verdict};

use crate::dto::ReviewItemView;

pub(super) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An id as a card shows it: escaped, and, when it has characters outside
/// ASCII, followed by their code points, so a look-alike (a Cyrillic `а`
/// in `аgent-ana`) never reads as the id it imitates.
pub(super) fn who(id: &str) -> String {
    let foreign: Vec<String> = id
        .chars()
        .filter(|c| !c.is_ascii())
        .take(8)
        .map(|c| format!("U+{:04X}", c as u32))
        .collect();
    if foreign.is_empty() {
        esc(id)
    } else {
        format!(
            "{} <span class=\"codepoints\">({})</span>",
            esc(id),
            foreign.join(" ")
        )
    }
}

pub(super) const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2rem;max-width:72rem;color:#222}\
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem;border-bottom:1px solid #ccc}\
.item{border:1px solid #ccc;border-radius:6px;padding:.8rem;margin:.8rem 0}\
.cols{display:grid;grid-template-columns:1fr 1fr;gap:1rem}\
.code{font-family:ui-monospace,monospace;font-size:.85rem;background:#f5f5f5;padding:.3rem;white-space:pre-wrap;word-break:break-all}\
.status{font-weight:bold}.approved{color:#060}.denied{color:#900}\
button{margin-right:.5rem;padding:.3rem .9rem}form.inline{display:inline}";

pub(super) fn page_shell(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>{body}</body></html>",
        esc(title)
    )
}

pub(super) fn login_page(message: Option<&str>) -> String {
    let note = message.map_or(String::new(), |m| {
        format!("<p class=\"status denied\">{}</p>", esc(m))
    });
    page_shell(
        "toolgate review: sign in",
        &format!(
            "<h1>toolgate review</h1>{note}<form method=\"post\" action=\"/review/login\">\
             <label>Reviewer API key <input type=\"password\" name=\"key\" id=\"key\" autocomplete=\"off\"></label> \
             <button type=\"submit\" id=\"login\">Sign in</button></form>"
        ),
    )
}

pub(super) fn json_text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "—".to_owned(),
        Some(v) => esc(&v.to_string()),
    }
}

/// A text as plain (escaped) text, with its times made readable; `—` when
/// there is none.
pub(super) fn plain(text: Option<&str>) -> String {
    text.map_or_else(|| "—".to_owned(), |t| esc(&humane_text(t)))
}

/// The decision an item was opened with, as the card reads it: the
/// decision as sent with the new proposal's `arguments`, or, in a listing,
/// its summary (`truncated`). A stored decision that does not read as one
/// shows as empty: the card still names the item, its kind and its status.
#[derive(Debug, Default, Deserialize)]
pub(super) struct StoredDecision {
    reason: Option<Reason>,
    message: Option<String>,
    arguments: Option<Value>,
    version_seen: Option<String>,
    current_version: Option<String>,
    result: Option<Value>,
    prior: Option<PriorProposal>,
    budget: Option<BudgetReport>,
    #[serde(default)]
    truncated: bool,
}

impl StoredDecision {
    pub(super) fn read(decision: &Value) -> Self {
        Self::deserialize(decision).unwrap_or_default()
    }
}

/// The budget a `budget_exceeded` proposal would pass, shown next to it
/// (docs/policy.md, "Budgets"): approving lets it reserve beyond the limit.
/// Empty for every other item.
pub(super) fn budget_line(budget: Option<&BudgetReport>) -> String {
    let Some(b) = budget else {
        return String::new();
    };
    format!(
        "<div class=\"budget\">budget <code>{}</code>: {} of {} already reserved in this window, {} remaining; this proposal {} (approving reserves it beyond the limit)</div>",
        esc(&b.name),
        b.used,
        b.limit,
        b.remaining,
        b.amount,
    )
}

/// Unix milliseconds as `2026-12-01 04:12:05 UTC`.
pub(super) fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (y, m, d) = toolgate::calendar::civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        s / 3600,
        s % 3600 / 60,
        s % 60
    )
}

/// A duration in the largest unit that keeps it readable.
pub(super) fn span(ms: i64) -> String {
    let s = ms.unsigned_abs() / 1000;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..172_800 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    }
}

/// A moment, absolute and relative to `now` (the render time).
pub(super) fn when(ms: i64, now: i64) -> String {
    let rel = if ms <= now {
        format!("{} ago", span(now - ms))
    } else {
        format!("in {}", span(ms - now))
    };
    format!(
        "<time title=\"{ms}\">{}</time> <span class=\"rel\">({rel})</span>",
        utc(ms)
    )
}

/// A message with any Unix-millisecond time in it (13 digits, as the
/// pipeline writes a lease's end) shown as a UTC time instead.
pub(super) fn humane_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut digits = String::new();
    let flush = |digits: &mut String, out: &mut String| {
        match digits.parse::<i64>() {
            Ok(ms) if digits.len() == 13 => out.push_str(&utc(ms)),
            _ => out.push_str(digits),
        }
        digits.clear();
    };
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            flush(&mut digits, &mut out);
            out.push(c);
        }
    }
    flush(&mut digits, &mut out);
    out
}

/// Whether an integer argument is an amount in minor units (cents).
pub(super) fn is_minor(name: &str, description: Option<&str>) -> bool {
    name.ends_with("_minor")
        || description.is_some_and(|d| d.to_ascii_lowercase().contains("minor unit"))
}

/// Minor units as an amount with two decimals: 2000 -> 20.00.
pub(super) fn amount(minor: i64) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let a = minor.unsigned_abs();
    format!("{sign}{}.{:02}", a / 100, a % 100)
}

/// Arguments per the tool's schema: each property under its schema
/// `description` (its name otherwise), amounts in minor units with two
/// decimals beside the raw value, strings and enum values as plain text.
/// Everything is escaped; a non-object is shown as escaped JSON.
pub(super) fn arguments(args: Option<&Value>, schema: Option<&Value>, class: &str) -> String {
    let Some(Value::Object(map)) = args else {
        return format!("<div class=\"code {class}\">{}</div>", json_text(args));
    };
    let props = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object);
    let mut out = format!("<dl class=\"args {class}\">");
    for (name, v) in map {
        let description = props
            .and_then(|p| p.get(name))
            .and_then(|p| p.get("description"))
            .and_then(Value::as_str);
        let label = match description {
            Some(d) => format!("{} <small>{}</small>", esc(d), esc(name)),
            None => esc(name),
        };
        let shown = match (v, v.as_i64()) {
            (Value::Number(n), Some(minor)) if n.is_i64() && is_minor(name, description) => {
                format!(
                    "<span class=\"amount\">{}</span> <span class=\"raw\">({minor})</span>",
                    amount(minor)
                )
            }
            (Value::String(s), _) => esc(s),
            (other, _) => esc(&other.to_string()),
        };
        out.push_str(&format!(
            "<dt>{label}</dt><dd data-arg=\"{}\">{shown}</dd>",
            esc(name)
        ));
    }
    out.push_str("</dl>");
    out
}

/// The item's scope (the server-fixed fields: account, order, resource…),
/// one `name: value` per field.
pub(super) fn scope_line(scope: Option<&str>) -> String {
    let parsed = scope.and_then(|s| {
        toolgate::decode::decode_strict(s.as_bytes(), &toolgate::decode::Limits::provider_body())
            .ok()
    });
    let fields = match parsed {
        Some(Value::Object(m)) if !m.is_empty() => m
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => esc(s),
                    other => esc(&other.to_string()),
                };
                format!(
                    "<span class=\"scope-field\" data-field=\"{k}\">{k}: <b>{v}</b></span>",
                    k = esc(k)
                )
            })
            .collect::<Vec<_>>()
            .join(" · "),
        Some(other) => esc(&other.to_string()),
        None => "—".to_owned(),
    };
    format!("<div class=\"scope\">About: {fields}</div>")
}

/// One card's actions: a single form whose buttons post to the action
/// they name, sharing the note field and the CSRF token. Its first submit
/// button is disabled, so Enter in the note field submits nothing: an
/// action is always a click on the button that names it.
pub(super) fn actions(
    id: u64,
    csrf: &str,
    buttons: &[(&str, &str, Option<&str>)],
    note_hint: &str,
) -> String {
    let mut out = format!(
        "<form class=\"act\" method=\"post\" action=\"/review/items/{id}/{first}\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <button type=\"submit\" disabled hidden aria-hidden=\"true\"></button>\
         <input type=\"text\" name=\"note\" maxlength=\"1900\" placeholder=\"{note_hint}\"> ",
        first = buttons.first().map_or("", |b| b.0),
        csrf = esc(csrf),
    );
    for (action, label, applied) in buttons {
        let (path, value, dom) = match applied {
            Some(v) => (
                "reconcile",
                format!(" name=\"applied\" value=\"{v}\""),
                *action,
            ),
            None => (*action, String::new(), *action),
        };
        out.push_str(&format!(
            "<button type=\"submit\" class=\"{dom}\" id=\"{dom}-{id}\" formaction=\"/review/items/{id}/{path}\"{value}>{label}</button>"
        ));
    }
    out.push_str("</form>");
    out
}

/// Everything one card needs besides the item.
pub(super) struct Card<'a> {
    pub(super) scope: Option<&'a str>,
    pub(super) schema: Option<&'a Value>,
    pub(super) now: i64,
}

pub(super) fn render_item(i: &ReviewItemView, card: &Card<'_>, csrf: &str) -> String {
    let d = StoredDecision::read(&i.decision);
    let now = card.now;
    let reason = d
        .reason
        .map(|r| format!(" · reason <code>{}</code>", esc(r.as_str())))
        .unwrap_or_default();
    let via = i
        .proposer_via
        .as_deref()
        .map(|v| format!(" <span class=\"via\">via {}</span>", who(v)))
        .unwrap_or_default();
    // A listing carries a summary of a long decision: the item's own page
    // has the whole of it.
    let whole = if d.truncated {
        format!(
            " · <a class=\"full-text\" href=\"/review/items/{}\">the whole decision</a>",
            i.id
        )
    } else {
        String::new()
    };
    let head = format!(
        "<div class=\"item {kind}\" id=\"item-{id}\" data-kind=\"{kind}\" data-status=\"{status}\"><div><b><a href=\"/review/items/{id}\">#{id}</a></b> {kind} · tool <b class=\"tool\">{tool}</b> · proposed by <span class=\"proposer\">{proposer}</span>{via}{reason}{whole}</div>{scope}<div class=\"opened\">opened {opened}</div>",
        id = i.id,
        kind = i.kind.as_str(),
        status = i.status.as_str(),
        tool = esc(i.tool.as_deref().unwrap_or("—")),
        proposer = who(&i.proposer),
        scope = scope_line(card.scope),
        opened = when(i.at, now),
    );
    let args = |v: Option<&Value>, class: &str| arguments(v, card.schema, class);
    let message = d
        .message
        .as_deref()
        .map(|m| format!("<div class=\"message\">{}</div>", plain(Some(m))))
        .unwrap_or_default();
    let prior = d.prior.as_ref();
    let prior_arguments = prior.and_then(|p| p.arguments.as_ref());
    let body = match i.kind {
        Outcome::Conflict => format!(
            "{message}<div class=\"cols\"><div><h3>Prior proposal</h3><div>arguments</div>{}<div>version seen {}, by {}</div><div>recorded result</div><div class=\"code prior-result\">{}</div></div>\
             <div><h3>New proposal</h3><div>arguments</div>{}<div>version seen {}</div></div></div>",
            args(prior_arguments, "prior-arguments"),
            plain(prior.map(|p| p.version_seen.as_str())),
            plain(prior.map(|p| p.proposer.as_str())),
            json_text(d.result.as_ref()),
            args(d.arguments.as_ref(), "new-arguments"),
            plain(d.version_seen.as_deref()),
        ),
        Outcome::StateChanged => format!(
            "{message}<div>the model read version <b class=\"version-seen\">{}</b>; the current version is <b class=\"current-version\">{}</b></div>{}",
            plain(d.version_seen.as_deref()),
            plain(d.current_version.as_deref()),
            args(d.arguments.as_ref(), "arguments"),
        ),
        Outcome::Rejected => format!("{message}{}", args(d.arguments.as_ref(), "arguments")),
        Outcome::NeedsReconciliation => {
            let key = i.operation_key.as_deref().unwrap_or("");
            format!(
                "{message}<div>prior proposal</div>{}<div>claim <a class=\"claim-link\" href=\"/v1/claims?stuck=true\"><code>{}</code></a>: check the downstream system, then say whether the write happened (it is never executed again).</div>",
                args(prior_arguments, "arguments"),
                esc(key),
            )
        }
        // A proposal waiting for a person (and any other outcome): its
        // arguments, budget, version and approvals.
        _ => {
            let expiry = i.expires_at.map_or(String::new(), |e| {
                if e > now {
                    format!(" · expires {}", when(e, now))
                } else {
                    format!(" · expired {}", when(e, now))
                }
            });
            format!(
                "{message}<div>arguments</div>{}{}<div>version seen {} · approvals {}/{}{expiry}</div>",
                args(d.arguments.as_ref(), "arguments"),
                budget_line(d.budget.as_ref()),
                plain(d.version_seen.as_deref()),
                i.votes
                    .iter()
                    .filter(|v| v.verdict == Verdict::Approve)
                    .count(),
                i.approvals_needed,
            )
        }
    };
    let by = esc(i.by.as_deref().unwrap_or("—"));
    let note = i
        .note
        .as_deref()
        .map(|n| format!(" · note: {}", esc(n)))
        .unwrap_or_default();
    let closed = i
        .closed_at
        .map(|t| format!(" · {}", when(t, now)))
        .unwrap_or_default();
    let status = match i.status {
        ItemStatus::Open if i.approvals_needed > 0 => actions(
            i.id,
            csrf,
            &[("approve", "Approve", None), ("deny", "Deny", None)],
            "note (optional)",
        ),
        ItemStatus::Open if i.kind == Outcome::NeedsReconciliation => actions(
            i.id,
            csrf,
            &[
                ("applied", "Applied", Some("true")),
                ("not-applied", "Not applied", Some("false")),
                ("dismiss", "Dismiss", None),
            ],
            "what the downstream system says (optional)",
        ),
        ItemStatus::Open => actions(
            i.id,
            csrf,
            &[("resolve", "Resolve", None), ("dismiss", "Dismiss", None)],
            "note (optional)",
        ),
        ItemStatus::Approved => format!(
            "<div class=\"status approved\">approved by {by}{closed}; {}{note}</div>",
            match (i.consumed_at, i.consumed_by.as_deref()) {
                (Some(at), Some(user)) => format!(
                    "used by <span class=\"used-by\">{}</span> {}",
                    who(user),
                    when(at, now)
                ),
                (Some(at), None) => format!("used {}", when(at, now)),
                (None, _) => "waiting for the proposer's retry (no one else can use it)".to_owned(),
            }
        ),
        ItemStatus::Denied => {
            format!("<div class=\"status denied\">denied by {by}{closed}{note}</div>")
        }
        ItemStatus::Expired => {
            "<div class=\"status denied\">expired (counts as denied)</div>".to_owned()
        }
        ItemStatus::Resolved => {
            format!("<div class=\"status approved\">resolved by {by}{closed}{note}</div>")
        }
        ItemStatus::Dismissed => {
            format!("<div class=\"status\">dismissed by {by}{closed}{note}</div>")
        }
    };
    format!("{head}{body}{status}</div>")
}

pub(super) const KINDS: [(Outcome, &str); 5] = [
    (Outcome::PendingApproval, "Pending approval"),
    (Outcome::Conflict, "Conflicts"),
    (Outcome::StateChanged, "State changed"),
    (Outcome::NeedsReconciliation, "Needs reconciliation"),
    (Outcome::Rejected, "Rejected"),
];

/// The filter form: kind and status, submitted as a GET.
pub(super) fn filter_form(query: &ListQuery) -> String {
    let option = |value: &str, label: &str, chosen: bool| {
        format!(
            "<option value=\"{value}\"{}>{label}</option>",
            if chosen { " selected" } else { "" }
        )
    };
    let mut kinds = option("", "any kind", query.kind.is_none());
    for (k, title) in KINDS {
        let k = k.as_str();
        kinds.push_str(&option(k, title, query.kind.as_deref() == Some(k)));
    }
    let mut statuses = option("", "any status", query.status.is_none());
    for s in ItemStatus::ALL {
        statuses.push_str(&option(s.as_str(), s.as_str(), query.status == Some(s)));
    }
    format!(
        "<form method=\"get\" action=\"/review\" id=\"filter\">Show <select name=\"kind\" id=\"filter-kind\">{kinds}</select> \
         <select name=\"status\" id=\"filter-status\">{statuses}</select> <button type=\"submit\" id=\"filter-go\">Filter</button> \
         <a href=\"/review\">clear</a></form>"
    )
}

pub(super) fn review_page(
    cards: &[(ReviewItemView, Card<'_>)],
    next_before: Option<u64>,
    query: &ListQuery,
    reviewer: &str,
    csrf: &str,
) -> String {
    let mut body = format!(
        "<h1>toolgate review</h1><p>Signed in as <b>{}</b>. <form class=\"inline\" method=\"post\" action=\"/review/logout\"><button type=\"submit\">Sign out</button></form></p>{}",
        esc(reviewer),
        filter_form(query),
    );
    for (kind, title) in KINDS {
        if query.kind.as_deref().is_some_and(|k| k != kind.as_str()) {
            continue;
        }
        let listed: Vec<String> = cards
            .iter()
            .filter(|(i, _)| i.kind == kind)
            .map(|(i, c)| render_item(i, c, csrf))
            .collect();
        body.push_str(&format!(
            "<h2 id=\"{kind}\">{title} ({})</h2>",
            listed.len()
        ));
        if listed.is_empty() {
            body.push_str("<p>None.</p>");
        }
        for l in listed {
            body.push_str(&l);
        }
    }
    // The filters, kept on the paging links; both are known names (the
    // query was validated), so they need no URL escaping, and `&` is
    // written as the entity an attribute should carry.
    let mut filter = String::new();
    if let Some(s) = query.status {
        filter.push_str(&format!("&amp;status={s}"));
    }
    if let Some(k) = &query.kind {
        filter.push_str(&format!("&amp;kind={k}"));
    }
    body.push_str("<p class=\"paging\">");
    if query.before.is_some() {
        body.push_str(&format!(
            "<a id=\"first-page\" href=\"/review?{}\">Newest items</a> ",
            filter.trim_start_matches("&amp;")
        ));
    }
    if let Some(b) = next_before {
        body.push_str(&format!(
            "<a id=\"next-page\" href=\"/review?before={b}{filter}&amp;limit={}\">Older items</a>",
            query.limit
        ));
    }
    body.push_str("</p>");
    page_shell("toolgate review", &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dto::ReviewVote;
    use serde_json::json;

    const HOSTILE: &str = "\"><script>alert(1)</script><img src=x onerror=alert('x')>&amp;";

    fn view(kind: Outcome, decision: Value) -> ReviewItemView {
        ReviewItemView {
            id: 7,
            at: 1_796_082_000_000,
            kind,
            tool: Some(HOSTILE.to_owned()),
            proposer: HOSTILE.to_owned(),
            proposer_via: None,
            status: ItemStatus::Open,
            operation_key: Some(HOSTILE.to_owned()),
            approvals_needed: u32::from(kind == Outcome::PendingApproval),
            expires_at: Some(1_796_082_000_000 + 23 * 3_600_000 + 5_000),
            consumed_at: None,
            consumed_by: None,
            votes: Vec::<ReviewVote>::new(),
            by: None,
            closed_at: None,
            note: None,
            decision,
        }
    }

    #[test]
    fn times_are_utc_and_relative_never_epoch_milliseconds() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_796_082_562_326), "2026-11-30 23:49:22 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        let now = 1_796_082_562_326;
        assert!(when(now - 3 * 60_000 - 10, now).contains("(3 min ago)"));
        assert!(when(now + 23 * 3_600_000 + 9, now).contains("(in 23 h)"));
        assert_eq!(
            humane_text("the claim's lease ended at 1796082562326 with the outcome unknown"),
            "the claim's lease ended at 2026-11-30 23:49:22 UTC with the outcome unknown"
        );
        // Other numbers are left alone.
        assert_eq!(
            humane_text("version 42 of 12345678901234"),
            "version 42 of 12345678901234"
        );
    }

    #[test]
    fn amounts_in_minor_units_have_two_decimals_beside_the_raw_value() {
        assert_eq!(amount(2000), "20.00");
        assert_eq!(amount(5), "0.05");
        assert_eq!(amount(-1234), "-12.34");
        let schema = json!({"properties": {
            "amount_minor": {"type": "integer", "description": "Refund <amount>"},
            "fee": {"type": "integer", "description": "Fee in minor units"},
            "count": {"type": "integer"},
            "reason_code": {"type": "string", "enum": ["late_delivery"]}
        }});
        let html = arguments(
            Some(
                &json!({"amount_minor": 2000, "fee": 150, "count": 3, "reason_code": "late_delivery"}),
            ),
            Some(&schema),
            "arguments",
        );
        assert!(
            html.contains("Refund &lt;amount&gt; <small>amount_minor</small>"),
            "{html}"
        );
        assert!(
            html.contains("<span class=\"amount\">20.00</span> <span class=\"raw\">(2000)</span>"),
            "{html}"
        );
        assert!(
            html.contains("<span class=\"amount\">1.50</span>"),
            "{html}"
        );
        assert!(html.contains("<dd data-arg=\"count\">3</dd>"), "{html}");
        assert!(
            html.contains("<dd data-arg=\"reason_code\">late_delivery</dd>"),
            "{html}"
        );
    }

    #[test]
    fn hostile_strings_are_escaped_everywhere_on_a_card() {
        let decision = json!({
            "reason": "invalid_arguments",
            "message": format!("{HOSTILE} is not one of \"late_delivery\""),
            "arguments": {HOSTILE: HOSTILE, "amount_minor": 1},
            "version_seen": HOSTILE,
            "current_version": HOSTILE,
            "prior": {"tool": HOSTILE, "arguments": {"x": HOSTILE}, "proposer": HOSTILE, "version_seen": HOSTILE},
            "result": {"r": HOSTILE},
        });
        let schema = json!({"properties": {HOSTILE: {"description": HOSTILE}}});
        let scope = json!({HOSTILE: HOSTILE, "order_id": "o-1"}).to_string();
        for (kind, _) in KINDS {
            let card = Card {
                scope: Some(&scope),
                schema: Some(&schema),
                now: 1_796_082_000_000,
            };
            let html = render_item(&view(kind, decision.clone()), &card, HOSTILE);
            assert!(!html.contains("<script"), "{kind}: {html}");
            assert!(!html.contains("<img"), "{kind}: {html}");
            assert!(!html.contains(HOSTILE), "{kind}: {html}");
            assert!(html.contains("order_id: <b>o-1</b>"), "{kind}: {html}");
            assert!(html.contains("opened <time"), "{kind}: {html}");
            if kind != Outcome::PendingApproval {
                // The message as text: quotes are entities, never `\"`.
                assert!(
                    html.contains("is not one of &quot;late_delivery&quot;"),
                    "{kind}: {html}"
                );
                let message = format!(
                    "<div class=\"message\">{}</div>",
                    esc(&format!("{HOSTILE} is not one of \"late_delivery\""))
                );
                assert!(html.contains(&message), "{kind}: {html}");
            }
        }
        let card = Card {
            scope: None,
            schema: None,
            now: 1_796_082_000_000,
        };
        let pending = render_item(&view(Outcome::PendingApproval, decision), &card, "t");
        assert!(
            !pending.contains("class=\"budget\""),
            "no budget, no budget line"
        );
        assert!(pending.contains("expires <time"), "{pending}");
        assert!(pending.contains("(in 23 h)"), "{pending}");
        assert!(pending.contains("id=\"approve-7\"") && pending.contains("id=\"deny-7\""));
        // Enter in the note field must not approve: the form's default
        // button is a disabled one.
        let form = &pending[pending.find("<form class=\"act\"").unwrap()..];
        let first = &form[form.find("<button").unwrap()..];
        assert!(
            first.starts_with("<button type=\"submit\" disabled hidden"),
            "{form}"
        );
    }

    #[test]
    fn an_over_budget_proposal_shows_its_budget_escaped() {
        let decision = json!({
            "reason": "budget_exceeded",
            "arguments": {"amount_minor": 2000},
            "budget": {"name": "<b>x</b>", "limit": 5000, "used": 4000,
                       "remaining": 1000, "amount": 2000},
        });
        let card = Card {
            scope: None,
            schema: None,
            now: 1_796_082_000_000,
        };
        let html = render_item(&view(Outcome::PendingApproval, decision), &card, "t");
        assert!(
            html.contains("budget <code>&lt;b&gt;x&lt;/b&gt;</code>: 4000 of 5000 already reserved in this window, 1000 remaining; this proposal 2000"),
            "{html}"
        );
    }

    #[test]
    fn each_kind_gets_its_actions() {
        let card = Card {
            scope: None,
            schema: None,
            now: 0,
        };
        let stuck = render_item(&view(Outcome::NeedsReconciliation, json!({})), &card, "t");
        assert!(stuck.contains("id=\"applied-7\" formaction=\"/review/items/7/reconcile\" name=\"applied\" value=\"true\""), "{stuck}");
        assert!(stuck.contains("id=\"not-applied-7\" formaction=\"/review/items/7/reconcile\" name=\"applied\" value=\"false\""), "{stuck}");
        for kind in [Outcome::Conflict, Outcome::StateChanged, Outcome::Rejected] {
            let html = render_item(&view(kind, json!({})), &card, "t");
            assert!(
                html.contains("id=\"resolve-7\"") && html.contains("id=\"dismiss-7\""),
                "{html}"
            );
            assert!(html.contains("name=\"note\""), "{html}");
        }
    }

    #[test]
    fn a_stored_decision_that_does_not_read_leaves_an_empty_card_body() {
        let card = Card {
            scope: None,
            schema: None,
            now: 0,
        };
        let odd = json!({"reason": "no_such_reason", "message": "kept out", "version_seen": "v9"});
        let html = render_item(&view(Outcome::StateChanged, odd), &card, "t");
        assert!(!html.contains("kept out"), "{html}");
        assert!(
            html.contains("the model read version <b class=\"version-seen\">—</b>"),
            "{html}"
        );
        assert!(html.contains("data-kind=\"state_changed\""), "{html}");
    }
}
