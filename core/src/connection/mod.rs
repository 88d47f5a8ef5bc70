//! Live client connections (SPEC §19.1, §19.4): the durable record that binds a session to the
//! one gateway connection whose client plans its runs, and the transactions that open, renew and
//! close it.
//!
//! **Liveness.** A connection is `open` with an `alive_until` that its gateway renews every
//! lease/3 (as a worker renews a lease), or `closed`. A gateway closes it when its client goes
//! (DISCONNECT); when the gateway dies instead, its `alive_until` passes and the connection sweep
//! of any airlock process (a gateway or `airlock worker`, [`crate::worker::Worker::tick`])
//! closes it. Closing is one transaction that also requests cancellation of the session's active
//! run (§8.5), which cancels a parked or queued run at once; every START of a sequential call
//! reads `cancel_requested_at` inside its own transaction (§17.1 F2, F3), so no call of a
//! disconnected client can START once the disconnect has committed.
//!
//! **Claims.** A run is bound to a connection when its session is the connection's. Ordinary
//! claims ([`crate::store::StoreTx::next_claimable_run`] without `only`) skip runs bound to an
//! open connection; a gateway claims its own connection's run by id, and only while the
//! connection is open ([`crate::worker::Worker::claim_for_connection`]). A bound run whose
//! connection is closed is claimed by anyone only to end it ([`RunBinding::Orphaned`]): it is
//! finalized without asking a planner and without invoking anything; RECLAIM never re-queues it.
//! Every run of a dead connection is therefore terminal within one lease length (the
//! connection's `alive_until` and the run's lease) plus one sweep interval.

pub mod answer;
pub mod elicit;
pub mod live;
pub mod read;

use serde_json::json;

use crate::events::{Actor, EventType, ProcessEvent};
use crate::ids::{ConnectionId, RunId, SessionId};
use crate::run::Run;
use crate::store::{StoreTx, TxError};
use crate::time::Timestamp;

crate::vocab::wire_enum! {
    /// Whether a connection's client can still be served.
    ConnectionStatus: "connection status" {
        Open = "open",
        Closed = "closed",
    }
}

crate::vocab::wire_enum! {
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

/// One row of `connections`.
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
    }
}

/// What a claim may do with a run, given the connection its session belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunBinding {
    /// No connection: any worker executes it.
    Unbound,
    /// Its connection is open: only that connection's gateway executes it.
    Live(ConnectionId),
    /// Its connection is closed: anyone may claim it, only to end it.
    Orphaned(ConnectionId),
}

/// The binding of `run`, read inside a transaction.
pub fn binding_of(tx: &mut dyn StoreTx, run: &Run) -> Result<RunBinding, TxError> {
    Ok(match tx.connection_by_session(run.session_id)? {
        None => RunBinding::Unbound,
        Some(c) if c.is_open() => RunBinding::Live(c.id),
        Some(c) => RunBinding::Orphaned(c.id),
    })
}

fn process_event(
    event_type: EventType,
    key: String,
    payload: serde_json::Value,
    now: Timestamp,
) -> ProcessEvent {
    ProcessEvent {
        id: uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, key.as_bytes()),
        event_type,
        payload_schema_version: crate::events::PAYLOAD_SCHEMA_VERSION,
        actor: Actor::process(),
        payload,
        derivation_key: key,
        created_at: now,
    }
}

/// OPEN inside a transaction: the connection row and `mcp.connection.opened`. The session must
/// exist and have no connection yet.
pub fn open_in_tx(
    tx: &mut dyn StoreTx,
    connection: &Connection,
    now: Timestamp,
) -> Result<(), TxError> {
    tx.insert_connection(connection)?;
    tx.append_process_event(&process_event(
        EventType::McpConnectionOpened,
        format!("mcp.connection.opened:{}", connection.id),
        json!({
            "connection_id": connection.id.to_string(),
            "session_id": connection.session_id.to_string(),
            "tenant_id": connection.tenant_id,
            "principal_id": connection.principal_id,
            "gateway_id": connection.gateway_id,
        }),
        now,
    ))?;
    Ok(())
}

/// RENEW: pushes `alive_until` forward; `false` when the connection is no longer open (a sweep
/// closed it while its gateway stalled), in which case the gateway must stop serving it.
pub fn renew_in_tx(
    tx: &mut dyn StoreTx,
    id: ConnectionId,
    alive_until: Timestamp,
) -> Result<bool, TxError> {
    let Some(current) = tx.connection(id)? else {
        return Ok(false);
    };
    if !current.is_open() {
        return Ok(false);
    }
    let mut next = current.clone();
    next.state = ConnectionState::Open { alive_until };
    tx.update_connection(ConnectionStatus::Open, &next)?;
    Ok(true)
}

/// DISCONNECT (or the sweep's expiry) inside a transaction: the row `closed`,
/// `mcp.connection.closed`, and a cancellation request for the session's active run (§8.5:
/// a parked or queued run without a RUNNING call is cancelled now; a running one is flagged and
/// ends at its next observation point). Returns the run it flagged while RUNNING, whose local
/// token the caller cancels. A connection already closed is left as it is.
pub fn close_in_tx(
    tx: &mut dyn StoreTx,
    id: ConnectionId,
    reason: CloseReason,
    now: Timestamp,
) -> Result<Option<RunId>, TxError> {
    #[cfg(feature = "mutants")]
    if crate::testing::mutants::disconnect_not_recorded(reason) {
        return Ok(None);
    }
    let Some(current) = tx.connection(id)? else {
        return Err(TxError::NotFound);
    };
    if !current.is_open() {
        return Ok(None);
    }
    let mut next = current.clone();
    next.state = ConnectionState::Closed {
        closed_at: now,
        reason,
    };
    tx.update_connection(ConnectionStatus::Open, &next)?;
    tx.append_process_event(&process_event(
        EventType::McpConnectionClosed,
        format!("mcp.connection.closed:{id}"),
        json!({
            "connection_id": id.to_string(),
            "session_id": current.session_id.to_string(),
            "reason": reason.as_str(),
        }),
        now,
    ))?;
    let Some(run_id) = tx.active_run_in_session(current.session_id)? else {
        return Ok(None);
    };
    let run = tx.run(run_id)?.ok_or(TxError::NotFound)?;
    let actor = Actor::application();
    let (outcome, _) = crate::control::request_cancel_in_tx(tx, &run, &actor, now)?;
    Ok((outcome.status == crate::vocab::RunStatus::Running).then_some(run_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_reasons_have_their_wire_names() {
        assert_eq!(ConnectionStatus::Open.as_str(), "open");
        assert_eq!("closed".parse(), Ok(ConnectionStatus::Closed));
        assert_eq!(CloseReason::Expired.as_str(), "expired");
        assert!("Open".parse::<ConnectionStatus>().is_err());
    }
}
