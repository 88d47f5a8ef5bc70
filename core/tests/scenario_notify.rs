//! Notification scenarios (issue 32 item 1), against core alone: targets added, listed and
//! removed as the tenant's own, with audit events; one notifier per tenant by a lease; each
//! target's cursor in the tenant's log, stepping over what it does not subscribe to, holding
//! an event through back-off, moving past it when delivered or given up; a notifier that lost
//! its lease records nothing.

mod common;

use std::collections::BTreeSet;

use airlock_core::control::ServiceError;
use airlock_core::events::{Actor, EventType, NewEvent};
use airlock_core::notify::target::tenant_tag;
use airlock_core::notify::{
    Notifier, NotifyEvent, NotifyFormat, SecretSource, Settle, Subject, TargetSpec,
};
use airlock_core::ports::Clock;
use airlock_core::run::executor::ExecutionEnd;
use airlock_core::store::{Store, StoreTx, TxError};
use common::*;
use serde_json::json;

/// acme's secret variable `AIRLOCK_NOTIFY_<acme's tag>_HOOK`.
fn acme_secret() -> String {
    format!("AIRLOCK_NOTIFY_{}_HOOK", tenant_tag("acme"))
}

fn spec(events: &[NotifyEvent]) -> TargetSpec {
    TargetSpec {
        url: "https://hooks.example/services/T0/B0/secret-path".to_owned(),
        events: events.iter().copied().collect::<BTreeSet<_>>(),
        format: NotifyFormat::Slack,
        secret: SecretSource::Env(acme_secret()),
        label: Some("approvers".to_owned()),
    }
}

fn process_events_of(h: &Harness, event_type: EventType) -> Vec<serde_json::Value> {
    h.store
        .read(|tx: &mut dyn StoreTx| tx.process_events())
        .expect("read")
        .into_iter()
        .filter(|e| e.event_type == event_type)
        .map(|e| e.payload)
        .collect()
}

/// Parks a run of alice's on one approval of `test.send`.
async fn park(h: &Harness) {
    let run = h
        .submit(h.script(json!([[{"call_id": "c1", "tool": "test.send", "arguments": {"text": "<script>x</script>"}, "argument_trust": {"text": "user"}}]])))
        .await;
    let worker = h.worker("w1");
    assert_eq!(
        h.drive(&worker).await.last(),
        Some(&ExecutionEnd::Parked),
        "run {run} parks"
    );
}

#[tokio::test(start_paused = true)]
async fn targets_are_the_tenants_own_and_every_change_is_audited() {
    let h = Harness::new();
    let alice = h.alice();
    let target = h
        .control
        .add_notify_target(
            &alice.tenant_id,
            &alice.principal_id,
            &spec(&[NotifyEvent::ApprovalRequested]),
        )
        .expect("add");
    assert_eq!(
        h.control.list_notify_targets("acme").expect("list"),
        vec![target.clone()]
    );
    assert_eq!(h.control.list_notify_targets("evil").expect("list"), vec![]);
    let added = process_events_of(&h, EventType::NotifyTargetAdded);
    assert_eq!(added.len(), 1);
    assert_eq!(added[0]["target_id"], target.id.to_string());
    assert_eq!(
        added[0]["url"], "https://hooks.example/…",
        "the path, a credential for Slack, is not recorded"
    );
    assert_eq!(added[0]["secret"], format!("env:{}", acme_secret()));

    // Another tenant cannot remove it; removing it twice finds nothing the second time.
    assert_eq!(
        h.control.remove_notify_target("evil", "mallory", target.id),
        Err(ServiceError::NotFound)
    );
    h.control
        .remove_notify_target("acme", "alice", target.id)
        .expect("remove");
    assert_eq!(
        h.control.remove_notify_target("acme", "alice", target.id),
        Err(ServiceError::NotFound)
    );
    assert_eq!(h.control.list_notify_targets("acme").expect("list"), vec![]);
    let removed = process_events_of(&h, EventType::NotifyTargetRemoved);
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0]["removed_by"], "alice");

    for (bad, why) in [
        (
            TargetSpec {
                url: "file:///etc/passwd".to_owned(),
                ..spec(&[NotifyEvent::ApprovalRequested])
            },
            "scheme",
        ),
        (spec(&[]), "no events"),
        (
            TargetSpec {
                secret: SecretSource::Env("AIRLOCK_OAUTH_CLIENT_SECRET".to_owned()),
                ..spec(&[NotifyEvent::ApprovalRequested])
            },
            "an unprefixed variable",
        ),
        (
            TargetSpec {
                secret: SecretSource::Env(format!("AIRLOCK_NOTIFY_{}_HOOK", tenant_tag("evil"))),
                ..spec(&[NotifyEvent::ApprovalRequested])
            },
            "another tenant's secret",
        ),
        (
            TargetSpec {
                format: NotifyFormat::Ntfy,
                url: "https://ntfy.example".to_owned(),
                ..spec(&[NotifyEvent::ApprovalRequested])
            },
            "an ntfy URL without its topic",
        ),
    ] {
        assert!(
            matches!(
                h.control.add_notify_target("acme", "alice", &bad),
                Err(ServiceError::InvalidArgument(_))
            ),
            "{why}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn one_notifier_per_tenant_follows_each_targets_cursor() {
    let h = Harness::new();
    let requested = h
        .control
        .add_notify_target("acme", "alice", &spec(&[NotifyEvent::ApprovalRequested]))
        .expect("add");
    let expired = h
        .control
        .add_notify_target("acme", "alice", &spec(&[NotifyEvent::ApprovalExpired]))
        .expect("add");
    park(&h).await;

    let first = Notifier::new(h.env.clone(), "n1".to_owned(), 30);
    let second = Notifier::new(h.env.clone(), "n2".to_owned(), 30);
    assert_eq!(
        first
            .targets_by_tenant()
            .expect("targets")
            .keys()
            .collect::<Vec<_>>(),
        vec!["acme"]
    );
    assert!(first.hold("acme").expect("hold"));
    assert!(!second.hold("acme").expect("hold"), "one holder at a time");
    assert!(first.hold("acme").expect("renew"), "the holder renews");

    // The approval target has the request due, with the approval it is about.
    let due = first
        .due(&requested)
        .expect("due")
        .expect("an event is due");
    assert_eq!(due.kind, NotifyEvent::ApprovalRequested);
    assert_eq!(due.attempt, 1);
    let Subject::Approval(approval) = &due.subject else {
        panic!("an approval notice: {:?}", due.subject)
    };
    assert_eq!(
        due.event.payload["approval_id"],
        approval.id.to_string(),
        "the record the event names"
    );
    // The expiry target has nothing due, and its cursor stepped over the run's events.
    assert_eq!(first.due(&expired).expect("due"), None);
    let stepped = first.targets_by_tenant().expect("targets");
    assert!(stepped["acme"][1].progress.after >= due.event.id);

    // A failed attempt holds the event until its back-off passes, then it is due again.
    let retry_at = first.now().saturating_add_seconds(5);
    let waiting = first
        .settle(&due, &Settle::RetryAt(retry_at))
        .expect("retry");
    assert_eq!(waiting.progress.attempts, 1);
    assert_eq!(first.due(&waiting).expect("due"), None, "backing off");
    h.advance(5).await;
    let again = first.due(&waiting).expect("due").expect("due again");
    assert_eq!((again.event.id, again.attempt), (due.event.id, 2));

    // A notifier without the lease records nothing, even for an event it was handed.
    assert_eq!(
        second.settle(&again, &Settle::Delivered),
        Err(TxError::Fenced)
    );

    // Given up: past the event, with a process event saying so.
    let past = first
        .settle(
            &again,
            &Settle::GiveUp {
                why: "HTTP 500".to_owned(),
            },
        )
        .expect("give up");
    assert_eq!(past.progress.after, due.event.id);
    assert_eq!(first.due(&past).expect("due"), None);
    let given_up = process_events_of(&h, EventType::NotifyDeliveryGivenUp);
    assert_eq!(given_up.len(), 1);
    assert_eq!(given_up[0]["event_id"], due.event.id);
    assert_eq!(given_up[0]["attempts"], 2);

    // The approval expires: the expiry target has it due; the holder dies (its lease runs
    // out) and the other notifier takes over from the stored cursor.
    h.advance(86_401).await;
    assert_eq!(h.control.expire_due_all(h.clock.now()).await.unwrap(), 1);
    let expired_now = first.targets_by_tenant().expect("targets")["acme"][1].clone();
    let due_expiry = first.due(&expired_now).expect("due").expect("expiry due");
    assert_eq!(due_expiry.kind, NotifyEvent::ApprovalExpired);
    assert!(second.hold("acme").expect("take over an expired lease"));
    assert_eq!(
        first.settle(&due_expiry, &Settle::Delivered),
        Err(TxError::Fenced),
        "the old holder's late attempt changes nothing"
    );
    let resumed = second.due(&expired_now).expect("due").expect("still due");
    assert_eq!(resumed.event.id, due_expiry.event.id);
    let delivered = second.settle(&resumed, &Settle::Delivered).expect("settle");
    assert_eq!(second.due(&delivered).expect("due"), None);

    // Released at shutdown: the other takes over at once.
    second.release("acme").expect("release");
    assert!(first.hold("acme").expect("hold"));

    // A target removed after it was listed has nothing more due.
    let late = h
        .control
        .add_notify_target("acme", "alice", &spec(&[NotifyEvent::ApprovalRequested]))
        .expect("add");
    park(&h).await;
    assert!(first.due(&late).expect("due").is_some());
    h.control
        .remove_notify_target("acme", "alice", late.id)
        .expect("remove");
    assert_eq!(first.due(&late).expect("due"), None);

    // An event whose record cannot be found is given up, and that is recorded.
    let orphaned = h
        .control
        .add_notify_target("acme", "alice", &spec(&[NotifyEvent::ApprovalRequested]))
        .expect("add");
    let missing = h
        .store
        .transact(|tx: &mut dyn StoreTx| {
            tx.append_event(&NewEvent {
                session_id: due.event.session_id,
                run_id: None,
                event_type: EventType::ApprovalRequested,
                actor: Actor::application(),
                payload: json!({"approval_id": "00000000-0000-4000-8000-00000000dead"}),
                derivation_key: None,
                created_at: h.clock.now(),
            })
        })
        .expect("append");
    assert_eq!(first.due(&orphaned).expect("due"), None);
    let given_up = process_events_of(&h, EventType::NotifyDeliveryGivenUp);
    let last = given_up.last().expect("given up");
    assert_eq!(last["event_id"], missing.id);
    assert_eq!(last["target_id"], orphaned.id.to_string());
    assert_eq!(
        first.targets_by_tenant().expect("targets")["acme"]
            .last()
            .map(|t| t.progress.after),
        Some(missing.id)
    );
}
