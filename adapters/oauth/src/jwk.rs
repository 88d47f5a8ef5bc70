//! An issuer's published keys (RFC 7517 JWK Set) as this crate verifies with them.
//!
//! A key set is read leniently and used strictly: keys this crate cannot verify with (an
//! encryption key, a symmetric `oct` key, an unknown curve) are skipped, so an issuer that also
//! publishes those still works; a set left with no signing key at all is an error. A symmetric
//! key is never used, whatever its `use`: it would let anyone who can read the key set mint
//! tokens (the HS256 "algorithm confusion").

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;

use crate::algorithm::{Algorithm, KeyFamily};

/// The largest key set read, in bytes: real issuers publish a few kilobytes.
pub const MAX_KEY_SET_BYTES: usize = 256 * 1024;

/// One verification key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// `kid`: which key a token's header names.
    pub id: Option<String>,
    /// `alg`, when the key is bound to one algorithm.
    pub algorithm: Option<Algorithm>,
    pub material: Material,
}

/// The public key itself, in the form ring takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Material {
    /// Modulus and exponent, big-endian without leading zeros.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// An uncompressed point (`0x04 ‖ x ‖ y`) on P-256.
    P256(Vec<u8>),
    /// An uncompressed point on P-384.
    P384(Vec<u8>),
    /// The 32-byte public key.
    Ed25519(Vec<u8>),
}

impl Material {
    pub fn family(&self) -> KeyFamily {
        match self {
            Material::Rsa { .. } => KeyFamily::Rsa,
            Material::P256(_) => KeyFamily::P256,
            Material::P384(_) => KeyFamily::P384,
            Material::Ed25519(_) => KeyFamily::Ed25519,
        }
    }
}

/// The usable keys of one key set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySet {
    keys: Vec<Key>,
}

/// Why a key set could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeySetError {
    #[error("it is not a JWK Set (a JSON object with a \"keys\" array): {0}")]
    NotAKeySet(String),
    #[error("it holds no key airlock can verify a signature with (RSA, P-256, P-384 or Ed25519)")]
    NoSigningKey,
}

#[derive(Deserialize)]
struct RawSet {
    keys: Vec<serde_json::Value>,
}

/// The members of a JWK this crate reads; the rest are ignored.
#[derive(Deserialize)]
struct RawKey {
    kty: String,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    key_ops: Option<Vec<String>>,
    crv: Option<String>,
    n: Option<String>,
    e: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

impl KeySet {
    /// Reads a JWK Set document.
    pub fn parse(text: &[u8]) -> Result<KeySet, KeySetError> {
        let raw: RawSet =
            serde_json::from_slice(text).map_err(|e| KeySetError::NotAKeySet(e.to_string()))?;
        let keys: Vec<Key> = raw
            .keys
            .into_iter()
            .filter_map(|value| serde_json::from_value::<RawKey>(value).ok())
            .filter_map(|raw| raw.into_key())
            .collect();
        if keys.is_empty() {
            return Err(KeySetError::NoSigningKey);
        }
        Ok(KeySet { keys })
    }

    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The key a token's header points at: the one with its `kid` that fits its algorithm, or,
    /// when the header names none, the only key that fits the algorithm (two candidates are
    /// ambiguous: none).
    pub fn select(&self, kid: Option<&str>, algorithm: Algorithm) -> Option<&Key> {
        match kid {
            Some(kid) => self
                .keys
                .iter()
                .find(|k| k.id.as_deref() == Some(kid) && k.fits(algorithm)),
            None => {
                let mut fitting = self.keys.iter().filter(|k| k.fits(algorithm));
                match (fitting.next(), fitting.next()) {
                    (Some(only), None) => Some(only),
                    _ => None,
                }
            }
        }
    }
}

impl Key {
    /// Whether this key may verify a signature made with `algorithm`: the key type fits the
    /// algorithm, and a key bound to an algorithm is used only with that one.
    pub fn fits(&self, algorithm: Algorithm) -> bool {
        algorithm.family() == self.material.family()
            && self.algorithm.is_none_or(|bound| bound == algorithm)
    }
}

impl Key {
    /// Whether `signature` over `message` was made by this key with `algorithm`. A key of
    /// another family is `false`, never a panic. RSA keys must be 2048 to 8192 bits (ring's
    /// floor, and NIST's).
    pub fn verifies(&self, algorithm: Algorithm, message: &[u8], signature: &[u8]) -> bool {
        use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
        if !self.fits(algorithm) {
            return false;
        }
        match &self.material {
            Material::Rsa { n, e } => {
                let parameters: &signature::RsaParameters = match algorithm {
                    Algorithm::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
                    Algorithm::Rs384 => &signature::RSA_PKCS1_2048_8192_SHA384,
                    Algorithm::Rs512 => &signature::RSA_PKCS1_2048_8192_SHA512,
                    Algorithm::Ps256 => &signature::RSA_PSS_2048_8192_SHA256,
                    Algorithm::Ps384 => &signature::RSA_PSS_2048_8192_SHA384,
                    Algorithm::Ps512 => &signature::RSA_PSS_2048_8192_SHA512,
                    _ => return false,
                };
                RsaPublicKeyComponents { n, e }
                    .verify(parameters, message, signature)
                    .is_ok()
            }
            Material::P256(point) => {
                UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, signature)
                    .is_ok()
            }
            Material::P384(point) => {
                UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, point)
                    .verify(message, signature)
                    .is_ok()
            }
            Material::Ed25519(public) => UnparsedPublicKey::new(&signature::ED25519, public)
                .verify(message, signature)
                .is_ok(),
        }
    }
}

impl RawKey {
    fn into_key(self) -> Option<Key> {
        if self.usage.as_deref().is_some_and(|u| u != "sig") {
            return None;
        }
        if self
            .key_ops
            .as_ref()
            .is_some_and(|ops| !ops.iter().any(|op| op == "verify"))
        {
            return None;
        }
        // A key bound to an algorithm this crate does not take is skipped, not guessed at.
        let algorithm = match &self.alg {
            Some(name) => Some(Algorithm::named(name)?),
            None => None,
        };
        let decode = |part: &Option<String>| part.as_deref().and_then(decode);
        let material = match (self.kty.as_str(), self.crv.as_deref()) {
            ("RSA", _) => {
                let n = strip_leading_zeros(decode(&self.n)?);
                let e = strip_leading_zeros(decode(&self.e)?);
                // ring takes 2048..=8192-bit moduli; a shorter key is refused when used, but a
                // key set of only short keys should say so at load, so skip it here.
                if n.len() < 256 || e.is_empty() {
                    return None;
                }
                Material::Rsa { n, e }
            }
            ("EC", Some("P-256")) => Material::P256(point(decode(&self.x)?, decode(&self.y)?, 32)?),
            ("EC", Some("P-384")) => Material::P384(point(decode(&self.x)?, decode(&self.y)?, 48)?),
            ("OKP", Some("Ed25519")) => {
                let x = decode(&self.x)?;
                (x.len() == 32).then_some(())?;
                Material::Ed25519(x)
            }
            _ => return None,
        };
        let key = Key {
            id: self.kid,
            algorithm,
            material,
        };
        key.algorithm
            .is_none_or(|a| a.family() == key.material.family())
            .then_some(key)
    }
}

/// base64url without padding (RFC 7515 §2), the only spelling JOSE allows.
pub(crate) fn decode(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text).ok()
}

fn strip_leading_zeros(mut bytes: Vec<u8>) -> Vec<u8> {
    let zeros = bytes.iter().take_while(|b| **b == 0).count();
    bytes.drain(..zeros);
    bytes
}

/// `0x04 ‖ x ‖ y`, each coordinate exactly `size` bytes (RFC 7518 §6.2.1.2).
fn point(x: Vec<u8>, y: Vec<u8>, size: usize) -> Option<Vec<u8>> {
    if x.len() != size || y.len() != size {
        return None;
    }
    let mut point = Vec::with_capacity(1 + 2 * size);
    point.push(0x04);
    point.extend_from_slice(&x);
    point.extend_from_slice(&y);
    Some(point)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    #[test]
    fn unusable_keys_are_skipped_and_a_set_without_a_signing_key_is_refused() {
        let ed = b64(&[7; 32]);
        let set = format!(
            r#"{{"keys":[
                {{"kty":"oct","k":"c2VjcmV0","alg":"HS256","kid":"hmac"}},
                {{"kty":"RSA","use":"enc","n":"{n}","e":"AQAB","kid":"enc"}},
                {{"kty":"EC","crv":"secp256k1","x":"{ed}","y":"{ed}","kid":"k1"}},
                {{"kty":"OKP","crv":"Ed25519","x":"{ed}","kid":"ed","alg":"EdDSA"}},
                {{"kty":"OKP","crv":"Ed25519","x":"{ed}","kid":"wrong-alg","alg":"RS256"}},
                "not an object"
            ]}}"#,
            n = b64(&[0xc5; 256])
        );
        let keys = KeySet::parse(set.as_bytes()).expect("one usable key");
        let ids: Vec<_> = keys.keys().iter().map(|k| k.id.as_deref()).collect();
        assert_eq!(ids, [Some("ed")]);
        assert_eq!(
            KeySet::parse(br#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#),
            Err(KeySetError::NoSigningKey)
        );
        assert!(matches!(
            KeySet::parse(b"[]"),
            Err(KeySetError::NotAKeySet(_))
        ));
    }

    #[test]
    fn without_a_kid_only_a_single_fitting_key_is_chosen() {
        let ed = |kid: &str| Key {
            id: Some(kid.to_owned()),
            algorithm: None,
            material: Material::Ed25519(vec![1; 32]),
        };
        let one = KeySet {
            keys: vec![ed("a")],
        };
        assert!(one.select(None, Algorithm::EdDsa).is_some());
        assert!(one.select(None, Algorithm::Rs256).is_none());
        assert!(one.select(Some("b"), Algorithm::EdDsa).is_none());
        let two = KeySet {
            keys: vec![ed("a"), ed("b")],
        };
        assert!(two.select(None, Algorithm::EdDsa).is_none());
        assert_eq!(
            two.select(Some("b"), Algorithm::EdDsa)
                .and_then(|k| k.id.as_deref()),
            Some("b")
        );
    }
}
