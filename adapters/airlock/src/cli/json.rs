//! The JSON shapes of Appendix A: records use the SPEC §10.1/§14 field names, every field is
//! present (null if unset), times are §2.2 strings.

use airlock_core::approval::Approval;
use airlock_core::invocation::Invocation;
use airlock_core::run::{Run, RunState, RunSummary};
use airlock_core::session::Settlement;
use airlock_core::time::Timestamp;
use serde_json::{Value, json};

fn time(t: Option<Timestamp>) -> Value {
    t.map_or(Value::Null, |t| Value::String(t.to_string()))
}

/// The `runs` row without `planner_input` (SPEC §10.4 `get_run`).
/// A `runs list` item: the run's identity, status and counts (no planner input).
pub fn run_summary(run: &RunSummary) -> Value {
    json!({
        "id": run.id.to_string(),
        "session_id": run.session_id.to_string(),
        "tenant_id": run.tenant_id,
        "principal_id": run.principal_id,
        "planner_kind": run.planner_kind,
        "status": run.status.as_str(),
        "step_count": run.step_count,
        "tool_call_count": run.tool_call_count,
        "attempts": run.attempts,
        "created_at": run.created_at.to_string(),
        "updated_at": run.updated_at.to_string(),
    })
}

/// A conversation (SPEC §22.1): its connection's identity and liveness, its taint and its
/// call count. The record is the HTTP API's (`airlock_http::wire::ConversationRecord`), so
/// `conversations show` prints what `GET /v1/conversations/{id}` answers, less its calls.
pub fn conversation(c: &airlock_core::connection::Connection) -> Value {
    // Strings, numbers and nulls only: serializing it cannot fail.
    serde_json::to_value(airlock_http::wire::ConversationRecord::from(c)).unwrap_or(Value::Null)
}

pub fn run(run: &Run) -> Value {
    let (lease_owner, lease_expires_at, scheduled_for, failure, final_message) = match &run.state {
        RunState::Queued { scheduled_for } => (None, None, *scheduled_for, None, None),
        RunState::Running {
            lease_owner,
            lease_expires_at,
        } => (
            Some(lease_owner.clone()),
            Some(*lease_expires_at),
            None,
            None,
            None,
        ),
        RunState::WaitingForApproval | RunState::Cancelled => (None, None, None, None, None),
        RunState::Completed { final_message } => {
            (None, None, None, None, Some(final_message.clone()))
        }
        RunState::Failed { failure } => (None, None, None, Some(failure.clone()), None),
    };
    json!({
        "id": run.id.to_string(),
        "session_id": run.session_id.to_string(),
        "tenant_id": run.tenant_id,
        "principal_id": run.principal_id,
        "principal_scopes": run.principal_scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "origin_trust": run.origin_trust.as_str(),
        "planner_kind": run.planner_kind,
        "status": run.status().as_str(),
        "step_count": run.step_count,
        "tool_call_count": run.tool_call_count,
        "limits": {
            "max_steps": run.limits.max_steps,
            "max_tool_calls": run.limits.max_tool_calls,
            "deadline_seconds": run.limits.deadline_seconds,
        },
        "deadline_at": time(run.deadline_at),
        "lease_owner": lease_owner,
        "lease_epoch": run.lease_epoch,
        "lease_expires_at": time(lease_expires_at),
        "attempts": run.attempts,
        "scheduled_for": time(scheduled_for),
        "cancel_requested_at": time(run.cancel_requested_at),
        "failure": failure.map(|f| json!({
            "reason": f.reason.as_str(),
            "message": f.message,
            "step_number": f.step_number,
            "occurred_at": f.occurred_at.to_string(),
        })),
        "final_message": final_message,
        "created_at": run.created_at.to_string(),
        "updated_at": run.updated_at.to_string(),
    })
}

/// The §10.1 record.
pub fn approval(a: &Approval) -> Value {
    json!({
        "id": a.id.to_string(),
        "tenant_id": a.tenant_id,
        "principal_id": a.principal_id,
        "session_id": a.session_id.to_string(),
        "run_id": a.run_id.to_string(),
        "action_kind": a.action_kind.as_str(),
        "action_id": a.action_id.to_string(),
        "tool_invocation_id": a.tool_invocation_id.to_string(),
        "tool_name": a.tool_name,
        "tool_version": a.tool_version,
        "action_summary": a.action_summary,
        "arguments": a.arguments,
        "normalized_arguments_hash": a.normalized_arguments_hash,
        "effective_arguments_hash": a.effective_arguments_hash,
        "required_scopes": a.required_scopes,
        "risk": a.risk.as_str(),
        "policy_reason": a.policy_reason,
        "policy_decision": a.policy_decision.as_str(),
        "policy_version": a.policy_version,
        "revalidated_policy_version": a.revalidated_policy_version,
        "status": a.status.as_str(),
        "resolution": a.resolution.map(|r| r.as_str()),
        "resolution_reason": a.resolution_reason,
        "expires_at": a.expires_at.to_string(),
        "created_at": a.created_at.to_string(),
        "requested_at": time(a.requested_at),
        "resolved_at": time(a.resolved_at),
        "resolved_by": a.resolved_by,
    })
}

/// The §9.1 record.
pub fn invocation(i: &Invocation) -> Value {
    let result_item = i
        .result_item
        .as_deref()
        .and_then(|t| serde_json::from_str::<Value>(t).ok());
    json!({
        "id": i.id.to_string(),
        "run_id": i.run_id.to_string(),
        "session_id": i.session_id.to_string(),
        "tenant_id": i.tenant_id,
        "step_number": i.step_number,
        "call_id": i.call_id,
        "tool_name": i.tool_name,
        "tool_version": i.tool_version,
        "side_effect": i.side_effect.as_str(),
        "risk": i.risk.as_str(),
        "idempotency_class": i.idempotency_class.as_str(),
        "required_scopes": i.required_scopes,
        "raw_arguments": i.raw_arguments,
        "arguments": serde_json::from_str::<Value>(&i.arguments).unwrap_or(Value::Null),
        "normalized_arguments_hash": i.normalized_arguments_hash,
        "effective_arguments_hash": i.effective_arguments_hash,
        "idempotency_key": i.idempotency_key,
        "argument_trust": i.argument_trust.iter().map(|(k, v)| (k.clone(), Value::String(v.as_str().to_owned()))).collect::<serde_json::Map<_, _>>(),
        "origin_trust": i.origin_trust.as_str(),
        "parallel_group": i.parallel_group.map(|g| g.to_string()),
        "created_at": i.created_at.to_string(),
        "status": i.status.as_str(),
        "policy_decision": i.policy_decision.as_ref().map(|d| serde_json::to_value(d).unwrap_or(Value::Null)),
        "effect_sent_at": time(i.effect_sent_at),
        "suspended_kind": i.suspended_approval.map(|_| "approval"),
        "suspended_ref": i.suspended_approval.map(|a| a.to_string()),
        "structured_result": i.structured_result,
        "output_bytes": i.output_bytes,
        "outcome": i.outcome.as_ref().map(|o| o.to_value()),
        "result_item": result_item,
        "outcome_status": i.outcome_status.map(|s| s.as_str()),
        "reason_code": i.reason_code,
        "updated_at": i.updated_at.to_string(),
    })
}

/// One `uncertain_settlements` row.
pub fn settlement(s: &Settlement) -> Value {
    json!({
        "id": s.id.to_string(),
        "invocation_id": s.invocation_id.to_string(),
        "run_id": s.run_id.to_string(),
        "tenant_id": s.tenant_id,
        "outcome": s.outcome.as_str(),
        "note": s.note,
        "settled_by": s.settled_by,
        "settled_at": s.settled_at.to_string(),
    })
}
