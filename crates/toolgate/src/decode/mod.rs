//! The one door for model JSON (docs/design.md §3) and the storage normaliser (§4).
//!
//! Everything a model or a client sends is decoded by [`strict::decode`]:
//! limits are checked before any work, duplicate keys are rejected rather
//! than resolved, and integers keep their lexical kind so that later layers
//! can demand a true integer.
//!
//! [`decode_borrowed`] applies the same rules and gives the same answers
//! (the same value, or the same rejection, which it takes from
//! [`strict::decode`]), building a [`Document`] tape that borrows from the
//! input instead of a `serde_json::Value`: the provider adapters read raw
//! bodies through it.

mod json;
mod limits;
pub mod normalize;
mod rejection;
pub(crate) mod scan;
pub mod strict;
mod tape;

pub use json::{Array, Document, Items, Json, Members, Object};
pub use limits::{Limits, LimitsError};
pub use rejection::{DecodeCode, Rejection};
pub use strict::decode;
pub use tape::decode_borrowed;
