//! The planted commit logs the checks' unit tests build: one run, events with fixed ids, and
//! commits that carry only what a test gives them.

use airlock_core::events::{Actor, Event, EventType};
use airlock_core::ids::{RunId, SessionId};
use airlock_core::mem_store::MemSnapshot;
use airlock_core::ports::ProposedCall;
use airlock_core::run::checkpoint::{
    Admission, Checkpoint, CheckpointState, PendingBatch, PinnedCall,
};
use airlock_core::time::Timestamp;
use airlock_core::vocab::{CheckpointTrigger, RunStatus};

use crate::store::{CommitRecord, Moment, RunView};

/// The run every planted log is about.
pub fn run() -> RunId {
    RunId(uuid::Uuid::from_u128(7))
}

/// An event of [`run`] (id and sequence 1; the checks read neither).
pub fn event(kind: EventType, actor: Actor, payload: serde_json::Value) -> Event {
    Event {
        id: 1,
        session_id: SessionId(uuid::Uuid::nil()),
        run_id: Some(run()),
        sequence: 1,
        event_type: kind,
        payload_schema_version: 1,
        actor,
        payload,
        derivation_key: None,
        created_at: Timestamp::from_micros(1),
    }
}

/// [`run`]'s row as a commit left it; `lease` is its holder and lease expiry when RUNNING.
pub fn view(status: RunStatus, epoch: u64, lease: Option<(&str, Timestamp)>) -> RunView {
    RunView {
        id: run(),
        session_id: SessionId(uuid::Uuid::nil()),
        status,
        lease_epoch: epoch,
        lease_owner: lease.map(|(owner, _)| owner.to_owned()),
        lease_expires_at: lease.map(|(_, expires)| expires),
        scheduled_for: None,
        cancel_requested_at: None,
        attempts: 0,
        current_step: 0,
    }
}

/// A commit at the world's start that appended `events` and nothing else.
pub fn commit(seq: usize, events: Vec<Event>) -> CommitRecord {
    CommitRecord {
        seq,
        at: Moment::default(),
        events,
        guards: Vec::new(),
        heartbeats: Vec::new(),
        runs: Vec::new(),
    }
}

/// A snapshot whose checkpoint `version` of [`run`] holds step 1's pending batch of `c1` and
/// `c2` (a tool no catalog has), admitted as `admission`.
pub fn pending_batch(version: u32, admission: Admission) -> MemSnapshot {
    let call = |id: &str| PinnedCall {
        call: ProposedCall {
            call_id: id.to_owned(),
            tool: "sim.missing".to_owned(),
            version: None,
            arguments: serde_json::json!({}),
            argument_trust: Default::default(),
        },
        pinned_version: None,
    };
    let mut snapshot = MemSnapshot::default();
    snapshot.checkpoints.insert(
        (run(), version),
        Checkpoint {
            run_id: run(),
            version,
            trigger: CheckpointTrigger::ToolPending,
            state: CheckpointState {
                pending: Some(PendingBatch {
                    step: 1,
                    calls: vec![call("c1"), call("c2")],
                    admission,
                }),
                ..CheckpointState::default()
            },
            created_at: Timestamp::from_micros(1),
        },
    );
    snapshot
}
