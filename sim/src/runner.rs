//! Runs one seed in its own madsim runtime (only under `--cfg madsim`) and turns the outcome
//! into a [`SeedReport`]: checks, trace hash, counts. A panic anywhere in the world is caught
//! and reported as the violation `panic`.

use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use airlock_core::testing::invariants::Violation;

use crate::checks::check_world;
use crate::plan::Plan;
use crate::report::{SeedReport, events_tail, outcomes};
use crate::{trace, world};

thread_local! {
    /// The message of the last panic on this thread (the hook stores it; `run_seed` reads it).
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Keeps panics quiet and remembers their message for the failure report.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        LAST_PANIC.with(|slot| *slot.borrow_mut() = Some(info.to_string()));
    }));
}

/// A simulated world must end well within this much simulated time.
const TIME_LIMIT: Duration = Duration::from_secs(6 * 3600);

pub fn run_seed(seed: u64) -> SeedReport {
    let plan = Plan::new(seed);
    let described = plan.describe();
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut runtime =
            madsim::runtime::Runtime::with_seed_and_config(seed, madsim::Config::default());
        runtime.set_time_limit(TIME_LIMIT);
        runtime.block_on(world::simulate(plan.clone()))
    }));
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(payload) => {
            let message = LAST_PANIC
                .with(|slot| slot.borrow_mut().take())
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            return SeedReport {
                seed,
                violations: vec![Violation {
                    invariant: "panic",
                    detail: message,
                }],
                plan: described,
                ..SeedReport::default()
            };
        }
    };
    let (violations, asserted) = check_world(
        &plan,
        &outcome.snapshot,
        &outcome.commits,
        &outcome.findings,
        &outcome.observations,
        outcome.quiet,
    );
    let mut outcomes = outcomes(&outcome.snapshot);
    outcomes.extend(asserted);
    let detail = violations
        .first()
        .map(|v| v.detail.clone())
        .unwrap_or_default();
    SeedReport {
        seed,
        trace_hash: trace::hash(&outcome.snapshot, &outcome.observations.effects),
        runs: outcome.snapshot.runs.len(),
        calls: outcome.snapshot.invocations.len(),
        effects: outcome.observations.effects.len(),
        faults: outcome.faults,
        outcomes,
        simulated: outcome.simulated,
        plan: described,
        last_events: if violations.is_empty() {
            Vec::new()
        } else {
            events_tail(&outcome.snapshot, &detail, 25)
        },
        last_faults: outcome
            .fault_log
            .iter()
            .rev()
            .take(12)
            .rev()
            .cloned()
            .collect(),
        violations,
    }
}
