//! The notifier lease on PostgreSQL under real concurrency (issue 32 item 1): transactions run
//! at READ COMMITTED, so two processes that both read an expired lease both try to take it; the
//! compare-and-set in `swap_notify_lease` must let exactly one win, whatever the interleaving.
//! Likewise a target's cursor moves once from a given position. And core's `Notifier` runs on
//! PostgreSQL as it does on the other stores (the event tail has rules of its own here).

mod common;

use std::sync::{Arc, Barrier};

use airlock_core::notify::target::{NotifyLease, NotifyTarget, Progress};
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
        progress: Progress::default(),
        ..sample_notify_target(1, TENANT)
    };
    stores[0]
        .transact(|tx| tx.insert_notify_target(&target))
        .expect("insert the target");

    for round in 0..ROUNDS {
        let expected_lease = stores[0]
            .read(|tx| tx.notify_lease(TENANT))
            .expect("read the lease");
        let expected_progress = Progress::past(i64::try_from(round).expect("small"));
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
                            notify_target_id(1),
                            &expected_progress,
                            &Progress::past(expected_progress.after + 1),
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

/// A clock that stands still and ids from a counter: the notifier needs nothing else here.
struct Still(airlock_core::time::Timestamp);
impl airlock_core::ports::Clock for Still {
    fn now(&self) -> airlock_core::time::Timestamp {
        self.0
    }
    fn sleep_until(
        &self,
        _: airlock_core::time::Timestamp,
    ) -> airlock_core::ports::BoxFut<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}
struct Counter(std::sync::atomic::AtomicU64);
impl airlock_core::ports::IdSource for Counter {
    fn new_uuid(&self) -> uuid::Uuid {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        uuid::Uuid::from_u128(0x5eed_0000_0000_4000_8000_0000_0000_0000 | u128::from(n))
    }
}

fn env_over(store: Arc<airlock_pg::PgStore>) -> airlock_core::env::Env<airlock_pg::PgStore> {
    use airlock_core::policy::{Ruleset, shipped};
    let ruleset = Ruleset::load(shipped::DEFAULT_PROFILE, shipped::HARDLINE).expect("shipped");
    airlock_core::env::Env {
        store,
        clock: Arc::new(Still(at(1000))),
        ids: Arc::new(Counter(std::sync::atomic::AtomicU64::new(1))),
        policy: airlock_core::live_policy::LivePolicy::new(Arc::new(ruleset), None),
        tools: Arc::new(airlock_core::tool::registry::ToolRegistry::new()),
        workspaces: None,
        planners: Arc::new(airlock_core::planner::script::ScriptedPlannerFactory),
        faults: Arc::new(airlock_core::ports::NoFaults),
    }
}

/// The notifier steps over events a target does not subscribe to and gives up one whose record
/// cannot be found, reading the tail first in its read transaction as this store requires.
#[test]
fn the_notifier_follows_a_cursor_on_postgresql() {
    use airlock_core::events::EventType;
    use airlock_core::notify::Notifier;
    use airlock_core::vocab::RunStatus;
    use serde_json::json;

    let Some(url) = common::server("the_notifier_follows_a_cursor_on_postgresql") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("notify_cursor");
    cleanup.add(&schema);
    let store = Arc::new(common::store_in(&url, &schema));
    let run = seed_run(&*store, 1, RunStatus::Running);
    // Subscribed to approvals (and UNCERTAIN calls), not to checkpoints; from the first event.
    let target = NotifyTarget {
        progress: Progress::default(),
        ..sample_notify_target(2, &run.tenant_id)
    };
    store
        .transact(|tx| tx.insert_notify_target(&target))
        .expect("insert the target");
    let mut last = 0;
    for n in 0..3 {
        let event = sample_event(&run, EventType::RunCheckpointed, json!({ "n": n }), None);
        last = store
            .transact(|tx| tx.append_event(&event))
            .expect("append")
            .id;
    }
    let orphan = sample_event(
        &run,
        EventType::ApprovalRequested,
        json!({"approval_id": "00000000-0000-4000-8000-00000000dead"}),
        None,
    );
    let orphan = store
        .transact(|tx| tx.append_event(&orphan))
        .expect("append");
    assert!(orphan.id > last);

    let notifier = Notifier::new(env_over(Arc::clone(&store)), "pg-notifier".to_owned(), 30);
    assert!(notifier.hold(&run.tenant_id).expect("hold"));
    assert_eq!(notifier.due(&target).expect("due"), None);
    let now = store
        .read(|tx| tx.notify_target(target.id))
        .expect("read")
        .expect("the target");
    assert_eq!(
        now.progress.after, orphan.id,
        "stepped over, then past the orphan"
    );
    let given_up = store
        .read(|tx| tx.process_events())
        .expect("read")
        .into_iter()
        .filter(|e| e.event_type == EventType::NotifyDeliveryGivenUp)
        .count();
    assert_eq!(given_up, 1);
}
