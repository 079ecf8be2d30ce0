//! # toolgate core
//!
//! toolgate stands between an LLM provider's response and any side effect
//! it proposes. A model's tool call is a *proposal*; this crate decides, in a
//! fixed order, what becomes of it (see `ARCHITECTURE.md` and docs/design.md §1).
//!
//! This crate is pure: bytes in, values out. It does no I/O, reads no clock
//! and links no async runtime, database driver or HTTP stack; those live in
//! the crates at the edges. Cargo's dependency graph is what enforces that,
//! which is why the core is its own crate.
//!
//! Rejections are values with stable codes, never panics: see
//! [`decode::DecodeCode`] and [`decode::normalize::Action`].

#![warn(missing_docs)]

pub mod calendar;
pub mod claim;
pub mod contract;
pub mod decode;
pub mod idempotency;
pub mod op;
pub mod pipeline;
pub mod provider;
pub mod review;
pub mod sign;

/// For the codes' tests: serde spells each of `values` as its stable code
/// (`code`, the type's `as_str`) and reads that code back as the same value.
#[cfg(test)]
fn assert_serde_spells_codes<T>(values: impl IntoIterator<Item = T>, code: fn(T) -> &'static str)
where
    T: Copy + PartialEq + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    for v in values {
        assert_eq!(serde_json::to_value(v).unwrap(), code(v), "{v:?}");
        assert_eq!(serde_json::from_value::<T>(code(v).into()).unwrap(), v);
    }
}
