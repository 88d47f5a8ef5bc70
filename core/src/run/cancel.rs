//! Cancellation tokens (SPEC §8.5): a process-local registry keyed by run id, each entry with
//! the lease epoch it belongs to. The first reason wins. A cancellation requested before a run
//! registers reaches it through the claimed row's `cancel_requested_at` (the run starts
//! cancelled) or, at the latest, the next heartbeat.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::ids::RunId;
use crate::time::Timestamp;
use crate::vocab::CancelReason;

/// One execution's view of its cancellation, and of how long its lease is known to hold.
///
/// The lease part serves one check (SPEC §8.2, issue 25): a worker paused for longer than its
/// lease (a zombie) can wake between START and entering the tool body, after another worker
/// reclaimed the run and replayed or settled the call. The execution records the expiry it
/// claimed with and every expiry a heartbeat committed; before a body is entered, a lease that
/// ran out by this process's clock is checked against the store, and a lost one is `Fenced`.
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    reason: Arc<Mutex<Option<CancelReason>>>,
    /// The latest lease expiry this execution committed (CLAIM, then each heartbeat); `None`
    /// for an execution that has no heartbeat (tests driving the executor directly).
    lease_held_until: Arc<Mutex<Option<Timestamp>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere cannot leave a reason half-written; keep going with the inner value.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl CancelToken {
    pub fn reason(&self) -> Option<CancelReason> {
        *lock(&self.reason)
    }

    /// Sets the reason unless one is already set.
    pub fn cancel(&self, reason: CancelReason) {
        let mut slot = lock(&self.reason);
        if slot.is_none() {
            *slot = Some(reason);
        }
    }

    /// Records a lease expiry this execution committed; an earlier one never replaces a later.
    pub fn hold_lease_until(&self, until: Timestamp) {
        let mut slot = lock(&self.lease_held_until);
        if slot.is_none_or(|held| held < until) {
            *slot = Some(until);
        }
    }

    /// Whether, at `now`, the lease may have run out: no commit of this execution holds it
    /// past `now`. Always false without a recorded expiry.
    pub fn lease_may_have_run_out(&self, now: Timestamp) -> bool {
        lock(&self.lease_held_until).is_some_and(|held| now >= held)
    }
}

#[derive(Debug, Default)]
struct Entry {
    epoch: u64,
    token: CancelToken,
}

/// The tokens of the runs this process executes.
#[derive(Debug, Default, Clone)]
pub struct TokenRegistry {
    entries: Arc<Mutex<BTreeMap<RunId, Entry>>>,
}

impl TokenRegistry {
    /// Registers an execution of `run` under lease `epoch`.
    ///
    /// An execution whose task starts late can register after a newer claim of the same run in
    /// this process already did. It must not take the newer one's place (a heartbeat's cancel
    /// for the newer epoch would then reach nobody): a newer epoch means its own lease is
    /// over, so it gets a token that is already `Fenced` and the entry stays.
    pub fn register(&self, run: RunId, epoch: u64) -> CancelToken {
        let token = CancelToken::default();
        let mut entries = lock(&self.entries);
        if entries.get(&run).is_some_and(|newer| newer.epoch > epoch) {
            token.cancel(CancelReason::Fenced);
            return token;
        }
        entries.insert(
            run,
            Entry {
                epoch,
                token: token.clone(),
            },
        );
        token
    }

    /// Removes the entry if it still belongs to `epoch`.
    pub fn unregister(&self, run: RunId, epoch: u64) {
        let mut entries = lock(&self.entries);
        if entries.get(&run).is_some_and(|e| e.epoch == epoch) {
            entries.remove(&run);
        }
    }

    /// Cancels the run's token if this process executes it; returns whether it does.
    pub fn cancel(&self, run: RunId, reason: CancelReason) -> bool {
        match lock(&self.entries).get(&run) {
            Some(entry) => {
                entry.token.cancel(reason);
                true
            }
            None => false,
        }
    }

    /// A heartbeat result: applied only if run and epoch match the registered entry.
    pub fn cancel_epoch(&self, run: RunId, epoch: u64, reason: CancelReason) {
        if let Some(entry) = lock(&self.entries).get(&run).filter(|e| e.epoch == epoch) {
            entry.token.cancel(reason);
        }
    }

    /// Whether this process currently executes the run.
    pub fn contains(&self, run: RunId) -> bool {
        lock(&self.entries).contains_key(&run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_registration_of_an_older_epoch_never_displaces_the_newer_one() {
        let registry = TokenRegistry::default();
        let run = RunId(uuid::Uuid::nil());
        let newer = registry.register(run, 2);
        let older = registry.register(run, 1);
        assert_eq!(older.reason(), Some(CancelReason::Fenced));
        registry.unregister(run, 1);
        registry.cancel_epoch(run, 2, CancelReason::Requested);
        assert_eq!(newer.reason(), Some(CancelReason::Requested));
        assert!(registry.contains(run));
    }

    #[test]
    fn the_lease_is_held_until_the_latest_recorded_expiry() {
        let token = CancelToken::default();
        let at = Timestamp::from_micros;
        assert!(
            !token.lease_may_have_run_out(at(i64::MAX)),
            "nothing recorded"
        );
        token.hold_lease_until(at(3_000));
        token.hold_lease_until(at(2_000));
        assert!(!token.lease_may_have_run_out(at(2_999)));
        assert!(token.lease_may_have_run_out(at(3_000)));
        token.hold_lease_until(at(4_000));
        assert!(!token.lease_may_have_run_out(at(3_500)));
    }

    #[test]
    fn first_reason_wins_and_stale_epochs_are_ignored() {
        let registry = TokenRegistry::default();
        let run = RunId(uuid::Uuid::nil());
        let token = registry.register(run, 2);
        registry.cancel_epoch(run, 1, CancelReason::Fenced);
        assert_eq!(token.reason(), None);
        registry.cancel_epoch(run, 2, CancelReason::Requested);
        registry.cancel(run, CancelReason::Fenced);
        assert_eq!(token.reason(), Some(CancelReason::Requested));
        registry.unregister(run, 1);
        assert!(registry.contains(run));
        registry.unregister(run, 2);
        assert!(!registry.contains(run));
    }
}
