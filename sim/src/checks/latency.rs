//! §16 #33, checked against its time bound: "a RUNNING run with `cancel_requested_at` set is
//! terminal within one heartbeat interval plus its in-flight calls or planner turn while its
//! lease holder lives; otherwise within lease expiry + reclaim interval + re-queue backoff +
//! that bound."
//!
//! A run's life after the cancel request commits (at T) is a chain of lease tenures (CLAIM to
//! whatever ends that epoch) and the gaps between them, and each link is held to its share of
//! the bound. The execution holding tenure `e` is E; `hb` is the heartbeat interval (lease/3).
//!
//! - **The report** (R0): if E's process runs and E keeps heartbeating, a heartbeat of epoch
//!   `e` reads the request within `hb` of T (§8.2).
//! - **Nothing new once E knows** (R1): E knows at the heartbeat that reported the request, or
//!   at its CLAIM when the request came first (the token starts cancelled, §8.5). After that no
//!   planner turn of E begins (point 1 precedes every turn), and no call of E STARTs (point 3:
//!   in-transaction for a sequential call, once before a parallel batch, whose STARTs follow it
//!   within a few fault-hook pauses). The re-invocations of calls an earlier epoch left RUNNING
//!   are the "in-flight calls" a resumed execution finishes first; they commit no START.
//! - **Cancel wins** (R5): a FINAL of E committed after it knew is CANCELLED, unless it reports
//!   what the spec checks before point 2 (`planner_error`) or a failure of the platform
//!   (`internal_error`).
//! - **The live bound** (R2): while E's process runs and E heartbeats, its tenure ends by
//!   `max(t_known, end of every planner turn or tool body E began by then) + ε`, where
//!   `t_known` is E's report or `T + hb`, whichever is first. "In flight" is exactly that: the
//!   work E had begun when it learnt of (or should have learnt of) the request.
//! - **Otherwise** (R3, R4): a lease nobody renews is reclaimed within the reclaim interval
//!   plus one poll after it expires, when some worker runs throughout that window; and a
//!   re-queued run is claimed within one poll of its backoff ending, when some worker runs
//!   throughout with a free slot for every QUEUED run. The next tenure then starts cancelled
//!   and is held to R1, R5 and R2 from its CLAIM.
//!
//! Every premise is read from the world's record, never assumed, and every slack is named
//! below with what it covers. Each rule counts how often its premises held (`check.inv33_…`).

use std::collections::BTreeMap;

use airlock_core::events::EventType;
use airlock_core::ids::RunId;
use airlock_core::time::Timestamp;
use airlock_core::vocab::RunStatus;

use super::world::World;
use crate::store::{RunView, closed_in, invocation_id, invocation_of};
use crate::timeline::{MS, Timeline};

/// A fault-hook pause after a commit lasts 1–5 ms (`world::SimFaults`). The STARTs of a
/// parallel batch follow its point 3 by at most three of them (the first call's
/// `after_pending`, `after_propose`, `after_start`; the other calls then begin together).
const PARALLEL_START_SLACK: u64 = 20 * MS;
/// After a token is cancelled, a FINAL that does not cancel can still commit only behind an
/// observation point already passed: the repeated-denial FINAL behind a BATCH (two pauses).
const OBSERVATION_SLACK: u64 = 20 * MS;
/// A tool body is entered a few pauses after the decision to run it (its START commit).
const ENTRY_SLACK: u64 = 50 * MS;
/// From the end of the last in-flight work to E's FINAL: `after_invoke`, FINISH,
/// `after_finish`, `after_batch`, the RECOVER pauses of calls that need no body: at most about
/// a dozen pauses.
const CHAIN_SLACK: u64 = 100 * MS;
/// A heartbeat task starts with its execution, a claim's pause after the CLAIM commit.
const HEARTBEAT_SLACK: u64 = 20 * MS;
/// One worker tick beyond its poll: its claims, reclaims and expiries each await one pause.
const TICK_SLACK: u64 = 200 * MS;

/// How a tenure ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// E's own FINAL.
    Final {
        status: RunStatus,
        reason: Option<String>,
    },
    Park,
    /// RECLAIM, or anything else not written by E.
    Other,
}

/// One lease epoch of a run, from its CLAIM to the commit that ended it.
#[derive(Debug)]
struct Tenure {
    run: RunId,
    epoch: u64,
    holder: String,
    claimed: u64,
    claimed_commit: usize,
    /// `(at, commit, how)`.
    ended: Option<(u64, usize, End)>,
    /// Every `lease_expires_at` the tenure had, with when it was set.
    leases: Vec<(u64, Timestamp)>,
    /// The STARTs its transactions committed: `(at, closed in the same commit)`.
    starts: Vec<(u64, bool)>,
    /// Its heartbeats: `(at, commit, cancel_seen)`.
    beats: Vec<(u64, usize, bool)>,
}

/// A QUEUED stretch of a run: `(became QUEUED at, scheduled_for, left QUEUED at)`.
type Queued = (u64, Option<Timestamp>, Option<u64>);

struct Histories {
    tenures: Vec<Tenure>,
    queued: BTreeMap<RunId, Vec<Queued>>,
    /// `(at, commit)` of each run's first cancel request.
    cancelled: BTreeMap<RunId, (u64, usize)>,
    /// When each call (by idempotency key) first STARTed.
    started: BTreeMap<String, u64>,
}

fn histories(world: &World<'_>) -> Histories {
    let mut tenures: Vec<Tenure> = Vec::new();
    let mut open: BTreeMap<RunId, usize> = BTreeMap::new();
    let mut views: BTreeMap<RunId, RunView> = BTreeMap::new();
    let mut queued: BTreeMap<RunId, Vec<Queued>> = BTreeMap::new();
    let mut cancelled = BTreeMap::new();
    let mut started = BTreeMap::new();
    for (n, commit) in world.commits.iter().enumerate() {
        let at = commit.at.mono;
        for event in commit
            .events
            .iter()
            .filter(|e| e.event_type == EventType::ToolCallStarted)
        {
            if let Some(row) = invocation_of(world.snapshot, event) {
                started.entry(row.idempotency_key.clone()).or_insert(at);
            }
        }
        for event in &commit.events {
            if event.event_type == EventType::RunCancelRequested
                && let Some(run) = event.run_id
            {
                cancelled.entry(run).or_insert((at, n));
            }
        }
        for view in &commit.runs {
            let before = views.insert(view.id, view.clone());
            let was_running = before
                .as_ref()
                .filter(|b| b.status == RunStatus::Running)
                .map(|b| b.lease_epoch);
            let is_running = (view.status == RunStatus::Running).then_some(view.lease_epoch);
            if was_running.is_some()
                && was_running != is_running
                && let Some(index) = open.remove(&view.id)
            {
                let tenure = &mut tenures[index];
                let end = end_of(commit, view.id, &tenure.holder, view.status);
                tenure.ended = Some((at, n, end));
            }
            if let Some(epoch) = is_running {
                if was_running != is_running {
                    open.insert(view.id, tenures.len());
                    tenures.push(Tenure {
                        run: view.id,
                        epoch,
                        holder: view.lease_owner.clone().unwrap_or_default(),
                        claimed: at,
                        claimed_commit: n,
                        ended: None,
                        leases: Vec::new(),
                        starts: Vec::new(),
                        beats: Vec::new(),
                    });
                }
                if let (Some(index), Some(expires)) = (open.get(&view.id), view.lease_expires_at) {
                    let leases = &mut tenures[*index].leases;
                    if leases.last().is_none_or(|(_, last)| *last != expires) {
                        leases.push((at, expires));
                    }
                }
            }
            let was_queued = before
                .as_ref()
                .is_some_and(|b| b.status == RunStatus::Queued);
            let list = queued.entry(view.id).or_default();
            if was_queued
                && view.status != RunStatus::Queued
                && let Some(last) = list.last_mut()
            {
                last.2 = Some(at);
            }
            if view.status == RunStatus::Queued
                && (!was_queued
                    || before
                        .as_ref()
                        .is_some_and(|b| b.scheduled_for != view.scheduled_for))
            {
                if let Some(last) = list.last_mut().filter(|l| l.2.is_none()) {
                    last.2 = Some(at);
                }
                list.push((at, view.scheduled_for, None));
            }
        }
        for beat in &commit.heartbeats {
            if let Some(tenure) = open
                .get(&beat.lease.run_id)
                .map(|i| &mut tenures[*i])
                .filter(|t| t.epoch == beat.lease.lease_epoch && beat.renewed)
            {
                tenure.beats.push((at, n, beat.cancel_seen));
            }
        }
        for event in commit
            .events
            .iter()
            .filter(|e| e.event_type == EventType::ToolCallStarted)
        {
            let Some(run) = event.run_id else { continue };
            let closed_here = invocation_id(event).is_some_and(|id| closed_in(&commit.events, id));
            // The START's tenure is the lease its transaction guarded.
            for lease in commit.guards.iter().filter(|l| l.run_id == run) {
                if let Some(tenure) = tenures.iter_mut().rev().find(|t| {
                    t.run == run && t.epoch == lease.lease_epoch && t.holder == lease.worker_id
                }) {
                    tenure.starts.push((at, closed_here));
                }
            }
        }
    }
    Histories {
        tenures,
        queued,
        cancelled,
        started,
    }
}

/// How the commit that ended a tenure ended it.
fn end_of(commit: &crate::store::CommitRecord, run: RunId, holder: &str, status: RunStatus) -> End {
    let by_holder = |e: &&airlock_core::events::Event| {
        e.run_id == Some(run) && e.actor.actor_id.as_deref() == Some(holder)
    };
    if commit
        .events
        .iter()
        .filter(by_holder)
        .any(|e| e.event_type == EventType::RunWaitingForApproval)
    {
        return End::Park;
    }
    let terminal = commit.events.iter().filter(by_holder).find(|e| {
        matches!(
            e.event_type,
            EventType::RunCompleted | EventType::RunFailed | EventType::RunCancelled
        )
    });
    match terminal {
        Some(event) => End::Final {
            status,
            reason: event.payload["failure"]["reason"]
                .as_str()
                .map(str::to_owned),
        },
        None => End::Other,
    }
}

/// The settings the bound is made of, in microseconds.
struct Bounds {
    heartbeat: u64,
    reclaim_window: u64,
    claim_window: u64,
    concurrency: usize,
}

fn count(asserted: &mut BTreeMap<String, u64>, what: &str) {
    *asserted.entry(format!("check.inv33_{what}")).or_default() += 1;
}

/// Every #33 rule over every run whose cancel was requested.
pub fn cancel_latency(world: &World<'_>, asserted: &mut BTreeMap<String, u64>) -> Vec<String> {
    let plan = world.plan;
    let bounds = Bounds {
        heartbeat: plan.lease_ms * MS / 3,
        reclaim_window: (plan.reclaim_every_ms + plan.poll_ms) * MS + TICK_SLACK,
        claim_window: plan.poll_ms * MS + TICK_SLACK,
        concurrency: plan.concurrency,
    };
    let timeline = &world.observations.timeline;
    let h = histories(world);
    let mut failures = Vec::new();
    for (run, (t, cancel_commit)) in &h.cancelled {
        for tenure in h
            .tenures
            .iter()
            .filter(|x| x.run == *run && x.ended.as_ref().is_none_or(|(_, n, _)| n > cancel_commit))
        {
            execution_rules(
                world,
                &h,
                &bounds,
                tenure,
                *t,
                *cancel_commit,
                asserted,
                &mut failures,
            );
            reclaim_rule(timeline, &bounds, tenure, *t, asserted, &mut failures);
        }
        for stretch in h.queued.get(run).into_iter().flatten() {
            claim_rule(
                world,
                &h,
                &bounds,
                *run,
                *t,
                stretch,
                asserted,
                &mut failures,
            );
        }
    }
    failures
}

/// R0, R1, R5 and R2 for the execution holding `tenure`.
#[allow(clippy::too_many_arguments)]
fn execution_rules(
    world: &World<'_>,
    h: &Histories,
    bounds: &Bounds,
    tenure: &Tenure,
    t: u64,
    cancel_commit: usize,
    asserted: &mut BTreeMap<String, u64>,
    failures: &mut Vec<String>,
) {
    let timeline = &world.observations.timeline;
    let (run, epoch, holder) = (tenure.run, tenure.epoch, tenure.holder.as_str());
    let started_cancelled = tenure.claimed_commit > cancel_commit;
    let ended_at = tenure.ended.as_ref().map(|(at, _, _)| *at);
    let ended_by = |moment: u64| ended_at.is_some_and(|at| at <= moment);
    let heartbeating_at = |moment: u64| {
        moment <= tenure.claimed + bounds.heartbeat + HEARTBEAT_SLACK
            || tenure.beats.iter().any(|(at, _, _)| {
                *at <= moment && *at + bounds.heartbeat + HEARTBEAT_SLACK >= moment
            })
    };
    // When E knew: its CLAIM, or the heartbeat that reported the request.
    let reported = if started_cancelled {
        Some(tenure.claimed)
    } else {
        tenure
            .beats
            .iter()
            .find(|(_, n, seen)| *seen && *n > cancel_commit)
            .map(|(at, _, _)| *at)
    };
    let e = format!("run {run} epoch {epoch} ({holder})");

    // R0: the report within one interval.
    if !started_cancelled {
        let by = t + bounds.heartbeat + HEARTBEAT_SLACK;
        if by <= timeline.end
            && !ended_by(by)
            && timeline.alive(holder, t, by)
            && heartbeating_at(t)
        {
            count(asserted, "report_within_one_interval");
            if reported.is_none_or(|r| r > by) {
                failures.push(format!(
                    "{e}: the cancel requested at {t} µs was not reported by a heartbeat by {by} µs (reported: {reported:?})"
                ));
            }
        }
    }

    // R1 and R5: once E knows.
    if let Some(known) = reported {
        count(asserted, "nothing_new_once_known");
        for turn in timeline.planner_turns.iter().filter(|w| {
            w.run == run && w.epoch == Some(epoch) && w.incarnation == holder && w.start > known
        }) {
            failures.push(format!(
                "{e}: a planner turn began at {} µs, after the execution knew of the cancel at {known} µs",
                turn.start
            ));
        }
        let slack = if started_cancelled {
            0
        } else {
            PARALLEL_START_SLACK
        };
        for (at, _) in tenure
            .starts
            .iter()
            .filter(|(at, closed_here)| !closed_here && (*at > known + slack || started_cancelled))
        {
            failures.push(format!(
                "{e}: a call STARTed at {at} µs, after the execution knew of the cancel at {known} µs"
            ));
        }
        if let Some((at, _, End::Final { status, reason })) = &tenure.ended
            && *at > known + OBSERVATION_SLACK
        {
            count(asserted, "cancel_wins_once_known");
            let excused = matches!(reason.as_deref(), Some("planner_error" | "internal_error"));
            if *status != RunStatus::Cancelled && !excused {
                failures.push(format!(
                    "{e}: FINAL {status} ({reason:?}) at {at} µs, after the execution knew of the cancel at {known} µs"
                ));
            }
        }
    }

    // R2: the live bound.
    let from = t.max(tenure.claimed);
    let known = if started_cancelled {
        tenure.claimed
    } else {
        reported.unwrap_or(u64::MAX).min(t + bounds.heartbeat)
    };
    let in_flight_end = timeline
        .planner_turns
        .iter()
        .filter(|w| w.run == run && w.epoch == Some(epoch) && w.incarnation == holder)
        .chain(
            timeline
                .tool_bodies
                .iter()
                .filter(|w| w.run == run && w.incarnation == holder && w.start >= tenure.claimed),
        )
        // Begun before E knew, or re-invocations of calls an earlier epoch STARTed (a resumed
        // execution finishes those first, one after another, SPEC §8.3).
        .filter(|w| {
            let recovery = w
                .key
                .as_ref()
                .and_then(|k| h.started.get(k))
                .is_some_and(|s| *s < tenure.claimed);
            (w.start <= known + ENTRY_SLACK || recovery) && w.end.is_none_or(|end| end >= from)
        })
        .map(|w| w.end.unwrap_or(u64::MAX))
        .max()
        .unwrap_or(0);
    let bound = known.max(in_flight_end).saturating_add(CHAIN_SLACK);
    if bound <= timeline.end
        && timeline.alive(holder, from, bound)
        && (ended_by(bound) || heartbeating_at(bound))
    {
        count(asserted, "live_bound");
        if !ended_by(bound) {
            failures.push(format!(
                "{e}: still RUNNING at {bound} µs, the bound for a cancel requested at {t} µs (known at {known} µs, in-flight work ended by {in_flight_end} µs)"
            ));
        }
    }
}

/// R3: a lease nobody renews is reclaimed within the reclaim window after it expires.
fn reclaim_rule(
    timeline: &Timeline,
    bounds: &Bounds,
    tenure: &Tenure,
    t: u64,
    asserted: &mut BTreeMap<String, u64>,
    failures: &mut Vec<String>,
) {
    if matches!(tenure.ended, Some((_, _, End::Final { .. } | End::Park))) {
        return;
    }
    let ended_at = tenure.ended.as_ref().map(|(at, _, _)| *at);
    for (i, (_, expires)) in tenure.leases.iter().enumerate() {
        let expiry = timeline.mono_at_wall(*expires);
        let by = expiry.saturating_add(bounds.reclaim_window);
        let next = tenure
            .leases
            .get(i + 1)
            .map(|(at, _)| *at)
            .or(ended_at)
            .unwrap_or(u64::MAX);
        if by < t || by > timeline.end || timeline.workers_alive(expiry, by).is_empty() {
            continue;
        }
        count(asserted, "reclaim_bound");
        if next > by {
            failures.push(format!(
                "run {} epoch {}: its lease expired at {expiry} µs and was neither renewed nor reclaimed by {by} µs while a worker ran",
                tenure.run, tenure.epoch
            ));
        }
    }
}

/// R4: a re-queued (or flag-only cancelled QUEUED) run is claimed within one poll of being
/// due, when some worker runs throughout with a free slot for every QUEUED run.
#[allow(clippy::too_many_arguments)]
fn claim_rule(
    world: &World<'_>,
    h: &Histories,
    bounds: &Bounds,
    run: RunId,
    t: u64,
    stretch: &Queued,
    asserted: &mut BTreeMap<String, u64>,
    failures: &mut Vec<String>,
) {
    let timeline = &world.observations.timeline;
    let (queued_at, scheduled_for, left) = *stretch;
    if left.is_some_and(|l| l <= t) {
        return;
    }
    let due = scheduled_for.map_or(0, |s| timeline.mono_at_wall(s));
    let from = queued_at.max(t).max(due);
    let by = from.saturating_add(bounds.claim_window);
    if by > timeline.end || left.is_some_and(|l| l < from) {
        return;
    }
    // Every run QUEUED at some moment of the window competes for the slots.
    let competing = h
        .queued
        .values()
        .filter(|stretches| {
            stretches
                .iter()
                .any(|(a, _, l)| *a <= by && l.is_none_or(|l| l >= from))
        })
        .count();
    let free = timeline
        .workers_alive(from, by)
        .into_iter()
        .any(|worker| timeline.max_slots_taken(worker, from, by) + competing <= bounds.concurrency);
    if !free {
        return;
    }
    count(asserted, "claim_bound");
    if left.is_some_and(|l| l <= by) {
        return;
    }
    failures.push(format!(
        "run {run}: QUEUED and due at {from} µs with a cancel requested, and not claimed by {by} µs although a worker had a free slot"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::fixtures::{self, event, run};
    use crate::checks::world::Observations;
    use crate::plan::Plan;
    use crate::store::{CommitRecord, HeartbeatNote, Moment};
    use crate::timeline::{Incarnation, NodeChange, NodeEvent, WorkItem};
    use airlock_core::events::{Actor, Event};
    use airlock_core::mem_store::MemSnapshot;
    use airlock_core::run::Lease;
    use serde_json::json;

    const W: &str = "w0.1";

    fn view(status: RunStatus, epoch: u64, expires: Option<i64>) -> RunView {
        fixtures::view(
            status,
            epoch,
            expires.map(|e| (W, Timestamp::from_micros(e))),
        )
    }

    fn commit(seq: usize, at_ms: u64, events: Vec<Event>, runs: Vec<RunView>) -> CommitRecord {
        CommitRecord {
            at: Moment {
                mono: at_ms * MS,
                wall: Timestamp::from_micros((at_ms * MS) as i64),
            },
            runs,
            ..fixtures::commit(seq, events)
        }
    }

    fn beat(seq: usize, at_ms: u64, cancel_seen: bool) -> CommitRecord {
        let mut c = commit(
            seq,
            at_ms,
            Vec::new(),
            vec![view(
                RunStatus::Running,
                1,
                Some(((at_ms + 3_000) * MS) as i64),
            )],
        );
        c.heartbeats.push(HeartbeatNote {
            lease: Lease {
                run_id: run(),
                worker_id: W.to_owned(),
                lease_epoch: 1,
            },
            renewed: true,
            cancel_seen,
        });
        c
    }

    /// A run claimed at 0 by w0.1 (lease 3 s, so heartbeats every second), cancelled at
    /// 1.5 s; a planner turn from 1.2 s to `turn_end_ms`; the heartbeat at 2 s reports.
    fn world_with(
        turn_end_ms: u64,
        final_at_ms: u64,
        final_kind: EventType,
    ) -> (Plan, Vec<CommitRecord>, Observations) {
        let mut plan = Plan::new(1);
        plan.lease_ms = 3_000;
        let commits = vec![
            commit(
                0,
                0,
                vec![event(
                    EventType::RunStarted,
                    Actor::worker(W),
                    json!({"worker_id": W}),
                )],
                vec![view(RunStatus::Running, 1, Some(3_000_000))],
            ),
            beat(1, 1_000, false),
            commit(
                2,
                1_500,
                vec![event(
                    EventType::RunCancelRequested,
                    Actor::principal("alice"),
                    json!({}),
                )],
                Vec::new(),
            ),
            beat(3, 2_000, true),
            commit(
                4,
                final_at_ms,
                vec![event(final_kind, Actor::worker(W), json!({}))],
                vec![view(
                    if final_kind == EventType::RunCancelled {
                        RunStatus::Cancelled
                    } else {
                        RunStatus::Completed
                    },
                    1,
                    None,
                )],
            ),
        ];
        let mut observations = Observations::default();
        let timeline = &mut observations.timeline;
        timeline.end = 60_000 * MS;
        timeline.incarnations.insert(
            W.into(),
            Incarnation {
                node: Some(0),
                catalog: crate::catalog::Catalog::Base,
                policy_version: "v".into(),
            },
        );
        timeline.nodes.push(NodeEvent {
            at: 0,
            node: 0,
            incarnation: W.into(),
            change: NodeChange::Started,
        });
        timeline.planner_turns.push(WorkItem {
            run: run(),
            epoch: Some(1),
            incarnation: W.into(),
            key: None,
            start: 1_200 * MS,
            end: Some(turn_end_ms * MS),
        });
        (plan, commits, observations)
    }

    fn found(turn_end_ms: u64, final_at_ms: u64, kind: EventType) -> Vec<String> {
        let (plan, commits, observations) = world_with(turn_end_ms, final_at_ms, kind);
        let snapshot = MemSnapshot::default();
        let world = World {
            plan: &plan,
            snapshot: &snapshot,
            commits: &commits,
            observations: &observations,
        };
        cancel_latency(&world, &mut BTreeMap::new())
    }

    #[test]
    fn a_run_cancelled_at_the_end_of_its_in_flight_turn_passes() {
        // The turn in flight when the report came ends at 4 s; FINAL right after it.
        assert!(found(4_000, 4_000, EventType::RunCancelled).is_empty());
        // No work in flight: the bound is the report's interval (T + hb = 2.5 s) + slack.
        assert!(found(1_400, 2_050, EventType::RunCancelled).is_empty());
    }

    #[test]
    fn a_run_that_outlives_its_bound_or_ignores_the_report_is_caught() {
        let late = found(1_400, 3_000, EventType::RunCancelled);
        assert!(late.iter().any(|f| f.contains("still RUNNING")), "{late:?}");
        // Completed after the report, although point 2 must have seen the token.
        let completed = found(4_000, 4_000, EventType::RunCompleted);
        assert!(
            completed.iter().any(|f| f.contains("FINAL COMPLETED")),
            "{completed:?}"
        );
    }

    #[test]
    fn a_turn_begun_after_the_report_is_caught() {
        let (plan, commits, mut observations) = world_with(1_400, 2_600, EventType::RunCancelled);
        observations.timeline.planner_turns.push(WorkItem {
            run: run(),
            epoch: Some(1),
            incarnation: W.into(),
            key: None,
            start: 2_100 * MS,
            end: Some(2_500 * MS),
        });
        let snapshot = MemSnapshot::default();
        let world = World {
            plan: &plan,
            snapshot: &snapshot,
            commits: &commits,
            observations: &observations,
        };
        let found = cancel_latency(&world, &mut BTreeMap::new());
        assert!(
            found.iter().any(|f| f.contains("planner turn began")),
            "{found:?}"
        );
    }
}
