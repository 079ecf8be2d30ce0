//! A child process stopped when its guard drops, however the run ends:
//! `bench mcp`'s shop and gateway, and the same processes in the MCP tests
//! (which include this file).

use std::process::Child;

/// A child process killed and waited for when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
