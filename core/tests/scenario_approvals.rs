//! Approval scenarios (SPEC §10, §13.1, §16 #19–#26): parking for approval, resolving, expiring,
//! repeated and refused resolutions, tenant isolation, paging, and every row of the §10.3
//! revalidation table, resumed by a "new process" over the same store.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use airlock_core::approval::Approval;
use airlock_core::control::{ControlService, ServiceError};
use airlock_core::events::Event;
use airlock_core::ids::{ApprovalId, RunId};
use airlock_core::policy::{Ruleset, shipped};
use airlock_core::ports::{Clock, IdSource, Tool};
use airlock_core::run::checkpoint::ResultRef;
use airlock_core::run::executor::ExecutionEnd;
use airlock_core::scope::Scope;
use airlock_core::store::{Store, StoreTx};
use airlock_core::testing::{GRANTED_APPROVAL_EVENTS, assert_subsequence};
use airlock_core::time::Timestamp;
use airlock_core::tool::spec::InputSchema;
use airlock_core::vocab::{
    ActorType, ApprovalResolution, ApprovalStatus, IdempotencyClass, InvocationStatus,
    OutcomeStatus, PolicyDecisionType, ResolveState, RiskLevel, RunStatus, SideEffectClass,
};
use common::*;
use serde_json::{Value, json};

/// The shipped files' `policy_version` (SPEC §7.4), as core derives it from the embedded files.
use airlock_core::policy::shipped::SHIPPED_VERSION;

/// The shipped profile's external_write row, which the revalidation scenarios edit.
const EXTERNAL_WRITE_ROW: &str = "[rules.external_write]\ndecision = \"require_approval\"\n";

/// The expiry of a `medium` risk approval under the shipped profile.
const MEDIUM_EXPIRY_SECONDS: i64 = 86_400;

/// UUIDs from a range the harness's `SeqIds` never reaches, so a second process over the same
/// store cannot mint an id the first one already used, whatever the harness's id source does.
struct LaterProcessIds(AtomicU64);

impl IdSource for LaterProcessIds {
    fn new_uuid(&self) -> uuid::Uuid {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        uuid::Builder::from_u128(0x2000_0000_0000_4000_8000_0000_0000_0000 | u128::from(n))
            .into_uuid()
    }
}

/// A second process over the same store and the same (virtual) wall clock, with its own
/// ruleset and tool registry.
fn new_process(
    h: &Harness,
    ruleset: Ruleset,
    customize: impl FnOnce(&mut Vec<Arc<dyn Tool>>),
) -> Harness {
    let mut next = Harness::over(Arc::clone(&h.store), ruleset, customize);
    next.clock = Arc::clone(&h.clock);
    next.env.clock = h.clock.clone() as Arc<dyn Clock>;
    next.env.ids = Arc::new(LaterProcessIds(AtomicU64::new(0)));
    next.control = ControlService::new(next.env.clone(), next.dispatcher.clone(), None);
    next
}

/// The shipped profile with one exact edit, loaded with the shipped hardline file.
fn edited_ruleset(from: &str, to: &str) -> Ruleset {
    let text = std::str::from_utf8(shipped::DEFAULT_PROFILE).expect("UTF-8 profile");
    assert!(text.contains(from), "the shipped profile contains {from:?}");
    let edited = text.replacen(from, to, 1);
    let ruleset =
        Ruleset::load(edited.as_bytes(), shipped::HARDLINE).expect("edited profile loads");
    assert_ne!(
        ruleset.version.as_str(),
        SHIPPED_VERSION,
        "different bytes are a different policy_version"
    );
    ruleset
}

/// A one-step script whose only call is an external write with user-trusted arguments.
fn send_script(h: &Harness, text: &str) -> Value {
    h.script(json!([[{"call_id": "c1", "tool": "test.send", "arguments": {"text": text}, "argument_trust": {"text": "user"}}]]))
}

/// Submits a script and drives it until it parks.
async fn park(h: &Harness, script: Value) -> RunId {
    let run = h.submit(script).await;
    let worker = h.worker("w1");
    assert_eq!(h.drive(&worker).await, vec![ExecutionEnd::Parked]);
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::WaitingForApproval);
    assert!(
        row.lease().is_none(),
        "§16 #21: a waiting run holds no lease"
    );
    run
}

/// The one approval of a run, read from the store (visible or not).
fn only_approval(h: &Harness, run: RunId) -> Approval {
    let approvals = h
        .store
        .transact(|tx: &mut dyn StoreTx| tx.approvals_of_run(run))
        .unwrap();
    assert_eq!(approvals.len(), 1, "§16 #19: one approval for the one call");
    approvals.into_iter().next().unwrap()
}

fn approval_row(h: &Harness, id: ApprovalId) -> Approval {
    h.store
        .transact(|tx: &mut dyn StoreTx| tx.approval(id))
        .unwrap()
        .expect("approval exists")
}

fn events_of_type(h: &Harness, run: RunId, event_type: &str) -> Vec<Event> {
    h.events(run)
        .into_iter()
        .filter(|e| e.event_type.as_str() == event_type)
        .collect()
}

fn resumed(h: &Harness) -> Vec<RunId> {
    h.dispatcher.resumed.lock().unwrap().clone()
}

/// Drives every claimable run to its end with one worker and expects a completed run.
async fn drive_to_completion(h: &Harness, worker_id: &str) {
    let worker = h.worker(worker_id);
    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Completed)]
    );
}

/// The run's one invocation.
fn only_invocation(h: &Harness, run: RunId) -> airlock_core::invocation::Invocation {
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1);
    invocations.into_iter().next().unwrap()
}

/// Checks a call closed by approval resolution or revalidation: DENIED with its code and
/// message, no watermark, the run completed without running the tool, and the run's history
/// records the denial.
fn assert_call_denied(h: &Harness, run: RunId, reason_code: &str, message: &str) {
    let call = only_invocation(h, run);
    assert_eq!(call.status, InvocationStatus::Denied);
    assert_eq!(call.reason_code.as_deref(), Some(reason_code));
    assert_eq!(call.outcome_status, Some(OutcomeStatus::Denied));
    let outcome = call.outcome.as_ref().expect("an outcome");
    assert_eq!(outcome.message, message);
    assert_eq!(call.effect_sent_at, None, "a denied call never started");
    let denied = events_of_type(h, run, "tool.call.denied");
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0].payload["reason_code"], reason_code);
    assert_eq!(
        denied[0].payload["result_item"].as_str(),
        call.result_item.as_deref()
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Completed);
    assert_eq!(row.tool_call_count, 0);
    assert_eq!(row.step_count, 2);
    assert_eq!(row.attempts, 0, "approval resumes never touch attempts");
    let records = h
        .store
        .transact(|tx: &mut dyn StoreTx| tx.step_records(run, 0, 10))
        .unwrap();
    assert_eq!(
        records[0].results,
        vec![ResultRef::Invocation {
            invocation_id: call.id
        }],
        "the run records the denial as the call's result"
    );
}

/// Parks an external write and has bob approve it in this (first) process.
async fn park_and_approve(h: &Harness) -> (RunId, Approval) {
    let run = park(h, send_script(h, "hi")).await;
    let approval = only_approval(h, run);
    let resolved = h
        .control
        .resolve(
            &h.bob(),
            approval.id,
            ApprovalResolution::ApproveOnce,
            Some("ok"),
        )
        .await
        .expect("bob resolves");
    assert_eq!(resolved.state, ResolveState::Applied);
    assert_eq!(h.run(run).status(), RunStatus::Queued);
    assert_eq!(resumed(h), vec![run]);
    (run, resolved.approval)
}

/// The revalidation denied the approved call (SPEC §10.3): `approval.invalidated` and
/// `tool.call.denied`, the approval stays `approved` with `revalidated_policy_version` set, and
/// nothing ran in either process.
fn assert_revalidation_denied(
    first: &Harness,
    second: &Harness,
    run: RunId,
    approval: ApprovalId,
    reason_code: &str,
    message: &str,
) {
    let types = second.event_types(run);
    assert_subsequence(
        &types,
        &[
            "tool.call.proposed",
            "run.waiting_for_approval",
            "approval.requested",
            "approval.resolved",
            "run.requeued",
            "run.started",
            "approval.invalidated",
            "tool.call.denied",
            "run.checkpointed",
            "run.completed",
        ],
    );
    assert!(!types.iter().any(|t| t == "tool.call.authorized"));
    assert!(!types.iter().any(|t| t == "tool.call.started"));
    let invalidated = events_of_type(second, run, "approval.invalidated");
    assert_eq!(invalidated.len(), 1);
    let call = only_invocation(second, run);
    assert_eq!(
        invalidated[0].payload,
        json!({"approval_id": approval.to_string(), "invocation_id": call.id.to_string(), "reason_code": reason_code})
    );
    assert_eq!(
        invalidated[0].derivation_key.as_deref(),
        Some(format!("approval.invalidated:{approval}").as_str())
    );
    assert_call_denied(second, run, reason_code, message);
    let row = approval_row(second, approval);
    assert_eq!(row.status, ApprovalStatus::Approved);
    assert_eq!(
        row.revalidated_policy_version.as_deref(),
        Some(second.env.ruleset().version.as_str())
    );
    assert!(first.ledger.effects.lock().unwrap().is_empty());
    assert!(second.ledger.effects.lock().unwrap().is_empty());
}

/// The revalidation authorized the approved call with the fresh decision, which then ran once.
fn assert_revalidation_authorized(
    second: &Harness,
    run: RunId,
    approval: ApprovalId,
    fresh: PolicyDecisionType,
) {
    let types = second.event_types(run);
    assert_subsequence(
        &types,
        &[
            &GRANTED_APPROVAL_EVENTS[..],
            &["run.checkpointed", "run.completed"],
        ]
        .concat(),
    );
    assert!(!types.iter().any(|t| t == "approval.invalidated"));
    let call = only_invocation(second, run);
    assert_eq!(call.status, InvocationStatus::Succeeded);
    assert_eq!(call.reason_code.as_deref(), Some("tool.succeeded"));
    assert!(call.effect_sent_at.is_some(), "START set the watermark");
    let decision = call.policy_decision.as_ref().expect("a decision");
    assert_eq!(decision.decision, fresh);
    assert_eq!(
        decision.policy_version,
        second.env.ruleset().version.as_str(),
        "the row carries the fresh decision"
    );
    let row = approval_row(second, approval);
    assert_eq!(row.status, ApprovalStatus::Approved);
    assert_eq!(
        row.revalidated_policy_version.as_deref(),
        Some(second.env.ruleset().version.as_str())
    );
    let run_row = second.run(run);
    assert_eq!(run_row.status(), RunStatus::Completed);
    assert_eq!(run_row.tool_call_count, 1);
    assert_eq!(
        second.ledger.effects.lock().unwrap().clone(),
        vec![("test.send".to_owned(), call.idempotency_key.clone(), false)]
    );
}

/// A `test.send` replacement for the second process, recording into its own ledger.
fn replacement_send(
    ledger: &Arc<Ledger>,
    edit: impl FnOnce(&mut airlock_core::ports::ToolSpec),
) -> TestTool {
    let mut spec = test_spec(
        "test.send",
        SideEffectClass::ExternalWrite,
        IdempotencyClass::NonIdempotent,
        false,
    );
    edit(&mut spec);
    TestTool {
        spec,
        behaviour: Behaviour::Echo,
        ledger: Arc::clone(ledger),
    }
}

fn replace_send(tools: &mut Vec<Arc<dyn Tool>>, replacement: Option<TestTool>) {
    tools.retain(|t| t.spec().name != "test.send");
    if let Some(tool) = replacement {
        tools.push(Arc::new(tool));
    }
}

#[tokio::test(start_paused = true)]
async fn granted_approval_runs_the_call_once_after_revalidation() {
    // An external write parks, bob approves it, and the resumed run authorizes, starts and completes it exactly once.
    let h = Harness::new();
    let run = park(&h, send_script(&h, "hi")).await;
    let pending = only_approval(&h, run);
    assert_eq!(pending.status, ApprovalStatus::Pending);
    assert_eq!(pending.principal_id, "alice");
    assert_eq!(pending.tool_name, "test.send");
    assert_eq!(pending.risk, RiskLevel::Medium);
    assert_eq!(pending.policy_decision, PolicyDecisionType::RequireApproval);
    assert_eq!(pending.policy_reason, "policy.matrix.external_write");
    assert_eq!(pending.policy_version, SHIPPED_VERSION);
    assert_eq!(
        pending.expires_at,
        pending
            .created_at
            .saturating_add_seconds(MEDIUM_EXPIRY_SECONDS)
    );
    assert!(pending.requested_at.is_some(), "PARK announced it");
    let requested = events_of_type(&h, run, "approval.requested");
    assert_eq!(
        requested[0].payload,
        json!({
            "approval_id": pending.id.to_string(),
            "invocation_id": pending.action_id.to_string(),
            "risk": "medium",
            "expires_at": pending.expires_at.to_string(),
        })
    );
    let waiting = only_invocation(&h, run);
    assert_eq!(waiting.status, InvocationStatus::WaitingForApproval);
    assert_eq!(waiting.suspended_approval, Some(pending.id));

    let resolved = h
        .control
        .resolve(
            &h.bob(),
            pending.id,
            ApprovalResolution::ApproveOnce,
            Some("ok"),
        )
        .await
        .unwrap();
    assert_eq!(resolved.state, ResolveState::Applied);
    assert_eq!(h.run(run).status(), RunStatus::Queued);
    assert_eq!(resumed(&h), vec![run]);
    drive_to_completion(&h, "w1").await;

    assert_subsequence(&h.event_types(run), &GRANTED_APPROVAL_EVENTS);
    let resolved_event = &events_of_type(&h, run, "approval.resolved")[0];
    assert_eq!(
        resolved_event.payload,
        json!({"approval_id": pending.id.to_string(), "resolution": "approve_once"})
    );
    assert_eq!(resolved_event.actor.actor_type, ActorType::Principal);
    assert_eq!(resolved_event.actor.actor_id.as_deref(), Some("bob"));
    let requeued = &events_of_type(&h, run, "run.requeued")[0];
    assert_eq!(requeued.payload["reason"], "approval_resolved");
    assert_eq!(requeued.payload["approval_id"], pending.id.to_string());

    let approval = approval_row(&h, pending.id);
    assert_eq!(approval.status, ApprovalStatus::Approved);
    assert_eq!(approval.resolution, Some(ApprovalResolution::ApproveOnce));
    assert_eq!(approval.resolution_reason.as_deref(), Some("ok"));
    assert_eq!(approval.resolved_by.as_deref(), Some("bob"));
    assert!(approval.resolved_at.is_some());
    assert_eq!(
        approval.revalidated_policy_version.as_deref(),
        Some(SHIPPED_VERSION)
    );
    let call = only_invocation(&h, run);
    assert_eq!(call.status, InvocationStatus::Succeeded);
    assert_eq!(call.reason_code.as_deref(), Some("tool.succeeded"));
    assert!(call.effect_sent_at.is_some());
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Completed);
    assert_eq!(row.tool_call_count, 1);
    assert_eq!(row.step_count, 2);
    assert_eq!(row.attempts, 0);
    assert_eq!(h.ledger.count("test.send"), 1);
    assert!(
        h.control
            .list_pending(&h.bob(), None, None, None)
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test(start_paused = true)]
async fn denied_approval_denies_the_call_and_the_run_completes() {
    // Bob denies the approval: the run is re-queued, records the call as DENIED approval.denied, and completes without the effect.
    let h = Harness::new();
    let run = park(&h, send_script(&h, "hi")).await;
    let approval = only_approval(&h, run);
    let resolved = h
        .control
        .resolve(
            &h.bob(),
            approval.id,
            ApprovalResolution::Deny,
            Some("not today"),
        )
        .await
        .unwrap();
    assert_eq!(resolved.state, ResolveState::Applied);
    assert_eq!(resolved.approval.status, ApprovalStatus::Denied);
    assert_eq!(h.run(run).status(), RunStatus::Queued, "deny re-queues too");
    assert_eq!(resumed(&h), vec![run]);
    drive_to_completion(&h, "w1").await;

    let types = h.event_types(run);
    assert_subsequence(
        &types,
        &[
            "tool.call.proposed",
            "run.waiting_for_approval",
            "approval.requested",
            "approval.resolved",
            "run.requeued",
            "run.started",
            "tool.call.denied",
            "run.checkpointed",
            "run.completed",
        ],
    );
    for absent in [
        "approval.invalidated",
        "approval.expired",
        "tool.call.authorized",
        "tool.call.started",
    ] {
        assert!(!types.iter().any(|t| t == absent), "no {absent}");
    }
    assert_eq!(
        events_of_type(&h, run, "approval.resolved")[0].payload["resolution"],
        "deny"
    );
    assert_call_denied(
        &h,
        run,
        "approval.denied",
        "Not performed. Approval was required and was denied.",
    );
    let row = approval_row(&h, approval.id);
    assert_eq!(row.status, ApprovalStatus::Denied);
    assert_eq!(row.resolution, Some(ApprovalResolution::Deny));
    assert_eq!(row.resolution_reason.as_deref(), Some("not today"));
    assert_eq!(
        row.revalidated_policy_version, None,
        "a denied approval is never revalidated"
    );
    assert_eq!(h.ledger.count("test.send"), 0);
}

#[tokio::test(start_paused = true)]
async fn expired_approval_reports_expired_not_denied() {
    // Past expires_at the approval sweep expires the approval: approval.expired, the call DENIED approval.expired, never approval.denied.
    let h = Harness::new();
    let run = park(&h, send_script(&h, "hi")).await;
    let approval = only_approval(&h, run);

    // Not yet due: the sweep leaves it alone.
    assert_eq!(h.control.expire_due_all(h.clock.now()).await.unwrap(), 0);
    h.advance(MEDIUM_EXPIRY_SECONDS as u64 + 1).await;
    let now = h.clock.now();
    assert!(now >= approval.expires_at);
    assert_eq!(h.control.expire_due_all(now).await.unwrap(), 1);
    assert_eq!(
        h.control.expire_due_all(now).await.unwrap(),
        0,
        "an expired approval is not expired twice"
    );

    let expired = approval_row(&h, approval.id);
    assert_eq!(expired.status, ApprovalStatus::Expired);
    assert_eq!(expired.resolution, None);
    assert_eq!(expired.resolved_at, Some(now));
    assert_eq!(h.run(run).status(), RunStatus::Queued);
    assert_eq!(resumed(&h), vec![run]);
    let expired_events = events_of_type(&h, run, "approval.expired");
    assert_eq!(expired_events.len(), 1);
    assert_eq!(
        expired_events[0].payload,
        json!({"approval_id": approval.id.to_string()})
    );
    assert_eq!(expired_events[0].actor.actor_type, ActorType::Application);
    assert_eq!(expired_events[0].actor.actor_id, None);
    assert_eq!(
        expired_events[0].derivation_key.as_deref(),
        Some(format!("approval.closed:{}", approval.id).as_str())
    );
    assert_eq!(
        events_of_type(&h, run, "run.requeued")[0].payload["reason"],
        "approval_expired"
    );

    drive_to_completion(&h, "w1").await;
    let types = h.event_types(run);
    assert_subsequence(
        &types,
        &[
            "tool.call.proposed",
            "run.waiting_for_approval",
            "approval.requested",
            "approval.expired",
            "run.requeued",
            "run.started",
            "tool.call.denied",
            "run.completed",
        ],
    );
    assert!(!types.iter().any(|t| t == "approval.resolved"));
    assert!(
        h.events(run)
            .iter()
            .all(|e| e.payload["reason_code"] != "approval.denied"),
        "§16 #23: expiry is never reported as a denial"
    );
    assert_call_denied(
        &h,
        run,
        "approval.expired",
        "Not performed. The approval expired.",
    );
    let row = approval_row(&h, approval.id);
    assert_eq!(row.status, ApprovalStatus::Expired);
    assert_eq!(row.revalidated_policy_version, None);
    assert_eq!(h.ledger.count("test.send"), 0);
}

#[tokio::test(start_paused = true)]
async fn resolve_at_expiry_commits_the_expiry_and_reports_expired() {
    // Approving at expires_at is refused with Expired, yet the expiry itself commits and re-queues the run so it records the call as expired.
    let h = Harness::new();
    let run = park(&h, send_script(&h, "hi")).await;
    let approval = only_approval(&h, run);
    h.clock.sleep_until(approval.expires_at).await;
    assert!(h.clock.now() >= approval.expires_at);

    let answer = h
        .control
        .resolve(&h.bob(), approval.id, ApprovalResolution::ApproveOnce, None)
        .await;
    assert_eq!(answer, Err(ServiceError::Expired));
    let row = approval_row(&h, approval.id);
    assert_eq!(row.status, ApprovalStatus::Expired, "the expiry committed");
    assert_eq!(row.resolution, None);
    assert_eq!(row.resolved_by, None);
    assert_eq!(h.run(run).status(), RunStatus::Queued);
    assert_eq!(
        resumed(&h),
        vec![run],
        "an expiry inside resolve dispatches"
    );
    let expired_events = events_of_type(&h, run, "approval.expired");
    assert_eq!(expired_events.len(), 1);
    assert_eq!(expired_events[0].actor.actor_type, ActorType::Application);
    assert!(events_of_type(&h, run, "approval.resolved").is_empty());

    // Once expired, it is no longer pending for anyone.
    assert_eq!(
        h.control
            .resolve(&h.bob(), approval.id, ApprovalResolution::Deny, None)
            .await,
        Err(ServiceError::NoLongerPending {
            status: ApprovalStatus::Expired
        })
    );
    assert_eq!(resumed(&h), vec![run]);

    drive_to_completion(&h, "w1").await;
    assert_subsequence(
        &h.event_types(run),
        &[
            "approval.requested",
            "approval.expired",
            "run.requeued",
            "run.started",
            "tool.call.denied",
            "run.completed",
        ],
    );
    assert_call_denied(
        &h,
        run,
        "approval.expired",
        "Not performed. The approval expired.",
    );
    assert_eq!(
        approval_row(&h, approval.id).revalidated_policy_version,
        None
    );
    assert_eq!(h.ledger.count("test.send"), 0);
}

#[tokio::test(start_paused = true)]
async fn repeated_identical_resolve_is_already_resolved_without_event_or_dispatch() {
    // Approving an approved approval again answers already_resolved_identically and writes and dispatches nothing.
    let h = Harness::new();
    let run = park(&h, send_script(&h, "hi")).await;
    let approval = only_approval(&h, run);
    let first = h
        .control
        .resolve(
            &h.bob(),
            approval.id,
            ApprovalResolution::ApproveOnce,
            Some("ok"),
        )
        .await
        .unwrap();
    assert_eq!(first.state, ResolveState::Applied);
    let events_after_first = h.events(run);
    let row_after_first = approval_row(&h, approval.id);

    for principal in [h.bob(), h.alice()] {
        let again = h
            .control
            .resolve(
                &principal,
                approval.id,
                ApprovalResolution::ApproveOnce,
                Some("again"),
            )
            .await
            .unwrap();
        assert_eq!(again.state, ResolveState::AlreadyResolvedIdentically);
        assert_eq!(again.approval, row_after_first);
    }
    assert_eq!(h.events(run), events_after_first, "no new event");
    assert_eq!(resumed(&h), vec![run], "no extra dispatcher.resume");
    assert_eq!(approval_row(&h, approval.id), row_after_first);
    assert_eq!(
        events_of_type(&h, run, "approval.resolved").len(),
        1,
        "§16 #22: one applied per approval"
    );

    drive_to_completion(&h, "w1").await;
    assert_subsequence(
        &h.event_types(run),
        &[
            "approval.resolved",
            "run.requeued",
            "run.started",
            "tool.call.authorized",
            "tool.call.completed",
            "run.completed",
        ],
    );
    assert_eq!(only_invocation(&h, run).status, InvocationStatus::Succeeded);
    assert_eq!(h.run(run).status(), RunStatus::Completed);
    assert_eq!(h.ledger.count("test.send"), 1);
}

#[tokio::test(start_paused = true)]
async fn different_second_resolution_is_already_resolved_differently_and_changes_nothing() {
    // Denying an approved approval answers already_resolved_differently and leaves the approval, the run and the events as they were.
    let h = Harness::new();
    let run = park(&h, send_script(&h, "hi")).await;
    let approval = only_approval(&h, run);
    h.control
        .resolve(
            &h.bob(),
            approval.id,
            ApprovalResolution::ApproveOnce,
            Some("ok"),
        )
        .await
        .unwrap();
    let events_before = h.events(run);
    let row_before = approval_row(&h, approval.id);
    let run_before = h.run(run);

    let second = h
        .control
        .resolve(
            &h.bob(),
            approval.id,
            ApprovalResolution::Deny,
            Some("changed my mind"),
        )
        .await
        .unwrap();
    assert_eq!(second.state, ResolveState::AlreadyResolvedDifferently);
    assert_eq!(second.approval, row_before);
    assert_eq!(approval_row(&h, approval.id), row_before);
    assert_eq!(h.run(run), run_before);
    assert_eq!(h.events(run), events_before);
    assert_eq!(resumed(&h), vec![run]);

    drive_to_completion(&h, "w1").await;
    assert_subsequence(
        &h.event_types(run),
        &[
            "approval.resolved",
            "run.requeued",
            "run.started",
            "tool.call.authorized",
            "tool.call.started",
            "tool.call.completed",
            "run.completed",
        ],
    );
    let row = approval_row(&h, approval.id);
    assert_eq!(row.status, ApprovalStatus::Approved);
    assert_eq!(row.resolution, Some(ApprovalResolution::ApproveOnce));
    assert_eq!(row.resolution_reason.as_deref(), Some("ok"));
    assert_eq!(only_invocation(&h, run).status, InvocationStatus::Succeeded);
    assert_eq!(h.ledger.count("test.send"), 1);
}

#[tokio::test(start_paused = true)]
async fn self_approval_disabled_refuses_the_runs_principal_and_keeps_the_row_pending() {
    // With self_approval.enabled = false alice cannot resolve her own run's approval either way; the row stays pending until bob does.
    let ruleset = edited_ruleset(
        "[self_approval]\nenabled = true\n",
        "[self_approval]\nenabled = false\n",
    );
    let version = ruleset.version.as_str().to_owned();
    let h = Harness::with(ruleset, |_| {});
    let run = park(&h, send_script(&h, "hi")).await;
    let approval = only_approval(&h, run);
    assert_eq!(approval.policy_version, version);
    let events_before = h.events(run);

    for resolution in [ApprovalResolution::ApproveOnce, ApprovalResolution::Deny] {
        assert_eq!(
            h.control
                .resolve(&h.alice(), approval.id, resolution, None)
                .await,
            Err(ServiceError::SelfApproval)
        );
    }
    let row = approval_row(&h, approval.id);
    assert_eq!(row, approval, "§16 #26: the row is unchanged");
    assert_eq!(row.status, ApprovalStatus::Pending);
    assert_eq!(h.run(run).status(), RunStatus::WaitingForApproval);
    assert_eq!(h.events(run), events_before);
    assert!(resumed(&h).is_empty());

    let resolved = h
        .control
        .resolve(&h.bob(), approval.id, ApprovalResolution::ApproveOnce, None)
        .await
        .unwrap();
    assert_eq!(resolved.state, ResolveState::Applied);
    drive_to_completion(&h, "w1").await;
    assert_subsequence(
        &h.event_types(run),
        &[
            "approval.requested",
            "approval.resolved",
            "run.requeued",
            "run.started",
            "tool.call.authorized",
            "tool.call.completed",
            "run.completed",
        ],
    );
    let row = approval_row(&h, approval.id);
    assert_eq!(row.resolved_by.as_deref(), Some("bob"));
    assert_eq!(
        row.revalidated_policy_version.as_deref(),
        Some(version.as_str())
    );
    assert_eq!(h.ledger.count("test.send"), 1);
}

#[tokio::test(start_paused = true)]
async fn an_over_long_reason_is_refused_before_any_answer_that_depends_on_the_row() {
    // Issue 17 item 6: the request is validated before §10.4's state-dependent answers, the
    // idempotent repeat included; only another tenant's NotFound comes first (it reveals
    // nothing, whatever the reason).
    let h = Harness::new();
    let run = park(&h, send_script(&h, "hi")).await;
    let approval = only_approval(&h, run);
    let long = "r".repeat(4097);
    let resolve = |who: airlock_core::principal::Principal,
                   resolution: ApprovalResolution,
                   reason: Option<String>| {
        let control = &h.control;
        async move {
            control
                .resolve(&who, approval.id, resolution, reason.as_deref())
                .await
                .map(|r| r.state)
        }
    };
    let approve = ApprovalResolution::ApproveOnce;
    assert_eq!(
        resolve(h.mallory(), approve, Some(long.clone())).await,
        Err(ServiceError::NotFound)
    );
    assert!(matches!(
        resolve(h.bob(), approve, Some(long.clone())).await,
        Err(ServiceError::InvalidArgument(_))
    ));
    assert_eq!(
        approval_row(&h, approval.id).status,
        ApprovalStatus::Pending
    );
    assert_eq!(
        resolve(h.bob(), approve, Some("r".repeat(4096))).await,
        Ok(ResolveState::Applied)
    );
    // A repeat is still a request: an invalid one is refused, not answered as a repeat.
    for resolution in [approve, ApprovalResolution::Deny] {
        assert!(matches!(
            resolve(h.bob(), resolution, Some(long.clone())).await,
            Err(ServiceError::InvalidArgument(_))
        ));
    }
    assert_eq!(
        resolve(h.bob(), approve, None).await,
        Ok(ResolveState::AlreadyResolvedIdentically)
    );
    assert_eq!(
        approval_row(&h, approval.id).resolution_reason,
        Some("r".repeat(4096))
    );
}

#[tokio::test(start_paused = true)]
async fn an_over_long_reason_is_refused_even_when_the_approval_is_due_to_expire() {
    // Validation comes first here too; the expiry is not lost, only left to the next sweep or
    // the next valid resolve (§10.4: `pending` and `now ≥ expires_at` → expiry, `Expired`).
    let h = Harness::new();
    let run = park(&h, send_script(&h, "hi")).await;
    let approval = only_approval(&h, run);
    h.advance(MEDIUM_EXPIRY_SECONDS as u64 + 1).await;
    let resolve = |reason: Option<String>| {
        let control = &h.control;
        let bob = h.bob();
        async move {
            control
                .resolve(
                    &bob,
                    approval.id,
                    ApprovalResolution::ApproveOnce,
                    reason.as_deref(),
                )
                .await
                .map(|r| r.state)
        }
    };
    assert!(matches!(
        resolve(Some("r".repeat(4097))).await,
        Err(ServiceError::InvalidArgument(_))
    ));
    assert_eq!(
        approval_row(&h, approval.id).status,
        ApprovalStatus::Pending
    );
    assert_eq!(resolve(Some("ok".into())).await, Err(ServiceError::Expired));
    assert_eq!(
        approval_row(&h, approval.id).status,
        ApprovalStatus::Expired
    );
}

#[tokio::test(start_paused = true)]
async fn other_tenant_sees_nothing_and_cannot_resolve() {
    // Mallory, in another tenant, gets NotFound or an empty page for acme's run and approval, and cannot resolve or expire it.
    let h = Harness::new();
    let run = park(&h, send_script(&h, "hi")).await;
    let approval = only_approval(&h, run);
    let mallory = h.mallory();

    assert_eq!(
        h.control.get_approval(&mallory, approval.id),
        Err(ServiceError::NotFound)
    );
    let page = h.control.list_pending(&mallory, None, None, None).unwrap();
    assert!(page.items.is_empty());
    assert_eq!(page.next_cursor, None);
    let page = h
        .control
        .list_pending(&mallory, Some(run), None, None)
        .unwrap();
    assert!(page.items.is_empty());
    for resolution in [ApprovalResolution::ApproveOnce, ApprovalResolution::Deny] {
        assert_eq!(
            h.control
                .resolve(&mallory, approval.id, resolution, None)
                .await
                .map(|r| r.state),
            Err(ServiceError::NotFound)
        );
    }
    assert_eq!(
        h.control.get_run(&mallory, run).map(|r| r.id),
        Err(ServiceError::NotFound)
    );
    assert_eq!(
        h.control
            .list_events(&mallory, run, None, None)
            .map(|p| p.items.len()),
        Err(ServiceError::NotFound)
    );
    // Even once it is due, mallory's expiry pass does not reach acme's approval.
    h.advance(MEDIUM_EXPIRY_SECONDS as u64 + 1).await;
    assert_eq!(h.control.expire_due(&mallory).await, Ok(0));

    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.checkpointed",
            "tool.call.proposed",
            "run.checkpointed",
            "run.waiting_for_approval",
            "approval.requested",
        ]
    );
    assert_eq!(approval_row(&h, approval.id), approval);
    assert_eq!(h.run(run).status(), RunStatus::WaitingForApproval);
    assert!(resumed(&h).is_empty());
    // The owning tenant still sees it.
    assert_eq!(h.control.get_approval(&h.bob(), approval.id), Ok(approval));
    assert_eq!(h.ledger.count("test.send"), 0);
}

#[tokio::test(start_paused = true)]
async fn list_pending_pages_newest_first_with_an_opaque_cursor() {
    // Two runs each park on one approval; limit 1 pages them newest first, and the last page has no cursor.
    let h = Harness::new();
    let older_run = park(&h, send_script(&h, "first")).await;
    h.advance(1).await;
    let newer_run = park(&h, send_script(&h, "second")).await;
    let older = only_approval(&h, older_run);
    let newer = only_approval(&h, newer_run);
    assert!(newer.created_at > older.created_at);

    let first = h
        .control
        .list_pending(&h.bob(), None, Some(1), None)
        .unwrap();
    assert_eq!(
        first.items.iter().map(|a| a.id).collect::<Vec<_>>(),
        vec![newer.id]
    );
    let cursor = first.next_cursor.expect("a further row exists");
    assert_eq!(
        cursor,
        format!("{}:{}", newer.created_at.as_micros(), newer.id)
    );
    let second = h
        .control
        .list_pending(&h.bob(), None, Some(1), Some(&cursor))
        .unwrap();
    assert_eq!(
        second.items.iter().map(|a| a.id).collect::<Vec<_>>(),
        vec![older.id]
    );
    assert_eq!(second.next_cursor, None, "no further row exists");

    let all = h
        .control
        .list_pending(&h.bob(), None, Some(2), None)
        .unwrap();
    assert_eq!(
        all.items.iter().map(|a| a.id).collect::<Vec<_>>(),
        vec![newer.id, older.id]
    );
    assert_eq!(all.next_cursor, None);
    let one_run = h
        .control
        .list_pending(&h.bob(), Some(older_run), None, None)
        .unwrap();
    assert_eq!(
        one_run.items.iter().map(|a| a.id).collect::<Vec<_>>(),
        vec![older.id]
    );
    for bad_limit in [0, 101] {
        assert!(matches!(
            h.control
                .list_pending(&h.bob(), None, Some(bad_limit), None),
            Err(ServiceError::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        h.control
            .list_pending(&h.bob(), None, Some(1), Some("not-a-cursor")),
        Err(ServiceError::InvalidArgument(_))
    ));

    // Resolving the newer one removes it from the pages.
    h.control
        .resolve(&h.bob(), newer.id, ApprovalResolution::Deny, None)
        .await
        .unwrap();
    let remaining = h
        .control
        .list_pending(&h.bob(), None, Some(1), None)
        .unwrap();
    assert_eq!(
        remaining.items.iter().map(|a| a.id).collect::<Vec<_>>(),
        vec![older.id]
    );
    assert_eq!(remaining.next_cursor, None);
    for run in [older_run, newer_run] {
        assert_subsequence(
            &h.event_types(run),
            &[
                "tool.call.proposed",
                "run.waiting_for_approval",
                "approval.requested",
            ],
        );
    }
    assert_eq!(h.run(older_run).status(), RunStatus::WaitingForApproval);
    assert_eq!(h.run(newer_run).status(), RunStatus::Queued);
    assert_eq!(approval_row(&h, older.id).status, ApprovalStatus::Pending);
    assert_eq!(approval_row(&h, newer.id).status, ApprovalStatus::Denied);
}

#[tokio::test(start_paused = true)]
async fn revalidation_under_a_new_version_that_allows_authorizes_and_runs() {
    // §10.3 row 3: a new process whose profile allows external_write revalidates the approved call to a fresh allow, which runs.
    let h = Harness::new();
    let (run, approval) = park_and_approve(&h).await;
    let ruleset = edited_ruleset(
        EXTERNAL_WRITE_ROW,
        "[rules.external_write]\ndecision = \"allow\"\n",
    );
    let h2 = new_process(&h, ruleset, |_| {});
    drive_to_completion(&h2, "w2").await;
    assert_revalidation_authorized(&h2, run, approval.id, PolicyDecisionType::Allow);
    assert!(h.ledger.effects.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn revalidation_under_a_new_version_asking_for_the_same_approval_authorizes_and_runs() {
    // §22.5: a new policy_version (an unrelated rule changed, as a release that touches the
    // shipped rules does) asks for approval for the same reason at the same risk: the human
    // approved exactly this, so the call runs once.
    let h = Harness::new();
    let (run, approval) = park_and_approve(&h).await;
    let ruleset = edited_ruleset(
        "[rules.publication]\ndecision = \"require_approval\"\n",
        "[rules.publication]\ndecision = \"deny\"\n",
    );
    let h2 = new_process(&h, ruleset, |_| {});
    drive_to_completion(&h2, "w2").await;
    assert_revalidation_authorized(&h2, run, approval.id, PolicyDecisionType::RequireApproval);
}

#[tokio::test(start_paused = true)]
async fn revalidation_under_a_new_version_asking_at_a_higher_risk_is_escalated() {
    // §22.5, the other side: the new process's `test.send` is classed critical, so the fresh
    // require_approval asks for more than the human approved: DENIED escalated.
    let h = Harness::new();
    let (run, approval) = park_and_approve(&h).await;
    let ruleset = edited_ruleset(
        "[rules.publication]\ndecision = \"require_approval\"\n",
        "[rules.publication]\ndecision = \"deny\"\n",
    );
    let replacement = replacement_send(&h.ledger, |spec| spec.risk = RiskLevel::Critical);
    let h2 = new_process(&h, ruleset, |tools| replace_send(tools, Some(replacement)));
    drive_to_completion(&h2, "w2").await;
    assert_revalidation_denied(
        &h,
        &h2,
        run,
        approval.id,
        "policy.revalidation.escalated",
        "Not performed. Policy changed before execution.",
    );
}

#[tokio::test(start_paused = true)]
async fn revalidation_under_a_new_version_that_denies_is_escalated() {
    // §10.3 row 2: a new process whose profile denies external_write gives a fresh deny: DENIED escalated.
    let h = Harness::new();
    let (run, approval) = park_and_approve(&h).await;
    let ruleset = edited_ruleset(
        EXTERNAL_WRITE_ROW,
        "[rules.external_write]\ndecision = \"deny\"\n",
    );
    let h2 = new_process(&h, ruleset, |_| {});
    drive_to_completion(&h2, "w2").await;
    assert_revalidation_denied(
        &h,
        &h2,
        run,
        approval.id,
        "policy.revalidation.escalated",
        "Not performed. Policy changed before execution.",
    );
}

#[tokio::test(start_paused = true)]
async fn revalidation_with_arguments_that_now_normalize_differently_is_changed() {
    // §10.3 row 1: the pinned tool's schema gained a defaulted property, so the re-normalized hash differs from the approved one: DENIED changed.
    let h = Harness::new();
    let (run, approval) = park_and_approve(&h).await;
    let ledger = Arc::new(Ledger::default());
    let replacement = replacement_send(&ledger, |spec| {
        spec.input_schema = InputSchema::from_json(&json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "maxLength": 1000},
                "path": {"type": "string", "maxLength": 4096},
                "mode": {"type": "string", "default": "fast"}
            },
            "additionalProperties": false
        }))
        .expect("schema")
        .into();
    });
    let h2 = new_process(&h, Ruleset::shipped().unwrap(), |tools| {
        replace_send(tools, Some(replacement))
    });
    assert_eq!(h2.env.ruleset().version.as_str(), SHIPPED_VERSION);
    drive_to_completion(&h2, "w2").await;
    assert_revalidation_denied(
        &h,
        &h2,
        run,
        approval.id,
        "policy.revalidation.changed",
        "Not performed. The approved action changed.",
    );
    assert!(ledger.effects.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn revalidation_with_changed_required_scopes_is_changed() {
    // §10.3 row 1: the pinned tool now requires a scope the approval did not cover (even one the run holds): DENIED changed.
    let h = Harness::new();
    let (run, approval) = park_and_approve(&h).await;
    assert!(approval.required_scopes.is_empty());
    let ledger = Arc::new(Ledger::default());
    let replacement = replacement_send(&ledger, |spec| {
        spec.required_scopes = [Scope::parse_required("demo.write").unwrap()]
            .into_iter()
            .collect();
    });
    let h2 = new_process(&h, Ruleset::shipped().unwrap(), |tools| {
        replace_send(tools, Some(replacement))
    });
    drive_to_completion(&h2, "w2").await;
    assert_revalidation_denied(
        &h,
        &h2,
        run,
        approval.id,
        "policy.revalidation.changed",
        "Not performed. The approved action changed.",
    );
    assert!(ledger.effects.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn revalidation_with_a_required_scope_the_run_lacks_is_changed_not_refused() {
    // §10.3 row 1: the pinned tool now requires a scope outside the run's stamped scopes; recovery skips the step-3 refusal and denies the row as changed.
    let h = Harness::new();
    let (run, approval) = park_and_approve(&h).await;
    let ledger = Arc::new(Ledger::default());
    let replacement = replacement_send(&ledger, |spec| {
        spec.required_scopes = [Scope::parse_required("plugin.send").unwrap()]
            .into_iter()
            .collect();
    });
    let h2 = new_process(&h, Ruleset::shipped().unwrap(), |tools| {
        replace_send(tools, Some(replacement))
    });
    drive_to_completion(&h2, "w2").await;
    assert_revalidation_denied(
        &h,
        &h2,
        run,
        approval.id,
        "policy.revalidation.changed",
        "Not performed. The approved action changed.",
    );
    assert!(
        h2.events(run)
            .iter()
            .all(|e| e.payload["reason_code"] != "policy.scope.missing"),
        "a row found at step 1 is never refused"
    );
    assert!(ledger.effects.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn revalidation_with_the_pinned_tool_unregistered_is_changed() {
    // §10.3 row 1: the new process does not register the pinned tool at all: DENIED changed, nothing runs.
    let h = Harness::new();
    let (run, approval) = park_and_approve(&h).await;
    let h2 = new_process(&h, Ruleset::shipped().unwrap(), |tools| {
        replace_send(tools, None)
    });
    drive_to_completion(&h2, "w2").await;
    assert_revalidation_denied(
        &h,
        &h2,
        run,
        approval.id,
        "policy.revalidation.changed",
        "Not performed. The approved action changed.",
    );
}

#[tokio::test(start_paused = true)]
async fn revalidation_under_the_same_version_requiring_approval_authorizes_and_runs() {
    // §10.3 row 3: under the same policy_version the fresh require_approval is the one the approval satisfies: AUTHORIZED, and it runs once.
    let h = Harness::new();
    let (run, approval) = park_and_approve(&h).await;
    let h2 = new_process(&h, Ruleset::shipped().unwrap(), |_| {});
    drive_to_completion(&h2, "w2").await;
    assert_revalidation_authorized(&h2, run, approval.id, PolicyDecisionType::RequireApproval);
    assert_eq!(
        approval_row(&h2, approval.id)
            .revalidated_policy_version
            .as_deref(),
        Some(SHIPPED_VERSION)
    );
    assert!(h.ledger.effects.lock().unwrap().is_empty());
}

/// The harness clock plus however long transactions have waited for the write lock.
struct LockWaitClock {
    base: Arc<dyn Clock>,
    waited_micros: std::sync::Mutex<i64>,
}

impl Clock for LockWaitClock {
    fn now(&self) -> Timestamp {
        let waited = *self.waited_micros.lock().unwrap();
        self.base.now().saturating_add_micros(waited)
    }
    fn sleep_until(&self, t: Timestamp) -> airlock_core::ports::BoxFut<'static, ()> {
        self.base.sleep_until(t)
    }
}

/// Every write transaction first waits `wait_micros` for the lock, as SQLite's
/// `BEGIN IMMEDIATE` can behind another process's writer.
struct LockWait {
    clock: Arc<LockWaitClock>,
    wait_micros: i64,
}

impl StoreHook for LockWait {
    fn before_transact(&self) {
        *self.clock.waited_micros.lock().unwrap() += self.wait_micros;
    }
}

#[tokio::test(start_paused = true)]
async fn a_resolve_that_waits_for_the_lock_past_expiry_expires_instead_of_approving() {
    // §16 #23: nothing is approved at or after expires_at. The approval is still pending when
    // resolve is called, but its transaction gets the lock only after expires_at: the time that
    // counts is the one read under the lock.
    let h = Harness::new();
    let run = park(&h, send_script(&h, "hi")).await;
    let approval = only_approval(&h, run);
    let remaining = approval.expires_at.as_micros() - h.clock.now().as_micros();
    assert!(remaining > 0, "still pending when resolve is called");
    let clock = Arc::new(LockWaitClock {
        base: h.clock.clone(),
        waited_micros: std::sync::Mutex::new(0),
    });
    let mut env = h.env_over(Arc::new(HookedStore {
        inner: h.store.clone(),
        hook: LockWait {
            clock: clock.clone(),
            wait_micros: remaining + 1_000_000,
        },
    }));
    env.clock = clock;
    let control = ControlService::new(env, h.dispatcher.clone(), None);
    let answer = control
        .resolve(&h.bob(), approval.id, ApprovalResolution::ApproveOnce, None)
        .await
        .map(|r| r.state);
    assert_eq!(answer, Err(ServiceError::Expired));
    assert_eq!(
        approval_row(&h, approval.id).status,
        ApprovalStatus::Expired
    );
}

/// Issue 32 item 4: a reload records its rules before it puts them in force, and every clone of
/// the environment (a worker's, the gateway's) decides with them from then on: a call approved
/// under the old rules is revalidated under the new in the same process (SPEC §10.3 row 3).
#[tokio::test(start_paused = true)]
async fn a_reload_is_recorded_before_it_decides_and_reaches_every_clone_of_the_environment() {
    let h = Harness::new();
    let (run, approval) = park_and_approve(&h).await;
    let worker_env = h.env.clone();
    let edited = edited_ruleset(
        EXTERNAL_WRITE_ROW,
        "[rules.external_write]\ndecision = \"allow\"\n",
    );
    let version = edited.version.as_str().to_owned();
    let previous = h
        .control
        .put_in_force(
            airlock_core::live_policy::Rulesets {
                live: Arc::new(edited),
                shadow: None,
            },
            "test",
        )
        .await
        .expect("recorded and in force");
    assert_eq!(previous.live.version.as_str(), SHIPPED_VERSION);
    assert_eq!(
        worker_env.ruleset().version.as_str(),
        version,
        "every clone"
    );
    let recorded = h.store.read(|tx| tx.policy_profiles()).expect("profiles");
    assert!(
        recorded.iter().any(|p| p.policy_version == version),
        "the new version is recorded: {recorded:?}"
    );
    drive_to_completion(&h, "after-reload").await;
    assert_revalidation_authorized(&h, run, approval.id, PolicyDecisionType::Allow);
}

/// Issue 32 item 2: in shadow mode the live rules alone act (the call parks for approval as it
/// would without a candidate), and the candidate's different decision is one
/// `policy.shadow.diff` process event keyed by the call's invocation, carrying both decisions
/// and no arguments. Resuming the run after the approval proposes nothing again, so the event
/// is not repeated.
#[tokio::test(start_paused = true)]
async fn a_shadow_candidate_is_recorded_once_beside_the_call_and_never_acts() {
    let h = Harness::new();
    let candidate = edited_ruleset(
        EXTERNAL_WRITE_ROW,
        "[rules.external_write]\ndecision = \"deny\"\n",
    );
    let candidate_version = candidate.version.as_str().to_owned();
    h.env.policy.replace(airlock_core::live_policy::Rulesets {
        live: h.env.ruleset(),
        shadow: Some(Arc::new(candidate)),
    });
    let (run, approval) = park_and_approve(&h).await;
    drive_to_completion(&h, "w2").await;
    assert_eq!(
        h.run(run).status(),
        RunStatus::Completed,
        "the live rules acted"
    );
    let diffs: Vec<_> = h
        .store
        .read(|tx| tx.process_events())
        .expect("process events")
        .into_iter()
        .filter(|e| e.event_type.as_str() == "policy.shadow.diff")
        .collect();
    assert_eq!(diffs.len(), 1, "one difference, once: {diffs:?}");
    let diff = &diffs[0];
    let call = only_invocation(&h, run);
    assert_eq!(
        diff.derivation_key,
        format!("policy.shadow.diff:{}", call.id)
    );
    assert_eq!(diff.payload["live"]["decision"], "require_approval");
    assert_eq!(
        diff.payload["live"]["policy_version"],
        approval.policy_version
    );
    assert_eq!(diff.payload["candidate"]["decision"], "deny");
    assert_eq!(
        diff.payload["candidate"]["policy_version"],
        candidate_version
    );
    let keys: Vec<&String> = diff
        .payload
        .as_object()
        .expect("an object")
        .keys()
        .collect();
    assert_eq!(
        keys,
        [
            "action_id",
            "candidate",
            "evaluated_at",
            "live",
            "run_id",
            "step_number",
            "tenant_id",
            "tool"
        ],
        "the call and both decisions, never its arguments"
    );
}
