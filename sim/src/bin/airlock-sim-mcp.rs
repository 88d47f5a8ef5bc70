//! `airlock-sim-mcp`: the connection world of SPEC §19.5 (see `airlock_sim::connections`).
//!
//! ```text
//! airlock-sim-mcp run --seed N [--count K] [--jobs J] [--keep-going]
//!                                              # seeds N..N+K on J threads; exit 1 on a violation
//! airlock-sim-mcp mutants [--seeds 1000]       # each connection mutant must be caught
//! ```
//!
//! Needs a madsim build (`RUSTFLAGS="--cfg madsim"`, its own target directory); mutants need
//! `--features mutants` as well.

use std::process::ExitCode;

fn flag(args: &[String], name: &str, default: u64) -> Result<u64, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} needs a number")),
    }
}

const USAGE: &str = "usage:
  airlock-sim-mcp run --seed N [--count K] [--jobs J] [--keep-going]
                                               # seeds N..N+K on J threads (default 1); exit 1 on
                                               # a violation, after the first unless --keep-going
  airlock-sim-mcp mutants [--seeds 1000]       # each connection mutant must be caught
  airlock-sim-mcp help | --help | -h           (also after a command)
Needs a madsim build: RUSTFLAGS=\"--cfg madsim\" CARGO_TARGET_DIR=target/madsim cargo run --release -p airlock-sim --bin airlock-sim-mcp -- ...";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty()
        || args
            .iter()
            .any(|a| matches!(a.as_str(), "help" | "--help" | "-h"))
    {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let parsed = (|| -> Result<(String, Sweep, u64), String> {
        let command = args.first().cloned().unwrap_or_default();
        let sweep = Sweep {
            start: flag(&args, "--seed", 1)?,
            count: flag(&args, "--count", 1)?,
            jobs: flag(&args, "--jobs", 1)?.max(1),
            keep_going: args.iter().any(|a| a == "--keep-going"),
        };
        Ok((command, sweep, flag(&args, "--seeds", 1_000)?))
    })();
    match parsed {
        Ok((command, sweep, seeds)) => execute(&command, &sweep, seeds),
        Err(message) => {
            eprintln!("airlock-sim-mcp: {message}");
            ExitCode::from(2)
        }
    }
}

/// What `run` sweeps.
#[cfg_attr(not(madsim), allow(dead_code))]
struct Sweep {
    start: u64,
    count: u64,
    jobs: u64,
    keep_going: bool,
}

#[cfg(not(madsim))]
fn execute(_command: &str, _sweep: &Sweep, _seeds: u64) -> ExitCode {
    eprintln!(
        "airlock-sim-mcp needs a madsim build: RUSTFLAGS=\"--cfg madsim\" CARGO_TARGET_DIR=target/madsim \
         cargo run --release -p airlock-sim --bin airlock-sim-mcp -- run --seed 1"
    );
    ExitCode::from(2)
}

#[cfg(madsim)]
fn execute(command: &str, sweep: &Sweep, seeds: u64) -> ExitCode {
    match command {
        "run" => run(sweep),
        "mutants" => mutants(seeds),
        other => {
            eprintln!("airlock-sim-mcp: unknown command '{other}' (run or mutants)");
            ExitCode::from(2)
        }
    }
}

/// Runs the seeds on `jobs` threads (one madsim runtime per seed), each taking the next seed;
/// prints every violation with its plan and how to reproduce it, and stops at the first unless
/// `keep_going`.
#[cfg(madsim)]
fn run(sweep: &Sweep) -> ExitCode {
    use airlock_sim::connections::run_seed;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, mpsc};
    let (start, count) = (sweep.start, sweep.count);
    let end = start.saturating_add(count);
    let next = Arc::new(AtomicU64::new(start));
    let stop = Arc::new(AtomicBool::new(false));
    let (sender, receiver) = mpsc::channel();
    for _ in 0..sweep.jobs {
        let (next, stop, sender) = (Arc::clone(&next), Arc::clone(&stop), sender.clone());
        std::thread::spawn(move || {
            loop {
                let seed = next.fetch_add(1, Ordering::SeqCst);
                if seed >= end || stop.load(Ordering::SeqCst) {
                    return;
                }
                // A seed that panics is a failure to report, not a thread that quietly ends.
                let report = std::panic::catch_unwind(|| run_seed(seed)).map_err(|panic| {
                    panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                        .unwrap_or_else(|| "a panic".to_owned())
                });
                if sender.send((seed, report)).is_err() {
                    return;
                }
            }
        });
    }
    drop(sender);
    let (mut runs, mut calls, mut effects) = (0, 0, 0);
    let (mut in_flight, mut repeat, mut rebound) = (0, 0, 0);
    let (mut tasks, mut adopted, mut state_retries) = (0, 0, 0);
    let (mut done, mut failed) = (0u64, Vec::new());
    let began = std::time::Instant::now();
    let mut last_line = began;
    for (seed, report) in receiver {
        done += 1;
        let report = match report {
            Ok(report) => report,
            Err(panic) => {
                failed.push(seed);
                println!("seed {seed}: PANIC {panic}");
                if !sweep.keep_going {
                    stop.store(true, Ordering::SeqCst);
                }
                continue;
            }
        };
        runs += report.runs;
        calls += report.calls;
        effects += report.effects;
        in_flight += report.refused_in_flight;
        repeat += report.refused_repeat;
        rebound += report.rebound_starts;
        tasks += report.tasks;
        adopted += report.adopted_after_crash;
        state_retries += report.state_retries;
        if let Some(v) = report.violations.first() {
            failed.push(seed);
            println!("seed {seed}: VIOLATION {}: {}", v.invariant, v.detail);
            println!("plan: {}", report.plan);
            println!(
                "reproduce: RUSTFLAGS=\"--cfg madsim\" CARGO_TARGET_DIR=target/madsim cargo run --release -p airlock-sim --bin airlock-sim-mcp -- run --seed {seed}"
            );
            if !sweep.keep_going {
                stop.store(true, Ordering::SeqCst);
            }
        }
        if last_line.elapsed() >= std::time::Duration::from_secs(10) {
            last_line = std::time::Instant::now();
            let rate = done as f64 / began.elapsed().as_secs_f64().max(1e-9);
            eprintln!(
                "progress: {done}/{count} seeds  {rate:.1} seeds/s  failed {}  about {:.0} s left",
                failed.len(),
                count.saturating_sub(done) as f64 / rate.max(1e-9)
            );
        }
    }
    failed.sort_unstable();
    if failed.is_empty() {
        println!(
            "connection world: {count} seeds from {start} passed ({runs} runs, {calls} calls, \
             {effects} effects; retries refused in flight {in_flight}, as repeats {repeat}; \
             calls run for a request sent again after their client left {rebound}; tasks \
             {tasks}, adopted by a restarted host's gateway {adopted}; retries with a sealed \
             state {state_retries})"
        );
    } else {
        println!("connection world: failed seeds {failed:?}");
    }
    println!(
        "summary: seeds={done} runs={runs} calls={calls} effects={effects} failed={} seconds={:.1}",
        failed.len(),
        began.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

#[cfg(all(madsim, feature = "mutants"))]
fn mutants(seeds: u64) -> ExitCode {
    use airlock_core::testing::mutants::{CONNECTION_NAMES, activate};
    use airlock_sim::connections::run_seed;
    let mut survived = false;
    for name in CONNECTION_NAMES {
        if let Err(e) = activate(Some(name)) {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
        // Caught means caught by the rule the mutant breaks, not only a symptom such as a
        // connection left open: a call of the gone client sent after it left, or an effect
        // of a call still in flight taken again by a restarted host's retry (or by the
        // process that adopts the task after its gateway crashed).
        let rules: &[&str] = match name {
            "no_in_flight_check" => &["§19.7 no effect"],
            // The same invocation's effect taken twice: S invariant 13, or §19.7's rule when
            // the adopting process's row is another invocation.
            "task_replayed_after_crash" => &["inv_13", "§19.7 no effect"],
            "stale_conversation_taint" => &["§22.2 every call"],
            "approved_without_request" => &["§22.3 outside tasks, an approved call"],
            "state_not_bound_to_principal" => &["§22.3 a sealed requestState"],
            _ => &["§19.4 no call"],
        };
        let caught = (1..=seeds).find_map(|seed| {
            let report = run_seed(seed);
            report
                .violations
                .iter()
                .find(|v| rules.iter().any(|rule| v.invariant.starts_with(rule)))
                .map(|v| (seed, v.clone()))
        });
        match caught {
            Some((seed, v)) => println!(
                "mutant {name}: caught at seed {seed} ({}: {})",
                v.invariant, v.detail
            ),
            None => {
                println!("mutant {name}: SURVIVED {seeds} seeds");
                survived = true;
            }
        }
    }
    let _ = activate(None);
    if survived {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(all(madsim, not(feature = "mutants")))]
fn mutants(_seeds: u64) -> ExitCode {
    eprintln!("airlock-sim-mcp mutants needs --features mutants");
    ExitCode::from(2)
}
