//! The client-facing side: an rmcp `ServerHandler` that lists the served
//! tools a caller may see and turns each `tools/call` into one decision.
//!
//! The caller is the principal of its API key (the sidecar's keys, stored as
//! SHA-256 digests, `toolgate_service::KeyRing`): over Streamable HTTP the key
//! comes from the request's `Authorization: Bearer` header, which rmcp hands
//! the handler inside the request's `http::request::Parts`; over stdio the
//! gateway runs for one key, fixed when it starts. Nothing in a request
//! body names the caller.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rmcp::ErrorData;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, GetPromptRequestParams, GetPromptResponse,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use toolgate::contract::Policy;
use toolgate::pipeline::Principal;
use toolgate_service::KeyRing;

use crate::catalog::{Catalog, Prepared};
use crate::entries::Kind;
use crate::exchange::Exchanger;
use crate::wire::{Decide, ReadForWire, to_wire, url_elicitation};

/// Who the caller is.
#[derive(Debug, Clone)]
pub enum Identity {
    /// Each HTTP request's bearer key, looked up in the ring.
    Keys(KeyRing),
    /// One principal for the whole connection (stdio: the key given to the
    /// gateway when the host started it).
    Fixed(Principal),
}

/// The gateway as an rmcp server handler. Cheap to clone: one per session.
pub struct Gateway<D> {
    inner: Arc<Inner<D>>,
}

impl<D> Clone for Gateway<D> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<D> {
    policy: Arc<Policy>,
    // Swapped whole by a refresh; a call in progress keeps the catalog it
    // started with.
    catalog: RwLock<Arc<Catalog>>,
    identity: Identity,
    decide: D,
    /// By upstream name: those called as the person (token exchange).
    exchangers: HashMap<String, Arc<Exchanger>>,
}

impl<D: Decide> Gateway<D> {
    /// A gateway serving `catalog` under `policy`, deciding with `decide`.
    pub fn new(policy: Arc<Policy>, catalog: Catalog, identity: Identity, decide: D) -> Self {
        Self::calling_as_person(policy, catalog, identity, decide, HashMap::new())
    }

    /// [`Gateway::new`], with the upstreams whose tools are called as the
    /// person: before a call to one is decided, the caller's token is
    /// exchanged (or found in the cache), so a caller without a token, or
    /// one the issuer will not exchange, is answered with nothing claimed.
    pub fn calling_as_person(
        policy: Arc<Policy>,
        catalog: Catalog,
        identity: Identity,
        decide: D,
        exchangers: HashMap<String, Arc<Exchanger>>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                policy,
                catalog: RwLock::new(Arc::new(catalog)),
                identity,
                decide,
                exchangers,
            }),
        }
    }

    /// Replaces the served tools (after a refresh compared the upstreams'
    /// lists with their pins again): from the next request on, a withheld
    /// tool is neither listed nor callable.
    pub fn set_catalog(&self, catalog: Catalog) {
        let mut current = self
            .inner
            .catalog
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *current = Arc::new(catalog);
    }

    fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(
            &self
                .inner
                .catalog
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The capability a caller needs for the served tool `name`, whoever
    /// asks: for the HTTP layer's step-up answer to a signed token.
    pub(crate) fn capability_of(&self, name: &str) -> Option<String> {
        self.catalog().capability_of(name).map(str::to_owned)
    }

    fn principal(&self, context: &RequestContext<RoleServer>) -> Result<Principal, ErrorData> {
        match &self.inner.identity {
            Identity::Fixed(p) => Ok(p.clone()),
            Identity::Keys(ring) => context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| {
                    let key = crate::http::bearer(&parts.headers)
                        .and_then(|token| ring.lookup(token))
                        .map(|key| key.principal.clone());
                    // Or the person a signed token named, verified by the
                    // HTTP layer before rmcp read the request.
                    key.or_else(|| {
                        parts
                            .extensions
                            .get::<crate::http::TokenCaller>()
                            .map(|t| t.0.clone())
                    })
                })
                // The HTTP layer refuses a request without a valid key with
                // 401 before rmcp reads it; this is the same check again,
                // so the handler never serves an anonymous caller.
                .ok_or_else(|| ErrorData::invalid_request("a valid API key is required", None)),
        }
    }
}

/// The pinned definitions of `kind` that `principal` may see, in the SDK's
/// types (they were listed in them, so they read back).
fn pinned<T: serde::de::DeserializeOwned>(
    catalog: &Catalog,
    principal: &Principal,
    kind: Kind,
) -> Result<Vec<T>, ErrorData> {
    catalog
        .entries(principal, kind)
        .into_iter()
        .map(|e| {
            serde_json::from_value(e.definition.clone()).map_err(|err| {
                tracing::error!(%kind, id = e.id.as_str(), error = %err, "a pinned entry does not read back");
                ErrorData::internal_error("a pinned entry could not be listed", None)
            })
        })
        .collect()
}

/// An upstream's refusal, relayed with its code; no answer at all is an
/// internal error that says only that.
fn relayed(what: &str, e: &crate::upstream::UpstreamError) -> ErrorData {
    match e {
        crate::upstream::UpstreamError::Refused { code, message } => ErrorData::new(
            rmcp::model::ErrorCode(*code),
            message.chars().take(1000).collect::<String>(),
            None,
        ),
        other => {
            tracing::warn!(error = %other, "{what}: the upstream did not answer");
            ErrorData::internal_error(format!("{what}: the upstream did not answer"), None)
        }
    }
}

fn clip(s: &str) -> String {
    crate::pin::clip_to(s, 200)
}

/// The revisions the gateway serves: 2025-11-25 with `initialize` and
/// sessions, and the stateless 2026-07-28.
pub const PROTOCOL_VERSIONS: &[ProtocolVersion] =
    &[ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28];

impl<D: Decide> ServerHandler for Gateway<D> {
    fn get_info(&self) -> ServerConfig {
        // Resources and prompts are declared whether or not any are pinned:
        // a caller's lists depend on its capabilities, and an empty list is
        // an answer; subscriptions are not relayed.
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
        .with_server_info(Implementation::new("toolgate", env!("CARGO_PKG_VERSION")))
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(PROTOCOL_VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let principal = self.principal(&context)?;
        // The list depends on who asks: no client or intermediary may
        // serve it to another caller.
        Ok(
            ListToolsResult::with_all_items(self.catalog().list(&principal))
                .with_cache_scope(CacheScope::Private),
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let principal = self.principal(&context)?;
        let listed = pinned(&self.catalog(), &principal, Kind::Resource)?;
        Ok(ListResourcesResult::with_all_items(listed).with_cache_scope(CacheScope::Private))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let principal = self.principal(&context)?;
        let listed = pinned(&self.catalog(), &principal, Kind::ResourceTemplate)?;
        Ok(ListResourceTemplatesResult::with_all_items(listed)
            .with_cache_scope(CacheScope::Private))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let principal = self.principal(&context)?;
        let catalog = self.catalog();
        // An unpinned, withheld or hidden resource: the same answer.
        let served = catalog.resource(&principal, &request.uri).ok_or_else(|| {
            ErrorData::resource_not_found(
                format!("unknown resource: {:?}", clip(&request.uri)),
                None,
            )
        })?;
        let result = served
            .client
            .read_resource(&request.uri)
            .await
            .map_err(|e| relayed("resources/read", &e))?;
        Ok(ReadResourceResponse::Complete(result))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let principal = self.principal(&context)?;
        let listed = pinned(&self.catalog(), &principal, Kind::Prompt)?;
        Ok(ListPromptsResult::with_all_items(listed).with_cache_scope(CacheScope::Private))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let principal = self.principal(&context)?;
        let catalog = self.catalog();
        let served = catalog.prompt(&principal, &request.name).ok_or_else(|| {
            ErrorData::invalid_params(format!("unknown prompt: {:?}", clip(&request.name)), None)
        })?;
        // Only the arguments the pinned prompt declares, and every one it
        // requires: an upstream never sees an argument the operator did not.
        let (declared, required) = served.entry.prompt_arguments();
        let given = request.arguments.unwrap_or_default();
        if let Some(extra) = given.keys().find(|k| !declared.contains(*k)) {
            return Err(ErrorData::invalid_params(
                format!(
                    "prompt {:?} takes no argument {:?}",
                    request.name,
                    clip(extra)
                ),
                None,
            ));
        }
        if let Some(missing) = required.iter().find(|r| !given.contains_key(*r)) {
            return Err(ErrorData::invalid_params(
                format!("prompt {:?} needs the argument {missing:?}", request.name),
                None,
            ));
        }
        let result = served
            .client
            .get_prompt(&request.name, (!given.is_empty()).then_some(given))
            .await
            .map_err(|e| relayed("prompts/get", &e))?;
        Ok(GetPromptResponse::Complete(result))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let principal = self.principal(&context)?;
        let meta = request.meta.as_ref().map(|m| &(m.0).0);
        let catalog = self.catalog();
        if catalog.visible(&principal, &request.name).is_none() {
            self.inner
                .decide
                .unknown_tool(&principal, &request.name)
                .await;
        }
        let call = catalog.prepare(
            &self.inner.policy,
            &principal,
            &request.name,
            request.arguments.as_ref(),
            meta,
        )?;
        let served = catalog.visible(&principal, &request.name);
        let has_output_schema = served.is_some_and(|t| t.has_output_schema);
        if let Some(exchanger) = served.and_then(|t| self.inner.exchangers.get(&t.upstream)) {
            exchanger
                .token_for(principal.id(), principal.credential())
                .await
                .map_err(|e| {
                    tracing::info!(tool = %request.name, code = e.code(), error = %e, "no token for the upstream");
                    ErrorData::invalid_request(
                        e.to_string(),
                        Some(serde_json::json!({"code": e.code()})),
                    )
                })?;
        }
        // From the request's `_meta` (2026-07-28) or the session's
        // `initialize` (2025-11-25).
        let url_mode = context
            .client_capabilities()
            .and_then(|c| c.elicitation)
            .is_some_and(|e| e.url.is_some());
        // The service runs the decision on its own task (Served): if the
        // client goes away, or rmcp drops this handler, a decision that has
        // started (a claim won, an upstream call sent) still runs to its end
        // and is recorded.
        let failed = |e: crate::wire::DecideError| {
            tracing::error!(tool = %request.name, error = %e, "the decision failed");
            ErrorData::internal_error("the gate could not decide", None)
        };
        let call = match call {
            Prepared::Write(call) => call,
            Prepared::Read(read) => {
                return match self.inner.decide.read(read).await.map_err(failed)? {
                    ReadForWire::Forwarded(result) => Ok(CallToolResponse::Complete(result)),
                    ReadForWire::Denied(denied) => {
                        to_wire(&denied, has_output_schema).map(CallToolResponse::Complete)
                    }
                };
            }
        };
        let decided = self.inner.decide.decide(call).await.map_err(failed)?;
        if url_mode && let Some(e) = url_elicitation(&decided) {
            return Err(e);
        }
        to_wire(&decided, has_output_schema).map(CallToolResponse::Complete)
    }
}
