//! How long a reviewer page login lasts.
//!
//! Review items, approvals and the page's logins are durable rows in the
//! claim database ([`toolgate::review::ReviewStore`], docs/design.md §14):
//! every replica lists and acts on the same items, a reviewer signed in on
//! one replica is signed in on all of them, and both survive restarts.

// Which decisions open an item is the core's rule
// (`toolgate::review::opening`), so every front door opens the same.

/// How long a reviewer login lasts.
pub const SESSION_MS: i64 = 8 * 60 * 60 * 1000;
