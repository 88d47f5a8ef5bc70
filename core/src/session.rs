//! Sessions and the other small records of SPEC §14: settlements and policy profiles.

use crate::ids::{InvocationId, RunId, SessionId, SettlementId};
use crate::time::Timestamp;
use crate::vocab::SettlementOutcome;

/// One row of `sessions`: events are sequenced per session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub id: SessionId,
    pub tenant_id: String,
    pub principal_id: String,
    pub next_event_sequence: u64,
    pub created_at: Timestamp,
}

/// One row of `uncertain_settlements` (SPEC §9.5): a human's finding; the invocation stays
/// UNCERTAIN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    pub id: SettlementId,
    pub invocation_id: InvocationId,
    pub run_id: RunId,
    pub tenant_id: String,
    pub outcome: SettlementOutcome,
    pub note: String,
    pub settled_by: String,
    pub settled_at: Timestamp,
}

/// One row of `policy_profiles` (SPEC §7.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyProfileRecord {
    pub policy_version: String,
    pub profile_name: String,
    pub profile_sha256: String,
    pub hardline_sha256: String,
    pub rule_count: u32,
    pub loaded_at: Timestamp,
    pub loaded_by: String,
}

impl PolicyProfileRecord {
    /// Identical content, ignoring when and by whom it was loaded.
    pub fn same_content(&self, other: &PolicyProfileRecord) -> bool {
        self.policy_version == other.policy_version
            && self.profile_name == other.profile_name
            && self.profile_sha256 == other.profile_sha256
            && self.hardline_sha256 == other.hardline_sha256
            && self.rule_count == other.rule_count
    }
}
