//! How runs end and what the control service answered, for the runs the plan scripted on
//! purpose: planner failures (SPEC §8.3 `planner_error`), runs that reuse a session (§15),
//! `resume_run` (§10.4), inline claims of due runs only (§10.5), and the control runs that meet
//! no fault and must complete, so a liveness bug cannot hide behind the faults of a seed.

use std::collections::{BTreeMap, BTreeSet};

use airlock_core::events::EventType;
use airlock_core::ids::{RunId, SessionId};
use airlock_core::planner::MCP_PLANNER_KIND;
use airlock_core::run::{Run, RunState};
use airlock_core::vocab::{FailureReason, RunStatus};

use super::world::World;
use crate::store::RunView;

fn count(asserted: &mut BTreeMap<String, u64>, what: &str) {
    *asserted.entry(format!("check.{what}")).or_default() += 1;
}

/// The final message a run's script ends with (its planned identity).
fn final_message(run: &Run) -> String {
    serde_json::from_str::<serde_json::Value>(&run.planner_input)
        .ok()
        .and_then(|v| v["final_message"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Every rule of this module.
pub fn run_outcomes(
    world: &World<'_>,
    asserted: &mut BTreeMap<String, u64>,
) -> Vec<(&'static str, String)> {
    let mut failures = Vec::new();
    planner_errors(world, asserted, &mut failures);
    sessions_and_resumes(world, asserted, &mut failures);
    claims_are_due(world, &mut failures);
    control_runs(world, asserted, &mut failures);
    failures
}

/// §8.3: a planner that fails or returns an invalid turn for step k ends the run FAILED
/// `planner_error` at step k (the check precedes point 2, so even a cancel does not change
/// it), and nothing else does.
fn planner_errors(
    world: &World<'_>,
    asserted: &mut BTreeMap<String, u64>,
    failures: &mut Vec<(&'static str, String)>,
) {
    for run in world.snapshot.runs.values() {
        let fault = world.plan.planner_fault(&final_message(run));
        let failed_at = match &run.state {
            RunState::Failed { failure } if failure.reason == FailureReason::PlannerError => {
                Some(failure.step_number)
            }
            _ => None,
        };
        if let Some(step) = failed_at
            && fault.is_none_or(|f| f.step != step)
        {
            failures.push((
                "planner_error_only_from_the_planner",
                format!(
                    "run {} failed planner_error at step {step}; its planner fails at {:?}",
                    run.id,
                    fault.map(|f| f.step)
                ),
            ));
        }
        // The step count reaches k only once the planner answered for step k (PENDING, or a
        // FINAL after the turn), and that answer is always the fault.
        if let Some(fault) = fault
            && run.status().is_terminal()
            && run.step_count >= fault.step
        {
            count(asserted, "planner_fault_fails_the_run");
            if failed_at != Some(fault.step) {
                failures.push((
                    "planner_error_ends_the_run",
                    format!(
                        "run {} was asked for step {} whose turn is a planner fault ({:?}) but ended {} at step {}",
                        run.id,
                        fault.step,
                        fault.kind,
                        run.status(),
                        run.step_count
                    ),
                ));
            }
        }
    }
}

/// The run rows after the first `n` transactions.
fn views_after(world: &World<'_>, n: usize) -> BTreeMap<RunId, RunView> {
    let mut views = BTreeMap::new();
    for commit in world.commits.iter().take_while(|c| c.seq < n) {
        for view in &commit.runs {
            views.insert(view.id, view.clone());
        }
    }
    views
}

/// §15, §10.4: at most one active run per session after every commit, not counting a
/// conversation's call runs (`planner_kind = mcp`, §22.2), which share its session by design;
/// a submission into a session is refused `conflict` exactly while another run of it is active; `resume_run`
/// answers `Ok` exactly for a QUEUED run that is due (no `scheduled_for` later than the call:
/// one waiting out its §8.2 back-off is refused, as `ControlService::resume_run` says),
/// `conflict` otherwise.
fn sessions_and_resumes(
    world: &World<'_>,
    asserted: &mut BTreeMap<String, u64>,
    failures: &mut Vec<(&'static str, String)>,
) {
    // `planner_kind` never changes, so the final snapshot tells a call run at every commit.
    let call_run = |id: &RunId| {
        world
            .snapshot
            .runs
            .get(id)
            .is_some_and(|r| r.planner_kind == MCP_PLANNER_KIND)
    };
    let mut views: BTreeMap<RunId, RunView> = BTreeMap::new();
    for commit in world.commits {
        for view in &commit.runs {
            views.insert(view.id, view.clone());
        }
        let mut active: BTreeMap<SessionId, BTreeSet<RunId>> = BTreeMap::new();
        for view in views
            .values()
            .filter(|v| !v.status.is_terminal() && !call_run(&v.id))
        {
            active.entry(view.session_id).or_default().insert(view.id);
        }
        for (session, runs) in active.into_iter().filter(|(_, r)| r.len() > 1) {
            failures.push((
                "one_active_run_per_session",
                format!(
                    "commit {}: session {session} has active runs {runs:?}",
                    commit.seq
                ),
            ));
        }
    }
    let timeline = &world.observations.timeline;
    for submit in &timeline.session_submits {
        count(asserted, "session_submit_answer");
        let views = views_after(world, submit.committed_after);
        let other_active = views
            .values()
            .any(|v| v.session_id == submit.session && !v.status.is_terminal());
        let consistent = match &submit.answer {
            Ok(run) => world
                .snapshot
                .runs
                .get(run)
                .is_some_and(|r| r.session_id == submit.session),
            Err(code) => code == "conflict" && other_active,
        };
        if !consistent {
            failures.push((
                "session_reuse_answers",
                format!(
                    "planned run {} into session {}: answered {:?} while another run of it was {}active",
                    submit.planned,
                    submit.session,
                    submit.answer,
                    if other_active { "" } else { "not " }
                ),
            ));
        }
    }
    for resume in &timeline.resumes {
        count(asserted, "resume_run_answer");
        let view = views_after(world, resume.committed_before)
            .get(&resume.run)
            .cloned();
        let status = view.as_ref().map(|v| v.status);
        let due = view.as_ref().is_some_and(|v| {
            v.status == RunStatus::Queued && v.scheduled_for.is_none_or(|due| due <= resume.at)
        });
        let consistent = match (&resume.answer, status) {
            (Ok(()), Some(_)) => due,
            (Err(code), Some(_)) => code == "conflict" && !due,
            _ => false,
        };
        if !consistent {
            failures.push((
                "resume_run_answers",
                format!(
                    "resume_run({}) at {} answered {:?} while the run was {status:?}, {}due",
                    resume.run,
                    resume.at,
                    resume.answer,
                    if due { "" } else { "not " }
                ),
            ));
        }
    }
}

/// §8.2, §10.5: every CLAIM (the poll's, or the inline one a dispatch or `resume_run` asks
/// for) takes a QUEUED run that is due.
fn claims_are_due(world: &World<'_>, failures: &mut Vec<(&'static str, String)>) {
    let mut views: BTreeMap<RunId, RunView> = BTreeMap::new();
    for commit in world.commits {
        for event in commit
            .events
            .iter()
            .filter(|e| e.event_type == EventType::RunStarted)
        {
            let Some(run) = event.run_id else { continue };
            let before = views.get(&run);
            let due = before.is_some_and(|v| {
                v.status == RunStatus::Queued && v.scheduled_for.is_none_or(|s| s <= commit.at.wall)
            });
            if !due {
                failures.push((
                    "claims_take_due_runs",
                    format!(
                        "commit {}: run {run} was claimed while {:?} (scheduled for {:?}, now {})",
                        commit.seq,
                        before.map(|v| v.status),
                        before.and_then(|v| v.scheduled_for),
                        commit.at.wall
                    ),
                ));
            }
        }
        for view in &commit.runs {
            views.insert(view.id, view.clone());
        }
    }
}

/// The control runs (`plan::PlannedRun::control` and the quiet phase's): one that met no fault
/// (no cancel request, no clock jump while it lived, and every lease holder of it ran
/// throughout its tenure) ends COMPLETED with its own final message.
fn control_runs(
    world: &World<'_>,
    asserted: &mut BTreeMap<String, u64>,
    failures: &mut Vec<(&'static str, String)>,
) {
    let plan = world.plan;
    let timeline = &world.observations.timeline;
    let controls: BTreeSet<usize> = plan
        .runs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.control)
        .map(|(i, _)| i)
        .chain(std::iter::once(plan.runs.len()))
        .collect();
    for run in world.snapshot.runs.values() {
        let message = final_message(run);
        if !plan
            .run_index(&message)
            .is_some_and(|i| controls.contains(&i))
        {
            continue;
        }
        let mut submitted = None;
        let mut ended = None;
        let mut tenures: Vec<(String, u64, Option<u64>)> = Vec::new();
        let mut last: Option<RunView> = None;
        for commit in world.commits {
            for view in commit.runs.iter().filter(|v| v.id == run.id) {
                submitted.get_or_insert(commit.at.mono);
                if view.status.is_terminal() {
                    ended.get_or_insert(commit.at.mono);
                }
                let was = last
                    .as_ref()
                    .filter(|l| l.status == RunStatus::Running)
                    .map(|l| l.lease_epoch);
                let is = (view.status == RunStatus::Running).then_some(view.lease_epoch);
                if was.is_some()
                    && was != is
                    && let Some(open) = tenures.last_mut()
                {
                    open.2 = Some(commit.at.mono);
                }
                if is.is_some() && was != is {
                    tenures.push((
                        view.lease_owner.clone().unwrap_or_default(),
                        commit.at.mono,
                        None,
                    ));
                }
                last = Some(view.clone());
            }
        }
        let Some(from) = submitted else { continue };
        let to = ended.unwrap_or(timeline.end);
        let cancelled = timeline.cancels.iter().any(|c| c.run == run.id);
        let jumped = timeline
            .jumps
            .iter()
            .any(|(at, _)| *at >= from && *at <= to);
        let holder_faulted = tenures.iter().any(|(holder, start, end)| {
            !timeline.alive(holder, *start, end.unwrap_or(timeline.end))
        });
        if cancelled || jumped || holder_faulted {
            continue;
        }
        count(asserted, "control_run_completed");
        let completed = matches!(&run.state, RunState::Completed { final_message } if *final_message == message);
        if !completed {
            failures.push((
                "control_runs_complete",
                format!(
                    "control run {} ({message}) met no fault but ended {} ({:?})",
                    run.id,
                    run.status(),
                    match &run.state {
                        RunState::Failed { failure } => Some(failure.reason.as_str()),
                        _ => None,
                    }
                ),
            ));
        }
    }
}
