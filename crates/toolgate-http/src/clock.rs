//! The edge's clock and randomness (the core has neither): the wall clock
//! as `UnixMillis`, fresh holder tokens and session ids.

use std::time::SystemTime;

use toolgate::claim::{HolderToken, UnixMillis};

use crate::error::ApiError;

/// The wall clock; a clock before 1970 reads as 0.
pub fn now_millis() -> UnixMillis {
    UnixMillis::from(SystemTime::now())
}

/// 128 bits from the operating system's generator.
pub fn fresh_holder() -> Result<HolderToken, ApiError> {
    let mut bytes = [0u8; HolderToken::LEN];
    getrandom::fill(&mut bytes)
        .map_err(|e| ApiError::unavailable(format!("random number generator: {e}")))?;
    Ok(HolderToken::from_bytes(bytes))
}
