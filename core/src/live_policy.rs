//! The policy in force, replaceable while a process runs (issue 32 item 4: reload without a
//! restart).
//!
//! Every clone of an [`Env`](crate::env::Env) (the worker's, the control service's, the MCP
//! gateway's) shares one `LivePolicy`, so a reload (`SIGHUP`, `POST /v1/admin/reload`) reaches
//! them all at once. A reader takes the [`Rulesets`] of the moment and decides with them: a call
//! is decided whole by one policy, never half by the old one and half by the new; a call decided
//! before a reload and executed after it is revalidated as SPEC §10.3 says for any change of
//! `policy_version`.
//!
//! The live ruleset and the shadow candidate are replaced together, so a shadow difference always
//! names the live policy that was in force beside its candidate.

use std::sync::{Arc, PoisonError, RwLock};

use crate::policy::Ruleset;

/// The live ruleset and, in shadow mode, the candidate decided beside it.
#[derive(Debug, Clone)]
pub struct Rulesets {
    pub live: Arc<Ruleset>,
    pub shadow: Option<Arc<Ruleset>>,
}

/// The rulesets in force, shared by every clone of an environment.
#[derive(Debug)]
pub struct LivePolicy {
    current: RwLock<Rulesets>,
}

impl LivePolicy {
    pub fn new(live: Arc<Ruleset>, shadow: Option<Arc<Ruleset>>) -> Arc<LivePolicy> {
        Arc::new(LivePolicy {
            current: RwLock::new(Rulesets { live, shadow }),
        })
    }

    /// One ruleset, no shadow.
    pub fn fixed(live: Ruleset) -> Arc<LivePolicy> {
        LivePolicy::new(Arc::new(live), None)
    }

    /// The rulesets in force now.
    pub fn current(&self) -> Rulesets {
        // A writer only swaps two `Arc`s: a poisoned lock still holds a whole value.
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces both; returns the rulesets that were in force.
    pub fn replace(&self, next: Rulesets) -> Rulesets {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *current, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_reaches_every_holder_and_returns_the_old_rulesets() {
        let shipped = Arc::new(Ruleset::shipped().unwrap());
        let policy = LivePolicy::new(Arc::clone(&shipped), None);
        let held_elsewhere = Arc::clone(&policy);
        let taken_before = policy.current();
        let mut edited = (*shipped).clone();
        edited.profile.self_approval_enabled = !edited.profile.self_approval_enabled;
        let edited = Arc::new(edited);
        let old = policy.replace(Rulesets {
            live: Arc::clone(&edited),
            shadow: Some(Arc::clone(&shipped)),
        });
        assert!(Arc::ptr_eq(&old.live, &shipped));
        assert!(Arc::ptr_eq(&held_elsewhere.current().live, &edited));
        assert!(held_elsewhere.current().shadow.is_some());
        assert!(
            Arc::ptr_eq(&taken_before.live, &shipped),
            "what a reader took stays whole"
        );
    }
}
