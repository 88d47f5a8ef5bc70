//! Group commit for the SQLite store (SPEC §2.2, §14): concurrent `transact` calls share one
//! `BEGIN IMMEDIATE … COMMIT`, so one fsync makes a whole group durable.
//!
//! **Design.** One connection per store behind one `Mutex`, plus a `Mutex`/`Condvar` pair per
//! group for its outcome. Closures run on their callers' threads (they are neither `Send` nor
//! `'static`, and the host calls `transact` inside `block_in_place`). A caller announces itself in `arriving`, takes the lock, and:
//!
//! 1. opens a group with `BEGIN IMMEDIATE` if none is open, else joins the open one;
//! 2. runs its closure in the group's transaction, its write statements logged. On `Err` or
//!    panic exactly that caller's writes are undone: nothing to do if it changed no row, else
//!    the group's transaction is rolled back, begun again and the writes of the members before
//!    it replayed, checked row for row (the `write_log` module, which says why this replaced a
//!    savepoint per member). Members run one at a time under the lock, so the group is
//!    equivalent to its members run one after another in lock order, which is the commit order;
//! 3. closes the group — `COMMIT`, one fsync — if nobody else is arriving or the group is full
//!    ([`MAX_GROUP`]); otherwise it leaves the group open for the callers queued behind it, the
//!    last of which commits;
//! 4. releases the lock, waits on its group's own condvar until the outcome is known, and only
//!    then returns: its own result if the COMMIT succeeded, `TxError::Backend` for every member
//!    if it failed (also for members whose closure failed or only read: they may have read a
//!    group-mate's write that never became durable).
//!
//! A lone caller therefore never waits: it finds `arriving == 0` and commits at once. Under
//! load, the callers that arrive while a COMMIT is syncing queue on the lock and form the next
//! group, so the number of fsyncs per second stays about what one disk allows while the
//! transactions per fsync grow with the number of concurrent callers. The only wait a caller
//! adds is for group-mates that are already queued on the lock, each of which runs one short
//! closure (SPEC §2.2: no I/O inside a transaction).
//!
//! **Failures.** SQLite may roll a transaction back by itself after an I/O error; the group is
//! then "broken": no later member runs its closure (it could otherwise run in autocommit mode
//! and commit on its own), and closing the group rolls back whatever is left and fails every
//! member. The members get the error of the statement that made SQLite give up (a full disk,
//! an I/O error), not a bare "rolled back" that would hide it. An undo that cannot replay the
//! members before it exactly (another connection committed while the group was rolled back, a
//! replayed write changed other rows) breaks the group the same way. A panic inside a closure
//! undoes that member, lets the group finish, and then resumes unwinding on the caller's
//! thread. Nested `transact` calls from inside a closure
//! deadlock, as they would on SQLite's write lock (and do on `MemStore`).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use rusqlite::Connection;

use airlock_core::store::{StoreTx, TxError};

use super::checkpoint::{self, Checkpointer};
use super::planner_inputs::PlannerInputs;
use super::recent::Recent;
use super::tx::{SqliteTx, tx_error};
use super::write_log::WriteLog;

/// At most this many transactions share one COMMIT. A bound keeps a steady stream of arrivals
/// from holding one group (and SQLite's write lock) open indefinitely; 64 is far above the
/// number of runs a host executes at once (4 per worker by default, SPEC §8.2).
pub(super) const MAX_GROUP: usize = 64;

/// How one group ended: committed, or the message every member gets as `Backend`.
type GroupOutcome = Result<(), String>;

/// One `BEGIN IMMEDIATE … COMMIT`, shared by its members. Members wait for the outcome on the
/// group's own lock, not the connection's: a member of a committed group can then return (and
/// come back with its next transaction) while the next group's members still hold the
/// connection, instead of queueing behind them just to read one word.
#[derive(Default)]
struct Group {
    outcome: Mutex<Option<GroupOutcome>>,
    closed: Condvar,
}

impl Group {
    /// Publishes the outcome, once, and wakes every member.
    fn close(&self, outcome: GroupOutcome) {
        let mut slot = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(outcome);
        }
        self.closed.notify_all();
    }

    /// Blocks until the group is closed.
    fn wait(&self) -> GroupOutcome {
        let mut slot = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(outcome) = &*slot {
                return outcome.clone();
            }
            slot = self
                .closed
                .wait(slot)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Everything behind the lock.
struct Shared {
    conn: Connection,
    /// The group whose transaction is open, if any.
    open: Option<Arc<Group>>,
    /// Members of the open group so far.
    members: usize,
    /// The open group can no longer commit (see "Failures" in the module docs).
    broken: Option<String>,
    /// What the commits decide about the WAL (see the `checkpoint` module).
    wal: checkpoint::WalPolicy,
    /// What earlier members left, for later ones to read without a statement (see the
    /// `recent` module). Boxed: its maps would make every store value hundreds of bytes.
    recent: Box<Recent>,
    /// The open group's writes, for undoing a failed member (see the `write_log` module).
    /// Boxed for the same reason as `recent`.
    written: Box<GroupWrites>,
}

/// Counters for tests and benchmarks: how well transactions share commits, and how long the
/// writer is held.
///
/// The writer is the store's one serialized resource: while one member runs its statements, no
/// other transaction of the process can. `held_nanos` is every interval a `transact` caller
/// held it (its `BEGIN`, statements, and the `COMMIT` when it closed the group);
/// `commit_nanos` the part spent in `COMMIT` (the fsync). Their difference over the
/// transactions of a call is the writer's SQL per call (issue 33's figure), measured by the
/// store's own clock rather than sampled by a profiler.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// `transact` calls that ran inside a group.
    pub transactions: u64,
    /// Groups closed (COMMIT or, for a broken group, ROLLBACK).
    pub groups: u64,
    /// Nanoseconds the writer was held by `transact` callers, `COMMIT`s included.
    pub held_nanos: u64,
    /// Nanoseconds of those spent closing groups (`COMMIT`, or `ROLLBACK` of a broken group,
    /// and an inline checkpoint).
    pub commit_nanos: u64,
    /// Nanoseconds of `held_nanos` spent inside SQLite on the members' statements (their
    /// undos, and the decoding of the rows they read, included): the writer's SQL proper,
    /// without core's own work inside a transaction's closure or a group's `BEGIN`/`COMMIT`.
    pub sql_nanos: u64,
    /// WAL checkpoints the store's checkpointer thread ran (see the `checkpoint` module).
    pub background_checkpoints: u64,
    /// Tails a committing thread copied after the checkpointer's pass, so that the WAL could
    /// restart (a few pages each; see the `checkpoint` module).
    pub tail_checkpoints: u64,
    /// Whole WAL checkpoints a committing thread ran itself, because the WAL outgrew what the
    /// checkpointer keeps up with: each one made a group wait.
    pub inline_checkpoints: u64,
}

impl GroupStats {
    /// The counts between `earlier` and `self`.
    pub fn since(&self, earlier: &GroupStats) -> GroupStats {
        GroupStats {
            transactions: self.transactions - earlier.transactions,
            groups: self.groups - earlier.groups,
            held_nanos: self.held_nanos - earlier.held_nanos,
            commit_nanos: self.commit_nanos - earlier.commit_nanos,
            sql_nanos: self.sql_nanos - earlier.sql_nanos,
            background_checkpoints: self.background_checkpoints - earlier.background_checkpoints,
            tail_checkpoints: self.tail_checkpoints - earlier.tail_checkpoints,
            inline_checkpoints: self.inline_checkpoints - earlier.inline_checkpoints,
        }
    }

    /// Nanoseconds the writer spent on statements rather than on closing groups.
    pub fn statement_nanos(&self) -> u64 {
        self.held_nanos.saturating_sub(self.commit_nanos)
    }
}

/// The connection and the group-commit protocol.
pub(super) struct GroupCommit {
    shared: Mutex<Shared>,
    /// Callers between announcing themselves and taking the lock: the group waits for them.
    arriving: AtomicUsize,
    transactions: AtomicU64,
    groups: AtomicU64,
    held_nanos: AtomicU64,
    commit_nanos: AtomicU64,
    sql_nanos: AtomicU64,
    tail_checkpoints: AtomicU64,
    inline_checkpoints: AtomicU64,
    /// Runs the WAL checkpoints the commits ask for; `None` on a connection without the WAL
    /// hook, whose commits never ask (see the `checkpoint` module).
    checkpointer: Option<Checkpointer>,
    /// The planner inputs the writer and the readers share (see the `planner_inputs` module).
    inputs: Arc<PlannerInputs>,
}

/// What a member's closure did.
enum MemberResult<R> {
    Returned(Result<R, TxError>),
    Panicked(Box<dyn std::any::Any + Send + 'static>),
}

impl GroupCommit {
    pub(super) fn new(
        conn: Connection,
        checkpointer: Option<Checkpointer>,
        inputs: Arc<PlannerInputs>,
    ) -> GroupCommit {
        GroupCommit {
            shared: Mutex::new(Shared {
                conn,
                open: None,
                members: 0,
                broken: None,
                wal: checkpoint::WalPolicy::default(),
                recent: Box::default(),
                written: Box::default(),
            }),
            arriving: AtomicUsize::new(0),
            transactions: AtomicU64::new(0),
            groups: AtomicU64::new(0),
            held_nanos: AtomicU64::new(0),
            commit_nanos: AtomicU64::new(0),
            sql_nanos: AtomicU64::new(0),
            tail_checkpoints: AtomicU64::new(0),
            inline_checkpoints: AtomicU64::new(0),
            checkpointer,
            inputs,
        }
    }

    pub(super) fn stats(&self) -> GroupStats {
        GroupStats {
            transactions: self.transactions.load(Ordering::Relaxed),
            groups: self.groups.load(Ordering::Relaxed),
            held_nanos: self.held_nanos.load(Ordering::Relaxed),
            commit_nanos: self.commit_nanos.load(Ordering::Relaxed),
            sql_nanos: self.sql_nanos.load(Ordering::Relaxed),
            background_checkpoints: self
                .checkpointer
                .as_ref()
                .map_or(0, Checkpointer::completed),
            tail_checkpoints: self.tail_checkpoints.load(Ordering::Relaxed),
            inline_checkpoints: self.inline_checkpoints.load(Ordering::Relaxed),
        }
    }

    /// The lock. Closures run under `catch_unwind`, so a poisoned lock can only come from a
    /// panic in this module's own bookkeeping, which leaves `Shared` consistent: recover it.
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads from the connection outside any group, for diagnostics (pragmas). Waits for no
    /// group; reading inside an open one is harmless.
    pub(super) fn with_connection<T>(&self, f: impl FnOnce(&Connection) -> T) -> T {
        f(&self.lock().conn)
    }

    pub(super) fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.arriving.fetch_add(1, Ordering::SeqCst);
        let mut shared = self.lock();
        let held_since = Instant::now();
        self.arriving.fetch_sub(1, Ordering::SeqCst);

        let group = match &shared.open {
            Some(group) => Arc::clone(group),
            None => {
                // Nobody else holds a group open, so this caller leads a new one. A failed
                // BEGIN (another process kept the write lock past busy_timeout) involves no
                // one else.
                control(&shared.conn, "BEGIN IMMEDIATE").map_err(tx_error)?;
                // With the write lock held no other connection can commit until this group
                // ends: whether one did before is known now (see the `recent` module).
                match data_version(&shared.conn) {
                    Ok(version) => {
                        shared.recent.note_data_version(version);
                        shared.written.begin(version);
                    }
                    Err(error) => {
                        shared.recent.forget_all();
                        rollback_if_open(&shared.conn);
                        return Err(tx_error(error));
                    }
                }
                let group = Arc::new(Group::default());
                shared.open = Some(Arc::clone(&group));
                shared.members = 0;
                shared.broken = None;
                group
            }
        };
        shared.members += 1;
        self.transactions.fetch_add(1, Ordering::Relaxed);

        let result = match shared.broken.clone() {
            Some(reason) => MemberResult::Returned(Err(TxError::Backend(reason))),
            None => {
                let Shared {
                    conn,
                    recent,
                    written,
                    ..
                } = &mut *shared;
                let (result, broken, sql_nanos) =
                    run_member(conn, &self.inputs, recent, written, f);
                shared.broken = broken;
                self.sql_nanos.fetch_add(sql_nanos, Ordering::Relaxed);
                result
            }
        };

        if self.arriving.load(Ordering::SeqCst) == 0 || shared.members >= MAX_GROUP {
            self.close_group(&mut shared, &group);
        }
        self.held_nanos
            .fetch_add(nanos_since(held_since), Ordering::Relaxed);
        drop(shared);
        let outcome = group.wait();

        match result {
            MemberResult::Panicked(payload) => resume_unwind(payload),
            MemberResult::Returned(result) => match outcome {
                Ok(()) => result,
                Err(reason) => Err(TxError::Backend(reason)),
            },
        }
    }

    /// Ends the open group: COMMIT (one fsync for every member), or ROLLBACK if it is broken
    /// or the COMMIT fails; then publishes the outcome to every member.
    fn close_group(&self, shared: &mut Shared, group: &Group) {
        let closing_since = Instant::now();
        let outcome = match shared.broken.take() {
            Some(reason) => {
                rollback_if_open(&shared.conn);
                Err(reason)
            }
            None => match control(&shared.conn, "COMMIT") {
                Ok(()) => {
                    self.after_commit(shared);
                    Ok(())
                }
                Err(error) => {
                    rollback_if_open(&shared.conn);
                    Err(format!("commit failed: {error}"))
                }
            },
        };
        if outcome.is_err() {
            // The members' rows were never durable (see the `recent` module).
            shared.recent.forget_all();
        }
        shared.open = None;
        shared.members = 0;
        self.groups.fetch_add(1, Ordering::Relaxed);
        self.commit_nanos
            .fetch_add(nanos_since(closing_since), Ordering::Relaxed);
        group.close(outcome);
    }
}

impl GroupCommit {
    /// Does what the WAL's size calls for after a commit (see the `checkpoint` module). A
    /// checkpoint's failure here changes nothing durable, and a later commit asks again.
    fn after_commit(&self, shared: &mut Shared) {
        let frames = checkpoint::take_wal_frames();
        let action = shared.wal.after_commit(frames, self.checkpointer.as_ref());
        let counter = match action {
            checkpoint::WalAction::Nothing => return,
            checkpoint::WalAction::AskThread => {
                if let Some(checkpointer) = &self.checkpointer {
                    checkpointer.request();
                }
                return;
            }
            checkpoint::WalAction::CopyTail => &self.tail_checkpoints,
            checkpoint::WalAction::CopyAll => &self.inline_checkpoints,
        };
        if checkpoint::checkpoint_passive(&shared.conn).is_ok() {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Nanoseconds since `start`, saturating (a `u64` of nanoseconds spans 584 years).
fn nanos_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Runs one of the fixed statements that open and end transactions through the
/// connection's statement cache. They run several times per tool call; `execute_batch` would
/// parse each one again every time.
pub(super) fn control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Rolls back whatever part of the group's transaction SQLite still has open. Its error is
/// irrelevant: the members already get `Backend`, and an open transaction left behind would
/// make the next BEGIN fail loudly rather than silently.
fn rollback_if_open(conn: &Connection) {
    if !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
}

/// `PRAGMA data_version`: changes when another connection commits (see the `recent` module).
fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("PRAGMA data_version")?
        .query_row([], |row| row.get(0))
}

/// Runs one member's closure in the group's transaction. Returns what the closure did, if the
/// group can no longer commit, why, and the nanoseconds spent in SQLite
/// (`GroupStats::sql_nanos`). A member that ended well leaves what it wrote and read in
/// `recent` and its writes in `written`; one that failed after writing is undone by replaying
/// the group's writes without it (see the `write_log` module).
fn run_member<R>(
    conn: &Connection,
    inputs: &PlannerInputs,
    recent: &mut Recent,
    written: &mut GroupWrites,
    f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
) -> (MemberResult<R>, Option<String>, u64) {
    // Without an open transaction, the member's statements would each commit alone.
    if conn.is_autocommit() {
        let reason = "the group's transaction was rolled back by SQLite".to_owned();
        return (
            MemberResult::Returned(Err(TxError::Backend(reason.clone()))),
            Some(reason),
            0,
        );
    }
    let changes_before = conn.total_changes();
    let mut tx = SqliteTx::in_group(conn, inputs, &*recent);
    // The closure's journal row is written before the member ends (see the `journal`
    // module); if it cannot be, the member fails and is undone.
    let result = match catch_unwind(AssertUnwindSafe(|| {
        f(&mut tx).and_then(|returned| tx.finish().map(|()| returned))
    })) {
        Ok(returned) => MemberResult::Returned(returned),
        Err(payload) => MemberResult::Panicked(payload),
    };
    let sql_nanos = tx.sql_nanos();
    let (absorbed, log) = tx.into_absorbed();
    let ending_since = Instant::now();
    let broken = if conn.is_autocommit() {
        Some(rolled_back_by_sqlite(&result))
    } else if matches!(result, MemberResult::Returned(Ok(_))) {
        if conn.total_changes().wrapping_sub(changes_before) != log.accounted() {
            written.log.mark_unreplayable(
                "a member changed rows that no logged statement accounts for".to_owned(),
            );
        }
        written.log.extend(log);
        recent.absorb(absorbed);
        None
    } else if conn.total_changes() == changes_before {
        // It failed before changing anything: nothing to undo.
        None
    } else {
        written.undo_member(conn, recent).err()
    };
    (
        result,
        broken,
        sql_nanos.saturating_add(nanos_since(ending_since)),
    )
}

/// The writes of the open group's members that ended well, and what undoing a member needs.
#[derive(Default)]
struct GroupWrites {
    log: WriteLog,
    /// `PRAGMA data_version` when the group began: a replay needs the database as it was then.
    begun_version: i64,
}

impl GroupWrites {
    /// A new group began, the connection's data version then being `version`.
    fn begin(&mut self, version: i64) {
        self.log.clear();
        self.begun_version = version;
    }

    /// Undoes the member that just failed after writing: rolls the group's transaction back,
    /// begins it again, checks that no other connection committed in between, and replays the
    /// writes of the members before it. An error breaks the group.
    fn undo_member(&mut self, conn: &Connection, recent: &mut Recent) -> Result<(), String> {
        control(conn, "ROLLBACK").map_err(|e| format!("undoing a failed member: {e}"))?;
        control(conn, "BEGIN IMMEDIATE")
            .map_err(|e| format!("undoing a failed member: begin again: {e}"))?;
        let version = data_version(conn).map_err(|e| format!("undoing a failed member: {e}"))?;
        if version != self.begun_version && self.log.nothing_to_replay() {
            // Only reads came before the failed member: they stand as read before the other
            // connection's commit, and nothing needs replaying on the database as it is now.
            recent.note_data_version(version);
            self.begun_version = version;
            return Ok(());
        }
        if version != self.begun_version {
            return Err(
                "undoing a failed member: another connection committed while the group was \
                 rolled back"
                    .to_owned(),
            );
        }
        self.log
            .replay(conn)
            .map_err(|e| format!("undoing a failed member: {e}"))
    }
}

/// Why the group broke when SQLite rolled its transaction back during a member's closure. The
/// statement that made SQLite give up (a full disk, an I/O error) failed inside that closure,
/// so the closure's own error is the cause: it is kept first, and every member of the group
/// gets it, rather than a bare "rolled back" that hides a full disk.
fn rolled_back_by_sqlite<R>(result: &MemberResult<R>) -> String {
    const ROLLED_BACK: &str = "the group's transaction was rolled back by SQLite";
    match result {
        MemberResult::Returned(Err(TxError::Backend(cause))) => format!("{cause} ({ROLLED_BACK})"),
        MemberResult::Returned(Err(cause)) => format!("{cause} ({ROLLED_BACK})"),
        MemberResult::Returned(Ok(_)) | MemberResult::Panicked(_) => ROLLED_BACK.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use airlock_core::testing::fixtures::{sample_run, sample_session};
    use airlock_core::vocab::RunStatus;

    use super::*;

    /// A writer connection on a migrated store file whose database may grow by only a few
    /// pages, with a page cache so small that a large row spills to the WAL mid-statement: a
    /// full disk, the way SQLite meets it, which makes SQLite roll the whole transaction back.
    fn nearly_full(path: &std::path::Path) -> Connection {
        drop(crate::SqliteStore::open(path).unwrap());
        let conn = Connection::open(path).unwrap();
        conn.busy_timeout(crate::tuning::BUSY_TIMEOUT).unwrap();
        conn.pragma_update(None, "cache_size", 2).unwrap();
        let pages: i64 = conn
            .pragma_query_value(None, "page_count", |row| row.get(0))
            .unwrap();
        conn.pragma_update(None, "max_page_count", pages + 20)
            .unwrap();
        conn
    }

    /// An undo checks that the database is as the group found it: when another connection
    /// committed since the group began (its data version moved), members before the failed
    /// one that only read stand, and members that wrote cannot be replayed.
    #[test]
    fn an_undo_after_another_connections_commit_keeps_reads_and_refuses_writes() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (v TEXT)").unwrap();
        let begin = |written: &mut GroupWrites| {
            control(&conn, "BEGIN IMMEDIATE").unwrap();
            // As if another connection had committed before this group began.
            written.begin(data_version(&conn).unwrap() - 1);
            conn.execute("INSERT INTO t (v) VALUES ('failed member')", [])
                .unwrap();
        };
        let rows = || -> i64 {
            conn.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
                .unwrap()
        };

        let mut recent = Recent::default();
        let mut only_reads = GroupWrites::default();
        begin(&mut only_reads);
        assert_eq!(only_reads.undo_member(&conn, &mut recent), Ok(()));
        assert_eq!(rows(), 0, "the failed member's row is undone");
        assert_eq!(only_reads.begun_version, data_version(&conn).unwrap());
        control(&conn, "COMMIT").unwrap();

        let mut with_writes = GroupWrites::default();
        begin(&mut with_writes);
        let mut member = WriteLog::default();
        member.record(&conn, "INSERT INTO t (v) VALUES ('earlier member')", &[], 1);
        with_writes.log.extend(member);
        let error = with_writes.undo_member(&conn, &mut recent).unwrap_err();
        assert!(error.contains("another connection committed"), "{error}");
    }

    /// A group committing through a [`nearly_full`] connection on a store file in `dir`.
    fn nearly_full_group(dir: &std::path::Path) -> GroupCommit {
        GroupCommit::new(
            nearly_full(&dir.join("store.sqlite3")),
            None,
            Arc::default(),
        )
    }

    #[test]
    fn a_member_that_fills_the_disk_gets_its_own_error_not_a_bare_rollback() {
        let dir = tempfile::tempdir().unwrap();
        let group = nearly_full_group(dir.path());
        let session = sample_session(1);
        let mut run = sample_run(1, session.id, RunStatus::Queued);
        run.planner_input = format!("\"{}\"", "x".repeat(1_000_000)).into();

        let error = group
            .transact(|tx| {
                tx.insert_session(&session)?;
                tx.insert_run(&run)
            })
            .unwrap_err();

        assert_eq!(
            error,
            TxError::Backend(
                "database or disk is full (the group's transaction was rolled back by SQLite)"
                    .to_owned()
            ),
            "the cause is kept"
        );
        // The group is over and the connection usable: a small write commits.
        group
            .transact(|tx| tx.insert_session(&sample_session(2)))
            .unwrap();
    }

    /// A group that does not commit leaves nothing in the writer's memory (the `recent`
    /// module): a member that ended well, in a group a later member broke, was
    /// never durable.
    #[test]
    fn a_group_that_does_not_commit_is_forgotten_by_the_writer() {
        use airlock_core::testing::fixtures::guard_of;
        use std::sync::Barrier;
        use std::time::Duration;

        let dir = tempfile::tempdir().unwrap();
        let group = nearly_full_group(dir.path());
        let session = sample_session(1);
        let run = sample_run(1, session.id, RunStatus::Running);
        group
            .transact(|tx| {
                tx.insert_session(&session)?;
                tx.insert_run(&run)
            })
            .unwrap();
        let guard = guard_of(&run);
        let mut counted = run.clone();
        counted.step_count += 1;
        let big_session = sample_session(2);
        let mut big = sample_run(2, big_session.id, RunStatus::Queued);
        big.planner_input = format!("\"{}\"", "x".repeat(1_000_000)).into();
        let arrived = Barrier::new(2);

        let (first, second) = std::thread::scope(|scope| {
            let second = scope.spawn(|| {
                arrived.wait();
                group.transact(|tx| {
                    tx.insert_session(&big_session)?;
                    tx.insert_run(&big)
                })
            });
            let first = group.transact(|tx| {
                arrived.wait();
                // Long enough for the second caller to queue behind this member.
                std::thread::sleep(Duration::from_millis(300));
                tx.update_run(&guard, &counted)
            });
            (first, second.join().unwrap())
        });
        assert!(second.is_err(), "the second member fills the disk");
        assert!(
            matches!(first, Err(TxError::Backend(_))),
            "the first member shared the broken group: {first:?}"
        );
        let read = group.transact(|tx| tx.run(run.id)).unwrap();
        assert_eq!(
            read,
            Some(run),
            "the run as stored, not as the rolled-back member left it"
        );
    }

    /// Without a checkpointer thread, a commit past the background threshold checkpoints inline
    /// (as SQLite's automatic checkpoint did), so the WAL stays bounded.
    #[test]
    fn without_a_checkpointer_commits_checkpoint_inline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.sqlite3");
        drop(crate::SqliteStore::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.busy_timeout(crate::tuning::BUSY_TIMEOUT).unwrap();
        checkpoint::hand_checkpoints_off(&conn).unwrap();
        let group = GroupCommit::new(conn, None, Arc::default());
        for n in 0..200u128 {
            let session = sample_session(10 + n);
            let mut run = sample_run(10 + n, session.id, RunStatus::Queued);
            run.planner_input = format!("\"{}\"", "x".repeat(40_000)).into();
            group
                .transact(|tx| {
                    tx.insert_session(&session)?;
                    tx.insert_run(&run)
                })
                .unwrap();
        }
        let stats = group.stats();
        assert!(stats.inline_checkpoints > 0, "{stats:?}");
        assert_eq!(stats.background_checkpoints, 0, "{stats:?}");
    }
}
