//! The one door for model JSON (DESIGN §3) and the storage normaliser (§4).
//!
//! Everything a model or a client sends is decoded by [`strict::decode`]:
//! limits are checked before any work, duplicate keys are rejected rather
//! than resolved, and integers keep their lexical kind so that later layers
//! can demand a true integer.

mod limits;
pub mod normalize;
mod rejection;
pub(crate) mod scan;
pub mod strict;

pub use limits::{Limits, LimitsError};
pub use rejection::{DecodeCode, Rejection};
pub use strict::decode;
