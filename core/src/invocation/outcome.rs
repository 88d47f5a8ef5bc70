//! Outcomes and result items (SPEC §9.3): the one table of reason codes and the messages the
//! planner may see. Messages never contain tool, rule, profile or external text.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical::to_canonical_string;
use crate::vocab::{InvocationStatus, OutcomeStatus, Remediation, TrustLevel};

/// The six-field outcome stored on every terminal invocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    pub status: OutcomeStatus,
    pub action: String,
    pub reason_code: String,
    pub message: String,
    pub retryable: bool,
    pub remediation: Remediation,
}

/// Reason codes core itself produces.
pub mod codes {
    pub const SUCCEEDED: &str = "tool.succeeded";
    pub const SCOPE_MISSING: &str = "policy.scope.missing";
    pub const UNKNOWN_TOOL: &str = "policy.matrix.unknown_tool";
    pub const REVALIDATION_CHANGED: &str = "policy.revalidation.changed";
    pub const REVALIDATION_ESCALATED: &str = "policy.revalidation.escalated";
    pub const UNCERTAIN_REPEAT: &str = "policy.uncertain.repeat";
    pub const UNCERTAIN_IN_FLIGHT: &str = "policy.uncertain.in_flight";
    pub const APPROVAL_DENIED: &str = "approval.denied";
    pub const APPROVAL_EXPIRED: &str = "approval.expired";
    pub const APPROVAL_CANCELLED: &str = "approval.cancelled";
    pub const RUN_CANCELLED: &str = "tool.run_cancelled";
    pub const RUN_TERMINATED: &str = "tool.run_terminated";
    pub const INTERRUPTED: &str = "tool.interrupted";
    pub const ARGUMENTS_INVALID: &str = "tool.arguments_invalid";
    pub const TIMEOUT: &str = "tool.timeout";
    pub const OUTPUT_INVALID: &str = "tool.output_invalid";
    pub const INTERNAL_ERROR: &str = "tool.internal_error";
    pub const OUTCOME_UNKNOWN: &str = "tool.outcome_unknown";
}

const POLICY_DENIED: &str = "Not performed. Policy does not permit this action.";

/// The message for a reason code (SPEC §9.3 and the builtin codes of §12.5). Scope refusals
/// carry their scopes and are built by [`crate::scope::missing_scopes_message`].
pub fn message_for(reason_code: &str) -> &'static str {
    match reason_code {
        codes::SUCCEEDED => "Completed.",
        codes::UNKNOWN_TOOL => "Not performed. The requested capability is unknown.",
        "policy.matrix.workspace_read" | "policy.matrix.workspace_write" => {
            "Not performed. The path is outside the workspace."
        }
        "policy.unclassifiable_action" => "Not performed. The action could not be classified.",
        codes::REVALIDATION_CHANGED => "Not performed. The approved action changed.",
        codes::REVALIDATION_ESCALATED => "Not performed. Policy changed before execution.",
        codes::UNCERTAIN_REPEAT => {
            "Not performed. An identical earlier call has an unknown outcome."
        }
        codes::UNCERTAIN_IN_FLIGHT => {
            "Not performed. An identical earlier call is still in flight; its outcome is not known yet."
        }
        codes::APPROVAL_DENIED => "Not performed. Approval was required and was denied.",
        codes::APPROVAL_EXPIRED => "Not performed. The approval expired.",
        codes::APPROVAL_CANCELLED => "Not performed. The approval was cancelled.",
        codes::RUN_CANCELLED => "Not performed. The run was cancelled.",
        codes::RUN_TERMINATED => "Not performed. The run ended before this call ran.",
        codes::INTERRUPTED => "The run ended before this call completed.",
        codes::ARGUMENTS_INVALID => "The tool arguments were invalid.",
        codes::TIMEOUT => "The tool did not finish in time.",
        codes::OUTPUT_INVALID => "The tool returned data outside its declared contract.",
        codes::INTERNAL_ERROR => "The tool could not complete because of an internal error.",
        codes::OUTCOME_UNKNOWN => "The outcome of this call is unknown. Do not repeat it.",
        "policy.skill.origin_untrusted" => POLICY_DENIED,
        code if code.starts_with("policy.matrix.") || code.starts_with("policy.hardline.") => {
            POLICY_DENIED
        }
        code => builtin_failure_message(code)
            .unwrap_or("The tool could not complete for a platform-defined reason."),
    }
}

/// The failure codes of the builtin tools (SPEC §12.5) and their messages. All of them carry
/// `remediation: modify_arguments`; a plug-in tool reporting a code of the same shape that is
/// not listed here (say `tool.not_found.record`) gets the "platform-defined" message and
/// `remediation: none`, as §9.3's "any other" row says.
const BUILTIN_FAILURES: &[(&str, &str)] = &[
    (
        "tool.not_found.no_such_path",
        "No such path in the workspace.",
    ),
    (
        "tool.invalid_arguments.not_text",
        "Not a UTF-8 text file. This tool reads text only.",
    ),
    (
        "tool.invalid_arguments.not_a_file",
        "That path is not a regular file. Use workspace.list_files.",
    ),
    (
        "tool.invalid_arguments.not_a_directory",
        "That path is a file. Use workspace.read_text.",
    ),
    (
        "tool.invalid_arguments.too_large",
        "The file exceeds the read limit.",
    ),
    (
        "tool.invalid_arguments.too_many_entries",
        "The directory tree is too large to list. List a subdirectory.",
    ),
    (
        "tool.invalid_arguments.unknown_timezone",
        "Unknown time zone. Use UTC or an offset such as +02:00.",
    ),
    ("tool.invalid_arguments.syntax", EXPRESSION_FAILED),
    ("tool.invalid_arguments.division_by_zero", EXPRESSION_FAILED),
    (
        "tool.invalid_arguments.result_out_of_range",
        EXPRESSION_FAILED,
    ),
    (
        "tool.invalid_arguments.expression_too_long",
        EXPRESSION_FAILED,
    ),
    (
        "tool.invalid_arguments.expression_too_deep",
        EXPRESSION_FAILED,
    ),
];

const EXPRESSION_FAILED: &str = "The expression could not be evaluated.";

fn builtin_failure_message(reason_code: &str) -> Option<&'static str> {
    BUILTIN_FAILURES
        .iter()
        .find(|(code, _)| *code == reason_code)
        .map(|(_, message)| *message)
}

/// Whether the remediation for `reason_code` is to change the arguments: invalid arguments
/// and the builtin failure codes (SPEC §9.3, §12.5).
fn modifies_arguments(reason_code: &str) -> bool {
    reason_code == codes::ARGUMENTS_INVALID || builtin_failure_message(reason_code).is_some()
}

/// A reason code a tool may report: `^tool\.[a-z_]+(\.[a-z_]+)*$`; others become
/// `tool.internal_error`.
pub fn is_tool_reason_code(code: &str) -> bool {
    code.strip_prefix("tool.").is_some_and(|rest| {
        rest.split('.').all(|segment| {
            !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        })
    })
}

impl Outcome {
    /// An outcome for a reason code from the table.
    pub fn new(status: OutcomeStatus, action: &str, reason_code: &str) -> Outcome {
        Outcome::with_message(
            status,
            action,
            reason_code,
            message_for(reason_code).to_owned(),
        )
    }

    /// An outcome whose message was built elsewhere from table parts (scope refusals).
    pub fn with_message(
        status: OutcomeStatus,
        action: &str,
        reason_code: &str,
        message: String,
    ) -> Outcome {
        Outcome {
            status,
            action: action.to_owned(),
            reason_code: reason_code.to_owned(),
            message,
            retryable: reason_code == codes::TIMEOUT,
            remediation: if modifies_arguments(reason_code) {
                Remediation::ModifyArguments
            } else {
                Remediation::None
            },
        }
    }

    pub fn succeeded(action: &str) -> Outcome {
        Outcome::new(OutcomeStatus::Succeeded, action, codes::SUCCEEDED)
    }

    /// The invocation status this outcome closes a row with.
    pub fn invocation_status(&self) -> InvocationStatus {
        match self.status {
            OutcomeStatus::Succeeded => InvocationStatus::Succeeded,
            OutcomeStatus::Failed => InvocationStatus::Failed,
            OutcomeStatus::Denied => InvocationStatus::Denied,
            OutcomeStatus::Uncertain => InvocationStatus::Uncertain,
        }
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// What the planner reads for one call; stored as canonical JSON text and replayed
/// byte-identically.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultItem {
    pub call_id: String,
    pub name: String,
    pub is_error: bool,
    pub trust: TrustLevel,
    pub content: String,
}

impl ResultItem {
    pub fn success(call_id: &str, name: &str, trust: TrustLevel, structured: &Value) -> ResultItem {
        ResultItem {
            call_id: call_id.to_owned(),
            name: name.to_owned(),
            is_error: false,
            trust,
            content: to_canonical_string(structured),
        }
    }

    /// A failure, denial or unknown outcome; refusals and sweep closures use `internal_tool`.
    pub fn from_outcome(call_id: &str, outcome: &Outcome, trust: TrustLevel) -> ResultItem {
        ResultItem {
            call_id: call_id.to_owned(),
            name: outcome.action.clone(),
            is_error: true,
            trust,
            content: to_canonical_string(&outcome.to_value()),
        }
    }

    /// The stored form: canonical JSON text.
    pub fn to_canonical(&self) -> String {
        to_canonical_string(&serde_json::to_value(self).unwrap_or(Value::Null))
    }

    pub fn parse(text: &str) -> Option<ResultItem> {
        serde_json::from_str(text).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_messages() {
        assert_eq!(
            message_for("policy.hardline.host_path"),
            "Not performed. Policy does not permit this action."
        );
        assert_eq!(
            message_for("policy.matrix.workspace_write"),
            "Not performed. The path is outside the workspace."
        );
        assert_eq!(
            message_for("tool.something_else"),
            "The tool could not complete for a platform-defined reason."
        );
    }

    #[test]
    fn timeout_is_the_only_retryable_outcome() {
        assert!(Outcome::new(OutcomeStatus::Failed, "t.x", codes::TIMEOUT).retryable);
        assert!(!Outcome::new(OutcomeStatus::Uncertain, "t.x", codes::OUTCOME_UNKNOWN).retryable);
        let invalid = Outcome::new(OutcomeStatus::Failed, "t.x", codes::ARGUMENTS_INVALID);
        assert_eq!(invalid.remediation, Remediation::ModifyArguments);
    }

    #[test]
    fn only_listed_codes_ask_for_other_arguments() {
        let remediation = |code| Outcome::new(OutcomeStatus::Failed, "t.x", code).remediation;
        for (code, _) in BUILTIN_FAILURES {
            assert_eq!(remediation(code), Remediation::ModifyArguments, "{code}");
        }
        assert_eq!(
            message_for("tool.invalid_arguments.division_by_zero"),
            "The expression could not be evaluated."
        );
        // A plug-in tool's code of the same shape is "any other" (SPEC §9.3): the platform
        // message and no remediation.
        for code in [
            "tool.not_found.record",
            "tool.invalid_arguments.bad_currency",
        ] {
            assert_eq!(remediation(code), Remediation::None, "{code}");
            assert_eq!(
                message_for(code),
                "The tool could not complete for a platform-defined reason."
            );
        }
    }

    #[test]
    fn tool_reason_code_grammar() {
        assert!(is_tool_reason_code("tool.not_found.no_such_path"));
        assert!(!is_tool_reason_code("tool."));
        assert!(!is_tool_reason_code("tool.Bad"));
        assert!(!is_tool_reason_code("policy.matrix.none"));
        assert!(!is_tool_reason_code("tool.a..b"));
    }

    #[test]
    fn result_items_are_canonical() {
        let outcome = Outcome::succeeded("math.calculate");
        let item = ResultItem::from_outcome("c1", &outcome, TrustLevel::InternalTool);
        let text = item.to_canonical();
        assert!(
            text.starts_with(r#"{"call_id":"c1","content":"{\"action\":\"math.calculate\""#),
            "{text}"
        );
        assert_eq!(ResultItem::parse(&text), Some(item));
    }
}
