//! SUBMIT's writes (SPEC §8.2) for a built run, shared by the control service's `submit_run`
//! and a conversation's call runs (§22.2).

use serde_json::json;

use crate::events::{Actor, EventType, NewEvent};
use crate::ids::RunId;
use crate::run::Run;
use crate::run::checkpoint::{Checkpoint, CheckpointState};
use crate::store::{StoreTx, TxError};
use crate::time::Timestamp;
use crate::vocab::CheckpointTrigger;

/// A new run's first checkpoint: version 1, nothing done yet. An execution that starts right
/// after the transaction that wrote it knows it without reading it back
/// (`run::executor::Start::Admitted`).
pub fn seed_checkpoint(run_id: RunId, now: Timestamp) -> Checkpoint {
    Checkpoint {
        run_id,
        version: 1,
        trigger: CheckpointTrigger::Seed,
        state: CheckpointState::default(),
        created_at: now,
    }
}

/// SUBMIT's writes for a built run: the row, its seed checkpoint, `run.queued` and
/// `run.checkpointed` (shared with the control service's `submit_run`).
pub fn insert_queued_run(
    tx: &mut dyn StoreTx,
    run: &Run,
    actor: &Actor,
    now: Timestamp,
) -> Result<(), TxError> {
    tx.insert_run(run)?;
    tx.insert_checkpoint(&seed_checkpoint(run.id, now))?;
    for (event_type, payload) in [
        (EventType::RunQueued, json!({"run_id": run.id.to_string()})),
        (
            EventType::RunCheckpointed,
            json!({"version": 1, "trigger": "seed"}),
        ),
    ] {
        tx.append_event(&NewEvent {
            session_id: run.session_id,
            run_id: Some(run.id),
            event_type,
            actor: actor.clone(),
            payload,
            derivation_key: None,
            created_at: now,
        })?;
    }
    Ok(())
}
