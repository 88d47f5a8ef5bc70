//! Where a finished call's outcome and result item are stored (migration M20, issue 33).
//!
//! A finished invocation keeps its outcome (`{"status", "action", "reason_code", "message",
//! "retryable", "remediation"}`) and its result item (the canonical text the planner and the
//! MCP client are given), yet for nearly every call both follow from columns the row already
//! has. Together they were 400 of a 1 KB write's 1.3 KB row. So a row keeps `result_item` NULL,
//! with `result_trust` naming the item's trust level, when the item is exactly the one
//! [`item_text`] builds from the row; and such a row also keeps `outcome` NULL when the call
//! succeeded and its outcome is exactly [`succeeded`]'s. `result_trust` is the one mark of a
//! derived row: an outcome left out of a row without it is no outcome, which a finished row's
//! CHECK refuses.
//!
//! **The derivation belongs to this store, not to core.** A row written today must read back
//! the same text for as long as the store exists, so what is derived is built here from frozen
//! parts (the success outcome's constants, the item's five fields, canonical JSON), and never
//! from core's tables of messages and remediations, which may grow: a reason code that gains a
//! message of its own would otherwise change what every earlier row of that code reads back.
//! When a row is written, the store builds the derived text and compares it with core's; a
//! value it would not rebuild byte for byte (a failure's outcome, a message of its own, an item
//! of another shape, an outcome core changed) is stored whole, as every row before M20 is.

use serde::Deserialize;
use serde_json::{Value, json};

use airlock_core::canonical::to_canonical_string;
use airlock_core::invocation::Invocation;
use airlock_core::invocation::outcome::{Outcome, ResultItem};
use airlock_core::store::TxError;
use airlock_core::vocab::{OutcomeStatus, Remediation, TrustLevel};

/// A finished invocation's outcome and result item as its row stores them.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Stored {
    /// The outcome's JSON text, or `None` when it is derived (or there is none).
    pub(super) outcome: Option<String>,
    /// The result item's text, or `None` when it is derived (or there is none).
    pub(super) result_item: Option<String>,
    /// The derived result item's trust level; `None` when the item is stored or absent.
    pub(super) result_trust: Option<TrustLevel>,
}

/// The reason code, message, retryable flag and remediation of a success, as M20 derives them.
const SUCCEEDED_REASON: &str = "tool.succeeded";
const SUCCEEDED_MESSAGE: &str = "Completed.";

/// The outcome M20 derives for a succeeded row of `tool_name`.
fn succeeded(tool_name: &str) -> Outcome {
    Outcome {
        status: OutcomeStatus::Succeeded,
        action: tool_name.to_owned(),
        reason_code: SUCCEEDED_REASON.to_owned(),
        message: SUCCEEDED_MESSAGE.to_owned(),
        retryable: false,
        remediation: Remediation::None,
    }
}

/// What a derived result item's content is built from.
enum ItemSource<'a> {
    /// A success: its structured result, under the row's tool name.
    Success(Option<&'a Value>),
    /// Anything else: the outcome as the row stores it (the JSON of its `outcome` column),
    /// under the outcome's action.
    Failure(&'a Value),
}

/// The result item M20 derives, as canonical JSON text; `None` when the row lacks what the
/// item needs.
fn item_text(
    call_id: &str,
    tool_name: &str,
    trust: TrustLevel,
    source: ItemSource<'_>,
) -> Option<String> {
    let (name, is_error, content) = match source {
        ItemSource::Success(structured) => (tool_name, false, to_canonical_string(structured?)),
        ItemSource::Failure(outcome) => (
            outcome.get("action")?.as_str()?,
            true,
            to_canonical_string(outcome),
        ),
    };
    Some(canonical_item(
        call_id,
        &content,
        is_error,
        name,
        trust.as_str(),
    ))
}

/// A result item's text from its five fields, in canonical JSON: the rule the items M20
/// derives are built by, and the one M22 rebuilds a `tool.call.*` event's item with.
pub(super) fn canonical_item(
    call_id: &str,
    content: &str,
    is_error: bool,
    name: &str,
    trust: &str,
) -> String {
    to_canonical_string(&json!({
        "call_id": call_id,
        "content": content,
        "is_error": is_error,
        "name": name,
        "trust": trust,
    }))
}

/// How `invocation`'s outcome and result item are stored.
pub(super) fn stored(invocation: &Invocation) -> Result<Stored, TxError> {
    let outcome_text = invocation
        .outcome
        .as_ref()
        .map(|outcome| {
            serde_json::to_string(outcome).map_err(|e| {
                TxError::Backend(format!("cannot encode tool_invocations.outcome: {e}"))
            })
        })
        .transpose()?;
    let Some(outcome) = &invocation.outcome else {
        return Ok(Stored {
            outcome: outcome_text,
            result_item: invocation.result_item.clone(),
            result_trust: None,
        });
    };
    let outcome_derived = invocation.outcome_status == Some(OutcomeStatus::Succeeded)
        && invocation.reason_code.as_deref() == Some(SUCCEEDED_REASON)
        && *outcome == succeeded(&invocation.tool_name);
    let outcome_value = serde_json::to_value(outcome)
        .map_err(|e| TxError::Backend(format!("cannot encode tool_invocations.outcome: {e}")))?;
    let source = match outcome.status {
        OutcomeStatus::Succeeded => ItemSource::Success(invocation.structured_result.as_ref()),
        _ => ItemSource::Failure(&outcome_value),
    };
    let result_trust = invocation.result_item.as_deref().and_then(|text| {
        let trust = ResultItem::parse(text)?.trust;
        let derived = item_text(&invocation.call_id, &invocation.tool_name, trust, source)?;
        (derived == text).then_some(trust)
    });
    Ok(Stored {
        outcome: if outcome_derived && result_trust.is_some() {
            None
        } else {
            outcome_text
        },
        result_item: match result_trust {
            Some(_) => None,
            None => invocation.result_item.clone(),
        },
        result_trust,
    })
}

/// Why a stored row's outcome or result item cannot be read back.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unreadable {
    #[error("the outcome is left out but the row is not a success of reason tool.succeeded")]
    NoOutcomeColumns,
    #[error("the result item is left out but the row has no outcome to derive it from")]
    NoOutcome,
    #[error("the result item is left out but the row lacks what it is built from")]
    NoStructuredResult,
    #[error("the outcome is not JSON of an outcome: {0}")]
    Json(#[from] serde_json::Error),
}

/// The columns a row's outcome and result item are read from.
pub(super) struct Columns<'a> {
    pub(super) call_id: &'a str,
    pub(super) tool_name: &'a str,
    pub(super) structured_result: Option<&'a Value>,
    pub(super) outcome: Option<String>,
    pub(super) result_item: Option<String>,
    pub(super) outcome_status: Option<OutcomeStatus>,
    pub(super) reason_code: Option<&'a str>,
    pub(super) result_trust: Option<TrustLevel>,
}

/// A row's outcome and result item, stored or derived.
pub(super) fn read(columns: Columns<'_>) -> Result<(Option<Outcome>, Option<String>), Unreadable> {
    let stored: Option<Value> = columns
        .outcome
        .map(|text| serde_json::from_str(&text))
        .transpose()?;
    let outcome = match (&stored, columns.result_trust) {
        (Some(value), _) => Some(Outcome::deserialize(value)?),
        (None, None) => None,
        (None, Some(_)) => {
            if columns.outcome_status != Some(OutcomeStatus::Succeeded)
                || columns.reason_code != Some(SUCCEEDED_REASON)
            {
                return Err(Unreadable::NoOutcomeColumns);
            }
            Some(succeeded(columns.tool_name))
        }
    };
    let result_item = match (columns.result_item, columns.result_trust) {
        (Some(text), _) => Some(text),
        (None, None) => None,
        (None, Some(trust)) => {
            let source = match (&outcome, &stored) {
                (Some(outcome), _) if outcome.status == OutcomeStatus::Succeeded => {
                    ItemSource::Success(columns.structured_result)
                }
                // A derived outcome is a success's, so any other outcome is stored.
                (Some(_), Some(value)) => ItemSource::Failure(value),
                _ => return Err(Unreadable::NoOutcome),
            };
            Some(
                item_text(columns.call_id, columns.tool_name, trust, source)
                    .ok_or(Unreadable::NoStructuredResult)?,
            )
        }
    };
    Ok((outcome, result_item))
}
