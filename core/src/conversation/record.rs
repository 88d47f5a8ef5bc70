//! A conversation's row (SPEC §19.4, §22.1): the `connections` record of one live client
//! connection, with its liveness and its conversation fields. Data only, so the store and
//! everything below the conversation rules can name it.

use crate::ids::{ConnectionId, RunId, SessionId};
use crate::time::Timestamp;

/// The `runs.planner_kind` of a run whose planner is a live client connection: a call run
/// (SPEC §22.2).
pub const MCP_PLANNER_KIND: &str = "mcp";

/// `r{n}` (SPEC §19.1): one call per step, so n is the step number.
pub fn call_id_of(step: u32) -> String {
    format!("r{step}")
}

airlock_policy::wire_enum! {
    /// Whether a connection's client can still be served.
    ConnectionStatus: "connection status" {
        Open = "open",
        Closed = "closed",
    }
}

airlock_policy::wire_enum! {
    /// Why a connection closed.
    CloseReason: "close reason" {
        /// The gateway saw its client go (end of stream, transport error, shutdown).
        Disconnected = "disconnected",
        /// Its gateway stopped renewing it: the connection sweep closed it.
        Expired = "expired",
    }
}

/// A connection's state, with the data each state owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionState {
    Open {
        alive_until: Timestamp,
    },
    Closed {
        closed_at: Timestamp,
        reason: CloseReason,
    },
}

/// What tainted a conversation (SPEC §22.1), kept so a reviewer clearing it knows why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// When the tainting result or read committed.
    pub at: Timestamp,
    /// What it was: `invocation {id}` for a tool result, `{method} {server}` for a read outside
    /// the journal (§19.6).
    pub by: String,
}

/// Which 2026-07-28 HTTP conversation a connection row is (SPEC §22.1): a client without a
/// session is known by the tuple (tenant, principal, token id, `clientInfo.name`), so every
/// request of that tuple, on any gateway process of the store, is the same conversation while it
/// lasts. Kept as the SHA-256 of the tuple's canonical JSON (the client's name is whatever it
/// sends, of any length): the tenant is the row's own column, so the key hashes the other three.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConversationKey(String);

impl ConversationKey {
    /// The key of `principal`'s requests sent with token `token` (`None`: a tokenless caller
    /// of `--listen-no-auth`) by a client naming itself `client_name`.
    pub fn of(principal: &str, token: Option<&str>, client_name: &str) -> ConversationKey {
        ConversationKey(crate::canonical::arguments_hash(&serde_json::json!([
            principal,
            token,
            client_name
        ])))
    }

    /// A key read back from the store.
    pub fn from_stored(text: String) -> ConversationKey {
        ConversationKey(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ConversationKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One row of `connections`: a live client connection, which for a 2025-11-25 client (a stdio
/// connection, or one HTTP `Mcp-Session-Id`) is also its **conversation** (SPEC §22.1), the unit
/// of taint and `[limits]`. The conversation fields are `taint`, `call_count` and
/// `last_seen_at`; like the rest of the row they change only while the connection is open (a
/// closed conversation proposes no more calls, so its taint is kept as the record of what
/// happened and is not cleared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub id: ConnectionId,
    pub tenant_id: String,
    pub principal_id: String,
    /// The session whose runs this connection plans; one connection per session.
    pub session_id: SessionId,
    /// The serving process, for operators (`mcp serve`'s worker id).
    pub gateway_id: String,
    pub state: ConnectionState,
    pub opened_at: Timestamp,
    /// `None` until an `external_untrusted` result reached the client; monotone, cleared only
    /// by a human ([`clear_taint_in_tx`]).
    pub taint: Option<Taint>,
    /// `tools/call` requests the conversation started as runs (its `[limits] max_tool_calls`).
    pub call_count: u32,
    /// The last request that started a call run (opened_at until then).
    pub last_seen_at: Timestamp,
    /// `None` for a connection that is its own conversation (a stdio client, an HTTP
    /// `Mcp-Session-Id`), which its gateway renews every lease/3 and closes when its client
    /// goes. `Some` for a sessionless 2026-07-28 HTTP conversation (SPEC §22.1): no gateway
    /// owns it; any gateway process serving a request of the key joins it, pushes its
    /// `alive_until` to `conversation_idle_seconds` after that request, and never closes it;
    /// it ends when the sweep finds `alive_until` passed. At most one open row per tenant and key.
    pub conversation_key: Option<ConversationKey>,
}

impl Connection {
    pub fn status(&self) -> ConnectionStatus {
        match self.state {
            ConnectionState::Open { .. } => ConnectionStatus::Open,
            ConnectionState::Closed { .. } => ConnectionStatus::Closed,
        }
    }

    pub fn is_open(&self) -> bool {
        self.status() == ConnectionStatus::Open
    }

    /// The fields that never change after OPEN, for the store's immutability check.
    pub fn same_identity(&self, other: &Connection) -> bool {
        self.id == other.id
            && self.tenant_id == other.tenant_id
            && self.principal_id == other.principal_id
            && self.session_id == other.session_id
            && self.gateway_id == other.gateway_id
            && self.opened_at == other.opened_at
            && self.conversation_key == other.conversation_key
    }
}

/// One AEAD key of the store (SPEC §22.3 item 2, `conversation::request_state`) (256 bits, hex), named by `id` in every state it seals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateKey {
    pub id: String,
    pub secret_hex: String,
    pub created_at: Timestamp,
}

/// One task row: a call run answered as a task (SPEC §22.3 item 1, `conversation::task`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallTask {
    /// SHA-256 (hex) of the task id the client holds.
    pub id_sha256: String,
    pub run_id: RunId,
    pub tenant_id: String,
    pub principal_id: String,
    pub created_at: Timestamp,
}
