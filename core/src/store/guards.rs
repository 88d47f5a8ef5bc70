//! The rules a store checks on a row it is asked to replace (SPEC §8.1, §9.1, §10.1, §14, §19),
//! once for every store: `MemStore`, the SQLite store and the PostgreSQL store each read the
//! current row and call these before they write.
//!
//! Core's writers (`run::state`, the invocation pipeline, approvals, connections) already keep
//! these rules; a store repeats them as defence in depth, so that a bug in a writer is refused
//! with a `Conflict` naming the rule instead of persisted. The messages are part of the
//! contract: the store tests and the contract suite match on them, and
//! `mem_store::is_rule_breach` matches fragments of them.

use crate::approval::Approval;
use crate::conversation::record::{Connection, ConnectionStatus};
use crate::invocation::Invocation;
use crate::run::state::edge_allowed;
use crate::run::{Lease, Run, RunGuard, RunState};
use crate::vocab::{ApprovalStatus, InvocationStatus, RunStatus};

use super::TxError;

fn conflict(message: impl Into<String>) -> TxError {
    TxError::Conflict(message.into())
}

/// Whether `lease` is the run's current lease: RUNNING under exactly this owner and epoch.
pub fn holds(run: &Run, lease: &Lease) -> bool {
    run.id == lease.run_id
        && run.lease_epoch == lease.lease_epoch
        && matches!(&run.state, RunState::Running { lease_owner, .. } if *lease_owner == lease.worker_id)
}

/// Checks a guarded run update against the current row (`None`: no such run) and returns that
/// row. A lease guard that no longer holds is `Fenced` whatever else changed; without one, a
/// status mismatch is an ordinary race lost to another transaction (`Conflict`). Then the
/// immutable fields, and [`check_run_change`].
pub fn check_run_update<'r>(
    guard: &RunGuard,
    current: Option<&'r Run>,
    next: &Run,
) -> Result<&'r Run, TxError> {
    // Runs are never deleted, so a missing row is a caller bug, except that a lease on it
    // cannot hold either.
    let Some(current) = current else {
        return Err(match guard.lease {
            Some(_) => TxError::Fenced,
            None => TxError::NotFound,
        });
    };
    if let Some(lease) = &guard.lease {
        if lease.run_id != guard.run_id
            || current.status() != guard.status
            || !holds(current, lease)
        {
            return Err(TxError::Fenced);
        }
    } else if current.status() != guard.status {
        return Err(conflict(format!(
            "run {} is {}, not the expected {}",
            guard.run_id,
            current.status(),
            guard.status
        )));
    }
    if next.id != guard.run_id || !current.same_identity(next) {
        return Err(conflict(format!(
            "runs: an immutable field of run {} changed",
            guard.run_id
        )));
    }
    check_run_change(current, next)?;
    Ok(current)
}

/// The rules on a run update beyond its guard: the edges of SPEC §8.1 (a same-status update is
/// no transition), the epoch advancing by one exactly at CLAIM and never otherwise (so a guarded
/// update cannot move a lease), the lease owner changing only through CLAIM, and `attempts`
/// growing by one only when RECLAIM takes a run out of RUNNING (SPEC §16 #29).
pub fn check_run_change(current: &Run, next: &Run) -> Result<(), TxError> {
    let (from, to) = (current.status(), next.status());
    if from != to && !edge_allowed(from, to) {
        return Err(conflict(format!("invalid run transition {from}->{to}")));
    }
    let claiming = to == RunStatus::Running && from != RunStatus::Running;
    if claiming && Some(next.lease_epoch) != current.lease_epoch.checked_add(1) {
        return Err(conflict("lease_epoch advances by exactly one at CLAIM"));
    }
    if !claiming && next.lease_epoch != current.lease_epoch {
        return Err(conflict("lease_epoch changes only at CLAIM"));
    }
    if from == RunStatus::Running && to == RunStatus::Running && current.lease() != next.lease() {
        return Err(conflict(
            "a running run's lease owner changes only through CLAIM",
        ));
    }
    let leaving_running = from == RunStatus::Running && to != RunStatus::Running;
    let attempts_ok = next.attempts == current.attempts
        || (leaving_running && Some(next.attempts) == current.attempts.checked_add(1));
    if !attempts_ok {
        return Err(conflict(
            "attempts grows by one only when RECLAIM takes a run out of RUNNING",
        ));
    }
    Ok(())
}

/// Checks an invocation update against the current row: the expected status, the immutable
/// fields, a terminal row never changing, the edges of `InvocationStatus::may_become`, and the
/// watermark written once, by START (AUTHORIZED -> RUNNING), and never changed. The row's own
/// CHECKs and [`check_outcome_agrees`] are the caller's, on `next`.
pub fn check_invocation_update(
    expected: InvocationStatus,
    current: &Invocation,
    next: &Invocation,
) -> Result<(), TxError> {
    if current.status != expected {
        return Err(conflict(format!(
            "invocation {} is {}, not the expected {expected}",
            next.id, current.status
        )));
    }
    if !current.same_identity(next) {
        return Err(conflict(format!(
            "tool_invocations: an immutable field of invocation {} changed",
            next.id
        )));
    }
    if current.status.is_terminal() && current != next {
        return Err(conflict(format!(
            "tool_invocations: terminal invocation {} never changes",
            next.id
        )));
    }
    if current.status != next.status && !current.status.may_become(next.status) {
        return Err(conflict(format!(
            "invalid invocation transition {}->{}",
            current.status, next.status
        )));
    }
    match (current.effect_sent_at, next.effect_sent_at) {
        (Some(sent), next_sent) if next_sent != Some(sent) => Err(conflict(
            "tool_invocations: effect_sent_at never changes once set",
        )),
        (None, Some(_))
            if !(current.status == InvocationStatus::Authorized
                && next.status == InvocationStatus::Running) =>
        {
            Err(conflict(
                "tool_invocations: effect_sent_at is set only by START",
            ))
        }
        _ => Ok(()),
    }
}

/// Outcome/status agreement of a terminal invocation (`Invocation::close` derives one from the
/// other); the CHECKs of SPEC §14 themselves are the schema's (`MemStore`: its row checks).
pub fn check_outcome_agrees(invocation: &Invocation) -> Result<(), TxError> {
    if let Some(outcome) = &invocation.outcome
        && invocation.status.is_terminal()
        && (outcome.invocation_status() != invocation.status
            || invocation.outcome_status != Some(outcome.status))
    {
        return Err(conflict(format!(
            "tool_invocations: outcome {} does not match status {}",
            outcome.status, invocation.status
        )));
    }
    Ok(())
}

/// Checks an approval update against the current row: the expected status, the immutable
/// fields, and SPEC §10.1's rule that a terminal row changes only by the single write of
/// `revalidated_policy_version`, from null to a value.
pub fn check_approval_update(
    expected: ApprovalStatus,
    current: &Approval,
    next: &Approval,
) -> Result<(), TxError> {
    if current.status != expected {
        return Err(conflict(format!(
            "approval {} is {}, not the expected {expected}",
            next.id, current.status
        )));
    }
    if !current.same_identity(next) {
        return Err(conflict(format!(
            "approvals: an immutable field of approval {} changed",
            next.id
        )));
    }
    if current.status != ApprovalStatus::Pending {
        let mut unchanged = next.clone();
        unchanged
            .revalidated_policy_version
            .clone_from(&current.revalidated_policy_version);
        let single_write = current.revalidated_policy_version.is_none()
            || current.revalidated_policy_version == next.revalidated_policy_version;
        if unchanged != *current || !single_write {
            return Err(conflict(format!(
                "approvals: terminal approval {} changes only by the single write of revalidated_policy_version",
                next.id
            )));
        }
    }
    Ok(())
}

/// Checks a connection update against the current row: the expected status, the immutable
/// fields, a closed connection never changing (SPEC §19), and a conversation's call counter
/// never going down (§22.1: `max_tool_calls` counts every call the conversation started, so a
/// counter that went back would admit calls past the limit).
pub fn check_connection_update(
    expected: ConnectionStatus,
    current: &Connection,
    next: &Connection,
) -> Result<(), TxError> {
    if current.status() != expected {
        return Err(conflict(format!(
            "connections: connection {} is {}, not {expected}",
            next.id,
            current.status()
        )));
    }
    if !current.same_identity(next) {
        return Err(conflict(format!(
            "connections: an immutable field of connection {} changed",
            next.id
        )));
    }
    if !current.is_open() {
        return Err(conflict(format!(
            "connections: closed connection {} never changes",
            next.id
        )));
    }
    if next.call_count < current.call_count {
        return Err(conflict(format!(
            "CHECK connections: call_count of connection {} only grows ({} to {})",
            next.id, current.call_count, next.call_count
        )));
    }
    Ok(())
}
