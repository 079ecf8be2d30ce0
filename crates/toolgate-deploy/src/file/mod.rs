//! The whole deployment file, read once and checked in named steps
//! ([`Deployment::load`]): the TOML, the application (a built-in one the
//! program brings, or `[app_db]` and `[[tools]]`), `[[upstreams]]` and how
//! they agree with `[[tools]]`, the policy, the Cedar policies, the keys,
//! the settings and `[review]`, and the leases against every bounded call.
//! It connects to nothing: [`crate::Prepared::load`] is the step that does,
//! when a program serves the file.
//!
//! The steps run in the order their errors have always been reported, so
//! a file with two mistakes names the same one first.

mod parts;
mod raw;
pub(crate) mod settings;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toolgate::contract::Policy;
use toolgate_cedar::Mapping;
use toolgate_service::ApiKey;

use crate::{ConfigError, DeploySection, upstreams::Upstream};

pub use toolgate_service::HttpLimits;

/// What performs the tools' reads and writes.
pub enum Application {
    /// The application built into the program that serves the file
    /// ([`BuiltIn`]), with its own wiring.
    BuiltIn,
    /// The file's own `[app_db]` and `[[tools]]`: any application, no Rust.
    Tools(DeploySection),
}

/// The application a program has built in, which a file may name as its
/// `application`: this crate links no application, so the program hands
/// in its name, Cedar policies and mapping, and a `cedar` file written for
/// it is checked against its entities.
pub struct BuiltIn {
    /// The name a file's `application` gives it.
    pub name: &'static str,
    /// Its own policies, used when the file names no `cedar`.
    pub policies: String,
    /// How it names its principals and resources.
    pub mapping: Mapping,
}

/// A `[[keys]]` entry as the sidecar holds it, and its capabilities as
/// written (for `config check` to show).
pub struct LoadedKey {
    /// The key.
    pub key: ApiKey,
    /// Its capabilities, as written.
    pub capabilities: Vec<String>,
}

/// A deployment file, loaded and checked.
pub struct Deployment {
    /// `listen`.
    pub listen: Option<SocketAddr>,
    /// The file's `db`, as written: its syntax is the claim store's, which
    /// the serving program checks.
    pub db: Option<String>,
    /// The policy file, resolved against the file's directory.
    pub policy_path: PathBuf,
    /// The policy, loaded with its schema audit.
    pub policy: Policy,
    /// `None`: the built-in application's policies.
    pub cedar_path: Option<PathBuf>,
    /// The Cedar policy text.
    pub cedar: String,
    /// `[[keys]]`, at least one.
    pub keys: Vec<LoadedKey>,
    /// The HTTP door's limits, defaults filled in.
    pub http: HttpLimits,
    /// The service's: lease, result cap, review queue and webhook.
    pub service: toolgate_service::Settings,
    /// Who performs the tools' reads and writes.
    pub application: Application,
    /// `[[upstreams]]`: the MCP servers served at `/mcp`, checked (their
    /// pin files are read when the gateway starts).
    pub upstreams: Vec<Upstream>,
}

/// Where the steps are: the file, for every error to name it.
struct Ctx<'a> {
    path: &'a Path,
    base: &'a Path,
    builtin: &'a BuiltIn,
}

impl Ctx<'_> {
    fn err(&self, field: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::new(field, message.into()).in_file(self.path)
    }

    /// A section's error, named in this file; one without a field is
    /// about the section as a whole.
    fn section_err(&self, section: &str, e: &ConfigError) -> ConfigError {
        let field = if e.field().is_empty() {
            section
        } else {
            e.field()
        };
        self.err(field, e.message())
    }
}

impl Deployment {
    /// Reads `path` and everything it names (the policy and Cedar files,
    /// relative to its directory), and checks each part: the TOML, the
    /// policy (with its schema audit), the Cedar policies, the keys and
    /// the settings. Connects to nothing.
    pub fn load(path: &Path, builtin: &BuiltIn) -> Result<Self, ConfigError> {
        let ctx = Ctx {
            path,
            base: path.parent().unwrap_or(Path::new(".")),
            builtin,
        };
        let (text, file) = ctx.read()?;
        let application = ctx.application(&file, &text)?;
        let upstreams = ctx.upstreams(&text, &application)?;
        let (policy_path, policy) = ctx.policy(&file, &upstreams)?;
        let (cedar_path, cedar) = ctx.cedar(&file, &application)?;
        let keys = ctx.keys(&file, &application)?;
        let (http, service) = ctx.settings(&file)?;
        ctx.leases(&application, &upstreams, service.lease)?;
        Ok(Self {
            listen: file.listen,
            db: file.db,
            policy_path,
            policy,
            cedar_path,
            cedar,
            keys,
            http,
            service,
            application,
            upstreams,
        })
    }
}

impl Ctx<'_> {
    /// The file's text and its top level as written.
    fn read(&self) -> Result<(String, raw::File), ConfigError> {
        let text =
            std::fs::read_to_string(self.path).map_err(|e| self.err("file", e.to_string()))?;
        let file = toml::from_str(&text).map_err(|e| {
            let field = e.span().map_or_else(
                || "TOML".to_owned(),
                |s| format!("line {}", 1 + text[..s.start].matches('\n').count()),
            );
            self.err(&field, e.message())
        })?;
        Ok((text, file))
    }

    /// Every claim's lease outlasts the calls it covers: checked here,
    /// before anything connects, so that serving and checking the file
    /// both refuse it.
    fn leases(
        &self,
        application: &Application,
        upstreams: &[Upstream],
        lease: Duration,
    ) -> Result<(), ConfigError> {
        let Application::Tools(section) = application else {
            return Ok(());
        };
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        let named = |e: ConfigError| self.err(e.field(), e.message());
        section.check_lease(lease_ms).map_err(named)?;
        crate::upstreams::check_lease(upstreams, lease_ms).map_err(named)
    }
}
