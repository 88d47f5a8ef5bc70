//! Writes carried by an execution's first write transaction (issue 33): a gateway's call run is
//! admitted, submitted and claimed in the same commit as its call's PENDING·PROPOSE·START, one
//! commit per call fewer than a transaction of its own.
//!
//! [`FirstWrite`] is a store over another: its first write transaction that commits runs the
//! carried writes ahead of its own closure, in the same transaction; every later transaction is
//! the inner store's. The carried writes may decline ([`Carried::Declined`]): the transaction
//! then writes nothing and fails as [`TxError::Fenced`], so the execution ends as a fenced one
//! does, quietly and without writing anything more, and its caller reads why from
//! [`FirstWrite::outcome`]. A transaction that fails otherwise (a conflict, a storage error)
//! takes the carried writes with it; they stay due, and the next write transaction carries them
//! again. Reads pass through: until the carried writes commit, a read sees none of them, so an
//! execution begun on a [`FirstWrite`] must not need to read what they write before it writes
//! (a call run's execution begins from its claim, `Start::Admitted`).
//!
//! Nothing becomes durable or visible before the carried writes do: whatever the execution
//! records commits with them or after them. A crash before that commit leaves nothing of them.

use std::sync::{Mutex, PoisonError};

use crate::store::{Store, StoreTx, TxError};

/// What the carried writes did in a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Carried<D> {
    /// Written: the transaction goes on with its own closure.
    Written,
    /// Not written, for this reason: the transaction is abandoned (`Fenced`).
    Declined(D),
}

/// Where the carried writes stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstWriteOutcome<D> {
    /// Not committed yet: no write transaction has committed (or none was made).
    Due,
    /// Committed with the first write transaction that committed.
    Committed,
    /// Declined by the writes themselves; nothing of them, or of that transaction, was written.
    Declined(D),
}

/// The carried writes: called once per write transaction until one commits or they decline.
pub type CarriedWrites<D> =
    Box<dyn Fn(&mut dyn StoreTx) -> Result<Carried<D>, TxError> + Send + Sync>;

/// A store whose first committing write transaction also makes the carried writes.
pub struct FirstWrite<S: Store, D: Clone + Send + 'static> {
    inner: std::sync::Arc<S>,
    writes: CarriedWrites<D>,
    /// Held across a transaction that carries the writes, so two transactions never both do.
    outcome: Mutex<FirstWriteOutcome<D>>,
}

impl<S: Store, D: Clone + Send + 'static> FirstWrite<S, D> {
    pub fn new(inner: std::sync::Arc<S>, writes: CarriedWrites<D>) -> FirstWrite<S, D> {
        FirstWrite {
            inner,
            writes,
            outcome: Mutex::new(FirstWriteOutcome::Due),
        }
    }

    /// Where the carried writes stand now.
    pub fn outcome(&self) -> FirstWriteOutcome<D> {
        self.outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl<S: Store, D: Clone + Send + 'static> Store for FirstWrite<S, D> {
    fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        let mut outcome = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        match &*outcome {
            FirstWriteOutcome::Committed => {
                drop(outcome);
                return self.inner.transact(f);
            }
            // Nothing more is written for an execution whose carried writes declined.
            FirstWriteOutcome::Declined(_) => return Err(TxError::Fenced),
            FirstWriteOutcome::Due => {}
        }
        let mut declined = None;
        let result = self.inner.transact(|tx| match (self.writes)(tx)? {
            Carried::Written => f(tx),
            Carried::Declined(reason) => {
                declined = Some(reason);
                Err(TxError::Fenced)
            }
        });
        match (&result, declined) {
            (_, Some(reason)) => *outcome = FirstWriteOutcome::Declined(reason),
            (Ok(_), None) => *outcome = FirstWriteOutcome::Committed,
            (Err(_), None) => {}
        }
        result
    }

    fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.inner.read(f)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::ids::SessionId;
    use crate::mem_store::MemStore;
    use crate::testing::fixtures::sample_session;

    /// Carries the insert of session 1 (or declines, once `decline` is set), counting its calls.
    fn carrier(decline: bool, calls: Arc<AtomicUsize>) -> FirstWrite<MemStore, &'static str> {
        FirstWrite::new(
            Arc::new(MemStore::new()),
            Box::new(move |tx| {
                calls.fetch_add(1, Ordering::SeqCst);
                if decline {
                    return Ok(Carried::Declined("no"));
                }
                tx.insert_session(&sample_session(1))?;
                Ok(Carried::Written)
            }),
        )
    }

    fn has_session<S: Store>(store: &S, n: u128) -> bool {
        let id: SessionId = sample_session(n).id;
        store.read(|tx| tx.session(id)).ok().flatten().is_some()
    }

    #[test]
    fn the_carried_writes_commit_with_the_first_transaction_that_commits_and_only_then() {
        let calls = Arc::new(AtomicUsize::new(0));
        let store = carrier(false, Arc::clone(&calls));
        assert!(
            !has_session(&store, 1),
            "a read sees nothing carried before it commits"
        );
        assert_eq!(store.outcome(), FirstWriteOutcome::Due);
        // A failing transaction takes the carried writes with it; they stay due.
        let failed = store.transact(|_| Err::<(), _>(TxError::Conflict("a clash".into())));
        assert_eq!(failed, Err(TxError::Conflict("a clash".into())));
        assert!(!has_session(&store, 1));
        assert_eq!(store.outcome(), FirstWriteOutcome::Due);
        // The next one carries them again, ahead of its own writes, in the same commit.
        store
            .transact(|tx| {
                assert!(tx.session(sample_session(1).id)?.is_some(), "carried first");
                tx.insert_session(&sample_session(2))
            })
            .expect("commits");
        assert!(has_session(&store, 1) && has_session(&store, 2));
        assert_eq!(store.outcome(), FirstWriteOutcome::Committed);
        // Later transactions are the inner store's own.
        store.transact(|_| Ok(())).expect("commits");
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "carried twice: failed, committed"
        );
    }

    #[test]
    fn declined_carried_writes_write_nothing_and_fence_the_execution() {
        let calls = Arc::new(AtomicUsize::new(0));
        let store = carrier(true, Arc::clone(&calls));
        let declined = store.transact(|tx| tx.insert_session(&sample_session(2)));
        assert_eq!(declined, Err(TxError::Fenced));
        assert!(
            !has_session(&store, 2),
            "the transaction's own writes are not made"
        );
        assert_eq!(store.outcome(), FirstWriteOutcome::Declined("no"));
        assert_eq!(
            store.transact(|tx| tx.insert_session(&sample_session(3))),
            Err(TxError::Fenced),
            "nothing more is written"
        );
        assert!(!has_session(&store, 3));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
