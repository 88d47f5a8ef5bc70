//! The recovery table (SPEC §9.4), cell by cell, and every crash point a worker can reach
//! (SPEC §2.2, §13.2). Each test crashes one "process" at a `CrashPoint` (its execution is
//! dropped, leaving only committed state), lets the lease run out, and has a fresh process (new
//! registry, token registry, workspaces and planner over the same store) reclaim and finish the
//! run. The ledger and the clock are the outside world, so every process shares them.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use airlock_core::control::ControlService;
use airlock_core::events::{Actor, Event, EventType, NewEvent, keys};
use airlock_core::ids::RunId;
use airlock_core::invocation::Invocation;
use airlock_core::invocation::outcome::codes;
use airlock_core::invocation::pipeline::{CallSite, Halt, ToolPipeline};
use airlock_core::invocation::recovery::recovery_action;
use airlock_core::mem_store::MemStore;
use airlock_core::planner::script::ScriptedPlannerFactory;
use airlock_core::policy::Ruleset;
use airlock_core::ports::{
    BoxFut, Clock, Planner, PlannerError, PlannerFactory, PlannerInput, PlannerTurn, ProposedCall,
    Tool,
};
use airlock_core::run::cancel::CancelToken;
use airlock_core::run::checkpoint::ResultRef;
use airlock_core::run::executor::ExecutionEnd;
use airlock_core::run::{Run, RunState};
use airlock_core::store::Store;
use airlock_core::testing::{earlier_build, fixtures};
use airlock_core::vocab::{
    ApprovalResolution, ApprovalStatus, CancelReason, CrashPoint, FailureReason, IdempotencyClass,
    InvocationStatus, OutcomeStatus, RecoveryAction, ResolveState, RunStatus, SideEffectClass,
    TrustLevel,
};
use airlock_core::worker::Worker;
use common::*;
use serde_json::{Value, json};

/// The worker setting `--lease-ms` defaults to 30 s (SPEC §8.2); this is just past it.
const PAST_LEASE_SECONDS: u64 = 31;
/// Past any re-queue backoff a test meets (`2^(attempts−1)` s with attempts ≤ 2).
const PAST_BACKOFF_SECONDS: u64 = 5;

const COMPLETED: ExecutionEnd = ExecutionEnd::Finished(RunStatus::Completed);

/// The scripted planner, recording the result items each turn was shown (canonical text).
#[derive(Default)]
struct RecordingPlanners {
    seen: Arc<Mutex<Vec<Turn>>>,
}

/// One planner turn as asked: the step and, per history step, its result items.
#[derive(Debug, Clone, PartialEq)]
struct Turn {
    step: u32,
    history: Vec<Vec<String>>,
}

struct RecordingPlanner {
    inner: Arc<dyn Planner>,
    seen: Arc<Mutex<Vec<Turn>>>,
}

impl PlannerFactory for RecordingPlanners {
    fn for_run(&self, run: &Run) -> Result<Arc<dyn Planner>, PlannerError> {
        Ok(Arc::new(RecordingPlanner {
            inner: ScriptedPlannerFactory.for_run(run)?,
            seen: Arc::clone(&self.seen),
        }))
    }
}

impl Planner for RecordingPlanner {
    fn next_turn<'a>(
        &'a self,
        input: PlannerInput<'a>,
    ) -> BoxFut<'a, Result<PlannerTurn, PlannerError>> {
        let history = input
            .history
            .iter()
            .map(|s| s.results.iter().map(|r| r.to_canonical()).collect())
            .collect();
        self.seen.lock().unwrap().push(Turn {
            step: input.step,
            history,
        });
        self.inner.next_turn(input)
    }
}

/// Tools of this file, reaching cells the standard test tools do not: START watermarks a row
/// iff `side_effect ≠ none` (SPEC §9.2 step 9), so a null watermark on a RUNNING
/// conditionally_idempotent or non_idempotent row needs a `none` tool of that class; and a
/// watermarked read_only row needs a `workspace_read` tool.
fn extra_tools(ledger: &Arc<Ledger>) -> Vec<TestTool> {
    use IdempotencyClass::*;
    use SideEffectClass::*;
    let tool = |name: &str, side_effect, idempotency| TestTool {
        spec: test_spec(name, side_effect, idempotency, false),
        behaviour: Behaviour::Echo,
        ledger: Arc::clone(ledger),
    };
    vec![
        tool("test.cond_none", None, ConditionallyIdempotent),
        tool("test.once_none", None, NonIdempotent),
        tool("test.idem_none", None, Idempotent),
        tool("test.read_ws", WorkspaceRead, ReadOnly),
        tool("test.send_idem", ExternalWrite, Idempotent),
    ]
}

/// Adds [`extra_tools`] over `ledger`.
fn with_extra_tools(ledger: &Arc<Ledger>) -> impl FnOnce(&mut Vec<Arc<dyn Tool>>) + '_ {
    move |tools| {
        tools.extend(
            extra_tools(ledger)
                .into_iter()
                .map(|t| Arc::new(t) as Arc<dyn Tool>),
        );
    }
}

/// One store, one clock, one ledger (the outside world), and the processes that run over them.
struct Sim {
    ledger: Arc<Ledger>,
    first: Harness,
}

impl Sim {
    fn new() -> Sim {
        let ledger = Arc::new(Ledger::default());
        let first = Harness::over_with_ledger(
            Arc::new(MemStore::new()),
            Ruleset::shipped().unwrap(),
            Arc::clone(&ledger),
            with_extra_tools(&ledger),
        );
        Sim { ledger, first }
    }

    /// A new process over the same store: empty memory (registry, tokens, workspaces, planner,
    /// crash hook), the same wall clock and outside world. The clock is shared because a
    /// harness's `TokioClock` counts from its own creation, so a process started after time
    /// passed would otherwise see the clock jump back.
    fn restart(&self) -> (Harness, Arc<RecordingPlanners>) {
        self.restart_without(None)
    }

    /// [`Sim::restart`], with `gone` no longer registered in the new process.
    fn restart_without(&self, gone: Option<&str>) -> (Harness, Arc<RecordingPlanners>) {
        let add = with_extra_tools(&self.ledger);
        let mut h = Harness::over_with_ledger(
            Arc::clone(&self.first.store),
            Ruleset::shipped().unwrap(),
            Arc::clone(&self.ledger),
            |tools| {
                add(tools);
                tools.retain(|t| Some(t.spec().name.as_str()) != gone);
            },
        );
        let planners = Arc::new(RecordingPlanners::default());
        h.clock = Arc::clone(&self.first.clock);
        h.env.clock = self.first.clock.clone();
        h.env.planners = planners.clone();
        h.control = ControlService::new(h.env.clone(), h.dispatcher.clone(), None);
        (h, planners)
    }

    /// Every body entry of `tool`: `(key, replay)`.
    fn effects(&self, tool: &str) -> Vec<(String, bool)> {
        self.ledger
            .effects
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.0 == tool)
            .map(|e| (e.1.clone(), e.2))
            .collect()
    }
}

use airlock_core::testing::fixtures::user_call as call;

/// Submits a one-step run of one call `c1`.
async fn submit_one(h: &Harness, tool: &str, arguments: Value) -> RunId {
    h.submit(h.script(json!([[call("c1", tool, arguments)]])))
        .await
}

/// Claims a run and executes it with `point` armed; the execution must crash there and is
/// dropped (a CLAIM crash included, which `drive_one_until_crash` cannot reach).
async fn crash_at(h: &Harness, worker: &Arc<Worker<MemStore>>, point: CrashPoint) {
    h.crash.arm(point);
    let end = tokio::select! {
        end = async {
            let (run, lease) = worker.claim(None).await.expect("claim").expect("a claimable run");
            worker.execute(run, lease).await
        } => Some(end),
        () = h.crash.crashed() => None,
    };
    assert_eq!(end, None, "the execution should have crashed at {point:?}");
}

/// A one-call run of `tool` as a build before SPEC §17.1's folding left it after a crash at
/// `point`: `AfterPending` — the batch checkpointed, no row; `AfterPropose` — also the call's row
/// as that PROPOSE left it (AUTHORIZED for an allowed call, nothing started). The new build
/// crashes right after CLAIM, and the earlier build's transactions commit under that lease.
async fn submit_one_as_earlier_build(
    h: &Harness,
    tool: &str,
    arguments: Value,
    point: CrashPoint,
) -> RunId {
    let run = submit_one(h, tool, arguments.clone()).await;
    crash_at(h, &h.worker("w1"), CrashPoint::AfterClaim).await;
    let lease = h.run(run).lease().expect("RUNNING under w1's lease");
    let proposed: ProposedCall =
        serde_json::from_value(call("c1", tool, arguments)).expect("a proposed call");
    let batch = earlier_build::record_pending(&h.env, &lease, vec![proposed]);
    match point {
        CrashPoint::AfterPending => {}
        CrashPoint::AfterPropose => {
            earlier_build::propose_first(&h.env, &lease, &batch);
        }
        other => panic!("no earlier-build state for {other:?}"),
    }
    run
}

/// The lease runs out; the new process reclaims the run (attempts + 1, re-queued with backoff,
/// SPEC §8.2), waits out the backoff and drives it.
async fn reclaim_and_drive(h: &Harness, worker: &Arc<Worker<MemStore>>) -> Vec<ExecutionEnd> {
    h.advance(PAST_LEASE_SECONDS).await;
    assert_eq!(
        worker.reclaim().await.expect("reclaim"),
        1,
        "one expired lease"
    );
    h.advance(PAST_BACKOFF_SECONDS).await;
    h.drive(worker).await
}

/// The only invocation of `run`.
fn only_row(h: &Harness, run: RunId) -> Invocation {
    let rows = h.invocations(run);
    assert_eq!(rows.len(), 1, "one invocation row: {rows:#?}");
    rows.into_iter().next().unwrap()
}

/// The `tool.call.*` events naming `row`.
fn row_events(h: &Harness, run: RunId, row: &Invocation) -> Vec<Event> {
    let id = row.id.to_string();
    h.events(run)
        .into_iter()
        .filter(|e| {
            e.event_type.as_str().starts_with("tool.call.")
                && e.payload["invocation_id"].as_str() == Some(id.as_str())
        })
        .collect()
}

fn count(h: &Harness, run: RunId, event_type: &str) -> usize {
    h.event_types(run)
        .iter()
        .filter(|t| *t == event_type)
        .count()
}

fn failure_reason(run: &Run) -> Option<FailureReason> {
    match &run.state {
        RunState::Failed { failure } => Some(failure.reason),
        _ => None,
    }
}

/// The result references of the run's step records, per step.
fn history_refs(h: &Harness, run: RunId) -> Vec<Vec<ResultRef>> {
    h.store
        .transact(|tx| tx.step_records(run, 0, 1000))
        .unwrap()
        .into_iter()
        .map(|s| s.results)
        .collect()
}

const RESULT_EVENTS: [&str; 4] = [
    "tool.call.completed",
    "tool.call.failed",
    "tool.call.uncertain",
    "tool.call.denied",
];

/// Tools whose body has an external effect and must never repeat it (SPEC §16 #13).
const ONCE_ONLY: [&str; 3] = ["test.write_once", "test.send", "test.hang_write"];

/// SPEC §16 #13, #16, #17 over the whole run: one row and one `tool.call.proposed` per call,
/// at most one START per row, every tool-result event carrying the stored result item, at most
/// one effect per key of a non-idempotent tool, and `tool_call_count` = rows that reached RUNNING.
fn check_invariants(sim: &Sim, h: &Harness, run: RunId) {
    let rows = h.invocations(run);
    let events = h.events(run);
    let mut calls = BTreeSet::new();
    for row in &rows {
        assert!(
            calls.insert((row.step_number, row.call_id.clone())),
            "a second row for step {} call {}",
            row.step_number,
            row.call_id
        );
        let id = row.id.to_string();
        let of = |event_type: &str| -> Vec<&Event> {
            events
                .iter()
                .filter(|e| {
                    e.event_type.as_str() == event_type
                        && e.payload["invocation_id"].as_str() == Some(id.as_str())
                })
                .collect()
        };
        assert_eq!(of("tool.call.proposed").len(), 1, "proposed once: {id}");
        assert!(of("tool.call.started").len() <= 1, "started at most once");
        let results: Vec<&Event> = RESULT_EVENTS.iter().flat_map(|t| of(t)).collect();
        if row.status.is_terminal() {
            assert_eq!(results.len(), 1, "one result event for {id}");
            assert_eq!(
                results[0].payload["result_item"].as_str(),
                row.result_item.as_deref(),
                "the result event carries the stored result item"
            );
        } else {
            assert!(results.is_empty(), "no result event for open row {id}");
        }
        if ONCE_ONLY.contains(&row.tool_name.as_str()) {
            let effects = sim
                .effects(&row.tool_name)
                .into_iter()
                .filter(|(key, _)| *key == row.idempotency_key)
                .count();
            assert!(
                effects <= 1,
                "{effects} effects for key {}",
                row.idempotency_key
            );
            if effects == 1 {
                assert!(
                    matches!(
                        row.status,
                        InvocationStatus::Succeeded | InvocationStatus::Uncertain
                    ),
                    "a row with an effect is SUCCEEDED or UNCERTAIN, not {}",
                    row.status
                );
            } else {
                assert_ne!(
                    row.status,
                    InvocationStatus::Succeeded,
                    "no effect, no success"
                );
            }
        }
    }
    let proposed = events
        .iter()
        .filter(|e| e.event_type.as_str() == "tool.call.proposed")
        .count();
    assert_eq!(proposed, rows.len(), "one tool.call.proposed per row");
    let started = events
        .iter()
        .filter(|e| e.event_type.as_str() == "tool.call.started")
        .count();
    assert_eq!(
        h.run(run).tool_call_count as usize,
        started,
        "tool_call_count = rows that reached RUNNING"
    );
}

// ---------------------------------------------------------------------------------------------
// Terminal rows: RETURN_OUTCOME.
// ---------------------------------------------------------------------------------------------

/// What RETURN_OUTCOME must leave untouched: the row, its events and the tool's ledger.
struct Before {
    row: Invocation,
    events: Vec<Event>,
    effects: Vec<(String, bool)>,
}

fn before(sim: &Sim, h: &Harness, run: RunId, status: InvocationStatus) -> Before {
    let row = only_row(h, run);
    assert_eq!(row.status, status, "the crash left the row {status}");
    assert_eq!(
        recovery_action(
            row.status,
            row.idempotency_class,
            row.effect_sent_at.is_some()
        ),
        RecoveryAction::ReturnOutcome
    );
    Before {
        events: row_events(h, run, &row),
        effects: sim.effects(&row.tool_name),
        row,
    }
}

/// RETURN_OUTCOME (SPEC §9.4): nothing written for the row (same row, same `updated_at`, no new
/// `tool.call.*` event), the tool not invoked again, and the next planner turn shown exactly the
/// stored result item.
fn assert_outcome_returned(
    sim: &Sim,
    h: &Harness,
    planners: &RecordingPlanners,
    run: RunId,
    was: &Before,
) {
    let row = only_row(h, run);
    assert_eq!(row, was.row, "the terminal row is untouched");
    assert_eq!(row.updated_at, was.row.updated_at);
    assert_eq!(
        row_events(h, run, &row),
        was.events,
        "no new event for the row"
    );
    assert_eq!(
        sim.effects(&row.tool_name),
        was.effects,
        "not invoked again"
    );
    assert_eq!(
        history_refs(h, run),
        vec![vec![ResultRef::Invocation {
            invocation_id: row.id
        }]]
    );
    let seen = planners.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![Turn {
            step: 2,
            history: vec![vec![row.result_item.clone().unwrap()]],
        }],
        "the resumed step is not planned again; step 2 sees the stored item byte-identically"
    );
    check_invariants(sim, h, run);
}

#[tokio::test(start_paused = true)]
async fn succeeded_row_returns_its_outcome() {
    // A crash after FINISH leaves a SUCCEEDED row in a still-pending batch.
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one(
        h,
        "test.write_once",
        json!({"path": "notes/a.txt", "text": "hi"}),
    )
    .await;
    crash_at(h, &h.worker("w1"), CrashPoint::AfterFinish).await;
    let was = before(&sim, h, run, InvocationStatus::Succeeded);
    assert_eq!(was.effects.len(), 1);

    let (p2, planners) = sim.restart();
    assert_eq!(reclaim_and_drive(&p2, &p2.worker("w2")).await, [COMPLETED]);
    assert_outcome_returned(&sim, &p2, &planners, run, &was);
    assert_eq!(p2.run(run).tool_call_count, 1);
}

#[tokio::test(start_paused = true)]
async fn failed_row_returns_its_outcome() {
    // A tool failure closed the row FAILED; the crash after FINISH leaves it in the batch.
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one(h, "test.fail", json!({"text": "hi"})).await;
    crash_at(h, &h.worker("w1"), CrashPoint::AfterFinish).await;
    let was = before(&sim, h, run, InvocationStatus::Failed);
    assert_eq!(was.effects.len(), 1);
    assert_eq!(
        was.row.reason_code.as_deref(),
        Some("tool.upstream.unavailable")
    );

    let (p2, planners) = sim.restart();
    assert_eq!(reclaim_and_drive(&p2, &p2.worker("w2")).await, [COMPLETED]);
    assert_outcome_returned(&sim, &p2, &planners, run, &was);
}

#[tokio::test(start_paused = true)]
async fn denied_row_returns_its_outcome() {
    // A workspace write without a path is denied at PROPOSE; the crash follows that commit.
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one(h, "test.write_once", json!({"text": "hi"})).await;
    crash_at(h, &h.worker("w1"), CrashPoint::AfterPropose).await;
    let was = before(&sim, h, run, InvocationStatus::Denied);
    assert_eq!(
        was.row.reason_code.as_deref(),
        Some("policy.matrix.workspace_write")
    );
    assert!(was.effects.is_empty());

    let (p2, planners) = sim.restart();
    assert_eq!(reclaim_and_drive(&p2, &p2.worker("w2")).await, [COMPLETED]);
    assert_outcome_returned(&sim, &p2, &planners, run, &was);
    assert_eq!(p2.run(run).tool_call_count, 0);
}

#[tokio::test(start_paused = true)]
async fn uncertain_row_returns_its_outcome() {
    // First crash after START of a watermarked non-idempotent call; the second process marks it
    // UNCERTAIN (RECOVER) and crashes right after; the third returns the stored outcome.
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one(
        h,
        "test.write_once",
        json!({"path": "notes/a.txt", "text": "hi"}),
    )
    .await;
    crash_at(h, &h.worker("w1"), CrashPoint::AfterStart).await;

    let (p2, _) = sim.restart();
    let w2 = p2.worker("w2");
    p2.advance(PAST_LEASE_SECONDS).await;
    assert_eq!(w2.reclaim().await.unwrap(), 1);
    p2.advance(PAST_BACKOFF_SECONDS).await;
    crash_at(&p2, &w2, CrashPoint::AfterRecover).await;
    let was = before(&sim, &p2, run, InvocationStatus::Uncertain);
    assert_eq!(was.row.reason_code.as_deref(), Some(codes::OUTCOME_UNKNOWN));
    assert!(was.effects.is_empty(), "the body never ran");

    let (p3, planners) = sim.restart();
    assert_eq!(reclaim_and_drive(&p3, &p3.worker("w3")).await, [COMPLETED]);
    assert_outcome_returned(&sim, &p3, &planners, run, &was);
    assert_eq!(p3.run(run).attempts, 2);
    assert_eq!(p3.run(run).tool_call_count, 1);
}

// ---------------------------------------------------------------------------------------------
// PROPOSED: RESUME_AUTHORIZATION in the table, an internal error when met in v1.
// ---------------------------------------------------------------------------------------------

#[test]
fn proposed_maps_to_resume_authorization_for_every_class_and_watermark() {
    // The PROPOSED row of §9.4 is RESUME_AUTHORIZATION whatever the class and watermark (#14).
    for class in IdempotencyClass::ALL {
        for watermarked in [false, true] {
            assert_eq!(
                recovery_action(InvocationStatus::Proposed, *class, watermarked),
                RecoveryAction::ResumeAuthorization,
                "{class} watermarked={watermarked}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn proposed_row_fails_the_run_with_internal_error() {
    // v1 never stores PROPOSED (rows are inserted with their decision), so the row is seeded:
    // after an earlier build's crash at PENDING the checkpointed batch references call c1, and
    // a PROPOSED row for (run, 1, c1) is inserted with its tool.call.proposed, as a future
    // PROPOSE would.
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one_as_earlier_build(
        h,
        "test.write_once",
        json!({"path": "notes/a.txt", "text": "hi"}),
        CrashPoint::AfterPending,
    )
    .await;
    assert!(h.invocations(run).is_empty());
    let run_row = h.run(run);
    let now = h.clock.now();
    let mut row = fixtures::sample_invocation(1, &run_row, 1, "c1", InvocationStatus::Proposed);
    row.tool_name = "test.write_once".to_owned();
    row.side_effect = SideEffectClass::WorkspaceWrite;
    row.required_scopes = Vec::new();
    row.policy_decision = None;
    row.created_at = now;
    row.updated_at = now;
    let proposed = NewEvent {
        session_id: run_row.session_id,
        run_id: Some(run),
        event_type: EventType::ToolCallProposed,
        actor: Actor::worker("w1"),
        payload: json!({"invocation_id": row.id.to_string(), "name": row.tool_name,
            "call_id": "c1", "step_number": 1}),
        derivation_key: Some(keys::proposed(row.id)),
        created_at: now,
    };
    fixtures::commit(&*h.store, "seed a PROPOSED row", |tx| {
        tx.insert_invocation(&row)?;
        tx.append_event(&proposed).map(|_| ())
    });

    let (p2, _) = sim.restart();
    assert_eq!(
        reclaim_and_drive(&p2, &p2.worker("w2")).await,
        [ExecutionEnd::Finished(RunStatus::Failed)]
    );
    let run_row = p2.run(run);
    assert_eq!(failure_reason(&run_row), Some(FailureReason::InternalError));
    assert_eq!(run_row.tool_call_count, 0);
    assert!(sim.effects("test.write_once").is_empty(), "never invoked");
    // The terminal sweep (SPEC §8.1) closes the PROPOSED row.
    let row = only_row(&p2, run);
    assert_eq!(row.status, InvocationStatus::Denied);
    assert_eq!(row.reason_code.as_deref(), Some(codes::RUN_TERMINATED));
    check_invariants(&sim, &p2, run);
}

// ---------------------------------------------------------------------------------------------
// AUTHORIZED: RESUME_AUTHORIZATION. WAITING_FOR_APPROVAL: RESUME_APPROVAL.
// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn authorized_row_resumes_at_step_8_and_runs_once() {
    // An earlier build crashed after PROPOSE of an allowed call: the row is AUTHORIZED,
    // nothing started (the folded build STARTs in PROPOSE, §17.1 F2, so only old data holds
    // such a row).
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one_as_earlier_build(
        h,
        "test.write_once",
        json!({"path": "notes/a.txt", "text": "hi"}),
        CrashPoint::AfterPropose,
    )
    .await;
    let was = only_row(h, run);
    assert_eq!(was.status, InvocationStatus::Authorized);
    assert_eq!(h.run(run).tool_call_count, 0);

    let (p2, _) = sim.restart();
    assert_eq!(reclaim_and_drive(&p2, &p2.worker("w2")).await, [COMPLETED]);
    let row = only_row(&p2, run);
    assert_eq!(row.id, was.id);
    assert_eq!(row.status, InvocationStatus::Succeeded);
    assert_eq!(
        row.policy_decision, was.policy_decision,
        "the stored decision is kept"
    );
    assert_eq!(
        sim.effects("test.write_once"),
        [(was.idempotency_key.clone(), false)]
    );
    assert_eq!(p2.run(run).tool_call_count, 1);
    let types: Vec<String> = row_events(&p2, run, &row)
        .iter()
        .map(|e| e.event_type.as_str().to_owned())
        .collect();
    assert_eq!(
        types,
        [
            "tool.call.proposed",
            "tool.call.authorized",
            "tool.call.started",
            "tool.call.completed"
        ]
    );
    check_invariants(&sim, &p2, run);
}

#[tokio::test(start_paused = true)]
async fn waiting_row_parks_again_on_the_same_approval() {
    // The crash follows PROPOSE of a call needing approval, before PARK announced it.
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one(h, "test.send", json!({"text": "hi"})).await;
    crash_at(h, &h.worker("w1"), CrashPoint::AfterPropose).await;
    let was = only_row(h, run);
    assert_eq!(was.status, InvocationStatus::WaitingForApproval);
    let approval = was.suspended_approval.expect("suspended on its approval");
    assert_eq!(count(h, run, "approval.requested"), 0);

    let (p2, _) = sim.restart();
    let w2 = p2.worker("w2");
    assert_eq!(
        reclaim_and_drive(&p2, &w2).await,
        [ExecutionEnd::Parked],
        "RESUME_APPROVAL finds the approval pending and parks"
    );
    assert_eq!(p2.run(run).status(), RunStatus::WaitingForApproval);
    let approvals = p2.store.transact(|tx| tx.approvals_of_run(run)).unwrap();
    assert_eq!(approvals.len(), 1, "never a second approval");
    assert_eq!(approvals[0].id, approval);
    assert_eq!(approvals[0].status, ApprovalStatus::Pending);
    assert!(approvals[0].requested_at.is_some(), "PARK announced it");
    assert_eq!(count(&p2, run, "approval.requested"), 1);
    assert_eq!(only_row(&p2, run), was, "the waiting row is untouched");

    // The approval still works: granted, the call runs exactly once.
    let resolved = p2
        .control
        .resolve(&p2.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .unwrap();
    assert_eq!(resolved.state, ResolveState::Applied);
    assert_eq!(p2.drive(&w2).await, [COMPLETED]);
    assert_eq!(only_row(&p2, run).status, InvocationStatus::Succeeded);
    assert_eq!(sim.effects("test.send").len(), 1);
    assert_eq!(count(&p2, run, "approval.requested"), 1);
    check_invariants(&sim, &p2, run);
}

// ---------------------------------------------------------------------------------------------
// RUNNING: REEXECUTE, REPLAY_IDEMPOTENCY_KEY, MARK_UNCERTAIN.
// ---------------------------------------------------------------------------------------------

/// A RUNNING row that must be invoked again (REEXECUTE, or REPLAY_IDEMPOTENCY_KEY with
/// `ctx.replay`), crashed after START (the body never ran) and after the tool returned (it ran,
/// FINISH did not). The recovery invokes it with the row's key, FINISHes it SUCCEEDED, never
/// starts it again, never rewrites the watermark and never counts it twice.
async fn invoked_again(
    tool: &str,
    arguments: Value,
    class: IdempotencyClass,
    watermarked: bool,
    action: RecoveryAction,
) {
    for point in [CrashPoint::AfterStart, CrashPoint::AfterInvoke] {
        let sim = Sim::new();
        let h = &sim.first;
        let run = submit_one(h, tool, arguments.clone()).await;
        crash_at(h, &h.worker("w1"), point).await;
        let was = only_row(h, run);
        assert_eq!(was.status, InvocationStatus::Running, "{point:?}");
        assert_eq!(was.idempotency_class, class);
        assert_eq!(was.effect_sent_at.is_some(), watermarked, "{point:?}");
        assert_eq!(recovery_action(was.status, class, watermarked), action);
        let ran_before = usize::from(point == CrashPoint::AfterInvoke);
        assert_eq!(sim.effects(tool).len(), ran_before, "{point:?}");

        let (p2, _) = sim.restart();
        assert_eq!(
            reclaim_and_drive(&p2, &p2.worker("w2")).await,
            [COMPLETED],
            "{point:?}"
        );
        let row = only_row(&p2, run);
        assert_eq!(row.status, InvocationStatus::Succeeded, "{point:?}");
        assert_eq!(
            row.effect_sent_at, was.effect_sent_at,
            "watermark not rewritten"
        );
        let replay = action == RecoveryAction::ReplayIdempotencyKey;
        let mut expected = vec![(was.idempotency_key.clone(), false); ran_before];
        expected.push((was.idempotency_key.clone(), replay));
        assert_eq!(
            sim.effects(tool),
            expected,
            "{point:?}: invoked again with the same key, replay={replay}"
        );
        assert_eq!(p2.run(run).tool_call_count, 1, "{point:?}");
        assert_eq!(count(&p2, run, "tool.call.started"), 1, "{point:?}");
        assert_eq!(count(&p2, run, "tool.call.completed"), 1, "{point:?}");
        check_invariants(&sim, &p2, run);
    }
}

#[tokio::test(start_paused = true)]
async fn running_read_only_reexecutes() {
    // A RUNNING read_only row (side effect none, so no watermark) is invoked again.
    invoked_again(
        "test.echo",
        json!({"text": "hi"}),
        IdempotencyClass::ReadOnly,
        false,
        RecoveryAction::Reexecute,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn running_read_only_watermarked_reexecutes() {
    // A RUNNING read_only row with a watermark (workspace_read) is invoked again all the same.
    invoked_again(
        "test.read_ws",
        json!({"path": "notes/a.txt"}),
        IdempotencyClass::ReadOnly,
        true,
        RecoveryAction::Reexecute,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn running_idempotent_reexecutes() {
    // A RUNNING idempotent row with a watermark (workspace_write) is invoked again.
    invoked_again(
        "test.write_idem",
        json!({"path": "notes/a.txt", "text": "hi"}),
        IdempotencyClass::Idempotent,
        true,
        RecoveryAction::Reexecute,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn running_idempotent_unwatermarked_reexecutes() {
    // A RUNNING idempotent row without a watermark (side effect none) is invoked again.
    invoked_again(
        "test.idem_none",
        json!({"text": "hi"}),
        IdempotencyClass::Idempotent,
        false,
        RecoveryAction::Reexecute,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn running_conditionally_idempotent_watermarked_replays_the_key() {
    // A watermarked conditionally_idempotent row is invoked with `ctx.replay` and its key.
    invoked_again(
        "test.write_cond",
        json!({"path": "notes/a.txt", "text": "hi"}),
        IdempotencyClass::ConditionallyIdempotent,
        true,
        RecoveryAction::ReplayIdempotencyKey,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn running_conditionally_idempotent_unwatermarked_reexecutes() {
    // Without a watermark (side effect none) the same class is simply invoked again.
    invoked_again(
        "test.cond_none",
        json!({"text": "hi"}),
        IdempotencyClass::ConditionallyIdempotent,
        false,
        RecoveryAction::Reexecute,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn running_non_idempotent_unwatermarked_reexecutes() {
    // A non_idempotent row without a watermark (side effect none) had no effect to repeat.
    invoked_again(
        "test.once_none",
        json!({"text": "hi"}),
        IdempotencyClass::NonIdempotent,
        false,
        RecoveryAction::Reexecute,
    )
    .await;
}

/// MARK_UNCERTAIN: one RECOVER transaction closes the row UNCERTAIN `tool.outcome_unknown` with
/// `tool.call.uncertain`; the body is never entered again; the run goes on with that outcome.
async fn marked_uncertain(point: CrashPoint) {
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one(
        h,
        "test.write_once",
        json!({"path": "notes/a.txt", "text": "hi"}),
    )
    .await;
    crash_at(h, &h.worker("w1"), point).await;
    let was = only_row(h, run);
    assert_eq!(was.status, InvocationStatus::Running);
    assert!(was.effect_sent_at.is_some());
    assert_eq!(
        recovery_action(was.status, was.idempotency_class, true),
        RecoveryAction::MarkUncertain
    );
    let effects = sim.effects("test.write_once");

    let (p2, planners) = sim.restart();
    assert_eq!(reclaim_and_drive(&p2, &p2.worker("w2")).await, [COMPLETED]);
    let row = only_row(&p2, run);
    assert_eq!(row.status, InvocationStatus::Uncertain);
    assert_eq!(row.reason_code.as_deref(), Some(codes::OUTCOME_UNKNOWN));
    assert_eq!(
        row.outcome.as_ref().unwrap().status,
        OutcomeStatus::Uncertain
    );
    assert_eq!(row.effect_sent_at, was.effect_sent_at);
    assert_eq!(
        sim.effects("test.write_once"),
        effects,
        "never invoked again"
    );
    let types: Vec<String> = row_events(&p2, run, &row)
        .iter()
        .map(|e| e.event_type.as_str().to_owned())
        .collect();
    assert_eq!(
        types,
        [
            "tool.call.proposed",
            "tool.call.authorized",
            "tool.call.started",
            "tool.call.uncertain"
        ]
    );
    assert_eq!(p2.run(run).tool_call_count, 1);
    let seen = planners.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [Turn {
            step: 2,
            history: vec![vec![row.result_item.clone().unwrap()]],
        }]
    );
    check_invariants(&sim, &p2, run);
}

#[tokio::test(start_paused = true)]
async fn running_non_idempotent_watermarked_is_marked_uncertain() {
    // Crashed after START: the body never ran, but the watermark says it may have.
    marked_uncertain(CrashPoint::AfterStart).await;
}

#[tokio::test(start_paused = true)]
async fn running_non_idempotent_after_its_effect_is_marked_uncertain() {
    // Crashed after the tool returned: the effect happened, FINISH did not; it stays at one.
    marked_uncertain(CrashPoint::AfterInvoke).await;
}

// ---------------------------------------------------------------------------------------------
// The other crash points a worker reaches: a fresh process finishes with no duplicate.
// ---------------------------------------------------------------------------------------------

/// A one-call run of `test.write_once` crashed at `point`; a fresh process completes it with the
/// call run exactly once.
async fn write_once_survives(point: CrashPoint) {
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one(
        h,
        "test.write_once",
        json!({"path": "notes/a.txt", "text": "hi"}),
    )
    .await;
    crash_at(h, &h.worker("w1"), point).await;

    let (p2, _) = sim.restart();
    assert_eq!(reclaim_and_drive(&p2, &p2.worker("w2")).await, [COMPLETED]);
    let row = only_row(&p2, run);
    assert_eq!(row.status, InvocationStatus::Succeeded);
    assert_eq!(
        sim.effects("test.write_once"),
        [(row.idempotency_key, false)]
    );
    let run_row = p2.run(run);
    assert_eq!(run_row.step_count, 2);
    assert_eq!(run_row.attempts, 1);
    check_invariants(&sim, &p2, run);
}

#[tokio::test(start_paused = true)]
async fn after_claim_a_fresh_worker_completes_the_run() {
    // A crash right after CLAIM leaves only a lease; the next process runs the call once.
    write_once_survives(CrashPoint::AfterClaim).await;
}

#[tokio::test(start_paused = true)]
async fn after_pending_the_batch_is_replayed_not_replanned() {
    // PENDING folds into the step's first PROPOSE (§17.1 F1, F2): a crash at after_pending
    // leaves the batch checkpointed with its first call already started. The batch is
    // dispatched again (the read-only call re-executes under its key), never planned again.
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one(h, "test.echo", json!({"text": "hi"})).await;
    crash_at(h, &h.worker("w1"), CrashPoint::AfterPending).await;
    assert_eq!(h.run(run).step_count, 1);
    let was = only_row(h, run);
    assert_eq!(
        was.status,
        InvocationStatus::Running,
        "START folded into PROPOSE"
    );
    assert_eq!(h.run(run).tool_call_count, 1);

    let (p2, planners) = sim.restart();
    assert_eq!(reclaim_and_drive(&p2, &p2.worker("w2")).await, [COMPLETED]);
    let row = only_row(&p2, run);
    assert_eq!(row.id, was.id);
    assert_eq!(row.status, InvocationStatus::Succeeded);
    assert_eq!(sim.effects("test.echo"), [(row.idempotency_key, false)]);
    assert_eq!(p2.run(run).tool_call_count, 1, "counted once");
    let seen = planners.seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().map(|t| t.step).collect::<Vec<_>>(),
        [2],
        "the checkpointed step 1 is dispatched, not planned again"
    );
    check_invariants(&sim, &p2, run);
}

#[tokio::test(start_paused = true)]
async fn an_earlier_builds_pending_without_rows_is_dispatched_not_replanned() {
    // A store written before §17.1 can hold a PENDING with no row (a crash at its
    // after_pending); the new build dispatches that batch, running the call exactly once.
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one_as_earlier_build(
        h,
        "test.write_once",
        json!({"path": "notes/a.txt", "text": "hi"}),
        CrashPoint::AfterPending,
    )
    .await;
    assert_eq!(h.run(run).step_count, 1);
    assert!(h.invocations(run).is_empty());

    let (p2, planners) = sim.restart();
    assert_eq!(reclaim_and_drive(&p2, &p2.worker("w2")).await, [COMPLETED]);
    let row = only_row(&p2, run);
    assert_eq!(row.status, InvocationStatus::Succeeded);
    assert_eq!(
        sim.effects("test.write_once"),
        [(row.idempotency_key, false)]
    );
    let seen = planners.seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().map(|t| t.step).collect::<Vec<_>>(),
        [2],
        "the checkpointed step 1 is dispatched, not planned again"
    );
    check_invariants(&sim, &p2, run);
}

#[tokio::test(start_paused = true)]
async fn after_refuse_the_refusal_is_returned_not_repeated() {
    // c1 is refused (invalid arguments: no row); the crash follows REFUSE; c2 has not run.
    let sim = Sim::new();
    let h = &sim.first;
    let run = h
        .submit(h.script(json!([[
            call("c1", "test.echo", json!({"bogus": "x"})),
            call(
                "c2",
                "test.write_once",
                json!({"path": "notes/a.txt", "text": "hi"})
            )
        ]])))
        .await;
    crash_at(h, &h.worker("w1"), CrashPoint::AfterRefuse).await;
    assert!(h.invocations(run).is_empty());
    let key = keys::refused(run, 1, "c1");
    let refusal = h
        .store
        .transact(|tx| tx.event_by_key(&key))
        .unwrap()
        .expect("the refusal event");
    assert_eq!(refusal.event_type.as_str(), "tool.call.failed");
    assert_eq!(refusal.payload["reason_code"], codes::ARGUMENTS_INVALID);

    let (p2, planners) = sim.restart();
    assert_eq!(reclaim_and_drive(&p2, &p2.worker("w2")).await, [COMPLETED]);
    let refusals: Vec<Event> = p2
        .events(run)
        .into_iter()
        .filter(|e| e.derivation_key.as_deref() == Some(key.as_str()))
        .collect();
    assert_eq!(refusals, std::slice::from_ref(&refusal), "refused once");
    let row = only_row(&p2, run);
    assert_eq!(row.call_id, "c2");
    assert_eq!(row.status, InvocationStatus::Succeeded);
    assert_eq!(
        sim.effects("test.write_once"),
        [(row.idempotency_key.clone(), false)]
    );
    assert!(sim.effects("test.echo").is_empty());
    assert_eq!(
        history_refs(&p2, run),
        [vec![
            ResultRef::Refusal {
                derivation_key: key
            },
            ResultRef::Invocation {
                invocation_id: row.id
            }
        ]]
    );
    let seen = planners.seen.lock().unwrap().clone();
    assert_eq!(
        seen[0].history[0][0],
        refusal.payload["result_item"].as_str().unwrap(),
        "the stored refusal item, byte-identically"
    );
    check_invariants(&sim, &p2, run);
}

#[tokio::test(start_paused = true)]
async fn after_batch_the_next_step_is_planned_once() {
    // A crash after BATCH of step 1: the next process plans step 2 and never repeats step 1.
    let sim = Sim::new();
    let h = &sim.first;
    let run = h
        .submit(h.script(json!([
            [call(
                "c1",
                "test.write_once",
                json!({"path": "notes/a.txt", "text": "a"})
            )],
            [call(
                "c2",
                "test.write_once",
                json!({"path": "notes/b.txt", "text": "b"})
            )]
        ])))
        .await;
    crash_at(h, &h.worker("w1"), CrashPoint::AfterBatch).await;
    assert_eq!(history_refs(h, run).len(), 1, "step 1 is recorded");

    let (p2, planners) = sim.restart();
    assert_eq!(reclaim_and_drive(&p2, &p2.worker("w2")).await, [COMPLETED]);
    let rows = p2.invocations(run);
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.status == InvocationStatus::Succeeded));
    let keys: BTreeSet<(String, bool)> = rows
        .iter()
        .map(|r| (r.idempotency_key.clone(), false))
        .collect();
    let effects = sim.effects("test.write_once");
    assert_eq!(effects.len(), 2);
    assert_eq!(effects.into_iter().collect::<BTreeSet<_>>(), keys);
    let steps: Vec<u32> = planners
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|t| t.step)
        .collect();
    assert_eq!(steps, [2, 3]);
    // Step 3 is planned in the same execution as step 2, so its history was extended by step 2
    // rather than reloaded: it must still be every step's stored items, in step order.
    let item = |i: usize| {
        rows[i]
            .result_item
            .clone()
            .expect("closed row has its item")
    };
    let histories: Vec<Vec<Vec<String>>> = planners
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|t| t.history.clone())
        .collect();
    assert_eq!(
        histories,
        [vec![vec![item(0)]], vec![vec![item(0)], vec![item(1)]]],
        "each turn sees the whole checkpointed history, byte-identically"
    );
    assert_eq!(p2.run(run).step_count, 3);
    check_invariants(&sim, &p2, run);
}

#[tokio::test(start_paused = true)]
async fn after_park_the_waiting_run_is_not_reclaimed_and_resumes_on_approval() {
    // A crash after PARK leaves a waiting run without a lease: nothing to reclaim, and the
    // approval resumes it.
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one(h, "test.send", json!({"text": "hi"})).await;
    crash_at(h, &h.worker("w1"), CrashPoint::AfterPark).await;
    assert_eq!(h.run(run).status(), RunStatus::WaitingForApproval);
    assert!(h.run(run).lease().is_none());

    let (p2, _) = sim.restart();
    let w2 = p2.worker("w2");
    p2.advance(PAST_LEASE_SECONDS).await;
    assert_eq!(
        w2.reclaim().await.unwrap(),
        0,
        "a waiting run is never reclaimed"
    );
    assert!(p2.drive(&w2).await.is_empty(), "nothing to claim");
    let approval = only_row(&p2, run).suspended_approval.unwrap();
    p2.control
        .resolve(&p2.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .unwrap();
    assert_eq!(p2.drive(&w2).await, [COMPLETED]);
    assert_eq!(sim.effects("test.send").len(), 1);
    assert_eq!(count(&p2, run, "approval.requested"), 1);
    assert_eq!(
        p2.store
            .transact(|tx| tx.approvals_of_run(run))
            .unwrap()
            .len(),
        1
    );
    assert_eq!(p2.run(run).attempts, 0);
    check_invariants(&sim, &p2, run);
}

#[tokio::test(start_paused = true)]
async fn after_final_nothing_is_left_to_do() {
    // A crash after FINAL leaves a terminal run that no later process touches.
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one(
        h,
        "test.write_once",
        json!({"path": "notes/a.txt", "text": "hi"}),
    )
    .await;
    crash_at(h, &h.worker("w1"), CrashPoint::AfterFinal).await;
    let done = h.run(run);
    assert_eq!(done.status(), RunStatus::Completed);

    let (p2, _) = sim.restart();
    let w2 = p2.worker("w2");
    p2.advance(PAST_LEASE_SECONDS).await;
    assert_eq!(w2.reclaim().await.unwrap(), 0);
    assert!(p2.drive(&w2).await.is_empty());
    assert_eq!(p2.run(run), done, "the terminal run is untouched");
    assert_eq!(count(&p2, run, "run.completed"), 1);
    assert_eq!(sim.effects("test.write_once").len(), 1);
    check_invariants(&sim, &p2, run);
}

/// The run parks on test.send, bob resolves it, and the resumed execution crashes after the
/// REVALIDATE transaction; returns the sim, the run and the row as the crash left it.
async fn crash_after_revalidate(resolution: ApprovalResolution) -> (Sim, RunId, Invocation) {
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one(h, "test.send", json!({"text": "hi"})).await;
    let w1 = h.worker("w1");
    assert_eq!(h.drive(&w1).await, [ExecutionEnd::Parked]);
    let approval = only_row(h, run).suspended_approval.unwrap();
    h.control
        .resolve(&h.bob(), approval, resolution, None)
        .await
        .unwrap();
    crash_at(h, &w1, CrashPoint::AfterRevalidate).await;
    let row = only_row(h, run);
    (sim, run, row)
}

#[tokio::test(start_paused = true)]
async fn after_revalidate_an_approved_call_is_never_sent_twice() {
    // REVALIDATE of an approved call also STARTs it (§17.1 F3): a crash right after that commit
    // leaves the non-idempotent call RUNNING with its watermark and its body not entered. The
    // recovery table cannot tell that from a crash inside the body, so the call becomes
    // UNCERTAIN (G4): it is never sent by the next process.
    let (sim, run, was) = crash_after_revalidate(ApprovalResolution::ApproveOnce).await;
    assert_eq!(was.status, InvocationStatus::Running);
    assert!(was.effect_sent_at.is_some(), "watermarked in REVALIDATE");
    assert!(sim.effects("test.send").is_empty());

    let (p2, _) = sim.restart();
    assert_eq!(reclaim_and_drive(&p2, &p2.worker("w2")).await, [COMPLETED]);
    let row = only_row(&p2, run);
    assert_eq!(row.status, InvocationStatus::Uncertain);
    assert_eq!(row.reason_code.as_deref(), Some(codes::OUTCOME_UNKNOWN));
    assert!(sim.effects("test.send").is_empty(), "never sent");
    assert_eq!(count(&p2, run, "tool.call.authorized"), 1);
    assert_eq!(count(&p2, run, "tool.call.started"), 1);
    assert_eq!(count(&p2, run, "approval.invalidated"), 0);
    let approvals = p2.store.transact(|tx| tx.approvals_of_run(run)).unwrap();
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0].status, ApprovalStatus::Approved);
    assert!(approvals[0].revalidated_policy_version.is_some());
    check_invariants(&sim, &p2, run);
}

#[tokio::test(start_paused = true)]
async fn after_revalidate_an_approved_idempotent_call_runs_once() {
    // The same crash for a call recovery may re-execute: it runs exactly once, started once.
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one(h, "test.send_idem", json!({"text": "hi"})).await;
    let w1 = h.worker("w1");
    assert_eq!(
        h.drive(&w1).await,
        [ExecutionEnd::Parked],
        "external writes need approval"
    );
    let approval = only_row(h, run).suspended_approval.unwrap();
    h.control
        .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .unwrap();
    crash_at(h, &w1, CrashPoint::AfterRevalidate).await;
    let (p2, _) = sim.restart();
    assert_eq!(reclaim_and_drive(&p2, &p2.worker("w2")).await, [COMPLETED]);
    let row = only_row(&p2, run);
    assert_eq!(row.status, InvocationStatus::Succeeded);
    assert_eq!(
        sim.effects("test.send_idem"),
        [(row.idempotency_key, false)]
    );
    assert_eq!(count(&p2, run, "tool.call.started"), 1, "started once");
    check_invariants(&sim, &p2, run);
}

#[tokio::test(start_paused = true)]
async fn after_revalidate_a_denied_call_returns_its_outcome() {
    // A denied approval closed the call at REVALIDATE; the next process returns that outcome.
    let (sim, run, was) = crash_after_revalidate(ApprovalResolution::Deny).await;
    assert_eq!(was.status, InvocationStatus::Denied);
    assert_eq!(was.reason_code.as_deref(), Some("approval.denied"));

    let (p2, _) = sim.restart();
    assert_eq!(reclaim_and_drive(&p2, &p2.worker("w2")).await, [COMPLETED]);
    assert_eq!(only_row(&p2, run), was, "RETURN_OUTCOME writes nothing");
    assert!(sim.effects("test.send").is_empty());
    check_invariants(&sim, &p2, run);
}

#[tokio::test(start_paused = true)]
async fn after_reclaim_the_requeued_run_is_claimed_and_completed() {
    // The first process crashes after CLAIM; the second crashes right after its RECLAIM commit;
    // a third finds the run QUEUED and finishes it.
    let sim = Sim::new();
    let h = &sim.first;
    let run = submit_one(
        h,
        "test.write_once",
        json!({"path": "notes/a.txt", "text": "hi"}),
    )
    .await;
    crash_at(h, &h.worker("w1"), CrashPoint::AfterClaim).await;

    let (p2, _) = sim.restart();
    let w2 = p2.worker("w2");
    p2.advance(PAST_LEASE_SECONDS).await;
    p2.crash.arm(CrashPoint::AfterReclaim);
    let reclaimed = tokio::select! {
        n = w2.reclaim() => Some(n),
        () = p2.crash.crashed() => None,
    };
    assert!(reclaimed.is_none(), "crashed after RECLAIM");
    assert_eq!(p2.run(run).status(), RunStatus::Queued);
    assert_eq!(p2.run(run).attempts, 1);

    let (p3, _) = sim.restart();
    let w3 = p3.worker("w3");
    assert_eq!(w3.reclaim().await.unwrap(), 0, "nothing left to reclaim");
    p3.advance(PAST_BACKOFF_SECONDS).await;
    assert_eq!(p3.drive(&w3).await, [COMPLETED]);
    let row = only_row(&p3, run);
    assert_eq!(row.status, InvocationStatus::Succeeded);
    assert_eq!(
        sim.effects("test.write_once"),
        [(row.idempotency_key, false)]
    );
    assert_eq!(p3.run(run).attempts, 1);
    check_invariants(&sim, &p3, run);
}

// ---------------------------------------------------------------------------------------------
// The pinned tool is gone in the new process (SPEC §9.4, last paragraph).
// ---------------------------------------------------------------------------------------------

/// A run crashed at `point` on `tool`, and a new process where `tool` is not registered. Only
/// an earlier build leaves an allowed call AUTHORIZED after PROPOSE (§17.1 F2 folds START in),
/// so `AfterPropose` seeds that build's state.
async fn restarted_without_tool(
    tool: &str,
    arguments: Value,
    point: CrashPoint,
) -> (Sim, Harness, RunId) {
    let sim = Sim::new();
    let h = &sim.first;
    let run = if point == CrashPoint::AfterPropose {
        submit_one_as_earlier_build(h, tool, arguments, point).await
    } else {
        let run = submit_one(h, tool, arguments).await;
        crash_at(h, &h.worker("w1"), point).await;
        run
    };
    let (p2, _) = sim.restart_without(Some(tool));
    (sim, p2, run)
}

/// [`restarted_without_tool`], then the new process reclaims and drives the run.
async fn resumed_without_tool(
    tool: &str,
    arguments: Value,
    point: CrashPoint,
) -> (Sim, Harness, RunId, Vec<ExecutionEnd>) {
    let (sim, p2, run) = restarted_without_tool(tool, arguments, point).await;
    let ends = reclaim_and_drive(&p2, &p2.worker("w2")).await;
    (sim, p2, run, ends)
}

#[tokio::test(start_paused = true)]
async fn running_watermarked_row_of_a_gone_tool_becomes_uncertain() {
    // REEXECUTE is due (idempotent) but the tool is gone: watermarked → UNCERTAIN.
    let (sim, p2, run, ends) = resumed_without_tool(
        "test.write_idem",
        json!({"path": "notes/a.txt", "text": "hi"}),
        CrashPoint::AfterStart,
    )
    .await;
    assert_eq!(ends, [COMPLETED]);
    let row = only_row(&p2, run);
    assert_eq!(row.status, InvocationStatus::Uncertain);
    assert_eq!(row.reason_code.as_deref(), Some(codes::OUTCOME_UNKNOWN));
    assert_eq!(count(&p2, run, "tool.call.uncertain"), 1);
    assert!(sim.effects("test.write_idem").is_empty());
    assert_eq!(p2.run(run).tool_call_count, 1);
    check_invariants(&sim, &p2, run);
}

#[tokio::test(start_paused = true)]
async fn running_unwatermarked_row_of_a_gone_tool_fails_internal_error() {
    // REEXECUTE is due (read_only, side effect none) but the tool is gone: FAILED.
    let (sim, p2, run, ends) =
        resumed_without_tool("test.echo", json!({"text": "hi"}), CrashPoint::AfterStart).await;
    assert_eq!(ends, [COMPLETED]);
    let row = only_row(&p2, run);
    assert_eq!(row.status, InvocationStatus::Failed);
    assert_eq!(row.reason_code.as_deref(), Some(codes::INTERNAL_ERROR));
    assert!(sim.effects("test.echo").is_empty());
    check_invariants(&sim, &p2, run);
}

#[tokio::test(start_paused = true)]
async fn authorized_row_of_a_gone_tool_is_closed_not_abandoned() {
    // RESUME_AUTHORIZATION would START and invoke, but the tool is gone. Whatever terminal
    // status the row takes, the execution must close it through a §9.1 transition and go on;
    // it must not write a transition the store rejects and leave the run to burn its attempts.
    let (sim, p2, run, ends) = resumed_without_tool(
        "test.write_once",
        json!({"path": "notes/a.txt", "text": "hi"}),
        CrashPoint::AfterPropose,
    )
    .await;
    let row = only_row(&p2, run);
    assert!(
        matches!(ends.as_slice(), [ExecutionEnd::Finished(_)]),
        "the resumed execution ended {ends:?} with the row {} and the run {:?}",
        row.status,
        p2.run(run).state
    );
    assert!(
        row.status.is_terminal(),
        "the row is closed: {}",
        row.status
    );
    assert_eq!(p2.run(run).attempts, 1);
    assert!(sim.effects("test.write_once").is_empty());
    check_invariants(&sim, &p2, run);
}

#[tokio::test(start_paused = true)]
async fn authorized_row_of_a_gone_tool_still_observes_step_8_first() {
    // §9.4: RESUME_AUTHORIZATION "goes to step 8". A cancel requested for the run ends it there,
    // before anything is written for the call, even when the pinned tool is gone: the row stays
    // AUTHORIZED (the terminal sweep closes it run_cancelled), nothing is counted or started.
    let (_sim, p2, run) = restarted_without_tool(
        "test.write_once",
        json!({"path": "notes/a.txt", "text": "hi"}),
        CrashPoint::AfterPropose,
    )
    .await;
    let stored = p2.run(run);
    let lease = stored.lease().expect("still RUNNING under w1's lease");
    let batch = p2
        .store
        .read(|tx| tx.latest_checkpoint(run))
        .unwrap()
        .and_then(|c| c.state.pending)
        .expect("the pending batch");
    let token = CancelToken::default();
    token.cancel(CancelReason::Requested);
    let site = CallSite {
        run: &stored,
        lease: &lease,
        step: batch.step,
        call: &batch.calls[0],
        parallel_group: None,
        origin_trust: TrustLevel::User,
        sequential: true,
        token: &token,
        worker_id: &lease.worker_id,
        ledger: None,
    };
    let before = count(&p2, run, "tool.call.started");

    let end = ToolPipeline::new(&p2.env).run_call(&site).await;

    assert_eq!(end, Err(Halt::Cancel));
    assert_eq!(only_row(&p2, run).status, InvocationStatus::Authorized);
    assert_eq!(count(&p2, run, "tool.call.started"), before);
    assert_eq!(p2.run(run).tool_call_count, stored.tool_call_count);
}
