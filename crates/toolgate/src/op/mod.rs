//! Operation identity (docs/design.md §8): the fingerprint of a proposal's
//! canonical arguments and the operation key derived from the server-fixed
//! scope fields a tool's contract names. The two values have their types in
//! [`crate::claim`] ([`Fingerprint`](crate::claim::Fingerprint),
//! [`OperationKey`](crate::claim::OperationKey)), their one public path.

pub mod fingerprint;
pub mod key;
pub mod scope;

pub use key::{KeyError, operation_key};
pub use scope::{ScopeError, ScopeType, VERSION_SEEN, canonical_scope};

pub use fingerprint::{FingerprintError, canonical_json, canonical_json_jcs, fingerprint};
