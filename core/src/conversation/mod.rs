//! The durable conversation (SPEC §19.1, §19.4, §22): the row of a live client connection,
//! whose session holds the conversation's call runs, and the rules read and written inside
//! transactions: open, renew and close; admission against `[limits]`; taint; which process may
//! claim a call run; and which parked call an identical call sent again binds to. The gateway
//! side that drives call runs through the worker is `connection::live`, above this module.
//!
//! **Liveness.** A connection is `open` with an `alive_until` that its gateway renews every
//! lease/3 (as a worker renews a lease), or `closed`. A gateway closes it when its client goes
//! (DISCONNECT); when the gateway dies instead, its `alive_until` passes and the connection sweep
//! of any airlock process (a gateway or `airlock worker`, `Worker::tick`)
//! closes it. Closing is one transaction that also requests cancellation of the conversation's
//! active call runs (§8.5), which cancels a queued run at once; every START of a call reads
//! `cancel_requested_at` inside its own transaction (§17.1 F2, F3), so no call of a
//! disconnected client can START once the disconnect has committed. A run whose call is parked
//! (its approval pending, or approved and unexpired) is left as it is (SPEC §22.3: a
//! disconnect no longer cancels a parked call's approval).
//!
//! **Claims.** A call run (`planner_kind = mcp`) is never taken by an ordinary claim
//! ([`crate::store::StoreTx::next_claimable_run`] without `only`). A gateway claims it by id for
//! a request it holds (`Worker::claim_for_connection`): its own open
//! connection's run, or another connection's (open or closed) whose call is parked, which an
//! identical call sent again bound to (§22.3). A call run whose connection is closed
//! ([`RunBinding::Orphaned`]) and whose call no request can claim any more is claimed by the
//! orphan sweep of any process only to end it: it is finalized without asking a planner and
//! without invoking anything; RECLAIM never re-queues it. Every run of a dead connection is
//! therefore terminal within one lease length (the connection's `alive_until` and the run's
//! lease) plus one sweep interval, except a parked call, which ends when its approval is denied
//! or expires (or executes, for a request sent again).

pub mod answer;
pub mod calls;
pub mod record;
pub mod request_state;
pub mod task;

pub use record::{
    CloseReason, Connection, ConnectionState, ConnectionStatus, ConversationKey, MCP_PLANNER_KIND,
    Taint, call_id_of,
};

use serde_json::json;

use crate::approval::Approval;
use crate::events::{Actor, EventType, ProcessEvent};
use crate::ids::{ConnectionId, RunId, SessionId};
use crate::run::Run;
use crate::store::{StoreTx, TxError};
use crate::time::Timestamp;
use crate::vocab::{ApprovalStatus, TrustLevel};

/// What a claim may do with a run, given the connection its session belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunBinding {
    /// No connection: any worker executes it.
    Unbound,
    /// Its connection is open: that connection's gateway executes it, or, once its call is
    /// parked, a gateway holding an identical call sent again ([`claimable_for_request_in_tx`]).
    Live(ConnectionId),
    /// Its connection is closed: a gateway holding an identical call sent again executes its
    /// parked call; otherwise any process claims it only to end it.
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

/// RENEW: pushes `alive_until` forward to `alive_until`, never back: its own gateway every
/// lease/3 (a connection of its own), or each request of a sessionless conversation (SPEC §22.1),
/// whose horizon another process's request may have pushed further already. `false` when the
/// connection is no longer open (a sweep closed it while its gateway stalled, or the
/// conversation idled out), in which case the gateway must stop serving it.
pub fn renew_in_tx(
    tx: &mut dyn StoreTx,
    id: ConnectionId,
    alive_until: Timestamp,
) -> Result<bool, TxError> {
    let Some(current) = tx.connection(id)? else {
        return Ok(false);
    };
    let ConnectionState::Open { alive_until: until } = current.state else {
        return Ok(false);
    };
    if until >= alive_until {
        return Ok(true);
    }
    let mut next = current;
    next.state = ConnectionState::Open { alive_until };
    tx.update_connection(ConnectionStatus::Open, &next)?;
    Ok(true)
}

/// What JOIN found for a sessionless conversation's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Joined {
    /// The key's open row, `alive_until` pushed to the request's idle horizon.
    Existing(Connection),
    /// No open row (or one whose `alive_until` had passed, closed here as the sweep would):
    /// `fresh`, inserted with its session by the caller's closure.
    Opened(Connection),
}

impl Joined {
    pub fn connection(&self) -> &Connection {
        match self {
            Joined::Existing(c) | Joined::Opened(c) => c,
        }
    }
}

/// JOIN inside a transaction (SPEC §22.1): the open conversation of `fresh`'s tenant and key, or
/// `fresh` itself opened (its session inserted first by `insert_session`). A row whose
/// `alive_until` has passed is over (no request for `conversation_idle_seconds`): it is closed
/// `expired` in the same transaction, and a new conversation starts untainted. Two processes
/// joining at once both try to insert; the store's uniqueness lets one commit and the other's
/// transaction fails `Conflict`, whose retry finds the winner's row.
pub fn join_in_tx(
    tx: &mut dyn StoreTx,
    fresh: &Connection,
    insert_session: &mut dyn FnMut(&mut dyn StoreTx) -> Result<(), TxError>,
    now: Timestamp,
) -> Result<Joined, TxError> {
    let (Some(key), ConnectionState::Open { alive_until }) = (&fresh.conversation_key, fresh.state)
    else {
        return Err(TxError::Conflict(
            "join: only an open keyed conversation can be joined".into(),
        ));
    };
    if let Some(current) = tx.open_connection_by_key(&fresh.tenant_id, key)? {
        match current.state {
            ConnectionState::Open { alive_until: until } if until > now => {
                if current.principal_id != fresh.principal_id {
                    // The key hashes the principal: a different one here is a corrupt row.
                    return Err(TxError::Conflict(format!(
                        "conversation {} belongs to another principal",
                        current.id
                    )));
                }
                let mut next = current.clone();
                next.state = ConnectionState::Open {
                    alive_until: until.max(alive_until),
                };
                if next != current {
                    tx.update_connection(ConnectionStatus::Open, &next)?;
                }
                return Ok(Joined::Existing(next));
            }
            _ => {
                close_in_tx(tx, current.id, CloseReason::Expired, now)?;
            }
        }
    }
    insert_session(tx)?;
    open_in_tx(tx, fresh, now)?;
    Ok(Joined::Opened(fresh.clone()))
}

/// DISCONNECT (or the sweep's expiry) inside a transaction: the row `closed`,
/// `mcp.connection.closed`, and a cancellation request for each active call run of the
/// conversation (§8.5: a queued run without a RUNNING call is cancelled now; a running one is
/// flagged and ends at its next observation point), **except** a run whose parked call waits
/// for a request ([`awaits_request_in_tx`]): SPEC §22.3, a disconnect no longer cancels a
/// parked call's approval. Such a run is an orphan: an identical call sent again binds to it,
/// and the orphan sweep ends it once its approval is denied or expires
/// (`Worker::sweep_connections`). Returns the runs it flagged while RUNNING,
/// whose local tokens the caller cancels. A connection already closed is left as it is.
pub fn close_in_tx(
    tx: &mut dyn StoreTx,
    id: ConnectionId,
    reason: CloseReason,
    now: Timestamp,
) -> Result<Vec<RunId>, TxError> {
    #[cfg(feature = "mutants")]
    if crate::testing::mutants::disconnect_not_recorded(reason) {
        return Ok(Vec::new());
    }
    let Some(current) = tx.connection(id)? else {
        return Err(TxError::NotFound);
    };
    if !current.is_open() {
        return Ok(Vec::new());
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
    let actor = Actor::application();
    let mut flagged = Vec::new();
    for run_id in tx.active_runs_in_session(current.session_id)? {
        let run = tx.run(run_id)?.ok_or(TxError::NotFound)?;
        if awaits_request_in_tx(tx, &run, now)?.is_some() {
            continue;
        }
        // Another gateway process executes it for a request it holds, bound to this
        // conversation's parked call (§22.3): that request has not left with this client.
        if matches!(&run.state, crate::run::RunState::Running { lease_owner, .. } if *lease_owner != current.gateway_id)
        {
            continue;
        }
        let (outcome, _) = crate::run::cancel_request::request_cancel_in_tx(tx, &run, &actor, now)?;
        if outcome.status == crate::vocab::RunStatus::Running {
            flagged.push(run_id);
        }
    }
    Ok(flagged)
}

/// Until when the parked call of a call run waits for a request (SPEC §22.3): its approval is
/// pending, or approved and not expired, so a client's cancel, timeout or disconnect leaves it
/// for an identical call sent again (on any connection of the tenant and principal) to bind to.
/// `None` for any other run: not a call run, its call not parked, its approval denied,
/// expired or past `expires_at`, or the run RUNNING (claimed by a request: a close cancels it
/// like any running call run, so nothing STARTs after its client left).
pub fn awaits_request_in_tx(
    tx: &mut dyn StoreTx,
    run: &Run,
    now: Timestamp,
) -> Result<Option<Timestamp>, TxError> {
    let resting = matches!(
        run.status(),
        crate::vocab::RunStatus::WaitingForApproval | crate::vocab::RunStatus::Queued
    );
    if !resting {
        return Ok(None);
    }
    Ok(parked_approval_in_tx(tx, run)?
        .filter(|approval| {
            matches!(
                approval.status,
                ApprovalStatus::Pending | ApprovalStatus::Approved
            ) && approval.expires_at > now
        })
        .map(|approval| approval.expires_at))
}

/// The approval a call run's call `r1` is parked on, of any status, until the run executes
/// or closes the call; `None` for any other run.
fn parked_approval_in_tx(tx: &mut dyn StoreTx, run: &Run) -> Result<Option<Approval>, TxError> {
    if run.planner_kind != MCP_PLANNER_KIND {
        return Ok(None);
    }
    Ok(match answer::call_state(tx, run.id, 1, &call_id_of(1))? {
        answer::CallState::Parked { approval } => Some(*approval),
        _ => None,
    })
}

/// Whether a gateway may claim another conversation's call run for a request it holds on its
/// connection `ours` (SPEC §22.3: an identical call sent again bound to the run's parked call):
/// `ours` is open in the store and of the run's tenant and principal, and the run's call is
/// parked, unless its approval is an approved one past its expiry (an approved call is never
/// sent after that). Read inside the claim's transaction.
pub fn claimable_for_request_in_tx(
    tx: &mut dyn StoreTx,
    run: &Run,
    ours: ConnectionId,
    now: Timestamp,
) -> Result<bool, TxError> {
    let Some(connection) = tx.connection(ours)? else {
        return Ok(false);
    };
    if !connection.is_open()
        || connection.tenant_id != run.tenant_id
        || connection.principal_id != run.principal_id
    {
        return Ok(false);
    }
    Ok(parked_approval_in_tx(tx, run)?.is_some_and(|approval| {
        !(approval.status == ApprovalStatus::Approved && approval.expires_at <= now)
    }))
}

/// Parked calls of a principal and tool read per bind (SPEC §22.3); the oldest match wins.
const TWIN_PAGE: usize = 32;

/// A call run's `planner_input`: the connection that opened it, and the fingerprint of where
/// its tools run (the gateway file's upstreams), which binding compares ([`parked_twin_in_tx`]).
pub fn call_planner_input(connection: ConnectionId, upstreams: &str) -> String {
    json!({"connection_id": connection.to_string(), "upstreams": upstreams}).to_string()
}

/// The upstreams fingerprint a call run was created with; `None` for a run of a build that
/// recorded none, which nothing binds to.
fn upstreams_of(run: &Run) -> Option<String> {
    let input: serde_json::Value = serde_json::from_str(&run.planner_input).ok()?;
    input.get("upstreams")?.as_str().map(str::to_owned)
}

/// The parked call that the call `(tool, arguments)`, sent on conversation `ours`, binds to
/// instead of asking again (SPEC §22.3): a call run of the same tenant and principal, on any
/// conversation, whose call `r1` is the same tool with equal arguments (so the same effective
/// arguments hash) and waits for its approval (pending, or approved and not expired); created
/// through the same upstreams (an approval given through one gateway file never runs against
/// another file's server of the same name); and holding no scope `scopes` lacks (binding never
/// widens what a token may do, issue 26). The oldest, when there are several.
pub fn parked_twin_in_tx(
    tx: &mut dyn StoreTx,
    ours: &Connection,
    scopes: &crate::scope::ScopeSet,
    upstreams: &str,
    (tool, arguments): (&str, &serde_json::Value),
    now: Timestamp,
) -> Result<Option<Run>, TxError> {
    let waiting =
        tx.waiting_call_approvals(&ours.tenant_id, &ours.principal_id, tool, now, TWIN_PAGE)?;
    for approval in waiting {
        let Some(invocation) = tx.invocation(approval.action_id)? else {
            continue;
        };
        if invocation.step_number != 1
            || invocation.call_id != call_id_of(1)
            || invocation.raw_arguments != *arguments
        {
            continue;
        }
        let Some(run) = tx.run(approval.run_id)? else {
            continue;
        };
        if run.planner_kind == MCP_PLANNER_KIND
            && !run.status().is_terminal()
            && run.principal_scopes.is_subset(scopes)
            && upstreams_of(&run).as_deref() == Some(upstreams)
        {
            return Ok(Some(run));
        }
    }
    Ok(None)
}

/// Whether a call run of `session` may start now, and if so the conversation counts it
/// (SPEC §22.1 `[limits]`, per conversation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallAdmission {
    /// Counted; the run's deadline is the conversation's.
    Admitted { deadline_at: Option<Timestamp> },
    /// `max_tool_calls` of the conversation is spent.
    CallsSpent { max_tool_calls: u32 },
    /// The conversation's `deadline_seconds` has passed.
    DeadlinePassed,
    /// The connection closed (its client went, or a sweep closed it).
    Closed,
}

/// The deadline of a conversation's calls (§22.1 `[limits] deadline_seconds`): that many
/// seconds after its connection opened.
pub fn call_deadline(opened_at: Timestamp, deadline_seconds: Option<u32>) -> Option<Timestamp> {
    deadline_seconds.map(|s| opened_at.saturating_add_seconds(i64::from(s)))
}

/// ADMIT inside the transaction that inserts the call's run: the conversation's budget is
/// checked and counted in the same commit, so two concurrent calls cannot both take its last
/// call.
pub fn admit_call_in_tx(
    tx: &mut dyn StoreTx,
    id: ConnectionId,
    max_tool_calls: Option<u32>,
    deadline_seconds: Option<u32>,
    now: Timestamp,
) -> Result<CallAdmission, TxError> {
    let current = tx.connection(id)?.ok_or(TxError::NotFound)?;
    if !current.is_open() {
        return Ok(CallAdmission::Closed);
    }
    let deadline_at = call_deadline(current.opened_at, deadline_seconds);
    if deadline_at.is_some_and(|at| at <= now) {
        return Ok(CallAdmission::DeadlinePassed);
    }
    if let Some(max_tool_calls) = max_tool_calls
        && current.call_count >= max_tool_calls
    {
        return Ok(CallAdmission::CallsSpent { max_tool_calls });
    }
    let mut next = current.clone();
    next.call_count = current.call_count.saturating_add(1);
    next.last_seen_at = now;
    tx.update_connection(ConnectionStatus::Open, &next)?;
    Ok(CallAdmission::Admitted { deadline_at })
}

/// Whether content of `trust` taints a run (§8.6) and its conversation (§22.2) once it reaches
/// the planner.
pub fn taints(trust: TrustLevel) -> bool {
    matches!(trust, TrustLevel::ExternalUntrusted | TrustLevel::Knowledge)
}

/// Whether the conversation of `session` is tainted, read inside a call's first transaction
/// (SPEC §22.2). A session without a connection (a scripted run) has no conversation.
pub fn tainted_in_tx(tx: &mut dyn StoreTx, session: SessionId) -> Result<bool, TxError> {
    Ok(tx
        .connection_by_session(session)?
        .is_some_and(|c| c.taint.is_some()))
}

/// Whether the conversation row of `connection` is tainted: what a gateway reports as the
/// conversation's taint (its read gate, and telemetry's `airlock.conversation.tainted`).
pub fn row_tainted_in_tx(tx: &mut dyn StoreTx, connection: ConnectionId) -> Result<bool, TxError> {
    Ok(tx
        .connection(connection)?
        .is_some_and(|c| c.taint.is_some()))
}

/// TAINT inside the transaction that records an `external_untrusted` result (SPEC §22.2): the
/// conversation of `session` is tainted from this commit on, before the result is answered.
/// Monotone: an earlier taint is kept. A closed connection has no more calls to taint.
pub fn taint_in_tx(
    tx: &mut dyn StoreTx,
    session: SessionId,
    run: Option<RunId>,
    by: &str,
    now: Timestamp,
) -> Result<(), TxError> {
    let Some(current) = tx.connection_by_session(session)? else {
        return Ok(());
    };
    if !current.is_open() || current.taint.is_some() {
        return Ok(());
    }
    let mut next = current.clone();
    next.taint = Some(Taint {
        at: now,
        by: by.to_owned(),
    });
    tx.update_connection(ConnectionStatus::Open, &next)?;
    tx.append_event(&crate::events::NewEvent {
        session_id: session,
        run_id: run,
        event_type: EventType::ConversationTainted,
        actor: Actor::process(),
        payload: json!({"conversation_id": current.id.to_string(), "by": by}),
        derivation_key: None,
        created_at: now,
    })?;
    Ok(())
}

/// Why a taint was not cleared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClearTaintRefused {
    #[error("conversation {0} is not tainted")]
    NotTainted(ConnectionId),
    #[error("conversation {0} has closed; its taint no longer reaches any call")]
    Closed(ConnectionId),
    /// The taint is not the one the reviewer saw: it was cleared and tainted again since.
    #[error("conversation {id} was tainted again at {at}, after the taint you saw; look again")]
    TaintedAgain { id: ConnectionId, at: Timestamp },
}

/// CLEAR-TAINT by a human holding `approval.resolve` (SPEC §22.1): the conversation's calls are
/// proposed untainted again from this commit on; `conversation.taint_cleared` records who, why
/// and what the taint was. With `seen`, the taint the reviewer looked at (its `tainted_at`):
/// a taint set since (cleared by someone else, then tainted again) is refused, so nobody clears
/// a taint they did not see.
pub fn clear_taint_in_tx(
    tx: &mut dyn StoreTx,
    id: ConnectionId,
    actor: &Actor,
    reason: &str,
    seen: Option<Timestamp>,
    now: Timestamp,
) -> Result<Result<Connection, ClearTaintRefused>, TxError> {
    let current = tx.connection(id)?.ok_or(TxError::NotFound)?;
    if !current.is_open() {
        return Ok(Err(ClearTaintRefused::Closed(id)));
    }
    let Some(taint) = current.taint.clone() else {
        return Ok(Err(ClearTaintRefused::NotTainted(id)));
    };
    if seen.is_some_and(|seen| seen != taint.at) {
        return Ok(Err(ClearTaintRefused::TaintedAgain { id, at: taint.at }));
    }
    let mut next = current.clone();
    next.taint = None;
    tx.update_connection(ConnectionStatus::Open, &next)?;
    tx.append_event(&crate::events::NewEvent {
        session_id: current.session_id,
        run_id: None,
        event_type: EventType::ConversationTaintCleared,
        actor: actor.clone(),
        payload: json!({
            "conversation_id": id.to_string(),
            "reason": reason,
            "tainted_at": taint.at.as_micros(),
            "tainted_by": taint.by,
        }),
        derivation_key: None,
        created_at: now,
    })?;
    Ok(Ok(next))
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
