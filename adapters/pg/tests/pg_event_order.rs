//! Event ids follow commit order for a tenant tail (SPEC §20's stream over SPEC §18's store):
//! `events_of_tenant(after_id)` never returns an id while a lower one may still commit, so a
//! tail that moves its cursor past what it read never skips an event. PostgreSQL takes an
//! event's id at INSERT and commits transactions in any order; the store's event horizon
//! (`tx`, "Event ids") makes a tail wait for the writers that might still fill a gap.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use airlock_core::events::{Event, EventType};
use airlock_core::run::Run;
use airlock_core::store::{Store, TxError};
use airlock_core::testing::fixtures::*;
use airlock_core::vocab::RunStatus;
use serde_json::json;

fn event_of(run: &Run, n: usize) -> airlock_core::events::NewEvent {
    sample_event(run, EventType::RunCheckpointed, json!({ "n": n }), None)
}

fn ids(events: &[Event]) -> Vec<i64> {
    events.iter().map(|e| e.id).collect()
}

/// The deterministic case: transaction A takes the lower id and stays open while B takes a
/// higher one and commits. A tail read then must not answer with B's event alone (its cursor
/// would pass A's id, which commits afterwards): it waits for A and returns both.
#[test]
fn a_tail_waits_for_a_lower_id_that_is_still_in_flight() {
    let Some(url) = common::server("a_tail_waits_for_a_lower_id_that_is_still_in_flight") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("event_order");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let first = seed_run(&store, 1, RunStatus::Running);
    let second = seed_run(&store, 2, RunStatus::Running);

    let (store, first, second) = (&store, &first, &second);
    std::thread::scope(|scope| {
        let (taken_tx, taken) = mpsc::channel();
        let (commit_tx, commit) = mpsc::channel::<()>();
        let writer_a = scope.spawn(move || {
            store.transact(move |tx| {
                let event = tx.append_event(&event_of(first, 1))?;
                taken_tx.send(event.id).expect("main waits");
                commit.recv().expect("main says when");
                Ok(event.id)
            })
        });
        let id_a = taken.recv().expect("A took an id");
        let id_b = store
            .transact(|tx| tx.append_event(&event_of(second, 2)))
            .expect("B commits")
            .id;
        assert!(id_b > id_a, "B's id ({id_b}) was taken after A's ({id_a})");

        let (tail_tx, tail) = mpsc::channel();
        let (last_tx, last) = mpsc::channel();
        scope.spawn(move || {
            let page = store.read(|tx| tx.events_of_tenant(TENANT, None, 100));
            tail_tx.send(page).expect("main listens");
        });
        scope.spawn(move || {
            last_tx
                .send(store.read(|tx| tx.last_event_id()))
                .expect("main listens");
        });
        // While A is open, neither read may answer: any answer could only leave A's id out.
        assert!(
            tail.recv_timeout(Duration::from_millis(500)).is_err(),
            "events_of_tenant answered while a lower id was in flight"
        );
        assert!(
            last.recv_timeout(Duration::from_millis(50)).is_err(),
            "last_event_id answered while a lower id was in flight"
        );
        commit_tx.send(()).expect("A waits");
        assert_eq!(writer_a.join().expect("A's thread"), Ok(id_a));
        let page = tail.recv().expect("the tail answers").expect("tail read");
        assert_eq!(
            ids(&page),
            [id_a, id_b],
            "the tail returns A's event before B's"
        );
        assert_eq!(last.recv().expect("answers"), Ok(Some(id_b)));
    });

    // A read transaction whose snapshot is already taken cannot wait for writers before it,
    // so a tail there is refused rather than possibly gappy.
    let refused = store.read(|tx| {
        tx.session(first.session_id)?;
        tx.events_of_tenant(TENANT, None, 10)
    });
    assert!(
        matches!(&refused, Err(TxError::Backend(m)) if m.contains("first read")),
        "{refused:?}"
    );
    // Inside a write transaction (a new snapshot per statement) it works, and sees the
    // transaction's own event.
    let own = store
        .transact(|tx| {
            let mine = tx.append_event(&event_of(first, 3))?;
            let page = tx.events_of_tenant(TENANT, None, 10)?;
            Ok((mine.id, ids(&page)))
        })
        .expect("a tail inside a write transaction");
    assert_eq!(own.1.last(), Some(&own.0), "{own:?}");
}

/// The racy case, many times: four writers append to their own sessions with pauses inside
/// their transactions (so commits overtake one another), while a tail follows the tenant
/// with a cursor as the event stream does. The tail must end up with every committed event,
/// each once, in id order.
#[test]
fn a_tail_following_concurrent_writers_misses_nothing() {
    let Some(url) = common::server("a_tail_following_concurrent_writers_misses_nothing") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("event_tail");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    const WRITERS: usize = 4;
    const TRANSACTIONS: usize = 25;
    let runs: Vec<Run> = (0..WRITERS)
        .map(|n| seed_run(&store, 10 + n as u128, RunStatus::Running))
        .collect();

    let (committed, followed) = std::thread::scope(|scope| {
        let writers: Vec<_> = runs
            .iter()
            .enumerate()
            .map(|(w, run)| {
                let store = &store;
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    for t in 0..TRANSACTIONS {
                        // Pauses that differ per writer and transaction: 0-9 ms inside.
                        let pause = Duration::from_millis(((w * 7 + t * 3) % 10) as u64);
                        let pair = store
                            .transact(|tx| {
                                let a = tx.append_event(&event_of(run, t * 2))?;
                                std::thread::sleep(pause);
                                let b = tx.append_event(&event_of(run, t * 2 + 1))?;
                                Ok([a.id, b.id])
                            })
                            .expect("append");
                        mine.extend(pair);
                    }
                    mine
                })
            })
            .collect();
        let tail = scope.spawn(|| {
            let mut seen: Vec<i64> = Vec::new();
            let mut idle_after_writers = 0;
            while idle_after_writers < 2 {
                let writing = !writers_done(&store);
                let page = store
                    .read(|tx| tx.events_of_tenant(TENANT, seen.last().copied(), 50))
                    .expect("tail read");
                if page.is_empty() && !writing {
                    idle_after_writers += 1;
                }
                seen.extend(ids(&page));
                std::thread::sleep(Duration::from_millis(2));
            }
            seen
        });
        let mut committed: Vec<i64> = writers
            .into_iter()
            .flat_map(|w| w.join().expect("writer"))
            .collect();
        mark_writers_done(&store);
        committed.sort_unstable();
        (committed, tail.join().expect("tail"))
    });
    assert_eq!(committed.len(), WRITERS * TRANSACTIONS * 2);
    assert_eq!(
        followed, committed,
        "the tail saw every committed event once, in id order"
    );
}

/// Whether the writers of the racy test are done: a marker event in a session of its own, so
/// the tail's thread needs nothing but the store. Its own tenant keeps it out of the tail.
fn writers_done(store: &impl Store) -> bool {
    store
        .read(|tx| tx.session(session_id(99)))
        .expect("read")
        .is_some()
}

fn mark_writers_done(store: &impl Store) {
    let mut marker = sample_session(99);
    marker.tenant_id = "marker".to_owned();
    store
        .transact(|tx| tx.insert_session(&marker))
        .expect("marker");
}
