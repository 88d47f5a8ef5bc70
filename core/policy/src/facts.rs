//! What the gate reads of an action (SPEC §6): the fields the engine, the matrix conditions, the
//! overlay and the hardline rules look at, and nothing else. Both the owned
//! `ProposedAction` and the borrowed
//! [`ActionRef`](crate::action_ref::ActionRef) provide them, so one engine decides either, and
//! the audit-only fields (ids, tenant, summary, hash, time) are never in reach of a rule.

use crate::action::{JsonMap, ProposedAction};
use crate::vocab::{ActionKind, IdempotencyClass, SideEffectClass, TargetKind, TrustLevel};

/// The fields a decision may depend on.
pub trait ActionFacts {
    fn kind(&self) -> ActionKind;
    /// The tool's internal name (`web.fetch`, `mcp.{server}.resource.read`, …).
    fn name(&self) -> &str;
    fn side_effect(&self) -> SideEffectClass;
    fn idempotency(&self) -> IdempotencyClass;
    fn origin_trust(&self) -> TrustLevel;
    /// Whether any content feeding the action is `external_untrusted` (the overlay's test):
    /// the origin, or the label of any argument.
    fn carries_untrusted_content(&self) -> bool;
    fn arguments(&self) -> &JsonMap;
    fn target_kind(&self) -> &TargetKind;
    fn target_isolated(&self) -> bool;
    fn target_network_enabled(&self) -> bool;
    fn target_server_id(&self) -> Option<&str>;
}

impl ActionFacts for ProposedAction {
    fn kind(&self) -> ActionKind {
        self.kind
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn side_effect(&self) -> SideEffectClass {
        self.side_effect
    }
    fn idempotency(&self) -> IdempotencyClass {
        self.idempotency
    }
    fn origin_trust(&self) -> TrustLevel {
        self.origin_trust
    }
    fn carries_untrusted_content(&self) -> bool {
        ProposedAction::carries_untrusted_content(self)
    }
    fn arguments(&self) -> &JsonMap {
        &self.arguments
    }
    fn target_kind(&self) -> &TargetKind {
        &self.target.kind
    }
    fn target_isolated(&self) -> bool {
        self.target.isolated
    }
    fn target_network_enabled(&self) -> bool {
        self.target.network_enabled
    }
    fn target_server_id(&self) -> Option<&str> {
        self.target.server_id.as_deref()
    }
}
