//! Operation identity (docs/design.md §8): the fingerprint of a proposal's
//! canonical arguments and the operation key derived from the server-fixed
//! scope fields a tool's contract names.

pub mod fingerprint;
pub mod key;
pub mod scope;

pub use crate::claim::OperationKey;
pub use key::{KeyError, operation_key};
pub use scope::{ScopeError, ScopeType, canonical_scope};

pub use fingerprint::{
    Fingerprint, FingerprintError, canonical_json, canonical_json_jcs, fingerprint,
};
