//! A fresh scratch directory for an embedded SQLite database (`toolgate
//! demo`, `toolgate eval`), removed when dropped.
//!
//! Created with `create_dir`, which fails if the path exists, so two runs
//! never share a database; the name carries the process id and the time.

use std::io;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// A directory that is removed, with its contents, on drop.
pub struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// Creates `<temp>/toolgate-<what>-<pid>-<nanos>`.
    pub fn new(what: &str) -> io::Result<Self> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("toolgate-{what}-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir)?;
        Ok(Self { dir })
    }

    /// A `sqlite://` URL for `name` inside the directory.
    pub fn sqlite_url(&self, name: &str) -> String {
        format!("sqlite://{}", self.dir.join(name).display())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Best effort: a leftover temp directory is harmless, and a drop
        // must not fail.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
