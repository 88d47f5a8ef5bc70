//! Smoke scenarios: an allowed call completes; an approval parks, resolves and resumes.

mod common;

use airlock_core::run::executor::ExecutionEnd;
use airlock_core::testing::{GRANTED_APPROVAL_EVENTS, assert_subsequence};
use airlock_core::vocab::{ApprovalResolution, InvocationStatus, ResolveState, RunStatus};
use common::*;
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn allowed_call_completes_the_run() {
    // An in-process read-only call with user-trusted arguments is allowed and runs once.
    let h = Harness::new();
    let run = h
        .submit(h.script(json!([[{"call_id": "c1", "tool": "test.echo", "arguments": {"text": "hi"}, "argument_trust": {"text": "user"}}]])))
        .await;
    let worker = h.worker("w1");
    let ends = h.drive(&worker).await;
    assert_eq!(ends, vec![ExecutionEnd::Finished(RunStatus::Completed)]);
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Completed);
    assert_eq!(row.step_count, 2);
    assert_eq!(row.tool_call_count, 1);
    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1);
    assert_eq!(invocations[0].status, InvocationStatus::Succeeded);
    assert_eq!(h.ledger.count("test.echo"), 1);
    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.checkpointed",
            "tool.call.proposed",
            "tool.call.authorized",
            "tool.call.started",
            "tool.call.completed",
            "run.checkpointed",
            "run.checkpointed",
            "run.completed"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn granted_approval_parks_resumes_and_completes() {
    // An external write needs approval: the run parks, bob approves, a worker resumes it.
    let h = Harness::new();
    let run = h
        .submit(h.script(json!([[{"call_id": "c1", "tool": "test.send", "arguments": {"text": "hi"}, "argument_trust": {"text": "user"}}]])))
        .await;
    let worker = h.worker("w1");
    assert_eq!(h.drive(&worker).await, vec![ExecutionEnd::Parked]);
    assert_eq!(h.run(run).status(), RunStatus::WaitingForApproval);
    assert!(h.run(run).lease().is_none());
    let page = h.control.list_pending(&h.bob(), None, None, None).unwrap();
    assert_eq!(page.items.len(), 1);
    let approval = page.items[0].id;
    let resolved = h
        .control
        .resolve(
            &h.bob(),
            approval,
            ApprovalResolution::ApproveOnce,
            Some("ok"),
        )
        .await
        .unwrap();
    assert_eq!(resolved.state, ResolveState::Applied);
    assert_eq!(h.run(run).status(), RunStatus::Queued);
    assert_eq!(h.dispatcher.resumed.lock().unwrap().as_slice(), &[run]);
    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Completed)]
    );
    assert_eq!(h.ledger.count("test.send"), 1);
    assert_eq!(h.run(run).attempts, 0);
    assert_subsequence(&h.event_types(run), &GRANTED_APPROVAL_EVENTS);
}
