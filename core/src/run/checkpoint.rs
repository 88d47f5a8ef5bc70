//! Checkpoints (SPEC §8.3, §14, §17.2): what the next step of a run needs, so any worker can
//! resume it and a resumed step replays the same calls without asking the planner again; and
//! the per-step history records beside them.
//!
//! A checkpoint holds nothing that grows with the run: the step counter, the pending batch,
//! taint and denial counts. Each finished step's calls and result references are written once,
//! in the transaction that closes the step, as a [`StepRecord`] that is never rewritten, and
//! read back only when a planner that wants history is built. So the bytes written per call,
//! and the time per call, do not depend on the step number (§17.2). Checkpoints written by an
//! earlier build carried the whole history in a `history` field; it is ignored when read, and
//! the store's migration copies the latest one of each run into step records.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{InvocationId, ParallelGroupId, RunId};
use crate::ports::ProposedCall;
use crate::time::Timestamp;
use crate::vocab::CheckpointTrigger;

/// How a batch runs, decided once at PENDING (SPEC §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Admission {
    Sequential,
    Parallel { parallel_group: ParallelGroupId },
}

/// A call pinned to the tool version it resolved to at PENDING; `None` if it did not resolve,
/// which stays a refusal on every replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedCall {
    pub call: ProposedCall,
    pub pinned_version: Option<String>,
}

/// The batch a step is executing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingBatch {
    pub step: u32,
    pub calls: Vec<PinnedCall>,
    pub admission: Admission,
}

/// Where a result item is stored: an invocation row, or a refusal event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResultRef {
    Invocation { invocation_id: InvocationId },
    Refusal { derivation_key: String },
}

/// One finished step of history: the calls and, per call, its result reference, in planner
/// order. Append-only: written once when the step closes (BATCH), never updated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    pub run_id: RunId,
    pub step: u32,
    pub calls: Vec<ProposedCall>,
    pub results: Vec<ResultRef>,
    pub created_at: Timestamp,
}

/// The checkpointed state of a run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CheckpointState {
    /// The last step whose batch finished (0 at seed).
    pub step: u32,
    pub pending: Option<PendingBatch>,
    /// Set once untrusted content reached the planner; never cleared (SPEC §8.6).
    pub tainted: bool,
    /// Identical denials, keyed `tool NUL arguments-hash NUL reason_code`.
    pub denial_counts: BTreeMap<String, u32>,
}

impl CheckpointState {
    /// The step in hand: the pending batch's, else the last finished one. The planner is never
    /// asked for it, or for an earlier step, again (§8.3).
    pub fn current_step(&self) -> u32 {
        self.pending.as_ref().map_or(self.step, |p| p.step)
    }
}

/// One row of `checkpoints`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub run_id: RunId,
    pub version: u32,
    pub trigger: CheckpointTrigger,
    pub state: CheckpointState,
    pub created_at: Timestamp,
}
