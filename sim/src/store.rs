//! `SimStore`: the one durable store of a simulated world. It is core's `MemStore` (committed
//! transactions survive a node kill; SPEC §14's crash model) plus an observer that the checkers
//! need and the store itself cannot keep: whether a transaction is open right now (§16 #12), a
//! record of every commit — when it happened (simulated monotonic time and wall clock), the
//! events it appended, the leases it guarded and the heartbeats it ran (a [`TxProbe`] sees them
//! pass), and how each run row looked after it (#20, #28, #32, #33, #40) — and every status an
//! invocation row was seen in after a commit (#15). A few rules about what one commit may hold
//! are checked as the commit lands (see [`CommitLog`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use airlock_core::access::ApiToken;
use airlock_core::approval::Approval;
use airlock_core::connection::{Connection, ConnectionStatus};
use airlock_core::events::{Event, EventType, NewEvent, ProcessEvent};
use airlock_core::ids::{
    ApiTokenId, ApprovalId, ConnectionId, InvocationId, NotifyTargetId, RunId, SessionId,
};
use airlock_core::invocation::Invocation;
use airlock_core::mem_store::{MemSnapshot, MemStore, is_rule_breach};
use airlock_core::notify::{NotifyLease, NotifyTarget, Progress};
use airlock_core::run::checkpoint::{Admission, Checkpoint, ResultRef, StepRecord};
use airlock_core::run::{HeartbeatObs, Lease, Run, RunGuard, RunState, RunSummary};
use airlock_core::session::{PolicyProfileRecord, Session, Settlement};
use airlock_core::store::{
    ApprovalCursor, CallIdentity, CreatedPage, RunCursor, Store, StoreTx, Twin, TwinScope, TxError,
};
use airlock_core::time::Timestamp;
use airlock_core::vocab::{ApprovalStatus, InvocationStatus, RunStatus};

/// When something happened in a world: simulated monotonic microseconds since the world began,
/// and the wall clock (which jumps forward under faults) at that moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moment {
    pub mono: u64,
    pub wall: Timestamp,
}

/// Where a `SimStore` reads the time; the world installs its simulated clock.
pub type MomentSource = Arc<dyn Fn() -> Moment + Send + Sync>;

/// One heartbeat (SPEC §8.2) a transaction ran: its lease and what it reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatNote {
    pub lease: Lease,
    /// Whether the lease held (the row was renewed).
    pub renewed: bool,
    /// Whether it read a set `cancel_requested_at`.
    pub cancel_seen: bool,
}

/// A run row as the checkers follow it from commit to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunView {
    pub id: RunId,
    pub session_id: SessionId,
    pub status: RunStatus,
    pub lease_epoch: u64,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<Timestamp>,
    pub scheduled_for: Option<Timestamp>,
    pub cancel_requested_at: Option<Timestamp>,
    pub attempts: u32,
    /// The step its latest checkpoint has in hand (`CheckpointState::current_step`).
    pub current_step: u32,
}

impl RunView {
    fn of(run: &Run, current_step: u32) -> RunView {
        let (lease_owner, lease_expires_at, scheduled_for) = match &run.state {
            RunState::Running {
                lease_owner,
                lease_expires_at,
            } => (Some(lease_owner.clone()), Some(*lease_expires_at), None),
            RunState::Queued { scheduled_for } => (None, None, *scheduled_for),
            _ => (None, None, None),
        };
        RunView {
            id: run.id,
            session_id: run.session_id,
            status: run.status(),
            lease_epoch: run.lease_epoch,
            lease_owner,
            lease_expires_at,
            scheduled_for,
            cancel_requested_at: run.cancel_requested_at,
            attempts: run.attempts,
            current_step,
        }
    }
}

/// One committed transaction that wrote something.
#[derive(Debug, Clone)]
pub struct CommitRecord {
    /// The transaction's position among all commits of the world (from 0).
    pub seq: usize,
    pub at: Moment,
    /// The events it appended, in order.
    pub events: Vec<Event>,
    /// The leases it guarded (`guard_lease`).
    pub guards: Vec<Lease>,
    pub heartbeats: Vec<HeartbeatNote>,
    /// The runs whose row (or checkpoint position) it changed, as they were after it.
    pub runs: Vec<RunView>,
}

/// What a [`TxProbe`] saw one transaction do.
#[derive(Debug, Default)]
struct TxNotes {
    guards: Vec<Lease>,
    heartbeats: Vec<HeartbeatNote>,
}

/// What the observer saw across all commits.
#[derive(Debug, Default)]
pub struct CommitLog {
    /// Every commit that wrote something, in commit order.
    pub commits: Vec<CommitRecord>,
    /// How many transactions have committed (written or not).
    committed: usize,
    /// Every run as the latest commit left it.
    runs: BTreeMap<RunId, RunView>,
    /// §17.1 F1: a row or refusal of step k committed while step k's batch was not yet
    /// recorded (the run's checkpoint had a lower current step after that commit).
    pub unrecorded_step_rows: Vec<String>,
    /// §11, §10.2: a PARK of a parallel batch committed while a call of the batch had no
    /// result yet, or a PARK of a sequential batch with a call dispatched after the parked one.
    pub early_parks: Vec<String>,
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

/// What the observer found as the commits landed: each list holds the breaches of one rule
/// (the fields of [`CommitLog`] of the same names say which).
#[derive(Debug, Default)]
pub struct CommitFindings {
    pub violations: Vec<String>,
    pub refused: Vec<String>,
    pub started_after_cancel: Vec<String>,
    pub early_step_records: Vec<String>,
    pub unrecorded_step_rows: Vec<String>,
    pub early_parks: Vec<String>,
}

impl CommitLog {
    /// Hands over what was found so far, leaving those lists empty.
    pub fn take_findings(&mut self) -> CommitFindings {
        CommitFindings {
            violations: std::mem::take(&mut self.violations),
            refused: std::mem::take(&mut self.refused),
            started_after_cancel: std::mem::take(&mut self.started_after_cancel),
            early_step_records: std::mem::take(&mut self.early_step_records),
            unrecorded_step_rows: std::mem::take(&mut self.unrecorded_step_rows),
            early_parks: std::mem::take(&mut self.early_parks),
        }
    }

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
        self.steps_recorded_first(events, snapshot);
        self.parks_after_their_batch(events, snapshot);
        for event in events {
            let Some(run) = event.run_id else { continue };
            match event.event_type {
                EventType::ToolCallStarted if self.cancel_requested.contains(&run) => {
                    let Some(row) = invocation_of(snapshot, event) else {
                        continue;
                    };
                    // A parallel batch observes once before it begins (§11); a START that the
                    // same commit closes never enters the body (RECOVER of a gone tool).
                    if row.parallel_group.is_none() && !closed_in(events, row.id) {
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

impl CommitLog {
    /// §17.1 F1: "an invocation row of step k exists only once step k's batch is recorded": a
    /// commit that creates a row (`tool.call.proposed`) or a refusal of step k leaves the run's
    /// latest checkpoint at step k or later (the folded PENDING is in the same commit).
    fn steps_recorded_first(&mut self, events: &[Event], snapshot: &MemSnapshot) {
        for event in events {
            let Some(run) = event.run_id else { continue };
            let step = match event.event_type {
                EventType::ToolCallProposed => event.payload["step_number"]
                    .as_u64()
                    .and_then(|s| u32::try_from(s).ok()),
                _ => refused_call(event).map(|(_, step, _)| step),
            };
            let Some(step) = step else { continue };
            let recorded = current_step(snapshot, run);
            if recorded < step {
                self.unrecorded_step_rows.push(format!(
                    "run {run}: {} of step {step} ({}) committed while the run's checkpoint was at step {recorded}",
                    event.event_type,
                    event.payload["call_id"].as_str().unwrap_or_default()
                ));
            }
        }
    }

    /// §11 "all calls settle before the executor continues; any park parks the run
    /// afterwards", and §9.2 "a require_approval in a sequential batch stops it": at the commit
    /// that parks a run, every call of a parallel batch has its result or waits for approval,
    /// and the calls of a sequential batch that have begun are a prefix of it in which only the
    /// last may wait.
    fn parks_after_their_batch(&mut self, events: &[Event], snapshot: &MemSnapshot) {
        for event in events
            .iter()
            .filter(|e| e.event_type == EventType::RunWaitingForApproval)
        {
            let Some(run) = event.run_id else { continue };
            let Some(batch) =
                latest_checkpoint(snapshot, run).and_then(|c| c.state.pending.clone())
            else {
                self.early_parks
                    .push(format!("run {run} parked without a pending batch"));
                continue;
            };
            let state_of = |call_id: &str| -> Option<InvocationStatus> {
                let refused = airlock_core::events::keys::refused(run, batch.step, call_id);
                if snapshot
                    .events
                    .iter()
                    .rev()
                    .any(|e| e.derivation_key.as_deref() == Some(refused.as_str()))
                {
                    return Some(InvocationStatus::Denied);
                }
                snapshot
                    .invocations
                    .values()
                    .find(|i| {
                        i.run_id == run && i.step_number == batch.step && i.call_id == call_id
                    })
                    .map(|i| i.status)
            };
            let states: Vec<Option<InvocationStatus>> = batch
                .calls
                .iter()
                .map(|c| state_of(&c.call.call_id))
                .collect();
            let settled = |s: &Option<InvocationStatus>| {
                s.is_some_and(|s| s.is_terminal() || s == InvocationStatus::WaitingForApproval)
            };
            let fine = match batch.admission {
                Admission::Parallel { .. } => states.iter().all(settled),
                Admission::Sequential => {
                    let begun = states.iter().take_while(|s| s.is_some()).count();
                    states[begun..].iter().all(Option::is_none)
                        && begun > 0
                        && states[..begun - 1]
                            .iter()
                            .all(|s| s.is_some_and(|s| s.is_terminal()))
                        && states[begun - 1] == Some(InvocationStatus::WaitingForApproval)
                }
            };
            if !fine {
                self.early_parks.push(format!(
                    "run {run} parked step {} ({:?}) with its calls at {states:?}",
                    batch.step, batch.admission
                ));
            }
        }
    }

    /// Records one successful transaction.
    fn record(&mut self, at: Moment, notes: TxNotes, events: Vec<Event>, snapshot: &MemSnapshot) {
        let seq = self.committed;
        self.committed += 1;
        let mut changed = Vec::new();
        for run in snapshot.runs.values() {
            let view = RunView::of(run, current_step(snapshot, run.id));
            if self.runs.get(&run.id) != Some(&view) {
                self.runs.insert(run.id, view.clone());
                changed.push(view);
            }
        }
        if events.is_empty()
            && notes.guards.is_empty()
            && notes.heartbeats.is_empty()
            && changed.is_empty()
        {
            return;
        }
        if !events.is_empty() {
            let rows: Vec<&Invocation> = events
                .iter()
                .filter_map(|e| invocation_of(snapshot, e))
                .collect();
            for row in rows {
                self.observe(row);
            }
            self.observe_commit(&events, snapshot);
        }
        self.commits.push(CommitRecord {
            seq,
            at,
            events,
            guards: notes.guards,
            heartbeats: notes.heartbeats,
            runs: changed,
        });
    }

    /// How many transactions have committed so far.
    pub fn committed(&self) -> usize {
        self.committed
    }
}

/// The invocation row an event is about (its payload's `invocation_id`), as `snapshot` holds
/// it.
pub(crate) fn invocation_of<'a>(
    snapshot: &'a MemSnapshot,
    event: &Event,
) -> Option<&'a Invocation> {
    snapshot.invocations.get(&invocation_id(event)?)
}

/// The invocation an event is about (its payload's `invocation_id`).
pub(crate) fn invocation_id(event: &Event) -> Option<InvocationId> {
    Some(InvocationId(
        event.payload["invocation_id"].as_str()?.parse().ok()?,
    ))
}

/// Whether `events` close invocation `id`: every terminal tool event of a row carries
/// `events::keys::result` (a row closes once).
pub(crate) fn closed_in(events: &[Event], id: InvocationId) -> bool {
    let key = airlock_core::events::keys::result(id);
    events
        .iter()
        .any(|e| e.derivation_key.as_deref() == Some(key.as_str()))
}

/// The call a refusal event is about, `(run, step, call_id)`, read back from its derivation
/// key (`events::keys::refused`); `None` for any other event.
pub(crate) fn refused_call(event: &Event) -> Option<(RunId, u32, &str)> {
    let rest = event
        .derivation_key
        .as_deref()?
        .strip_prefix("tool.call.refused:")?;
    let mut parts = rest.splitn(3, ':');
    let (_, step, call_id) = (parts.next(), parts.next()?, parts.next()?);
    Some((event.run_id?, step.parse().ok()?, call_id))
}

/// A run's latest checkpoint (checkpoints are keyed `(run, version)`).
fn latest_checkpoint(snapshot: &MemSnapshot, run: RunId) -> Option<&Checkpoint> {
    snapshot
        .checkpoints
        .range((run, 0)..=(run, u32::MAX))
        .next_back()
        .map(|(_, c)| c)
}

/// The step a run's latest checkpoint has in hand (0 without one).
fn current_step(snapshot: &MemSnapshot, run: RunId) -> u32 {
    latest_checkpoint(snapshot, run).map_or(0, |c| c.state.current_step())
}

pub struct SimStore {
    inner: MemStore,
    open: AtomicUsize,
    log: Mutex<CommitLog>,
    clock: Mutex<Option<MomentSource>>,
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
            clock: Mutex::new(None),
        }
    }

    /// Installs the clock commits are timed by (until then they are at [`Moment::default`]).
    pub fn set_clock(&self, clock: MomentSource) {
        *self.clock.lock().unwrap_or_else(|p| p.into_inner()) = Some(clock);
    }

    fn now(&self) -> Moment {
        self.clock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map_or_else(Moment::default, |clock| clock())
    }

    /// How many transactions have committed so far (a position in the commit order).
    pub fn committed(&self) -> usize {
        self.log().committed()
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
            Some(current_step(s, run.id))
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
        let at = self.now();
        self.open.fetch_add(1, Ordering::SeqCst);
        let mut notes = TxNotes::default();
        let result = self.inner.transact(|tx| {
            let mut probe = TxProbe {
                inner: tx,
                notes: &mut notes,
            };
            f(&mut probe)
        });
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
                log.record(at, notes, events, s);
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

/// A transaction as core sees it, with the observer looking on: it passes every call to the
/// real transaction and notes the leases guarded and the heartbeats run, which leave no event
/// (SPEC §8.2) but which #28 and #33 are about. Every method delegates, the defaulted ones
/// too, so core meets exactly `MemStore`'s behaviour.
struct TxProbe<'a> {
    inner: &'a mut dyn StoreTx,
    notes: &'a mut TxNotes,
}

impl StoreTx for TxProbe<'_> {
    fn insert_session(&mut self, session: &Session) -> Result<(), TxError> {
        self.inner.insert_session(session)
    }
    fn session(&mut self, id: SessionId) -> Result<Option<Session>, TxError> {
        self.inner.session(id)
    }
    fn insert_run(&mut self, run: &Run) -> Result<(), TxError> {
        self.inner.insert_run(run)
    }
    fn run(&mut self, id: RunId) -> Result<Option<Run>, TxError> {
        self.inner.run(id)
    }
    fn active_runs_in_session(&mut self, session: SessionId) -> Result<Vec<RunId>, TxError> {
        self.inner.active_runs_in_session(session)
    }
    fn guard_lease(&mut self, lease: &Lease) -> Result<(), TxError> {
        self.notes.guards.push(lease.clone());
        self.inner.guard_lease(lease)
    }
    fn update_run(&mut self, guard: &RunGuard, next: &Run) -> Result<Run, TxError> {
        self.inner.update_run(guard, next)
    }
    fn heartbeat(
        &mut self,
        lease: &Lease,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<Option<HeartbeatObs>, TxError> {
        let observed = self.inner.heartbeat(lease, until, now)?;
        self.notes.heartbeats.push(HeartbeatNote {
            lease: lease.clone(),
            renewed: observed.is_some(),
            cancel_seen: observed
                .as_ref()
                .is_some_and(|o| o.cancel_requested_at.is_some()),
        });
        Ok(observed)
    }
    fn next_claimable_run(
        &mut self,
        now: Timestamp,
        only: Option<RunId>,
    ) -> Result<Option<Run>, TxError> {
        self.inner.next_claimable_run(now, only)
    }
    fn expired_leases(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Run>, TxError> {
        self.inner.expired_leases(now, limit)
    }
    fn count_runs(&mut self, status: RunStatus) -> Result<u64, TxError> {
        self.inner.count_runs(status)
    }
    fn runs_of_tenant(
        &mut self,
        tenant: &str,
        after: Option<RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunSummary>, TxError> {
        self.inner.runs_of_tenant(tenant, after, limit)
    }
    fn insert_connection(&mut self, connection: &Connection) -> Result<(), TxError> {
        self.inner.insert_connection(connection)
    }
    fn connection(&mut self, id: ConnectionId) -> Result<Option<Connection>, TxError> {
        self.inner.connection(id)
    }
    fn connection_by_session(&mut self, session: SessionId) -> Result<Option<Connection>, TxError> {
        self.inner.connection_by_session(session)
    }
    fn insert_state_key(
        &mut self,
        key: &airlock_core::conversation::request_state::StateKey,
    ) -> Result<(), TxError> {
        self.inner.insert_state_key(key)
    }
    fn state_key(
        &mut self,
        id: &str,
    ) -> Result<Option<airlock_core::conversation::request_state::StateKey>, TxError> {
        self.inner.state_key(id)
    }
    fn newest_state_key(
        &mut self,
    ) -> Result<Option<airlock_core::conversation::request_state::StateKey>, TxError> {
        self.inner.newest_state_key()
    }
    fn insert_call_task(
        &mut self,
        task: &airlock_core::conversation::task::CallTask,
    ) -> Result<(), TxError> {
        self.inner.insert_call_task(task)
    }
    fn call_task(
        &mut self,
        id_sha256: &str,
    ) -> Result<Option<airlock_core::conversation::task::CallTask>, TxError> {
        self.inner.call_task(id_sha256)
    }
    fn call_task_of_run(
        &mut self,
        run: airlock_core::ids::RunId,
    ) -> Result<Option<airlock_core::conversation::task::CallTask>, TxError> {
        self.inner.call_task_of_run(run)
    }
    fn open_connection_by_key(
        &mut self,
        tenant: &str,
        key: &airlock_core::conversation::ConversationKey,
    ) -> Result<Option<Connection>, TxError> {
        self.inner.open_connection_by_key(tenant, key)
    }
    fn update_connection(
        &mut self,
        expected: ConnectionStatus,
        next: &Connection,
    ) -> Result<(), TxError> {
        self.inner.update_connection(expected, next)
    }
    fn connections_of_tenant(
        &mut self,
        tenant: &str,
        limit: usize,
    ) -> Result<Vec<Connection>, TxError> {
        self.inner.connections_of_tenant(tenant, limit)
    }
    fn expired_connections(
        &mut self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Connection>, TxError> {
        self.inner.expired_connections(now, limit)
    }
    fn orphaned_call_runs(&mut self, now: Timestamp, limit: usize) -> Result<Vec<RunId>, TxError> {
        self.inner.orphaned_call_runs(now, limit)
    }
    fn waiting_call_approvals(
        &mut self,
        tenant: &str,
        principal: &str,
        tool: &str,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Approval>, TxError> {
        self.inner
            .waiting_call_approvals(tenant, principal, tool, now, limit)
    }
    fn insert_checkpoint(&mut self, checkpoint: &Checkpoint) -> Result<(), TxError> {
        self.inner.insert_checkpoint(checkpoint)
    }
    fn latest_checkpoint(&mut self, run: RunId) -> Result<Option<Checkpoint>, TxError> {
        self.inner.latest_checkpoint(run)
    }
    fn insert_step_record(
        &mut self,
        record: &StepRecord,
        pending: Option<u32>,
    ) -> Result<(), TxError> {
        self.inner.insert_step_record(record, pending)
    }
    fn step_records(
        &mut self,
        run: RunId,
        after_step: u32,
        limit: usize,
    ) -> Result<Vec<StepRecord>, TxError> {
        self.inner.step_records(run, after_step, limit)
    }
    fn insert_invocation(&mut self, invocation: &Invocation) -> Result<(), TxError> {
        self.inner.insert_invocation(invocation)
    }
    fn invocation(&mut self, id: InvocationId) -> Result<Option<Invocation>, TxError> {
        self.inner.invocation(id)
    }
    fn invocation_by_key(&mut self, idempotency_key: &str) -> Result<Option<Invocation>, TxError> {
        self.inner.invocation_by_key(idempotency_key)
    }
    fn invocation_by_call(
        &mut self,
        run: RunId,
        step: u32,
        call_id: &str,
    ) -> Result<Option<Invocation>, TxError> {
        self.inner.invocation_by_call(run, step, call_id)
    }
    fn invocations_of_run(&mut self, run: RunId) -> Result<Vec<Invocation>, TxError> {
        self.inner.invocations_of_run(run)
    }
    fn invocations_of_run_in(
        &mut self,
        run: RunId,
        statuses: &[InvocationStatus],
    ) -> Result<Vec<Invocation>, TxError> {
        self.inner.invocations_of_run_in(run, statuses)
    }
    fn update_invocation(
        &mut self,
        expected: InvocationStatus,
        next: &Invocation,
    ) -> Result<(), TxError> {
        self.inner.update_invocation(expected, next)
    }
    fn uncertain_invocations(
        &mut self,
        tenant: &str,
        include_settled: bool,
    ) -> Result<Vec<Invocation>, TxError> {
        self.inner.uncertain_invocations(tenant, include_settled)
    }
    fn twins(
        &mut self,
        identity: &CallIdentity<'_>,
        scope: TwinScope,
    ) -> Result<Vec<Twin>, TxError> {
        self.inner.twins(identity, scope)
    }
    fn insert_approval(&mut self, approval: &Approval) -> Result<(), TxError> {
        self.inner.insert_approval(approval)
    }
    fn approval(&mut self, id: ApprovalId) -> Result<Option<Approval>, TxError> {
        self.inner.approval(id)
    }
    fn approval_by_action(&mut self, action_id: InvocationId) -> Result<Option<Approval>, TxError> {
        self.inner.approval_by_action(action_id)
    }
    fn approvals_of_run(&mut self, run: RunId) -> Result<Vec<Approval>, TxError> {
        self.inner.approvals_of_run(run)
    }
    fn update_approval(
        &mut self,
        expected: ApprovalStatus,
        next: &Approval,
    ) -> Result<(), TxError> {
        self.inner.update_approval(expected, next)
    }
    fn pending_approvals(
        &mut self,
        tenant: &str,
        run: Option<RunId>,
        after: Option<ApprovalCursor>,
        limit: usize,
    ) -> Result<Vec<Approval>, TxError> {
        self.inner.pending_approvals(tenant, run, after, limit)
    }
    fn due_approvals(
        &mut self,
        now: Timestamp,
        tenant: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Approval>, TxError> {
        self.inner.due_approvals(now, tenant, limit)
    }
    fn append_event(&mut self, event: &NewEvent) -> Result<Event, TxError> {
        self.inner.append_event(event)
    }
    fn event_by_key(&mut self, derivation_key: &str) -> Result<Option<Event>, TxError> {
        self.inner.event_by_key(derivation_key)
    }
    fn events_of_run(
        &mut self,
        run: RunId,
        after_id: Option<i64>,
        limit: usize,
    ) -> Result<Vec<Event>, TxError> {
        self.inner.events_of_run(run, after_id, limit)
    }
    fn append_process_event(&mut self, event: &ProcessEvent) -> Result<ProcessEvent, TxError> {
        self.inner.append_process_event(event)
    }
    fn process_events(&mut self) -> Result<Vec<ProcessEvent>, TxError> {
        self.inner.process_events()
    }
    fn invocations_created(&mut self, page: &CreatedPage) -> Result<Vec<Invocation>, TxError> {
        self.inner.invocations_created(page)
    }
    fn process_events_created(
        &mut self,
        event_type: EventType,
        page: &CreatedPage,
    ) -> Result<Vec<ProcessEvent>, TxError> {
        self.inner.process_events_created(event_type, page)
    }
    fn insert_settlement(&mut self, settlement: &Settlement) -> Result<(), TxError> {
        self.inner.insert_settlement(settlement)
    }
    fn settlement_by_invocation(
        &mut self,
        invocation: InvocationId,
    ) -> Result<Option<Settlement>, TxError> {
        self.inner.settlement_by_invocation(invocation)
    }
    fn insert_policy_profile(
        &mut self,
        record: &PolicyProfileRecord,
    ) -> Result<PolicyProfileRecord, TxError> {
        self.inner.insert_policy_profile(record)
    }
    fn policy_profiles(&mut self) -> Result<Vec<PolicyProfileRecord>, TxError> {
        self.inner.policy_profiles()
    }
    fn events_of_tenant(
        &mut self,
        tenant: &str,
        after_id: Option<i64>,
        limit: usize,
    ) -> Result<Vec<Event>, TxError> {
        self.inner.events_of_tenant(tenant, after_id, limit)
    }
    fn last_event_id(&mut self) -> Result<Option<i64>, TxError> {
        self.inner.last_event_id()
    }
    fn insert_api_token(&mut self, token: &ApiToken) -> Result<(), TxError> {
        self.inner.insert_api_token(token)
    }
    fn api_token(&mut self, id: ApiTokenId) -> Result<Option<ApiToken>, TxError> {
        self.inner.api_token(id)
    }
    fn api_token_by_digest(&mut self, digest: &str) -> Result<Option<ApiToken>, TxError> {
        self.inner.api_token_by_digest(digest)
    }
    fn api_tokens(&mut self, tenant: &str) -> Result<Vec<ApiToken>, TxError> {
        self.inner.api_tokens(tenant)
    }
    fn revoke_api_token(&mut self, id: ApiTokenId, at: Timestamp) -> Result<ApiToken, TxError> {
        self.inner.revoke_api_token(id, at)
    }
    fn insert_notify_target(&mut self, target: &NotifyTarget) -> Result<(), TxError> {
        self.inner.insert_notify_target(target)
    }
    fn notify_target(&mut self, id: NotifyTargetId) -> Result<Option<NotifyTarget>, TxError> {
        self.inner.notify_target(id)
    }
    fn notify_targets(&mut self, tenant: Option<&str>) -> Result<Vec<NotifyTarget>, TxError> {
        self.inner.notify_targets(tenant)
    }
    fn remove_notify_target(
        &mut self,
        id: NotifyTargetId,
        at: Timestamp,
    ) -> Result<NotifyTarget, TxError> {
        self.inner.remove_notify_target(id, at)
    }
    fn advance_notify_target(
        &mut self,
        id: NotifyTargetId,
        expected: &Progress,
        next: &Progress,
    ) -> Result<(), TxError> {
        self.inner.advance_notify_target(id, expected, next)
    }
    fn notify_lease(&mut self, tenant: &str) -> Result<Option<NotifyLease>, TxError> {
        self.inner.notify_lease(tenant)
    }
    fn swap_notify_lease(
        &mut self,
        expected: Option<&NotifyLease>,
        next: &NotifyLease,
    ) -> Result<(), TxError> {
        self.inner.swap_notify_lease(expected, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::fixtures::{event, pending_batch, run};
    use airlock_core::events::Actor;
    use airlock_core::ids::ParallelGroupId;
    use serde_json::json;

    /// A run whose latest checkpoint holds step 1's parallel batch of `c1` and `c2`, both
    /// refused (so settled).
    fn parallel_step_refused() -> MemSnapshot {
        let mut snapshot = pending_batch(
            1,
            Admission::Parallel {
                parallel_group: ParallelGroupId(uuid::Uuid::from_u128(9)),
            },
        );
        for call_id in ["c1", "c2"] {
            snapshot.events.push(Event {
                derivation_key: Some(airlock_core::events::keys::refused(run(), 1, call_id)),
                ..event(EventType::ToolCallDenied, Actor::worker("w0.1"), json!({}))
            });
        }
        snapshot
    }

    fn park() -> Event {
        event(
            EventType::RunWaitingForApproval,
            Actor::worker("w0.1"),
            json!({"approval_ids": []}),
        )
    }

    #[test]
    fn a_park_before_its_parallel_batch_settled_is_caught() {
        let mut snapshot = parallel_step_refused();
        let mut log = CommitLog::default();
        log.parks_after_their_batch(&[park()], &snapshot);
        assert!(log.early_parks.is_empty(), "{:?}", log.early_parks);
        snapshot.events.pop();
        log.parks_after_their_batch(&[park()], &snapshot);
        assert_eq!(log.early_parks.len(), 1);
        log.parks_after_their_batch(&[park()], &MemSnapshot::default());
        assert_eq!(log.early_parks.len(), 2, "a park without a pending batch");
    }

    #[test]
    fn a_row_of_a_step_not_yet_recorded_is_caught() {
        let snapshot = parallel_step_refused();
        let proposed = |step: u32| {
            event(
                EventType::ToolCallProposed,
                Actor::worker("w0.1"),
                json!({"step_number": step, "call_id": "c"}),
            )
        };
        let mut log = CommitLog::default();
        log.steps_recorded_first(&[proposed(1)], &snapshot);
        assert!(log.unrecorded_step_rows.is_empty());
        log.steps_recorded_first(&[proposed(2)], &snapshot);
        assert_eq!(log.unrecorded_step_rows.len(), 1);
        // A refusal is read back from its key.
        let refused = Event {
            derivation_key: Some(airlock_core::events::keys::refused(run(), 3, "c")),
            ..event(EventType::ToolCallDenied, Actor::worker("w0.1"), json!({}))
        };
        log.steps_recorded_first(&[refused], &snapshot);
        assert_eq!(log.unrecorded_step_rows.len(), 2);
    }
}
