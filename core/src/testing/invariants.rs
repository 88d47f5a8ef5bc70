//! The invariant checker (SPEC §16, the rules marked S): re-derives each rule from a store
//! snapshot and a ground-truth effect ledger, so a test or the simulator can check them after
//! every case. Each check is named after its rule (`inv_13_…`); a violation names it too.

use std::collections::{BTreeMap, BTreeSet};

use crate::events::{Event, EventType};
use crate::ids::{InvocationId, RunId};
use crate::invocation::outcome::{ResultItem, message_for};
use crate::mem_store::MemSnapshot;
use crate::run::RunState;
use crate::run::state::edge_allowed;
use crate::vocab::{
    ApprovalStatus, FailureReason, IdempotencyClass, InvocationStatus, OutcomeStatus,
    PolicyDecisionType, RunStatus, SideEffectClass, TrustLevel,
};

/// One entry of a tool body, as a simulated external service records it before answering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    pub tool_name: String,
    pub idempotency_key: String,
    pub idempotency: IdempotencyClass,
    /// Whether the call was a REPLAY_IDEMPOTENCY_KEY (the service deduplicates by key).
    pub replay: bool,
    /// Whether the store already held a watermark for this key when the body was entered.
    pub watermarked_at_entry: bool,
    /// Whether a store transaction was open when the body was entered.
    pub transaction_open_at_entry: bool,
    /// Whether START (§9.2 step 9) had committed for the call's row when the body was entered,
    /// for every side-effect class, `none` included: the row was RUNNING, or in a status only
    /// RUNNING leads to (a paused worker may enter after another one closed the row).
    pub started_at_entry: bool,
}

/// A broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
}

struct Checker<'a> {
    snapshot: &'a MemSnapshot,
    effects: &'a [Effect],
    events_by_run: BTreeMap<RunId, Vec<&'a Event>>,
    max_attempts: u32,
    violations: Vec<Violation>,
}

impl Checker<'_> {
    fn fail(&mut self, invariant: &'static str, detail: String) {
        self.violations.push(Violation { invariant, detail });
    }
}

fn invocation_event<'a>(events: &[&'a Event], kind: EventType, id: InvocationId) -> Vec<&'a Event> {
    let id = id.to_string();
    events
        .iter()
        .copied()
        .filter(|e| {
            e.event_type == kind && e.payload["invocation_id"].as_str() == Some(id.as_str())
        })
        .collect()
}

/// Checks every S invariant; an empty result means the snapshot honours them all.
/// `max_attempts` is the workers' setting (SPEC §8.2), which #29's cap depends on.
pub fn check(snapshot: &MemSnapshot, effects: &[Effect], max_attempts: u32) -> Vec<Violation> {
    let mut events_by_run: BTreeMap<RunId, Vec<&Event>> = BTreeMap::new();
    for event in &snapshot.events {
        if let Some(run) = event.run_id {
            events_by_run.entry(run).or_default().push(event);
        }
    }
    let mut checker = Checker {
        snapshot,
        effects,
        events_by_run,
        max_attempts,
        violations: Vec::new(),
    };
    inv_10_bodies_run_only_with_authority(&mut checker);
    inv_10_approved_rows_were_revalidated(&mut checker);
    inv_11_watermark_before_effect(&mut checker);
    inv_12_no_transaction_during_tools(&mut checker);
    inv_13_non_idempotent_effects_at_most_once(&mut checker);
    inv_15_invocation_rows_are_well_formed(&mut checker);
    inv_16_replays_never_duplicate(&mut checker);
    inv_17_tool_call_count(&mut checker);
    inv_18_uncertain_never_repeated(&mut checker);
    inv_19_one_approval_per_action(&mut checker);
    inv_20_park_announces_pending_approvals(&mut checker);
    inv_20_waiting_runs_have_announced_approvals(&mut checker);
    inv_21_waiting_runs_hold_nothing(&mut checker);
    inv_22_one_resolution_per_approval(&mut checker);
    inv_22_resolution_matches_its_event(&mut checker);
    inv_23_nothing_approved_after_expiry(&mut checker);
    inv_27_runs_follow_the_state_machine(&mut checker);
    inv_29_attempts_count_reclaims(&mut checker);
    inv_30_terminal_runs_are_closed(&mut checker);
    inv_31_cancel_never_abandons_an_effect(&mut checker);
    inv_36_parallel_batches_are_read_only(&mut checker);
    inv_36_results_in_planner_order(&mut checker);
    inv_39_taint_sticks(&mut checker);
    inv_40_event_sequences(&mut checker);
    checker.violations
}

fn inv_10_bodies_run_only_with_authority(c: &mut Checker<'_>) {
    let by_key: BTreeMap<&str, _> = c
        .snapshot
        .invocations
        .values()
        .map(|i| (i.idempotency_key.as_str(), i))
        .collect();
    let mut failures = Vec::new();
    for effect in c.effects {
        let Some(row) = by_key.get(effect.idempotency_key.as_str()) else {
            failures.push(format!(
                "a body ran for key {} with no invocation row",
                effect.idempotency_key
            ));
            continue;
        };
        let started = c
            .events_by_run
            .get(&row.run_id)
            .is_some_and(|e| !invocation_event(e, EventType::ToolCallStarted, row.id).is_empty());
        let decided = row.policy_decision.as_ref().map(|d| d.decision);
        let approved = c.snapshot.approvals.values().any(|a| {
            a.action_id == row.id
                && a.status == ApprovalStatus::Approved
                && a.revalidated_policy_version.is_some()
        });
        let authority = decided == Some(PolicyDecisionType::Allow)
            || (decided == Some(PolicyDecisionType::RequireApproval) && approved);
        if !started || !authority {
            failures.push(format!(
                "invocation {} ran without START ({started}) or authority ({authority})",
                row.id
            ));
        }
    }
    for detail in failures {
        c.fail("inv_10_bodies_run_only_with_authority", detail);
    }
}

fn inv_11_watermark_before_effect(c: &mut Checker<'_>) {
    let by_key: BTreeMap<&str, _> = c
        .snapshot
        .invocations
        .values()
        .map(|i| (i.idempotency_key.as_str(), i))
        .collect();
    let mut failures = Vec::new();
    for effect in c.effects {
        let Some(row) = by_key.get(effect.idempotency_key.as_str()) else {
            continue;
        };
        if row.side_effect != SideEffectClass::None && !effect.watermarked_at_entry {
            failures.push(format!(
                "invocation {} entered its body before the watermark committed",
                row.id
            ));
        }
        if !effect.started_at_entry {
            failures.push(format!(
                "invocation {} ({}) entered its body before START committed",
                row.id, row.side_effect
            ));
        }
    }
    for detail in failures {
        c.fail("inv_11_watermark_before_effect", detail);
    }
}

fn inv_12_no_transaction_during_tools(c: &mut Checker<'_>) {
    let open: Vec<String> = c
        .effects
        .iter()
        .filter(|e| e.transaction_open_at_entry)
        .map(|e| e.idempotency_key.clone())
        .collect();
    for key in open {
        c.fail(
            "inv_12_no_transaction_during_tools",
            format!("a transaction was open when the body for {key} ran"),
        );
    }
}

fn inv_13_non_idempotent_effects_at_most_once(c: &mut Checker<'_>) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for effect in c
        .effects
        .iter()
        .filter(|e| e.idempotency == IdempotencyClass::NonIdempotent)
    {
        *counts.entry(effect.idempotency_key.as_str()).or_default() += 1;
    }
    let mut failures = Vec::new();
    for (key, count) in &counts {
        if *count > 1 {
            failures.push(format!(
                "non-idempotent key {key} took effect {count} times"
            ));
        }
    }
    for row in c
        .snapshot
        .invocations
        .values()
        .filter(|i| i.idempotency_class == IdempotencyClass::NonIdempotent)
    {
        let had_effect = counts.contains_key(row.idempotency_key.as_str());
        if had_effect
            && row.status.is_terminal()
            && !matches!(
                row.status,
                InvocationStatus::Succeeded | InvocationStatus::Uncertain
            )
        {
            failures.push(format!(
                "invocation {} had an effect but is {}",
                row.id, row.status
            ));
        }
        if !had_effect && row.status == InvocationStatus::Succeeded {
            failures.push(format!(
                "invocation {} is SUCCEEDED without an effect",
                row.id
            ));
        }
    }
    for detail in failures {
        c.fail("inv_13_non_idempotent_effects_at_most_once", detail);
    }
}

fn inv_15_invocation_rows_are_well_formed(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    for row in c.snapshot.invocations.values() {
        if row.status == InvocationStatus::Proposed {
            failures.push(format!("invocation {} is stored PROPOSED", row.id));
        }
        if row.effect_sent_at.is_some()
            && !matches!(
                row.status,
                InvocationStatus::Running
                    | InvocationStatus::Succeeded
                    | InvocationStatus::Failed
                    | InvocationStatus::Uncertain
            )
        {
            failures.push(format!(
                "invocation {} has a watermark but is {}",
                row.id, row.status
            ));
        }
        if row.status.is_terminal() {
            match (&row.outcome, &row.result_item) {
                (Some(outcome), Some(item)) => {
                    let expected_status = match row.status {
                        InvocationStatus::Succeeded => OutcomeStatus::Succeeded,
                        InvocationStatus::Failed => OutcomeStatus::Failed,
                        InvocationStatus::Denied => OutcomeStatus::Denied,
                        _ => OutcomeStatus::Uncertain,
                    };
                    let table_message = outcome.reason_code == "policy.scope.missing"
                        || outcome.message == message_for(&outcome.reason_code);
                    if outcome.status != expected_status
                        || !table_message
                        || outcome.action != row.tool_name
                    {
                        failures.push(format!(
                            "invocation {} has an inconsistent outcome {outcome:?}",
                            row.id
                        ));
                    }
                    if ResultItem::parse(item).is_none() {
                        failures.push(format!(
                            "invocation {} has an unreadable result item",
                            row.id
                        ));
                    }
                }
                _ => failures.push(format!(
                    "terminal invocation {} lacks its outcome or result item",
                    row.id
                )),
            }
        }
    }
    for detail in failures {
        c.fail("inv_15_invocation_rows_are_well_formed", detail);
    }
}

fn inv_16_replays_never_duplicate(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    let mut calls = BTreeSet::new();
    for row in c.snapshot.invocations.values() {
        if !calls.insert((row.run_id, row.step_number, row.call_id.clone())) {
            failures.push(format!(
                "a second row for {} step {} call {}",
                row.run_id, row.step_number, row.call_id
            ));
        }
        let events = c
            .events_by_run
            .get(&row.run_id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if invocation_event(events, EventType::ToolCallProposed, row.id).len() != 1 {
            failures.push(format!(
                "invocation {} does not have exactly one tool.call.proposed",
                row.id
            ));
        }
        for kind in [
            EventType::ToolCallCompleted,
            EventType::ToolCallFailed,
            EventType::ToolCallDenied,
            EventType::ToolCallUncertain,
        ] {
            for event in invocation_event(events, kind, row.id) {
                if event.payload["result_item"].as_str() != row.result_item.as_deref() {
                    failures.push(format!(
                        "invocation {}'s {} event carries a different result item",
                        row.id, kind
                    ));
                }
            }
        }
    }
    for detail in failures {
        c.fail("inv_16_replays_never_duplicate", detail);
    }
}

fn inv_17_tool_call_count(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    for run in c.snapshot.runs.values() {
        let events = c
            .events_by_run
            .get(&run.id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let started = events
            .iter()
            .filter(|e| e.event_type == EventType::ToolCallStarted)
            .count();
        if started != run.tool_call_count as usize
            || run.tool_call_count > run.limits.max_tool_calls
        {
            failures.push(format!(
                "run {}: tool_call_count {} but {started} starts (max {})",
                run.id, run.tool_call_count, run.limits.max_tool_calls
            ));
        }
    }
    for detail in failures {
        c.fail("inv_17_tool_call_count", detail);
    }
}

fn inv_18_uncertain_never_repeated(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    for uncertain in c
        .snapshot
        .invocations
        .values()
        .filter(|i| i.status == InvocationStatus::Uncertain)
    {
        let events = c
            .events_by_run
            .get(&uncertain.run_id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        // Every close appends its terminal event (§13.2); an UNCERTAIN row without one is
        // itself a broken audit trail, and would otherwise hide a repeat from this check.
        let Some(became) = invocation_event(events, EventType::ToolCallUncertain, uncertain.id)
            .first()
            .map(|e| e.id)
        else {
            failures.push(format!(
                "UNCERTAIN invocation {} has no tool.call.uncertain event",
                uncertain.id
            ));
            continue;
        };
        for other in c.snapshot.invocations.values() {
            if other.id != uncertain.id
                && other.run_id == uncertain.run_id
                && other.tool_name == uncertain.tool_name
                && other.effective_arguments_hash == uncertain.effective_arguments_hash
                && invocation_event(events, EventType::ToolCallStarted, other.id)
                    .iter()
                    .any(|e| e.id > became)
            {
                failures.push(format!(
                    "invocation {} repeated UNCERTAIN {}",
                    other.id, uncertain.id
                ));
            }
        }
    }
    for detail in failures {
        c.fail("inv_18_uncertain_never_repeated", detail);
    }
}

fn inv_19_one_approval_per_action(c: &mut Checker<'_>) {
    let mut seen = BTreeSet::new();
    let duplicates: Vec<String> = c
        .snapshot
        .approvals
        .values()
        .filter(|a| !seen.insert(a.action_id))
        .map(|a| a.action_id.to_string())
        .collect();
    for action in duplicates {
        c.fail(
            "inv_19_one_approval_per_action",
            format!("action {action} has more than one approval"),
        );
    }
}

fn inv_20_park_announces_pending_approvals(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    let requested: BTreeSet<String> = c
        .snapshot
        .events
        .iter()
        .filter(|e| e.event_type == EventType::ApprovalRequested)
        .filter_map(|e| e.payload["approval_id"].as_str().map(str::to_owned))
        .collect();
    for event in c
        .snapshot
        .events
        .iter()
        .filter(|e| e.event_type == EventType::RunWaitingForApproval)
    {
        let ids = event.payload["approval_ids"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if ids.is_empty() {
            failures.push(format!(
                "event {} parked without a pending approval",
                event.id
            ));
        }
        for id in ids.iter().filter_map(|v| v.as_str()) {
            if !requested.contains(id) {
                failures.push(format!(
                    "approval {id} was parked on without approval.requested"
                ));
            }
        }
    }
    for approval in c.snapshot.approvals.values() {
        if approval.requested_at.is_some() != requested.contains(&approval.id.to_string()) {
            failures.push(format!(
                "approval {}: requested_at and approval.requested disagree",
                approval.id
            ));
        }
    }
    for detail in failures {
        c.fail("inv_20_park_announces_pending_approvals", detail);
    }
}

fn inv_21_waiting_runs_hold_nothing(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    for run in c
        .snapshot
        .runs
        .values()
        .filter(|r| r.status() == RunStatus::WaitingForApproval)
    {
        if run.lease().is_some() {
            failures.push(format!("waiting run {} holds a lease", run.id));
        }
        if c.snapshot
            .invocations
            .values()
            .any(|i| i.run_id == run.id && i.status == InvocationStatus::Running)
        {
            failures.push(format!("waiting run {} has a RUNNING invocation", run.id));
        }
        if !c
            .snapshot
            .approvals
            .values()
            .any(|a| a.run_id == run.id && a.status == ApprovalStatus::Pending)
        {
            failures.push(format!("waiting run {} has no pending approval", run.id));
        }
    }
    for detail in failures {
        c.fail("inv_21_waiting_runs_hold_nothing", detail);
    }
}

fn inv_22_one_resolution_per_approval(c: &mut Checker<'_>) {
    let mut closed: BTreeMap<String, usize> = BTreeMap::new();
    for event in &c.snapshot.events {
        if matches!(
            event.event_type,
            EventType::ApprovalResolved | EventType::ApprovalExpired | EventType::ApprovalCancelled
        ) && let Some(id) = event.payload["approval_id"].as_str()
        {
            *closed.entry(id.to_owned()).or_default() += 1;
        }
    }
    let failures: Vec<String> = closed
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(id, n)| format!("approval {id} closed {n} times"))
        .collect();
    for detail in failures {
        c.fail("inv_22_one_resolution_per_approval", detail);
    }
}

fn inv_23_nothing_approved_after_expiry(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    for approval in c.snapshot.approvals.values() {
        if approval.status == ApprovalStatus::Approved
            && approval
                .resolved_at
                .is_none_or(|t| t >= approval.expires_at)
        {
            failures.push(format!(
                "approval {} was approved at or after expires_at",
                approval.id
            ));
        }
        // Expiry gives a call DENIED `approval.expired`, never `approval.denied` nor any other
        // ending, once the call is closed.
        if approval.status == ApprovalStatus::Expired
            && let Some(row) = c.snapshot.invocations.get(&approval.action_id)
            && row.status.is_terminal()
            && (row.status != InvocationStatus::Denied
                || row.reason_code.as_deref() != Some("approval.expired"))
        {
            failures.push(format!(
                "expired approval {}: its call ended {} {:?}",
                approval.id, row.status, row.reason_code
            ));
        }
    }
    for detail in failures {
        c.fail("inv_23_nothing_approved_after_expiry", detail);
    }
}

/// The status a run event moves its run to, `None` for any other event: the run state machine
/// as the event log tells it (#27 here; the simulator follows it commit by commit).
pub fn run_event_target(event: &Event) -> Option<RunStatus> {
    match event.event_type {
        EventType::RunQueued | EventType::RunRequeued => Some(RunStatus::Queued),
        EventType::RunStarted => Some(RunStatus::Running),
        EventType::RunWaitingForApproval => Some(RunStatus::WaitingForApproval),
        EventType::RunCompleted => Some(RunStatus::Completed),
        EventType::RunFailed => Some(RunStatus::Failed),
        EventType::RunCancelled => Some(RunStatus::Cancelled),
        _ => None,
    }
}

fn inv_27_runs_follow_the_state_machine(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    for run in c.snapshot.runs.values() {
        let events = c
            .events_by_run
            .get(&run.id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let states: Vec<RunStatus> = events.iter().filter_map(|e| run_event_target(e)).collect();
        if states.first() != Some(&RunStatus::Queued) {
            failures.push(format!("run {} does not start with run.queued", run.id));
        }
        for pair in states.windows(2) {
            if !edge_allowed(pair[0], pair[1]) {
                failures.push(format!("run {} moved {}->{}", run.id, pair[0], pair[1]));
            }
        }
        if states.last() != Some(&run.status()) {
            failures.push(format!(
                "run {} is {} but its last run.* event says {:?}",
                run.id,
                run.status(),
                states.last()
            ));
        }
    }
    for detail in failures {
        c.fail("inv_27_runs_follow_the_state_machine", detail);
    }
}

fn inv_29_attempts_count_reclaims(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    for run in c.snapshot.runs.values() {
        let events = c
            .events_by_run
            .get(&run.id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let reclaims = events
            .iter()
            .filter(|e| {
                (e.event_type == EventType::RunRequeued && e.payload["reason"] == "lease_expired")
                    || (e.event_type == EventType::RunFailed
                        && e.payload["failure"]["reason"] == "max_attempts_exceeded")
            })
            .count();
        if reclaims != run.attempts as usize {
            failures.push(format!(
                "run {}: attempts {} but {reclaims} lease expiries",
                run.id, run.attempts
            ));
        }
    }
    // The cap: the expiry that brings `attempts` to `max_attempts` fails the run
    // `max_attempts_exceeded`, and only that one does.
    for run in c.snapshot.runs.values() {
        let exceeded = matches!(
            &run.state,
            RunState::Failed { failure } if failure.reason == FailureReason::MaxAttemptsExceeded
        );
        if run.attempts > c.max_attempts {
            failures.push(format!(
                "run {}: attempts {} over max_attempts {}",
                run.id, run.attempts, c.max_attempts
            ));
        } else if (run.attempts == c.max_attempts) != exceeded {
            failures.push(format!(
                "run {}: attempts {} of {}, status {}",
                run.id,
                run.attempts,
                c.max_attempts,
                run.status()
            ));
        }
    }
    for detail in failures {
        c.fail("inv_29_attempts_count_reclaims", detail);
    }
}

fn inv_30_terminal_runs_are_closed(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    for run in c
        .snapshot
        .runs
        .values()
        .filter(|r| r.status().is_terminal())
    {
        if c.snapshot
            .invocations
            .values()
            .any(|i| i.run_id == run.id && !i.status.is_terminal())
        {
            failures.push(format!("terminal run {} has an open invocation", run.id));
        }
        if c.snapshot
            .approvals
            .values()
            .any(|a| a.run_id == run.id && a.status == ApprovalStatus::Pending)
        {
            failures.push(format!("terminal run {} has a pending approval", run.id));
        }
    }
    for detail in failures {
        c.fail("inv_30_terminal_runs_are_closed", detail);
    }
}

fn inv_31_cancel_never_abandons_an_effect(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    for run in c
        .snapshot
        .runs
        .values()
        .filter(|r| r.status() == RunStatus::Cancelled)
    {
        for row in c
            .snapshot
            .invocations
            .values()
            .filter(|i| i.run_id == run.id)
        {
            // `tool.interrupted` is what the terminal sweep gives a row it found RUNNING,
            // watermarked or not; a CANCELLED run must never have needed it.
            if row.reason_code.as_deref() == Some("tool.interrupted") {
                failures.push(format!(
                    "cancelled run {} closed invocation {} while RUNNING",
                    run.id, row.id
                ));
            }
        }
    }
    for detail in failures {
        c.fail("inv_31_cancel_never_abandons_an_effect", detail);
    }
}

fn inv_36_parallel_batches_are_read_only(c: &mut Checker<'_>) {
    let mut groups: BTreeMap<_, Vec<_>> = BTreeMap::new();
    for row in c.snapshot.invocations.values() {
        if let Some(group) = row.parallel_group {
            groups.entry(group).or_default().push(row);
        }
    }
    let mut failures = Vec::new();
    for (group, rows) in groups {
        for row in &rows {
            if row.idempotency_class != IdempotencyClass::ReadOnly
                || !matches!(
                    row.side_effect,
                    SideEffectClass::None
                        | SideEffectClass::WorkspaceRead
                        | SideEffectClass::NetworkRead
                )
            {
                failures.push(format!(
                    "parallel group {group} ran {} ({}, {})",
                    row.id, row.side_effect, row.idempotency_class
                ));
            }
        }
        if rows.len() > 8 {
            failures.push(format!("parallel group {group} has {} calls", rows.len()));
        }
    }
    for detail in failures {
        c.fail("inv_36_parallel_batches_are_read_only", detail);
    }
}

fn inv_39_taint_sticks(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    for run in c.snapshot.runs.values() {
        let rows: Vec<_> = c
            .snapshot
            .invocations
            .values()
            .filter(|i| i.run_id == run.id)
            .collect();
        let tainted_at = rows
            .iter()
            .filter(|i| {
                i.result_item
                    .as_deref()
                    .and_then(ResultItem::parse)
                    .is_some_and(|item| {
                        matches!(
                            item.trust,
                            TrustLevel::ExternalUntrusted | TrustLevel::Knowledge
                        )
                    })
            })
            .map(|i| i.step_number)
            .min();
        if let Some(step) = tainted_at {
            for row in rows
                .iter()
                .filter(|i| i.step_number > step && i.origin_trust != TrustLevel::ExternalUntrusted)
            {
                failures.push(format!(
                    "invocation {} after taint at step {step} has origin {}",
                    row.id, row.origin_trust
                ));
            }
        }
    }
    for detail in failures {
        c.fail("inv_39_taint_sticks", detail);
    }
}

fn inv_40_event_sequences(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    let mut last: BTreeMap<_, u64> = BTreeMap::new();
    let mut keys = BTreeSet::new();
    let mut previous_id = 0;
    for event in &c.snapshot.events {
        if event.id <= previous_id {
            failures.push(format!("event ids not increasing at {}", event.id));
        }
        previous_id = event.id;
        let seq = last.entry(event.session_id).or_insert(0);
        if event.sequence <= *seq {
            failures.push(format!(
                "session {} sequence {} after {}",
                event.session_id, event.sequence, seq
            ));
        }
        *seq = event.sequence;
        if let Some(key) = &event.derivation_key
            && !keys.insert(key.clone())
        {
            failures.push(format!("derivation key {key} repeated"));
        }
    }
    for detail in failures {
        c.fail("inv_40_event_sequences", detail);
    }
}

/// #10 (G2, §10.3, §22.5): a row authorized by REVALIDATE carries the fresh decision of the
/// revalidating policy version, and a `require_approval` is kept only under the version the human
/// approved, or under a newer one that asks for the same approval (same reason code; the risk
/// half of §22.5, a fresh risk no higher, is not visible here and is checked in core's tests).
fn inv_10_approved_rows_were_revalidated(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    for approval in c.snapshot.approvals.values() {
        let (ApprovalStatus::Approved, Some(revalidated)) = (
            approval.status,
            approval.revalidated_policy_version.as_deref(),
        ) else {
            continue;
        };
        let Some(row) = c.snapshot.invocations.get(&approval.action_id) else {
            continue;
        };
        let events = c
            .events_by_run
            .get(&row.run_id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let authorized =
            !invocation_event(events, EventType::ToolCallAuthorized, row.id).is_empty();
        if !authorized {
            continue;
        }
        let Some(decision) = row.policy_decision.as_ref() else {
            failures.push(format!("authorized invocation {} has no decision", row.id));
            continue;
        };
        let fresh = decision.policy_version == revalidated;
        let kept = match decision.decision {
            PolicyDecisionType::Allow => true,
            PolicyDecisionType::RequireApproval => {
                decision.policy_version == approval.policy_version
                    || decision.reason_code == approval.policy_reason
            }
            _ => false,
        };
        if !fresh || !kept {
            failures.push(format!(
                "invocation {} was authorized at resume with {} under {} (approved under {}, revalidated under {revalidated})",
                row.id, decision.decision, decision.policy_version, approval.policy_version
            ));
        }
    }
    for detail in failures {
        c.fail("inv_10_bodies_run_only_with_authority", detail);
    }
}

/// #20: a waiting run's pending approvals are all announced.
fn inv_20_waiting_runs_have_announced_approvals(c: &mut Checker<'_>) {
    let mut failures = Vec::new();
    for run in c
        .snapshot
        .runs
        .values()
        .filter(|r| r.status() == RunStatus::WaitingForApproval)
    {
        for approval in c.snapshot.approvals.values().filter(|a| {
            a.run_id == run.id && a.status == ApprovalStatus::Pending && a.requested_at.is_none()
        }) {
            failures.push(format!(
                "waiting run {} has the unannounced pending approval {}",
                run.id, approval.id
            ));
        }
    }
    for detail in failures {
        c.fail("inv_20_park_announces_pending_approvals", detail);
    }
}

/// #22: a resolved approval has exactly one `approval.resolved`, naming its stored resolution.
fn inv_22_resolution_matches_its_event(c: &mut Checker<'_>) {
    let mut resolved: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for event in c
        .snapshot
        .events
        .iter()
        .filter(|e| e.event_type == EventType::ApprovalResolved)
    {
        if let Some(id) = event.payload["approval_id"].as_str() {
            resolved.entry(id.to_owned()).or_default().push(
                event.payload["resolution"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
    }
    let mut failures = Vec::new();
    for approval in c.snapshot.approvals.values() {
        let events = resolved
            .get(&approval.id.to_string())
            .map(Vec::as_slice)
            .unwrap_or_default();
        match (approval.status, approval.resolution) {
            (ApprovalStatus::Approved | ApprovalStatus::Denied, Some(resolution))
                if events != [resolution.as_str()] =>
            {
                failures.push(format!(
                    "approval {} is {} but its approval.resolved events say {events:?}",
                    approval.id, approval.status
                ));
            }
            (ApprovalStatus::Approved | ApprovalStatus::Denied, Some(_)) => {}
            _ if !events.is_empty() => failures.push(format!(
                "approval {} is {} yet has approval.resolved",
                approval.id, approval.status
            )),
            _ => {}
        }
    }
    for detail in failures {
        c.fail("inv_22_one_resolution_per_approval", detail);
    }
}

/// #36: the recorded results of a step are in planner order, and refer only to calls that
/// have ended (§17.2: a step record is written when the step closes, never before).
fn inv_36_results_in_planner_order(c: &mut Checker<'_>) {
    use crate::run::checkpoint::ResultRef;
    let mut failures = Vec::new();
    for step in c.snapshot.step_records.values() {
        {
            if step.calls.len() != step.results.len() {
                failures.push(format!(
                    "run {} step {}: {} calls but {} results",
                    step.run_id,
                    step.step,
                    step.calls.len(),
                    step.results.len()
                ));
                continue;
            }
            for (call, result) in step.calls.iter().zip(&step.results) {
                let matches = match result {
                    ResultRef::Invocation { invocation_id } => {
                        c.snapshot.invocations.get(invocation_id).is_some_and(|i| {
                            i.call_id == call.call_id
                                && i.step_number == step.step
                                && i.status.is_terminal()
                        })
                    }
                    ResultRef::Refusal { derivation_key } => {
                        derivation_key.ends_with(&format!(":{}:{}", step.step, call.call_id))
                    }
                };
                if !matches {
                    failures.push(format!(
                        "run {} step {}: the result for {} is out of planner order or not an ended call",
                        step.run_id, step.step, call.call_id
                    ));
                }
            }
        }
    }
    for detail in failures {
        c.fail("inv_36_parallel_batches_are_read_only", detail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem_store::MemStore;
    use crate::testing::fixtures::*;
    use crate::vocab::RunStatus;

    /// The violations of `invariant` that `check` finds.
    fn found(snapshot: &MemSnapshot, effects: &[Effect], invariant: &str) -> Vec<String> {
        check(snapshot, effects, 3)
            .into_iter()
            .filter(|v| v.invariant == invariant)
            .map(|v| v.detail)
            .collect()
    }

    #[test]
    fn the_expiry_reaching_max_attempts_and_only_it_fails_the_run() {
        let store = MemStore::new();
        let mut queued = seed_run(&store, 1, RunStatus::Queued);
        let with = |run: &crate::run::Run| {
            let mut snapshot = store.snapshot();
            snapshot.runs.insert(run.id, run.clone());
            snapshot
        };
        let caps = |run: &crate::run::Run| {
            found(&with(run), &[], "inv_29_attempts_count_reclaims")
                .into_iter()
                .filter(|d| d.contains("max_attempts") || d.contains(" of "))
                .count()
        };
        queued.attempts = 2;
        assert_eq!(caps(&queued), 0);
        queued.attempts = 3;
        assert_eq!(caps(&queued), 1, "not failed at the cap");
        queued.attempts = 4;
        assert_eq!(caps(&queued), 1, "over the cap");
    }

    #[test]
    fn a_body_entered_before_start_is_caught_for_every_side_effect_class() {
        let store = MemStore::new();
        let run = seed_run(&store, 1, RunStatus::Running);
        let row = seed_invocation(
            &store,
            sample_invocation(1, &run, 1, "c1", InvocationStatus::Running),
        );
        let entry = |started| Effect {
            tool_name: row.tool_name.clone(),
            idempotency_key: row.idempotency_key.clone(),
            idempotency: row.idempotency_class,
            replay: false,
            watermarked_at_entry: row.effect_sent_at.is_some(),
            transaction_open_at_entry: false,
            started_at_entry: started,
        };
        let snapshot = store.snapshot();
        let invariant = "inv_11_watermark_before_effect";
        assert!(found(&snapshot, &[entry(true)], invariant).is_empty());
        let caught = found(&snapshot, &[entry(false)], invariant);
        assert_eq!(caught.len(), 1, "{caught:?}");
        assert!(caught[0].contains("before START committed"), "{caught:?}");
    }

    #[test]
    fn an_uncertain_row_without_its_event_is_caught() {
        let store = MemStore::new();
        let run = seed_run(&store, 1, RunStatus::Running);
        seed_invocation(
            &store,
            sample_invocation(1, &run, 1, "c1", InvocationStatus::Uncertain),
        );
        let caught = found(&store.snapshot(), &[], "inv_18_uncertain_never_repeated");
        assert_eq!(caught.len(), 1, "{caught:?}");
        assert!(
            caught[0].contains("no tool.call.uncertain event"),
            "{caught:?}"
        );
    }

    #[test]
    fn an_expired_approvals_call_must_end_denied_approval_expired() {
        let store = MemStore::new();
        let run = seed_run(&store, 1, RunStatus::Running);
        let row = seed_invocation(
            &store,
            sample_invocation(1, &run, 1, "c1", InvocationStatus::Failed),
        );
        crate::testing::fixtures::commit(&store, "seed approval", |tx| {
            tx.insert_approval(&sample_approval(1, &row, ApprovalStatus::Expired))
        });
        let caught = found(
            &store.snapshot(),
            &[],
            "inv_23_nothing_approved_after_expiry",
        );
        assert_eq!(caught.len(), 1, "{caught:?}");
        assert!(caught[0].contains("its call ended FAILED"), "{caught:?}");
    }

    #[test]
    fn a_cancelled_run_with_an_interrupted_call_is_caught_watermark_or_not() {
        let store = MemStore::new();
        let run = seed_run(&store, 1, RunStatus::Cancelled);
        let mut row = sample_invocation(1, &run, 1, "c1", InvocationStatus::Failed);
        row.effect_sent_at = None;
        row.reason_code = Some("tool.interrupted".to_owned());
        seed_invocation(&store, row);
        let caught = found(
            &store.snapshot(),
            &[],
            "inv_31_cancel_never_abandons_an_effect",
        );
        assert_eq!(caught.len(), 1, "{caught:?}");
    }
}
