//! `SimStore`: the one durable store of a simulated world. It is core's `MemStore` (committed
//! transactions survive a node kill; SPEC §14's crash model) plus an observer that the checkers
//! need and the store itself cannot keep: whether a transaction is open right now (§16 #12), the
//! events each commit appended (commit boundaries, for #20, #28, #32, #40) and every status an
//! invocation row was seen in after a commit (#15).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use airlock_core::events::{Event, EventType};
use airlock_core::ids::{InvocationId, RunId};
use airlock_core::invocation::Invocation;
use airlock_core::mem_store::{MemSnapshot, MemStore, is_rule_breach};
use airlock_core::run::checkpoint::{ResultRef, StepRecord};
use airlock_core::store::{Store, StoreTx, TxError};

/// What the observer saw across all commits.
#[derive(Debug, Default)]
pub struct CommitLog {
    /// The events of each commit that appended any, in commit order.
    pub commits: Vec<Vec<Event>>,
    /// The first version of every invocation row seen after a commit (its immutable fields).
    first: BTreeMap<InvocationId, Invocation>,
    /// The latest version seen.
    last: BTreeMap<InvocationId, Invocation>,
    /// §16 #15 breaches found at commit time.
    pub violations: Vec<String>,
    /// Runs whose `run.cancel_requested` has committed.
    cancel_requested: BTreeSet<RunId>,
    /// §8.5 point 3 (read inside the folded START, §17.1 F2/F3): a sequential call's START
    /// committed after its run's cancel request had committed.
    pub started_after_cancel: Vec<String>,
    /// Step records already seen, `(run, step)`.
    recorded_steps: BTreeSet<(RunId, u32)>,
    /// §17.1 F4 / §17.2: a step record committed while a call it refers to had not ended (its
    /// BATCH ran ahead of the call's FINISH).
    pub early_step_records: Vec<String>,
    /// Writes the store refused because they broke a rule of the rows (§8.1, §8.2, §9.1,
    /// §10.1, §13, §14), not because another writer got there first. Core then abandons the
    /// execution and recovery ends the run in some legal state, so without this list a core
    /// bug that attempts such a write would look like a harmless retry.
    pub refused: Vec<String>,
}

impl CommitLog {
    fn observe(&mut self, row: &Invocation) {
        let first = self.first.entry(row.id).or_insert_with(|| row.clone());
        if !first.same_identity(row) {
            self.violations
                .push(format!("invocation {}: an immutable field changed", row.id));
        }
        if let Some(last) = self.last.get(&row.id) {
            if last.status.is_terminal() && last != row {
                self.violations
                    .push(format!("terminal invocation {} changed", row.id));
            }
            if last.status != row.status && !last.status.may_become_in_one_commit(row.status) {
                self.violations.push(format!(
                    "invocation {} moved {} -> {}",
                    row.id, last.status, row.status
                ));
            }
        }
        self.last.insert(row.id, row.clone());
    }

    /// The commit-level rules that need a commit's events and the rows as it left them.
    fn observe_commit(&mut self, events: &[Event], snapshot: &MemSnapshot) {
        for event in events {
            let Some(run) = event.run_id else { continue };
            match event.event_type {
                EventType::ToolCallStarted if self.cancel_requested.contains(&run) => {
                    let Some(id) = event.payload["invocation_id"]
                        .as_str()
                        .and_then(|id| id.parse().ok())
                        .map(InvocationId)
                    else {
                        continue;
                    };
                    let Some(row) = snapshot.invocations.get(&id) else {
                        continue;
                    };
                    // A parallel batch observes once before it begins (§11); a START that the
                    // same commit closes never enters the body (RECOVER of a gone tool).
                    let closed_here = events.iter().any(|e| {
                        e.derivation_key.as_deref()
                            == Some(airlock_core::events::keys::result(id).as_str())
                    });
                    if row.parallel_group.is_none() && !closed_here {
                        self.started_after_cancel.push(format!(
                            "run {run}: sequential call {} ({}) started after the run's cancel request committed",
                            row.call_id, row.id
                        ));
                    }
                }
                EventType::RunCancelRequested => {
                    self.cancel_requested.insert(run);
                }
                _ => {}
            }
        }
        let fresh: Vec<&StepRecord> = snapshot
            .step_records
            .values()
            .filter(|r| !self.recorded_steps.contains(&(r.run_id, r.step)))
            .collect();
        for record in fresh {
            self.recorded_steps.insert((record.run_id, record.step));
            for reference in &record.results {
                if let ResultRef::Invocation { invocation_id } = reference {
                    let ended = snapshot
                        .invocations
                        .get(invocation_id)
                        .is_some_and(|i| i.status.is_terminal());
                    if !ended {
                        self.early_step_records.push(format!(
                            "run {} step {}: recorded while invocation {invocation_id} had not ended",
                            record.run_id, record.step
                        ));
                    }
                }
            }
        }
    }
}

pub struct SimStore {
    inner: MemStore,
    open: AtomicUsize,
    log: Mutex<CommitLog>,
}

impl Default for SimStore {
    fn default() -> Self {
        SimStore::new()
    }
}

impl SimStore {
    pub fn new() -> SimStore {
        SimStore {
            inner: MemStore::new(),
            open: AtomicUsize::new(0),
            log: Mutex::new(CommitLog::default()),
        }
    }

    pub fn shared() -> Arc<SimStore> {
        Arc::new(SimStore::new())
    }

    /// Whether a transaction is open at this moment.
    pub fn transaction_open(&self) -> bool {
        self.open.load(Ordering::SeqCst) > 0
    }

    pub fn snapshot(&self) -> MemSnapshot {
        self.inner.snapshot()
    }

    pub fn inspect<R>(&self, f: impl FnOnce(&MemSnapshot) -> R) -> R {
        self.inner.inspect(f)
    }

    /// Whether the invocation with this idempotency key carries a committed watermark.
    pub fn watermarked(&self, key: &str) -> bool {
        self.inner.inspect(|s| {
            s.invocations
                .values()
                .any(|i| i.idempotency_key == key && i.effect_sent_at.is_some())
        })
    }

    /// Whether START has committed for the invocation with this idempotency key: it is RUNNING
    /// or in a status only RUNNING leads to (§9.1).
    pub fn started(&self, key: &str) -> bool {
        use airlock_core::vocab::InvocationStatus::Running;
        self.inner.inspect(|s| {
            s.invocations.values().any(|i| {
                i.idempotency_key == key && (i.status == Running || Running.may_become(i.status))
            })
        })
    }

    /// The last step of `run` whose batch is checkpointed (PENDING or BATCH): the planner
    /// must never be asked for it, or for an earlier step, again (§8.3: a resumed step
    /// re-dispatches its stored batch). `None` when the asking execution's lease epoch is no
    /// longer the run's: a paused worker that wakes may still ask, and is fenced at its next
    /// write.
    pub fn planned_through(&self, run: &airlock_core::run::Run) -> Option<u32> {
        self.inner.inspect(|s| {
            let current = s.runs.get(&run.id)?;
            if current.lease_epoch != run.lease_epoch {
                return None;
            }
            Some(
                s.checkpoints
                    .range((run.id, 0)..=(run.id, u32::MAX))
                    .next_back()
                    .map_or(0, |(_, checkpoint)| checkpoint.state.current_step()),
            )
        })
    }

    /// Whether a planner's history differs from what the store holds (§16 #16: the planner
    /// sees each stored result item byte for byte; §17.2: every finished step, in order, from
    /// its step record). `None` when they agree, or when the asking execution's lease epoch is
    /// no longer the run's (a paused worker's stale view).
    pub fn history_mismatch(
        &self,
        input: &airlock_core::ports::PlannerInput<'_>,
    ) -> Option<String> {
        let run = input.run;
        self.inner.inspect(|s| {
            let current = s.runs.get(&run.id)?;
            if current.lease_epoch != run.lease_epoch {
                return None;
            }
            let records: Vec<&StepRecord> = s
                .step_records
                .range((run.id, 0)..=(run.id, u32::MAX))
                .map(|(_, r)| r)
                .filter(|r| r.step < input.step)
                .collect();
            if records.len() != input.history.len() {
                return Some(format!(
                    "run {}: step {} was planned with {} history steps, the store holds {}",
                    run.id,
                    input.step,
                    input.history.len(),
                    records.len()
                ));
            }
            for (seen, record) in input.history.iter().zip(records) {
                if seen.step != record.step || seen.calls != record.calls {
                    return Some(format!(
                        "run {}: history step {} differs from its record",
                        run.id, seen.step
                    ));
                }
                let stored: Vec<Option<String>> = record
                    .results
                    .iter()
                    .map(|reference| match reference {
                        ResultRef::Invocation { invocation_id } => s
                            .invocations
                            .get(invocation_id)
                            .and_then(|i| i.result_item.clone()),
                        ResultRef::Refusal { derivation_key } => s
                            .events
                            .iter()
                            .find(|e| e.derivation_key.as_deref() == Some(derivation_key.as_str()))
                            .and_then(|e| e.payload["result_item"].as_str().map(str::to_owned)),
                    })
                    .collect();
                let shown: Vec<Option<String>> =
                    seen.results.iter().map(|r| Some(r.to_canonical())).collect();
                if stored != shown {
                    return Some(format!(
                        "run {}: step {}'s results as the planner saw them differ from the stored result items",
                        run.id, seen.step
                    ));
                }
            }
            None
        })
    }

    pub fn log(&self) -> MutexGuard<'_, CommitLog> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Store for SimStore {
    fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        let before = self.inner.inspect(|s| s.events.len());
        self.open.fetch_add(1, Ordering::SeqCst);
        let result = self.inner.transact(f);
        self.open.fetch_sub(1, Ordering::SeqCst);
        if let Err(error) = &result
            && is_rule_breach(error)
        {
            self.log().refused.push(error.to_string());
        }
        if result.is_ok() {
            let mut log = self.log();
            self.inner.inspect(|s| {
                let events: Vec<Event> = s.events[before..].to_vec();
                if events.is_empty() {
                    return;
                }
                let rows: Vec<&Invocation> = events
                    .iter()
                    .filter_map(|e| e.payload["invocation_id"].as_str())
                    .filter_map(|id| id.parse().ok())
                    .filter_map(|id: uuid::Uuid| s.invocations.get(&InvocationId(id)))
                    .collect();
                for row in rows {
                    log.observe(row);
                }
                log.observe_commit(&events, s);
                log.commits.push(events);
            });
        }
        result
    }

    /// `MemStore`'s read: a write inside is refused, as the SQLite store's read connections
    /// refuse it, so a core read that writes fails here too. Reads commit nothing to log.
    fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.open.fetch_add(1, Ordering::SeqCst);
        let result = self.inner.read(f);
        self.open.fetch_sub(1, Ordering::SeqCst);
        result
    }
}
