//! Gate scenarios (SPEC §5, §9.2, §9.3, §16 #8): what the pipeline does with one call before any
//! approval is involved: an allowed call runs once; a policy denial gets a row but no effect; a
//! refusal (unknown tool, missing scope, invalid arguments) gets no row, only its event.

mod common;

use airlock_core::events::Event;
use airlock_core::ids::RunId;
use airlock_core::invocation::outcome::ResultItem;
use airlock_core::run::checkpoint::ResultRef;
use airlock_core::run::executor::ExecutionEnd;
use airlock_core::store::{Store, StoreTx};
use airlock_core::vocab::{
    InvocationStatus, OutcomeStatus, PolicyDecisionType, Remediation, RunStatus, TrustLevel,
};
use common::*;
use serde_json::{Value, json};

/// The shipped files' `policy_version` (SPEC §7.4), as core derives it from the embedded files.
use airlock_core::policy::shipped::SHIPPED_VERSION;

/// The events of a run that carry this type, in order.
fn events_of_type(h: &Harness, run: RunId, event_type: &str) -> Vec<Event> {
    h.events(run)
        .into_iter()
        .filter(|e| e.event_type.as_str() == event_type)
        .collect()
}

/// The outcome object carried as the `content` of an error result item.
fn item_outcome(item: &ResultItem) -> Value {
    serde_json::from_str(&item.content).expect("content is canonical JSON")
}

/// The result references of the run's step records, step by step.
fn history_refs(h: &Harness, run: RunId) -> Vec<Vec<ResultRef>> {
    h.store
        .transact(|tx: &mut dyn StoreTx| tx.step_records(run, 0, 1000))
        .unwrap()
        .into_iter()
        .map(|step| step.results)
        .collect()
}

/// Submits a script and drives it to its end with one worker.
async fn run_to_end(h: &Harness, script: Value) -> RunId {
    let run = h.submit(script).await;
    let worker = h.worker("w1");
    assert_eq!(
        h.drive(&worker).await,
        vec![ExecutionEnd::Finished(RunStatus::Completed)]
    );
    run
}

/// The event list of a one-step run whose only call is refused (no row, one event).
fn refused_run_events(refusal: &str) -> Vec<String> {
    [
        "run.queued",
        "run.checkpointed",
        "run.started",
        "run.checkpointed",
        refusal,
        "run.checkpointed",
        "run.checkpointed",
        "run.completed",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// The event list of a one-step run whose only call is proposed and denied by policy.
fn denied_run_events() -> Vec<String> {
    [
        "run.queued",
        "run.checkpointed",
        "run.started",
        "run.checkpointed",
        "tool.call.proposed",
        "tool.call.denied",
        "run.checkpointed",
        "run.checkpointed",
        "run.completed",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// Checks a refusal event's envelope and returns its result item (SPEC §9.2 REFUSE).
fn assert_refusal_event(
    h: &Harness,
    run: RunId,
    event_type: &str,
    tool: &str,
    reason_code: &str,
) -> ResultItem {
    let events = events_of_type(h, run, event_type);
    assert_eq!(events.len(), 1, "exactly one {event_type}");
    let event = &events[0];
    assert_eq!(
        event.derivation_key.as_deref(),
        Some(format!("tool.call.refused:{run}:1:c1").as_str())
    );
    assert_eq!(event.payload["invocation_id"], Value::Null);
    assert_eq!(event.payload["name"], tool);
    assert_eq!(event.payload["call_id"], "c1");
    assert_eq!(event.payload["reason_code"], reason_code);
    let item = ResultItem::parse(event.payload["result_item"].as_str().expect("result item"))
        .expect("a result item");
    assert_eq!(item.call_id, "c1");
    assert_eq!(item.name, tool);
    assert!(item.is_error);
    assert_eq!(item.trust, TrustLevel::InternalTool);
    // The run's history refers to the refusal event, not to a row.
    assert_eq!(
        history_refs(h, run),
        vec![vec![ResultRef::Refusal {
            derivation_key: format!("tool.call.refused:{run}:1:c1"),
        }]]
    );
    item
}

/// Checks the run row of a one-step run that completed without running any tool.
fn assert_completed_without_effects(h: &Harness, run: RunId) {
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Completed);
    assert_eq!(row.step_count, 2);
    assert_eq!(row.tool_call_count, 0);
    assert_eq!(row.attempts, 0);
    assert!(row.lease().is_none());
    assert!(
        h.ledger.effects.lock().unwrap().is_empty(),
        "no tool body ran"
    );
}

#[tokio::test(start_paused = true)]
async fn allowed_echo_call_is_authorized_runs_once_and_succeeds() {
    // A read-only call with no side effect is allowed by the matrix, authorized at PROPOSE and runs once.
    let h = Harness::new();
    let run = run_to_end(
        &h,
        h.script(json!([[{"call_id": "c1", "tool": "test.echo", "arguments": {"text": "hi"}, "argument_trust": {"text": "user"}}]])),
    )
    .await;

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
            "run.completed",
        ]
    );
    let row = h.run(run);
    assert_eq!(row.status(), RunStatus::Completed);
    assert_eq!(row.step_count, 2);
    assert_eq!(row.tool_call_count, 1);

    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1);
    let call = &invocations[0];
    assert_eq!(call.status, InvocationStatus::Succeeded);
    assert_eq!(call.reason_code.as_deref(), Some("tool.succeeded"));
    assert_eq!(call.outcome_status, Some(OutcomeStatus::Succeeded));
    let outcome = call
        .outcome
        .as_ref()
        .expect("terminal rows carry an outcome");
    assert_eq!(outcome.message, "Completed.");
    assert_eq!(outcome.action, "test.echo");
    let decision = call.policy_decision.as_ref().expect("a decision");
    assert_eq!(decision.decision, PolicyDecisionType::Allow);
    assert_eq!(decision.reason_code, "policy.matrix.none");
    assert_eq!(decision.policy_version, SHIPPED_VERSION);
    // No side effect, so START sets no watermark.
    assert_eq!(call.effect_sent_at, None);
    assert_eq!(call.structured_result, Some(json!({"text": "hi"})));

    let authorized = events_of_type(&h, run, "tool.call.authorized");
    assert_eq!(authorized.len(), 1);
    assert_eq!(
        authorized[0].derivation_key.as_deref(),
        Some(format!("tool.call.authorized:{}", call.id).as_str())
    );
    assert_eq!(
        authorized[0].payload,
        json!({"invocation_id": call.id.to_string(), "name": "test.echo", "call_id": "c1"})
    );
    let completed = events_of_type(&h, run, "tool.call.completed");
    assert_eq!(
        completed[0].payload["result_item"].as_str(),
        call.result_item.as_deref(),
        "the event carries the stored result item"
    );

    let effects = h.ledger.effects.lock().unwrap().clone();
    assert_eq!(
        effects,
        vec![("test.echo".to_owned(), call.idempotency_key.clone(), false)]
    );
}

#[tokio::test(start_paused = true)]
async fn write_to_protected_host_path_is_denied_by_hardline_and_run_completes() {
    // A workspace write naming /etc/passwd matches the protected_host_path hardline rule: the row is DENIED, nothing runs, the run goes on.
    let h = Harness::new();
    let run = run_to_end(
        &h,
        h.script(json!([[{"call_id": "c1", "tool": "test.write_once", "arguments": {"path": "/etc/passwd", "text": "x"}, "argument_trust": {"path": "user", "text": "user"}}]])),
    )
    .await;

    assert_eq!(h.event_types(run), denied_run_events());
    assert_completed_without_effects(&h, run);

    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1);
    let call = &invocations[0];
    assert_eq!(call.status, InvocationStatus::Denied);
    assert_eq!(
        call.reason_code.as_deref(),
        Some("policy.hardline.host_path")
    );
    assert_eq!(call.effect_sent_at, None);
    let outcome = call.outcome.as_ref().expect("an outcome");
    assert_eq!(outcome.status, OutcomeStatus::Denied);
    assert_eq!(
        outcome.message,
        "Not performed. Policy does not permit this action."
    );
    assert!(!outcome.retryable);
    assert_eq!(outcome.remediation, Remediation::None);
    let decision = call.policy_decision.as_ref().expect("a decision");
    assert_eq!(decision.decision, PolicyDecisionType::Deny);
    assert_eq!(decision.reason_code, "policy.hardline.host_path");
    assert_eq!(
        decision.explanation,
        "Hardline rule protected_host_path denied the action."
    );
    assert_eq!(decision.policy_version, SHIPPED_VERSION);

    let denied = events_of_type(&h, run, "tool.call.denied");
    assert_eq!(
        denied[0].derivation_key.as_deref(),
        Some(format!("tool.call.result:{}", call.id).as_str())
    );
    assert_eq!(denied[0].payload["invocation_id"], call.id.to_string());
    assert_eq!(
        denied[0].payload["reason_code"],
        "policy.hardline.host_path"
    );
    assert_eq!(
        denied[0].payload["result_item"].as_str(),
        call.result_item.as_deref()
    );
    // The message names no rule, path or profile.
    let item = ResultItem::parse(call.result_item.as_deref().unwrap()).unwrap();
    assert!(!item.content.contains("passwd") && !item.content.contains("protected_host_path"));
}

#[tokio::test(start_paused = true)]
async fn write_outside_workspace_is_denied_by_matrix_and_run_completes() {
    // A relative path that climbs out with ".." fails path_inside_workspace: DENIED policy.matrix.workspace_write with the workspace message.
    let h = Harness::new();
    let run = run_to_end(
        &h,
        h.script(json!([[{"call_id": "c1", "tool": "test.write_once", "arguments": {"path": "../x", "text": "x"}, "argument_trust": {"path": "user", "text": "user"}}]])),
    )
    .await;

    assert_eq!(h.event_types(run), denied_run_events());
    assert_completed_without_effects(&h, run);

    let invocations = h.invocations(run);
    assert_eq!(invocations.len(), 1);
    let call = &invocations[0];
    assert_eq!(call.status, InvocationStatus::Denied);
    assert_eq!(
        call.reason_code.as_deref(),
        Some("policy.matrix.workspace_write")
    );
    let outcome = call.outcome.as_ref().expect("an outcome");
    assert_eq!(
        outcome.message,
        "Not performed. The path is outside the workspace."
    );
    let decision = call.policy_decision.as_ref().expect("a decision");
    assert_eq!(decision.decision, PolicyDecisionType::Deny);
    assert_eq!(decision.reason_code, "policy.matrix.workspace_write");
    assert_eq!(
        decision.explanation,
        "The default profile evaluated workspace_write."
    );
    let denied = events_of_type(&h, run, "tool.call.denied");
    assert_eq!(denied.len(), 1);
    assert_eq!(
        denied[0].payload["reason_code"],
        "policy.matrix.workspace_write"
    );
}

#[tokio::test(start_paused = true)]
async fn unknown_tool_is_refused_without_a_row() {
    // A call to a tool nobody registered is refused at step 2: one tool.call.denied event with a null invocation id, no row.
    let h = Harness::new();
    let run = run_to_end(
        &h,
        h.script(json!([[{"call_id": "c1", "tool": "test.nope", "arguments": {"text": "hi"}}]])),
    )
    .await;

    assert_eq!(h.event_types(run), refused_run_events("tool.call.denied"));
    assert!(h.invocations(run).is_empty(), "a refusal writes no row");
    assert_completed_without_effects(&h, run);
    let item = assert_refusal_event(
        &h,
        run,
        "tool.call.denied",
        "test.nope",
        "policy.matrix.unknown_tool",
    );
    assert_eq!(
        item_outcome(&item),
        json!({
            "status": "denied",
            "action": "test.nope",
            "reason_code": "policy.matrix.unknown_tool",
            "message": "Not performed. The requested capability is unknown.",
            "retryable": false,
            "remediation": "none",
        })
    );
}

#[tokio::test(start_paused = true)]
async fn call_missing_both_scopes_is_refused_naming_them_sorted() {
    // test.scoped requires demo.write and test.use; a run holding neither is refused naming exactly both, sorted.
    let h = Harness::new();
    let mut script =
        h.script(json!([[{"call_id": "c1", "tool": "test.scoped", "arguments": {"text": "hi"}}]]));
    script["principal_scopes"] = json!(["run.read", "workspace.read"]);
    let run = run_to_end(&h, script).await;

    assert_eq!(h.event_types(run), refused_run_events("tool.call.denied"));
    assert!(h.invocations(run).is_empty(), "a refusal writes no row");
    assert_completed_without_effects(&h, run);
    let item = assert_refusal_event(
        &h,
        run,
        "tool.call.denied",
        "test.scoped",
        "policy.scope.missing",
    );
    assert_eq!(
        item_outcome(&item),
        json!({
            "status": "denied",
            "action": "test.scoped",
            "reason_code": "policy.scope.missing",
            "message": "Not performed. Missing required scope(s): demo.write, test.use.",
            "retryable": false,
            "remediation": "none",
        })
    );
}

#[tokio::test(start_paused = true)]
async fn call_missing_one_scope_names_only_that_scope_before_validating_arguments() {
    // A run holding demo.write but not test.use is refused naming only test.use, and the scope check precedes argument validation.
    let h = Harness::new();
    let mut script =
        h.script(json!([[{"call_id": "c1", "tool": "test.scoped", "arguments": {"bogus": 1}}]]));
    script["principal_scopes"] = json!(["demo.write", "run.read"]);
    let run = run_to_end(&h, script).await;

    assert_eq!(h.event_types(run), refused_run_events("tool.call.denied"));
    assert!(h.invocations(run).is_empty(), "a refusal writes no row");
    assert_completed_without_effects(&h, run);
    let item = assert_refusal_event(
        &h,
        run,
        "tool.call.denied",
        "test.scoped",
        "policy.scope.missing",
    );
    let outcome = item_outcome(&item);
    assert_eq!(
        outcome["message"],
        "Not performed. Missing required scope(s): test.use."
    );
    assert!(
        !item.content.contains("demo.write"),
        "only missing scopes are named"
    );
    assert_eq!(outcome["status"], "denied");
}

#[tokio::test(start_paused = true)]
async fn invalid_arguments_are_refused_as_failed_without_a_row() {
    // Arguments that break the schema (an unknown property, a non-object) are refused at step 4 as tool.call.failed tool.arguments_invalid.
    let h = Harness::new();
    let run = run_to_end(
        &h,
        h.script(json!([[
            {"call_id": "c1", "tool": "test.echo", "arguments": {"bogus": 1}},
            {"call_id": "c2", "tool": "test.echo", "arguments": "not an object"}
        ]])),
    )
    .await;

    assert_eq!(
        h.event_types(run),
        [
            "run.queued",
            "run.checkpointed",
            "run.started",
            "run.checkpointed",
            "tool.call.failed",
            "tool.call.failed",
            "run.checkpointed",
            "run.checkpointed",
            "run.completed",
        ]
    );
    assert!(h.invocations(run).is_empty(), "a refusal writes no row");
    assert_completed_without_effects(&h, run);
    let failed = events_of_type(&h, run, "tool.call.failed");
    for (event, call_id) in failed.iter().zip(["c1", "c2"]) {
        assert_eq!(
            event.derivation_key.as_deref(),
            Some(format!("tool.call.refused:{run}:1:{call_id}").as_str())
        );
        assert_eq!(event.payload["invocation_id"], Value::Null);
        assert_eq!(event.payload["reason_code"], "tool.arguments_invalid");
        let item = ResultItem::parse(event.payload["result_item"].as_str().unwrap()).unwrap();
        assert_eq!(item.call_id, call_id);
        assert!(item.is_error);
        assert_eq!(item.trust, TrustLevel::InternalTool);
        assert_eq!(
            item_outcome(&item),
            json!({
                "status": "failed",
                "action": "test.echo",
                "reason_code": "tool.arguments_invalid",
                "message": "The tool arguments were invalid.",
                "retryable": false,
                "remediation": "modify_arguments",
            })
        );
    }
    assert_eq!(
        history_refs(&h, run),
        vec![vec![
            ResultRef::Refusal {
                derivation_key: format!("tool.call.refused:{run}:1:c1"),
            },
            ResultRef::Refusal {
                derivation_key: format!("tool.call.refused:{run}:1:c2"),
            },
        ]]
    );
    assert!(events_of_type(&h, run, "tool.call.denied").is_empty());
}
