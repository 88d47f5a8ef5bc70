//! Where an invocation's arguments are stored (migration M17, issue 33): each call's content
//! once, beside the script it came from.
//!
//! An invocation has raw arguments (as the planner proposed them) and effective ones (the
//! canonical text of the normalized arguments). For nearly every call the two are the same
//! text, and the PENDING checkpoint that fixed the call's batch already holds the raw
//! arguments. So a row keeps:
//! - `arguments` NULL when it is [`to_canonical_string`] of the raw arguments, which a read
//!   computes again;
//! - `raw_arguments` NULL, with `arguments_checkpoint` and `arguments_call`, when a PENDING
//!   checkpoint of the invocation's run written **in the same transaction** holds the call (its
//!   step, its call id, equal arguments) at that version and index. The transaction knows what
//!   it wrote (`Kept::pending`), so nothing is read to decide; a call of a batch whose PENDING
//!   committed earlier (the later calls of a multi-call step, a resumed step) keeps its raw
//!   arguments inline, as every row written before M17 does.
//!
//! A journal row is never updated or deleted (its triggers refuse both), so a reference stays
//! good for as long as the invocation; a read fetches the call with one lookup of the journal's
//! `(run_id, checkpoint_version)` index (the last column of `rows::INVOCATION_COLUMNS`) and refuses a call whose id is not
//! the invocation's.

use serde_json::Value;

use airlock_core::canonical::to_canonical_string;
use airlock_core::invocation::Invocation;
use airlock_core::run::checkpoint::PendingBatch;
use airlock_core::store::TxError;

use super::rows::json;

/// An invocation's arguments as its row stores them.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Stored {
    /// The raw arguments' JSON text, or `None` when they are referenced (`at`).
    pub(super) raw: Option<String>,
    /// The effective arguments' text, or `None` when it is the canonical text of the raw ones.
    pub(super) effective: Option<String>,
    /// `(checkpoint version, call index)` of the PENDING checkpoint holding the raw arguments.
    pub(super) at: Option<(u32, u32)>,
}

/// How `invocation`'s arguments are stored, given the PENDING checkpoint of its run that this
/// transaction wrote (`(version, batch)`), if any.
pub(super) fn stored(
    invocation: &Invocation,
    pending: Option<(u32, &PendingBatch)>,
) -> Result<Stored, TxError> {
    let at = pending.and_then(|(version, batch)| {
        if batch.step != invocation.step_number {
            return None;
        }
        let index = batch.calls.iter().position(|pinned| {
            pinned.call.call_id == invocation.call_id
                && pinned.call.arguments == invocation.raw_arguments
        })?;
        Some((version, u32::try_from(index).ok()?))
    });
    let raw = match at {
        Some(_) => None,
        None => Some(json(
            &invocation.raw_arguments,
            "tool_invocations.raw_arguments",
        )?),
    };
    let effective = if invocation.arguments == to_canonical_string(&invocation.raw_arguments) {
        None
    } else {
        Some(invocation.arguments.clone())
    };
    Ok(Stored { raw, effective, at })
}

/// Why a stored row's arguments cannot be read back.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unreadable {
    #[error("the PENDING checkpoint its raw arguments refer to holds no such call")]
    Missing,
    #[error("the call its raw arguments refer to is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("the call its raw arguments refer to is call '{found}', not '{expected}'")]
    OtherCall { expected: String, found: String },
}

/// The raw arguments of call `call_id` from its referenced call's JSON text
/// (the last column of `rows::INVOCATION_COLUMNS`; `None` when the lookup found nothing).
pub(super) fn referenced(call: Option<&str>, call_id: &str) -> Result<Value, Unreadable> {
    let text = call.ok_or(Unreadable::Missing)?;
    let mut call: Value = serde_json::from_str(text).map_err(Unreadable::NotJson)?;
    let found = call.get("call_id").and_then(Value::as_str).unwrap_or("");
    if found != call_id {
        return Err(Unreadable::OtherCall {
            expected: call_id.to_owned(),
            found: found.to_owned(),
        });
    }
    call.get_mut("arguments")
        .map(Value::take)
        .ok_or(Unreadable::Missing)
}

/// The effective arguments' text: as stored, else the canonical text of the raw arguments.
pub(super) fn effective(stored: Option<String>, raw: &Value) -> String {
    stored.unwrap_or_else(|| to_canonical_string(raw))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_referenced_call_of_another_id_is_refused() {
        let text = r#"{"call_id":"c2","tool":"t","arguments":{"a":1}}"#;
        assert_eq!(referenced(Some(text), "c2").expect("c2"), json!({"a": 1}));
        assert!(matches!(
            referenced(Some(text), "c1"),
            Err(Unreadable::OtherCall { .. })
        ));
        assert!(matches!(referenced(None, "c1"), Err(Unreadable::Missing)));
        assert!(matches!(
            referenced(Some("{"), "c1"),
            Err(Unreadable::NotJson(_))
        ));
    }
}
