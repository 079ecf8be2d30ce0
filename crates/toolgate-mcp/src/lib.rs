//! # toolgate-mcp
//!
//! The MCP gateway's parts (docs/mcp.md): toolgate in front of MCP servers,
//! so that a `tools/call` from an agent host goes through the same decision
//! as a proposal posted to the sidecar.
//!
//! - [`config`]: the deployment file's `[[upstreams]]` and each tool's
//!   mapping (scope fields from arguments, identity or `_meta`; where
//!   `version_seen` comes from).
//! - [`pin`]: pinned tool definitions (`toolgate mcp import`) and the
//!   comparison that withholds a tool whose upstream definition changed.
//! - [`upstream`]: rmcp clients for upstreams over Streamable HTTP or stdio,
//!   with the gateway's own credential and the operation key in `_meta`.
//! - [`import`]: `toolgate mcp import`, pinning what an upstream offers.
//! - [`entries`]: pinned resources, resource templates and prompts, and
//!   which URI a pinned template matches.
//! - [`catalog`]: the tools served (mapped, pinned, current, in the
//!   policy) and each call prepared for the decision.
//! - [`executor`]: the upstream as the core's `Executor`: the operation
//!   key in `_meta`, the result recorded as given, reconciliation through a
//!   status tool.
//! - [`gateway`]: the rmcp `ServerHandler`: `tools/list` per caller,
//!   `tools/call` through one decision.
//! - [`http`]: `/mcp` over Streamable HTTP, behind API-key authentication
//!   and the strict decoder.
//! - [`refresh`]: the pins compared again while serving (every
//!   `refresh_secs`, and on an upstream's `list_changed`), the catalog
//!   swapped.
//! - [`served`]: the decision on a deployment `toolgate serve` runs (the
//!   sidecar's components, the core's `decide_call`).
//! - [`stdio`]: the gateway on stdio, each line through the strict decoder.
//! - [`wire`]: the decision seam ([`wire::Decide`]) and the mapping of the
//!   core's decisions to `tools/call` answers.
//!
//! No JSON-RPC framing is written here: rmcp does it on both sides.

#![warn(missing_docs)]

pub mod catalog;
pub mod config;
pub mod entries;
pub mod exchange;
pub mod executor;
pub mod gateway;
pub mod http;
pub mod import;
pub mod pin;
pub mod refresh;
pub mod served;
pub mod sessions;
pub mod stdio;
pub mod upstream;
pub mod wire;
