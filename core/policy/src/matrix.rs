//! The effect matrix of a profile and its row conditions (SPEC §6.1 step 3, §6.2).
//!
//! The matrix is an array indexed by side-effect class, so "exactly one row per class" (step 2)
//! holds by construction once a profile has loaded.

use crate::facts::ActionFacts;
use crate::vocab::{PolicyCondition, PolicyDecisionType, SideEffectClass, TargetKind};

/// One matrix row. `otherwise` exists only beside a condition (SPEC §7.4 row 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatrixRule {
    Unconditional(PolicyDecisionType),
    Conditional {
        decision: PolicyDecisionType,
        condition: PolicyCondition,
        /// Absent: the profile's `default_effect` applies when the condition fails.
        otherwise: Option<PolicyDecisionType>,
    },
}

/// A decision a profile may fall back to: only ones that fail closed (SPEC §7.4 rows 9–10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailClosed {
    Deny,
    RequireApproval,
}

impl From<FailClosed> for PolicyDecisionType {
    fn from(value: FailClosed) -> Self {
        match value {
            FailClosed::Deny => PolicyDecisionType::Deny,
            FailClosed::RequireApproval => PolicyDecisionType::RequireApproval,
        }
    }
}

/// One row per side-effect class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matrix([MatrixRule; 15]);

impl Matrix {
    pub fn new(rules: [MatrixRule; 15]) -> Matrix {
        Matrix(rules)
    }

    pub fn row(&self, class: SideEffectClass) -> MatrixRule {
        self.0[class.index()]
    }

    /// Whether every action of `class` is denied whatever it says: its row is an unconditional
    /// `deny` (an MCP gateway does not list such tools, SPEC §19.2).
    pub fn denies_unconditionally(&self, class: SideEffectClass) -> bool {
        self.row(class) == MatrixRule::Unconditional(PolicyDecisionType::Deny)
    }

    /// Step 3: the row's decision if its condition holds, else `otherwise`, else the default.
    pub fn decide(
        &self,
        action: &(impl ActionFacts + ?Sized),
        default_effect: FailClosed,
    ) -> PolicyDecisionType {
        match self.row(action.side_effect()) {
            MatrixRule::Unconditional(decision) => decision,
            MatrixRule::Conditional {
                decision,
                condition,
                otherwise,
            } => {
                if condition_holds(condition, action) {
                    decision
                } else {
                    otherwise.unwrap_or(default_effect.into())
                }
            }
        }
    }
}

/// SPEC §6.2. Every condition reads only the action; none can be satisfied by a hostname.
pub fn condition_holds(condition: PolicyCondition, action: &(impl ActionFacts + ?Sized)) -> bool {
    match condition {
        PolicyCondition::PathInsideWorkspace => path_inside_workspace(action),
        PolicyCondition::HostOnAllowlist => host_on_allowlist(action),
        PolicyCondition::TargetIsolated => action.target_isolated(),
    }
}

/// Reads only the top-level `path`; NUL, length and symlinks are the workspace handle's job.
fn path_inside_workspace(action: &(impl ActionFacts + ?Sized)) -> bool {
    let Some(path) = action.arguments().get("path").and_then(|p| p.as_str()) else {
        return false;
    };
    if path.starts_with('/') || path.contains('\\') {
        return false;
    }
    let kind_holds = matches!(
        action.target_kind(),
        TargetKind::InProcess | TargetKind::Sandbox
    );
    if path.is_empty() {
        return kind_holds;
    }
    kind_holds
        && path
            .split('/')
            .all(|component| !matches!(component, "" | "." | ".."))
}

fn host_on_allowlist(action: &(impl ActionFacts + ?Sized)) -> bool {
    use crate::vocab::IdempotencyClass::ReadOnly;
    if action.side_effect() != SideEffectClass::NetworkRead || action.idempotency() != ReadOnly {
        return false;
    }
    let kind = action.target_kind();
    let web = *kind == TargetKind::WebProvider
        && action.target_network_enabled()
        && matches!(action.name(), "web.search" | "web.fetch");
    let browser = *kind == TargetKind::BrowserProvider
        && action.target_isolated()
        && action.target_network_enabled()
        && matches!(action.name(), "browser.navigate" | "browser.observe");
    // SPEC §19.6: a read of an upstream MCP server the operator listed in the gateway's file
    // (its name and target come from the gateway, never from an argument).
    web || browser || crate::upstream_read::is_configured_upstream_read(action)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unconditional_deny_row_denies_a_class_unconditionally() {
        let ruleset = crate::ruleset::Ruleset::shipped().expect("the shipped policy loads");
        let matrix = &ruleset.profile.matrix;
        assert!(matrix.denies_unconditionally(SideEffectClass::PackageInstall));
        assert!(!matrix.denies_unconditionally(SideEffectClass::None));
        assert!(
            !matrix.denies_unconditionally(SideEffectClass::ExternalWrite),
            "require_approval is not a deny"
        );
    }
}
