//! airlock-host supplies the real world's moving parts and decides nothing.
//!
//! The tokio host (SPEC §2.2, §8.2, Appendix A): the production implementations of core's clock,
//! id, spawner, fault-hook and dispatcher ports, a store wrapper that keeps blocking store work
//! off the async executor, the contained local workspace (§12), the builtin tool bodies and the
//! outbox, and the Host and Origin allow-list both HTTP servers check (`authority`). It knows
//! no store: whatever implements core's `Store` port plugs in, and the binary
//! crate picks one. The builtin bodies' file effects pass through one fault-injection seam
//! (`file_faults`), inert in production, that tests arm with short writes, `ENOSPC` and `EIO`.

pub mod authority;
pub mod crash;
pub mod file_faults;
pub mod tools;
pub mod workspace;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use airlock_core::ids::RunId;
use airlock_core::ports::{BoxFut, Clock, Dispatcher, IdSource, Spawner, WakeHints};
use airlock_core::store::{Store, StoreTx, TxError};
use airlock_core::time::Timestamp;

/// Wall-clock time; the only place the production host reads the system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        Timestamp::from_micros(micros)
    }

    fn sleep_until(&self, t: Timestamp) -> BoxFut<'static, ()> {
        let wait_micros = t.as_micros().saturating_sub(self.now().as_micros()).max(0);
        Box::pin(tokio::time::sleep(std::time::Duration::from_micros(
            wait_micros as u64,
        )))
    }
}

/// Random v4 UUIDs.
#[derive(Debug, Default, Clone, Copy)]
pub struct V4Ids;

impl IdSource for V4Ids {
    fn new_uuid(&self) -> uuid::Uuid {
        uuid::Uuid::new_v4()
    }
}

/// Spawns onto the current tokio runtime.
#[derive(Debug, Default, Clone, Copy)]
pub struct TokioSpawner;

impl Spawner for TokioSpawner {
    fn spawn(&self, f: BoxFut<'static, ()>) {
        tokio::spawn(f);
    }
}

/// The durable dispatcher (SPEC §10.5): the committed QUEUED row is authoritative, so a hint
/// only wakes a local worker early; without one, the next poll finds the run.
#[derive(Debug, Default, Clone)]
pub struct DurableDispatcher {
    wake: Arc<tokio::sync::Notify>,
    /// Counts hints, so one sent between arming and the first poll of the wait is seen.
    hints: Arc<AtomicU64>,
}

impl DurableDispatcher {
    fn hint(&self) {
        self.hints.fetch_add(1, Ordering::SeqCst);
        self.wake.notify_waiters();
    }
}

impl WakeHints for DurableDispatcher {
    fn armed(&self) -> BoxFut<'static, ()> {
        let seen = self.hints.load(Ordering::SeqCst);
        let (wake, hints) = (Arc::clone(&self.wake), Arc::clone(&self.hints));
        Box::pin(async move {
            let notified = wake.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if hints.load(Ordering::SeqCst) == seen {
                notified.await;
            }
        })
    }
}

impl Dispatcher for DurableDispatcher {
    fn dispatch(&self, _run: RunId) {
        self.hint();
    }
    fn resume(&self, _run: RunId) {
        self.hint();
    }
}

/// Runs each transaction with `block_in_place` on a multi-thread runtime, so a blocking store
/// commit (an fsync) never stalls the heartbeats and tool calls scheduled on the same thread.
pub struct BlockingStore<S: Store>(pub S);

impl<S: Store> Store for BlockingStore<S> {
    fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        blocking(|| self.0.transact(f))
    }

    fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        blocking(|| self.0.read(f))
    }
}

/// Runs a short blocking transaction from inside an async body: through
/// `block_in_place` on a multi-thread runtime, so the worker thread's other tasks move elsewhere
/// meanwhile, and directly anywhere else (a current-thread runtime or no runtime, where
/// `block_in_place` would panic).
pub fn blocking<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}
