//! Prometheus metrics for `GET /metrics`.
//!
//! Each [`AppState`](crate::AppState) has its own recorder instead of the
//! process-global one, so two routers in one process (tests, an application
//! embedding the sidecar next to its own metrics) never share or fight over
//! a global.

use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use toolgate::pipeline::Outcome;

const META: Metadata<'static> = Metadata::new("toolgate_http", Level::INFO, Some("toolgate_http"));

/// Latency buckets in seconds: a decision on SQLite takes well under a
/// millisecond to a few; the upper buckets catch a slow store.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
];

pub struct Metrics {
    // The recorder must live as long as the handles registered on it.
    _recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    decisions: Vec<(Outcome, Counter)>,
    latency: Histogram,
    /// Decisions inside the pipeline right now (claims this process may be
    /// holding while its executor runs).
    in_progress: Gauge,
    /// Permits this process handed out whose claims it has not yet seen
    /// completed: claims in flight with a client.
    permits: Gauge,
}

impl Metrics {
    pub fn new() -> Self {
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
            "toolgate_decisions_in_progress".into(),
            None,
            "Decisions inside the pipeline now (claims held while the executor runs).".into(),
        );
        recorder.describe_gauge(
            "toolgate_claims_in_flight".into(),
            None,
            "Permits handed to clients by this process and not yet completed through it.".into(),
        );
        let decisions = Outcome::ALL
            .iter()
            .map(|o| {
                let key = Key::from_parts(
                    "toolgate_decisions_total",
                    vec![Label::new("outcome", o.as_str())],
                );
                (*o, recorder.register_counter(&key, &META))
            })
            .collect();
        let latency = recorder
            .register_histogram(&Key::from_name("toolgate_decision_duration_seconds"), &META);
        let in_progress =
            recorder.register_gauge(&Key::from_name("toolgate_decisions_in_progress"), &META);
        let permits = recorder.register_gauge(&Key::from_name("toolgate_claims_in_flight"), &META);
        Self {
            _recorder: recorder,
            handle,
            decisions,
            latency,
            in_progress,
            permits,
        }
    }

    pub fn decided(&self, outcome: Outcome, seconds: f64) {
        if let Some((_, c)) = self.decisions.iter().find(|(o, _)| *o == outcome) {
            c.increment(1);
        }
        self.latency.record(seconds);
        if outcome == Outcome::Permitted {
            self.permits.increment(1.0);
        }
    }

    pub fn started(&self) {
        self.in_progress.increment(1.0);
    }

    pub fn finished(&self) {
        self.in_progress.decrement(1.0);
    }

    pub fn permit_closed(&self) {
        self.permits.decrement(1.0);
    }

    pub fn render(&self) -> String {
        self.handle.render()
    }
}
