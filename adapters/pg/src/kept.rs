//! Rows a transaction already read or wrote, kept until it ends (issue 33: round trips).
//!
//! A tool call's transaction asks for its run and its invocation several times: core reads
//! them, and each guarded update reads the current row again to check its guard (as `MemStore`
//! does); every such read was one exchange with the server. A row is kept only while nobody
//! else can change it, so a kept answer is the answer the server would give:
//!
//! - **In a write transaction** (READ COMMITTED) a run is kept once this transaction holds its
//!   row lock (a locked read, an insert, a claim's `FOR UPDATE SKIP LOCKED`) — every writer of
//!   a run takes that lock first (see `tx`'s "Concurrency"), and the lock lasts until COMMIT.
//!   An invocation is kept once this transaction holds its run's lock (every writer of an
//!   invocation locks its run first: `lock_run_first`) or inserted it (nobody else sees it
//!   before COMMIT).
//! - **In a read transaction** (one REPEATABLE READ snapshot) whatever was read stays true until
//!   it ends.
//!
//! `update_run` and `update_invocation` keep the row they were given (their guards checked
//! every column they do not write); the heartbeat's statement changes a run in a way not known
//! here, so it forgets the run. A run's session never changes, so it stays known even after the
//! run is forgotten. The highest checkpoint version and step record of a run are kept as read
//! or written: the next insert checks contiguity against them without a `MAX()` read, and a
//! concurrent insert this transaction could not see is still refused by the primary key.

use std::collections::BTreeMap;

use airlock_core::ids::{InvocationId, RunId, SessionId};
use airlock_core::invocation::Invocation;
use airlock_core::run::Run;

#[derive(Debug, Default)]
pub(crate) struct Kept {
    runs: BTreeMap<RunId, Run>,
    sessions: BTreeMap<RunId, SessionId>,
    invocations: BTreeMap<InvocationId, Invocation>,
    /// Highest checkpoint version of a run, as read or written by this transaction.
    checkpoint_versions: BTreeMap<RunId, i64>,
    /// Highest step record of a run, as read or written by this transaction.
    steps: BTreeMap<RunId, i64>,
}

impl Kept {
    pub(crate) fn run(&self, id: RunId) -> Option<&Run> {
        self.runs.get(&id)
    }

    pub(crate) fn keep_run(&mut self, run: &Run) {
        self.sessions.insert(run.id, run.session_id);
        self.runs.insert(run.id, run.clone());
    }

    pub(crate) fn forget_run(&mut self, id: RunId) {
        self.runs.remove(&id);
    }

    /// The session of run `id`, if this transaction met the run.
    pub(crate) fn session_of(&self, id: RunId) -> Option<SessionId> {
        self.sessions.get(&id).copied()
    }

    pub(crate) fn keep_session_of(&mut self, id: RunId, session: SessionId) {
        self.sessions.insert(id, session);
    }

    pub(crate) fn invocation(&self, id: InvocationId) -> Option<&Invocation> {
        self.invocations.get(&id)
    }

    pub(crate) fn keep_invocation(&mut self, invocation: &Invocation) {
        self.invocations.insert(invocation.id, invocation.clone());
    }

    pub(crate) fn checkpoint_version(&self, run: RunId) -> Option<i64> {
        self.checkpoint_versions.get(&run).copied()
    }

    pub(crate) fn keep_checkpoint_version(&mut self, run: RunId, version: i64) {
        self.checkpoint_versions.insert(run, version);
    }

    pub(crate) fn step(&self, run: RunId) -> Option<i64> {
        self.steps.get(&run).copied()
    }

    pub(crate) fn keep_step(&mut self, run: RunId, step: i64) {
        self.steps.insert(run, step);
    }
}
