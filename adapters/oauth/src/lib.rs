//! airlock as an OAuth 2.1 resource server (issue 31): `airlock serve` and `airlock mcp serve
//! --listen` let in callers bearing a JWT access token of one configured issuer, beside
//! airlock's own `alk_` tokens.
//!
//! - [`config`]: the `[auth]` section, checked.
//! - [`token`]: one token checked against the keys and rules at a given time (no I/O).
//! - [`jwk`] and [`algorithm`]: the issuer's key set, and signatures checked with ring.
//! - [`keys`]: fetching and keeping the key set.
//! - [`metadata`]: the RFC 9728 document and the 401 challenge pointing at it.
//!
//! What a surface does with a bearer token: [`is_airlock_token`] sends `alk_…` to the store
//! (SPEC §20); anything else goes to [`ResourceServer::verify`] when `[auth]` is configured,
//! and is refused otherwise. Every refusal is the same 401, with [`ResourceServer::challenge`].
//! A caller's token is only ever read here: nothing forwards it to an upstream server.

pub mod algorithm;
pub mod config;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod jwk;
pub mod keys;
pub mod metadata;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod token;

use std::time::{SystemTime, UNIX_EPOCH};

use airlock_core::access::{TOKEN_PREFIX, Verified};

pub use config::{AuthConfig, AuthConfigError, AuthSection};
pub use keys::KeysError;
pub use token::TokenError;

/// Whether a presented bearer token is one of airlock's own (SPEC §20), checked against the
/// store, rather than an issuer's.
pub fn is_airlock_token(token: &str) -> bool {
    token.starts_with(TOKEN_PREFIX)
}

/// The configured issuer's rules and keys.
pub struct ResourceServer {
    config: AuthConfig,
    keys: keys::KeySource,
}

impl std::fmt::Debug for ResourceServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceServer")
            .field("issuer", &self.config.rules.issuer)
            .field("resource", &self.config.resource.as_str())
            .finish_non_exhaustive()
    }
}

impl ResourceServer {
    /// Reads the issuer's keys; a server that cannot does not start.
    pub async fn start(config: AuthConfig) -> Result<ResourceServer, KeysError> {
        let keys = keys::KeySource::load(config.keys.clone()).await?;
        Ok(ResourceServer { config, keys })
    }

    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// The caller `token` stands for, now.
    pub async fn verify(&self, token: &str) -> Result<Verified, TokenError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.verify_at(token, now).await
    }

    /// [`ResourceServer::verify`] at `now` (Unix seconds).
    pub async fn verify_at(&self, token: &str, now: i64) -> Result<Verified, TokenError> {
        let rules = &self.config.rules;
        let unverified = token::read(token, &rules.algorithms)?;
        let keys = self.keys.current().await;
        match unverified.verify(&keys, rules, now) {
            // The issuer may have rotated: an unknown `kid`, or, for an issuer whose tokens
            // name no `kid`, a signature the one key held does not verify.
            Err(TokenError::UnknownKey(_)) => {
                let keys = self.keys.after_unknown_kid().await;
                unverified.verify(&keys, rules, now)
            }
            Err(TokenError::BadSignature) if unverified.kid.is_none() => {
                let keys = self.keys.after_unknown_kid().await;
                unverified.verify(&keys, rules, now)
            }
            answer => answer,
        }
    }

    /// The `WWW-Authenticate` value of a 401.
    pub fn challenge(&self, token_refused: bool) -> String {
        metadata::challenge(&self.config.resource, token_refused)
    }

    /// The protected-resource metadata document, and the paths it is served at.
    pub fn metadata(&self) -> (serde_json::Value, Vec<String>) {
        (
            metadata::document(&self.config),
            metadata::paths(&self.config.resource),
        )
    }
}
