//! What the worker does when an execution is abandoned for a failed transaction (SPEC §8.3).
//!
//! §8.3: when a worker transaction fails with anything but `Fenced`, the executor writes nothing
//! more in that execution; lease expiry and RECLAIM recover the run. Left at that, the run would
//! stay RUNNING under the lease of a worker that stopped executing it for up to a whole lease
//! (30 s by default; for `run submit --inline` the process has even exited), and nobody would
//! learn why until RECLAIM failed the run `max_attempts_exceeded`. So, once the execution has
//! ended (the executor itself still writes nothing more), the worker:
//!
//! 1. learns the cause: the executor runs over a [`Watched`] store, which remembers whether the
//!    latest transaction failed and how. An execution that ends `Abandoned` right after a
//!    failed transaction was abandoned for it; one whose latest transaction succeeded or was
//!    fenced was fenced (by a guard or by its heartbeat), which is not an error;
//! 2. logs a warning with the run id, lease epoch, worker id and cause;
//! 3. releases the lease ([`release`]): one HEARTBEAT-shaped transaction, guarded by the lease
//!    like every worker transaction, that sets `lease_expires_at` to now. Nothing else changes:
//!    the run stays RUNNING with its owner and epoch, so the next RECLAIM sweep (any worker's)
//!    handles it exactly as an expired lease: `attempts + 1`, re-queued with its back-off or
//!    failed at `max_attempts` (§8.2), and a watermarked non-idempotent call left RUNNING becomes
//!    UNCERTAIN on replay (§9.4). Only the wait for the lease to run out is skipped.
//!
//! Why this keeps §8.2's safety: the release is fenced like every worker transaction (a lease
//! that moved on matches no row and nothing is written); the execution has ended, so nothing of
//! it runs after the lease is gone; RECLAIM stays the only writer of the status change, and
//! `attempts` still counts lease expiries, one per abandoned lease as before. If the release
//! fails too (the store is still unavailable), the lease simply runs out as before.

use std::sync::{Arc, Mutex, PoisonError};

use crate::run::Lease;
use crate::store::{Store, StoreTx, TxError};
use crate::time::Timestamp;

/// A store that remembers how its latest transaction ended (see the module docs).
pub struct Watched<S: Store> {
    inner: Arc<S>,
    latest_failure: Mutex<Option<TxError>>,
}

impl<S: Store> Watched<S> {
    pub fn new(inner: Arc<S>) -> Watched<S> {
        Watched {
            inner,
            latest_failure: Mutex::new(None),
        }
    }

    /// The error of the latest transaction, if it failed other than by fencing.
    pub fn latest_failure(&self) -> Option<TxError> {
        self.latest_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn note<R>(&self, result: &Result<R, TxError>) {
        let failure = match result {
            Err(error) if *error != TxError::Fenced => Some(error.clone()),
            Ok(_) | Err(_) => None,
        };
        *self
            .latest_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = failure;
    }
}

impl<S: Store> Store for Watched<S> {
    fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        let result = self.inner.transact(f);
        self.note(&result);
        result
    }

    fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        let result = self.inner.read(f);
        self.note(&result);
        result
    }
}

/// Gives an abandoned lease back: `lease_expires_at = now`, guarded by the lease. Returns
/// whether the lease still held (so the run is now due for RECLAIM).
pub fn release<S: Store>(store: &S, lease: &Lease, now: Timestamp) -> Result<bool, TxError> {
    store.transact(|tx| Ok(tx.heartbeat(lease, now, now)?.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem_store::MemStore;
    use crate::testing::fixtures::seed_run;
    use crate::vocab::RunStatus;

    #[test]
    fn the_latest_transaction_decides_and_fencing_is_no_failure() {
        let watched = Watched::new(Arc::new(MemStore::new()));
        assert_eq!(watched.latest_failure(), None);
        let _ = watched.transact(|_| Err::<(), _>(TxError::Backend("disk".into())));
        assert_eq!(
            watched.latest_failure(),
            Some(TxError::Backend("disk".into()))
        );
        let _ = watched.read(|_| Ok(()));
        assert_eq!(watched.latest_failure(), None, "a success clears it");
        let _ = watched.read(|_| Err::<(), _>(TxError::NotFound));
        assert_eq!(watched.latest_failure(), Some(TxError::NotFound));
        let _ = watched.transact(|_| Err::<(), _>(TxError::Fenced));
        assert_eq!(watched.latest_failure(), None, "fenced is not a failure");
    }

    #[test]
    fn release_shortens_only_the_lease_it_names() {
        let store = MemStore::new();
        let run = seed_run(&store, 1, RunStatus::Running);
        let lease = run.lease().expect("a RUNNING sample holds a lease");
        let now = Timestamp::from_micros(5);
        assert_eq!(release(&store, &lease, now), Ok(true));
        let released = store.read(|tx| tx.run(run.id)).unwrap().unwrap();
        assert_eq!(released.status(), RunStatus::Running);
        assert_eq!(released.lease(), Some(lease.clone()));
        assert!(matches!(
            released.state,
            crate::run::RunState::Running { lease_expires_at, .. } if lease_expires_at == now
        ));

        let mut stale = lease;
        stale.lease_epoch += 1;
        assert_eq!(release(&store, &stale, now), Ok(false), "fenced: no row");
    }
}
