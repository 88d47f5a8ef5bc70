//! The durable dispatcher's wake-ups (SPEC §10.5): a hint sent after the worker armed its wait
//! ends that wait even when it arrives before the wait is first polled (during the tick), and a
//! wait armed after the hint does not see it.

use std::time::Duration;

use airlock_core::ids::RunId;
use airlock_core::ports::{Dispatcher, WakeHints};
use airlock_host::DurableDispatcher;

fn run() -> RunId {
    RunId(uuid::Uuid::nil())
}

#[tokio::test]
async fn a_hint_during_the_tick_ends_the_wait_armed_before_it() {
    let dispatcher = DurableDispatcher::default();
    let wait = dispatcher.armed();
    dispatcher.dispatch(run()); // the tick queued a run: nobody is polling the wait yet
    let woke = tokio::time::timeout(Duration::from_secs(5), wait).await;
    assert!(woke.is_ok(), "a hint after arming must end the wait");

    let wait = dispatcher.armed();
    dispatcher.resume(run());
    let woke = tokio::time::timeout(Duration::from_secs(5), wait).await;
    assert!(woke.is_ok(), "a resume hint wakes as well");
}

#[tokio::test]
async fn a_wait_armed_after_the_hint_waits_for_the_next_one() {
    let dispatcher = DurableDispatcher::default();
    dispatcher.dispatch(run());
    let wait = dispatcher.armed();
    let woke = tokio::time::timeout(Duration::from_millis(100), wait).await;
    assert!(woke.is_err(), "an earlier hint must not end a later wait");
}
