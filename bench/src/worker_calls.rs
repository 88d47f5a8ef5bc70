//! The full tool-call workload of the durable benchmark: run scripts of one builtin tool's calls
//! ([`BenchTool`]) submitted through the control service and executed by core's `Worker` on the tokio
//! host, over `SqliteStore` in a data directory (SPEC §17.3).
//!
//! Unlike [`crate::durable::ToolCallRun`], which replays the pipeline's transactions by hand,
//! this goes through everything a call costs in production: claim, lease heartbeats, the policy
//! gate, step checkpoints, the watermark, the tool's body, the outcome and the run's end. The
//! figure is completed calls per second of wall time from the worker's start to the moment
//! every submitted run is terminal.
//!
//! Two tools, because a call's cost is the durable path plus the tool's own work:
//! `math.calculate` has no side effect of its own, so its figure is the durable path alone (the
//! tool that issue 12's fsync count uses); `workspace.write_text` adds a contained file create
//! and its fsync per call, the cheapest real side effect.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock::app::App;
use airlock_core::ids::RunId;
use airlock_core::principal::Principal;
use airlock_core::scope::{Scope, platform_scopes};
use airlock_core::store::Store;
use airlock_core::vocab::{InvocationStatus, RunStatus};
use airlock_core::worker::WorkerSettings;
use airlock_host::TokioSpawner;
use serde_json::json;

use crate::cpu::process_cpu;
use crate::durable::Rate;

/// The builtin tool every call of a measurement invokes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchTool {
    /// `workspace.write_text` of a few bytes, each call to its own file: the durable path plus
    /// a file create and an fsync in the run's workspace.
    WriteText,
    /// `math.calculate` of a short expression: the durable path and nothing else.
    Calculate,
}

impl BenchTool {
    /// The tool's registered name.
    pub fn name(self) -> &'static str {
        match self {
            BenchTool::WriteText => "workspace.write_text",
            BenchTool::Calculate => "math.calculate",
        }
    }

    /// The `i`th call of a run script.
    fn call(self, i: u32) -> serde_json::Value {
        match self {
            BenchTool::WriteText => json!({"call_id": format!("w{i}"), "tool": self.name(),
                "arguments": {"path": format!("out/{i}.txt"), "content": format!("line {i}\n")},
                "argument_trust": {"path": "user", "content": "user"}}),
            BenchTool::Calculate => json!({"call_id": format!("c{i}"), "tool": self.name(),
                "arguments": {"expression": format!("{i} * 17 + 3")},
                "argument_trust": {"expression": "user"}}),
        }
    }
}

/// How much work one measurement submits.
#[derive(Debug, Clone, Copy)]
pub struct WorkerLoad {
    /// The tool every call invokes.
    pub tool: BenchTool,
    /// Runs executing at once: the worker's `concurrency`.
    pub concurrent_runs: usize,
    /// Runs submitted per concurrency slot; slots refill as runs end.
    pub runs_per_slot: usize,
    /// Calls per run.
    pub calls_per_run: u32,
    /// Calls per step (a planner turn): 1 is an agent calling one tool at a time; more share
    /// the step's checkpoints and reads. `calls_per_run` must be a multiple of it.
    pub calls_per_step: u32,
}

/// What one measurement did.
#[derive(Debug, Clone, Copy)]
pub struct WorkerReport {
    /// Completed calls over the wall time.
    pub calls: Rate,
    /// Write transactions (`transact`) during the measurement. Reads (`Store::read`) run on
    /// the store's read connections and are not counted.
    pub transactions: u64,
    /// Group COMMITs during the measurement.
    pub groups: u64,
    /// CPU time of the whole process (every thread, user and system) during the measurement.
    pub cpu: Duration,
    /// Nanoseconds the single writer spent on statements (held by `transact` callers, minus
    /// its COMMITs), by the store's own clock (`GroupStats::statement_nanos`).
    pub writer_statement_nanos: u64,
    /// Of those, nanoseconds inside SQLite on the members' statements
    /// (`GroupStats::sql_nanos`): the writer's SQL without core's work inside a closure.
    pub writer_sql_nanos: u64,
}

impl WorkerReport {
    pub fn transactions_per_commit(&self) -> f64 {
        self.transactions as f64 / self.groups.max(1) as f64
    }

    /// CPU milliseconds per completed call.
    pub fn cpu_ms_per_call(&self) -> f64 {
        self.cpu.as_secs_f64() * 1000.0 / self.calls.operations.max(1) as f64
    }

    /// The calls per second `cores` CPUs could sustain at this CPU cost per call, were every
    /// core busy all the time: a ceiling that no amount of fsync sharing can lift.
    pub fn cpu_ceiling(&self, cores: usize) -> f64 {
        cores as f64 * 1000.0 / self.cpu_ms_per_call()
    }

    /// Microseconds of the writer's statements per completed call: the serialized work that
    /// bounds calls/s once fsyncs are shared (issue 33: at most 100).
    pub fn writer_us_per_call(&self) -> f64 {
        self.writer_statement_nanos as f64 / 1000.0 / self.calls.operations.max(1) as f64
    }

    /// Microseconds inside SQLite on the writer's statements per completed call.
    pub fn writer_sql_us_per_call(&self) -> f64 {
        self.writer_sql_nanos as f64 / 1000.0 / self.calls.operations.max(1) as f64
    }

    pub fn per_call(&self, count: u64) -> f64 {
        count as f64 / self.calls.operations.max(1) as f64
    }
}

/// The worker's poll interval in the benchmark. The production default (250 ms) would leave a
/// slot empty for up to a poll after each run ends, which measures polling, not durability.
pub const POLL_MS: u64 = 2;

/// The principal the worker benchmarks submit as: the platform scopes plus the workspace ones.
pub fn bench_principal() -> Principal {
    let mut scopes = platform_scopes();
    scopes.extend(
        ["workspace.read", "workspace.write"]
            .iter()
            .filter_map(|s| Scope::parse(s).ok()),
    );
    Principal {
        tenant_id: "bench".to_owned(),
        principal_id: "bench".to_owned(),
        scopes,
    }
}

/// A run script of `calls` trusted calls of `tool`, `per_step` to a step (the last step takes
/// the remainder).
pub fn tool_script(tool: BenchTool, calls: u32, per_step: u32) -> String {
    let per_step = per_step.max(1);
    let call = |i: u32| tool.call(i);
    let steps: Vec<_> = (0..calls)
        .step_by(per_step as usize)
        .map(|first| {
            let batch: Vec<_> = (first..(first + per_step).min(calls)).map(call).collect();
            json!({ "calls": batch })
        })
        .collect();
    let step_count = u32::try_from(steps.len()).unwrap_or(u32::MAX);
    json!({
        "schema_version": 1,
        "tenant_id": "bench",
        "principal_id": "bench",
        "principal_scopes": ["workspace.read", "workspace.write"],
        "origin_trust": "user",
        "limits": {"max_steps": step_count + 1, "max_tool_calls": calls},
        "steps": steps,
        "final_message": "done"
    })
    .to_string()
}

/// Why a measurement is not a valid figure.
#[derive(Debug, thiserror::Error)]
pub enum WorkerBenchError {
    #[error("runtime: {0}")]
    Runtime(String),
    #[error("opening the data directory: {0}")]
    Open(String),
    #[error("submitting: {0}")]
    Submit(String),
    #[error("worker: {0}")]
    Worker(String),
    #[error("run {run} ended {status}, not COMPLETED")]
    RunNotSucceeded { run: RunId, status: RunStatus },
    #[error("{succeeded} of {expected} calls SUCCEEDED")]
    MissingCalls { succeeded: u64, expected: u64 },
}

/// Opens `data_dir` (fresh or not), submits the load, runs one worker until every run is
/// terminal, and checks that every call SUCCEEDED before reporting the rate.
pub fn measure(data_dir: &Path, load: WorkerLoad) -> Result<WorkerReport, WorkerBenchError> {
    // Two worker threads like the CI machine; blocking commits move off them by
    // `block_in_place`, so several runs can be inside a commit at once.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| WorkerBenchError::Runtime(e.to_string()))?;
    runtime.block_on(measure_async(data_dir, load))
}

async fn measure_async(
    data_dir: &Path,
    load: WorkerLoad,
) -> Result<WorkerReport, WorkerBenchError> {
    let app = App::open(data_dir, None, None)
        .await
        .map_err(|e| WorkerBenchError::Open(e.to_string()))?;
    let principal = bench_principal();
    let control = app.control(None);
    let script = tool_script(load.tool, load.calls_per_run, load.calls_per_step);
    let mut runs = Vec::new();
    for _ in 0..load.concurrent_runs * load.runs_per_slot {
        let submitted = control
            .submit_run(&principal, &script)
            .await
            .map_err(|e| WorkerBenchError::Submit(e.to_string()))?;
        runs.push(submitted.run_id);
    }

    let mut settings = WorkerSettings::new("bench-worker");
    settings.concurrency = load.concurrent_runs;
    settings.poll_ms = POLL_MS;
    let worker = app.worker(settings);
    let control = app.control(Some(worker.tokens().clone()));
    let store = app
        .env
        .store
        .0
        .sqlite()
        .ok_or_else(|| WorkerBenchError::Open("not an SQLite store".to_owned()))?;
    let stats_before = store.group_stats();
    let cpu_before = process_cpu();
    let start = Instant::now();
    let idle_worker = Arc::clone(&worker);
    let stop = move || idle_worker.is_idle().unwrap_or(false);
    worker
        .run(&TokioSpawner, &control, &stop)
        .await
        .map_err(|e| WorkerBenchError::Worker(e.to_string()))?;
    let elapsed = start.elapsed();
    let cpu = process_cpu().saturating_sub(cpu_before);
    let stats_after = store.group_stats();

    let succeeded = count_succeeded_calls(&app, &runs, load.tool)?;
    let expected = runs.len() as u64 * u64::from(load.calls_per_run);
    if succeeded != expected {
        return Err(WorkerBenchError::MissingCalls {
            succeeded,
            expected,
        });
    }
    let stats = stats_after.since(&stats_before);
    Ok(WorkerReport {
        calls: Rate::new(succeeded, elapsed),
        transactions: stats.transactions,
        groups: stats.groups,
        cpu,
        writer_statement_nanos: stats.statement_nanos(),
        writer_sql_nanos: stats.sql_nanos,
    })
}

/// SUCCEEDED invocations of `tool` in `runs`; fails if a run did not complete.
fn count_succeeded_calls(
    app: &App,
    runs: &[RunId],
    tool: BenchTool,
) -> Result<u64, WorkerBenchError> {
    let mut succeeded = 0;
    for &run_id in runs {
        let (status, writes) = app
            .env
            .store
            .read(|tx| {
                let run = tx.run(run_id)?;
                let writes = tx
                    .invocations_of_run(run_id)?
                    .iter()
                    .filter(|i| {
                        i.tool_name == tool.name() && i.status == InvocationStatus::Succeeded
                    })
                    .count() as u64;
                Ok((run.map(|r| r.status()), writes))
            })
            .map_err(|e| WorkerBenchError::Worker(e.to_string()))?;
        match status {
            Some(RunStatus::Completed) => succeeded += writes,
            Some(status) => {
                return Err(WorkerBenchError::RunNotSucceeded {
                    run: run_id,
                    status,
                });
            }
            None => return Err(WorkerBenchError::Worker(format!("run {run_id} vanished"))),
        }
    }
    Ok(succeeded)
}
