//! Run lifecycle scenarios (SPEC §8.2–§8.6, §11, §16 #17, #18, #27–#29, #35, #36, #39):
//! parks never count as attempts, lease expiries do, a fenced worker commits nothing,
//! parallel admission, budgets, deadlines, repeated denials, UNCERTAIN repeats and taint.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use airlock_core::action::JsonMap;
use airlock_core::control::{ControlService, ServiceError};
use airlock_core::events::Event;
use airlock_core::ids::RunId;
use airlock_core::invocation::Invocation;
use airlock_core::policy::Ruleset;
use airlock_core::ports::{
    BoxFut, Planner, PlannerError, PlannerFactory, PlannerInput, PlannerTurn, ProposedCall, Tool,
    ToolContext, ToolFailure, ToolSpec, ToolSuccess,
};
use airlock_core::run::cancel::CancelToken;
use airlock_core::run::checkpoint::{Checkpoint, ResultRef};
use airlock_core::run::executor::{ClaimedFor, ExecutionEnd, HeartbeatSwitch, RunExecutor, Start};
use airlock_core::run::{Run, RunState};
use airlock_core::scope::Scope;
use airlock_core::store::{Store, TxError};
use airlock_core::time::Timestamp;
use airlock_core::vocab::{
    ApprovalResolution, ApprovalStatus, CheckpointTrigger, CrashPoint, FailureReason,
    IdempotencyClass, InvocationStatus, ResolveState, RunStatus, SideEffectClass, TrustLevel,
};
use airlock_core::worker::{Worker, WorkerSettings};
use common::*;
use serde_json::{Value, json};

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_micros(EPOCH_MICROS).saturating_add_seconds(seconds)
}

fn echo(call_id: &str, text: &str) -> Value {
    json!({"call_id": call_id, "tool": "test.echo", "arguments": {"text": text}, "argument_trust": {"text": "user"}})
}

fn failure_reason(run: &Run) -> FailureReason {
    match &run.state {
        RunState::Failed { failure } => failure.reason,
        other => panic!("expected FAILED, got {other:?}"),
    }
}

fn scheduled_for(run: &Run) -> Option<Timestamp> {
    match &run.state {
        RunState::Queued { scheduled_for } => *scheduled_for,
        other => panic!("expected QUEUED, got {other:?}"),
    }
}

/// The run's checkpoints in version order.
fn checkpoints(h: &Harness, run: RunId) -> Vec<Checkpoint> {
    h.store
        .snapshot()
        .checkpoints
        .into_values()
        .filter(|c| c.run_id == run)
        .collect()
}

/// The call ids of the results a step's record holds (written with its BATCH), in order.
fn batch_result_call_ids(h: &Harness, run: RunId, step: u32) -> Vec<String> {
    let invocations = h.invocations(run);
    assert!(
        checkpoints(h, run)
            .iter()
            .any(|c| c.trigger == CheckpointTrigger::ToolBatch && c.state.step == step),
        "a BATCH checkpoint for the step"
    );
    let history = h
        .store
        .snapshot()
        .step_records
        .remove(&(run, step))
        .expect("a step record for the step");
    assert_eq!(history.step, step);
    history
        .results
        .iter()
        .map(|r| match r {
            ResultRef::Invocation { invocation_id } => invocations
                .iter()
                .find(|i| i.id == *invocation_id)
                .expect("referenced row")
                .call_id
                .clone(),
            ResultRef::Refusal { derivation_key } => format!("refused:{derivation_key}"),
        })
        .collect()
}

/// `(event_type, call_id)` of the run's `tool.call.*` events, in commit order.
fn tool_events(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| e.event_type.as_str().starts_with("tool.call."))
        .map(|e| {
            (
                e.event_type.as_str().to_owned(),
                e.payload["call_id"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn position(events: &[(String, String)], event_type: &str, call_id: &str) -> usize {
    events
        .iter()
        .position(|(t, c)| t == event_type && c == call_id)
        .unwrap_or_else(|| panic!("no {event_type} for {call_id} in {events:#?}"))
}

fn invocation<'i>(invocations: &'i [Invocation], call_id: &str, step: u32) -> &'i Invocation {
    invocations
        .iter()
        .find(|i| i.call_id == call_id && i.step_number == step)
        .unwrap_or_else(|| panic!("no row for {call_id} at step {step}"))
}

/// A read-only, parallel-safe tool that answers after two seconds of (virtual) time, so it
/// finishes after calls proposed after it.
struct SlowTool {
    spec: ToolSpec,
}

impl Tool for SlowTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn invoke<'a>(
        &'a self,
        ctx: &'a ToolContext<'a>,
        args: &'a JsonMap,
    ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>> {
        Box::pin(async move {
            let until = ctx.clock.now().saturating_add_seconds(2);
            ctx.clock.sleep_until(until).await;
            Ok(ToolSuccess {
                structured: Value::Object(args.clone()),
                trust: None,
            })
        })
    }
}

fn slow_harness() -> Harness {
    Harness::with(Ruleset::shipped().expect("shipped policy"), |tools| {
        tools.push(Arc::new(SlowTool {
            spec: test_spec(
                "test.slow",
                SideEffectClass::None,
                IdempotencyClass::ReadOnly,
                true,
            ),
        }));
    })
}

/// A planner that never finishes: every turn proposes one echo. Records the steps asked.
#[derive(Default)]
struct EndlessPlanner {
    asked: Mutex<Vec<u32>>,
}

impl Planner for EndlessPlanner {
    fn next_turn<'a>(
        &'a self,
        input: PlannerInput<'a>,
    ) -> BoxFut<'a, Result<PlannerTurn, PlannerError>> {
        self.asked.lock().unwrap().push(input.step);
        let call: ProposedCall = serde_json::from_value(echo("c1", "again")).unwrap();
        Box::pin(std::future::ready(Ok(PlannerTurn::Calls(vec![call]))))
    }
}

struct EndlessPlannerFactory(Arc<EndlessPlanner>);

impl PlannerFactory for EndlessPlannerFactory {
    fn for_run(&self, _run: &Run) -> Result<Arc<dyn Planner>, PlannerError> {
        Ok(self.0.clone())
    }
}

#[tokio::test(start_paused = true)]
async fn a_run_parked_three_times_keeps_attempts_at_zero_and_completes() {
    // Approval resumes are not lease expiries: three parks and resumes leave attempts at 0.
    let h = Harness::new();
    let send = |call_id: &str, text: &str| json!([{"call_id": call_id, "tool": "test.send", "arguments": {"text": text}, "argument_trust": {"text": "user"}}]);
    let run = h
        .submit(h.script(json!([
            send("c1", "one"),
            send("c2", "two"),
            send("c3", "three")
        ])))
        .await;
    let worker = h.worker("w1");

    for round in 1..=3u64 {
        assert_eq!(
            h.drive(&worker).await,
            vec![ExecutionEnd::Parked],
            "round {round}"
        );
        let parked = h.run(run);
        assert_eq!(parked.status(), RunStatus::WaitingForApproval);
        assert!(parked.lease().is_none());
        assert_eq!(parked.attempts, 0);
        let page = h
            .control
            .list_pending(&h.bob(), Some(run), None, None)
            .unwrap();
        assert_eq!(page.items.len(), 1);
        h.advance(60).await;
        let resolved = h
            .control
            .resolve(
                &h.bob(),
                page.items[0].id,
                ApprovalResolution::ApproveOnce,
                None,
            )
            .await
            .unwrap();
        assert_eq!(resolved.state, ResolveState::Applied);
        let queued = h.run(run);
        assert_eq!(queued.status(), RunStatus::Queued);
        assert_eq!(queued.attempts, 0);
        assert_eq!(scheduled_for(&queued), None, "a resume is due at once");
    }
    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Completed)]
    );

    let granted = [
        "tool.call.proposed",
        "run.checkpointed",
        "run.waiting_for_approval",
        "approval.requested",
        "approval.resolved",
        "run.requeued",
        "run.started",
        "tool.call.authorized",
        "tool.call.started",
        "tool.call.completed",
        "run.checkpointed",
    ];
    let mut expected = vec![
        "run.queued",
        "run.checkpointed",
        "run.started",
        "run.checkpointed",
    ];
    for round in 0..3 {
        expected.extend(granted);
        if round < 2 {
            expected.push("run.checkpointed"); // the next step's PENDING
        }
    }
    expected.extend(["run.checkpointed", "run.completed"]);
    assert_eq!(h.event_types(run), expected);
    let events = h.events(run);
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e.event_type.as_str() == "run.started")
        .map(|e| &e.payload)
        .collect();
    assert_eq!(started.len(), 4);
    for (i, payload) in started.iter().enumerate() {
        assert_eq!(payload["attempts"], 0);
        assert_eq!(payload["lease_epoch"], i as u64 + 1);
    }
    for e in events
        .iter()
        .filter(|e| e.event_type.as_str() == "run.requeued")
    {
        assert_eq!(e.payload["reason"], "approval_resolved");
        assert_eq!(e.payload["attempts"], 0);
    }
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Completed);
    assert_eq!(
        (
            row.attempts,
            row.lease_epoch,
            row.step_count,
            row.tool_call_count
        ),
        (0, 4, 4, 3)
    );
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 3);
    assert!(
        invocations
            .iter()
            .all(|i| i.status == InvocationStatus::Succeeded)
    );
    assert_eq!(h.ledger.count("test.send"), 3);
    let approvals = h.store.transact(|tx| tx.approvals_of_run(run)).unwrap();
    assert_eq!(approvals.len(), 3);
    assert!(
        approvals
            .iter()
            .all(|a| a.status == ApprovalStatus::Approved)
    );
}

#[tokio::test(start_paused = true)]
async fn three_lease_expiries_fail_the_run_max_attempts_exceeded() {
    // Each expired lease is one attempt: re-queued after 1 s, then 2 s, and failed at the third.
    let h = Harness::new();
    let run = h.submit(h.script(json!([[echo("c1", "hi")]]))).await;
    let worker = h.worker("w1");

    // Expiry 1: claimed at 0 s, lease until 30 s; never executed (a dead worker).
    let (_, lease) = worker.claim(None).await.unwrap().expect("claimable");
    assert_eq!(lease.lease_epoch, 1);
    h.advance(29).await;
    assert_eq!(worker.reclaim().await.unwrap(), 0, "the lease still holds");
    h.advance(1).await;
    assert_eq!(worker.reclaim().await.unwrap(), 1);
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Queued);
    assert_eq!(row.attempts, 1);
    assert_eq!(scheduled_for(&row), Some(at(31)));
    assert!(row.lease().is_none());
    assert!(
        worker.claim(None).await.unwrap().is_none(),
        "not due before its backoff"
    );

    // Expiry 2: claimed at 31 s, reclaimed at 61 s, due again at 63 s.
    h.advance(1).await;
    let (_, lease) = worker.claim(None).await.unwrap().expect("due");
    assert_eq!(lease.lease_epoch, 2);
    h.advance(30).await;
    assert_eq!(worker.reclaim().await.unwrap(), 1);
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Queued);
    assert_eq!(row.attempts, 2);
    assert_eq!(scheduled_for(&row), Some(at(63)));

    // Expiry 3: claimed at 63 s, reclaimed at 93 s: FAILED.
    h.advance(2).await;
    let (_, lease) = worker.claim(None).await.unwrap().expect("due");
    assert_eq!(lease.lease_epoch, 3);
    h.advance(30).await;
    assert_eq!(worker.reclaim().await.unwrap(), 1);

    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.requeued",
            "run.started",
            "run.requeued",
            "run.started",
            "run.failed"
        ]
    );
    let events = h.events(run);
    let requeued: Vec<&Event> = events
        .iter()
        .filter(|e| e.event_type.as_str() == "run.requeued")
        .collect();
    assert_eq!(
        requeued[0].payload,
        json!({"reason": "lease_expired", "attempts": 1, "reclaimed_epoch": 1})
    );
    assert_eq!(
        requeued[1].payload,
        json!({"reason": "lease_expired", "attempts": 2, "reclaimed_epoch": 2})
    );
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e.event_type.as_str() == "run.started")
        .map(|e| &e.payload["attempts"])
        .collect();
    assert_eq!(started, [&json!(0), &json!(1), &json!(2)]);
    let failed = events.last().unwrap();
    assert_eq!(failed.actor.actor_type.as_str(), "maintenance");
    assert_eq!(failed.created_at, at(93));
    assert_eq!(failed.payload["failure"]["reason"], "max_attempts_exceeded");
    assert_eq!(
        failed.payload["failure"]["message"],
        "The run was interrupted too many times."
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Failed);
    assert_eq!(failure_reason(&row), FailureReason::MaxAttemptsExceeded);
    assert!(row.lease().is_none());
    assert_eq!((row.attempts, row.lease_epoch), (3, 3));
    assert!(h.invocations(run).is_empty());
    h.advance(60).await;
    assert_eq!(worker.reclaim().await.unwrap(), 0);
    assert!(worker.claim(None).await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_fenced_worker_commits_nothing_and_the_new_lease_holder_completes() {
    // Worker A's lease expired and B claimed the run under a new epoch: A's execution ends
    // Abandoned without a single write, not even an event (§16 #28).
    let h = Harness::new();
    let run = h.submit(h.script(json!([[echo("c1", "hi")]]))).await;
    let worker_a = h.worker("wa");
    let worker_b = h.worker("wb");
    let (stale_run, stale_lease) = worker_a.claim(None).await.unwrap().expect("claimable");
    h.advance(30).await;
    assert_eq!(worker_b.reclaim().await.unwrap(), 1);
    h.advance(1).await;
    let (fresh_run, fresh_lease) = worker_b.claim(None).await.unwrap().expect("due");
    assert_eq!((stale_lease.lease_epoch, fresh_lease.lease_epoch), (1, 2));
    let before = h.store.snapshot();

    let end = worker_a.execute(stale_run, stale_lease).await;

    assert_eq!(end, ExecutionEnd::Abandoned);
    let after = h.store.snapshot();
    assert_eq!(after.events.len(), before.events.len());
    assert_eq!(after.runs, before.runs);
    assert_eq!(after.invocations, before.invocations);
    assert_eq!(after, before, "the fenced worker wrote nothing");
    assert!(!worker_a.tokens().contains(run));

    assert_eq!(
        worker_b.execute(fresh_run, fresh_lease).await,
        ExecutionEnd::Finished(RunStatus::Completed)
    );
    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.requeued",
            "run.started",
            "run.checkpointed",
            "tool.call.proposed",
            "tool.call.authorized",
            "tool.call.started",
            "tool.call.completed",
            "run.checkpointed",
            "run.checkpointed",
            "run.completed"
        ]
    );
    let events = h.events(run);
    let requeued = events
        .iter()
        .position(|e| e.event_type.as_str() == "run.requeued")
        .unwrap();
    assert_eq!(events[2].actor.actor_id.as_deref(), Some("wa"), "A's CLAIM");
    assert!(
        events[requeued + 1..]
            .iter()
            .all(|e| e.actor.actor_id.as_deref() == Some("wb")),
        "every event after the re-queue is B's"
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Completed);
    assert_eq!(
        (row.attempts, row.lease_epoch, row.tool_call_count),
        (1, 2, 1)
    );
    assert_eq!(h.invocations(run).len(), 1);
    assert_eq!(h.ledger.count("test.echo"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_read_only_batch_runs_in_parallel_with_one_group_and_results_in_planner_order() {
    // Four parallel-safe read-only calls share one parallel_group and run concurrently; the
    // slow first call finishes last, yet the results keep planner order (§11, §16 #36).
    let h = slow_harness();
    let run = h
        .submit(h.script(json!([[
            {"call_id": "c1", "tool": "test.slow", "arguments": {"text": "slow"}, "argument_trust": {"text": "user"}},
            echo("c2", "two"),
            {"call_id": "c3", "tool": "math.calculate", "arguments": {"expression": "17 * 23"}},
            {"call_id": "c4", "tool": "system.current_time", "arguments": {}},
            {"call_id": "c5", "tool": "test.read", "arguments": {"path": "notes/a.txt"}, "argument_trust": {"path": "user"}}
        ]])))
        .await;
    let worker = h.worker("w1");

    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Completed)]
    );

    let events = h.events(run);
    let tool = tool_events(&events);
    let slow_done = position(&tool, "tool.call.completed", "c1");
    for call_id in ["c1", "c2", "c3", "c4", "c5"] {
        assert!(
            position(&tool, "tool.call.started", call_id) < slow_done,
            "{call_id} started while c1 was in flight: {tool:#?}"
        );
    }
    for call_id in ["c2", "c3", "c4", "c5"] {
        assert!(position(&tool, "tool.call.completed", call_id) < slow_done);
    }
    assert_eq!(slow_done, tool.len() - 1, "the slow call completes last");
    let types = h.event_types(run);
    assert_eq!(
        types[..4],
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.checkpointed"
        ]
    );
    assert_eq!(
        types[types.len() - 3..],
        ["run.checkpointed", "run.checkpointed", "run.completed"]
    );
    assert_eq!(
        tool.len(),
        20,
        "proposed, authorized, started, completed per call"
    );
    assert_eq!(
        batch_result_call_ids(&h, run, 1),
        ["c1", "c2", "c3", "c4", "c5"]
    );
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 5);
    let group = invocations[0].parallel_group.expect("a parallel group");
    assert!(
        invocations
            .iter()
            .all(|i| i.parallel_group == Some(group) && i.status == InvocationStatus::Succeeded)
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Completed);
    assert_eq!((row.step_count, row.tool_call_count), (2, 5));
    assert_eq!(events.last().unwrap().created_at, at(2));
}

#[tokio::test(start_paused = true)]
async fn a_mixed_batch_runs_sequentially_without_a_group_and_results_in_planner_order() {
    // One workspace write makes the whole batch sequential: no parallel_group, and the second
    // call is proposed only after the slow first call completed (§11: never split).
    let h = slow_harness();
    let run = h
        .submit(h.script(json!([[
            {"call_id": "c1", "tool": "test.slow", "arguments": {"text": "slow"}, "argument_trust": {"text": "user"}},
            {"call_id": "c2", "tool": "test.write_idem", "arguments": {"path": "notes/a.txt", "text": "x"}, "argument_trust": {"path": "user", "text": "user"}}
        ]])))
        .await;
    let worker = h.worker("w1");

    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Completed)]
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
            "tool.call.proposed",
            "tool.call.authorized",
            "tool.call.started",
            "tool.call.completed",
            "run.checkpointed",
            "run.checkpointed",
            "run.completed"
        ]
    );
    let tool = tool_events(&h.events(run));
    assert!(
        position(&tool, "tool.call.completed", "c1") < position(&tool, "tool.call.proposed", "c2")
    );
    assert_eq!(batch_result_call_ids(&h, run, 1), ["c1", "c2"]);
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 2);
    assert!(
        invocations
            .iter()
            .all(|i| i.parallel_group.is_none() && i.status == InvocationStatus::Succeeded)
    );
    let c2 = invocation(&invocations, "c2", 1);
    assert_eq!(c2.created_at, at(2), "proposed after c1's two seconds");
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Completed);
    assert_eq!((row.step_count, row.tool_call_count), (2, 2));
}

#[tokio::test(start_paused = true)]
async fn resuming_a_run_in_its_retry_back_off_is_a_conflict_that_says_when_it_is_due() {
    // Issue 17 item 3: every dispatcher claims only due runs (§10.5), so `resume_run` of a run
    // still waiting out its back-off would execute nothing; it answers Conflict with the time.
    let h = Harness::new();
    let run = h.submit(h.script(json!([[echo("c1", "one")]]))).await;
    h.worker("w1")
        .claim(None)
        .await
        .unwrap()
        .expect("claimable");
    h.advance(30).await;
    assert_eq!(h.worker("w2").reclaim().await.unwrap(), 1);
    let due = match h.run(run).state {
        RunState::Queued {
            scheduled_for: Some(due),
        } => due,
        other => panic!("re-queued with a back-off, not {other:?}"),
    };

    let refused = h.control.resume_run(&h.bob(), run);

    match refused {
        Err(ServiceError::Conflict(message)) => {
            assert!(
                message.contains(&format!("not due until {due}")),
                "{message}"
            );
        }
        other => panic!("expected a Conflict, got {other:?}"),
    }
    assert!(h.dispatcher.resumed.lock().unwrap().is_empty());
    h.advance(1).await;
    assert_eq!(h.control.resume_run(&h.bob(), run), Ok(()));
    assert_eq!(*h.dispatcher.resumed.lock().unwrap(), [run]);
}

#[tokio::test(start_paused = true)]
async fn a_script_or_planner_input_over_the_size_limit_is_invalid() {
    // Issue 17 item 11: submit_run caps the script, and the planner_input stored from it, at a
    // configurable size (default 2 MiB); nothing is stored for a refused script.
    let h = Harness::new();
    assert_eq!(
        airlock_core::planner::script::DEFAULT_MAX_SCRIPT_BYTES,
        2 * 1024 * 1024
    );
    let big = h.script(json!([[echo("c1", &"x".repeat(3 * 1024 * 1024))]]));
    let refused = h.control.submit_run(&h.alice(), &big.to_string()).await;
    match refused {
        Err(ServiceError::InvalidArgument(message)) => {
            assert!(message.starts_with("the run script is "), "{message}");
            assert!(
                message.ends_with("over the limit of 2097152 bytes"),
                "{message}"
            );
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }

    let text = h
        .script(json!([[echo("c1", &"x".repeat(1000))]]))
        .to_string();
    let small = ControlService::new(h.env.clone(), h.dispatcher.clone(), None)
        .with_max_script_bytes(text.len() - 1);
    assert!(matches!(
        small.submit_run(&h.alice(), &text).await,
        Err(ServiceError::InvalidArgument(_))
    ));
    // The stored planner_input is bounded too: the defaults it adds can make it the larger one.
    let planner_input_len = planner_input_len(&text);
    assert!(
        planner_input_len > text.len(),
        "the example needs its defaults added"
    );
    let exact = ControlService::new(h.env.clone(), h.dispatcher.clone(), None)
        .with_max_script_bytes(text.len());
    match exact.submit_run(&h.alice(), &text).await {
        Err(ServiceError::InvalidArgument(message)) => {
            assert!(message.starts_with("its planner_input is "), "{message}");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    let roomy = ControlService::new(h.env.clone(), h.dispatcher.clone(), None)
        .with_max_script_bytes(planner_input_len);
    roomy.submit_run(&h.alice(), &text).await.unwrap();
    assert_eq!(
        h.store.snapshot().runs.len(),
        1,
        "only the accepted script is stored"
    );
}

/// The length of the `planner_input` stored for a script.
fn planner_input_len(text: &str) -> usize {
    airlock_core::planner::script::RunScript::parse(text)
        .unwrap()
        .to_json()
        .len()
}

#[tokio::test(start_paused = true)]
async fn a_script_one_step_short_of_max_steps_completes_and_a_longer_one_is_rejected() {
    // N scripted steps need max_steps ≥ N + 1 (the final turn is a step): 2 of 3 completes.
    let h = Harness::new();
    let mut script = h.script(json!([[echo("c1", "one")], [echo("c1", "two")]]));
    script["limits"]["max_steps"] = json!(3);
    let run = h.submit(script).await;
    let mut too_long = h.script(json!([
        [echo("c1", "one")],
        [echo("c1", "two")],
        [echo("c1", "three")]
    ]));
    too_long["limits"]["max_steps"] = json!(3);

    let rejected = h
        .control
        .submit_run(&h.alice(), &too_long.to_string())
        .await;

    assert!(
        matches!(rejected, Err(ServiceError::InvalidArgument(_))),
        "{rejected:?}"
    );
    let worker = h.worker("w1");
    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Completed)]
    );
    let step = [
        "run.checkpointed",
        "tool.call.proposed",
        "tool.call.authorized",
        "tool.call.started",
        "tool.call.completed",
        "run.checkpointed",
    ];
    let mut expected = vec!["run.queued", "run.checkpointed", "run.started"];
    expected.extend(step);
    expected.extend(step);
    expected.extend(["run.checkpointed", "run.completed"]);
    assert_eq!(h.event_types(run), expected);
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Completed);
    assert_eq!((row.step_count, row.tool_call_count), (3, 2));
    assert_eq!(h.invocations(run).len(), 2);
    assert_eq!(
        h.store.snapshot().runs.len(),
        1,
        "the long script made no run"
    );
}

/// A planner with a bug: it panics on its first turn.
struct PanickingPlannerFactory;

impl PlannerFactory for PanickingPlannerFactory {
    fn for_run(&self, _run: &Run) -> Result<Arc<dyn Planner>, PlannerError> {
        Ok(Arc::new(PanickingPlanner))
    }
}

struct PanickingPlanner;

impl Planner for PanickingPlanner {
    fn next_turn<'a>(
        &'a self,
        _input: PlannerInput<'a>,
    ) -> BoxFut<'a, Result<PlannerTurn, PlannerError>> {
        panic!("planner bug")
    }
}

#[tokio::test(start_paused = true)]
async fn an_execution_that_panics_gives_back_its_slot_and_its_token() {
    // A panic unwinding out of an execution must not leave it counted in flight (a worker
    // waiting to be idle or to shut down would wait forever) or its token registered.
    use futures_util::FutureExt;
    let h = Harness::new();
    let mut env = h.env.clone();
    env.planners = Arc::new(PanickingPlannerFactory);
    let worker = Worker::new(env, WorkerSettings::new("w1"));
    let run = h.submit(h.script(json!([]))).await;
    let (claimed, lease) = worker.claim(None).await.unwrap().expect("claimed");
    let execution = std::panic::AssertUnwindSafe(worker.execute(claimed, lease)).catch_unwind();
    assert!(execution.await.is_err(), "the planner's panic unwinds");
    assert_eq!(worker.in_flight(), 0);
    assert!(!worker.tokens().contains(run));
    assert_eq!(
        h.run(run).status(),
        RunStatus::Running,
        "the lease expiry recovers it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_planner_that_never_finishes_fails_max_steps_exceeded_without_a_fourth_turn() {
    // With max_steps 3 the planner is asked for steps 1–3 only; step 4 fails the run before
    // the planner is called, and step_count stays within the limit (§16 #35).
    let h = Harness::new();
    let planner = Arc::new(EndlessPlanner::default());
    let mut env = h.env.clone();
    env.planners = Arc::new(EndlessPlannerFactory(planner.clone()));
    let worker = Worker::new(env, WorkerSettings::new("w1"));
    let mut script = h.script(json!([]));
    script["limits"]["max_steps"] = json!(3);
    let run = h.submit(script).await;

    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Failed)]
    );

    assert_eq!(planner.asked.lock().unwrap().as_slice(), &[1, 2, 3]);
    let step = [
        "run.checkpointed",
        "tool.call.proposed",
        "tool.call.authorized",
        "tool.call.started",
        "tool.call.completed",
        "run.checkpointed",
    ];
    let mut expected = vec!["run.queued", "run.checkpointed", "run.started"];
    for _ in 0..3 {
        expected.extend(step);
    }
    expected.extend(["run.checkpointed", "run.failed"]);
    assert_eq!(h.event_types(run), expected);
    let failed = h.events(run).last().unwrap().payload.clone();
    assert_eq!(failed["failure"]["reason"], "max_steps_exceeded");
    assert_eq!(
        failed["failure"]["message"],
        "The run reached its step limit."
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Failed);
    assert_eq!(failure_reason(&row), FailureReason::MaxStepsExceeded);
    assert!(row.lease().is_none());
    assert_eq!((row.step_count, row.tool_call_count), (3, 3));
    assert_eq!(h.invocations(run).len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_batch_over_max_tool_calls_fails_budget_exceeded_without_rows() {
    // With one call used of two, a two-call batch is over budget: FAILED budget_exceeded at
    // that step, no PENDING and no row for it, and the run is never re-queued.
    let h = Harness::new();
    let mut script = h.script(json!([
        [echo("c1", "one")],
        [echo("c2", "two"), echo("c3", "three")]
    ]));
    script["limits"]["max_tool_calls"] = json!(2);
    let run = h.submit(script).await;
    let worker = h.worker("w1");

    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Failed)]
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
            "run.checkpointed",
            "run.failed"
        ]
    );
    let failed = h.events(run).last().unwrap().payload.clone();
    assert_eq!(failed["failure"]["reason"], "budget_exceeded");
    assert_eq!(
        failed["failure"]["message"],
        "The run reached its tool-call limit."
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Failed);
    assert_eq!(failure_reason(&row), FailureReason::BudgetExceeded);
    assert_eq!(
        (row.step_count, row.tool_call_count, row.attempts),
        (2, 1, 0)
    );
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1, "the over-budget batch has no row");
    assert_eq!(invocations[0].call_id, "c1");
    h.advance(60).await;
    assert_eq!(worker.reclaim().await.unwrap(), 0);
    assert_eq!(
        h.drive(&worker).await,
        vec![],
        "budget failures are permanent"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hanging_tool_times_out_at_the_deadline_and_the_run_fails_deadline_exceeded() {
    // The tool timeout is min(spec 5 s, deadline 2 s): the call fails tool.timeout at the
    // deadline, and the next step's deadline check fails the run.
    let h = Harness::new();
    let mut script = h.script(json!([
        [{"call_id": "c1", "tool": "test.hang", "arguments": {}}],
        [echo("c2", "never")]
    ]));
    script["limits"]["deadline_seconds"] = json!(2);
    let run = h.submit(script).await;
    let worker = h.worker("w1");

    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Failed)]
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
            "tool.call.failed",
            "run.checkpointed",
            "run.checkpointed",
            "run.failed"
        ]
    );
    let events = h.events(run);
    let tool_failed = events
        .iter()
        .find(|e| e.event_type.as_str() == "tool.call.failed")
        .unwrap();
    assert_eq!(
        tool_failed.created_at,
        at(2),
        "the timeout fired at the deadline"
    );
    assert_eq!(tool_failed.payload["reason_code"], "tool.timeout");
    let failed = &events.last().unwrap().payload;
    assert_eq!(failed["failure"]["reason"], "deadline_exceeded");
    assert_eq!(failed["failure"]["message"], "The run passed its deadline.");
    let row = h.run(run);
    assert_eq!(row.deadline_at, Some(at(2)));
    assert_eq!(row.status(), RunStatus::Failed);
    assert_eq!(failure_reason(&row), FailureReason::DeadlineExceeded);
    assert_eq!((row.step_count, row.tool_call_count), (1, 1));
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1, "step 2 was never proposed");
    assert_eq!(invocations[0].status, InvocationStatus::Failed);
    assert_eq!(invocations[0].reason_code.as_deref(), Some("tool.timeout"));
    assert_eq!(invocations[0].updated_at, at(2));
}

#[tokio::test(start_paused = true)]
async fn the_same_denied_call_three_times_fails_repeated_denial_after_the_third_batch() {
    // Identical denials (tool, arguments, reason) are counted per BATCH; the third fails the
    // run and the planner's fourth step is never proposed.
    let h = Harness::new();
    let denied = json!([{"call_id": "c1", "tool": "test.write_idem", "arguments": {"path": "/etc/passwd", "text": "x"}, "argument_trust": {"path": "user", "text": "user"}}]);
    let run = h
        .submit(h.script(json!([
            denied.clone(),
            denied.clone(),
            denied.clone(),
            denied
        ])))
        .await;
    let worker = h.worker("w1");

    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Failed)]
    );

    let step = [
        "run.checkpointed",
        "tool.call.proposed",
        "tool.call.denied",
        "run.checkpointed",
    ];
    let mut expected = vec!["run.queued", "run.checkpointed", "run.started"];
    for _ in 0..3 {
        expected.extend(step);
    }
    expected.extend(["run.checkpointed", "run.failed"]);
    assert_eq!(h.event_types(run), expected);
    let failed = h.events(run).last().unwrap().payload.clone();
    assert_eq!(failed["failure"]["reason"], "repeated_denial");
    assert_eq!(
        failed["failure"]["message"],
        "The planner repeated a denied action."
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Failed);
    assert_eq!(failure_reason(&row), FailureReason::RepeatedDenial);
    assert_eq!((row.step_count, row.tool_call_count), (3, 0));
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 3, "no row for step 4");
    let reason = invocations[0].reason_code.clone().unwrap();
    assert_eq!(reason, "policy.hardline.host_path");
    for (i, row) in invocations.iter().enumerate() {
        assert_eq!(row.step_number, i as u32 + 1);
        assert_eq!(row.status, InvocationStatus::Denied);
        assert_eq!(row.reason_code.as_deref(), Some(reason.as_str()));
        assert_eq!(
            row.effective_arguments_hash,
            invocations[0].effective_arguments_hash
        );
    }
    assert_eq!(h.ledger.count("test.write_idem"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_call_repeating_an_uncertain_one_is_refused_without_a_row() {
    // A watermarked non-idempotent call interrupted after START becomes UNCERTAIN on resume;
    // a later step proposing the same tool and arguments is refused policy.uncertain.repeat.
    let h = Harness::new();
    let write = json!([{"call_id": "c1", "tool": "test.write_once", "arguments": {"path": "notes/a.txt", "text": "x"}, "argument_trust": {"path": "user", "text": "user"}}]);
    let run = h.submit(h.script(json!([write.clone(), write]))).await;
    let w1 = h.worker("w1");
    h.crash.arm(CrashPoint::AfterStart);
    assert_eq!(h.drive_one_until_crash(&w1).await, None);
    let crashed = &h.invocations(run)[0];
    assert_eq!(crashed.status, InvocationStatus::Running);
    assert!(
        crashed.effect_sent_at.is_some(),
        "START wrote the watermark"
    );
    h.advance(30).await;
    let w2 = h.worker("w2");
    assert_eq!(w2.reclaim().await.unwrap(), 1);
    h.advance(1).await;

    assert_eq!(
        h.drive(&w2).await,
        vec![ExecutionEnd::Finished(RunStatus::Completed)]
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
            "run.started",
            "tool.call.uncertain",
            "run.checkpointed",
            "run.checkpointed",
            "tool.call.denied",
            "run.checkpointed",
            "run.checkpointed",
            "run.completed"
        ]
    );
    let events = h.events(run);
    let refused = events
        .iter()
        .find(|e| e.event_type.as_str() == "tool.call.denied")
        .unwrap();
    assert_eq!(refused.payload["invocation_id"], Value::Null);
    assert_eq!(refused.payload["reason_code"], "policy.uncertain.repeat");
    assert_eq!(
        refused.derivation_key.as_deref(),
        Some(format!("tool.call.refused:{run}:2:c1").as_str())
    );
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1, "the refused repeat has no row");
    assert_eq!(invocations[0].status, InvocationStatus::Uncertain);
    assert_eq!(
        invocations[0].reason_code.as_deref(),
        Some("tool.outcome_unknown")
    );
    assert_eq!(h.ledger.count("test.write_once"), 0, "never invoked");
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Completed);
    assert_eq!(
        (row.attempts, row.step_count, row.tool_call_count),
        (1, 3, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn an_external_untrusted_result_taints_every_later_action() {
    // Once an external_untrusted result reaches the planner, the next step's action carries
    // origin_trust external_untrusted (§8.6, §16 #39).
    let h = Harness::new();
    let run = h
        .submit(h.script(json!([
            [{"call_id": "c1", "tool": "test.untrusted", "arguments": {}}],
            [echo("c2", "after")]
        ])))
        .await;
    let worker = h.worker("w1");

    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Completed)]
    );

    let step = [
        "run.checkpointed",
        "tool.call.proposed",
        "tool.call.authorized",
        "tool.call.started",
        "tool.call.completed",
        "run.checkpointed",
    ];
    let mut expected = vec!["run.queued", "run.checkpointed", "run.started"];
    expected.extend(step);
    expected.extend(step);
    expected.extend(["run.checkpointed", "run.completed"]);
    assert_eq!(h.event_types(run), expected);
    let invocations = h.invocations(run);
    let first = invocation(&invocations, "c1", 1);
    let second = invocation(&invocations, "c2", 2);
    assert_eq!(first.origin_trust, TrustLevel::User);
    assert!(
        first
            .result_item
            .as_deref()
            .unwrap()
            .contains("\"trust\":\"external_untrusted\"")
    );
    assert_eq!(second.origin_trust, TrustLevel::ExternalUntrusted);
    assert_eq!(second.status, InvocationStatus::Succeeded);
    let batches: Vec<bool> = checkpoints(&h, run)
        .iter()
        .filter(|c| c.trigger == CheckpointTrigger::ToolBatch)
        .map(|c| c.state.tainted)
        .collect();
    assert_eq!(batches, [true, true], "tainted from the first BATCH on");
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Completed);
    assert_eq!(
        row.origin_trust,
        TrustLevel::User,
        "the run row is immutable"
    );
    assert_eq!((row.step_count, row.tool_call_count), (3, 2));
}

#[tokio::test(start_paused = true)]
async fn a_worker_fenced_mid_call_commits_nothing_not_even_its_finish() {
    // Worker A's heartbeat stalls while its call runs: the lease expires, B takes the run, and
    // A's late FINISH is fenced; A writes nothing and B recovers the read-only call (§9.4).
    let (h, Gate { entered, release }) = gated_harness();
    let run = h
        .submit(h.script(json!([[{"call_id": "c1", "tool": "test.gated", "arguments": {}}]])))
        .await;
    let worker_a = h.worker("wa");
    let worker_b = h.worker("wb");
    let (_, stale_lease) = worker_a.claim(None).await.unwrap().expect("claimable");
    // A's executor without its heartbeat: a process that stopped renewing its lease.
    let stalled = tokio::spawn({
        let env = h.env.clone();
        let lease = stale_lease.clone();
        async move {
            RunExecutor::new(&env, "wa", HeartbeatSwitch::default(), ClaimedFor::Work)
                .execute(&lease, &CancelToken::default(), Start::Read)
                .await
        }
    });
    entered.notified().await;
    h.advance(30).await;
    assert_eq!(worker_b.reclaim().await.unwrap(), 1);
    h.advance(1).await;
    let (fresh_run, fresh_lease) = worker_b.claim(None).await.unwrap().expect("due");
    assert_eq!(fresh_lease.lease_epoch, 2);
    let before = h.store.snapshot();

    release.notify_one();
    let end = stalled.await.unwrap();

    assert_eq!(end, ExecutionEnd::Abandoned);
    assert_eq!(
        h.store.snapshot(),
        before,
        "A's FINISH and everything after it was fenced"
    );
    assert_eq!(h.invocations(run)[0].status, InvocationStatus::Running);
    let resumed = tokio::spawn({
        let worker_b = Arc::clone(&worker_b);
        async move { worker_b.execute(fresh_run, fresh_lease).await }
    });
    entered.notified().await;
    release.notify_one();
    assert_eq!(
        resumed.await.unwrap(),
        ExecutionEnd::Finished(RunStatus::Completed)
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
            "run.started",
            "tool.call.completed",
            "run.checkpointed",
            "run.checkpointed",
            "run.completed"
        ]
    );
    let events = h.events(run);
    let completed = events
        .iter()
        .find(|e| e.event_type.as_str() == "tool.call.completed")
        .unwrap();
    assert_eq!(completed.actor.actor_id.as_deref(), Some("wb"));
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Completed);
    assert_eq!(
        (row.attempts, row.lease_epoch, row.tool_call_count),
        (1, 2, 1),
        "recovery never increments tool_call_count"
    );
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1);
    assert_eq!(invocations[0].status, InvocationStatus::Succeeded);
    assert_eq!(
        h.ledger.count("test.gated"),
        2,
        "read-only: re-executed by B"
    );
}

#[tokio::test(start_paused = true)]
async fn identical_refusals_without_rows_also_fail_repeated_denial() {
    // Refusals write no row but still count: three scope refusals of the same call (hashed
    // over the raw arguments) fail the run after the third BATCH.
    let h = Harness::new();
    let refused = json!([{"call_id": "c1", "tool": "test.scoped", "arguments": {"text": "x"}}]);
    let mut script = h.script(json!([
        refused.clone(),
        refused.clone(),
        refused.clone(),
        refused
    ]));
    script["principal_scopes"] = json!(["run.read"]);
    let run = h.submit(script).await;
    let worker = h.worker("w1");

    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Failed)]
    );

    let step = ["run.checkpointed", "tool.call.denied", "run.checkpointed"];
    let mut expected = vec!["run.queued", "run.checkpointed", "run.started"];
    for _ in 0..3 {
        expected.extend(step);
    }
    expected.extend(["run.checkpointed", "run.failed"]);
    assert_eq!(h.event_types(run), expected);
    let events = h.events(run);
    let refusals: Vec<&Event> = events
        .iter()
        .filter(|e| e.event_type.as_str() == "tool.call.denied")
        .collect();
    for (i, e) in refusals.iter().enumerate() {
        assert_eq!(e.payload["reason_code"], "policy.scope.missing");
        assert_eq!(e.payload["invocation_id"], Value::Null);
        assert_eq!(
            e.derivation_key.as_deref(),
            Some(format!("tool.call.refused:{run}:{}:c1", i + 1).as_str())
        );
    }
    assert_eq!(
        events.last().unwrap().payload["failure"]["reason"],
        "repeated_denial"
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Failed);
    assert_eq!(failure_reason(&row), FailureReason::RepeatedDenial);
    assert_eq!((row.step_count, row.tool_call_count), (3, 0));
    assert!(h.invocations(run).is_empty(), "refusals write no row");
}

#[tokio::test(start_paused = true)]
async fn the_failing_reclaim_closes_a_watermarked_running_call_uncertain_in_its_sweep() {
    // The third expiry fails the run with a non-idempotent call left RUNNING after START: the
    // terminal sweep in the same RECLAIM transaction closes it UNCERTAIN, never FAILED.
    let h = Harness::new();
    let run = h
        .submit(h.script(json!([[{"call_id": "c1", "tool": "test.write_once", "arguments": {"path": "notes/a.txt", "text": "x"}, "argument_trust": {"path": "user", "text": "user"}}]])))
        .await;
    let worker = h.worker("w1");
    // Two dead claims (re-queued after 1 s and 2 s), then a crash right after START.
    for backoff in [1, 2] {
        let _dead = worker.claim(None).await.unwrap().expect("due");
        h.advance(30).await;
        assert_eq!(worker.reclaim().await.unwrap(), 1);
        h.advance(backoff).await;
    }
    h.crash.arm(CrashPoint::AfterStart);
    assert_eq!(h.drive_one_until_crash(&worker).await, None);
    h.advance(30).await;

    assert_eq!(worker.reclaim().await.unwrap(), 1);

    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.requeued",
            "run.started",
            "run.requeued",
            "run.started",
            "run.checkpointed",
            "tool.call.proposed",
            "tool.call.authorized",
            "tool.call.started",
            "tool.call.uncertain",
            "run.failed"
        ]
    );
    let events = h.events(run);
    let reclaim: Vec<&Event> = events[events.len() - 2..].iter().collect();
    assert_eq!(reclaim[0].created_at, reclaim[1].created_at);
    assert_eq!(reclaim[0].sequence + 1, reclaim[1].sequence);
    assert_eq!(reclaim[0].payload["reason_code"], "tool.outcome_unknown");
    assert_eq!(
        reclaim[1].payload["failure"]["reason"],
        "max_attempts_exceeded"
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Failed);
    assert!(row.lease().is_none());
    assert_eq!((row.attempts, row.tool_call_count), (3, 1));
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1);
    assert_eq!(invocations[0].status, InvocationStatus::Uncertain);
    assert_eq!(
        invocations[0].reason_code.as_deref(),
        Some("tool.outcome_unknown")
    );
    assert_eq!(h.ledger.count("test.write_once"), 0);
}

/// A spawner that keeps the tasks it is given instead of running them, so a test sees what one
/// poll claimed while every claimed run is still in flight.
#[derive(Default)]
struct HeldSpawner {
    tasks: Mutex<Vec<BoxFut<'static, ()>>>,
}

impl airlock_core::ports::Spawner for HeldSpawner {
    fn spawn(&self, f: BoxFut<'static, ()>) {
        self.tasks.lock().unwrap().push(f);
    }
}

#[tokio::test(start_paused = true)]
async fn one_poll_fills_every_free_slot_and_no_more() {
    // SPEC §8.2: a worker claims on every poll, up to its concurrency (4 by default). Each
    // claimed run must take exactly one slot: before the fix one poll claimed only 2 of 4.
    let h = Harness::new();
    let mut runs = Vec::new();
    for text in ["a", "b", "c", "d", "e", "f"] {
        runs.push(h.submit(h.script(json!([[echo("c1", text)]]))).await);
    }
    let worker = h.worker("w1");
    assert_eq!(worker.settings().concurrency, 4);
    let spawner = Arc::new(HeldSpawner::default());

    let first = worker.tick(spawner.as_ref(), &h.control).await.unwrap();
    assert_eq!(first.claimed, 4);
    assert_eq!(worker.in_flight(), 4);
    let second = worker.tick(spawner.as_ref(), &h.control).await.unwrap();
    assert_eq!(second.claimed, 0, "every slot is taken");

    // The held runs finish; the next poll claims the two left.
    let tasks: Vec<_> = spawner.tasks.lock().unwrap().drain(..).collect();
    futures_util::future::join_all(tasks).await;
    assert_eq!(worker.in_flight(), 0);
    let third = worker.tick(spawner.as_ref(), &h.control).await.unwrap();
    assert_eq!(third.claimed, 2);
    let tasks: Vec<_> = spawner.tasks.lock().unwrap().drain(..).collect();
    futures_util::future::join_all(tasks).await;
    for run in runs {
        assert_eq!(h.run(run).status(), RunStatus::Completed);
    }
}

/// Reads fail with `Backend` (SQLite's "database is locked" past the busy timeout, say): once
/// `reads_before_failing` reads have passed, the next `failures` reads fail; writes go through.
#[derive(Default)]
struct FailingReads {
    reads_before_failing: AtomicUsize,
    failures: AtomicUsize,
}

impl StoreHook for FailingReads {
    fn before_read(&self) -> Result<(), TxError> {
        let take = |counter: &AtomicUsize| {
            counter
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        if !take(&self.reads_before_failing) && take(&self.failures) {
            return Err(TxError::Backend("database is locked".into()));
        }
        Ok(())
    }
}

impl FailingReads {
    /// The harness's store behind this hook; no read fails until [`FailingReads::fail_next`].
    fn over(h: &Harness) -> Arc<HookedStore<FailingReads>> {
        Arc::new(HookedStore {
            inner: h.store.clone(),
            hook: FailingReads::default(),
        })
    }

    /// After `pass` more reads, the next one fails.
    fn fail_next(&self, pass: usize) {
        self.reads_before_failing.store(pass, Ordering::SeqCst);
        self.failures.store(1, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_read_on_resume_abandons_the_execution_and_reclaim_recovers_the_run() {
    // SPEC §8.3: a worker transaction that fails with anything but Fenced makes the executor
    // write nothing more; lease expiry and RECLAIM recover the run. The resumed execution reads
    // its run and checkpoint, then the calls its crash left RUNNING: that second read fails,
    // and must not fail the run. (A step that begins afresh reads nothing before its first
    // write: no replay lookup and, within the budget's bound, no count.)
    let h = Harness::new();
    let run = h
        .submit(h.script(json!([[echo("c1", "one")], [echo("c2", "two")]])))
        .await;
    h.crash.arm(CrashPoint::AfterStart);
    assert_eq!(h.drive_one_until_crash(&h.worker("w1")).await, None);
    h.advance(30).await;
    assert_eq!(h.worker("w2").reclaim().await.unwrap(), 1);
    h.advance(1).await;

    let store = FailingReads::over(&h);
    store.hook.fail_next(1);
    let w3 = Worker::new(h.env_over(store.clone()), WorkerSettings::new("w3"));
    let (claimed, lease) = w3.claim(None).await.unwrap().expect("the run is due");
    assert_eq!(w3.execute(claimed, lease).await, ExecutionEnd::Abandoned);
    assert_eq!(
        h.run(run).status(),
        RunStatus::Running,
        "nothing more written"
    );

    // The lease expires and the run completes under a new worker.
    h.advance(30).await;
    assert_eq!(h.worker("w4").reclaim().await.unwrap(), 1);
    h.advance(2).await;
    h.drive(&h.worker("w4")).await;
    assert_eq!(h.run(run).status(), RunStatus::Completed);
}

/// Everything `tracing` writes while the guard lives, on this thread (the paused tokio tests run
/// on one thread).
fn capture_logs() -> (Arc<Mutex<Vec<u8>>>, tracing::subscriber::DefaultGuard) {
    #[derive(Clone)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let sink = Sink(Arc::clone(&buffer));
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .finish();
    (buffer, tracing::subscriber::set_default(subscriber))
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_execution_is_logged_and_its_lease_given_back_for_an_immediate_reclaim() {
    // Issue 17 item 2 (see `run::abandon`): the executor still writes nothing more after a failed
    // transaction (§8.3), but the worker then logs a warning with the run id and the cause, and
    // shortens the lease to now, so the next RECLAIM takes the run at once instead of after a
    // whole lease; RECLAIM handles it as any expired lease (attempts + 1, back-off).
    let h = Harness::new();
    let run = h
        .submit(h.script(json!([[echo("c1", "one")], [echo("c2", "two")]])))
        .await;
    let store = FailingReads::over(&h);
    let w1 = Worker::new(h.env_over(store.clone()), WorkerSettings::new("w1"));
    let (claimed, lease) = w1.claim(None).await.unwrap().expect("the run is due");
    let claimed_at = h.env.clock.now();
    store.hook.fail_next(0);

    let (logs, guard) = capture_logs();
    assert_eq!(w1.execute(claimed, lease).await, ExecutionEnd::Abandoned);
    drop(guard);

    let row = h.run(run);
    assert_eq!(
        row.status(),
        RunStatus::Running,
        "RECLAIM, not the worker, moves it"
    );
    assert_eq!(row.lease_epoch, 1);
    assert!(
        matches!(row.state, RunState::Running { lease_expires_at, .. } if lease_expires_at == claimed_at),
        "the lease now ends now: {:?}",
        row.state
    );
    let log = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    let warning = log
        .lines()
        .find(|l| l.contains("WARN"))
        .unwrap_or_else(|| panic!("no warning in {log:?}"));
    for expected in [
        format!("run_id={run}"),
        "lease_epoch=1".to_owned(),
        "worker_id=w1".to_owned(),
        "database is locked".to_owned(),
        "released for RECLAIM".to_owned(),
    ] {
        assert!(warning.contains(&expected), "{expected} in {warning}");
    }

    // No time passes: the next sweep re-queues it with its back-off, and it completes.
    assert_eq!(h.worker("w2").reclaim().await.unwrap(), 1);
    assert_eq!(h.run(run).attempts, 1);
    h.advance(1).await;
    assert_eq!(
        h.drive(&h.worker("w2")).await,
        vec![ExecutionEnd::Finished(RunStatus::Completed)]
    );

    // A fenced execution is no failure: nothing is logged, nothing released.
    let quiet = h.submit(h.script(json!([[echo("c1", "x")]]))).await;
    let (stale_run, stale_lease) = h.worker("w3").claim(None).await.unwrap().expect("due");
    h.advance(30).await;
    assert_eq!(h.worker("w4").reclaim().await.unwrap(), 1);
    let (logs, guard) = capture_logs();
    assert_eq!(
        h.worker("w3").execute(stale_run, stale_lease).await,
        ExecutionEnd::Abandoned
    );
    drop(guard);
    assert!(logs.lock().unwrap().is_empty(), "a fence is not a warning");
    assert_eq!(h.run(quiet).status(), RunStatus::Queued);
}

#[tokio::test(start_paused = true)]
async fn run_inline_reports_the_failed_transaction_of_an_abandoned_execution() {
    // `run submit --inline` and `runs resume` must not print a RUNNING run as if all were well.
    let h = Harness::new();
    let run = h.submit(h.script(json!([[echo("c1", "one")]]))).await;
    let store = FailingReads::over(&h);
    store.hook.fail_next(0);
    let worker = Worker::new(h.env_over(store.clone()), WorkerSettings::new("inline"));
    assert_eq!(
        worker.run_inline(run).await,
        Err(TxError::Backend("database is locked".into()))
    );
    assert_eq!(h.worker("w2").reclaim().await.unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn one_reclaim_takes_every_expired_lease_not_just_a_page() {
    // SPEC §8.2: RECLAIM each RUNNING run whose lease expired. The sweep reads them a page
    // (100) at a time; one sweep must still take them all.
    let h = Harness::new();
    let worker = h.worker("w1");
    for i in 0..150 {
        h.submit(h.script(json!([[echo("c1", &format!("run {i}"))]])))
            .await;
        worker.claim(None).await.unwrap().expect("claimable");
    }
    h.advance(30).await;
    assert_eq!(h.worker("w2").reclaim().await.unwrap(), 150);
    assert_eq!(h.worker("w2").reclaim().await.unwrap(), 0);
}

#[tokio::test(start_paused = true)]
async fn each_admission_condition_alone_makes_a_batch_sequential() {
    // SPEC §11: a batch runs in parallel only if it has 2–8 calls and every call resolves, is
    // allow_parallel, read_only, of an allowed side-effect class, has its scopes held and valid
    // arguments. Each batch below breaks exactly one condition beside a parallel-safe echo; the
    // first is the control that meets them all.
    let ledger = Arc::new(Ledger::default());
    let h = Harness::with(Ruleset::shipped().expect("shipped policy"), |tools| {
        let mut spec = test_spec(
            "test.scoped_read",
            SideEffectClass::None,
            IdempotencyClass::ReadOnly,
            true,
        );
        spec.required_scopes = [Scope::parse_required("test.other").unwrap()]
            .into_iter()
            .collect();
        let mut push = |spec: ToolSpec| {
            tools.push(Arc::new(TestTool {
                spec,
                behaviour: Behaviour::Echo,
                ledger: Arc::clone(&ledger),
            }))
        };
        push(spec);
        // Parallel-safe in every way but one each.
        push(test_spec(
            "test.idempotent_none",
            SideEffectClass::None,
            IdempotencyClass::Idempotent,
            true,
        ));
        push(test_spec(
            "test.code_read",
            SideEffectClass::CodeExecution,
            IdempotencyClass::ReadOnly,
            true,
        ));
    });
    let call = airlock_core::testing::fixtures::user_call;
    let cases: Vec<(&str, Vec<Value>, bool)> = vec![
        (
            "control: two parallel-safe reads",
            vec![echo("c2", "x")],
            true,
        ),
        (
            "eight calls",
            (2..=8).map(|i| echo(&format!("c{i}"), "x")).collect(),
            true,
        ),
        (
            "nine calls",
            (2..=9).map(|i| echo(&format!("c{i}"), "x")).collect(),
            false,
        ),
        ("one call", vec![], false),
        (
            "allow_parallel = false",
            vec![call("c2", "test.untrusted", json!({"text": "x"}))],
            false,
        ),
        (
            "idempotent, not read_only",
            vec![call("c2", "test.idempotent_none", json!({"text": "x"}))],
            false,
        ),
        (
            "a side-effect class outside none, workspace_read, network_read",
            vec![call("c2", "test.code_read", json!({"text": "x"}))],
            false,
        ),
        (
            "a scope the principal lacks",
            vec![call("c2", "test.scoped_read", json!({"text": "x"}))],
            false,
        ),
        (
            "invalid arguments",
            vec![call("c2", "test.echo", json!({"bogus": 1}))],
            false,
        ),
        (
            "an unknown tool",
            vec![call("c2", "no.such_tool", json!({}))],
            false,
        ),
    ];
    for (case, others, parallel) in cases {
        let mut batch = vec![echo("c1", "first")];
        batch.extend(others);
        let run = h.submit(h.script(json!([batch]))).await;
        assert_eq!(
            h.drive(&h.worker("w1")).await,
            vec![ExecutionEnd::Finished(RunStatus::Completed)],
            "{case}"
        );
        let rows = h.invocations(run);
        assert!(!rows.is_empty(), "{case}");
        let groups: Vec<_> = rows.iter().map(|row| row.parallel_group).collect();
        if parallel {
            assert!(groups[0].is_some(), "{case}: {groups:?}");
            assert!(groups.iter().all(|g| *g == groups[0]), "{case}: one group");
        } else {
            assert!(groups.iter().all(Option::is_none), "{case}: {groups:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_poll_stops_claiming_but_lets_the_runs_in_flight_finish() {
    // A tick error ends the worker loop (fail-stop), but only after the runs it already
    // executes have finished: their own transactions still succeed, and dropping them would
    // leave their leases to expire and cost each an attempt.
    let (h, Gate { entered, release }) = gated_harness();
    let run = h
        .submit(h.script(json!([[{"call_id": "c1", "tool": "test.gated", "arguments": {}}]])))
        .await;
    let store = FailingReads::over(&h);
    let mut settings = WorkerSettings::new("w1");
    settings.concurrency = 1;
    let worker = Worker::new(h.env_over(store.clone()), settings);
    let control = ControlService::new(h.env_over(store.clone()), h.dispatcher.clone(), None);
    let loop_ended = AtomicUsize::new(0);
    let looping = async {
        let result = worker.run(&TokioSpawner, &control, &|| false).await;
        loop_ended.store(1, Ordering::SeqCst);
        result
    };
    let driver = async {
        entered.notified().await;
        // The run is inside its tool; the next read (a sweep's, in the next poll) fails.
        store.hook.fail_next(0);
        h.advance(10).await;
        let ended_early = loop_ended.load(Ordering::SeqCst) == 1;
        release.notify_one();
        ended_early
    };

    let (result, ended_early) = tokio::join!(looping, driver);

    assert!(!ended_early, "the loop waits for the run in flight");
    assert!(matches!(result, Err(TxError::Backend(_))), "{result:?}");
    let finished = h.run(run);
    assert_eq!(finished.status(), RunStatus::Completed);
    assert_eq!(finished.attempts, 0);
}

/// A planner factory that cannot build a planner (a damaged `planner_input`, say).
struct BrokenPlannerFactory;

impl PlannerFactory for BrokenPlannerFactory {
    fn for_run(&self, _run: &Run) -> Result<Arc<dyn Planner>, PlannerError> {
        Err(PlannerError("cannot read the stored script".to_owned()))
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancel_comes_before_a_planner_that_cannot_be_built() {
    // §8.3's loop order: point 1 (the token) before the planner is asked for anything. A
    // cancelled run ends CANCELLED even when its planner cannot be built.
    let h = Harness::new();
    let mut env = h.env.clone();
    env.planners = Arc::new(BrokenPlannerFactory);
    let worker = Worker::new(env, WorkerSettings::new("w1"));
    let run = h.submit(h.script(json!([[echo("c1", "hi")]]))).await;
    let (claimed, lease) = worker.claim(None).await.unwrap().expect("claimable");
    h.control.cancel_run(&h.alice(), run).await.unwrap();

    assert_eq!(
        worker.execute(claimed, lease).await,
        ExecutionEnd::Finished(RunStatus::Cancelled)
    );

    // A passed deadline also comes first (FAILED deadline_exceeded, not planner_error).
    let mut late = h.script(json!([[echo("c1", "hi")]]));
    late["limits"]["deadline_seconds"] = json!(1);
    let late = h.submit(late).await;
    let (claimed, lease) = worker.claim(None).await.unwrap().expect("claimable");
    h.advance(2).await;
    assert_eq!(
        worker.execute(claimed, lease).await,
        ExecutionEnd::Finished(RunStatus::Failed)
    );
    assert_eq!(
        failure_reason(&h.run(late)),
        FailureReason::DeadlineExceeded
    );

    // Without a cancel, the same planner fails the run planner_error.
    let other = h.submit(h.script(json!([[echo("c1", "hi")]]))).await;
    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Failed)]
    );
    assert_eq!(failure_reason(&h.run(other)), FailureReason::PlannerError);
}
