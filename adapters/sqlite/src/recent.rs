//! What the writer's own transactions left in the database, kept between them (issue 33).
//!
//! A tool call takes two transactions of the single writer, and the second reads again what
//! the first wrote: the run (and its lease), the invocation it inserted, the session's next
//! event sequence, the journal's next event id, the id of the policy decision's text. Each of
//! those reads cost a statement and a row decoding (an invocation's 27 µs, most of it decoding
//! its arguments and decision). The [`Kept`] rows of one transaction answer within it; this
//! module keeps them across transactions, and stays true by three rules:
//!
//! - **Only what a member that ended well wrote or read is kept**: the group absorbs a member's
//!   [`Kept`] once its closure returned `Ok`. A member that failed, and was undone, leaves
//!   nothing here.
//!   Later members of the same group read the group's uncommitted rows, as they would from the
//!   connection.
//! - **A group that does not commit forgets everything**: its members' rows were never
//!   durable, and the database is as it was before the group.
//! - **Another connection's commit forgets everything**: `PRAGMA data_version` changes when any
//!   other connection (another process on the same file, the command line) commits. The
//!   writer reads it after each `BEGIN IMMEDIATE`, when no other writer can commit until this
//!   group ends; a change clears the cache before any member reads it. (A checkpoint by
//!   another connection that restarts the WAL changes it too: a needless clear, never a stale
//!   row. The store's own checkpointer is `PASSIVE` and changes nothing.)
//!
//! Readers (`Store::read`, on their own connections) never see it: they read a committed
//! snapshot, and this cache holds the open group's uncommitted rows too.
//!
//! What is kept is bounded by what is executing: a run only while it is RUNNING, an invocation
//! only while it is on its way to a result (PROPOSED, AUTHORIZED, RUNNING). A run parked for an
//! approval, or finished, and a call waiting for one, or finished, leave: they may wait for
//! days, and their next read is no hot path. Each map is also emptied whole when it outgrows
//! [`BOUND`], and the runs when their planner inputs (shared with the `planner_inputs` cache,
//! but kept alive here) pass [`INPUT_BUDGET`] bytes; emptying costs nothing but reads.

use std::collections::BTreeMap;

use airlock_core::ids::{InvocationId, RunId, SessionId};
use airlock_core::invocation::Invocation;
use airlock_core::run::Run;
use airlock_core::vocab::{InvocationStatus, RunStatus};

use super::kept::Kept;

/// At most this many entries in each map: far above the runs and calls a host has in flight
/// (4 runs per worker by default, SPEC §8.2), so in steady state nothing is dropped but what
/// ended.
pub(super) const BOUND: usize = 4096;

/// At most this many bytes of planner inputs held by the kept runs (the `planner_inputs`
/// cache's own budget).
pub(super) const INPUT_BUDGET: usize = 64 * 1024 * 1024;

/// What a member that ended well hands the cache (see the module docs).
pub(super) struct Absorbed {
    pub(super) kept: Kept,
    /// The journal's next sequence of each session the member appended to.
    pub(super) next_sequences: BTreeMap<SessionId, i64>,
    /// The journal's next event id, if the member read or advanced it.
    pub(super) next_event_id: Option<i64>,
    /// Policy decision texts the member found or added, by text.
    pub(super) decision_ids: BTreeMap<String, i64>,
}

#[derive(Debug, Default)]
pub(super) struct Recent {
    runs: BTreeMap<RunId, Run>,
    /// The bytes of the kept runs' planner inputs (each counted once per run).
    input_bytes: usize,
    /// The session of each run met (a run's session never changes).
    sessions: BTreeMap<RunId, SessionId>,
    invocations: BTreeMap<InvocationId, Invocation>,
    next_sequences: BTreeMap<SessionId, i64>,
    next_event_id: Option<i64>,
    decision_ids: BTreeMap<String, i64>,
    /// `PRAGMA data_version` as the writer last read it.
    data_version: Option<i64>,
}

impl Recent {
    pub(super) fn run(&self, id: RunId) -> Option<&Run> {
        self.runs.get(&id)
    }

    /// Every run taken in has its session noted in `sessions`, kept or not.
    pub(super) fn session_of(&self, run: RunId) -> Option<SessionId> {
        self.sessions.get(&run).copied()
    }

    pub(super) fn invocation(&self, id: InvocationId) -> Option<&Invocation> {
        self.invocations.get(&id)
    }

    pub(super) fn next_sequence_of(&self, session: SessionId) -> Option<i64> {
        self.next_sequences.get(&session).copied()
    }

    pub(super) fn next_event_id(&self) -> Option<i64> {
        self.next_event_id
    }

    pub(super) fn decision_id(&self, text: &str) -> Option<i64> {
        self.decision_ids.get(text).copied()
    }

    /// Takes in what a member that ended well wrote and read (see the module docs).
    pub(super) fn absorb(&mut self, absorbed: Absorbed) {
        let Absorbed {
            kept,
            next_sequences,
            next_event_id,
            decision_ids,
        } = absorbed;
        let parts = kept.into_parts();
        for run in parts.forgotten_runs {
            self.remove_run(run);
        }
        for (run, session) in parts.sessions {
            self.sessions.insert(run, session);
        }
        for (id, run) in parts.runs {
            self.sessions.insert(id, run.session_id);
            self.remove_run(id);
            if run.status() == RunStatus::Running {
                self.input_bytes = self.input_bytes.saturating_add(run.planner_input.len());
                self.runs.insert(id, run);
            }
        }
        for (id, invocation) in parts.invocations {
            if matches!(
                invocation.status,
                InvocationStatus::Proposed
                    | InvocationStatus::Authorized
                    | InvocationStatus::Running
            ) {
                self.invocations.insert(id, invocation);
            } else {
                self.invocations.remove(&id);
            }
        }
        self.next_sequences.extend(next_sequences);
        if next_event_id.is_some() {
            self.next_event_id = next_event_id;
        }
        self.decision_ids.extend(decision_ids);
        self.bound();
    }

    fn remove_run(&mut self, id: RunId) {
        if let Some(run) = self.runs.remove(&id) {
            self.input_bytes = self.input_bytes.saturating_sub(run.planner_input.len());
        }
    }

    /// Empties each map that outgrew [`BOUND`], and the runs past [`INPUT_BUDGET`].
    fn bound(&mut self) {
        if self.runs.len() > BOUND || self.input_bytes > INPUT_BUDGET {
            self.runs.clear();
            self.input_bytes = 0;
        }
        if self.sessions.len() > BOUND {
            self.sessions.clear();
        }
        if self.invocations.len() > BOUND {
            self.invocations.clear();
        }
        if self.next_sequences.len() > BOUND {
            self.next_sequences.clear();
        }
        if self.decision_ids.len() > BOUND {
            self.decision_ids.clear();
        }
    }

    /// Forgets every row (a group that did not commit). The data version stays: it is still
    /// what the connection last read.
    pub(super) fn forget_all(&mut self) {
        let data_version = self.data_version;
        *self = Recent {
            data_version,
            ..Recent::default()
        };
    }

    /// Notes `PRAGMA data_version` as read at the start of a group, forgetting every row when
    /// it moved since the last read (another connection committed).
    pub(super) fn note_data_version(&mut self, version: i64) {
        if self.data_version != Some(version) {
            self.forget_all();
            self.data_version = Some(version);
        }
    }

    /// Whether nothing is kept (for tests).
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.runs.is_empty()
            && self.sessions.is_empty()
            && self.invocations.is_empty()
            && self.next_sequences.is_empty()
            && self.next_event_id.is_none()
            && self.decision_ids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use airlock_core::testing::fixtures::{sample_invocation, sample_run, sample_session};

    use super::*;

    fn absorbed(runs: &[Run], invocations: &[Invocation]) -> Absorbed {
        let mut kept = Kept::default();
        for run in runs {
            kept.keep_read(run.clone());
        }
        for invocation in invocations {
            kept.keep_invocation(invocation);
        }
        Absorbed {
            kept,
            next_sequences: BTreeMap::new(),
            next_event_id: Some(9),
            decision_ids: BTreeMap::new(),
        }
    }

    #[test]
    fn what_finished_leaves_and_what_runs_stays() {
        let session = sample_session(1);
        let running = sample_run(1, session.id, RunStatus::Running);
        let done = sample_run(2, session.id, RunStatus::Completed);
        let parked = sample_run(3, session.id, RunStatus::WaitingForApproval);
        let open = sample_invocation(1, &running, 1, "c1", InvocationStatus::Running);
        let closed = sample_invocation(2, &running, 1, "c2", InvocationStatus::Succeeded);
        let waiting = sample_invocation(3, &running, 1, "c3", InvocationStatus::WaitingForApproval);
        let mut recent = Recent::default();
        recent.absorb(absorbed(
            &[running.clone(), done.clone(), parked.clone()],
            &[open.clone(), closed.clone(), waiting.clone()],
        ));
        assert_eq!(recent.run(running.id), Some(&running));
        assert_eq!(recent.run(done.id), None, "a terminal run is not kept");
        assert_eq!(recent.run(parked.id), None, "a parked run is not kept");
        assert_eq!(
            recent.session_of(done.id),
            Some(session.id),
            "its session is"
        );
        assert_eq!(recent.invocation(open.id), Some(&open));
        assert_eq!(
            recent.invocation(closed.id),
            None,
            "a finished call is not kept"
        );
        assert_eq!(
            recent.invocation(waiting.id),
            None,
            "a waiting call is not kept"
        );
        assert_eq!(recent.next_event_id(), Some(9));
    }

    #[test]
    fn a_run_that_finishes_leaves_with_its_inputs_bytes() {
        let session = sample_session(1);
        let running = sample_run(1, session.id, RunStatus::Running);
        let mut recent = Recent::default();
        recent.absorb(absorbed(std::slice::from_ref(&running), &[]));
        recent.absorb(absorbed(std::slice::from_ref(&running), &[]));
        assert_eq!(
            recent.input_bytes,
            running.planner_input.len(),
            "counted once"
        );
        let mut finished = running.clone();
        finished.state = sample_run(2, session.id, RunStatus::Completed).state;
        recent.absorb(absorbed(&[finished], &[]));
        assert_eq!(recent.run(running.id), None);
        assert_eq!(recent.input_bytes, 0);
    }

    #[test]
    fn runs_past_the_input_budget_are_emptied() {
        let session = sample_session(1);
        let mut big = sample_run(1, session.id, RunStatus::Running);
        big.planner_input = "x".repeat(INPUT_BUDGET / 2).into();
        let mut other = sample_run(2, session.id, RunStatus::Running);
        other.planner_input = big.planner_input.clone();
        let mut recent = Recent::default();
        recent.absorb(absorbed(&[big.clone(), other], &[]));
        assert_eq!(recent.input_bytes, INPUT_BUDGET);
        assert_eq!(
            recent.run(big.id),
            Some(&big),
            "at the budget the runs stay"
        );
        let third = sample_run(3, session.id, RunStatus::Running);
        recent.absorb(absorbed(&[third], &[]));
        assert!(
            recent.runs.is_empty(),
            "past the budget the runs are emptied"
        );
        assert_eq!(recent.input_bytes, 0);
    }

    #[test]
    fn a_moved_data_version_forgets_everything_and_an_unmoved_one_nothing() {
        let session = sample_session(1);
        let running = sample_run(1, session.id, RunStatus::Running);
        let mut recent = Recent::default();
        recent.note_data_version(3);
        recent.absorb(absorbed(std::slice::from_ref(&running), &[]));
        recent.note_data_version(3);
        assert_eq!(recent.run(running.id), Some(&running));
        recent.note_data_version(4);
        assert!(recent.is_empty(), "{recent:?}");
    }

    #[test]
    fn a_map_past_its_bound_is_emptied() {
        let session = sample_session(1);
        let runs: Vec<Run> = (0..=BOUND as u128)
            .map(|n| sample_run(n + 1, session.id, RunStatus::Running))
            .collect();
        let mut recent = Recent::default();
        recent.absorb(absorbed(&runs[..BOUND], &[]));
        assert_eq!(recent.runs.len(), BOUND);
        recent.absorb(absorbed(&runs[BOUND..], &[]));
        assert!(recent.runs.is_empty(), "one past the bound empties the map");
    }
}
