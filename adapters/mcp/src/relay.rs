//! In-call relays (SPEC §19.6): while a client's `tools/call` is forwarded, what the upstream
//! says about that call reaches that client, and what the upstream asks of the client is asked of
//! that client. Relaying is translation only: whether the call runs is core's, and airlock never
//! answers an upstream's request itself.
//!
//! **Routing.** Upstream connections are shared by every client session of a gateway, so each
//! forwarded call is registered with its upstream under the `progressToken` the gateway's request
//! carries upstream (rmcp gives every outgoing request a fresh one of the connection's own):
//! - `notifications/progress` is routed by that token, exactly, and sent to the client under the
//!   client's own token (the two token spaces never meet: the client's token never goes upstream,
//!   the gateway's never reaches the client). While a call was parked the gateway sent its own
//!   progress on the client's token; the upstream's progress is counted on from there so the
//!   client sees it only increase.
//! - `sampling/createMessage`, `elicitation/create` and `roots/list` carry no request
//!   association on the wire of a 2025-11-25 stdio connection. They go to the call whose gateway
//!   token the request's `_meta.progressToken` names, else to the only call in flight on that
//!   upstream. With several calls in flight (two clients' calls on the same upstream at once),
//!   the upstream is answered an error: guessing could hand one client's data to another. With
//!   none, sampling and elicitation are answered an error too, and `roots/list` with FILE's
//!   `roots` of that server, or an empty list (SPEC §23).
//!   On 2026-07-28 they come inside the call's own input-required result, so they always go to
//!   that call's client: asked of a 2025-11-25 client in the call ([`UpstreamRelay::input`]),
//!   answered to a 2026-07-28 client as an input-required result of its own ([`crate::round`]).
//! - `notifications/message` follows the same rule; one that comes outside any call goes to every
//!   connected client whose `logging/setLevel` admits it (all of them until they ask), since
//!   the upstream is shared and nothing names one client (SPEC §19.7). In a call it goes to the
//!   call's client as the upstream sent it.
//!
//! **Capabilities.** The upstream connection is opened before any client connects, so it declares
//! what the gateway can relay (sampling, form and URL elicitation, roots); each relayed request is
//! then checked against what the target client declared, and refused with −32601 when it did not
//! declare it. A 2026-07-28 client cannot be sent server-to-client requests (rmcp refuses them on
//! that version), so a 2025-11-25 upstream's in-call request for such a client is answered
//! −32601: turning it into an input-required result would end the client's request while the
//! upstream's call still waits for its answer (not built; a 2026-07-28 upstream's rounds are
//! relayed, [`crate::round`]).

// Sampling, roots and logging are deprecated by SEP-2577 in rmcp; relaying them is the point.
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use airlock_core::connection::live::{RequestKey, Ticket, TicketStatus};
use airlock_core::events::EventType;
use airlock_core::ids::{ConnectionId, RunId, SessionId};
use rmcp::model::{
    ClientCapabilities, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ErrorCode, InputRequest, InputRequiredResult, ListRootsResult, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    Root,
};
use rmcp::service::{RequestContext, RoleServer, ServiceError};
use rmcp::{ErrorData, Peer};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::process_events::{EventSink, Now, process_event};
use crate::round::{HeldCalls, HeldRequest, Round};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The client side of one call in flight: where its relays go.
#[derive(Clone)]
pub struct ClientLink {
    peer: Peer<RoleServer>,
    progress_token: Option<ProgressToken>,
    ticket: Ticket,
    /// Progress notifications the gateway itself sent on the client's token while the call was
    /// parked.
    parked_progress: Arc<AtomicU32>,
    /// The protocol version of the client's request (a 2026-07-28 request names it in its
    /// `_meta`; a 2025-11-25 session negotiated it at `initialize`).
    version: Option<ProtocolVersion>,
    /// What the client declared, for this request (2026-07-28) or at `initialize`.
    capabilities: Option<ClientCapabilities>,
    /// A 2026-07-28 retry's answers to its upstream's input-required round ([`crate::round`]).
    round: Round,
    /// The log level a 2026-07-28 request named in its `_meta` (none: it hears no log
    /// messages); unused for a 2025-11-25 session, whose `logging/setLevel` decides.
    log_level: Option<LoggingLevel>,
    /// Where a 2025-11-25 upstream's in-call request for a 2026-07-28 client goes: to the
    /// client's request, which answers it as an input-required round ([`crate::round`]).
    held: Option<mpsc::UnboundedSender<HeldRequest>>,
    /// The span of the client's request (telemetry): the upstream call is its child.
    span: tracing::Span,
}

impl ClientLink {
    pub fn new(
        context: &RequestContext<RoleServer>,
        ticket: Ticket,
        parked_progress: Arc<AtomicU32>,
    ) -> ClientLink {
        ClientLink {
            peer: context.peer.clone(),
            progress_token: context.meta.get_progress_token(),
            ticket,
            parked_progress,
            version: context.protocol_version(),
            capabilities: context.client_capabilities(),
            round: Round::default(),
            log_level: context.meta.log_level(),
            held: None,
            // Made inside the request's span ([`crate::telemetry::Traced`]).
            span: tracing::Span::current(),
        }
    }

    /// The span of the client's request.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The link of a 2026-07-28 client's call whose upstream's in-call requests go to `held`.
    pub fn with_held(mut self, held: mpsc::UnboundedSender<HeldRequest>) -> ClientLink {
        self.held = Some(held);
        self
    }

    /// The link of a retry that answers an upstream's input-required round.
    pub fn with_round(mut self, round: Round) -> ClientLink {
        self.round = round;
        self
    }

    /// What the retry carries upstream (empty for a first request).
    pub fn round(&self) -> &Round {
        &self.round
    }

    /// Whether the client speaks 2026-07-28 (no `initialize`): it is answered an upstream's
    /// input-required round, never sent requests ([`crate::round`]).
    pub fn is_modern(&self) -> bool {
        self.version
            .as_ref()
            .is_some_and(|version| !version.has_initialize())
    }

    /// For a 2026-07-28 client, the log level its request named (`Some(None)`: none, so it
    /// hears no log messages); `None` for a 2025-11-25 session.
    pub fn request_log_level(&self) -> Option<Option<LoggingLevel>> {
        self.is_modern().then_some(self.log_level)
    }

    /// What the client declared, if known.
    pub fn capabilities(&self) -> Option<&ClientCapabilities> {
        self.capabilities.as_ref()
    }

    /// Whether the client asked for progress on this call.
    pub fn wants_progress(&self) -> bool {
        self.progress_token.is_some()
    }

    /// Whether this is the request handed to `run` as step `step`.
    fn serves(&self, run: RunId, step: u32) -> bool {
        match self.ticket.status() {
            TicketStatus::Proposed { run: r, step: s } => r == run && s == step,
            // A call approved after it parked keeps that status until it is answered.
            TicketStatus::Parked { run: r, .. } => r == run,
            TicketStatus::Queued => false,
        }
    }
}

/// The gateway's client sessions and their calls, for the upstream tool bodies to find the
/// client of the call they serve.
#[derive(Default)]
pub struct Clients {
    sessions: Mutex<BTreeMap<SessionId, Attached>>,
    calls: Mutex<BTreeMap<(ConnectionId, RequestKey), ClientLink>>,
    /// 2026-07-28 clients' calls whose 2025-11-25 upstream waits for their answer.
    held: HeldCalls,
}

/// A client session: the connection that plans its runs, and its client.
struct Attached {
    connection: ConnectionId,
    peer: Option<Peer<RoleServer>>,
    /// The least severe log level it asked for (`logging/setLevel`); `None` until it asks.
    level: Option<LoggingLevel>,
}

/// Whether a client that asked for `wanted` hears a log message of `level`: one at least as
/// severe (MCP's levels are syslog's, RFC 5424). A client that never asked hears every
/// message, as MCP leaves the choice to the server until it asks.
pub fn admits(wanted: Option<LoggingLevel>, level: LoggingLevel) -> bool {
    wanted.is_none_or(|wanted| severity(level) >= severity(wanted))
}

/// The syslog order of MCP's log levels, least severe first.
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// Removes a call's link when its request ends.
pub struct CallRegistration {
    clients: Arc<Clients>,
    key: (ConnectionId, RequestKey),
}

impl Drop for CallRegistration {
    fn drop(&mut self) {
        lock(&self.clients.calls).remove(&self.key);
    }
}

impl Clients {
    pub fn new() -> Arc<Clients> {
        Arc::new(Clients::default())
    }

    /// The calls this process holds for 2026-07-28 clients' answers ([`crate::round`]).
    pub fn held(&self) -> &HeldCalls {
        &self.held
    }

    /// Connection `connection` plans the runs of `session`; `peer` is its client.
    pub fn attach(
        &self,
        session: SessionId,
        connection: ConnectionId,
        peer: Option<Peer<RoleServer>>,
    ) {
        let mut sessions = lock(&self.sessions);
        let level = sessions.get(&session).and_then(|a| a.level);
        sessions.insert(
            session,
            Attached {
                connection,
                peer,
                level,
            },
        );
    }

    /// `session`'s client asked for log messages of `level` and above (its own filter is
    /// [`admits`]; what the shared upstreams are told is [`Clients::least_severe_level`]).
    pub fn set_level(&self, session: SessionId, level: LoggingLevel) {
        if let Some(attached) = lock(&self.sessions).get_mut(&session) {
            attached.level = Some(level);
        }
    }

    /// The level the shared upstreams must send at so that every client hears what it asked
    /// for: the least severe any connected client asked for. Read just before each upstream is
    /// told, so two clients asking at once do not leave a stale level upstream.
    pub fn least_severe_level(&self) -> Option<LoggingLevel> {
        lock(&self.sessions)
            .values()
            .filter_map(|a| a.level)
            .min_by_key(|l| severity(*l))
    }

    pub fn detach(&self, session: SessionId) {
        lock(&self.sessions).remove(&session);
    }

    /// Submits a request with `submit` and registers its link in one step, so the body that
    /// serves it always finds it.
    pub fn register(
        self: &Arc<Self>,
        connection: ConnectionId,
        key: RequestKey,
        submit: impl FnOnce() -> Ticket,
        link: impl FnOnce(Ticket) -> ClientLink,
    ) -> (Ticket, CallRegistration) {
        let mut calls = lock(&self.calls);
        let ticket = submit();
        calls.insert((connection, key), link(ticket.clone()));
        (
            ticket,
            CallRegistration {
                clients: Arc::clone(self),
                key: (connection, key),
            },
        )
    }

    /// The client of the call `session`'s run `run` makes at step `step`; `None` when it is not
    /// a live client's (a scripted run) or its client went.
    pub fn link_of(&self, session: SessionId, run: RunId, step: u32) -> Option<ClientLink> {
        let connection = lock(&self.sessions).get(&session)?.connection;
        lock(&self.calls)
            .range((connection, 0)..=(connection, RequestKey::MAX))
            .map(|(_, link)| link)
            .find(|link| link.serves(run, step))
            .cloned()
    }

    /// The clients a log message of `level` outside any call goes to (SPEC §19.7): every
    /// session whose client is connected, began with `initialize` (a 2026-07-28 client is sent
    /// nothing outside its own requests) and whose level admits it.
    fn log_audience(&self, level: LoggingLevel) -> Vec<Peer<RoleServer>> {
        lock(&self.sessions)
            .values()
            .filter(|a| admits(a.level, level))
            .filter_map(|a| a.peer.clone())
            .filter(|peer| peer.peer_info().is_some())
            .collect()
    }
}

/// Why an upstream's request to a client was not relayed; the upstream is answered this.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotRelayed {
    #[error("airlock: {method} came while no client call is in flight on this connection")]
    NoCall { method: &'static str },
    #[error(
        "airlock: {method} came while {calls} client calls are in flight on this connection and it names none of them"
    )]
    Ambiguous { method: &'static str, calls: usize },
    #[error("airlock: {method} came during a call that no live client made")]
    NoClient { method: &'static str },
    #[error("airlock: the client did not declare the {capability} capability")]
    NotDeclared { capability: &'static str },
    #[error(
        "airlock: the client speaks {version}, which forbids server-to-client requests; {method} cannot be relayed"
    )]
    Forbidden {
        method: &'static str,
        version: String,
    },
    #[error("airlock: the client did not answer {method}: {detail}")]
    NoAnswer {
        method: &'static str,
        detail: String,
    },
}

impl From<NotRelayed> for ErrorData {
    fn from(why: NotRelayed) -> ErrorData {
        let code = match why {
            NotRelayed::NotDeclared { .. } | NotRelayed::Forbidden { .. } => {
                ErrorCode::METHOD_NOT_FOUND
            }
            _ => ErrorCode::INTERNAL_ERROR,
        };
        ErrorData::new(code, why.to_string(), None)
    }
}

/// One forwarded call's registration with its upstream; ends the call's relays when dropped.
pub struct Forwarding {
    relay: Arc<UpstreamRelay>,
    number: u64,
}

impl Forwarding {
    /// The live client the call is made for, if any.
    pub fn client(&self) -> Option<ClientLink> {
        lock(&self.relay.in_flight)
            .get(&self.number)
            .and_then(|flight| flight.client.clone())
    }

    /// The progress token the call's request carries upstream (each retry of a 2026-07-28
    /// input-required round carries a new one).
    ///
    /// Progress the upstream sent under that token before this call (the upstream may answer
    /// the request with progress at once, before its sender has learnt the token) is relayed
    /// now, in order.
    pub async fn sent_with(&self, token: ProgressToken) {
        let early = {
            let mut in_flight = lock(&self.relay.in_flight);
            if let Some(flight) = in_flight.get_mut(&self.number) {
                flight.upstream_token = Some(token.clone());
            }
            let mut early = lock(&self.relay.early);
            let (mine, others) = early
                .drain(..)
                .partition::<Vec<_>, _>(|(_, param)| param.progress_token == token);
            *early = others;
            mine
        };
        for (_, param) in early {
            self.relay.progress(param).await;
        }
    }
}

/// A call in flight on one upstream.
struct Flight {
    client: Option<ClientLink>,
    upstream_token: Option<ProgressToken>,
    /// Answered: only its late progress is still relayed, nothing is asked for it.
    ended: bool,
}

/// The size of an input request's parameters, for `mcp.upstream.request`.
fn request_size(request: &InputRequest) -> usize {
    match request {
        InputRequest::CreateMessage(r) => serde_json::to_vec(&r.params).map_or(0, |b| b.len()),
        InputRequest::Elicitation(r) => serde_json::to_vec(&r.params).map_or(0, |b| b.len()),
        _ => 0,
    }
}

/// How long progress under a token no call has registered yet is kept for the call that will.
const EARLY_FOR: std::time::Duration = std::time::Duration::from_secs(2);

/// The most such progress kept per upstream.
const MAX_EARLY: usize = 64;

/// How long an answered call's progress token still routes: rmcp hands notifications to the
/// handler on tasks of their own, so the upstream's last progress, sent just before its answer,
/// may be handled just after it.
const LINGER: std::time::Duration = std::time::Duration::from_millis(500);

impl Drop for Forwarding {
    fn drop(&mut self) {
        if let Some(flight) = lock(&self.relay.in_flight).get_mut(&self.number) {
            flight.ended = true;
        }
        let relay = Arc::clone(&self.relay);
        let number = self.number;
        let forget = move || {
            lock(&relay.in_flight).remove(&number);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    tokio::time::sleep(LINGER).await;
                    forget();
                });
            }
            Err(_) => forget(),
        }
    }
}

/// What the gateway's relays need from the process.
#[derive(Clone)]
pub struct RelayContext {
    pub clients: Arc<Clients>,
    pub events: EventSink,
    pub now: Now,
}

/// One upstream connection's calls in flight and their relays.
pub struct UpstreamRelay {
    server: String,
    /// FILE's `roots` of the server (file URIs): its `roots/list` outside any call.
    roots: Vec<String>,
    context: RelayContext,
    next: AtomicU64,
    in_flight: Mutex<BTreeMap<u64, Flight>>,
    /// Progress that came under a token no call has registered yet ([`Forwarding::sent_with`]),
    /// kept [`EARLY_FOR`]; always locked after `in_flight`.
    early: Mutex<Vec<(std::time::Instant, ProgressNotificationParam)>>,
}

/// Which relayed request: its method and the client capability it needs.
#[derive(Debug, Clone, Copy)]
enum Asked {
    Sampling,
    Elicitation,
    Roots,
}

impl Asked {
    /// The kind of an input request; a kind this build does not know is not relayed blind.
    fn of(request: &InputRequest) -> Result<Asked, ErrorData> {
        match request {
            InputRequest::CreateMessage(_) => Ok(Asked::Sampling),
            InputRequest::Elicitation(_) => Ok(Asked::Elicitation),
            InputRequest::ListRoots(_) => Ok(Asked::Roots),
            _ => Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                "airlock: an input request of a kind the gateway does not relay",
                None,
            )),
        }
    }

    fn method(self) -> &'static str {
        match self {
            Asked::Sampling => "sampling/createMessage",
            Asked::Elicitation => "elicitation/create",
            Asked::Roots => "roots/list",
        }
    }
    fn capability(self) -> &'static str {
        match self {
            Asked::Sampling => "sampling",
            Asked::Elicitation => "elicitation",
            Asked::Roots => "roots",
        }
    }
}

impl UpstreamRelay {
    pub fn new(server: String, roots: Vec<String>, context: RelayContext) -> Arc<UpstreamRelay> {
        Arc::new(UpstreamRelay {
            server,
            roots,
            context,
            next: AtomicU64::new(1),
            in_flight: Mutex::new(BTreeMap::new()),
            early: Mutex::new(Vec::new()),
        })
    }

    /// Registers a call about to be forwarded; `client` is `None` for a call no live client made.
    pub fn begin(self: &Arc<Self>, client: Option<ClientLink>) -> Forwarding {
        let number = self.next.fetch_add(1, Ordering::SeqCst);
        lock(&self.in_flight).insert(
            number,
            Flight {
                client,
                upstream_token: None,
                ended: false,
            },
        );
        Forwarding {
            relay: Arc::clone(self),
            number,
        }
    }

    /// The call in flight whose request carried `token` upstream.
    fn named<'m>(
        in_flight: &'m BTreeMap<u64, Flight>,
        token: &ProgressToken,
    ) -> Option<&'m Flight> {
        in_flight
            .values()
            .find(|f| f.upstream_token.as_ref() == Some(token))
    }

    /// The call a request or notification belongs to: the one its token names, else the only
    /// one in flight.
    fn target(
        &self,
        token: Option<&ProgressToken>,
        method: &'static str,
    ) -> Result<ClientLink, NotRelayed> {
        let all = lock(&self.in_flight);
        let open: Vec<&Flight> = all.values().filter(|f| !f.ended).collect();
        let named = token.and_then(|t| {
            open.iter()
                .find(|f| f.upstream_token.as_ref() == Some(t))
                .copied()
        });
        let chosen = match (named, open.as_slice()) {
            (Some(call), _) => call,
            (None, []) => return Err(NotRelayed::NoCall { method }),
            (None, [only]) => only,
            (None, calls) => {
                return Err(NotRelayed::Ambiguous {
                    method,
                    calls: calls.len(),
                });
            }
        };
        chosen.client.clone().ok_or(NotRelayed::NoClient { method })
    }

    /// `notifications/progress`: to the call's client, under the client's token.
    pub async fn progress(&self, mut param: ProgressNotificationParam) {
        let link = {
            let in_flight = lock(&self.in_flight);
            let named = Self::named(&in_flight, &param.progress_token);
            if named.is_none() {
                // Perhaps of a call whose sender has not learnt its token yet.
                let mut early = lock(&self.early);
                let now = std::time::Instant::now();
                early.retain(|(at, _)| now.duration_since(*at) < EARLY_FOR);
                if early.len() < MAX_EARLY {
                    early.push((now, param));
                }
                return;
            }
            named.and_then(|flight| flight.client.clone())
        };
        let Some(link) = link else {
            tracing::debug!(server = %self.server, "progress for no call of a live client; dropped");
            return;
        };
        let Some(token) = link.progress_token.clone() else {
            return;
        };
        let offset = f64::from(link.parked_progress.load(Ordering::SeqCst));
        param.progress_token = token;
        param.progress += offset;
        param.total = param.total.map(|t| t + offset);
        // A client that went is noticed by its transport, not here.
        let _ = link.peer.notify_progress(param).await;
    }

    /// FILE's `roots` of this server.
    fn configured_roots(&self) -> ListRootsResult {
        ListRootsResult::new(self.roots.iter().map(Root::new).collect())
    }

    /// `notifications/message`: to the call's client; outside a call, to every connected
    /// client whose level admits it.
    pub async fn log(&self, param: LoggingMessageNotificationParam) {
        let peers = match self.target(None, "notifications/message") {
            // A 2026-07-28 request hears the log messages its own `_meta` level admits, and
            // none without one (SPEC §23).
            Ok(link)
                if link.is_modern()
                    && !link
                        .log_level
                        .is_some_and(|wanted| admits(Some(wanted), param.level)) =>
            {
                return;
            }
            Ok(link) => vec![link.peer],
            Err(NotRelayed::NoCall { .. }) => self.context.clients.log_audience(param.level),
            Err(why) => {
                tracing::debug!(server = %self.server, reason = %why, "a log message not relayed");
                return;
            }
        };
        for peer in peers {
            // A client that went is noticed by its transport, not here.
            let _ = peer.notify_logging_message(param.clone()).await;
        }
    }

    /// Asks `request` of the call's client: in the call for a 2025-11-25 client; as an
    /// input-required round of its request for a 2026-07-28 client whose request holds it
    /// ([`HeldRequest`]). Checked against what the client declared, and recorded.
    async fn ask_client(
        &self,
        asked: Asked,
        link: Result<ClientLink, NotRelayed>,
        request: InputRequest,
        size: usize,
    ) -> Result<Value, ErrorData> {
        let held = link
            .as_ref()
            .ok()
            .filter(|link| link.is_modern())
            .and_then(|link| link.held.clone());
        let Some(held) = held else {
            let peer = self.client_for(asked, link, size)?;
            let answer = match request {
                InputRequest::CreateMessage(r) => peer
                    .create_message(r.params)
                    .await
                    .map(serde_json::to_value),
                InputRequest::Elicitation(r) => peer
                    .create_elicitation(r.params)
                    .await
                    .map(serde_json::to_value),
                _ => peer.list_roots().await.map(serde_json::to_value),
            };
            return answer
                .map_err(|e| Self::answer_error(asked.method(), e))?
                .map_err(|e| {
                    ErrorData::internal_error(format!("airlock: an unrenderable answer: {e}"), None)
                });
        };
        let link = link?;
        Self::declared(asked, &link)?;
        if matches!(asked, Asked::Sampling | Asked::Elicitation) {
            self.record(asked.method(), size);
        }
        let (answer, answered) = oneshot::channel();
        let gone = || NotRelayed::NoAnswer {
            method: asked.method(),
            detail: "the client's request ended without coming back with an answer".to_owned(),
        };
        held.send(HeldRequest { request, answer })
            .map_err(|_| gone())?;
        Ok(answered.await.map_err(|_| gone())?)
    }

    /// Whether `link`'s client declared what `asked` needs.
    fn declared(asked: Asked, link: &ClientLink) -> Result<(), NotRelayed> {
        Self::declared_in(asked, link.capabilities.as_ref())
    }

    /// Whether `capabilities` (what a client declared) cover what `asked` needs.
    fn declared_in(
        asked: Asked,
        capabilities: Option<&ClientCapabilities>,
    ) -> Result<(), NotRelayed> {
        let declared = capabilities.is_some_and(|c| match asked {
            Asked::Sampling => c.sampling.is_some(),
            Asked::Elicitation => c.elicitation.is_some(),
            Asked::Roots => c.roots.is_some(),
        });
        if declared {
            Ok(())
        } else {
            Err(NotRelayed::NotDeclared {
                capability: asked.capability(),
            })
        }
    }

    /// The client to ask, checked against what it declared; records the relay.
    fn client_for(
        &self,
        asked: Asked,
        link: Result<ClientLink, NotRelayed>,
        size: usize,
    ) -> Result<Peer<RoleServer>, NotRelayed> {
        let link = link?;
        if let Some(version) = link.version.as_ref().filter(|v| !v.has_initialize()) {
            return Err(NotRelayed::Forbidden {
                method: asked.method(),
                version: version.to_string(),
            });
        }
        Self::declared(asked, &link)?;
        if matches!(asked, Asked::Sampling | Asked::Elicitation) {
            self.record(asked.method(), size);
        }
        Ok(link.peer)
    }

    /// The process event `mcp.upstream.request` of one relayed request.
    fn record(&self, method: &str, size: usize) {
        let now = (self.context.now)();
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let key = format!(
            "mcp.upstream.request:{}:{}:{}:{n}",
            self.server,
            now,
            std::process::id()
        );
        (self.context.events)(process_event(
            key,
            EventType::McpUpstreamRequest,
            json!({"server": self.server, "method": method, "size": size}),
            now,
        ));
    }

    fn answer_error(method: &'static str, error: ServiceError) -> ErrorData {
        match error {
            // The client's own refusal goes upstream as it is.
            ServiceError::McpError(error) => error,
            other => NotRelayed::NoAnswer {
                method,
                detail: other.to_string(),
            }
            .into(),
        }
    }

    /// `sampling/createMessage`, asked of the call's client.
    pub async fn sampling(
        &self,
        params: CreateMessageRequestParams,
        token: Option<ProgressToken>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let link = self.target(token.as_ref(), Asked::Sampling.method());
        self.ask_typed(Asked::Sampling, link, json!(params)).await
    }

    /// `elicitation/create`, asked of the call's client.
    pub async fn elicitation(
        &self,
        params: ElicitRequestParams,
        token: Option<ProgressToken>,
    ) -> Result<ElicitResult, ErrorData> {
        let link = self.target(token.as_ref(), Asked::Elicitation.method());
        self.ask_typed(Asked::Elicitation, link, json!(params))
            .await
    }

    /// A 2025-11-25 upstream's request with `params`, asked of the call's client
    /// ([`Self::ask_client`]); the answer as its typed result.
    async fn ask_typed<T: serde::de::DeserializeOwned>(
        &self,
        asked: Asked,
        link: Result<ClientLink, NotRelayed>,
        params: Value,
    ) -> Result<T, ErrorData> {
        let size = if params.is_null() {
            0
        } else {
            params.to_string().len()
        };
        let mut request = json!({"method": asked.method()});
        if !params.is_null() {
            request["params"] = params;
        }
        let request: InputRequest = serde_json::from_value(request).map_err(|e| {
            ErrorData::internal_error(format!("airlock: an unrelayable request: {e}"), None)
        })?;
        let answer = self.ask_client(asked, link, request, size).await?;
        serde_json::from_value(answer).map_err(|e| {
            ErrorData::invalid_params(
                format!(
                    "airlock: the client's answer to {} is not one: {e}",
                    asked.method()
                ),
                None,
            )
        })
    }

    /// One input request of a 2026-07-28 input-required result of `forwarding`'s call, asked of
    /// that call's client; its answer as the JSON the retry carries.
    pub async fn input(
        &self,
        forwarding: &Forwarding,
        request: InputRequest,
    ) -> Result<Value, ErrorData> {
        let asked = Asked::of(&request)?;
        let link = forwarding.client().ok_or(NotRelayed::NoClient {
            method: asked.method(),
        });
        let size = request_size(&request);
        self.ask_client(asked, link, request, size).await
    }

    /// A 2026-07-28 upstream's input-required round about to be answered to a 2026-07-28
    /// client whose request `declared` these capabilities (SPEC §23): each input request must be
    /// of a kind the client declared (else the round is not passed on: the upstream asked what
    /// this client cannot answer), and each sampling or elicitation request is recorded as
    /// `mcp.upstream.request`, as when it is asked in the call.
    pub fn pass_on(
        &self,
        declared: Option<&ClientCapabilities>,
        input: &InputRequiredResult,
    ) -> Result<(), ErrorData> {
        let requests = input.input_requests.iter().flat_map(|r| r.values());
        for request in requests.clone() {
            Self::declared_in(Asked::of(request)?, declared)?;
        }
        for request in requests {
            let asked = Asked::of(request)?;
            if matches!(asked, Asked::Sampling | Asked::Elicitation) {
                self.record(asked.method(), request_size(request));
            }
        }
        Ok(())
    }

    /// `roots/list`: asked of the call's client during a call; outside any call (a server that
    /// asks at start, as server-filesystem does) answered with FILE's `roots`, or none, since
    /// no client is there to ask and an error only makes the server log a warning (SPEC §23).
    pub async fn roots(&self, token: Option<ProgressToken>) -> Result<ListRootsResult, ErrorData> {
        let link = match self.target(token.as_ref(), Asked::Roots.method()) {
            Err(NotRelayed::NoCall { .. }) => return Ok(self.configured_roots()),
            link => link,
        };
        self.ask_typed(Asked::Roots, link, Value::Null).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_core::time::Timestamp;
    use rmcp::model::NumberOrString;

    fn relay() -> Arc<UpstreamRelay> {
        UpstreamRelay::new(
            "up".into(),
            vec!["file:///srv/repo".into()],
            RelayContext {
                clients: Clients::new(),
                events: Arc::new(|_| {}),
                now: Arc::new(|| Timestamp::from_micros(0)),
            },
        )
    }

    fn token(n: i64) -> ProgressToken {
        ProgressToken(NumberOrString::Number(n))
    }

    #[tokio::test]
    async fn a_request_goes_to_the_only_call_or_the_one_it_names_and_never_guesses() {
        let relay = relay();
        let method = "sampling/createMessage";
        assert_eq!(
            relay.target(None, method).err(),
            Some(NotRelayed::NoCall { method })
        );
        let first = relay.begin(None);
        // The only call in flight, made by no live client: refused, never answered by airlock.
        assert_eq!(
            relay.target(None, method).err(),
            Some(NotRelayed::NoClient { method })
        );
        let second = relay.begin(None);
        second.sent_with(token(4)).await;
        assert_eq!(
            relay.target(None, method).err(),
            Some(NotRelayed::Ambiguous { method, calls: 2 }),
            "two calls in flight and nothing names one: no guess"
        );
        // A request naming one of the gateway's tokens is that call's, however many there are.
        assert_eq!(
            relay.target(Some(&token(4)), method).err(),
            Some(NotRelayed::NoClient { method })
        );
        assert_eq!(
            relay.target(Some(&token(99)), method).err(),
            Some(NotRelayed::Ambiguous { method, calls: 2 }),
            "a token the gateway did not give is no name"
        );
        drop(first);
        drop(second);
        assert_eq!(
            relay.target(None, method).err(),
            Some(NotRelayed::NoCall { method }),
            "an answered call relays nothing more"
        );
    }

    /// Progress the upstream sends under a call's token before the call's sender learnt the
    /// token (the first of a fast tool's notifications) waits for the call, and goes with it;
    /// progress no call claims is let go.
    #[tokio::test]
    async fn progress_ahead_of_its_calls_token_waits_for_the_call() {
        let relay = relay();
        let call = relay.begin(None);
        let early = |n: i64| {
            serde_json::from_value::<ProgressNotificationParam>(
                json!({"progressToken": n, "progress": 0}),
            )
            .expect("a progress notification")
        };
        relay.progress(early(7)).await;
        relay.progress(early(8)).await;
        assert_eq!(
            lock(&relay.early).len(),
            2,
            "kept for a call that will claim it"
        );
        call.sent_with(token(7)).await;
        let left: Vec<_> = lock(&relay.early)
            .iter()
            .map(|(_, p)| p.progress_token.clone())
            .collect();
        assert_eq!(left, [token(8)], "the call took its own, and only its own");
    }

    /// SPEC §23: a `roots/list` outside any call is answered with FILE's roots, never an
    /// error; during a call it is the call's client's to answer.
    #[tokio::test]
    async fn roots_asked_outside_a_call_are_the_files() {
        let relay = relay();
        let answer = relay.roots(None).await.expect("answered, not refused");
        let uris: Vec<&str> = answer.roots.iter().map(|r| r.uri.as_str()).collect();
        assert_eq!(uris, ["file:///srv/repo"]);
        let call = relay.begin(None);
        assert!(
            relay.roots(None).await.is_err(),
            "a call no live client made has nobody to ask, and FILE's roots are not its answer"
        );
        drop(call);
        let bare = UpstreamRelay::new(
            "up".into(),
            Vec::new(),
            RelayContext {
                clients: Clients::new(),
                events: Arc::new(|_| {}),
                now: Arc::new(|| Timestamp::from_micros(0)),
            },
        );
        assert_eq!(bare.roots(None).await.ok().map(|r| r.roots.len()), Some(0));
    }

    /// SPEC §19.7: a client hears the messages at least as severe as the level it asked for,
    /// and all of them until it asks.
    #[test]
    fn the_upstreams_send_at_the_least_severe_level_any_client_asked_for() {
        let clients = Clients::new();
        let (a, b) = (
            SessionId(uuid::Uuid::from_u128(1)),
            SessionId(uuid::Uuid::from_u128(2)),
        );
        let connection = ConnectionId(uuid::Uuid::from_u128(3));
        clients.attach(a, connection, None);
        clients.attach(b, connection, None);
        clients.set_level(a, LoggingLevel::Debug);
        assert_eq!(clients.least_severe_level(), Some(LoggingLevel::Debug));
        clients.set_level(b, LoggingLevel::Error);
        assert_eq!(
            clients.least_severe_level(),
            Some(LoggingLevel::Debug),
            "a later, stricter client must not silence the first"
        );
        clients.detach(a);
        assert_eq!(clients.least_severe_level(), Some(LoggingLevel::Error));
    }

    #[test]
    fn a_log_level_admits_messages_at_least_as_severe() {
        use LoggingLevel::*;
        let order = [
            Debug, Info, Notice, Warning, Error, Critical, Alert, Emergency,
        ];
        for (i, wanted) in order.iter().enumerate() {
            for (j, level) in order.iter().enumerate() {
                assert_eq!(
                    admits(Some(*wanted), *level),
                    j >= i,
                    "{wanted:?} hears {level:?}"
                );
            }
        }
        assert!(order.iter().all(|level| admits(None, *level)));
    }

    #[test]
    fn refusals_say_why_with_the_code_a_client_without_the_capability_would_give() {
        let error: ErrorData = NotRelayed::NotDeclared {
            capability: "sampling",
        }
        .into();
        assert_eq!(error.code, ErrorCode::METHOD_NOT_FOUND);
        assert_eq!(
            error.message,
            "airlock: the client did not declare the sampling capability"
        );
        let error: ErrorData = NotRelayed::Ambiguous {
            method: "roots/list",
            calls: 2,
        }
        .into();
        assert_eq!(error.code, ErrorCode::INTERNAL_ERROR);
    }
}
