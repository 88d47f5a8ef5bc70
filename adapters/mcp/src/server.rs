//! The MCP server a client talks to (SPEC §19.1, §19.3, §19.4): `tools/list` shows the listed
//! tools under their exposed names; each `tools/call` is handed to core's live connection and
//! answered from what committed.
//!
//! **Protocol.** Both 2025-11-25 (the `initialize` handshake) and 2026-07-28 (per-request
//! `_meta`, `server/discover`) are served, negotiated by rmcp; nothing older is offered (an older
//! client is answered 2025-11-25 at `initialize`, and may leave). List changes reach a
//! 2025-11-25 client as `notifications/tools/list_changed`, and a 2026-07-28 client on the
//! `subscriptions/listen` stream it opens.
//!
//! **While a call is parked** the request stays open. With a `progressToken`, a progress
//! notification naming the approval id and its expiry is sent when the call parks and every
//! [`PROGRESS_EVERY`] after. With `approve_via_elicitation = true`, a 2025-11-25 client that
//! declared form elicitation is asked once (`elicitation/create`, a yes/no form): yes resolves the
//! approval as the session's principal, no or decline as a denial, cancel or no answer changes
//! nothing. 2026-07-28 forbids server-to-client requests (its replacement, an input-required
//! result, ends the request), so there approvals come only from other processes.
//!
//! **Cancellation.** `notifications/cancelled` for a queued or parked call cancels the run
//! (§8.5) and nothing is answered (rmcp drops the response of a cancelled request).

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use airlock_core::connection::elicit::{ElicitedReply, resolution_of};
use airlock_core::connection::live::{ClientCall, LiveConnection, TicketEnd, TicketStatus};
use airlock_core::control::ControlService;
use airlock_core::ids::ApprovalId;
use airlock_core::principal::Principal;
use airlock_core::store::Store;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ElicitRequestParams,
    ElicitationAction, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProtocolVersion, ServerCapabilities, ServerConfig, SubscriptionFilter, Tool,
};
use rmcp::service::{ElicitationMode, RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData as McpError, Peer, ServerHandler};
use serde_json::{Value, json};

use crate::gateway::Gateway;
use crate::render;

/// How often a parked call's client hears that it is still waiting (§19.3: at most 10 s).
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// How often a waiting request looks at its ticket.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// The protocol versions the gateway serves (SPEC §19).
pub const SUPPORTED_VERSIONS: [ProtocolVersion; 2] =
    [ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28];

/// Resolving approvals on the client's answer to an elicitation (§19.4).
pub struct ElicitedApprovals<S: Store> {
    pub control: ControlService<S>,
    /// The session's principal, holding `approval.read` and `approval.resolve` (granted by
    /// `approve_via_elicitation = true`).
    pub principal: Principal,
}

/// One client connection's MCP server.
pub struct ClientSession<S: Store> {
    gateway: Arc<Gateway>,
    live: Arc<LiveConnection>,
    elicitation: Option<Arc<ElicitedApprovals<S>>>,
    next_key: AtomicU64,
    /// Whatever must live exactly as long as this server (an HTTP session's connection, which
    /// closes when the transport drops the server).
    held: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// Set by [`ClientSession::forwarding_list_changed`]: the task that forwards list changes
    /// once the client has initialized, aborted when this server is dropped.
    forwarder: Option<std::sync::Mutex<Option<tokio::task::AbortHandle>>>,
}

impl<S: Store + 'static> ClientSession<S> {
    pub fn new(
        gateway: Arc<Gateway>,
        live: Arc<LiveConnection>,
        elicitation: Option<ElicitedApprovals<S>>,
    ) -> ClientSession<S> {
        ClientSession {
            gateway,
            live,
            elicitation: elicitation.map(Arc::new),
            next_key: AtomicU64::new(1),
            held: None,
            forwarder: None,
        }
    }

    /// Tells this client of list changes as `notifications/tools/list_changed` once it has
    /// initialized (2025-11-25). For transports whose peer only the handler sees (an HTTP
    /// session); stdio's [`crate::serve`] forwards them itself.
    pub fn forwarding_list_changed(mut self) -> ClientSession<S> {
        self.forwarder = Some(std::sync::Mutex::new(None));
        self
    }

    /// Keeps `guard` until this server is dropped.
    pub fn holding(mut self, guard: impl std::any::Any + Send + Sync) -> ClientSession<S> {
        self.held = Some(Box::new(guard));
        self
    }

    /// Whether this request's client can be asked for an approval.
    fn can_elicit(&self, context: &RequestContext<RoleServer>) -> bool {
        let legacy = context
            .protocol_version()
            .is_some_and(|version| version.has_initialize());
        self.elicitation.is_some()
            && legacy
            && context
                .peer
                .supported_elicitation_modes()
                .contains(&ElicitationMode::Form)
    }
}

/// Asks the client to approve `approval` and resolves it from the answer.
async fn elicit<S: Store + 'static>(
    approvals: Arc<ElicitedApprovals<S>>,
    peer: Peer<RoleServer>,
    approval: ApprovalId,
) {
    let Ok(record) = approvals
        .control
        .get_approval(&approvals.principal, approval)
    else {
        return;
    };
    let arguments = serde_json::to_string(&record.arguments).unwrap_or_default();
    let message = format!(
        "airlock: approve this call?\ntool: {}\nrisk: {}\narguments (redacted): {}\nreason: {} ({})\napproval: {} (expires {})",
        record.tool_name,
        record.risk.as_str(),
        arguments,
        record.policy_reason,
        record.action_summary,
        record.id,
        record.expires_at,
    );
    let schema = json!({
        "type": "object",
        "properties": {
            "approve": {"type": "boolean", "title": "Approve", "description": "Allow this call to run"}
        },
        "required": ["approve"]
    });
    let Ok(requested_schema) = serde_json::from_value(schema) else {
        return;
    };
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema,
    };
    let answer = match peer.create_elicitation(params).await {
        Ok(answer) => answer,
        // No answer (an error, a client that went): nothing changes.
        Err(error) => {
            tracing::info!(approval = %approval, error = %error, "elicitation got no answer");
            return;
        }
    };
    let approve = answer
        .content
        .as_ref()
        .and_then(|c| c.get("approve"))
        .and_then(Value::as_bool);
    let reply = match answer.action {
        ElicitationAction::Accept => ElicitedReply::Accepted { approve },
        ElicitationAction::Decline => ElicitedReply::Declined,
        // Cancel, or an action this build does not know.
        _ => ElicitedReply::Cancelled,
    };
    // What the reply resolves is core's rule (§19.4).
    let Some((resolution, reason)) = resolution_of(reply) else {
        return;
    };
    if let Err(error) = approvals
        .control
        .resolve(&approvals.principal, approval, resolution, Some(reason))
        .await
    {
        // Self-approval refused by the profile, already resolved elsewhere, expired: the
        // approval stays as the store has it.
        tracing::info!(approval = %approval, error = %error, "elicited resolution refused");
    }
}

impl<S: Store> Drop for ClientSession<S> {
    fn drop(&mut self) {
        if let Some(slot) = &self.forwarder
            && let Some(task) = slot.lock().unwrap_or_else(|p| p.into_inner()).take()
        {
            task.abort();
        }
    }
}

impl<S: Store + 'static> ServerHandler for ClientSession<S> {
    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        let Some(slot) = &self.forwarder else {
            return;
        };
        let peer = context.peer.clone();
        let mut changes = self.gateway.subscribe_list_changed();
        let task = tokio::spawn(async move {
            loop {
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) = changes.recv().await
                {
                    return;
                }
                if peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        });
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(task.abort_handle());
    }

    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        );
        info.server_info = rmcp::model::Implementation::new("airlock", env!("CARGO_PKG_VERSION"));
        info.protocol_version = ProtocolVersion::V_2025_11_25;
        info.instructions = Some(
            "Every tool call passes airlock's policy gate. A call that needs a human approval \
             stays open until a reviewer resolves it; a denial is answered as an error that \
             says why."
                .to_owned(),
        );
        info
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(SUPPORTED_VERSIONS.to_vec())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        // A re-list: a definition that changed without a notification is registered now.
        self.gateway.refresh_all().await;
        let tools: Vec<Tool> = self
            .gateway
            .listed()
            .into_iter()
            .filter_map(|tool| serde_json::from_value(tool).ok())
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(internal) = self.gateway.internal_of(&request.name) else {
            return Err(McpError::invalid_params(
                format!("unknown tool: {}", request.name),
                None,
            ));
        };
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let key = self.next_key.fetch_add(1, Ordering::SeqCst);
        let ticket = self.live.submit(
            key,
            ClientCall {
                tool: internal,
                arguments,
            },
        );
        let progress_token = context.meta.get_progress_token();
        let mut progress = 0u32;
        let mut last_progress: Option<tokio::time::Instant> = None;
        let mut elicited = false;
        let can_elicit = self.can_elicit(&context);
        let ended = ticket.ended();
        tokio::pin!(ended);
        loop {
            tokio::select! {
                end = &mut ended => {
                    return match end {
                        TicketEnd::Answered(answer) => {
                            let result: CallToolResult = serde_json::from_value(render::call_result(&answer))
                                .map_err(|e| McpError::internal_error(format!("unrenderable result: {e}"), None))?;
                            Ok(CallToolResponse::from(result))
                        }
                        // No answer is sent (rmcp drops it for a cancelled request).
                        TicketEnd::Dropped => Err(McpError::internal_error("the call was cancelled", None)),
                    };
                }
                _ = context.ct.cancelled() => {
                    self.live.cancel(key);
                    return Err(McpError::internal_error("the call was cancelled", None));
                }
                _ = tokio::time::sleep(LOOK_EVERY) => {
                    let TicketStatus::Parked { approval_id, expires_at, .. } = ticket.status() else {
                        continue;
                    };
                    if can_elicit && !elicited && let Some(approvals) = &self.elicitation {
                        elicited = true;
                        tokio::spawn(elicit(Arc::clone(approvals), context.peer.clone(), approval_id));
                    }
                    let due = last_progress.is_none_or(|at| at.elapsed() >= PROGRESS_EVERY);
                    if let (Some(token), true) = (&progress_token, due) {
                        progress += 1;
                        last_progress = Some(tokio::time::Instant::now());
                        let mut param: ProgressNotificationParam = match serde_json::from_value(json!({
                            "progressToken": token,
                            "progress": progress,
                        })) {
                            Ok(param) => param,
                            Err(_) => continue,
                        };
                        param.message = Some(render::parked_message(approval_id, expires_at));
                        // A client that went is noticed by the transport, not here.
                        let _ = context.peer.notify_progress(param).await;
                    }
                }
            }
        }
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        (requested.tools_list_changed == Some(true))
            .then(|| SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let mut changes = self.gateway.subscribe_list_changed();
        loop {
            tokio::select! {
                _ = context.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    Ok(()) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        if context.sink().notify_tool_list_changed().await.is_err() {
                            return Ok(());
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
    }
}
