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
