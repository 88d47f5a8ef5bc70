//! What a live client is told about one of its calls (SPEC §19.3), read from committed rows only:
//! an answer exists once the call's FINISH, denial or refusal has committed, never earlier.
//! The gateway renders these into MCP results; the choice of answer is made here.

use serde_json::Value;

use crate::approval::Approval;
use crate::events::keys;
use crate::ids::{InvocationId, RunId};
use crate::invocation::outcome::{ResultItem, codes};
use crate::store::{StoreTx, TxError};
use crate::vocab::{InvocationStatus, TrustLevel};

/// A closed call's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum CallAnswer {
    /// The tool ran and returned: its structured result, unchanged, with the trust it carries.
    Executed {
        structured: Value,
        trust: TrustLevel,
    },
    /// The tool ran (or was started) and failed without an unknown outcome.
    Failed {
        reason_code: String,
        message: String,
    },
    /// Denied by policy, refused before a row existed, or closed by revalidation or the run's
    /// end.
    Denied {
        reason_code: String,
        message: String,
    },
    /// A reviewer denied the approval; `reason` is theirs.
    ReviewerDenied { reason: Option<String> },
    /// The approval expired before anyone resolved it.
    ApprovalExpired,
    /// The outcome is unknown; the invocation waits in the review queue (§9.5).
    Uncertain { invocation_id: InvocationId },
}

/// Where a call stands, as far as the store knows.
#[derive(Debug, Clone, PartialEq)]
pub enum CallState {
    /// Nothing of the call is recorded: the run was not asked for its step yet, or it never
    /// recorded it.
    Unrecorded,
    /// Waiting for its approval.
    Parked {
        approval: Box<Approval>,
    },
    /// Authorized or running: not closed yet.
    InFlight,
    Answered(CallAnswer),
}

/// The state of the call `call_id` of `step` in `run`.
pub fn call_state(
    tx: &mut dyn StoreTx,
    run: RunId,
    step: u32,
    call_id: &str,
) -> Result<CallState, TxError> {
    if let Some(row) = tx.invocation_by_call(run, step, call_id)? {
        return Ok(match row.status {
            InvocationStatus::WaitingForApproval => match tx.approval_by_action(row.id)? {
                Some(approval) => CallState::Parked {
                    approval: Box::new(approval),
                },
                None => CallState::InFlight,
            },
            InvocationStatus::Proposed
            | InvocationStatus::Authorized
            | InvocationStatus::Running => CallState::InFlight,
            InvocationStatus::Succeeded => {
                let trust = row
                    .result_item
                    .as_deref()
                    .and_then(ResultItem::parse)
                    .map_or(TrustLevel::ExternalUntrusted, |item| item.trust);
                CallState::Answered(CallAnswer::Executed {
                    structured: row.structured_result.clone().unwrap_or(Value::Null),
                    trust,
                })
            }
            InvocationStatus::Uncertain => CallState::Answered(CallAnswer::Uncertain {
                invocation_id: row.id,
            }),
            InvocationStatus::Failed | InvocationStatus::Denied => {
                let (reason_code, message) = row
                    .outcome
                    .as_ref()
                    .map(|o| (o.reason_code.clone(), o.message.clone()))
                    .unwrap_or_else(|| (codes::INTERNAL_ERROR.to_owned(), String::new()));
                CallState::Answered(match reason_code.as_str() {
                    codes::APPROVAL_DENIED => CallAnswer::ReviewerDenied {
                        reason: tx
                            .approval_by_action(row.id)?
                            .and_then(|a| a.resolution_reason),
                    },
                    codes::APPROVAL_EXPIRED => CallAnswer::ApprovalExpired,
                    _ if row.status == InvocationStatus::Failed => CallAnswer::Failed {
                        reason_code,
                        message,
                    },
                    _ => CallAnswer::Denied {
                        reason_code,
                        message,
                    },
                })
            }
        });
    }
    let Some(event) = tx.event_by_key(&keys::refused(run, step, call_id))? else {
        return Ok(CallState::Unrecorded);
    };
    let reason_code = event.payload["reason_code"]
        .as_str()
        .unwrap_or(codes::INTERNAL_ERROR)
        .to_owned();
    let message = event.payload["result_item"]
        .as_str()
        .and_then(ResultItem::parse)
        .and_then(|item| serde_json::from_str::<Value>(&item.content).ok())
        .and_then(|content| content["message"].as_str().map(str::to_owned))
        .unwrap_or_default();
    Ok(CallState::Answered(
        if reason_code == codes::ARGUMENTS_INVALID {
            CallAnswer::Failed {
                reason_code,
                message,
            }
        } else {
            CallAnswer::Denied {
                reason_code,
                message,
            }
        },
    ))
}
