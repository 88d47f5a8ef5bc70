//! The gateway as an MCP client of one upstream server (SPEC §19.1): started over stdio (a child
//! process) or reached over Streamable HTTP, its tools listed as raw definitions (for hashing),
//! its calls forwarded, and its `notifications/tools/list_changed` reported.
//!
//! **Protocol.** The lifecycle is negotiated: `server/discover` at 2026-07-28 first, and the
//! `initialize` handshake at 2025-11-25 when the server is older (rmcp's `Auto` mode, which
//! falls back when the server answers the probe with an error, or after 10 s of silence). On a
//! 2026-07-28 connection, list changes arrive on a `subscriptions/listen` stream the gateway
//! opens; on an older one, as plain notifications.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
    ServerNotification, SubscriptionFilter,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, RoleClient, RunningService,
    ServiceError,
};
use rmcp::transport::{IntoTransport, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

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

/// Receives what an upstream tells the gateway outside of answers.
#[derive(Clone)]
pub struct UpstreamHandler {
    server: String,
    changed: mpsc::UnboundedSender<String>,
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
    ) -> Result<Arc<Upstream>, UpstreamError> {
        let fail = |message: String| UpstreamError {
            server: config.id.clone(),
            message,
        };
        let handler = UpstreamHandler {
            server: config.id.clone(),
            changed: changed.clone(),
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
        upstream.watch_list_changes(changed).await;
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
    async fn watch_list_changes(&self, changed: mpsc::UnboundedSender<String>) {
        let modern = self
            .service
            .peer_info()
            .is_some_and(|info| !info.protocol_version.has_initialize());
        let advertises = self
            .service
            .peer_info()
            .and_then(|info| info.capabilities.tools.clone())
            .and_then(|tools| tools.list_changed)
            == Some(true);
        if !modern || !advertises {
            return;
        }
        let filter = SubscriptionFilter::builder().tools_list_changed().build();
        let Ok(mut subscription) = self.service.peer().listen(filter).await else {
            tracing::warn!(server = %self.server, "the upstream refused a tools list-change subscription");
            return;
        };
        let server = self.server.clone();
        tokio::spawn(async move {
            while let Ok(Some(notification)) = subscription.next().await {
                if matches!(
                    notification,
                    ServerNotification::ToolListChangedNotification(_)
                ) && changed.send(server.clone()).is_err()
                {
                    return;
                }
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
