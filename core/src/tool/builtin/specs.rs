//! The builtins' specs (SPEC §12.5): core data, below the two bodies core has, which take
//! their specs from here.

use std::collections::{BTreeMap, BTreeSet};

use crate::scope::{ScopeSet, platform_scopes};
use crate::vocab::{IdempotencyClass, RiskLevel, SideEffectClass, TargetKind, TrustLevel};

use super::super::spec::{InputSchema, PropertySchema, ToolSpec, ToolVersion};

/// Every builtin is `1.0.0` in v1.
pub const BUILTIN_VERSION: ToolVersion = ToolVersion::new(1, 0, 0);

const WORKSPACE_TIMEOUT_MS: u64 = 10_000;
const QUICK_TIMEOUT_MS: u64 = 2_000;
const EIGHT_MIB: u64 = 8 * 1024 * 1024;
const SIXTEEN_KIB: u64 = 16 * 1024;
const FOUR_KIB: u64 = 4 * 1024;

/// The longest workspace path (SPEC §12.2).
const MAX_PATH_CHARS: u64 = 4096;
/// The most `workspace.write_text` writes, matching what `workspace.read_text` reads back.
const MAX_WRITE_CHARS: u64 = 1_048_576;

/// A set holding one platform scope. Taken from the vocabulary rather than parsed so that it
/// cannot fail; the tests check that each requested name was found.
fn platform_scope(name: &str) -> ScopeSet {
    platform_scopes()
        .into_iter()
        .filter(|scope| scope.as_str() == name)
        .collect()
}

fn string(min_length: Option<u64>, max_length: u64, default: Option<&str>) -> PropertySchema {
    PropertySchema::String {
        min_length,
        max_length: Some(max_length),
        allowed: None,
        default: default.map(str::to_owned),
    }
}

fn schema(properties: Vec<(&str, PropertySchema)>, required: &[&str]) -> InputSchema {
    InputSchema {
        properties: properties
            .into_iter()
            .map(|(name, property)| (name.to_owned(), property))
            .collect::<BTreeMap<_, _>>(),
        required: required
            .iter()
            .map(|name| (*name).to_owned())
            .collect::<BTreeSet<_>>(),
    }
}

/// The fields every builtin shares; each spec function fills in the rest.
struct Row {
    name: &'static str,
    description: &'static str,
    input_schema: InputSchema,
    side_effect: SideEffectClass,
    risk: RiskLevel,
    idempotency: IdempotencyClass,
    allow_parallel: bool,
    required_scopes: ScopeSet,
    timeout_ms: u64,
    max_output_bytes: u64,
}

impl Row {
    fn into_spec(self) -> ToolSpec {
        ToolSpec {
            name: self.name.to_owned(),
            version: BUILTIN_VERSION,
            description: self.description.to_owned(),
            input_schema: self.input_schema.into(),
            side_effect: self.side_effect,
            risk: self.risk,
            idempotency: self.idempotency,
            required_scopes: self.required_scopes,
            timeout_ms: self.timeout_ms,
            max_output_bytes: self.max_output_bytes,
            allow_parallel: self.allow_parallel,
            target: TargetKind::InProcess,
            output_trust: TrustLevel::InternalTool,
        }
    }
}

pub fn workspace_read_text_spec() -> ToolSpec {
    Row {
        name: "workspace.read_text",
        description: "Read a UTF-8 text file of at most 1 MiB from this run's workspace. \
                      The path is relative to the workspace root.",
        input_schema: schema(
            vec![("path", string(None, MAX_PATH_CHARS, None))],
            &["path"],
        ),
        side_effect: SideEffectClass::WorkspaceRead,
        risk: RiskLevel::Low,
        idempotency: IdempotencyClass::ReadOnly,
        allow_parallel: true,
        required_scopes: platform_scope("workspace.read"),
        timeout_ms: WORKSPACE_TIMEOUT_MS,
        max_output_bytes: EIGHT_MIB,
    }
    .into_spec()
}

pub fn workspace_list_files_spec() -> ToolSpec {
    Row {
        name: "workspace.list_files",
        description: "List the files and directories under a directory of this run's workspace, \
                      sorted by path, at most 1000 entries. The path is relative to the workspace \
                      root; the empty path is the root itself.",
        input_schema: schema(
            vec![
                ("path", string(None, MAX_PATH_CHARS, Some(""))),
                (
                    "recursive",
                    PropertySchema::Boolean {
                        default: Some(false),
                    },
                ),
            ],
            &[],
        ),
        side_effect: SideEffectClass::WorkspaceRead,
        risk: RiskLevel::Low,
        idempotency: IdempotencyClass::ReadOnly,
        allow_parallel: true,
        required_scopes: platform_scope("workspace.read"),
        timeout_ms: WORKSPACE_TIMEOUT_MS,
        max_output_bytes: EIGHT_MIB,
    }
    .into_spec()
}

pub fn workspace_write_text_spec() -> ToolSpec {
    Row {
        name: "workspace.write_text",
        description: "Write UTF-8 text to a file in this run's workspace, creating missing parent \
                      directories and replacing any previous content. The workspace is scratch \
                      space private to this run: writing here publishes, sends or changes nothing \
                      outside it.",
        input_schema: schema(
            vec![
                ("path", string(None, MAX_PATH_CHARS, None)),
                ("content", string(None, MAX_WRITE_CHARS, None)),
            ],
            &["path", "content"],
        ),
        side_effect: SideEffectClass::WorkspaceWrite,
        risk: RiskLevel::Medium,
        idempotency: IdempotencyClass::Idempotent,
        allow_parallel: false,
        required_scopes: platform_scope("workspace.write"),
        timeout_ms: WORKSPACE_TIMEOUT_MS,
        max_output_bytes: SIXTEEN_KIB,
    }
    .into_spec()
}

pub fn system_current_time_spec() -> ToolSpec {
    Row {
        name: "system.current_time",
        description: "Tell the current date and time, in UTC or at a fixed offset from UTC such \
                      as +02:00, with the weekday and Unix seconds.",
        input_schema: schema(vec![("timezone", string(None, 16, Some("UTC")))], &[]),
        side_effect: SideEffectClass::None,
        risk: RiskLevel::Low,
        idempotency: IdempotencyClass::ReadOnly,
        allow_parallel: true,
        required_scopes: ScopeSet::new(),
        timeout_ms: QUICK_TIMEOUT_MS,
        max_output_bytes: FOUR_KIB,
    }
    .into_spec()
}

pub fn math_calculate_spec() -> ToolSpec {
    Row {
        name: "math.calculate",
        description: "Evaluate integer arithmetic exactly: + - * / %, unary minus and \
                      parentheses, on integers of up to 18 digits. Division and remainder \
                      truncate toward zero; the result is a decimal string.",
        input_schema: schema(
            vec![("expression", string(Some(1), 256, None))],
            &["expression"],
        ),
        side_effect: SideEffectClass::None,
        risk: RiskLevel::Low,
        idempotency: IdempotencyClass::ReadOnly,
        allow_parallel: true,
        required_scopes: ScopeSet::new(),
        timeout_ms: QUICK_TIMEOUT_MS,
        max_output_bytes: FOUR_KIB,
    }
    .into_spec()
}

pub fn demo_external_write_spec() -> ToolSpec {
    Row {
        name: "demo.external_write",
        description: "Send content to an external destination (the demo outbox). This is an \
                      effect outside the workspace that cannot be undone, and repeating it \
                      records the content again.",
        input_schema: schema(
            vec![
                ("destination", string(Some(1), 256, None)),
                ("content", string(None, 4096, None)),
            ],
            &["destination", "content"],
        ),
        side_effect: SideEffectClass::ExternalWrite,
        risk: RiskLevel::High,
        idempotency: IdempotencyClass::NonIdempotent,
        allow_parallel: false,
        required_scopes: platform_scope("demo.write"),
        timeout_ms: WORKSPACE_TIMEOUT_MS,
        max_output_bytes: FOUR_KIB,
    }
    .into_spec()
}

/// All six builtin specs, in the order of the §12.5 table.
pub fn builtin_specs() -> Vec<ToolSpec> {
    vec![
        workspace_read_text_spec(),
        workspace_list_files_spec(),
        workspace_write_text_spec(),
        system_current_time_spec(),
        math_calculate_spec(),
        demo_external_write_spec(),
    ]
}
