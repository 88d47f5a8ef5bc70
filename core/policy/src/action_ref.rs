//! The borrowed action (SPEC §4.1, §24): the same document as
//! `ProposedAction`, read with its strings left in the input
//! where they need no unescaping, for callers that decide many actions and keep none (`airlock
//! policy eval --jsonl`).
//!
//! It accepts exactly the documents `ProposedAction::from_json` accepts, with the same values:
//! the fields have the same names, types and rules, and anything this parse refuses is handed
//! to the owned parser, so every error, and which error wins, is the owned parser's own. Only
//! the arguments are owned (the hardline rules read them as JSON values). `from_json` (in
//! `action_scan`) tries a direct reader of the common shape before this serde parse.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use uuid::Uuid;

use crate::action::{
    ActionError, JsonMap, ProposedAction, Target, check_fields, object_only, required_nullable,
};
use crate::facts::ActionFacts;
use crate::ids::deserialize_canonical_uuid;
use crate::time::Timestamp;
use crate::vocab::{
    ActionKind, IdempotencyClass, RiskLevel, SideEffectClass, TargetKind, TrustLevel,
};
use crate::wire_text::WireStr;

/// A proposed action borrowing its strings from the input text.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionRef<'a> {
    pub kind: ActionKind,
    #[serde(deserialize_with = "deserialize_canonical_uuid")]
    pub action_id: Uuid,
    #[serde(borrow)]
    pub tenant_id: WireStr<'a>,
    #[serde(deserialize_with = "deserialize_canonical_uuid")]
    pub session_id: Uuid,
    #[serde(deserialize_with = "deserialize_canonical_uuid")]
    pub run_id: Uuid,
    pub step_number: u64,
    #[serde(borrow)]
    pub name: WireStr<'a>,
    #[serde(borrow, deserialize_with = "required_nullable")]
    pub version: Option<WireStr<'a>>,
    #[serde(borrow)]
    pub summary: WireStr<'a>,
    pub side_effect: SideEffectClass,
    pub risk: RiskLevel,
    pub idempotency: IdempotencyClass,
    #[serde(borrow)]
    pub required_scopes: Vec<WireStr<'a>>,
    pub arguments: JsonMap,
    #[serde(borrow)]
    pub normalized_arguments_hash: WireStr<'a>,
    #[serde(borrow)]
    pub argument_trust: TrustLabels<'a>,
    pub origin_trust: TrustLevel,
    #[serde(borrow, deserialize_with = "object_only")]
    pub target: TargetRef<'a>,
    pub evaluated_at: Timestamp,
}

/// The target, borrowed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetRef<'a> {
    pub kind: TargetKind,
    pub isolated: bool,
    pub network_enabled: bool,
    #[serde(borrow, deserialize_with = "required_nullable")]
    pub device_id: Option<WireStr<'a>>,
    #[serde(borrow, deserialize_with = "required_nullable")]
    pub server_id: Option<WireStr<'a>>,
}

/// `argument_trust`: labels by argument name. A name given twice keeps its last label, as the
/// owned action's map does (a map here too: a line with many labels costs no more than the
/// owned parse).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TrustLabels<'a>(pub BTreeMap<WireStr<'a>, TrustLevel>);

impl<'de: 'a, 'a> Deserialize<'de> for TrustLabels<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Labels;
        impl<'de> Visitor<'de> for Labels {
            type Value = TrustLabels<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<TrustLabels<'de>, A::Error> {
                let mut labels = BTreeMap::new();
                while let Some((name, level)) = map.next_entry::<WireStr<'de>, TrustLevel>()? {
                    labels.insert(name, level);
                }
                Ok(TrustLabels(labels))
            }
        }
        d.deserialize_map(Labels)
    }
}

impl<'a> ActionRef<'a> {
    /// The borrowed action read by serde (then, failing that, by the owned parser): what
    /// [`Self::from_json`] falls back to, and what the tests hold the direct reader to.
    #[doc(hidden)]
    pub fn from_json_serde(text: &'a str) -> Result<ActionRef<'a>, ActionError> {
        // The borrowed parse under serde_json's recursion limit, as the owned fast path does;
        // a document it takes, the owned parse takes with the same values, so the same checks
        // decide. Anything else goes to the owned parser, which reports (or, for a document
        // deeper than the limit, accepts) it.
        let mut deserializer = serde_json::Deserializer::from_str(text);
        if let Ok(action) = object_only::<_, ActionRef>(&mut deserializer)
            && deserializer.end().is_ok()
        {
            return action.validated();
        }
        ProposedAction::from_json(text).map(ActionRef::from)
    }

    /// The action, if it passes the checks serde cannot express (the owned action's, in the
    /// same order).
    pub(crate) fn validated(self) -> Result<ActionRef<'a>, ActionError> {
        check_fields(
            self.tenant_id.as_str(),
            self.normalized_arguments_hash.as_str(),
            &self.arguments,
        )?;
        Ok(self)
    }

    /// The owned action with the same values.
    pub fn into_owned(self) -> ProposedAction {
        ProposedAction {
            kind: self.kind,
            action_id: self.action_id,
            tenant_id: self.tenant_id.into_owned(),
            session_id: self.session_id,
            run_id: self.run_id,
            step_number: self.step_number,
            name: self.name.into_owned(),
            version: self.version.map(WireStr::into_owned),
            summary: self.summary.into_owned(),
            side_effect: self.side_effect,
            risk: self.risk,
            idempotency: self.idempotency,
            required_scopes: self
                .required_scopes
                .into_iter()
                .map(WireStr::into_owned)
                .collect(),
            arguments: self.arguments,
            normalized_arguments_hash: self.normalized_arguments_hash.into_owned(),
            argument_trust: self
                .argument_trust
                .0
                .into_iter()
                .map(|(name, level)| (name.into_owned(), level))
                .collect(),
            origin_trust: self.origin_trust,
            target: Target {
                kind: self.target.kind,
                isolated: self.target.isolated,
                network_enabled: self.target.network_enabled,
                device_id: self.target.device_id.map(WireStr::into_owned),
                server_id: self.target.server_id.map(WireStr::into_owned),
            },
            evaluated_at: self.evaluated_at,
        }
    }
}

impl From<ProposedAction> for ActionRef<'static> {
    fn from(action: ProposedAction) -> ActionRef<'static> {
        let owned = |text: String| WireStr(Cow::Owned(text));
        ActionRef {
            kind: action.kind,
            action_id: action.action_id,
            tenant_id: owned(action.tenant_id),
            session_id: action.session_id,
            run_id: action.run_id,
            step_number: action.step_number,
            name: owned(action.name),
            version: action.version.map(owned),
            summary: owned(action.summary),
            side_effect: action.side_effect,
            risk: action.risk,
            idempotency: action.idempotency,
            required_scopes: action.required_scopes.into_iter().map(owned).collect(),
            arguments: action.arguments,
            normalized_arguments_hash: owned(action.normalized_arguments_hash),
            argument_trust: TrustLabels(
                action
                    .argument_trust
                    .into_iter()
                    .map(|(name, level)| (owned(name), level))
                    .collect(),
            ),
            origin_trust: action.origin_trust,
            target: TargetRef {
                kind: action.target.kind,
                isolated: action.target.isolated,
                network_enabled: action.target.network_enabled,
                device_id: action.target.device_id.map(owned),
                server_id: action.target.server_id.map(owned),
            },
            evaluated_at: action.evaluated_at,
        }
    }
}

impl ActionFacts for ActionRef<'_> {
    fn kind(&self) -> ActionKind {
        self.kind
    }
    fn name(&self) -> &str {
        self.name.as_str()
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
        self.origin_trust == TrustLevel::ExternalUntrusted
            || self
                .argument_trust
                .0
                .values()
                .any(|level| *level == TrustLevel::ExternalUntrusted)
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
        self.target.server_id.as_ref().map(WireStr::as_str)
    }
}
