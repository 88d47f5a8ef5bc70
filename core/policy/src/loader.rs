//! The strict policy loader (SPEC §7.4): a profile and a hardline file either load completely or
//! fail with the first violated row of the §7.4 table, checked in table order, the profile first.
//!
//! Choices the spec leaves open: hardline rules are numbered from 1 in messages (`rule 1` is the
//! first `[[rules]]`), an unknown field inside one is reported as `rules.{n}.{key}`, a missing
//! value is shown as `<missing>`, and an absent or empty `rules` array gets its own message
//! beginning `hardline: rules`. Keys under `rules` (profile) and `approval_expiry_seconds` are
//! judged by rows 5 and 11, not as unknown fields.

use std::collections::BTreeSet;
use std::fmt;

use regex::RegexBuilder;
use toml::{Table, Value};

use crate::vocab::{HardlineRuleKind, PolicyCondition, PolicyDecisionType, SideEffectClass};

use super::hardline::{HardlineRule, Matcher, NetworkRanges, ProtectedPaths, SideEffectSet, is_ws};
use super::matrix::{FailClosed, Matrix, MatrixRule};
use super::profile::{ApprovalExpiry, MAX_APPROVAL_EXPIRY_SECONDS, Profile};

/// Which of the two files an error concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyFile {
    Profile,
    Hardline,
}

impl fmt::Display for PolicyFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PolicyFile::Profile => "profile",
            PolicyFile::Hardline => "hardline",
        })
    }
}

/// One row of SPEC §7.4 each (rows 15 and 16 share [`PolicyLoadError::InvalidRule`] for a bad id).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyLoadError {
    #[error("{file}: invalid TOML: {detail}")]
    InvalidToml { file: PolicyFile, detail: String },
    #[error("{file}: unknown field '{path}'")]
    UnknownField { file: PolicyFile, path: String },
    #[error("{file}: schema_version must be 1")]
    SchemaVersion { file: PolicyFile },
    #[error("profile: invalid name")]
    InvalidName,
    #[error("profile: policy matrix must be total; missing=[{}], extra=[{}]", missing.join(", "), extra.join(", "))]
    MatrixNotTotal {
        missing: Vec<String>,
        extra: Vec<String>,
    },
    #[error("profile: rules.{class}: invalid {field} '{value}'")]
    InvalidRuleValue {
        class: SideEffectClass,
        field: &'static str,
        value: String,
    },
    #[error("profile: rules.{0}: otherwise requires condition")]
    OtherwiseWithoutCondition(SideEffectClass),
    #[error("profile: rules.{0}: allow_with_modifications is not available")]
    ModificationsUnavailable(SideEffectClass),
    #[error("profile: default_effect must fail closed")]
    DefaultEffectOpen,
    #[error("profile: unknown_tool.decision must fail closed")]
    UnknownToolOpen,
    #[error("profile: approval expiry must define every risk level exactly once")]
    ExpiryLevels,
    #[error("profile: approval expiry values must be positive integers")]
    ExpiryValues,
    /// Not in SPEC §7.4's table: row 12 bounded above (see [`MAX_APPROVAL_EXPIRY_SECONDS`]).
    #[error(
        "profile: approval expiry values must be at most {MAX_APPROVAL_EXPIRY_SECONDS} seconds \
         (10 years)"
    )]
    ExpiryTooLong,
    #[error("profile: {0} must be a boolean")]
    NotBoolean(&'static str),
    #[error("profile: advisory.enabled must be false")]
    AdvisoryEnabled,
    #[error("hardline: rules must be a non-empty array of tables")]
    NoRules,
    #[error("hardline: rule {index}: missing or invalid '{field}'")]
    InvalidRule { index: usize, field: &'static str },
    #[error("hardline: duplicate rule id '{0}'")]
    DuplicateRuleId(String),
    #[error("hardline: {0}: invalid message_code")]
    InvalidMessageCode(String),
    #[error("hardline: {0}: near_miss must not be blank")]
    BlankNearMiss(String),
    #[error("hardline: {id}: field '{field}' required for {kind}")]
    KindFieldRequired {
        id: String,
        field: &'static str,
        kind: HardlineRuleKind,
    },
    #[error("hardline: {id}: field '{field}' not allowed for {kind}")]
    KindFieldNotAllowed {
        id: String,
        field: &'static str,
        kind: HardlineRuleKind,
    },
    #[error("hardline: {id}: invalid pattern")]
    InvalidPattern { id: String },
    #[error("hardline: {id}: invalid cidr '{cidr}'")]
    InvalidCidr { id: String, cidr: String },
    /// Not in SPEC §7.4's table: a protected path that names nothing (see `ProtectedPaths::new`).
    #[error("hardline: {id}: invalid path '{path}'")]
    InvalidPath { id: String, path: String },
    #[error("hardline: {0}: rule matches its own near_miss")]
    MatchesNearMiss(String),
}

impl PolicyLoadError {
    /// The file the error concerns; the CLI prints `error: {file}: …`.
    pub fn file(&self) -> PolicyFile {
        use PolicyLoadError::*;
        match self {
            InvalidToml { file, .. } | UnknownField { file, .. } | SchemaVersion { file } => *file,
            InvalidName
            | MatrixNotTotal { .. }
            | InvalidRuleValue { .. }
            | OtherwiseWithoutCondition(_)
            | ModificationsUnavailable(_)
            | DefaultEffectOpen
            | UnknownToolOpen
            | ExpiryLevels
            | ExpiryValues
            | ExpiryTooLong
            | NotBoolean(_)
            | AdvisoryEnabled => PolicyFile::Profile,
            _ => PolicyFile::Hardline,
        }
    }
}

/// The largest compiled regex a rule may carry (row 19).
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

const PROFILE_SECTIONS: [(&str, &[&str]); 4] = [
    ("unknown_tool", &["decision"]),
    ("trust_overlay", &["external_untrusted_requires_approval"]),
    ("self_approval", &["enabled"]),
    ("advisory", &["enabled"]),
];
const PROFILE_TOP: [&str; 9] = [
    "schema_version",
    "name",
    "default_effect",
    "unknown_tool",
    "trust_overlay",
    "self_approval",
    "advisory",
    "approval_expiry_seconds",
    "rules",
];
const MATRIX_RULE_FIELDS: [&str; 3] = ["decision", "condition", "otherwise"];
const HARDLINE_RULE_FIELDS: [&str; 9] = [
    "id",
    "kind",
    "applies_to",
    "pattern",
    "paths",
    "cidrs",
    "source",
    "message_code",
    "near_miss",
];

/// Row 1: UTF-8 TOML.
fn parse_toml(file: PolicyFile, bytes: &[u8]) -> Result<Table, PolicyLoadError> {
    let text = std::str::from_utf8(bytes).map_err(|e| PolicyLoadError::InvalidToml {
        file,
        detail: format!("not UTF-8: {e}"),
    })?;
    text.parse::<Table>().map_err(|e| {
        let position = e.span().map(|span| {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: ")
        });
        PolicyLoadError::InvalidToml {
            file,
            detail: format!("{}{}", position.unwrap_or_default(), e.message().trim_end()),
        }
    })
}

/// Row 2 for one table: the first key not in `allowed`, as a dotted path.
fn unknown_key(
    file: PolicyFile,
    prefix: &str,
    table: &Table,
    allowed: &[&str],
) -> Result<(), PolicyLoadError> {
    match table.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(PolicyLoadError::UnknownField {
            file,
            path: format!("{prefix}{key}"),
        }),
        None => Ok(()),
    }
}

/// Row 2 below the fields that hold values, not tables: a table (or a table inside an array)
/// given as such a value has keys, and every one of them is unknown. Without this,
/// `decision = {x = 1}` would be reported as an invalid decision (row 6) rather than the
/// unknown field `rules.none.decision.x` it is.
fn no_keys_below(
    file: PolicyFile,
    prefix: &str,
    table: &Table,
    value_fields: &[&str],
) -> Result<(), PolicyLoadError> {
    let unknown = |path: String| Err(PolicyLoadError::UnknownField { file, path });
    for field in value_fields {
        match table.get(*field) {
            Some(Value::Table(inner)) => {
                if let Some(key) = inner.keys().next() {
                    return unknown(format!("{prefix}{field}.{key}"));
                }
            }
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    if let Some(key) = item.as_table().and_then(|t| t.keys().next()) {
                        return unknown(format!("{prefix}{field}.{}.{key}", i + 1));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Row 3.
fn check_schema_version(file: PolicyFile, table: &Table) -> Result<(), PolicyLoadError> {
    match table.get("schema_version") {
        Some(Value::Integer(1)) => Ok(()),
        _ => Err(PolicyLoadError::SchemaVersion { file }),
    }
}

fn shown(value: Option<&Value>) -> String {
    match value {
        None => "<missing>".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn fail_closed(value: Option<&Value>) -> Option<FailClosed> {
    match value.and_then(Value::as_str)? {
        "deny" => Some(FailClosed::Deny),
        "require_approval" => Some(FailClosed::RequireApproval),
        _ => None,
    }
}

fn boolean(
    table: &Table,
    section: &str,
    key: &str,
    name: &'static str,
) -> Result<bool, PolicyLoadError> {
    table
        .get(section)
        .and_then(Value::as_table)
        .and_then(|t| t.get(key))
        .and_then(Value::as_bool)
        .ok_or(PolicyLoadError::NotBoolean(name))
}

/// Validates and freezes a profile file.
pub fn load_profile(bytes: &[u8]) -> Result<Profile, PolicyLoadError> {
    let file = PolicyFile::Profile;
    let table = parse_toml(file, bytes)?;

    // Row 2, outermost first.
    unknown_key(file, "", &table, &PROFILE_TOP)?;
    for (section, allowed) in PROFILE_SECTIONS {
        if let Some(inner) = table.get(section).and_then(Value::as_table) {
            unknown_key(file, &format!("{section}."), inner, allowed)?;
        }
    }
    let rules = table.get("rules").and_then(Value::as_table);
    if let Some(rules) = rules {
        for class in SideEffectClass::ALL {
            if let Some(rule) = rules.get(class.as_str()).and_then(Value::as_table) {
                unknown_key(file, &format!("rules.{class}."), rule, &MATRIX_RULE_FIELDS)?;
            }
        }
    }
    // Then keys inside values, in the same order.
    no_keys_below(
        file,
        "",
        &table,
        &["schema_version", "name", "default_effect"],
    )?;
    for (section, allowed) in PROFILE_SECTIONS {
        if let Some(inner) = table.get(section).and_then(Value::as_table) {
            no_keys_below(file, &format!("{section}."), inner, allowed)?;
        }
    }
    if let Some(rules) = rules {
        for class in SideEffectClass::ALL {
            if let Some(rule) = rules.get(class.as_str()).and_then(Value::as_table) {
                no_keys_below(file, &format!("rules.{class}."), rule, &MATRIX_RULE_FIELDS)?;
            }
        }
    }

    check_schema_version(file, &table)?; // row 3

    // Row 4.
    let name = table
        .get("name")
        .and_then(Value::as_str)
        .ok_or(PolicyLoadError::InvalidName)?;
    let name_ok = name.len() <= 64
        && name.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !name_ok {
        return Err(PolicyLoadError::InvalidName);
    }

    // Row 5.
    let empty = Table::new();
    let rules = rules.unwrap_or(&empty);
    let missing: Vec<String> = SideEffectClass::ALL
        .iter()
        .filter(|c| !rules.contains_key(c.as_str()))
        .map(|c| c.to_string())
        .collect();
    let extra: Vec<String> = rules
        .keys()
        .filter(|k| k.parse::<SideEffectClass>().is_err())
        .cloned()
        .collect();
    if !missing.is_empty() || !extra.is_empty() {
        return Err(PolicyLoadError::MatrixNotTotal { missing, extra });
    }

    // Row 6: every value parses.
    let mut parsed = Vec::with_capacity(15);
    for class in SideEffectClass::ALL.iter().copied() {
        let rule = rules.get(class.as_str()).and_then(Value::as_table);
        let field = |name: &'static str| rule.and_then(|r| r.get(name));
        let invalid = |name: &'static str| PolicyLoadError::InvalidRuleValue {
            class,
            field: name,
            value: shown(field(name)),
        };
        let Some(decision) = field("decision")
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<PolicyDecisionType>().ok())
        else {
            return Err(if rule.is_none() {
                PolicyLoadError::InvalidRuleValue {
                    class,
                    field: "decision",
                    value: "<not a table>".to_owned(),
                }
            } else {
                invalid("decision")
            });
        };
        let condition = match field("condition") {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .and_then(|s| s.parse::<PolicyCondition>().ok())
                    .ok_or_else(|| invalid("condition"))?,
            ),
        };
        let otherwise = match field("otherwise") {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .and_then(|s| s.parse::<PolicyDecisionType>().ok())
                    .ok_or_else(|| invalid("otherwise"))?,
            ),
        };
        parsed.push((class, decision, condition, otherwise));
    }
    // Row 7.
    if let Some((class, ..)) = parsed
        .iter()
        .find(|(_, _, condition, otherwise)| condition.is_none() && otherwise.is_some())
    {
        return Err(PolicyLoadError::OtherwiseWithoutCondition(*class));
    }
    // Row 8.
    let modifies = |d: &PolicyDecisionType| *d == PolicyDecisionType::AllowWithModifications;
    if let Some((class, ..)) = parsed.iter().find(|(_, decision, _, otherwise)| {
        modifies(decision) || otherwise.as_ref().is_some_and(modifies)
    }) {
        return Err(PolicyLoadError::ModificationsUnavailable(*class));
    }
    let rows: Vec<MatrixRule> = parsed
        .into_iter()
        .map(|(_, decision, condition, otherwise)| match condition {
            None => MatrixRule::Unconditional(decision),
            Some(condition) => MatrixRule::Conditional {
                decision,
                condition,
                otherwise,
            },
        })
        .collect();
    let matrix = Matrix::new(
        rows.try_into()
            .map_err(|_| PolicyLoadError::MatrixNotTotal {
                missing: vec![],
                extra: vec![],
            })?,
    );

    // Rows 9–10.
    let default_effect =
        fail_closed(table.get("default_effect")).ok_or(PolicyLoadError::DefaultEffectOpen)?;
    let unknown_tool_decision = fail_closed(
        table
            .get("unknown_tool")
            .and_then(Value::as_table)
            .and_then(|t| t.get("decision")),
    )
    .ok_or(PolicyLoadError::UnknownToolOpen)?;

    // Rows 11–12.
    let expiry = table
        .get("approval_expiry_seconds")
        .and_then(Value::as_table)
        .ok_or(PolicyLoadError::ExpiryLevels)?;
    let levels = ["low", "medium", "high", "critical"];
    if expiry.len() != levels.len() || levels.iter().any(|l| !expiry.contains_key(*l)) {
        return Err(PolicyLoadError::ExpiryLevels);
    }
    let seconds = |level: &str| match expiry.get(level) {
        Some(Value::Integer(n)) if *n > 0 => match u64::try_from(*n) {
            Ok(seconds) if seconds <= MAX_APPROVAL_EXPIRY_SECONDS => Ok(seconds),
            Ok(_) => Err(PolicyLoadError::ExpiryTooLong),
            Err(_) => Err(PolicyLoadError::ExpiryValues),
        },
        _ => Err(PolicyLoadError::ExpiryValues),
    };
    let approval_expiry = ApprovalExpiry {
        low: seconds("low")?,
        medium: seconds("medium")?,
        high: seconds("high")?,
        critical: seconds("critical")?,
    };

    // Rows 13–14.
    let external_untrusted_requires_approval = boolean(
        &table,
        "trust_overlay",
        "external_untrusted_requires_approval",
        "trust_overlay.external_untrusted_requires_approval",
    )?;
    let self_approval_enabled =
        boolean(&table, "self_approval", "enabled", "self_approval.enabled")?;
    if boolean(&table, "advisory", "enabled", "advisory.enabled")? {
        return Err(PolicyLoadError::AdvisoryEnabled);
    }

    Ok(Profile {
        name: name.to_owned(),
        default_effect,
        unknown_tool_decision,
        external_untrusted_requires_approval,
        self_approval_enabled,
        approval_expiry,
        matrix,
    })
}

/// Row 15's required fields of one rule, parsed.
struct RuleHead<'a> {
    table: &'a Table,
    id: &'a str,
    kind: HardlineRuleKind,
    applies_to: SideEffectSet,
    message_code: &'a str,
    near_miss: &'a str,
}

fn rule_head(index: usize, table: &Table) -> Result<RuleHead<'_>, PolicyLoadError> {
    let invalid = |field| PolicyLoadError::InvalidRule { index, field };
    let id = table
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("id"))?;
    let id_ok = id.len() <= 64
        && id.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !id_ok {
        return Err(invalid("id"));
    }
    let kind = table
        .get("kind")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<HardlineRuleKind>().ok())
        .ok_or_else(|| invalid("kind"))?;
    let classes = table
        .get("applies_to")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("applies_to"))?;
    let mut applies_to = SideEffectSet::default();
    for class in classes {
        let class = class
            .as_str()
            .and_then(|s| s.parse::<SideEffectClass>().ok())
            .ok_or_else(|| invalid("applies_to"))?;
        if !applies_to.insert(class) {
            return Err(invalid("applies_to"));
        }
    }
    if classes.is_empty() {
        return Err(invalid("applies_to"));
    }
    let message_code = table
        .get("message_code")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("message_code"))?;
    let near_miss = table
        .get("near_miss")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("near_miss"))?;
    Ok(RuleHead {
        table,
        id,
        kind,
        applies_to,
        message_code,
        near_miss,
    })
}

/// The field each kind owns; `side_effect` owns none.
fn own_field(kind: HardlineRuleKind) -> Option<&'static str> {
    match kind {
        HardlineRuleKind::SideEffect => None,
        HardlineRuleKind::CommandRegex => Some("pattern"),
        HardlineRuleKind::ProtectedPath | HardlineRuleKind::ProtectedUrlPath => Some("paths"),
        HardlineRuleKind::NetworkRange => Some("cidrs"),
        HardlineRuleKind::TrustFlow => Some("source"),
    }
}

fn string_list(value: Option<&Value>) -> Option<Vec<&str>> {
    let items = value?.as_array()?;
    if items.is_empty() {
        return None;
    }
    items.iter().map(Value::as_str).collect()
}

/// A rule's own field as row 18 accepts it: present, of the right shape, not yet compiled.
enum KindField<'a> {
    None,
    Pattern(&'a str),
    Paths(Vec<&'a str>),
    Cidrs(Vec<&'a str>),
    CredentialShaped,
}

/// Row 18 for one rule: its kind's field present and of the right shape, and no other kind's
/// field.
fn kind_field<'a>(head: &RuleHead<'a>) -> Result<KindField<'a>, PolicyLoadError> {
    let own = own_field(head.kind);
    for field in ["pattern", "paths", "cidrs", "source"] {
        if Some(field) != own && head.table.contains_key(field) {
            return Err(PolicyLoadError::KindFieldNotAllowed {
                id: head.id.to_owned(),
                field,
                kind: head.kind,
            });
        }
    }
    let value = own.and_then(|field| head.table.get(field));
    let required = |field: &'static str| PolicyLoadError::KindFieldRequired {
        id: head.id.to_owned(),
        field,
        kind: head.kind,
    };
    match head.kind {
        HardlineRuleKind::SideEffect => Ok(KindField::None),
        HardlineRuleKind::CommandRegex => value
            .and_then(Value::as_str)
            .map(KindField::Pattern)
            .ok_or_else(|| required("pattern")),
        HardlineRuleKind::ProtectedPath | HardlineRuleKind::ProtectedUrlPath => string_list(value)
            .map(KindField::Paths)
            .ok_or_else(|| required("paths")),
        HardlineRuleKind::NetworkRange => string_list(value)
            .map(KindField::Cidrs)
            .ok_or_else(|| required("cidrs")),
        HardlineRuleKind::TrustFlow => match value.and_then(Value::as_str) {
            Some("credential_shaped") => Ok(KindField::CredentialShaped),
            _ => Err(required("source")),
        },
    }
}

/// Row 19 for one rule: its field compiled. An entry of `paths` that names nothing is refused
/// here too (`InvalidPath`), an addition to the table: it would silently protect nothing.
fn compile(
    id: &str,
    kind: HardlineRuleKind,
    field: KindField<'_>,
) -> Result<Matcher, PolicyLoadError> {
    match field {
        KindField::None => Ok(Matcher::SideEffect),
        KindField::CredentialShaped => Ok(Matcher::TrustFlowCredentialShaped),
        KindField::Pattern(pattern) => RegexBuilder::new(pattern)
            .size_limit(PATTERN_SIZE_LIMIT)
            .build()
            .map(Matcher::CommandRegex)
            .map_err(|_| PolicyLoadError::InvalidPattern { id: id.to_owned() }),
        KindField::Paths(paths) => {
            let paths: Vec<String> = paths.into_iter().map(str::to_owned).collect();
            ProtectedPaths::new(&paths)
                .map(|paths| match kind {
                    HardlineRuleKind::ProtectedUrlPath => Matcher::ProtectedUrlPath(paths),
                    _ => Matcher::ProtectedPath(paths),
                })
                .map_err(|path| PolicyLoadError::InvalidPath {
                    id: id.to_owned(),
                    path,
                })
        }
        KindField::Cidrs(cidrs) => cidrs
            .into_iter()
            .map(|c| {
                c.parse().map_err(|_| PolicyLoadError::InvalidCidr {
                    id: id.to_owned(),
                    cidr: c.to_owned(),
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|ranges| Matcher::NetworkRange(NetworkRanges::new(ranges))),
    }
}

/// Validates and freezes a hardline file, rule order preserved.
pub fn load_hardline(bytes: &[u8]) -> Result<Vec<HardlineRule>, PolicyLoadError> {
    let file = PolicyFile::Hardline;
    let table = parse_toml(file, bytes)?;

    // Row 2.
    unknown_key(file, "", &table, &["schema_version", "rules"])?;
    let rules = table.get("rules").and_then(Value::as_array);
    for (i, rule) in rules.into_iter().flatten().enumerate() {
        if let Some(rule) = rule.as_table() {
            unknown_key(
                file,
                &format!("rules.{}.", i + 1),
                rule,
                &HARDLINE_RULE_FIELDS,
            )?;
        }
    }
    // Then keys inside values, in the same order.
    no_keys_below(file, "", &table, &["schema_version"])?;
    for (i, rule) in rules.into_iter().flatten().enumerate() {
        if let Some(rule) = rule.as_table() {
            no_keys_below(
                file,
                &format!("rules.{}.", i + 1),
                rule,
                &HARDLINE_RULE_FIELDS,
            )?;
        }
    }

    check_schema_version(file, &table)?; // row 3

    // Row 15.
    let rules = rules
        .filter(|r| !r.is_empty())
        .ok_or(PolicyLoadError::NoRules)?;
    let heads = rules
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            let table = rule.as_table().ok_or(PolicyLoadError::InvalidRule {
                index: i + 1,
                field: "rules",
            })?;
            rule_head(i + 1, table)
        })
        .collect::<Result<Vec<_>, _>>()?;

    // Row 16.
    let mut seen = BTreeSet::new();
    if let Some(head) = heads.iter().find(|h| !seen.insert(h.id)) {
        return Err(PolicyLoadError::DuplicateRuleId(head.id.to_owned()));
    }

    // Row 17.
    for head in &heads {
        let suffix = head.message_code.strip_prefix("policy.hardline.");
        if suffix.is_none_or(|s| s.is_empty() || s.chars().any(|c| is_ws(c) || c.is_control())) {
            return Err(PolicyLoadError::InvalidMessageCode(head.id.to_owned()));
        }
        if head.near_miss.trim_matches(is_ws).is_empty() {
            return Err(PolicyLoadError::BlankNearMiss(head.id.to_owned()));
        }
    }

    // Row 18 for every rule, then row 19 for every rule: the first error in table order.
    let fields = heads
        .iter()
        .map(kind_field)
        .collect::<Result<Vec<_>, _>>()?;
    let loaded = heads
        .iter()
        .zip(fields)
        .map(|(head, field)| {
            Ok(HardlineRule {
                id: head.id.to_owned(),
                matcher: compile(head.id, head.kind, field)?,
                applies_to: head.applies_to,
                message_code: head.message_code.to_owned(),
                near_miss: head.near_miss.to_owned(),
            })
        })
        .collect::<Result<Vec<_>, PolicyLoadError>>()?;

    // Row 20.
    if let Some(rule) = loaded.iter().find(|r| r.matches_own_near_miss()) {
        return Err(PolicyLoadError::MatchesNearMiss(rule.id.clone()));
    }
    Ok(loaded)
}
