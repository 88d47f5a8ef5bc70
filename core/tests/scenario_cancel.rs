//! Cancellation scenarios (SPEC §8.5, §8.1, §16 #30–#33): a queued run cancels at once, a
//! running call finishes before the run cancels (by the local token or the heartbeat), a
//! parked run cancels in one transaction, and a terminal run ignores the request.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use airlock_core::control::{CancelOutcome, ControlService};
use airlock_core::events::Event;
use airlock_core::ids::RunId;
use airlock_core::mem_store::MemStore;
use airlock_core::planner::script::ScriptedPlannerFactory;
use airlock_core::ports::{
    BoxFut, FaultHook, Planner, PlannerError, PlannerFactory, PlannerInput, PlannerTurn,
};
use airlock_core::principal::Principal;
use airlock_core::run::executor::ExecutionEnd;
use airlock_core::run::{Run, RunState};
use airlock_core::store::Store;
use airlock_core::time::Timestamp;
use airlock_core::vocab::{ApprovalStatus, CrashPoint, InvocationStatus, OutcomeStatus, RunStatus};
use airlock_core::worker::{Worker, WorkerSettings};
use common::*;
use serde_json::json;

/// Step 1 calls the gated tool, step 2 an echo that a cancelled run must never propose.
fn gated_then_echo(h: &Harness) -> serde_json::Value {
    h.script(json!([
        [{"call_id": "c1", "tool": "test.gated", "arguments": {}}],
        [{"call_id": "c2", "tool": "test.echo", "arguments": {"text": "late"}, "argument_trust": {"text": "user"}}]
    ]))
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_micros(EPOCH_MICROS).saturating_add_seconds(seconds)
}

/// Asserts the events were appended by one transaction: same `created_at`, consecutive
/// per-session sequences.
fn assert_one_transaction(events: &[&Event]) {
    for pair in events.windows(2) {
        assert_eq!(pair[0].created_at, pair[1].created_at, "{pair:#?}");
        assert_eq!(pair[0].sequence + 1, pair[1].sequence, "{pair:#?}");
    }
}

/// The run's events from the first of `event_type` on.
fn events_from<'e>(events: &'e [Event], event_type: &str) -> Vec<&'e Event> {
    let start = events
        .iter()
        .position(|e| e.event_type.as_str() == event_type)
        .unwrap_or_else(|| panic!("no {event_type} in {events:#?}"));
    events[start..].iter().collect()
}

fn approvals(h: &Harness, run: RunId) -> Vec<airlock_core::approval::Approval> {
    h.store.transact(|tx| tx.approvals_of_run(run)).unwrap()
}

/// A fault hook that, the first time execution reaches `point`, lets a cancel request commit
/// there (through `control`) before execution continues: a request that lands between two
/// transactions of the worker, deterministically.
struct CancelAt {
    point: CrashPoint,
    fired: AtomicBool,
    control: OnceLock<Arc<ControlService<MemStore>>>,
    target: OnceLock<(Principal, RunId)>,
}

impl CancelAt {
    fn new(point: CrashPoint) -> Arc<CancelAt> {
        Arc::new(CancelAt {
            point,
            fired: AtomicBool::new(false),
            control: OnceLock::new(),
            target: OnceLock::new(),
        })
    }
}

impl FaultHook for CancelAt {
    fn reached(&self, point: CrashPoint) -> BoxFut<'static, ()> {
        let armed = point == self.point && self.target.get().is_some();
        if !armed || self.fired.swap(true, Ordering::SeqCst) {
            return Box::pin(std::future::ready(()));
        }
        let control = Arc::clone(self.control.get().expect("control set"));
        let (principal, run) = self.target.get().expect("target set").clone();
        Box::pin(async move {
            let outcome = control.cancel_run(&principal, run).await.unwrap();
            assert!(outcome.accepted);
        })
    }
}

/// A worker whose env carries `hook`, and the control service the hook cancels through
/// (with the worker's tokens when `local_tokens`).
fn hooked_worker(h: &Harness, hook: &Arc<CancelAt>, local_tokens: bool) -> Arc<Worker<MemStore>> {
    let mut env = h.env.clone();
    env.faults = hook.clone();
    let worker = Worker::new(env.clone(), WorkerSettings::new("w1"));
    let tokens = local_tokens.then(|| worker.tokens().clone());
    let control = ControlService::new(env, h.dispatcher.clone(), tokens);
    assert!(hook.control.set(Arc::new(control)).is_ok());
    worker
}

#[tokio::test(start_paused = true)]
async fn cancel_while_queued_cancels_at_once_and_nothing_ever_runs() {
    // A queued run with no RUNNING call becomes CANCELLED in the cancel transaction itself.
    let h = Harness::new();
    let run = h
        .submit(h.script(json!([[{"call_id": "c1", "tool": "test.echo", "arguments": {"text": "hi"}, "argument_trust": {"text": "user"}}]])))
        .await;
    h.advance(1).await;

    let outcome = h.control.cancel_run(&h.alice(), run).await.unwrap();

    assert_eq!(
        outcome,
        CancelOutcome {
            accepted: true,
            status: RunStatus::Cancelled
        }
    );
    let worker = h.worker("w1");
    assert_eq!(h.drive(&worker).await, vec![]);
    h.advance(60).await;
    assert_eq!(worker.reclaim().await.unwrap(), 0);
    assert_eq!(h.drive(&worker).await, vec![]);
    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.cancel_requested",
            "run.cancelled"
        ]
    );
    let events = h.events(run);
    let cancel = events_from(&events, "run.cancel_requested");
    assert_one_transaction(&cancel);
    assert_eq!(cancel[0].created_at, at(1));
    assert_eq!(
        cancel[0].payload,
        json!({"requested_at": at(1).to_string()})
    );
    assert_eq!(cancel[1].payload, json!({"reason": "requested"}));
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Cancelled);
    assert_eq!(row.cancel_requested_at, Some(at(1)));
    assert!(row.lease().is_none());
    assert_eq!(row.lease_epoch, 0, "never claimed");
    assert_eq!(
        (row.step_count, row.tool_call_count, row.attempts),
        (0, 0, 0)
    );
    assert!(h.invocations(run).is_empty());
    assert_eq!(h.ledger.count("test.echo"), 0);
}

#[tokio::test(start_paused = true)]
async fn cancel_after_start_lets_the_call_finish_then_cancels_through_the_local_token() {
    // A cancel that reaches this process's token while a call runs is observed only after the
    // call's FINISH commits; the next step's call is never proposed.
    let (h, gate) = gated_harness();
    let run = h.submit(gated_then_echo(&h)).await;
    let worker = h.worker("w1");
    let control = ControlService::new(
        h.env.clone(),
        h.dispatcher.clone(),
        Some(worker.tokens().clone()),
    );
    let (claimed, lease) = worker.claim(None).await.unwrap().expect("claimable");
    let execution = tokio::spawn({
        let worker = Arc::clone(&worker);
        async move { worker.execute(claimed, lease).await }
    });
    gate.entered.notified().await;
    assert_eq!(h.event_types(run).last().unwrap(), "tool.call.started");
    assert_eq!(h.invocations(run)[0].status, InvocationStatus::Running);

    let outcome = control.cancel_run(&h.alice(), run).await.unwrap();
    let repeated = control.cancel_run(&h.alice(), run).await.unwrap();
    assert_eq!(
        outcome,
        CancelOutcome {
            accepted: true,
            status: RunStatus::Running
        }
    );
    assert_eq!(repeated, outcome, "a repeated request is accepted again");
    assert_eq!(
        h.run(run).status(),
        RunStatus::Running,
        "a running call is never abandoned"
    );
    gate.release.notify_one();
    let end = execution.await.unwrap();

    assert_eq!(end, ExecutionEnd::Finished(RunStatus::Cancelled));
    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.checkpointed",
            "tool.call.proposed",
            "tool.call.authorized",
            "tool.call.started",
            "run.cancel_requested",
            "tool.call.completed",
            // The step's BATCH folds into its last FINISH (§17.1 F4); point 4 then sees the
            // cancel and FINAL checkpoints the finished step.
            "run.checkpointed",
            "run.checkpointed",
            "run.cancelled"
        ],
        "one run.cancel_requested for two requests; FINISH precedes the cancellation"
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Cancelled);
    assert!(row.cancel_requested_at.is_some());
    assert!(row.lease().is_none());
    assert_eq!((row.step_count, row.tool_call_count), (1, 1));
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1, "c2 gets no row");
    assert_eq!(invocations[0].call_id, "c1");
    assert_eq!(invocations[0].status, InvocationStatus::Succeeded);
    assert_eq!(h.ledger.count("test.echo"), 0);
    assert!(!worker.tokens().contains(run), "the token is unregistered");
}

#[tokio::test(start_paused = true)]
async fn cancel_after_start_without_a_local_token_is_observed_by_the_next_heartbeat() {
    // A control service in another process cannot reach the token: the heartbeat (every
    // lease/3 = 10 s) reads cancel_requested_at, and the run cancels once the call finishes.
    let (h, gate) = gated_harness();
    let run = h.submit(gated_then_echo(&h)).await;
    let worker = h.worker("w1");
    let (claimed, lease) = worker.claim(None).await.unwrap().expect("claimable");
    let execution = tokio::spawn({
        let worker = Arc::clone(&worker);
        async move { worker.execute(claimed, lease).await }
    });
    gate.entered.notified().await;
    h.advance(1).await;

    let outcome = h.control.cancel_run(&h.alice(), run).await.unwrap();
    assert_eq!(
        outcome,
        CancelOutcome {
            accepted: true,
            status: RunStatus::Running
        }
    );
    // Past the first heartbeat (t = 10 s), well before the tool's 120 s timeout.
    h.advance(10).await;
    match h.run(run).state {
        RunState::Running {
            lease_expires_at, ..
        } => assert_eq!(
            lease_expires_at,
            at(40),
            "the 10 s heartbeat renewed the lease"
        ),
        other => panic!("still running expected, got {other:?}"),
    }
    // Heartbeats continue after the cancel is observed, so the call can outlive the lease
    // it started under: at 45 s the lease (renewed at 40 s) still holds.
    h.advance(34).await;
    assert_eq!(h.worker("w2").reclaim().await.unwrap(), 0);
    match h.run(run).state {
        RunState::Running {
            lease_expires_at, ..
        } => assert_eq!(lease_expires_at, at(70)),
        other => panic!("still running expected, got {other:?}"),
    }
    gate.release.notify_one();
    let end = execution.await.unwrap();

    assert_eq!(end, ExecutionEnd::Finished(RunStatus::Cancelled));
    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.checkpointed",
            "tool.call.proposed",
            "tool.call.authorized",
            "tool.call.started",
            "run.cancel_requested",
            "tool.call.completed",
            // The step's BATCH folds into its last FINISH (§17.1 F4); point 4 then sees the
            // cancel and FINAL checkpoints the finished step.
            "run.checkpointed",
            "run.checkpointed",
            "run.cancelled"
        ]
    );
    let events = h.events(run);
    assert_eq!(
        events_from(&events, "run.cancel_requested")[0].created_at,
        at(1)
    );
    assert_eq!(events.last().unwrap().created_at, at(45));
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Cancelled);
    assert_eq!(row.cancel_requested_at, Some(at(1)));
    assert!(row.lease().is_none());
    assert_eq!(
        (row.step_count, row.tool_call_count, row.attempts),
        (1, 1, 0)
    );
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1, "c2 gets no row");
    assert_eq!(invocations[0].status, InvocationStatus::Succeeded);
}

#[tokio::test(start_paused = true)]
async fn cancel_while_waiting_for_approval_closes_everything_in_one_transaction() {
    // A parked run cancels directly: run CANCELLED, approval cancelled and its call DENIED
    // tool.run_cancelled, with their events, all in the cancel transaction (§16 #32).
    let h = Harness::new();
    let run = h
        .submit(h.script(json!([[{"call_id": "c1", "tool": "test.send", "arguments": {"text": "hi"}, "argument_trust": {"text": "user"}}]])))
        .await;
    let worker = h.worker("w1");
    assert_eq!(h.drive(&worker).await, vec![ExecutionEnd::Parked]);
    h.advance(5).await;

    let outcome = h.control.cancel_run(&h.alice(), run).await.unwrap();

    assert_eq!(
        outcome,
        CancelOutcome {
            accepted: true,
            status: RunStatus::Cancelled
        }
    );
    assert_eq!(h.drive(&worker).await, vec![], "nothing to resume");
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
            "run.cancel_requested",
            "approval.cancelled",
            "tool.call.denied",
            "run.cancelled"
        ]
    );
    let events = h.events(run);
    let cancel = events_from(&events, "run.cancel_requested");
    assert_eq!(cancel.len(), 4);
    assert_one_transaction(&cancel);
    assert_eq!(cancel[0].created_at, at(5));
    let approval = &approvals(&h, run)[0];
    let invocation = &h.invocations(run)[0];
    assert_eq!(
        cancel[1].payload,
        json!({"approval_id": approval.id.to_string()})
    );
    assert_eq!(cancel[2].payload["reason_code"], "tool.run_cancelled");
    assert_eq!(
        cancel[2].payload["result_item"].as_str(),
        invocation.result_item.as_deref(),
        "the event carries the stored result item"
    );
    assert_eq!(cancel[3].payload, json!({"reason": "requested"}));
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Cancelled);
    assert_eq!(row.cancel_requested_at, Some(at(5)));
    assert!(row.lease().is_none());
    assert_eq!(row.tool_call_count, 0);
    assert_eq!(approval.status, ApprovalStatus::Cancelled);
    assert_eq!(approval.resolved_at, Some(at(5)));
    assert_eq!(invocation.status, InvocationStatus::Denied);
    let outcome = invocation.outcome.as_ref().unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Denied);
    assert_eq!(outcome.reason_code, "tool.run_cancelled");
    assert_eq!(outcome.message, "Not performed. The run was cancelled.");
    assert_eq!(invocation.updated_at, at(5));
    assert!(invocation.effect_sent_at.is_none());
    assert_eq!(h.ledger.count("test.send"), 0);
}

#[tokio::test(start_paused = true)]
async fn cancel_of_a_terminal_run_is_not_accepted_and_writes_nothing() {
    // A completed run ignores cancellation: accepted false, no flag, no event.
    let h = Harness::new();
    let run = h
        .submit(h.script(json!([[{"call_id": "c1", "tool": "test.echo", "arguments": {"text": "hi"}, "argument_trust": {"text": "user"}}]])))
        .await;
    let worker = h.worker("w1");
    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Completed)]
    );
    let before = h.store.snapshot();
    h.advance(1).await;

    let outcome = h.control.cancel_run(&h.alice(), run).await.unwrap();

    assert_eq!(
        outcome,
        CancelOutcome {
            accepted: false,
            status: RunStatus::Completed
        }
    );
    assert_eq!(h.store.snapshot(), before, "nothing was written");
    assert_eq!(h.event_types(run).last().unwrap(), "run.completed");
    assert!(
        !h.event_types(run)
            .iter()
            .any(|t| t.starts_with("run.cancel"))
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Completed);
    assert_eq!(row.cancel_requested_at, None);
    assert_eq!(h.invocations(run)[0].status, InvocationStatus::Succeeded);
}

#[tokio::test(start_paused = true)]
async fn queued_cancel_with_a_crashed_running_call_flags_then_finishes_the_call_and_cancels() {
    // A crash after START leaves a RUNNING call in a re-queued run: cancel only flags it; the
    // next claim starts cancelled, re-executes the read-only call to FINISH, then cancels.
    let h = Harness::new();
    let run = h
        .submit(h.script(json!([
            [{"call_id": "c1", "tool": "test.echo", "arguments": {"text": "hi"}, "argument_trust": {"text": "user"}}],
            [{"call_id": "c2", "tool": "test.echo", "arguments": {"text": "late"}, "argument_trust": {"text": "user"}}]
        ])))
        .await;
    let w1 = h.worker("w1");
    h.crash.arm(CrashPoint::AfterStart);
    assert_eq!(h.drive_one_until_crash(&w1).await, None);
    h.advance(30).await;
    let w2 = h.worker("w2");
    assert_eq!(w2.reclaim().await.unwrap(), 1);
    assert_eq!(h.run(run).status(), RunStatus::Queued);

    let outcome = h.control.cancel_run(&h.alice(), run).await.unwrap();

    assert_eq!(
        outcome,
        CancelOutcome {
            accepted: true,
            status: RunStatus::Queued
        },
        "flag only: a RUNNING invocation must finish first"
    );
    assert!(h.run(run).cancel_requested_at.is_some());
    h.advance(1).await;
    assert_eq!(
        h.drive(&w2).await,
        vec![ExecutionEnd::Finished(RunStatus::Cancelled)]
    );
    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.checkpointed",
            "tool.call.proposed",
            "tool.call.authorized",
            "tool.call.started",
            "run.requeued",
            "run.cancel_requested",
            "run.started",
            "tool.call.completed",
            "run.checkpointed",
            "run.cancelled"
        ]
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Cancelled);
    assert!(row.lease().is_none());
    assert_eq!(
        (row.attempts, row.lease_epoch, row.tool_call_count),
        (1, 2, 1)
    );
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1, "c2 gets no row");
    assert_eq!(invocations[0].status, InvocationStatus::Succeeded);
    assert_eq!(h.ledger.count("test.echo"), 1, "only the re-execution ran");
}

#[tokio::test(start_paused = true)]
async fn cancel_of_a_running_run_whose_worker_died_is_finished_by_reclaim() {
    // With the lease holder gone and no call RUNNING, RECLAIM commits CANCELLED instead of
    // re-queueing, and attempts stay unchanged.
    let h = Harness::new();
    let run = h
        .submit(h.script(json!([[{"call_id": "c1", "tool": "test.echo", "arguments": {"text": "hi"}, "argument_trust": {"text": "user"}}]])))
        .await;
    let worker = h.worker("w1");
    let _abandoned = worker.claim(None).await.unwrap().expect("claimable");

    let outcome = h.control.cancel_run(&h.alice(), run).await.unwrap();
    assert_eq!(
        outcome,
        CancelOutcome {
            accepted: true,
            status: RunStatus::Running
        }
    );
    h.advance(30).await;
    assert_eq!(worker.reclaim().await.unwrap(), 1);

    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.cancel_requested",
            "run.cancelled"
        ]
    );
    let events = h.events(run);
    let cancelled = events.last().unwrap();
    assert_eq!(cancelled.created_at, at(30));
    assert_eq!(cancelled.actor.actor_type.as_str(), "maintenance");
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Cancelled);
    assert!(row.lease().is_none());
    assert_eq!(row.attempts, 0, "a cancelling reclaim is not an attempt");
    assert!(h.invocations(run).is_empty());
    assert_eq!(h.drive(&worker).await, vec![]);
}

#[tokio::test(start_paused = true)]
async fn cancel_flagged_before_the_folded_start_denies_the_call_and_skips_later_calls() {
    // Observation point 3 is read inside the folded PROPOSE·START (§17.1 F2): a cancel that
    // reached only the run row (no local token, so point 2 missed it) closes the allowed
    // call DENIED tool.run_cancelled in that transaction, START never commits, and the
    // batch's later call is never proposed.
    let h = Harness::new();
    let factory = Arc::new(CancellingPlannerFactory {
        cancel_at: 1,
        control: OnceLock::new(),
        principal: h.alice(),
    });
    let mut env = h.env.clone();
    env.planners = factory.clone();
    let worker = Worker::new(env.clone(), WorkerSettings::new("w1"));
    let control = ControlService::new(env, h.dispatcher.clone(), None);
    assert!(factory.control.set(Arc::new(control)).is_ok());
    let run = h
        .submit(h.script(json!([[
            {"call_id": "c1", "tool": "test.write_idem", "arguments": {"path": "notes/a.txt", "text": "x"}, "argument_trust": {"path": "user", "text": "user"}},
            {"call_id": "c2", "tool": "test.write_idem", "arguments": {"path": "notes/b.txt", "text": "y"}, "argument_trust": {"path": "user", "text": "user"}}
        ]])))
        .await;

    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Cancelled)]
    );

    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.cancel_requested",
            // PENDING·PROPOSE, with the observation closing the call instead of START.
            "run.checkpointed",
            "tool.call.proposed",
            "tool.call.authorized",
            "tool.call.denied",
            "run.checkpointed",
            "run.cancelled"
        ]
    );
    let events = h.events(run);
    let propose_commit: Vec<&Event> = events[4..8].iter().collect();
    assert_one_transaction(&propose_commit);
    let final_commit: Vec<&Event> = events[events.len() - 2..].iter().collect();
    assert_one_transaction(&final_commit);
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Cancelled);
    assert!(row.lease().is_none());
    assert_eq!((row.step_count, row.tool_call_count), (1, 0));
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1, "c2 gets no row");
    assert_eq!(invocations[0].call_id, "c1");
    assert_eq!(invocations[0].status, InvocationStatus::Denied);
    assert_eq!(
        invocations[0].reason_code.as_deref(),
        Some("tool.run_cancelled")
    );
    assert!(invocations[0].effect_sent_at.is_none(), "START never ran");
    assert_eq!(h.ledger.count("test.write_idem"), 0);
}

#[tokio::test(start_paused = true)]
async fn cancel_flagged_before_park_is_read_by_park_which_cancels_instead_of_parking() {
    // Observation point 5: with no local token, PARK reads cancel_requested_at in its
    // transaction and commits FINAL CANCELLED instead; the approval is cancelled unannounced.
    let h = Harness::new();
    let hook = CancelAt::new(CrashPoint::AfterPropose);
    let worker = hooked_worker(&h, &hook, false);
    let run = h
        .submit(h.script(json!([[{"call_id": "c1", "tool": "test.send", "arguments": {"text": "hi"}, "argument_trust": {"text": "user"}}]])))
        .await;
    assert!(hook.target.set((h.alice(), run)).is_ok());

    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Cancelled)]
    );

    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.checkpointed",
            "tool.call.proposed",
            "run.cancel_requested",
            "run.checkpointed",
            "approval.cancelled",
            "tool.call.denied",
            "run.cancelled"
        ]
    );
    let events = h.events(run);
    assert_one_transaction(&events_from(&events, "run.cancel_requested")[1..]);
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Cancelled);
    assert!(row.lease().is_none());
    assert_eq!(row.tool_call_count, 0);
    let approval = &approvals(&h, run)[0];
    assert_eq!(approval.status, ApprovalStatus::Cancelled);
    assert_eq!(approval.requested_at, None, "never announced");
    let invocation = &h.invocations(run)[0];
    assert_eq!(invocation.status, InvocationStatus::Denied);
    assert_eq!(
        invocation.reason_code.as_deref(),
        Some("tool.run_cancelled")
    );
    assert_eq!(h.ledger.count("test.send"), 0);
    assert!(
        h.control
            .list_pending(&h.bob(), Some(run), None, None)
            .unwrap()
            .items
            .is_empty()
    );
}

/// The scripted planner, except that asking it for step `cancel_at` first commits a cancel
/// request through `control`: a cancel that lands while the planner runs.
struct CancellingPlanner {
    inner: Arc<dyn Planner>,
    cancel_at: u32,
    control: Arc<ControlService<MemStore>>,
    principal: Principal,
}

impl Planner for CancellingPlanner {
    fn next_turn<'a>(
        &'a self,
        input: PlannerInput<'a>,
    ) -> BoxFut<'a, Result<PlannerTurn, PlannerError>> {
        Box::pin(async move {
            if input.step == self.cancel_at {
                let outcome = self
                    .control
                    .cancel_run(&self.principal, input.run.id)
                    .await
                    .unwrap();
                assert!(outcome.accepted);
            }
            self.inner.next_turn(input).await
        })
    }
}

struct CancellingPlannerFactory {
    cancel_at: u32,
    control: OnceLock<Arc<ControlService<MemStore>>>,
    principal: Principal,
}

impl PlannerFactory for CancellingPlannerFactory {
    fn for_run(&self, run: &Run) -> Result<Arc<dyn Planner>, PlannerError> {
        Ok(Arc::new(CancellingPlanner {
            inner: ScriptedPlannerFactory.for_run(run)?,
            cancel_at: self.cancel_at,
            control: Arc::clone(self.control.get().expect("control set")),
            principal: self.principal.clone(),
        }))
    }
}

#[tokio::test(start_paused = true)]
async fn cancel_during_a_planner_turn_is_observed_when_it_returns_and_counts_the_step() {
    // Observation point 2: the turn for step 2 is discarded, nothing of it is proposed, and
    // the FINAL committed after asking for step 2 sets step_count = 2 (§8.3).
    let h = Harness::new();
    let factory = Arc::new(CancellingPlannerFactory {
        cancel_at: 2,
        control: OnceLock::new(),
        principal: h.alice(),
    });
    let mut env = h.env.clone();
    env.planners = factory.clone();
    let worker = Worker::new(env.clone(), WorkerSettings::new("w1"));
    let control = ControlService::new(env, h.dispatcher.clone(), Some(worker.tokens().clone()));
    assert!(factory.control.set(Arc::new(control)).is_ok());
    let run = h
        .submit(h.script(json!([
            [{"call_id": "c1", "tool": "test.echo", "arguments": {"text": "one"}, "argument_trust": {"text": "user"}}],
            [{"call_id": "c2", "tool": "test.echo", "arguments": {"text": "two"}, "argument_trust": {"text": "user"}}]
        ])))
        .await;

    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Cancelled)]
    );

    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.checkpointed",
            "tool.call.proposed",
            "tool.call.authorized",
            "tool.call.started",
            "tool.call.completed",
            "run.checkpointed",
            "run.cancel_requested",
            "run.checkpointed",
            "run.cancelled"
        ]
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Cancelled);
    assert!(row.lease().is_none());
    assert_eq!((row.step_count, row.tool_call_count), (2, 1));
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1, "step 2's call gets no row");
    assert_eq!(invocations[0].call_id, "c1");
    assert_eq!(h.ledger.count("test.echo"), 1);
}

#[tokio::test(start_paused = true)]
async fn cancel_between_claim_and_registration_is_applied_when_the_execution_registers() {
    // §8.5 Tokens: a flag that reaches this process's registry before the execution registers
    // is applied on registration, so the run cancels at observation point 1 and nothing runs.
    let h = Harness::new();
    let run = h
        .submit(h.script(json!([[{"call_id": "c1", "tool": "test.echo", "arguments": {"text": "hi"}, "argument_trust": {"text": "user"}}]])))
        .await;
    let worker = h.worker("w1");
    let control = ControlService::new(
        h.env.clone(),
        h.dispatcher.clone(),
        Some(worker.tokens().clone()),
    );
    let (claimed, lease) = worker.claim(None).await.unwrap().expect("claimable");
    assert_eq!(
        claimed.cancel_requested_at, None,
        "claimed before the request"
    );

    let outcome = control.cancel_run(&h.alice(), run).await.unwrap();
    assert_eq!(
        outcome,
        CancelOutcome {
            accepted: true,
            status: RunStatus::Running
        }
    );
    let end = worker.execute(claimed, lease).await;

    assert_eq!(end, ExecutionEnd::Finished(RunStatus::Cancelled));
    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.cancel_requested",
            "run.checkpointed",
            "run.cancelled"
        ]
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Cancelled);
    assert!(row.lease().is_none());
    assert_eq!((row.step_count, row.tool_call_count), (0, 0));
    assert!(h.invocations(run).is_empty());
    assert_eq!(h.ledger.count("test.echo"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_repeated_cancel_of_a_running_run_commits_nothing_and_reaches_no_crash_point() {
    // §2.2: a crash point follows its commit. The first request flags the run; a second one,
    // while the run is still RUNNING, writes nothing, so AFTER_CANCEL is not reached again.
    let h = Harness::new();
    let run = h
        .submit(h.script(json!([[{"call_id": "c1", "tool": "test.echo", "arguments": {"text": "hi"}, "argument_trust": {"text": "user"}}]])))
        .await;
    let worker = h.worker("w1");
    let (claimed, _lease) = worker.claim(None).await.unwrap().expect("claimed");
    assert_eq!(claimed.status(), RunStatus::Running);
    let cancels = || {
        h.crash
            .reached
            .lock()
            .unwrap()
            .iter()
            .filter(|p| **p == CrashPoint::AfterCancel)
            .count()
    };
    let first = h.control.cancel_run(&h.alice(), run).await.unwrap();
    assert_eq!(
        first,
        CancelOutcome {
            accepted: true,
            status: RunStatus::Running
        }
    );
    assert_eq!(cancels(), 1);
    let events = h.event_types(run).len();
    let second = h.control.cancel_run(&h.alice(), run).await.unwrap();
    assert_eq!(second, first);
    assert_eq!(cancels(), 1, "nothing was committed the second time");
    assert_eq!(h.event_types(run).len(), events);
}
