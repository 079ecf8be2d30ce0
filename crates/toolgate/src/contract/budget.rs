//! Budgets (docs/design.md §15): a tool's `[[tools.budgets]]`, each summing
//! one integer argument per scope fields and/or actor over a UTC calendar
//! window and comparing the sum with a limit.
//!
//! ```toml
//! [[tools.budgets]]
//! name = "daily_amount_per_customer"
//! amount = "/amount_minor"   # JSON pointer into the validated arguments
//! per = ["customer_id"]      # scope fields and/or "actor"
//! window = "day"             # hour | day | month
//! limit = 5000
//! over = "pending_approval"  # or "rejected"
//! ```
//!
//! Loading checks what can be checked without a request: the pointer names
//! a required integer property whose schema sets a `maximum` (so one call's
//! amount is bounded and never negative, `minimum` ≥ 0), every `per` entry is
//! one of the tool's scope fields or `actor`, the limit is positive, the
//! window and `over` are known words, and names are distinct in the policy.
//! The reservation itself is the claim store's (docs/policy.md, Budgets).

use super::is_identifier;
use crate::calendar::{civil_from_days, days_from_civil};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One `[[tools.budgets]]` table as written.
#[derive(Deserialize, Serialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct BudgetFile {
    pub(crate) name: String,
    pub(crate) amount: String,
    pub(crate) per: Vec<String>,
    pub(crate) window: String,
    pub(crate) limit: i64,
    pub(crate) over: String,
}

/// The calendar window a budget sums over, in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// `[hh:00, hh+1:00)` UTC.
    Hour,
    /// `[00:00, 24:00)` UTC.
    Day,
    /// From the first of the month 00:00 UTC to the first of the next.
    Month,
}

impl Window {
    /// The word in the policy.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hour => "hour",
            Self::Day => "day",
            Self::Month => "month",
        }
    }

    fn from_name(s: &str) -> Option<Self> {
        match s {
            "hour" => Some(Self::Hour),
            "day" => Some(Self::Day),
            "month" => Some(Self::Month),
            _ => None,
        }
    }

    /// The start (Unix milliseconds, UTC) of the window holding `at_ms`:
    /// windows are half-open, so an instant exactly at a boundary belongs
    /// to the window that starts there.
    pub fn start_ms(self, at_ms: i64) -> i64 {
        const HOUR: i64 = 3_600_000;
        const DAY: i64 = 24 * HOUR;
        match self {
            Self::Hour => at_ms.div_euclid(HOUR) * HOUR,
            Self::Day => at_ms.div_euclid(DAY) * DAY,
            Self::Month => {
                let (y, m, _) = civil_from_days(at_ms.div_euclid(DAY));
                days_from_civil(y, m, 1) * DAY
            }
        }
    }
}

/// What an operation over a budget's limit becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// `pending_approval` (reason `budget_exceeded`): a person may approve it
    /// beyond the limit.
    PendingApproval,
    /// `rejected` (reason `budget_exceeded`).
    Rejected,
}

impl Over {
    /// The word in the policy.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PendingApproval => "pending_approval",
            Self::Rejected => "rejected",
        }
    }
}

/// One entry of a budget's `per`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Per {
    /// A scope field of the tool's operation key, by name.
    Scope(String),
    /// The authenticated actor (the principal every stage sees).
    Actor,
}

/// A checked budget.
#[derive(Debug, Clone)]
pub struct Budget {
    name: Arc<str>,
    amount: String,
    per: Vec<Per>,
    window: Window,
    limit: i64,
    over: Over,
    minimum: i64,
    maximum: i64,
}

impl Budget {
    /// The budget's name, distinct in the policy: the counters' key.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// JSON pointer into the validated arguments.
    pub fn amount_pointer(&self) -> &str {
        &self.amount
    }
    /// What the sum is kept per.
    pub fn per(&self) -> &[Per] {
        &self.per
    }
    /// The calendar window.
    pub fn window(&self) -> Window {
        self.window
    }
    /// The largest sum within one window and scope.
    pub fn limit(&self) -> i64 {
        self.limit
    }
    /// What going over gives.
    pub fn over(&self) -> Over {
        self.over
    }
    /// The amount's schema `minimum` (0 when the schema sets none).
    pub fn amount_minimum(&self) -> i64 {
        self.minimum
    }
    /// The amount's schema `maximum`.
    pub fn amount_maximum(&self) -> i64 {
        self.maximum
    }

    /// The amount of validated `arguments` this budget counts. `None` only if
    /// the arguments did not pass the tool's schema, which the contract stage
    /// has already refused.
    pub fn amount_of(&self, arguments: &Value) -> Option<i64> {
        arguments.pointer(&self.amount)?.as_i64()
    }

    /// The worst case in one sentence (`policy explain`), in the argument's
    /// own units: the policy does not say how many minor units a major one
    /// has, so no decimal point is invented.
    pub fn worst_case(&self) -> String {
        let per = self
            .per
            .iter()
            .map(|p| match p {
                Per::Scope(f) => f.as_str(),
                Per::Actor => "actor",
            })
            .collect::<Vec<_>>()
            .join(" and ");
        let field = self.amount.trim_start_matches('/');
        // Fewest calls that reach the limit: each at most `maximum`.
        let fewest = (self.limit + self.maximum - 1) / self.maximum;
        let most = if self.minimum > 0 {
            format!("at most {} calls", self.limit / self.minimum)
        } else {
            "any number of calls of 0".to_owned()
        };
        format!(
            "budget {}: at most {} in {field} per {per} per UTC {} ([start, end) by the claim's attempt time), reached in {fewest} calls of up to {} ({most} fit); over it: {}",
            self.name,
            self.limit,
            self.window.as_str(),
            self.maximum,
            self.over.as_str(),
        )
    }
}

/// Checks one tool's budgets; `Err` is (field, message).
pub(crate) fn load_budgets(
    files: Vec<BudgetFile>,
    schema: &Value,
    operation_key: &[String],
) -> Result<Vec<Budget>, (String, String)> {
    let mut out: Vec<Budget> = Vec::with_capacity(files.len());
    for (i, b) in files.into_iter().enumerate() {
        let at = |what: &str| format!("budgets[{i}] {}: {what}", b.name);
        if !is_identifier(&b.name) {
            return Err((
                at("name"),
                "a budget name is 1-64 characters of [A-Za-z0-9_-]".to_owned(),
            ));
        }
        if out.iter().any(|o| *o.name == *b.name) {
            return Err((at("name"), format!("budget `{}` is declared twice", b.name)));
        }
        let (minimum, maximum) = amount_bounds(schema, &b.amount).map_err(|m| (at("amount"), m))?;
        if b.per.is_empty() {
            return Err((
                at("per"),
                "name at least one scope field or \"actor\"".to_owned(),
            ));
        }
        let mut per = Vec::with_capacity(b.per.len());
        for p in &b.per {
            let entry = if p == "actor" {
                Per::Actor
            } else if operation_key.contains(p) {
                Per::Scope(p.clone())
            } else {
                return Err((
                    at("per"),
                    format!(
                        "`{p}` is neither \"actor\" nor a scope field of this tool's operation_key ({})",
                        operation_key.join(", ")
                    ),
                ));
            };
            if per.contains(&entry) {
                return Err((at("per"), format!("`{p}` is named twice")));
            }
            per.push(entry);
        }
        let window = Window::from_name(&b.window).ok_or_else(|| {
            (
                at("window"),
                format!(
                    "unknown window {:?} (expected hour, day or month)",
                    b.window
                ),
            )
        })?;
        if b.limit <= 0 {
            return Err((
                at("limit"),
                format!("must be a positive integer, not {}", b.limit),
            ));
        }
        let over = match b.over.as_str() {
            "pending_approval" => Over::PendingApproval,
            "rejected" => Over::Rejected,
            other => {
                return Err((
                    at("over"),
                    format!("unknown outcome {other:?} (expected pending_approval or rejected)"),
                ));
            }
        };
        out.push(Budget {
            name: b.name.into(),
            amount: b.amount,
            per,
            window,
            limit: b.limit,
            over,
            minimum,
            maximum,
        });
    }
    Ok(out)
}

/// The amount's (minimum, maximum): the pointer must name a required,
/// top-level integer property with a `maximum` and a `minimum` ≥ 0 (a
/// negative amount would give budget back).
fn amount_bounds(schema: &Value, pointer: &str) -> Result<(i64, i64), String> {
    let name = pointer
        .strip_prefix('/')
        .filter(|n| !n.is_empty() && !n.contains('/') && !n.contains('~'))
        .ok_or_else(|| {
            format!("{pointer:?} is not a pointer to a top-level argument (\"/amount_minor\")")
        })?;
    let prop = schema
        .get("properties")
        .and_then(|p| p.get(name))
        .ok_or_else(|| format!("{pointer:?} names no property of the tool's schema"))?;
    if prop.get("type").and_then(Value::as_str) != Some("integer") {
        return Err(format!(
            "{pointer:?} is not an integer property (its schema must say \"type\": \"integer\")"
        ));
    }
    let maximum = prop.get("maximum").and_then(Value::as_i64).ok_or_else(|| {
        format!("{pointer:?} has no integer \"maximum\": one call could exceed any limit")
    })?;
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|v| v.as_str() == Some(name)));
    if !required {
        return Err(format!(
            "{pointer:?} must be required: an absent amount would count as nothing"
        ));
    }
    let minimum = match prop.get("minimum") {
        None => None,
        Some(m) => Some(
            m.as_i64()
                .ok_or_else(|| format!("{pointer:?} has a \"minimum\" that is not an integer"))?,
        ),
    };
    match minimum {
        Some(m) if m >= 0 && m <= maximum && maximum > 0 => Ok((m, maximum)),
        _ => Err(format!(
            "{pointer:?} needs \"minimum\" ≥ 0 and a positive \"maximum\" at least as large: a negative amount would give budget back"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;

    #[test]
    fn windows_are_half_open_utc_calendar_windows() {
        // 2026-03-01T00:00:00Z
        let march = days_from_civil(2026, 3, 1) * DAY;
        assert_eq!(Window::Month.start_ms(march), march);
        assert_eq!(
            Window::Month.start_ms(march - 1),
            days_from_civil(2026, 2, 1) * DAY
        );
        assert_eq!(Window::Day.start_ms(march - 1), march - DAY);
        assert_eq!(Window::Day.start_ms(march), march);
        assert_eq!(Window::Hour.start_ms(march + 3_599_999), march);
        assert_eq!(Window::Hour.start_ms(march + 3_600_000), march + 3_600_000);
        // Before 1970 too.
        assert_eq!(Window::Day.start_ms(-1), -DAY);
        for z in [-800_000, -1, 0, 59, 60, 20_000, 2_000_000] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(days_from_civil(2024, 2, 29)), (2024, 2, 29));
    }
}
