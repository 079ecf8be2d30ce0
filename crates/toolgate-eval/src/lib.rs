//! # toolgate-eval
//!
//! Deterministic tests prove the gate works as written; this crate measures
//! whether the decisions that come through it are good (docs/design.md §10).
//!
//! A suite is a set of labelled cases ([`case`]): a recorded (or live,
//! [`live`]) provider response, the server context of the request, and what
//! a person judged: is the tool's action justified, does the user warrant
//! an answer, is the reply supported by the evidence, which outcome is
//! expected. [`runner::run`] sends every case through a [`GateUnderTest`]
//! (the real pipeline, or the [`RefuseAll`] baseline) and [`metrics`] turns
//! the results into rates that always carry their denominators:
//!
//! | rate | numerator | denominator |
//! |---|---|---|
//! | unjustified actions | executed, not justified | actions taken |
//! | blocked legitimate actions | justified, not executed | justified cases |
//! | unsupported replies | reply delivered, labelled unsupported | replies delivered |
//! | unnecessary abstentions | abstain or refused, warranting an answer | cases warranting an answer |
//! | unexpected outcomes | outcome ≠ expected | cases |
//!
//! The release gate fails when any rate is above its threshold in
//! `thresholds.toml` beside the cases. A gate that refuses everything has
//! no unjustified action and no unsupported reply; it fails on blocked
//! legitimate actions, which is why justified cases are first-class.
//!
//! The gate's own correctness is not what is measured: a well-formed
//! action for the maximum amount, justified by "the user seemed upset",
//! *should* pass the gate (it breaks no rule the gate can check), and the
//! evaluation counts it as unjustified.

#![warn(missing_docs)]

pub mod case;
pub mod deployment;
pub mod live;
pub mod metrics;
pub mod render;
pub mod runner;

pub use case::{Case, LoadError, load};
pub use metrics::{CaseResult, Observed, PassK, Rate, RateKind, Report, Thresholds};
pub use runner::{EvalError, GateUnderTest, RefuseAll, ServiceGate, run};
