//! `POST /v1/admin/reload` (issue 32 item 4): reload the policy files of the serving process
//! without a restart, as `SIGHUP` does. The process decides how (the binary's `reload` module);
//! this crate only checks the caller and answers.
//!
//! The caller needs an airlock token (`alk_`) with the scope `policy.admin`. The scope is never
//! granted by default (not among the platform scopes a token gets without `--scopes`): the
//! policy is the whole process's, every tenant's, so whoever may swap it must be named so by
//! the operator, even though a reload only reads the files the operator put on the server's
//! disk. A token of the `[auth]` issuer is refused even if its `scope` claim lists
//! `policy.admin`: the identity provider's administrators do not administer this server's
//! rules. A failure answers only its kind; the paths and parse errors are in the server's log.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use airlock_core::access::VouchedBy;

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
        (status = 403, description = "`forbidden`: not an airlock token with `policy.admin`", body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: this server does not reload its policy", body = ProblemBody, content_type = "application/problem+json"),
        (status = 422, description = "`policy_load`: a file did not load; the rules in force stay", body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, description = "`storage`: the new rules could not be recorded; the rules in force stay", body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn reload(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<ReloadedRecord>, Problem> {
    if !matches!(caller.by, VouchedBy::ApiToken(_))
        || !caller
            .principal
            .scopes
            .iter()
            .any(|scope| scope.as_str() == POLICY_ADMIN)
    {
        return Err(Problem::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("reloading the policy needs an airlock token with the scope {POLICY_ADMIN}"),
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
