//! An API token's row and text (SPEC §20): the data the store keeps and the checks on it that
//! need nothing but the token itself. What authenticates a request against the store is the
//! parent module.

use std::fmt;

use crate::ids::ApiTokenId;
use crate::principal::Principal;
use crate::scope::ScopeSet;
use crate::time::Timestamp;

/// Every token starts with this, so a leaked one is recognisable (secret scanners, logs).
pub const TOKEN_PREFIX: &str = "alk_";

/// The random part: 256 bits.
pub const TOKEN_SECRET_BYTES: usize = 32;

/// The longest label, in characters.
pub const MAX_LABEL_CHARS: usize = 256;

/// The token of an `Authorization` header value `Bearer …` (scheme case-insensitive, RFC
/// 9110), shared by every HTTP surface that takes §20 tokens so they read the header alike.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// One row of `api_tokens`. Rows are never deleted: a revoked or expired token stays as the
/// record of who could act, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    pub id: ApiTokenId,
    pub tenant_id: String,
    pub principal_id: String,
    pub scopes: ScopeSet,
    /// Lowercase hex SHA-256 of the whole token text; unique.
    pub token_sha256: String,
    pub label: Option<String>,
    pub created_at: Timestamp,
    /// `None`: the token does not expire.
    pub expires_at: Option<Timestamp>,
    /// Set once by revocation, never cleared.
    pub revoked_at: Option<Timestamp>,
}

impl ApiToken {
    /// The caller a request with this token acts as.
    pub fn principal(&self) -> Principal {
        Principal {
            tenant_id: self.tenant_id.clone(),
            principal_id: self.principal_id.clone(),
            scopes: self.scopes.clone(),
        }
    }

    /// Whether the token may be used at `now`: revocation first, then expiry (a token expires at
    /// `expires_at`, not after it, like an approval).
    pub fn check_usable(&self, now: Timestamp) -> Result<(), AuthError> {
        if self.revoked_at.is_some() {
            return Err(AuthError::Revoked);
        }
        if self.expires_at.is_some_and(|at| now >= at) {
            return Err(AuthError::Expired);
        }
        Ok(())
    }
}

/// A token's plain text. Shown once when minted and otherwise held only by its owner; its
/// `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSecret(String);

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSecret(alk_…)")
    }
}

impl TokenSecret {
    /// The token for 32 random bytes from the host's generator.
    pub fn from_random(bytes: [u8; TOKEN_SECRET_BYTES]) -> TokenSecret {
        TokenSecret(format!(
            "{TOKEN_PREFIX}{}",
            crate::policy::hex::encode(&bytes)
        ))
    }

    /// A presented token, if it has the shape of one (`alk_` + 64 lowercase hex digits).
    /// Anything else is refused before the store is asked.
    pub fn parse(text: &str) -> Result<TokenSecret, AuthError> {
        let body = text
            .strip_prefix(TOKEN_PREFIX)
            .ok_or(AuthError::Malformed)?;
        let well_formed = body.len() == TOKEN_SECRET_BYTES * 2
            && body
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if well_formed {
            Ok(TokenSecret(text.to_owned()))
        } else {
            Err(AuthError::Malformed)
        }
    }

    /// The text to hand to the token's owner, once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Lowercase hex SHA-256 of the token text: what the store keeps and looks up.
    pub fn digest(&self) -> String {
        crate::canonical::sha256_hex(self.0.as_bytes())
    }
}

/// Compares two digests in time that depends only on their lengths, so a comparison leaks
/// nothing about how many leading characters matched.
pub fn digests_equal(a: &str, b: &str) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let difference = a
        .bytes()
        .zip(b.bytes())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// Why a presented token does not authenticate. Every kind but `Storage` is answered 401 with
/// the same body: a caller learns only that its token does not work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("no token was presented")]
    Missing,
    #[error("the token is malformed")]
    Malformed,
    #[error("the token is unknown")]
    Unknown,
    #[error("the token expired")]
    Expired,
    #[error("the token was revoked")]
    Revoked,
    #[error("storage: {0}")]
    Storage(String),
}
