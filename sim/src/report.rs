//! Seed reports, the sweep summary and the failure report (`FAIL seed=N invariant=…`, the
//! command that reproduces it, the plan, the last events and faults).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use airlock_core::mem_store::MemSnapshot;
use airlock_core::testing::invariants::Violation;

use crate::checks::mentioned_runs;

/// Everything one seed produced that a sweep reports.
#[derive(Debug, Clone, Default)]
pub struct SeedReport {
    pub seed: u64,
    pub violations: Vec<Violation>,
    pub trace_hash: String,
    pub runs: usize,
    pub calls: usize,
    pub effects: usize,
    pub faults: BTreeMap<String, u64>,
    /// What the world ended with: run, invocation and approval statuses and notable reason
    /// codes, so a sweep shows which paths it exercised.
    pub outcomes: BTreeMap<String, u64>,
    pub simulated: Duration,
    /// Lines of context for a failure: plan, last events, last faults.
    pub plan: String,
    pub last_events: Vec<String>,
    pub last_faults: Vec<String>,
}

impl SeedReport {
    pub fn failed(&self) -> bool {
        !self.violations.is_empty()
    }
}

/// Totals over a sweep.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub seeds: u64,
    pub failed: u64,
    pub runs: u64,
    pub calls: u64,
    pub effects: u64,
    pub faults: BTreeMap<String, u64>,
    pub outcomes: BTreeMap<String, u64>,
    pub simulated: Duration,
}

impl Summary {
    pub fn add(&mut self, report: &SeedReport) {
        self.seeds += 1;
        self.failed += u64::from(report.failed());
        self.runs += report.runs as u64;
        self.calls += report.calls as u64;
        self.effects += report.effects as u64;
        for (kind, n) in &report.faults {
            *self.faults.entry(kind.clone()).or_default() += n;
        }
        for (kind, n) in &report.outcomes {
            *self.outcomes.entry(kind.clone()).or_default() += n;
        }
        self.simulated += report.simulated;
    }

    pub fn faults_total(&self) -> u64 {
        self.faults.values().sum()
    }

    /// The closing lines of `airlock-sim run`.
    pub fn render(&self, wall: Duration) -> String {
        let wall_s = wall.as_secs_f64().max(1e-9);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "seeds: {}  failed: {}  runs: {}  calls: {}  effects: {}  faults injected: {}",
            self.seeds,
            self.failed,
            self.runs,
            self.calls,
            self.effects,
            self.faults_total()
        );
        let kinds: Vec<String> = self
            .faults
            .iter()
            .map(|(kind, n)| format!("{kind}={n}"))
            .collect();
        let _ = writeln!(out, "faults: {}", kinds.join(" "));
        let outcomes: Vec<String> = self
            .outcomes
            .iter()
            .map(|(kind, n)| format!("{kind}={n}"))
            .collect();
        let _ = writeln!(out, "outcomes: {}", outcomes.join(" "));
        let _ = writeln!(
            out,
            "wall: {:.1} s  seeds/s: {:.2}  simulated: {:.0} s  simulated/wall: {:.0}x",
            wall_s,
            self.seeds as f64 / wall_s,
            self.simulated.as_secs_f64(),
            self.simulated.as_secs_f64() / wall_s
        );
        let _ = writeln!(out, "{}", self.summary_line(wall));
        out
    }

    /// The sweep in one line, last: what a reader (or a script) needs to know it ran.
    pub fn summary_line(&self, wall: Duration) -> String {
        format!(
            "summary: seeds={} runs={} calls={} faults={} uncertain_calls={} failed={} seconds={:.1}",
            self.seeds,
            self.runs,
            self.calls,
            self.faults_total(),
            self.outcomes.get("call.UNCERTAIN").copied().unwrap_or(0),
            self.failed,
            wall.as_secs_f64()
        )
    }

    /// A progress line for a log (stderr that is not a terminal): seeds done of `total`, the
    /// rate, failures so far and the time left at that rate.
    pub fn progress_line(&self, total: u64, wall: Duration) -> String {
        let rate = self.seeds as f64 / wall.as_secs_f64().max(1e-9);
        let left = total.saturating_sub(self.seeds) as f64 / rate.max(1e-9);
        format!(
            "progress: {}/{total} seeds  {rate:.1} seeds/s  failed {}  about {left:.0} s left",
            self.seeds, self.failed
        )
    }
}

/// The report of a failing seed. `command` reproduces it.
pub fn render_failure(report: &SeedReport, command: &str) -> String {
    let mut out = String::new();
    let first = &report.violations[0];
    let _ = writeln!(
        out,
        "FAIL seed={} invariant={}",
        report.seed, first.invariant
    );
    let _ = writeln!(out, "  {}", first.detail);
    for other in report.violations.iter().skip(1).take(9) {
        let _ = writeln!(out, "  also {}: {}", other.invariant, other.detail);
    }
    let _ = writeln!(out, "reproduce: {command}");
    let _ = writeln!(out, "plan:");
    for line in report.plan.lines() {
        let _ = writeln!(out, "  {line}");
    }
    let _ = writeln!(out, "last faults:");
    for line in &report.last_faults {
        let _ = writeln!(out, "  {line}");
    }
    let _ = writeln!(out, "last events:");
    for line in &report.last_events {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// Counts of the statuses and notable reason codes a world ended with.
pub fn outcomes(snapshot: &MemSnapshot) -> BTreeMap<String, u64> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut add = |key: String| *counts.entry(key).or_default() += 1;
    for run in snapshot.runs.values() {
        add(format!("run.{}", run.status()));
        if let airlock_core::run::RunState::Failed { failure } = &run.state {
            add(format!("run.failed.{}", failure.reason));
        }
    }
    for row in snapshot.invocations.values() {
        add(format!("call.{}", row.status));
        if let Some(code) = row.reason_code.as_deref()
            && (code.starts_with("approval.")
                || code.starts_with("policy.revalidation")
                || code == "tool.outcome_unknown"
                || code == "tool.timeout"
                || code == "tool.run_cancelled")
        {
            add(format!("code.{code}"));
        }
        if row.parallel_group.is_some() {
            add("call.parallel".to_owned());
        }
    }
    for checkpoint in snapshot.checkpoints.values() {
        if checkpoint.trigger == airlock_core::vocab::CheckpointTrigger::Suspended
            && let Some(batch) = &checkpoint.state.pending
            && matches!(
                batch.admission,
                airlock_core::run::checkpoint::Admission::Parallel { .. }
            )
        {
            add("park.parallel".to_owned());
        }
    }
    for approval in snapshot.approvals.values() {
        add(format!("approval.{}", approval.status));
    }
    for _ in snapshot.settlements.values() {
        add("settlement".to_owned());
    }
    counts
}

/// The last `limit` events of the runs `detail` mentions (all runs if it mentions none), one
/// compact JSON envelope per line.
pub fn events_tail(snapshot: &MemSnapshot, detail: &str, limit: usize) -> Vec<String> {
    let runs = mentioned_runs(snapshot, detail);
    let chosen: Vec<String> = snapshot
        .events
        .iter()
        .filter(|e| runs.is_empty() || e.run_id.is_some_and(|r| runs.contains(&r)))
        .map(|e| e.to_json().to_string())
        .collect();
    chosen[chosen.len().saturating_sub(limit)..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_report_names_seed_invariant_and_command() {
        let report = SeedReport {
            seed: 17,
            violations: vec![Violation {
                invariant: "inv_13_non_idempotent_effects_at_most_once",
                detail: "key k took effect 2 times".into(),
            }],
            plan: "seed=17".into(),
            ..SeedReport::default()
        };
        let text = render_failure(&report, "airlock-sim run --seed 17");
        assert!(
            text.starts_with("FAIL seed=17 invariant=inv_13_non_idempotent_effects_at_most_once\n")
        );
        assert!(text.contains("reproduce: airlock-sim run --seed 17"));
    }

    #[test]
    fn summary_rates() {
        let mut summary = Summary::default();
        summary.add(&SeedReport {
            seed: 1,
            runs: 3,
            calls: 7,
            simulated: Duration::from_secs(60),
            faults: [("clock_jump".to_owned(), 2)].into(),
            ..SeedReport::default()
        });
        let text = summary.render(Duration::from_secs(2));
        assert!(text.contains("seeds: 1"), "{text}");
        assert!(text.contains("faults injected: 2"), "{text}");
        assert!(text.contains("simulated/wall: 30x"), "{text}");
        assert_eq!(
            text.lines().last(),
            Some("summary: seeds=1 runs=3 calls=7 faults=2 uncertain_calls=0 failed=0 seconds=2.0")
        );
        assert_eq!(
            summary.progress_line(5, Duration::from_secs(2)),
            "progress: 1/5 seeds  0.5 seeds/s  failed 0  about 8 s left"
        );
    }
}
