//! Fetching and keeping the issuer's keys.
//!
//! The keys are read once at start: a server whose issuer cannot be reached, or whose key set is
//! not one, does not start, and says why (a misconfigured URL is found at deploy time, not at the
//! first caller). After that the set is kept and fetched again:
//! - when a token names a `kid` the set lacks (the issuer rotated its keys), at most once per
//!   [`UNKNOWN_KID_REFETCH`], so a stream of forged `kid`s cannot make airlock hammer the issuer;
//! - when it is older than [`MAX_AGE`], at the next token.
//!
//! A fetch that fails keeps the set it had (logged); a key removed by the issuer stops working at
//! the next successful fetch. One fetch at a time, and nobody waits for it but the request that
//! started it. Ages are read from tokio's clock, so tests can advance it.

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::KeyOrigin;
use crate::jwk::{KeySet, KeySetError, MAX_KEY_SET_BYTES};

/// The shortest time between two fetches caused by unknown `kid`s.
pub const UNKNOWN_KID_REFETCH: Duration = Duration::from_secs(30);
/// How long a set is used before it is fetched again.
pub const MAX_AGE: Duration = Duration::from_secs(3600);
/// How long one fetch may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the keys could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeysError {
    #[error("cannot fetch the issuer's keys from {url}: {why}")]
    Fetch { url: String, why: String },
    #[error("cannot read the issuer's keys from '{path}': {why}")]
    File { path: String, why: String },
    #[error("the issuer's keys at {at} are unusable: {error}")]
    Unusable { at: String, error: KeySetError },
}

/// The issuer's current keys, and how to fetch them again.
pub struct KeySource {
    origin: KeyOrigin,
    http: reqwest::Client,
    current: RwLock<Arc<KeySet>>,
    /// When the set was last fetched (or a fetch was tried); one fetch at a time.
    fetched: tokio::sync::Mutex<Instant>,
}

impl KeySource {
    /// Reads the keys for the first time.
    pub async fn load(origin: KeyOrigin) -> Result<KeySource, KeysError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|e| KeysError::Fetch {
                url: describe(&origin),
                why: format!("cannot build the HTTP client: {e}"),
            })?;
        let keys = fetch(&origin, &http).await?;
        Ok(KeySource {
            origin,
            http,
            current: RwLock::new(Arc::new(keys)),
            fetched: tokio::sync::Mutex::new(Instant::now()),
        })
    }

    /// The set in use; fetched again first if it is older than [`MAX_AGE`].
    pub async fn current(&self) -> Arc<KeySet> {
        self.refetch_if_older_than(MAX_AGE).await;
        self.held()
    }

    /// The set after a token named a `kid` it lacks: fetched again unless that was done less
    /// than [`UNKNOWN_KID_REFETCH`] ago.
    pub async fn after_unknown_kid(&self) -> Arc<KeySet> {
        self.refetch_if_older_than(UNKNOWN_KID_REFETCH).await;
        self.held()
    }

    fn held(&self) -> Arc<KeySet> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Fetches the set again if the last fetch is older than `age`, unless a fetch is under way:
    /// then this request goes on with the keys held, rather than wait behind a slow issuer (a
    /// stream of made-up `kid`s must not stall the callers with good tokens).
    async fn refetch_if_older_than(&self, age: Duration) {
        let Ok(mut fetched) = self.fetched.try_lock() else {
            return;
        };
        if fetched.elapsed() < age {
            return;
        }
        *fetched = Instant::now();
        match fetch(&self.origin, &self.http).await {
            Ok(keys) => {
                tracing::info!(keys = keys.len(), from = %describe(&self.origin), "fetched the issuer's keys");
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
            }
            Err(error) => tracing::warn!(%error, "keeping the issuer's previous keys"),
        }
    }
}

fn describe(origin: &KeyOrigin) -> String {
    match origin {
        KeyOrigin::Url(url) => url.to_string(),
        KeyOrigin::File(path) => path.display().to_string(),
    }
}

async fn fetch(origin: &KeyOrigin, http: &reqwest::Client) -> Result<KeySet, KeysError> {
    let bytes = match origin {
        KeyOrigin::Url(url) => fetch_url(url, http).await?,
        KeyOrigin::File(path) => read_file(path)?,
    };
    KeySet::parse(&bytes).map_err(|error| KeysError::Unusable {
        at: describe(origin),
        error,
    })
}

async fn fetch_url(url: &url::Url, http: &reqwest::Client) -> Result<Vec<u8>, KeysError> {
    let failed = |why: String| KeysError::Fetch {
        url: url.to_string(),
        why,
    };
    let mut response = http
        .get(url.as_str())
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| failed(with_causes(e.without_url())))?;
    let status = response.status();
    if !status.is_success() {
        return Err(failed(format!("it answered {status}")));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| failed(with_causes(e.without_url())))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_KEY_SET_BYTES {
            return Err(failed(format!(
                "it sent more than {MAX_KEY_SET_BYTES} bytes"
            )));
        }
    }
    Ok(body)
}

/// An error and its causes, "a: b: c" (reqwest's own text is only "error sending request").
fn with_causes(error: reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(&error);
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

fn read_file(path: &Path) -> Result<Vec<u8>, KeysError> {
    let failed = |why: String| KeysError::File {
        path: path.display().to_string(),
        why,
    };
    // A key file is a few kilobytes, read at start and at most every 30 s: read in place.
    let metadata = std::fs::metadata(path).map_err(|e| failed(e.to_string()))?;
    if !metadata.is_file() {
        return Err(failed("not a regular file".to_owned()));
    }
    if metadata.len() > MAX_KEY_SET_BYTES as u64 {
        return Err(failed(format!("larger than {MAX_KEY_SET_BYTES} bytes")));
    }
    let bytes = std::fs::read(path).map_err(|e| failed(e.to_string()))?;
    // It may have grown since it was measured.
    if bytes.len() > MAX_KEY_SET_BYTES {
        return Err(failed(format!("larger than {MAX_KEY_SET_BYTES} bytes")));
    }
    Ok(bytes)
}
