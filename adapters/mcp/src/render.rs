//! The wording of SPEC §19.3: how a committed answer becomes an MCP `tools/call` result, and
//! what a parked call's progress notifications say. The answer itself is chosen by core
//! (`airlock_core::connection::answer`); this module only renders it.

use airlock_core::connection::answer::CallAnswer;
use airlock_core::ids::ApprovalId;
use airlock_core::time::Timestamp;
use serde_json::{Value, json};

/// The one text block of an airlock answer that is not the upstream's result.
fn error_text(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// The `tools/call` result (as JSON) for a committed answer.
///
/// Executed calls return the upstream's result unchanged (content, structuredContent,
/// isError). A tool that failed without an unknown outcome, which §19.3 does not list, is
/// answered `airlock: the call failed ({reason_code}): {message}`.
pub fn call_result(answer: &CallAnswer) -> Value {
    match answer {
        CallAnswer::Executed { structured, .. } => {
            if structured.get("content").is_some() {
                structured.clone()
            } else {
                // Not an upstream result (a tool registered by another adapter): its JSON as
                // text, so the client still sees what it returned.
                json!({"content": [{"type": "text", "text": structured.to_string()}], "structuredContent": structured})
            }
        }
        CallAnswer::Denied {
            reason_code,
            message,
        } => error_text(format!(
            "airlock denied this call ({reason_code}): {message}"
        )),
        CallAnswer::ReviewerDenied { reason } => error_text(format!(
            "airlock denied this call: denied by a reviewer ({})",
            reason.as_deref().unwrap_or("no reason given")
        )),
        CallAnswer::ApprovalExpired => {
            error_text("airlock denied this call: approval expired".to_owned())
        }
        CallAnswer::Uncertain { invocation_id } => error_text(format!(
            "the outcome of this call is unknown; invocation {invocation_id} awaits a human settlement"
        )),
        CallAnswer::Failed {
            reason_code,
            message,
        } => error_text(format!(
            "airlock: the call failed ({reason_code}): {message}"
        )),
    }
}

/// The answer at once to a parked call whose host asked for no progress and is not asked to
/// approve (SPEC §22.3 items 2 and 3): its host would otherwise show nothing until its own
/// timeout. The approval stays pending; the same call sent again binds to it.
pub fn approval_needed_result(approval: ApprovalId, expires_at: Timestamp) -> Value {
    error_text(format!(
        "airlock: this call needs approval {approval} (expires {expires_at}); retry the same call after a reviewer approves it"
    ))
}

/// The message of a parked call's progress notification.
pub fn parked_message(approval: ApprovalId, expires_at: Timestamp) -> String {
    format!("waiting for approval {approval} (expires {expires_at})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_core::ids::InvocationId;
    use airlock_core::vocab::TrustLevel;

    #[test]
    fn a_call_answered_at_once_names_its_approval_its_expiry_and_the_retry() {
        let id = ApprovalId(uuid::Uuid::from_u128(7));
        let at = Timestamp::from_micros(1_768_478_408_000_000);
        let result = approval_needed_result(id, at);
        assert_eq!(result["isError"], true);
        let said = text(&result);
        assert!(said.contains(&id.to_string()), "{said}");
        assert!(said.contains(&at.to_string()), "{said}");
        assert!(said.contains("retry the same call"), "{said}");
    }

    fn text(v: &Value) -> &str {
        v["content"][0]["text"].as_str().unwrap()
    }

    #[test]
    fn each_answer_has_the_wording_of_the_spec() {
        let denied = call_result(&CallAnswer::Denied {
            reason_code: "policy.hardline.protected_path".into(),
            message: "Not performed. Policy does not permit this action.".into(),
        });
        assert_eq!(denied["isError"], true);
        assert_eq!(
            text(&denied),
            "airlock denied this call (policy.hardline.protected_path): Not performed. Policy does not permit this action."
        );
        let reviewer = call_result(&CallAnswer::ReviewerDenied {
            reason: Some("not today".into()),
        });
        assert_eq!(
            text(&reviewer),
            "airlock denied this call: denied by a reviewer (not today)"
        );
        assert_eq!(
            text(&call_result(&CallAnswer::ApprovalExpired)),
            "airlock denied this call: approval expired"
        );
        let id = InvocationId(uuid::Uuid::nil());
        assert_eq!(
            text(&call_result(&CallAnswer::Uncertain { invocation_id: id })),
            format!(
                "the outcome of this call is unknown; invocation {id} awaits a human settlement"
            )
        );
    }

    #[test]
    fn an_executed_result_is_passed_through_unchanged() {
        let upstream = json!({"content": [{"type": "text", "text": "hi"}], "structuredContent": {"a": 1}, "isError": true});
        assert_eq!(
            call_result(&CallAnswer::Executed {
                structured: upstream.clone(),
                trust: TrustLevel::ExternalUntrusted
            }),
            upstream
        );
    }
}
