//! Seeds that once failed stay clean, and a seed always replays to the same trace. Runs only in
//! a madsim build (`RUSTFLAGS="--cfg madsim" cargo test -p airlock-sim`); a normal build has no
//! world to run.
#![cfg(madsim)]

use airlock_sim::runner::run_seed;

/// Seeds the simulator failed on once, with what they found.
const REGRESSION_SEEDS: &[(u64, &str)] = &[
    // The simulated service deduplicated only flagged replays: a zombie's request still in
    // flight landed after the REPLAY_IDEMPOTENCY_KEY and counted twice (a world-model bug;
    // services now apply a key once, and the checker orders requests by when they were sent).
    (1120, "inv_13: zombie request lands after the replay"),
    (2485, "inv_13: zombie request lands after the replay"),
    // A read-only call ran twice (a zombie racing its successor); the row kept the result of
    // the execution that finished it while the checker compared it with the other execution's
    // provenance claim (a checker bug; it now accepts any claim made for the key).
    (
        104987,
        "inv_38: two executions of one read claim different trust",
    ),
    (
        105219,
        "inv_38: two executions of one read claim different trust",
    ),
    (
        107985,
        "inv_38: two executions of one read claim different trust",
    ),
    // Issue 25: a worker paused past its lease between START and the tool body woke after
    // another worker had reclaimed the run and replayed the conditionally idempotent call, and
    // sent the key again without the replay flag (a core bug; a worker whose lease may have run
    // out now reads its lease guard before entering a body, and a lost lease fences it).
    (
        50090575,
        "inv_13: a zombie enters the body after its successor replayed the key",
    ),
    // Issue 25: a resumed parallel batch recovered its first call alone, to the end of its
    // tool call, before the other calls began; one of those, approved meanwhile, STARTed after
    // the execution knew of a cancel (a core bug; a resumed batch now begins every call at
    // once, as §8.5's single observation before a parallel batch assumes).
    (
        50090518,
        "inv_33: a resumed parallel batch STARTs a call after a known cancel",
    ),
];

#[test]
fn regression_seeds_stay_clean() {
    for (seed, found) in REGRESSION_SEEDS {
        let report = run_seed(*seed);
        assert!(
            report.violations.is_empty(),
            "seed {seed} (once: {found}) fails again: {:#?}",
            report.violations
        );
    }
}

#[test]
fn a_seed_replays_to_the_same_trace() {
    let first = run_seed(7);
    let second = run_seed(7);
    assert_eq!(first.trace_hash, second.trace_hash);
    assert!(first.runs > 0 && first.calls > 0, "the seed did some work");
}

/// The new kinds of world (control runs, rolling catalogs, the previous build's store, parked
/// parallel batches, planner faults, session reuse, `resume_run`, cancels under a live or dead
/// holder) come up in a short sweep, so their checks are asserted rather than vacuous.
#[test]
fn a_short_sweep_asserts_the_conditional_checks() {
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    for seed in 1..=40 {
        let report = run_seed(seed);
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:#?}",
            report.violations
        );
        for (key, n) in report.outcomes {
            *counts.entry(key).or_default() += n;
        }
    }
    for key in [
        "check.control_run_completed",
        "check.gone_tool_recovered_per_9_4",
        "check.pin_refused_iff_unresolvable",
        "check.revalidation_changed_iff_identity_changed",
        "check.revalidation_kept_the_same_approval_across_versions",
        "check.planner_fault_fails_the_run",
        "check.session_submit_answer",
        "check.resume_run_answer",
        "check.inv33_nothing_new_once_known",
        "check.inv33_live_bound",
        "check.inv33_reclaim_bound",
        "park.parallel",
        "code.policy.revalidation.changed",
    ] {
        assert!(
            counts.get(key).copied().unwrap_or(0) > 0,
            "{key} never came up: {counts:#?}"
        );
    }
}
