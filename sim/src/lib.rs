//! airlock-sim supplies a world and decides nothing: it drives core's unchanged `Worker`,
//! `ControlService` and scripted planner over simulated ports on madsim, injects the faults a
//! seed's plan draws (node kills at every `CrashPoint` and at random awaits, zombies, clock
//! jumps, lost and duplicated dispatches, racing resolve/expire/cancel), and checks every
//! invariant marked S in SPEC §16 after each seed (#33 against its time bound), plus liveness
//! after a quiet phase and the completion of the runs no fault met.
//!
//! The world (`world`, `runner`) exists only under `--cfg madsim`; the plan, the store
//! observer, the timeline, the checkers, the trace hash and the reports are plain code that
//! also builds and is unit-tested without it. The simulator knows nothing of the adapter
//! crates under `adapters/`.

pub mod catalog;
pub mod checks;
pub mod plan;
pub mod report;
pub mod store;
pub mod timeline;
pub mod trace;

#[cfg(madsim)]
pub mod connections;
#[cfg(madsim)]
pub mod ports;
#[cfg(madsim)]
pub mod runner;
#[cfg(madsim)]
pub mod world;

/// The command line that rebuilds the simulator and reruns `args` (for failure reports).
pub fn reproduce_command(args: &str) -> String {
    format!(
        "RUSTFLAGS=\"--cfg madsim\" CARGO_TARGET_DIR=target/madsim cargo run --release -p airlock-sim{} -- {args}",
        if args.contains("--mutant") {
            " --features mutants"
        } else {
            ""
        }
    )
}
