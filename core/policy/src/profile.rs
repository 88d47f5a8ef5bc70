//! A loaded profile (SPEC §7.2): the matrix and the settings around it, frozen after load.

use crate::vocab::RiskLevel;

use super::matrix::{FailClosed, Matrix};

/// The longest approval expiry a profile may set: ten years (3650 days), in seconds. A larger
/// value is a typo or an attack rather than a policy, and expiry times are computed as
/// `created_at + seconds` on a microsecond clock, which a value near `u64::MAX` would saturate.
pub const MAX_APPROVAL_EXPIRY_SECONDS: u64 = 315_360_000;

/// Seconds an approval stays open, per risk level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApprovalExpiry {
    pub low: u64,
    pub medium: u64,
    pub high: u64,
    pub critical: u64,
}

impl ApprovalExpiry {
    pub fn seconds(&self, risk: RiskLevel) -> u64 {
        match risk {
            RiskLevel::Low => self.low,
            RiskLevel::Medium => self.medium,
            RiskLevel::High => self.high,
            RiskLevel::Critical => self.critical,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: String,
    pub default_effect: FailClosed,
    pub unknown_tool_decision: FailClosed,
    pub external_untrusted_requires_approval: bool,
    pub self_approval_enabled: bool,
    pub approval_expiry: ApprovalExpiry,
    pub matrix: Matrix,
}
