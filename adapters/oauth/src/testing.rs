//! A token issuer for tests: keys made fresh for each run, their JWK Set, and tokens signed
//! with them. The RSA key comes from the `openssl` command (ring verifies RSA but cannot make a
//! key); the others from ring.

use std::process::Command;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RSA_PKCS1_SHA256,
    RsaKeyPair, RsaPublicKeyComponents,
};
use serde_json::{Value, json};

/// The key ids the issuer publishes.
pub const RS256_KID: &str = "rs-1";
pub const ES256_KID: &str = "es-1";
pub const EDDSA_KID: &str = "ed-1";

/// A test issuer with one key per algorithm family.
pub struct TestIssuer {
    pub issuer: String,
    rsa: RsaKeyPair,
    ec: EcdsaKeyPair,
    ed: Ed25519KeyPair,
    rng: SystemRandom,
}

impl TestIssuer {
    /// New keys for `issuer`. Panics (it is a test helper) if `openssl` cannot make an RSA key.
    pub fn new(issuer: &str) -> TestIssuer {
        let rng = SystemRandom::new();
        let output = Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
            ])
            .args(["-outform", "DER"])
            .output()
            .expect("run openssl genpkey (the test issuer's RSA key)");
        assert!(output.status.success(), "openssl genpkey failed");
        // `genpkey -outform DER` writes PKCS#8 on some openssl builds and PKCS#1 on others.
        let rsa = RsaKeyPair::from_pkcs8(&output.stdout)
            .or_else(|_| RsaKeyPair::from_der(&output.stdout))
            .expect("openssl's RSA key");
        let ec_pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("a P-256 key");
        let ec =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, ec_pkcs8.as_ref(), &rng)
                .expect("the P-256 key");
        let ed_pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).expect("an Ed25519 key");
        let ed = Ed25519KeyPair::from_pkcs8(ed_pkcs8.as_ref()).expect("the Ed25519 key");
        TestIssuer {
            issuer: issuer.to_owned(),
            rsa,
            ec,
            ed,
            rng,
        }
    }

    /// The JWK Set document of the three keys.
    pub fn jwks(&self) -> Value {
        let rsa: RsaPublicKeyComponents<Vec<u8>> = self.rsa.public().into();
        let point = self.ec.public_key().as_ref();
        json!({"keys": [
            {"kty": "RSA", "kid": RS256_KID, "use": "sig", "alg": "RS256",
             "n": b64(&rsa.n), "e": b64(&rsa.e)},
            {"kty": "EC", "kid": ES256_KID, "crv": "P-256",
             "x": b64(&point[1..33]), "y": b64(&point[33..65])},
            {"kty": "OKP", "kid": EDDSA_KID, "crv": "Ed25519",
             "x": b64(self.ed.public_key().as_ref())},
        ]})
    }

    /// A token with `header` (its `alg` chooses the key; `kid` is added unless present or
    /// `null`) over `claims`.
    pub fn sign(&self, header: Value, claims: &Value) -> String {
        let mut header = header;
        let alg = header["alg"].as_str().unwrap_or("RS256").to_owned();
        if header.get("kid").is_none() {
            let kid = match alg.as_str() {
                "ES256" => ES256_KID,
                "EdDSA" => EDDSA_KID,
                _ => RS256_KID,
            };
            header["kid"] = json!(kid);
        } else if header["kid"].is_null()
            && let Some(object) = header.as_object_mut()
        {
            object.remove("kid");
        }
        let signed = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let signature = match alg.as_str() {
            "ES256" => self
                .ec
                .sign(&self.rng, signed.as_bytes())
                .expect("sign")
                .as_ref()
                .to_vec(),
            "EdDSA" => self.ed.sign(signed.as_bytes()).as_ref().to_vec(),
            "none" => Vec::new(),
            _ => {
                let mut signature = vec![0; self.rsa.public().modulus_len()];
                self.rsa
                    .sign(
                        &RSA_PKCS1_SHA256,
                        &self.rng,
                        signed.as_bytes(),
                        &mut signature,
                    )
                    .expect("sign");
                signature
            }
        };
        format!("{signed}.{}", b64(&signature))
    }

    /// An RS256 token with `claims`.
    pub fn token(&self, claims: &Value) -> String {
        self.sign(json!({"alg": "RS256", "typ": "at+jwt"}), claims)
    }

    /// Claims a token of this issuer for `audience` carries, valid from `now - 10` to
    /// `now + 300` (Unix seconds), for subject `alice` with `scope`.
    pub fn claims(&self, audience: &str, now: i64, scope: &str) -> Value {
        json!({
            "iss": self.issuer,
            "sub": "alice",
            "aud": audience,
            "iat": now - 10,
            "nbf": now - 10,
            "exp": now + 300,
            "scope": scope,
        })
    }
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}
