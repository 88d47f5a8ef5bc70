//! The single gate (SPEC §9.1, §16 #9): the one function that moves an invocation to
//! `AUTHORIZED`. It accepts only a permitting decision, or an approved `require_approval` that
//! revalidation kept, so nothing runs without authority (G2).

use crate::action::PolicyDecision;
use crate::time::Timestamp;
use crate::vocab::{InvocationStatus, PolicyDecisionType};

use super::Invocation;

/// Why the gate was passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authority {
    /// PROPOSE with a fresh `allow`.
    PolicyAllowed,
    /// REVALIDATE of an `approved` approval (fresh `allow`, or `require_approval` under the same
    /// policy version, which the approval satisfies).
    ApprovedAndRevalidated,
}

/// Marks `invocation` AUTHORIZED with `decision`, clearing any suspension.
pub fn authorize(
    invocation: &mut Invocation,
    decision: PolicyDecision,
    authority: Authority,
    now: Timestamp,
) {
    match authority {
        Authority::PolicyAllowed => {
            assert_eq!(
                decision.decision,
                PolicyDecisionType::Allow,
                "§16 #9: PROPOSE authorizes only an allow"
            );
            assert_eq!(invocation.status, InvocationStatus::Proposed);
        }
        Authority::ApprovedAndRevalidated => {
            assert!(
                matches!(
                    decision.decision,
                    PolicyDecisionType::Allow | PolicyDecisionType::RequireApproval
                ),
                "§10.3: revalidation authorizes only allow or an approved require_approval"
            );
            assert_eq!(invocation.status, InvocationStatus::WaitingForApproval);
        }
    }
    invocation.status = InvocationStatus::Authorized;
    invocation.policy_decision = Some(decision);
    invocation.suspended_approval = None;
    invocation.updated_at = now;
}
