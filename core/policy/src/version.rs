//! `policy_version` (SPEC §7.4): `{name}@{sha12}+h{sha8}` over the raw file bytes.

use std::fmt;

use crate::canonical::sha256_hex;

/// The label and the full hashes behind it. Audits use the full hashes; the label is for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyVersion {
    label: String,
    pub profile_name: String,
    pub profile_sha256: String,
    pub hardline_sha256: String,
}

impl PolicyVersion {
    /// The one hashing path: raw bytes, exactly as read.
    pub fn of(profile_name: &str, profile_bytes: &[u8], hardline_bytes: &[u8]) -> PolicyVersion {
        let profile_sha256 = sha256_hex(profile_bytes);
        let hardline_sha256 = sha256_hex(hardline_bytes);
        let label = format!(
            "{profile_name}@{}+h{}",
            &profile_sha256[..12],
            &hardline_sha256[..8]
        );
        PolicyVersion {
            label,
            profile_name: profile_name.to_owned(),
            profile_sha256,
            hardline_sha256,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.label
    }
}

impl fmt::Display for PolicyVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)
    }
}
