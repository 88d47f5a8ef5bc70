//! Where a finished call's outcome and result item are stored (migration M20, issue 33).
//!
//! A finished invocation keeps its outcome (`{"status", "action", "reason_code", "message",
//! "retryable", "remediation"}`) and its result item (the canonical text the planner and the
//! MCP client are given), yet for nearly every call both follow from columns the row already
//! has: the outcome from `outcome_status`, `tool_name` and `reason_code`
//! ([`Outcome::new`]), the result item from `call_id`, `tool_name`, the structured result (a
//! success) or the outcome (anything else) and the item's trust level. Together they were
//! 400 of a 1 KB write's 1.3 KB row. So a row keeps `result_item` NULL, with `result_trust`
//! naming the item's trust level, when the item is [`ResultItem::success`] or
//! [`ResultItem::from_outcome`] of the row, byte for byte; and such a row also keeps `outcome`
//! NULL when it is `Outcome::new` of its `outcome_status`, `tool_name` and `reason_code`.
//! `result_trust` is the one mark of a derived row: an outcome left out of a row without it is
//! no outcome, which a finished row's CHECK refuses.
//!
//! Each is decided by deriving the value again when the row is written and comparing it with
//! the value core gave, so a read derives exactly what was written; anything else (a message
//! of its own, an item of another shape) is stored whole, as every row written before M20 is.

use serde_json::Value;

use airlock_core::invocation::Invocation;
use airlock_core::invocation::outcome::{Outcome, ResultItem};
use airlock_core::store::TxError;
use airlock_core::vocab::{OutcomeStatus, TrustLevel};

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

/// The outcome that `outcome_status`, `tool_name` and `reason_code` give.
fn derived_outcome(status: OutcomeStatus, tool_name: &str, reason_code: &str) -> Outcome {
    Outcome::new(status, tool_name, reason_code)
}

/// The result item a row gives with `trust`: a success's from its structured result, any
/// other from its outcome.
fn derived_item(
    call_id: &str,
    tool_name: &str,
    trust: TrustLevel,
    structured_result: Option<&Value>,
    outcome: &Outcome,
) -> Option<ResultItem> {
    match outcome.status {
        OutcomeStatus::Succeeded => structured_result
            .map(|structured| ResultItem::success(call_id, tool_name, trust, structured)),
        _ => Some(ResultItem::from_outcome(call_id, outcome, trust)),
    }
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
    let outcome_derived = invocation.outcome_status == Some(outcome.status)
        && invocation.reason_code.as_deref() == Some(outcome.reason_code.as_str())
        && *outcome == derived_outcome(outcome.status, &invocation.tool_name, &outcome.reason_code);
    let result_trust = invocation.result_item.as_deref().and_then(|text| {
        let item = ResultItem::parse(text)?;
        let derived = derived_item(
            &invocation.call_id,
            &invocation.tool_name,
            item.trust,
            invocation.structured_result.as_ref(),
            outcome,
        )?;
        (derived.to_canonical() == text).then_some(item.trust)
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
    #[error("the outcome is left out but the row has no outcome status or reason code")]
    NoOutcomeColumns,
    #[error("the result item is left out but the row has no outcome to derive it from")]
    NoOutcome,
    #[error("a succeeded result item is left out but the row has no structured result")]
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
    let outcome = match (columns.outcome, columns.result_trust) {
        (Some(text), _) => Some(serde_json::from_str(&text)?),
        (None, None) => None,
        (None, Some(_)) => Some(derived_outcome(
            columns.outcome_status.ok_or(Unreadable::NoOutcomeColumns)?,
            columns.tool_name,
            columns.reason_code.ok_or(Unreadable::NoOutcomeColumns)?,
        )),
    };
    let result_item = match (columns.result_item, columns.result_trust) {
        (Some(text), _) => Some(text),
        (None, None) => None,
        (None, Some(trust)) => {
            let outcome = outcome.as_ref().ok_or(Unreadable::NoOutcome)?;
            let item = derived_item(
                columns.call_id,
                columns.tool_name,
                trust,
                columns.structured_result,
                outcome,
            )
            .ok_or(Unreadable::NoStructuredResult)?;
            Some(item.to_canonical())
        }
    };
    Ok((outcome, result_item))
}
