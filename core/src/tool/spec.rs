//! Tool specs and the restricted JSON Schema subset core validates itself (SPEC §12.4).
//!
//! Core validates arguments without a JSON Schema library: the subset is small enough to check by
//! hand, and rejecting every keyword outside it at registration means no constraint a tool author
//! writes is ever silently ignored. Choices the spec leaves open: `required` and `enum` may not
//! list a name twice; `minLength > maxLength` and `minimum > maximum` fail registration; `to_json`
//! always writes `required`, possibly empty.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::action::JsonMap;
use crate::scope::{Scope, ScopeSet};
use crate::vocab::{IdempotencyClass, RiskLevel, SideEffectClass, TargetKind, TrustLevel};

/// `MAJOR.MINOR.PATCH`, each a decimal without leading zeros (≤ 9 digits), compared numerically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ToolVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

/// Why a spec cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolSpecError {
    #[error("invalid tool name '{0}'")]
    Name(String),
    #[error("invalid tool version '{0}'")]
    Version(String),
    #[error("{0}")]
    Scope(#[from] crate::scope::ScopeError),
    #[error("timeout_ms must be positive")]
    Timeout,
    #[error("max_output_bytes must be in 1..=8388608")]
    MaxOutput,
    #[error("invalid input schema: {0}")]
    Schema(String),
    #[error("tool {name}@{version} is already registered")]
    Duplicate { name: String, version: ToolVersion },
}

/// Why arguments failed validation; the pipeline refuses with `tool.arguments_invalid`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ArgumentsError(pub String);

/// One property of an input schema.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertySchema {
    String {
        min_length: Option<u64>,
        max_length: Option<u64>,
        allowed: Option<Vec<String>>,
        default: Option<String>,
    },
    Integer {
        minimum: Option<i64>,
        maximum: Option<i64>,
        default: Option<i64>,
    },
    Boolean {
        default: Option<bool>,
    },
    StringArray {
        max_items: Option<u64>,
        item_max_length: Option<u64>,
        default: Option<Vec<String>>,
    },
}

/// `{"type":"object","properties":…,"required":…,"additionalProperties":false}`.
#[derive(Debug, Clone, PartialEq)]
pub struct InputSchema {
    pub properties: BTreeMap<String, PropertySchema>,
    pub required: BTreeSet<String>,
}

/// How a tool's arguments are validated.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgumentSchema {
    /// The subset of SPEC §12.4, checked by core.
    Checked(InputSchema),
    /// An upstream MCP server's own schema (SPEC §19.2): core checks only that arguments are a
    /// JSON object within §4.1's nesting limit; the upstream validates the rest. Kept verbatim
    /// for listing and for the definition hash. Only `mcp_server` tools may have one.
    Upstream(Value),
}

/// §4.1: the normalized arguments nest at most this deep.
pub const MAX_ARGUMENT_DEPTH: usize = 128;

fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

impl ArgumentSchema {
    /// The JSON Schema the tool is listed with.
    pub fn to_json(&self) -> Value {
        match self {
            ArgumentSchema::Checked(schema) => schema.to_json(),
            ArgumentSchema::Upstream(schema) => schema.clone(),
        }
    }

    fn check(&self) -> Result<(), ToolSpecError> {
        match self {
            ArgumentSchema::Checked(schema) => schema.check(),
            ArgumentSchema::Upstream(schema) if schema.is_object() => Ok(()),
            ArgumentSchema::Upstream(_) => {
                Err(schema_error("an upstream schema must be a JSON object"))
            }
        }
    }

    /// Validates raw arguments (SPEC §4.2 item 1); an upstream schema passes any object within
    /// the nesting limit, unchanged.
    pub fn normalize(&self, raw: &Value) -> Result<JsonMap, ArgumentsError> {
        match self {
            ArgumentSchema::Checked(schema) => schema.normalize(raw),
            ArgumentSchema::Upstream(_) => match raw {
                Value::Object(map) if depth(raw) <= MAX_ARGUMENT_DEPTH => Ok(map.clone()),
                Value::Object(_) => Err(ArgumentsError(format!(
                    "arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels"
                ))),
                _ => Err(ArgumentsError("arguments must be a JSON object".to_owned())),
            },
        }
    }
}

impl From<InputSchema> for ArgumentSchema {
    fn from(schema: InputSchema) -> ArgumentSchema {
        ArgumentSchema::Checked(schema)
    }
}

/// Everything core knows about a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub version: ToolVersion,
    pub description: String,
    pub input_schema: ArgumentSchema,
    pub side_effect: SideEffectClass,
    pub risk: RiskLevel,
    pub idempotency: IdempotencyClass,
    pub required_scopes: ScopeSet,
    pub timeout_ms: u64,
    pub max_output_bytes: u64,
    pub allow_parallel: bool,
    pub target: TargetKind,
    pub output_trust: TrustLevel,
}

/// The largest `max_output_bytes` a spec may declare: 8 MiB (SPEC §12.4).
pub const MAX_OUTPUT_BYTES_LIMIT: u64 = 8 * 1024 * 1024;

/// The longest tool name, in bytes (SPEC §12.4).
pub const MAX_TOOL_NAME_BYTES: usize = 96;

/// The most digits one version component may have; nine digits always fit a `u32`.
const MAX_VERSION_DIGITS: usize = 9;

/// How much of an offending property name an error message quotes: arguments come from the
/// planner, and a hostile key must not bloat what operators read and the store keeps.
const MAX_QUOTED_NAME_CHARS: usize = 64;

impl ToolVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> ToolVersion {
        ToolVersion {
            major,
            minor,
            patch,
        }
    }
}

/// Parses one version component: decimal, no sign, no leading zero except `0` itself.
fn version_component(s: &str) -> Option<u32> {
    let well_formed = !s.is_empty()
        && s.len() <= MAX_VERSION_DIGITS
        && s.bytes().all(|b| b.is_ascii_digit())
        && (s == "0" || !s.starts_with('0'));
    if well_formed { s.parse().ok() } else { None }
}

impl FromStr for ToolVersion {
    type Err = ToolSpecError;

    /// Exactly three components: pre-release and build metadata are not part of the grammar, so
    /// `1.0.0-rc1` is rejected rather than silently ordered.
    fn from_str(s: &str) -> Result<ToolVersion, ToolSpecError> {
        let fail = || ToolSpecError::Version(s.to_owned());
        let mut parts = s.split('.');
        let major = parts.next().and_then(version_component).ok_or_else(fail)?;
        let minor = parts.next().and_then(version_component).ok_or_else(fail)?;
        let patch = parts.next().and_then(version_component).ok_or_else(fail)?;
        if parts.next().is_some() {
            return Err(fail());
        }
        Ok(ToolVersion {
            major,
            minor,
            patch,
        })
    }
}

impl fmt::Display for ToolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Serialize for ToolVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ToolVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Whether `s` is a dotted lowercase name: `^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`.
fn is_dotted_name(s: &str) -> bool {
    s.split('.').count() >= 2
        && s.split('.').all(|segment| {
            let mut bytes = segment.bytes();
            bytes.next().is_some_and(|b| b.is_ascii_lowercase())
                && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        })
}

impl ToolSpec {
    /// Checks everything SPEC §12.4 requires before a tool may be registered, in field order:
    /// name, required scopes, timeout, output bound, then the schema (which [`InputSchema`]
    /// re-checks because a spec can be built field by field without [`InputSchema::from_json`]).
    pub fn validate(&self) -> Result<(), ToolSpecError> {
        if self.name.len() > MAX_TOOL_NAME_BYTES || !is_dotted_name(&self.name) {
            return Err(ToolSpecError::Name(self.name.clone()));
        }
        for scope in &self.required_scopes {
            Scope::parse_required(scope.as_str())?;
        }
        if self.timeout_ms == 0 {
            return Err(ToolSpecError::Timeout);
        }
        if !(1..=MAX_OUTPUT_BYTES_LIMIT).contains(&self.max_output_bytes) {
            return Err(ToolSpecError::MaxOutput);
        }
        if matches!(self.input_schema, ArgumentSchema::Upstream(_))
            && self.target != TargetKind::McpServer
        {
            return Err(schema_error(
                "only mcp_server tools may have an upstream schema",
            ));
        }
        self.input_schema.check()
    }

    /// Validates raw planner arguments and fills defaults (SPEC §4.2 item 1).
    pub fn normalize_arguments(&self, raw: &Value) -> Result<JsonMap, ArgumentsError> {
        self.input_schema.normalize(raw)
    }
}

/// The keywords each level of the schema subset admits; anything else fails registration.
const TOP_LEVEL_KEYWORDS: [&str; 4] = ["type", "properties", "required", "additionalProperties"];
const STRING_KEYWORDS: [&str; 5] = ["type", "minLength", "maxLength", "enum", "default"];
const INTEGER_KEYWORDS: [&str; 4] = ["type", "minimum", "maximum", "default"];
const BOOLEAN_KEYWORDS: [&str; 2] = ["type", "default"];
const ARRAY_KEYWORDS: [&str; 4] = ["type", "items", "maxItems", "default"];
const ITEMS_KEYWORDS: [&str; 2] = ["type", "maxLength"];

fn schema_error(message: impl Into<String>) -> ToolSpecError {
    ToolSpecError::Schema(message.into())
}

/// Rejects the first keyword (in key order) that `allowed` does not list.
fn only_keywords(object: &JsonMap, allowed: &[&str], at: &str) -> Result<(), ToolSpecError> {
    match object.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(key) => Err(schema_error(format!("{at}unsupported keyword '{key}'"))),
        None => Ok(()),
    }
}

/// A length or count keyword: a JSON integer ≥ 0.
fn count_keyword(object: &JsonMap, key: &str, at: &str) -> Result<Option<u64>, ToolSpecError> {
    match object.get(key) {
        None => Ok(None),
        Some(value) => value
            .as_u64()
            .map(Some)
            .ok_or_else(|| schema_error(format!("{at}{key} must be a non-negative integer"))),
    }
}

/// A bound keyword of an integer property: a JSON integer that fits `i64`.
fn integer_keyword(object: &JsonMap, key: &str, at: &str) -> Result<Option<i64>, ToolSpecError> {
    match object.get(key) {
        None => Ok(None),
        Some(value) => value
            .as_i64()
            .map(Some)
            .ok_or_else(|| schema_error(format!("{at}{key} must be an integer"))),
    }
}

/// Reads `"type"` and insists on one exact spelling.
fn expect_type(object: &JsonMap, expected: &str, at: &str) -> Result<(), ToolSpecError> {
    match object.get("type") {
        Some(Value::String(t)) if t == expected => Ok(()),
        Some(_) => Err(schema_error(format!("{at}type must be \"{expected}\""))),
        None => Err(schema_error(format!("{at}missing keyword 'type'"))),
    }
}

fn string_list(value: &Value, what: &str) -> Result<Vec<String>, ToolSpecError> {
    let items = value
        .as_array()
        .ok_or_else(|| schema_error(format!("{what} must be an array of strings")))?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let s = item
            .as_str()
            .ok_or_else(|| schema_error(format!("{what} must be an array of strings")))?;
        if !seen.insert(s) {
            return Err(schema_error(format!("{what} lists '{s}' twice")));
        }
        out.push(s.to_owned());
    }
    Ok(out)
}

fn char_count(s: &str) -> u64 {
    s.chars().count() as u64
}

/// Quotes a property name for a message, shortened if a planner sent a very long one.
fn quoted(name: &str) -> String {
    if name.chars().count() <= MAX_QUOTED_NAME_CHARS {
        format!("'{name}'")
    } else {
        let head: String = name.chars().take(MAX_QUOTED_NAME_CHARS).collect();
        format!("'{head}…'")
    }
}

impl PropertySchema {
    fn from_json(name: &str, value: &Value) -> Result<PropertySchema, ToolSpecError> {
        let at = format!("properties.{name}: ");
        let object = value
            .as_object()
            .ok_or_else(|| schema_error(format!("{at}a property schema must be an object")))?;
        let type_name = match object.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(_) => return Err(schema_error(format!("{at}type must be a string"))),
            None => return Err(schema_error(format!("{at}missing keyword 'type'"))),
        };
        let property = match type_name {
            "string" => {
                only_keywords(object, &STRING_KEYWORDS, &at)?;
                let allowed = match object.get("enum") {
                    None => None,
                    Some(list) => {
                        let list = string_list(list, &format!("{at}enum"))?;
                        if list.is_empty() {
                            return Err(schema_error(format!("{at}enum must not be empty")));
                        }
                        Some(list)
                    }
                };
                let default = match object.get("default") {
                    None => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(_) => return Err(schema_error(format!("{at}default must be a string"))),
                };
                PropertySchema::String {
                    min_length: count_keyword(object, "minLength", &at)?,
                    max_length: count_keyword(object, "maxLength", &at)?,
                    allowed,
                    default,
                }
            }
            "integer" => {
                only_keywords(object, &INTEGER_KEYWORDS, &at)?;
                PropertySchema::Integer {
                    minimum: integer_keyword(object, "minimum", &at)?,
                    maximum: integer_keyword(object, "maximum", &at)?,
                    default: integer_keyword(object, "default", &at)?,
                }
            }
            "boolean" => {
                only_keywords(object, &BOOLEAN_KEYWORDS, &at)?;
                let default = match object.get("default") {
                    None => None,
                    Some(Value::Bool(b)) => Some(*b),
                    Some(_) => return Err(schema_error(format!("{at}default must be a boolean"))),
                };
                PropertySchema::Boolean { default }
            }
            "array" => {
                only_keywords(object, &ARRAY_KEYWORDS, &at)?;
                let items_at = format!("properties.{name}.items: ");
                let items = object
                    .get("items")
                    .ok_or_else(|| schema_error(format!("{at}missing keyword 'items'")))?
                    .as_object()
                    .ok_or_else(|| schema_error(format!("{items_at}must be an object")))?;
                expect_type(items, "string", &items_at)?;
                only_keywords(items, &ITEMS_KEYWORDS, &items_at)?;
                let default = match object.get("default") {
                    None => None,
                    Some(list) => Some(string_list_allowing_repeats(list, &at)?),
                };
                PropertySchema::StringArray {
                    max_items: count_keyword(object, "maxItems", &at)?,
                    item_max_length: count_keyword(items, "maxLength", &items_at)?,
                    default,
                }
            }
            other => {
                return Err(schema_error(format!(
                    "{at}unsupported type '{other}' (string, integer, boolean or array)"
                )));
            }
        };
        property.check(name)?;
        Ok(property)
    }

    /// Bounds must be satisfiable and a default must pass the property's own validation:
    /// otherwise normalization would fill in a value that the same schema rejects.
    fn check(&self, name: &str) -> Result<(), ToolSpecError> {
        let at = format!("properties.{name}: ");
        let inverted = match self {
            PropertySchema::String {
                min_length: Some(min),
                max_length: Some(max),
                ..
            } => (min > max).then_some("minLength exceeds maxLength"),
            PropertySchema::Integer {
                minimum: Some(min),
                maximum: Some(max),
                ..
            } => (min > max).then_some("minimum exceeds maximum"),
            _ => None,
        };
        if let Some(problem) = inverted {
            return Err(schema_error(format!("{at}{problem}")));
        }
        if let Some(default) = self.default_value() {
            self.validate(name, &default)
                .map_err(|ArgumentsError(detail)| {
                    schema_error(format!("{at}invalid default: {detail}"))
                })?;
        }
        Ok(())
    }

    /// The default as JSON, if the property has one.
    fn default_value(&self) -> Option<Value> {
        match self {
            PropertySchema::String { default, .. } => default.clone().map(Value::String),
            PropertySchema::Integer { default, .. } => default.map(Value::from),
            PropertySchema::Boolean { default } => default.map(Value::Bool),
            PropertySchema::StringArray { default, .. } => default
                .as_ref()
                .map(|items| Value::Array(items.iter().cloned().map(Value::String).collect())),
        }
    }

    /// Checks one present argument value; the message names the property.
    fn validate(&self, name: &str, value: &Value) -> Result<(), ArgumentsError> {
        let property = quoted(name);
        let fail = |detail: String| Err(ArgumentsError(format!("property {property} {detail}")));
        match self {
            PropertySchema::String {
                min_length,
                max_length,
                allowed,
                ..
            } => {
                let Some(s) = value.as_str() else {
                    return fail("must be a string".to_owned());
                };
                let length = char_count(s);
                if let Some(min) = min_length.filter(|min| length < *min) {
                    return fail(format!("must be at least {min} characters"));
                }
                if let Some(max) = max_length.filter(|max| length > *max) {
                    return fail(format!("must be at most {max} characters"));
                }
                if let Some(allowed) = allowed.as_ref().filter(|list| !list.iter().any(|a| a == s))
                {
                    return fail(format!("must be one of: {}", allowed.join(", ")));
                }
                Ok(())
            }
            PropertySchema::Integer {
                minimum, maximum, ..
            } => {
                // `as_i64` is `None` for every float, including `1.0` and exponent forms, which
                // serde_json parses as floats: the subset admits integers written as integers.
                let Some(n) = value.as_i64() else {
                    let detail = if value.is_u64() {
                        "must fit a signed 64-bit integer"
                    } else {
                        "must be an integer"
                    };
                    return fail(detail.to_owned());
                };
                if let Some(min) = minimum.filter(|min| n < *min) {
                    return fail(format!("must be at least {min}"));
                }
                if let Some(max) = maximum.filter(|max| n > *max) {
                    return fail(format!("must be at most {max}"));
                }
                Ok(())
            }
            PropertySchema::Boolean { .. } => match value {
                Value::Bool(_) => Ok(()),
                _ => fail("must be a boolean".to_owned()),
            },
            PropertySchema::StringArray {
                max_items,
                item_max_length,
                ..
            } => {
                let Some(items) = value.as_array() else {
                    return fail("must be an array of strings".to_owned());
                };
                if let Some(max) = max_items.filter(|max| items.len() as u64 > *max) {
                    return fail(format!("must have at most {max} items"));
                }
                for (index, item) in items.iter().enumerate() {
                    let Some(s) = item.as_str() else {
                        return fail(format!("item {index} must be a string"));
                    };
                    if let Some(max) = item_max_length.filter(|max| char_count(s) > *max) {
                        return fail(format!("item {index} must be at most {max} characters"));
                    }
                }
                Ok(())
            }
        }
    }

    fn to_json(&self) -> Value {
        let mut object = JsonMap::new();
        let mut put = |key: &str, value: Value| {
            object.insert(key.to_owned(), value);
        };
        match self {
            PropertySchema::String {
                min_length,
                max_length,
                allowed,
                default,
            } => {
                put("type", Value::from("string"));
                if let Some(min) = min_length {
                    put("minLength", Value::from(*min));
                }
                if let Some(max) = max_length {
                    put("maxLength", Value::from(*max));
                }
                if let Some(allowed) = allowed {
                    put("enum", Value::from(allowed.clone()));
                }
                if let Some(default) = default {
                    put("default", Value::from(default.clone()));
                }
            }
            PropertySchema::Integer {
                minimum,
                maximum,
                default,
            } => {
                put("type", Value::from("integer"));
                if let Some(min) = minimum {
                    put("minimum", Value::from(*min));
                }
                if let Some(max) = maximum {
                    put("maximum", Value::from(*max));
                }
                if let Some(default) = default {
                    put("default", Value::from(*default));
                }
            }
            PropertySchema::Boolean { default } => {
                put("type", Value::from("boolean"));
                if let Some(default) = default {
                    put("default", Value::from(*default));
                }
            }
            PropertySchema::StringArray {
                max_items,
                item_max_length,
                default,
            } => {
                put("type", Value::from("array"));
                let mut items = JsonMap::new();
                items.insert("type".to_owned(), Value::from("string"));
                if let Some(max) = item_max_length {
                    items.insert("maxLength".to_owned(), Value::from(*max));
                }
                put("items", Value::Object(items));
                if let Some(max) = max_items {
                    put("maxItems", Value::from(*max));
                }
                if let Some(default) = default {
                    put("default", Value::from(default.clone()));
                }
            }
        }
        Value::Object(object)
    }
}

/// An array default may repeat items (the subset has no `uniqueItems`), unlike `enum`.
fn string_list_allowing_repeats(value: &Value, at: &str) -> Result<Vec<String>, ToolSpecError> {
    let fail = || schema_error(format!("{at}default must be an array of strings"));
    value
        .as_array()
        .ok_or_else(fail)?
        .iter()
        .map(|item| item.as_str().map(str::to_owned).ok_or_else(fail))
        .collect()
}

impl InputSchema {
    /// Accepts exactly the subset of SPEC §12.4 and nothing else: an unsupported keyword is an
    /// error rather than ignored, because core validates arguments itself and a keyword it
    /// silently ignored would be a constraint the tool author believes holds but does not.
    pub fn from_json(schema: &Value) -> Result<InputSchema, ToolSpecError> {
        let object = schema
            .as_object()
            .ok_or_else(|| schema_error("the schema must be a JSON object"))?;
        only_keywords(object, &TOP_LEVEL_KEYWORDS, "")?;
        expect_type(object, "object", "")?;
        match object.get("additionalProperties") {
            Some(Value::Bool(false)) => {}
            Some(_) => return Err(schema_error("additionalProperties must be false")),
            None => return Err(schema_error("missing keyword 'additionalProperties'")),
        }
        let properties = object
            .get("properties")
            .ok_or_else(|| schema_error("missing keyword 'properties'"))?
            .as_object()
            .ok_or_else(|| schema_error("properties must be an object"))?
            .iter()
            .map(|(name, property)| Ok((name.clone(), PropertySchema::from_json(name, property)?)))
            .collect::<Result<BTreeMap<_, _>, ToolSpecError>>()?;
        let required = match object.get("required") {
            None => BTreeSet::new(),
            Some(list) => string_list(list, "required")?.into_iter().collect(),
        };
        let schema = InputSchema {
            properties,
            required,
        };
        schema.check()?;
        Ok(schema)
    }

    /// The JSON Schema form; `from_json(&s.to_json())` gives back `s`.
    pub fn to_json(&self) -> Value {
        let properties: JsonMap = self
            .properties
            .iter()
            .map(|(name, property)| (name.clone(), property.to_json()))
            .collect();
        let required: Vec<Value> = self.required.iter().cloned().map(Value::String).collect();
        let mut object = JsonMap::new();
        object.insert("type".to_owned(), Value::from("object"));
        object.insert("properties".to_owned(), Value::Object(properties));
        object.insert("required".to_owned(), Value::Array(required));
        object.insert("additionalProperties".to_owned(), Value::Bool(false));
        Value::Object(object)
    }

    /// The consistency rules that hold however the schema was built: required names exist,
    /// bounds are satisfiable, defaults validate.
    fn check(&self) -> Result<(), ToolSpecError> {
        if let Some(missing) = self
            .required
            .iter()
            .find(|name| !self.properties.contains_key(*name))
        {
            return Err(schema_error(format!(
                "required: '{missing}' is not a property"
            )));
        }
        for (name, property) in &self.properties {
            property.check(name)?;
        }
        Ok(())
    }

    /// Validates raw arguments and returns them with defaults filled in (SPEC §4.2 item 1).
    ///
    /// Checks run in a fixed order (object, unknown names, required names, then each present
    /// value in key order) so the same input always yields the same message.
    pub fn normalize(&self, raw: &Value) -> Result<JsonMap, ArgumentsError> {
        let Some(arguments) = raw.as_object() else {
            return Err(ArgumentsError("arguments must be a JSON object".to_owned()));
        };
        if let Some(unknown) = arguments
            .keys()
            .find(|key| !self.properties.contains_key(*key))
        {
            return Err(ArgumentsError(format!(
                "unknown property {}",
                quoted(unknown)
            )));
        }
        if let Some(missing) = self
            .required
            .iter()
            .find(|name| !arguments.contains_key(*name))
        {
            return Err(ArgumentsError(format!(
                "missing required property {}",
                quoted(missing)
            )));
        }
        let mut normalized = JsonMap::new();
        for (name, property) in &self.properties {
            match arguments.get(name) {
                Some(value) => {
                    property.validate(name, value)?;
                    normalized.insert(name.clone(), value.clone());
                }
                None => {
                    if let Some(default) = property.default_value() {
                        normalized.insert(name.clone(), default);
                    }
                }
            }
        }
        Ok(normalized)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema(value: Value) -> Result<InputSchema, ToolSpecError> {
        InputSchema::from_json(&value)
    }

    fn schema_message(value: Value) -> String {
        match schema(value) {
            Err(ToolSpecError::Schema(message)) => message,
            other => panic!("expected a schema error, got {other:?}"),
        }
    }

    fn object_schema(properties: Value) -> Value {
        json!({"type": "object", "properties": properties, "additionalProperties": false})
    }

    fn sample_spec() -> ToolSpec {
        ToolSpec {
            name: "sample.tool".to_owned(),
            version: ToolVersion::new(1, 0, 0),
            description: "A sample.".to_owned(),
            input_schema: InputSchema {
                properties: BTreeMap::new(),
                required: BTreeSet::new(),
            }
            .into(),
            side_effect: SideEffectClass::None,
            risk: RiskLevel::Low,
            idempotency: IdempotencyClass::ReadOnly,
            required_scopes: ScopeSet::new(),
            timeout_ms: 1000,
            max_output_bytes: 4096,
            allow_parallel: true,
            target: TargetKind::InProcess,
            output_trust: TrustLevel::InternalTool,
        }
    }

    #[test]
    fn versions_parse_strictly_and_compare_numerically() {
        let v: ToolVersion = "1.10.0".parse().unwrap();
        assert_eq!(v, ToolVersion::new(1, 10, 0));
        assert_eq!(v.to_string(), "1.10.0");
        assert!(v > "1.9.99".parse().unwrap());
        assert_eq!("0.0.0".parse(), Ok(ToolVersion::new(0, 0, 0)));
        assert_eq!(
            "999999999.0.1".parse(),
            Ok(ToolVersion::new(999_999_999, 0, 1))
        );
        for bad in [
            "",
            "1",
            "1.0",
            "1.0.0.0",
            "01.0.0",
            "1.00.0",
            "1.0.-1",
            "+1.0.0",
            "1.0.0-rc1",
            "1.0.0+build",
            "1000000000.0.0",
            "1..0",
            " 1.0.0",
            "1.0.0 ",
            "a.b.c",
            "1.0.٣",
        ] {
            assert_eq!(
                bad.parse::<ToolVersion>(),
                Err(ToolSpecError::Version(bad.to_owned())),
                "{bad:?}"
            );
        }
        assert_eq!(serde_json::to_value(v).unwrap(), json!("1.10.0"));
        assert_eq!(
            serde_json::from_value::<ToolVersion>(json!("2.0.1")).unwrap(),
            ToolVersion::new(2, 0, 1)
        );
    }

    #[test]
    fn the_full_subset_parses_and_round_trips() {
        let value = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "maxLength": 4096, "default": "x"},
                "mode": {"type": "string", "enum": ["a", "b"], "default": "b"},
                "count": {"type": "integer", "minimum": -5, "maximum": 5, "default": 0},
                "recursive": {"type": "boolean", "default": false},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3,
                         "default": ["t", "t"]},
                "bare": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["mode", "path"],
            "additionalProperties": false
        });
        let parsed = schema(value.clone()).unwrap();
        assert_eq!(parsed.to_json(), value);
        assert_eq!(InputSchema::from_json(&parsed.to_json()).unwrap(), parsed);
        assert_eq!(
            parsed.properties["count"],
            PropertySchema::Integer {
                minimum: Some(-5),
                maximum: Some(5),
                default: Some(0)
            }
        );
        let empty = schema(object_schema(json!({}))).unwrap();
        assert!(empty.properties.is_empty() && empty.required.is_empty());
        assert_eq!(empty.to_json()["required"], json!([]));
    }

    #[test]
    fn keywords_outside_the_subset_fail_and_are_named() {
        let cases = [
            (
                json!({"type": "object", "properties": {}, "additionalProperties": false, "$schema": "x"}),
                "unsupported keyword '$schema'",
            ),
            (
                json!({"type": "object", "properties": {"p": {"type": "string", "pattern": "a"}},
                    "additionalProperties": false}),
                "properties.p: unsupported keyword 'pattern'",
            ),
            (
                object_schema(json!({"p": {"type": "integer", "multipleOf": 2}})),
                "properties.p: unsupported keyword 'multipleOf'",
            ),
            (
                object_schema(json!({"p": {"type": "boolean", "enum": [true]}})),
                "properties.p: unsupported keyword 'enum'",
            ),
            (
                object_schema(
                    json!({"p": {"type": "array", "items": {"type": "string"}, "minItems": 1}}),
                ),
                "properties.p: unsupported keyword 'minItems'",
            ),
            (
                object_schema(
                    json!({"p": {"type": "array", "items": {"type": "string", "minLength": 1}}}),
                ),
                "properties.p.items: unsupported keyword 'minLength'",
            ),
            (
                object_schema(json!({"p": {"type": "string", "description": "d"}})),
                "properties.p: unsupported keyword 'description'",
            ),
        ];
        for (value, expected) in cases {
            assert_eq!(schema_message(value), expected);
        }
    }

    #[test]
    fn the_top_level_shape_is_fixed() {
        let cases = [
            (json!([]), "the schema must be a JSON object"),
            (
                json!({"properties": {}, "additionalProperties": false}),
                "missing keyword 'type'",
            ),
            (
                json!({"type": "array", "properties": {}, "additionalProperties": false}),
                "type must be \"object\"",
            ),
            (
                json!({"type": "object", "properties": {}}),
                "missing keyword 'additionalProperties'",
            ),
            (
                json!({"type": "object", "properties": {}, "additionalProperties": true}),
                "additionalProperties must be false",
            ),
            (
                json!({"type": "object", "additionalProperties": false}),
                "missing keyword 'properties'",
            ),
            (
                json!({"type": "object", "properties": [], "additionalProperties": false}),
                "properties must be an object",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"],
                    "additionalProperties": false}),
                "required: 'b' is not a property",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "a"],
                    "additionalProperties": false}),
                "required lists 'a' twice",
            ),
            (
                json!({"type": "object", "properties": {}, "required": "a", "additionalProperties": false}),
                "required must be an array of strings",
            ),
        ];
        for (value, expected) in cases {
            assert_eq!(schema_message(value), expected);
        }
    }

    #[test]
    fn property_types_and_keyword_values_are_checked() {
        let cases = [
            (
                json!({"p": "string"}),
                "properties.p: a property schema must be an object",
            ),
            (json!({"p": {}}), "properties.p: missing keyword 'type'"),
            (
                json!({"p": {"type": ["string", "null"]}}),
                "properties.p: type must be a string",
            ),
            (
                json!({"p": {"type": "number"}}),
                "properties.p: unsupported type 'number' (string, integer, boolean or array)",
            ),
            (
                json!({"p": {"type": "object"}}),
                "properties.p: unsupported type 'object' (string, integer, boolean or array)",
            ),
            (
                json!({"p": {"type": "string", "maxLength": -1}}),
                "properties.p: maxLength must be a non-negative integer",
            ),
            (
                json!({"p": {"type": "string", "maxLength": 4.0}}),
                "properties.p: maxLength must be a non-negative integer",
            ),
            (
                json!({"p": {"type": "string", "minLength": 3, "maxLength": 2}}),
                "properties.p: minLength exceeds maxLength",
            ),
            (
                json!({"p": {"type": "string", "enum": []}}),
                "properties.p: enum must not be empty",
            ),
            (
                json!({"p": {"type": "string", "enum": ["a", 1]}}),
                "properties.p: enum must be an array of strings",
            ),
            (
                json!({"p": {"type": "string", "enum": ["a", "a"]}}),
                "properties.p: enum lists 'a' twice",
            ),
            (
                json!({"p": {"type": "integer", "minimum": 1.5}}),
                "properties.p: minimum must be an integer",
            ),
            (
                json!({"p": {"type": "integer", "minimum": 2, "maximum": 1}}),
                "properties.p: minimum exceeds maximum",
            ),
            (
                json!({"p": {"type": "array"}}),
                "properties.p: missing keyword 'items'",
            ),
            (
                json!({"p": {"type": "array", "items": {"type": "integer"}}}),
                "properties.p.items: type must be \"string\"",
            ),
            (
                json!({"p": {"type": "array", "items": true}}),
                "properties.p.items: must be an object",
            ),
        ];
        for (properties, expected) in cases {
            assert_eq!(schema_message(object_schema(properties)), expected);
        }
    }

    #[test]
    fn defaults_must_validate_against_their_own_property() {
        let cases = [
            (
                json!({"p": {"type": "string", "maxLength": 2, "default": "abc"}}),
                "properties.p: invalid default: property 'p' must be at most 2 characters",
            ),
            (
                json!({"p": {"type": "string", "enum": ["a"], "default": "b"}}),
                "properties.p: invalid default: property 'p' must be one of: a",
            ),
            (
                json!({"p": {"type": "string", "default": 1}}),
                "properties.p: default must be a string",
            ),
            (
                json!({"p": {"type": "integer", "maximum": 3, "default": 4}}),
                "properties.p: invalid default: property 'p' must be at most 3",
            ),
            (
                json!({"p": {"type": "integer", "default": 1.0}}),
                "properties.p: default must be an integer",
            ),
            (
                json!({"p": {"type": "boolean", "default": "true"}}),
                "properties.p: default must be a boolean",
            ),
            (
                json!({"p": {"type": "array", "items": {"type": "string"}, "maxItems": 1, "default": ["a", "b"]}}),
                "properties.p: invalid default: property 'p' must have at most 1 items",
            ),
            (
                json!({"p": {"type": "array", "items": {"type": "string", "maxLength": 1}, "default": ["ab"]}}),
                "properties.p: invalid default: property 'p' item 0 must be at most 1 characters",
            ),
            (
                json!({"p": {"type": "array", "items": {"type": "string"}, "default": [1]}}),
                "properties.p: default must be an array of strings",
            ),
        ];
        for (properties, expected) in cases {
            assert_eq!(schema_message(object_schema(properties)), expected);
        }
    }

    fn normalizer() -> InputSchema {
        schema(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "maxLength": 3},
                "mode": {"type": "string", "enum": ["fast", "slow"], "default": "slow"},
                "count": {"type": "integer", "minimum": -2, "maximum": 2, "default": 1},
                "recursive": {"type": "boolean", "default": false},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 2}, "maxItems": 2},
                "note": {"type": "string"}
            },
            "required": ["path"],
            "additionalProperties": false
        }))
        .unwrap()
    }

    fn normalize_error(raw: Value) -> String {
        normalizer().normalize(&raw).unwrap_err().0
    }

    #[test]
    fn normalization_fills_defaults_and_keeps_given_values() {
        let out = normalizer()
            .normalize(&json!({"path": "abc", "count": -2, "tags": ["x"]}))
            .unwrap();
        assert_eq!(
            Value::Object(out),
            json!({"path": "abc", "mode": "slow", "count": -2, "recursive": false, "tags": ["x"]})
        );
        // Lengths count Unicode scalar values, not bytes: three four-byte characters fit.
        assert!(normalizer().normalize(&json!({"path": "😀😀😀"})).is_ok());
        // Integers may be written with an unsigned representation if they fit.
        assert!(
            normalizer()
                .normalize(&json!({"path": "a", "count": 2u64}))
                .is_ok()
        );
    }

    #[test]
    fn normalization_rejects_with_a_message_naming_the_property() {
        let cases = [
            (json!(["path"]), "arguments must be a JSON object"),
            (json!(null), "arguments must be a JSON object"),
            (json!({"path": "a", "extra": 1}), "unknown property 'extra'"),
            (json!({}), "missing required property 'path'"),
            (
                json!({"path": ""}),
                "property 'path' must be at least 1 characters",
            ),
            (
                json!({"path": "abcd"}),
                "property 'path' must be at most 3 characters",
            ),
            (
                json!({"path": "😀😀😀😀"}),
                "property 'path' must be at most 3 characters",
            ),
            (json!({"path": 1}), "property 'path' must be a string"),
            (json!({"path": null}), "property 'path' must be a string"),
            (
                json!({"path": "a", "mode": "medium"}),
                "property 'mode' must be one of: fast, slow",
            ),
            (
                json!({"path": "a", "count": 1.0}),
                "property 'count' must be an integer",
            ),
            (
                json!({"path": "a", "count": "1"}),
                "property 'count' must be an integer",
            ),
            (
                json!({"path": "a", "count": 3}),
                "property 'count' must be at most 2",
            ),
            (
                json!({"path": "a", "count": -3}),
                "property 'count' must be at least -2",
            ),
            (
                json!({"path": "a", "count": u64::MAX}),
                "property 'count' must fit a signed 64-bit integer",
            ),
            (
                json!({"path": "a", "recursive": 0}),
                "property 'recursive' must be a boolean",
            ),
            (
                json!({"path": "a", "tags": "x"}),
                "property 'tags' must be an array of strings",
            ),
            (
                json!({"path": "a", "tags": ["a", "b", "c"]}),
                "property 'tags' must have at most 2 items",
            ),
            (
                json!({"path": "a", "tags": ["a", 1]}),
                "property 'tags' item 1 must be a string",
            ),
            (
                json!({"path": "a", "tags": ["abc"]}),
                "property 'tags' item 0 must be at most 2 characters",
            ),
        ];
        for (raw, expected) in cases {
            assert_eq!(normalize_error(raw), expected);
        }
    }

    #[test]
    fn exponent_forms_are_not_integers() {
        for text in ["1e0", "1E2", "1.0", "-0.0", "2.5"] {
            let raw: Value =
                serde_json::from_str(&format!("{{\"path\":\"a\",\"count\":{text}}}")).unwrap();
            assert_eq!(
                normalizer().normalize(&raw).unwrap_err().0,
                "property 'count' must be an integer",
                "{text}"
            );
        }
    }

    #[test]
    fn hostile_property_names_are_quoted_shortened() {
        let long = "k".repeat(1000);
        let message = normalize_error(json!({"path": "a", long: 1}));
        assert_eq!(message, format!("unknown property '{}…'", "k".repeat(64)));
    }

    #[test]
    fn specs_validate_name_scopes_timeout_and_output() {
        assert_eq!(sample_spec().validate(), Ok(()));
        for bad in [
            "sample",
            "Sample.tool",
            "sample.",
            ".tool",
            "sample..tool",
            "1a.b",
            "a.b-c",
            "a.b c",
            "",
        ] {
            let spec = ToolSpec {
                name: bad.to_owned(),
                ..sample_spec()
            };
            assert_eq!(
                spec.validate(),
                Err(ToolSpecError::Name(bad.to_owned())),
                "{bad:?}"
            );
        }
        let longest = format!("a.{}", "b".repeat(94));
        assert_eq!(
            ToolSpec {
                name: longest.clone(),
                ..sample_spec()
            }
            .validate(),
            Ok(())
        );
        let too_long = format!("{longest}b");
        assert_eq!(
            ToolSpec {
                name: too_long.clone(),
                ..sample_spec()
            }
            .validate(),
            Err(ToolSpecError::Name(too_long))
        );

        let scopes = |s: &str| [Scope::parse(s).unwrap()].into_iter().collect::<ScopeSet>();
        let spec = ToolSpec {
            required_scopes: scopes("workspace.admin"),
            ..sample_spec()
        };
        assert_eq!(
            spec.validate().unwrap_err().to_string(),
            "unknown platform scope 'workspace.admin'"
        );
        let spec = ToolSpec {
            required_scopes: scopes("mcp.files.read"),
            ..sample_spec()
        };
        assert_eq!(spec.validate(), Ok(()));

        assert_eq!(
            ToolSpec {
                timeout_ms: 0,
                ..sample_spec()
            }
            .validate(),
            Err(ToolSpecError::Timeout)
        );
        assert_eq!(
            ToolSpec {
                max_output_bytes: 0,
                ..sample_spec()
            }
            .validate(),
            Err(ToolSpecError::MaxOutput)
        );
        assert_eq!(
            ToolSpec {
                max_output_bytes: MAX_OUTPUT_BYTES_LIMIT + 1,
                ..sample_spec()
            }
            .validate(),
            Err(ToolSpecError::MaxOutput)
        );
        assert_eq!(
            ToolSpec {
                max_output_bytes: MAX_OUTPUT_BYTES_LIMIT,
                ..sample_spec()
            }
            .validate(),
            Ok(())
        );
    }

    #[test]
    fn a_hand_built_schema_is_rechecked_at_validation() {
        let mut input_schema = InputSchema {
            properties: BTreeMap::new(),
            required: BTreeSet::new(),
        };
        input_schema.required.insert("ghost".to_owned());
        let spec = ToolSpec {
            input_schema: input_schema.clone().into(),
            ..sample_spec()
        };
        assert_eq!(
            spec.validate(),
            Err(ToolSpecError::Schema(
                "required: 'ghost' is not a property".to_owned()
            ))
        );

        input_schema.required.clear();
        input_schema.properties.insert(
            "n".to_owned(),
            PropertySchema::Integer {
                minimum: Some(0),
                maximum: None,
                default: Some(-1),
            },
        );
        let spec = ToolSpec {
            input_schema: input_schema.into(),
            ..sample_spec()
        };
        assert_eq!(
            spec.validate().unwrap_err().to_string(),
            "invalid input schema: properties.n: invalid default: property 'n' must be at least 0"
        );
    }

    #[test]
    fn specs_delegate_normalization_to_their_schema() {
        let spec = ToolSpec {
            input_schema: normalizer().into(),
            ..sample_spec()
        };
        assert_eq!(
            spec.normalize_arguments(&json!({"path": "a"})),
            normalizer().normalize(&json!({"path": "a"}))
        );
        assert_eq!(
            spec.normalize_arguments(&json!(1)).unwrap_err().to_string(),
            "arguments must be a JSON object"
        );
    }
}
