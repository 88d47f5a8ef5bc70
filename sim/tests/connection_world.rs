//! The connection world (SPEC §19.5, §19.7) in a short sweep: its rules hold, and the retries of
//! a restarted host meet both refusals, so the §19.7 check is exercised rather than vacuous.
//! Runs only in a madsim build.
#![cfg(madsim)]

use airlock_sim::connections::run_seed;

#[test]
fn a_short_sweep_holds_and_meets_in_flight_and_repeat_refusals() {
    let (mut in_flight, mut repeat) = (0, 0);
    for seed in 1..=100 {
        let report = run_seed(seed);
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:#?}\nplan: {}",
            report.violations,
            report.plan
        );
        in_flight += report.refused_in_flight;
        repeat += report.refused_repeat;
    }
    assert!(in_flight > 0, "no retry met a twin still in flight");
    assert!(repeat > 0, "no retry met an UNCERTAIN twin");
}
