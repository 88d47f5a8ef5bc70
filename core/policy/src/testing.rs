//! Test support for the policy gate (SPEC §6, §21), compiled for this crate's tests and under
//! the `testing` feature: the shipped ruleset loaded once, and a user-origin tool
//! call with the fields the engine reads chosen and every audit-only field fixed, so a policy
//! test names only what its case is about.

use std::sync::OnceLock;

use serde_json::Value;
use uuid::Uuid;

use crate::Ruleset;
use crate::action::{JsonMap, PolicyDecision, ProposedAction, Target};
use crate::canonical::arguments_hash;
use crate::time::Timestamp;
use crate::vocab::{
    ActionKind, IdempotencyClass, RiskLevel, SideEffectClass, TargetKind, TrustLevel,
};

/// 2026-01-15T12:00:00Z: the instant every test action is evaluated at, and the epoch of
/// `airlock_core`'s test samples.
pub const T0: Timestamp = Timestamp::from_micros(1_768_478_400_000_000);

/// The tenant of every test action and of `airlock_core`'s test samples.
pub const TENANT: &str = "acme";

/// The shipped ruleset, loaded once per test binary.
pub fn shipped_ruleset() -> &'static Ruleset {
    static SHIPPED: OnceLock<Ruleset> = OnceLock::new();
    SHIPPED.get_or_init(|| Ruleset::shipped().expect("the shipped policy loads"))
}

/// A tool call from a user turn: medium risk, no scopes, no argument labels, the target the
/// pipeline sets for `target`. Ids, tenant, step, version, summary and time are audit only
/// (the engine never reads them), so they are fixed.
pub fn tool_call(
    side_effect: SideEffectClass,
    name: &str,
    idempotency: IdempotencyClass,
    target: TargetKind,
    arguments: Value,
) -> ProposedAction {
    let arguments: JsonMap = match arguments {
        Value::Object(map) => map,
        other => panic!("test arguments must be an object, got {other}"),
    };
    ProposedAction {
        kind: ActionKind::ToolCall,
        action_id: Uuid::from_u128(0x0b5e_55ed_0000_4000_8000_0000_0000_0001),
        tenant_id: TENANT.to_owned(),
        session_id: Uuid::from_u128(0x0b5e_55ed_0000_4000_8000_0000_0000_0002),
        run_id: Uuid::from_u128(0x0b5e_55ed_0000_4000_8000_0000_0000_0003),
        step_number: 1,
        name: name.to_owned(),
        version: Some("1.0.0".to_owned()),
        summary: format!("Run {name} with validated arguments."),
        side_effect,
        risk: RiskLevel::Medium,
        idempotency,
        required_scopes: Vec::new(),
        normalized_arguments_hash: arguments_hash(&Value::Object(arguments.clone())),
        arguments,
        argument_trust: Default::default(),
        origin_trust: TrustLevel::User,
        target: Target::for_kind(target),
        evaluated_at: T0,
    }
}

/// A decision with only what comparisons read: decision, reason code and policy version.
pub fn decision(
    decision: crate::vocab::PolicyDecisionType,
    reason_code: &str,
    policy_version: &str,
) -> PolicyDecision {
    PolicyDecision {
        decision,
        reason_code: reason_code.to_owned(),
        explanation: String::new(),
        policy_version: policy_version.to_owned(),
        modified_arguments: None,
    }
}
