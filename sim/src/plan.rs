//! The seed's plan: every setting, workload item and fault rate of one simulated world, drawn
//! from one `rand_chacha` stream before the world starts (TigerBeetle's VOPR habit), so a seed
//! names the whole experiment and the plan can be printed first.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use serde_json::{Value, json};

use airlock_core::vocab::CrashPoint;

/// The simulator's random stream. Every draw in a world comes from one of these, seeded from
/// the seed and a stream number, never from the operating system.
pub struct SimRng(ChaCha8Rng);

impl SimRng {
    pub fn new(seed: u64, stream: u64) -> SimRng {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..16].copy_from_slice(&stream.to_le_bytes());
        key[16..].copy_from_slice(b"airlock-sim-rng!");
        SimRng(ChaCha8Rng::from_seed(key))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0) has no value");
        // Lemire's multiply-shift: unbiased enough for a simulator, and branch-free.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..hi` (`lo < hi`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// An index drawn with the given weights (not all zero).
    pub fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|w| u64::from(*w)).sum();
        let mut ticket = self.below(total);
        for (i, w) in weights.iter().enumerate() {
            if ticket < u64::from(*w) {
                return i;
            }
            ticket -= u64::from(*w);
        }
        weights.len() - 1
    }
}

/// What the approver does with one pending approval it sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApproverMove {
    Approve,
    Deny,
    /// Leaves it pending (a clock jump may expire it).
    Ignore,
    /// The same resolution twice, concurrently.
    Duplicate,
    /// Approve and deny concurrently.
    RaceResolutions,
    /// Resolve while the run is being cancelled.
    RaceCancel,
    /// Resolve while an expiry pass runs.
    RaceExpire,
}

/// How a planner turn goes wrong on purpose (SPEC §8.3: an error or an invalid turn ends the
/// run FAILED `planner_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlannerFaultKind {
    /// The planner returns an error (a model provider's outage).
    Error,
    /// A turn with no calls.
    NoCalls,
    /// Two calls with one `call_id`.
    DuplicateCallId,
    /// A call that declares `platform` trust, which no planner may.
    PlatformTrust,
}

/// The step at which a run's planner misbehaves, every time it is asked for that step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannerFault {
    pub step: u32,
    pub kind: PlannerFaultKind,
}

/// One run the submitter will submit, and when.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRun {
    pub at_ms: u64,
    pub script: Value,
    /// A control run (its script only makes calls every profile, catalog and trust state of
    /// the world allows, with distinct arguments and room in its budgets): when no fault meets
    /// it, it must end COMPLETED with its final message.
    pub control: bool,
    /// A later run in the session of an earlier planned run (SPEC §15 `session_id`), submitted
    /// once that run has ended (a submission while it is active must be refused).
    pub session_of: Option<usize>,
    pub planner_fault: Option<PlannerFault>,
}

/// The world's base policy profile (the rollout profile is derived from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// The shipped `default` profile.
    Shipped,
    /// The shipped profile with `network_read` requiring approval, so parallel read-only
    /// batches (SPEC §11) that contain a `sim.fetch` park.
    Cautious,
}

/// Every setting of one world.
#[derive(Debug, Clone)]
pub struct Plan {
    pub seed: u64,
    pub workers: usize,
    pub lease_ms: u64,
    pub poll_ms: u64,
    pub reclaim_every_ms: u64,
    pub approval_sweep_every_ms: u64,
    pub max_attempts: u32,
    pub concurrency: usize,
    /// How long faults are injected; the quiet phase follows.
    pub chaos_ms: u64,
    pub runs: Vec<PlannedRun>,
    /// Probability of killing the node each time a crash point is reached, by `CrashPoint::ALL`
    /// index.
    pub kill_at: Vec<f64>,
    /// Kills of a random worker at whatever await it is in, per simulated second.
    pub random_kill_per_s: f64,
    /// Pauses of a random worker for longer than its lease (a zombie), per simulated second.
    pub pause_per_s: f64,
    /// Forward jumps of the wall clock, per simulated second.
    pub jump_per_s: f64,
    pub lost_dispatch: f64,
    pub duplicate_dispatch: f64,
    pub delayed_dispatch: f64,
    /// A tool fails before any effect.
    pub tool_fail: f64,
    /// A tool's latency exceeds its timeout.
    pub tool_slow: f64,
    /// The node dies inside a tool call, after the external effect and before the response.
    pub tool_crash_after_effect: f64,
    /// The tool body panics after its effect (§9.3's unknown-outcome rule: a watermarked
    /// non-idempotent or conditionally idempotent call becomes UNCERTAIN, the rest FAILED).
    pub tool_panic_after_effect: f64,
    /// After its effect the tool answers oddly: a success over `max_output_bytes`, or a
    /// failure of kind `timeout` or `outcome_unknown` (§9.2 step 11, §9.3).
    pub tool_odd_answer: f64,
    pub downtime_ms: (u64, u64),
    /// Probability that a node incarnation runs the rollout policy (a new `policy_version`).
    pub rollout: f64,
    pub approver_period_ms: (u64, u64),
    pub approver_weights: [u32; 7],
    pub cancel_per_s: f64,
    /// The share of cancels aimed at a RUNNING run (the others pick any run).
    pub cancel_running_bias: f64,
    pub settle_per_s: f64,
    /// `resume_run` calls on a random run, per simulated second (SPEC §10.4).
    pub resume_per_s: f64,
    pub profile: Profile,
    /// Probability that a node incarnation registers the rollout tool catalog
    /// (`catalog::Catalog::Rollout`: new versions, a removed tool, a spec changed in place).
    pub catalog_rollout: f64,
    /// Runs a store written by the previous build holds when the world starts (an AUTHORIZED
    /// call of a tool this build no longer has; SPEC §17.1, §9.4).
    pub legacy_runs: usize,
    /// Probability that a planner turn thinks for seconds, as a language model does.
    pub slow_planner: f64,
    /// The control run submitted when the quiet phase begins: it meets no fault at all.
    pub quiet_control: Value,
}

pub const APPROVER_MOVES: [ApproverMove; 7] = [
    ApproverMove::Approve,
    ApproverMove::Deny,
    ApproverMove::Ignore,
    ApproverMove::Duplicate,
    ApproverMove::RaceResolutions,
    ApproverMove::RaceCancel,
    ApproverMove::RaceExpire,
];

/// The index of a crash point in [`Plan::kill_at`].
pub fn point_index(point: CrashPoint) -> usize {
    CrashPoint::ALL
        .iter()
        .position(|p| *p == point)
        .unwrap_or_default()
}

impl Plan {
    /// The plan of `seed`: a pure function of it.
    pub fn new(seed: u64) -> Plan {
        let mut rng = SimRng::new(seed, 0);
        let workers = rng.range(2, 5) as usize;
        let lease_ms = *rng.pick(&[1_500, 3_000, 6_000]);
        let chaos_ms = rng.range(15_000, 45_000);
        // Most seeds focus on a few crash points with high probability; all points keep a low
        // background rate, so a sweep reaches every point often.
        let background = *rng.pick(&[0.0, 0.01, 0.03]);
        let mut kill_at = vec![background; CrashPoint::ALL.len()];
        for _ in 0..rng.range(1, 4) {
            let index = rng.below(kill_at.len() as u64) as usize;
            kill_at[index] = *rng.pick(&[0.1, 0.25, 0.5]);
        }
        let run_count = rng.range(2, 7);
        let mut runs: Vec<PlannedRun> = Vec::new();
        for i in 0..run_count {
            let at_ms = rng.below(chaos_ms * 7 / 10);
            if rng.chance(0.3) {
                runs.push(PlannedRun {
                    at_ms,
                    script: control_script(&mut rng, i),
                    control: true,
                    session_of: None,
                    planner_fault: None,
                });
                continue;
            }
            let script = script(&mut rng, i);
            let steps = script["steps"].as_array().map_or(0, Vec::len) as u64;
            let planner_fault = rng.chance(0.15).then(|| PlannerFault {
                step: rng.range(1, steps + 2) as u32,
                kind: *rng.pick(&[
                    PlannerFaultKind::Error,
                    PlannerFaultKind::NoCalls,
                    PlannerFaultKind::DuplicateCallId,
                    PlannerFaultKind::PlatformTrust,
                ]),
            });
            // A follow-up in an earlier run's session, submitted after it.
            let session_of = (i > 0 && rng.chance(0.25)).then(|| rng.below(i) as usize);
            let at_ms = match session_of {
                Some(earlier) => runs[earlier].at_ms + rng.range(500, 8_000),
                None => at_ms,
            };
            runs.push(PlannedRun {
                at_ms,
                script,
                control: false,
                session_of,
                planner_fault,
            });
        }

        let mut approver_weights = [0u32; 7];
        for w in &mut approver_weights {
            *w = *rng.pick(&[0, 1, 2, 4]);
        }
        approver_weights[0] += 4; // approve stays the common move
        Plan {
            seed,
            workers,
            lease_ms,
            poll_ms: *rng.pick(&[100, 250, 500]),
            reclaim_every_ms: *rng.pick(&[500, 1_000, 3_000]),
            approval_sweep_every_ms: *rng.pick(&[1_000, 5_000, 10_000]),
            max_attempts: *rng.pick(&[2, 3, 3, 4]),
            concurrency: rng.range(1, 5) as usize,
            chaos_ms,
            runs,
            kill_at,
            random_kill_per_s: *rng.pick(&[0.0, 0.02, 0.08]),
            pause_per_s: *rng.pick(&[0.0, 0.02, 0.06]),
            jump_per_s: *rng.pick(&[0.0, 0.01, 0.04, 0.1]),
            lost_dispatch: *rng.pick(&[0.0, 0.2, 0.5]),
            duplicate_dispatch: *rng.pick(&[0.0, 0.2, 0.5]),
            delayed_dispatch: *rng.pick(&[0.0, 0.3]),
            tool_fail: *rng.pick(&[0.0, 0.05, 0.15]),
            tool_slow: *rng.pick(&[0.0, 0.03, 0.1]),
            tool_crash_after_effect: *rng.pick(&[0.0, 0.05, 0.2]),
            downtime_ms: (100, *rng.pick(&[1_000, 5_000, 15_000])),
            rollout: *rng.pick(&[0.0, 0.0, 0.3, 0.5]),
            approver_period_ms: (100, *rng.pick(&[500, 2_000, 6_000])),
            approver_weights,
            cancel_per_s: *rng.pick(&[0.0, 0.03, 0.1]),
            settle_per_s: *rng.pick(&[0.0, 0.1]),
            tool_panic_after_effect: *rng.pick(&[0.0, 0.0, 0.03]),
            tool_odd_answer: *rng.pick(&[0.0, 0.0, 0.05]),
            cancel_running_bias: *rng.pick(&[0.0, 0.5, 0.8]),
            resume_per_s: *rng.pick(&[0.0, 0.05, 0.2]),
            profile: *rng.pick(&[Profile::Shipped, Profile::Cautious]),
            catalog_rollout: *rng.pick(&[0.0, 0.3, 0.5]),
            legacy_runs: *rng.pick(&[0, 0, 1, 2]),
            slow_planner: *rng.pick(&[0.0, 0.05, 0.2]),
            quiet_control: control_script(&mut rng, run_count),
        }
    }

    /// The index of the planned run whose script ends with `final_message` (the quiet control
    /// run is `runs.len()`), so a planner can find its run's plan from the stored script.
    pub fn run_index(&self, final_message: &str) -> Option<usize> {
        let index: usize = final_message
            .strip_prefix("run ")?
            .strip_suffix(" done")?
            .parse()
            .ok()?;
        (index <= self.runs.len()).then_some(index)
    }

    /// The planner fault of the run whose script ends with `final_message`.
    pub fn planner_fault(&self, final_message: &str) -> Option<PlannerFault> {
        self.runs.get(self.run_index(final_message)?)?.planner_fault
    }

    /// The plan as a few lines, printed before a single seed runs and with a failure.
    pub fn describe(&self) -> String {
        let focus: Vec<String> = CrashPoint::ALL
            .iter()
            .zip(&self.kill_at)
            .filter(|(_, p)| **p >= 0.1)
            .map(|(point, p)| format!("{point}={p}"))
            .collect();
        format!(
            "seed={} workers={} lease_ms={} poll_ms={} reclaim_every_ms={} sweep_every_ms={} max_attempts={} concurrency={} chaos_ms={} runs={}\n\
             faults: kill_focus=[{}] kill_background={} random_kill/s={} pause/s={} clock_jump/s={} dispatch lost={} dup={} delayed={}\n\
             tools: fail={} slow={} crash_after_effect={} panic_after_effect={} odd_answer={}; downtime_ms={:?} rollout={} approver_weights={:?} cancel/s={} settle/s={}\n\
             world: profile={:?} catalog_rollout={} legacy_runs={} slow_planner={} cancel_running_bias={} resume/s={} control_runs={} follow_ups={} planner_faults={}",
            self.seed,
            self.workers,
            self.lease_ms,
            self.poll_ms,
            self.reclaim_every_ms,
            self.approval_sweep_every_ms,
            self.max_attempts,
            self.concurrency,
            self.chaos_ms,
            self.runs.len(),
            focus.join(" "),
            self.kill_at.iter().copied().fold(f64::INFINITY, f64::min),
            self.random_kill_per_s,
            self.pause_per_s,
            self.jump_per_s,
            self.lost_dispatch,
            self.duplicate_dispatch,
            self.delayed_dispatch,
            self.tool_fail,
            self.tool_slow,
            self.tool_crash_after_effect,
            self.tool_panic_after_effect,
            self.tool_odd_answer,
            self.downtime_ms,
            self.rollout,
            self.approver_weights,
            self.cancel_per_s,
            self.settle_per_s,
            self.profile,
            self.catalog_rollout,
            self.legacy_runs,
            self.slow_planner,
            self.cancel_running_bias,
            self.resume_per_s,
            self.runs.iter().filter(|r| r.control).count() + 1,
            self.runs.iter().filter(|r| r.session_of.is_some()).count(),
            self.runs
                .iter()
                .filter(|r| r.planner_fault.is_some())
                .count(),
        )
    }
}

/// One call of the workload menu, with its arguments (varied by `n` so replays and repeats of
/// identical calls both happen).
fn call(rng: &mut SimRng, call_id: String) -> Value {
    let n = rng.below(4);
    let trust = json!({"path": "user", "text": "user", "to": "user", "amount": "user"});
    let (tool, arguments) = match rng.weighted(&[6, 3, 3, 3, 5, 4, 4, 3, 3, 1, 1, 1, 1, 2]) {
        0 => ("sim.lookup", json!({"text": format!("q{n}")})),
        1 => ("sim.search", json!({"text": format!("s{n}")})),
        2 => (
            "sim.ws_read",
            json!({"path": format!("notes/f{}.txt", n % 2)}),
        ),
        3 => (
            "sim.ws_write",
            json!({"path": format!("notes/f{}.txt", n % 2), "text": format!("v{n}")}),
        ),
        4 => (
            "sim.note",
            json!({"path": format!("log/n{n}.txt"), "text": format!("note {n}")}),
        ),
        5 => (
            "sim.sync",
            json!({"path": format!("sync/s{}.txt", n % 2), "text": format!("rev {n}")}),
        ),
        6 => (
            "sim.email",
            json!({"to": format!("ops{}", n % 2), "text": format!("hello {n}")}),
        ),
        7 => ("sim.pay", json!({"to": "vendor", "amount": 10 * n + 5})),
        8 => ("sim.post", json!({"text": format!("post {n}")})),
        9 => ("sim.shell", json!({"text": "uptime"})),
        10 => ("sim.missing", json!({})),
        11 => ("sim.note", json!({"path": "/etc/hosts", "text": "x"})),
        12 => ("sim.lookup", json!({"text": 7})),
        _ => ("sim.fetch", json!({"text": format!("page {n}")})),
    };
    json!({"call_id": call_id, "tool": tool, "arguments": arguments, "argument_trust": trust})
}

/// A run script: 1–4 steps of 1–3 calls, sometimes a parallel batch of reads, sometimes tight
/// budgets or a deadline that a clock jump passes.
fn script(rng: &mut SimRng, run: u64) -> Value {
    let step_count = rng.range(1, 5);
    let steps: Vec<Value> = (0..step_count)
        .map(|s| {
            let calls: Vec<Value> = if rng.chance(0.25) {
                // A read-only batch that §11 admits in parallel.
                (0..rng.range(2, 4))
                    .map(|c| {
                        let tool =
                            *rng.pick(&["sim.lookup", "sim.search", "sim.ws_read", "sim.fetch"]);
                        let arguments = if tool == "sim.ws_read" {
                            json!({"path": format!("notes/f{}.txt", c % 2)})
                        } else {
                            json!({"text": format!("p{run}.{s}.{c}")})
                        };
                        json!({"call_id": format!("s{s}c{c}"), "tool": tool, "arguments": arguments,
                               "argument_trust": {"path": "user", "text": "user"}})
                    })
                    .collect()
            } else {
                (0..rng.range(1, 4))
                    .map(|c| call(rng, format!("s{s}c{c}")))
                    .collect()
            };
            json!({"calls": calls})
        })
        .collect();
    let max_steps = step_count + 1 + rng.below(2);
    let max_tool_calls = if rng.chance(0.1) { 2 } else { 24 };
    let mut limits = json!({"max_steps": max_steps, "max_tool_calls": max_tool_calls});
    if rng.chance(0.3) {
        limits["deadline_seconds"] = json!(*rng.pick(&[600, 3_600, 7_200]));
    }
    let scopes = if rng.chance(0.15) {
        json!(["workspace.read", "workspace.write"])
    } else {
        json!(["workspace.read", "workspace.write", "demo.write"])
    };
    json!({
        "schema_version": 1,
        "tenant_id": "acme",
        "principal_id": "alice",
        "principal_scopes": scopes,
        "origin_trust": "user",
        "limits": limits,
        "steps": steps,
        "final_message": format!("run {run} done"),
    })
}

/// A control run's script: 1–4 steps of calls that every policy profile, tool catalog and
/// trust state of a world allows (reads of services that claim no lower trust, workspace
/// writes inside the workspace, a parallel batch of lookups), each with arguments of its own
/// so no repeat is ever refused, and budgets with room to spare. Nothing in it can park,
/// taint the run, or fail it: only a fault can keep it from COMPLETED.
fn control_script(rng: &mut SimRng, run: u64) -> Value {
    let step_count = rng.range(1, 5);
    let trust = json!({"path": "user", "text": "user"});
    let steps: Vec<Value> = (0..step_count)
        .map(|s| {
            let calls: Vec<Value> = if rng.chance(0.3) {
                (0..rng.range(2, 4))
                    .map(|c| {
                        json!({"call_id": format!("s{s}c{c}"), "tool": "sim.lookup",
                               "arguments": {"text": format!("ctl{run}.{s}.{c}")},
                               "argument_trust": trust})
                    })
                    .collect()
            } else {
                (0..rng.range(1, 4))
                    .map(|c| {
                        let here = format!("{run}.{s}.{c}");
                        let (tool, arguments) = match rng.below(4) {
                            0 => ("sim.lookup", json!({"text": format!("ctl{here}")})),
                            1 => (
                                "sim.ws_write",
                                json!({"path": format!("ctl/w{here}.txt"), "text": "v"}),
                            ),
                            2 => (
                                "sim.note",
                                json!({"path": format!("ctl/n{here}.txt"), "text": "n"}),
                            ),
                            _ => (
                                "sim.sync",
                                json!({"path": format!("ctl/s{here}.txt"), "text": "s"}),
                            ),
                        };
                        json!({"call_id": format!("s{s}c{c}"), "tool": tool,
                               "arguments": arguments, "argument_trust": trust})
                    })
                    .collect()
            };
            json!({"calls": calls})
        })
        .collect();
    json!({
        "schema_version": 1,
        "tenant_id": "acme",
        "principal_id": "alice",
        "principal_scopes": ["workspace.read", "workspace.write", "demo.write"],
        "origin_trust": "user",
        "limits": {"max_steps": step_count + 1, "max_tool_calls": 64},
        "steps": steps,
        "final_message": format!("run {run} done"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_names_its_plan() {
        let a = Plan::new(42);
        let b = Plan::new(42);
        assert_eq!(a.describe(), b.describe());
        assert_eq!(a.runs, b.runs);
        assert_ne!(Plan::new(43).describe(), a.describe());
    }

    #[test]
    fn scripts_parse_as_run_scripts() {
        for seed in 0..200 {
            let plan = Plan::new(seed);
            for (i, run) in plan.runs.iter().enumerate() {
                let text = run.script.to_string();
                airlock_core::planner::script::RunScript::parse(&text)
                    .unwrap_or_else(|e| panic!("seed {seed}: {e}: {text}"));
                assert_eq!(
                    plan.run_index(run.script["final_message"].as_str().unwrap_or_default()),
                    Some(i)
                );
                if let Some(earlier) = run.session_of {
                    assert!(earlier < i && plan.runs[earlier].at_ms < run.at_ms);
                }
            }
            let quiet = plan.quiet_control.to_string();
            airlock_core::planner::script::RunScript::parse(&quiet)
                .unwrap_or_else(|e| panic!("seed {seed}: {e}: {quiet}"));
        }
    }

    #[test]
    fn a_sweep_plans_every_new_kind_of_run() {
        let plans: Vec<Plan> = (0..100).map(Plan::new).collect();
        let runs = || plans.iter().flat_map(|p| p.runs.iter());
        assert!(runs().any(|r| r.control));
        assert!(runs().any(|r| r.session_of.is_some()));
        for kind in [
            PlannerFaultKind::Error,
            PlannerFaultKind::NoCalls,
            PlannerFaultKind::DuplicateCallId,
            PlannerFaultKind::PlatformTrust,
        ] {
            assert!(runs().any(|r| r.planner_fault.is_some_and(|f| f.kind == kind)));
        }
        assert!(plans.iter().any(|p| p.profile == Profile::Cautious));
        assert!(
            plans
                .iter()
                .any(|p| p.legacy_runs > 0 && p.catalog_rollout > 0.0)
        );
        assert!(plans.iter().any(|p| p.resume_per_s > 0.0));
    }

    #[test]
    fn every_crash_point_is_a_focus_of_some_seed() {
        let mut focused = vec![false; CrashPoint::ALL.len()];
        for seed in 0..500 {
            for (i, p) in Plan::new(seed).kill_at.iter().enumerate() {
                focused[i] |= *p >= 0.1;
            }
        }
        assert!(focused.iter().all(|f| *f), "{focused:?}");
    }

    #[test]
    fn draws_stay_in_range() {
        let mut rng = SimRng::new(7, 1);
        for _ in 0..10_000 {
            assert!(rng.below(3) < 3);
            let r = rng.range(5, 9);
            assert!((5..9).contains(&r));
            let u = rng.unit();
            assert!((0.0..1.0).contains(&u));
        }
        assert_eq!(rng.weighted(&[0, 0, 5]), 2);
    }
}
