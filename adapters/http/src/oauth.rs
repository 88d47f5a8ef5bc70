//! The API as an OAuth 2.1 resource server (issue 31), when `airlock serve --config` has an
//! `[auth]` section: its protected-resource metadata (RFC 9728) is served without a token, and
//! every 401 points at it, so a client that holds no token learns where to get one. The tokens
//! themselves are checked by the [`Caller`](crate::extract::Caller) extractor.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::state::AppState;

/// `GET /.well-known/oauth-protected-resource[/path]`: the metadata document.
pub async fn metadata(State(state): State<AppState>) -> Response {
    let Some(issuer) = &state.issuer else {
        return crate::problem::Problem::no_route().into_response();
    };
    let (document, _) = issuer.metadata();
    let mut response = (StatusCode::OK, document.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Every 401 gets the issuer's challenge: `Bearer resource_metadata="…"`, and
/// `error="invalid_token"` when the request carried a token.
pub async fn challenge(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(issuer) = state.issuer.clone() else {
        return next.run(request).await;
    };
    let presented = request.headers().contains_key(header::AUTHORIZATION);
    let mut response = next.run(request).await;
    if response.status() == StatusCode::UNAUTHORIZED
        && let Ok(value) = HeaderValue::from_str(&issuer.challenge(presented))
    {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}
