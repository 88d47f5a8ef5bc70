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
//! **Resources, prompts, completion, logging (§19.6).** Listed from every connected upstream
//! that offers them, under the names of [`crate::catalog`] (a server whose read scope the
//! principal lacks is not listed, as a tool whose scope it lacks is not). `resources/read`,
//! `prompts/get`, `completion/complete` and `resources/subscribe` pass core's read gate
//! ([`airlock_core::connection::read`]: scope, then the policy as a `network_read` action) and
//! are never journalled. A refusal is the JSON-RPC error [`READ_REFUSED`] (−32001, in the range
//! JSON-RPC leaves to implementations: the request was well formed, so neither −32602 nor
//! −32603 fits, and MCP defines no code for a refusal) whose message is
//! `airlock denied this read ({reason_code}): {explanation}` and whose `data` carries
//! `reason_code`. Whatever the upstream answered to a read, a prompt or a completion (its
//! content or its error text) reaches the client, so the connection's runs are tainted first
//! when the server's `output_trust` taints (§8.6). A URI or prompt name no server stands for
//! is −32002 (MCP's "resource not found") or −32602. `logging/setLevel` goes to every
//! upstream that offers logging. Capabilities are declared only for what some upstream offers.
//!
//! **In-call traffic** of a forwarded call (SPEC §19.6) is relayed to the client that made it:
//! each request registers its [`ClientLink`] with the gateway while it is open (see
//! [`crate::relay`]). The gateway's own parked progress and the upstream's progress share the
//! client's token, the upstream's counted on from the gateway's.
//!
//! **Tasks (SPEC §22.3 item 1).** A client that declared the `io.modelcontextprotocol/tasks`
//! extension is answered a task the moment its call parks ([`airlock_core::connection::tasks`]):
//! the run is adopted by this connection, so it executes once approved with no request
//! waiting, and `tasks/get` reads where it stands from the store. A poll of an approved task
//! nobody drives (its gateway died) adopts it here; the store's claim executes it once.
//! `tasks/cancel` is a client cancel of the run (§8.5); `tasks/update` is refused (these tasks
//! ask for no input). Every `tasks/*` request is checked against the task's tenant and
//! principal (−32602 for another's, as for an unknown id).
//!
//! **A call without a `progressToken`** that parks, when the client is not asked to approve
//! it, is answered at once (`isError`, naming the approval, its expiry and how to retry,
//! §22.3): its host would otherwise show nothing until its own timeout. The approval stays
//! pending and the identical call sent again binds to the parked run.
//!
//! **Cancellation.** `notifications/cancelled` (or a host's timeout) for a parked call leaves
//! its approval pending (§22.3): the request is detached and the identical call sent again
//! binds to it. For a queued call, or one in flight, it cancels the call's run (§8.5).
//! Nothing is answered (rmcp drops the response of a cancelled request).

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_core::connection::live::Ticket;
use tokio::sync::mpsc;

use airlock_core::canonical::arguments_hash;
use airlock_core::connection::answer::CallAnswer;
use airlock_core::connection::elicit::{ElicitedReply, resolution_of};
use airlock_core::connection::live::{ClientCall, LiveConnection, TicketEnd, TicketStatus};
use airlock_core::connection::read::{OutsideRead, ReadContext, ReadKind, ReadRefusal};
use airlock_core::connection::tasks::Tasks;
use airlock_core::control::ControlService;
use airlock_core::conversation::request_state::{
    RELAY_STATE_SECONDS, Sealed, SealedCall, SealedRelay, StateRefused,
};
use airlock_core::conversation::task::TaskView;
use airlock_core::ids::RunId;
use airlock_core::ids::{ApprovalId, SessionId};
use airlock_core::principal::Principal;
use airlock_core::scope::ScopeSet;
use airlock_core::store::Store;
use airlock_core::store::TxError;
use airlock_core::time::Timestamp;

use crate::body::required_capabilities;
use crate::round::{HELD_INPUT, HeldCall, HeldRequest, Round};
use crate::sealed_state::{MAX_UPSTREAM_STATE_LEN, StateSeal};
use airlock_core::vocab::TrustLevel;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    ClientRequest, CompleteRequestParams, CompleteResult, CreateTaskResult, DetailedTask,
    ElicitRequestParams, ElicitationAction, ErrorCode, GetPromptRequest, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, GetTaskParams, GetTaskResult, InputRequiredResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion, ReadResourceRequest,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ServerCapabilities,
    ServerConfig, ServerResult, SubscribeRequestParams, SubscriptionFilter, TASKS_EXTENSION_ID,
    Task, TaskPayload, TaskStatus, Tool, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{
    ElicitationMode, NotificationContext, RequestContext, RoleServer, SubscriptionContext,
    SubscriptionSendError,
};
use rmcp::{ErrorData as McpError, Peer, ServerHandler};
use serde_json::{Value, json};

use crate::catalog::{exposed_name_of, exposed_uri, route_name, route_uri};
use crate::config::ServerConfig as UpstreamConfig;
use crate::gateway::Gateway;
use crate::relay::ClientLink;
use crate::render;
use crate::upstream::Notice;

/// The JSON-RPC code of a refused read (see the module docs).
pub const READ_REFUSED: ErrorCode = ErrorCode(-32001);

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
    /// The keys of this client's requests in its live connection's mailbox: the server's own,
    /// or shared by every request's server of a sessionless conversation (one per request,
    /// one mailbox), so two requests never share a key.
    next_key: Arc<AtomicU64>,
    /// The session the connection's runs live in (for the read gate's audit fields).
    session: Option<SessionId>,
    /// The exposed URIs this client subscribed to (`resources/subscribe`).
    subscriptions: Arc<Mutex<BTreeSet<String>>>,
    /// Whatever must live exactly as long as this server (an HTTP session's connection, which
    /// closes when the transport drops the server).
    held: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// Set by [`ClientSession::forwarding_list_changed`]: the task that forwards list changes
    /// once the client has initialized.
    forwarder: Option<TaskSlot>,
    /// The task relaying resource and prompt notices ([`relay_notices`]), started when the
    /// client has initialized. Without the slot it would live on after an HTTP session
    /// closed, until an upstream's next notice failed to send.
    notice_relay: TaskSlot,
    /// The session principal's scopes when they are not the file's (an HTTP client's token
    /// narrows them, SPEC §19.6): reads are gated and listed with these.
    scopes: Option<ScopeSet>,
    /// The session principal's approval tasks (SPEC §22.3 item 1); `None`: tasks are not offered.
    tasks: Option<Arc<Tasks<S>>>,
    /// Sealing `requestState`s of `input_required` approvals (SPEC §22.3 item 2), and the
    /// session principal they are bound to.
    states: Option<(Arc<StateSeal<S>>, String)>,
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
            next_key: Arc::new(AtomicU64::new(1)),
            session: None,
            subscriptions: Arc::new(Mutex::new(BTreeSet::new())),
            held: None,
            forwarder: None,
            notice_relay: TaskSlot::default(),
            scopes: None,
            tasks: None,
            states: None,
        }
    }

    /// Offers approval tasks (SPEC §22.3 item 1) to clients that declare the tasks extension,
    /// as `tasks`' principal.
    pub fn with_tasks(mut self, tasks: Tasks<S>) -> ClientSession<S> {
        self.tasks = Some(Arc::new(tasks));
        self
    }

    /// Answers parked calls of 2026-07-28 clients that declared form elicitation with
    /// `input_required` results whose `requestState` `seal` seals for `principal` (SPEC §22.3
    /// item 2), when `approve_via_elicitation` is on.
    pub fn with_states(mut self, seal: StateSeal<S>, principal: &str) -> ClientSession<S> {
        self.states = Some((Arc::new(seal), principal.to_owned()));
        self
    }

    /// Takes request keys from `keys`, shared with the other servers of one live connection.
    pub fn with_request_keys(mut self, keys: Arc<AtomicU64>) -> ClientSession<S> {
        self.next_key = keys;
        self
    }

    /// Names the session of the connection (reads are gated with it).
    pub fn with_session(mut self, session: SessionId) -> ClientSession<S> {
        self.session = Some(session);
        self
    }

    /// Core's read gate (§19.6): scope, then policy. Nothing is stored.
    fn gate(
        &self,
        server: &UpstreamConfig,
        kind: ReadKind,
        arguments: Value,
    ) -> Result<(), McpError> {
        let config = self.gateway.config();
        let config = &*config;
        let read = OutsideRead {
            server_id: server.id.clone(),
            kind,
            required_scope: server.read_scope.clone(),
            arguments: match arguments {
                Value::Object(map) => map,
                _ => serde_json::Map::new(),
            },
        };
        let origin_trust =
            if config.origin_trust == TrustLevel::User && !self.live.conversation_tainted() {
                TrustLevel::User
            } else {
                TrustLevel::ExternalUntrusted
            };
        let scopes = self.principal_scopes();
        let context = ReadContext {
            tenant_id: &config.tenant_id,
            session_id: self.session.map_or(uuid::Uuid::nil(), |s| s.as_uuid()),
            action_id: uuid::Uuid::new_v4(),
            principal_scopes: &scopes,
            origin_trust,
            now: self.gateway.now(),
        };
        read.gate(&context, &self.gateway.ruleset())
            .map(|_| ())
            .map_err(|refusal| {
                tracing::info!(server = %server.id, kind = %kind, reason = %refusal.reason_code, "read refused");
                refused(&refusal)
            })
    }

    /// An upstream answered a read of `server`: its trust reaches the client's runs first.
    fn note_answer(&self, server: &UpstreamConfig) {
        self.live.note_read_content(
            server.output_trust,
            &format!("a read of server {}", server.id),
        );
    }

    /// The session principal's scopes: the file's, or an HTTP token's narrowed by them.
    fn principal_scopes(&self) -> ScopeSet {
        match &self.scopes {
            Some(scopes) => scopes.clone(),
            None => self.gateway.config().scopes.clone(),
        }
    }

    /// Whether the principal may see `server`'s resources and prompts listed.
    fn lists(&self, server: &UpstreamConfig) -> bool {
        self.principal_scopes().contains(&server.read_scope)
    }

    fn timeout(server: &UpstreamConfig) -> Duration {
        Duration::from_secs(u64::from(server.timeout_seconds))
    }

    fn upstream(
        &self,
        server: &UpstreamConfig,
    ) -> Result<Arc<crate::upstream::Upstream>, McpError> {
        self.gateway.upstream(&server.id).ok_or_else(|| {
            McpError::internal_error(format!("upstream '{}' is not connected", server.id), None)
        })
    }

    /// One listing across the upstreams (§19.6): every connected upstream that `offers` it and
    /// whose read scope the principal holds is asked with `list`; each item's `key` is renamed
    /// by `expose` (an item it returns `None` for is not listed); a server whose listing fails is
    /// left out with a warning, so one broken upstream does not hide the others.
    async fn gather<T, F>(
        &self,
        method: &str,
        key: &str,
        offers: impl Fn(&ServerCapabilities) -> bool,
        list: impl Fn(Arc<crate::upstream::Upstream>, Duration) -> F,
        expose: impl Fn(&UpstreamConfig, &str) -> Option<String>,
    ) -> Result<Vec<Value>, McpError>
    where
        T: serde::Serialize,
        F: std::future::Future<Output = Result<Vec<T>, McpError>>,
    {
        let mut items = Vec::new();
        for (server, upstream) in self.gateway.connected() {
            if !offers(&upstream.capabilities()) || !self.lists(&server) {
                continue;
            }
            match list(upstream, Self::timeout(&server)).await {
                Ok(listed) => {
                    for item in listed {
                        if let Some(value) =
                            map_key(to_json(&item)?, key, |name| expose(&server, name))
                        {
                            items.push(value);
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(server = %server.id, error = %error.message, "{method} failed; that server's items are left out");
                }
            }
        }
        Ok(items)
    }

    /// Tells this client of list changes as `notifications/tools/list_changed` once it has
    /// initialized (2025-11-25). For transports whose peer only the handler sees (an HTTP
    /// session); stdio's [`crate::serve`] forwards them itself.
    pub fn forwarding_list_changed(mut self) -> ClientSession<S> {
        self.forwarder = Some(TaskSlot::default());
        self
    }

    /// This client's service with a span around each request (OpenTelemetry, [`crate::telemetry`]).
    pub fn traced(self) -> crate::telemetry::Traced<ClientSession<S>> {
        let version = self.gateway.ruleset().version.as_str().to_owned();
        let session = self.live.id().to_string();
        crate::telemetry::Traced::new(self, version, session)
    }

    /// Keeps `guard` until this server is dropped.
    pub fn holding(mut self, guard: impl std::any::Any + Send + Sync) -> ClientSession<S> {
        self.held = Some(Box::new(guard));
        self
    }

    /// Gates and lists reads with `scopes` instead of the file's (the session principal's).
    pub fn with_scopes(mut self, scopes: ScopeSet) -> ClientSession<S> {
        self.scopes = Some(scopes);
        self
    }

    /// SPEC §22.3 item 1: the parked call `run` of request `key` answered as a task: the task
    /// row, the run adopted (it executes once approved, with no request waiting), the request
    /// detached. `None` when the request was answered meanwhile, or the task could not be
    /// recorded (the caller answers as it would without tasks: the approval stays, and the
    /// identical call sent again binds to it).
    fn answer_as_task(
        &self,
        key: u64,
        run: RunId,
        approval: ApprovalId,
        expires_at: Timestamp,
    ) -> Option<CreateTaskResult> {
        let tasks = self.tasks.as_ref()?;
        let id = match tasks.open(run) {
            Ok(id) => id,
            Err(error) => {
                tracing::warn!(%error, %run, "a parked call's task was not recorded; it is answered without one");
                return None;
            }
        };
        self.live.adopt(run);
        if !self.live.detach(key) {
            return None;
        }
        let now = self.gateway.now();
        let task = Task::new(id, TaskStatus::Working, now.to_string(), now.to_string())
            .with_status_message(self.parked_status(approval, expires_at))
            .with_ttl_ms(self.task_ttl_ms(expires_at, now))
            .with_poll_interval_ms(TASK_POLL_MS);
        Some(CreateTaskResult::new(task))
    }

    /// How a 2026-07-28 request's parked call asks for its approval (SPEC §22.3 item 2): the
    /// yes/no form, when the client declared form elicitation (an `elicitation` capability that
    /// names neither mode counts as form, as in 2025-11-25) and `approve_via_elicitation` is
    /// on; else the approval's console page, when it declared URL elicitation and the file sets
    /// `console_url`; else `None` (not a 2026-07-28 request, or nothing it can be asked with).
    fn approval_input(
        &self,
        context: &RequestContext<RoleServer>,
        approval: ApprovalId,
    ) -> Option<ApprovalInput> {
        let modern = context
            .protocol_version()
            .is_some_and(|version| !version.has_initialize());
        let elicitation = context.client_capabilities()?.elicitation?;
        if !modern {
            return None;
        }
        let form = elicitation.form.is_some() || elicitation.url.is_none();
        if form && self.elicitation.is_some() {
            return Some(ApprovalInput::Form);
        }
        if elicitation.url.is_some() {
            return self.console_page(approval).map(ApprovalInput::Url);
        }
        None
    }

    /// The approval's page in the web console, when the file sets `console_url`.
    fn console_page(&self, approval: ApprovalId) -> Option<String> {
        self.gateway
            .config()
            .console_url
            .as_ref()
            .map(|base| format!("{base}/approvals/{approval}"))
    }

    /// What a parked call's task tells its client: the approval, its expiry, and its console
    /// page when the file sets one.
    fn parked_status(&self, approval: ApprovalId, expires_at: Timestamp) -> String {
        let waiting = render::parked_message(approval, expires_at);
        match self.console_page(approval) {
            Some(page) => format!("{waiting}; a reviewer answers it at {page}"),
            None => waiting,
        }
    }

    /// SPEC §22.3 item 2: the parked call `run` of request `key` answered `input_required`: the
    /// approval's input request (`asked`) and a `requestState` sealed for this principal, the
    /// call (`tool`, arguments hash) and the approval. The request is detached (the approval
    /// stays pending; the retry binds to the parked run). `None` when the request was answered
    /// meanwhile, or when the state could not be sealed (the caller answers as it would
    /// without it).
    fn answer_input_required(
        &self,
        key: u64,
        (run, approval, expires_at): (RunId, ApprovalId, Timestamp),
        asked: ApprovalInput,
        (tool, hash): &(String, String),
    ) -> Option<InputRequiredResult> {
        let (seal, principal) = self.states.as_ref()?;
        let sealed = SealedCall {
            approval_id: approval,
            run_id: run,
            tenant_id: self.gateway.config().tenant_id.clone(),
            principal_id: principal.clone(),
            tool: tool.clone(),
            arguments_hash: hash.clone(),
            expires_at: expires_at.as_micros(),
            answers_form: asked == ApprovalInput::Form,
        };
        let state = match seal.seal(&Sealed::Approval(sealed)) {
            Ok(state) => state,
            Err(error) => {
                tracing::warn!(%error, %run, "a requestState was not sealed; the call is answered without one");
                return None;
            }
        };
        let params = match asked {
            ApprovalInput::Form => {
                let approvals = self.elicitation.as_ref()?;
                let record = approvals
                    .control
                    .get_approval(&approvals.principal, approval)
                    .ok()?;
                let (message, schema) = approval_form(&record);
                json!({"mode": "form", "message": message, "requestedSchema": schema})
            }
            ApprovalInput::Url(page) => json!({
                "mode": "url",
                "message": format!(
                    "airlock: this call needs approval {approval} (expires {expires_at}); a reviewer answers it on this page, then send the call again"
                ),
                "url": page,
                "elicitationId": approval.to_string(),
            }),
        };
        let input: InputRequiredResult = serde_json::from_value(json!({
            "resultType": "input_required",
            "inputRequests": {APPROVAL_INPUT: {"method": "elicitation/create", "params": params}},
            "requestState": state,
        }))
        .ok()?;
        if !self.live.detach(key) {
            return None;
        }
        Some(input)
    }

    /// A retry's `requestState`, opened and checked against the retried `request` (method,
    /// target, arguments hash) and this principal. An approval's (SPEC §22.3 item 2, only on
    /// `tools/call`): its form answer applied to the approval it names; the call then goes on
    /// as any identical call sent again (it binds to the parked run). A relayed round's (SPEC
    /// §23): used up, and the upstream's own state handed back for the retry to carry. A
    /// tampered, foreign, expired, other request's or used state moves nothing: −32602.
    async fn take_state(
        &self,
        state: &str,
        request: (&str, &str, &str),
        responses: Option<&rmcp::model::InputResponses>,
    ) -> Result<Taken, McpError> {
        let refused = |why: StateRefused| McpError::invalid_params(why.to_string(), None);
        let storage = |e: TxError| McpError::internal_error(format!("storage: {e}"), None);
        let Some((seal, principal)) = &self.states else {
            return Err(McpError::invalid_params(
                "this gateway issues no requestState here",
                None,
            ));
        };
        let tenant = &self.gateway.config().tenant_id;
        let (method, target, hash) = request;
        match seal.open(state).map_err(storage)?.map_err(refused)? {
            Sealed::Approval(_) if method != CALL_METHOD => Err(refused(StateRefused::OtherKind)),
            Sealed::Approval(sealed) => {
                seal.check(&sealed, (tenant, principal), (target, hash))
                    .map_err(storage)?
                    .map_err(refused)?;
                if let (true, Some(reply), Some(approvals)) = (
                    sealed.answers_form,
                    responses.and_then(|r| r.get(APPROVAL_INPUT)),
                    &self.elicitation,
                ) {
                    resolve_as_replied(approvals, sealed.approval_id, reply_of(reply)).await;
                }
                Ok(Taken::Approval)
            }
            Sealed::Relay(sealed) => {
                seal.take_relay(&sealed, (tenant, principal), request)
                    .map_err(storage)?
                    .map_err(refused)?;
                Ok(if sealed.held {
                    Taken::Held {
                        state_id: sealed.state_id,
                    }
                } else {
                    Taken::Relay {
                        upstream_state: sealed.upstream_state,
                    }
                })
            }
        }
    }

    /// What a 2026-07-28 request forwards to its upstream: its `inputResponses` (a retry that
    /// answers the upstream's round, or a first request that brings answers unasked, which
    /// the upstream judges) and, from a relayed round's state, the upstream's own state. A
    /// retry that answers an approval carries nothing upstream: its answer was the approval's.
    async fn round_of(
        &self,
        context: &RequestContext<RoleServer>,
        state: Option<&String>,
        request: (&str, &str, &str),
        responses: Option<&rmcp::model::InputResponses>,
    ) -> Result<Retry, McpError> {
        let taken = match state {
            Some(state) => Some(self.take_state(state, request, responses).await?),
            None => None,
        };
        if let Some(Taken::Held { state_id }) = taken {
            return Ok(Retry::Held(state_id));
        }
        if !is_modern(context) {
            return Ok(Retry::Forward(Round::default()));
        }
        Ok(Retry::Forward(match taken {
            Some(Taken::Approval | Taken::Held { .. }) => Round::default(),
            Some(Taken::Relay { upstream_state }) => Round {
                input_responses: responses.cloned(),
                upstream_state,
            },
            None => Round {
                input_responses: responses.cloned(),
                upstream_state: None,
            },
        }))
    }

    /// [`Self::round_of`] for `prompts/get` and `resources/read`, which no upstream request is
    /// held for.
    async fn read_round(
        &self,
        context: &RequestContext<RoleServer>,
        state: Option<&String>,
        request: (&str, &str, &str),
        responses: Option<&rmcp::model::InputResponses>,
    ) -> Result<Round, McpError> {
        match self.round_of(context, state, request, responses).await? {
            Retry::Forward(round) => Ok(round),
            Retry::Held(_) => Err(McpError::invalid_params(
                StateRefused::OtherKind.to_string(),
                None,
            )),
        }
    }

    /// A 2025-11-25 upstream's in-call request for a 2026-07-28 client's call, answered to
    /// the client as an input-required round ([`crate::round`]): the request under
    /// [`HELD_INPUT`], and a state naming it, sealed for `request` and this principal. The call
    /// is held in this process until the retry brings the answer (or its time passes).
    fn hold_round(
        &self,
        asked: HeldRequest,
        (ticket, asks, registration): HeldWait,
        (method, target, hash): (&str, &str, &str),
    ) -> Result<InputRequiredResult, McpError> {
        let unsealed = |why: String| {
            McpError::internal_error(
                format!("the upstream's request was not relayed: {why}"),
                None,
            )
        };
        let Some((seal, principal)) = &self.states else {
            return Err(unsealed(
                "this gateway seals no requestState here".to_owned(),
            ));
        };
        let state_id = seal.fresh_id().map_err(|e| unsealed(e.to_string()))?;
        let now = self.gateway.now();
        let sealed = Sealed::Relay(SealedRelay {
            state_id: state_id.clone(),
            tenant_id: self.gateway.config().tenant_id.clone(),
            principal_id: principal.clone(),
            method: method.to_owned(),
            target: target.to_owned(),
            arguments_hash: hash.to_owned(),
            expires_at: now.as_micros() + RELAY_STATE_SECONDS * 1_000_000,
            upstream_state: None,
            held: true,
        });
        let state = seal.seal(&sealed).map_err(|e| unsealed(e.to_string()))?;
        let input: InputRequiredResult = serde_json::from_value(json!({
            "resultType": "input_required",
            "inputRequests": {HELD_INPUT: asked.request},
            "requestState": state,
        }))
        .map_err(|e| unsealed(e.to_string()))?;
        let for_at_most = Duration::from_secs(RELAY_STATE_SECONDS.unsigned_abs());
        self.gateway.clients().held().hold(
            state_id,
            HeldCall::new(asked, ticket, asks, registration, for_at_most),
        );
        Ok(input)
    }

    /// A retry that answers the held call `state_id` (SPEC §23): the client's answer goes to
    /// the upstream's open request, and the retry waits for the call's answer, or the
    /// upstream's next request (another round). No answer to it in the retry: asked again.
    async fn resume_held(
        &self,
        state_id: &str,
        responses: Option<&rmcp::model::InputResponses>,
        request: (&str, &str, &str),
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(held) = self.gateway.clients().held().take(state_id) else {
            return Err(McpError::invalid_params(
                "requestState names an upstream request this gateway process does not hold: \
                 another gateway process holds it, or its call has ended; send the call again \
                 without it",
                None,
            ));
        };
        let mut asks = held.asks;
        let wait = |asks| (held.ticket.clone(), asks, held.registration);
        let Some(answer) = responses.and_then(|r| r.get(HELD_INPUT)) else {
            let asked = HeldRequest {
                request: held.request,
                answer: held.answer,
            };
            return Ok(CallToolResponse::InputRequired(self.hold_round(
                asked,
                wait(asks),
                request,
            )?));
        };
        // An upstream that stopped waiting (its call ended) hears nothing; the call's answer
        // says what happened.
        let _ = held.answer.send(answer.clone());
        let ended = held.ticket.ended();
        tokio::pin!(ended);
        let asked = tokio::select! {
            end = &mut ended => return self.call_answered(end, request),
            Some(asked) = asks.recv() => asked,
            _ = context.ct.cancelled() => {
                return Err(McpError::internal_error("the call was cancelled", None));
            }
        };
        Ok(CallToolResponse::InputRequired(self.hold_round(
            asked,
            wait(asks),
            request,
        )?))
    }

    /// A call's end as its `tools/call` answer; an executed call's recorded input-required
    /// round (a 2026-07-28 upstream's, [`crate::round`]) is relayed with its state sealed.
    fn call_answered(
        &self,
        end: TicketEnd,
        request: (&str, &str, &str),
    ) -> Result<CallToolResponse, McpError> {
        match end {
            TicketEnd::Answered(CallAnswer::Executed { structured, .. })
                if is_input_required(&structured) =>
            {
                let input: InputRequiredResult =
                    serde_json::from_value(structured).map_err(|e| {
                        McpError::internal_error(format!("unrenderable input round: {e}"), None)
                    })?;
                Ok(CallToolResponse::InputRequired(
                    self.relay_round(input, request)?,
                ))
            }
            TicketEnd::Answered(CallAnswer::Failed {
                reason_code,
                message,
            }) if required_capabilities(&reason_code).is_some() => Err(McpError::new(
                ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                format!(
                    "the upstream needs a client capability this request did not declare: {message}"
                ),
                required_capabilities(&reason_code),
            )),
            TicketEnd::Answered(answer) => {
                let result: CallToolResult = serde_json::from_value(completed(
                    render::call_result(&answer),
                ))
                .map_err(|e| McpError::internal_error(format!("unrenderable result: {e}"), None))?;
                Ok(CallToolResponse::from(result))
            }
            // No answer is sent (rmcp drops it for a cancelled request).
            TicketEnd::Dropped => Err(McpError::internal_error("the call was cancelled", None)),
        }
    }

    /// A 2026-07-28 `prompts/get` or `resources/read` (`request`, bound as `this_request`)
    /// sent once to `server`: the upstream's result, or its input-required round relayed with
    /// its state sealed (`Err`, SPEC §23).
    async fn read_once(
        &self,
        (server, upstream): (&UpstreamConfig, &crate::upstream::Upstream),
        request: ClientRequest,
        context: &RequestContext<RoleServer>,
        this_request: (&str, &str, &str),
    ) -> Result<Result<ServerResult, InputRequiredResult>, McpError> {
        let answer = upstream
            .ask_once(
                this_request.0,
                request,
                Self::timeout(server),
                context.client_capabilities().as_ref(),
                Some(context.meta.log_level()),
            )
            .await;
        self.note_answer(server);
        match answer? {
            ServerResult::InputRequiredResult(input) => {
                upstream.pass_on(context.client_capabilities().as_ref(), &input)?;
                Ok(Err(self.relay_round(input, this_request)?))
            }
            other => Ok(Ok(other)),
        }
    }

    /// An upstream's input-required round, answered to a 2026-07-28 client (SPEC §23): its
    /// input requests as they are, and its `requestState` (if any) sealed inside one of the
    /// gateway's own, bound to `request` (method, target, arguments hash) and this principal.
    fn relay_round(
        &self,
        mut input: InputRequiredResult,
        (method, target, hash): (&str, &str, &str),
    ) -> Result<InputRequiredResult, McpError> {
        let Some(upstream_state) = input.request_state.take() else {
            return Ok(input);
        };
        let unsealed = |why: String| {
            McpError::internal_error(
                format!("the upstream's input round was not relayed: {why}"),
                None,
            )
        };
        if upstream_state.len() > MAX_UPSTREAM_STATE_LEN {
            return Err(unsealed(format!(
                "its requestState is {} bytes, over the gateway's {MAX_UPSTREAM_STATE_LEN}",
                upstream_state.len()
            )));
        }
        let Some((seal, principal)) = &self.states else {
            return Err(unsealed(
                "this gateway seals no requestState here".to_owned(),
            ));
        };
        let now = self.gateway.now();
        let sealed = Sealed::Relay(SealedRelay {
            state_id: seal.fresh_id().map_err(|e| unsealed(e.to_string()))?,
            tenant_id: self.gateway.config().tenant_id.clone(),
            principal_id: principal.clone(),
            method: method.to_owned(),
            target: target.to_owned(),
            arguments_hash: hash.to_owned(),
            expires_at: now.as_micros() + RELAY_STATE_SECONDS * 1_000_000,
            upstream_state: Some(upstream_state),
            held: false,
        });
        input.request_state = Some(seal.seal(&sealed).map_err(|e| unsealed(e.to_string()))?);
        Ok(input)
    }

    /// How long a task is kept for its client (`ttlMs`): until its approval expires, plus the
    /// longest call timeout of the file, so a call approved at the last moment is still polled.
    fn task_ttl_ms(&self, expires_at: Timestamp, now: Timestamp) -> u64 {
        let longest = self
            .gateway
            .config()
            .servers
            .values()
            .map(|server| u64::from(server.timeout_seconds))
            .max()
            .unwrap_or(0);
        let until = u64::try_from(expires_at.as_micros().saturating_sub(now.as_micros()) / 1000)
            .unwrap_or(0);
        until.saturating_add(longest.saturating_mul(1000))
    }

    /// The task `id` as `tasks/get` answers it; a task no process drives that can execute now
    /// is adopted by this connection (SPEC §22.3 item 1: a restart, or another gateway of the
    /// store, executes an approved task exactly once: the store's claim decides which).
    fn task_state(&self, id: &str) -> Result<GetTaskResult, McpError> {
        let tasks = self
            .tasks
            .as_ref()
            .ok_or_else(McpError::method_not_found::<rmcp::model::GetTaskMethod>)?;
        let polled = tasks
            .poll(id)
            .map_err(|e| McpError::internal_error(format!("storage: {e}"), None))?
            .map_err(|refused| McpError::invalid_params(refused.to_string(), None))?;
        if polled.adoptable && !self.live.serves(polled.task.run_id) {
            self.live.adopt(polled.task.run_id);
        }
        let now = self.gateway.now();
        let task = Task::new(
            id.to_owned(),
            TaskStatus::Working,
            polled.task.created_at.to_string(),
            now.to_string(),
        )
        .with_poll_interval_ms(TASK_POLL_MS);
        let (task, payload) = match polled.view {
            TaskView::Waiting { approval } => {
                let message = if approval.status == airlock_core::vocab::ApprovalStatus::Approved {
                    format!("approval {} was approved; the call runs now", approval.id)
                } else {
                    self.parked_status(approval.id, approval.expires_at)
                };
                (task.with_status_message(message), TaskPayload::Working)
            }
            TaskView::Working => (
                task.with_status_message("the call runs now"),
                TaskPayload::Working,
            ),
            TaskView::Answered(answer) => {
                let Value::Object(result) = completed(render::call_result(&answer)) else {
                    return Err(McpError::internal_error("unrenderable result", None));
                };
                (task, TaskPayload::Completed { result })
            }
            TaskView::Cancelled => (task, TaskPayload::Cancelled),
        };
        Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
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

/// The answer to a refused read (see the module docs).
fn refused(refusal: &ReadRefusal) -> McpError {
    McpError::new(
        READ_REFUSED,
        format!(
            "airlock denied this read ({}): {}",
            refusal.reason_code, refusal.explanation
        ),
        Some(json!({"reason_code": refusal.reason_code})),
    )
}

/// `value` with `key` replaced by `f` of its string value.
fn map_key(mut value: Value, key: &str, f: impl Fn(&str) -> Option<String>) -> Option<Value> {
    let mapped = f(value.get(key)?.as_str()?)?;
    value
        .as_object_mut()?
        .insert(key.to_owned(), Value::String(mapped));
    Some(value)
}

/// How long a listing may be treated as fresh (2026-07-28 `ttlMs`), and by whom (`cacheScope`
/// `private`: what is listed depends on the principal's scopes, so no shared cache may serve it
/// to another). A minute: list changes also reach a client as notifications (2025-11-25) or on
/// its `subscriptions/listen` stream (2026-07-28), and a tool unlisted since a client's cached
/// listing is refused when called (fail closed), never run.
pub const LIST_TTL_MS: u64 = 60_000;

/// How a parked call of a 2026-07-28 client is asked about (SPEC §22.3 item 2).
#[derive(Debug, Clone, PartialEq, Eq)]
enum ApprovalInput {
    /// The yes/no form (`approve_via_elicitation`).
    Form,
    /// URL mode: the approval's console page.
    Url(String),
}

/// The key of the approval form among an `input_required` result's input requests.
pub const APPROVAL_INPUT: &str = "approval";

/// The method a sealed approval state answers.
const CALL_METHOD: &str = "tools/call";

/// What a retry's `requestState` was sealed for.
enum Taken {
    /// A parked call's approval (SPEC §22.3 item 2).
    Approval,
    /// An upstream's relayed round (SPEC §23), and the upstream's own state inside it.
    Relay { upstream_state: Option<String> },
    /// A 2025-11-25 upstream's in-call request held open by the process that sealed it.
    Held { state_id: String },
}

/// What a held call waits with: its ticket, the upstream's next requests, its registration.
type HeldWait = (
    Ticket,
    mpsc::UnboundedReceiver<HeldRequest>,
    Box<dyn std::any::Any + Send>,
);

/// What a 2026-07-28 retry does with its upstream.
enum Retry {
    /// Forwards the request with the round's answers.
    Forward(Round),
    /// Answers the upstream request the state names, held open in this process.
    Held(String),
}

/// Whether the request speaks 2026-07-28 (no `initialize`).
fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| !version.has_initialize())
}

/// How often a task's client is asked to poll (`pollIntervalMs`).
pub const TASK_POLL_MS: u64 = 2_000;

/// An upstream answer as a 2026-07-28 client needs it: a 2025-11-25 upstream sends no
/// `resultType`, and rmcp strips it again for a 2025-11-25 client.
fn completed(mut answer: Value) -> Value {
    if let Some(map) = answer.as_object_mut() {
        map.entry("resultType")
            .or_insert_with(|| Value::String("complete".into()));
    }
    answer
}

/// Whether an executed call's recorded answer is an upstream's input-required round (only ever
/// recorded for a 2026-07-28 client's call, [`crate::round`]).
fn is_input_required(structured: &Value) -> bool {
    structured.get("resultType").and_then(Value::as_str) == Some("input_required")
}

/// An upstream's answer of another kind than its request's.
fn not_an_answer_to(method: &str) -> McpError {
    McpError::internal_error(
        format!("the upstream answered {method} with a result of another kind"),
        None,
    )
}

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, McpError> {
    serde_json::from_value(value)
        .map_err(|e| McpError::internal_error(format!("unrenderable answer: {e}"), None))
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Value, McpError> {
    serde_json::to_value(value)
        .map_err(|e| McpError::internal_error(format!("unreadable request: {e}"), None))
}

/// Relays the upstreams' resource and prompt notices to one client until it goes: list
/// changes always, `resources/updated` only for a URI it subscribed to.
async fn relay_notices(
    gateway: Arc<Gateway>,
    subscriptions: Arc<Mutex<BTreeSet<String>>>,
    peer: Peer<RoleServer>,
) {
    let mut notices = gateway.subscribe_notices();
    loop {
        let notice = match notices.recv().await {
            Ok(notice) => notice,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let sent = match notice {
            Notice::ResourceUpdated { server, uri } => {
                let file = gateway.config();
                let Some(config) = file.servers.get(&server) else {
                    continue;
                };
                let exposed = exposed_uri(config, &uri);
                let subscribed = subscriptions
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains(&exposed);
                if !subscribed {
                    continue;
                }
                peer.notify_resource_updated(rmcp::model::ResourceUpdatedNotificationParam::new(
                    exposed,
                ))
                .await
            }
            Notice::ResourcesListChanged { .. } => peer.notify_resource_list_changed().await,
            Notice::PromptsListChanged { .. } => peer.notify_prompt_list_changed().await,
        };
        if sent.is_err() {
            return;
        }
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
    let (message, schema) = approval_form(&record);
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
    resolve_as_replied(&approvals, approval, reply).await;
}

/// What an elicited reply resolves (core's rule, §19.4), applied as the session's principal.
async fn resolve_as_replied<S: Store + 'static>(
    approvals: &ElicitedApprovals<S>,
    approval: ApprovalId,
    reply: ElicitedReply,
) {
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

/// The reply to the approval form carried in a 2026-07-28 retry's `inputResponses` (an
/// `ElicitResult` as JSON): accept with `approve`, decline, or anything else as a cancel.
fn reply_of(response: &Value) -> ElicitedReply {
    match response.get("action").and_then(Value::as_str) {
        Some("accept") => ElicitedReply::Accepted {
            approve: response
                .pointer("/content/approve")
                .and_then(Value::as_bool),
        },
        Some("decline") => ElicitedReply::Declined,
        _ => ElicitedReply::Cancelled,
    }
}

/// The approval form's text and schema (§19.4), for `elicitation/create` and for an
/// `input_required` result's input request alike.
fn approval_form(record: &airlock_core::approval::Approval) -> (String, Value) {
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
    (message, schema)
}

/// A task that lives exactly as long as its client's server: aborted when another takes its
/// place (a second `initialized` notification) or when the slot is dropped with the server.
#[derive(Default)]
struct TaskSlot(std::sync::Mutex<Option<tokio::task::AbortHandle>>);

impl TaskSlot {
    fn set(&self, task: tokio::task::AbortHandle) {
        let previous = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(task);
        if let Some(previous) = previous {
            previous.abort();
        }
    }
}

impl Drop for TaskSlot {
    fn drop(&mut self) {
        if let Some(task) = self.0.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }
}

impl<S: Store + 'static> ServerHandler for ClientSession<S> {
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // Resource and prompt notices of the upstreams reach every initialized client (§19.6).
        let relay = tokio::spawn(relay_notices(
            Arc::clone(&self.gateway),
            Arc::clone(&self.subscriptions),
            context.peer.clone(),
        ));
        self.notice_relay.set(relay.abort_handle());
        let Some(slot) = &self.forwarder else {
            return;
        };
        // An HTTP session's peer is known only here: in-call traffic of its runs is relayed
        // to it from now on (stdio's serve_connection attaches its own peer).
        if let Some(session) = self.session {
            self.gateway
                .clients()
                .attach(session, self.live.id(), Some(context.peer.clone()));
        }
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
        slot.set(task.abort_handle());
    }

    fn get_info(&self) -> ServerConfig {
        // Declared only for what some connected upstream offers (§19.6).
        let mut capabilities = json!({"tools": {"listChanged": true}});
        for (_, upstream) in self.gateway.connected() {
            let offered = upstream.capabilities();
            if let Some(resources) = &offered.resources {
                let entry = &mut capabilities["resources"];
                if entry.is_null() {
                    *entry = json!({});
                }
                if resources.subscribe == Some(true) {
                    entry["subscribe"] = json!(true);
                }
                if resources.list_changed == Some(true) {
                    entry["listChanged"] = json!(true);
                }
            }
            if let Some(prompts) = &offered.prompts {
                let entry = &mut capabilities["prompts"];
                if entry.is_null() {
                    *entry = json!({});
                }
                if prompts.list_changed == Some(true) {
                    entry["listChanged"] = json!(true);
                }
            }
            if offered.completions.is_some() {
                capabilities["completions"] = json!({});
            }
            if offered.logging.is_some() {
                capabilities["logging"] = json!({});
            }
        }
        if self.tasks.is_some() {
            capabilities["extensions"] = json!({TASKS_EXTENSION_ID: {}});
        }
        let capabilities: ServerCapabilities =
            serde_json::from_value(capabilities).unwrap_or_else(|_| {
                ServerCapabilities::builder()
                    .enable_tools()
                    .enable_tool_list_changed()
                    .build()
            });
        let mut info = ServerConfig::new(capabilities);
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
            .listed(&self.principal_scopes())
            .into_iter()
            .filter_map(|tool| serde_json::from_value(tool).ok())
            .collect();
        Ok(ListToolsResult::with_all_items(tools)
            .with_ttl_ms(LIST_TTL_MS)
            .with_cache_scope(CacheScope::Private))
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
        let sealed_for = (internal.clone(), arguments_hash(&arguments));
        let this_request = (CALL_METHOD, sealed_for.0.as_str(), sealed_for.1.as_str());
        let round = match self
            .round_of(
                &context,
                request.request_state.as_ref(),
                this_request,
                request.input_responses.as_ref(),
            )
            .await?
        {
            Retry::Forward(round) => round,
            Retry::Held(state_id) => {
                return self
                    .resume_held(
                        &state_id,
                        request.input_responses.as_ref(),
                        this_request,
                        &context,
                    )
                    .await;
            }
        };
        let (held_to, mut held) = mpsc::unbounded_channel();
        let modern = is_modern(&context);
        let key = self.next_key.fetch_add(1, Ordering::SeqCst);
        let progress_token = context.meta.get_progress_token();
        let parked_progress = Arc::new(AtomicU32::new(0));
        // Registered as it is submitted, so the body serving it finds its client.
        let (ticket, relays) = self.gateway.clients().register(
            self.live.id(),
            key,
            || {
                self.live.submit(
                    key,
                    ClientCall {
                        tool: internal,
                        arguments,
                    },
                )
            },
            |ticket| {
                let link = ClientLink::new(&context, ticket, Arc::clone(&parked_progress))
                    .with_round(round.clone());
                if modern {
                    link.with_held(held_to)
                } else {
                    link
                }
            },
        );
        let mut last_progress: Option<tokio::time::Instant> = None;
        let mut elicited = false;
        let can_elicit = self.can_elicit(&context);
        let declares_tasks = self.tasks.is_some()
            && context
                .client_capabilities()
                .is_some_and(|capabilities| capabilities.supports_tasks());
        let mut task_tried = false;
        // Telemetry: the approval wait's span, from the first look that saw the call parked.
        let mut waiting: Option<crate::telemetry::ApprovalWait> = None;
        let ended = ticket.ended();
        tokio::pin!(ended);
        let asked = loop {
            tokio::select! {
                end = &mut ended => {
                    // The taint read with the answer; a store read only for an end decided
                    // without one.
                    let tainted = ticket
                        .conversation_tainted_at_end()
                        .unwrap_or_else(|| self.live.conversation_tainted());
                    crate::telemetry::record_call_end(&end, waiting.as_ref(), tainted);
                    drop(waiting);
                    return self.call_answered(end, this_request);
                }
                Some(asked) = held.recv() => break asked,
                _ = context.ct.cancelled() => {
                    self.live.cancel(key);
                    return Err(McpError::internal_error("the call was cancelled", None));
                }
                _ = tokio::time::sleep(LOOK_EVERY) => {
                    let TicketStatus::Parked { run, approval_id, expires_at } = ticket.status() else {
                        continue;
                    };
                    if waiting.is_none() {
                        waiting = Some(crate::telemetry::ApprovalWait::begin(approval_id));
                    }
                    // Whatever answers the request before the approval does (a task, an
                    // input round, "approval needed") leaves it waiting.
                    crate::telemetry::record_parked(approval_id);
                    // One try: a call bound to a parked twin that is already a task (its host
                    // sent it again) cannot be a second task of that run; it waits as without.
                    if declares_tasks && !task_tried {
                        task_tried = true;
                        if let Some(task) = self.answer_as_task(key, run, approval_id, expires_at) {
                            return Ok(CallToolResponse::Task(task));
                        }
                    }
                    if !declares_tasks
                        && let Some(asked) = self.approval_input(&context, approval_id)
                        && let Some(input) = self.answer_input_required(key, (run, approval_id, expires_at), asked, &sealed_for)
                    {
                        return Ok(CallToolResponse::InputRequired(input));
                    }
                    let asks = can_elicit && self.elicitation.is_some();
                    // §22.3: answered at once; the approval stays pending for a retry. Only
                    // if the request was still waiting (it may have just been answered).
                    if progress_token.is_none() && !asks && self.live.detach(key) {
                        let result: CallToolResult = serde_json::from_value(completed(render::approval_needed_result(approval_id, expires_at)))
                            .map_err(|e| McpError::internal_error(format!("unrenderable result: {e}"), None))?;
                        return Ok(CallToolResponse::from(result));
                    }
                    if can_elicit && !elicited && let Some(approvals) = &self.elicitation {
                        elicited = true;
                        tokio::spawn(elicit(Arc::clone(approvals), context.peer.clone(), approval_id));
                    }
                    let due = last_progress.is_none_or(|at| at.elapsed() >= PROGRESS_EVERY);
                    if let (Some(token), true) = (&progress_token, due) {
                        let progress = parked_progress.fetch_add(1, Ordering::SeqCst) + 1;
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
        };
        let input = self.hold_round(asked, (ticket, held, Box::new(relays)), this_request)?;
        Ok(CallToolResponse::InputRequired(input))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.task_state(&request.task_id)
    }

    /// A client cancel of the task's call (SPEC §8.5): recorded in the store; a call in flight
    /// stops at its next observation point.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let tasks = self
            .tasks
            .as_ref()
            .ok_or_else(McpError::method_not_found::<rmcp::model::CancelTaskMethod>)?;
        tasks
            .cancel(&request.task_id)
            .map_err(|e| McpError::internal_error(format!("storage: {e}"), None))?
            .map_err(|refused| McpError::invalid_params(refused.to_string(), None))?;
        Ok(())
    }

    /// airlock's tasks never ask for input (an approval comes from a reviewer, or from the
    /// form of a 2025-11-25 elicitation): every update is refused, after the task is checked
    /// to be the caller's.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.task_state(&request.task_id)?;
        Err(McpError::invalid_params(
            format!(
                "task {} asks for no input",
                request.task_id.chars().take(64).collect::<String>()
            ),
            None,
        ))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let resources = self
            .gather(
                "resources/list",
                "uri",
                |offered| offered.resources.is_some(),
                |upstream, timeout| async move { upstream.list_resources(timeout).await },
                |server, uri| Some(exposed_uri(server, uri)),
            )
            .await?;
        from_json(
            json!({"resources": resources, "resultType": "complete", "ttlMs": LIST_TTL_MS, "cacheScope": "private"}),
        )
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let templates = self
            .gather(
                "resources/templates/list",
                "uriTemplate",
                |offered| offered.resources.is_some(),
                |upstream, timeout| async move { upstream.list_resource_templates(timeout).await },
                |server, uri| Some(exposed_uri(server, uri)),
            )
            .await?;
        from_json(
            json!({"resourceTemplates": templates, "resultType": "complete", "ttlMs": LIST_TTL_MS, "cacheScope": "private"}),
        )
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let config = self.gateway.config();
        let config = &*config;
        let Some((server, uri)) = route_uri(config, &request.uri) else {
            return Err(McpError::new(
                ErrorCode::RESOURCE_NOT_FOUND,
                format!("unknown resource: {}", request.uri),
                None,
            ));
        };
        self.gate(server, ReadKind::Resource, json!({"uri": uri}))?;
        let upstream = self.upstream(server)?;
        let timeout = Self::timeout(server);
        let answer = if is_modern(&context) {
            let hash = arguments_hash(&json!({}));
            let this_request = ("resources/read", request.uri.as_str(), hash.as_str());
            let round = self
                .read_round(
                    &context,
                    request.request_state.as_ref(),
                    this_request,
                    request.input_responses.as_ref(),
                )
                .await?;
            let mut forwarded = ReadResourceRequestParams::new(uri.clone());
            forwarded.input_responses = round.input_responses;
            forwarded.request_state = round.upstream_state;
            let request = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(forwarded));
            match self
                .read_once((server, &upstream), request, &context, this_request)
                .await?
            {
                Ok(ServerResult::ReadResourceResult(result)) => result,
                Ok(_) => return Err(not_an_answer_to("resources/read")),
                Err(round) => return Ok(ReadResourceResponse::InputRequired(round)),
            }
        } else {
            let answer = upstream.read_resource(&uri, timeout).await;
            self.note_answer(server);
            answer?
        };
        let mut result = to_json(&answer)?;
        if let Some(contents) = result.get_mut("contents").and_then(Value::as_array_mut) {
            for content in contents.iter_mut() {
                if let Some(mapped) =
                    map_key(content.clone(), "uri", |u| Some(exposed_uri(server, u)))
                {
                    *content = mapped;
                }
            }
        }
        let result: ReadResourceResult = from_json(completed(result))?;
        Ok(ReadResourceResponse::from(result))
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let config = self.gateway.config();
        let config = &*config;
        let Some((server, uri)) = route_uri(config, &request.uri) else {
            return Err(McpError::new(
                ErrorCode::RESOURCE_NOT_FOUND,
                format!("unknown resource: {}", request.uri),
                None,
            ));
        };
        self.gate(server, ReadKind::Resource, json!({"uri": uri}))?;
        self.upstream(server)?
            .subscribe(&uri, Self::timeout(server))
            .await?;
        self.subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(request.uri);
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&request.uri);
        let config = self.gateway.config();
        let config = &*config;
        let Some((server, uri)) = route_uri(config, &request.uri) else {
            return Ok(());
        };
        self.upstream(server)?
            .unsubscribe(&uri, Self::timeout(server))
            .await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        // A name that does not fit is not listed.
        let prompts = self
            .gather(
                "prompts/list",
                "name",
                |offered| offered.prompts.is_some(),
                |upstream, timeout| async move { upstream.list_prompts(timeout).await },
                exposed_name_of,
            )
            .await?;
        from_json(
            json!({"prompts": prompts, "resultType": "complete", "ttlMs": LIST_TTL_MS, "cacheScope": "private"}),
        )
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let config = self.gateway.config();
        let config = &*config;
        let Some((server, name)) = route_name(config, &request.name) else {
            return Err(McpError::invalid_params(
                format!("unknown prompt: {}", request.name),
                None,
            ));
        };
        let arguments = request.arguments.clone().unwrap_or_default();
        let arguments_json = json!({"name": name, "arguments": arguments});
        self.gate(server, ReadKind::Prompt, arguments_json.clone())?;
        let upstream = self.upstream(server)?;
        let timeout = Self::timeout(server);
        let exposed = request.name.clone();
        let hash = arguments_hash(&arguments_json);
        let this_request = ("prompts/get", exposed.as_str(), hash.as_str());
        let round = self
            .read_round(
                &context,
                request.request_state.as_ref(),
                this_request,
                request.input_responses.as_ref(),
            )
            .await?;
        let mut forwarded = request;
        forwarded.name = name;
        forwarded.meta = None;
        forwarded.input_responses = round.input_responses;
        forwarded.request_state = round.upstream_state;
        let answer = if is_modern(&context) {
            let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(forwarded));
            match self
                .read_once((server, &upstream), request, &context, this_request)
                .await?
            {
                Ok(ServerResult::GetPromptResult(result)) => result,
                Ok(_) => return Err(not_an_answer_to("prompts/get")),
                Err(round) => return Ok(GetPromptResponse::InputRequired(round)),
            }
        } else {
            let answer = upstream.get_prompt(forwarded, timeout).await;
            self.note_answer(server);
            answer?
        };
        let result: GetPromptResult = from_json(completed(to_json(&answer)?))?;
        Ok(GetPromptResponse::from(result))
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let config = self.gateway.config();
        let config = &*config;
        let mut params = to_json(&request)?;
        let reference = params.get("ref").cloned().unwrap_or(Value::Null);
        let (server, kind, key, upstream_name) = match reference.get("type").and_then(Value::as_str)
        {
            Some("ref/prompt") => {
                let exposed = reference
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let (server, name) = route_name(config, exposed).ok_or_else(|| {
                    McpError::invalid_params(format!("unknown prompt: {exposed}"), None)
                })?;
                (server, ReadKind::Prompt, "name", name)
            }
            Some("ref/resource") => {
                let exposed = reference
                    .get("uri")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let (server, uri) = route_uri(config, exposed).ok_or_else(|| {
                    McpError::new(
                        ErrorCode::RESOURCE_NOT_FOUND,
                        format!("unknown resource: {exposed}"),
                        None,
                    )
                })?;
                (server, ReadKind::Resource, "uri", uri)
            }
            _ => {
                return Err(McpError::invalid_params(
                    "unknown completion reference",
                    None,
                ));
            }
        };
        params["ref"][key] = Value::String(upstream_name.clone());
        if let Some(map) = params.as_object_mut() {
            map.remove("_meta");
        }
        self.gate(
            server,
            kind,
            json!({key: upstream_name, "argument": params.get("argument").cloned().unwrap_or(Value::Null)}),
        )?;
        let forwarded: CompleteRequestParams = from_json(params)?;
        let upstream = self.upstream(server)?;
        let answer = upstream.complete(forwarded, Self::timeout(server)).await;
        self.note_answer(server);
        from_json(completed(to_json(&answer?)?))
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        // The upstreams are shared: they send at the least severe level any client asked for,
        // and what each client hears outside its calls is filtered by its own (relay.rs).
        if let Some(session) = self.session {
            self.gateway.clients().set_level(session, request.level);
        }
        let mut reached = 0usize;
        let mut last_error = None;
        for (server, upstream) in self.gateway.connected() {
            if upstream.capabilities().logging.is_none() {
                continue;
            }
            let mut request = request.clone();
            if let Some(level) = self.gateway.clients().least_severe_level() {
                request.level = level;
            }
            match upstream.set_level(request, Self::timeout(&server)).await {
                Ok(()) => reached += 1,
                Err(error) => {
                    tracing::warn!(server = %server.id, error = %error.message, "logging/setLevel failed upstream");
                    last_error = Some(error);
                }
            }
        }
        match (reached, last_error) {
            (0, Some(error)) => Err(error),
            (0, None) => Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                "no upstream offers logging",
                None,
            )),
            _ => Ok(()),
        }
    }

    /// A 2026-07-28 client's `subscriptions/listen`: tool, resource and prompt list changes,
    /// and updates of the resource URIs that pass the read gate (a URI that does not is left
    /// out of the accepted filter).
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        let mut any = false;
        for (asked, granted) in [
            (
                requested.tools_list_changed,
                &mut accepted.tools_list_changed,
            ),
            (
                requested.resources_list_changed,
                &mut accepted.resources_list_changed,
            ),
            (
                requested.prompts_list_changed,
                &mut accepted.prompts_list_changed,
            ),
        ] {
            if asked == Some(true) {
                *granted = Some(true);
                any = true;
            }
        }
        let config = self.gateway.config();
        let config = &*config;
        let uris: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|exposed| {
                route_uri(config, exposed).is_some_and(|(server, uri)| {
                    self.gate(server, ReadKind::Resource, json!({"uri": uri}))
                        .is_ok()
                })
            })
            .cloned()
            .collect();
        if !uris.is_empty() {
            accepted.resource_subscriptions = Some(uris);
            any = true;
        }
        any.then_some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        // Upstream subscriptions for the accepted URIs (a 2025-11-25 upstream's
        // `resources/subscribe`); one that fails is logged and simply never updates.
        let config = self.gateway.config();
        let config = &*config;
        for exposed in context.accepted().resource_subscriptions.iter().flatten() {
            if let Some((server, uri)) = route_uri(config, exposed)
                && let Some(upstream) = self.gateway.upstream(&server.id)
                && let Err(error) = upstream.subscribe(&uri, Self::timeout(server)).await
            {
                tracing::warn!(server = %server.id, error = %error.message, "resources/subscribe failed upstream");
            }
        }
        let mut changes = self.gateway.subscribe_list_changed();
        let mut notices = self.gateway.subscribe_notices();
        loop {
            let sent = tokio::select! {
                _ = context.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    Ok(()) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        context.sink().notify_tool_list_changed().await
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
                },
                notice = notices.recv() => match notice {
                    Ok(Notice::ResourceUpdated { server, uri }) => {
                        let Some(server) = config.servers.get(&server) else { continue };
                        context.sink().notify_resource_updated(exposed_uri(server, &uri)).await
                    }
                    Ok(Notice::ResourcesListChanged { .. }) => {
                        context.sink().notify_resource_list_changed().await
                    }
                    Ok(Notice::PromptsListChanged { .. }) => {
                        context.sink().notify_prompt_list_changed().await
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
                },
            };
            match sent {
                Ok(()) => {}
                // Not in this stream's accepted filter: nothing to tell this client.
                Err(SubscriptionSendError::NotificationNotAccepted(_)) => {}
                Err(_) => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::TaskSlot;

    /// A task that never ends on its own.
    fn endless() -> tokio::task::JoinHandle<()> {
        tokio::spawn(std::future::pending::<()>())
    }

    /// Whether `task` ends cancelled within a second (a planted bug fails, not hangs).
    async fn cancelled(task: tokio::task::JoinHandle<()>) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(1), task).await,
            Ok(Err(e)) if e.is_cancelled()
        )
    }

    #[tokio::test]
    async fn a_slot_aborts_its_task_when_replaced_and_when_dropped() {
        let slot = TaskSlot::default();
        let first = endless();
        slot.set(first.abort_handle());
        let second = endless();
        slot.set(second.abort_handle());
        assert!(
            cancelled(first).await,
            "a second `initialized` aborts the first task"
        );
        assert!(!second.is_finished(), "the task in the slot runs on");
        drop(slot);
        assert!(
            cancelled(second).await,
            "dropping the slot (with its server) aborts its task"
        );
    }
}
