//! The steps that read the file's parts: the application, the upstreams
//! and how they agree with `[[tools]]`, the policy, the Cedar policies and
//! the keys.

use std::path::PathBuf;

use toolgate::contract::Policy;
use toolgate::pipeline::AuthzRequest;
use toolgate_cedar::{CedarAuthorizer, EntityError, EntityRecord, EntitySource};
use toolgate_service::{ExecutionMode, KeyRing};

use super::raw::File;
use super::{Application, Ctx, LoadedKey};
use crate::upstreams::{McpSection, Upstream, argument_scopes};
use crate::{DeploySection, ExecutorConfig};

impl Ctx<'_> {
    /// The program's built-in application, or the file's `[app_db]` and
    /// `[[tools]]`.
    pub(super) fn application(
        &self,
        file: &File,
        text: &str,
    ) -> Result<Application, crate::ConfigError> {
        let builtin = self.builtin.name;
        match (file.application.as_deref(), file.tools.is_some()) {
            (Some(name), false) if name == builtin => Ok(Application::BuiltIn),
            (Some(name), true) if name == builtin => Err(self.err(
                "application",
                format!("\"{builtin}\" brings its own wiring: remove [[tools]] or it"),
            )),
            (Some(other), _) => Err(self.err(
                "application",
                format!("{other:?}: the only built-in application is \"{builtin}\""),
            )),
            (None, _) => {
                let section =
                    DeploySection::from_toml(text).map_err(|e| self.section_err("tools", &e))?;
                if section.tools.is_empty() {
                    return Err(self.err(
                        "tools",
                        format!(
                            "no [[tools]]: each policy tool needs an entry saying where its \
                             entities and version are read and who writes (docs/deploy.md); \
                             application = \"{builtin}\" runs the built-in example instead"
                        ),
                    ));
                }
                Ok(Application::Tools(section))
            }
        }
    }

    /// `[[upstreams]]`, checked, and agreeing with the application.
    pub(super) fn upstreams(
        &self,
        text: &str,
        application: &Application,
    ) -> Result<Vec<Upstream>, crate::ConfigError> {
        let upstreams = McpSection::from_toml(text)
            .and_then(|section| section.check(self.base))
            .map_err(|e| self.section_err("upstreams", &e))?;
        check_upstream_tools(&upstreams, application, self.builtin.name)
            .map_err(|(f, m)| self.err(&f, m))?;
        Ok(upstreams)
    }

    /// The policy file, relative to the file's directory.
    pub(super) fn policy(
        &self,
        file: &File,
        upstreams: &[Upstream],
    ) -> Result<(PathBuf, Policy), crate::ConfigError> {
        let policy_path = self.base.join(&file.policy);
        let policy_text = std::fs::read_to_string(&policy_path)
            .map_err(|e| self.err("policy", format!("reading {}: {e}", policy_path.display())))?;
        // A scope field the gateway takes from the argument of its own name
        // may be an argument too (docs/policy.md); with no upstreams this
        // is `Policy::load`.
        let policy = Policy::load_with(&policy_text, &argument_scopes(upstreams))
            .map_err(|e| self.err("policy", format!("{}: {e}", policy_path.display())))?;
        check_reads(upstreams, &policy).map_err(|(f, m)| self.err(&f, m))?;
        Ok((policy_path, policy))
    }

    /// The Cedar policies: the file's `cedar`, or the built-in
    /// application's own.
    pub(super) fn cedar(
        &self,
        file: &File,
        application: &Application,
    ) -> Result<(Option<PathBuf>, String), crate::ConfigError> {
        let (cedar_path, cedar) = match &file.cedar {
            Some(p) => {
                let p = self.base.join(p);
                let text = std::fs::read_to_string(&p)
                    .map_err(|e| self.err("cedar", format!("reading {}: {e}", p.display())))?;
                (Some(p), text)
            }
            None if matches!(application, Application::BuiltIn) => {
                (None, self.builtin.policies.clone())
            }
            None => {
                return Err(self.err(
                    "cedar",
                    "required with [[tools]]: the file of Cedar policies the tools are decided by",
                ));
            }
        };
        if matches!(application, Application::BuiltIn) {
            // Parsed as serving parses them, with no entities to read. With
            // [[tools]], each tool's mapping parses them when it loads.
            CedarAuthorizer::new(&cedar, &self.builtin.mapping, NoEntities)
                .map_err(|e| self.err("cedar", e.to_string()))?;
        }
        Ok((cedar_path, cedar))
    }

    /// `[[keys]]`: at least one, one ring, and no client key with
    /// `[[tools]]`.
    pub(super) fn keys(
        &self,
        file: &File,
        application: &Application,
    ) -> Result<Vec<LoadedKey>, crate::ConfigError> {
        let mut keys = Vec::with_capacity(file.keys.len());
        for (i, k) in file.keys.iter().enumerate() {
            let key = k
                .to_api_key()
                .map_err(|(f, m)| self.err(&format!("keys[{i}]{f}"), m))?;
            keys.push(LoadedKey {
                key,
                capabilities: k.capabilities.clone(),
            });
        }
        // Signed tokens of an issuer authenticate callers too.
        if keys.is_empty() && file.issuers.is_empty() {
            return Err(self.err(
                "keys",
                "no [[keys]] and no [[issuers]]: every request would be refused (toolgate keys \
                 new makes a key)",
            ));
        }
        KeyRing::new(keys.iter().map(|k| k.key.clone()))
            .map_err(|e| self.err("keys", e.to_string()))?;
        if matches!(application, Application::Tools(_))
            && let Some(i) = keys
                .iter()
                .position(|k| k.key.mode == ExecutionMode::Client)
        {
            // A client key would take every decision as the client's to
            // write, and a webhook tool's executor would never be called.
            return Err(self.err(
                &format!("keys[{i}].execution"),
                "\"client\" with [[tools]]: each tool's executor decides who writes \
                 (executor = { kind = \"client\" } hands the permit to the caller); \
                 remove the line or write \"in_process\"",
            ));
        }
        Ok(keys)
    }
}

/// Each served tool's mapping fits what the policy says it is: a write
/// (the default) says where `version_seen` comes from; a read (`read =
/// true`) has no version, no status tool, and is the only kind with a
/// rate.
fn check_reads(upstreams: &[Upstream], policy: &Policy) -> Result<(), (String, String)> {
    for u in upstreams {
        for t in &u.tools {
            let at = |field: &str| format!("upstreams[{}].tools[{}].{field}", u.name, t.name);
            let read = policy.tool(&t.name).is_some_and(|c| c.is_read());
            match (read, &t.version_seen) {
                (false, None) => {
                    return Err((
                        at("version_seen"),
                        "a write says where the version the model read comes from: \
                         { from = \"argument\", pointer = \"/expected_version\" } or \
                         { from = \"meta\", key = … } (or mark the tool read = true in the policy)"
                            .to_owned(),
                    ));
                }
                (true, Some(_)) => {
                    return Err((
                        at("version_seen"),
                        "the policy marks this tool read = true: a read has no version; remove \
                         the line"
                            .to_owned(),
                    ));
                }
                _ => {}
            }
            if read && t.status_tool.is_some() {
                return Err((
                    at("status_tool"),
                    "a read is never reconciled: nothing is claimed".to_owned(),
                ));
            }
            if !read && t.rate_per_minute.is_some() {
                return Err((
                    at("rate_per_minute"),
                    "only a read tool has a rate: a write is bounded by its claim, budgets \
                     and approvals"
                        .to_owned(),
                ));
            }
        }
    }
    Ok(())
}

/// The MCP gateway's tools and the `[[tools]]` wiring agree: each tool an
/// upstream serves has a `[[tools]]` entry with `executor = { kind =
/// "mcp_upstream" }` (its entities and state are read as any tool's), and
/// each such entry names a tool an upstream serves, so an upstream's tool
/// is never written by another executor and an `mcp_upstream` entry never
/// lacks its upstream.
fn check_upstream_tools(
    upstreams: &[Upstream],
    application: &Application,
    builtin: &str,
) -> Result<(), (String, String)> {
    let section = match application {
        Application::Tools(section) => section,
        Application::BuiltIn if upstreams.is_empty() => return Ok(()),
        Application::BuiltIn => {
            return Err((
                "upstreams".to_owned(),
                format!("the MCP gateway needs [[tools]]: \"{builtin}\" wires its own tools only"),
            ));
        }
    };
    check_executors(upstreams, section)
}

/// Each served tool's `[[tools]]` entry is `mcp_upstream`, and each
/// `mcp_upstream` entry is served.
fn check_executors(
    upstreams: &[Upstream],
    section: &DeploySection,
) -> Result<(), (String, String)> {
    let served: Vec<(&str, &str)> = upstreams
        .iter()
        .flat_map(|u| {
            u.tools
                .iter()
                .map(move |t| (u.name.as_str(), t.name.as_str()))
        })
        .collect();
    for (upstream, tool) in &served {
        let entry = section.tools.iter().find(|t| t.name == *tool);
        if !entry.is_some_and(|t| t.executor == ExecutorConfig::McpUpstream) {
            return Err((
                format!("tools[{tool}].executor"),
                format!(
                    "upstream `{upstream}` serves `{tool}`: its [[tools]] entry needs \
                     executor = {{ kind = \"mcp_upstream\" }} (and its state and cedar)"
                ),
            ));
        }
    }
    if let Some(t) = section.tools.iter().find(|t| {
        t.executor == ExecutorConfig::McpUpstream && !served.iter().any(|(_, s)| *s == t.name)
    }) {
        return Err((
            format!("tools[{}].executor", t.name),
            "\"mcp_upstream\", but no [[upstreams.tools]] entry serves this tool".to_owned(),
        ));
    }
    Ok(())
}

/// An entity source for parsing Cedar policies only: loading a file never
/// authorises anything.
struct NoEntities;

impl EntitySource for NoEntities {
    async fn entities(&self, _: &AuthzRequest<'_>) -> Result<Vec<EntityRecord>, EntityError> {
        Err(EntityError::Invalid(
            "no entities: the policies were only parsed".to_owned(),
        ))
    }
}
