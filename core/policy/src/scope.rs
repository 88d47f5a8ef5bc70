//! Scopes and the scope check (SPEC §5).
//!
//! A check is an exact set difference: no hierarchy, wildcard or prefix, so `run.write` does not
//! imply `run.read`. The refusal message names only the missing scopes, sorted.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The closed platform vocabulary.
pub const PLATFORM_SCOPES: [&str; 10] = [
    "run.read",
    "run.write",
    "run.cancel",
    "approval.read",
    "approval.resolve",
    "invocation.read",
    "invocation.settle",
    "workspace.read",
    "workspace.write",
    "demo.write",
];

/// First segments reserved for the platform: a scope under them must be in the vocabulary.
const PLATFORM_SEGMENTS: [&str; 5] = ["run", "approval", "invocation", "workspace", "demo"];

/// Why a scope string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("invalid scope '{0}' (lowercase segments joined by dots, such as run.read)")]
    Invalid(String),
    /// A tool's required scope that is not grammatical (SPEC §5's registration error).
    #[error("invalid required scope '{0}'")]
    InvalidRequired(String),
    #[error("unknown platform scope '{0}'")]
    UnknownPlatform(String),
}

/// A grammatical scope: `^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`, at most 128 bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Scope(String);

impl Scope {
    /// Checks the grammar only; principals may hold any grammatical scope.
    pub fn parse(s: &str) -> Result<Scope, ScopeError> {
        let grammatical = s.len() <= 128
            && s.split('.').count() >= 2
            && s.split('.').all(|segment| {
                let mut bytes = segment.bytes();
                bytes.next().is_some_and(|b| b.is_ascii_lowercase())
                    && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            });
        if grammatical {
            Ok(Scope(s.to_owned()))
        } else {
            Err(ScopeError::Invalid(s.to_owned()))
        }
    }

    /// Checks what a tool may require: grammar, and the vocabulary under platform segments.
    pub fn parse_required(s: &str) -> Result<Scope, ScopeError> {
        let scope = Scope::parse(s).map_err(|_| ScopeError::InvalidRequired(s.to_owned()))?;
        let first = s.split('.').next().unwrap_or_default();
        if PLATFORM_SEGMENTS.contains(&first) && !PLATFORM_SCOPES.contains(&s) {
            return Err(ScopeError::UnknownPlatform(s.to_owned()));
        }
        Ok(scope)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Scope::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A sorted, deduplicated set of scopes.
pub type ScopeSet = BTreeSet<Scope>;

/// The platform scopes as a set: the CLI's default grant.
pub fn platform_scopes() -> ScopeSet {
    PLATFORM_SCOPES
        .iter()
        .map(|s| Scope(String::from(*s)))
        .collect()
}

/// The scopes in `required` that `held` lacks, sorted; empty means the check passes.
pub fn missing_scopes<'a>(required: &'a ScopeSet, held: &ScopeSet) -> Vec<&'a Scope> {
    required
        .iter()
        .filter(|scope| !held.contains(*scope))
        .collect()
}

/// The refusal message of SPEC §5: the only denial that names anything.
pub fn missing_scopes_message(missing: &[&Scope]) -> String {
    let names: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
    format!(
        "Not performed. Missing required scope(s): {}.",
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> ScopeSet {
        items.iter().map(|s| Scope::parse(s).unwrap()).collect()
    }

    #[test]
    fn grammar() {
        for good in ["run.read", "mcp.srv1.tools.call", "a.b", "x_1.y_2"] {
            assert!(Scope::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "run",
            "Run.read",
            "run.",
            ".run",
            "run..read",
            "1run.read",
            "run.re-ad",
            "run.*",
            "",
        ] {
            assert_eq!(
                Scope::parse(bad),
                Err(ScopeError::Invalid(bad.into())),
                "{bad}"
            );
        }
        let long = format!("a.{}", "b".repeat(127));
        assert!(Scope::parse(&long).is_err());
        assert!(Scope::parse(&long[..128]).is_ok());
    }

    #[test]
    fn platform_segments_are_closed_for_tools() {
        assert!(Scope::parse_required("workspace.read").is_ok());
        assert!(Scope::parse_required("skill.write").is_ok());
        let invalid = Scope::parse_required("Bad").unwrap_err();
        assert_eq!(invalid, ScopeError::InvalidRequired("Bad".to_owned()));
        assert_eq!(invalid.to_string(), "invalid required scope 'Bad'");
        assert_eq!(
            Scope::parse_required("workspace.admin"),
            Err(ScopeError::UnknownPlatform("workspace.admin".into()))
        );
        assert_eq!(
            ScopeError::Invalid("X".into()).to_string(),
            "invalid scope 'X' (lowercase segments joined by dots, such as run.read)"
        );
        assert_eq!(
            ScopeError::UnknownPlatform("run.x".into()).to_string(),
            "unknown platform scope 'run.x'"
        );
    }

    #[test]
    fn check_is_an_exact_set_difference() {
        let required = set(&["run.read", "workspace.write", "demo.write"]);
        let held = set(&["run.write", "workspace.write"]);
        let missing = missing_scopes(&required, &held);
        assert_eq!(
            missing_scopes_message(&missing),
            "Not performed. Missing required scope(s): demo.write, run.read."
        );
        assert!(missing_scopes(&ScopeSet::new(), &ScopeSet::new()).is_empty());
        assert!(missing_scopes(&set(&["run.read"]), &platform_scopes()).is_empty());
    }
}
