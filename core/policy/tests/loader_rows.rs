//! Loader strictness (SPEC §7.4, §16 #6): each row of the table rejects a shipped file broken in
//! exactly that way, with its `PolicyLoadError` variant and its message; the shipped files load as
//! `default@9f2e26918d43+h3997d343` with 26 rules, and any other profile bytes are another version.

use airlock_policy::shipped::{DEFAULT_PROFILE, HARDLINE, SHIPPED_VERSION};
use airlock_policy::vocab::{HardlineRuleKind, SideEffectClass};
use airlock_policy::{PolicyFile, PolicyLoadError, Ruleset};

fn shipped_profile() -> String {
    String::from_utf8(DEFAULT_PROFILE.to_vec()).expect("the shipped profile is UTF-8")
}

fn shipped_hardline() -> String {
    String::from_utf8(HARDLINE.to_vec()).expect("the shipped hardline file is UTF-8")
}

/// Replaces the one occurrence of `old` in `text`; the edit must be unambiguous.
fn edit(text: &str, old: &str, new: &str) -> String {
    assert_eq!(
        text.matches(old).count(),
        1,
        "the edit target {old:?} must occur exactly once"
    );
    text.replacen(old, new, 1)
}

/// Replaces the one occurrence of `old` inside the `[[rules]]` entry whose id is `rule_id` (the
/// appended rules of SPEC §21.4 repeat the v1 rules' lists, so a bare edit would be ambiguous).
fn edit_rule(text: &str, rule_id: &str, old: &str, new: &str) -> String {
    let id_line = format!("id = \"{rule_id}\"\n");
    let at = text.find(&id_line).expect("the rule exists");
    let start = text[..at]
        .rfind("[[rules]]")
        .expect("the rule has a header");
    let end = text[at..].find("[[rules]]").map_or(text.len(), |e| at + e);
    format!(
        "{}{}{}",
        &text[..start],
        edit(&text[start..end], old, new),
        &text[end..]
    )
}

/// An edit inside one hardline rule, loaded beside the shipped profile.
fn hardline_rule_edit(rule_id: &str, old: &str, new: &str) -> PolicyLoadError {
    let hardline = edit_rule(&shipped_hardline(), rule_id, old, new);
    load_err(DEFAULT_PROFILE, hardline.as_bytes())
}

/// The whole `field = [ … ]` list of one rule, as written in the shipped file.
fn shipped_list(rule_id: &str, field: &str) -> String {
    let text = shipped_hardline();
    let at = text
        .find(&format!("id = \"{rule_id}\"\n"))
        .expect("the rule exists");
    let start = at
        + text[at..]
            .find(&format!("{field} = ["))
            .expect("the rule has the list");
    let end = start + text[start..].find(']').expect("the list closes") + 1;
    text[start..end].to_owned()
}

/// A profile edit, loaded beside the shipped hardline file.
fn profile_edit(old: &str, new: &str) -> PolicyLoadError {
    let profile = edit(&shipped_profile(), old, new);
    load_err(profile.as_bytes(), HARDLINE)
}

/// A hardline edit, loaded beside the shipped profile.
fn hardline_edit(old: &str, new: &str) -> PolicyLoadError {
    let hardline = edit(&shipped_hardline(), old, new);
    load_err(DEFAULT_PROFILE, hardline.as_bytes())
}

fn load_err(profile: &[u8], hardline: &[u8]) -> PolicyLoadError {
    match Ruleset::load(profile, hardline) {
        Ok(ruleset) => panic!("a malformed file loaded as {}", ruleset.version.as_str()),
        Err(err) => err,
    }
}

/// The shipped `[[rules]]` entry for `credential_class`, a `side_effect` rule.
const CREDENTIAL_CLASS_HEAD: &str = "id = \"credential_class\"\nkind = \"side_effect\"\n";
/// The line naming `destructive_root_delete`'s message code.
const DESTRUCTIVE_MESSAGE: &str = "message_code = \"policy.hardline.destructive_command\"\n";
/// The id line of the first shipped rule.
const FIRST_RULE_ID: &str = "id = \"destructive_root_delete\"\n";

// ----- The shipped files -----

#[test]
fn shipped_files_load_as_the_documented_version() {
    let ruleset = Ruleset::shipped().expect("the shipped policy loads");
    assert_eq!(ruleset.version.as_str(), "default@9f2e26918d43+h3997d343");
    assert_eq!(
        ruleset.version.to_string(),
        "default@9f2e26918d43+h3997d343"
    );
    assert_eq!(SHIPPED_VERSION, "default@9f2e26918d43+h3997d343");
    assert_eq!(ruleset.version.profile_name, "default");
    assert_eq!(
        ruleset.version.profile_sha256,
        "9f2e26918d434563eca959a1c9c3fed33ec82649779762d03ec40daca91ce4c6"
    );
    assert_eq!(
        ruleset.version.hardline_sha256,
        "3997d3436412b762517f9f42b94d5ef55bf2545f7d385f578bf3eb55dc33b222"
    );
    assert_eq!(ruleset.rule_count(), 26);
    let ids: Vec<&str> = ruleset.hardline.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "destructive_root_delete",
            "protected_host_path",
            "credential_class",
            "host_access_class",
            "privileged_class",
            "metadata_egress",
            "credential_to_egress",
            "protected_host_path_exec_net",
            "protected_url_path",
            "metadata_egress_exec",
            "credential_to_egress_more",
        ],
        "hardline rules keep file order"
    );
    let kinds: Vec<HardlineRuleKind> = ruleset.hardline.iter().map(|r| r.matcher.kind()).collect();
    assert_eq!(
        kinds,
        [
            HardlineRuleKind::CommandRegex,
            HardlineRuleKind::ProtectedPath,
            HardlineRuleKind::SideEffect,
            HardlineRuleKind::SideEffect,
            HardlineRuleKind::SideEffect,
            HardlineRuleKind::NetworkRange,
            HardlineRuleKind::TrustFlow,
            HardlineRuleKind::ProtectedPath,
            HardlineRuleKind::ProtectedUrlPath,
            HardlineRuleKind::NetworkRange,
            HardlineRuleKind::TrustFlow,
        ]
    );
}

#[test]
fn shipped_files_are_the_listings_with_lf_endings() {
    // SPEC §7.1: LF line endings and exactly one final LF.
    for (name, bytes) in [("profile", DEFAULT_PROFILE), ("hardline", HARDLINE)] {
        assert!(!bytes.contains(&b'\r'), "{name} has a CR");
        assert!(bytes.ends_with(b"\n"), "{name} ends with LF");
        assert!(!bytes.ends_with(b"\n\n"), "{name} ends with one LF only");
    }
}

#[test]
fn a_different_profile_file_is_a_different_policy_version() {
    // There is no overlay (SPEC §7.1): even a comment changes the version.
    let shipped = Ruleset::shipped().expect("the shipped policy loads");
    let profile = format!("{}# a local note\n", shipped_profile());
    let changed = Ruleset::load(profile.as_bytes(), HARDLINE).expect("a comment still loads");
    assert_ne!(changed.version.as_str(), shipped.version.as_str());
    assert!(
        changed.version.as_str().starts_with("default@"),
        "{}",
        changed.version
    );
    assert!(
        changed.version.as_str().ends_with("+h3997d343"),
        "{}",
        changed.version
    );
    assert_ne!(
        changed.version.profile_sha256,
        shipped.version.profile_sha256
    );
    assert_eq!(
        changed.version.hardline_sha256,
        shipped.version.hardline_sha256
    );
    assert_eq!(changed.profile, shipped.profile, "only the bytes differ");

    let hardline = format!("{}# a local note\n", shipped_hardline());
    let changed = Ruleset::load(DEFAULT_PROFILE, hardline.as_bytes()).expect("a comment loads");
    assert!(
        changed
            .version
            .as_str()
            .starts_with("default@9f2e26918d43+h"),
        "{}",
        changed.version
    );
    assert_ne!(changed.version.as_str(), shipped.version.as_str());
    assert_ne!(
        changed.version.hardline_sha256,
        shipped.version.hardline_sha256
    );

    // A renamed profile carries its name in the label.
    let renamed = edit(
        &shipped_profile(),
        "name = \"default\"",
        "name = \"strict\"",
    );
    let renamed = Ruleset::load(renamed.as_bytes(), HARDLINE).expect("a renamed profile loads");
    assert!(
        renamed.version.as_str().starts_with("strict@"),
        "{}",
        renamed.version
    );
}

// ----- Row 1: UTF-8 TOML -----

#[test]
fn row_01_profile_invalid_toml() {
    let err = profile_edit("schema_version = 1\n", "schema_version = \n");
    assert!(
        matches!(
            &err,
            PolicyLoadError::InvalidToml {
                file: PolicyFile::Profile,
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.starts_with("profile: invalid TOML: "), "{message}");
    assert!(
        message.len() > "profile: invalid TOML: ".len(),
        "the parser's detail follows: {message}"
    );
}

#[test]
fn row_01_profile_not_utf8() {
    let mut bytes = DEFAULT_PROFILE.to_vec();
    bytes.extend_from_slice(b"# \xff\n");
    let err = load_err(&bytes, HARDLINE);
    assert!(
        matches!(
            &err,
            PolicyLoadError::InvalidToml {
                file: PolicyFile::Profile,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with("profile: invalid TOML: "),
        "{err}"
    );
}

#[test]
fn row_01_hardline_invalid_toml() {
    let err = hardline_edit(
        "[[rules]]\nid = \"metadata_egress\"",
        "[[rules]\nid = \"metadata_egress\"",
    );
    assert!(
        matches!(
            &err,
            PolicyLoadError::InvalidToml {
                file: PolicyFile::Hardline,
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.starts_with("hardline: invalid TOML: "), "{message}");
    assert!(
        message.len() > "hardline: invalid TOML: ".len(),
        "the parser's detail follows: {message}"
    );
}

#[test]
fn row_01_hardline_not_utf8() {
    let mut bytes = HARDLINE.to_vec();
    bytes.extend_from_slice(b"# \xc3\x28\n");
    let err = load_err(DEFAULT_PROFILE, &bytes);
    assert!(
        matches!(
            &err,
            PolicyLoadError::InvalidToml {
                file: PolicyFile::Hardline,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with("hardline: invalid TOML: "),
        "{err}"
    );
}

// ----- Row 2: no unknown key at any level -----

#[test]
fn row_02_profile_unknown_top_level_field() {
    let err = profile_edit(
        "default_effect = \"deny\"\n",
        "default_effect = \"deny\"\nstrict = true\n",
    );
    assert_eq!(
        err,
        PolicyLoadError::UnknownField {
            file: PolicyFile::Profile,
            path: "strict".to_owned()
        }
    );
    assert_eq!(err.to_string(), "profile: unknown field 'strict'");
}

#[test]
fn row_02_profile_unknown_nested_fields() {
    let err = profile_edit(
        "[advisory]\nenabled = false\n",
        "[advisory]\nenabled = false\nmodel = \"x\"\n",
    );
    assert!(
        matches!(
            &err,
            PolicyLoadError::UnknownField {
                file: PolicyFile::Profile,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "profile: unknown field 'advisory.model'");

    let err = profile_edit(
        "[rules.financial]\ndecision = \"require_approval\"\n",
        "[rules.financial]\ndecision = \"require_approval\"\nnote = \"x\"\n",
    );
    assert!(
        matches!(
            &err,
            PolicyLoadError::UnknownField {
                file: PolicyFile::Profile,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "profile: unknown field 'rules.financial.note'"
    );
}

#[test]
fn row_02_keys_inside_a_value_are_unknown_fields() {
    // "no unknown key at any level": a table given where a value belongs has only unknown
    // keys, and row 2 reports the first before any later row looks at the value.
    let err = profile_edit(
        "[rules.none]\ndecision = \"allow\"",
        "[rules.none]\ndecision = {x = 1}",
    );
    assert_eq!(
        err.to_string(),
        "profile: unknown field 'rules.none.decision.x'"
    );
    let err = profile_edit("name = \"default\"", "name = {y = \"default\"}");
    assert_eq!(err.to_string(), "profile: unknown field 'name.y'");
    let err = hardline_rule_edit(
        "protected_host_path",
        "paths = [\n  \"/etc\"",
        "paths = [{z = 2}, \"/etc\"",
    );
    assert_eq!(
        err,
        PolicyLoadError::UnknownField {
            file: PolicyFile::Hardline,
            path: "rules.2.paths.1.z".to_owned()
        }
    );
}

#[test]
fn row_02_hardline_unknown_fields() {
    let err = hardline_edit(
        "schema_version = 1\n",
        "schema_version = 1\nstrict = true\n",
    );
    assert_eq!(
        err,
        PolicyLoadError::UnknownField {
            file: PolicyFile::Hardline,
            path: "strict".to_owned()
        }
    );
    assert_eq!(err.to_string(), "hardline: unknown field 'strict'");

    // Inside the sixth rule; rules are numbered from 1.
    let err = hardline_rule_edit(
        "metadata_egress",
        "message_code = \"policy.hardline.metadata_egress\"\n",
        "message_code = \"policy.hardline.metadata_egress\"\nseverity = \"high\"\n",
    );
    assert!(
        matches!(
            &err,
            PolicyLoadError::UnknownField {
                file: PolicyFile::Hardline,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "hardline: unknown field 'rules.6.severity'"
    );
}

// ----- Row 3: schema_version = 1 in both -----

#[test]
fn row_03_profile_schema_version() {
    for replacement in ["schema_version = 2\n", "schema_version = \"1\"\n", ""] {
        let err = profile_edit("schema_version = 1\n", replacement);
        assert_eq!(
            err,
            PolicyLoadError::SchemaVersion {
                file: PolicyFile::Profile
            },
            "{replacement:?}"
        );
        assert_eq!(err.to_string(), "profile: schema_version must be 1");
    }
}

#[test]
fn row_03_hardline_schema_version() {
    for replacement in ["schema_version = 0\n", "schema_version = 1.0\n", ""] {
        let err = hardline_edit("schema_version = 1\n", replacement);
        assert_eq!(
            err,
            PolicyLoadError::SchemaVersion {
                file: PolicyFile::Hardline
            },
            "{replacement:?}"
        );
        assert_eq!(err.to_string(), "hardline: schema_version must be 1");
    }
}

// ----- Row 4: profile name -----

#[test]
fn row_04_invalid_name() {
    let too_long = format!("name = \"{}\"", "a".repeat(65));
    for replacement in [
        "name = \"Default\"",
        "name = \"9default\"",
        "name = \"de fault\"",
        "name = \"\"",
        "name = 7",
        too_long.as_str(),
    ] {
        let err = profile_edit("name = \"default\"", replacement);
        assert_eq!(err, PolicyLoadError::InvalidName, "{replacement}");
        assert_eq!(err.to_string(), "profile: invalid name");
    }
    // The longest valid name loads, so the limit is exactly 64.
    let longest = edit(
        &shipped_profile(),
        "name = \"default\"",
        &format!("name = \"{}\"", "a".repeat(64)),
    );
    assert!(Ruleset::load(longest.as_bytes(), HARDLINE).is_ok());
}

// ----- Row 5: the matrix is total -----

#[test]
fn row_05_missing_matrix_row() {
    let err = profile_edit("\n[rules.privileged]\ndecision = \"deny\"\n", "\n");
    assert_eq!(
        err,
        PolicyLoadError::MatrixNotTotal {
            missing: vec!["privileged".to_owned()],
            extra: vec![]
        }
    );
    assert_eq!(
        err.to_string(),
        "profile: policy matrix must be total; missing=[privileged], extra=[]"
    );
}

#[test]
fn row_05_extra_matrix_row() {
    let err = profile_edit(
        "[rules.privileged]\n",
        "[rules.teleport]\ndecision = \"deny\"\n\n[rules.privileged]\n",
    );
    assert!(
        matches!(&err, PolicyLoadError::MatrixNotTotal { .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "profile: policy matrix must be total; missing=[], extra=[teleport]"
    );
}

// ----- Row 6: each rule's values -----

#[test]
fn row_06_invalid_decision() {
    let err = profile_edit(
        "[rules.none]\ndecision = \"allow\"",
        "[rules.none]\ndecision = \"maybe\"",
    );
    assert_eq!(
        err,
        PolicyLoadError::InvalidRuleValue {
            class: SideEffectClass::None,
            field: "decision",
            value: "maybe".to_owned()
        }
    );
    assert_eq!(
        err.to_string(),
        "profile: rules.none: invalid decision 'maybe'"
    );

    // Parsing is exact and case-sensitive (SPEC §3).
    let err = profile_edit(
        "[rules.privileged]\ndecision = \"deny\"",
        "[rules.privileged]\ndecision = \"Deny\"",
    );
    assert!(
        matches!(
            &err,
            PolicyLoadError::InvalidRuleValue {
                class: SideEffectClass::Privileged,
                field: "decision",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "profile: rules.privileged: invalid decision 'Deny'"
    );
}

#[test]
fn row_06_decision_is_required() {
    let err = profile_edit("[rules.none]\ndecision = \"allow\"\n", "[rules.none]\n");
    assert!(
        matches!(
            &err,
            PolicyLoadError::InvalidRuleValue {
                class: SideEffectClass::None,
                field: "decision",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("profile: rules.none: invalid decision '"),
        "{err}"
    );
}

#[test]
fn row_06_invalid_condition_and_otherwise() {
    let err = profile_edit(
        "[rules.network_read]\ndecision = \"allow\"\ncondition = \"host_on_allowlist\"",
        "[rules.network_read]\ndecision = \"allow\"\ncondition = \"host_is_friendly\"",
    );
    assert_eq!(
        err,
        PolicyLoadError::InvalidRuleValue {
            class: SideEffectClass::NetworkRead,
            field: "condition",
            value: "host_is_friendly".to_owned()
        }
    );
    assert_eq!(
        err.to_string(),
        "profile: rules.network_read: invalid condition 'host_is_friendly'"
    );

    let err = profile_edit(
        "condition = \"target_isolated\"\notherwise = \"deny\"",
        "condition = \"target_isolated\"\notherwise = \"never\"",
    );
    assert_eq!(
        err,
        PolicyLoadError::InvalidRuleValue {
            class: SideEffectClass::CodeExecution,
            field: "otherwise",
            value: "never".to_owned()
        }
    );
    assert_eq!(
        err.to_string(),
        "profile: rules.code_execution: invalid otherwise 'never'"
    );
}

// ----- Row 7: otherwise only with condition -----

#[test]
fn row_07_otherwise_requires_condition() {
    let err = profile_edit(
        "[rules.package_install]\ndecision = \"deny\"\n",
        "[rules.package_install]\ndecision = \"deny\"\notherwise = \"deny\"\n",
    );
    assert_eq!(
        err,
        PolicyLoadError::OtherwiseWithoutCondition(SideEffectClass::PackageInstall)
    );
    assert_eq!(
        err.to_string(),
        "profile: rules.package_install: otherwise requires condition"
    );
}

// ----- Row 8: no allow_with_modifications -----

#[test]
fn row_08_allow_with_modifications_is_unavailable() {
    let err = profile_edit(
        "[rules.none]\ndecision = \"allow\"",
        "[rules.none]\ndecision = \"allow_with_modifications\"",
    );
    assert_eq!(
        err,
        PolicyLoadError::ModificationsUnavailable(SideEffectClass::None)
    );
    assert_eq!(
        err.to_string(),
        "profile: rules.none: allow_with_modifications is not available"
    );

    // In `otherwise` too.
    let err = profile_edit(
        "condition = \"target_isolated\"\notherwise = \"deny\"",
        "condition = \"target_isolated\"\notherwise = \"allow_with_modifications\"",
    );
    assert_eq!(
        err,
        PolicyLoadError::ModificationsUnavailable(SideEffectClass::CodeExecution)
    );
    assert_eq!(
        err.to_string(),
        "profile: rules.code_execution: allow_with_modifications is not available"
    );
}

// ----- Row 9: default_effect fails closed -----

#[test]
fn row_09_default_effect_must_fail_closed() {
    for replacement in [
        "default_effect = \"allow\"",
        "default_effect = \"allow_with_modifications\"",
        "default_effect = \"Deny\"",
    ] {
        let err = profile_edit("default_effect = \"deny\"", replacement);
        assert_eq!(err, PolicyLoadError::DefaultEffectOpen, "{replacement}");
        assert_eq!(err.to_string(), "profile: default_effect must fail closed");
    }
    // `require_approval` also fails closed and loads.
    let profile = edit(
        &shipped_profile(),
        "default_effect = \"deny\"",
        "default_effect = \"require_approval\"",
    );
    assert!(Ruleset::load(profile.as_bytes(), HARDLINE).is_ok());
}

// ----- Row 10: unknown_tool.decision fails closed -----

#[test]
fn row_10_unknown_tool_decision_must_fail_closed() {
    let err = profile_edit(
        "[unknown_tool]\ndecision = \"deny\"",
        "[unknown_tool]\ndecision = \"allow\"",
    );
    assert_eq!(err, PolicyLoadError::UnknownToolOpen);
    assert_eq!(
        err.to_string(),
        "profile: unknown_tool.decision must fail closed"
    );
}

// ----- Row 11: approval expiry levels -----

#[test]
fn row_11_expiry_must_define_every_level_once() {
    let missing = profile_edit("critical = 3600\n", "");
    assert_eq!(missing, PolicyLoadError::ExpiryLevels);
    assert_eq!(
        missing.to_string(),
        "profile: approval expiry must define every risk level exactly once"
    );

    let extra = profile_edit("critical = 3600\n", "critical = 3600\nextreme = 60\n");
    assert_eq!(extra, PolicyLoadError::ExpiryLevels);
    assert_eq!(
        extra.to_string(),
        "profile: approval expiry must define every risk level exactly once"
    );
}

// ----- Row 12: positive integer expiries -----

#[test]
fn row_12_expiry_values_must_be_positive_integers() {
    for replacement in [
        "high = 0",
        "high = -14400",
        "high = 1.5",
        "high = \"14400\"",
    ] {
        let err = profile_edit("high = 14400", replacement);
        assert_eq!(err, PolicyLoadError::ExpiryValues, "{replacement}");
        assert_eq!(
            err.to_string(),
            "profile: approval expiry values must be positive integers"
        );
    }
}

#[test]
fn row_12_expiry_values_are_bounded_by_ten_years() {
    // Not in §7.4's table (issue 17): a value past ten years is refused with its own message;
    // ten years exactly loads (a store-upgrade fixture uses it).
    let max = airlock_policy::profile::MAX_APPROVAL_EXPIRY_SECONDS;
    assert_eq!(max, 315_360_000);
    for replacement in [
        format!("high = {}", max + 1),
        format!("high = {}", i64::MAX),
    ] {
        let err = profile_edit("high = 14400", &replacement);
        assert_eq!(err, PolicyLoadError::ExpiryTooLong, "{replacement}");
        assert_eq!(err.file(), PolicyFile::Profile);
        assert_eq!(
            err.to_string(),
            "profile: approval expiry values must be at most 315360000 seconds (10 years)"
        );
    }
    let profile = edit(&shipped_profile(), "high = 14400", &format!("high = {max}"));
    let ruleset = Ruleset::load(profile.as_bytes(), HARDLINE).unwrap();
    assert_eq!(ruleset.profile.approval_expiry.high, max);
}

// ----- Row 13: booleans -----

#[test]
fn row_13_settings_must_be_booleans() {
    for (old, new, key) in [
        (
            "external_untrusted_requires_approval = true",
            "external_untrusted_requires_approval = \"true\"",
            "trust_overlay.external_untrusted_requires_approval",
        ),
        (
            "[self_approval]\nenabled = true",
            "[self_approval]\nenabled = 1",
            "self_approval.enabled",
        ),
        (
            "[advisory]\nenabled = false",
            "[advisory]\nenabled = \"no\"",
            "advisory.enabled",
        ),
    ] {
        let err = profile_edit(old, new);
        assert_eq!(err, PolicyLoadError::NotBoolean(key));
        assert_eq!(err.to_string(), format!("profile: {key} must be a boolean"));
    }
}

// ----- Row 14: advisory stays off -----

#[test]
fn row_14_advisory_must_be_disabled() {
    let err = profile_edit("[advisory]\nenabled = false", "[advisory]\nenabled = true");
    assert_eq!(err, PolicyLoadError::AdvisoryEnabled);
    assert_eq!(err.to_string(), "profile: advisory.enabled must be false");
}

// ----- Row 15: each hardline rule's required fields -----

#[test]
fn row_15_rules_must_be_present() {
    let err = load_err(DEFAULT_PROFILE, b"schema_version = 1\n");
    assert_eq!(err, PolicyLoadError::NoRules);
    assert!(err.to_string().starts_with("hardline: rules"), "{err}");

    let err = load_err(DEFAULT_PROFILE, b"schema_version = 1\nrules = []\n");
    assert_eq!(err, PolicyLoadError::NoRules);
    assert!(err.to_string().starts_with("hardline: rules"), "{err}");
}

#[test]
fn row_15_missing_or_invalid_rule_fields() {
    // Each edit breaks the first rule, so the index is 1.
    let cases: [(&str, &str, &str); 8] = [
        (FIRST_RULE_ID, "", "id"),
        ("kind = \"command_regex\"\n", "", "kind"),
        ("kind = \"command_regex\"\n", "kind = \"regex\"\n", "kind"),
        (
            "applies_to = [\"code_execution\", \"sandbox_network\"]\n",
            "",
            "applies_to",
        ),
        (
            "applies_to = [\"code_execution\", \"sandbox_network\"]\n",
            "applies_to = []\n",
            "applies_to",
        ),
        (
            "applies_to = [\"code_execution\", \"sandbox_network\"]\n",
            "applies_to = [\"code_execution\", \"code_execution\"]\n",
            "applies_to",
        ),
        (DESTRUCTIVE_MESSAGE, "", "message_code"),
        ("near_miss = \"rm -rf ./build\"\n", "", "near_miss"),
    ];
    for (old, new, field) in cases {
        let err = hardline_edit(old, new);
        assert_eq!(
            err,
            PolicyLoadError::InvalidRule { index: 1, field },
            "{old:?} -> {new:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("hardline: rule 1: missing or invalid '{field}'")
        );
    }

    // An unknown class in a later rule names that rule's index.
    let err = hardline_edit(
        "applies_to = [\"credential_access\"]",
        "applies_to = [\"credential_theft\"]",
    );
    assert_eq!(
        err,
        PolicyLoadError::InvalidRule {
            index: 3,
            field: "applies_to"
        }
    );
    assert_eq!(
        err.to_string(),
        "hardline: rule 3: missing or invalid 'applies_to'"
    );
}

// ----- Row 16: ids match the grammar and are unique -----

#[test]
fn row_16_duplicate_rule_id() {
    let err = hardline_edit("id = \"host_access_class\"", "id = \"credential_class\"");
    assert_eq!(
        err,
        PolicyLoadError::DuplicateRuleId("credential_class".to_owned())
    );
    assert_eq!(
        err.to_string(),
        "hardline: duplicate rule id 'credential_class'"
    );
}

#[test]
fn row_16_id_grammar() {
    let too_long = format!("id = \"{}\"\n", "a".repeat(65));
    for replacement in [
        "id = \"Destructive\"\n",
        "id = \"destructive-root\"\n",
        "id = \"_destructive\"\n",
        too_long.as_str(),
    ] {
        let err = hardline_edit(FIRST_RULE_ID, replacement);
        assert_eq!(
            err,
            PolicyLoadError::InvalidRule {
                index: 1,
                field: "id"
            },
            "{replacement:?}"
        );
        assert_eq!(err.to_string(), "hardline: rule 1: missing or invalid 'id'");
    }
}

// ----- Row 17: message_code prefix, non-blank near_miss -----

#[test]
fn row_17_invalid_message_code() {
    for replacement in [
        "message_code = \"policy.destructive_command\"\n",
        "message_code = \"policy.hardline.\"\n",
        "message_code = \"Policy.hardline.destructive_command\"\n",
    ] {
        let err = hardline_edit(DESTRUCTIVE_MESSAGE, replacement);
        assert_eq!(
            err,
            PolicyLoadError::InvalidMessageCode("destructive_root_delete".to_owned()),
            "{replacement:?}"
        );
        assert_eq!(
            err.to_string(),
            "hardline: destructive_root_delete: invalid message_code"
        );
    }
}

#[test]
fn row_17_blank_near_miss() {
    for replacement in [
        "near_miss = \"\"\n",
        "near_miss = \"  \\t \"\n",
        "near_miss = \"\\u001c\\u3000\"\n",
    ] {
        let err = hardline_edit("near_miss = \"./.env.example\"\n", replacement);
        assert_eq!(
            err,
            PolicyLoadError::BlankNearMiss("protected_host_path".to_owned()),
            "{replacement:?}"
        );
        assert_eq!(
            err.to_string(),
            "hardline: protected_host_path: near_miss must not be blank"
        );
    }
}

// ----- Row 18: each kind's own field, and no other -----

#[test]
fn row_18_kind_field_required() {
    let paths = shipped_list("protected_host_path", "paths");
    let cidrs = format!("{}\n", shipped_list("metadata_egress", "cidrs"));
    let cases = [
        (
            paths.as_str(),
            "paths = []",
            "protected_host_path",
            "paths",
            HardlineRuleKind::ProtectedPath,
        ),
        (
            cidrs.as_str(),
            "",
            "metadata_egress",
            "cidrs",
            HardlineRuleKind::NetworkRange,
        ),
        (
            "source = \"credential_shaped\"",
            "source = \"credential_like\"",
            "credential_to_egress",
            "source",
            HardlineRuleKind::TrustFlow,
        ),
    ];
    let without_pattern = remove_line_starting(&shipped_hardline(), "pattern = '''");
    let mut files: Vec<(String, &str, &str, HardlineRuleKind)> = vec![(
        without_pattern,
        "destructive_root_delete",
        "pattern",
        HardlineRuleKind::CommandRegex,
    )];
    for (old, new, id, field, kind) in cases {
        files.push((
            edit_rule(&shipped_hardline(), id, old, new),
            id,
            field,
            kind,
        ));
    }
    for (hardline, id, field, kind) in files {
        let err = load_err(DEFAULT_PROFILE, hardline.as_bytes());
        assert_eq!(
            err,
            PolicyLoadError::KindFieldRequired {
                id: id.to_owned(),
                field,
                kind
            },
            "{field}"
        );
        assert_eq!(
            err.to_string(),
            format!("hardline: {id}: field '{field}' required for {kind}")
        );
    }
}

/// Removes the single line of `text` that starts with `prefix`.
fn remove_line_starting(text: &str, prefix: &str) -> String {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    assert_eq!(
        lines.iter().filter(|l| l.starts_with(prefix)).count(),
        1,
        "exactly one line starts with {prefix:?}"
    );
    lines
        .into_iter()
        .filter(|l| !l.starts_with(prefix))
        .collect()
}

#[test]
fn row_18_kind_field_not_allowed() {
    let err = hardline_edit(
        CREDENTIAL_CLASS_HEAD,
        &format!("{CREDENTIAL_CLASS_HEAD}pattern = \"x\"\n"),
    );
    assert_eq!(
        err,
        PolicyLoadError::KindFieldNotAllowed {
            id: "credential_class".to_owned(),
            field: "pattern",
            kind: HardlineRuleKind::SideEffect
        }
    );
    assert_eq!(
        err.to_string(),
        "hardline: credential_class: field 'pattern' not allowed for side_effect"
    );

    // Another kind's field beside a rule's own.
    let err = hardline_rule_edit(
        "credential_to_egress",
        "source = \"credential_shaped\"\n",
        "source = \"credential_shaped\"\ncidrs = [\"10.0.0.0/8\"]\n",
    );
    assert_eq!(
        err,
        PolicyLoadError::KindFieldNotAllowed {
            id: "credential_to_egress".to_owned(),
            field: "cidrs",
            kind: HardlineRuleKind::TrustFlow
        }
    );
    assert_eq!(
        err.to_string(),
        "hardline: credential_to_egress: field 'cidrs' not allowed for trust_flow"
    );
}

// ----- Row 19: patterns compile, CIDRs parse -----

#[test]
fn row_18_of_a_later_rule_comes_before_row_19_of_an_earlier_one() {
    // "fails with the first error below" (SPEC §7.4): the table's order, across all rules. The
    // first rule's pattern does not compile (row 19) and the third rule carries another kind's
    // field (row 18); row 18 is reported.
    let hardline = edit(
        &edit(
            &shipped_hardline(),
            "pattern = '''",
            "pattern = '''(unclosed",
        ),
        CREDENTIAL_CLASS_HEAD,
        &format!("{CREDENTIAL_CLASS_HEAD}pattern = \"x\"\n"),
    );
    assert_eq!(
        load_err(DEFAULT_PROFILE, hardline.as_bytes()),
        PolicyLoadError::KindFieldNotAllowed {
            id: "credential_class".to_owned(),
            field: "pattern",
            kind: HardlineRuleKind::SideEffect
        }
    );
}

#[test]
fn row_19_invalid_pattern() {
    let err = hardline_edit("pattern = '''", "pattern = '''(unclosed");
    assert_eq!(
        err,
        PolicyLoadError::InvalidPattern {
            id: "destructive_root_delete".to_owned()
        }
    );
    assert_eq!(
        err.to_string(),
        "hardline: destructive_root_delete: invalid pattern"
    );
}

#[test]
fn row_19_pattern_over_the_size_limit() {
    // Valid syntax, but its compiled program is far beyond 1 MiB.
    let hardline = edit(
        &shipped_hardline(),
        "pattern = '''",
        "pattern = '''(?:\\w{100}){100}|",
    );
    let err = load_err(DEFAULT_PROFILE, hardline.as_bytes());
    assert_eq!(
        err,
        PolicyLoadError::InvalidPattern {
            id: "destructive_root_delete".to_owned()
        }
    );
    assert_eq!(
        err.to_string(),
        "hardline: destructive_root_delete: invalid pattern"
    );
}

#[test]
fn row_19_invalid_cidr() {
    for bad in [
        "169.254.0.0/33",
        "fe80::/129",
        "metadata.internal/32",
        "169.254.0.0",
    ] {
        let err = hardline_rule_edit(
            "metadata_egress",
            "\"169.254.0.0/16\", \"fe80::/10\"",
            &format!("\"{bad}\", \"fe80::/10\""),
        );
        assert_eq!(
            err,
            PolicyLoadError::InvalidCidr {
                id: "metadata_egress".to_owned(),
                cidr: bad.to_owned()
            },
            "{bad}"
        );
        assert_eq!(
            err.to_string(),
            format!("hardline: metadata_egress: invalid cidr '{bad}'")
        );
    }
}

/// Beyond the §7.4 table: a protected path that names nothing once canonical would make the rule
/// protect less than it says, so the load stops. A `~` entry that climbs out of home is the
/// absolute path it names: `~/../etc` is `/etc`, and `~/..` is `/`, which protects every path,
/// the rule's own near miss included (row 20).
#[test]
fn a_protected_path_that_names_nothing_is_refused() {
    let shipped = "\"/etc\", \"/usr\"";
    for bad in ["", ".", "..", "a/..", "./"] {
        let err = hardline_rule_edit(
            "protected_host_path",
            shipped,
            &format!("\"/etc\", \"{bad}\""),
        );
        assert_eq!(
            err,
            PolicyLoadError::InvalidPath {
                id: "protected_host_path".to_owned(),
                path: bad.to_owned()
            },
            "{bad:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("hardline: protected_host_path: invalid path '{bad}'")
        );
    }
    for root in ["~/..", "~\\\\.."] {
        assert_eq!(
            hardline_rule_edit(
                "protected_host_path",
                shipped,
                &format!("\"/etc\", \"{root}\"")
            ),
            PolicyLoadError::MatchesNearMiss("protected_host_path".to_owned()),
            "{root}"
        );
    }
    let climbed = edit_rule(
        &shipped_hardline(),
        "protected_host_path",
        shipped,
        "\"~/../etc\", \"/usr\"",
    );
    assert!(Ruleset::load(DEFAULT_PROFILE, climbed.as_bytes()).is_ok());
}

// ----- Row 20: no rule matches its own near_miss -----

#[test]
fn row_20_rule_matches_its_own_near_miss() {
    for (old, new, id) in [
        (
            "near_miss = \"rm -rf ./build\"",
            "near_miss = \"rm -rf /\"",
            "destructive_root_delete",
        ),
        (
            "near_miss = \"./.env.example\"",
            "near_miss = \"./.env.local\"",
            "protected_host_path",
        ),
        (
            "near_miss = \"https://example.com/\"",
            "near_miss = \"http://169.254.169.254/latest\"",
            "metadata_egress",
        ),
        (
            "near_miss = \"send the name of a credential reference\"",
            "near_miss = \"send api_key=secret-value\"",
            "credential_to_egress",
        ),
    ] {
        let err = hardline_edit(old, new);
        assert_eq!(err, PolicyLoadError::MatchesNearMiss(id.to_owned()), "{id}");
        assert_eq!(
            err.to_string(),
            format!("hardline: {id}: rule matches its own near_miss")
        );
    }
}

#[test]
fn row_20_side_effect_rules_test_their_near_miss_outside_their_classes() {
    // A side_effect rule is checked under the first class it does not apply to (SPEC §6.3), where
    // it cannot match: any near miss loads, even one another rule would deny.
    let hardline = edit(
        &shipped_hardline(),
        "near_miss = \"read a credential reference from configuration\"",
        "near_miss = \"rm -rf / api_key=secret-value\"",
    );
    let ruleset = Ruleset::load(DEFAULT_PROFILE, hardline.as_bytes())
        .expect("a side_effect rule's near miss is tested outside its class");
    let rule = &ruleset.hardline[2];
    assert_eq!(rule.id, "credential_class");
    assert_eq!(rule.near_miss, "rm -rf / api_key=secret-value");
    assert!(!rule.matches_own_near_miss());
}
