//! The simulator's checkers (SPEC §16, rules marked S): core's snapshot checker
//! (`testing::invariants::check`) plus the rules that need what only the simulator observed —
//! commit boundaries, the approver's answers, the ground truth of effects and workspaces, time
//! (the cancel bound of #33), the processes' tool catalogs, and the state after the quiet
//! phase. Each violation names its rule (`inv_28_…`).

mod batches;
mod catalog;
#[cfg(test)]
pub(crate) mod fixtures;
mod latency;
mod lease;
mod runs;
mod world;

use std::collections::{BTreeMap, BTreeSet};

use airlock_core::control::ServiceError;
use airlock_core::events::{Event, EventType};
use airlock_core::ids::{ApprovalId, InvocationId, RunId};
use airlock_core::invocation::outcome::ResultItem;
use airlock_core::mem_store::MemSnapshot;
use airlock_core::testing::invariants::{Violation, check, run_event_target};
use airlock_core::vocab::{
    ApprovalResolution, ApprovalStatus, IdempotencyClass, InvocationStatus, ResolveState,
    RunStatus, TrustLevel,
};

use crate::plan::Plan;
use crate::store::{CommitFindings, CommitRecord};

pub use world::{Entry, Observations, QuietEnd, ReadRecord, ResolveRecord, World, WriteRecord};

/// Every check, in rule order, with how often the conditional ones found their premises and
/// were asserted (`check.…` counts, reported beside a sweep's outcomes).
pub fn check_world(
    plan: &Plan,
    snapshot: &MemSnapshot,
    commits: &[CommitRecord],
    findings: &CommitFindings,
    observations: &Observations,
    quiet: QuietEnd,
) -> (Vec<Violation>, BTreeMap<String, u64>) {
    let world = World {
        plan,
        snapshot,
        commits,
        observations,
    };
    let mut asserted: BTreeMap<String, u64> = BTreeMap::new();
    let mut out = check(snapshot, &observations.effects, plan.max_attempts);
    let mut fail = |invariant: &'static str, detail: String| {
        out.push(Violation { invariant, detail });
    };
    for detail in &observations.open_transaction_calls {
        fail("inv_12_no_transaction_during_tools", detail.clone());
    }
    for detail in replays_land_once(observations) {
        fail("inv_13_non_idempotent_effects_at_most_once", detail);
    }
    for detail in &findings.violations {
        fail("inv_15_invocation_rows_are_well_formed", detail.clone());
    }
    for detail in park_commits_announce(commits) {
        fail("inv_20_park_announces_pending_approvals", detail);
    }
    for detail in waiting_runs_never_reclaimed(commits) {
        fail("inv_21_waiting_runs_hold_nothing", detail);
    }
    for detail in approver_answers(snapshot, &observations.resolves) {
        fail("inv_22_one_resolution_per_approval", detail);
    }
    for detail in lease::fenced_workers_commit_nothing(commits) {
        fail("inv_28_fenced_worker_commits_nothing", detail);
    }
    for detail in cancel_closes_no_running_call(commits) {
        fail("inv_31_cancel_never_abandons_an_effect", detail);
    }
    for detail in parked_cancel_is_one_commit(snapshot, commits) {
        fail("inv_32_parked_cancel_is_one_commit", detail);
    }
    for detail in provenance(snapshot, observations) {
        fail("inv_38_provenance_after_restart", detail);
    }
    for detail in events_append_only(snapshot, commits) {
        fail("inv_40_event_sequences", detail);
    }
    for detail in &observations.worker_errors {
        fail("worker_loop_error", detail.clone());
    }
    for detail in &findings.refused {
        fail("store_refused_a_rule_breaking_write", detail.clone());
    }
    for detail in &observations.replanned {
        fail("a_checkpointed_step_is_never_planned_again", detail.clone());
    }
    for detail in &observations.history_mismatches {
        fail("inv_16_the_planner_sees_the_stored_results", detail.clone());
    }
    for detail in &findings.started_after_cancel {
        fail("point_3_is_read_inside_the_folded_start", detail.clone());
    }
    for detail in &findings.early_step_records {
        fail(
            "a_step_is_recorded_after_its_last_call_ends",
            detail.clone(),
        );
    }
    for detail in &findings.unrecorded_step_rows {
        fail("a_step_is_recorded_before_its_calls", detail.clone());
    }
    for detail in &findings.early_parks {
        fail("inv_36_a_batch_parks_after_it_settles", detail.clone());
    }
    for detail in batches::sequential_batches_in_order(&world) {
        fail("inv_36_sequential_calls_in_planner_order", detail);
    }
    for detail in batches::parallel_groups_kept(&world) {
        fail("inv_36_a_resumed_batch_keeps_its_group", detail);
    }
    for (invariant, detail) in catalog::pins_and_gone_tools(&world, &mut asserted) {
        fail(invariant, detail);
    }
    for detail in latency::cancel_latency(&world, &mut asserted) {
        fail("inv_33_cancel_latency", detail);
    }
    for (invariant, detail) in runs::run_outcomes(&world, &mut asserted) {
        fail(invariant, detail);
    }
    for (invariant, detail) in liveness(snapshot, quiet) {
        fail(invariant, detail);
    }
    (out, asserted)
}

/// #13 / G4 for `conditionally_idempotent` tools: every request after the first for one key is
/// a REPLAY_IDEMPOTENCY_KEY (`ctx.replay`), and the key takes effect once.
fn replays_land_once(o: &Observations) -> Vec<String> {
    let mut failures = Vec::new();
    let mut sent: BTreeSet<&str> = BTreeSet::new();
    for entry in o
        .entries
        .iter()
        .filter(|e| e.idempotency == IdempotencyClass::ConditionallyIdempotent)
    {
        if !sent.insert(entry.key.as_str()) && !entry.replay {
            failures.push(format!(
                "conditionally idempotent key {} was sent again without the replay flag",
                entry.key
            ));
        }
    }
    let mut landed: BTreeMap<&str, usize> = BTreeMap::new();
    for (effect, did_land) in o.effects.iter().zip(&o.landed) {
        if effect.idempotency == IdempotencyClass::ConditionallyIdempotent && *did_land {
            *landed.entry(effect.idempotency_key.as_str()).or_default() += 1;
        }
    }
    failures.extend(
        landed
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(key, n)| format!("conditionally idempotent key {key} took effect {n} times")),
    );
    failures
}

/// #20, by commit: the commit that parks announces each of its approvals, unless an earlier
/// commit already did.
fn park_commits_announce(commits: &[CommitRecord]) -> Vec<String> {
    let mut announced: BTreeSet<String> = BTreeSet::new();
    let mut failures = Vec::new();
    for (n, commit) in commits.iter().map(|c| &c.events).enumerate() {
        for event in commit
            .iter()
            .filter(|e| e.event_type == EventType::ApprovalRequested)
        {
            if let Some(id) = event.payload["approval_id"].as_str() {
                announced.insert(id.to_owned());
            }
        }
        for event in commit
            .iter()
            .filter(|e| e.event_type == EventType::RunWaitingForApproval)
        {
            for id in event.payload["approval_ids"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str())
            {
                if !announced.contains(id) {
                    failures.push(format!(
                        "commit {n} parked run {:?} on approval {id} without announcing it",
                        event.run_id
                    ));
                }
            }
        }
    }
    failures
}

/// #21: a waiting run is never reclaimed (no `lease_expired` requeue leaves WAITING).
fn waiting_runs_never_reclaimed(commits: &[CommitRecord]) -> Vec<String> {
    let mut state: BTreeMap<RunId, RunStatus> = BTreeMap::new();
    let mut failures = Vec::new();
    for event in commits.iter().flat_map(|c| &c.events) {
        let (Some(run), Some(next)) = (event.run_id, run_event_target(event)) else {
            continue;
        };
        if event.event_type == EventType::RunRequeued
            && event.payload["reason"] == "lease_expired"
            && state.get(&run) != Some(&RunStatus::Running)
        {
            failures.push(format!(
                "run {run} was reclaimed while {:?}",
                state.get(&run)
            ));
        }
        state.insert(run, next);
    }
    failures
}

/// #22 from the caller's side: one `applied` per approval, and every answer agrees with the
/// resolution the approval ended with.
fn approver_answers(snapshot: &MemSnapshot, resolves: &[ResolveRecord]) -> Vec<String> {
    let mut applied: BTreeMap<ApprovalId, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for record in resolves {
        let Some(approval) = snapshot.approvals.get(&record.approval) else {
            failures.push(format!("resolve of unknown approval {}", record.approval));
            continue;
        };
        let requested = match record.requested {
            ApprovalResolution::ApproveOnce => ApprovalStatus::Approved,
            ApprovalResolution::Deny => ApprovalStatus::Denied,
        };
        let consistent = match &record.answer {
            Ok(ResolveState::Applied) => {
                *applied.entry(record.approval).or_default() += 1;
                approval.status == requested
            }
            Ok(ResolveState::AlreadyResolvedIdentically) => approval.status == requested,
            Ok(ResolveState::AlreadyResolvedDifferently) => {
                matches!(
                    approval.status,
                    ApprovalStatus::Approved | ApprovalStatus::Denied
                ) && approval.status != requested
            }
            Err(ServiceError::Expired) => approval.status == ApprovalStatus::Expired,
            Err(ServiceError::NoLongerPending { status }) => approval.status == *status,
            Err(_) => true,
        };
        if !consistent {
            failures.push(format!(
                "resolve({}) of approval {} answered {:?} but the approval is {}",
                record.requested.as_str(),
                record.approval,
                record.answer,
                approval.status
            ));
        }
    }
    for (id, n) in applied {
        if n > 1 {
            failures.push(format!("approval {id} was applied {n} times"));
        }
    }
    failures
}

/// #31 at commit level: the commit that cancels a run closes no call that was RUNNING. The
/// terminal sweep closes only AUTHORIZED and WAITING rows (DENIED) when it cancels; a RUNNING
/// row would end `tool.call.uncertain` or `tool.call.failed` (`tool.interrupted`), whether or
/// not it had a watermark, and either would mean an effect abandoned by the cancel.
fn cancel_closes_no_running_call(commits: &[CommitRecord]) -> Vec<String> {
    let mut failures = Vec::new();
    for (n, commit) in commits.iter().map(|c| &c.events).enumerate() {
        for cancelled in commit
            .iter()
            .filter(|e| e.event_type == EventType::RunCancelled)
        {
            for closed in commit.iter().filter(|e| {
                e.run_id == cancelled.run_id
                    && matches!(
                        e.event_type,
                        EventType::ToolCallUncertain | EventType::ToolCallFailed
                    )
            }) {
                failures.push(format!(
                    "commit {n} cancelled run {:?} and closed a running call with {} ({})",
                    cancelled.run_id, closed.event_type, closed.payload["reason_code"]
                ));
            }
        }
    }
    failures
}

/// #32: cancelling a parked run closes its pending approvals (`cancelled`) and their calls
/// (`DENIED tool.run_cancelled`) in the commit that cancels the run.
fn parked_cancel_is_one_commit(snapshot: &MemSnapshot, commits: &[CommitRecord]) -> Vec<String> {
    let mut state: BTreeMap<RunId, RunStatus> = BTreeMap::new();
    let mut closed: BTreeSet<String> = BTreeSet::new();
    let mut failures = Vec::new();
    for (n, commit) in commits.iter().map(|c| &c.events).enumerate() {
        for event in commit {
            let Some(run) = event.run_id else { continue };
            if event.event_type == EventType::RunCancelled
                && state.get(&run) == Some(&RunStatus::WaitingForApproval)
            {
                for approval in snapshot.approvals.values().filter(|a| {
                    a.run_id == run
                        && a.requested_at.is_some()
                        && !closed.contains(&a.id.to_string())
                }) {
                    let id = approval.id.to_string();
                    let cancelled_here = commit.iter().any(|e| {
                        e.event_type == EventType::ApprovalCancelled
                            && e.payload["approval_id"].as_str() == Some(id.as_str())
                    });
                    let call = approval.action_id.to_string();
                    let denied_here = commit.iter().any(|e| {
                        e.event_type == EventType::ToolCallDenied
                            && e.payload["invocation_id"].as_str() == Some(call.as_str())
                            && e.payload["reason_code"] == "tool.run_cancelled"
                    });
                    if !(cancelled_here && denied_here) {
                        failures.push(format!(
                            "commit {n} cancelled parked run {run} but approval {id} (cancelled here: {cancelled_here}, call denied here: {denied_here}) was not closed with it"
                        ));
                    }
                }
            }
        }
        for event in commit {
            if matches!(
                event.event_type,
                EventType::ApprovalResolved
                    | EventType::ApprovalExpired
                    | EventType::ApprovalCancelled
            ) && let Some(id) = event.payload["approval_id"].as_str()
            {
                closed.insert(id.to_owned());
            }
            if let (Some(run), Some(next)) = (event.run_id, run_event_target(event)) {
                state.insert(run, next);
            }
        }
    }
    failures
}

/// #38: a workspace read is `internal_tool` only if this process incarnation wrote the same
/// bytes; and core keeps the lower of the tool's claim and the spec's trust (§9.3).
fn provenance(snapshot: &MemSnapshot, o: &Observations) -> Vec<String> {
    let mut failures = Vec::new();
    // A read-only call may run more than once (REEXECUTE, or a zombie racing its successor);
    // the row keeps the result of whichever execution finished it.
    let mut claimed: BTreeMap<&str, BTreeSet<TrustLevel>> = BTreeMap::new();
    for read in &o.reads {
        claimed
            .entry(read.key.as_str())
            .or_default()
            .insert(read.claimed);
        if read.claimed == TrustLevel::InternalTool
            && !o.writes.iter().any(|w| {
                w.incarnation == read.incarnation
                    && w.run == read.run
                    && w.path == read.path
                    && w.content == read.content
            })
        {
            failures.push(format!(
                "read of {} in run {} by {} claimed internal_tool without its own write",
                read.path, read.run, read.incarnation
            ));
        }
    }
    for row in snapshot
        .invocations
        .values()
        .filter(|i| i.status == InvocationStatus::Succeeded && i.tool_name == "sim.ws_read")
    {
        let item = row.result_item.as_deref().and_then(ResultItem::parse);
        if let (Some(item), Some(claims)) = (item, claimed.get(row.idempotency_key.as_str()))
            && !claims
                .iter()
                .any(|claim| item.trust == claim.lower(TrustLevel::InternalTool))
        {
            failures.push(format!(
                "invocation {} reports trust {} for a read claimed {claims:?}",
                row.id, item.trust
            ));
        }
    }
    failures
}

/// #40: events are never updated or deleted — the final log is exactly what the commits
/// appended, in commit order.
fn events_append_only(snapshot: &MemSnapshot, commits: &[CommitRecord]) -> Vec<String> {
    let appended: Vec<&Event> = commits.iter().flat_map(|c| &c.events).collect();
    if appended.len() != snapshot.events.len() {
        return vec![format!(
            "{} events were appended but {} are stored",
            appended.len(),
            snapshot.events.len()
        )];
    }
    appended
        .iter()
        .zip(&snapshot.events)
        .filter(|(a, b)| **a != *b)
        .map(|(a, _)| format!("event {} changed after its commit", a.id))
        .take(5)
        .collect()
}

/// After the quiet phase (no faults, every node up): every run is terminal or parked (#34: no
/// due run is left unclaimed; #33: a requested cancel has ended its run).
fn liveness(snapshot: &MemSnapshot, quiet: QuietEnd) -> Vec<(&'static str, String)> {
    let mut failures = Vec::new();
    for run in snapshot.runs.values() {
        let status = run.status();
        if status.is_terminal() {
            continue;
        }
        if run.cancel_requested_at.is_some() {
            failures.push((
                "inv_33_cancel_requested_runs_end",
                format!(
                    "run {} is {status} after the quiet phase with a cancel requested",
                    run.id
                ),
            ));
        } else if status == RunStatus::Queued {
            failures.push((
                "inv_34_queued_runs_are_claimed",
                format!("run {} is still QUEUED after the quiet phase", run.id),
            ));
        } else if status != RunStatus::WaitingForApproval {
            failures.push((
                "liveness_terminal_or_parked",
                format!("run {} is {status} after the quiet phase", run.id),
            ));
        }
    }
    if !quiet.settled && failures.is_empty() {
        failures.push((
            "liveness_terminal_or_parked",
            "the quiet phase hit its time bound".to_owned(),
        ));
    }
    failures
}

/// The invocations a violation's detail mentions, for the failure report.
pub fn mentioned_runs(snapshot: &MemSnapshot, detail: &str) -> BTreeSet<RunId> {
    let mut runs: BTreeSet<RunId> = snapshot
        .runs
        .keys()
        .filter(|id| detail.contains(&id.to_string()))
        .copied()
        .collect();
    let invocations: Vec<InvocationId> = snapshot
        .invocations
        .keys()
        .filter(|id| detail.contains(&id.to_string()))
        .copied()
        .collect();
    for id in invocations {
        if let Some(row) = snapshot.invocations.get(&id) {
            runs.insert(row.run_id);
        }
    }
    for approval in snapshot.approvals.values() {
        if detail.contains(&approval.id.to_string()) {
            runs.insert(approval.run_id);
        }
    }
    for row in snapshot.invocations.values() {
        if detail.contains(&row.idempotency_key) {
            runs.insert(row.run_id);
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::fixtures::{self, run};
    use airlock_core::events::Actor;
    use airlock_core::time::Timestamp;
    use serde_json::json;

    /// [`fixtures::event`] with its own id, sequence and time.
    fn event(
        id: i64,
        run: RunId,
        kind: EventType,
        actor: Actor,
        payload: serde_json::Value,
    ) -> Event {
        Event {
            id,
            run_id: Some(run),
            sequence: id as u64,
            created_at: Timestamp::from_micros(id),
            ..fixtures::event(kind, actor, payload)
        }
    }

    fn commit(events: Vec<Event>) -> CommitRecord {
        fixtures::commit(0, events)
    }

    #[test]
    fn a_cancel_that_closes_a_running_call_is_caught() {
        let w1 = Actor::worker("w1.1");
        let denied = event(
            1,
            run(),
            EventType::ToolCallDenied,
            w1.clone(),
            json!({"reason_code": "tool.run_cancelled"}),
        );
        let cancelled = event(2, run(), EventType::RunCancelled, w1.clone(), json!({}));
        assert!(
            cancel_closes_no_running_call(&[commit(vec![denied, cancelled.clone()])]).is_empty()
        );
        let interrupted = event(
            3,
            run(),
            EventType::ToolCallFailed,
            w1,
            json!({"reason_code": "tool.interrupted"}),
        );
        assert_eq!(
            cancel_closes_no_running_call(&[commit(vec![interrupted, cancelled])]).len(),
            1
        );
    }

    #[test]
    fn a_waiting_run_that_is_reclaimed_is_caught() {
        let w1 = Actor::worker("w1.1");
        let park = commit(vec![event(
            1,
            run(),
            EventType::RunWaitingForApproval,
            w1,
            json!({"approval_ids": []}),
        )]);
        let reclaim = commit(vec![event(
            2,
            run(),
            EventType::RunRequeued,
            Actor::maintenance(),
            json!({"reason": "lease_expired"}),
        )]);
        assert_eq!(waiting_runs_never_reclaimed(&[park, reclaim]).len(), 1);
    }

    #[test]
    fn a_park_that_announces_later_is_caught() {
        let w = Actor::worker("w0.1");
        let park = event(
            5,
            run(),
            EventType::RunWaitingForApproval,
            w.clone(),
            json!({"approval_ids": ["a1"]}),
        );
        let announce = event(
            6,
            run(),
            EventType::ApprovalRequested,
            w,
            json!({"approval_id": "a1"}),
        );
        assert!(park_commits_announce(&[commit(vec![park.clone(), announce.clone()])]).is_empty());
        assert_eq!(
            park_commits_announce(&[commit(vec![park]), commit(vec![announce])]).len(),
            1
        );
    }

    #[test]
    fn a_second_request_without_the_replay_flag_is_caught() {
        let entry = |replay| Entry {
            key: "k".into(),
            idempotency: IdempotencyClass::ConditionallyIdempotent,
            replay,
        };
        let ok = Observations {
            entries: vec![entry(false), entry(true)],
            ..Observations::default()
        };
        assert!(replays_land_once(&ok).is_empty());
        let bad = Observations {
            entries: vec![entry(false), entry(false)],
            ..Observations::default()
        };
        assert_eq!(replays_land_once(&bad).len(), 1);
    }

    #[test]
    fn an_event_changed_or_added_outside_the_commits_is_caught() {
        let w = Actor::worker("w0.1");
        let appended = vec![
            event(1, run(), EventType::RunStarted, w.clone(), json!({})),
            event(2, run(), EventType::RunCompleted, w.clone(), json!({})),
        ];
        let commits = [commit(appended.clone())];
        let mut snapshot = MemSnapshot {
            events: appended,
            ..MemSnapshot::default()
        };
        assert!(events_append_only(&snapshot, &commits).is_empty());
        snapshot.events[1].payload = json!({"rewritten": true});
        assert_eq!(events_append_only(&snapshot, &commits).len(), 1);
        snapshot
            .events
            .push(event(3, run(), EventType::RunQueued, w, json!({})));
        assert_eq!(events_append_only(&snapshot, &commits).len(), 1);
    }
}
