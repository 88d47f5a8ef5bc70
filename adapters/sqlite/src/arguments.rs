//! Where a call's content is stored (migrations M17 and M18, issue 33): once, beside the
//! script it came from, in the PENDING checkpoint that fixed its batch.
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
//! A finished step's record refers to the same checkpoint for its calls when core names it
//! ([`calls_of_step`]).
//!
//! A journal row is never updated or deleted (its triggers refuse both), so a reference stays
//! good for as long as the invocation; a read fetches the call with one lookup of the journal's
//! `(run_id, checkpoint_version)` index (`rows::from_pending_checkpoint!`) and refuses a call
//! whose id is not the invocation's, or a batch that is not the record's step.

use serde_json::Value;

use airlock_core::canonical::to_canonical_string;
use airlock_core::invocation::Invocation;
use airlock_core::ports::ProposedCall;
use airlock_core::run::checkpoint::PendingBatch;
use airlock_core::store::TxError;

use super::stored_state::{self, Scripts, Unresolved};

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
        None => Some(
            serde_json::to_string(&invocation.raw_arguments).map_err(|e| {
                TxError::Backend(format!("cannot encode tool_invocations.raw_arguments: {e}"))
            })?,
        ),
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
    #[error("the PENDING checkpoint it refers to holds no such call or batch")]
    Missing,
    #[error("the call it refers to cannot be read: {0}")]
    Unresolved(#[from] Unresolved),
    #[error("the call its raw arguments refer to is call '{found}', not '{expected}'")]
    OtherCall { expected: String, found: String },
    #[error("the batch its calls refer to is step {found}'s, not step {expected}'s")]
    OtherStep { expected: u32, found: u32 },
}

/// The raw arguments of call `call_id`, kept at `(version, index)`: from the PENDING batch this
/// transaction wrote (`written`, its version and batch) when that is the one, else from the
/// call's JSON text as the journal holds it (the last column of `rows::INVOCATION_COLUMNS`;
/// `None` when the lookup found nothing), which may refer to run `run`'s script (M21).
pub(super) fn referenced(
    written: Option<(u32, &PendingBatch)>,
    (version, index): (u32, usize),
    stored: Option<&str>,
    call_id: &str,
    (scripts, run): (Scripts<'_>, &str),
) -> Result<Value, Unreadable> {
    let call: ProposedCall = match written {
        Some((written, batch)) if written == version => batch
            .calls
            .get(index)
            .map(|pinned| pinned.call.clone())
            .ok_or(Unreadable::Missing)?,
        _ => stored_state::decode_call(stored.ok_or(Unreadable::Missing)?, scripts, run)?,
    };
    if call.call_id != call_id {
        return Err(Unreadable::OtherCall {
            expected: call_id.to_owned(),
            found: call.call_id,
        });
    }
    Ok(call.arguments)
}

/// A finished step's calls, kept in the pending batch of checkpoint `version`: the batch this
/// transaction wrote (`written`) when that is the one, else the batch's JSON text as the journal
/// holds it (`None` when the lookup found nothing; its calls may refer to run `run`'s script,
/// M21). It must be step `step`'s batch.
pub(super) fn calls_of_step(
    written: Option<(u32, &PendingBatch)>,
    version: u32,
    stored: Option<&str>,
    step: u32,
    (scripts, run): (Scripts<'_>, &str),
) -> Result<Vec<ProposedCall>, Unreadable> {
    let batch: PendingBatch = match written {
        Some((written, batch)) if written == version => batch.clone(),
        _ => stored_state::decode_batch(stored.ok_or(Unreadable::Missing)?, scripts, run)?,
    };
    if batch.step != step {
        return Err(Unreadable::OtherStep {
            expected: step,
            found: batch.step,
        });
    }
    Ok(batch.calls.into_iter().map(|pinned| pinned.call).collect())
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
        let text =
            r#"{"call_id":"c2","tool":"t","version":null,"arguments":{"a":1},"argument_trust":{}}"#;
        let no_script = |_: &str| Err("no script".to_owned());
        let found = |call_id| referenced(None, (1, 0), Some(text), call_id, (&no_script, "r"));
        assert_eq!(found("c2").expect("c2"), json!({"a": 1}));
        assert!(matches!(found("c1"), Err(Unreadable::OtherCall { .. })));
        assert!(matches!(
            referenced(None, (1, 0), None, "c1", (&no_script, "r")),
            Err(Unreadable::Missing)
        ));
        assert!(matches!(
            referenced(None, (1, 0), Some("{"), "c1", (&no_script, "r")),
            Err(Unreadable::Unresolved(Unresolved::NotJson(_)))
        ));
    }
}
