//! API tokens (SPEC §20): who an HTTP caller is. A token is 256 random bits written `alk_` +
//! 64 lowercase hex digits; the store keeps only its SHA-256, so a copy of the database lets
//! nobody call the API. The caller of a request is the token's tenant, principal and scopes,
//! never anything the request says.
//!
//! Core draws no randomness: the host generates the secret and hands it in
//! ([`TokenSecret::from_random`]); core validates, hashes, stores and checks it.
//!
//! Administration is local: minting, listing and revoking are done by whoever can open the
//! store (`airlock tokens …`), as the caller's own tenant. There is no HTTP route for them, so a
//! token can never mint or widen another.

pub mod token;
pub mod verified;

pub use token::{
    ApiToken, AuthError, MAX_LABEL_CHARS, TOKEN_PREFIX, TOKEN_SECRET_BYTES, TokenSecret,
    bearer_token, digests_equal,
};
pub use verified::{IssuedToken, Verified, VouchedBy};

use crate::control::{ControlService, ServiceError};
use crate::ids::ApiTokenId;
use crate::principal::{Principal, check_identity};
use crate::scope::ScopeSet;
use crate::store::{Store, TxError};
use crate::time::Timestamp;

impl From<TxError> for AuthError {
    fn from(error: TxError) -> AuthError {
        AuthError::Storage(error.to_string())
    }
}

/// What `tokens create` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenGrant {
    pub tenant_id: String,
    pub principal_id: String,
    pub scopes: ScopeSet,
    pub label: Option<String>,
    pub expires_at: Option<Timestamp>,
}

impl From<Authenticated> for Verified {
    fn from(authenticated: Authenticated) -> Verified {
        Verified {
            principal: authenticated.principal,
            by: VouchedBy::ApiToken(authenticated.token.id),
        }
    }
}

/// A successfully authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub principal: Principal,
    pub token: ApiToken,
}

impl<S: Store> ControlService<S> {
    /// Stores a new token for `grant` whose text is `secret` (only its digest is kept). Local
    /// administration: no scope is checked (see the module docs).
    pub fn issue_token(
        &self,
        grant: &TokenGrant,
        secret: &TokenSecret,
    ) -> Result<ApiToken, ServiceError> {
        for (field, value) in [
            ("tenant", &grant.tenant_id),
            ("principal", &grant.principal_id),
        ] {
            check_identity(value)
                .map_err(|e| ServiceError::InvalidArgument(format!("{field} {e}")))?;
        }
        if let Some(label) = &grant.label
            && (label.chars().count() > MAX_LABEL_CHARS || label.chars().any(char::is_control))
        {
            return Err(ServiceError::InvalidArgument(format!(
                "label must be at most {MAX_LABEL_CHARS} characters without control characters"
            )));
        }
        let env = self.env();
        let now = env.clock.now();
        if grant.expires_at.is_some_and(|at| at <= now) {
            return Err(ServiceError::InvalidArgument(
                "the expiry must be in the future".to_owned(),
            ));
        }
        let token = ApiToken {
            id: ApiTokenId(env.new_uuid()),
            tenant_id: grant.tenant_id.clone(),
            principal_id: grant.principal_id.clone(),
            scopes: grant.scopes.clone(),
            token_sha256: secret.digest(),
            label: grant.label.clone(),
            created_at: now,
            expires_at: grant.expires_at,
            revoked_at: None,
        };
        env.transact(|tx| tx.insert_api_token(&token))?;
        Ok(token)
    }

    /// The tenant's tokens, oldest first, revoked and expired ones included.
    pub fn list_tokens(&self, tenant: &str) -> Result<Vec<ApiToken>, ServiceError> {
        Ok(self.env().read(|tx| tx.api_tokens(tenant))?)
    }

    /// Revokes one of the tenant's tokens; revoking again keeps the first time. Another
    /// tenant's token is `NotFound`.
    pub fn revoke_token(&self, tenant: &str, id: ApiTokenId) -> Result<ApiToken, ServiceError> {
        let env = self.env();
        let now = env.clock.now();
        Ok(env.transact(|tx| {
            let token = tx
                .api_token(id)?
                .filter(|t| t.tenant_id == tenant)
                .ok_or(TxError::NotFound)?;
            if token.revoked_at.is_some() {
                return Ok(token);
            }
            tx.revoke_api_token(id, now)
        })?)
    }

    /// The caller a presented token stands for, checked against the store at this moment.
    pub fn authenticate(&self, presented: &str) -> Result<Authenticated, AuthError> {
        let secret = TokenSecret::parse(presented)?;
        let digest = secret.digest();
        let token = self
            .env()
            .read(|tx| tx.api_token_by_digest(&digest))?
            .ok_or(AuthError::Unknown)?;
        // The lookup was by digest, so its timing reveals at most something about a digest,
        // which does not help forge a token; the final comparison is constant-time anyway.
        if !digests_equal(&token.token_sha256, &digest) {
            return Err(AuthError::Unknown);
        }
        token.check_usable(self.env().clock.now())?;
        Ok(Authenticated {
            principal: token.principal(),
            token,
        })
    }

    /// Re-checks a token already authenticated (a console session, a long event stream), so
    /// a revocation or expiry takes effect on the next request or poll.
    pub fn authenticate_id(&self, id: ApiTokenId) -> Result<Authenticated, AuthError> {
        let token = self
            .env()
            .read(|tx| tx.api_token(id))?
            .ok_or(AuthError::Unknown)?;
        token.check_usable(self.env().clock.now())?;
        Ok(Authenticated {
            principal: token.principal(),
            token,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_the_prefix_and_64_hex_digits_and_its_digest_is_sha256() {
        let secret = TokenSecret::from_random([0xab; TOKEN_SECRET_BYTES]);
        assert_eq!(secret.expose(), format!("alk_{}", "ab".repeat(32)));
        assert_eq!(TokenSecret::parse(secret.expose()), Ok(secret.clone()));
        // printf 'alk_%s' "$(python3 -c "print('ab'*32)")" | sha256sum
        assert_eq!(
            secret.digest(),
            "1b820a844790e775ab0a625b2f727a9608fba48f60814a0b894da9057f6e5cab"
        );
        assert_eq!(format!("{secret:?}"), "TokenSecret(alk_…)");
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_nothing_else_is_a_token() {
        assert_eq!(bearer_token("Bearer alk_x"), Some("alk_x"));
        assert_eq!(bearer_token("bearer  alk_x "), Some("alk_x"));
        assert_eq!(bearer_token("Basic alk_x"), None);
        assert_eq!(bearer_token("alk_x"), None);
    }

    #[test]
    fn anything_but_the_token_shape_is_malformed() {
        let good = format!("alk_{}", "0".repeat(64));
        assert!(TokenSecret::parse(&good).is_ok());
        for bad in [
            String::new(),
            "0".repeat(64),
            format!("alk_{}", "0".repeat(63)),
            format!("alk_{}", "0".repeat(65)),
            format!("alk_{}", "A".repeat(64)),
            format!("ALK_{}", "0".repeat(64)),
            format!("alk_{}g", "0".repeat(63)),
            format!(" alk_{}", "0".repeat(64)),
        ] {
            assert_eq!(TokenSecret::parse(&bad), Err(AuthError::Malformed), "{bad}");
        }
    }

    #[test]
    fn digests_compare_equal_only_when_identical() {
        assert!(digests_equal("abcd", "abcd"));
        assert!(!digests_equal("abcd", "abce"));
        assert!(!digests_equal("abcd", "xbcd"));
        assert!(!digests_equal("abcd", "abc"));
        assert!(digests_equal("", ""));
    }
}
