//! The JWS signature algorithms a token may use (RFC 7518 §3, RFC 8037); a key checks a
//! signature with one ([`crate::jwk::Key::verifies`]).
//!
//! Only asymmetric algorithms exist here: `none` and the HMAC family are not refused by a rule
//! that could be switched off, they have no variant at all.

/// A signature algorithm airlock verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Algorithm {
    Rs256,
    Rs384,
    Rs512,
    Ps256,
    Ps384,
    Ps512,
    Es256,
    Es384,
    EdDsa,
}

/// The kind of key an algorithm needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFamily {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl Algorithm {
    pub const ALL: [Algorithm; 9] = [
        Algorithm::Rs256,
        Algorithm::Rs384,
        Algorithm::Rs512,
        Algorithm::Ps256,
        Algorithm::Ps384,
        Algorithm::Ps512,
        Algorithm::Es256,
        Algorithm::Es384,
        Algorithm::EdDsa,
    ];

    /// The algorithm a JOSE `alg` names, if airlock verifies it.
    pub fn named(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Rs256 => "RS256",
            Algorithm::Rs384 => "RS384",
            Algorithm::Rs512 => "RS512",
            Algorithm::Ps256 => "PS256",
            Algorithm::Ps384 => "PS384",
            Algorithm::Ps512 => "PS512",
            Algorithm::Es256 => "ES256",
            Algorithm::Es384 => "ES384",
            Algorithm::EdDsa => "EdDSA",
        }
    }

    pub fn family(self) -> KeyFamily {
        match self {
            Algorithm::Rs256
            | Algorithm::Rs384
            | Algorithm::Rs512
            | Algorithm::Ps256
            | Algorithm::Ps384
            | Algorithm::Ps512 => KeyFamily::Rsa,
            Algorithm::Es256 => KeyFamily::P256,
            Algorithm::Es384 => KeyFamily::P384,
            Algorithm::EdDsa => KeyFamily::Ed25519,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_none_and_hmac_are_not_algorithms() {
        for algorithm in Algorithm::ALL {
            assert_eq!(Algorithm::named(algorithm.name()), Some(algorithm));
        }
        for refused in ["none", "None", "HS256", "HS512", "rs256", "ES256K", ""] {
            assert_eq!(Algorithm::named(refused), None, "{refused}");
        }
    }
}
