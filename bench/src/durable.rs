//! Shared code of the durable-transaction benchmark (`benches/sqlite.rs`, SPEC §14): the raw
//! fsync limit of the disk, tool-call-shaped transactions through `SqliteStore`, and a driver
//! that runs a workload on several threads at once.
//!
//! The acceptance figure (SPEC §17.3) compares tool calls per second with 16 concurrent runs to a third
//! of the raw limit, so everything here is measured in the same directory (the bench's
//! `CARGO_TARGET_TMPDIR`, or any directory the caller picks) with the same pragmas. The full
//! tool-call benchmark through the worker (`crate::worker_calls`, `benches/worker.rs`) shares
//! [`raw_limit`] and [`Rate`].

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use airlock_core::events::{Actor, EventType, NewEvent, keys};
use airlock_core::invocation::Invocation;
use airlock_core::invocation::outcome::{Outcome, ResultItem};
use airlock_core::run::{Lease, Run, RunGuard};
use airlock_core::store::{Store, TxError};
use airlock_core::testing::fixtures::{TOOL, WORKER, at, sample_invocation, seed_run};
use airlock_core::vocab::{InvocationStatus, RunStatus, TrustLevel};
use airlock_sqlite::SqliteStore;
use serde_json::json;

/// Durable commits one tool call makes through the store: PROPOSE with START folded in, and
/// FINISH (SPEC §9.2 as amended by §17.1 F2). The two reads before PROPOSE (replay lookup,
/// UNCERTAIN twin check) go through `Store::read`, on a read connection beside the writer, as
/// `ToolPipeline` does. (The step's checkpoints, which fold into the same two commits, are the
/// worker benchmark's.)
pub const COMMITS_PER_CALL: u64 = 2;

/// A fresh directory under `root` (a bench passes its `CARGO_TARGET_TMPDIR`): the raw limit and
/// the stores of one run share it, so they are measured on the same disk.
pub fn bench_dir(root: &str, prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(root)
        .expect("temp dir")
}

/// Opens a connection with the store's pragmas and a one-column table.
pub fn raw_connection(path: &Path) -> rusqlite::Connection {
    // The same process-wide SQLite setting as the stores (`SqliteStore::open` makes it too, but
    // only before SQLite's first connection, and the raw limit is measured first).
    airlock_sqlite::without_memory_statistics();
    let conn = rusqlite::Connection::open(path).expect("open the raw-limit file");
    conn.busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .expect("journal_mode");
    assert_eq!(mode, "wal", "the raw limit is measured in WAL mode");
    conn.pragma_update(None, "synchronous", "FULL")
        .expect("synchronous");
    conn.execute_batch("CREATE TABLE IF NOT EXISTS raw_limit (v INTEGER NOT NULL)")
        .expect("table");
    conn
}

/// One single-row INSERT in autocommit mode: one COMMIT, one fsync of the WAL.
pub fn raw_commit(conn: &rusqlite::Connection, value: i64) {
    let mut statement = conn
        .prepare_cached("INSERT INTO raw_limit (v) VALUES (?1)")
        .expect("prepare");
    statement.execute([value]).expect("insert");
}

/// The raw limit: single-row commits per second over `duration`.
pub fn raw_limit(path: &Path, duration: Duration) -> Rate {
    let conn = raw_connection(path);
    let start = Instant::now();
    let mut commits = 0;
    while start.elapsed() < duration {
        raw_commit(&conn, commits as i64);
        commits += 1;
    }
    Rate::new(commits, start.elapsed())
}

/// Operations per second.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    pub operations: u64,
    pub elapsed: Duration,
}

impl Rate {
    pub fn new(operations: u64, elapsed: Duration) -> Rate {
        Rate {
            operations,
            elapsed,
        }
    }

    pub fn per_second(&self) -> f64 {
        self.operations as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// Runs `work(thread_index)` on `threads` threads released together; returns the total it
/// reports and the wall time from release to the last thread's end.
pub fn on_threads(threads: usize, work: impl Fn(usize) -> u64 + Sync) -> Rate {
    let barrier = Barrier::new(threads + 1);
    let total = AtomicU64::new(0);
    let released = thread::scope(|scope| {
        for index in 0..threads {
            let (barrier, total, work) = (&barrier, &total, &work);
            scope.spawn(move || {
                barrier.wait();
                total.fetch_add(work(index), Ordering::Relaxed);
            });
        }
        barrier.wait();
        // Leaving the scope joins every thread, so `elapsed()` below is release-to-last-end.
        Instant::now()
    });
    Rate::new(total.load(Ordering::Relaxed), released.elapsed())
}

/// Invocation numbers are unique across every run of one process.
static NEXT_INVOCATION: AtomicU64 = AtomicU64::new(1);
/// Run (and session) numbers likewise.
static NEXT_RUN: AtomicU64 = AtomicU64::new(1);

/// Calls per run before the workload moves to a fresh run: the default `max_tool_calls`
/// (SPEC §8.4). Step 5 reads all of a run's invocations, so a run with thousands of calls, which
/// no budget allows, would measure row decoding rather than commits.
pub const CALLS_PER_RUN: u32 = 32;

/// A stream of RUNNING runs (each in its own session, leased by the fixtures' worker) making
/// tool calls the way `ToolPipeline` does: the same transactions with the same reads, writes and
/// events. Every [`CALLS_PER_RUN`] calls it seeds the next run (one more commit, not counted in
/// [`COMMITS_PER_CALL`]).
pub struct ToolCallRun {
    store: Arc<SqliteStore>,
    run: Run,
    lease: Lease,
    calls: u32,
    clock: i64,
}

/// Seeds the next run of the stream.
fn next_run(store: &SqliteStore) -> (Run, Lease) {
    let n = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
    let run = seed_run(store, u128::from(n), RunStatus::Running);
    let lease = run.lease().expect("a RUNNING sample run holds its lease");
    (run, lease)
}

impl ToolCallRun {
    pub fn new(store: Arc<SqliteStore>) -> ToolCallRun {
        let (run, lease) = next_run(&store);
        ToolCallRun {
            store,
            run,
            lease,
            calls: 0,
            clock: 0,
        }
    }

    fn now(&mut self) -> airlock_core::time::Timestamp {
        self.clock += 1;
        at(self.clock)
    }

    /// One tool call: replay lookup and UNCERTAIN check (reads), PROPOSE·START, FINISH.
    pub fn call(&mut self) -> Result<(), TxError> {
        if self.calls == CALLS_PER_RUN {
            (self.run, self.lease) = next_run(&self.store);
            self.calls = 0;
        }
        self.calls += 1;
        let n = NEXT_INVOCATION.fetch_add(1, Ordering::Relaxed);
        let step = u32::try_from(n % u64::from(u32::MAX)).unwrap_or(1);
        let authorized = sample_invocation(
            u128::from(n),
            &self.run,
            step,
            "c1",
            InvocationStatus::Authorized,
        );
        let (lease, run_id) = (self.lease.clone(), self.run.id);
        let actor = Actor::worker(WORKER);
        let event = |row: &Invocation, event_type, payload, key, now| NewEvent {
            session_id: row.session_id,
            run_id: Some(row.run_id),
            event_type,
            actor: actor.clone(),
            payload,
            derivation_key: Some(key),
            created_at: now,
        };

        // Step 1: replay lookup (a read, beside the writer).
        self.store.read(|tx| {
            tx.guard_lease(&lease)?;
            tx.invocation_by_call(run_id, step, "c1")?;
            tx.event_by_key(&keys::refused(run_id, step, "c1"))
        })?;
        // Step 5: no UNCERTAIN twin (a read).
        self.store.read(|tx| {
            tx.guard_lease(&lease)?;
            tx.invocations_of_run_in(run_id, &[InvocationStatus::Uncertain])
                .map(|rows| rows.len())
        })?;
        // Step 7: PROPOSE, with step 9's START folded in (§17.1 F2): the watermark.
        let now = self.now();
        let mut running = authorized.clone();
        running.status = InvocationStatus::Running;
        running.effect_sent_at = Some(now);
        running.updated_at = now;
        let run = self.store.transact(|tx| {
            tx.guard_lease(&lease)?;
            tx.insert_invocation(&authorized)?;
            let id = authorized.id;
            tx.append_event(&event(
                &authorized,
                EventType::ToolCallProposed,
                json!({"invocation_id": id.to_string(), "name": TOOL, "call_id": "c1", "step_number": step}),
                keys::proposed(id),
                now,
            ))?;
            tx.append_event(&event(
                &authorized,
                EventType::ToolCallAuthorized,
                json!({"invocation_id": id.to_string(), "name": TOOL, "call_id": "c1"}),
                keys::authorized(id),
                now,
            ))?;
            let current = tx.run(run_id)?.ok_or(TxError::NotFound)?;
            let mut next = current.clone();
            next.tool_call_count += 1;
            next.updated_at = now;
            let guard = RunGuard {
                run_id,
                status: current.status(),
                lease: Some(lease.clone()),
            };
            let next = tx.update_run(&guard, &next)?;
            tx.update_invocation(InvocationStatus::Authorized, &running)?;
            tx.append_event(&event(
                &running,
                EventType::ToolCallStarted,
                json!({"invocation_id": running.id.to_string(), "name": TOOL, "call_id": "c1",
                       "effect_sent_at": now.to_string()}),
                keys::started(running.id),
                now,
            ))?;
            Ok(next)
        })?;
        self.run = run;
        // Step 12: FINISH.
        let now = self.now();
        let structured = json!({"ok": true, "bytes": 5});
        let mut finished = running.clone();
        finished.structured_result = Some(structured.clone());
        finished.output_bytes = Some(22);
        let item =
            ResultItem::success("c1", TOOL, TrustLevel::InternalTool, &structured).to_canonical();
        finished.close(Outcome::succeeded(TOOL), item.clone(), now);
        self.store.transact(|tx| {
            tx.guard_lease(&lease)?;
            tx.update_invocation(InvocationStatus::Running, &finished)?;
            tx.append_event(&event(
                &finished,
                EventType::ToolCallCompleted,
                json!({"invocation_id": finished.id.to_string(), "name": TOOL, "call_id": "c1",
                       "reason_code": "tool.succeeded", "result_item": item}),
                keys::result(finished.id),
                now,
            ))
            .map(drop)
        })
    }
}
