//! The service's clock and randomness (the core has neither): the wall
//! clock as `UnixMillis`, and fresh holder tokens (also the reviewer page's
//! session ids). Every door reads time and randomness here, so a decision
//! has one source of each.

use std::time::SystemTime;

use toolgate::claim::{HolderToken, UnixMillis};

/// The wall clock; a clock before 1970 reads as 0.
pub fn now_millis() -> UnixMillis {
    UnixMillis::from(SystemTime::now())
}

/// The operating system's random source failed: an infrastructure
/// failure like a store that does not answer (nothing was decided).
#[derive(Debug, Clone, thiserror::Error)]
#[error("random number generator: {0}")]
pub struct RandomError(#[source] getrandom::Error);

/// 128 bits from the operating system's generator.
pub fn fresh_holder() -> Result<HolderToken, RandomError> {
    let mut bytes = [0u8; HolderToken::LEN];
    getrandom::fill(&mut bytes).map_err(RandomError)?;
    Ok(HolderToken::from_bytes(bytes))
}
