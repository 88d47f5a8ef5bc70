//! The shipped policy files, embedded byte for byte (SPEC §7.1–§7.3).

/// `policies/default.toml`.
pub const DEFAULT_PROFILE: &[u8] = include_bytes!("../../../policies/default.toml");
/// `policies/hardline.toml`.
pub const HARDLINE: &[u8] = include_bytes!("../../../policies/hardline.toml");
/// The version the shipped files must produce.
pub const SHIPPED_VERSION: &str = "default@9f2e26918d43+h3997d343";
