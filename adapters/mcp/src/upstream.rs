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
//!
//! **In-call traffic** (SPEC §19.6) goes through [`UpstreamRelay`]: progress, log messages and
//! the upstream's sampling, elicitation and roots requests reach the client whose call is in
//! flight. On 2025-11-25 the upstream sends those requests as server-to-client requests; on
//! 2026-07-28 as an input-required result of the forwarded call. For a 2025-11-25 client the
//! gateway asks its requests of the client and sends the call again with the answers; a
//! 2026-07-28 client is answered the round itself ([`crate::round`]).

// Sampling, roots and logging are deprecated by SEP-2577 in rmcp; relaying them is the point.
#![allow(deprecated)]

use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ClientRequest, CompleteRequestParams, CompleteResult, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationCapability,
    FormElicitationCapability, GetPromptRequestParams, GetPromptResult, Implementation,
    InputResponses, ListRootsResult, LoggingLevel, LoggingMessageNotificationParam,
    ProgressNotificationParam, Prompt, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResult, Resource, ResourceTemplate, ResourceUpdatedNotificationParam,
    RootsCapabilities, SamplingCapability, ServerCapabilities, ServerNotification, ServerResult,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams, UrlElicitationCapability,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, PeerRequestOptions, RequestContext,
    RoleClient, RunningService, ServiceError,
};
use rmcp::transport::{IntoTransport, StreamableHttpClientTransport};
use rmcp::{ClientHandler, ErrorData};
use serde_json::{Map, Value};
use tokio::sync::{broadcast, mpsc};

use crate::config::{ServerConfig, Transport};
use crate::relay::{ClientLink, Forwarding, RelayContext, UpstreamRelay};
use crate::round::capabilities_meta;
use crate::secret_ref::{ProcessSecrets, SecretTemplate};
use crate::upstream_oauth::{BearerClient, ReadOnlyTool, TokenSource};

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
    Rejected {
        code: i32,
        message: String,
        /// The error's `data`, as the upstream sent it.
        data: Option<Value>,
    },
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
    relay: Arc<UpstreamRelay>,
}

/// What the gateway can relay to a client: declared upstream once for every client (the
/// connection is shared and opened before any client connects); each relayed request is checked
/// against what its client declared ([`UpstreamRelay`]).
fn relayable_capabilities() -> ClientCapabilities {
    let mut capabilities = ClientCapabilities::default();
    capabilities.sampling = Some(SamplingCapability::default());
    capabilities.roots = Some(RootsCapabilities::default());
    let mut elicitation = ElicitationCapability::new();
    elicitation.form = Some(FormElicitationCapability::default());
    elicitation.url = Some(UrlElicitationCapability::default());
    capabilities.elicitation = Some(elicitation);
    capabilities
}

impl ClientHandler for UpstreamHandler {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::new(
            relayable_capabilities(),
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

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.relay.progress(params).await;
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.relay.log(params).await;
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.relay
            .sampling(params, context.meta.get_progress_token())
            .await
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.relay
            .elicitation(params, context.meta.get_progress_token())
            .await
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        self.relay.roots(context.meta.get_progress_token()).await
    }
}

/// A connected upstream server.
pub struct Upstream {
    server: String,
    service: RunningService<RoleClient, UpstreamHandler>,
    relay: Arc<UpstreamRelay>,
    /// Where resource updates go (a 2026-07-28 upstream's come on `subscriptions/listen`).
    notices: broadcast::Sender<Notice>,
    /// On a 2026-07-28 upstream, which has no `logging/setLevel`: the level a client set, sent
    /// in the `_meta` of each request the gateway makes for a client.
    log_level: std::sync::Mutex<Option<LoggingLevel>>,
    /// On a 2026-07-28 upstream, which has no `resources/subscribe`: the `subscriptions/listen`
    /// stream of each subscribed resource URI (aborted on `resources/unsubscribe`).
    watches: std::sync::Mutex<std::collections::BTreeMap<String, tokio::task::AbortHandle>>,
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
    /// server id whenever the server says its tool list changed; `relays` carries in-call
    /// traffic to the gateway's clients.
    pub async fn connect(
        config: &ServerConfig,
        changed: mpsc::UnboundedSender<String>,
        notices: broadcast::Sender<Notice>,
        relays: RelayContext,
    ) -> Result<Arc<Upstream>, UpstreamError> {
        let fail = |message: String| UpstreamError {
            server: config.id.clone(),
            message,
        };
        let relay = UpstreamRelay::new(config.id.clone(), config.roots.clone(), relays);
        let handler = UpstreamHandler {
            server: config.id.clone(),
            changed: changed.clone(),
            notices: notices.clone(),
            relay: Arc::clone(&relay),
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
                let transport = crate::child::spawn(cmd)
                    .await
                    .map_err(|e| fail(format!("cannot start '{command}': {e}")))?;
                handshake(handler, transport, lifecycle)
                    .await
                    .map_err(fail)?
            }
            Transport::StreamableHttp { url, headers } => {
                crate::tls::install_default_provider();
                let mut http = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str());
                for (name, written) in headers {
                    let header = http::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|e| fail(format!("header '{name}': {e}")))?;
                    // Secrets named by `${env:…}`/`${file:…}` are read now, on every connect;
                    // no message carries a value.
                    let value = SecretTemplate::parse(written)
                        .map_err(|e| fail(format!("header '{name}': {e}")))?
                        .resolve(&ProcessSecrets)
                        .map_err(|e| fail(format!("header '{name}': {e}")))?;
                    let mut value: http::HeaderValue = value
                        .parse()
                        .map_err(|_| fail(format!("header '{name}': invalid value")))?;
                    value.set_sensitive(true);
                    http.custom_headers.insert(header, value);
                }
                match &config.oauth {
                    None => {
                        let transport = StreamableHttpClientTransport::from_config(http);
                        handshake(handler, transport, lifecycle)
                            .await
                            .map_err(fail)?
                    }
                    // The bearer token of the client-credentials grant, on every request.
                    Some(oauth) => {
                        let inner = crate::upstream_oauth::mcp_http_client().map_err(fail)?;
                        let token_client =
                            crate::upstream_oauth::token_http_client().map_err(fail)?;
                        let tokens = TokenSource::new(oauth.clone(), token_client);
                        let client = BearerClient::new(inner, tokens, read_only_tool(config));
                        let transport = StreamableHttpClientTransport::with_client(client, http);
                        handshake(handler, transport, lifecycle)
                            .await
                            .map_err(fail)?
                    }
                }
            }
        };
        let upstream = Arc::new(Upstream {
            server: config.id.clone(),
            service,
            relay,
            notices: notices.clone(),
            log_level: std::sync::Mutex::new(None),
            watches: std::sync::Mutex::new(std::collections::BTreeMap::new()),
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

    /// Forwards one `tools/call`; the result comes back as its JSON, unchanged. `client` is the
    /// live client the call is made for, which its in-call traffic is relayed to.
    pub async fn call(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
        client: Option<ClientLink>,
    ) -> Result<Value, CallError> {
        if self.service.is_closed() {
            return Err(CallError::NotSent(
                "the upstream connection is closed".into(),
            ));
        }
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = Some(arguments);
        // The client span of this call, below the client's request; its trace context goes
        // upstream in `_meta` (nothing when nothing exports).
        let span = match &client {
            Some(link) => crate::telemetry::upstream_call_span(link.span(), &self.server, name),
            None => tracing::Span::none(),
        };
        if let Some((traceparent, tracestate)) = crate::telemetry::trace_context(&span) {
            let meta = params.meta.get_or_insert_with(Default::default);
            meta.set_traceparent(traceparent);
            if let Some(state) = tracestate {
                meta.set_tracestate(state);
            }
        }
        // Registered until the answer (or the timeout) drops it: no relay after that.
        let forwarding = self.relay.begin(client);
        let answer = tokio::time::timeout(timeout, self.call_rounds(params, &forwarding))
            .instrument(span.clone())
            .await;
        let answer = match answer {
            Err(_) => Err(CallError::TimedOut(timeout)),
            Ok(answer) => answer,
        };
        match &answer {
            Ok(result) if result.get("isError") == Some(&Value::Bool(true)) => {
                span.record("error.type", "tool_error");
            }
            Ok(_) => {}
            Err(CallError::TimedOut(_)) => {
                span.record("error.type", "timeout");
            }
            Err(_) => {
                span.record("error.type", "upstream_error");
            }
        }
        answer
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
    /// `logging/setLevel`. A 2026-07-28 upstream has no such method: the level is kept and
    /// named in the `_meta` of each request the gateway makes for a client from now on.
    pub async fn set_level(
        &self,
        params: rmcp::model::SetLevelRequestParams,
        timeout: Duration,
    ) -> Result<(), ErrorData> {
        if self.speaks_modern() {
            *self.log_level.lock().unwrap_or_else(|p| p.into_inner()) = Some(params.level);
            return Ok(());
        }
        self.ask(
            "logging/setLevel",
            timeout,
            self.service.peer().set_level(params),
        )
        .await
    }

    /// `resources/subscribe`. On a 2026-07-28 upstream, a `subscriptions/listen` stream for
    /// the URI, whose updates are published as [`Notice::ResourceUpdated`] like a 2025-11-25
    /// upstream's notifications.
    #[allow(deprecated)]
    pub async fn subscribe(&self, uri: &str, timeout: Duration) -> Result<(), ErrorData> {
        if !self.speaks_modern() {
            let params = SubscribeRequestParams::new(uri.to_owned());
            return self
                .ask(
                    "resources/subscribe",
                    timeout,
                    self.service.peer().subscribe(params),
                )
                .await;
        }
        if self.watching().contains_key(uri) {
            return Ok(());
        }
        let mut filter = SubscriptionFilter::new();
        filter.resource_subscriptions = Some(vec![uri.to_owned()]);
        let mut subscription = self
            .ask(
                "subscriptions/listen",
                timeout,
                self.service.peer().listen(filter),
            )
            .await?;
        let (server, notices) = (self.server.clone(), self.notices.clone());
        let task = tokio::spawn(async move {
            while let Ok(Some(notification)) = subscription.next().await {
                if let ServerNotification::ResourceUpdatedNotification(updated) = notification {
                    let _ = notices.send(Notice::ResourceUpdated {
                        server: server.clone(),
                        uri: updated.params.uri,
                    });
                }
            }
        });
        if let Some(earlier) = self.watching().insert(uri.to_owned(), task.abort_handle()) {
            earlier.abort();
        }
        Ok(())
    }

    /// `resources/unsubscribe`; on a 2026-07-28 upstream, the URI's stream ends.
    #[allow(deprecated)]
    pub async fn unsubscribe(&self, uri: &str, timeout: Duration) -> Result<(), ErrorData> {
        if self.speaks_modern() {
            if let Some(watch) = self.watching().remove(uri) {
                watch.abort();
            }
            return Ok(());
        }
        let params = UnsubscribeRequestParams::new(uri.to_owned());
        self.ask(
            "resources/unsubscribe",
            timeout,
            self.service.peer().unsubscribe(params),
        )
        .await
    }

    fn watching(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, tokio::task::AbortHandle>>
    {
        self.watches.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the upstream speaks 2026-07-28 (no `initialize`).
    fn speaks_modern(&self) -> bool {
        self.service
            .peer_info()
            .is_some_and(|info| !info.protocol_version.has_initialize())
    }

    /// The options of a request made for `client`: on a 2026-07-28 upstream, its `_meta`
    /// names what that client can answer ([`crate::round::relayed_capabilities`]).
    ///
    /// The log level it names is the request's own for a 2026-07-28 client (`Some(None)`: it
    /// asked for no log messages), else the one a `logging/setLevel` set (`None`).
    fn options_for(
        &self,
        client: Option<&ClientCapabilities>,
        level: Option<Option<LoggingLevel>>,
    ) -> PeerRequestOptions {
        let mut options = PeerRequestOptions::no_options();
        if !self.speaks_modern() {
            return options;
        }
        let mut meta = client.map(capabilities_meta).unwrap_or_default();
        let level =
            level.unwrap_or_else(|| *self.log_level.lock().unwrap_or_else(|p| p.into_inner()));
        if let Some(level) = level {
            meta.set_log_level(level);
        }
        if !meta.is_empty() {
            options.meta = Some(meta);
        }
        options
    }

    /// An input-required round of a `prompts/get` or `resources/read` for a 2026-07-28 client
    /// that declared `declared`, checked and recorded before it is passed on
    /// ([`UpstreamRelay::pass_on`]).
    pub fn pass_on(
        &self,
        declared: Option<&ClientCapabilities>,
        input: &rmcp::model::InputRequiredResult,
    ) -> Result<(), ErrorData> {
        self.relay.pass_on(declared, input)
    }

    /// Sends `request` once within `timeout`, for a client that declared `client`: the
    /// upstream's answer as it came, an input-required round included.
    pub async fn ask_once(
        &self,
        method: &str,
        request: ClientRequest,
        timeout: Duration,
        client: Option<&ClientCapabilities>,
        level: Option<Option<LoggingLevel>>,
    ) -> Result<ServerResult, ErrorData> {
        let options = self.options_for(client, level);
        self.ask(method, timeout, async {
            self.service
                .peer()
                .send_request_with_option(request, options)
                .await?
                .await_response()
                .await
        })
        .await
    }

    /// Sends the call. An input-required round of a 2026-07-28 upstream is returned as the
    /// call's answer when the call's client speaks 2026-07-28 too (it answers the round and
    /// sends the call again, [`crate::round`]); for any other client each round is answered
    /// through the call's client here and the call sent again, up to [`MAX_INPUT_ROUNDS`].
    async fn call_rounds(
        &self,
        mut params: CallToolRequestParams,
        forwarding: &Forwarding,
    ) -> Result<Value, CallError> {
        let client = forwarding.client();
        if let Some(round) = client.as_ref().map(ClientLink::round)
            && !round.is_empty()
        {
            params.input_responses = round.input_responses.clone();
            params.request_state = round.upstream_state.clone();
        }
        let declared = client.as_ref().and_then(ClientLink::capabilities).cloned();
        let level = client.as_ref().and_then(ClientLink::request_log_level);
        let relays_rounds = client.as_ref().is_some_and(ClientLink::is_modern);
        for _ in 0..MAX_INPUT_ROUNDS {
            let handle = self
                .service
                .peer()
                .send_request_with_option(
                    ClientRequest::CallToolRequest(CallToolRequest::new(params.clone())),
                    self.options_for(declared.as_ref(), level),
                )
                .await
                .map_err(call_error)?;
            // rmcp gives each request a progress token of its own: the upstream's progress
            // for this call comes under it.
            forwarding.sent_with(handle.progress_token.clone()).await;
            let mut abandoned = Abandoned {
                peer: Some(self.service.peer().clone()),
                id: handle.id.clone(),
            };
            let answer = handle.await_response().await;
            abandoned.peer = None;
            let input = match answer.map_err(call_error)? {
                ServerResult::CallToolResult(result) => {
                    return serde_json::to_value(&result)
                        .map_err(|e| CallError::Lost(e.to_string()));
                }
                ServerResult::InputRequiredResult(input) if relays_rounds => {
                    // Not passed on: nothing of it reaches the client, and the upstream ran
                    // nothing final, but what it did is not known (fail closed).
                    self.relay
                        .pass_on(declared.as_ref(), &input)
                        .map_err(|error| {
                            CallError::Lost(format!(
                                "an input round not relayed: {}",
                                error.message
                            ))
                        })?;
                    return serde_json::to_value(&input)
                        .map_err(|e| CallError::Lost(e.to_string()));
                }
                ServerResult::InputRequiredResult(input) => input,
                // The gateway never declares the tasks extension upstream, so this is a server
                // that made a task anyway: its effect may still complete (SPEC §23).
                ServerResult::CreateTaskResult(_) => {
                    return Err(CallError::Lost(
                        "the upstream made this call a task (io.modelcontextprotocol/tasks), \
                         which this gateway does not relay; its outcome is unknown"
                            .to_owned(),
                    ));
                }
                other => {
                    return Err(CallError::Lost(format!(
                        "an answer that is not a tool result: {}",
                        serde_json::to_string(&other).unwrap_or_default()
                    )));
                }
            };
            let mut responses = InputResponses::new();
            for (key, request) in input.input_requests.unwrap_or_default() {
                // An input-required round has no place for an error, and airlock never answers
                // for the client: a request the client cannot answer ends the call, as a call
                // whose outcome the gateway does not know (fail closed for a side effect).
                let answer = self
                    .relay
                    .input(forwarding, request)
                    .await
                    .map_err(|error| {
                        CallError::Lost(format!("an input request not relayed: {}", error.message))
                    })?;
                responses.insert(key, answer);
            }
            params.input_responses = (!responses.is_empty()).then_some(responses);
            params.request_state = input.request_state;
        }
        Err(CallError::Lost(format!(
            "no final result after {MAX_INPUT_ROUNDS} input-required rounds"
        )))
    }

    /// Ends the session (a stdio child is killed when its transport drops, [`crate::child`]).
    pub fn close(&self) {
        self.service.cancellation_token().cancel();
    }
}

/// How many 2026-07-28 input-required rounds one forwarded call may take.
const MAX_INPUT_ROUNDS: usize = 8;

/// Tells the upstream a request is abandoned (`notifications/cancelled`) when its wait is dropped
/// (the tool's timeout), as rmcp's own call helpers do.
struct Abandoned {
    peer: Option<rmcp::Peer<RoleClient>>,
    id: rmcp::model::RequestId,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let param = CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some("airlock: the tool's timeout passed".into()),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer.notify_cancelled(param).await;
            });
        }
    }
}

fn call_error(error: ServiceError) -> CallError {
    match error {
        ServiceError::McpError(ErrorData {
            code,
            message,
            data,
        }) => CallError::Rejected {
            code: code.0,
            message: message.into_owned(),
            data,
        },
        ServiceError::TransportSend(e) => CallError::NotSent(e.to_string()),
        other => CallError::Lost(other.to_string()),
    }
}

/// Whether `config` classifies an upstream tool `read_only` (its own table, else the server's
/// default class): what a 401 may retry (`upstream_oauth`).
fn read_only_tool(config: &ServerConfig) -> ReadOnlyTool {
    let tools: std::collections::BTreeMap<String, bool> = config
        .tools
        .iter()
        .map(|(name, tool)| {
            (
                name.clone(),
                tool.class.idempotency == airlock_core::vocab::IdempotencyClass::ReadOnly,
            )
        })
        .collect();
    let default = config.default.idempotency == airlock_core::vocab::IdempotencyClass::ReadOnly;
    Arc::new(move |name: &str| tools.get(name).copied().unwrap_or(default))
}
