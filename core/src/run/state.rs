//! The sole writer of run status (SPEC §8.1). Every status change goes through [`transition`],
//! which checks the edge, performs the guarded update, appends exactly one `run.*` event naming
//! the new state, and runs the terminal sweep in the same transaction. Other run updates go
//! through [`update_fields`], which refuses to change the status.

use serde_json::json;

use crate::approval::Approval;
use crate::events::{Actor, EventType, NewEvent, keys};
use crate::ids::ApprovalId;
use crate::invocation::Invocation;
use crate::invocation::outcome::{Outcome, ResultItem, codes};
use crate::store::{StoreTx, TxError};
use crate::time::Timestamp;
use crate::vocab::{ApprovalStatus, InvocationStatus, OutcomeStatus, RunStatus, TrustLevel};

use super::{Failure, Run, RunGuard, RunState};

/// Why a run returns to the queue (`run.requeued` payload `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequeueReason {
    LeaseExpired { reclaimed_epoch: u64 },
    ApprovalResolved(ApprovalId),
    ApprovalExpired(ApprovalId),
}

/// A status change and the data the new state owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// CLAIM: `QUEUED → RUNNING` under a new lease epoch.
    Claim {
        worker_id: String,
        lease_expires_at: Timestamp,
    },
    /// PARK: `RUNNING → WAITING_FOR_APPROVAL`, releasing the lease.
    Park {
        approval_ids: Vec<ApprovalId>,
    },
    /// RECLAIM, RESOLVE, EXPIRE: back to `QUEUED`.
    Requeue {
        reason: RequeueReason,
        scheduled_for: Option<Timestamp>,
    },
    Complete {
        final_message: String,
    },
    Fail(Failure),
    Cancel,
}

impl Change {
    fn target(&self) -> RunStatus {
        match self {
            Change::Claim { .. } => RunStatus::Running,
            Change::Park { .. } => RunStatus::WaitingForApproval,
            Change::Requeue { .. } => RunStatus::Queued,
            Change::Complete { .. } => RunStatus::Completed,
            Change::Fail(_) => RunStatus::Failed,
            Change::Cancel => RunStatus::Cancelled,
        }
    }
}

/// The edges of SPEC §8.1; submission inserts `QUEUED` directly.
pub fn edge_allowed(from: RunStatus, to: RunStatus) -> bool {
    use RunStatus::*;
    matches!(
        (from, to),
        (Queued, Running | Cancelled)
            | (
                Running,
                WaitingForApproval | Completed | Failed | Cancelled | Queued
            )
            | (WaitingForApproval, Queued | Cancelled)
    )
}

/// CLAIM's change to a run's row, `updated_at` and the writes apart: the next lease epoch,
/// and RUNNING under `worker_id` until `lease_expires_at`. [`transition`] applies it; an
/// execution whose claim is still to be written begins from it (`Worker::admitted_claim`).
pub fn apply_claim(next: &mut Run, current: &Run, worker_id: &str, lease_expires_at: Timestamp) {
    next.lease_epoch = current.lease_epoch + 1;
    next.state = RunState::Running {
        lease_owner: worker_id.to_owned(),
        lease_expires_at,
    };
}

/// Changes `current`'s status. `next` is `current` with any non-status edits the same
/// transaction makes (step count, attempts); its state must still be `current`'s.
pub fn transition(
    tx: &mut dyn StoreTx,
    current: &Run,
    mut next: Run,
    change: Change,
    actor: &Actor,
    now: Timestamp,
) -> Result<Run, TxError> {
    assert_eq!(
        next.state, current.state,
        "transition: status edits go through the change, not the row"
    );
    let from = current.status();
    let to = change.target();
    if !edge_allowed(from, to) {
        return Err(TxError::Conflict(format!(
            "invalid run transition {from}->{to}"
        )));
    }
    let (event_type, payload) = match &change {
        Change::Claim {
            worker_id,
            lease_expires_at,
        } => {
            apply_claim(&mut next, current, worker_id, *lease_expires_at);
            (
                EventType::RunStarted,
                json!({"worker_id": worker_id, "lease_epoch": next.lease_epoch, "attempts": next.attempts}),
            )
        }
        Change::Park { approval_ids } => {
            assert!(
                !approval_ids.is_empty(),
                "§16 #20: a parked run leaves at least one pending approval"
            );
            next.state = RunState::WaitingForApproval;
            let ids: Vec<String> = approval_ids.iter().map(ToString::to_string).collect();
            (
                EventType::RunWaitingForApproval,
                json!({ "approval_ids": ids }),
            )
        }
        Change::Requeue {
            reason,
            scheduled_for,
        } => {
            next.state = RunState::Queued {
                scheduled_for: *scheduled_for,
            };
            let payload = match reason {
                RequeueReason::LeaseExpired { reclaimed_epoch } => {
                    json!({"reason": "lease_expired", "attempts": next.attempts, "reclaimed_epoch": reclaimed_epoch})
                }
                RequeueReason::ApprovalResolved(id) => {
                    json!({"reason": "approval_resolved", "attempts": next.attempts, "approval_id": id.to_string()})
                }
                RequeueReason::ApprovalExpired(id) => {
                    json!({"reason": "approval_expired", "attempts": next.attempts, "approval_id": id.to_string()})
                }
            };
            (EventType::RunRequeued, payload)
        }
        Change::Complete { final_message } => {
            next.state = RunState::Completed {
                final_message: final_message.clone(),
            };
            (
                EventType::RunCompleted,
                json!({ "final_message": final_message }),
            )
        }
        Change::Fail(failure) => {
            next.state = RunState::Failed {
                failure: failure.clone(),
            };
            let failure_json =
                serde_json::to_value(failure).map_err(|e| TxError::Backend(e.to_string()))?;
            (EventType::RunFailed, json!({ "failure": failure_json }))
        }
        Change::Cancel => {
            next.state = RunState::Cancelled;
            (EventType::RunCancelled, json!({"reason": "requested"}))
        }
    };
    next.updated_at = now;
    // The sweep's events precede the run's own, so a reader sees the closures first (§8.5:
    // `approval.cancelled`, `tool.call.denied`, `run.cancelled`).
    if to.is_terminal() {
        terminal_sweep(tx, current, to == RunStatus::Cancelled, actor, now)?;
    }
    let guard = RunGuard {
        run_id: current.id,
        status: from,
        lease: current.lease(),
    };
    let stored = tx.update_run(&guard, &next)?;
    tx.append_event(&NewEvent {
        session_id: stored.session_id,
        run_id: Some(stored.id),
        event_type,
        actor: actor.clone(),
        payload,
        derivation_key: None,
        created_at: now,
    })?;
    debug_assert_eq!(
        stored.lease().is_some(),
        stored.status() == RunStatus::Running,
        "§16 #28: lease iff RUNNING"
    );
    Ok(stored)
}

/// Updates fields other than the status (counters, the cancellation flag, the lease expiry is
/// the heartbeat's). Refuses to change the status: that is [`transition`]'s alone.
pub fn update_fields(
    tx: &mut dyn StoreTx,
    current: &Run,
    mut next: Run,
    now: Timestamp,
) -> Result<Run, TxError> {
    assert_eq!(
        next.state, current.state,
        "update_fields never changes a run's state"
    );
    next.updated_at = now;
    let guard = RunGuard {
        run_id: current.id,
        status: current.status(),
        lease: current.lease(),
    };
    tx.update_run(&guard, &next)
}

/// Closes an invocation with an outcome and appends its terminal event (`tool.call.result:{id}`).
pub fn close_invocation(
    tx: &mut dyn StoreTx,
    invocation: &Invocation,
    outcome: Outcome,
    result_item: &ResultItem,
    actor: &Actor,
    now: Timestamp,
) -> Result<Invocation, TxError> {
    let mut next = invocation.clone();
    let item_text = result_item.to_canonical();
    let event_type = match outcome.status {
        OutcomeStatus::Succeeded => EventType::ToolCallCompleted,
        OutcomeStatus::Failed => EventType::ToolCallFailed,
        OutcomeStatus::Denied => EventType::ToolCallDenied,
        OutcomeStatus::Uncertain => EventType::ToolCallUncertain,
    };
    let reason_code = outcome.reason_code.clone();
    next.close(outcome, item_text.clone(), now);
    tx.update_invocation(invocation.status, &next)?;
    tx.append_event(&NewEvent {
        session_id: invocation.session_id,
        run_id: Some(invocation.run_id),
        event_type,
        actor: actor.clone(),
        payload: json!({
            "invocation_id": invocation.id.to_string(),
            "name": invocation.tool_name,
            "call_id": invocation.call_id,
            "reason_code": reason_code,
            "result_item": item_text,
        }),
        derivation_key: Some(keys::result(invocation.id)),
        created_at: now,
    })?;
    Ok(next)
}

/// Closes an invocation with a table outcome and an `internal_tool` result item (refusals and
/// sweep closures).
pub fn close_with_code(
    tx: &mut dyn StoreTx,
    invocation: &Invocation,
    status: OutcomeStatus,
    reason_code: &str,
    actor: &Actor,
    now: Timestamp,
) -> Result<Invocation, TxError> {
    let outcome = Outcome::new(status, &invocation.tool_name, reason_code);
    let item = ResultItem::from_outcome(&invocation.call_id, &outcome, TrustLevel::InternalTool);
    close_invocation(tx, invocation, outcome, &item, actor, now)
}

/// Closes an approval that is still pending as `cancelled` with its event.
pub fn cancel_approval(
    tx: &mut dyn StoreTx,
    approval: &Approval,
    actor: &Actor,
    now: Timestamp,
) -> Result<(), TxError> {
    let mut next = approval.clone();
    next.status = ApprovalStatus::Cancelled;
    next.resolved_at = Some(now);
    tx.update_approval(ApprovalStatus::Pending, &next)?;
    tx.append_event(&NewEvent {
        session_id: approval.session_id,
        run_id: Some(approval.run_id),
        event_type: EventType::ApprovalCancelled,
        actor: actor.clone(),
        payload: json!({"approval_id": approval.id.to_string()}),
        derivation_key: Some(keys::approval_closed(approval.id)),
        created_at: now,
    })?;
    Ok(())
}

/// The terminal sweep of SPEC §8.1: no terminal run keeps a non-terminal invocation or a
/// pending approval (§16 #30).
fn terminal_sweep(
    tx: &mut dyn StoreTx,
    run: &Run,
    cancelling: bool,
    actor: &Actor,
    now: Timestamp,
) -> Result<(), TxError> {
    let approvals = tx.approvals_of_run(run.id)?;
    for approval in approvals
        .iter()
        .filter(|a| a.status == ApprovalStatus::Pending)
    {
        cancel_approval(tx, approval, actor, now)?;
    }
    // Only unfinished calls change; a store with an index reads just those, not the run's
    // whole history (a finished run's sweep decoded every call it ever made).
    for invocation in tx.invocations_of_run_in(run.id, &InvocationStatus::UNFINISHED)? {
        match invocation.status {
            InvocationStatus::Proposed
            | InvocationStatus::Authorized
            | InvocationStatus::WaitingForApproval => {
                // The approval's status as it was before this sweep cancelled pending ones.
                let approval_status = approvals
                    .iter()
                    .find(|a| a.action_id == invocation.id)
                    .map(|a| a.status);
                let code = match (invocation.status, approval_status) {
                    (InvocationStatus::WaitingForApproval, Some(ApprovalStatus::Denied)) => {
                        codes::APPROVAL_DENIED
                    }
                    (InvocationStatus::WaitingForApproval, Some(ApprovalStatus::Expired)) => {
                        codes::APPROVAL_EXPIRED
                    }
                    _ if cancelling => codes::RUN_CANCELLED,
                    _ => codes::RUN_TERMINATED,
                };
                close_with_code(tx, &invocation, OutcomeStatus::Denied, code, actor, now)?;
            }
            InvocationStatus::Running => {
                if cancelling {
                    // Callers observe cancellation only where no call is running; refuse rather
                    // than abandon a started effect (G4).
                    return Err(TxError::Conflict(
                        "§8.1: a transition to CANCELLED met a RUNNING invocation".into(),
                    ));
                }
                if invocation.effect_in_doubt() {
                    close_with_code(
                        tx,
                        &invocation,
                        OutcomeStatus::Uncertain,
                        codes::OUTCOME_UNKNOWN,
                        actor,
                        now,
                    )?;
                } else {
                    close_with_code(
                        tx,
                        &invocation,
                        OutcomeStatus::Failed,
                        codes::INTERRUPTED,
                        actor,
                        now,
                    )?;
                }
            }
            InvocationStatus::Succeeded
            | InvocationStatus::Failed
            | InvocationStatus::Denied
            | InvocationStatus::Uncertain => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_follow_the_spec_table() {
        use RunStatus::*;
        let allowed: Vec<(RunStatus, RunStatus)> = RunStatus::ALL
            .iter()
            .flat_map(|from| RunStatus::ALL.iter().map(move |to| (*from, *to)))
            .filter(|(from, to)| edge_allowed(*from, *to))
            .collect();
        assert_eq!(
            allowed,
            vec![
                (Queued, Running),
                (Queued, Cancelled),
                (Running, Queued),
                (Running, WaitingForApproval),
                (Running, Completed),
                (Running, Failed),
                (Running, Cancelled),
                (WaitingForApproval, Queued),
                (WaitingForApproval, Cancelled),
            ]
        );
    }
}
