//! CANCEL's writes (SPEC §8.5), one rule shared by the control service's `cancel_run`, a
//! conversation's close (§19.4, `conversation::close_in_tx`) and a gateway's cancel of
//! a client's call run.

use serde_json::json;

use crate::events::{Actor, EventType, NewEvent};
use crate::run::Run;
use crate::run::state::{Change, transition, update_fields};
use crate::store::{StoreTx, TxError};
use crate::time::Timestamp;
use crate::vocab::{InvocationStatus, RunStatus};

/// `cancel_run`'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CancelOutcome {
    pub accepted: bool,
    pub status: RunStatus,
}

/// CANCEL's writes inside an open transaction (SPEC §8.5), shared by `cancel_run` and a
/// connection's close (§19.4): a terminal run is left alone (`accepted: false`); otherwise
/// `cancel_requested_at` is set (with `run.cancel_requested` on the first request), and a QUEUED
/// run without a RUNNING invocation or a WAITING_FOR_APPROVAL run is cancelled at once. Returns
/// the outcome and whether anything was written.
pub fn request_cancel_in_tx(
    tx: &mut dyn StoreTx,
    run: &Run,
    actor: &Actor,
    now: Timestamp,
) -> Result<(CancelOutcome, bool), TxError> {
    if run.status().is_terminal() {
        let outcome = CancelOutcome {
            accepted: false,
            status: run.status(),
        };
        return Ok((outcome, false));
    }
    let first_request = run.cancel_requested_at.is_none();
    let flagged = if first_request {
        let mut next = run.clone();
        next.cancel_requested_at = Some(now);
        let stored = update_fields(tx, run, next, now)?;
        tx.append_event(&NewEvent {
            session_id: run.session_id,
            run_id: Some(run.id),
            event_type: EventType::RunCancelRequested,
            actor: actor.clone(),
            payload: json!({"requested_at": now.to_string()}),
            derivation_key: None,
            created_at: now,
        })?;
        stored
    } else {
        run.clone()
    };
    let running_call = !tx
        .invocations_of_run_in(run.id, &[InvocationStatus::Running])?
        .is_empty();
    let direct = match flagged.status() {
        RunStatus::Queued => !running_call,
        RunStatus::WaitingForApproval => true,
        _ => false,
    };
    if direct {
        let cancelled = transition(tx, &flagged, flagged.clone(), Change::Cancel, actor, now)?;
        let outcome = CancelOutcome {
            accepted: true,
            status: cancelled.status(),
        };
        return Ok((outcome, true));
    }
    let outcome = CancelOutcome {
        accepted: true,
        status: flagged.status(),
    };
    Ok((outcome, first_request))
}
