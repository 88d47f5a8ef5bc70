//! WAL checkpoints off the writer (issue 33).
//!
//! SQLite's automatic checkpoint runs inside the `COMMIT` that pushes the WAL past 1,000 pages,
//! on the committing thread: that commit's group, and every transaction queued behind the
//! writer's lock, waits while the checkpoint copies those pages into the database file and
//! syncs it. Measured on the 990-step run, step latency rose 1.7× from the first such
//! checkpoint on. Here the writer runs with `wal_autocheckpoint = 0` and a WAL hook that only
//! notes the WAL's size after each commit ([`take_wal_frames`]), and the group decides
//! ([`WalPolicy`]):
//!
//! 1. Past [`BACKGROUND_FRAMES`], it asks the [`Checkpointer`], a thread with a connection of
//!    its own, for a `PASSIVE` checkpoint, which never takes the write lock: commits go on while
//!    it copies the bulk of the WAL.
//! 2. The WAL only starts again from its beginning when a write transaction finds every frame
//!    copied, and under steady load some commit always lands while the thread copies. So once
//!    the thread's last pass left at most [`TAIL_FRAMES`] uncopied, the committing thread copies
//!    that tail itself (a passive checkpoint of a few pages; `GroupStats::tail_checkpoints`),
//!    and the next transaction restarts the WAL. If more were left, the thread is asked again.
//! 3. Past [`INLINE_FRAMES`] (the thread cannot keep up, or could not start), the committing
//!    thread checkpoints everything itself, as SQLite would have; `GroupStats::inline_checkpoints`
//!    counts those, and the tests expect none on a store that is merely busy.
//!
//! **Durability** is unchanged: a checkpoint copies frames that are already durable in the
//! WAL, and the checkpointer's connection syncs with `synchronous = FULL` like the writer's.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::hooks::Wal;

/// WAL frames (pages) after which a commit asks the checkpointer to run: SQLite's own default
/// for `wal_autocheckpoint`, so the WAL and the database file grow as they did before.
pub(super) const BACKGROUND_FRAMES: c_int = 1_000;

/// WAL frames after which the committing thread checkpoints itself (see the module docs):
/// sixteen times the background threshold, about 64 MB of 4 KB pages.
pub(super) const INLINE_FRAMES: c_int = 16 * BACKGROUND_FRAMES;

/// At most this many frames left uncopied by the thread's last pass are copied by the
/// committing thread, so that the WAL can restart: a few group commits' worth, a fraction of a
/// millisecond of page copies and one sync of the database file, once per
/// [`BACKGROUND_FRAMES`].
pub(super) const TAIL_FRAMES: c_int = 64;

/// How long the checkpointer sleeps between requests when none comes: long, because every
/// request wakes it; the timeout only lets it notice a store being dropped if a wake-up is lost.
const IDLE_WAIT: Duration = Duration::from_secs(5);

thread_local! {
    /// The WAL's size in frames after the last commit of the writer on this thread, or 0 once
    /// taken. The WAL hook runs inside `COMMIT`, on the committing thread, and has no state of
    /// its own (rusqlite's hook is a plain `fn`), so it leaves the figure here for the code that
    /// issued the `COMMIT` to pick up.
    static WAL_FRAMES: Cell<c_int> = const { Cell::new(0) };
}

/// The writer's WAL hook: notes the WAL's size, nothing else (see [`WAL_FRAMES`]).
fn note_wal_frames(_wal: &Wal, frames: c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.with(|cell| cell.set(frames));
    Ok(())
}

/// Turns SQLite's automatic checkpoints off on the writer and installs the hook that notes the
/// WAL's size instead. The pragma first: it installs a hook of its own, which ours replaces.
pub(super) fn hand_checkpoints_off(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    conn.wal_hook(Some(note_wal_frames));
    Ok(())
}

/// The WAL's size after this thread's last `COMMIT` of a writer with the hook, once.
pub(super) fn take_wal_frames() -> c_int {
    WAL_FRAMES.with(|cell| cell.replace(0))
}

/// What one checkpoint saw: the WAL's frames, and how many of them are now in the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pass {
    pub(super) wal_frames: c_int,
    pub(super) copied: c_int,
}

/// A passive checkpoint on `conn`; its error is returned for the caller to ignore or count (a
/// checkpoint that fails leaves the WAL as it was, and the next one copies the same frames).
pub(super) fn checkpoint_passive(conn: &Connection) -> rusqlite::Result<Pass> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok(Pass {
            wal_frames: row.get(1)?,
            copied: row.get(2)?,
        })
    })
}

/// The writer's side of the policy in the module docs, kept under the writer's lock.
#[derive(Debug, Default)]
pub(super) struct WalPolicy {
    /// The WAL's frames after the previous commit: a smaller figure means the WAL restarted.
    last_frames: c_int,
}

/// What a commit should do about the WAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WalAction {
    Nothing,
    /// Ask the checkpointer thread for a pass.
    AskThread,
    /// Copy the few frames the thread's last pass left, here.
    CopyTail,
    /// Copy everything here (no thread, or it fell [`INLINE_FRAMES`] behind).
    CopyAll,
}

impl WalPolicy {
    /// The action for a commit that left the WAL at `frames`, given the checkpointer (if any).
    pub(super) fn after_commit(
        &mut self,
        frames: c_int,
        checkpointer: Option<&Checkpointer>,
    ) -> WalAction {
        if frames <= 0 {
            return WalAction::Nothing;
        }
        let restarted = frames < self.last_frames;
        self.last_frames = frames;
        let Some(checkpointer) = checkpointer else {
            return if frames >= BACKGROUND_FRAMES {
                WalAction::CopyAll
            } else {
                WalAction::Nothing
            };
        };
        if restarted {
            checkpointer.new_generation();
        }
        if frames < BACKGROUND_FRAMES {
            return WalAction::Nothing;
        }
        if frames >= INLINE_FRAMES {
            return WalAction::CopyAll;
        }
        match checkpointer.last_pass() {
            Some(pass) if pass.copied == pass.wal_frames && frames - pass.copied <= TAIL_FRAMES => {
                WalAction::CopyTail
            }
            _ if checkpointer.idle() => WalAction::AskThread,
            _ => WalAction::Nothing,
        }
    }
}

/// What the writer and the checkpointer thread share.
#[derive(Default)]
struct Requests {
    state: Mutex<RequestState>,
    wake: Condvar,
    /// Checkpoints the thread ran (for tests and benchmarks).
    completed: AtomicU64,
}

#[derive(Default)]
struct RequestState {
    requested: bool,
    /// The thread is checkpointing now.
    running: bool,
    stopping: bool,
    /// Counts the WAL's restarts as the writer saw them, so that a pass over an earlier WAL is
    /// never taken for one over the current.
    generation: u64,
    /// The thread's last completed pass over the current WAL.
    last_pass: Option<Pass>,
}

/// The checkpointer thread and the way to wake it. Dropping it stops the thread and waits
/// for it.
pub(super) struct Checkpointer {
    requests: Arc<Requests>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread on `conn`, a connection of its own to the store's file.
    pub(super) fn start(conn: Connection) -> std::io::Result<Checkpointer> {
        let requests = Arc::new(Requests::default());
        let theirs = Arc::clone(&requests);
        let thread = std::thread::Builder::new()
            .name("airlock-sqlite-checkpoint".to_owned())
            .spawn(move || serve(&conn, &theirs))?;
        Ok(Checkpointer {
            requests,
            thread: Some(thread),
        })
    }

    /// Asks for a checkpoint; returns at once. Requests made while one is pending are one.
    pub(super) fn request(&self) {
        let mut state = self.requests.lock();
        state.requested = true;
        self.requests.wake.notify_one();
    }

    /// Checkpoints the thread has run so far.
    pub(super) fn completed(&self) -> u64 {
        self.requests.completed.load(Ordering::Relaxed)
    }

    /// Whether the thread is neither asked nor checkpointing.
    fn idle(&self) -> bool {
        let state = self.requests.lock();
        !state.requested && !state.running
    }

    /// The thread's last pass over the current WAL, if any.
    fn last_pass(&self) -> Option<Pass> {
        self.requests.lock().last_pass
    }

    /// The WAL restarted: passes over the earlier one no longer count.
    fn new_generation(&self) {
        let mut state = self.requests.lock();
        state.generation += 1;
        state.last_pass = None;
    }
}

impl Requests {
    fn lock(&self) -> std::sync::MutexGuard<'_, RequestState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.requests.lock().stopping = true;
        self.requests.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread: waits for a request, checkpoints, publishes what the pass copied, repeats until
/// stopped.
fn serve(conn: &Connection, requests: &Requests) {
    loop {
        let generation = {
            let mut state = requests.lock();
            while !state.requested && !state.stopping {
                state = requests
                    .wake
                    .wait_timeout(state, IDLE_WAIT)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            if state.stopping {
                return;
            }
            state.requested = false;
            state.running = true;
            state.generation
        };
        let pass = checkpoint_passive(conn).ok();
        let mut state = requests.lock();
        state.running = false;
        if let Some(pass) = pass {
            requests.completed.fetch_add(1, Ordering::Relaxed);
            if state.generation == generation {
                state.last_pass = Some(pass);
            }
        }
    }
}
