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

use std::collections::BTreeMap;

use airlock_core::ids::{InvocationId, RunId};
use airlock_core::invocation::Invocation;
use airlock_core::run::Run;

#[derive(Debug, Default)]
pub(super) struct Kept {
    runs: BTreeMap<RunId, Run>,
    invocations: BTreeMap<InvocationId, Invocation>,
}

impl Kept {
    pub(super) fn run(&self, id: RunId) -> Option<&Run> {
        self.runs.get(&id)
    }

    pub(super) fn keep_run(&mut self, run: &Run) {
        self.runs.insert(run.id, run.clone());
    }

    pub(super) fn forget_run(&mut self, id: RunId) {
        self.runs.remove(&id);
    }

    pub(super) fn invocation(&self, id: InvocationId) -> Option<&Invocation> {
        self.invocations.get(&id)
    }

    pub(super) fn keep_invocation(&mut self, invocation: &Invocation) {
        self.invocations.insert(invocation.id, invocation.clone());
    }
}
