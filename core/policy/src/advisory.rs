//! The advisory layer and standing authorization (SPEC §6.4): interfaces only. The v1 pipeline
//! calls neither; `combine` is the one implemented piece.

use std::future::Future;
use std::pin::Pin;

use crate::action::{PolicyDecision, ProposedAction};
use crate::vocab::PolicyDecisionType;

/// A boxed, sendable future: what an advisory reviewer returns. `airlock-core`'s ports use the
/// same alias for every asynchronous port.
pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What an advisory reviewer may say. It cannot express allow or a modification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdvisoryVerdict {
    Abstain,
    RequireApproval,
    Deny,
}

/// The stricter of the deterministic decision and the verdict: never lowers a rank.
pub fn combine(deterministic: PolicyDecisionType, verdict: AdvisoryVerdict) -> PolicyDecisionType {
    let advised = match verdict {
        AdvisoryVerdict::Abstain => return deterministic,
        AdvisoryVerdict::RequireApproval => PolicyDecisionType::RequireApproval,
        AdvisoryVerdict::Deny => PolicyDecisionType::Deny,
    };
    if advised.rank() > deterministic.rank() {
        advised
    } else {
        deterministic
    }
}

/// Declared for later versions; v1 never calls it.
pub trait AdvisoryReviewer: Send + Sync {
    fn review<'a>(&'a self, action: &'a ProposedAction) -> BoxFut<'a, AdvisoryVerdict>;
}

/// A standing authorization's identity; both parts are required when `allowed` is true.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizationRef {
    pub authorization_kind: String,
    pub authorization_ref: String,
}

/// The answer of a [`StandingAuthorizer`]. Being allowed requires naming the authorization, so
/// the type carries it only in that case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StandingAuthorization {
    Allowed {
        reason_code: String,
        authorization: AuthorizationRef,
    },
    NotAllowed {
        reason_code: String,
    },
}

/// Declared for later versions; v1 never calls it.
pub trait StandingAuthorizer: Send + Sync {
    fn authorize(
        &self,
        action: &ProposedAction,
        decision: &PolicyDecision,
        principal: &crate::principal::Principal,
    ) -> Option<StandingAuthorization>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combine_takes_the_higher_rank() {
        use PolicyDecisionType::*;
        assert_eq!(combine(Allow, AdvisoryVerdict::Abstain), Allow);
        assert_eq!(
            combine(Allow, AdvisoryVerdict::RequireApproval),
            RequireApproval
        );
        assert_eq!(combine(Deny, AdvisoryVerdict::RequireApproval), Deny);
        assert_eq!(combine(RequireApproval, AdvisoryVerdict::Deny), Deny);
    }
}
