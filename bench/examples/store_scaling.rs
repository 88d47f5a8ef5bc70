//! Durable calls/s with 1, 2 and 4 `airlock worker` processes on PostgreSQL beside SQLite, on
//! the same machine and the same script (SPEC §18 "Bench"), and the round trips a call costs on
//! PostgreSQL.
//!
//! ```sh
//! cargo build --release -p airlock                      # in the root workspace
//! . .ci/postgres.sh                                     # or any server: AIRLOCK_TEST_PG_URL
//! cd bench && cargo run --release --example store_scaling -- ../target/release/airlock
//! # the round trips alone (no worker processes):
//! cd bench && cargo run --release --example store_scaling -- ../target/release/airlock --round-trips
//! ```
//!
//! Each measurement starts from a fresh store (an SQLite file, or a PostgreSQL schema of its
//! own): RUNS runs of CALLS `workspace.write_text` calls, one call per step, are submitted first;
//! then P `airlock worker --until-idle` processes (concurrency 4 each, the CLI defaults otherwise)
//! start together, and the figure is completed calls over the wall time from their start to the
//! last one's exit. Every run must end COMPLETED with every call SUCCEEDED, or no figure is
//! printed. The round trips come from one in-process worker on PostgreSQL with the store's own
//! counters (`PgStore::round_trips`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use airlock::app::App;
use airlock_bench::worker_calls::{BenchTool, bench_principal, tool_script};
use airlock_core::store::Store;
use airlock_core::vocab::RunStatus;
use airlock_core::worker::WorkerSettings;
use airlock_host::TokioSpawner;

const RUNS: usize = 16;
const CALLS: u32 = 40;

fn fresh_schema_url(base: &str, name: &str) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(base, tokio_postgres::NoTls)
            .await
            .expect("connect to the bench server");
        tokio::spawn(connection);
        client
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
            ))
            .await
            .expect("fresh schema");
    });
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}options=-c%20search_path%3D{name}")
}

async fn submit(data_dir: &Path, store: Option<&str>) -> App {
    let app = App::open(data_dir, store, None)
        .await
        .expect("open the store");
    let control = app.control(None);
    let script = tool_script(BenchTool::WriteText, CALLS, 1);
    for _ in 0..RUNS {
        control
            .submit_run(&bench_principal(), &script)
            .await
            .expect("submit");
    }
    app
}

fn check_all_succeeded(app: &App) {
    let (completed, succeeded) = app
        .env
        .store
        .read(|tx| {
            Ok((
                tx.count_runs(RunStatus::Completed)?,
                tx.uncertain_invocations("bench", true)?.len(),
            ))
        })
        .expect("read");
    assert_eq!(completed, RUNS as u64, "every run COMPLETED");
    assert_eq!(succeeded, 0, "no call UNCERTAIN");
}

fn processes(airlock: &Path, label: &str, store: Option<&str>, workers: usize) -> f64 {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let app = runtime.block_on(submit(dir.path(), store));
    let start = Instant::now();
    let children: Vec<_> = (0..workers)
        .map(|_| {
            let mut command = Command::new(airlock);
            command
                .arg("--data-dir")
                .arg(dir.path())
                .args(["worker", "--until-idle", "--concurrency", "4"])
                .stdout(Stdio::null())
                .stderr(Stdio::inherit());
            match store {
                Some(url) => command.env("AIRLOCK_STORE", url),
                None => command.env_remove("AIRLOCK_STORE"),
            };
            command.spawn().expect("worker starts")
        })
        .collect();
    for mut child in children {
        assert!(
            child.wait().expect("worker exits").success(),
            "a worker failed"
        );
    }
    let elapsed = start.elapsed().as_secs_f64();
    check_all_succeeded(&app);
    let calls = RUNS as f64 * f64::from(CALLS);
    let rate = calls / elapsed;
    println!(
        "{label:<10} {workers} worker process(es): {calls} calls in {elapsed:.2} s = {rate:.0} calls/s"
    );
    drop(app);
    runtime.shutdown_background();
    rate
}

fn round_trips(base: &str) {
    let url = fresh_schema_url(base, "bench_round_trips");
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let app = submit(dir.path(), Some(&url)).await;
        let store = app.env.store.0.postgres().expect("postgres");
        let mut settings = WorkerSettings::new("bench-round-trips");
        settings.concurrency = 4;
        let worker = app.worker(settings);
        let control = app.control(Some(worker.tokens().clone()));
        let before = store.round_trips();
        let start = Instant::now();
        let idle = Arc::clone(&worker);
        let stop = move || idle.is_idle().unwrap_or(false);
        worker.run_with_hints(&TokioSpawner, &control, &stop, &*app.dispatcher)
            .await
            .expect("worker");
        let elapsed = start.elapsed();
        let after = store.round_trips();
        check_all_succeeded(&app);
        let calls = RUNS as f64 * f64::from(CALLS);
        let trips = (after.round_trips - before.round_trips) as f64;
        let transactions = (after.transactions - before.transactions) as f64;
        let commits = (after.commits - before.commits) as f64;
        println!(
            "postgres in-process worker (concurrency 4): {calls} calls in {:.2} s; {:.1} round trips/call, \
             {:.2} transactions/call ({:.2} write commits/call), {:.1} round trips/transaction",
            elapsed.as_secs_f64(),
            trips / calls,
            transactions / calls,
            commits / calls,
            trips / transactions.max(1.0)
        );
        // The loopback round trip itself, over one-statement reads, as the store counts it.
        let reads = 2000;
        let before = store.round_trips().round_trips;
        let start = Instant::now();
        for _ in 0..reads {
            app.env.store.read(|tx| tx.count_runs(RunStatus::Queued)).expect("read");
        }
        let trips = (store.round_trips().round_trips - before).max(1) as f64;
        let per_trip = start.elapsed().as_secs_f64() * 1e6 / trips;
        println!("postgres loopback: {per_trip:.0} µs per round trip (one-statement reads)");
    });
}

fn main() {
    let usage = "usage: store_scaling PATH/TO/airlock (a release build) [--round-trips]";
    let mut args = std::env::args().skip(1);
    let airlock = args.next().expect(usage);
    let airlock = Path::new(&airlock);
    let round_trips_only = match args.next().as_deref() {
        None => false,
        Some("--round-trips") => true,
        Some(_) => panic!("{usage}"),
    };
    let base = std::env::var("AIRLOCK_TEST_PG_URL").expect("AIRLOCK_TEST_PG_URL names the server");
    if round_trips_only {
        round_trips(&base);
        return;
    }
    println!(
        "{RUNS} runs x {CALLS} workspace.write_text calls (one per step), concurrency 4 per worker"
    );
    for workers in [1, 2, 4] {
        processes(airlock, "sqlite", None, workers);
        let url = fresh_schema_url(&base, &format!("bench_scaling_{workers}"));
        processes(airlock, "postgres", Some(&url), workers);
    }
    round_trips(&base);
}
