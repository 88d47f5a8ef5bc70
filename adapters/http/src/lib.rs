//! airlock-http translates and decides nothing.
//!
//! It binds core's `ControlService` to the HTTP API and the web console of SPEC §20: every
//! request becomes at most one `ControlService` call, made as the principal its token (or
//! console session) names and as nothing the request says. Approval, run and settlement state
//! change only inside core; this crate maps answers to status codes, problem+json bodies,
//! Server-Sent Events and escaped HTML. It knows no store: whatever implements core's `Store`
//! port plugs in through [`service::Control`]; among airlock's crates it depends on core and
//! on the host crate's Host and Origin allow-list (structural test).
//!
//! - [`api`]: the `/v1` routes, [`stream`]: the event stream, [`openapi`]: their document.
//! - [`console`]: the server-rendered console, every asset embedded in the binary.
//! - [`server`]: binding, TLS and the loopback rule of `airlock serve`.
//! - [`oauth`]: the metadata and 401 challenge of an `[auth]` issuer (`airlock-oauth` checks
//!   its tokens).

pub mod admin;
pub mod api;
pub mod console;
pub mod extract;
pub mod notify;
pub mod oauth;
pub mod openapi;
pub mod policy_reload;
pub mod problem;
pub mod secret;
pub mod server;
pub mod service;
pub mod state;
pub mod stream;
pub mod wire;

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Router, middleware};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::set_header::SetResponseHeaderLayer;

use airlock_host::authority::host_allowed;

use crate::problem::{PROBLEM_JSON, Problem};
pub use crate::state::{AppState, Settings};

/// The largest request body (SPEC §20): larger ones are refused with 413.
pub const BODY_LIMIT_BYTES: usize = 1024 * 1024;

/// The whole application: `/healthz`, the `/v1` API and the console.
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/healthz", get(api::healthz))
        .route("/v1/approvals", get(api::list_approvals))
        .route("/v1/approvals/{id}", get(api::get_approval))
        .route("/v1/approvals/{id}/approve", post(api::approve))
        .route("/v1/approvals/{id}/deny", post(api::deny))
        .route("/v1/invocations/uncertain", get(api::list_uncertain))
        .route("/v1/invocations/{id}/settle", post(api::settle))
        .route("/v1/runs", post(api::submit_run))
        .route("/v1/runs/{id}", get(api::get_run))
        .route("/v1/runs/{id}/events", get(api::run_events))
        .route("/v1/runs/{id}/cancel", post(api::cancel_run))
        .route("/v1/conversations", get(api::list_conversations))
        .route("/v1/conversations/{id}", get(api::get_conversation))
        .route(
            "/v1/conversations/{id}/clear-taint",
            post(api::clear_conversation_taint),
        )
        .route("/v1/events/stream", get(stream::stream))
        .route("/v1/admin/reload", post(admin::reload))
        .route(
            "/v1/notify/targets",
            get(notify::list_targets).post(notify::add_target),
        )
        .route(
            "/v1/notify/targets/{id}",
            axum::routing::delete(notify::remove_target),
        )
        .route("/v1/openapi.json", get(openapi::openapi));
    let metadata_paths = state
        .issuer
        .as_ref()
        .map(|issuer| issuer.metadata().1)
        .unwrap_or_default();
    let api = metadata_paths
        .iter()
        .fold(api, |api, path| api.route(path, get(oauth::metadata)));
    api.merge(console::routes())
        .fallback(|| async { Problem::no_route() })
        .layer(middleware::from_fn_with_state(
            state.clone(),
            oauth::challenge,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            this_server_only,
        ))
        .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
        .layer(RequestBodyLimitLayer::new(BODY_LIMIT_BYTES))
        .layer(middleware::map_response(problems_for_bare_errors))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        // `same-origin`, not `no-referrer`: under `no-referrer` browsers send `Origin: null` on
        // form POSTs, and the console's origin check would refuse its own forms.
        .layer(SetResponseHeaderLayer::overriding(
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            HeaderName::from_static("cross-origin-opener-policy"),
            HeaderValue::from_static("same-origin"),
        ))
        .with_state(state)
}

/// Only this server's own scripts and styles, no inline script at all: even if some value
/// escaped the templates, a browser would not run it.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; \
    frame-ancestors 'none'; base-uri 'none'";

/// 421 for a request whose `Host` names another server (see [`Settings::hosts`]).
async fn this_server_only(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: middleware::Next,
) -> Response {
    if let Some(hosts) = &state.settings.hosts {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .or_else(|| request.uri().authority().map(|a| a.as_str()));
        let default_port = if state.settings.tls { 443 } else { 80 };
        if !host_allowed(hosts, host, default_port) {
            return Problem::new(
                StatusCode::MISDIRECTED_REQUEST,
                "misdirected_request",
                format!(
                    "this server answers to {}, not to the Host this request names (refused \
                     against DNS rebinding; airlock serve --listen-host adds a name)",
                    hosts.listing()
                ),
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// Errors produced below the handlers (the body-limit layer's 413, the router's 405) arrive
/// without a body; they get the same problem+json as every other error.
async fn problems_for_bare_errors(response: Response) -> Response {
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(PROBLEM_JSON.as_bytes()));
    if is_problem {
        return response;
    }
    match response.status() {
        StatusCode::PAYLOAD_TOO_LARGE => Problem::too_large().into_response(),
        StatusCode::METHOD_NOT_ALLOWED => {
            let allow = response.headers().get(header::ALLOW).cloned();
            let mut problem = Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this resource does not answer that method",
            )
            .into_response();
            if let Some(allow) = allow {
                problem.headers_mut().insert(header::ALLOW, allow);
            }
            problem
        }
        _ => response,
    }
}
