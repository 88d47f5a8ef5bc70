//! Request parts as the API reads them, each refusing with a problem+json instead of axum's
//! plain-text rejections: the bearer caller, ids in the path, query strings and JSON bodies.

use std::str::FromStr;

use airlock_core::access::{AuthError, Verified};
use airlock_core::ids::IdSyntaxError;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use crate::problem::Problem;
use crate::state::AppState;

/// The caller of a `/v1` request: the token's tenant, principal and scopes, nothing else
/// (SPEC §20). Missing, malformed, unknown, expired or revoked tokens are all 401.
///
/// An `alk_` token is looked up in the store; any other bearer token is checked against the
/// `[auth]` issuer when one is configured (issue 31), and is 401 otherwise. Why an issuer's
/// token was refused is logged (its reason code, never the token); the caller learns only that
/// it was.
pub struct Caller(pub Verified);

impl FromRequestParts<AppState> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        let presented = bearer(parts).ok_or(AuthError::Missing)?;
        match &state.issuer {
            Some(issuer) if !airlock_oauth::is_airlock_token(presented) => {
                issuer.verify(presented).await.map(Caller).map_err(|error| {
                    tracing::info!(reason = error.reason_code(), %error, "refused a bearer token of the issuer");
                    Problem::unauthenticated()
                })
            }
            _ => Ok(Caller(state.control.authenticate(presented)?.into())),
        }
    }
}

/// The token of an `Authorization: Bearer …` header (scheme case-insensitive, RFC 9110).
fn bearer(parts: &Parts) -> Option<&str> {
    airlock_core::access::bearer_token(parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?)
}

/// One id from the path, in the only spelling SPEC §2.2 allows; anything else is a 400.
pub struct IdPath<T>(pub T);

impl<T> FromRequestParts<AppState> for IdPath<T>
where
    T: FromStr<Err = IdSyntaxError> + Send,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        let axum::extract::Path(text) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|e| Problem::invalid(e.body_text()))?;
        text.parse()
            .map(IdPath)
            .map_err(|e: IdSyntaxError| Problem::invalid(e.to_string()))
    }
}

/// A query string read into `T`; a value that does not parse is a 400.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequestParts<AppState> for ApiQuery<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| ApiQuery(value))
            .map_err(|e| Problem::invalid(e.body_text()))
    }
}

/// A JSON body read into `T`. An empty body reads as `T::default()` when `T` allows it; a body
/// over the limit is a 413, anything that is not the expected JSON a 400.
pub struct ApiJson<T>(pub T);

/// The body as UTF-8 text, within the body limit.
pub async fn body_text(request: Request, state: &AppState) -> Result<String, Problem> {
    let bytes = Bytes::from_request(request, state).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Problem::too_large()
        } else {
            Problem::invalid(e.body_text())
        }
    })?;
    String::from_utf8(bytes.to_vec()).map_err(|_| Problem::invalid("the body is not UTF-8"))
}

impl<T: DeserializeOwned + Default + Send> FromRequest<AppState> for ApiJson<T> {
    type Rejection = Problem;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Problem> {
        let text = body_text(request, state).await?;
        // No body and a JSON `null` both mean "no options" (the body is optional).
        if text.trim().is_empty() || text.trim() == "null" {
            return Ok(ApiJson(T::default()));
        }
        json_object(&text).map(ApiJson)
    }
}

/// A JSON body with required fields: empty is a 400 like any other bad body.
pub struct RequiredJson<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequest<AppState> for RequiredJson<T> {
    type Rejection = Problem;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Problem> {
        let text = body_text(request, state).await?;
        json_object(&text).map(RequiredJson)
    }
}

/// A body that must be one JSON object (serde would also read a struct from an array).
fn json_object<T: DeserializeOwned>(text: &str) -> Result<T, Problem> {
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| Problem::invalid(format!("invalid JSON body: {e}")))?;
    if !value.is_object() {
        return Err(Problem::invalid("the body must be a JSON object"));
    }
    serde_json::from_value(value).map_err(|e| Problem::invalid(format!("invalid JSON body: {e}")))
}
