//! What a world did over time, beside the store: when each process incarnation started, was
//! killed, paused and resumed; forward jumps of the wall clock; every planner turn and tool body
//! (the work a run has in flight); every execution a worker ran; and what the client's calls
//! were answered. The time-bound checks (SPEC §16 #33) and the outcome checks read it. All times
//! are simulated monotonic microseconds since the world began ([`crate::store::Moment::mono`]).

use std::collections::BTreeMap;

use airlock_core::ids::{RunId, SessionId};
use airlock_core::time::Timestamp;

use crate::catalog::Catalog;

/// Microseconds in a millisecond, for settings given in ms.
pub const MS: u64 = 1_000;

/// What happened to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeChange {
    /// A new incarnation began (its `init` ran).
    Started,
    /// The incarnation died (madsim `kill`): every task, timer and in-memory map is gone.
    Killed,
    /// The whole node stopped running (a zombie): its timers and tasks wait.
    Paused,
    Resumed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEvent {
    pub at: u64,
    pub node: usize,
    /// The incarnation's name (`w1.3`): a worker's id, so its lease owner and event actor.
    pub incarnation: String,
    pub change: NodeChange,
}

/// One process incarnation's build: its tool catalog and policy version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incarnation {
    /// The node it ran on; `None` for the previous build that wrote the starting store.
    pub node: Option<usize>,
    pub catalog: Catalog,
    pub policy_version: String,
}

/// Work a run has in flight: a planner turn or a tool body, from entry to its end (return,
/// timeout, panic, or the node's death, whichever came first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkItem {
    pub run: RunId,
    /// The lease epoch of the execution (planner turns know it; tool bodies do not).
    pub epoch: Option<u64>,
    pub incarnation: String,
    /// A tool body's idempotency key.
    pub key: Option<String>,
    pub start: u64,
    pub end: Option<u64>,
}

/// One task a worker incarnation ran an execution (or an inline dispatch) in: it holds one of
/// the worker's `concurrency` slots from start to end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionSpan {
    pub incarnation: String,
    pub start: u64,
    pub end: Option<u64>,
}

/// A `cancel_run` the client made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelCall {
    pub at: u64,
    pub run: RunId,
}

/// A `resume_run` the client made, with how many transactions had committed when it read the
/// run, the wall clock it compared a back-off against, and its answer (`Ok`, or the error code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeCall {
    pub committed_before: usize,
    pub at: Timestamp,
    pub run: RunId,
    pub answer: Result<(), String>,
}

/// A `submit_run` into an existing session (SPEC §15), with how many transactions had committed
/// once it returned, and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSubmit {
    pub planned: usize,
    pub session: SessionId,
    pub committed_after: usize,
    pub answer: Result<RunId, String>,
}

/// Everything the world recorded over time.
#[derive(Debug, Default)]
pub struct Timeline {
    pub nodes: Vec<NodeEvent>,
    pub incarnations: BTreeMap<String, Incarnation>,
    /// Forward jumps of the wall clock: `(at, micros)`.
    pub jumps: Vec<(u64, i64)>,
    pub planner_turns: Vec<WorkItem>,
    pub tool_bodies: Vec<WorkItem>,
    pub executions: Vec<ExecutionSpan>,
    pub cancels: Vec<CancelCall>,
    pub resumes: Vec<ResumeCall>,
    pub session_submits: Vec<SessionSubmit>,
    /// The world's end.
    pub end: u64,
    /// The wall clock when the world began (microseconds since the Unix epoch).
    pub epoch_wall: i64,
}

impl Timeline {
    /// The wall clock at monotonic time `at` (jumps at `at` included).
    pub fn wall_at(&self, at: u64) -> i64 {
        let jumped: i64 = self
            .jumps
            .iter()
            .filter(|(t, _)| *t <= at)
            .map(|(_, j)| *j)
            .sum();
        self.epoch_wall + i64::try_from(at).unwrap_or(i64::MAX / 2) + jumped
    }

    /// The first monotonic time at which the wall clock reads `wall` or later.
    pub fn mono_at_wall(&self, wall: Timestamp) -> u64 {
        let wall = wall.as_micros();
        let mut starts: Vec<u64> = vec![0];
        starts.extend(self.jumps.iter().map(|(t, _)| *t));
        starts.sort_unstable();
        starts.dedup();
        for (i, start) in starts.iter().enumerate() {
            if self.wall_at(*start) >= wall {
                return *start;
            }
            let offset = self.wall_at(*start) - i64::try_from(*start).unwrap_or(i64::MAX / 2);
            let at = u64::try_from(wall - offset).unwrap_or(0);
            let next = starts.get(i + 1).copied().unwrap_or(u64::MAX);
            if at < next {
                return at.max(*start);
            }
        }
        u64::MAX
    }

    /// The changes of `incarnation`, in time order.
    fn changes_of<'a>(&'a self, incarnation: &'a str) -> impl Iterator<Item = &'a NodeEvent> {
        self.nodes
            .iter()
            .filter(move |e| e.incarnation == incarnation)
    }

    /// Whether `incarnation` ran (started, neither dead nor paused) at every moment of
    /// `[from, to]`. An incarnation with no node (the previous build) never runs.
    pub fn alive(&self, incarnation: &str, from: u64, to: u64) -> bool {
        let mut started = None;
        let mut paused_since: Option<u64> = None;
        for event in self.changes_of(incarnation) {
            match event.change {
                NodeChange::Started => started = Some(event.at),
                NodeChange::Killed if event.at <= to => return false,
                NodeChange::Killed => {}
                NodeChange::Paused => paused_since = Some(event.at),
                NodeChange::Resumed => {
                    if let Some(since) = paused_since.take()
                        && since <= to
                        && event.at >= from
                    {
                        return false;
                    }
                }
            }
        }
        if paused_since.is_some_and(|since| since <= to) {
            return false;
        }
        started.is_some_and(|s| s <= from)
    }

    /// The last time at or before `at` when `incarnation` (re)started running: its start or
    /// its last resume.
    pub fn running_since(&self, incarnation: &str, at: u64) -> Option<u64> {
        self.changes_of(incarnation)
            .filter(|e| e.at <= at && matches!(e.change, NodeChange::Started | NodeChange::Resumed))
            .map(|e| e.at)
            .last()
    }

    /// The worker incarnations that ran at every moment of `[from, to]`.
    pub fn workers_alive(&self, from: u64, to: u64) -> Vec<&str> {
        self.incarnations
            .iter()
            .filter(|(_, i)| i.node.is_some())
            .map(|(name, _)| name.as_str())
            .filter(|name| !name.starts_with("client") && self.alive(name, from, to))
            .collect()
    }

    /// How many execution slots `incarnation` had taken at `at`.
    pub fn slots_taken(&self, incarnation: &str, at: u64) -> usize {
        self.executions
            .iter()
            .filter(|e| {
                e.incarnation == incarnation && e.start <= at && e.end.is_none_or(|end| end > at)
            })
            .count()
    }

    /// The most slots `incarnation` had taken at any moment of `[from, to]`.
    pub fn max_slots_taken(&self, incarnation: &str, from: u64, to: u64) -> usize {
        let mut moments = vec![from];
        moments.extend(
            self.executions
                .iter()
                .filter(|e| e.incarnation == incarnation && e.start >= from && e.start <= to)
                .map(|e| e.start),
        );
        moments
            .into_iter()
            .map(|t| self.slots_taken(incarnation, t))
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at: u64, incarnation: &str, change: NodeChange) -> NodeEvent {
        NodeEvent {
            at,
            node: 0,
            incarnation: incarnation.to_owned(),
            change,
        }
    }

    fn timeline() -> Timeline {
        let mut t = Timeline {
            epoch_wall: 1_000_000,
            ..Timeline::default()
        };
        t.incarnations.insert(
            "w0.1".into(),
            Incarnation {
                node: Some(0),
                catalog: Catalog::Base,
                policy_version: "v".into(),
            },
        );
        t.nodes = vec![
            event(10, "w0.1", NodeChange::Started),
            event(100, "w0.1", NodeChange::Paused),
            event(200, "w0.1", NodeChange::Resumed),
            event(500, "w0.1", NodeChange::Killed),
        ];
        t
    }

    #[test]
    fn liveness_of_an_incarnation_follows_its_pauses_and_death() {
        let t = timeline();
        assert!(t.alive("w0.1", 10, 99));
        assert!(!t.alive("w0.1", 5, 50), "not started yet");
        assert!(!t.alive("w0.1", 50, 150), "paused inside");
        assert!(!t.alive("w0.1", 150, 250), "paused at the start");
        assert!(t.alive("w0.1", 201, 499));
        assert!(!t.alive("w0.1", 300, 600), "killed inside");
        assert!(!t.alive("legacy.1", 0, 1));
        assert_eq!(t.running_since("w0.1", 300), Some(200));
        assert_eq!(t.workers_alive(20, 90), vec!["w0.1"]);
    }

    #[test]
    fn wall_time_maps_back_through_jumps() {
        let mut t = timeline();
        assert_eq!(t.wall_at(50), 1_000_050);
        assert_eq!(t.mono_at_wall(Timestamp::from_micros(1_000_050)), 50);
        t.jumps.push((100, 1_000));
        assert_eq!(t.wall_at(100), 1_001_100);
        // Reached by the jump itself.
        assert_eq!(t.mono_at_wall(Timestamp::from_micros(1_000_500)), 100);
        assert_eq!(t.mono_at_wall(Timestamp::from_micros(1_001_200)), 200);
        assert_eq!(t.mono_at_wall(Timestamp::from_micros(1_000_090)), 90);
    }

    #[test]
    fn slots_count_open_executions() {
        let mut t = timeline();
        t.executions = vec![
            ExecutionSpan {
                incarnation: "w0.1".into(),
                start: 10,
                end: Some(30),
            },
            ExecutionSpan {
                incarnation: "w0.1".into(),
                start: 20,
                end: None,
            },
        ];
        assert_eq!(t.slots_taken("w0.1", 25), 2);
        assert_eq!(t.slots_taken("w0.1", 30), 1);
        assert_eq!(t.max_slots_taken("w0.1", 0, 15), 1);
        assert_eq!(t.max_slots_taken("w0.1", 0, 40), 2);
    }
}
