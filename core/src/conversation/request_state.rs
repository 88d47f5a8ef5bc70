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
//! **Relayed rounds** (SPEC §23). An upstream that needs input answers a 2026-07-28 client's call
//! (or `prompts/get`, `resources/read`) with an `input_required` result of its own. The gateway
//! passes its input requests on, and its `requestState` inside a state of the gateway's own
//! ([`SealedRelay`]): the client never sees or edits the upstream's state, and a state comes back
//! only with the request it was issued for, from its principal, before its expiry, once
//! ([`take_relay_in_tx`]). The retry is then a new request: a retried call passes the policy
//! gate again, as any call does.
//!
//! **Keys.** The newest key seals; any stored key opens. A key older than
//! [`KEY_ROTATE_AFTER_SECONDS`] is replaced by a new one at the next seal (old keys still open
//! the states they sealed, which expire with their approvals).

use serde::{Deserialize, Serialize};

use crate::conversation::answer::{CallState, call_state};
pub use crate::conversation::record::StateKey;
use crate::conversation::{call_id_of, process_event};
use crate::events::EventType;
use crate::ids::{ApprovalId, RunId};
use crate::store::{StoreTx, TxError};
use crate::time::Timestamp;

/// A sealing key is replaced after a day.
pub const KEY_ROTATE_AFTER_SECONDS: i64 = 24 * 3600;

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

/// How long a relayed round's state may come back: the client may have a person answer a form.
pub const RELAY_STATE_SECONDS: i64 = 3600;

/// What a relayed round's `requestState` binds (SPEC §23): the request it answers, who sent
/// it, until when, and the upstream's own state, returned to the upstream on the retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedRelay {
    /// Names this state for its single use (a random id from the sealing adapter).
    pub state_id: String,
    pub tenant_id: String,
    pub principal_id: String,
    /// The request it answers: `tools/call` with the tool's internal name, or `prompts/get`
    /// or `resources/read` with the exposed prompt name or URI.
    pub method: String,
    pub target: String,
    /// The canonical hash of the request's arguments (`{}` for a resource).
    pub arguments_hash: String,
    /// Microseconds.
    pub expires_at: i64,
    /// The upstream's `requestState`, if it sent one.
    pub upstream_state: Option<String>,
    /// The round is a 2025-11-25 upstream's in-call request, held open by the gateway process
    /// that sealed this state (it has no state of its own to carry): only that process can
    /// answer it.
    #[serde(default)]
    pub held: bool,
}

/// A sealed `requestState` of either kind: an approval's (§22.3 item 2) or a relayed round's
/// (§23).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Sealed {
    Approval(SealedCall),
    Relay(SealedRelay),
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
    #[error("requestState was issued for another kind of request")]
    OtherKind,
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

/// What every sealed state keeps on its retry, in this order: it is the caller's (tenant and
/// principal), it comes back with the very request it was issued for (`same_request`), and its
/// expiry (microseconds) has not passed.
fn bound_to(
    (sealed_tenant, sealed_principal, expires_at): (&str, &str, i64),
    (tenant, principal): (&str, &str),
    same_request: bool,
    now: Timestamp,
) -> Result<(), StateRefused> {
    #[cfg(feature = "mutants")]
    let principal = if crate::testing::mutants::state_not_bound_to_principal() {
        sealed_principal
    } else {
        principal
    };
    if sealed_tenant != tenant || sealed_principal != principal {
        return Err(StateRefused::Foreign);
    }
    if !same_request {
        return Err(StateRefused::OtherCall);
    }
    if expires_at <= now.as_micros() {
        return Err(StateRefused::Expired);
    }
    Ok(())
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
    let same_call = sealed.tool == tool && sealed.arguments_hash == arguments_hash;
    let sealed_for = (&*sealed.tenant_id, &*sealed.principal_id, sealed.expires_at);
    if let Err(refused) = bound_to(sealed_for, (tenant, principal), same_call, now) {
        return Ok(Err(refused));
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

/// Whether the relayed round `sealed`, brought back by `principal` of `tenant` on a retry of
/// `(method, target)` with arguments hashing to `arguments_hash`, may be forwarded, and if so
/// marks it used (a `mcp.request_state.used` process event keyed by the state's id), so a state
/// is good for one retry. `use_id` is fresh per attempt: a second use of the state carries
/// another and conflicts with the stored mark, as does a concurrent one on another process.
pub fn take_relay_in_tx(
    tx: &mut dyn StoreTx,
    sealed: &SealedRelay,
    (tenant, principal): (&str, &str),
    (method, target, arguments_hash): (&str, &str, &str),
    use_id: &str,
    now: Timestamp,
) -> Result<Result<(), StateRefused>, TxError> {
    let same_request = sealed.method == method
        && sealed.target == target
        && sealed.arguments_hash == arguments_hash;
    let sealed_for = (&*sealed.tenant_id, &*sealed.principal_id, sealed.expires_at);
    if let Err(refused) = bound_to(sealed_for, (tenant, principal), same_request, now) {
        return Ok(Err(refused));
    }
    let mark = process_event(
        EventType::McpRequestStateUsed,
        format!("mcp.request_state.used:{}", sealed.state_id),
        serde_json::json!({"state_id": sealed.state_id, "use": use_id, "method": method}),
        now,
    );
    match tx.append_process_event(&mark) {
        Ok(stored) if stored.payload == mark.payload => Ok(Ok(())),
        Ok(_) | Err(TxError::Conflict(_)) => Ok(Err(StateRefused::Used)),
        Err(other) => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem_store::MemStore;
    use crate::store::Store;

    fn relay(expires_at: i64) -> SealedRelay {
        SealedRelay {
            state_id: "s1".into(),
            tenant_id: "t".into(),
            principal_id: "alice".into(),
            method: "tools/call".into(),
            target: "files__write".into(),
            arguments_hash: "h".into(),
            expires_at,
            upstream_state: Some("upstream".into()),
            held: false,
        }
    }

    fn take(
        store: &MemStore,
        sealed: &SealedRelay,
        principal: &str,
        request: (&str, &str, &str),
        use_id: &str,
        now: i64,
    ) -> Result<(), StateRefused> {
        store
            .transact(|tx| {
                take_relay_in_tx(
                    tx,
                    sealed,
                    ("t", principal),
                    request,
                    use_id,
                    Timestamp::from_micros(now),
                )
            })
            .unwrap_or(Err(StateRefused::Unreadable))
    }

    #[test]
    fn a_relayed_state_moves_its_own_request_once_before_its_expiry() {
        let store = MemStore::new();
        let sealed = relay(1_000);
        let own = ("tools/call", "files__write", "h");
        assert_eq!(
            take(&store, &sealed, "mallory", own, "u0", 10),
            Err(StateRefused::Foreign)
        );
        assert_eq!(
            take(
                &store,
                &sealed,
                "alice",
                ("tools/call", "files__write", "other"),
                "u0",
                10
            ),
            Err(StateRefused::OtherCall)
        );
        assert_eq!(
            take(
                &store,
                &sealed,
                "alice",
                ("prompts/get", "files__write", "h"),
                "u0",
                10
            ),
            Err(StateRefused::OtherCall)
        );
        assert_eq!(
            take(&store, &sealed, "alice", own, "u0", 1_000),
            Err(StateRefused::Expired)
        );
        // None of the refusals used it up.
        assert_eq!(take(&store, &sealed, "alice", own, "u1", 10), Ok(()));
        assert_eq!(
            take(&store, &sealed, "alice", own, "u2", 20),
            Err(StateRefused::Used),
            "a state is good for one retry"
        );
    }

    #[test]
    fn a_sealed_state_says_which_kind_it_is() {
        let text = serde_json::to_string(&Sealed::Relay(relay(5))).unwrap_or_default();
        assert!(text.contains(r#""kind":"relay""#), "{text}");
        let back: Sealed = serde_json::from_str(&text).unwrap_or(Sealed::Relay(relay(0)));
        assert_eq!(back, Sealed::Relay(relay(5)));
    }
}
