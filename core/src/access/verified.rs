//! Who an HTTP request acts for, whatever vouched for it: an airlock token (SPEC §20), checked
//! against the store, or a bearer token of the OAuth issuer an operator configured (issue 31),
//! checked by its signature in `airlock-oauth`. Core knows only the outcome, so every surface
//! treats both callers alike past the door: the same principal, the same scope checks.

use crate::ids::ApiTokenId;
use crate::principal::Principal;
use crate::time::Timestamp;

/// A caller let in, and what let it in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub principal: Principal,
    pub by: VouchedBy,
}

/// What vouched for a [`Verified`] caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VouchedBy {
    /// An airlock token: a long stream or session rechecks it by id, so a revocation ends it.
    ApiToken(ApiTokenId),
    /// A token of the configured issuer: it cannot be revoked here, and it ends at its expiry.
    Issuer(IssuedToken),
}

/// The facts of an issuer's token that outlive the request: whose it was, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    /// The `iss` claim, exactly as the token (and the configuration) spells it.
    pub issuer: String,
    /// The `sub` claim: stable for one user of that issuer, unlike the token itself.
    pub subject: String,
    /// Until when the token is accepted: its `exp` claim plus the configured leeway.
    pub expires_at: Timestamp,
}
