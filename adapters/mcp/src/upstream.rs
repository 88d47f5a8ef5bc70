//! The gateway as an MCP client of one upstream server (SPEC §19.1): started over stdio (a child
//! process) or reached over Streamable HTTP, its tools listed as raw definitions (for hashing),
//! its calls forwarded, and its `notifications/tools/list_changed` reported. Its resources,
//! prompts, completion and logging level are reached through it too (§19.6), and what it says
//! of them (`notifications/resources/updated`, the resource and prompt list changes) is
//! published as a [`Notice`].
//!
//! **Protocol.** The lifecycle is negotiated: `server/discover` at 2026-07-28 first, and the
//! `initialize` handshake at 2025-11-25 when the server is older (rmcp's `Auto` mode, which
//! falls back when the server answers the probe with an error, or after 10 s of silence). On a
//! 2026-07-28 connection, list changes arrive on a `subscriptions/listen` stream the gateway
//! opens; on an older one, as plain notifications.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResult, Implementation, Prompt, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResult, Resource, ResourceTemplate,
    ResourceUpdatedNotificationParam, ServerCapabilities, ServerNotification,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, RoleClient, RunningService,
    ServiceError,
};
use rmcp::transport::{IntoTransport, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData};
use serde_json::{Map, Value};
use tokio::sync::{broadcast, mpsc};

use crate::config::{ServerConfig, Transport};

/// Why an upstream could not be reached or listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("upstream '{server}': {message}")]
pub struct UpstreamError {
    pub server: String,
    pub message: String,
}

/// Why a forwarded call did not come back with a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// Nothing was sent: the upstream is gone or the request could not be written.
    #[error("not sent: {0}")]
    NotSent(String),
    /// The upstream answered with a JSON-RPC error: it did not run the tool.
    #[error("upstream error {code}: {message}")]
    Rejected { code: i32, message: String },
    /// The request was sent and no answer came (the connection closed, a malformed reply).
    #[error("no answer: {0}")]
    Lost(String),
    /// No answer within the tool's timeout.
    #[error("timed out after {0:?}")]
    TimedOut(Duration),
}

/// What an upstream said about its resources and prompts (§19.6), with its upstream URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    ResourceUpdated { server: String, uri: String },
    ResourcesListChanged { server: String },
    PromptsListChanged { server: String },
}

/// Receives what an upstream tells the gateway outside of answers.
#[derive(Clone)]
pub struct UpstreamHandler {
    server: String,
    changed: mpsc::UnboundedSender<String>,
    /// Resource and prompt notices; no receiver (no client yet) drops them.
    notices: broadcast::Sender<Notice>,
}

impl ClientHandler for UpstreamHandler {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("airlock-gateway", env!("CARGO_PKG_VERSION")),
        );
        info.protocol_version = ProtocolVersion::V_2025_11_25;
        info
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        // The receiver lives as long as the gateway; a send after shutdown changes nothing.
        let _ = self.changed.send(self.server.clone());
        std::future::ready(())
    }

    fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        let _ = self.notices.send(Notice::ResourceUpdated {
            server: self.server.clone(),
            uri: params.uri,
        });
        std::future::ready(())
    }

    fn on_resource_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        let _ = self.notices.send(Notice::ResourcesListChanged {
            server: self.server.clone(),
        });
        std::future::ready(())
    }

    fn on_prompt_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        let _ = self.notices.send(Notice::PromptsListChanged {
            server: self.server.clone(),
        });
        std::future::ready(())
    }
}

/// A connected upstream server.
pub struct Upstream {
    server: String,
    service: RunningService<RoleClient, UpstreamHandler>,
}

/// How long the handshake with an upstream, and its `tools/list`, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Negotiates the protocol over either transport within [`CONNECT_TIMEOUT`].
async fn handshake<T, E, A>(
    handler: UpstreamHandler,
    transport: T,
    lifecycle: ClientLifecycleMode,
) -> Result<RunningService<RoleClient, UpstreamHandler>, String>
where
    T: IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    tokio::time::timeout(
        CONNECT_TIMEOUT,
        handler.serve_with_lifecycle(transport, lifecycle),
    )
    .await
    .map_err(|_| "no handshake within 30 s".to_owned())?
    .map_err(|e| format!("handshake failed: {e}"))
}

impl Upstream {
    /// Starts or reaches `config`'s server and negotiates the protocol. `changed` receives the
    /// server id whenever the server says its tool list changed.
    pub async fn connect(
        config: &ServerConfig,
        changed: mpsc::UnboundedSender<String>,
        notices: broadcast::Sender<Notice>,
    ) -> Result<Arc<Upstream>, UpstreamError> {
        let fail = |message: String| UpstreamError {
            server: config.id.clone(),
            message,
        };
        let handler = UpstreamHandler {
            server: config.id.clone(),
            changed: changed.clone(),
            notices: notices.clone(),
        };
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        };
        let service = match &config.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env);
                if let Some(cwd) = cwd {
                    cmd.current_dir(cwd);
                }
                let (transport, _stderr) = TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::inherit())
                    .spawn()
                    .map_err(|e| fail(format!("cannot start '{command}': {e}")))?;
                handshake(handler, transport, lifecycle)
                    .await
                    .map_err(fail)?
            }
            Transport::StreamableHttp { url, headers } => {
                crate::tls::install_default_provider();
                let mut http = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str());
                for (name, value) in headers {
                    let name = http::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|e| fail(format!("header '{name}': {e}")))?;
                    let value = value
                        .parse()
                        .map_err(|_| fail(format!("header '{name}': invalid value")))?;
                    http.custom_headers.insert(name, value);
                }
                let transport = StreamableHttpClientTransport::from_config(http);
                handshake(handler, transport, lifecycle)
                    .await
                    .map_err(fail)?
            }
        };
        let upstream = Arc::new(Upstream {
            server: config.id.clone(),
            service,
        });
        upstream.watch_list_changes(changed, notices).await;
        Ok(upstream)
    }

    /// The negotiated protocol version.
    pub fn protocol_version(&self) -> Option<String> {
        self.service
            .peer_info()
            .map(|info| info.protocol_version.to_string())
    }

    /// On a 2026-07-28 connection, opens the `tools` list-change subscription and forwards
    /// its notifications; older connections deliver them to [`UpstreamHandler`].
    async fn watch_list_changes(
        &self,
        changed: mpsc::UnboundedSender<String>,
        notices: broadcast::Sender<Notice>,
    ) {
        let modern = self
            .service
            .peer_info()
            .is_some_and(|info| !info.protocol_version.has_initialize());
        let capabilities = self.capabilities();
        let tools = capabilities.tools.and_then(|t| t.list_changed) == Some(true);
        let resources = capabilities.resources.as_ref().and_then(|r| r.list_changed) == Some(true);
        let prompts = capabilities.prompts.and_then(|p| p.list_changed) == Some(true);
        if !modern || !(tools || resources || prompts) {
            return;
        }
        let mut filter = SubscriptionFilter::new();
        filter.tools_list_changed = tools.then_some(true);
        filter.resources_list_changed = resources.then_some(true);
        filter.prompts_list_changed = prompts.then_some(true);
        let Ok(mut subscription) = self.service.peer().listen(filter).await else {
            tracing::warn!(server = %self.server, "the upstream refused a tools list-change subscription");
            return;
        };
        let server = self.server.clone();
        tokio::spawn(async move {
            while let Ok(Some(notification)) = subscription.next().await {
                let notice = match notification {
                    ServerNotification::ToolListChangedNotification(_) => {
                        if changed.send(server.clone()).is_err() {
                            return;
                        }
                        continue;
                    }
                    ServerNotification::ResourceListChangedNotification(_) => {
                        Notice::ResourcesListChanged {
                            server: server.clone(),
                        }
                    }
                    ServerNotification::PromptListChangedNotification(_) => {
                        Notice::PromptsListChanged {
                            server: server.clone(),
                        }
                    }
                    _ => continue,
                };
                let _ = notices.send(notice);
            }
        });
    }

    /// Every tool the server lists, as its raw JSON definition.
    pub async fn list_tools(&self) -> Result<Vec<Value>, UpstreamError> {
        let tools = tokio::time::timeout(CONNECT_TIMEOUT, self.service.peer().list_all_tools())
            .await
            .map_err(|_| UpstreamError {
                server: self.server.clone(),
                message: "tools/list: no answer within 30 s".into(),
            })?
            .map_err(|e| UpstreamError {
                server: self.server.clone(),
                message: format!("tools/list: {e}"),
            })?;
        tools
            .iter()
            .map(|tool| {
                serde_json::to_value(tool).map_err(|e| UpstreamError {
                    server: self.server.clone(),
                    message: format!("tools/list: {e}"),
                })
            })
            .collect()
    }

    /// Forwards one `tools/call`; the result comes back as its JSON, unchanged.
    pub async fn call(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        if self.service.is_closed() {
            return Err(CallError::NotSent(
                "the upstream connection is closed".into(),
            ));
        }
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = Some(arguments);
        let answer = tokio::time::timeout(timeout, self.service.peer().call_tool(params)).await;
        match answer {
            Err(_) => Err(CallError::TimedOut(timeout)),
            Ok(Ok(result)) => {
                serde_json::to_value(&result).map_err(|e| CallError::Lost(e.to_string()))
            }
            Ok(Err(error)) => Err(call_error(error)),
        }
    }

    /// What the server declared it offers (nothing, if it declared nothing).
    pub fn capabilities(&self) -> ServerCapabilities {
        self.service
            .peer_info()
            .map(|info| info.capabilities.clone())
            .unwrap_or_default()
    }

    /// One request of §19.6 within `timeout`: the upstream's own JSON-RPC error is passed on
    /// unchanged (the client sees what the server said); any other failure is an internal error
    /// naming the server.
    async fn ask<T>(
        &self,
        method: &str,
        timeout: Duration,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, ErrorData> {
        match tokio::time::timeout(timeout, request).await {
            Err(_) => Err(ErrorData::internal_error(
                format!(
                    "upstream '{}': {method}: no answer within {timeout:?}",
                    self.server
                ),
                None,
            )),
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(ServiceError::McpError(error))) => Err(error),
            Ok(Err(other)) => Err(ErrorData::internal_error(
                format!("upstream '{}': {method}: {other}", self.server),
                None,
            )),
        }
    }

    pub async fn list_resources(&self, timeout: Duration) -> Result<Vec<Resource>, ErrorData> {
        self.ask(
            "resources/list",
            timeout,
            self.service.peer().list_all_resources(),
        )
        .await
    }

    pub async fn list_resource_templates(
        &self,
        timeout: Duration,
    ) -> Result<Vec<ResourceTemplate>, ErrorData> {
        self.ask(
            "resources/templates/list",
            timeout,
            self.service.peer().list_all_resource_templates(),
        )
        .await
    }

    pub async fn read_resource(
        &self,
        uri: &str,
        timeout: Duration,
    ) -> Result<ReadResourceResult, ErrorData> {
        let params = ReadResourceRequestParams::new(uri.to_owned());
        self.ask(
            "resources/read",
            timeout,
            self.service.peer().read_resource(params),
        )
        .await
    }

    pub async fn list_prompts(&self, timeout: Duration) -> Result<Vec<Prompt>, ErrorData> {
        self.ask(
            "prompts/list",
            timeout,
            self.service.peer().list_all_prompts(),
        )
        .await
    }

    pub async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
        timeout: Duration,
    ) -> Result<GetPromptResult, ErrorData> {
        self.ask(
            "prompts/get",
            timeout,
            self.service.peer().get_prompt(params),
        )
        .await
    }

    pub async fn complete(
        &self,
        params: CompleteRequestParams,
        timeout: Duration,
    ) -> Result<CompleteResult, ErrorData> {
        self.ask(
            "completion/complete",
            timeout,
            self.service.peer().complete(params),
        )
        .await
    }

    #[allow(deprecated)]
    pub async fn set_level(
        &self,
        params: rmcp::model::SetLevelRequestParams,
        timeout: Duration,
    ) -> Result<(), ErrorData> {
        self.ask(
            "logging/setLevel",
            timeout,
            self.service.peer().set_level(params),
        )
        .await
    }

    #[allow(deprecated)]
    pub async fn subscribe(&self, uri: &str, timeout: Duration) -> Result<(), ErrorData> {
        let params = SubscribeRequestParams::new(uri.to_owned());
        self.ask(
            "resources/subscribe",
            timeout,
            self.service.peer().subscribe(params),
        )
        .await
    }

    #[allow(deprecated)]
    pub async fn unsubscribe(&self, uri: &str, timeout: Duration) -> Result<(), ErrorData> {
        let params = UnsubscribeRequestParams::new(uri.to_owned());
        self.ask(
            "resources/unsubscribe",
            timeout,
            self.service.peer().unsubscribe(params),
        )
        .await
    }

    /// Ends the session (a stdio child is killed when its transport drops).
    pub fn close(&self) {
        self.service.cancellation_token().cancel();
    }
}

fn call_error(error: ServiceError) -> CallError {
    match error {
        ServiceError::McpError(ErrorData { code, message, .. }) => CallError::Rejected {
            code: code.0,
            message: message.into_owned(),
        },
        ServiceError::TransportSend(e) => CallError::NotSent(e.to_string()),
        other => CallError::Lost(other.to_string()),
    }
}
