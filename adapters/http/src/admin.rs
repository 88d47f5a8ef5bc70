//! `POST /v1/admin/reload` (issue 32 item 4): reload the policy files of the serving process
//! without a restart, as `SIGHUP` does. The process decides how (the binary's `reload` module);
//! this crate only checks the caller and answers.
//!
//! The caller needs the scope `policy.admin`. It is never granted by default (not among the
//! platform scopes a token gets without `--scopes`): whoever may swap the rules every call is
//! decided by must be named so, even though a reload only reads the files the operator put on
//! the server's disk.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use crate::extract::Caller;
use crate::policy_reload::ReloadedRecord;
use crate::problem::{Problem, ProblemBody};
use crate::state::AppState;

/// The scope `POST /v1/admin/reload` requires.
pub const POLICY_ADMIN: &str = "policy.admin";

/// RELOAD (`policy.admin`): reads the policy files again and puts them in force if they load;
/// otherwise the rules in force stay and the answer says why (422 `policy_load`).
#[utoipa::path(post, path = "/v1/admin/reload", tag = "admin",
    responses(
        (status = 200, description = "The files loaded and are in force (recorded as `policy.profile.loaded`)", body = ReloadedRecord),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the caller lacks `policy.admin`", body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: this server does not reload its policy", body = ProblemBody, content_type = "application/problem+json"),
        (status = 422, description = "`policy_load`: a file did not load; the rules in force stay", body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, description = "`storage`: the new rules could not be recorded; the rules in force stay", body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn reload(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<ReloadedRecord>, Problem> {
    if !caller
        .principal
        .scopes
        .iter()
        .any(|scope| scope.as_str() == POLICY_ADMIN)
    {
        return Err(Problem::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("reloading the policy needs the scope {POLICY_ADMIN}"),
        ));
    }
    let Some(reloader) = state.reload.as_ref().map(Arc::clone) else {
        return Err(Problem::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "this server does not reload its policy",
        ));
    };
    match reloader.reload().await {
        Ok(record) => Ok(Json(record)),
        Err(failure) if failure.code == "policy_load" => Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "policy_load",
            failure.message,
        )),
        Err(failure) => Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage",
            failure.message,
        )),
    }
}
