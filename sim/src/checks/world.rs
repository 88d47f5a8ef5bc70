//! What a seed left for its checks: the store's snapshot, the commits, and what the simulator
//! observed (the approver's answers, reads, writes, the quiet phase). Below every check.

use airlock_core::control::ServiceError;
use airlock_core::ids::{ApprovalId, RunId};
use airlock_core::mem_store::MemSnapshot;
use airlock_core::testing::invariants::Effect;
use airlock_core::vocab::{ApprovalResolution, IdempotencyClass, ResolveState, TrustLevel};

use crate::plan::Plan;
use crate::store::CommitRecord;
use crate::timeline::Timeline;

/// One answer the approver got from `resolve`.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolveRecord {
    pub approval: ApprovalId,
    pub requested: ApprovalResolution,
    pub answer: Result<ResolveState, ServiceError>,
}

/// A workspace read as the simulated workspace served it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRecord {
    pub key: String,
    pub incarnation: String,
    pub run: RunId,
    pub path: String,
    pub content: Vec<u8>,
    pub claimed: TrustLevel,
}

/// A workspace write by one process incarnation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRecord {
    pub incarnation: String,
    pub run: RunId,
    pub path: String,
    pub content: Vec<u8>,
}

/// A request sent to a simulated service (a body entered), in the order they were sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub idempotency: IdempotencyClass,
    pub replay: bool,
}

/// Everything a world observed besides the store.
#[derive(Debug, Default)]
pub struct Observations {
    /// Body entries, in the order the effects landed (`testing::invariants::Effect`).
    pub effects: Vec<Effect>,
    /// Every body entry, in the order the requests were sent.
    pub entries: Vec<Entry>,
    /// Per entry of `effects`: whether it changed the outside world (a replay the service
    /// deduplicated by key did not).
    pub landed: Vec<bool>,
    pub resolves: Vec<ResolveRecord>,
    pub reads: Vec<ReadRecord>,
    pub writes: Vec<WriteRecord>,
    /// §16 #12 breaches seen at a planner or dispatcher call.
    pub open_transaction_calls: Vec<String>,
    /// A worker loop that returned an error (the node stops polling).
    pub worker_errors: Vec<String>,
    /// Planner turns asked for a step whose batch was already checkpointed.
    pub replanned: Vec<String>,
    /// Planner turns whose history differed from the stored result items (§16 #16, §17.2).
    pub history_mismatches: Vec<String>,
    /// What happened over time, beside the store.
    pub timeline: Timeline,
}

/// What the world looked like when the quiet phase ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietEnd {
    /// Whether every run was terminal or parked before the quiet phase's time bound.
    pub settled: bool,
}

/// Everything a world left for its checks.
pub struct World<'a> {
    pub plan: &'a Plan,
    pub snapshot: &'a MemSnapshot,
    pub commits: &'a [CommitRecord],
    pub observations: &'a Observations,
}
