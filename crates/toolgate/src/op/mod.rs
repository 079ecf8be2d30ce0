//! Operation identity (DESIGN §8). This issue provides the fingerprint; the
//! operation key is built by the pipeline from the scope fields a tool's
//! contract names.

pub mod fingerprint;

pub use fingerprint::{Fingerprint, FingerprintError, canonical_json, fingerprint};
