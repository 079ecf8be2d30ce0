//! Connections to upstream MCP servers, with rmcp's client: Streamable HTTP
//! (`StreamableHttpClientTransport`) or a child process on stdio
//! (`TokioChildProcess`).
//!
//! The gateway speaks to an upstream with its own identity only: the bearer
//! token named by the upstream's `bearer_env`, or the `env` a stdio child is
//! started with. Nothing of a caller's request reaches an upstream but the
//! tool name and the validated arguments, plus the operation key in `_meta`
//! (`io.toolgate/operation-key`) for servers that deduplicate: no caller
//! header, no caller `_meta`. A stdio child starts with a minimal
//! environment, so the gateway's own secrets (its database URL, its keys)
//! are not inherited.
//!
//! rmcp's client response cache is turned off: a refresh compares what the
//! upstream says now with the pins, never a cached list. An upstream's
//! `notifications/tools/list_changed` wakes the refresh
//! ([`UpstreamClient::list_changed`]).

use std::future::Future;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::client::ClientHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ErrorCode, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, MetaObject, ProtocolVersion, ReadResourceRequestParams, ReadResourceResult,
    RequestMetaObject, Tool,
};
use rmcp::service::{
    ClientCacheConfig, ClientLifecycleMode, ClientServiceExt, MaybeSendFuture, NotificationContext,
    RoleClient, RunningService, ServiceError,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use crate::entries::{Entry, Kind};

use crate::config::{Transport, Upstream};
use crate::pin::Offered;
use crate::wire::OPERATION_KEY_META;

/// Variables a stdio child inherits from the gateway; everything else it
/// gets comes from the upstream's `env`.
const INHERITED_ENV: &[&str] = &["PATH", "HOME", "LANG", "TZ"];

/// Why an upstream call did not give a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamError {
    /// The configuration cannot be used (a missing credential variable).
    Config(String),
    /// The connection or handshake failed; nothing was sent.
    Connect(String),
    /// The upstream answered the request with a JSON-RPC error: it refused
    /// the request rather than running the tool and reporting a failure
    /// (which is a result with `isError`).
    Refused {
        /// The JSON-RPC error code.
        code: i32,
        /// Its message.
        message: String,
    },
    /// No answer within the call timeout, or the connection broke after the
    /// request was sent: whether the tool ran is unknown. Never resent;
    /// settled by reconciliation.
    Unknown(String),
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(m) => write!(f, "upstream configuration: {m}"),
            Self::Connect(m) => write!(f, "upstream connection: {m}"),
            Self::Refused { code, message } => write!(f, "upstream refused ({code}): {message}"),
            Self::Unknown(m) => write!(f, "upstream outcome unknown: {m}"),
        }
    }
}

impl std::error::Error for UpstreamError {}

/// `server/discover` first: an upstream that speaks 2026-07-28 is used
/// statelessly (no session to lose when a gateway replica restarts); one that
/// does not is reached with the 2025-11-25 `initialize` handshake.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    }
}

/// A status tool's answer: was the write for this operation key applied?
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// Applied; the upstream's record of it.
    Applied(Value),
    /// Not applied, and fenced: a late write of the key can no longer land.
    NotApplied(Value),
}

/// The gateway's side of an upstream connection: it does nothing but note
/// the upstream's word that its tool list changed, for the refresh.
#[derive(Debug, Clone, Default)]
struct Handler {
    list_changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        // A permit is kept when no refresh is waiting yet, so a change said
        // during a comparison is compared again afterwards.
        self.list_changed.notify_one();
        std::future::ready(())
    }
}

/// One live connection to an upstream.
pub struct UpstreamClient {
    name: String,
    service: RunningService<RoleClient, Handler>,
    call_timeout: Duration,
    list_changed: Arc<Notify>,
}

impl std::fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamClient")
            .field("name", &self.name)
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

impl UpstreamClient {
    /// Connects and completes the protocol handshake (`server/discover` or
    /// `initialize`, whichever the upstream speaks) within the upstream's
    /// connect timeout.
    pub async fn connect(upstream: &Upstream) -> Result<Self, UpstreamError> {
        Self::connect_with(upstream, None).await
    }

    /// [`Self::connect`] to an HTTP upstream with `token` as the bearer
    /// instead of the gateway's own: a person's connection, with the token
    /// exchanged for theirs ([`crate::exchange`]).
    pub async fn connect_as(upstream: &Upstream, token: &str) -> Result<Self, UpstreamError> {
        Self::connect_with(upstream, Some(token)).await
    }

    async fn connect_with(
        upstream: &Upstream,
        as_person: Option<&str>,
    ) -> Result<Self, UpstreamError> {
        let handler = Handler::default();
        let list_changed = Arc::clone(&handler.list_changed);
        let connecting = async {
            match &upstream.transport {
                Transport::Http { url, bearer_env } => {
                    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                    if let Some(token) = as_person {
                        config = config.auth_header(token.to_owned());
                    } else if let Some(var) = bearer_env {
                        let token = std::env::var(var).map_err(|_| {
                            UpstreamError::Config(format!(
                                "upstream `{}`: the environment variable {var} (bearer_env) is not set",
                                upstream.name
                            ))
                        })?;
                        config = config.auth_header(token);
                    }
                    let transport = StreamableHttpClientTransport::from_config(config);
                    handler
                        .serve_with_lifecycle(transport, lifecycle())
                        .await
                        .map_err(|e| UpstreamError::Connect(e.to_string()))
                }
                Transport::Stdio { command, args, env } => {
                    let mut cmd = tokio::process::Command::new(command);
                    cmd.args(args).env_clear();
                    for var in INHERITED_ENV {
                        if let Some(v) = std::env::var_os(var) {
                            cmd.env(var, v);
                        }
                    }
                    cmd.envs(env).stderr(Stdio::inherit()).kill_on_drop(true);
                    let transport = TokioChildProcess::new(cmd).map_err(|e| {
                        UpstreamError::Connect(format!("starting {command:?}: {e}"))
                    })?;
                    handler
                        .serve_with_lifecycle(transport, lifecycle())
                        .await
                        .map_err(|e| UpstreamError::Connect(e.to_string()))
                }
            }
        };
        let service = tokio::time::timeout(upstream.connect_timeout, connecting)
            .await
            .map_err(|_| {
                UpstreamError::Connect(format!(
                    "no handshake within {} ms",
                    upstream.connect_timeout.as_millis()
                ))
            })??;
        service
            .peer()
            .set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        Ok(Self {
            name: upstream.name.clone(),
            service,
            call_timeout: upstream.call_timeout,
            list_changed,
        })
    }

    /// Connects to a Streamable HTTP endpoint with a bearer token held by
    /// the caller rather than named by `bearer_env`: how a client of the
    /// gateway itself (`toolgate bench mcp`) presents one of its API keys.
    pub async fn connect_http(
        name: &str,
        url: &str,
        bearer: Option<&str>,
        connect_timeout: Duration,
        call_timeout: Duration,
    ) -> Result<Self, UpstreamError> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(url);
        if let Some(token) = bearer {
            config = config.auth_header(token.to_owned());
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        let handler = Handler::default();
        let list_changed = Arc::clone(&handler.list_changed);
        let service = tokio::time::timeout(
            connect_timeout,
            handler.serve_with_lifecycle(transport, lifecycle()),
        )
        .await
        .map_err(|_| {
            UpstreamError::Connect(format!(
                "no handshake within {} ms",
                connect_timeout.as_millis()
            ))
        })?
        .map_err(|e| UpstreamError::Connect(e.to_string()))?;
        service
            .peer()
            .set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        Ok(Self {
            name: name.to_owned(),
            service,
            call_timeout,
            list_changed,
        })
    }

    /// Completes when the upstream has sent
    /// `notifications/tools/list_changed` (on a 2025-11-25 session, or
    /// unscoped), including one sent since the last wait.
    pub async fn list_changed(&self) {
        self.list_changed.notified().await;
    }

    /// The upstream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The protocol version the handshake agreed on, when the upstream said.
    pub fn protocol_version(&self) -> Option<String> {
        self.service
            .peer_info()
            .map(|i| i.protocol_version.to_string())
    }

    /// Every tool the upstream lists now (all pages).
    pub async fn list(&self) -> Result<Vec<Tool>, UpstreamError> {
        tokio::time::timeout(self.call_timeout, self.service.peer().list_all_tools())
            .await
            .map_err(|_| UpstreamError::Unknown("tools/list timed out".to_owned()))?
            .map_err(classify)
    }

    /// [`Self::list`] as definitions to compare with pins.
    pub async fn offered(&self) -> Result<Vec<Offered>, UpstreamError> {
        Ok(self.list().await?.iter().map(Offered::from_rmcp).collect())
    }

    /// Every resource, resource template and prompt the upstream lists now
    /// (all pages), of the kinds its capabilities declare: what is pinned
    /// and compared with pins. An entry without a servable identifier is
    /// left out here; [`crate::entries::Entry::of`] says why on import.
    pub async fn offered_entries(&self) -> Result<Vec<Entry>, UpstreamError> {
        let caps = self
            .service
            .peer_info()
            .map(|i| i.capabilities.clone())
            .unwrap_or_default();
        let peer = self.service.peer();
        let timed_out = |what: &str| UpstreamError::Unknown(format!("{what} timed out"));
        let mut out = Vec::new();
        let mut add = |kind: Kind, values: Vec<Value>| {
            out.extend(values.into_iter().filter_map(|v| Entry::of(kind, v).ok()));
        };
        if caps.resources.is_some() {
            let r = tokio::time::timeout(self.call_timeout, peer.list_all_resources())
                .await
                .map_err(|_| timed_out("resources/list"))?
                .map_err(classify)?;
            add(Kind::Resource, r.iter().filter_map(to_value).collect());
            let t = tokio::time::timeout(self.call_timeout, peer.list_all_resource_templates())
                .await
                .map_err(|_| timed_out("resources/templates/list"))?
                .map_err(classify)?;
            add(
                Kind::ResourceTemplate,
                t.iter().filter_map(to_value).collect(),
            );
        }
        if caps.prompts.is_some() {
            let p = tokio::time::timeout(self.call_timeout, peer.list_all_prompts())
                .await
                .map_err(|_| timed_out("prompts/list"))?
                .map_err(classify)?;
            add(Kind::Prompt, p.iter().filter_map(to_value).collect());
        }
        Ok(out)
    }

    /// `resources/read` of `uri`, within the call timeout; nothing of the
    /// caller's request but the URI is sent.
    pub async fn read_resource(&self, uri: &str) -> Result<ReadResourceResult, UpstreamError> {
        let params = ReadResourceRequestParams::new(uri.to_owned());
        tokio::time::timeout(self.call_timeout, self.service.peer().read_resource(params))
            .await
            .map_err(|_| UpstreamError::Unknown(format!("resources/read {uri} timed out")))?
            .map_err(classify)
    }

    /// `prompts/get` of `name` with `arguments`, within the call timeout.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
    ) -> Result<GetPromptResult, UpstreamError> {
        let mut params = GetPromptRequestParams::new(name.to_owned());
        params.arguments = arguments;
        let answer = tokio::time::timeout(
            self.call_timeout,
            self.service.peer().get_prompt_once(params),
        )
        .await
        .map_err(|_| UpstreamError::Unknown(format!("prompts/get {name} timed out")))?
        .map_err(classify)?;
        match answer {
            GetPromptResponse::Complete(r) => Ok(r),
            // The gateway relays no input requests: the caller could not
            // answer one through it.
            _ => Err(UpstreamError::Refused {
                code: ErrorCode::INVALID_REQUEST.0,
                message: format!(
                    "prompts/get {name}: the upstream asks for input the gateway does not relay"
                ),
            }),
        }
    }

    /// Calls `tool` with `arguments`, the operation key in `_meta`, within
    /// the call timeout. The result is the upstream's, whatever `isError`
    /// says; only a missing answer is an error.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        operation_key: &str,
    ) -> Result<CallToolResult, UpstreamError> {
        let mut meta = Map::new();
        meta.insert(OPERATION_KEY_META.to_owned(), json!(operation_key));
        self.send(tool, arguments, Some(meta)).await
    }

    /// Calls the read tool `tool` with `arguments`, within the call
    /// timeout: no operation key (nothing is claimed), no `_meta` of the
    /// caller's.
    pub async fn read(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<CallToolResult, UpstreamError> {
        self.send(tool, arguments, None).await
    }

    async fn send(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        meta: Option<Map<String, Value>>,
    ) -> Result<CallToolResult, UpstreamError> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        params.meta = meta.map(|m| RequestMetaObject(MetaObject(m)));
        // A call abandoned at the timeout is cancelled by rmcp
        // (notifications/cancelled), but it may already have run: unknown.
        tokio::time::timeout(self.call_timeout, self.service.peer().call_tool(params))
            .await
            .map_err(|_| {
                UpstreamError::Unknown(format!(
                    "tools/call {tool} gave no answer within {} ms",
                    self.call_timeout.as_millis()
                ))
            })?
            .map_err(classify)
    }

    /// Asks the status tool whether the write for `operation_key` was
    /// applied. The tool answers `{"applied": true|false, …}`, as its
    /// `structuredContent` or as the JSON text of its first text content;
    /// anything else (an error result included) is not an answer.
    pub async fn status(
        &self,
        status_tool: &str,
        key_argument: &str,
        operation_key: &str,
    ) -> Result<Status, UpstreamError> {
        let mut arguments = Map::new();
        arguments.insert(key_argument.to_owned(), json!(operation_key));
        let result = self.call(status_tool, arguments, operation_key).await?;
        status_of(&result).ok_or_else(|| {
            UpstreamError::Unknown(format!(
                "{status_tool} did not answer {{\"applied\": true|false}}"
            ))
        })
    }

    /// Ends the session (a stdio child is stopped).
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

/// The status answer in a status tool's result.
pub fn status_of(result: &CallToolResult) -> Option<Status> {
    if result.is_error == Some(true) {
        return None;
    }
    let doc = match &result.structured_content {
        Some(v) => v.clone(),
        None => {
            let text = result.content.first()?.as_text()?.text.as_str();
            toolgate::decode::decode_strict(
                text.as_bytes(),
                &toolgate::decode::Limits::provider_body(),
            )
            .ok()?
        }
    };
    match doc.get("applied")? {
        Value::Bool(true) => Some(Status::Applied(doc)),
        Value::Bool(false) => Some(Status::NotApplied(doc)),
        _ => None,
    }
}

fn to_value(v: &impl serde::Serialize) -> Option<Value> {
    serde_json::to_value(v).ok()
}

/// A JSON-RPC error answer is a refusal; anything else (a broken
/// connection, a closed transport, a response of the wrong type) leaves the
/// outcome unknown.
fn classify(e: ServiceError) -> UpstreamError {
    match e {
        ServiceError::McpError(data) => UpstreamError::Refused {
            code: data.code.0,
            message: data.message.to_string(),
        },
        other => UpstreamError::Unknown(other.to_string()),
    }
}
