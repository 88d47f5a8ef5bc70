//! One simulated world on madsim (only under `--cfg madsim`). The world supplies ports and
//! actors and decides nothing: each worker node's `init` runs core's unchanged `Worker` (with its
//! own `ControlService` for the approval sweep) over the one durable `SimStore`; a client node
//! runs the submitter, approver, canceller and reviewer through core's `ControlService`; the
//! supervisor (madsim's main task) injects the plan's faults, then runs a quiet phase and hands
//! back everything the checkers need.
//!
//! Crash model (SPEC §14): a node kill drops every task, token, heartbeat, inbox and provenance
//! map of that node; only committed transactions (and the outside world: the ledger and the
//! workspace files) survive. `restart` re-runs `init`, which is a process restart.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use airlock_core::action::JsonMap;
use airlock_core::control::{ControlService, ServiceError};
use airlock_core::env::Env;
use airlock_core::ids::RunId;
use airlock_core::live_policy::LivePolicy;
use airlock_core::mem_store::MemSnapshot;
use airlock_core::planner::script::ScriptedPlannerFactory;
use airlock_core::policy::Ruleset;
use airlock_core::ports::{
    BoxFut, Clock, Dispatcher, EntryKind, FaultHook, Planner, PlannerError, PlannerFactory,
    PlannerInput, PlannerTurn, Provenance, Spawner, Tool, ToolContext, ToolFailure, ToolSpec,
    ToolSuccess, Workspace, WorkspaceEntry, WorkspaceError, WorkspaceFactory, WsPath,
};
use airlock_core::principal::Principal;
use airlock_core::run::Run;
use airlock_core::scope::platform_scopes;
use airlock_core::testing::invariants::Effect;
use airlock_core::tool::registry::ToolRegistry;
use airlock_core::vocab::{
    ApprovalResolution, CrashPoint, IdempotencyClass, RunStatus, SettlementOutcome,
    ToolFailureKind, TrustLevel,
};
use airlock_core::worker::{Worker, WorkerSettings};
use madsim::runtime::Handle;
use madsim::task::NodeId;
use madsim::time::sleep;
use madsim_tokio::sync::mpsc;
use serde_json::{Value, json};

use crate::catalog::{self, Body, Catalog};
use crate::checks::{Observations, QuietEnd, ReadRecord, ResolveRecord, WriteRecord};
use crate::plan::{APPROVER_MOVES, ApproverMove, Plan, PlannerFaultKind, SimRng, point_index};
use crate::ports::{EPOCH_MICROS, SeqIds, SimClock};
use crate::store::{CommitFindings, CommitRecord, SimStore};
use crate::timeline::{
    CancelCall, ExecutionSpan, Incarnation, NodeChange, NodeEvent, ResumeCall, SessionSubmit,
    WorkItem,
};

/// How long the quiet phase may take before liveness fails (simulated).
const QUIET_BOUND: Duration = Duration::from_secs(600);
/// The supervisor's step.
const TICK: Duration = Duration::from_millis(100);

/// Everything a seed leaves for the checkers and the report.
pub struct Outcome {
    pub snapshot: MemSnapshot,
    pub commits: Vec<CommitRecord>,
    pub findings: CommitFindings,
    pub observations: Observations,
    pub quiet: QuietEnd,
    pub faults: BTreeMap<String, u64>,
    pub fault_log: Vec<String>,
    pub simulated: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Worker,
    Client,
}

struct Slot {
    name: String,
    role: Role,
    id: Option<NodeId>,
    incarnation: u32,
    down_until: Option<Duration>,
    paused_until: Option<Duration>,
    inbox: Option<mpsc::UnboundedSender<RunId>>,
}

#[derive(Default)]
struct FaultLog {
    counts: BTreeMap<String, u64>,
    log: Vec<String>,
}

pub struct World {
    plan: Plan,
    rng: Mutex<SimRng>,
    store: Arc<SimStore>,
    clock: SimClock,
    ids: Arc<SeqIds>,
    observations: Mutex<Observations>,
    /// The simulated services' memory of applied idempotency keys (their responses).
    services: Mutex<BTreeMap<String, Value>>,
    /// Workspace files: the outside world, so they survive restarts.
    files: Files,
    /// 0: chaos, 1: quiet.
    phase: AtomicU8,
    nodes: Mutex<Vec<Slot>>,
    next_submission: AtomicUsize,
    faults: Mutex<FaultLog>,
    shipped: Arc<Ruleset>,
    rollout: Arc<Ruleset>,
}

/// Workspace files by tenant, run and relative path: the outside world, durable.
type Files = Arc<Mutex<BTreeMap<(String, RunId, String), Vec<u8>>>>;
/// What one process incarnation wrote (tenant, run, path, bytes): its provenance memory.
type Written = Arc<Mutex<BTreeSet<(String, RunId, String, Vec<u8>)>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn alice() -> Principal {
    Principal {
        tenant_id: "acme".into(),
        principal_id: "alice".into(),
        scopes: platform_scopes(),
    }
}

fn bob() -> Principal {
    Principal {
        tenant_id: "acme".into(),
        principal_id: "bob".into(),
        scopes: platform_scopes(),
    }
}

impl World {
    fn draw<R>(&self, f: impl FnOnce(&mut SimRng) -> R) -> R {
        f(&mut lock(&self.rng))
    }

    fn chaos(&self) -> bool {
        self.phase.load(Ordering::SeqCst) == 0
    }

    fn observations(&self) -> MutexGuard<'_, Observations> {
        lock(&self.observations)
    }

    fn fault(&self, kind: &str, detail: String) {
        let elapsed = self.clock.elapsed();
        let mut faults = lock(&self.faults);
        *faults.counts.entry(kind.to_owned()).or_default() += 1;
        faults
            .log
            .push(format!("t={:.3}s {kind}: {detail}", elapsed.as_secs_f64()));
    }

    /// Kills node `index` (a process crash) and schedules its restart.
    fn kill(&self, index: usize, kind: &str, detail: String) {
        let downtime = self.draw(|r| r.range(self.plan.downtime_ms.0, self.plan.downtime_ms.1));
        let now = self.clock.elapsed();
        let name = {
            let mut nodes = lock(&self.nodes);
            let slot = &mut nodes[index];
            if slot.down_until.is_some() {
                return;
            }
            let Some(id) = slot.id else { return };
            Handle::current().kill(id);
            slot.inbox = None;
            slot.paused_until = None;
            slot.down_until = Some(now + Duration::from_millis(downtime));
            format!("{}.{}", slot.name, slot.incarnation)
        };
        self.node_changed(index, &name, NodeChange::Killed);
        self.fault(kind, format!("{name} {detail}"));
    }

    fn node_changed(&self, node: usize, incarnation: &str, change: NodeChange) {
        let at = self.clock.mono();
        self.observations().timeline.nodes.push(NodeEvent {
            at,
            node,
            incarnation: incarnation.to_owned(),
            change,
        });
    }

    /// A new incarnation of node `index`; returns its process name.
    fn begin_incarnation(&self, index: usize) -> String {
        let name = {
            let mut nodes = lock(&self.nodes);
            let slot = &mut nodes[index];
            slot.incarnation += 1;
            format!("{}.{}", slot.name, slot.incarnation)
        };
        self.node_changed(index, &name, NodeChange::Started);
        name
    }

    fn env(
        self: &Arc<Self>,
        index: usize,
        incarnation: &str,
        ruleset: Arc<Ruleset>,
        tools: Catalog,
    ) -> Env<SimStore> {
        let mut registry = ToolRegistry::new();
        for (spec, body) in catalog::catalog(tools) {
            registry
                .register(Arc::new(SimTool {
                    spec,
                    body,
                    world: Arc::clone(self),
                    node: index,
                    incarnation: incarnation.to_owned(),
                }))
                .expect("the simulated tools register");
        }
        Env {
            store: Arc::clone(&self.store),
            clock: Arc::new(self.clock.clone()),
            ids: self.ids.clone(),
            policy: LivePolicy::new(ruleset, None),
            tools: Arc::new(registry),
            workspaces: Some(Arc::new(SimWorkspaces {
                files: Arc::clone(&self.files),
                written: Arc::new(Mutex::new(BTreeSet::new())),
            })),
            planners: Arc::new(SimPlanners {
                world: Arc::clone(self),
                incarnation: incarnation.to_owned(),
            }),
            faults: Arc::new(SimFaults {
                world: Arc::clone(self),
                node: index,
            }),
        }
    }

    fn dispatcher(self: &Arc<Self>) -> Arc<dyn Dispatcher> {
        Arc::new(SimDispatcher {
            world: Arc::clone(self),
        })
    }

    /// A dispatch hint on its way to a worker: lost, duplicated or late while faults run.
    fn deliver(&self, run: RunId, what: &str) {
        if self.store.transaction_open() {
            self.observations()
                .open_transaction_calls
                .push(format!("dispatcher.{what}({run}) ran inside a transaction"));
        }
        let chaos = self.chaos();
        let (lost, copies, delay_ms) = self.draw(|r| {
            let lost = chaos && r.chance(self.plan.lost_dispatch);
            let copies = if chaos && r.chance(self.plan.duplicate_dispatch) {
                2
            } else {
                1
            };
            let delay = if chaos && r.chance(self.plan.delayed_dispatch) {
                r.range(1, 3_000)
            } else {
                0
            };
            (lost, copies, delay)
        });
        if lost {
            self.fault("dispatch_lost", format!("{what} {run}"));
            return;
        }
        if copies > 1 {
            self.fault("dispatch_duplicated", format!("{what} {run}"));
        }
        let inboxes: Vec<mpsc::UnboundedSender<RunId>> = lock(&self.nodes)
            .iter()
            .filter(|s| s.role == Role::Worker && s.down_until.is_none())
            .filter_map(|s| s.inbox.clone())
            .collect();
        if inboxes.is_empty() {
            return;
        }
        for _ in 0..copies {
            let inbox = self.draw(|r| r.pick(&inboxes).clone());
            if delay_ms == 0 {
                let _ = inbox.send(run);
            } else {
                madsim::task::spawn(async move {
                    sleep(Duration::from_millis(delay_ms)).await;
                    let _ = inbox.send(run);
                });
            }
        }
    }

    /// One incarnation of a worker process.
    async fn worker_main(self: Arc<Self>, index: usize) {
        let name = self.begin_incarnation(index);
        let (rollout, new_catalog) = self.draw(|r| {
            (
                r.chance(self.plan.rollout),
                r.chance(self.plan.catalog_rollout),
            )
        });
        let chaos = self.chaos();
        let ruleset = if chaos && rollout {
            Arc::clone(&self.rollout)
        } else {
            Arc::clone(&self.shipped)
        };
        let tools = if chaos && new_catalog {
            Catalog::Rollout
        } else {
            Catalog::Base
        };
        self.observations().timeline.incarnations.insert(
            name.clone(),
            Incarnation {
                node: Some(index),
                catalog: tools,
                policy_version: ruleset.version.as_str().to_owned(),
            },
        );
        let env = self.env(index, &name, ruleset, tools);
        let settings = WorkerSettings {
            worker_id: name.clone(),
            lease_ms: self.plan.lease_ms,
            poll_ms: self.plan.poll_ms,
            reclaim_every_ms: self.plan.reclaim_every_ms,
            approval_sweep_every_ms: self.plan.approval_sweep_every_ms,
            max_attempts: self.plan.max_attempts,
            concurrency: self.plan.concurrency,
        };
        let worker = Worker::new(env.clone(), settings);
        let control = ControlService::new(env, self.dispatcher(), Some(worker.tokens().clone()));
        if let Err(error) = control.record_policy_profile(&name).await {
            self.observations()
                .worker_errors
                .push(format!("{name}: PROFILE failed: {error}"));
            return;
        }
        let (sender, mut receiver) = mpsc::unbounded_channel();
        lock(&self.nodes)[index].inbox = Some(sender);
        let listener = Arc::clone(&worker);
        let spawner = SimSpawner {
            world: Arc::clone(&self),
            incarnation: name.clone(),
        };
        let inline = SimSpawner {
            world: Arc::clone(&self),
            incarnation: name.clone(),
        };
        madsim::task::spawn(async move {
            // The inline dispatcher (SPEC §10.5): CLAIM restricted to the hinted run.
            while let Some(run) = receiver.recv().await {
                let worker = Arc::clone(&listener);
                inline.spawn(Box::pin(async move {
                    let _ = worker.run_inline(run).await;
                }));
            }
        });
        if let Err(error) = worker.run(&spawner, &control, &|| false).await {
            self.observations()
                .worker_errors
                .push(format!("{name}: worker loop ended: {error:?}"));
        }
    }

    /// One incarnation of the client process: submitter, approver, canceller, reviewer.
    async fn client_main(self: Arc<Self>, index: usize) {
        let name = self.begin_incarnation(index);
        let env = self.env(index, &name, Arc::clone(&self.shipped), Catalog::Base);
        let control = Arc::new(ControlService::new(env, self.dispatcher(), None));
        madsim::task::spawn(Arc::clone(&self).submitter(Arc::clone(&control)));
        if self.plan.resume_per_s > 0.0 {
            madsim::task::spawn(Arc::clone(&self).resumer(Arc::clone(&control)));
        }
        madsim::task::spawn(Arc::clone(&self).approver(Arc::clone(&control)));
        if self.plan.cancel_per_s > 0.0 {
            madsim::task::spawn(Arc::clone(&self).canceller(Arc::clone(&control)));
        }
        if self.plan.settle_per_s > 0.0 {
            madsim::task::spawn(Arc::clone(&self).reviewer(Arc::clone(&control)));
        }
        std::future::pending::<()>().await;
    }

    async fn submitter(self: Arc<Self>, control: Arc<ControlService<SimStore>>) {
        loop {
            let index = self.next_submission.load(Ordering::SeqCst);
            let Some(planned) = self.plan.runs.get(index) else {
                return;
            };
            let due = Duration::from_millis(planned.at_ms);
            let now = self.clock.elapsed();
            if due > now {
                sleep(due - now).await;
            }
            if !self.chaos() {
                return;
            }
            let Some(earlier) = planned.session_of else {
                // At most once: a crash after SUBMIT commits loses the answer, not the run.
                self.next_submission.fetch_add(1, Ordering::SeqCst);
                let _ = control
                    .submit_run(&alice(), &planned.script.to_string())
                    .await;
                continue;
            };
            // A follow-up in the session of an earlier planned run (SPEC §15): the session is
            // read back from the store (the submitter may have lost SUBMIT's answer in a
            // crash). While that run is active the submission must be refused; the submitter
            // tries again until it is accepted or the chaos phase ends.
            let marker = format!("\"final_message\":\"run {earlier} done\"");
            let session = self.store.inspect(|s| {
                s.runs
                    .values()
                    .find(|r| r.planner_input.contains(&marker))
                    .map(|r| r.session_id)
            });
            let Some(session) = session else {
                // The earlier run was never submitted: nothing to follow up.
                self.next_submission.fetch_add(1, Ordering::SeqCst);
                continue;
            };
            let mut script = planned.script.clone();
            script["session_id"] = json!(session.to_string());
            let answer = control.submit_run(&alice(), &script.to_string()).await;
            let committed_after = self.store.committed();
            let accepted = answer.is_ok();
            self.observations()
                .timeline
                .session_submits
                .push(SessionSubmit {
                    planned: index,
                    session,
                    committed_after,
                    answer: answer.map(|s| s.run_id).map_err(|e| e.code().to_owned()),
                });
            if accepted {
                self.next_submission.fetch_add(1, Ordering::SeqCst);
            } else {
                let wait = self.draw(|r| r.range(500, 3_000));
                sleep(Duration::from_millis(wait)).await;
            }
        }
    }

    /// `resume_run` (SPEC §10.4) on a random run now and then: a QUEUED run that is due is
    /// handed to the inline dispatcher, any other (one still in its §8.2 back-off too) is
    /// refused with `Conflict`.
    async fn resumer(self: Arc<Self>, control: Arc<ControlService<SimStore>>) {
        let mean_ms = (1_000.0 / self.plan.resume_per_s) as u64;
        while self.chaos() {
            let pause = self.draw(|r| r.range(1, 2 * mean_ms.max(2)));
            sleep(Duration::from_millis(pause)).await;
            if !self.chaos() {
                return;
            }
            let runs: Vec<RunId> = self.store.inspect(|s| s.runs.keys().copied().collect());
            if runs.is_empty() {
                continue;
            }
            let run = self.draw(|r| *r.pick(&runs));
            let committed_before = self.store.committed();
            // `resume_run` does not await, so no other task (nor a clock jump) runs between this
            // reading and the service's own.
            let at = self.clock.now();
            let answer = control
                .resume_run(&alice(), run)
                .map_err(|e| e.code().to_owned());
            self.observations().timeline.resumes.push(ResumeCall {
                committed_before,
                at,
                run,
                answer,
            });
        }
    }

    fn record_resolve(
        &self,
        approval: airlock_core::ids::ApprovalId,
        requested: ApprovalResolution,
        answer: Result<airlock_core::control::Resolved, ServiceError>,
    ) {
        self.observations().resolves.push(ResolveRecord {
            approval,
            requested,
            answer: answer.map(|r| r.state),
        });
    }

    async fn resolve(
        self: Arc<Self>,
        control: Arc<ControlService<SimStore>>,
        approval: airlock_core::ids::ApprovalId,
        resolution: ApprovalResolution,
    ) {
        let answer = control
            .resolve(&bob(), approval, resolution, Some("simulated approver"))
            .await;
        self.record_resolve(approval, resolution, answer);
    }

    async fn approver(self: Arc<Self>, control: Arc<ControlService<SimStore>>) {
        use ApprovalResolution::{ApproveOnce, Deny};
        while self.chaos() {
            let pause = self.draw(|r| {
                r.range(
                    self.plan.approver_period_ms.0,
                    self.plan.approver_period_ms.1,
                )
            });
            sleep(Duration::from_millis(pause)).await;
            if !self.chaos() {
                return;
            }
            let Ok(page) = control.list_pending(&bob(), None, Some(100), None) else {
                continue;
            };
            for approval in page.items {
                let the_move =
                    self.draw(|r| APPROVER_MOVES[r.weighted(&self.plan.approver_weights)]);
                let id = approval.id;
                let spawn_resolve = |resolution| {
                    madsim::task::spawn(Arc::clone(&self).resolve(
                        Arc::clone(&control),
                        id,
                        resolution,
                    ))
                };
                match the_move {
                    ApproverMove::Approve => {
                        Arc::clone(&self)
                            .resolve(Arc::clone(&control), id, ApproveOnce)
                            .await
                    }
                    ApproverMove::Deny => {
                        Arc::clone(&self)
                            .resolve(Arc::clone(&control), id, Deny)
                            .await
                    }
                    ApproverMove::Ignore => {}
                    ApproverMove::Duplicate => {
                        let resolution = if self.draw(|r| r.chance(0.5)) {
                            ApproveOnce
                        } else {
                            Deny
                        };
                        let a = spawn_resolve(resolution);
                        let b = spawn_resolve(resolution);
                        let _ = (a.await, b.await);
                    }
                    ApproverMove::RaceResolutions => {
                        let a = spawn_resolve(ApproveOnce);
                        let b = spawn_resolve(Deny);
                        let _ = (a.await, b.await);
                    }
                    ApproverMove::RaceCancel => {
                        let a = spawn_resolve(ApproveOnce);
                        let canceller = Arc::clone(&control);
                        let run = approval.run_id;
                        let b = madsim::task::spawn(async move {
                            let _ = canceller.cancel_run(&alice(), run).await;
                        });
                        let _ = (a.await, b.await);
                    }
                    ApproverMove::RaceExpire => {
                        let a = spawn_resolve(ApproveOnce);
                        let expirer = Arc::clone(&control);
                        let b = madsim::task::spawn(async move {
                            let _ = expirer.expire_due(&bob()).await;
                        });
                        let _ = (a.await, b.await);
                    }
                }
            }
        }
    }

    async fn canceller(self: Arc<Self>, control: Arc<ControlService<SimStore>>) {
        let mean_ms = (1_000.0 / self.plan.cancel_per_s) as u64;
        while self.chaos() {
            let pause = self.draw(|r| r.range(1, 2 * mean_ms.max(2)));
            sleep(Duration::from_millis(pause)).await;
            if !self.chaos() {
                return;
            }
            let (runs, running): (Vec<RunId>, Vec<RunId>) = self.store.inspect(|s| {
                (
                    s.runs.keys().copied().collect(),
                    s.runs
                        .values()
                        .filter(|r| r.status() == RunStatus::Running)
                        .map(|r| r.id)
                        .collect(),
                )
            });
            if runs.is_empty() {
                continue;
            }
            let (run, twice) = self.draw(|r| {
                let pool = if !running.is_empty() && r.chance(self.plan.cancel_running_bias) {
                    &running
                } else {
                    &runs
                };
                (*r.pick(pool), r.chance(0.2))
            });
            let at = self.clock.mono();
            self.observations()
                .timeline
                .cancels
                .push(CancelCall { at, run });
            let _ = control.cancel_run(&alice(), run).await;
            if twice {
                let _ = control.cancel_run(&alice(), run).await;
            }
        }
    }

    async fn reviewer(self: Arc<Self>, control: Arc<ControlService<SimStore>>) {
        let mean_ms = (1_000.0 / self.plan.settle_per_s) as u64;
        while self.chaos() {
            let pause = self.draw(|r| r.range(1, 2 * mean_ms.max(2)));
            sleep(Duration::from_millis(pause)).await;
            let Ok(queue) = control.list_uncertain(&bob(), false) else {
                continue;
            };
            if let Some(invocation) = queue.first() {
                let outcome = if self.draw(|r| r.chance(0.5)) {
                    SettlementOutcome::Succeeded
                } else {
                    SettlementOutcome::Failed
                };
                let _ = control
                    .settle(&bob(), invocation.id, outcome, "checked the ledger")
                    .await;
            }
        }
    }

    /// A run as the previous build left it in the store this world starts from (SPEC §17.1:
    /// that build committed PENDING and each PROPOSE separately and did not fold START, so a
    /// crash could leave an allowed call AUTHORIZED): RUNNING under a lease whose holder is
    /// gone, its first step recorded as a sequential batch whose first call is AUTHORIZED for
    /// `sim.legacy_export`, a tool this build no longer registers. Reclaim re-queues it and
    /// §9.4's unstartable RECOVER closes that call. Written with core's own earlier-build
    /// helpers, under a process name of its own (`legacy.N`) that never runs again.
    async fn seed_legacy_run(self: Arc<Self>, index: usize) {
        use airlock_core::testing::earlier_build::{propose_first, record_pending};
        let name = format!("legacy.{}", index + 1);
        self.observations().timeline.incarnations.insert(
            name.clone(),
            Incarnation {
                node: None,
                catalog: Catalog::Legacy,
                policy_version: self.shipped.version.as_str().to_owned(),
            },
        );
        let mut env = self.env(0, &name, Arc::clone(&self.shipped), Catalog::Legacy);
        env.faults = Arc::new(NoFaults);
        let trust = json!({"path": "user", "text": "user"});
        let first = vec![
            json!({"call_id": "c1", "tool": "sim.legacy_export",
                   "arguments": {"path": format!("legacy/{index}.txt"), "text": "old"},
                   "argument_trust": trust}),
            json!({"call_id": "c2", "tool": "sim.lookup",
                   "arguments": {"text": format!("legacy {index}")}, "argument_trust": trust}),
        ];
        let script = json!({
            "schema_version": 1, "tenant_id": "acme", "principal_id": "alice",
            "principal_scopes": ["workspace.read", "workspace.write", "demo.write"],
            "origin_trust": "user",
            "limits": {"max_steps": 4, "max_tool_calls": 16},
            "steps": [
                {"calls": first},
                {"calls": [{"call_id": "c3", "tool": "sim.note",
                            "arguments": {"path": format!("legacy/n{index}.txt"), "text": "new"},
                            "argument_trust": trust}]},
            ],
            "final_message": format!("legacy {index} done"),
        });
        let control = ControlService::new(env.clone(), self.dispatcher(), None);
        let Ok(submitted) = control.submit_run(&alice(), &script.to_string()).await else {
            self.observations()
                .worker_errors
                .push(format!("{name}: the legacy run was not submitted"));
            return;
        };
        let mut settings = WorkerSettings::new(name.clone());
        settings.lease_ms = self.plan.lease_ms;
        let worker = Worker::new(env.clone(), settings);
        let Ok(Some((_, lease))) = worker.claim(Some(submitted.run_id)).await else {
            self.observations()
                .worker_errors
                .push(format!("{name}: the legacy run was not claimed"));
            return;
        };
        let calls: Vec<airlock_core::ports::ProposedCall> = first
            .into_iter()
            .filter_map(|call| serde_json::from_value(call).ok())
            .collect();
        let batch = record_pending(&env, &lease, calls);
        propose_first(&env, &lease, &batch);
    }

    /// The supervisor: faults during the chaos phase, then a quiet phase until every run is
    /// terminal or parked (or the bound passes).
    async fn supervise(self: Arc<Self>) -> QuietEnd {
        let chaos_until = Duration::from_millis(self.plan.chaos_ms);
        let tick = TICK.as_secs_f64();
        while self.clock.elapsed() < chaos_until {
            sleep(TICK).await;
            self.wake_due_nodes(false);
            let (kill, pause, jump) = self.draw(|r| {
                (
                    r.chance(self.plan.random_kill_per_s * tick),
                    r.chance(self.plan.pause_per_s * tick),
                    r.chance(self.plan.jump_per_s * tick),
                )
            });
            if kill && let Some(index) = self.random_live_worker() {
                self.kill(index, "kill_random_await", "at a random await".to_owned());
            }
            if pause && let Some(index) = self.random_live_worker() {
                let lease = self.plan.lease_ms;
                let length = self.draw(|r| r.range(lease + lease / 3, 3 * lease));
                let now = self.clock.elapsed();
                let name = {
                    let mut nodes = lock(&self.nodes);
                    let slot = &mut nodes[index];
                    if let Some(id) = slot.id {
                        Handle::current().pause(id);
                    }
                    slot.paused_until = Some(now + Duration::from_millis(length));
                    format!("{}.{}", slot.name, slot.incarnation)
                };
                self.node_changed(index, &name, NodeChange::Paused);
                self.fault("pause_zombie", format!("{name} for {length} ms"));
            }
            if jump {
                let seconds = self.draw(|r| {
                    *r.pick(&[
                        (2 * self.plan.lease_ms / 1000).max(1) as i64,
                        600,
                        3_600,
                        4 * 3_600,
                        86_400,
                        86_400,
                    ])
                });
                self.clock.jump_wall(seconds);
                let at = self.clock.mono();
                self.observations()
                    .timeline
                    .jumps
                    .push((at, seconds * 1_000_000));
                self.fault("clock_jump", format!("+{seconds} s"));
            }
        }
        // Quiet phase: no new faults; every node up.
        self.phase.store(1, Ordering::SeqCst);
        self.wake_due_nodes(true);
        // A control run that meets no fault at all: it must complete (checks::control_runs).
        let control = ControlService::new(
            self.env(0, "supervisor", Arc::clone(&self.shipped), Catalog::Base),
            self.dispatcher(),
            None,
        );
        let _ = control
            .submit_run(&alice(), &self.plan.quiet_control.to_string())
            .await;
        let quiet_until = self.clock.elapsed() + QUIET_BOUND;
        loop {
            sleep(Duration::from_millis(500)).await;
            self.wake_due_nodes(true);
            let settled = self.store.inspect(|s| {
                s.runs.values().all(|r| {
                    r.status().is_terminal() || r.status() == RunStatus::WaitingForApproval
                })
            });
            if settled {
                return QuietEnd { settled: true };
            }
            if self.clock.elapsed() >= quiet_until {
                return QuietEnd { settled: false };
            }
        }
    }

    fn random_live_worker(&self) -> Option<usize> {
        let live: Vec<usize> = lock(&self.nodes)
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.role == Role::Worker && s.down_until.is_none() && s.paused_until.is_none()
            })
            .map(|(i, _)| i)
            .collect();
        if live.is_empty() {
            None
        } else {
            Some(self.draw(|r| *r.pick(&live)))
        }
    }

    /// Restarts killed nodes and resumes paused ones whose time has come (all of them if `all`).
    fn wake_due_nodes(&self, all: bool) {
        let now = self.clock.elapsed();
        let mut resumed = Vec::new();
        {
            let mut nodes = lock(&self.nodes);
            for (index, slot) in nodes.iter_mut().enumerate() {
                let Some(id) = slot.id else { continue };
                if slot.paused_until.is_some_and(|t| all || now >= t) {
                    slot.paused_until = None;
                    Handle::current().resume(id);
                    resumed.push((index, format!("{}.{}", slot.name, slot.incarnation)));
                }
                if slot.down_until.is_some_and(|t| all || now >= t) {
                    slot.down_until = None;
                    Handle::current().restart(id);
                }
            }
        }
        for (index, name) in resumed {
            self.node_changed(index, &name, NodeChange::Resumed);
        }
    }
}

/// Runs one world to its end; call inside a madsim runtime seeded with `plan.seed`.
pub async fn simulate(plan: Plan) -> Outcome {
    let seed = plan.seed;
    let world = Arc::new(World {
        rng: Mutex::new(SimRng::new(seed, 1)),
        store: SimStore::shared(),
        clock: SimClock::starting_now(),
        ids: Arc::new(SeqIds::new(seed, 1)),
        observations: Mutex::new(Observations::default()),
        services: Mutex::new(BTreeMap::new()),
        files: Arc::new(Mutex::new(BTreeMap::new())),
        phase: AtomicU8::new(0),
        nodes: Mutex::new(Vec::new()),
        next_submission: AtomicUsize::new(0),
        faults: Mutex::new(FaultLog::default()),
        shipped: Arc::new(catalog::ruleset_base(plan.profile)),
        rollout: Arc::new(catalog::ruleset_rollout(plan.profile)),
        plan,
    });
    {
        let clock = world.clock.clone();
        world.store.set_clock(Arc::new(move || clock.moment()));
        world.observations().timeline.epoch_wall = EPOCH_MICROS;
    }
    // A store written by the previous build, when the plan says so (SPEC §17.1, §9.4).
    for index in 0..world.plan.legacy_runs {
        Arc::clone(&world).seed_legacy_run(index).await;
    }
    {
        let mut nodes = lock(&world.nodes);
        for i in 0..world.plan.workers {
            nodes.push(Slot {
                name: format!("w{i}"),
                role: Role::Worker,
                id: None,
                incarnation: 0,
                down_until: None,
                paused_until: None,
                inbox: None,
            });
        }
        nodes.push(Slot {
            name: "client".into(),
            role: Role::Client,
            id: None,
            incarnation: 0,
            down_until: None,
            paused_until: None,
            inbox: None,
        });
    }
    let handle = Handle::current();
    let count = world.plan.workers + 1;
    for index in 0..count {
        let for_init = Arc::clone(&world);
        let (name, role) = {
            let nodes = lock(&world.nodes);
            (nodes[index].name.clone(), nodes[index].role)
        };
        let node = handle
            .create_node()
            .name(name)
            .init(move || {
                let world = Arc::clone(&for_init);
                async move {
                    match role {
                        Role::Worker => world.worker_main(index).await,
                        Role::Client => world.client_main(index).await,
                    }
                }
            })
            .build();
        lock(&world.nodes)[index].id = Some(node.id());
    }
    let quiet = Arc::clone(&world).supervise().await;
    let simulated = world.clock.elapsed();
    // Stop every node so nothing runs while the outcome is collected.
    for slot in lock(&world.nodes).iter() {
        if let Some(id) = slot.id {
            handle.kill(id);
        }
    }
    let snapshot = world.store.snapshot();
    let end = world.clock.mono();
    let (commits, findings) = {
        let mut log = world.store.log();
        (std::mem::take(&mut log.commits), log.take_findings())
    };
    let mut observations = std::mem::take(&mut *world.observations());
    observations.timeline.end = end;
    let faults = std::mem::take(&mut *lock(&world.faults));
    Outcome {
        snapshot,
        commits,
        findings,
        observations,
        quiet,
        faults: faults.counts,
        fault_log: faults.log,
        simulated,
    }
}

/// Spawns a worker incarnation's executions, recording each as an [`ExecutionSpan`] (a slot of
/// the worker's `concurrency`) from spawn until the task ends or dies with its node.
struct SimSpawner {
    world: Arc<World>,
    incarnation: String,
}

impl Spawner for SimSpawner {
    fn spawn(&self, f: BoxFut<'static, ()>) {
        let world = Arc::clone(&self.world);
        let start = world.clock.mono();
        let index = {
            let mut observations = world.observations();
            observations.timeline.executions.push(ExecutionSpan {
                incarnation: self.incarnation.clone(),
                start,
                end: None,
            });
            observations.timeline.executions.len() - 1
        };
        madsim::task::spawn(async move {
            let _span = Ended {
                world,
                what: Span::Execution(index),
            };
            f.await;
        });
    }
}

/// Which record an [`Ended`] guard closes.
enum Span {
    Execution(usize),
    Planner(usize),
    Tool(usize),
}

/// Closes a record of the timeline when the work it follows ends in any way: it returns, times
/// out (its future is dropped), panics, or dies with its node.
struct Ended {
    world: Arc<World>,
    what: Span,
}

impl Drop for Ended {
    fn drop(&mut self) {
        let at = self.world.clock.mono();
        let mut observations = self.world.observations();
        let timeline = &mut observations.timeline;
        let end = match self.what {
            Span::Execution(i) => timeline.executions.get_mut(i).map(|e| &mut e.end),
            Span::Planner(i) => timeline.planner_turns.get_mut(i).map(|e| &mut e.end),
            Span::Tool(i) => timeline.tool_bodies.get_mut(i).map(|e| &mut e.end),
        };
        if let Some(end) = end
            && end.is_none()
        {
            *end = Some(at);
        }
    }
}

struct SimDispatcher {
    world: Arc<World>,
}

impl Dispatcher for SimDispatcher {
    fn dispatch(&self, run: RunId) {
        self.world.deliver(run, "dispatch");
    }
    fn resume(&self, run: RunId) {
        self.world.deliver(run, "resume");
    }
}

/// Kills the node at a crash point with the plan's probability: the awaiting future never
/// completes and madsim drops every task of the node. Otherwise, now and then, it pauses for a
/// few milliseconds: core's transactions are synchronous and it yields only at the planner,
/// tools and sleeps, so without this nothing else (a cancel, a reclaim, an expiry, a zombie's
/// commit) could ever land between two consecutive transactions of one execution.
struct SimFaults {
    world: Arc<World>,
    node: usize,
}

impl FaultHook for SimFaults {
    fn reached(&self, point: CrashPoint) -> BoxFut<'static, ()> {
        let world = &self.world;
        let kill =
            world.chaos() && world.draw(|r| r.chance(world.plan.kill_at[point_index(point)]));
        if kill {
            world.kill(self.node, &format!("kill_{point}"), format!("at {point}"));
            return Box::pin(std::future::pending());
        }
        let pause_ms = world.draw(|r| if r.chance(0.25) { r.range(1, 6) } else { 0 });
        if pause_ms > 0 {
            return Box::pin(sleep(Duration::from_millis(pause_ms)));
        }
        Box::pin(std::future::ready(()))
    }
}

/// The fault hook of a process that is not simulated (the previous build's): it never stops.
struct NoFaults;

impl FaultHook for NoFaults {
    fn reached(&self, _point: CrashPoint) -> BoxFut<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

struct SimPlanners {
    world: Arc<World>,
    incarnation: String,
}

impl PlannerFactory for SimPlanners {
    fn for_run(&self, run: &Run) -> Result<Arc<dyn Planner>, PlannerError> {
        let final_message = serde_json::from_str::<Value>(&run.planner_input)
            .ok()
            .and_then(|v| v["final_message"].as_str().map(str::to_owned))
            .unwrap_or_default();
        Ok(Arc::new(SimPlanner {
            inner: ScriptedPlannerFactory.for_run(run)?,
            world: Arc::clone(&self.world),
            incarnation: self.incarnation.clone(),
            fault: self.world.plan.planner_fault(&final_message),
        }))
    }
}

/// Core's scripted planner behind a simulated thinking time (now and then seconds long, as a
/// language model's), failing on purpose at the step the plan gives it (SPEC §8.3
/// `planner_error`).
struct SimPlanner {
    inner: Arc<dyn Planner>,
    world: Arc<World>,
    incarnation: String,
    fault: Option<crate::plan::PlannerFault>,
}

impl Planner for SimPlanner {
    fn next_turn<'a>(
        &'a self,
        input: PlannerInput<'a>,
    ) -> BoxFut<'a, Result<PlannerTurn, PlannerError>> {
        Box::pin(async move {
            if self.world.store.transaction_open() {
                self.world
                    .observations()
                    .open_transaction_calls
                    .push(format!(
                        "the planner ran inside a transaction (run {})",
                        input.run.id
                    ));
            }
            if let Some(planned) = self.world.store.planned_through(input.run)
                && input.step <= planned
            {
                self.world.observations().replanned.push(format!(
                    "run {}: the planner was asked for step {} after step {planned}'s batch was checkpointed",
                    input.run.id, input.step
                ));
            }
            if let Some(mismatch) = self.world.store.history_mismatch(&input) {
                self.world.observations().history_mismatches.push(mismatch);
            }
            let world = &self.world;
            let think_ms = world.draw(|r| {
                if r.chance(world.plan.slow_planner) {
                    r.range(1_000, 5_000)
                } else {
                    r.range(1, 300)
                }
            });
            let start = world.clock.mono();
            let index = {
                let mut observations = world.observations();
                observations.timeline.planner_turns.push(WorkItem {
                    run: input.run.id,
                    epoch: Some(input.run.lease_epoch),
                    incarnation: self.incarnation.clone(),
                    key: None,
                    start,
                    end: None,
                });
                observations.timeline.planner_turns.len() - 1
            };
            let _turn = Ended {
                world: Arc::clone(world),
                what: Span::Planner(index),
            };
            sleep(Duration::from_millis(think_ms)).await;
            let step = input.step;
            let turn = self.inner.next_turn(input).await;
            match self.fault.filter(|f| f.step == step) {
                None => turn,
                Some(fault) => Ok(match fault.kind {
                    PlannerFaultKind::Error => {
                        return Err(PlannerError("simulated: the model provider failed".into()));
                    }
                    PlannerFaultKind::NoCalls => PlannerTurn::Calls(Vec::new()),
                    PlannerFaultKind::DuplicateCallId => PlannerTurn::Calls(vec![
                        faulty_call("dup", TrustLevel::User),
                        faulty_call("dup", TrustLevel::User),
                    ]),
                    PlannerFaultKind::PlatformTrust => {
                        PlannerTurn::Calls(vec![faulty_call("p1", TrustLevel::Platform)])
                    }
                }),
            }
        })
    }
}

/// A call of an invalid turn (SPEC §8.3): a lookup whose text is labelled `trust`.
fn faulty_call(call_id: &str, trust: TrustLevel) -> airlock_core::ports::ProposedCall {
    airlock_core::ports::ProposedCall {
        call_id: call_id.to_owned(),
        tool: "sim.lookup".to_owned(),
        version: None,
        arguments: json!({"text": "faulty"}),
        argument_trust: [("text".to_owned(), trust)].into(),
    }
}

/// A simulated external service. Its effect lands in the ground-truth ledger (keyed by the
/// idempotency key) before the response travels back, so a crash or a timeout can fall between
/// the effect and its acknowledgement.
struct SimTool {
    spec: ToolSpec,
    body: Body,
    world: Arc<World>,
    node: usize,
    incarnation: String,
}

impl SimTool {
    /// Records a body entry; returns whether it changed the world and the service's answer.
    fn land(&self, ctx: &ToolContext<'_>, at_entry: AtEntry, args: &JsonMap) -> Value {
        let world = &self.world;
        let key = ctx.idempotency_key.to_owned();
        let mut services = lock(&world.services);
        // A service with idempotency keys applies a key once, whichever request carrying it
        // lands first: a zombie's request still in flight may land after the replay.
        let deduplicated = self.spec.idempotency == IdempotencyClass::ConditionallyIdempotent
            && services.contains_key(&key);
        let answer = if deduplicated {
            services[&key].clone()
        } else {
            let answer = json!({"service": self.spec.name, "arguments": args, "receipt": format!("r-{}", &key[..12.min(key.len())])});
            services.insert(key.clone(), answer.clone());
            answer
        };
        drop(services);
        let mut observations = world.observations();
        observations.effects.push(Effect {
            tool_name: self.spec.name.clone(),
            idempotency_key: key,
            idempotency: self.spec.idempotency,
            replay: ctx.replay,
            watermarked_at_entry: at_entry.watermarked,
            transaction_open_at_entry: at_entry.transaction_open,
            started_at_entry: at_entry.started,
        });
        observations.landed.push(!deduplicated);
        answer
    }

    fn workspace_read(
        &self,
        ctx: &ToolContext<'_>,
        args: &JsonMap,
    ) -> Result<(Value, Option<airlock_core::vocab::TrustLevel>), ToolFailure> {
        let path_text = args["path"].as_str().unwrap_or_default();
        let not_found = || {
            ToolFailure::new(
                ToolFailureKind::NotFound,
                "tool.workspace.not_found",
                "no such file",
            )
        };
        let (Some(workspace), Ok(path)) = (ctx.workspace.as_ref(), WsPath::parse(path_text)) else {
            return Err(not_found());
        };
        let content = workspace
            .read_bounded(&path, 4_096)
            .map_err(|_| not_found())?;
        let claimed = workspace.provenance(&path, Some(&content)).trust();
        self.world.observations().reads.push(ReadRecord {
            key: ctx.idempotency_key.to_owned(),
            incarnation: self.incarnation.clone(),
            run: ctx.run_id,
            path: path.as_relative(),
            content: content.clone(),
            claimed,
        });
        Ok((
            json!({"path": path.as_relative(), "content": String::from_utf8_lossy(&content)}),
            Some(claimed),
        ))
    }

    fn workspace_write(&self, ctx: &ToolContext<'_>, args: &JsonMap) -> Result<Value, ToolFailure> {
        let path_text = args["path"].as_str().unwrap_or_default();
        let content = args["text"]
            .as_str()
            .unwrap_or_default()
            .as_bytes()
            .to_vec();
        let failed = || {
            ToolFailure::new(
                ToolFailureKind::Internal,
                "tool.internal_error",
                "no workspace",
            )
        };
        let (Some(workspace), Ok(path)) = (ctx.workspace.as_ref(), WsPath::parse(path_text)) else {
            return Err(failed());
        };
        let created = workspace.write(&path, &content).map_err(|_| failed())?;
        self.world.observations().writes.push(WriteRecord {
            incarnation: self.incarnation.clone(),
            run: ctx.run_id,
            path: path.as_relative(),
            content,
        });
        Ok(json!({"path": path.as_relative(), "created": created}))
    }
}

/// What the store held when a tool body was entered (for the §16 #11 and #12 checks).
#[derive(Debug, Clone, Copy)]
struct AtEntry {
    watermarked: bool,
    transaction_open: bool,
    started: bool,
}

impl Tool for SimTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn invoke<'a>(
        &'a self,
        ctx: &'a ToolContext<'a>,
        args: &'a JsonMap,
    ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>> {
        Box::pin(async move {
            let world = &self.world;
            let at_entry = AtEntry {
                watermarked: world.store.watermarked(ctx.idempotency_key),
                transaction_open: world.store.transaction_open(),
                started: world.store.started(ctx.idempotency_key),
            };
            let index = {
                let mut observations = world.observations();
                observations.entries.push(crate::checks::Entry {
                    key: ctx.idempotency_key.to_owned(),
                    idempotency: self.spec.idempotency,
                    replay: ctx.replay,
                });
                let start = world.clock.mono();
                observations.timeline.tool_bodies.push(WorkItem {
                    run: ctx.run_id,
                    epoch: None,
                    incarnation: self.incarnation.clone(),
                    key: Some(ctx.idempotency_key.to_owned()),
                    start,
                    end: None,
                });
                observations.timeline.tool_bodies.len() - 1
            };
            let _body = Ended {
                world: Arc::clone(world),
                what: Span::Tool(index),
            };
            let chaos = world.chaos();
            let plan = &world.plan;
            let (request_ms, response_ms, fail, crash_after, panic_after, odd) = world.draw(|r| {
                let total = if chaos && r.chance(plan.tool_slow) {
                    r.range(1_500, 3_500)
                } else {
                    r.range(2, 200)
                };
                let request = r.below(total);
                (
                    request,
                    total - request,
                    chaos && r.chance(plan.tool_fail),
                    chaos && r.chance(plan.tool_crash_after_effect),
                    chaos && r.chance(plan.tool_panic_after_effect),
                    (chaos && r.chance(plan.tool_odd_answer)).then(|| r.below(3)),
                )
            });
            sleep(Duration::from_millis(request_ms)).await;
            if fail {
                // A failure other than a timeout only when no effect happened (SPEC §9.3).
                return Err(ToolFailure::new(
                    ToolFailureKind::UpstreamError,
                    "tool.upstream.unavailable",
                    "simulated outage before any effect",
                ));
            }
            let (structured, trust) = match self.body {
                Body::Service { claim } => (self.land(ctx, at_entry, args), claim),
                Body::WorkspaceRead => {
                    self.land(ctx, at_entry, args);
                    self.workspace_read(ctx, args)?
                }
                Body::WorkspaceWrite => {
                    self.land(ctx, at_entry, args);
                    (self.workspace_write(ctx, args)?, None)
                }
            };
            if crash_after {
                world.kill(
                    self.node,
                    "kill_after_effect",
                    format!("inside {} after its effect", self.spec.name),
                );
                std::future::pending::<()>().await;
            }
            if panic_after {
                world.fault(
                    "tool_panic_after_effect",
                    format!("inside {} after its effect", self.spec.name),
                );
                panic!("simulated panic inside {} after its effect", self.spec.name);
            }
            sleep(Duration::from_millis(response_ms)).await;
            if let Some(answer) = odd {
                world.fault(
                    "tool_odd_answer",
                    format!("{} answers #{answer}", self.spec.name),
                );
                return match answer {
                    0 => Ok(ToolSuccess {
                        structured: json!({"padding": "x".repeat(
                            usize::try_from(self.spec.max_output_bytes).unwrap_or(0) + 1
                        )}),
                        trust,
                    }),
                    1 => Err(ToolFailure::new(
                        ToolFailureKind::Timeout,
                        "tool.upstream.timeout",
                        "simulated: the service stopped answering after the request",
                    )),
                    _ => Err(ToolFailure::new(
                        ToolFailureKind::OutcomeUnknown,
                        "tool.upstream.unknown",
                        "simulated: the service lost track of the request",
                    )),
                };
            }
            Ok(ToolSuccess { structured, trust })
        })
    }
}

/// Per-incarnation workspace handles over the durable files: provenance (what this process
/// wrote) is memory and dies with the process (SPEC §12.3, §16 #38).
struct SimWorkspaces {
    files: Files,
    written: Written,
}

impl WorkspaceFactory for SimWorkspaces {
    fn for_run(&self, tenant: &str, run: RunId) -> Result<Arc<dyn Workspace>, WorkspaceError> {
        Ok(Arc::new(SimWorkspace {
            files: Arc::clone(&self.files),
            written: Arc::clone(&self.written),
            tenant: tenant.to_owned(),
            run,
        }))
    }
}

struct SimWorkspace {
    files: Files,
    written: Written,
    tenant: String,
    run: RunId,
}

impl SimWorkspace {
    fn key(&self, path: &WsPath) -> (String, RunId, String) {
        (self.tenant.clone(), self.run, path.as_relative())
    }
}

impl Workspace for SimWorkspace {
    fn read_bounded(&self, path: &WsPath, max_bytes: u64) -> Result<Vec<u8>, WorkspaceError> {
        let data = lock(&self.files)
            .get(&self.key(path))
            .cloned()
            .ok_or(WorkspaceError::NotFound)?;
        if data.len() as u64 > max_bytes {
            return Err(WorkspaceError::TooLarge);
        }
        Ok(data)
    }

    fn write(&self, path: &WsPath, data: &[u8]) -> Result<bool, WorkspaceError> {
        let (tenant, run, relative) = self.key(path);
        lock(&self.written).insert((tenant.clone(), run, relative.clone(), data.to_vec()));
        Ok(lock(&self.files)
            .insert((tenant, run, relative), data.to_vec())
            .is_none())
    }

    fn list(
        &self,
        _path: &WsPath,
        _recursive: bool,
    ) -> Result<Vec<WorkspaceEntry>, WorkspaceError> {
        Ok(lock(&self.files)
            .iter()
            .filter(|((t, r, _), _)| *t == self.tenant && *r == self.run)
            .map(|((_, _, p), d)| WorkspaceEntry {
                path: p.clone(),
                kind: EntryKind::File,
                byte_count: d.len() as u64,
            })
            .collect())
    }

    fn provenance(&self, path: &WsPath, content: Option<&[u8]>) -> Provenance {
        let (tenant, run, relative) = self.key(path);
        match content {
            Some(bytes)
                if lock(&self.written).contains(&(tenant, run, relative, bytes.to_vec())) =>
            {
                Provenance::Written
            }
            _ => Provenance::Unknown,
        }
    }
}
