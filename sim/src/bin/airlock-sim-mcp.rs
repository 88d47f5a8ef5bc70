//! `airlock-sim-mcp`: the connection world of SPEC §19.5 (see `airlock_sim::connections`).
//!
//! ```text
//! airlock-sim-mcp run --seed N [--count K]     # seeds N..N+K; exit 1 on the first violation
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
  airlock-sim-mcp run --seed N [--count K]     # seeds N..N+K; exit 1 on the first violation
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
    let parsed = (|| -> Result<(String, u64, u64, u64), String> {
        let command = args.first().cloned().unwrap_or_default();
        Ok((
            command,
            flag(&args, "--seed", 1)?,
            flag(&args, "--count", 1)?,
            flag(&args, "--seeds", 1_000)?,
        ))
    })();
    match parsed {
        Ok((command, seed, count, seeds)) => execute(&command, seed, count, seeds),
        Err(message) => {
            eprintln!("airlock-sim-mcp: {message}");
            ExitCode::from(2)
        }
    }
}

#[cfg(not(madsim))]
fn execute(_command: &str, _seed: u64, _count: u64, _seeds: u64) -> ExitCode {
    eprintln!(
        "airlock-sim-mcp needs a madsim build: RUSTFLAGS=\"--cfg madsim\" CARGO_TARGET_DIR=target/madsim \
         cargo run --release -p airlock-sim --bin airlock-sim-mcp -- run --seed 1"
    );
    ExitCode::from(2)
}

#[cfg(madsim)]
fn execute(command: &str, seed: u64, count: u64, seeds: u64) -> ExitCode {
    use airlock_sim::connections::run_seed;
    match command {
        "run" => {
            let (mut runs, mut calls, mut effects) = (0, 0, 0);
            let (mut in_flight, mut repeat, mut rebound) = (0, 0, 0);
            let began = std::time::Instant::now();
            let mut last_line = began;
            for (done, seed) in (seed..seed.saturating_add(count)).enumerate() {
                if last_line.elapsed() >= std::time::Duration::from_secs(10) {
                    last_line = std::time::Instant::now();
                    let rate = done as f64 / began.elapsed().as_secs_f64().max(1e-9);
                    eprintln!(
                        "progress: {done}/{count} seeds  {rate:.1} seeds/s  failed 0  about {:.0} s left",
                        (count - done as u64) as f64 / rate.max(1e-9)
                    );
                }
                let report = run_seed(seed);
                runs += report.runs;
                calls += report.calls;
                effects += report.effects;
                in_flight += report.refused_in_flight;
                repeat += report.refused_repeat;
                rebound += report.rebound_starts;
                if let Some(v) = report.violations.first() {
                    println!("seed {seed}: VIOLATION {}: {}", v.invariant, v.detail);
                    println!("plan: {}", report.plan);
                    println!(
                        "reproduce: RUSTFLAGS=\"--cfg madsim\" CARGO_TARGET_DIR=target/madsim cargo run --release -p airlock-sim --bin airlock-sim-mcp -- run --seed {seed}"
                    );
                    return ExitCode::from(1);
                }
            }
            println!(
                "connection world: {count} seeds from {seed} passed ({runs} runs, {calls} calls, \
                 {effects} effects; retries refused in flight {in_flight}, as repeats {repeat}; \
                 calls run for a request sent again after their client left {rebound})"
            );
            println!(
                "summary: seeds={count} runs={runs} calls={calls} effects={effects} failed=0 seconds={:.1}",
                began.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        "mutants" => mutants(seeds),
        other => {
            eprintln!("airlock-sim-mcp: unknown command '{other}' (run or mutants)");
            ExitCode::from(2)
        }
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
        // of a call still in flight taken again by a restarted host's retry.
        let rule = match name {
            "no_in_flight_check" => "§19.7 no effect",
            "stale_conversation_taint" => "§22.2 every call",
            "approved_without_request" => "§22.3 an approved call",
            _ => "§19.4 no call",
        };
        let caught = (1..=seeds).find_map(|seed| {
            let report = run_seed(seed);
            report
                .violations
                .iter()
                .find(|v| v.invariant.starts_with(rule))
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
