//! Planted bugs for the simulator's mutant check (issue 5): a mutant is a named, deliberate
//! violation of one rule of SPEC §16 that the simulator must catch within 1,000 seeds.
//!
//! **Selection.** Everything here is compiled only with the `mutants` cargo feature, which is off
//! by default, so a normal build carries no hook at all. With the feature on, the hooks in
//! `core/src` are one `#[cfg(feature = "mutants")]` statement each and do nothing until
//! [`activate`] selects a mutant by name at run time; the selection is one process-global, so one
//! build tests every mutant (`airlock-sim mutants` selects each in turn). Only one mutant is
//! active at a time.
//!
//! | mutant | hook | rule it breaks |
//! |---|---|---|
//! | `skip_watermark` | pipeline START | #11: START commits no `effect_sent_at` |
//! | `replay_uncertain` | recovery table | #13, G4: a watermarked non-idempotent row re-executes instead of MARK_UNCERTAIN |
//! | `second_resolution_wins` | control `resolve` | #22: a differing second resolution is reported `applied` |
//! | `release_lease_before_park` | executor PARK | #20: PARK releases the lease before its approvals are announced (a second transaction after `after_park`) |
//! | `no_fencing_check` | `MemStore::guard_lease` | #28: a fenced worker's transactions commit |
//! | `approve_without_revalidation` | pipeline RESUME_APPROVAL | #10, G2: an approved row is authorized with its old decision, without §10.3 |
//! | `resume_counts_attempt` | executor PARK | #29: the park/resume cycle counts as an attempt (MemStore refuses an attempts change at CLAIM, so the hook sits at the commit that ends the attempt) |
//! | `parallel_mixed_batch` | executor admission | #36: any batch of 2..=8 calls runs concurrently |
//! | `replan_pending_step` | executor resume | §8.3: a resumed execution ignores its checkpointed batch and asks the planner for that step again |
//! | `start_before_observation` | pipeline folded START | §17.1 F2, §8.5 point 3: the folded PROPOSE·START commits START without reading the observation point (a cancel committed earlier is ignored) |
//! | `batch_before_last_finish` | pipeline folded START | §17.1 F4: the step's BATCH commits with the last call's START, ahead of its FINISH, recording a result the call does not have yet |
//! | `pending_after_first_call` | pipeline folded PROPOSE·START, `StepLedger` BATCH | §17.1 F1: a step whose first call is an `allow` commits that call's PROPOSE·START without the step's PENDING, which the step's next transaction writes (a row of step k exists before step k is recorded) |
//! | `revalidate_start_uncounted` | pipeline REVALIDATE | §17.1 F3, #17: the START folded into REVALIDATE leaves `tool_call_count` unchanged (an approved call escapes the tool-call budget) |
//! | `ignore_heartbeat_cancel` | worker heartbeat | #33, §8.2: a heartbeat that reads `cancel_requested_at` does not cancel the token, so the run goes on until a row read (START, PARK) happens to see the request |

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::action::PolicyDecision;
use crate::approval::Approval;
use crate::approval::revalidate::Revalidation;
use crate::env::Env;
use crate::events::{Actor, EventType, NewEvent, keys};
use crate::ids::RunId;
use crate::invocation::Invocation;
use crate::run::Run;
use crate::store::Store;
use crate::time::Timestamp;
use crate::vocab::{ApprovalResolution, ApprovalStatus};

/// Every planted bug, by name.
pub const NAMES: [&str; 14] = [
    "skip_watermark",
    "replay_uncertain",
    "second_resolution_wins",
    "release_lease_before_park",
    "no_fencing_check",
    "approve_without_revalidation",
    "resume_counts_attempt",
    "parallel_mixed_batch",
    "replan_pending_step",
    "start_before_observation",
    "batch_before_last_finish",
    "pending_after_first_call",
    "revalidate_start_uncounted",
    "ignore_heartbeat_cancel",
];

/// Planted bugs of live connections and conversations (SPEC §19.4, §22), caught by the simulator's connection world
/// (`airlock-sim-mcp mutants`) rather than the run world, whose runs have no connection.
///
/// | mutant | hook | rule it breaks |
/// |---|---|---|
/// | `disconnect_not_recorded` | `connection::close_in_tx` | §19.4: a client's DISCONNECT commits nothing (the gateway only stops reading it), so its connection stays open and an approved call of the gone client is claimed, revalidated and sent |
/// | `no_in_flight_check` | pipeline step 5 | §19.7: the repeat check sees only `UNCERTAIN` twins, so a host's retry after a gateway crash, sent while the first invocation is still `RUNNING` under its unexpired lease, repeats the effect |
/// | `stale_conversation_taint` | `LivePlanner::next_turn`, pipeline PROPOSE | §22.2: a call run never reads its conversation's taint, so a call proposed after an untrusted result was answered is decided untainted |
/// | `approved_without_request` | `ConnectionDriver::withheld_until` | §22.3: an approved call whose request left (a host's timeout) is executed although no request waits for it |
/// | `state_not_bound_to_principal` | `conversation::request_state::bound_to` (approval and relayed states) | §22.3 item 2: a sealed `requestState` brought back by another principal is accepted, so it moves (and may answer the approval of) a call that is not theirs |
/// | `task_replayed_after_crash` | pipeline recovery (§9.4) | §22.3 item 1, §22.4: a task's call that was sent when its gateway crashed is sent again by the process that adopts the task, instead of being recorded UNCERTAIN |
pub const CONNECTION_NAMES: [&str; 6] = [
    "disconnect_not_recorded",
    "no_in_flight_check",
    "stale_conversation_taint",
    "approved_without_request",
    "state_not_bound_to_principal",
    "task_replayed_after_crash",
];

/// 0: none; `i + 1`: `NAMES[i]`; `NAMES.len() + j + 1`: `CONNECTION_NAMES[j]`.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Selects the mutant called `name`, or none. An unknown name is an error and changes nothing.
pub fn activate(name: Option<&str>) -> Result<(), String> {
    let index = match name {
        None => 0,
        Some(name) => {
            every_name()
                .position(|n| n == name)
                .ok_or_else(|| format!("unknown mutant '{name}'"))?
                + 1
        }
    };
    ACTIVE.store(index, Ordering::SeqCst);
    Ok(())
}

/// The active mutant, if any.
pub fn current() -> Option<&'static str> {
    match ACTIVE.load(Ordering::Relaxed) {
        0 => None,
        i => every_name().nth(i - 1),
    }
}

/// Every mutant in `ACTIVE`'s numbering: [`NAMES`], then [`CONNECTION_NAMES`].
fn every_name() -> impl Iterator<Item = &'static str> {
    NAMES.iter().chain(CONNECTION_NAMES.iter()).copied()
}

/// `disconnect_not_recorded`: whether a close for `reason` commits nothing.
pub fn disconnect_not_recorded(reason: crate::conversation::record::CloseReason) -> bool {
    active("disconnect_not_recorded")
        && reason == crate::conversation::record::CloseReason::Disconnected
}

/// `no_in_flight_check`: whether step 5 ignores twins in flight.
pub fn no_in_flight_check() -> bool {
    active("no_in_flight_check")
}

/// `approved_without_request`: whether a conversation's driver executes an approved call run
/// that no request waits for (SPEC §22.3).
pub fn approved_without_request() -> bool {
    active("approved_without_request")
}

/// `stale_conversation_taint`: whether a call run decides without reading its conversation's
/// taint (neither when its call is handed out nor in its first transaction, SPEC §22.2).
pub fn stale_conversation_taint() -> bool {
    active("stale_conversation_taint")
}

/// `state_not_bound_to_principal`: whether a state's principal is left unchecked on its retry.
pub fn state_not_bound_to_principal() -> bool {
    active("state_not_bound_to_principal")
}

/// `task_replayed_after_crash`: the recovery `action` of a row found at replay, re-executed
/// instead of marked UNCERTAIN when its run is a task's (`is_task`, asked only then).
pub fn task_replayed_after_crash(
    action: crate::vocab::RecoveryAction,
    is_task: impl FnOnce() -> bool,
) -> crate::vocab::RecoveryAction {
    use crate::vocab::RecoveryAction::{MarkUncertain, Reexecute};
    if active("task_replayed_after_crash") && action == MarkUncertain && is_task() {
        Reexecute
    } else {
        action
    }
}

/// Whether the mutant called `name` is active.
pub fn active(name: &str) -> bool {
    current() == Some(name)
}

/// `second_resolution_wins`: the approval as a second, different resolution would leave it. The
/// store refuses to change a resolved approval, so the mutant only reports `applied`.
pub fn resolved_as(
    approval: &Approval,
    resolution: ApprovalResolution,
    now: Timestamp,
) -> Approval {
    let mut next = approval.clone();
    next.status = match resolution {
        ApprovalResolution::ApproveOnce => ApprovalStatus::Approved,
        ApprovalResolution::Deny => ApprovalStatus::Denied,
    };
    next.resolution = Some(resolution);
    next.resolved_at = Some(now);
    next
}

/// `second_resolution_wins`: whether a resolve of an already resolved approval reports `applied`.
pub fn second_resolution_wins(approval: &Approval, resolution: ApprovalResolution) -> bool {
    let requested = match resolution {
        ApprovalResolution::ApproveOnce => ApprovalStatus::Approved,
        ApprovalResolution::Deny => ApprovalStatus::Denied,
    };
    active("second_resolution_wins") && approval.status != requested
}

/// `release_lease_before_park`: whether PARK commits without announcing its approvals.
pub fn park_without_announcing() -> bool {
    active("release_lease_before_park")
}

/// `release_lease_before_park`: announces the run's unannounced pending approvals in a second
/// transaction, after the lease is gone (a crash at `after_park` leaves them unannounced).
pub fn announce_after_park<S: Store>(env: &Env<S>, run: RunId, actor: &Actor) {
    if !park_without_announcing() {
        return;
    }
    let now = env.clock.now();
    let _ = env.transact(|tx| {
        for approval in tx.approvals_of_run(run)? {
            if approval.status == ApprovalStatus::Pending && approval.requested_at.is_none() {
                let mut announced = approval.clone();
                announced.requested_at = Some(now);
                tx.update_approval(ApprovalStatus::Pending, &announced)?;
                tx.append_event(&NewEvent {
                    session_id: approval.session_id,
                    run_id: Some(approval.run_id),
                    event_type: EventType::ApprovalRequested,
                    actor: actor.clone(),
                    payload: serde_json::json!({
                        "approval_id": approval.id.to_string(),
                        "invocation_id": approval.action_id.to_string(),
                        "risk": approval.risk.as_str(),
                        "expires_at": approval.expires_at.to_string(),
                    }),
                    derivation_key: Some(keys::approval_requested(approval.id)),
                    created_at: now,
                })?;
            }
        }
        Ok(())
    });
}

/// `no_fencing_check`: whether `guard_lease` lets every lease pass.
pub fn skip_fencing() -> bool {
    active("no_fencing_check")
}

/// `approve_without_revalidation`: an approved row keeps its stored decision, whatever §10.3
/// says.
pub fn approve_without_revalidation(verdict: Revalidation, row: &Invocation) -> Revalidation {
    if !active("approve_without_revalidation") {
        return verdict;
    }
    row.policy_decision
        .clone()
        .map_or(verdict, |decision: PolicyDecision| {
            Revalidation::Authorized(decision)
        })
}

/// `resume_counts_attempt`: the parked run's `attempts` grows as if the park were an expiry.
pub fn resume_counts_attempt(mut run: Run) -> Run {
    if active("resume_counts_attempt") {
        run.attempts += 1;
    }
    run
}

/// `parallel_mixed_batch`: whether a batch of `len` calls is admitted in parallel regardless
/// of its tools.
pub fn parallel_mixed_batch(len: usize) -> bool {
    active("parallel_mixed_batch") && (2..=8).contains(&len)
}

/// `replan_pending_step`: whether a resumed execution drops its checkpointed pending batch.
pub fn replan_pending_step() -> bool {
    active("replan_pending_step")
}

/// `skip_watermark`: whether START leaves `effect_sent_at` null.
pub fn skip_watermark() -> bool {
    active("skip_watermark")
}

/// `replay_uncertain`: whether a watermarked non-idempotent RUNNING row re-executes.
pub fn replay_uncertain() -> bool {
    active("replay_uncertain")
}

/// `start_before_observation`: whether the folded START ignores observation point 3 and the
/// deadline read in its transaction.
pub fn start_before_observation() -> bool {
    active("start_before_observation")
}

/// `batch_before_last_finish`: whether the last call's folded PROPOSE·START also commits the
/// step's BATCH, with a provisional success result (the pipeline's `provisional_result`) standing in for the result FINISH will store.
pub fn batch_before_last_finish() -> bool {
    active("batch_before_last_finish")
}

/// `pending_after_first_call`: whether an allowed call's PROPOSE·START leaves the step's
/// PENDING out (the step's next transaction writes it; BATCH at the latest). Calls that park,
/// are denied or refused still carry it, so a parked step is always recorded.
pub fn pending_after_first_call() -> bool {
    active("pending_after_first_call")
}

/// `pending_after_first_call` at PROPOSE: the step ledger that stages the step's PENDING in
/// the transaction that inserts `row`, which is none for an allowed call.
pub fn ledger_at_propose<L>(ledger: Option<L>, row: &Invocation) -> Option<L> {
    ledger.filter(|_| {
        !(pending_after_first_call() && row.status == crate::vocab::InvocationStatus::Authorized)
    })
}

/// `revalidate_start_uncounted`: gives back the `tool_call_count` increment of the START that
/// REVALIDATE just folded in, inside the same transaction.
pub fn uncount_revalidated_start(
    tx: &mut dyn crate::store::StoreTx,
    run: RunId,
    now: Timestamp,
) -> Result<(), crate::store::TxError> {
    if !active("revalidate_start_uncounted") {
        return Ok(());
    }
    let current = tx.run(run)?.ok_or(crate::store::TxError::NotFound)?;
    let mut next = current.clone();
    next.tool_call_count = next.tool_call_count.saturating_sub(1);
    crate::run::state::update_fields(tx, &current, next, now)?;
    Ok(())
}

/// `ignore_heartbeat_cancel`: whether a heartbeat's cancel report is dropped.
pub fn ignore_heartbeat_cancel() -> bool {
    active("ignore_heartbeat_cancel")
}
