//! One row of the worker benchmark, for profilers (`perf record`, `strace -c`) that should see
//! the worker and nothing else: `cargo run --release --example worker_row -- <calls/step> <runs>
//! [runs per slot] [write|calc]` (the tool: `workspace.write_text`, the default, or
//! `math.calculate`). Prints calls/s, the group-commit counters, CPU time per call and the writer's statement
//! time per call; no raw
//! limit is measured. With `KEEP=1` the data directory stays (its path goes to stderr), for
//! reading the WAL or the database afterwards.

use airlock_bench::durable::bench_dir;
use airlock_bench::worker_calls::{BenchTool, WorkerLoad, measure};

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let calls_per_step = u32::try_from(arg(1, 1)).unwrap_or(1);
    let concurrent_runs = arg(2, 4);
    let runs_per_slot = arg(3, 8);
    let dir = bench_dir(
        concat!(env!("CARGO_MANIFEST_DIR"), "/target/tmp"),
        "airlock-worker-row-",
    );
    let tool = match std::env::args().nth(4).as_deref() {
        Some("calc") => BenchTool::Calculate,
        None | Some("write") => BenchTool::WriteText,
        Some(other) => {
            eprintln!("worker row: unknown tool {other:?}; expected write or calc");
            std::process::exit(2);
        }
    };
    let load = WorkerLoad {
        tool,
        concurrent_runs,
        runs_per_slot,
        calls_per_run: 32,
        calls_per_step,
    };
    let result = measure(&dir.path().join("data"), load);
    if std::env::var_os("KEEP").is_some() {
        eprintln!("kept {}", dir.keep().display());
    }
    match result {
        Ok(report) => println!(
            "{}, {calls_per_step} calls/step, {concurrent_runs} runs: {} calls, {:.0} calls/s, \
             {:.1} tx/call, {:.2} tx/COMMIT, {:.2} CPU ms/call, {:.0} writer µs/call, {:.0} SQL µs/call",
            tool.name(),
            report.calls.operations,
            report.calls.per_second(),
            report.per_call(report.transactions),
            report.transactions_per_commit(),
            report.cpu_ms_per_call(),
            report.writer_us_per_call(),
            report.writer_sql_us_per_call()
        ),
        Err(e) => {
            eprintln!("worker row: {e}");
            std::process::exit(1);
        }
    }
}
