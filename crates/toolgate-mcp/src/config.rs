//! The deployment file's MCP part, `[[upstreams]]`: read and checked by
//! toolgate-deploy with the rest of the file (it is plain data), re-exported
//! here where the gateway that serves it has always found it.

pub use toolgate_deploy::ConfigError;
pub use toolgate_deploy::upstreams::*;
