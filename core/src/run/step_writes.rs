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
use crate::invocation::call_result::CallResult;
use crate::run::Run;
use crate::run::checkpoint::{Checkpoint, CheckpointState, PendingBatch, StepRecord};
use crate::run::state::{Change, transition, update_fields};
use crate::store::{StoreTx, TxError};
use crate::time::Timestamp;
use crate::vocab::{CheckpointTrigger, OutcomeStatus};

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
    next.tainted |= results
        .iter()
        .any(|r| crate::conversation::taints(r.item.trust));
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
    /// The run's FINAL (COMPLETED) followed the BATCH in the same commit ([`FinalFold`]).
    pub run_final: bool,
}

/// The run's FINAL folded into the transaction that closes a step (issue 33), for a planner
/// whose next turn is known to be `Final` before the step is recorded
/// ([`crate::ports::Planner::final_after`]): a call run's FINISH·BATCH·FINAL is one commit.
///
/// It folds only when the executor's loop would have ended the run COMPLETED right after that
/// BATCH (SPEC §8.3): no identical denial reached the limit, the next step is within
/// `max_steps`, the deadline has not passed at the transaction's `now`, and the run's row, read
/// inside the transaction, carries no cancel request (point 1; a fence is the transaction's own
/// lease guard). Otherwise nothing more is written and the loop goes on as before. FINAL then
/// writes what `finalize` would: checkpoint `final` at the next version and the run COMPLETED
/// with `step_count` = the step the planner's `Final` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalFold {
    pub final_message: String,
    /// The step whose turn is the `Final` (FINAL's `step_count`, §8.3).
    pub next_step: u32,
    /// The identical-denial count that fails the run instead (§8.3).
    pub denial_limit: u32,
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
    /// Whether this ledger's BATCH has committed (folded or in its own transaction).
    batch_committed: bool,
    /// FINAL to fold after BATCH, when it applies.
    final_fold: Option<FinalFold>,
    /// Whether a folded FINAL has committed: the run is COMPLETED.
    run_ended: bool,
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
                batch_committed: false,
                final_fold: None,
                run_ended: false,
            }),
        }
    }

    /// Folds the run's FINAL into the step's BATCH when it applies ([`FinalFold`]).
    pub fn fold_final(self, fold: Option<FinalFold>) -> StepLedger<'a> {
        self.lock().final_fold = fold;
        self
    }

    /// Whether a folded FINAL has committed (the run is COMPLETED; nothing more is written).
    pub fn run_ended(&self) -> bool {
        self.lock().run_ended
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

    /// Whether the step's BATCH has committed, folded into a call transaction or on its own.
    pub fn step_closed(&self) -> bool {
        self.lock().batch_committed
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
        // The position holds the batch from its PENDING until this BATCH (a `suspended`
        // checkpoint in between carries it on): its checkpoint holds the step's calls.
        let pending = (position.state.pending.as_ref() == Some(batch)).then_some(position.version);
        tx.insert_step_record(&record, pending)?;
        // A call run's untrusted result taints its conversation in the transaction that
        // records it, before it is answered (SPEC §22.2).
        if self.run.planner_kind == crate::conversation::MCP_PLANNER_KIND
            && let Some(tainting) = results
                .iter()
                .find(|r| crate::conversation::taints(r.item.trust))
        {
            let by = format!(
                "{} (call {} of run {})",
                tainting.item.name, tainting.item.call_id, self.run.id
            );
            crate::conversation::taint_in_tx(tx, self.run.session_id, Some(self.run.id), &by, now)?;
        }
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
        let run_final = match &inner.final_fold {
            Some(fold) => self.stage_final(tx, fold, &mut position, now)?,
            None => false,
        };
        let folded = inner.staged.as_ref().map_or(Folded::default(), |(_, f)| *f);
        inner.staged = Some((
            position,
            Folded {
                batch: true,
                run_final,
                ..folded
            },
        ));
        Ok(())
    }

    /// FINAL after the BATCH just staged at `position`, when [`FinalFold`]'s conditions hold
    /// inside this transaction. `true` when written.
    fn stage_final(
        &self,
        tx: &mut dyn StoreTx,
        fold: &FinalFold,
        position: &mut Position,
        now: Timestamp,
    ) -> Result<bool, TxError> {
        let denied_too_often = position
            .state
            .denial_counts
            .values()
            .any(|count| *count >= fold.denial_limit);
        let past_deadline = self.run.deadline_at.is_some_and(|deadline| now >= deadline);
        if denied_too_often || past_deadline || fold.next_step > self.run.limits.max_steps {
            return Ok(false);
        }
        let current = tx.run(self.run.id)?.ok_or(TxError::NotFound)?;
        if current.cancel_requested_at.is_some() {
            return Ok(false);
        }
        let version = position.version.saturating_add(1);
        checkpoint(
            tx,
            self.run,
            version,
            CheckpointTrigger::Final,
            &position.state,
            &self.actor,
            now,
        )?;
        let mut next = current.clone();
        next.step_count = fold.next_step;
        let change = Change::Complete {
            final_message: fold.final_message.clone(),
        };
        transition(tx, &current, next, change, &self.actor, now)?;
        position.version = version;
        Ok(true)
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
            inner.batch_committed = true;
        }
        if folded.run_final {
            inner.run_ended = true;
        }
        folded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invocation::outcome::{Outcome, ResultItem};
    use crate::mem_store::MemStore;
    use crate::ports::ProposedCall;
    use crate::run::checkpoint::{Admission, PinnedCall, ResultRef};
    use crate::store::Store;
    use crate::testing::fixtures::{T0, sample_checkpoint, seed_run};
    use crate::vocab::RunStatus;
    use crate::vocab::TrustLevel;

    fn batch(step: u32, calls: &[&str]) -> PendingBatch {
        PendingBatch {
            step,
            calls: calls
                .iter()
                .map(|id| PinnedCall {
                    call: ProposedCall {
                        call_id: (*id).to_owned(),
                        tool: "test.echo".to_owned(),
                        version: None,
                        arguments: serde_json::json!({}),
                        argument_trust: BTreeMap::new(),
                    },
                    pinned_version: Some("1.0.0".to_owned()),
                })
                .collect(),
            admission: Admission::Sequential,
        }
    }

    fn result(call_id: &str, status: OutcomeStatus, trust: TrustLevel) -> CallResult {
        let outcome = Outcome::new(status, "test.echo", "policy.matrix.none");
        CallResult {
            reference: ResultRef::Refusal {
                derivation_key: format!("tool.call.refused:r:1:{call_id}"),
            },
            item: ResultItem::from_outcome(call_id, &outcome, trust),
            status,
            reason_code: "policy.matrix.none".to_owned(),
            arguments_hash: "h".to_owned(),
        }
    }

    #[test]
    fn closing_a_step_advances_taints_counts_denials_and_records_in_planner_order() {
        let store = MemStore::new();
        let run = seed_run(&store, 1, RunStatus::Running);
        let before = CheckpointState {
            step: 1,
            pending: Some(batch(2, &["a", "b", "c"])),
            ..CheckpointState::default()
        };
        let results = [
            result("a", OutcomeStatus::Denied, TrustLevel::InternalTool),
            result("b", OutcomeStatus::Succeeded, TrustLevel::ExternalUntrusted),
            result("c", OutcomeStatus::Denied, TrustLevel::InternalTool),
        ];
        let (after, record) = close_step(&run, &before, &batch(2, &["a", "b", "c"]), &results, T0);
        assert_eq!(after.step, 2);
        assert_eq!(after.pending, None);
        assert!(after.tainted, "an untrusted result taints the run");
        assert_eq!(
            after
                .denial_counts
                .get(&denial_key("test.echo", "h", "policy.matrix.none")),
            Some(&2),
            "identical denials are counted together"
        );
        assert_eq!(record.step, 2);
        let ids: Vec<&str> = record.calls.iter().map(|c| c.call_id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(
            record.results,
            results
                .iter()
                .map(|r| r.reference.clone())
                .collect::<Vec<_>>()
        );
        // Taint is never cleared.
        let (again, _) = close_step(&run, &after, &batch(3, &["d"]), &results[..1], T0);
        assert!(again.tainted);
    }

    #[test]
    fn a_rolled_back_transaction_forgets_what_it_staged_and_a_commit_promotes_it() {
        let store = MemStore::new();
        let run = seed_run(&store, 1, RunStatus::Running);
        crate::testing::fixtures::commit(&store, "seed checkpoint", |tx| {
            tx.insert_checkpoint(&sample_checkpoint(run.id, 1))
        });
        let ledger = StepLedger::new(
            &run,
            Actor::worker("w1"),
            1,
            CheckpointState::default(),
            Some(batch(1, &["a"])),
        );
        let failed: Result<(), TxError> = store.transact(|tx| {
            ledger.stage_opening(tx, T0)?;
            Err(TxError::Conflict("the call's own write failed".into()))
        });
        assert!(failed.is_err());
        assert_eq!(ledger.settle(false), Folded::default());
        assert!(ledger.pending_unwritten(), "PENDING is still to be written");
        assert_eq!(ledger.committed().0, 1);

        ledger.arm_closing(&batch(1, &["a"]), Vec::new());
        let committed = store.transact(|tx| {
            ledger.stage_opening(tx, T0)?;
            ledger.stage_closing(
                tx,
                &result("a", OutcomeStatus::Succeeded, TrustLevel::InternalTool),
                T0,
            )
        });
        assert!(committed.is_ok(), "{committed:?}");
        assert_eq!(
            ledger.settle(true),
            Folded {
                pending: true,
                batch: true,
                run_final: false
            }
        );
        assert!(!ledger.pending_unwritten());
        assert!(ledger.step_closed());
        let (version, state) = ledger.committed();
        assert_eq!((version, state.step, state.pending), (3, 1, None));
        let stored = store
            .read(|tx| tx.latest_checkpoint(run.id))
            .unwrap()
            .unwrap();
        assert_eq!(
            (stored.version, stored.trigger),
            (3, CheckpointTrigger::ToolBatch)
        );
        assert_eq!(
            store
                .read(|tx| tx.step_records(run.id, 0, 10))
                .unwrap()
                .len(),
            1
        );
    }

    /// One call's step closed by a ledger that folds FINAL, on a fresh store whose run is
    /// changed by `shape` first; returns what the commit carried and the run after it.
    fn close_with_final(
        shape: impl FnOnce(&mut Run),
        results: &[CallResult],
        now: Timestamp,
    ) -> (Folded, Run, CheckpointTrigger) {
        let store = MemStore::new();
        let session = crate::testing::fixtures::sample_session(1);
        let mut run = crate::testing::fixtures::sample_run(1, session.id, RunStatus::Running);
        shape(&mut run);
        crate::testing::fixtures::commit(&store, "seed", |tx| {
            tx.insert_session(&session)?;
            tx.insert_run(&run)?;
            tx.insert_checkpoint(&sample_checkpoint(run.id, 1))
        });
        let ledger = StepLedger::new(
            &run,
            Actor::worker("w1"),
            1,
            CheckpointState::default(),
            None,
        )
        .fold_final(Some(FinalFold {
            final_message: "done".to_owned(),
            next_step: 2,
            denial_limit: 1,
        }));
        let committed =
            store.transact(|tx| ledger.stage_batch(tx, &batch(1, &["a"]), results, now));
        assert!(committed.is_ok(), "{committed:?}");
        let folded = ledger.settle(true);
        assert_eq!(ledger.run_ended(), folded.run_final);
        let after = store.read(|tx| tx.run(run.id)).unwrap().unwrap();
        let latest = store
            .read(|tx| tx.latest_checkpoint(run.id))
            .unwrap()
            .unwrap();
        (folded, after, latest.trigger)
    }

    #[test]
    fn final_folds_into_batch_only_where_the_loop_would_have_completed_the_run() {
        let ok = [result(
            "a",
            OutcomeStatus::Succeeded,
            TrustLevel::InternalTool,
        )];
        let (folded, after, trigger) = close_with_final(|_| {}, &ok, T0);
        assert!(folded.batch && folded.run_final);
        assert_eq!(after.status(), RunStatus::Completed);
        assert_eq!(
            after.step_count, 2,
            "FINAL's step is the one the Final answers"
        );
        assert_eq!(trigger, CheckpointTrigger::Final);

        // Point 1: a cancel request committed before the transaction.
        let (folded, after, trigger) =
            close_with_final(|r| r.cancel_requested_at = Some(T0), &ok, T0);
        assert!(folded.batch && !folded.run_final);
        assert_eq!(
            (after.status(), trigger),
            (RunStatus::Running, CheckpointTrigger::ToolBatch)
        );
        // The deadline, at the transaction's now.
        let (folded, ..) = close_with_final(|r| r.deadline_at = Some(T0), &ok, T0);
        assert!(!folded.run_final, "now >= deadline_at");
        // The step limit: the Final's step would be over it.
        let (folded, ..) = close_with_final(|r| r.limits.max_steps = 1, &ok, T0);
        assert!(!folded.run_final, "step 2 > max_steps");
        // An identical denial at the limit fails the run instead.
        let denied = [result("a", OutcomeStatus::Denied, TrustLevel::InternalTool)];
        let (folded, ..) = close_with_final(|_| {}, &denied, T0);
        assert!(!folded.run_final, "repeated denial");
    }
}
