//! Approvals as `input_required` results (SPEC §22.3 item 2): what a sealed `requestState` binds,
//! the keys it is sealed with, and when a state brought back on a retry may move its call.
//!
//! A 2026-07-28 client without tasks is answered, when its call parks, an `input_required`
//! result: one input request (the yes/no approval form) and a `requestState`. The state is
//! sealed by the gateway (an AEAD, in the adapter) under a key kept in the store, so any gateway
//! process of the store opens it; it binds the approval, the run, the tenant, the principal, the
//! tool, the effective arguments hash and the approval's expiry ([`SealedCall`]). On the retry
//! the state is checked against the retried call before anything else happens
//! ([`check_in_tx`]): a state of another principal or tenant, of another call, past its expiry,
//! or whose run has ended (already used) never moves anything.
//!
//! **Keys.** The newest key seals; any stored key opens. A key older than
//! [`KEY_ROTATE_AFTER_SECONDS`] is replaced by a new one at the next seal (old keys still open
//! the states they sealed, which expire with their approvals).

use serde::{Deserialize, Serialize};

use crate::conversation::answer::{CallState, call_state};
use crate::conversation::{call_id_of, process_event};
use crate::events::EventType;
use crate::ids::{ApprovalId, RunId};
use crate::store::{StoreTx, TxError};
use crate::time::Timestamp;

/// A sealing key is replaced after a day.
pub const KEY_ROTATE_AFTER_SECONDS: i64 = 24 * 3600;

/// One AEAD key of the store (256 bits, hex), named by `id` in every state it seals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateKey {
    pub id: String,
    pub secret_hex: String,
    pub created_at: Timestamp,
}

/// What a `requestState` binds (SPEC §22.3 item 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedCall {
    pub approval_id: ApprovalId,
    pub run_id: RunId,
    pub tenant_id: String,
    pub principal_id: String,
    /// The tool's internal name.
    pub tool: String,
    /// The canonical hash of the call's arguments as the client sent them.
    pub arguments_hash: String,
    /// The approval's expiry, microseconds.
    pub expires_at: i64,
    /// Whether the state's input request was the approval form, whose answer on the retry
    /// resolves the approval; `false` for URL mode, where the reviewer answers on the console
    /// page and the retry's answer only says the page was opened.
    pub answers_form: bool,
}

/// Why a state brought back was refused (each is −32602 to the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateRefused {
    #[error("requestState is not one this gateway sealed, or was changed")]
    Unreadable,
    #[error("requestState belongs to another principal")]
    Foreign,
    #[error("requestState was issued for another call")]
    OtherCall,
    #[error("requestState has expired (its approval's expiry passed)")]
    Expired,
    #[error("requestState was already used (its call has moved on)")]
    Used,
}

/// The key to seal with now: the newest, unless it is older than [`KEY_ROTATE_AFTER_SECONDS`]
/// (or there is none), in which case `fresh` is stored and returned.
pub fn sealing_key_in_tx(
    tx: &mut dyn StoreTx,
    fresh: StateKey,
    now: Timestamp,
) -> Result<StateKey, TxError> {
    if let Some(newest) = tx.newest_state_key()?
        && now.as_micros() - newest.created_at.as_micros() < KEY_ROTATE_AFTER_SECONDS * 1_000_000
    {
        return Ok(newest);
    }
    tx.insert_state_key(&fresh)?;
    tx.append_process_event(&process_event(
        EventType::McpStateKeyRotated,
        format!("mcp.state_key.rotated:{}", fresh.id),
        serde_json::json!({"key_id": fresh.id}),
        now,
    ))?;
    Ok(fresh)
}

/// Whether `sealed`, opened from a retried call of `tool` with arguments hashing to
/// `arguments_hash`, sent by `principal` of `tenant`, may move that call now: the state is the
/// caller's, for exactly this call, unexpired, and its run has not ended (a state is good for
/// one call: once the call has an answer the state is used).
pub fn check_in_tx(
    tx: &mut dyn StoreTx,
    sealed: &SealedCall,
    (tenant, principal): (&str, &str),
    (tool, arguments_hash): (&str, &str),
    now: Timestamp,
) -> Result<Result<(), StateRefused>, TxError> {
    #[cfg(feature = "mutants")]
    let principal = if crate::testing::mutants::state_not_bound_to_principal() {
        sealed.principal_id.as_str()
    } else {
        principal
    };
    if sealed.tenant_id != tenant || sealed.principal_id != principal {
        return Ok(Err(StateRefused::Foreign));
    }
    if sealed.tool != tool || sealed.arguments_hash != arguments_hash {
        return Ok(Err(StateRefused::OtherCall));
    }
    if sealed.expires_at <= now.as_micros() {
        return Ok(Err(StateRefused::Expired));
    }
    let Some(run) = tx.run(sealed.run_id)? else {
        return Ok(Err(StateRefused::Unreadable));
    };
    if run.tenant_id != tenant || run.principal_id != sealed.principal_id {
        return Ok(Err(StateRefused::Foreign));
    }
    // Good while the call waits on the approval the state names; once the call has moved on
    // (executing, answered, or its run ended) the state is used.
    match call_state(tx, run.id, 1, &call_id_of(1))? {
        CallState::Parked { approval } if approval.id == sealed.approval_id => {}
        CallState::Parked { .. } => return Ok(Err(StateRefused::OtherCall)),
        _ => return Ok(Err(StateRefused::Used)),
    }
    Ok(Ok(()))
}
