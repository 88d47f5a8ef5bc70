//! The caller of every service operation (SPEC §10.4): a tenant, a principal and the scopes it
//! holds.

use crate::scope::ScopeSet;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant_id: String,
    pub principal_id: String,
    pub scopes: ScopeSet,
}

/// The longest tenant, principal or worker id, in characters (SPEC §15).
pub const MAX_IDENTITY_CHARS: usize = 128;

/// Why a tenant, principal or worker id was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("must be 1..=128 characters")]
    Length,
    #[error("must not contain control characters")]
    Control,
}

/// The rule SPEC §15 gives a script's `tenant_id` and `principal_id`: 1..=128 characters, none a
/// control character. The command line holds its `--tenant`, `--principal` and `--worker-id`
/// to it too, so no audit record can name an empty or unprintable actor.
pub fn check_identity(value: &str) -> Result<(), IdentityError> {
    if !(1..=MAX_IDENTITY_CHARS).contains(&value.chars().count()) {
        return Err(IdentityError::Length);
    }
    if value.chars().any(char::is_control) {
        return Err(IdentityError::Control);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_one_to_128_printable_characters() {
        assert_eq!(check_identity("alice"), Ok(()));
        assert_eq!(check_identity(&"é".repeat(128)), Ok(()));
        assert_eq!(check_identity(""), Err(IdentityError::Length));
        assert_eq!(check_identity(&"a".repeat(129)), Err(IdentityError::Length));
        assert_eq!(check_identity("al\nice"), Err(IdentityError::Control));
        assert_eq!(check_identity("\u{7f}"), Err(IdentityError::Control));
    }
}
