//! Durable transactions through `SqliteStore` against the disk's raw commit limit (SPEC §14,
//! §17.3: durable tool calls per second against a third of the raw limit, which takes group
//! commit).
//!
//! Lines measured (criterion group `sqlite`; throughput in durable commits):
//! - `raw_commit`: the limit — one single-row INSERT per COMMIT, `journal_mode=WAL`,
//!   `synchronous=FULL`, on a file in the same directory as the stores.
//! - `store_calls/1`: tool-call-shaped transactions through one `SqliteStore` from one thread
//!   (per call: two reads on the read connections, then PROPOSE·START, FINISH; see
//!   `airlock_bench::durable::ToolCallRun`; a fresh run every 32 calls, the default budget).
//! - `store_calls/4`, `store_calls/8`: the same from 4 and 8 threads at once, one run each,
//!   sharing one store (group commit).
//!
//! After criterion, a summary runs each line for a fixed time and prints commits/s, calls/s,
//! the ratio to the raw limit and the transactions per COMMIT. Run with
//! `cd bench && cargo bench --bench sqlite` (see BENCHMARKS.md). Whole tool calls through the
//! worker (claim, policy, checkpoints, workspace write) are measured by `benches/worker.rs`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_bench::durable::{
    COMMITS_PER_CALL, Rate, ToolCallRun, bench_dir, on_threads, raw_commit, raw_connection,
    raw_limit,
};
use airlock_sqlite::SqliteStore;
use criterion::{BenchmarkId, Criterion, Throughput};

const GROUP: &str = "sqlite";
const THREAD_COUNTS: [usize; 3] = [1, 4, 8];
const SUMMARY_THREAD_COUNTS: [usize; 5] = [1, 2, 4, 8, 16];
const SUMMARY_SECONDS: u64 = 5;

/// A fresh store with `threads` runs, one per thread.
fn store_with_runs(
    dir: &Path,
    name: &str,
    threads: usize,
) -> (Arc<SqliteStore>, Vec<Mutex<ToolCallRun>>) {
    let store = Arc::new(SqliteStore::open(&dir.join(name)).expect("open store"));
    let runs = (0..threads)
        .map(|_| Mutex::new(ToolCallRun::new(Arc::clone(&store))))
        .collect();
    (store, runs)
}

/// Every thread makes `calls` tool calls on its own run; returns the calls made.
fn calls_on_threads(runs: &[Mutex<ToolCallRun>], calls: u64) -> Rate {
    on_threads(runs.len(), |index| {
        let mut run = runs[index].lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..calls {
            run.call().expect("tool call");
        }
        calls
    })
}

fn criterion_lines(c: &mut Criterion, dir: &Path) {
    let mut group = c.benchmark_group(GROUP);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(2));
    group.measurement_time(Duration::from_secs(8));

    let conn = raw_connection(&dir.join("raw.sqlite3"));
    let mut value = 0_i64;
    group.throughput(Throughput::Elements(1));
    group.bench_function("raw_commit", |b| {
        b.iter(|| {
            value += 1;
            raw_commit(&conn, black_box(value));
        })
    });

    for threads in THREAD_COUNTS {
        let (_store, runs) = store_with_runs(dir, &format!("criterion-{threads}.sqlite3"), threads);
        group.throughput(Throughput::Elements(COMMITS_PER_CALL * threads as u64));
        group.bench_with_input(
            BenchmarkId::new("store_calls", threads),
            &runs,
            |b, runs| {
                // One iteration: every thread makes one call; `iters` of them back to back.
                b.iter_custom(|iters| calls_on_threads(runs, iters).elapsed)
            },
        );
    }
    group.finish();
}

/// Fixed-time runs of every line, printed as one table (the figures BENCHMARKS.md quotes).
fn summary(dir: &Path) {
    let duration = Duration::from_secs(SUMMARY_SECONDS);
    // The disk is shared with whatever else runs, so the limit is measured before and after
    // the store lines and the ratios use the mean.
    let before = raw_limit(&dir.join("summary-raw.sqlite3"), duration).per_second();
    let mut lines = Vec::new();
    for threads in SUMMARY_THREAD_COUNTS {
        let (store, runs) = store_with_runs(dir, &format!("summary-{threads}.sqlite3"), threads);
        let stats_before = store.group_stats();
        let start = Instant::now();
        let rate = on_threads(threads, |index| {
            let mut run = runs[index].lock().unwrap_or_else(|e| e.into_inner());
            let mut calls = 0;
            while start.elapsed() < duration {
                run.call().expect("tool call");
                calls += 1;
            }
            calls
        });
        let stats_after = store.group_stats();
        let grouped = (stats_after.transactions - stats_before.transactions) as f64
            / ((stats_after.groups - stats_before.groups).max(1)) as f64;
        lines.push((threads, rate.per_second(), grouped));
    }
    let after = raw_limit(&dir.join("summary-raw.sqlite3"), duration).per_second();
    let limit = (before + after) / 2.0;
    println!();
    println!(
        "durable transactions, {SUMMARY_SECONDS} s per line, in {}",
        dir.display()
    );
    println!(
        "raw limit: {limit:.0} commits/s (before {before:.0}, after {after:.0}; single-row INSERT, \
         WAL, synchronous=FULL)"
    );
    println!(
        "{:>7} {:>11} {:>9} {:>14} {:>16} {:>10}",
        "threads", "commits/s", "calls/s", "commits/limit", "calls/(limit/3)", "tx/COMMIT"
    );
    for (threads, calls, grouped) in lines {
        let commits = calls * COMMITS_PER_CALL as f64;
        println!(
            "{threads:>7} {commits:>11.0} {calls:>9.0} {:>14.2} {:>16.2} {grouped:>10.2}",
            commits / limit,
            calls / (limit / 3.0),
        );
    }
}

fn main() {
    let dir = bench_dir(env!("CARGO_TARGET_TMPDIR"), "airlock-sqlite-bench-");
    let path: PathBuf = dir.path().to_owned();
    let mut criterion = Criterion::default().configure_from_args();
    criterion_lines(&mut criterion, &path);
    criterion.final_summary();
    summary(&path);
}
