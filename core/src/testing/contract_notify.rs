//! The Store contract for notification targets and the notifier lease (issue 32 item 1): a
//! target round-trips, is listed per tenant without removed ones, is removed once and keeps
//! everything but its removal and progress; progress and lease change only by compare-and-set.
//! Run from [`crate::testing::contract::run_contract`], so every store passes it.

use std::collections::BTreeSet;

use crate::notify::target::{
    NotifyEvent, NotifyFormat, NotifyLease, NotifyTarget, Progress, SecretSource,
};
use crate::store::{Store, StoreTx, TxError};
use crate::testing::fixtures::*;

/// Runs every check of this file, each on a fresh store.
pub fn run<S: Store>(make: &impl Fn() -> S) {
    targets_round_trip_and_are_listed_per_tenant(&make());
    a_target_is_removed_once(&make());
    progress_moves_only_from_what_it_was(&make());
    a_lease_is_taken_by_compare_and_set(&make());
}

fn read<S: Store, R>(store: &S, f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>) -> R {
    store
        .read(f)
        .unwrap_or_else(|error| panic!("read failed: {error:?}"))
}

fn targets_round_trip_and_are_listed_per_tenant<S: Store>(store: &S) {
    let first = sample_notify_target(2, TENANT);
    let mut bare = sample_notify_target(1, TENANT);
    bare.label = None;
    bare.format = NotifyFormat::Ntfy;
    bare.secret = SecretSource::File("/etc/airlock/key".to_owned());
    bare.events = BTreeSet::from([NotifyEvent::ApprovalExpired]);
    bare.progress.retry_at = Some(at(99));
    bare.progress.attempts = 3;
    let other = sample_notify_target(3, "tenant-b");
    commit(store, "insert targets", |tx| {
        tx.insert_notify_target(&first)?;
        tx.insert_notify_target(&bare)?;
        tx.insert_notify_target(&other)
    });
    assert_eq!(
        read(store, |tx| tx.notify_target(bare.id)),
        Some(bare.clone()),
        "notify_targets: a target reads back exactly"
    );
    let mut duplicate = sample_notify_target(9, TENANT);
    duplicate.id = first.id;
    assert_conflict(
        store.transact(|tx| tx.insert_notify_target(&duplicate)),
        "notify_targets: a duplicate id is a Conflict",
    );
    assert_eq!(
        read(store, |tx| tx.notify_targets(Some(TENANT))),
        vec![bare.clone(), first.clone()],
        "notify_targets: one tenant's, by creation"
    );
    assert_eq!(
        read(store, |tx| tx.notify_targets(None)),
        vec![bare, first, other],
        "notify_targets: every tenant's, by creation"
    );
    assert_eq!(
        read(store, |tx| tx.notify_target(notify_target_id(42))),
        None,
        "notify_targets: an unknown id"
    );
}

fn a_target_is_removed_once<S: Store>(store: &S) {
    let target = sample_notify_target(1, TENANT);
    commit(store, "insert", |tx| tx.insert_notify_target(&target));
    let removed = commit(store, "remove", |tx| {
        tx.remove_notify_target(target.id, at(50))
    });
    assert_eq!(
        removed,
        NotifyTarget {
            removed_at: Some(at(50)),
            ..target.clone()
        }
    );
    assert_conflict(
        store.transact(|tx| tx.remove_notify_target(target.id, at(60))),
        "notify_targets: a second removal is a Conflict",
    );
    assert_eq!(
        store.transact(|tx| tx.remove_notify_target(notify_target_id(42), at(60))),
        Err(TxError::NotFound)
    );
    assert_conflict(
        store.transact(|tx| {
            tx.advance_notify_target(target.id, &target.progress, &Progress::past(9))
        }),
        "notify_targets: a removed target's progress no longer moves",
    );
    assert_eq!(
        read(store, |tx| tx.notify_targets(None)),
        Vec::new(),
        "notify_targets: a removed target is not listed"
    );
    assert_eq!(
        read(store, |tx| tx.notify_target(target.id)),
        Some(removed),
        "notify_targets: a removed target is kept"
    );
}

fn progress_moves_only_from_what_it_was<S: Store>(store: &S) {
    let target = sample_notify_target(1, TENANT);
    commit(store, "insert", |tx| tx.insert_notify_target(&target));
    let failed = Progress {
        after: 7,
        attempts: 1,
        retry_at: Some(at(30)),
    };
    commit(store, "retry", |tx| {
        tx.advance_notify_target(target.id, &target.progress, &failed)
    });
    assert_conflict(
        store.transact(|tx| {
            tx.advance_notify_target(target.id, &target.progress, &Progress::past(9))
        }),
        "notify_targets: progress from a stale expectation is a Conflict",
    );
    let delivered = Progress {
        after: 9,
        attempts: 0,
        retry_at: None,
    };
    commit(store, "delivered", |tx| {
        tx.advance_notify_target(target.id, &failed, &delivered)
    });
    assert_eq!(
        read(store, |tx| tx.notify_target(target.id)).map(|t| t.progress),
        Some(delivered)
    );
    assert_eq!(
        store.transact(|tx| tx.advance_notify_target(notify_target_id(42), &delivered, &failed)),
        Err(TxError::NotFound)
    );
}

fn a_lease_is_taken_by_compare_and_set<S: Store>(store: &S) {
    let mine = NotifyLease {
        tenant_id: TENANT.to_owned(),
        holder: "worker-a".to_owned(),
        expires_at: at(30),
    };
    assert_eq!(read(store, |tx| tx.notify_lease(TENANT)), None);
    commit(store, "take", |tx| tx.swap_notify_lease(None, &mine));
    let theirs = NotifyLease {
        holder: "worker-b".to_owned(),
        expires_at: at(60),
        ..mine.clone()
    };
    assert_conflict(
        store.transact(|tx| tx.swap_notify_lease(None, &theirs)),
        "notify_leases: a second first take is a Conflict",
    );
    let stale = NotifyLease {
        expires_at: at(29),
        ..mine.clone()
    };
    assert_conflict(
        store.transact(|tx| tx.swap_notify_lease(Some(&stale), &theirs)),
        "notify_leases: a take from a stale expectation is a Conflict",
    );
    commit(store, "take over", |tx| {
        tx.swap_notify_lease(Some(&mine), &theirs)
    });
    assert_eq!(read(store, |tx| tx.notify_lease(TENANT)), Some(theirs));
    assert_eq!(read(store, |tx| tx.notify_lease("tenant-b")), None);
}
