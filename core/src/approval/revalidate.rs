//! Revalidation at resume (SPEC §10.3): an approved action runs only if it is still the same
//! action under rules that still permit it.

use crate::action::PolicyDecision;
use crate::invocation::outcome::codes;
use crate::vocab::{PolicyDecisionType, RiskLevel};

/// What the REVALIDATE transaction writes for an `approved` approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revalidation {
    Authorized(PolicyDecision),
    Denied { reason_code: &'static str },
}

/// The facts the table's first row checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActionIdentity {
    pub tool_registered: bool,
    pub arguments_hash_unchanged: bool,
    pub required_scopes_unchanged: bool,
    pub scopes_still_held: bool,
}

/// What the approval was granted for: the policy version, reason and risk of the decision a
/// human approved (the §22.5 row compares a fresh decision with them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Approved<'a> {
    pub policy_version: &'a str,
    pub policy_reason: &'a str,
    pub risk: RiskLevel,
}

/// The action evaluated again at resume, with the risk its tool has now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fresh {
    pub decision: PolicyDecision,
    pub risk: RiskLevel,
}

/// The first matching row of the §10.3 table, with §22.5's row before the escalation row: a
/// new policy version that still asks for approval for the same reason, at a risk no higher,
/// asks for exactly what the human approved, so the approval stands (every release that
/// touches the shipped rules changes the version, and would otherwise turn every pending
/// approval into a denial at resume). `fresh` is `None` when the action could not be rebuilt
/// (unregistered tool or arguments that no longer normalize).
pub fn revalidate(
    identity: ActionIdentity,
    fresh: Option<Fresh>,
    approved: &Approved<'_>,
) -> Revalidation {
    let changed = Revalidation::Denied {
        reason_code: codes::REVALIDATION_CHANGED,
    };
    let unchanged = identity.tool_registered
        && identity.arguments_hash_unchanged
        && identity.required_scopes_unchanged
        && identity.scopes_still_held;
    let Some(Fresh { decision, risk }) = fresh.filter(|_| unchanged) else {
        return changed;
    };
    let version_changed = decision.policy_version != approved.policy_version;
    let same_approval_asked = decision.decision == PolicyDecisionType::RequireApproval
        && decision.reason_code == approved.policy_reason
        && risk <= approved.risk;
    let escalated = matches!(
        decision.decision,
        PolicyDecisionType::Deny | PolicyDecisionType::AllowWithModifications
    ) || (version_changed
        && decision.decision != PolicyDecisionType::Allow
        && !same_approval_asked);
    if escalated {
        Revalidation::Denied {
            reason_code: codes::REVALIDATION_ESCALATED,
        }
    } else {
        Revalidation::Authorized(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REASON: &str = "policy.matrix.external_write";

    fn decision(d: PolicyDecisionType, version: &str) -> PolicyDecision {
        PolicyDecision {
            decision: d,
            reason_code: REASON.into(),
            explanation: String::new(),
            policy_version: version.into(),
            modified_arguments: None,
        }
    }

    fn fresh(d: PolicyDecisionType, version: &str) -> Option<Fresh> {
        Some(Fresh {
            decision: decision(d, version),
            risk: RiskLevel::Medium,
        })
    }

    const SAME: ActionIdentity = ActionIdentity {
        tool_registered: true,
        arguments_hash_unchanged: true,
        required_scopes_unchanged: true,
        scopes_still_held: true,
    };

    const V1: Approved<'static> = Approved {
        policy_version: "v1",
        policy_reason: REASON,
        risk: RiskLevel::Medium,
    };

    #[test]
    fn every_row_of_the_table() {
        use PolicyDecisionType::*;
        let changed = Revalidation::Denied {
            reason_code: codes::REVALIDATION_CHANGED,
        };
        let escalated = Revalidation::Denied {
            reason_code: codes::REVALIDATION_ESCALATED,
        };
        for broken in [
            ActionIdentity {
                tool_registered: false,
                ..SAME
            },
            ActionIdentity {
                arguments_hash_unchanged: false,
                ..SAME
            },
            ActionIdentity {
                required_scopes_unchanged: false,
                ..SAME
            },
            ActionIdentity {
                scopes_still_held: false,
                ..SAME
            },
        ] {
            assert_eq!(revalidate(broken, fresh(Allow, "v1"), &V1), changed);
        }
        assert_eq!(revalidate(SAME, None, &V1), changed);
        assert_eq!(revalidate(SAME, fresh(Deny, "v1"), &V1), escalated);
        assert_eq!(
            revalidate(SAME, fresh(AllowWithModifications, "v1"), &V1),
            escalated
        );
        assert_eq!(revalidate(SAME, fresh(Deny, "v2"), &V1), escalated);
        assert_eq!(
            revalidate(SAME, fresh(Allow, "v2"), &V1),
            Revalidation::Authorized(decision(Allow, "v2"))
        );
        assert_eq!(
            revalidate(SAME, fresh(RequireApproval, "v1"), &V1),
            Revalidation::Authorized(decision(RequireApproval, "v1"))
        );
        assert_eq!(
            revalidate(SAME, fresh(Allow, "v1"), &V1),
            Revalidation::Authorized(decision(Allow, "v1"))
        );
    }

    /// §22.5: a new version that asks for the same approval (same reason, risk no higher)
    /// keeps it; a different reason or a higher risk is still an escalation.
    #[test]
    fn a_new_version_asking_for_the_same_approval_keeps_it() {
        use PolicyDecisionType::*;
        let escalated = Revalidation::Denied {
            reason_code: codes::REVALIDATION_ESCALATED,
        };
        assert_eq!(
            revalidate(SAME, fresh(RequireApproval, "v2"), &V1),
            Revalidation::Authorized(decision(RequireApproval, "v2"))
        );
        let lower = Some(Fresh {
            decision: decision(RequireApproval, "v2"),
            risk: RiskLevel::Low,
        });
        assert!(matches!(
            revalidate(SAME, lower, &V1),
            Revalidation::Authorized(_)
        ));
        let higher = Some(Fresh {
            decision: decision(RequireApproval, "v2"),
            risk: RiskLevel::High,
        });
        assert_eq!(revalidate(SAME, higher, &V1), escalated);
        let mut other_reason = decision(RequireApproval, "v2");
        other_reason.reason_code = "policy.overlay.tainted".into();
        assert_eq!(
            revalidate(
                SAME,
                Some(Fresh {
                    decision: other_reason,
                    risk: RiskLevel::Medium
                }),
                &V1
            ),
            escalated
        );
    }
}
