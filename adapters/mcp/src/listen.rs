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
//!    expired or revoked → 401, with one body for all of them (as `/v1`: a caller learns only
//!    that its token does not work); a store that cannot check it → 503 without the store's
//!    text (that goes to the log). The token's tenant must be the file's (403 otherwise: no
//!    tenant crossing). The session's principal is the token's, with the token's scopes
//!    intersected with the file's. With `--listen-no-auth` (loopback only; the binary
//!    enforces that) a request without a token is the file's principal; a token, if sent, is
//!    still checked. With the file's `[auth]` section, a bearer token that is not `alk_…` is
//!    a JWT of that issuer, checked by `airlock-oauth` (signature, `iss`, `aud`, `exp`, …):
//!    its caller is the token's claims, held to the same tenant and scope rules, and every
//!    401 then carries `WWW-Authenticate: Bearer resource_metadata=…`, whose document is
//!    served outside the guard.
//! 4. **Session owner**: a session belongs to the token that opened it (under
//!    `--listen-no-auth` without a token, to the tokenless caller). A request naming it with
//!    any other credential is 403 and nothing is served, even for a token of the same
//!    principal: the session's scopes are the opening token's, and revoking that token must
//!    end what it opened.
//! 5. **Body**: a POST body that is not JSON is answered 400 with the JSON-RPC error −32700.
//! 6. **Sessionless requests.** An `initialize` opens a 2025-11-25 session. A request of
//!    2026-07-28 (its `_meta` or its `MCP-Protocol-Version` names that version) is served
//!    without a session (SPEC §23): its conversation is the store's row of (tenant, principal,
//!    token id, `_meta`'s `clientInfo.name`), which this process joins
//!    ([`GatewayProcess::sessionless`], [`crate::sessionless`]), so a client's taint and
//!    `[limits]` carry from one request to the next, and across gateway processes of one
//!    store. rmcp checks the rest of 2026-07-28's rules (the headers must match the body,
//!    −32020; required `_meta` keys, −32602). A sessionless 2026-07-28 notification is
//!    answered 202 and does nothing (that wire sends none: a cancel is the closed stream). A
//!    request naming another version gets −32022 `UnsupportedProtocolVersion` with `supported:
//!    ["2025-11-25", "2026-07-28"]`; any other sessionless request gets −32600 saying how to
//!    begin. A sessionless request takes no session slot of step 7; the conversations this
//!    process holds count against the same caps instead (a new client name beyond them is 429
//!    or 503 with `Retry-After`).
//!
//! Every refusal is a JSON-RPC error body (`application/json`, the request's id once the body
//! was read, `null` before), whose message says why; the HTTP status says which step refused.
//! 7. **Session caps**: an `initialize` beyond [`ListenSettings::max_sessions_per_credential`]
//!    open sessions of its token (default [`DEFAULT_MAX_SESSIONS_PER_CREDENTIAL`]) is 429,
//!    beyond [`ListenSettings::max_sessions`] in all (default [`DEFAULT_MAX_SESSIONS`]) 503,
//!    both with `Retry-After`.
//!
//! Sessions end when their token stops working: every [`TOKEN_RECHECK`] the listener checks
//! the token of each open session against the store (`ControlService::authenticate_id`), and
//! closes the session of a revoked, expired or deleted one, which ends its event streams and
//! its connection (DISCONNECT), as `/v1/events/stream` does. A session opened with an
//! issuer's token belongs to its issuer and subject (a refreshed token keeps it) and is closed
//! by the same pass once the latest token that used it expired: nothing can be asked of the
//! issuer. Idle sessions end after [`SESSION_IDLE`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_core::access::{AuthError, IssuedToken, Verified, VouchedBy, bearer_token};
use airlock_core::ids::ApiTokenId;
use airlock_core::store::Store;
use airlock_core::time::Timestamp;
use airlock_host::authority::{AllowedHosts, host_allowed, origin_allowed};
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::serve::{GatewayProcess, OpenConnection, SessionPrincipal};
use crate::server::ClientSession;
use airlock_core::conversation::ConversationKey;

/// The path MCP is served at.
pub const MCP_PATH: &str = "/mcp";

/// A session with no traffic either way for this long is closed (its connection
/// disconnects). A parked call whose client asked for progress hears every few seconds, so
/// it keeps its session; one without a `progressToken` may not outlive this.
pub const SESSION_IDLE: Duration = Duration::from_secs(300);

/// The largest POST body the guard reads (to check that it is JSON, and whether a
/// sessionless one is an `initialize`).
const MAX_PEEK_BYTES: usize = 4 * 1024 * 1024;

/// Open sessions one token (or the tokenless caller of `--listen-no-auth`) may hold, unless
/// the operator says otherwise (`--listen-max-sessions-per-token`). An agent host opens one
/// session per server it uses, so this leaves room for many hosts sharing a token.
pub const DEFAULT_MAX_SESSIONS_PER_CREDENTIAL: usize = 64;

/// Open sessions the listener holds in all, unless the operator says otherwise
/// (`--listen-max-sessions`). Each is an airlock connection with its renewal.
pub const DEFAULT_MAX_SESSIONS: usize = 512;

/// How often the token behind each open session is checked again.
pub const TOKEN_RECHECK: Duration = Duration::from_secs(2);

/// What a refused `initialize` over a cap is told to wait.
const RETRY_AFTER_SECONDS: u64 = 30;

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

/// The listener's settings.
#[derive(Debug, Clone)]
pub struct ListenSettings {
    pub hosts: AllowedHosts,
    pub auth: ListenAuth,
    /// Whether it is served over TLS (an `Origin` without a port then means 443).
    pub tls: bool,
    /// Open sessions one credential may hold (step 7 of the module docs).
    pub max_sessions_per_credential: usize,
    /// Open sessions in all.
    pub max_sessions: usize,
    /// The gateway file's `[auth]` issuer, whose bearer tokens are taken beside airlock
    /// tokens (step 3); `None`: airlock tokens only.
    pub issuer: Option<Arc<airlock_oauth::ResourceServer>>,
}

tokio::task_local! {
    /// The caller of the request being handed to rmcp: a session opened while handling it
    /// belongs to this principal (rmcp's service factory sees no request).
    static CALLER: SessionPrincipal;
    /// Set for a sessionless 2026-07-28 request: the conversation it belongs to (§22.1), and
    /// who sent it (for the caps).
    static CONVERSATION: (ConversationKey, String);
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

/// What a caller authenticated with: a session belongs to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Credential {
    Token(ApiTokenId),
    /// A token of the `[auth]` issuer: the first 16 bytes of the SHA-256 of its issuer and
    /// subject and of the caller its claims map to (tenant, principal, scopes). The subject,
    /// not the token, owns a session: a client refreshes its token within one session, and a
    /// new token of the same subject keeps it, but only while it maps to the same caller (a
    /// scope taken away at the issuer does not live on in a session opened before).
    Issued([u8; 16]),
    /// `--listen-no-auth` without a token: the file's principal.
    Tokenless,
}

impl Credential {
    fn issued(token: &IssuedToken, caller: &airlock_core::principal::Principal) -> Credential {
        let scopes: Vec<&str> = caller.scopes.iter().map(|s| s.as_str()).collect();
        let digest = ring::digest::digest(
            &ring::digest::SHA256,
            serde_json::json!([
                token.issuer,
                token.subject,
                caller.tenant_id,
                caller.principal_id,
                scopes
            ])
            .to_string()
            .as_bytes(),
        );
        let mut id = [0; 16];
        id.copy_from_slice(&digest.as_ref()[..16]);
        Credential::Issued(id)
    }

    /// The token's id (for an issuer's token, its subject's digest), part of a sessionless
    /// conversation's key (§22.1).
    fn token_id(self) -> Option<String> {
        match self {
            Credential::Token(id) => Some(id.to_string()),
            Credential::Issued(id) => Some(format!(
                "issuer:{}",
                airlock_core::policy::hex::encode(id.as_slice())
            )),
            Credential::Tokenless => None,
        }
    }
}

/// The open sessions and the `initialize` requests on their way to opening one.
#[derive(Default)]
struct SessionTable {
    owners: BTreeMap<String, Credential>,
    opening: BTreeMap<Credential, usize>,
    /// For a session of an issuer's tokens: the latest `exp` of a token that used it. The
    /// recheck closes it once that has passed (there is nothing to ask the issuer).
    valid_until: BTreeMap<String, Timestamp>,
}

impl SessionTable {
    fn held_by(&self, credential: Credential) -> usize {
        self.owners.values().filter(|c| **c == credential).count()
            + self.opening.get(&credential).copied().unwrap_or(0)
    }

    fn total(&self) -> usize {
        self.owners.len() + self.opening.values().sum::<usize>()
    }

    fn done_opening(&mut self, credential: Credential) {
        if let Some(count) = self.opening.get_mut(&credential) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.opening.remove(&credential);
            }
        }
    }
}

struct Guard<S: Store + 'static> {
    process: Arc<GatewayProcess<S>>,
    settings: ListenSettings,
    sessions: Mutex<SessionTable>,
    manager: Arc<LocalSessionManager>,
}

impl<S: Store + 'static> Guard<S> {
    fn table(&self) -> std::sync::MutexGuard<'_, SessionTable> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One pass of the token recheck (see the module docs): forgets sessions rmcp no longer
    /// has (idle, deleted), and closes those whose token stopped working. A store that cannot
    /// answer closes nothing: the next pass asks again.
    async fn recheck_tokens(&self) {
        let open: Vec<(String, Credential)> = self
            .table()
            .owners
            .iter()
            .map(|(id, c)| (id.clone(), *c))
            .collect();
        for (id, credential) in open {
            let session_id: rmcp::transport::common::server_side_http::SessionId =
                id.clone().into();
            let alive = self.manager.has_session(&session_id).await.unwrap_or(true);
            let token_works = match credential {
                Credential::Tokenless => true,
                Credential::Issued(_) => self
                    .table()
                    .valid_until
                    .get(&id)
                    .is_none_or(|until| unix_micros_now() < until.as_micros()),
                Credential::Token(token) => match self.process.control().authenticate_id(token) {
                    Ok(_) => true,
                    Err(AuthError::Storage(error)) => {
                        tracing::warn!(%error, "the store could not recheck a session's token");
                        true
                    }
                    Err(_) => false,
                },
            };
            if alive && token_works {
                continue;
            }
            if alive {
                tracing::info!(session = %id, "the token of an MCP session stopped working: the session ends");
                if let Err(error) = self.manager.close_session(&session_id).await {
                    tracing::warn!(%error, session = %id, "closing an MCP session failed");
                    continue;
                }
            }
            let mut table = self.table();
            table.owners.remove(&id);
            table.valid_until.remove(&id);
        }
    }
}

/// The wall clock in microseconds since 1970, as token expiries are kept.
fn unix_micros_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
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
            if let Ok((key, owner)) = CONVERSATION.try_with(Clone::clone) {
                return process
                    .sessionless(&who, (&key, &owner))
                    .map(ClientSession::traced)
                    .map_err(std::io::Error::other);
            }
            let (session, connection) = process.open(&who).map_err(std::io::Error::other)?;
            count.open.fetch_add(1, Ordering::SeqCst);
            Ok(session
                .forwarding_list_changed()
                .holding(ConnectionGuard {
                    connection: Some(connection),
                    count: Arc::clone(&count),
                })
                .traced())
        }
    };
    let manager = Arc::new(sessions);
    let service = StreamableHttpService::new(factory, Arc::clone(&manager), config);
    let metadata = settings.issuer.as_ref().map(|issuer| issuer.metadata());
    let guard = Arc::new(Guard {
        process,
        settings,
        sessions: Mutex::new(SessionTable::default()),
        manager,
    });
    {
        let guard = Arc::clone(&guard);
        let cancel = cancel.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(TOKEN_RECHECK) => guard.recheck_tokens().await,
                }
            }
        });
    }
    let router = Router::new()
        .route_service(MCP_PATH, service)
        .layer(middleware::from_fn_with_state(guard, guard_request::<S>));
    // The protected-resource metadata is public (RFC 9728): outside the guard.
    let router = match metadata {
        None => router,
        Some((document, paths)) => {
            let body = document.to_string();
            paths.iter().fold(router, |router, path| {
                let body = body.clone();
                router.route(
                    path,
                    axum::routing::get(move || async move {
                        ([(header::CONTENT_TYPE, "application/json")], body).into_response()
                    }),
                )
            })
        }
    };
    Listener {
        router,
        cancel,
        count,
    }
}

/// Why the guard refused a request: its HTTP status, and a JSON-RPC error body saying why
/// (SPEC §23: every error a JSON-RPC body, so an SDK shows the reason instead of a bare status).
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    /// The JSON-RPC error code: [`SERVER_ERROR`] unless the refusal has a code of its own.
    code: i32,
    message: String,
    /// The error's `data`, when its code defines one.
    data: Option<serde_json::Value>,
    /// The refused request's id, when the body was read (`null` before).
    id: serde_json::Value,
    retry_after: Option<u64>,
}

/// JSON-RPC's implementation-defined server error: a refusal at the HTTP layer (host, origin,
/// token, session owner, caps), whose HTTP status says which.
const SERVER_ERROR: i32 = -32000;
/// JSON-RPC's invalid request.
const INVALID_REQUEST: i32 = -32600;
/// MCP 2026-07-28's `UnsupportedProtocolVersion`: `data` is `{requested, supported}`.
const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32022;
/// JSON-RPC `HeaderMismatch` (SPEC §23): a header that contradicts the body.
const HEADER_MISMATCH: i32 = -32020;
/// The protocol versions this listener serves: sessions opened by `initialize` (2025-11-25),
/// and sessionless requests (2026-07-28).
const HTTP_VERSIONS: [&str; 2] = ["2025-11-25", SESSIONLESS_VERSION];
/// The version whose requests are served without a session (SPEC §23).
const SESSIONLESS_VERSION: &str = "2026-07-28";
/// Where a 2026-07-28 request names its client.
const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";
/// The longest request id or protocol version a refusal echoes.
const MAX_ECHOED: usize = 64;
/// Where a 2026-07-28 request names its protocol version.
const VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

fn refuse(status: StatusCode, message: String) -> Refusal {
    Refusal {
        status,
        code: SERVER_ERROR,
        message,
        data: None,
        id: serde_json::Value::Null,
        retry_after: None,
    }
}

/// 400 with the JSON-RPC parse error: the body is not JSON.
fn parse_error() -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32700, "message": "Parse error: the body is not JSON"},
    });
    let mut response = (StatusCode::BAD_REQUEST, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut error = serde_json::json!({
            "code": self.code,
            "message": format!("airlock: {}", self.message),
        });
        if let Some(data) = self.data {
            error["data"] = data;
        }
        let body = serde_json::json!({"jsonrpc": "2.0", "id": self.id, "error": error});
        let mut response = (self.status, body.to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
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
    if !host_allowed(&settings.hosts, host, default_port) {
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
    if !origin_allowed(&settings.hosts, origin) {
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

/// Step 3 of the module docs: the session principal of the request, its credential, and, for
/// an issuer's token, when it expires.
async fn caller<S: Store + 'static>(
    guard: &Guard<S>,
    authorization: Result<Option<String>, ()>,
) -> Result<(SessionPrincipal, Credential, Option<Timestamp>), Refusal> {
    let config = guard.process.config();
    let config = &*config;
    let presented = match authorization.as_ref().map(Option::as_deref) {
        // An Authorization header that is not a bearer token is refused even under
        // --listen-no-auth: whoever sent it meant to authenticate.
        Ok(Some(value)) => bearer_token(value).ok_or(AuthError::Malformed),
        Ok(None) => Err(AuthError::Missing),
        Err(()) => Err(AuthError::Malformed),
    };
    let presented = match (presented, guard.settings.auth) {
        (Ok(token), _) => token,
        (Err(AuthError::Missing), ListenAuth::NoneOnLoopback) => {
            return Ok((
                SessionPrincipal::of_file(config),
                Credential::Tokenless,
                None,
            ));
        }
        (Err(error), _) => return Err(unauthorized(&error)),
    };
    let verified: Verified = match &guard.settings.issuer {
        Some(issuer) if !airlock_oauth::is_airlock_token(presented) => {
            issuer.verify(presented).await.map_err(|error| {
                tracing::info!(reason = error.reason_code(), %error, "refused a bearer token of the issuer");
                unauthorized(&AuthError::Unknown)
            })?
        }
        _ => guard
            .process
            .control()
            .authenticate(presented)
            .map_err(|e| unauthorized(&e))?
            .into(),
    };
    let (credential, expires) = match &verified.by {
        VouchedBy::ApiToken(id) => (Credential::Token(*id), None),
        VouchedBy::Issuer(token) => (
            Credential::issued(token, &verified.principal),
            Some(token.expires_at),
        ),
    };
    let token = verified.principal;
    if token.tenant_id != config.tenant_id {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "this token belongs to another tenant than this gateway's".to_owned(),
        ));
    }
    Ok((
        SessionPrincipal {
            principal_id: token.principal_id,
            scopes: token.scopes.intersection(&config.scopes).cloned().collect(),
        },
        credential,
        expires,
    ))
}

/// 401 with one body whatever the token's fault (missing, malformed, unknown, expired,
/// revoked), as `/v1` answers; 503 when the store could not check it, its error logged only.
fn unauthorized(error: &AuthError) -> Refusal {
    if let AuthError::Storage(detail) = error {
        tracing::error!(error = %detail, "the store could not check an MCP listener token");
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "the store is unavailable; see the server log".to_owned(),
        );
    }
    refuse(
        StatusCode::UNAUTHORIZED,
        "a valid bearer token is required (`Authorization: Bearer <token>`; airlock tokens \
         create)"
            .to_owned(),
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
    let authorization = header_text(&request, "authorization").map(|v| v.map(str::to_owned));
    let (who, credential, expires) = match caller(&guard, authorization).await {
        Ok(caller) => caller,
        Err(refused) => {
            let mut response = refused.into_response();
            if response.status() == StatusCode::UNAUTHORIZED
                && let Some(issuer) = &guard.settings.issuer
                && let Ok(value) = HeaderValue::from_str(
                    &issuer.challenge(request.headers().contains_key(header::AUTHORIZATION)),
                )
            {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, value);
            }
            return response;
        }
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
    if let Some(id) = &session {
        let mut table = guard.table();
        let owner = table.owners.get(id).copied();
        if owner.is_some_and(|owner| owner != credential) {
            return refuse(
                StatusCode::FORBIDDEN,
                "this MCP session belongs to the token that opened it; send that token".to_owned(),
            )
            .into_response();
        }
        if owner.is_some()
            && let Some(expires) = expires
        {
            let until = table.valid_until.entry(id.clone()).or_insert(expires);
            *until = (*until).max(expires);
        }
    }
    let request = if request.method() == http::Method::POST {
        match read_json_body(request, session.is_none()).await {
            Ok(PostBody::OfSession(request)) => request,
            Ok(PostBody::Sessionless {
                request,
                client,
                id,
            }) => {
                let token = credential.token_id();
                let key = ConversationKey::of(&who.principal_id, token.as_deref(), &client);
                let owner = token.unwrap_or_else(|| "tokenless".to_owned());
                let caps = (
                    guard.settings.max_sessions_per_credential,
                    guard.settings.max_sessions,
                );
                if let Err(full) = guard.process.sessionless_room(&key, &owner, caps) {
                    return Refusal {
                        id,
                        ..conversations_full(full)
                    }
                    .into_response();
                }
                return CALLER
                    .scope(who, CONVERSATION.scope((key, owner), next.run(request)))
                    .await;
            }
            Err(BodyRefusal::NotJson) => return parse_error(),
            Err(BodyRefusal::Refused(refused)) => return refused.into_response(),
            Err(BodyRefusal::Accepted) => return StatusCode::ACCEPTED.into_response(),
        }
    } else {
        request
    };
    let opening = session.is_none() && request.method() == http::Method::POST;
    if opening && let Err(refused) = reserve_session(&guard, credential) {
        return refused.into_response();
    }
    let deleting = request.method() == http::Method::DELETE;
    let response = CALLER.scope(who, next.run(request)).await;
    let opened = response
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut table = guard.table();
    if opening {
        table.done_opening(credential);
    }
    match (opened, session) {
        (Some(opened), None) => {
            if let Some(expires) = expires {
                table.valid_until.insert(opened.clone(), expires);
            }
            table.owners.insert(opened, credential);
        }
        (_, Some(closed)) if deleting && response.status().is_success() => {
            table.owners.remove(&closed);
            table.valid_until.remove(&closed);
        }
        _ => {}
    }
    response
}

/// Step 7 of the module docs: room for one more session of `credential`, held until the
/// `initialize` is answered.
fn reserve_session<S: Store + 'static>(
    guard: &Guard<S>,
    credential: Credential,
) -> Result<(), Refusal> {
    let (per_credential, in_all) = (
        guard.settings.max_sessions_per_credential,
        guard.settings.max_sessions,
    );
    let mut table = guard.table();
    let over = if table.held_by(credential) >= per_credential {
        Some((
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "this token already holds {per_credential} open MCP sessions; end one (DELETE) \
                 or let one idle out"
            ),
        ))
    } else if table.total() >= in_all {
        Some((
            StatusCode::SERVICE_UNAVAILABLE,
            format!("this listener holds {in_all} open MCP sessions, its limit"),
        ))
    } else {
        None
    };
    if let Some((status, message)) = over {
        return Err(Refusal {
            retry_after: Some(RETRY_AFTER_SECONDS),
            ..refuse(status, message)
        });
    }
    *table.opening.entry(credential).or_default() += 1;
    Ok(())
}

/// Step 7 for sessionless conversations: a 2026-07-28 request that would open a new
/// conversation beyond the caps is 429 (its token's) or 503 (the listener's), with `Retry-After`.
fn conversations_full(full: crate::sessionless::Full) -> Refusal {
    let (status, message) = match full {
        crate::sessionless::Full::Owner(n) => (
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "this token already holds {n} open 2026-07-28 conversations here (one per client \
                 name); reuse a client name or let one idle out"
            ),
        ),
        crate::sessionless::Full::Process(n) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("this listener holds {n} open 2026-07-28 conversations, its limit"),
        ),
    };
    Refusal {
        retry_after: Some(RETRY_AFTER_SECONDS),
        ..refuse(status, message)
    }
}

/// Why a POST body was not let through.
enum BodyRefusal {
    NotJson,
    Refused(Refusal),
    /// A sessionless 2026-07-28 notification: nothing to do (the 2026-07-28 HTTP wire sends
    /// none; a cancel is the request's closed stream), answered 202 like rmcp would.
    Accepted,
}

/// What a POST body is, for the guard.
enum PostBody {
    /// A request or notification of a session, or an `initialize` opening one.
    OfSession(Request),
    /// A sessionless 2026-07-28 request (SPEC §23), with the name its client gives itself
    /// (`_meta["io.modelcontextprotocol/clientInfo"].name`, empty when it gives none): with
    /// the caller, its conversation's key (§22.1).
    Sessionless {
        request: Request,
        client: String,
        /// The request's id, for a refusal to echo.
        id: serde_json::Value,
    },
}

/// The version a sessionless message names: its `_meta`'s, else the `MCP-Protocol-Version`
/// header's (rmcp checks afterwards that both agree, −32020 otherwise).
fn named_version<'m>(
    message: &'m serde_json::Value,
    header_version: Option<&'m str>,
) -> Option<&'m str> {
    message
        .pointer("/params/_meta")
        .and_then(|meta| meta.get(VERSION_META))
        .and_then(serde_json::Value::as_str)
        .or(header_version)
}

/// The id a refusal of `message` echoes: JSON-RPC ids are strings or numbers; anything else is
/// not echoed (nor a long string).
fn echoable_id(message: &serde_json::Value) -> serde_json::Value {
    match message.get("id") {
        Some(id @ serde_json::Value::Number(_)) => id.clone(),
        Some(id @ serde_json::Value::String(text)) if text.len() <= MAX_ECHOED => id.clone(),
        _ => serde_json::Value::Null,
    }
}

/// Step 6 of the module docs: a sessionless message that is neither an `initialize` nor of
/// 2026-07-28. One that names a protocol version this listener does not serve is told so with
/// −32022 and the versions it does serve, on which a client of both eras picks one; any other is
/// told how to begin.
fn sessionless_refusal(message: &serde_json::Value, header_version: Option<&str>) -> Refusal {
    let id = echoable_id(message);
    // A header that contradicts the body is the first thing wrong with it, whatever it names.
    let body_version = named_version(message, None);
    if let (Some(header), Some(body)) = (header_version, body_version)
        && header != body
    {
        let shown = |v: &str| v.chars().take(MAX_ECHOED).collect::<String>();
        return Refusal {
            code: HEADER_MISMATCH,
            id,
            ..refuse(
                StatusCode::BAD_REQUEST,
                format!(
                    "the MCP-Protocol-Version header ({}) does not match the request's `_meta` \
                     protocol version ({})",
                    shown(header),
                    shown(body)
                ),
            )
        };
    }
    let requested = named_version(message, header_version)
        .filter(|version| !HTTP_VERSIONS.contains(version))
        .map(|version| version.chars().take(MAX_ECHOED).collect::<String>());
    match requested {
        Some(requested) => Refusal {
            status: StatusCode::BAD_REQUEST,
            code: UNSUPPORTED_PROTOCOL_VERSION,
            message: format!(
                "protocol version {requested} is not served by this gateway; it serves {} \
                 (2025-11-25 in a session opened with `initialize`, 2026-07-28 without one)",
                HTTP_VERSIONS.join(" and ")
            ),
            data: Some(serde_json::json!({"requested": requested, "supported": HTTP_VERSIONS})),
            id,
            retry_after: None,
        },
        None => Refusal {
            code: INVALID_REQUEST,
            id,
            ..refuse(
                StatusCode::BAD_REQUEST,
                "a request without an Mcp-Session-Id must be an `initialize` (2025-11-25: then \
                 send its session id with every request) or a 2026-07-28 request naming its \
                 version in `_meta` and the MCP-Protocol-Version header"
                    .to_owned(),
            )
        },
    }
}

/// Steps 5 and 6 of the module docs: a POST body must be JSON, and a sessionless one an
/// `initialize` or of 2026-07-28.
async fn read_json_body(request: Request, sessionless: bool) -> Result<PostBody, BodyRefusal> {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_PEEK_BYTES)
        .await
        .map_err(|_| {
            BodyRefusal::Refused(refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is not readable or larger than {MAX_PEEK_BYTES} bytes"),
            ))
        })?;
    let message =
        serde_json::from_slice::<serde_json::Value>(&bytes).map_err(|_| BodyRefusal::NotJson)?;
    let method = message.get("method").and_then(|m| m.as_str());
    if !sessionless || method == Some("initialize") {
        return Ok(PostBody::OfSession(Request::from_parts(
            parts,
            Body::from(bytes),
        )));
    }
    let header_version = parts
        .headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok());
    if named_version(&message, header_version) == Some(SESSIONLESS_VERSION) && method.is_some() {
        if message.get("id").is_none() {
            return Err(BodyRefusal::Accepted);
        }
        let client = message
            .pointer("/params/_meta")
            .and_then(|meta| meta.get(CLIENT_INFO_META))
            .and_then(|info| info.get("name"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        return Ok(PostBody::Sessionless {
            id: echoable_id(&message),
            request: Request::from_parts(parts, Body::from(bytes)),
            client,
        });
    }
    Err(BodyRefusal::Refused(sessionless_refusal(
        &message,
        header_version,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_failures_share_one_body_and_a_store_failure_hides_its_text() {
        let bodies: Vec<String> = [
            AuthError::Missing,
            AuthError::Malformed,
            AuthError::Unknown,
            AuthError::Expired,
            AuthError::Revoked,
        ]
        .iter()
        .map(|e| {
            let refusal = unauthorized(e);
            assert_eq!(refusal.status, StatusCode::UNAUTHORIZED);
            refusal.message
        })
        .collect();
        assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{bodies:?}");
        let storage = unauthorized(&AuthError::Storage(
            "database disk image is malformed".to_owned(),
        ));
        assert_eq!(storage.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            !storage.message.contains("malformed"),
            "{}",
            storage.message
        );
    }

    /// SPEC §23: a sessionless request naming a version the listener does not serve gets
    /// −32022 with the versions it does (its id kept), by `_meta` or by header; one naming none
    /// (or 2025-11-25, a client that lost its session) is told how to begin.
    #[test]
    fn a_sessionless_request_learns_which_versions_are_served() {
        let discover = serde_json::json!({
            "jsonrpc": "2.0", "id": 7, "method": "server/discover",
            "params": {"_meta": {VERSION_META: "2099-01-01"}},
        });
        let refusal = sessionless_refusal(&discover, None);
        assert_eq!(refusal.code, UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(refusal.id, serde_json::json!(7));
        assert_eq!(
            refusal.data,
            Some(serde_json::json!({
                "requested": "2099-01-01",
                "supported": ["2025-11-25", "2026-07-28"]
            }))
        );
        let mismatch = sessionless_refusal(&discover, Some("2026-07-28"));
        assert_eq!(
            mismatch.code, HEADER_MISMATCH,
            "the header contradicts the body"
        );
        assert_eq!(mismatch.status, StatusCode::BAD_REQUEST);
        let list = serde_json::json!({"jsonrpc": "2.0", "id": "a", "method": "tools/list"});
        let by_header = sessionless_refusal(&list, Some("2099-01-01"));
        assert_eq!(by_header.code, UNSUPPORTED_PROTOCOL_VERSION);
        for header in [None, Some("2025-11-25")] {
            let refusal = sessionless_refusal(&list, header);
            assert_eq!(refusal.code, INVALID_REQUEST, "{header:?}");
            assert_eq!(refusal.data, None);
            assert!(
                refusal.message.contains("initialize") && refusal.message.contains("2026-07-28"),
                "{}",
                refusal.message
            );
        }
    }

    /// A refusal echoes a request id only if it is a number or a short string, and a requested
    /// version only up to 64 characters.
    #[test]
    fn a_refusal_echoes_only_short_ids_and_versions() {
        let long = "v".repeat(1000);
        for id in [
            serde_json::json!({"a": 1}),
            serde_json::json!([1]),
            serde_json::json!(long),
        ] {
            let request = serde_json::json!({
                "jsonrpc": "2.0", "id": id, "method": "tools/list",
                "params": {"_meta": {VERSION_META: long}},
            });
            let refusal = sessionless_refusal(&request, None);
            assert_eq!(refusal.id, serde_json::Value::Null, "{id}");
            assert_eq!(
                refusal
                    .data
                    .as_ref()
                    .and_then(|d| d["requested"].as_str())
                    .map(str::len),
                Some(MAX_ECHOED)
            );
        }
    }

    #[test]
    fn the_session_table_counts_open_and_opening_sessions_per_credential() {
        let token = Credential::Token(ApiTokenId(uuid::Uuid::from_u128(1)));
        let mut table = SessionTable::default();
        table.owners.insert("s1".to_owned(), token);
        table.owners.insert("s2".to_owned(), Credential::Tokenless);
        *table.opening.entry(token).or_default() += 2;
        assert_eq!(table.held_by(token), 3);
        assert_eq!(table.held_by(Credential::Tokenless), 1);
        assert_eq!(table.total(), 4);
        table.done_opening(token);
        table.done_opening(token);
        table.done_opening(token);
        assert_eq!(table.held_by(token), 1);
        assert!(table.opening.is_empty());
    }
}
