//! The one door for model JSON (docs/design.md §3) and the storage normaliser (§4).
//!
//! Two decoders apply the same rules and give the same answers:
//!
//! - [`decode_strict`] (`strict.rs`) is **the reference decoder**. It builds a
//!   plain `serde_json::Value`, and its rejections (code, JSON pointer,
//!   message) are the only rejections there are. Limits are checked before
//!   any work, duplicate keys are rejected rather than resolved, and integers
//!   keep their lexical kind so that later layers can demand a true integer.
//!   Read it to learn what toolgate accepts.
//! - [`decode_tape`] (`tape.rs`) is **the fast path**. It accepts exactly
//!   the documents the reference accepts and builds the same values, into a
//!   [`Document`] tape that borrows from the input; when it refuses a
//!   document, the reference runs on the same bytes and its rejection is the
//!   answer. The provider adapters and the contract stage read raw bodies
//!   through it.
//!
//! `tests/borrowed.rs`, the JSONTestSuite test and the differential check
//! ([`differential`], also the `decode_differential` fuzz target) hold the
//! fast path to the reference's answers. The storage round trip for tool
//! inputs is [`normalize`].
//!
//! Nothing else parses JSON from outside: `clippy.toml` forbids
//! `serde_json::from_slice`/`from_str`/`from_reader` everywhere but here.

mod differential;
mod json;
mod limits;
pub mod normalize;
mod rejection;
pub(crate) mod scan;
mod strict;
mod tape;

pub use differential::{Agreement, Mismatch, differential};
pub use json::{Array, Document, Items, Json, Members, Object};
pub use limits::{Limits, LimitsError};
pub use rejection::{DecodeCode, Rejection};
pub use strict::decode_strict;
pub use tape::decode_tape;
