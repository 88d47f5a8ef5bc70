//! Tool invocations (SPEC §9): the row, the single gate, the pipeline and recovery.

pub mod call_result;
pub mod gate;
pub mod outcome;
pub mod pipeline;
pub mod recovery;
pub mod repeat;
pub mod replay;
pub mod shadow;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::action::PolicyDecision;
use crate::ids::{ApprovalId, InvocationId, ParallelGroupId, RunId, SessionId};
use crate::time::Timestamp;
use crate::vocab::{
    IdempotencyClass, InvocationStatus, OutcomeStatus, RiskLevel, SideEffectClass, TargetKind,
    TrustLevel,
};

use outcome::Outcome;

/// One row of `tool_invocations` (SPEC §9.1). The first block never changes after insert.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    pub id: InvocationId,
    pub run_id: RunId,
    pub session_id: SessionId,
    pub tenant_id: String,
    pub step_number: u32,
    pub call_id: String,
    pub tool_name: String,
    pub tool_version: String,
    pub side_effect: SideEffectClass,
    pub risk: RiskLevel,
    pub idempotency_class: IdempotencyClass,
    pub required_scopes: Vec<String>,
    pub raw_arguments: Value,
    /// The canonical JSON text of the normalized arguments.
    pub arguments: String,
    pub normalized_arguments_hash: String,
    pub effective_arguments_hash: String,
    pub idempotency_key: String,
    pub argument_trust: BTreeMap<String, TrustLevel>,
    pub origin_trust: TrustLevel,
    /// The target kind of the tool's spec when the call was proposed: with the fields above it
    /// is the whole proposed action, so `policy replay` can decide the call again. `None` on
    /// rows written before it was recorded (SQLite M11, PostgreSQL V9).
    pub target_kind: Option<TargetKind>,
    pub parallel_group: Option<ParallelGroupId>,
    pub created_at: Timestamp,

    pub status: InvocationStatus,
    pub policy_decision: Option<PolicyDecision>,
    /// The watermark: set only by START, before the body runs.
    pub effect_sent_at: Option<Timestamp>,
    /// `suspended_kind = approval`, `suspended_ref` = this id.
    pub suspended_approval: Option<ApprovalId>,
    pub structured_result: Option<Value>,
    pub output_bytes: Option<u64>,
    pub outcome: Option<Outcome>,
    /// Canonical JSON text of the result item, replayed byte-identically.
    pub result_item: Option<String>,
    pub outcome_status: Option<OutcomeStatus>,
    pub reason_code: Option<String>,
    pub updated_at: Timestamp,
}

impl Invocation {
    /// Whether `next` differs only in mutable fields.
    pub fn same_identity(&self, next: &Invocation) -> bool {
        self.id == next.id
            && self.run_id == next.run_id
            && self.session_id == next.session_id
            && self.tenant_id == next.tenant_id
            && self.step_number == next.step_number
            && self.call_id == next.call_id
            && self.tool_name == next.tool_name
            && self.tool_version == next.tool_version
            && self.side_effect == next.side_effect
            && self.risk == next.risk
            && self.idempotency_class == next.idempotency_class
            && self.required_scopes == next.required_scopes
            && self.raw_arguments == next.raw_arguments
            && self.arguments == next.arguments
            && self.normalized_arguments_hash == next.normalized_arguments_hash
            && self.effective_arguments_hash == next.effective_arguments_hash
            && self.idempotency_key == next.idempotency_key
            && self.argument_trust == next.argument_trust
            && self.origin_trust == next.origin_trust
            && self.target_kind == next.target_kind
            && self.parallel_group == next.parallel_group
            && self.created_at == next.created_at
    }

    /// Whether a crash after START leaves this call's effect in doubt (SPEC §9.3, §9.4).
    pub fn effect_in_doubt(&self) -> bool {
        self.effect_sent_at.is_some()
            && matches!(
                self.idempotency_class,
                IdempotencyClass::NonIdempotent | IdempotencyClass::ConditionallyIdempotent
            )
    }

    /// Closes the row with an outcome and its result item (terminal rows carry both).
    pub fn close(&mut self, outcome: Outcome, result_item: String, now: Timestamp) {
        self.status = outcome.invocation_status();
        self.outcome_status = Some(outcome.status);
        self.reason_code = Some(outcome.reason_code.clone());
        self.outcome = Some(outcome);
        self.result_item = Some(result_item);
        self.updated_at = now;
    }
}
