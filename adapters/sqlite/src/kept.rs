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
//! A run is kept whole: its planner input (a scripted run's whole script, up to megabytes) is
//! an `Arc` that every copy shares, so keeping and handing out a run copies no script.

use std::collections::{BTreeMap, BTreeSet};

use airlock_core::ids::{InvocationId, RunId, SessionId};
use airlock_core::invocation::Invocation;
use airlock_core::run::Run;
use airlock_core::run::checkpoint::PendingBatch;

#[derive(Debug, Default)]
pub(super) struct Kept {
    runs: BTreeMap<RunId, Run>,
    /// The session of runs met without their row (an event's or a checkpoint's run): a run's
    /// session never changes, so even a forgotten run's stays known.
    sessions: BTreeMap<RunId, SessionId>,
    invocations: BTreeMap<InvocationId, Invocation>,
    /// The last PENDING checkpoint this transaction wrote of each run (version and batch): an
    /// invocation of one of its calls keeps its raw arguments there (the `arguments` module).
    pending: BTreeMap<RunId, (u32, PendingBatch)>,
    /// Runs a statement changed in a way not known here, kept or not: the writer's cache of
    /// earlier transactions (the `recent` module) must forget them too.
    forgotten: BTreeSet<RunId>,
}

/// What a transaction that ended well leaves for the writer's cache (the `recent` module).
pub(super) struct KeptParts {
    pub(super) runs: BTreeMap<RunId, Run>,
    pub(super) sessions: BTreeMap<RunId, SessionId>,
    pub(super) invocations: BTreeMap<InvocationId, Invocation>,
    /// Runs forgotten and not read again since: the cache drops its copy.
    pub(super) forgotten_runs: BTreeSet<RunId>,
}

impl Kept {
    pub(super) fn run(&self, id: RunId) -> Option<&Run> {
        self.runs.get(&id)
    }

    /// Keeps a run read from its row (or from the writer's cache).
    pub(super) fn keep_read(&mut self, run: Run) {
        self.forgotten.remove(&run.id);
        self.runs.insert(run.id, run);
    }

    /// Keeps `run` as written by an update (whose guard checked every column it does not
    /// write, the input among them) in place of the run kept before. Without one, nothing is
    /// kept.
    pub(super) fn keep_written(&mut self, run: &Run) {
        if let Some(kept) = self.runs.get_mut(&run.id) {
            *kept = run.clone();
        }
    }

    /// Forgets run `id` (a statement changed it in a way not known here); a later read of it
    /// goes to its row, and the writer's cache forgets it too.
    pub(super) fn forget_run(&mut self, id: RunId) {
        if let Some(kept) = self.runs.remove(&id) {
            self.sessions.insert(id, kept.session_id);
        }
        self.forgotten.insert(id);
    }

    /// Whether run `id` was forgotten in this transaction and not read from its row since:
    /// the writer's cache must not answer for it.
    pub(super) fn forgot_run(&self, id: RunId) -> bool {
        self.forgotten.contains(&id)
    }

    /// The session of run `id`, if this transaction met the run.
    pub(super) fn session_of(&self, id: RunId) -> Option<SessionId> {
        match self.runs.get(&id) {
            Some(kept) => Some(kept.session_id),
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

    /// What this transaction leaves for the writer's cache, once it ended well.
    pub(super) fn into_parts(self) -> KeptParts {
        let mut forgotten_runs = self.forgotten;
        forgotten_runs.retain(|id| !self.runs.contains_key(id));
        KeptParts {
            runs: self.runs,
            sessions: self.sessions,
            invocations: self.invocations,
            forgotten_runs,
        }
    }
}
