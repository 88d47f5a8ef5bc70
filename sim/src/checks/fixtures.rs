//! The planted commit logs the checks' unit tests build: one run, events with fixed ids, and
//! commits that carry only what a test gives them.

use airlock_core::events::{Actor, Event, EventType};
use airlock_core::ids::{RunId, SessionId};
use airlock_core::time::Timestamp;
use airlock_core::vocab::RunStatus;

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
