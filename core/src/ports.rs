//! The ports through which hosts drive core (SPEC §2.2). Core never reaches the world except
//! through these traits; the binary and the simulator plug in different implementations.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

pub use crate::tool::spec::ToolSpec;
pub use crate::workspace::{
    EntryKind, Provenance, Workspace, WorkspaceEntry, WorkspaceError, WsPath,
};

use crate::action::JsonMap;
use crate::ids::{InvocationId, RunId, SessionId};
use crate::invocation::outcome::ResultItem;
use crate::run::Run;
use crate::time::Timestamp;
use crate::vocab::{CrashPoint, ToolFailureKind, TrustLevel};

/// A boxed, sendable future: the shape every asynchronous port returns (declared by the policy
/// gate, whose advisory reviewer returns one too).
pub use airlock_policy::advisory::BoxFut;

/// The only source of time.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
    fn sleep_until(&self, t: Timestamp) -> BoxFut<'static, ()>;
}

/// The only source of fresh ids: v4 in production, seeded in the simulator.
pub trait IdSource: Send + Sync {
    fn new_uuid(&self) -> Uuid;
}

/// What a tool body is told about the call it serves.
pub struct ToolContext<'a> {
    pub tenant_id: &'a str,
    pub run_id: RunId,
    pub session_id: SessionId,
    pub invocation_id: InvocationId,
    pub call_id: &'a str,
    pub step_number: u32,
    pub idempotency_key: &'a str,
    /// Set for REPLAY_IDEMPOTENCY_KEY: the tool should deduplicate by the key.
    pub replay: bool,
    /// Present only for workspace tools.
    pub workspace: Option<Arc<dyn Workspace>>,
    pub clock: &'a dyn Clock,
}

impl ToolContext<'_> {
    /// A no-op: START already committed the watermark before the body was entered (SPEC §9.2).
    pub fn mark_effect_sent(&self) {}
}

/// A successful call: structured output and the trust the tool claims for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSuccess {
    pub structured: Value,
    pub trust: Option<TrustLevel>,
}

/// A failed call; `detail` is for operators only and never reaches the planner.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolFailure {
    pub kind: ToolFailureKind,
    pub reason_code: String,
    pub detail: String,
    pub retryable: bool,
}

impl ToolFailure {
    pub fn new(kind: ToolFailureKind, reason_code: &str, detail: impl Into<String>) -> ToolFailure {
        ToolFailure {
            kind,
            reason_code: reason_code.to_owned(),
            detail: detail.into(),
            retryable: false,
        }
    }
}

/// A tool: a spec (core data) and a body.
pub trait Tool: Send + Sync {
    fn spec(&self) -> &ToolSpec;
    fn invoke<'a>(
        &'a self,
        ctx: &'a ToolContext<'a>,
        args: &'a JsonMap,
    ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>>;
}

/// Hands out the per-tenant, per-run workspace handle.
pub trait WorkspaceFactory: Send + Sync {
    fn for_run(&self, tenant: &str, run: RunId) -> Result<Arc<dyn Workspace>, WorkspaceError>;
}

/// A hint that a run is queued; called only after the commit that queued it.
pub trait Dispatcher: Send + Sync {
    fn dispatch(&self, run: RunId);
    fn resume(&self, run: RunId);
}

/// A planner failure; the run fails `planner_error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("planner error: {0}")]
pub struct PlannerError(pub String);

/// A call the planner proposes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposedCall {
    pub call_id: String,
    pub tool: String,
    #[serde(default)]
    pub version: Option<String>,
    pub arguments: Value,
    #[serde(default)]
    pub argument_trust: BTreeMap<String, TrustLevel>,
}

/// One step of history as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannerStep {
    pub step: u32,
    pub calls: Vec<ProposedCall>,
    pub results: Vec<ResultItem>,
}

/// What the planner is asked with.
pub struct PlannerInput<'a> {
    pub run: &'a Run,
    /// The step being planned, `k = checkpoint.step + 1`.
    pub step: u32,
    /// The finished steps, in order; empty for a planner whose [`Planner::wants_history`] is
    /// false (SPEC §17.2: history is read back only for a planner that needs it).
    pub history: &'a [PlannerStep],
    /// Whether an earlier step of the run returned untrusted content (SPEC §8.6, the
    /// checkpoint's taint): a planner that labels its arguments' trust (a live client with
    /// `origin_trust = "user"`, §19.3) labels nothing `user` from then on.
    pub tainted: bool,
}

/// A planner's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannerTurn {
    Calls(Vec<ProposedCall>),
    Final { message: String },
}

pub trait PlannerFactory: Send + Sync {
    fn for_run(&self, run: &Run) -> Result<Arc<dyn Planner>, PlannerError>;
}

pub trait Planner: Send + Sync {
    /// Whether [`PlannerInput::history`] must be loaded for this planner. A planner that keeps
    /// its own conversation (the scripted planner ignores results; a live MCP client holds its
    /// own transcript) says no, and the executor then reads no step records at all.
    fn wants_history(&self) -> bool {
        true
    }

    fn next_turn<'a>(
        &'a self,
        input: PlannerInput<'a>,
    ) -> BoxFut<'a, Result<PlannerTurn, PlannerError>>;

    /// `Some(message)` when this planner's turn for step `step + 1` is known, before step
    /// `step` is recorded, to be `Final { message }` whatever step `step`'s results are (a
    /// live client's call run: one call, then the end). The executor then folds the run's FINAL
    /// into the transaction that records step `step` (issue 33: one commit fewer per call run),
    /// unless point 1, the deadline, the step limit or repeated denials would end the run
    /// otherwise; the planner is then not asked for step `step + 1`. `None` (the default): ask.
    fn final_after(&self, step: u32) -> Option<String> {
        let _ = step;
        None
    }

    /// Whether untrusted content reached this planner by a path the journal does not record
    /// (SPEC §19.6: an MCP resource read or prompt get of a live client). When it says yes
    /// after a turn with calls, the executor taints the run before that step's PENDING, so the
    /// taint is checkpointed with the step (§8.6) and the step's calls already carry it.
    fn tainted_outside_journal(&self) -> bool {
        false
    }
}

/// Lets a host stop at a crash point: the default is a ready future.
pub trait FaultHook: Send + Sync {
    fn reached(&self, point: CrashPoint) -> BoxFut<'static, ()>;
}

/// A fault hook that never interferes.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoFaults;

impl FaultHook for NoFaults {
    fn reached(&self, _point: CrashPoint) -> BoxFut<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// Early wake-ups of a worker's poll wait: the dispatch and resume hints of SPEC §10.5 (on
/// PostgreSQL also any process's NOTIFY, §18). `armed` is called before each tick and resolves
/// at the first hint after that call, so a hint that arrives during the tick is not lost. A hint
/// is only a hint: without one the next poll finds the run.
pub trait WakeHints: Send + Sync {
    fn armed(&self) -> BoxFut<'static, ()>;
}

/// No hints: the worker wakes once per poll interval.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHints;

impl WakeHints for NoHints {
    fn armed(&self) -> BoxFut<'static, ()> {
        Box::pin(std::future::pending())
    }
}

/// Spawns a task: tokio in the host, madsim in the simulator.
pub trait Spawner: Send + Sync {
    fn spawn(&self, f: BoxFut<'static, ()>);
}
