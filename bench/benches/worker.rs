//! Whole tool calls through the worker against the disk's raw commit limit (SPEC §17.3: with 16
//! runs at once, durable tool calls per second must reach a third of the raw FULL commit rate
//! measured in the same run; an allowed call in a one-call step costs at most 2.2 commits,
//! counted by the store: the `tx/call` column).
//!
//! Each line submits run scripts of one tool's calls (32 per run; 1 or 8 per step) into a fresh
//! data directory: first `math.calculate`, which has no side effect of its own (the durable path
//! alone), then `workspace.write_text`, which adds a file create and its fsync per call. It runs
//! one `Worker` with `concurrency = N` until every run is terminal; it then checks that every call SUCCEEDED and reports calls per second of wall time
//! (see `airlock_bench::worker_calls`). The raw limit (single-row INSERTs, WAL,
//! `synchronous=FULL`) is measured in the same directory before and after the worker lines, and
//! the ratios use the mean. Each line runs `REPEATS` times; the table shows the median.
//!
//! Run with `cd bench && cargo bench --bench worker` (about 90 s; see BENCHMARKS.md).

use std::path::Path;
use std::time::Duration;

use airlock_bench::durable::{bench_dir, raw_limit};
use airlock_bench::worker_calls::{BenchTool, POLL_MS, WorkerLoad, WorkerReport, measure};

const CONCURRENT_RUNS: [usize; 4] = [1, 4, 8, 16];
/// One call per step (a planner that calls one tool per turn), and 8 (a turn that fans out).
const CALLS_PER_STEP: [u32; 2] = [1, 8];
const CALLS_PER_RUN: u32 = 32;
/// The durable path alone first, then with the cheapest real side effect.
const TOOLS: [BenchTool; 2] = [BenchTool::Calculate, BenchTool::WriteText];
/// Calls per line (over all slots), so each line takes a few seconds whatever its concurrency.
const CALLS_PER_LINE: usize = 1024;
const REPEATS: usize = 3;
const RAW_SECONDS: u64 = 5;

fn median(mut reports: Vec<WorkerReport>) -> WorkerReport {
    reports.sort_by(|a, b| a.calls.per_second().total_cmp(&b.calls.per_second()));
    reports[reports.len() / 2]
}

fn line(dir: &Path, tool: BenchTool, calls_per_step: u32, concurrent_runs: usize) -> WorkerReport {
    let runs_per_slot = (CALLS_PER_LINE / (CALLS_PER_RUN as usize * concurrent_runs)).max(1);
    let load = WorkerLoad {
        tool,
        concurrent_runs,
        runs_per_slot,
        calls_per_run: CALLS_PER_RUN,
        calls_per_step,
    };
    let reports = (0..REPEATS)
        .map(|repeat| {
            let data_dir = dir.join(format!(
                "worker-{}-{calls_per_step}-{concurrent_runs}-{repeat}",
                tool.name()
            ));
            measure(&data_dir, load).unwrap_or_else(|e| panic!("{concurrent_runs} runs: {e}"))
        })
        .collect();
    median(reports)
}

fn main() {
    // `cargo test --benches` runs this binary with `--bench` absent; keep that run short.
    let quick = !std::env::args().any(|a| a == "--bench");
    let dir = bench_dir(env!("CARGO_TARGET_TMPDIR"), "airlock-worker-bench-");
    let raw_time = Duration::from_secs(if quick { 1 } else { RAW_SECONDS });
    let before = raw_limit(&dir.path().join("raw.sqlite3"), raw_time).per_second();
    let mut lines = Vec::new();
    for tool in TOOLS {
        for per_step in CALLS_PER_STEP {
            for runs in CONCURRENT_RUNS {
                if quick && (per_step != 1 || runs != 4) {
                    continue;
                }
                lines.push((tool, per_step, runs, line(dir.path(), tool, per_step, runs)));
            }
        }
    }
    let after = raw_limit(&dir.path().join("raw.sqlite3"), raw_time).per_second();
    let limit = (before + after) / 2.0;

    println!(
        "tool calls through the worker: {CALLS_PER_RUN} per run, poll {POLL_MS} ms, median of {REPEATS}, in {}",
        dir.path().display()
    );
    println!(
        "raw limit: {limit:.0} commits/s (before {before:.0}, after {after:.0}; single-row INSERT, \
         WAL, synchronous=FULL)"
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "CPU: {cores} cores; \"CPU ceiling\" = cores / (CPU time per call), the rate at which \
         every core would be busy"
    );
    println!(
        "{:>20} {:>10} {:>5} {:>7} {:>9} {:>16} {:>8} {:>12} {:>10} {:>13} {:>24} {:>15} {:>12}",
        "tool",
        "calls/step",
        "runs",
        "calls",
        "calls/s",
        "calls/(limit/3)",
        "tx/call",
        "COMMITs/call",
        "tx/COMMIT",
        "CPU ms/call",
        "CPU ceiling/(limit/3)",
        "writer µs/call",
        "SQL µs/call"
    );
    for (tool, per_step, runs, report) in lines {
        let per_second = report.calls.per_second();
        println!(
            "{:>20} {per_step:>10} {runs:>5} {:>7} {per_second:>9.0} {:>16.2} {:>8.1} {:>12.1} {:>10.2} \
             {:>13.2} {:>24.2} {:>15.0} {:>12.0}",
            tool.name(),
            report.calls.operations,
            per_second / (limit / 3.0),
            report.per_call(report.transactions),
            report.per_call(report.groups),
            report.transactions_per_commit(),
            report.cpu_ms_per_call(),
            report.cpu_ceiling(cores) / (limit / 3.0),
            report.writer_us_per_call(),
            report.writer_sql_us_per_call(),
        );
    }
}
