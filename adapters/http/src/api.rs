//! The `/v1` routes (SPEC §20): each binds one `ControlService` operation, under the caller
//! the bearer token names, with Appendix A's bodies. Handlers translate and decide nothing.

use airlock_core::ids::{ApprovalId, ConnectionId, InvocationId, RunId};
use airlock_core::vocab::{ApprovalResolution, ResolveState, SettlementOutcome};
use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::extract::{ApiJson, ApiQuery, Caller, IdPath, RequiredJson, body_text};
use crate::problem::{Problem, ProblemBody};
use crate::state::AppState;
use crate::wire::{
    ApprovalPage, ApprovalRecord, CancelRecord, ClearTaintBody, ConversationCallRecord,
    ConversationDetail, ConversationPage, ConversationRecord, EventPage, Health, InvocationRecord,
    ResolveBody, ResolvedRecord, RunRecord, RunScriptDoc, SettleBody, SettlementOutcomeWire,
    SettlementRecord, SubmittedRecord, UncertainPage,
};

/// `GET /v1/approvals` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ApprovalsQuery {
    /// Only this run's approvals.
    #[param(format = Uuid, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub run: Option<String>,
    /// Page size, 1..=100 (default 50).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// The previous page's `next_cursor`.
    #[param(
        pattern = "^[0-9]{1,19}:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
    )]
    pub cursor: Option<String>,
}

/// `GET /v1/invocations/uncertain` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UncertainQuery {
    /// Include invocations that already have a settlement.
    pub all: Option<bool>,
}

/// `GET /v1/runs/{id}/events` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events with a larger id: the previous page's `next_cursor`.
    #[param(minimum = 0)]
    pub after_id: Option<i64>,
    /// Page size, 1..=1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// `GET /v1/conversations` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ConversationsQuery {
    /// Page size, 1..=100 (default 50).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
}

/// How many calls a conversation's record carries (newest first).
pub const CONVERSATION_CALLS_MAX: usize = 100;

fn parse_run(text: Option<&str>) -> Result<Option<RunId>, Problem> {
    text.map(|t| {
        t.parse::<RunId>()
            .map_err(|e| Problem::invalid(e.to_string()))
    })
    .transpose()
}

/// Liveness and store reachability; needs no token.
#[utoipa::path(get, path = "/healthz", tag = "health", security(()),
    responses(
        (status = 200, description = "The server is up and its store answers", body = Health),
        (status = 503, description = "The store does not answer", body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn healthz(State(state): State<AppState>) -> Result<Json<Health>, Problem> {
    state.control.check_store()?;
    Ok(Json(Health {
        status: "ok".to_owned(),
        policy_version: state.control.policy_version(),
    }))
}

/// The tenant's pending approvals, newest first (`approval.read`).
#[utoipa::path(get, path = "/v1/approvals", tag = "approvals", params(ApprovalsQuery),
    responses(
        (status = 200, body = ApprovalPage),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn list_approvals(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<ApprovalsQuery>,
) -> Result<Json<ApprovalPage>, Problem> {
    let run = parse_run(query.run.as_deref())?;
    let page = state.control.list_pending(
        &caller.principal,
        run,
        query.limit.map(|l| l as usize),
        query.cursor.as_deref(),
    )?;
    Ok(Json(ApprovalPage::from(&page)))
}

/// One approval (`approval.read`); another tenant's, or one not yet announced, is 404.
#[utoipa::path(get, path = "/v1/approvals/{id}", tag = "approvals",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", description = "Approval id")),
    responses(
        (status = 200, body = ApprovalRecord),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn get_approval(
    State(state): State<AppState>,
    Caller(caller): Caller,
    IdPath(id): IdPath<ApprovalId>,
) -> Result<Json<ApprovalRecord>, Problem> {
    let approval = state.control.get_approval(&caller.principal, id)?;
    Ok(Json(ApprovalRecord::from(&approval)))
}

/// The longest `reason` and `note`, in characters (SPEC §9.5, §10.1).
const MAX_TEXT_CHARS: usize = 4096;

/// A body that does not match the document is refused before anything else, so the answer
/// to a malformed request never depends on what is stored (the service checks these lengths
/// only when it writes, after its idempotent answers).
fn check_length(field: &str, text: &str, min: usize) -> Result<(), Problem> {
    let chars = text.chars().count();
    if chars < min || chars > MAX_TEXT_CHARS {
        return Err(Problem::invalid(format!(
            "{field} must be {min} to {MAX_TEXT_CHARS} characters"
        )));
    }
    Ok(())
}

/// RESOLVE (SPEC §10.4) as the HTTP answer: `applied` and a repeat of the same answer are 200,
/// a different answer to a resolved approval is 409 `already_resolved_differently`.
pub(crate) async fn resolve(
    state: &AppState,
    caller: &airlock_core::access::Verified,
    id: ApprovalId,
    resolution: ApprovalResolution,
    reason: Option<&str>,
) -> Result<ResolvedRecord, Problem> {
    let resolved = state
        .control
        .resolve(&caller.principal, id, resolution, reason)
        .await?;
    let record = ResolvedRecord::from(&resolved);
    if resolved.state == ResolveState::AlreadyResolvedDifferently {
        let mut problem = Problem::new(
            StatusCode::CONFLICT,
            "already_resolved_differently",
            format!(
                "the approval was already resolved as {}",
                record.approval.status
            ),
        );
        problem.approval = Some(Box::new(record.approval));
        return Err(problem);
    }
    Ok(record)
}

/// Approve once (`approval.resolve`).
#[utoipa::path(post, path = "/v1/approvals/{id}/approve", tag = "approvals",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", description = "Approval id")),
    request_body(content = Option<ResolveBody>, description = "Optional reason", content_type = "application/json"),
    responses(
        (status = 200, description = "`applied`, or `already_resolved_identically` for a repeat", body = ResolvedRecord),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden` or `self_approval`", body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 409, description = "`no_longer_pending`, `already_resolved_differently` or `conflict`", body = ProblemBody, content_type = "application/problem+json"),
        (status = 410, description = "`expired`: the approval reached its expiry", body = ProblemBody, content_type = "application/problem+json"),
        (status = 413, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn approve(
    State(state): State<AppState>,
    Caller(caller): Caller,
    IdPath(id): IdPath<ApprovalId>,
    ApiJson(body): ApiJson<ResolveBody>,
) -> Result<Json<ResolvedRecord>, Problem> {
    let reason = body.reason.as_deref();
    reason.map_or(Ok(()), |r| check_length("reason", r, 0))?;
    resolve(&state, &caller, id, ApprovalResolution::ApproveOnce, reason)
        .await
        .map(Json)
}

/// Deny (`approval.resolve`); the run is re-queued to record the denial.
#[utoipa::path(post, path = "/v1/approvals/{id}/deny", tag = "approvals",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", description = "Approval id")),
    request_body(content = Option<ResolveBody>, description = "Optional reason", content_type = "application/json"),
    responses(
        (status = 200, description = "`applied`, or `already_resolved_identically` for a repeat", body = ResolvedRecord),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden` or `self_approval`", body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 409, description = "`no_longer_pending`, `already_resolved_differently` or `conflict`", body = ProblemBody, content_type = "application/problem+json"),
        (status = 410, description = "`expired`: the approval reached its expiry", body = ProblemBody, content_type = "application/problem+json"),
        (status = 413, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn deny(
    State(state): State<AppState>,
    Caller(caller): Caller,
    IdPath(id): IdPath<ApprovalId>,
    ApiJson(body): ApiJson<ResolveBody>,
) -> Result<Json<ResolvedRecord>, Problem> {
    let reason = body.reason.as_deref();
    reason.map_or(Ok(()), |r| check_length("reason", r, 0))?;
    resolve(&state, &caller, id, ApprovalResolution::Deny, reason)
        .await
        .map(Json)
}

/// The UNCERTAIN review queue, newest first (`invocation.read`); each item carries its
/// settlement or null.
#[utoipa::path(get, path = "/v1/invocations/uncertain", tag = "invocations", params(UncertainQuery),
    responses(
        (status = 200, body = UncertainPage),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn list_uncertain(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<UncertainQuery>,
) -> Result<Json<UncertainPage>, Problem> {
    let items = state
        .control
        .list_uncertain(&caller.principal, query.all.unwrap_or(false))?;
    Ok(Json(UncertainPage {
        items: items
            .iter()
            .map(|(i, s)| InvocationRecord::new(i, s.as_ref()))
            .collect(),
    }))
}

/// SETTLE (`invocation.settle`): records a finding; the invocation stays UNCERTAIN. The same
/// outcome again returns the stored settlement; a different one is 409.
#[utoipa::path(post, path = "/v1/invocations/{id}/settle", tag = "invocations",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", description = "Invocation id")),
    request_body(content = SettleBody, content_type = "application/json"),
    responses(
        (status = 200, body = SettlementRecord),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 409, body = ProblemBody, content_type = "application/problem+json"),
        (status = 413, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn settle(
    State(state): State<AppState>,
    Caller(caller): Caller,
    IdPath(id): IdPath<InvocationId>,
    RequiredJson(body): RequiredJson<SettleBody>,
) -> Result<Json<SettlementRecord>, Problem> {
    check_length("note", &body.note, 1)?;
    let outcome = match body.outcome {
        SettlementOutcomeWire::Succeeded => SettlementOutcome::Succeeded,
        SettlementOutcomeWire::Failed => SettlementOutcome::Failed,
    };
    let settlement = state
        .control
        .settle(&caller.principal, id, outcome, &body.note)
        .await?;
    Ok(Json(SettlementRecord::from(&settlement)))
}

/// SUBMIT (`run.write`): the body is a run script (SPEC §15) whose tenant and principal must
/// be the caller's and whose scopes must be a subset of the caller's.
#[utoipa::path(post, path = "/v1/runs", tag = "runs",
    request_body(content = RunScriptDoc, description = "A run script (SPEC §15)", content_type = "application/json"),
    responses(
        (status = 201, body = SubmittedRecord, headers(("location" = String, description = "The run's URL"))),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 409, body = ProblemBody, content_type = "application/problem+json"),
        (status = 413, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn submit_run(
    State(state): State<AppState>,
    Caller(caller): Caller,
    request: Request,
) -> Result<Response, Problem> {
    let script = body_text(request, &state).await?;
    let submitted = state.control.submit_run(&caller.principal, &script).await?;
    let record = SubmittedRecord::from(&submitted);
    let mut response = (StatusCode::CREATED, Json(&record)).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/runs/{}", record.run_id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// One run without its script (`run.read`).
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", description = "Run id")),
    responses(
        (status = 200, body = RunRecord),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn get_run(
    State(state): State<AppState>,
    Caller(caller): Caller,
    IdPath(id): IdPath<RunId>,
) -> Result<Json<RunRecord>, Problem> {
    let run = state.control.get_run(&caller.principal, id)?;
    Ok(Json(RunRecord::from(&run)))
}

/// A run's events by id (`run.read`).
#[utoipa::path(get, path = "/v1/runs/{id}/events", tag = "runs",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", description = "Run id"), EventsQuery),
    responses(
        (status = 200, body = EventPage),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn run_events(
    State(state): State<AppState>,
    Caller(caller): Caller,
    IdPath(id): IdPath<RunId>,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Json<EventPage>, Problem> {
    if query.after_id.is_some_and(|a| a < 0) {
        return Err(Problem::invalid("after_id must be a non-negative integer"));
    }
    let page = state.control.list_events(
        &caller.principal,
        id,
        query.after_id,
        query.limit.map(|l| l as usize),
    )?;
    Ok(Json(EventPage::from(&page)))
}

/// CANCEL (`run.cancel`, SPEC §8.5): a terminal run answers `accepted: false`.
#[utoipa::path(post, path = "/v1/runs/{id}/cancel", tag = "runs",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", description = "Run id")),
    responses(
        (status = 200, body = CancelRecord),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 409, body = ProblemBody, content_type = "application/problem+json"),
        (status = 413, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn cancel_run(
    State(state): State<AppState>,
    Caller(caller): Caller,
    IdPath(id): IdPath<RunId>,
) -> Result<Json<CancelRecord>, Problem> {
    let outcome = state.control.cancel_run(&caller.principal, id).await?;
    Ok(Json(CancelRecord::from(&outcome)))
}

/// The tenant's conversations, newest first (`run.read`, SPEC §22.1).
#[utoipa::path(get, path = "/v1/conversations", tag = "conversations", params(ConversationsQuery),
    responses(
        (status = 200, body = ConversationPage),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn list_conversations(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<ConversationsQuery>,
) -> Result<Json<ConversationPage>, Problem> {
    let items = state
        .control
        .list_conversations(&caller.principal, query.limit.map(|l| l as usize))?;
    Ok(Json(ConversationPage {
        items: items.iter().map(ConversationRecord::from).collect(),
    }))
}

/// One conversation with its newest calls (`run.read`); another tenant's is 404.
#[utoipa::path(get, path = "/v1/conversations/{id}", tag = "conversations",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", description = "Conversation id")),
    responses(
        (status = 200, body = ConversationDetail),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn get_conversation(
    State(state): State<AppState>,
    Caller(caller): Caller,
    IdPath(id): IdPath<ConnectionId>,
) -> Result<Json<ConversationDetail>, Problem> {
    let (conversation, calls) =
        state
            .control
            .conversation_calls(&caller.principal, id, CONVERSATION_CALLS_MAX)?;
    Ok(Json(ConversationDetail {
        conversation: ConversationRecord::from(&conversation),
        calls: calls
            .items
            .iter()
            .map(|c| ConversationCallRecord::new(&c.invocation, c.approval.as_ref()))
            .collect(),
        calls_truncated: calls.truncated,
    }))
}

/// CLEAR-TAINT (`approval.resolve`, SPEC §22.1): the conversation's later calls are proposed
/// untainted again; recorded as `conversation.taint_cleared` with the reason. A conversation
/// that is not tainted, or has closed, is 409.
#[utoipa::path(post, path = "/v1/conversations/{id}/clear-taint", tag = "conversations",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", description = "Conversation id")),
    request_body(content = ClearTaintBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The conversation, untainted", body = ConversationRecord),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 409, description = "`conflict`: not tainted, closed, or tainted again since the given `tainted_at`", body = ProblemBody, content_type = "application/problem+json"),
        (status = 413, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn clear_conversation_taint(
    State(state): State<AppState>,
    Caller(caller): Caller,
    IdPath(id): IdPath<ConnectionId>,
    RequiredJson(body): RequiredJson<ClearTaintBody>,
) -> Result<Json<ConversationRecord>, Problem> {
    check_length("reason", &body.reason, 1)?;
    let seen = body
        .tainted_at
        .as_deref()
        .map(|at| {
            at.parse::<airlock_core::time::Timestamp>().map_err(|e| {
                Problem::from(airlock_core::control::ServiceError::InvalidArgument(
                    format!("tainted_at: {e}"),
                ))
            })
        })
        .transpose()?;
    let cleared =
        state
            .control
            .clear_conversation_taint(&caller.principal, id, &body.reason, seen)?;
    Ok(Json(ConversationRecord::from(&cleared)))
}
