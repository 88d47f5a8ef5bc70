//! The web console (SPEC §20): server-rendered pages for the approval queue, the review queue,
//! a run's timeline and the MCP conversations (SPEC §22.1: their calls, their taint and the
//! form that clears it), updated live from the event stream. Every asset is compiled into the
//! binary (the machines are offline). Forms POST and redirect back (Post/Redirect/Get), so the
//! console works without its script; the script only adds live refresh, countdowns and
//! keyboard shortcuts.
//!
//! Every form POST passes, in order: the origin check ([`guard`]), a live session, and the
//! session's form token. Only then is it one `ControlService` call as the session's principal.

pub mod assets;
pub mod guard;
pub mod session;
pub mod views;
pub mod visible;

use airlock_core::access::Authenticated;
use airlock_core::control::ServiceError;
use airlock_core::ids::{ApprovalId, ConnectionId, InvocationId, RunId};
use airlock_core::vocab::{ApprovalResolution, ResolveState, SettlementOutcome};
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::Markup;
use serde::Deserialize;

use crate::console::session::SessionId;
use crate::console::views::{Frame, Notice, Page};
use crate::state::AppState;
use crate::stream::{self, StreamQuery};

/// How many approvals a queue page shows (the service's largest page).
const QUEUE_SIZE: usize = airlock_core::control::APPROVAL_PAGE_MAX;

/// How many events a run page shows.
const TIMELINE_SIZE: usize = 1000;

/// How many conversations the list shows (the service's largest page).
const CONVERSATIONS_SIZE: usize = airlock_core::control::APPROVAL_PAGE_MAX;

/// The longest clear-taint reason, in characters (as the API's).
const MAX_REASON_CHARS: usize = 4096;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(approvals_page))
        .route("/review", get(review_page))
        .route("/runs/{id}", get(run_page))
        .route("/conversations", get(conversations_page))
        .route("/conversations/{id}", get(conversation_page))
        .route("/conversations/{id}/clear-taint", post(clear_taint))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/approvals/{id}", get(approval_page))
        .route("/approvals/{id}/approve", post(approve))
        .route("/approvals/{id}/deny", post(deny))
        .route("/invocations/{id}/settle", post(settle))
        .route("/fragments/approvals", get(approvals_fragment))
        .route("/fragments/review", get(review_fragment))
        .route("/fragments/runs/{id}", get(run_fragment))
        .route("/fragments/conversations", get(conversations_fragment))
        .route("/fragments/conversations/{id}", get(conversation_fragment))
        .route("/fragments/counts", get(counts))
        .route("/events", get(events))
        .route("/assets/{name}", get(assets::serve))
}

/// A signed-in browser: its session and the token's caller, re-checked now.
struct Viewer {
    session: SessionId,
    caller: Authenticated,
}

/// Why a console request cannot go on; each renders as a page or a redirect.
enum Refusal {
    /// No live session: GET pages go to the sign-in page, anything else is 401.
    SignIn,
    Unauthorized,
    CrossSite(guard::CrossSite),
    BadFormToken,
    BadRequest(String),
    NotFound,
    Service(ServiceError),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let page = |status: StatusCode, title: &str, detail: &str| {
            (status, views::error_page(title, detail)).into_response()
        };
        match self {
            Refusal::SignIn => Redirect::to("/login").into_response(),
            Refusal::Unauthorized => page(
                StatusCode::UNAUTHORIZED,
                "Signed out",
                "Your session ended or its token was revoked. Sign in again.",
            ),
            Refusal::CrossSite(why) => page(
                StatusCode::FORBIDDEN,
                "Refused",
                &format!("This form was not sent from the console itself: {why}."),
            ),
            Refusal::BadFormToken => page(
                StatusCode::FORBIDDEN,
                "Refused",
                "The form's token does not match your session. Reload the page and try again.",
            ),
            Refusal::BadRequest(detail) => page(StatusCode::BAD_REQUEST, "Bad request", &detail),
            Refusal::NotFound => page(
                StatusCode::NOT_FOUND,
                "Not found",
                "Nothing here: it may belong to another tenant or not exist.",
            ),
            Refusal::Service(error) => {
                let status = crate::problem::status_of(&error);
                if status == StatusCode::NOT_FOUND {
                    return Refusal::NotFound.into_response();
                }
                let detail = match &error {
                    ServiceError::Storage(_) => "The store is unavailable; try again.".to_owned(),
                    other => other.to_string(),
                };
                page(status, "Could not load this page", &detail)
            }
        }
    }
}

impl From<ServiceError> for Refusal {
    fn from(error: ServiceError) -> Refusal {
        Refusal::Service(error)
    }
}

/// The viewer of a page request; without a live session, the sign-in page.
fn viewer(state: &AppState, headers: &HeaderMap) -> Result<Viewer, Refusal> {
    let session = session::from_cookies(headers).ok_or(Refusal::SignIn)?;
    let token = state.sessions.token_of(&session).ok_or(Refusal::SignIn)?;
    match state.control.authenticate_id(token) {
        Ok(caller) => Ok(Viewer { session, caller }),
        Err(airlock_core::access::AuthError::Storage(message)) => {
            Err(Refusal::Service(ServiceError::Storage(message)))
        }
        Err(_) => {
            state.sessions.remove(&session);
            Err(Refusal::SignIn)
        }
    }
}

/// The viewer of a fragment or stream request: 401 rather than a redirect, so the page's
/// script can send the browser to the sign-in page.
fn viewer_or_401(state: &AppState, headers: &HeaderMap) -> Result<Viewer, Refusal> {
    viewer(state, headers).map_err(|r| match r {
        Refusal::SignIn => Refusal::Unauthorized,
        other => other,
    })
}

/// The checks of a form POST, in order: origin, session, form token.
fn form_viewer(state: &AppState, headers: &HeaderMap, csrf: &str) -> Result<Viewer, Refusal> {
    guard::same_origin(headers, state.settings.tls, state.settings.hosts.as_ref())
        .map_err(Refusal::CrossSite)?;
    let viewer = viewer_or_401(state, headers)?;
    if !viewer.session.csrf_matches(csrf) {
        return Err(Refusal::BadFormToken);
    }
    Ok(viewer)
}

#[derive(Debug, Default, Deserialize)]
struct NoticeQuery {
    notice: Option<String>,
}

fn frame<'a>(
    state: &AppState,
    viewer: &'a Viewer,
    csrf: &'a str,
    policy_version: &'a str,
    notice: Option<Notice>,
) -> Result<Frame<'a>, Refusal> {
    let principal = &viewer.caller.principal;
    // The stream position is read before the page's data, so an event committed while the
    // page is rendered is delivered to it afterwards rather than lost.
    let after = state.control.last_event_id(principal)?;
    let pending = state
        .control
        .list_pending(principal, None, Some(QUEUE_SIZE), None)
        .map(|p| p.items.len())
        .unwrap_or(0);
    let uncertain = state
        .control
        .list_uncertain(principal, false)
        .map(|items| items.len())
        .unwrap_or(0);
    Ok(Frame {
        principal,
        policy_version,
        csrf,
        now: state.control.now(),
        after,
        pending,
        uncertain,
        notice,
    })
}

fn html(markup: Markup) -> Response {
    let mut response = markup.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

async fn approvals_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<NoticeQuery>,
) -> Result<Response, Refusal> {
    let viewer = viewer(&state, &headers)?;
    let csrf = viewer.session.csrf_token();
    let version = state.control.policy_version();
    let notice = query.notice.as_deref().and_then(Notice::from_query);
    let frame = frame(&state, &viewer, &csrf, &version, notice)?;
    let content = approvals_markup(&state, &viewer, &frame)?;
    Ok(html(views::page(
        "Approvals",
        Page::Approvals,
        &frame,
        content,
    )))
}

fn approvals_markup(
    state: &AppState,
    viewer: &Viewer,
    frame: &Frame<'_>,
) -> Result<Markup, Refusal> {
    let principal = &viewer.caller.principal;
    let page = state
        .control
        .list_pending(principal, None, Some(QUEUE_SIZE), None)?;
    let ids: Vec<ApprovalId> = page.items.iter().map(|a| a.id).collect();
    let explanations = state.control.approval_explanations(principal, &ids)?;
    let conversations = conversations_of(state, principal, &page.items);
    Ok(views::approvals_fragment(
        &page.items,
        &explanations,
        &conversations,
        frame,
        page.next_cursor.is_some(),
        "queue",
    ))
}

async fn approvals_fragment(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let viewer = viewer_or_401(&state, &headers)?;
    let csrf = viewer.session.csrf_token();
    let version = state.control.policy_version();
    let frame = frame(&state, &viewer, &csrf, &version, None)?;
    Ok(html(approvals_markup(&state, &viewer, &frame)?))
}

/// One approval's page (SPEC §22.3: the page an MCP client's URL elicitation or task message
/// points its user to): the card with its answer form while it is pending, what became of it
/// after. Another tenant's approval, or an unknown id, is 404 (`approval.read` as for the API).
async fn approval_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(query): Query<NoticeQuery>,
) -> Result<Response, Refusal> {
    let viewer = viewer(&state, &headers)?;
    let id: ApprovalId = parse_id(&id)?;
    let csrf = viewer.session.csrf_token();
    let version = state.control.policy_version();
    let notice = query.notice.as_deref().and_then(Notice::from_query);
    let frame = frame(&state, &viewer, &csrf, &version, notice)?;
    let principal = &viewer.caller.principal;
    let approval = state.control.get_approval(principal, id)?;
    let explanations = state.control.approval_explanations(principal, &[id])?;
    let conversations = conversations_of(&state, principal, std::slice::from_ref(&approval));
    let content = views::approval_fragment(
        &approval,
        explanations.get(&id),
        conversations.get(&approval.session_id).copied(),
        &frame,
    );
    Ok(html(views::page(
        "Approval",
        Page::Approvals,
        &frame,
        content,
    )))
}

async fn review_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<NoticeQuery>,
) -> Result<Response, Refusal> {
    let viewer = viewer(&state, &headers)?;
    let csrf = viewer.session.csrf_token();
    let version = state.control.policy_version();
    let notice = query.notice.as_deref().and_then(Notice::from_query);
    let frame = frame(&state, &viewer, &csrf, &version, notice)?;
    let items = state
        .control
        .list_uncertain(&viewer.caller.principal, true)?;
    let content = views::review_fragment(&items, &frame);
    Ok(html(views::page("Review", Page::Review, &frame, content)))
}

async fn review_fragment(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let viewer = viewer_or_401(&state, &headers)?;
    let csrf = viewer.session.csrf_token();
    let version = state.control.policy_version();
    let frame = frame(&state, &viewer, &csrf, &version, None)?;
    let items = state
        .control
        .list_uncertain(&viewer.caller.principal, true)?;
    Ok(html(views::review_fragment(&items, &frame)))
}

/// The conversation of each approval's session, for the link on its card. A link is an aid,
/// not the page: when it cannot be looked up the cards are shown without it.
fn conversations_of(
    state: &AppState,
    principal: &airlock_core::principal::Principal,
    approvals: &[airlock_core::approval::Approval],
) -> std::collections::BTreeMap<airlock_core::ids::SessionId, ConnectionId> {
    let sessions: Vec<_> = approvals.iter().map(|a| a.session_id).collect();
    state
        .control
        .conversations_of_sessions(principal, &sessions)
        .unwrap_or_default()
}

fn parse_id<T: std::str::FromStr>(text: &str) -> Result<T, Refusal> {
    text.parse().map_err(|_| Refusal::NotFound)
}

fn run_markup(
    state: &AppState,
    viewer: &Viewer,
    frame: &Frame<'_>,
    id: RunId,
) -> Result<Markup, Refusal> {
    let principal = &viewer.caller.principal;
    let run = state.control.get_run(principal, id)?;
    let events = state
        .control
        .list_events(principal, id, None, Some(TIMELINE_SIZE))?;
    let pending = state
        .control
        .list_pending(principal, Some(id), Some(QUEUE_SIZE), None)
        .map(|p| p.items)
        .unwrap_or_default();
    let ids: Vec<ApprovalId> = pending.iter().map(|a| a.id).collect();
    let explanations = state
        .control
        .approval_explanations(principal, &ids)
        .unwrap_or_default();
    let conversation = state
        .control
        .conversations_of_sessions(principal, &[run.session_id])
        .ok()
        .and_then(|found| found.get(&run.session_id).copied());
    Ok(views::run_fragment(
        &run,
        &pending,
        &explanations,
        conversation,
        &events.items,
        events.next_cursor.is_some(),
        frame,
    ))
}

async fn run_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(query): Query<NoticeQuery>,
) -> Result<Response, Refusal> {
    let viewer = viewer(&state, &headers)?;
    let id: RunId = parse_id(&id)?;
    let csrf = viewer.session.csrf_token();
    let version = state.control.policy_version();
    let notice = query.notice.as_deref().and_then(Notice::from_query);
    let frame = frame(&state, &viewer, &csrf, &version, notice)?;
    let content = run_markup(&state, &viewer, &frame, id)?;
    Ok(html(views::page("Run", Page::Run, &frame, content)))
}

async fn run_fragment(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, Refusal> {
    let viewer = viewer_or_401(&state, &headers)?;
    let id: RunId = parse_id(&id)?;
    let csrf = viewer.session.csrf_token();
    let version = state.control.policy_version();
    let frame = frame(&state, &viewer, &csrf, &version, None)?;
    Ok(html(run_markup(&state, &viewer, &frame, id)?))
}

fn conversations_markup(state: &AppState, viewer: &Viewer) -> Result<Markup, Refusal> {
    let items = state
        .control
        .list_conversations(&viewer.caller.principal, Some(CONVERSATIONS_SIZE))?;
    let more = items.len() == CONVERSATIONS_SIZE;
    Ok(views::conversations_fragment(&items, more))
}

async fn conversations_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<NoticeQuery>,
) -> Result<Response, Refusal> {
    let viewer = viewer(&state, &headers)?;
    let csrf = viewer.session.csrf_token();
    let version = state.control.policy_version();
    let notice = query.notice.as_deref().and_then(Notice::from_query);
    let frame = frame(&state, &viewer, &csrf, &version, notice)?;
    let content = conversations_markup(&state, &viewer)?;
    Ok(html(views::page(
        "Conversations",
        Page::Conversations,
        &frame,
        content,
    )))
}

async fn conversations_fragment(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let viewer = viewer_or_401(&state, &headers)?;
    Ok(html(conversations_markup(&state, &viewer)?))
}

fn conversation_markup(
    state: &AppState,
    viewer: &Viewer,
    frame: &Frame<'_>,
    id: ConnectionId,
) -> Result<Markup, Refusal> {
    let (conversation, calls) = state.control.conversation_calls(
        &viewer.caller.principal,
        id,
        crate::api::CONVERSATION_CALLS_MAX,
    )?;
    Ok(views::conversation_fragment(
        &conversation,
        &calls.items,
        calls.truncated,
        frame,
    ))
}

async fn conversation_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(query): Query<NoticeQuery>,
) -> Result<Response, Refusal> {
    let viewer = viewer(&state, &headers)?;
    let id: ConnectionId = parse_id(&id)?;
    let csrf = viewer.session.csrf_token();
    let version = state.control.policy_version();
    let notice = query.notice.as_deref().and_then(Notice::from_query);
    let frame = frame(&state, &viewer, &csrf, &version, notice)?;
    let content = conversation_markup(&state, &viewer, &frame, id)?;
    Ok(html(views::page(
        "Conversation",
        Page::Conversation,
        &frame,
        content,
    )))
}

async fn conversation_fragment(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, Refusal> {
    let viewer = viewer_or_401(&state, &headers)?;
    let id: ConnectionId = parse_id(&id)?;
    let csrf = viewer.session.csrf_token();
    let version = state.control.policy_version();
    let frame = frame(&state, &viewer, &csrf, &version, None)?;
    Ok(html(conversation_markup(&state, &viewer, &frame, id)?))
}

/// The navigation's counts, for the live refresh.
async fn counts(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, Refusal> {
    let viewer = viewer_or_401(&state, &headers)?;
    let csrf = viewer.session.csrf_token();
    let version = state.control.policy_version();
    let frame = frame(&state, &viewer, &csrf, &version, None)?;
    Ok(axum::Json(serde_json::json!({
        "approvals": frame.pending,
        "review": frame.uncertain,
    }))
    .into_response())
}

/// The console's event stream: the API's stream, authenticated by the session cookie
/// (EventSource cannot send an Authorization header).
async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<StreamQuery>,
) -> Result<Response, Response> {
    let viewer = viewer_or_401(&state, &headers).map_err(IntoResponse::into_response)?;
    let after = stream::start_after(&headers, query.after).map_err(IntoResponse::into_response)?;
    stream::open(
        &state,
        viewer.caller.into(),
        after,
        query.follow.unwrap_or(true),
    )
    .map(IntoResponse::into_response)
    .map_err(IntoResponse::into_response)
}

async fn login_page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if viewer(&state, &headers).is_ok() {
        return Redirect::to("/").into_response();
    }
    html(views::login(None))
}

#[derive(Debug, Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Result<Response, Refusal> {
    guard::same_origin(&headers, state.settings.tls, state.settings.hosts.as_ref())
        .map_err(Refusal::CrossSite)?;
    let Ok(Form(form)) = form else {
        return Err(Refusal::BadRequest(
            "the sign-in form was incomplete".into(),
        ));
    };
    let caller = match state.control.authenticate(form.token.trim()) {
        Ok(caller) => caller,
        Err(airlock_core::access::AuthError::Storage(message)) => {
            return Err(Refusal::Service(ServiceError::Storage(message)));
        }
        Err(_) => {
            let page = views::login(Some(
                "That token does not work: it is unknown, expired or revoked.",
            ));
            return Ok((StatusCode::UNAUTHORIZED, html(page)).into_response());
        }
    };
    let session = state
        .sessions
        .create(caller.token.id)
        .map_err(|e| Refusal::BadRequest(e.to_string()))?;
    let mut response = Redirect::to("/").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&session::set_cookie(&session, state.settings.tls)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

#[derive(Debug, Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

async fn logout(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Result<Response, Refusal> {
    let csrf = form.map(|Form(f)| f.csrf).unwrap_or_default();
    let viewer = form_viewer(&state, &headers, &csrf)?;
    state.sessions.remove(&viewer.session);
    let mut response = Redirect::to("/login").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&session::clear_cookie(state.settings.tls)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

#[derive(Debug, Deserialize)]
struct ResolveForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    from: String,
}

/// Where a resolve form returns: the queue, or the run or approval page it was sent from.
fn back_to(from: &str) -> String {
    if let Some(Ok(approval)) = from.strip_prefix("approval:").map(str::parse::<ApprovalId>) {
        return format!("/approvals/{approval}");
    }
    match from.strip_prefix("run:").map(str::parse::<RunId>) {
        Some(Ok(run)) => format!("/runs/{run}"),
        _ => "/".to_owned(),
    }
}

fn with_notice(path: &str, notice: Notice) -> Redirect {
    Redirect::to(&format!("{path}?notice={}", notice.as_query()))
}

async fn resolve_form(
    state: AppState,
    headers: HeaderMap,
    id: String,
    form: Result<Form<ResolveForm>, FormRejection>,
    resolution: ApprovalResolution,
) -> Result<Response, Refusal> {
    let form = form.map(|Form(f)| f).unwrap_or(ResolveForm {
        csrf: String::new(),
        reason: String::new(),
        from: String::new(),
    });
    let viewer = form_viewer(&state, &headers, &form.csrf)?;
    let back = back_to(&form.from);
    let id: ApprovalId = parse_id(&id)?;
    let reason = Some(form.reason.trim()).filter(|r| !r.is_empty());
    let notice = match state
        .control
        .resolve(&viewer.caller.principal, id, resolution, reason)
        .await
    {
        Ok(resolved) => match resolved.state {
            ResolveState::Applied => match resolution {
                ApprovalResolution::ApproveOnce => Notice::Approved,
                ApprovalResolution::Deny => Notice::Denied,
            },
            ResolveState::AlreadyResolvedIdentically => Notice::AlreadyResolved,
            ResolveState::AlreadyResolvedDifferently => {
                Notice::Error("already_resolved_differently")
            }
        },
        Err(error) => Notice::Error(error.code()),
    };
    Ok(with_notice(&back, notice).into_response())
}

async fn approve(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<ResolveForm>, FormRejection>,
) -> Result<Response, Refusal> {
    resolve_form(state, headers, id, form, ApprovalResolution::ApproveOnce).await
}

async fn deny(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<ResolveForm>, FormRejection>,
) -> Result<Response, Refusal> {
    resolve_form(state, headers, id, form, ApprovalResolution::Deny).await
}

#[derive(Debug, Deserialize)]
struct SettleForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    note: String,
}

async fn settle(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<SettleForm>, FormRejection>,
) -> Result<Response, Refusal> {
    let form = form.map(|Form(f)| f).unwrap_or(SettleForm {
        csrf: String::new(),
        outcome: String::new(),
        note: String::new(),
    });
    let viewer = form_viewer(&state, &headers, &form.csrf)?;
    let id: InvocationId = parse_id(&id)?;
    let outcome = match form.outcome.as_str() {
        "succeeded" => SettlementOutcome::Succeeded,
        "failed" => SettlementOutcome::Failed,
        _ => return Ok(with_notice("/review", Notice::Error("invalid_argument")).into_response()),
    };
    let notice = match state
        .control
        .settle(&viewer.caller.principal, id, outcome, form.note.trim())
        .await
    {
        Ok(_) => Notice::Settled,
        Err(error) => Notice::Error(error.code()),
    };
    Ok(with_notice("/review", notice).into_response())
}

#[derive(Debug, Default, Deserialize)]
struct ClearTaintForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
    /// The taint the page showed (its `tainted_at`).
    #[serde(default)]
    tainted_at: String,
}

/// CLEAR-TAINT from the conversation page: the same checks as every form (origin, session,
/// form token), then one `ControlService` call as the session's principal, which decides
/// (scope `approval.resolve`, a reason, tainted and open). Back to the conversation page with
/// the answer.
async fn clear_taint(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<ClearTaintForm>, FormRejection>,
) -> Result<Response, Refusal> {
    let form = form.map(|Form(f)| f).unwrap_or_default();
    let viewer = form_viewer(&state, &headers, &form.csrf)?;
    let id: ConnectionId = parse_id(&id)?;
    let back = format!("/conversations/{id}");
    let reason = form.reason.trim();
    if reason.chars().count() > MAX_REASON_CHARS {
        return Ok(with_notice(&back, Notice::Error("invalid_argument")).into_response());
    }
    // The taint the reviewer saw: a taint set since is not cleared unseen. A form without
    // it (or with an unreadable one) is refused like any bad input.
    let Ok(seen) = form.tainted_at.parse::<airlock_core::time::Timestamp>() else {
        return Ok(with_notice(&back, Notice::Error("invalid_argument")).into_response());
    };
    let notice = match state.control.clear_conversation_taint(
        &viewer.caller.principal,
        id,
        reason,
        Some(seen),
    ) {
        Ok(_) => Notice::TaintCleared,
        // Another tenant's, or none: the same 404 page as every other id.
        Err(ServiceError::NotFound) => return Err(Refusal::NotFound),
        // Not tainted (someone cleared it first), tainted again since the page was drawn, or
        // closed: said plainly, not as "conflict".
        Err(ServiceError::Conflict(_)) => Notice::Error("not_clearable"),
        Err(error) => Notice::Error(error.code()),
    };
    Ok(with_notice(&back, notice).into_response())
}
