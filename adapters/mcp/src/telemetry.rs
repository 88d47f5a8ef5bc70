//! The gateway's traces in the OpenTelemetry MCP semantic conventions (issue 31): one server
//! span per MCP request a client sends, named `{mcp.method.name} {target}`, with the
//! conventions' attributes and airlock's own (`airlock.*`); an `approval wait` child span while
//! a call is parked; a client span for the call sent upstream, whose W3C trace context goes in
//! the request's `params._meta` (`traceparent`, `tracestate`); and a `traceparent` in a client's
//! `_meta` continues the client's trace.
//!
//! The spans are `tracing` spans whose fields carry the attribute names; the binary decides
//! whether they leave the process (an OTLP exporter when `OTEL_EXPORTER_OTLP_ENDPOINT` is set).
//! Without it every call here is as cheap as a disabled `tracing` span.
//!
//! **Arguments and results** are not recorded unless the operator opts in
//! ([`ContentExport::Redacted`], `AIRLOCK_OTEL_TOOL_CONTENT=redacted`): then a `tools/call` span
//! carries `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result` (the GenAI conventions'
//! opt-in attributes), each redacted as the approval view redacts arguments (credential-named
//! keys and credential-shaped strings replaced, long strings and collections cut) and bounded
//! to [`MAX_CONTENT_CHARS`] characters.
//!
//! Choices where the conventions leave room: `mcp.session.id` is the client's conversation, its
//! connection row in the store (a 2026-07-28 conversation is joined by every process serving
//! it, under one id); `airlock.policy.decision` is the gate's verdict (`allow`, `deny`,
//! `require_approval`), whatever a reviewer said afterwards (that is
//! `airlock.invocation.status`).

use std::time::Instant;

use airlock_core::connection::answer::CallAnswer;
use airlock_core::connection::live::TicketEnd;
use airlock_core::ids::ApprovalId;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use std::borrow::Cow;

use rmcp::ErrorData as McpError;
use rmcp::ServerHandler;
#[allow(deprecated)]
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CancelledNotificationParam,
    CompleteRequestParams, CompleteResult, DiscoverResult, GetPromptRequestParams,
    GetPromptResponse, GetTaskParams, GetTaskResult, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ServerConfig, SetLevelRequestParams, SubscribeRequestParams,
    SubscriptionFilter, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, SubscriptionContext};
use tracing::field::Empty;
use tracing::{Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The gateway's metrics, from the global meter provider (a no-op unless the binary installed
/// an exporter before the first request):
/// - `mcp.server.operation.duration` (s): each request, by `mcp.method.name` and `error.type`;
/// - `airlock.calls` : each answered `tools/call`, by `airlock.policy.decision` and
///   `airlock.invocation.status` (UNCERTAIN included);
/// - `airlock.approval.wait_time` (s): how long each parked call waited for its answer;
/// - `airlock.calls.parked`: calls this process holds parked now (an up-down counter);
/// - and, from the store ([`observe_store`]), `airlock.approvals.open` and
///   `airlock.invocations.uncertain`.
struct Instruments {
    duration: opentelemetry::metrics::Histogram<f64>,
    calls: opentelemetry::metrics::Counter<u64>,
    approval_wait: opentelemetry::metrics::Histogram<f64>,
    pending: opentelemetry::metrics::UpDownCounter<i64>,
}

fn instruments() -> &'static Instruments {
    static INSTRUMENTS: std::sync::OnceLock<Instruments> = std::sync::OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = opentelemetry::global::meter("airlock");
        Instruments {
            duration: meter
                .f64_histogram("mcp.server.operation.duration")
                .with_unit("s")
                .with_description("How long the gateway took to answer an MCP request")
                .build(),
            calls: meter
                .u64_counter("airlock.calls")
                .with_description("Answered tools/call requests, by decision and outcome")
                .build(),
            approval_wait: meter
                .f64_histogram("airlock.approval.wait_time")
                .with_unit("s")
                .with_description("How long a parked call waited for its approval")
                .build(),
            pending: meter
                .i64_up_down_counter("airlock.calls.parked")
                .with_description("Calls this gateway process holds parked for an approval")
                .build(),
        }
    })
}

/// Whether the binary installed an exporter ([`set_exporting`]): the store gauges' reads run
/// only then.
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Called by the binary once it exports: the gateway then also reads the store's totals for
/// the gauges ([`observe_store`]).
pub fn set_exporting() {
    EXPORTING.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The tenant's open work as the store last showed it, for the gauges `airlock.approvals.open`
/// (pending approvals, counted up to [`MAX_COUNTED`]) and `airlock.invocations.uncertain` (open
/// UNCERTAIN invocations, those without a settlement). The gauges' callbacks only read these:
/// the SDK calls them on its own thread, where no store read belongs.
struct StoreTotals {
    pending: std::sync::atomic::AtomicU64,
    uncertain: std::sync::atomic::AtomicU64,
}

/// The most pending approvals counted in one read.
pub const MAX_COUNTED: usize = 10_000;

/// How often the gateway reads the totals.
pub const STORE_TOTALS_EVERY: std::time::Duration = std::time::Duration::from_secs(15);

fn store_totals() -> &'static StoreTotals {
    static TOTALS: std::sync::OnceLock<StoreTotals> = std::sync::OnceLock::new();
    TOTALS.get_or_init(|| {
        let meter = opentelemetry::global::meter("airlock");
        let _pending = meter
            .u64_observable_gauge("airlock.approvals.open")
            .with_description("Pending approvals of the gateway's tenant, as the store holds them")
            .with_callback(|observer| {
                observer.observe(
                    store_totals()
                        .pending
                        .load(std::sync::atomic::Ordering::Relaxed),
                    &[],
                );
            })
            .build();
        let _uncertain = meter
            .u64_observable_gauge("airlock.invocations.uncertain")
            .with_description("UNCERTAIN invocations of the gateway's tenant not settled yet")
            .with_callback(|observer| {
                observer.observe(
                    store_totals()
                        .uncertain
                        .load(std::sync::atomic::Ordering::Relaxed),
                    &[],
                );
            })
            .build();
        StoreTotals {
            pending: std::sync::atomic::AtomicU64::new(0),
            uncertain: std::sync::atomic::AtomicU64::new(0),
        }
    })
}

/// Every [`STORE_TOTALS_EVERY`], while the binary exports: reads `tenant`'s pending approvals
/// and open UNCERTAIN invocations for the gauges. A failed read keeps the last values.
pub async fn observe_store<S: airlock_core::store::Store + 'static>(
    env: airlock_core::env::Env<S>,
    tenant: String,
) {
    if !EXPORTING.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let totals = store_totals();
    loop {
        let read = env.read(|tx| {
            let pending = tx
                .pending_approvals(&tenant, None, None, MAX_COUNTED)?
                .len();
            let uncertain = tx.uncertain_invocations(&tenant, false)?.len();
            Ok((pending, uncertain))
        });
        match read {
            Ok((pending, uncertain)) => {
                totals
                    .pending
                    .store(pending as u64, std::sync::atomic::Ordering::Relaxed);
                totals
                    .uncertain
                    .store(uncertain as u64, std::sync::atomic::Ordering::Relaxed);
            }
            Err(error) => tracing::warn!(%error, "the store's totals for the gauges were not read"),
        }
        tokio::time::sleep(STORE_TOTALS_EVERY).await;
    }
}

/// The span of one request of `method` (on `target`: a tool or prompt name), its attributes
/// declared (filled in as they become known), continuing the client's trace if it sent one.
pub fn request_span(
    method: &str,
    target: Option<&str>,
    context: &RequestContext<RoleServer>,
) -> Span {
    let name = match target {
        Some(target) => format!("{method} {}", bounded(target)),
        None => method.to_owned(),
    };
    let span = tracing::info_span!(
        "mcp.server.request",
        "otel.name" = %name,
        "otel.kind" = "server",
        "otel.status_code" = Empty,
        "mcp.method.name" = %method,
        "jsonrpc.request.id" = %context.id,
        "mcp.protocol.version" = Empty,
        "mcp.session.id" = Empty,
        "gen_ai.tool.name" = Empty,
        "gen_ai.prompt.name" = Empty,
        "gen_ai.operation.name" = Empty,
        "gen_ai.tool.call.arguments" = Empty,
        "gen_ai.tool.call.result" = Empty,
        "error.type" = Empty,
        "airlock.policy.decision" = Empty,
        "airlock.policy.reason_code" = Empty,
        "airlock.policy.version" = Empty,
        "airlock.approval.id" = Empty,
        "airlock.approval.wait_ms" = Empty,
        "airlock.invocation.status" = Empty,
        "airlock.invocation.id" = Empty,
        "airlock.conversation.tainted" = Empty,
    );
    if let Some(version) = context.protocol_version() {
        span.record("mcp.protocol.version", version.as_str());
    }
    if let Some(parent) = remote_parent(context) {
        // Ignored when nothing exports: the span then has no OpenTelemetry context at all.
        let _ = span.set_parent(parent);
    }
    span
}

/// A client-chosen name as a span may carry it: at most [`MAX_NAME_CHARS`] characters, control
/// characters replaced (an unknown tool's name is the client's to choose, of any length).
fn bounded(name: &str) -> String {
    name.chars()
        .take(MAX_NAME_CHARS)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// The longest tool or prompt name a span carries.
const MAX_NAME_CHARS: usize = 128;

/// The client's trace, from `traceparent` (and `tracestate`) in the request's `_meta`; `None`
/// for a missing or malformed one (a new trace starts).
fn remote_parent(context: &RequestContext<RoleServer>) -> Option<opentelemetry::Context> {
    let traceparent = context.meta.get_traceparent()?;
    let state = context
        .meta
        .get_tracestate()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let remote = parse_traceparent(traceparent, state)?;
    Some(opentelemetry::Context::new().with_remote_span_context(remote))
}

/// A W3C `traceparent` (version `00`): `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`,
/// neither id all zeros. Anything else is `None`.
pub fn parse_traceparent(text: &str, state: TraceState) -> Option<SpanContext> {
    let mut parts = text.trim().split('-');
    let (Some(version), Some(trace), Some(span), Some(flags), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let lower_hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if version != "00" || !lower_hex(trace, 32) || !lower_hex(span, 16) || !lower_hex(flags, 2) {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    if trace == TraceId::INVALID || span == SpanId::INVALID {
        return None;
    }
    // The client's sampled flag is not obeyed: whether airlock's own spans are recorded is the
    // operator's choice, not the agent's (an agent sending `-00` would hide its calls).
    let _ = flags;
    Some(SpanContext::new(
        trace,
        span,
        TraceFlags::SAMPLED,
        true,
        state,
    ))
}

/// The W3C trace context of `span`, for an upstream request's `_meta`: `(traceparent,
/// tracestate)`, or `None` when the span has no OpenTelemetry context (nothing exports).
pub fn trace_context(span: &Span) -> Option<(String, Option<String>)> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    if !span_context.is_valid() {
        return None;
    }
    let traceparent = format!(
        "00-{}-{}-{:02x}",
        span_context.trace_id(),
        span_context.span_id(),
        span_context.trace_flags().to_u8()
    );
    let state = span_context.trace_state().header();
    Some((traceparent, (!state.is_empty()).then_some(state)))
}

/// The client span of a call sent to an upstream, below the client's request span.
pub fn upstream_call_span(parent: &Span, server: &str, tool: &str) -> Span {
    tracing::info_span!(
        parent: parent,
        "mcp.client.request",
        "otel.name" = %format!("tools/call {tool}"),
        "otel.kind" = "client",
        "mcp.method.name" = "tools/call",
        "gen_ai.tool.name" = %tool,
        "gen_ai.operation.name" = "execute_tool",
        "airlock.upstream.server" = %server,
        "error.type" = Empty,
    )
}

/// While a call waits for its approval: a child span of the request, from the moment the
/// gateway saw it parked until its answer.
pub struct ApprovalWait {
    pub approval: ApprovalId,
    pub since: Instant,
    _span: Span,
}

impl Drop for ApprovalWait {
    fn drop(&mut self) {
        let instruments = instruments();
        instruments.pending.add(-1, &[]);
        instruments
            .approval_wait
            .record(self.since.elapsed().as_secs_f64(), &[]);
    }
}

impl ApprovalWait {
    pub fn begin(approval: ApprovalId) -> ApprovalWait {
        instruments().pending.add(1, &[]);
        let span = tracing::info_span!(
            "airlock.approval.wait",
            "otel.name" = "approval wait",
            "airlock.approval.id" = %approval,
        );
        ApprovalWait {
            approval,
            since: Instant::now(),
            _span: span,
        }
    }
}

/// Records on the current (request) span that its call is parked for `approval`: what the span
/// says if the request is answered before the approval is resolved.
pub fn record_parked(approval: ApprovalId) {
    let span = Span::current();
    span.record("airlock.policy.decision", "require_approval");
    span.record("airlock.invocation.status", "WAITING_FOR_APPROVAL");
    span.record("airlock.approval.id", approval.to_string().as_str());
}

/// Records a call's end on the current (request) span: the decision, the reason, the
/// invocation's status, the approval and how long it was waited for, and `error.type =
/// tool_error` for a result the client sees as an error.
pub fn record_call_end(end: &TicketEnd, waited: Option<&ApprovalWait>, tainted: bool) {
    let span = Span::current();
    let TicketEnd::Answered(answer) = end else {
        span.record("error.type", "cancelled");
        return;
    };
    let (status, reason, denied_by_policy) = match answer {
        CallAnswer::Executed { .. } => ("SUCCEEDED", None, false),
        CallAnswer::Failed { reason_code, .. } => ("FAILED", Some(reason_code.as_str()), false),
        CallAnswer::Denied { reason_code, .. } => ("DENIED", Some(reason_code.as_str()), true),
        CallAnswer::ReviewerDenied { .. } => ("DENIED", Some("approval.denied"), false),
        CallAnswer::ApprovalExpired => ("EXPIRED", Some("approval.expired"), false),
        CallAnswer::Uncertain { invocation_id } => {
            span.record("airlock.invocation.id", invocation_id.to_string().as_str());
            ("UNCERTAIN", None, false)
        }
    };
    let decision = match (waited, denied_by_policy) {
        (Some(_), _) => "require_approval",
        (None, true) => "deny",
        (None, false) => "allow",
    };
    span.record("airlock.policy.decision", decision);
    span.record("airlock.invocation.status", status);
    instruments().calls.add(
        1,
        &[
            opentelemetry::KeyValue::new("airlock.policy.decision", decision),
            opentelemetry::KeyValue::new("airlock.invocation.status", status),
        ],
    );
    if let Some(reason) = reason {
        span.record("airlock.policy.reason_code", reason);
    }
    if let Some(wait) = waited {
        span.record("airlock.approval.id", wait.approval.to_string().as_str());
        span.record(
            "airlock.approval.wait_ms",
            u64::try_from(wait.since.elapsed().as_millis()).unwrap_or(u64::MAX),
        );
    }
    span.record("airlock.conversation.tainted", tainted);
    if !matches!(answer, CallAnswer::Executed { .. }) {
        span.record("error.type", "tool_error");
    }
}

/// Whether tool arguments and results go on spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContentExport {
    /// Never (the default).
    #[default]
    Never,
    /// Redacted as the approval view redacts arguments.
    Redacted,
}

impl ContentExport {
    /// `AIRLOCK_OTEL_TOOL_CONTENT`: unset or `none` → never, `redacted` → redacted; anything
    /// else is an error naming the allowed values.
    pub fn parse(value: Option<&str>) -> Result<ContentExport, String> {
        match value {
            None | Some("none") => Ok(ContentExport::Never),
            Some("redacted") => Ok(ContentExport::Redacted),
            Some(other) => Err(format!(
                "AIRLOCK_OTEL_TOOL_CONTENT must be 'none' or 'redacted', not '{}'",
                other.escape_debug()
            )),
        }
    }
}

/// The process's choice, set once by the binary at start.
static CONTENT_EXPORT: std::sync::OnceLock<ContentExport> = std::sync::OnceLock::new();

/// Sets whether tool content goes on spans (once per process; later calls are ignored).
pub fn set_content_export(choice: ContentExport) {
    let _ = CONTENT_EXPORT.set(choice);
}

fn content_export() -> ContentExport {
    CONTENT_EXPORT.get().copied().unwrap_or_default()
}

/// The longest arguments or result text a span carries.
pub const MAX_CONTENT_CHARS: usize = 4096;

/// `value` redacted as the approval view redacts arguments, as JSON text of at most
/// [`MAX_CONTENT_CHARS`] characters.
fn redacted_text(value: &serde_json::Value) -> String {
    let text = airlock_core::approval::redact::redact(value).to_string();
    match text.char_indices().nth(MAX_CONTENT_CHARS) {
        Some((cut, _)) => format!("{}…[TRUNCATED]", &text[..cut]),
        None => text,
    }
}

/// A client's handler with a span around each request it handles: every method delegates to
/// the inner handler (its own or rmcp's default), inside the request's span.
pub struct Traced<H> {
    inner: H,
    /// What every span of this client carries: the policy version, the session id.
    policy_version: String,
    session_id: String,
}

impl<H> Traced<H> {
    pub fn new(inner: H, policy_version: String, session_id: String) -> Traced<H> {
        Traced {
            inner,
            policy_version,
            session_id,
        }
    }

    /// The span of a request of `method` (on `target`, for its name).
    fn span(
        &self,
        context: &RequestContext<RoleServer>,
        method: &str,
        target: Option<&str>,
    ) -> Span {
        let span = request_span(method, target, context);
        span.record("airlock.policy.version", self.policy_version.as_str());
        span.record("mcp.session.id", self.session_id.as_str());
        span
    }
}

/// Records a JSON-RPC error's code as `error.type` (the conventions' choice), marks the span
/// failed, and records the request's duration.
fn finish<T>(span: &Span, method: &'static str, started: Instant, answer: &Result<T, McpError>) {
    finish_as(
        span,
        method,
        started,
        answer.as_ref().err().map(|e| e.code.0.to_string()),
    );
}

/// [`finish`] with the error type already known (`tool_error` for an `isError` result).
fn finish_as(span: &Span, method: &'static str, started: Instant, error_type: Option<String>) {
    let mut attributes = vec![opentelemetry::KeyValue::new("mcp.method.name", method)];
    if let Some(error_type) = error_type {
        span.record("error.type", error_type.as_str());
        span.record("otel.status_code", "error");
        attributes.push(opentelemetry::KeyValue::new("error.type", error_type));
    }
    instruments()
        .duration
        .record(started.elapsed().as_secs_f64(), &attributes);
}

/// A request method delegated inside its span.
macro_rules! traced {
    ($name:ident, $method:literal, $params:ty, $answer:ty) => {
        async fn $name(
            &self,
            request: $params,
            context: RequestContext<RoleServer>,
        ) -> Result<$answer, McpError> {
            let started = Instant::now();
            let span = self.span(&context, $method, None);
            let answer = self
                .inner
                .$name(request, context)
                .instrument(span.clone())
                .await;
            finish(&span, $method, started, &answer);
            answer
        }
    };
}

// Logging and `resources/subscribe` are deprecated by the 2026-07-28 revision, and still served
// to 2025-11-25 clients, so they are delegated like the rest.
#[allow(deprecated)]
impl<H: ServerHandler> ServerHandler for Traced<H> {
    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }

    fn negotiate_initialize(
        &self,
        request: &InitializeRequestParams,
    ) -> Result<InitializeResult, McpError> {
        self.inner.negotiate_initialize(request)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.inner.accepted_subscription_filter(requested)
    }

    async fn ping(&self, context: RequestContext<RoleServer>) -> Result<(), McpError> {
        let started = Instant::now();
        let span = self.span(&context, "ping", None);
        let answer = self.inner.ping(context).instrument(span.clone()).await;
        finish(&span, "ping", started, &answer);
        answer
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let started = Instant::now();
        let span = self.span(&context, "server/discover", None);
        let answer = self.inner.discover(context).instrument(span.clone()).await;
        finish(&span, "server/discover", started, &answer);
        answer
    }

    traced!(
        initialize,
        "initialize",
        InitializeRequestParams,
        InitializeResult
    );
    traced!(
        list_tools,
        "tools/list",
        Option<PaginatedRequestParams>,
        ListToolsResult
    );
    traced!(get_task, "tasks/get", GetTaskParams, GetTaskResult);
    traced!(cancel_task, "tasks/cancel", CancelTaskParams, ());
    traced!(update_task, "tasks/update", UpdateTaskParams, ());
    traced!(
        list_resources,
        "resources/list",
        Option<PaginatedRequestParams>,
        ListResourcesResult
    );
    traced!(
        list_resource_templates,
        "resources/templates/list",
        Option<PaginatedRequestParams>,
        ListResourceTemplatesResult
    );
    traced!(
        read_resource,
        "resources/read",
        ReadResourceRequestParams,
        ReadResourceResponse
    );
    traced!(subscribe, "resources/subscribe", SubscribeRequestParams, ());
    traced!(
        unsubscribe,
        "resources/unsubscribe",
        UnsubscribeRequestParams,
        ()
    );
    traced!(
        list_prompts,
        "prompts/list",
        Option<PaginatedRequestParams>,
        ListPromptsResult
    );
    traced!(
        complete,
        "completion/complete",
        CompleteRequestParams,
        CompleteResult
    );
    traced!(set_level, "logging/setLevel", SetLevelRequestParams, ());

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let started = Instant::now();
        let span = self.span(&context, "prompts/get", Some(&request.name));
        span.record("gen_ai.prompt.name", bounded(&request.name).as_str());
        let answer = self
            .inner
            .get_prompt(request, context)
            .instrument(span.clone())
            .await;
        finish(&span, "prompts/get", started, &answer);
        answer
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let started = Instant::now();
        let span = self.span(&context, "tools/call", Some(&request.name));
        span.record("gen_ai.tool.name", bounded(&request.name).as_str());
        span.record("gen_ai.operation.name", "execute_tool");
        let content = content_export();
        if content == ContentExport::Redacted {
            let arguments =
                serde_json::Value::Object(request.arguments.clone().unwrap_or_default());
            span.record(
                "gen_ai.tool.call.arguments",
                redacted_text(&arguments).as_str(),
            );
        }
        let answer = self
            .inner
            .call_tool(request, context)
            .instrument(span.clone())
            .await;
        if content == ContentExport::Redacted
            && let Ok(CallToolResponse::Complete(result)) = &answer
            && let Ok(value) = serde_json::to_value(result)
        {
            span.record("gen_ai.tool.call.result", redacted_text(&value).as_str());
        }
        let error_type = match &answer {
            Err(error) => Some(error.code.0.to_string()),
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
                Some("tool_error".to_owned())
            }
            Ok(_) => None,
        };
        finish_as(&span, "tools/call", started, error_type);
        answer
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        self.inner.listen(context).await
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.inner.on_initialized(context).await;
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        context: NotificationContext<RoleServer>,
    ) {
        self.inner.on_cancelled(notification, context).await;
    }

    async fn on_progress(
        &self,
        notification: ProgressNotificationParam,
        context: NotificationContext<RoleServer>,
    ) {
        self.inner.on_progress(notification, context).await;
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.inner.on_roots_list_changed(context).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_well_formed_version_00_traceparent_continues_a_trace() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parse_traceparent(good, TraceState::default()).expect("valid");
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(context.is_sampled() && context.is_remote());
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let context = parse_traceparent(unsampled, TraceState::default()).expect("valid");
        assert!(
            context.is_sampled(),
            "the client does not decide what airlock records"
        );
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx",
        ] {
            assert!(
                parse_traceparent(bad, TraceState::default()).is_none(),
                "{bad:?}"
            );
        }
    }
}
