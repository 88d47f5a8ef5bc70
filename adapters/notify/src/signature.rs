//! The `Airlock-Signature` header of a delivery: `t=<unix seconds>,v1=<hex>` where the hex is
//! HMAC-SHA256, keyed by the target's secret, over `"{t}.{body}"`. A receiver recomputes it over
//! the body it received and refuses a mismatch (a forgery) or a `t` too far from its clock (a
//! replay of a recorded request); see [`verify`], and docs for a Python example.
//!
//! The scheme follows the widely used one of Stripe's webhooks, so existing receiver code fits.

use airlock_core::policy::hex::{decode as unhex, encode as hex};
use ring::hmac;

/// The header a delivery carries its signature in.
pub const HEADER: &str = "Airlock-Signature";

/// How far a receiver should let `t` be from its own clock, by default (5 minutes).
pub const DEFAULT_TOLERANCE_SECONDS: i64 = 300;

/// The header value for `body` sent at `unix_seconds`.
pub fn sign(secret: &[u8], unix_seconds: i64, body: &[u8]) -> String {
    format!(
        "t={unix_seconds},v1={}",
        hex(&mac(secret, unix_seconds, body))
    )
}

fn mac(secret: &[u8], unix_seconds: i64, body: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut context = hmac::Context::with_key(&key);
    context.update(unix_seconds.to_string().as_bytes());
    context.update(b".");
    context.update(body);
    context.sign().as_ref().to_vec()
}

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the signature header is not t=<seconds>,v1=<hex>")]
    Malformed,
    #[error("the signature was made {0} s from now, beyond the tolerance")]
    Stale(i64),
    #[error("no v1 signature matches the body")]
    Mismatch,
}

/// Checks `header` against `body` as a receiver does: well formed, `t` within `tolerance` seconds
/// of `now`, and one of its `v1` values (several are allowed, for a secret being rotated) the
/// HMAC of this body; compared in constant time.
pub fn verify(
    secret: &[u8],
    header: &str,
    body: &[u8],
    now_unix_seconds: i64,
    tolerance_seconds: i64,
) -> Result<(), SignatureError> {
    let mut at = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", value)) => {
                at = Some(
                    value
                        .parse::<i64>()
                        .map_err(|_| SignatureError::Malformed)?,
                );
            }
            Some(("v1", value)) => {
                signatures.push(unhex(value).ok_or(SignatureError::Malformed)?);
            }
            Some(_) => {}
            None => return Err(SignatureError::Malformed),
        }
    }
    let at = at.ok_or(SignatureError::Malformed)?;
    if signatures.is_empty() {
        return Err(SignatureError::Malformed);
    }
    let skew = now_unix_seconds.saturating_sub(at);
    if skew.saturating_abs() > tolerance_seconds {
        return Err(SignatureError::Stale(skew));
    }
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut message = at.to_string().into_bytes();
    message.push(b'.');
    message.extend_from_slice(body);
    if signatures
        .iter()
        .any(|signature| hmac::verify(&key, &message, signature).is_ok())
    {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"whsec-test-0123456789";
    const BODY: &[u8] = br#"{"type":"approval.requested"}"#;

    #[test]
    fn a_signature_verifies_over_its_own_body_only() {
        let header = sign(SECRET, 1_780_000_000, BODY);
        assert!(header.starts_with("t=1780000000,v1="));
        assert_eq!(header.len(), "t=1780000000,v1=".len() + 64);
        assert_eq!(verify(SECRET, &header, BODY, 1_780_000_010, 300), Ok(()));
        assert_eq!(
            verify(
                SECRET,
                &header,
                br#"{"type":"approval.expired"}"#,
                1_780_000_010,
                300
            ),
            Err(SignatureError::Mismatch),
            "another body"
        );
        assert_eq!(
            verify(b"another secret", &header, BODY, 1_780_000_010, 300),
            Err(SignatureError::Mismatch),
            "another secret"
        );
    }

    #[test]
    fn a_replayed_or_malformed_header_is_refused() {
        let header = sign(SECRET, 1_780_000_000, BODY);
        assert_eq!(
            verify(SECRET, &header, BODY, 1_780_000_000 + 301, 300),
            Err(SignatureError::Stale(301))
        );
        // The timestamp is under the MAC: moving it forward breaks the signature.
        let moved = header.replace("t=1780000000", "t=1780000400");
        assert_eq!(
            verify(SECRET, &moved, BODY, 1_780_000_400, 300),
            Err(SignatureError::Mismatch)
        );
        for bad in [
            "",
            "t=1",
            "v1=00",
            "t=x,v1=00",
            "t=1,v1=zz",
            "t=1,v1=abc",
            "garbage",
        ] {
            assert_eq!(
                verify(SECRET, bad, BODY, 1, 300),
                Err(SignatureError::Malformed),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_rotated_secret_is_accepted_among_several_signatures() {
        let old = sign(b"old", 5, BODY);
        let new = sign(SECRET, 5, BODY);
        let both = format!(
            "{old},{}",
            new.split_once(',').map(|(_, v)| v).unwrap_or("")
        );
        assert_eq!(verify(SECRET, &both, BODY, 5, 300), Ok(()));
        assert_eq!(verify(b"old", &both, BODY, 5, 300), Ok(()));
    }

    /// A known answer computed outside this code, as a receiver in any language would:
    /// `echo -n '1780000000.{"type":"approval.requested"}' | openssl dgst -sha256 -hmac whsec-test-0123456789`
    #[test]
    fn the_signature_is_hmac_sha256_of_the_timestamp_a_dot_and_the_body() {
        assert_eq!(
            sign(SECRET, 1_780_000_000, BODY),
            "t=1780000000,v1=67dd787230480684a508585dd6b558c1978658d90e54feb19a3b8cf8d7940e8b"
        );
    }
}
