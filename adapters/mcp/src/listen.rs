//! The Streamable HTTP listener of `airlock mcp serve --listen` (SPEC §19.1, §19.6): MCP over
//! HTTP at `/mcp`, rmcp's Streamable HTTP server behind a guard of airlock's own.
//!
//! Each MCP session (an `initialize`, then requests carrying its `Mcp-Session-Id`) is one
//! client connection and one airlock session, opened by [`GatewayProcess::open`] exactly like
//! the stdio client's; it closes (DISCONNECT) when the session ends: the client's `DELETE`, the
//! session idle for [`SESSION_IDLE`] (no request, answer or notification either way), or the
//! listener shutting down. A session may hold several SSE streams at once (one per open POST,
//! plus the `GET` stream), as the transport allows.
//!
//! The guard, in this order, for every request:
//! 1. **Host** must name this listener (the listen address and port; for a loopback or
//!    unspecified address also `localhost`, `127.0.0.1` and `[::1]` with the port; plus the
//!    operator's `--listen-host` names): otherwise 421, so a page on a rebound DNS name reaches
//!    nothing (DNS-rebinding protection, as the MCP transport specification requires).
//! 2. **Origin**, when present, must be `http(s)://` one of those authorities: otherwise 403.
//! 3. **Token** (§20): `Authorization: Bearer alk_…`, checked against the store like every
//!    `/v1` request (`ControlService::authenticate`: only hashes are stored); missing, unknown,
//!    expired or revoked → 401. The token's tenant must be the file's (403 otherwise: no
//!    tenant crossing). The session's principal is the token's, with the token's scopes
//!    intersected with the file's. With `--listen-no-auth` (loopback only; the binary
//!    enforces that) a request without a token is the file's principal; a token, if sent, is
//!    still checked.
//! 4. **Session owner**: a request naming a session opened by another principal is 403.
//! 5. **Sessionless requests** other than `initialize` are 400: 2026-07-28's sessionless mode
//!    would make every request its own airlock session, and a run's taint would not reach the
//!    next call (an untrusted read, then an effect with no approval). Over HTTP the gateway
//!    therefore serves 2025-11-25 sessions; stdio serves both versions.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_core::access::{AuthError, bearer_token};
use airlock_core::store::Store;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::serve::{GatewayProcess, OpenConnection, SessionPrincipal};

/// The path MCP is served at.
pub const MCP_PATH: &str = "/mcp";

/// A session with no traffic either way for this long is closed (its connection
/// disconnects). A parked call whose client asked for progress hears every few seconds, so
/// it keeps its session; one without a `progressToken` may not outlive this.
pub const SESSION_IDLE: Duration = Duration::from_secs(300);

/// The largest sessionless body the guard reads to see whether it is an `initialize`.
const MAX_PEEK_BYTES: usize = 4 * 1024 * 1024;

/// The `Mcp-Session-Id` header.
const SESSION_HEADER: &str = "mcp-session-id";

/// How clients are let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenAuth {
    /// Every request carries a §20 token.
    Token,
    /// `--listen-no-auth`: a request without a token is the file's principal.
    NoneOnLoopback,
}

/// One `host` + `port` a client may name in `Host` or `Origin`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Authority {
    host: String,
    port: u16,
}

impl std::fmt::Display for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Reads `host[:port]` (brackets around IPv6), lower-cased; `default_port` when absent.
fn parse_authority(text: &str, default_port: u16) -> Option<Authority> {
    let authority: http::uri::Authority = text.parse().ok()?;
    if text.contains('@') {
        return None;
    }
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    Some(Authority {
        host,
        port: authority.port_u16().unwrap_or(default_port),
    })
}

/// The Host and Origin authorities this listener answers to.
#[derive(Debug, Clone)]
pub struct AllowedHosts(BTreeSet<Authority>);

/// A `--listen-host` value that is not a host name or `host:port`.
#[derive(Debug, thiserror::Error)]
#[error("--listen-host '{0}' is not a host name or host:port")]
pub struct BadListenHost(pub String);

impl AllowedHosts {
    /// The bound address (its real port), and the operator's extra names (`host` takes the
    /// bound port, `host:port` its own).
    pub fn new(bound: SocketAddr, extra: &[String]) -> Result<AllowedHosts, BadListenHost> {
        let port = bound.port();
        let mut set = BTreeSet::new();
        let ip = bound.ip();
        if !ip.is_unspecified() {
            set.insert(Authority {
                host: ip.to_string(),
                port,
            });
        }
        if ip.is_loopback() || ip.is_unspecified() {
            for host in ["localhost", "127.0.0.1", "::1"] {
                set.insert(Authority {
                    host: host.to_owned(),
                    port,
                });
            }
        }
        for name in extra {
            let authority =
                parse_authority(name, port).ok_or_else(|| BadListenHost(name.clone()))?;
            set.insert(authority);
        }
        Ok(AllowedHosts(set))
    }

    fn allows(&self, authority: &Authority) -> bool {
        self.0.contains(authority)
    }

    fn listing(&self) -> String {
        self.0
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The listener's settings.
#[derive(Debug, Clone)]
pub struct ListenSettings {
    pub hosts: AllowedHosts,
    pub auth: ListenAuth,
    /// Whether it is served over TLS (an `Origin` without a port then means 443).
    pub tls: bool,
}

tokio::task_local! {
    /// The caller of the request being handed to rmcp: a session opened while handling it
    /// belongs to this principal (rmcp's service factory sees no request).
    static CALLER: SessionPrincipal;
}

/// Open HTTP connections, so shutdown can wait for their runs to end.
#[derive(Default)]
struct OpenCount {
    open: AtomicUsize,
    changed: tokio::sync::Notify,
}

/// Closes its connection when rmcp drops the session's server.
struct ConnectionGuard<S: Store + 'static> {
    connection: Option<OpenConnection<S>>,
    count: Arc<OpenCount>,
}

impl<S: Store + 'static> Drop for ConnectionGuard<S> {
    fn drop(&mut self) {
        let Some(connection) = self.connection.take() else {
            return;
        };
        let count = Arc::clone(&self.count);
        let close = async move {
            if let Err(error) = connection.close().await {
                tracing::warn!(%error, "closing an HTTP client's connection failed; the sweep ends its runs");
            }
            count.open.fetch_sub(1, Ordering::SeqCst);
            count.changed.notify_waiters();
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(close);
            }
            // No runtime left: the lease lapses and the sweep ends the runs (§19.4).
            Err(_) => tracing::warn!("an HTTP client's connection was not closed"),
        }
    }
}

struct Guard<S: Store + 'static> {
    process: Arc<GatewayProcess<S>>,
    settings: ListenSettings,
    /// Which principal opened each session.
    owners: Mutex<BTreeMap<String, String>>,
}

/// The listener: its router, and what shutting it down needs.
pub struct Listener {
    pub router: Router,
    cancel: CancellationToken,
    count: Arc<OpenCount>,
}

impl Listener {
    /// Ends every session (each connection disconnects) and waits up to `wait` for their runs
    /// to end.
    pub async fn close(&self, wait: Duration) {
        self.cancel.cancel();
        let deadline = tokio::time::Instant::now() + wait;
        while self.count.open.load(Ordering::SeqCst) > 0 {
            let changed = self.count.changed.notified();
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return;
            }
        }
    }
}

/// The listener of `process`; serve its router on the bound socket.
pub fn listener<S: Store + 'static>(
    process: Arc<GatewayProcess<S>>,
    settings: ListenSettings,
) -> Listener {
    let cancel = CancellationToken::new();
    let count = Arc::new(OpenCount::default());
    // Host and Origin are the guard's (against this listener's own address); rmcp's own
    // loopback-name list is turned off so there is one rule, stated once.
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_cancellation_token(cancel.clone());
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(SESSION_IDLE);
    let factory = {
        let process = Arc::clone(&process);
        let count = Arc::clone(&count);
        move || {
            let who = CALLER
                .try_with(Clone::clone)
                .map_err(|_| std::io::Error::other("a session opened outside the guard"))?;
            let (session, connection) = process.open(&who).map_err(std::io::Error::other)?;
            count.open.fetch_add(1, Ordering::SeqCst);
            Ok(session.forwarding_list_changed().holding(ConnectionGuard {
                connection: Some(connection),
                count: Arc::clone(&count),
            }))
        }
    };
    let service = StreamableHttpService::new(factory, Arc::new(sessions), config);
    let guard = Arc::new(Guard {
        process,
        settings,
        owners: Mutex::new(BTreeMap::new()),
    });
    let router = Router::new()
        .route_service(MCP_PATH, service)
        .layer(middleware::from_fn_with_state(guard, guard_request::<S>));
    Listener {
        router,
        cancel,
        count,
    }
}

/// Why the guard refused a request: its status and a plain-text body saying why.
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    message: String,
}

fn refuse(status: StatusCode, message: String) -> Refusal {
    Refusal { status, message }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut response = (self.status, format!("airlock: {}\n", self.message)).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"airlock-mcp\""),
            );
        }
        response
    }
}

fn header_text<'r>(request: &'r Request, name: &str) -> Result<Option<&'r str>, ()> {
    match request.headers().get(name) {
        None => Ok(None),
        Some(value) => value.to_str().map(Some).map_err(|_| ()),
    }
}

/// Step 1 and 2 of the module docs.
fn check_host_and_origin(settings: &ListenSettings, request: &Request) -> Result<(), Refusal> {
    let default_port = if settings.tls { 443 } else { 80 };
    let host = header_text(request, "host")
        .ok()
        .flatten()
        .or_else(|| request.uri().authority().map(http::uri::Authority::as_str));
    let allowed = host
        .and_then(|h| parse_authority(h, default_port))
        .is_some_and(|a| settings.hosts.allows(&a));
    if !allowed {
        return Err(refuse(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "Host {:?} is not this listener (it answers to {}); refused against DNS rebinding",
                host.unwrap_or(""),
                settings.hosts.listing()
            ),
        ));
    }
    let origin = match header_text(request, "origin") {
        Ok(None) => return Ok(()),
        Ok(Some(origin)) => origin,
        Err(()) => {
            return Err(refuse(
                StatusCode::FORBIDDEN,
                "the Origin header is not text".to_owned(),
            ));
        }
    };
    let allowed = origin
        .split_once("://")
        .and_then(|(scheme, rest)| {
            let port = match scheme.to_ascii_lowercase().as_str() {
                "http" => 80,
                "https" => 443,
                _ => return None,
            };
            parse_authority(rest, port)
        })
        .is_some_and(|a| settings.hosts.allows(&a));
    if !allowed {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            format!(
                "Origin {origin:?} is not this listener (it answers to http(s)://{{{}}}); a web page \
                 of another origin may not use this MCP server",
                settings.hosts.listing()
            ),
        ));
    }
    Ok(())
}

/// Step 3 of the module docs: the session principal of the request.
fn caller<S: Store + 'static>(
    guard: &Guard<S>,
    request: &Request,
) -> Result<SessionPrincipal, Refusal> {
    let config = guard.process.config();
    let presented = match header_text(request, "authorization") {
        // An Authorization header that is not a bearer token is refused even under
        // --listen-no-auth: whoever sent it meant to authenticate.
        Ok(Some(value)) => bearer_token(value).ok_or(AuthError::Malformed),
        Ok(None) => Err(AuthError::Missing),
        Err(()) => Err(AuthError::Malformed),
    };
    let presented = match (presented, guard.settings.auth) {
        (Ok(token), _) => token,
        (Err(AuthError::Missing), ListenAuth::NoneOnLoopback) => {
            return Ok(SessionPrincipal::of_file(config));
        }
        (Err(error), _) => return Err(unauthorized(&error)),
    };
    let authenticated = guard
        .process
        .control()
        .authenticate(presented)
        .map_err(|e| unauthorized(&e))?;
    let token = authenticated.principal;
    if token.tenant_id != config.tenant_id {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "this token belongs to another tenant than this gateway's".to_owned(),
        ));
    }
    Ok(SessionPrincipal {
        principal_id: token.principal_id,
        scopes: token.scopes.intersection(&config.scopes).cloned().collect(),
    })
}

fn unauthorized(error: &AuthError) -> Refusal {
    if let AuthError::Storage(detail) = error {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the store could not check the token: {detail}"),
        );
    }
    refuse(
        StatusCode::UNAUTHORIZED,
        format!(
            "this MCP listener needs `Authorization: Bearer <token>` (airlock tokens create): {error}"
        ),
    )
}

async fn guard_request<S: Store + 'static>(
    State(guard): State<Arc<Guard<S>>>,
    request: Request,
    next: Next,
) -> Response {
    if let Err(refused) = check_host_and_origin(&guard.settings, &request) {
        return refused.into_response();
    }
    let who = match caller(&guard, &request) {
        Ok(who) => who,
        Err(refused) => return refused.into_response(),
    };
    let session = match header_text(&request, SESSION_HEADER) {
        Ok(session) => session.map(str::to_owned),
        Err(()) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "the Mcp-Session-Id header is not text".to_owned(),
            )
            .into_response();
        }
    };
    let request = match &session {
        Some(id) => {
            let owner = guard
                .owners
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(id)
                .cloned();
            if owner.is_some_and(|owner| owner != who.principal_id) {
                return refuse(
                    StatusCode::FORBIDDEN,
                    "this MCP session belongs to another principal".to_owned(),
                )
                .into_response();
            }
            request
        }
        None if request.method() == http::Method::POST => match only_initialize(request).await {
            Ok(request) => request,
            Err(refused) => return refused.into_response(),
        },
        None => request,
    };
    let deleting = request.method() == http::Method::DELETE;
    let response = CALLER.scope(who.clone(), next.run(request)).await;
    let opened = response
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut owners = guard.owners.lock().unwrap_or_else(|p| p.into_inner());
    match (opened, session) {
        (Some(opened), None) => {
            owners.insert(opened, who.principal_id);
        }
        (_, Some(closed)) if deleting && response.status().is_success() => {
            owners.remove(&closed);
        }
        _ => {}
    }
    response
}

/// Step 5 of the module docs: a POST without a session must be an `initialize`.
async fn only_initialize(request: Request) -> Result<Request, Refusal> {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_PEEK_BYTES)
        .await
        .map_err(|_| {
            refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is not readable or larger than {MAX_PEEK_BYTES} bytes"),
            )
        })?;
    let method = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("method").and_then(|m| m.as_str()).map(str::to_owned));
    if method.as_deref() != Some("initialize") {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "this listener serves MCP sessions: send `initialize` first, then every request \
             with its Mcp-Session-Id (a sessionless request would be an airlock session of its \
             own, and a run's taint would not reach the next call)"
                .to_owned(),
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(listen: &str, extra: &[&str]) -> AllowedHosts {
        let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        AllowedHosts::new(listen.parse().expect("addr"), &extra).expect("hosts")
    }

    fn allows(hosts: &AllowedHosts, text: &str) -> bool {
        parse_authority(text, 80).is_some_and(|a| hosts.allows(&a))
    }

    #[test]
    fn a_loopback_listener_answers_to_its_loopback_names_on_its_port_only() {
        let h = hosts("127.0.0.1:8931", &[]);
        for ok in [
            "127.0.0.1:8931",
            "localhost:8931",
            "LOCALHOST:8931",
            "[::1]:8931",
        ] {
            assert!(allows(&h, ok), "{ok}");
        }
        for bad in [
            "evil.example:8931",
            "127.0.0.1:8932",
            "localhost",
            "127.0.0.1",
            "user@127.0.0.1:8931",
            "",
        ] {
            assert!(!allows(&h, bad), "{bad}");
        }
    }

    #[test]
    fn a_specific_address_answers_to_itself_and_the_named_hosts() {
        let h = hosts(
            "10.1.2.3:443",
            &["mcp.example.com", "proxy.example.com:8443"],
        );
        assert!(allows(&h, "10.1.2.3:443"));
        assert!(allows(&h, "mcp.example.com:443"));
        assert!(allows(&h, "proxy.example.com:8443"));
        assert!(!allows(&h, "localhost:443"));
        assert!(!allows(&h, "proxy.example.com:443"));
        assert!(
            AllowedHosts::new("10.1.2.3:443".parse().expect("addr"), &["a b".to_owned()]).is_err()
        );
    }
}
