//! The UNCERTAIN review queue (SPEC §9.5): `list_uncertain` and `settle`, their answers in the
//! spec's order, and the audit trail a settlement leaves.

mod common;

use airlock_core::control::ServiceError;
use airlock_core::ids::{InvocationId, RunId};
use airlock_core::testing::fixtures::user_call;
use airlock_core::vocab::{CrashPoint, InvocationStatus, RunStatus, SettlementOutcome};
use common::*;
use serde_json::json;

/// A run whose watermarked `test.write_once` call was interrupted after START and recovered
/// as UNCERTAIN; returns the run and the UNCERTAIN invocation.
async fn uncertain_call(h: &Harness) -> (RunId, InvocationId) {
    let write = json!([user_call(
        "c1",
        "test.write_once",
        json!({"path": "notes/a.txt", "text": "x"})
    )]);
    let run = h.submit(h.script(json!([write]))).await;
    h.crash.arm(CrashPoint::AfterStart);
    assert_eq!(h.drive_one_until_crash(&h.worker("w1")).await, None);
    h.advance(30).await;
    let w2 = h.worker("w2");
    assert_eq!(w2.reclaim().await.unwrap(), 1);
    h.advance(1).await;
    h.drive(&w2).await;
    assert_eq!(h.run(run).status(), RunStatus::Completed);
    let invocation = h.invocations(run).remove(0);
    assert_eq!(invocation.status, InvocationStatus::Uncertain);
    (run, invocation.id)
}

fn settled_events(h: &Harness, run: RunId) -> usize {
    h.event_types(run)
        .iter()
        .filter(|t| *t == "tool.call.settled")
        .count()
}

#[tokio::test(start_paused = true)]
async fn settle_answers_in_the_spec_order_and_writes_one_finding() {
    let h = Harness::new();
    let (run, id) = uncertain_call(&h).await;
    let queue = h.control.list_uncertain(&h.bob(), false).unwrap();
    assert_eq!(queue.iter().map(|i| i.id).collect::<Vec<_>>(), [id]);

    // Another tenant's id is NotFound, whatever the note (even an invalid one).
    for note in ["", "checked"] {
        assert_eq!(
            h.control
                .settle(&h.mallory(), id, SettlementOutcome::Succeeded, note)
                .await,
            Err(ServiceError::NotFound)
        );
    }
    // The note is 1..=4096 characters.
    for note in [String::new(), "n".repeat(4097)] {
        assert!(matches!(
            h.control
                .settle(&h.bob(), id, SettlementOutcome::Succeeded, &note)
                .await,
            Err(ServiceError::InvalidArgument(_))
        ));
    }
    assert_eq!(
        settled_events(&h, run),
        0,
        "a refused settle writes nothing"
    );

    let first = h
        .control
        .settle(
            &h.bob(),
            id,
            SettlementOutcome::Succeeded,
            &"n".repeat(4096),
        )
        .await
        .unwrap();
    assert_eq!(first.settled_by, "bob");
    assert_eq!(settled_events(&h, run), 1);

    // The same outcome again returns the stored settlement (its note, not the new one); a
    // different outcome is a Conflict. The note of a repeat is still checked first (issue 17
    // item 6): an invalid repeat is refused, not answered with the stored settlement.
    for note in [String::new(), "n".repeat(4097)] {
        assert!(matches!(
            h.control
                .settle(&h.bob(), id, SettlementOutcome::Succeeded, &note)
                .await,
            Err(ServiceError::InvalidArgument(_))
        ));
    }
    let again = h
        .control
        .settle(&h.bob(), id, SettlementOutcome::Succeeded, "again")
        .await
        .unwrap();
    assert_eq!(again, first);
    assert!(matches!(
        h.control
            .settle(&h.bob(), id, SettlementOutcome::Failed, "no")
            .await,
        Err(ServiceError::Conflict(_))
    ));
    assert_eq!(settled_events(&h, run), 1);

    // The invocation stays UNCERTAIN; it leaves the default queue and stays in `all`.
    assert_eq!(h.invocations(run)[0].status, InvocationStatus::Uncertain);
    assert!(
        h.control
            .list_uncertain(&h.bob(), false)
            .unwrap()
            .is_empty()
    );
    let all = h
        .control
        .list_uncertain_with_settlements(&h.bob(), true)
        .unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].1.as_ref(), Some(&first));
}

#[tokio::test(start_paused = true)]
async fn only_an_uncertain_invocation_can_be_settled() {
    let h = Harness::new();
    let echo = user_call("c1", "test.echo", json!({"text": "hi"}));
    let run = h.submit(h.script(json!([[echo]]))).await;
    h.drive(&h.worker("w1")).await;
    let done = h.invocations(run).remove(0);
    assert_eq!(done.status, InvocationStatus::Succeeded);
    assert_eq!(
        h.control
            .settle(&h.bob(), done.id, SettlementOutcome::Succeeded, "checked")
            .await,
        Err(ServiceError::Conflict(
            "invocation is not uncertain".to_owned()
        ))
    );
}
