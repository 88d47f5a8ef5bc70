//! Hardline rules (SPEC §6.3, §21): evaluated before the matrix, in file order; the first match
//! denies and no profile can override it. Every difference from a literal reading of the rule
//! data is a tightening.
//!
//! Two passes (SPEC §21.1): pass 1 runs every rule with the v1 readings of §6.3; only when no
//! rule matched, pass 2 runs every rule again with the v2 readings of §21.2–§21.3 (URL, shell and
//! argv readings, the `/proc` canonicalization, the added IPv4-in-IPv6 embeddings). A v1 deny is
//! therefore always the same deny with the same reason code, and v2 can only add denies. Pass 2
//! tests only the v2 readings: the v1 readings of every rule already failed in pass 1, and
//! readings are pure, so testing them again could not change the answer.

mod components;
mod credential;
mod network;
mod path;
mod prefilter;
pub mod readings;
pub mod shell;
mod strings;
pub mod url;

use regex::Regex;
use serde_json::{Map, Value};

pub use components::canonical_components;
pub use credential::{is_credential_key, is_credential_name, is_credential_shaped};
pub use network::NetworkRanges;
pub use path::{Canon, ProtectedPaths, canonical_components_v2};
pub use prefilter::Prefilter;
pub use readings::{MAX_READ_BYTES, Readings};
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
    /// SPEC §21.4: only the URL-path reading of §21.2 is tested (a search that mentions `.env`
    /// is not a fetch of it).
    ProtectedUrlPath(ProtectedPaths),
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
            Matcher::ProtectedUrlPath(_) => HardlineRuleKind::ProtectedUrlPath,
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

/// Which passes an evaluation runs: both (the engine), or pass 1 alone (the v1 evaluation the
/// never-weaker property compares against).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passes {
    V1Only,
    Both,
}

/// The first rule that denies, by SPEC §21.1's two passes; the engine runs both with the
/// pre-filters on, the property tests choose (never weaker, pre-filters change nothing).
pub fn first_match_with<'r>(
    rules: &'r [HardlineRule],
    side_effect: SideEffectClass,
    arguments: &Map<String, Value>,
    passes: Passes,
    prefilter: Prefilter,
) -> Option<&'r HardlineRule> {
    if let Some(rule) = rules
        .iter()
        .find(|rule| rule.matches_v1(side_effect, arguments, prefilter))
    {
        return Some(rule);
    }
    if passes == Passes::V1Only {
        return None;
    }
    let mut readings = Readings::new(arguments, side_effect, prefilter);
    rules.iter().find(|rule| {
        rule.applies_to.contains(side_effect) && rule.matches_v2(side_effect, &mut readings)
    })
}

impl HardlineRule {
    /// Whether the rule denies an action with this side effect and these arguments, by all its
    /// readings (v1 and v2). The engine uses [`first_match_with`], which orders the passes; this is
    /// the answer for one rule on its own (the load-time self check).
    pub fn matches(&self, side_effect: SideEffectClass, arguments: &Map<String, Value>) -> bool {
        self.matches_v1(side_effect, arguments, Prefilter::On)
            || (self.applies_to.contains(side_effect)
                && self.matches_v2(
                    side_effect,
                    &mut Readings::new(arguments, side_effect, Prefilter::On),
                ))
    }

    /// Pass 1: the v1 readings of SPEC §6.3, with the rule's (possibly extended) data.
    pub fn matches_v1(
        &self,
        side_effect: SideEffectClass,
        arguments: &Map<String, Value>,
        prefilter: Prefilter,
    ) -> bool {
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
            // The v1 reading of a URL's path is §6.3's `file:` URL path.
            Matcher::ProtectedUrlPath(paths) => {
                strings::any_string_in(arguments, &mut |s| paths.matches_file_url(s))
            }
            Matcher::NetworkRange(ranges) => {
                strings::any_string_in(arguments, &mut |s| ranges.matches_string(s, prefilter))
            }
            Matcher::TrustFlowCredentialShaped => credential::contains_credential(arguments),
        }
    }

    /// Pass 2: the v2 readings only (SPEC §21.2–§21.4). The caller checks `applies_to`.
    fn matches_v2(&self, side_effect: SideEffectClass, readings: &mut Readings<'_>) -> bool {
        match &self.matcher {
            Matcher::SideEffect => false,
            Matcher::CommandRegex(pattern) => readings
                .commands()
                .argvs
                .iter()
                .any(|argv| joined_readings(argv).iter().any(|j| pattern.is_match(j))),
            Matcher::ProtectedPath(paths) => {
                let code_execution = side_effect == SideEffectClass::CodeExecution;
                let prefilter = readings.prefilter();
                readings
                    .strings()
                    .iter()
                    .any(|s| paths.matches_string_v2(s, code_execution, prefilter))
                    || url_paths_match(paths, readings)
                    || readings
                        .commands()
                        .argvs
                        .iter()
                        .any(|argv| argv_names_protected_path(paths, argv))
            }
            Matcher::ProtectedUrlPath(paths) => url_paths_match(paths, readings),
            Matcher::NetworkRange(ranges) => {
                let prefilter = readings.prefilter();
                readings
                    .strings()
                    .iter()
                    .any(|s| ranges.matches_string_v2(s, prefilter))
                    || readings
                        .urls()
                        .addresses
                        .iter()
                        .any(|a| ranges.matches_address(*a))
            }
            Matcher::TrustFlowCredentialShaped => {
                readings
                    .urls()
                    .queries
                    .iter()
                    .any(|q| is_credential_shaped(q))
                    || readings.commands().user_password
            }
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

/// Whether any URL path of the URL reading names a protected entry.
fn url_paths_match(paths: &ProtectedPaths, readings: &mut Readings<'_>) -> bool {
    readings
        .urls()
        .paths
        .iter()
        .any(|p| paths.protects_with(p, Canon::V2))
}

/// An argv joined by single spaces, and again with every word that starts with `/`
/// canonicalized (SPEC §21.3: `rm -rf /tmp/../` reads `rm -rf /`).
fn joined_readings(argv: &shell::Argv) -> Vec<String> {
    let written: Vec<&str> = argv.words.iter().map(shell::Word::shown).collect();
    let mut out = vec![written.join(" ")];
    let canonical: Vec<String> = written
        .iter()
        .map(|w| {
            if w.starts_with('/') {
                format!("/{}", canonical_components_v2(w).join("/"))
            } else {
                (*w).to_owned()
            }
        })
        .collect();
    if canonical.iter().zip(&written).any(|(c, w)| c != w) {
        out.push(canonical.join(" "));
    }
    out
}

/// SPEC §21.3's `protected_path` test of one argv: each word, its text after the first `=`,
/// either without a leading `@`, and each redirection target; glob words by pattern too.
fn argv_names_protected_path(paths: &ProtectedPaths, argv: &shell::Argv) -> bool {
    argv.words.iter().chain(&argv.redirects).any(|word| {
        let shell::Word::Known { text, glob } = word else {
            return false;
        };
        let literal = candidates(text)
            .into_iter()
            .any(|c| paths.protects_with(c, Canon::V2));
        literal
            || glob.as_deref().is_some_and(|pattern| {
                candidates(pattern)
                    .into_iter()
                    .any(|c| shell::glob::is_pattern(c) && paths.protects_glob(c))
            })
    })
}

/// A word, its text after the first `=`, and either without a leading `@`.
fn candidates(word: &str) -> Vec<&str> {
    let mut out = vec![word];
    if let Some((_, after)) = word.split_once('=') {
        out.push(after);
    }
    let stripped: Vec<&str> = out.iter().filter_map(|c| c.strip_prefix('@')).collect();
    out.extend(stripped);
    out
}
