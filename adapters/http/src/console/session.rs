//! Console sessions: signing in with a token gives the browser a fresh random session id in an
//! `HttpOnly`, `SameSite=Strict` cookie. The server keeps, in memory, only the SHA-256 of that
//! id, the token it stands for and when it ends; never the token's text. Every request re-checks
//! the token in the store, so revoking a token signs its sessions out at once. A restart signs
//! everyone out (no session secret is ever written to disk).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use airlock_core::access::digests_equal;
use airlock_core::ids::ApiTokenId;
use axum::http::HeaderMap;
use axum::http::header;
use sha2::{Digest, Sha256};

use airlock_core::policy::hex::encode as hex;

use crate::secret::{RandomnessError, random_bytes};

/// The session cookie's name.
pub const COOKIE: &str = "airlock_session";

/// A session ends this long after sign-in (a working day and then some), or earlier with its
/// token.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// At most this many live sessions; signing in beyond it drops the oldest, so the table stays
/// bounded whatever a client does.
pub const MAX_SESSIONS: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Entry {
    token: ApiTokenId,
    created: Instant,
}

/// The live sessions, keyed by the SHA-256 of their id.
#[derive(Debug, Default)]
pub struct Sessions {
    entries: Mutex<HashMap<String, Entry>>,
}

/// A session id as the browser holds it (64 hex digits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionId(String);

impl SessionId {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn digest(&self) -> String {
        hex(&Sha256::digest(self.0.as_bytes()))
    }

    /// The form token of this session: derived from the id, so the server stores nothing
    /// more, and unguessable without the cookie, which other sites cannot read.
    pub fn csrf_token(&self) -> String {
        hex(&Sha256::digest(
            format!("airlock.csrf\0{}", self.0).as_bytes(),
        ))
    }

    /// Whether a submitted form token is this session's (constant time).
    pub fn csrf_matches(&self, submitted: &str) -> bool {
        digests_equal(&self.csrf_token(), submitted)
    }
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a session for `token` and returns its id.
    pub fn create(&self, token: ApiTokenId) -> Result<SessionId, RandomnessError> {
        let id = SessionId(hex(&random_bytes::<32>()?));
        let now = Instant::now();
        let mut entries = self.lock();
        entries.retain(|_, e| now.duration_since(e.created) < SESSION_LIFETIME);
        if entries.len() >= MAX_SESSIONS
            && let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, e)| e.created)
                .map(|(k, _)| k.clone())
        {
            entries.remove(&oldest);
        }
        entries.insert(
            id.digest(),
            Entry {
                token,
                created: now,
            },
        );
        Ok(id)
    }

    /// The token of a live session.
    pub fn token_of(&self, id: &SessionId) -> Option<ApiTokenId> {
        let digest = id.digest();
        let mut entries = self.lock();
        let entry = *entries.get(&digest)?;
        if entry.created.elapsed() >= SESSION_LIFETIME {
            entries.remove(&digest);
            return None;
        }
        Some(entry.token)
    }

    pub fn remove(&self, id: &SessionId) {
        self.lock().remove(&id.digest());
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The session id a request's cookie carries, if it has the right shape.
pub fn from_cookies(headers: &HeaderMap) -> Option<SessionId> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(|v| SessionId(v.to_ascii_lowercase()))
}

/// The `Set-Cookie` value that installs a session.
pub fn set_cookie(id: &SessionId, secure: bool) -> String {
    format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        id.as_str(),
        SESSION_LIFETIME.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that removes it.
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_digest_of_a_session_id_is_kept() {
        let sessions = Sessions::default();
        let token = ApiTokenId(uuid::Uuid::from_u128(7));
        let id = sessions.create(token).expect("random");
        assert_eq!(sessions.token_of(&id), Some(token));
        let keys: Vec<String> = sessions.lock().keys().cloned().collect();
        assert_eq!(keys, vec![id.digest()]);
        assert!(!keys[0].contains(id.as_str()));
        sessions.remove(&id);
        assert_eq!(sessions.token_of(&id), None);
    }

    #[test]
    fn the_cookie_is_http_only_and_same_site_strict() {
        let id = SessionId("a".repeat(64));
        let cookie = set_cookie(&id, false);
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        assert!(!cookie.contains("Secure"));
        assert!(set_cookie(&id, true).ends_with("; Secure"));
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            format!("other=1; {COOKIE}={}", "A".repeat(64))
                .parse()
                .expect("header"),
        );
        assert_eq!(from_cookies(&headers), Some(SessionId("a".repeat(64))));
        headers.insert(
            header::COOKIE,
            format!("{COOKIE}=short").parse().expect("header"),
        );
        assert_eq!(from_cookies(&headers), None);
    }

    #[test]
    fn csrf_tokens_differ_per_session() {
        let a = SessionId("a".repeat(64));
        let b = SessionId("b".repeat(64));
        assert!(a.csrf_matches(&a.csrf_token()));
        assert!(!a.csrf_matches(&b.csrf_token()));
        assert!(!a.csrf_matches(""));
    }
}
