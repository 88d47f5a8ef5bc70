//! `airlock-sim`: seeded simulation sweeps and the mutant check.
//!
//! ```text
//! airlock-sim run --seed N [--count K] [--check-determinism] [--jobs J] [--keep-going]
//!                 [--mutant NAME] [--verbose]
//! airlock-sim mutants [--seeds 1000] [--start 1] [--jobs J] [--only NAME]
//! ```
//!
//! The simulator needs a madsim build (`RUSTFLAGS="--cfg madsim"`, its own target directory);
//! a normal build only says so and exits 2. Mutants need `--features mutants` as well.

use std::process::ExitCode;

/// A parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    Run {
        seed: u64,
        count: u64,
        check_determinism: bool,
        jobs: Option<usize>,
        keep_going: bool,
        mutant: Option<String>,
        verbose: bool,
    },
    Mutants {
        seeds: u64,
        start: u64,
        jobs: Option<usize>,
        only: Option<String>,
    },
    Help,
}

const USAGE: &str = "usage:
  airlock-sim run --seed N [--count K] [--check-determinism] [--jobs J] [--keep-going] [--mutant NAME] [--verbose]
  airlock-sim mutants [--seeds 1000] [--start 1] [--jobs J] [--only NAME]
  airlock-sim help | --help | -h        (also after a command: airlock-sim run --help)

run: seeds N..N+K of the run world, each checked against every invariant; progress on stderr
(a bar on a terminal, a line every 10 s otherwise) and a summary line at the end; exit 1 if a
seed failed, printing how to reproduce it. mutants: each planted bug must be caught.
Needs a madsim build: RUSTFLAGS=\"--cfg madsim\" CARGO_TARGET_DIR=target/madsim cargo run --release -p airlock-sim -- ...";

fn number<T: std::str::FromStr>(flag: &str, value: Option<&String>) -> Result<T, String> {
    value
        .ok_or_else(|| format!("{flag} needs a value"))?
        .parse()
        .map_err(|_| format!("{flag}: not a number"))
}

fn parse(args: &[String]) -> Result<Command, String> {
    let Some(first) = args.first() else {
        return Ok(Command::Help);
    };
    let mut rest = args[1..].iter();
    match first.as_str() {
        "run" => {
            let (mut seed, mut count, mut check, mut jobs) = (None, 1, false, None);
            let (mut keep_going, mut mutant, mut verbose) = (false, None, false);
            while let Some(flag) = rest.next() {
                match flag.as_str() {
                    "--seed" => seed = Some(number(flag, rest.next())?),
                    "--count" => count = number(flag, rest.next())?,
                    "--jobs" => jobs = Some(number(flag, rest.next())?),
                    "--check-determinism" => check = true,
                    "--keep-going" => keep_going = true,
                    "--verbose" => verbose = true,
                    "--mutant" => {
                        mutant = Some(rest.next().ok_or("--mutant needs a name")?.clone())
                    }
                    "--help" | "-h" => return Ok(Command::Help),
                    other => return Err(format!("unknown flag {other}")),
                }
            }
            if count == 0 {
                return Err("--count must be at least 1".to_owned());
            }
            Ok(Command::Run {
                seed: seed.ok_or("run needs --seed N")?,
                count,
                check_determinism: check,
                jobs,
                keep_going,
                mutant,
                verbose,
            })
        }
        "mutants" => {
            let (mut seeds, mut start, mut jobs, mut only) = (1_000, 1, None, None);
            while let Some(flag) = rest.next() {
                match flag.as_str() {
                    "--seeds" => seeds = number(flag, rest.next())?,
                    "--start" => start = number(flag, rest.next())?,
                    "--jobs" => jobs = Some(number(flag, rest.next())?),
                    "--only" => only = Some(rest.next().ok_or("--only needs a name")?.clone()),
                    "--help" | "-h" => return Ok(Command::Help),
                    other => return Err(format!("unknown flag {other}")),
                }
            }
            Ok(Command::Mutants {
                seeds,
                start,
                jobs,
                only,
            })
        }
        "help" | "--help" | "-h" => Ok(Command::Help),
        other => Err(format!("unknown command {other}")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match parse(&args) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("airlock-sim: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if command == Command::Help {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    execute(command)
}

#[cfg(not(madsim))]
fn execute(_command: Command) -> ExitCode {
    eprintln!(
        "airlock-sim needs a madsim build: RUSTFLAGS=\"--cfg madsim\" CARGO_TARGET_DIR=target/madsim \
         cargo run --release -p airlock-sim -- run --seed 1"
    );
    ExitCode::from(2)
}

#[cfg(madsim)]
fn execute(command: Command) -> ExitCode {
    sweep::execute(command)
}

#[cfg(madsim)]
mod sweep {
    //! Sweeps: seeds run on `--jobs` threads, one madsim runtime per seed.

    use std::io::{IsTerminal, Write};
    use std::process::ExitCode;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use airlock_sim::report::{SeedReport, Summary, render_failure};
    use airlock_sim::runner::{install_panic_hook, run_seed};
    use airlock_sim::{plan::Plan, reproduce_command};

    use super::Command;

    /// How a sweep shows its progress on stderr.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Progress {
        /// A bar redrawn in place (stderr is a terminal).
        Bar,
        /// A line every [`PROGRESS_EVERY`] (stderr is a log).
        Lines,
        None,
    }

    const PROGRESS_EVERY: Duration = Duration::from_secs(10);

    impl Progress {
        fn for_stderr() -> Progress {
            if std::io::stderr().is_terminal() {
                Progress::Bar
            } else {
                Progress::Lines
            }
        }
    }

    struct Sweep {
        start: u64,
        count: u64,
        jobs: usize,
        check_determinism: bool,
        stop_at_first_failure: bool,
        progress: Progress,
    }

    fn default_jobs() -> usize {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .min(4)
    }

    /// One seed, twice if determinism is checked; a differing trace hash is a violation.
    fn seed_report(seed: u64, check_determinism: bool) -> SeedReport {
        let mut report = run_seed(seed);
        if check_determinism {
            let again = run_seed(seed);
            if again.trace_hash != report.trace_hash {
                report
                    .violations
                    .push(airlock_core::testing::invariants::Violation {
                        invariant: "determinism",
                        detail: format!(
                            "the same seed gave trace hashes {} and {}",
                            report.trace_hash, again.trace_hash
                        ),
                    });
            }
        }
        report
    }

    /// Runs the seeds; `on_report` sees each report in completion order.
    fn sweep(config: &Sweep, mut on_report: impl FnMut(&SeedReport)) -> (Summary, Duration) {
        let began = Instant::now();
        let next = Arc::new(AtomicU64::new(config.start));
        let stop = Arc::new(AtomicBool::new(false));
        let end = config.start.saturating_add(config.count);
        let (sender, receiver) = mpsc::channel();
        let mut threads = Vec::new();
        for _ in 0..config.jobs.max(1) {
            let (next, stop, sender) = (Arc::clone(&next), Arc::clone(&stop), sender.clone());
            let check = config.check_determinism;
            threads.push(std::thread::spawn(move || {
                install_panic_hook();
                loop {
                    let seed = next.fetch_add(1, Ordering::SeqCst);
                    if seed >= end || stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if sender.send(seed_report(seed, check)).is_err() {
                        return;
                    }
                }
            }));
        }
        drop(sender);
        let mut summary = Summary::default();
        let mut last_draw = Instant::now();
        for report in receiver {
            summary.add(&report);
            if report.failed() && config.stop_at_first_failure {
                stop.store(true, Ordering::SeqCst);
            }
            on_report(&report);
            match config.progress {
                Progress::Bar if last_draw.elapsed() > Duration::from_millis(100) => {
                    last_draw = Instant::now();
                    draw_progress(&summary, config.count, began.elapsed());
                }
                Progress::Lines if last_draw.elapsed() >= PROGRESS_EVERY => {
                    last_draw = Instant::now();
                    eprintln!("{}", summary.progress_line(config.count, began.elapsed()));
                }
                _ => {}
            }
        }
        for thread in threads {
            let _ = thread.join();
        }
        if config.progress == Progress::Bar {
            eprint!("\r\x1b[2K");
        }
        (summary, began.elapsed())
    }

    fn draw_progress(summary: &Summary, total: u64, wall: Duration) {
        const WIDTH: u64 = 30;
        let done = summary.seeds.min(total);
        let filled = (done * WIDTH / total.max(1)) as usize;
        let rate = summary.seeds as f64 / wall.as_secs_f64().max(1e-9);
        let eta = (total - done) as f64 / rate.max(1e-9);
        eprint!(
            "\r[{}{}] {done}/{total} seeds  {rate:.1} seeds/s  eta {eta:.0} s  failed {}",
            "=".repeat(filled),
            " ".repeat(WIDTH as usize - filled),
            summary.failed
        );
        let _ = std::io::stderr().flush();
    }

    fn activate(mutant: Option<&str>) -> Result<(), String> {
        #[cfg(feature = "mutants")]
        {
            airlock_core::testing::mutants::activate(mutant)
        }
        #[cfg(not(feature = "mutants"))]
        {
            match mutant {
                None => Ok(()),
                Some(_) => Err("this build has no mutants: add --features mutants".to_owned()),
            }
        }
    }

    fn mutant_names() -> Vec<&'static str> {
        #[cfg(feature = "mutants")]
        {
            airlock_core::testing::mutants::NAMES.to_vec()
        }
        #[cfg(not(feature = "mutants"))]
        {
            Vec::new()
        }
    }

    pub fn execute(command: Command) -> ExitCode {
        match command {
            Command::Run {
                seed,
                count,
                check_determinism,
                jobs,
                keep_going,
                mutant,
                verbose,
            } => {
                if let Err(message) = activate(mutant.as_deref()) {
                    eprintln!("airlock-sim: {message}");
                    return ExitCode::from(2);
                }
                let single = count == 1;
                if single {
                    println!("{}", Plan::new(seed).describe());
                }
                let config = Sweep {
                    start: seed,
                    count,
                    jobs: jobs.unwrap_or_else(default_jobs).min(count as usize),
                    check_determinism,
                    stop_at_first_failure: !keep_going,
                    progress: if single || verbose {
                        Progress::None
                    } else {
                        Progress::for_stderr()
                    },
                };
                let mutant_flag = mutant
                    .as_deref()
                    .map(|m| format!(" --mutant {m}"))
                    .unwrap_or_default();
                let mut failures = 0;
                let (summary, wall) = sweep(&config, |report| {
                    if single || verbose {
                        println!(
                            "seed={} runs={} calls={} effects={} faults={} simulated={:.1}s trace={}",
                            report.seed,
                            report.runs,
                            report.calls,
                            report.effects,
                            report.faults.values().sum::<u64>(),
                            report.simulated.as_secs_f64(),
                            report.trace_hash
                        );
                    }
                    if report.failed() {
                        failures += 1;
                        if failures <= 3 {
                            let args = format!("run --seed {}{mutant_flag}", report.seed);
                            if config.progress == Progress::Bar {
                                eprint!("\r\x1b[2K");
                            }
                            println!("{}", render_failure(report, &reproduce_command(&args)));
                        } else {
                            println!(
                                "FAIL seed={} invariant={}",
                                report.seed, report.violations[0].invariant
                            );
                        }
                    }
                });
                print!("{}", summary.render(wall));
                if summary.failed > 0 {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                }
            }
            Command::Mutants {
                seeds,
                start,
                jobs,
                only,
            } => {
                let names: Vec<&str> = mutant_names()
                    .into_iter()
                    .filter(|n| only.as_deref().is_none_or(|o| o == *n))
                    .collect();
                if names.is_empty() {
                    eprintln!(
                        "airlock-sim: no mutants to run (build with --features mutants, or check --only)"
                    );
                    return ExitCode::from(2);
                }
                let began = std::time::Instant::now();
                let mut survivors = Vec::new();
                for name in names {
                    activate(Some(name)).expect("a known mutant");
                    let config = Sweep {
                        start,
                        count: seeds,
                        jobs: jobs.unwrap_or_else(default_jobs),
                        check_determinism: false,
                        stop_at_first_failure: true,
                        progress: Progress::for_stderr(),
                    };
                    let mut caught: Option<(u64, &'static str, String)> = None;
                    let (summary, wall) = sweep(&config, |report| {
                        if let Some(violation) = report.violations.first()
                            && caught
                                .as_ref()
                                .is_none_or(|(seed, _, _)| report.seed < *seed)
                        {
                            caught =
                                Some((report.seed, violation.invariant, violation.detail.clone()));
                        }
                    });
                    match caught {
                        Some((seed, invariant, detail)) => println!(
                            "mutant {name}: caught seed={seed} invariant={invariant} ({} seeds, {:.1} s)\n  {detail}\n  reproduce: {}",
                            summary.seeds,
                            wall.as_secs_f64(),
                            reproduce_command(&format!("run --seed {seed} --mutant {name}"))
                        ),
                        None => {
                            println!("mutant {name}: SURVIVED {} seeds", summary.seeds);
                            survivors.push(name);
                        }
                    }
                }
                activate(None).expect("no mutant");
                println!(
                    "mutants: {} survived; {:.1} s",
                    survivors.len(),
                    began.elapsed().as_secs_f64()
                );
                if survivors.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
            Command::Help => ExitCode::SUCCESS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn parses_run_and_mutants() {
        assert_eq!(
            parse(&args("run --seed 5 --count 10 --check-determinism")),
            Ok(Command::Run {
                seed: 5,
                count: 10,
                check_determinism: true,
                jobs: None,
                keep_going: false,
                mutant: None,
                verbose: false,
            })
        );
        assert_eq!(
            parse(&args("mutants --seeds 200 --only skip_watermark")),
            Ok(Command::Mutants {
                seeds: 200,
                start: 1,
                jobs: None,
                only: Some("skip_watermark".into()),
            })
        );
        assert!(parse(&args("run --count 3")).is_err());
        assert!(parse(&args("run --seed x")).is_err());
        assert!(parse(&args("frobnicate")).is_err());
        assert_eq!(parse(&[]), Ok(Command::Help));
        for help in [
            "run --help",
            "run -h",
            "mutants --help",
            "mutants -h",
            "--help",
            "help",
        ] {
            assert_eq!(parse(&args(help)), Ok(Command::Help), "{help}");
        }
    }
}
