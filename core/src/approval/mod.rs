//! Approvals (SPEC §10): the record, its statuses and the redacted argument view approvers see.

pub mod redact;
pub mod revalidate;

use crate::ids::{ApprovalId, InvocationId, RunId, SessionId};
use crate::time::Timestamp;
use crate::vocab::{ActionKind, ApprovalResolution, ApprovalStatus, PolicyDecisionType, RiskLevel};

/// One row of `approvals` (SPEC §10.1).
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    pub id: ApprovalId,
    pub tenant_id: String,
    pub principal_id: String,
    pub session_id: SessionId,
    pub run_id: RunId,
    pub action_kind: ActionKind,
    /// The invocation id; unique across approvals.
    pub action_id: InvocationId,
    pub tool_invocation_id: InvocationId,
    pub tool_name: String,
    pub tool_version: String,
    pub action_summary: String,
    /// The redacted display copy; the engine never reads it.
    pub arguments: serde_json::Value,
    pub normalized_arguments_hash: String,
    pub effective_arguments_hash: String,
    pub required_scopes: Vec<String>,
    pub risk: RiskLevel,
    pub policy_reason: String,
    pub policy_decision: PolicyDecisionType,
    pub policy_version: String,
    pub revalidated_policy_version: Option<String>,
    pub status: ApprovalStatus,
    pub resolution: Option<ApprovalResolution>,
    pub resolution_reason: Option<String>,
    pub expires_at: Timestamp,
    pub created_at: Timestamp,
    /// Null until the PARK that announces the approval; unannounced approvals are invisible.
    pub requested_at: Option<Timestamp>,
    pub resolved_at: Option<Timestamp>,
    pub resolved_by: Option<String>,
}

impl Approval {
    /// Whether `next` keeps every field a terminal row must keep; only
    /// `revalidated_policy_version` may be written once after resolution.
    pub fn same_identity(&self, next: &Approval) -> bool {
        self.id == next.id
            && self.tenant_id == next.tenant_id
            && self.principal_id == next.principal_id
            && self.session_id == next.session_id
            && self.run_id == next.run_id
            && self.action_id == next.action_id
            && self.tool_invocation_id == next.tool_invocation_id
            && self.tool_name == next.tool_name
            && self.tool_version == next.tool_version
            && self.normalized_arguments_hash == next.normalized_arguments_hash
            && self.effective_arguments_hash == next.effective_arguments_hash
            && self.required_scopes == next.required_scopes
            && self.risk == next.risk
            && self.policy_version == next.policy_version
            && self.expires_at == next.expires_at
            && self.created_at == next.created_at
    }
}
