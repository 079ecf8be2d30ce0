//! # toolgate-service
//!
//! The gate as a running service: what every front door shares, so that
//! the same call is judged the same way through each.
//!
//! - [`Service`]: one deployment's policy, [`Components`], identities and
//!   settings, and [`Service::decide`], the one decision function: the
//!   core's whole decision (`toolgate::pipeline::decide_call`) on a task of
//!   its own, which [`Service::drain`] waits for at shutdown.
//! - [`components`]: the core's component traits as trait objects
//!   ([`Authz`], [`State`], [`Store`], [`Exec`]), and [`Components`], how a
//!   deployment decides one proposal over them.
//! - [`identity`]: API keys and the principals they name.
//! - [`clock`]: the wall clock and holder tokens (the core has neither).
//! - [`metrics`]: the Prometheus series every door records into.
//! - [`webhook`]: the review webhook announcing new review items.
//! - [`cap`]: the result cap on every way a result is recorded.
//!
//! ## Architecture invariant
//!
//! No HTTP framework and no MCP SDK: `toolgate-http` and `toolgate-mcp`
//! depend on this crate and never on each other. A door decodes its wire
//! format into a [`Proposal`] and maps the [`toolgate::pipeline::Settled`]
//! back; it decides nothing.

#![warn(missing_docs)]

pub mod cap;
pub mod clock;
pub mod components;
pub mod identity;
pub mod limits;
pub mod metrics;
pub mod reads;
mod service;
pub mod tokens;
pub mod webhook;

pub use cap::{Capped, ResultCap};
pub use components::{
    Authz, BoxFuture, Components, DynAuthorizer, DynExecutor, DynStateSource, DynStore, Exec,
    ExecRef, Parts, State, Store,
};
pub use identity::{
    ApiKey, ExecutionMode, KeyError, KeyRing, METRICS_CAPABILITY, OPERATE_CAPABILITY,
    REVIEW_CAPABILITY, bearer_token,
};
pub use limits::HttpLimits;
pub use metrics::Metrics;
pub use reads::ReadProposal;
pub use service::{DecideError, Proposal, Service, Settings};
pub use tokens::{IssuerSettings, Issuers, TokenError};
pub use webhook::ReviewWebhook;
