//! One module per subcommand (docs/design.md §9).

pub mod bench;
pub mod check;
pub mod claims;
pub mod completions;
pub mod config;
pub mod decode;
pub mod demo;
pub mod eval;
pub mod init;
pub mod keys;
pub mod man;
pub mod mcp;
pub mod normalize;
pub mod policy;
pub mod serve;
