//! Prometheus metrics, served by a door (`GET /metrics` on HTTP).
//!
//! Each [`Service`](crate::Service) has its own recorder instead of the
//! process-global one, so two routers in one process (tests, an application
//! embedding the sidecar next to its own metrics) never share or fight over
//! a global.
//!
//! Every label has a bounded set of values: tools come from the policy (a
//! tool name the model invented is counted under `tool=""`), routes are
//! templates, methods outside the standard ones are `OTHER`. Nothing a
//! client or a model sends can grow the number of series.

use std::collections::HashMap;

use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use toolgate::pipeline::Outcome;

/// The stuck-claims gauge counts at most this many (one bounded read per
/// scrape); more than this is an incident, whatever the exact number.
pub const STUCK_SCRAPE_CAP: u32 = 1000;

const META: Metadata<'static> = Metadata::new("toolgate_http", Level::INFO, Some("toolgate_http"));

/// Latency buckets in seconds: a decision on SQLite takes well under a
/// millisecond to a few; the upper buckets catch a slow store.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
];

/// One service's series, on a recorder of its own.
pub struct Metrics {
    // Registers the per-request series on first use; the handles registered
    // on it live as long as it does.
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// Decisions by (outcome, tool); the tool is `""` when there was none
    /// or it is not one of the policy's.
    decisions: HashMap<(Outcome, String), Counter>,
    latency: Histogram,
    /// Set at scrape time from the claim store and the reviewer queue.
    stuck: Gauge,
    review_depth: Gauge,
    /// Decisions inside the pipeline right now (claims this process may be
    /// holding while its executor runs).
    in_progress: Gauge,
    /// Permits this process handed out whose claims it has not yet seen
    /// completed: claims in flight with a client.
    permits: Gauge,
}

impl Metrics {
    /// Metrics for a sidecar whose policy declares `tools`.
    pub fn new<'a>(tools: impl IntoIterator<Item = &'a str>) -> Self {
        let builder = PrometheusBuilder::new();
        // `set_buckets` only fails on an empty list.
        let builder = match builder.set_buckets(&BUCKETS) {
            Ok(b) => b,
            Err(_) => PrometheusBuilder::new(),
        };
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        recorder.describe_counter(
            "toolgate_decisions_total".into(),
            None,
            "Decisions by outcome code.".into(),
        );
        recorder.describe_histogram(
            "toolgate_decision_duration_seconds".into(),
            Some(metrics::Unit::Seconds),
            "Time to decide, from a parsed request to the decision.".into(),
        );
        recorder.describe_gauge(
            "toolgate_budget_reserved".into(),
            None,
            "Amounts budget reservations hold now, per budget (the claim store's, every replica's).".into(),
        );
        recorder.describe_gauge(
            "toolgate_decisions_in_progress".into(),
            None,
            "Decisions inside the pipeline now (claims held while the executor runs).".into(),
        );
        recorder.describe_gauge(
            "toolgate_claims_in_flight".into(),
            None,
            "Permits handed to clients by this process and not yet completed through it.".into(),
        );
        recorder.describe_counter(
            "toolgate_http_requests_total".into(),
            None,
            "HTTP requests by method, route template and status.".into(),
        );
        recorder.describe_histogram(
            "toolgate_http_request_duration_seconds".into(),
            Some(metrics::Unit::Seconds),
            "HTTP request latency by method and route template, as the client saw it.".into(),
        );
        recorder.describe_gauge(
            "toolgate_claims_stuck".into(),
            None,
            format!(
                "In-flight claims whose lease has ended, read from the claim store at scrape \
                 time (counted up to {STUCK_SCRAPE_CAP})."
            )
            .into(),
        );
        recorder.describe_gauge(
            "toolgate_review_queue_depth".into(),
            None,
            "Reviewer items waiting for a person (open or being decided).".into(),
        );
        let mut names: Vec<String> = tools.into_iter().map(str::to_owned).collect();
        names.push(String::new());
        let mut decisions = HashMap::new();
        for o in Outcome::ALL {
            for tool in &names {
                let key = Key::from_parts(
                    "toolgate_decisions_total",
                    vec![
                        Label::new("outcome", o.as_str()),
                        Label::new("tool", tool.clone()),
                    ],
                );
                decisions.insert((o, tool.clone()), recorder.register_counter(&key, &META));
            }
        }
        let latency = recorder
            .register_histogram(&Key::from_name("toolgate_decision_duration_seconds"), &META);
        let in_progress =
            recorder.register_gauge(&Key::from_name("toolgate_decisions_in_progress"), &META);
        let permits = recorder.register_gauge(&Key::from_name("toolgate_claims_in_flight"), &META);
        let stuck = recorder.register_gauge(&Key::from_name("toolgate_claims_stuck"), &META);
        let review_depth =
            recorder.register_gauge(&Key::from_name("toolgate_review_queue_depth"), &META);
        Self {
            recorder,
            handle,
            decisions,
            latency,
            stuck,
            review_depth,
            in_progress,
            permits,
        }
    }

    /// Counts one decision under its outcome and tool.
    pub fn decided(&self, outcome: Outcome, tool: Option<&str>, seconds: f64) {
        let counter = tool
            .and_then(|t| self.decisions.get(&(outcome, t.to_owned())))
            .or_else(|| self.decisions.get(&(outcome, String::new())));
        if let Some(c) = counter {
            c.increment(1);
        }
        self.latency.record(seconds);
        if outcome == Outcome::Permitted {
            self.permits.increment(1.0);
        }
    }

    /// A decision entered the pipeline.
    pub fn started(&self) {
        self.in_progress.increment(1.0);
    }

    /// A decision left the pipeline.
    pub fn finished(&self) {
        self.in_progress.decrement(1.0);
    }

    /// A client completed the claim of a permit this process handed out.
    pub fn permit_closed(&self) {
        self.permits.decrement(1.0);
    }

    /// Counts one HTTP request. `route` is a route template or
    /// `unmatched`, never a raw path.
    pub fn http_request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let method = match method {
            "GET" | "POST" | "PUT" | "DELETE" | "HEAD" | "OPTIONS" | "PATCH" | "CONNECT"
            | "TRACE" => method,
            _ => "OTHER",
        };
        // The recorder's own registry finds the series of these labels (or
        // makes it on first use): no second map of handles here.
        let (method, route) = (method.to_owned(), route.to_owned());
        let counter = self.recorder.register_counter(
            &Key::from_parts(
                "toolgate_http_requests_total",
                vec![
                    Label::new("method", method.clone()),
                    Label::new("route", route.clone()),
                    Label::new("status", status.to_string()),
                ],
            ),
            &META,
        );
        let histogram = self.recorder.register_histogram(
            &Key::from_parts(
                "toolgate_http_request_duration_seconds",
                vec![Label::new("method", method), Label::new("route", route)],
            ),
            &META,
        );
        counter.increment(1);
        histogram.record(seconds);
    }

    /// Sets the gauges that are read at scrape time; `None` leaves the
    /// stuck-claims gauge at its last value (the store could not be read).
    pub fn observe_queues(&self, stuck_claims: Option<usize>, review_depth: usize) {
        // Bounded counts, far below 2^52: exact as f64.
        if let Some(n) = stuck_claims {
            self.stuck.set(n as f64);
        }
        self.review_depth.set(review_depth as f64);
    }

    /// Sets `toolgate_budget_reserved{budget}` from the claim store: what
    /// budget reservations hold now (docs/policy.md, "Budgets"). Only the
    /// policy's budget names become labels, so the series stay bounded.
    pub fn observe_budgets<'a>(
        &self,
        declared: impl IntoIterator<Item = &'a str>,
        reserved: &[(String, i64)],
    ) {
        for name in declared {
            let held = reserved
                .iter()
                .find(|(b, _)| b == name)
                .map_or(0, |(_, n)| *n);
            let key = Key::from_parts(
                "toolgate_budget_reserved",
                vec![Label::new("budget", name.to_owned())],
            );
            // Amounts in minor units, far below 2^52: exact as f64.
            self.recorder.register_gauge(&key, &META).set(held as f64);
        }
    }

    /// Folds recorded histogram samples into their buckets. Without it the
    /// exporter keeps every sample until the next scrape, so a server that
    /// nobody scrapes grows without bound; `serve` runs it on a timer.
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        self.handle.render()
    }
}
