//! Random secrets from the operating system: API tokens (core validates and hashes them; it
//! draws no randomness itself) and console session ids.

use airlock_core::access::{TOKEN_SECRET_BYTES, TokenSecret};

/// The operating system's generator failed; nothing was issued.
#[derive(Debug, thiserror::Error)]
#[error("no randomness from the operating system: {0}")]
pub struct RandomnessError(String);

/// `N` bytes from the operating system's generator.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], RandomnessError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| RandomnessError(e.to_string()))?;
    Ok(bytes)
}

/// A fresh API token: 256 random bits, `alk_` + 64 hex digits.
pub fn new_token() -> Result<TokenSecret, RandomnessError> {
    random_bytes::<TOKEN_SECRET_BYTES>().map(TokenSecret::from_random)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_fresh_and_well_formed() {
        let a = new_token().expect("random");
        let b = new_token().expect("random");
        assert_ne!(a, b);
        assert!(TokenSecret::parse(a.expose()).is_ok());
        assert_eq!(a.expose().len(), 4 + 64);
    }
}
