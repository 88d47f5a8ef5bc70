//! The proposed action the engine evaluates and the decision it returns (SPEC §4.1).
//!
//! `ProposedAction::from_json` is the one parser for action JSON: unknown fields are rejected at
//! every level, the five `target` keys are all required, and `arguments` must be an object nested
//! at most [`MAX_ARGUMENT_DEPTH`] deep. Depth is checked on the raw bytes before parsing so that a
//! hostile document can never exhaust the stack.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::canonical::is_sha256_hex;
use crate::ids::deserialize_canonical_uuid;
use crate::time::Timestamp;
use crate::vocab::{
    ActionKind, IdempotencyClass, PolicyDecisionType, RiskLevel, SideEffectClass, TargetKind,
    TrustLevel,
};

/// The deepest nesting allowed in `arguments`; the arguments object itself is depth 1.
pub const MAX_ARGUMENT_DEPTH: usize = 128;

/// A JSON object, as tools receive their arguments.
pub type JsonMap = Map<String, Value>;

/// Where the tool runs, as the engine sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub kind: TargetKind,
    pub isolated: bool,
    pub network_enabled: bool,
    #[serde(deserialize_with = "required_nullable")]
    pub device_id: Option<String>,
    #[serde(deserialize_with = "required_nullable")]
    pub server_id: Option<String>,
}

impl Target {
    /// The target a tool spec implies (SPEC §4.1): isolation and network follow from the kind.
    pub fn for_kind(kind: TargetKind) -> Target {
        let isolated = matches!(kind, TargetKind::Sandbox | TargetKind::BrowserProvider);
        let network_enabled = matches!(kind, TargetKind::WebProvider | TargetKind::BrowserProvider);
        Target {
            kind,
            isolated,
            network_enabled,
            device_id: None,
            server_id: None,
        }
    }
}

/// A nullable field whose key must still be present: `deserialize_with` makes serde treat a
/// missing key as an error instead of `None`.
/// Shared by the owned and the borrowed action.
pub(crate) fn required_nullable<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d)
}

/// An action and its target are JSON objects (SPEC §4.1). A derived `Deserialize` would also
/// read a struct from an array of its fields in order; this reads one only from an object.
pub(crate) fn object_only<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct ObjectOnly<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for ObjectOnly<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(ObjectOnly(std::marker::PhantomData))
}

/// One proposed action: everything the engine may read, and nothing else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposedAction {
    pub kind: ActionKind,
    #[serde(deserialize_with = "deserialize_canonical_uuid")]
    pub action_id: Uuid,
    pub tenant_id: String,
    #[serde(deserialize_with = "deserialize_canonical_uuid")]
    pub session_id: Uuid,
    #[serde(deserialize_with = "deserialize_canonical_uuid")]
    pub run_id: Uuid,
    pub step_number: u64,
    pub name: String,
    #[serde(deserialize_with = "required_nullable")]
    pub version: Option<String>,
    pub summary: String,
    pub side_effect: SideEffectClass,
    pub risk: RiskLevel,
    pub idempotency: IdempotencyClass,
    pub required_scopes: Vec<String>,
    pub arguments: JsonMap,
    pub normalized_arguments_hash: String,
    pub argument_trust: BTreeMap<String, TrustLevel>,
    pub origin_trust: TrustLevel,
    #[serde(deserialize_with = "object_only")]
    pub target: Target,
    pub evaluated_at: Timestamp,
}

/// Why action JSON was rejected; the CLI reports it as `invalid_action`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    #[error("{0}")]
    Json(String),
    #[error("arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels")]
    TooDeep,
    #[error("tenant_id must be 1 to 128 characters")]
    TenantId,
    #[error("normalized_arguments_hash must be 64 lowercase hex digits")]
    ArgumentsHash,
}

/// The deepest bracket nesting in a JSON text, ignoring brackets inside strings. Stops counting
/// once `limit` is exceeded.
pub fn max_nesting(bytes: &[u8], limit: usize) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
                if deepest > limit {
                    return deepest;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Nesting depth of a value: a scalar is 0, an empty object 1.
pub fn value_depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(value_depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(value_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The checks serde cannot express, in the order both action parsers run them (the first that
/// fails is the error reported).
pub(crate) fn check_fields(
    tenant_id: &str,
    normalized_arguments_hash: &str,
    arguments: &JsonMap,
) -> Result<(), ActionError> {
    if !(1..=128).contains(&tenant_id.chars().count()) {
        return Err(ActionError::TenantId);
    }
    if !is_sha256_hex(normalized_arguments_hash) {
        return Err(ActionError::ArgumentsHash);
    }
    if arguments.values().map(value_depth).max().unwrap_or(0) + 1 > MAX_ARGUMENT_DEPTH {
        return Err(ActionError::TooDeep);
    }
    Ok(())
}

impl ProposedAction {
    /// Parses and validates one action document.
    pub fn from_json(text: &str) -> Result<ProposedAction, ActionError> {
        // Fast path: serde_json's own recursion limit (128 levels) keeps the stack safe without
        // the byte scan below. A document it accepts nests at most 127 deep, within the limit,
        // and has nothing outside the action but whitespace, so the scan could only have passed
        // it: the result is the one the checked path gives. Anything it refuses (a syntax error,
        // or a document 128 or 129 deep that the limit cuts short) takes the checked path, so
        // every error, and which error wins, stays as it was.
        let mut deserializer = serde_json::Deserializer::from_str(text);
        if let Ok(action) = object_only::<_, ProposedAction>(&mut deserializer)
            && deserializer.end().is_ok()
        {
            action.validate()?;
            return Ok(action);
        }
        Self::from_json_checked(text)
    }

    /// The checked path: depth on the raw bytes first, then a parse without serde's limit.
    fn from_json_checked(text: &str) -> Result<ProposedAction, ActionError> {
        // The action object is one level above `arguments`.
        if max_nesting(text.as_bytes(), MAX_ARGUMENT_DEPTH + 1) > MAX_ARGUMENT_DEPTH + 1 {
            return Err(ActionError::TooDeep);
        }
        let mut deserializer = serde_json::Deserializer::from_str(text);
        deserializer.disable_recursion_limit();
        let action = object_only::<_, ProposedAction>(&mut deserializer)
            .map_err(|e| ActionError::Json(e.to_string()))?;
        deserializer
            .end()
            .map_err(|e| ActionError::Json(e.to_string()))?;
        action.validate()?;
        Ok(action)
    }

    /// The checks serde cannot express.
    pub fn validate(&self) -> Result<(), ActionError> {
        check_fields(
            &self.tenant_id,
            &self.normalized_arguments_hash,
            &self.arguments,
        )
    }

    /// Whether any content feeding this action is `external_untrusted` (the overlay's test).
    pub fn carries_untrusted_content(&self) -> bool {
        self.origin_trust == TrustLevel::ExternalUntrusted
            || self
                .argument_trust
                .values()
                .any(|t| *t == TrustLevel::ExternalUntrusted)
    }
}

/// A decision with its audit fields. `explanation` goes to audit and approvers, never the planner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyDecision {
    pub decision: PolicyDecisionType,
    pub reason_code: String,
    pub explanation: String,
    pub policy_version: String,
    /// Always null in v1; kept so the wire shape is stable.
    pub modified_arguments: Option<Value>,
}

impl PolicyDecision {
    /// The compact decision JSON, keys in the order of SPEC §4.1.
    pub fn to_json(&self) -> String {
        // Serializing a struct keeps declaration order; a derived Serialize of these plain fields
        // cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"{"kind":"tool_call","action_id":"e53089b4-4d78-4691-8cb8-11b066b2f2fd","tenant_id":"t","session_id":"501cce9d-3fdb-4258-9466-616fec7a75ef","run_id":"5dd290e9-2766-453c-8b7f-77e8f8d2b920","step_number":9,"name":"demo.echo","version":"1.0.0","summary":"Run demo.echo with validated arguments.","side_effect":"none","risk":"low","idempotency":"read_only","required_scopes":[],"arguments":{"text":"hello"},"normalized_arguments_hash":"cbbbdcd27692344de5dbab3abcaba413fb0f45307267de7081401576df1cb176","argument_trust":{},"origin_trust":"user","target":{"kind":"sandbox","isolated":false,"network_enabled":false,"device_id":null,"server_id":null},"evaluated_at":"2026-01-15T12:00:08Z"}"#;

    fn with(field: &str, value: &str) -> String {
        let mut v: Value = serde_json::from_str(SAMPLE).unwrap();
        v[field] = serde_json::from_str(value).unwrap();
        v.to_string()
    }

    #[test]
    fn parses_the_sample() {
        let action = ProposedAction::from_json(SAMPLE).unwrap();
        assert_eq!(action.side_effect, SideEffectClass::None);
        assert_eq!(action.target.kind, TargetKind::Sandbox);
        assert_eq!(
            action.evaluated_at.to_string(),
            "2026-01-15T12:00:08.000000Z"
        );
    }

    #[test]
    fn rejects_unknown_fields_at_every_level() {
        let mut v: Value = serde_json::from_str(SAMPLE).unwrap();
        v["extra"] = Value::Null;
        let err = ProposedAction::from_json(&v.to_string()).unwrap_err();
        assert!(err.to_string().contains("unknown field `extra`"), "{err}");
        let mut v: Value = serde_json::from_str(SAMPLE).unwrap();
        v["target"]["extra"] = Value::Null;
        assert!(ProposedAction::from_json(&v.to_string()).is_err());
    }

    #[test]
    fn target_ids_must_be_present_even_when_null() {
        let mut v: Value = serde_json::from_str(SAMPLE).unwrap();
        v["target"].as_object_mut().unwrap().remove("device_id");
        let err = ProposedAction::from_json(&v.to_string()).unwrap_err();
        assert!(err.to_string().contains("device_id"), "{err}");
    }

    #[test]
    fn rejects_invalid_values() {
        for (field, value) in [
            ("side_effect", r#""None""#),
            ("risk", r#""extreme""#),
            ("arguments", r#"[]"#),
            ("step_number", "-1"),
            ("action_id", r#""not-a-uuid""#),
            // Only the lowercase hyphenated spelling (SPEC §2.2).
            ("action_id", r#""E53089B4-4D78-4691-8CB8-11B066B2F2FD""#),
            ("session_id", r#""{501cce9d-3fdb-4258-9466-616fec7a75ef}""#),
            (
                "run_id",
                r#""urn:uuid:5dd290e9-2766-453c-8b7f-77e8f8d2b920""#,
            ),
            ("run_id", r#""5dd290e92766453c8b7f77e8f8d2b920""#),
            ("evaluated_at", r#""yesterday""#),
            ("tenant_id", r#""""#),
            ("normalized_arguments_hash", r#""ABC""#),
            ("origin_trust", r#""trusted""#),
        ] {
            assert!(
                ProposedAction::from_json(&with(field, value)).is_err(),
                "{field} = {value}"
            );
        }
    }

    #[test]
    fn depth_limit_counts_the_arguments_object_as_one() {
        let nested = |depth: usize| format!("{}1{}", "[".repeat(depth - 1), "]".repeat(depth - 1));
        let with_arguments = |arguments: String| SAMPLE.replace(r#"{"text":"hello"}"#, &arguments);
        let ok = with_arguments(format!(r#"{{"a":{}}}"#, nested(MAX_ARGUMENT_DEPTH)));
        assert!(ProposedAction::from_json(&ok).is_ok());
        let deep = with_arguments(format!(r#"{{"a":{}}}"#, nested(MAX_ARGUMENT_DEPTH + 1)));
        assert_eq!(ProposedAction::from_json(&deep), Err(ActionError::TooDeep));
        let hostile = format!(r#"{{"a":{}"#, "[".repeat(1_000_000));
        assert_eq!(
            ProposedAction::from_json(&hostile),
            Err(ActionError::TooDeep)
        );
    }

    /// The fast path of `from_json` (serde's own depth limit, no byte scan) must give exactly
    /// what the checked path gives: the same action, or the same error, with the same winner
    /// when a document has two faults.
    #[test]
    fn fast_and_checked_paths_agree_on_every_answer() {
        let nested = |depth: usize| format!("{}1{}", "[".repeat(depth - 1), "]".repeat(depth - 1));
        let with = |field: &str, value: &str| {
            let mut v: Value = serde_json::from_str(SAMPLE).unwrap();
            v[field] = serde_json::from_str(value).unwrap();
            v.to_string()
        };
        let mut documents = vec![
            SAMPLE.to_owned(),
            format!("{SAMPLE} "),
            format!("{SAMPLE} x"),
            format!("{SAMPLE} {}", "[".repeat(300)),
            SAMPLE[..SAMPLE.len() / 2].to_owned(),
            String::new(),
            "null".to_owned(),
            with("tenant_id", r#""""#),
            with("normalized_arguments_hash", r#""ABC""#),
            with("action_id", "5"),
            with("action_id", r#""E53089B4-4D78-4691-8CB8-11B066B2F2FD""#),
            with("session_id", r#""not-a-uuid""#),
            with("evaluated_at", r#""yesterday""#),
        ];
        for depth in MAX_ARGUMENT_DEPTH - 3..=MAX_ARGUMENT_DEPTH + 3 {
            let arguments = format!(r#"{{"a":{}}}"#, nested(depth));
            documents.push(SAMPLE.replace(r#"{"text":"hello"}"#, &arguments));
            // Two faults: too deep and an empty tenant; the depth is reported.
            let bad_tenant = with("tenant_id", r#""""#);
            let mut v: Value = serde_json::from_str(&bad_tenant).unwrap();
            v["arguments"] = serde_json::json!({"a": "@"});
            documents.push(v.to_string().replace(r#""@""#, &nested(depth)));
            // A deep value that a later duplicate key replaces.
            let mut v: Value = serde_json::from_str(SAMPLE).unwrap();
            v["arguments"] = serde_json::json!({"a": "@", "b": 1});
            let text = v.to_string().replace(r#""@""#, &nested(depth));
            documents.push(text.replace(r#""b":1"#, r#""a":1"#));
        }
        for document in &documents {
            assert_eq!(
                ProposedAction::from_json(document),
                ProposedAction::from_json_checked(document),
                "{}",
                &document[..document.len().min(200)]
            );
        }
        let too_deep = documents
            .iter()
            .filter(|d| ProposedAction::from_json(d) == Err(ActionError::TooDeep))
            .count();
        assert!(too_deep >= 6, "the depth cases reach the limit: {too_deep}");
    }

    #[test]
    fn spec_target_for_kind() {
        let t = Target::for_kind(TargetKind::BrowserProvider);
        assert!(t.isolated && t.network_enabled);
        let t = Target::for_kind(TargetKind::InProcess);
        assert!(!t.isolated && !t.network_enabled);
    }
}
