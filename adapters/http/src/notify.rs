//! `/v1/notify/targets` (issue 32 item 1): the caller's tenant's notification targets, the same
//! operations as `airlock notify add|list|remove`.
//!
//! The scope is `notify.admin`, never granted by default (not among the platform scopes a token
//! gets without `--scopes`): a target decides where the tenant's approval requests, with their
//! (redacted) arguments, are sent. A target's URL is answered as its scheme and host only (a
//! Slack webhook's path is its credential), and its secret as where it is (`env:…`, `file:…`),
//! never its value, which the server never stores.

use std::collections::BTreeSet;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use airlock_core::control::ServiceError;
use airlock_core::ids::NotifyTargetId;
use airlock_core::notify::{NotifyEvent, NotifyFormat, NotifyTarget, SecretSource, TargetSpec};

use crate::extract::{Caller, IdPath, RequiredJson};
use crate::problem::{Problem, ProblemBody};
use crate::state::AppState;

/// The scope every `/v1/notify` route requires.
pub const NOTIFY_ADMIN: &str = "notify.admin";

/// A target as `notify list` and `/v1/notify/targets` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TargetRecord {
    #[schema(format = Uuid)]
    pub id: String,
    pub tenant_id: String,
    /// Scheme and host only: `https://hooks.slack.com/…`.
    pub url: String,
    /// `json`, `slack` or `ntfy`.
    pub format: String,
    pub events: Vec<String>,
    /// Where the signing secret is: `env:AIRLOCK_NOTIFY_…` or `file:/path`.
    pub secret: String,
    pub label: Option<String>,
    pub created_by: String,
    pub created_at: String,
    pub removed_at: Option<String>,
    /// Every event of the tenant's log up to this id is handled (delivered, given up, or not
    /// subscribed to).
    pub handled_through_event_id: i64,
    /// Failed attempts at the next event.
    pub failed_attempts: u32,
    /// No attempt at the next event before this time.
    pub retry_at: Option<String>,
}

impl From<&NotifyTarget> for TargetRecord {
    fn from(t: &NotifyTarget) -> Self {
        TargetRecord {
            id: t.id.to_string(),
            tenant_id: t.tenant_id.clone(),
            url: t.shown_url(),
            format: t.format.as_str().to_owned(),
            events: t.events.iter().map(|e| e.as_str().to_owned()).collect(),
            secret: t.secret.to_text(),
            label: t.label.clone(),
            created_by: t.created_by.clone(),
            created_at: t.created_at.to_string(),
            removed_at: t.removed_at.map(|at| at.to_string()),
            handled_through_event_id: t.progress.after,
            failed_attempts: t.progress.attempts,
            retry_at: t.progress.retry_at.map(|at| at.to_string()),
        }
    }
}

/// The tenant's targets, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TargetList {
    pub items: Vec<TargetRecord>,
}

/// `POST /v1/notify/targets`. Host names are documented as letters, digits, dots and dashes
/// (the server also takes IPv6 literals); what a schema cannot say is checked by the server:
/// the secret must be the caller's tenant's, a port at most 65535, an ntfy URL must end in its
/// topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTargetBody {
    /// `http://` or `https://`, without user information or fragment.
    #[schema(
        max_length = 2048,
        pattern = "^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[!-\"$-~]*)?$"
    )]
    pub url: String,
    #[schema(value_type = FormatName)]
    pub format: String,
    /// Where the signing secret is, the tenant's own: `env:AIRLOCK_NOTIFY_<tag>_NAME` (a
    /// variable of the notifying processes) or `file:/…/<tag>/NAME`, where `<tag>` is `T` and
    /// 16 hex digits of the SHA-256 of the tenant id (`airlock notify secret-name`).
    #[schema(pattern = "^(env:AIRLOCK_NOTIFY_[A-Z0-9_]{1,113}|file:/[!-~]{0,4000})$")]
    pub secret: String,
    /// Default: all three (`approval.requested`, `approval.expired`, `tool.call.uncertain`).
    #[serde(default)]
    #[schema(value_type = Option<Vec<EventName>>, min_items = 1)]
    pub events: Option<Vec<String>>,
    /// A note for the list; no control characters.
    #[serde(default)]
    #[schema(max_length = 200, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub label: Option<String>,
}

/// A target's format (documentation of the wire names).
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub enum FormatName {
    #[serde(rename = "json")]
    Json,
    #[serde(rename = "slack")]
    Slack,
    #[serde(rename = "ntfy")]
    Ntfy,
}

/// An event a target may subscribe to (documentation of the wire names).
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub enum EventName {
    #[serde(rename = "approval.requested")]
    ApprovalRequested,
    #[serde(rename = "approval.expired")]
    ApprovalExpired,
    #[serde(rename = "tool.call.uncertain")]
    CallUncertain,
}

/// A target's events from their names; none given is all three.
pub fn parse_events(names: Option<&[String]>) -> Result<BTreeSet<NotifyEvent>, String> {
    match names {
        None => Ok(NotifyEvent::ALL.iter().copied().collect()),
        Some(names) => names
            .iter()
            .map(|name| {
                name.parse::<NotifyEvent>().map_err(|_| {
                    format!(
                        "unknown event '{}' (approval.requested, approval.expired or \
                         tool.call.uncertain)",
                        name.escape_debug()
                    )
                })
            })
            .collect(),
    }
}

/// The spec a body or the CLI's flags ask for.
pub fn target_spec(body: &NewTargetBody) -> Result<TargetSpec, ServiceError> {
    let format = body.format.parse::<NotifyFormat>().map_err(|_| {
        ServiceError::InvalidArgument(format!(
            "unknown format '{}' (json, slack or ntfy)",
            body.format.escape_debug()
        ))
    })?;
    Ok(TargetSpec {
        url: body.url.clone(),
        events: parse_events(body.events.as_deref()).map_err(ServiceError::InvalidArgument)?,
        format,
        secret: SecretSource::parse(&body.secret).map_err(ServiceError::InvalidArgument)?,
        label: body.label.clone(),
    })
}

fn require_notify_admin(caller: &airlock_core::access::Verified) -> Result<(), Problem> {
    if caller
        .principal
        .scopes
        .iter()
        .any(|scope| scope.as_str() == NOTIFY_ADMIN)
    {
        return Ok(());
    }
    Err(Problem::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!("managing notification targets needs the scope {NOTIFY_ADMIN}"),
    ))
}

/// LIST (`notify.admin`): the caller's tenant's targets not removed, oldest first.
#[utoipa::path(get, path = "/v1/notify/targets", tag = "notify",
    responses(
        (status = 200, body = TargetList),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn list_targets(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<TargetList>, Problem> {
    require_notify_admin(&caller)?;
    let targets = state
        .control
        .list_notify_targets(&caller.principal.tenant_id)?;
    Ok(Json(TargetList {
        items: targets.iter().map(TargetRecord::from).collect(),
    }))
}

/// ADD (`notify.admin`): a target of the caller's tenant, told of events that commit from now
/// on; recorded as `notify.target.added`.
#[utoipa::path(post, path = "/v1/notify/targets", tag = "notify",
    request_body(content = NewTargetBody, content_type = "application/json"),
    responses(
        (status = 201, body = TargetRecord),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 413, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn add_target(
    State(state): State<AppState>,
    Caller(caller): Caller,
    RequiredJson(body): RequiredJson<NewTargetBody>,
) -> Result<(StatusCode, Json<TargetRecord>), Problem> {
    require_notify_admin(&caller)?;
    let spec = target_spec(&body)?;
    let target = state.control.add_notify_target(
        &caller.principal.tenant_id,
        &caller.principal.principal_id,
        &spec,
    )?;
    Ok((StatusCode::CREATED, Json(TargetRecord::from(&target))))
}

/// REMOVE (`notify.admin`): nothing more is sent to the target; recorded as
/// `notify.target.removed`. Another tenant's target, or one removed already, is 404.
#[utoipa::path(delete, path = "/v1/notify/targets/{id}", tag = "notify",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", description = "Target id")),
    responses(
        (status = 200, description = "The removed target", body = TargetRecord),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn remove_target(
    State(state): State<AppState>,
    Caller(caller): Caller,
    IdPath(id): IdPath<NotifyTargetId>,
) -> Result<Json<TargetRecord>, Problem> {
    require_notify_admin(&caller)?;
    let removed = state.control.remove_notify_target(
        &caller.principal.tenant_id,
        &caller.principal.principal_id,
        id,
    )?;
    Ok(Json(TargetRecord::from(&removed)))
}
