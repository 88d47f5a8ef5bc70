//! A step's own writes and where they fold (SPEC §13.2, §17.1–§17.2): PENDING, which fixes the
//! batch, and BATCH, which closes the step, each with its checkpoint.
//!
//! Part II folds both into call transactions so an allowed call in a one-call step costs two
//! commits: PENDING into the step's first PROPOSE or REFUSE (F1), and BATCH into the
//! transaction that closes the step's last sequential call (F4). The [`StepLedger`] carries the
//! run's checkpoint position across those transactions: the pipeline asks it to *stage* its
//! writes inside a transaction, and after `transact` returns it *settles* them, promoting the
//! staged position on a commit and forgetting it on a rollback. The executor reads the committed
//! position back once the batch has been dispatched, whichever way it ended, so a FINAL or PARK
//! that follows always continues from the version that is really in the store.
//!
//! Nothing here does I/O: staging writes through the open [`StoreTx`], and the ledger's lock is
//! never held across an await (each method takes it for the length of one call).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::json;

use crate::events::{Actor, EventType, NewEvent};
use crate::invocation::pipeline::CallResult;
use crate::run::Run;
use crate::run::checkpoint::{Checkpoint, CheckpointState, PendingBatch, StepRecord};
use crate::run::state::update_fields;
use crate::store::{StoreTx, TxError};
use crate::time::Timestamp;
use crate::vocab::{CheckpointTrigger, OutcomeStatus, TrustLevel};

/// Inserts the next checkpoint with its `run.checkpointed` event.
pub(crate) fn checkpoint(
    tx: &mut dyn StoreTx,
    run: &Run,
    version: u32,
    trigger: CheckpointTrigger,
    state: &CheckpointState,
    actor: &Actor,
    now: Timestamp,
) -> Result<(), TxError> {
    tx.insert_checkpoint(&Checkpoint {
        run_id: run.id,
        version,
        trigger,
        state: state.clone(),
        created_at: now,
    })?;
    tx.append_event(&NewEvent {
        session_id: run.session_id,
        run_id: Some(run.id),
        event_type: EventType::RunCheckpointed,
        actor: actor.clone(),
        payload: json!({"version": version, "trigger": trigger.as_str()}),
        derivation_key: None,
        created_at: now,
    })?;
    Ok(())
}

/// The identical-denial key of SPEC §8.3: `tool NUL arguments-hash NUL reason_code`.
pub fn denial_key(tool: &str, arguments_hash: &str, reason_code: &str) -> String {
    format!("{tool}\u{0}{arguments_hash}\u{0}{reason_code}")
}

/// The state after a step closes, and the step's history record (pure): the step counter
/// advances, the batch is no longer pending, untrusted results taint the run for good, and
/// denials are counted.
pub fn close_step(
    run: &Run,
    state: &CheckpointState,
    batch: &PendingBatch,
    results: &[CallResult],
    now: Timestamp,
) -> (CheckpointState, StepRecord) {
    let mut next = state.clone();
    next.step = batch.step;
    next.pending = None;
    next.tainted |= results.iter().any(|r| {
        matches!(
            r.item.trust,
            TrustLevel::ExternalUntrusted | TrustLevel::Knowledge
        )
    });
    let mut counts: BTreeMap<String, u32> = next.denial_counts;
    for result in results.iter().filter(|r| r.status == OutcomeStatus::Denied) {
        let count = counts
            .entry(denial_key(
                &result.item.name,
                &result.arguments_hash,
                &result.reason_code,
            ))
            .or_insert(0);
        *count = count.saturating_add(1);
    }
    next.denial_counts = counts;
    let record = StepRecord {
        run_id: run.id,
        step: batch.step,
        calls: batch.calls.iter().map(|c| c.call.clone()).collect(),
        results: results.iter().map(|r| r.reference.clone()).collect(),
        created_at: now,
    };
    (next, record)
}

/// Which of the step's own writes a commit carried, so the caller reaches their crash points
/// in transaction order: PENDING before the call's own point, BATCH after it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Folded {
    pub pending: bool,
    pub batch: bool,
}

/// The checkpoint position: the latest committed version and its state.
#[derive(Debug, Clone)]
struct Position {
    version: u32,
    state: CheckpointState,
}

#[derive(Debug)]
struct LedgerState {
    committed: Position,
    /// What the open transaction wrote, until it settles.
    staged: Option<(Position, Folded)>,
    /// F1: the batch whose PENDING has not been committed yet.
    unwritten_pending: Option<PendingBatch>,
    /// F4: armed for the last call of a sequential batch with the results of the calls before
    /// it; disarmed once BATCH commits.
    closing: Option<Closing>,
}

#[derive(Debug, Clone)]
struct Closing {
    batch: PendingBatch,
    prior: Vec<CallResult>,
}

/// The run's checkpoint position while a batch is dispatched, and the folded step writes.
pub struct StepLedger<'a> {
    run: &'a Run,
    actor: Actor,
    inner: Mutex<LedgerState>,
}

impl<'a> StepLedger<'a> {
    /// A ledger at the committed `(version, state)`; `unwritten_pending` is the batch whose
    /// PENDING the step's first call transaction must carry (F1), `None` for a resumed step.
    pub fn new(
        run: &'a Run,
        actor: Actor,
        version: u32,
        state: CheckpointState,
        unwritten_pending: Option<PendingBatch>,
    ) -> StepLedger<'a> {
        StepLedger {
            run,
            actor,
            inner: Mutex::new(LedgerState {
                committed: Position { version, state },
                staged: None,
                unwritten_pending,
                closing: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LedgerState> {
        // Every method restores a consistent state before it can panic, so poison is harmless.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The committed position: `(version, state)`.
    pub fn committed(&self) -> (u32, CheckpointState) {
        let inner = self.lock();
        (inner.committed.version, inner.committed.state.clone())
    }

    /// Whether the step's PENDING is still to be written.
    pub fn pending_unwritten(&self) -> bool {
        self.lock().unwritten_pending.is_some()
    }

    /// Arms BATCH for the step's last sequential call (F4).
    pub fn arm_closing(&self, batch: &PendingBatch, prior: Vec<CallResult>) {
        self.lock().closing = Some(Closing {
            batch: batch.clone(),
            prior,
        });
    }

    /// Whether BATCH was committed by a call transaction.
    pub fn step_closed(&self) -> bool {
        let inner = self.lock();
        inner.closing.is_none() && inner.committed.state.pending.is_none()
    }

    /// The staged position, else the committed one.
    fn current(inner: &LedgerState) -> Position {
        inner
            .staged
            .as_ref()
            .map_or_else(|| inner.committed.clone(), |(p, _)| p.clone())
    }

    /// Inside a call's first transaction: PENDING (checkpoint `tool_pending`, `step_count = k`)
    /// if the step has not written it yet. Idempotent within one transaction.
    pub fn stage_opening(&self, tx: &mut dyn StoreTx, now: Timestamp) -> Result<(), TxError> {
        let mut inner = self.lock();
        self.stage_opening_locked(&mut inner, tx, now)
    }

    fn stage_opening_locked(
        &self,
        inner: &mut LedgerState,
        tx: &mut dyn StoreTx,
        now: Timestamp,
    ) -> Result<(), TxError> {
        let Some(batch) = inner.unwritten_pending.clone() else {
            return Ok(());
        };
        if inner.staged.as_ref().is_some_and(|(_, f)| f.pending) {
            return Ok(());
        }
        let current = tx.run(self.run.id)?.ok_or(TxError::NotFound)?;
        let mut next_run = current.clone();
        next_run.step_count = batch.step;
        update_fields(tx, &current, next_run, now)?;
        let mut position = Self::current(inner);
        position.state.pending = Some(batch);
        position.version = position.version.saturating_add(1);
        checkpoint(
            tx,
            self.run,
            position.version,
            CheckpointTrigger::ToolPending,
            &position.state,
            &self.actor,
            now,
        )?;
        let folded = inner.staged.as_ref().map_or(Folded::default(), |(_, f)| *f);
        inner.staged = Some((
            position,
            Folded {
                pending: true,
                ..folded
            },
        ));
        Ok(())
    }

    /// Inside the transaction that closes a call: BATCH, if this call is the armed last call of
    /// its sequential batch (F4). `last` is the call's result as that transaction stores it.
    pub fn stage_closing(
        &self,
        tx: &mut dyn StoreTx,
        last: &CallResult,
        now: Timestamp,
    ) -> Result<(), TxError> {
        let mut inner = self.lock();
        let Some(closing) = inner.closing.clone() else {
            return Ok(());
        };
        let mut results = closing.prior;
        results.push(last.clone());
        self.stage_batch_locked(&mut inner, tx, &closing.batch, &results, now)
    }

    /// BATCH in a transaction of its own, with every result of the batch: a parallel batch
    /// (which may keep BATCH separate, F4) or a sequential one whose last call closed without
    /// a transaction (a replayed row or refusal).
    pub fn stage_batch(
        &self,
        tx: &mut dyn StoreTx,
        batch: &PendingBatch,
        results: &[CallResult],
        now: Timestamp,
    ) -> Result<(), TxError> {
        let mut inner = self.lock();
        self.stage_batch_locked(&mut inner, tx, batch, results, now)
    }

    fn stage_batch_locked(
        &self,
        inner: &mut LedgerState,
        tx: &mut dyn StoreTx,
        batch: &PendingBatch,
        results: &[CallResult],
        now: Timestamp,
    ) -> Result<(), TxError> {
        if inner.staged.as_ref().is_some_and(|(_, f)| f.batch) {
            return Ok(());
        }
        // The mutant's deferred PENDING follows at the latest with the step's BATCH.
        #[cfg(feature = "mutants")]
        if crate::testing::mutants::pending_after_first_call() {
            self.stage_opening_locked(inner, tx, now)?;
        }
        let mut position = Self::current(inner);
        let (state, record) = close_step(self.run, &position.state, batch, results, now);
        tx.insert_step_record(&record)?;
        position.state = state;
        position.version = position.version.saturating_add(1);
        checkpoint(
            tx,
            self.run,
            position.version,
            CheckpointTrigger::ToolBatch,
            &position.state,
            &self.actor,
            now,
        )?;
        let folded = inner.staged.as_ref().map_or(Folded::default(), |(_, f)| *f);
        inner.staged = Some((
            position,
            Folded {
                batch: true,
                ..folded
            },
        ));
        Ok(())
    }

    /// After `transact` returned: a commit promotes what was staged, a rollback forgets it.
    /// Returns what the commit carried.
    pub fn settle(&self, committed: bool) -> Folded {
        let mut inner = self.lock();
        let Some((position, folded)) = inner.staged.take() else {
            return Folded::default();
        };
        if !committed {
            return Folded::default();
        }
        inner.committed = position;
        if folded.pending {
            inner.unwritten_pending = None;
        }
        if folded.batch {
            inner.closing = None;
        }
        folded
    }
}
