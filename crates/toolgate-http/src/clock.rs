//! The edge's clock and randomness (the core has neither): the wall clock
//! as `UnixMillis`, fresh holder tokens and session ids.

use std::time::{SystemTime, UNIX_EPOCH};

use toolgate::claim::{HolderToken, UnixMillis};

use crate::error::ApiError;

/// The wall clock; a clock before 1970 reads as 0.
pub fn now_millis() -> UnixMillis {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    UnixMillis(ms)
}

/// 128 bits from the operating system's generator.
pub fn fresh_holder() -> Result<HolderToken, ApiError> {
    let mut bytes = [0u8; HolderToken::LEN];
    getrandom::fill(&mut bytes)
        .map_err(|e| ApiError::unavailable(format!("random number generator: {e}")))?;
    Ok(HolderToken::from_bytes(bytes))
}
