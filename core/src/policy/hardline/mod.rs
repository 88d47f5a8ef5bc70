//! Hardline rules (SPEC §6.3): evaluated before the matrix, in file order; the first match
//! denies and no profile can override it. Every difference from a literal reading of the rule
//! data is a tightening.

mod credential;
mod network;
mod path;
mod strings;

use regex::Regex;
use serde_json::{Map, Value};

pub use credential::{is_credential_key, is_credential_shaped};
pub use network::NetworkRanges;
pub use path::{ProtectedPaths, canonical_components};
pub use strings::is_ws;

use crate::vocab::{HardlineRuleKind, SideEffectClass};

/// A set of side-effect classes (a rule's `applies_to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SideEffectSet(u16);

impl SideEffectSet {
    pub fn insert(&mut self, class: SideEffectClass) -> bool {
        let bit = 1u16 << class.index();
        let fresh = self.0 & bit == 0;
        self.0 |= bit;
        fresh
    }

    pub fn contains(self, class: SideEffectClass) -> bool {
        self.0 & (1u16 << class.index()) != 0
    }

    /// Members in declaration order.
    pub fn iter(self) -> impl Iterator<Item = SideEffectClass> {
        SideEffectClass::ALL
            .iter()
            .copied()
            .filter(move |c| self.contains(*c))
    }
}

impl FromIterator<SideEffectClass> for SideEffectSet {
    fn from_iter<I: IntoIterator<Item = SideEffectClass>>(iter: I) -> Self {
        let mut set = SideEffectSet::default();
        for class in iter {
            set.insert(class);
        }
        set
    }
}

/// How a rule matches, with its compiled data. Each kind carries exactly its own field.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Matches whenever the rule applies.
    SideEffect,
    /// Searched in every collected string and in every array's strings joined by spaces.
    CommandRegex(Regex),
    ProtectedPath(ProtectedPaths),
    NetworkRange(NetworkRanges),
    /// `source = "credential_shaped"`, the only source in v1.
    TrustFlowCredentialShaped,
}

impl Matcher {
    pub fn kind(&self) -> HardlineRuleKind {
        match self {
            Matcher::SideEffect => HardlineRuleKind::SideEffect,
            Matcher::CommandRegex(_) => HardlineRuleKind::CommandRegex,
            Matcher::ProtectedPath(_) => HardlineRuleKind::ProtectedPath,
            Matcher::NetworkRange(_) => HardlineRuleKind::NetworkRange,
            Matcher::TrustFlowCredentialShaped => HardlineRuleKind::TrustFlow,
        }
    }
}

/// One loaded, immutable hardline rule.
#[derive(Debug, Clone)]
pub struct HardlineRule {
    pub id: String,
    pub matcher: Matcher,
    pub applies_to: SideEffectSet,
    pub message_code: String,
    pub near_miss: String,
}

impl HardlineRule {
    /// Whether the rule denies an action with this side effect and these arguments.
    pub fn matches(&self, side_effect: SideEffectClass, arguments: &Map<String, Value>) -> bool {
        if !self.applies_to.contains(side_effect) {
            return false;
        }
        match &self.matcher {
            Matcher::SideEffect => true,
            Matcher::CommandRegex(pattern) => {
                strings::any_string_in(arguments, &mut |s| pattern.is_match(s))
                    || strings::any_joined_array_in(arguments, &mut |s| pattern.is_match(s))
            }
            Matcher::ProtectedPath(paths) => {
                let code_execution = side_effect == SideEffectClass::CodeExecution;
                strings::any_string_in(arguments, &mut |s| paths.matches_string(s, code_execution))
            }
            Matcher::NetworkRange(ranges) => {
                strings::any_string_in(arguments, &mut |s| ranges.matches_string(s))
            }
            Matcher::TrustFlowCredentialShaped => credential::contains_credential(arguments),
        }
    }

    /// The load-time self check (SPEC §6.3): does the rule match its own `near_miss`, given as
    /// `{"content": near_miss}` under every class it applies to (or, for `side_effect` rules, the
    /// first class it does not apply to)?
    pub fn matches_own_near_miss(&self) -> bool {
        let mut arguments = Map::new();
        arguments.insert("content".to_owned(), Value::String(self.near_miss.clone()));
        let classes: Vec<SideEffectClass> = match self.matcher {
            Matcher::SideEffect => SideEffectClass::ALL
                .iter()
                .copied()
                .filter(|c| !self.applies_to.contains(*c))
                .take(1)
                .collect(),
            _ => self.applies_to.iter().collect(),
        };
        classes
            .into_iter()
            .any(|class| self.matches(class, &arguments))
    }
}
