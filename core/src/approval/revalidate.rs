//! Revalidation at resume (SPEC §10.3): an approved action runs only if it is still the same
//! action under rules that still permit it.

use crate::action::PolicyDecision;
use crate::invocation::outcome::codes;
use crate::vocab::PolicyDecisionType;

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

/// The first matching row of the §10.3 table. `fresh` is `None` when the action could not be
/// rebuilt (unregistered tool or arguments that no longer normalize).
pub fn revalidate(
    identity: ActionIdentity,
    fresh: Option<PolicyDecision>,
    approved_policy_version: &str,
) -> Revalidation {
    let changed = Revalidation::Denied {
        reason_code: codes::REVALIDATION_CHANGED,
    };
    let unchanged = identity.tool_registered
        && identity.arguments_hash_unchanged
        && identity.required_scopes_unchanged
        && identity.scopes_still_held;
    let Some(fresh) = fresh.filter(|_| unchanged) else {
        return changed;
    };
    let version_changed = fresh.policy_version != approved_policy_version;
    let escalated = matches!(
        fresh.decision,
        PolicyDecisionType::Deny | PolicyDecisionType::AllowWithModifications
    ) || (version_changed && fresh.decision != PolicyDecisionType::Allow);
    if escalated {
        Revalidation::Denied {
            reason_code: codes::REVALIDATION_ESCALATED,
        }
    } else {
        Revalidation::Authorized(fresh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(d: PolicyDecisionType, version: &str) -> PolicyDecision {
        PolicyDecision {
            decision: d,
            reason_code: "policy.matrix.external_write".into(),
            explanation: String::new(),
            policy_version: version.into(),
            modified_arguments: None,
        }
    }

    const SAME: ActionIdentity = ActionIdentity {
        tool_registered: true,
        arguments_hash_unchanged: true,
        required_scopes_unchanged: true,
        scopes_still_held: true,
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
            assert_eq!(
                revalidate(broken, Some(decision(Allow, "v1")), "v1"),
                changed
            );
        }
        assert_eq!(revalidate(SAME, None, "v1"), changed);
        assert_eq!(
            revalidate(SAME, Some(decision(Deny, "v1")), "v1"),
            escalated
        );
        assert_eq!(
            revalidate(SAME, Some(decision(AllowWithModifications, "v1")), "v1"),
            escalated
        );
        assert_eq!(
            revalidate(SAME, Some(decision(RequireApproval, "v2")), "v1"),
            escalated
        );
        assert_eq!(
            revalidate(SAME, Some(decision(Deny, "v2")), "v1"),
            escalated
        );
        assert_eq!(
            revalidate(SAME, Some(decision(Allow, "v2")), "v1"),
            Revalidation::Authorized(decision(Allow, "v2"))
        );
        assert_eq!(
            revalidate(SAME, Some(decision(RequireApproval, "v1")), "v1"),
            Revalidation::Authorized(decision(RequireApproval, "v1"))
        );
        assert_eq!(
            revalidate(SAME, Some(decision(Allow, "v1")), "v1"),
            Revalidation::Authorized(decision(Allow, "v1"))
        );
    }
}
