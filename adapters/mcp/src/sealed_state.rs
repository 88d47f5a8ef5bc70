//! Sealing and opening a 2026-07-28 `requestState` (SPEC §22.3 item 2). What a state binds, the
//! keys' rotation and the checks on the retry are core's
//! ([`airlock_core::conversation::request_state`]); this is the AEAD.
//!
//! **Form.** `v1.{key id}.{hex of nonce ‖ ciphertext ‖ tag}`: ChaCha20-Poly1305 (ring) under the
//! store's key of that id, a fresh random 96-bit nonce per state, and the version and key id as
//! associated data, so a state moved to another key, or edited anywhere, fails to open. The
//! plaintext is the JSON of a [`Sealed`]: an approval's call, or a relayed upstream round with
//! the upstream's own state inside. A client learns nothing from a state but its length.

use airlock_core::conversation::request_state::{
    Sealed, SealedCall, SealedRelay, StateKey, StateRefused, check_in_tx, sealing_key_in_tx,
    take_relay_in_tx,
};
use airlock_core::policy::hex::{decode as unhex, encode as hex};
use airlock_core::ports::Clock;
use airlock_core::store::{Store, TxError};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use std::sync::Arc;

/// The prefix of this form of state.
const VERSION: &str = "v1";

/// The longest upstream `requestState` the gateway carries inside its own (SPEC §23); a longer
/// one ends its request with an error rather than a state the gateway would not open again.
pub const MAX_UPSTREAM_STATE_LEN: usize = 32 * 1024;

/// The longest state this gateway opens: a sealed call is a few hundred bytes; a relayed round
/// carries up to [`MAX_UPSTREAM_STATE_LEN`] more, hex-encoded.
const MAX_STATE_LEN: usize = 2 * MAX_UPSTREAM_STATE_LEN + 8 * 1024;

/// Why a state could not be sealed.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("storage: {0}")]
    Storage(#[from] TxError),
    #[error("the system's random source failed")]
    Random,
    #[error("sealing failed")]
    Seal,
}

/// Seals and opens states with the keys of one store.
pub struct StateSeal<S: Store> {
    store: Arc<S>,
    clock: Arc<dyn Clock>,
    random: SystemRandom,
}

impl<S: Store> StateSeal<S> {
    pub fn new(store: Arc<S>, clock: Arc<dyn Clock>) -> StateSeal<S> {
        StateSeal {
            store,
            clock,
            random: SystemRandom::new(),
        }
    }

    fn random_hex(&self, bytes: usize) -> Result<String, SealError> {
        let mut buffer = vec![0u8; bytes];
        self.random
            .fill(&mut buffer)
            .map_err(|_| SealError::Random)?;
        Ok(hex(&buffer))
    }

    /// A fresh random id (a relayed state's id, or one attempt to use it).
    pub fn fresh_id(&self) -> Result<String, SealError> {
        self.random_hex(16)
    }

    /// `call` sealed under the store's current key (a new one when it is due, §22.3).
    pub fn seal(&self, call: &Sealed) -> Result<String, SealError> {
        let now = self.clock.now();
        let fresh = StateKey {
            id: self.random_hex(8)?,
            secret_hex: self.random_hex(32)?,
            created_at: now,
        };
        let key = self
            .store
            .transact(|tx| sealing_key_in_tx(tx, fresh.clone(), now))?;
        let sealing = aead_key(&key).ok_or(SealError::Seal)?;
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| SealError::Random)?;
        let mut buffer = serde_json::to_vec(call).map_err(|_| SealError::Seal)?;
        sealing
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(associated(&key.id).as_bytes()),
                &mut buffer,
            )
            .map_err(|_| SealError::Seal)?;
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&buffer);
        Ok(format!("{VERSION}.{}.{}", key.id, hex(&sealed)))
    }

    /// Whether `sealed` may move the retried call `(tool, arguments hash)` of `principal` of
    /// `tenant` now (core's [`check_in_tx`]).
    pub fn check(
        &self,
        sealed: &SealedCall,
        (tenant, principal): (&str, &str),
        (tool, hash): (&str, &str),
    ) -> Result<Result<(), StateRefused>, TxError> {
        let now = self.clock.now();
        self.store
            .read(|tx| check_in_tx(tx, sealed, (tenant, principal), (tool, hash), now))
    }

    /// Whether the relayed round `sealed` may be forwarded with the retried request
    /// `(method, target, arguments hash)` of `principal` of `tenant`; it is used up if so (core's
    /// [`take_relay_in_tx`]).
    pub fn take_relay(
        &self,
        sealed: &SealedRelay,
        (tenant, principal): (&str, &str),
        request: (&str, &str, &str),
    ) -> Result<Result<(), StateRefused>, TxError> {
        let now = self.clock.now();
        let Ok(use_id) = self.fresh_id() else {
            return Err(TxError::Backend("the system's random source failed".into()));
        };
        self.store
            .transact(|tx| take_relay_in_tx(tx, sealed, (tenant, principal), request, &use_id, now))
    }

    /// What `text` was sealed for; [`StateRefused::Unreadable`] for anything this gateway did
    /// not seal as it is (another form, an unknown key, a changed byte).
    pub fn open(&self, text: &str) -> Result<Result<Sealed, StateRefused>, TxError> {
        if text.len() > MAX_STATE_LEN {
            return Ok(Err(StateRefused::Unreadable));
        }
        let parts: Vec<&str> = text.split('.').collect();
        let [version, key_id, body] = parts.as_slice() else {
            return Ok(Err(StateRefused::Unreadable));
        };
        if *version != VERSION {
            return Ok(Err(StateRefused::Unreadable));
        }
        let Some(key) = self.store.read(|tx| tx.state_key(key_id))? else {
            return Ok(Err(StateRefused::Unreadable));
        };
        let (Some(opening), Some(mut sealed)) = (aead_key(&key), unhex(body)) else {
            return Ok(Err(StateRefused::Unreadable));
        };
        if sealed.len() < NONCE_LEN {
            return Ok(Err(StateRefused::Unreadable));
        }
        let mut ciphertext = sealed.split_off(NONCE_LEN);
        let Ok(nonce) = Nonce::try_assume_unique_for_key(&sealed) else {
            return Ok(Err(StateRefused::Unreadable));
        };
        let Ok(plain) = opening.open_in_place(
            nonce,
            Aad::from(associated(&key.id).as_bytes()),
            &mut ciphertext,
        ) else {
            return Ok(Err(StateRefused::Unreadable));
        };
        Ok(serde_json::from_slice(plain).map_err(|_| StateRefused::Unreadable))
    }
}

fn associated(key_id: &str) -> String {
    format!("airlock requestState {VERSION} {key_id}")
}

fn aead_key(key: &StateKey) -> Option<LessSafeKey> {
    let secret = unhex(&key.secret_hex)?;
    UnboundKey::new(&CHACHA20_POLY1305, &secret)
        .ok()
        .map(LessSafeKey::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_core::ids::{ApprovalId, RunId};
    use airlock_core::mem_store::MemStore;

    fn seal() -> StateSeal<MemStore> {
        StateSeal::new(
            Arc::new(MemStore::new()),
            Arc::new(airlock_host::SystemClock),
        )
    }

    fn call() -> Sealed {
        Sealed::Approval(SealedCall {
            approval_id: ApprovalId(uuid::Uuid::from_u128(1)),
            run_id: RunId(uuid::Uuid::from_u128(2)),
            tenant_id: "acme".into(),
            principal_id: "alice".into(),
            tool: "test.append".into(),
            arguments_hash: "ab".repeat(32),
            expires_at: 99,
            answers_form: true,
        })
    }

    /// A state opens to what was sealed, and to nothing else once any character of it changed,
    /// or it names another key, or another form.
    #[test]
    fn a_state_opens_only_as_it_was_sealed() {
        let seal = seal();
        let text = seal.seal(&call()).expect("sealed");
        assert_eq!(seal.open(&text).expect("store"), Ok(call()));
        assert_ne!(
            seal.seal(&call()).expect("sealed"),
            text,
            "a fresh nonce each time"
        );
        for i in 0..text.len() {
            let mut bytes = text.clone().into_bytes();
            bytes[i] = if bytes[i] == b'0' { b'1' } else { b'0' };
            let changed = String::from_utf8(bytes).expect("ascii");
            if changed == text {
                continue;
            }
            assert_eq!(
                seal.open(&changed).expect("store"),
                Err(StateRefused::Unreadable),
                "byte {i} changed"
            );
        }
        for bad in ["", "v1", "v1..", "v2.a.b", &format!("{text}.x"), "v1.k.zz"] {
            assert_eq!(
                seal.open(bad).expect("store"),
                Err(StateRefused::Unreadable),
                "{bad}"
            );
        }
    }
}
