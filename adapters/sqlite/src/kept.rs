//! Rows a write transaction already read or wrote, kept until it ends (issue 33).
//!
//! A tool call's transaction reads its run and its invocation several times: core reads them,
//! and each guarded update reads the current row again to check its guard (as `MemStore`
//! does). Inside one transaction of the single writer nothing but this transaction changes a
//! row, so the second and later reads are answered from here: a row read is kept, a row
//! inserted or updated is kept as written (`update_run` and `update_invocation` write exactly
//! the row they were given, their guards having checked every column they do not write), and
//! a statement that changes a run in a way not known here (the heartbeat's) forgets it. A
//! reader's transaction is one snapshot (`BEGIN DEFERRED` … `COMMIT`), so what it read stays
//! true until it ends as well.
//!
//! A run is kept without its planner input, which is the whole script of a scripted run (up
//! to megabytes) and never changes: the input is held once, shared ([`Arc`]), and copied into
//! a `Run` only when one is handed out, as a read of the row did before (a kept copy of the
//! whole run made a 990-step run of a 1 MB script twice as slow per step, in page faults of
//! megabyte allocations).

use std::collections::BTreeMap;
use std::sync::Arc;

use airlock_core::ids::{InvocationId, RunId, SessionId};
use airlock_core::invocation::Invocation;
use airlock_core::run::Run;
use airlock_core::run::checkpoint::PendingBatch;

/// A run without its planner input (left empty), and the input.
#[derive(Debug)]
pub(super) struct KeptRun {
    pub(super) run: Run,
    pub(super) input: Arc<str>,
}

impl KeptRun {
    /// The whole run, its input shared (`Run::planner_input` is an `Arc`).
    pub(super) fn whole(&self) -> Run {
        let mut run = self.run.clone();
        run.planner_input = Arc::clone(&self.input);
        run
    }
}

/// `run`'s fields but its planner input, which is left empty (a `Run` literal, so that a new
/// field of `Run` must be added here to compile).
pub(super) fn without_input(run: &Run) -> Run {
    Run {
        id: run.id,
        session_id: run.session_id,
        tenant_id: run.tenant_id.clone(),
        principal_id: run.principal_id.clone(),
        principal_scopes: run.principal_scopes.clone(),
        origin_trust: run.origin_trust,
        planner_kind: run.planner_kind.clone(),
        planner_input: Arc::from(""),
        state: run.state.clone(),
        step_count: run.step_count,
        tool_call_count: run.tool_call_count,
        limits: run.limits,
        deadline_at: run.deadline_at,
        lease_epoch: run.lease_epoch,
        attempts: run.attempts,
        cancel_requested_at: run.cancel_requested_at,
        created_at: run.created_at,
        updated_at: run.updated_at,
    }
}

#[derive(Debug, Default)]
pub(super) struct Kept {
    runs: BTreeMap<RunId, KeptRun>,
    /// The session of runs met without their row (an event's or a checkpoint's run): a run's
    /// session never changes, so even a forgotten run's stays known.
    sessions: BTreeMap<RunId, SessionId>,
    invocations: BTreeMap<InvocationId, Invocation>,
    /// The last PENDING checkpoint this transaction wrote of each run (version and batch): an
    /// invocation of one of its calls keeps its raw arguments there (the `arguments` module).
    pending: BTreeMap<RunId, (u32, PendingBatch)>,
}

impl Kept {
    pub(super) fn run(&self, id: RunId) -> Option<&KeptRun> {
        self.runs.get(&id)
    }

    /// Keeps a run read from its row: `run` without its input, and the input.
    pub(super) fn keep_read(&mut self, run: Run, input: Arc<str>) {
        self.runs.insert(run.id, KeptRun { run, input });
    }

    /// Keeps `run` as written by an update, which never changes the input: the input kept
    /// with the run's earlier state stays. Without one, nothing is kept.
    pub(super) fn keep_written(&mut self, run: &Run) {
        if let Some(kept) = self.runs.get_mut(&run.id) {
            kept.run = without_input(run);
        }
    }

    pub(super) fn forget_run(&mut self, id: RunId) {
        if let Some(kept) = self.runs.remove(&id) {
            self.sessions.insert(id, kept.run.session_id);
        }
    }

    /// The session of run `id`, if this transaction met the run.
    pub(super) fn session_of(&self, id: RunId) -> Option<SessionId> {
        match self.runs.get(&id) {
            Some(kept) => Some(kept.run.session_id),
            None => self.sessions.get(&id).copied(),
        }
    }

    pub(super) fn keep_session_of(&mut self, id: RunId, session: SessionId) {
        self.sessions.insert(id, session);
    }

    pub(super) fn invocation(&self, id: InvocationId) -> Option<&Invocation> {
        self.invocations.get(&id)
    }

    pub(super) fn keep_invocation(&mut self, invocation: &Invocation) {
        self.invocations.insert(invocation.id, invocation.clone());
    }

    /// Notes a checkpoint of `run` at `version` holding the pending `batch`, just written.
    pub(super) fn keep_pending(&mut self, run: RunId, version: u32, batch: &PendingBatch) {
        self.pending.insert(run, (version, batch.clone()));
    }

    /// The last PENDING checkpoint of `run` this transaction wrote.
    pub(super) fn pending(&self, run: RunId) -> Option<(u32, &PendingBatch)> {
        self.pending
            .get(&run)
            .map(|(version, batch)| (*version, batch))
    }
}
