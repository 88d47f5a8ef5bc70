//! The notifier lease on PostgreSQL under real concurrency (issue 32 item 1): transactions run
//! at READ COMMITTED, so two processes that both read an expired lease both try to take it; the
//! compare-and-set in `swap_notify_lease` must let exactly one win, whatever the interleaving.
//! Likewise a target's cursor moves once from a given position.

mod common;

use std::sync::{Arc, Barrier};

use airlock_core::ids::NotifyTargetId;
use airlock_core::notify::target::{
    NotifyEvent, NotifyFormat, NotifyLease, NotifyTarget, Progress, SecretSource,
};
use airlock_core::store::{Store, TxError};
use airlock_core::testing::fixtures::*;

const RACERS: usize = 8;
const ROUNDS: usize = 20;

#[test]
fn racing_takers_of_one_lease_and_one_cursor_have_one_winner_each_round() {
    let Some(url) =
        common::server("racing_takers_of_one_lease_and_one_cursor_have_one_winner_each_round")
    else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("notify_race");
    cleanup.add(&schema);
    let stores: Vec<Arc<_>> = (0..RACERS)
        .map(|_| Arc::new(common::store_in(&url, &schema)))
        .collect();
    let target = NotifyTarget {
        id: NotifyTargetId(uuid::Uuid::from_u128(0x7a26_0001)),
        tenant_id: TENANT.to_owned(),
        url: "https://hooks.example/x".to_owned(),
        events: [NotifyEvent::ApprovalRequested].into_iter().collect(),
        format: NotifyFormat::Json,
        secret: SecretSource::Env("AIRLOCK_NOTIFY_X".to_owned()),
        label: None,
        created_by: PRINCIPAL.to_owned(),
        created_at: at(0),
        removed_at: None,
        progress: Progress::default(),
    };
    stores[0]
        .transact(|tx| tx.insert_notify_target(&target))
        .expect("insert the target");

    for round in 0..ROUNDS {
        let expected_lease = stores[0]
            .read(|tx| tx.notify_lease(TENANT))
            .expect("read the lease");
        let expected_progress = Progress {
            after: i64::try_from(round).expect("small"),
            ..Progress::default()
        };
        let barrier = Arc::new(Barrier::new(RACERS));
        let racers: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(n, store)| {
                let store = Arc::clone(store);
                let barrier = Arc::clone(&barrier);
                let expected_lease = expected_lease.clone();
                std::thread::spawn(move || {
                    let next = NotifyLease {
                        tenant_id: TENANT.to_owned(),
                        holder: format!("racer-{n}"),
                        expires_at: at(i64::try_from(round * 100 + n).expect("small")),
                    };
                    barrier.wait();
                    let lease =
                        store.transact(|tx| tx.swap_notify_lease(expected_lease.as_ref(), &next));
                    let moved = store.transact(|tx| {
                        tx.advance_notify_target(
                            NotifyTargetId(uuid::Uuid::from_u128(0x7a26_0001)),
                            &expected_progress,
                            &Progress {
                                after: expected_progress.after + 1,
                                ..Progress::default()
                            },
                        )
                    });
                    (lease, moved)
                })
            })
            .collect();
        let results: Vec<_> = racers
            .into_iter()
            .map(|r| r.join().expect("racer"))
            .collect();
        for (lease, moved) in &results {
            for result in [lease, moved] {
                assert!(
                    matches!(result, Ok(()) | Err(TxError::Conflict(_))),
                    "round {round}: only a win or a Conflict: {result:?}"
                );
            }
        }
        let lease_wins = results.iter().filter(|(l, _)| l.is_ok()).count();
        let cursor_wins = results.iter().filter(|(_, m)| m.is_ok()).count();
        assert_eq!(lease_wins, 1, "round {round}: one taker wins the lease");
        assert_eq!(cursor_wins, 1, "round {round}: the cursor moves once");
    }
    let progress = stores[0]
        .read(|tx| tx.notify_target(target.id))
        .expect("read")
        .map(|t| t.progress.after);
    assert_eq!(progress, Some(i64::try_from(ROUNDS).expect("small")));
}
