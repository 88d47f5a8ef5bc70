//! CPU per decision of `airlock policy eval --jsonl` end to end (SPEC §21.5: ≤ 3 µs over a
//! large corpus): reading, parsing, deciding and writing, in the real release binary.
//!
//! `cd bench && cargo run --release --example eval_jsonl -- [lines] [runs] [airlock binary]
//! [baseline binary]` (defaults: 200000 lines, 3 runs, `../target/release/airlock`, which
//! `cargo build --release -p airlock` at the repository root makes). With a baseline binary the
//! two alternate run by run (baseline first), their answers must be byte-identical (a hash of
//! every answer byte, per run), and both figures are printed with their ratio.
//!
//! The corpus is every action of both conformance files (`policy-cases.jsonl` and
//! `policy-v2-cases.jsonl`, 1,952 actions, two thirds of them payloads), written compactly and
//! repeated in whole copies to at least `lines` lines. Each run's CPU is the child's user plus
//! system time (`getrusage(RUSAGE_CHILDREN)` around its wait); the process start (the same binary
//! on a one-line file, fastest of 5) is subtracted before dividing by the lines. The fastest run
//! is reported, because on a shared machine only load adds time. The output of every run must
//! be one decision line per input line, exit 0.
//!
//! Afterwards, the same 1,952 actions in this process, split into the steps of one line (fastest
//! of 5 rounds each), for the owned path (`ProposedAction::from_json`, `evaluate`, the
//! decision's JSON) and the borrowed one the CLI takes (`ActionRef::from_json`, `decide`,
//! `Verdict::write_json`).

use std::hint::black_box;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use airlock_bench::cpu::children_cpu;
use airlock_bench::{action_lines, cases_path, v2_cases_path};
use airlock_policy::action::ProposedAction;
use airlock_policy::action_ref::ActionRef;
use airlock_policy::{Ruleset, decide as decide_verdict, evaluate};

fn arg(n: usize) -> Option<String> {
    std::env::args().nth(n)
}

/// One run: (CPU, wall time, hash of the answers) of the child; panics unless it answered every
/// line and exited 0.
fn run(binary: &Path, input: &Path, lines: usize) -> (Duration, Duration, u64) {
    let before = children_cpu();
    let started = Instant::now();
    let mut child = Command::new(binary)
        .args(["policy", "eval", "--jsonl"])
        .arg(input)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut reader = BufReader::with_capacity(1 << 16, stdout);
    let (mut answers, mut decisions) = (0usize, 0usize);
    let mut hasher = std::hash::DefaultHasher::new();
    let mut line = Vec::new();
    while reader
        .read_until(b'\n', &mut line)
        .expect("read the answers")
        > 0
    {
        answers += 1;
        decisions += usize::from(line.starts_with(b"{\"decision\":"));
        std::hash::Hasher::write(&mut hasher, &line);
        line.clear();
    }
    let status = child.wait().expect("wait for airlock");
    let wall = started.elapsed();
    let cpu = children_cpu().saturating_sub(before);
    assert!(status.success(), "airlock exited with {status}");
    assert_eq!(
        (answers, decisions),
        (lines, lines),
        "one decision per line"
    );
    (cpu, wall, std::hash::Hasher::finish(&hasher))
}

fn fastest(rounds: usize, mut f: impl FnMut()) -> Duration {
    (0..rounds)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let wanted: usize = arg(1).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let runs: usize = arg(2).and_then(|a| a.parse().ok()).unwrap_or(3).max(1);
    let binary = arg(3).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/airlock"),
        PathBuf::from,
    );
    if !binary.is_file() {
        eprintln!(
            "error: no airlock binary at {} (run `cargo build --release -p airlock` at the \
             repository root, or pass its path as the third argument)",
            binary.display()
        );
        std::process::exit(2);
    }
    let mut actions = action_lines(&cases_path());
    actions.extend(action_lines(&v2_cases_path()));
    let copies = wanted.div_ceil(actions.len()).max(1);
    let lines = copies * actions.len();

    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/tmp");
    std::fs::create_dir_all(&dir).expect("create target/tmp");
    let corpus = dir.join("eval_jsonl_corpus.jsonl");
    let one = dir.join("eval_jsonl_one.jsonl");
    let mut out = BufWriter::new(std::fs::File::create(&corpus).expect("create the corpus"));
    for _ in 0..copies {
        for action in &actions {
            out.write_all(action.as_bytes()).expect("write the corpus");
            out.write_all(b"\n").expect("write the corpus");
        }
    }
    out.flush().expect("write the corpus");
    drop(out);
    std::fs::write(&one, format!("{}\n", actions[0])).expect("write the one-line file");
    let bytes = std::fs::metadata(&corpus).map(|m| m.len()).unwrap_or(0);

    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("binary: {}", binary.display());
    println!(
        "corpus: {} distinct actions x {copies} = {lines} lines, {bytes} bytes",
        actions.len()
    );
    println!("load average before: {}", load().trim());
    let start = (0..5)
        .map(|_| run(&binary, &one, 1).0)
        .min()
        .unwrap_or_default();
    println!(
        "process start (1 line, fastest of 5): {:.1} ms CPU",
        ms(start)
    );
    let baseline = arg(4).map(PathBuf::from);
    let mut contenders = Vec::new();
    if let Some(baseline) = &baseline {
        let start = (0..5)
            .map(|_| run(baseline, &one, 1).0)
            .min()
            .unwrap_or_default();
        println!(
            "baseline {}: process start {:.1} ms CPU",
            baseline.display(),
            ms(start)
        );
        contenders.push(("baseline", baseline.clone(), start));
    }
    contenders.push(("binary", binary.clone(), start));
    let mut best = vec![Duration::MAX; contenders.len()];
    let mut answers: Option<u64> = None;
    for i in 0..runs {
        for (which, (name, path, start)) in contenders.iter().enumerate() {
            let (cpu, wall, hash) = run(path, &corpus, lines);
            assert_eq!(
                *answers.get_or_insert(hash),
                hash,
                "{name} answered differently (run {})",
                i + 1
            );
            let per = per_line(cpu.saturating_sub(*start), lines - 1);
            println!(
                "{name} run {}: {:.3} s CPU, {:.3} s wall, {per:.2} us CPU per decision",
                i + 1,
                cpu.as_secs_f64(),
                wall.as_secs_f64()
            );
            best[which] = best[which].min(cpu);
        }
    }
    let figures: Vec<f64> = contenders
        .iter()
        .zip(&best)
        .map(|((name, _, start), best)| {
            let per = per_line(best.saturating_sub(*start), lines - 1);
            println!("{name} end to end, fastest run: {per:.2} us CPU per decision (start subtracted)");
            per
        })
        .collect();
    if let [before, after] = figures[..] {
        println!(
            "answers byte-identical in every run; baseline / binary = {:.2}x",
            before / after
        );
    }
    println!("load average after: {}", load().trim());

    // The same line's steps in this process.
    let ruleset = Ruleset::shipped().expect("the shipped policy loads");
    let parsed: Vec<ProposedAction> = actions
        .iter()
        .map(|a| ProposedAction::from_json(a).expect("a conformance action parses"))
        .collect();
    let decisions: Vec<_> = parsed.iter().map(|a| evaluate(a, &ruleset)).collect();
    let n = actions.len();
    let parse = fastest(5, || {
        for a in &actions {
            black_box(ProposedAction::from_json(black_box(a)).ok());
        }
    });
    let decide = fastest(5, || {
        for a in &parsed {
            black_box(evaluate(black_box(a), &ruleset));
        }
    });
    let write = fastest(5, || {
        for d in &decisions {
            black_box(d.to_json());
        }
    });
    println!(
        "in process, owned, mean per action over the {n}: from_json {:.2} us, evaluate {:.2} us, \
         decision JSON {:.2} us",
        per_line(parse, n),
        per_line(decide, n),
        per_line(write, n)
    );
    let borrowed: Vec<ActionRef> = actions
        .iter()
        .map(|a| ActionRef::from_json(a).expect("a conformance action parses"))
        .collect();
    let verdicts: Vec<_> = borrowed.iter().map(|a| decide_verdict(a, &ruleset)).collect();
    let parse = fastest(5, || {
        for a in &actions {
            black_box(ActionRef::from_json(black_box(a)).ok());
        }
    });
    let decide = fastest(5, || {
        for a in &borrowed {
            black_box(decide_verdict(black_box(a), &ruleset));
        }
    });
    let mut buffer = Vec::with_capacity(1 << 16);
    let write = fastest(5, || {
        for v in &verdicts {
            buffer.clear();
            black_box(v.write_json(&mut buffer).ok());
        }
    });
    println!(
        "in process, borrowed (the CLI's path): ActionRef::from_json {:.2} us, decide {:.2} us, \
         write_json {:.2} us",
        per_line(parse, n),
        per_line(decide, n),
        per_line(write, n)
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn per_line(d: Duration, lines: usize) -> f64 {
    d.as_secs_f64() * 1e6 / lines.max(1) as f64
}
