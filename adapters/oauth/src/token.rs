//! Checking one bearer JWT (RFC 7519, RFC 9068) against an issuer's keys and the rules of the
//! `[auth]` section, and reading the caller from its claims. No I/O and no clock: the keys and
//! the current time are handed in, so every rule is a unit test.
//!
//! The order is fixed and fails closed: the shape, then the header (`alg` among the configured
//! algorithms, no `crit`), then the key (`kid`), then the signature, and only then the claims
//! (`iss`, `aud`, `exp`, `nbf`) and their mapping to a principal. Nothing from the payload is
//! trusted, or even parsed, before the signature holds.

use std::collections::BTreeSet;

use airlock_core::access::{IssuedToken, Verified, VouchedBy};
use airlock_core::principal::{Principal, check_identity};
use airlock_core::scope::{Scope, ScopeSet};
use airlock_core::time::Timestamp;
use serde_json::{Map, Value};

use crate::algorithm::Algorithm;
use crate::jwk::{KeySet, decode};

/// The longest token read, in bytes. Real access tokens are a few kilobytes.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// What a token must satisfy, from the `[auth]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// `iss`, compared exactly.
    pub issuer: String,
    /// A value `aud` must hold: this server's resource identifier (RFC 8707) unless configured.
    pub audience: String,
    pub algorithms: BTreeSet<Algorithm>,
    /// Allowed clock difference for `exp` and `nbf`, in seconds.
    pub leeway_seconds: i64,
    pub claims: ClaimMapping,
}

/// Where the caller's identity is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimMapping {
    /// The claim holding the principal id (`sub` unless configured).
    pub principal: String,
    /// The claim holding the scopes: a space-separated string (`scope`, RFC 8693/9068) or an
    /// array of strings (`scp`).
    pub scopes: String,
    pub tenant: TenantRule,
}

/// The tenant a token's caller acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantRule {
    /// Every caller of this issuer acts for one tenant.
    Fixed(String),
    /// The tenant is this claim's value (a string).
    Claim(String),
}

/// Why a token was not accepted. Every kind is answered 401 `invalid_token` with one body;
/// the kind is logged, never the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token is longer than {MAX_TOKEN_BYTES} bytes")]
    TooLong,
    #[error("the token is not a signed JWT (header.payload.signature in base64url): {0}")]
    Malformed(&'static str),
    #[error("the token's algorithm {0:?} is not accepted")]
    Algorithm(String),
    #[error("the token names critical header parameters airlock does not understand")]
    Critical,
    #[error("no key of the issuer matches the token (kid {0:?})")]
    UnknownKey(Option<String>),
    #[error("the token's signature does not verify")]
    BadSignature,
    #[error("the token's issuer is not the configured one")]
    Issuer,
    #[error("the token is not meant for this server (its audience lacks {0:?})")]
    Audience(String),
    #[error("the token expired")]
    Expired,
    #[error("the token is not valid yet (nbf)")]
    NotYetValid,
    #[error("the token lacks the claim {0:?}, or it is not of the expected type")]
    MissingClaim(String),
    #[error("the token's {claim} is not a usable airlock identity: {why}")]
    Identity { claim: String, why: String },
}

impl TokenError {
    /// A stable name for logs and metrics.
    pub fn reason_code(&self) -> &'static str {
        match self {
            TokenError::TooLong | TokenError::Malformed(_) => "token.malformed",
            TokenError::Algorithm(_) => "token.algorithm",
            TokenError::Critical => "token.critical_header",
            TokenError::UnknownKey(_) => "token.unknown_key",
            TokenError::BadSignature => "token.signature",
            TokenError::Issuer => "token.issuer",
            TokenError::Audience(_) => "token.audience",
            TokenError::Expired => "token.expired",
            TokenError::NotYetValid => "token.not_yet_valid",
            TokenError::MissingClaim(_) => "token.claim_missing",
            TokenError::Identity { .. } => "token.identity",
        }
    }
}

/// A token whose header was read, before its key is known.
#[derive(Debug)]
pub struct Unverified<'t> {
    pub algorithm: Algorithm,
    pub kid: Option<String>,
    /// `header.payload`, the bytes the signature covers.
    signed: &'t str,
    payload: &'t str,
    signature: Vec<u8>,
}

/// Reads a token's shape and header, and refuses an algorithm outside `accepted`.
pub fn read<'t>(
    token: &'t str,
    accepted: &BTreeSet<Algorithm>,
) -> Result<Unverified<'t>, TokenError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenError::TooLong);
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed("it does not have three parts"));
    };
    let header: Map<String, Value> = decode(header)
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .ok_or(TokenError::Malformed(
            "its header is not a base64url JSON object",
        ))?;
    let name = header
        .get("alg")
        .and_then(Value::as_str)
        .ok_or(TokenError::Malformed("its header has no alg"))?;
    let algorithm = Algorithm::named(name)
        .filter(|a| accepted.contains(a))
        .ok_or_else(|| TokenError::Algorithm(printable(name)))?;
    if header.contains_key("crit") {
        return Err(TokenError::Critical);
    }
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(TokenError::Malformed("its kid is not a string")),
    };
    let signature =
        decode(signature).ok_or(TokenError::Malformed("its signature is not base64url"))?;
    let signed_len = token.len() - signature_len(token);
    Ok(Unverified {
        algorithm,
        kid,
        signed: &token[..signed_len],
        payload,
        signature,
    })
}

/// The length of the last part and its dot.
fn signature_len(token: &str) -> usize {
    token.rfind('.').map_or(0, |dot| token.len() - dot)
}

impl Unverified<'_> {
    /// Checks the signature with the key the header names, then the claims at `now` (Unix
    /// seconds), and reads the caller.
    pub fn verify(&self, keys: &KeySet, rules: &Rules, now: i64) -> Result<Verified, TokenError> {
        let key = keys
            .select(self.kid.as_deref(), self.algorithm)
            .ok_or_else(|| TokenError::UnknownKey(self.kid.as_deref().map(printable)))?;
        if !key.verifies(self.algorithm, self.signed.as_bytes(), &self.signature) {
            return Err(TokenError::BadSignature);
        }
        let claims: Map<String, Value> = decode(self.payload)
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or(TokenError::Malformed(
                "its payload is not a base64url JSON object",
            ))?;
        check_claims(&claims, rules, now)
    }
}

/// The registered claims, then the caller.
fn check_claims(
    claims: &Map<String, Value>,
    rules: &Rules,
    now: i64,
) -> Result<Verified, TokenError> {
    let missing = |name: &str| TokenError::MissingClaim(name.to_owned());
    let issuer = claims
        .get("iss")
        .and_then(Value::as_str)
        .ok_or_else(|| missing("iss"))?;
    if issuer != rules.issuer {
        return Err(TokenError::Issuer);
    }
    let audience_held = match claims.get("aud") {
        Some(Value::String(one)) => *one == rules.audience,
        Some(Value::Array(many)) => many.iter().any(|a| a.as_str() == Some(&rules.audience)),
        _ => return Err(missing("aud")),
    };
    if !audience_held {
        return Err(TokenError::Audience(rules.audience.clone()));
    }
    let expires = numeric_date(claims, "exp")?.ok_or_else(|| missing("exp"))?;
    if now >= expires.saturating_add(rules.leeway_seconds) {
        return Err(TokenError::Expired);
    }
    if let Some(not_before) = numeric_date(claims, "nbf")?
        && now.saturating_add(rules.leeway_seconds) < not_before
    {
        return Err(TokenError::NotYetValid);
    }
    let subject = claims
        .get("sub")
        .and_then(Value::as_str)
        .ok_or_else(|| missing("sub"))?;
    let principal_id = identity(claims, &rules.claims.principal)?;
    let tenant_id = match &rules.claims.tenant {
        TenantRule::Fixed(tenant) => tenant.clone(),
        TenantRule::Claim(claim) => identity(claims, claim)?,
    };
    Ok(Verified {
        principal: Principal {
            tenant_id,
            principal_id,
            scopes: scopes(claims.get(&rules.claims.scopes)),
        },
        by: VouchedBy::Issuer(IssuedToken {
            issuer: issuer.to_owned(),
            subject: subject.to_owned(),
            // Until when this token is accepted: `exp` plus the leeway, so a session or stream
            // it opened lasts exactly as long as the token would be let in again.
            expires_at: Timestamp::from_micros(
                expires
                    .saturating_add(rules.leeway_seconds)
                    .saturating_mul(1_000_000),
            ),
        }),
    })
}

/// A NumericDate claim (RFC 7519 §2): seconds, possibly fractional (read down to the second
/// below). Absent is `None`; present but not a number is refused.
fn numeric_date(claims: &Map<String, Value>, name: &str) -> Result<Option<i64>, TokenError> {
    match claims.get(name) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.is_finite())
                    .map(|f| f.floor() as i64)
            })
            .map(Some)
            .ok_or_else(|| TokenError::MissingClaim(name.to_owned())),
        Some(_) => Err(TokenError::MissingClaim(name.to_owned())),
    }
}

/// A string claim that names an airlock identity (SPEC §15's rule for tenants and principals).
fn identity(claims: &Map<String, Value>, claim: &str) -> Result<String, TokenError> {
    let value = claims
        .get(claim)
        .and_then(Value::as_str)
        .ok_or_else(|| TokenError::MissingClaim(claim.to_owned()))?;
    check_identity(value).map_err(|e| TokenError::Identity {
        claim: claim.to_owned(),
        why: e.to_string(),
    })?;
    Ok(value.to_owned())
}

/// The scopes a token grants: a space-separated string or an array of strings. Entries that
/// are not airlock scopes (`openid`, `profile`, URLs) grant nothing and are dropped; a claim of
/// another type grants nothing.
fn scopes(claim: Option<&Value>) -> ScopeSet {
    let grant = |text: &str| Scope::parse(text).ok();
    match claim {
        Some(Value::String(list)) => list.split(' ').filter_map(grant).collect(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .filter_map(grant)
            .collect(),
        _ => ScopeSet::new(),
    }
}

/// An attacker-chosen header value as a log may show it: at most 64 printable ASCII bytes.
fn printable(text: &str) -> String {
    text.chars()
        .take(64)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect()
}
