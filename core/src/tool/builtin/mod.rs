//! The six shipped builtins of SPEC §12.5: their specs are core data, and so are the two bodies
//! that need no I/O (`math.calculate`, `system.current_time`). The workspace and outbox bodies
//! live in `airlock`, which pairs them with these specs.
//!
//! Descriptions are what a planner reads to choose a tool, so they state limits and effects in
//! plain words; `workspace.write_text` says the workspace is scratch space, as §12.5 requires.

pub mod math;
pub mod time;

use std::collections::{BTreeMap, BTreeSet};

use crate::scope::{ScopeSet, platform_scopes};
use crate::vocab::{IdempotencyClass, RiskLevel, SideEffectClass, TargetKind, TrustLevel};

use super::spec::{InputSchema, PropertySchema, ToolSpec, ToolVersion};

pub use math::MathCalculate;
pub use time::CurrentTime;

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

/// Runs a body to completion without a runtime: core's bodies are immediately ready.
#[cfg(test)]
pub(crate) mod testing {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use serde_json::Value;
    use uuid::Uuid;

    use crate::ids::{InvocationId, RunId, SessionId};
    use crate::ports::{BoxFut, Clock, Tool, ToolContext, ToolFailure, ToolSuccess};
    use crate::time::Timestamp;

    pub(crate) struct FixedClock(pub Timestamp);

    impl Clock for FixedClock {
        fn now(&self) -> Timestamp {
            self.0
        }

        fn sleep_until(&self, _t: Timestamp) -> BoxFut<'static, ()> {
            Box::pin(std::future::ready(()))
        }
    }

    pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
        let mut future = pin!(future);
        let mut cx = Context::from_waker(Waker::noop());
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => output,
            Poll::Pending => panic!("a core tool body must be immediately ready"),
        }
    }

    /// Invokes `tool` with `args` (normalized by its own schema first, as the pipeline does).
    pub(crate) fn invoke(
        tool: &dyn Tool,
        args: Value,
        now: Timestamp,
    ) -> Result<ToolSuccess, ToolFailure> {
        let args = tool
            .spec()
            .normalize_arguments(&args)
            .expect("test arguments must validate");
        let clock = FixedClock(now);
        let ctx = ToolContext {
            tenant_id: "acme",
            run_id: RunId(Uuid::nil()),
            session_id: SessionId(Uuid::nil()),
            invocation_id: InvocationId(Uuid::nil()),
            call_id: "c1",
            step_number: 1,
            idempotency_key: "0000",
            replay: false,
            workspace: None,
            clock: &clock,
        };
        block_on(tool.invoke(&ctx, &args))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::scope::Scope;
    use crate::tool::registry::ToolRegistry;

    fn scopes(names: &[&str]) -> ScopeSet {
        names
            .iter()
            .map(|name| Scope::parse(name).unwrap())
            .collect()
    }

    #[test]
    fn every_builtin_spec_validates_and_its_schema_round_trips() {
        for spec in builtin_specs() {
            assert_eq!(spec.validate(), Ok(()), "{}", spec.name);
            assert_eq!(
                InputSchema::from_json(&spec.input_schema.to_json())
                    .map(crate::tool::spec::ArgumentSchema::from)
                    .as_ref(),
                Ok(&spec.input_schema),
                "{}",
                spec.name
            );
            assert_eq!(spec.version.to_string(), "1.0.0");
            assert_eq!(spec.target, TargetKind::InProcess);
            assert_eq!(spec.output_trust, TrustLevel::InternalTool);
            assert!(!spec.description.is_empty());
        }
    }

    #[test]
    fn the_table_of_section_12_5() {
        use IdempotencyClass::*;
        use RiskLevel::*;
        use SideEffectClass as S;
        let expected = [
            (
                "workspace.read_text",
                S::WorkspaceRead,
                Low,
                ReadOnly,
                true,
                &["workspace.read"][..],
                10_000,
                8_388_608,
            ),
            (
                "workspace.list_files",
                S::WorkspaceRead,
                Low,
                ReadOnly,
                true,
                &["workspace.read"][..],
                10_000,
                8_388_608,
            ),
            (
                "workspace.write_text",
                S::WorkspaceWrite,
                Medium,
                Idempotent,
                false,
                &["workspace.write"][..],
                10_000,
                16_384,
            ),
            (
                "system.current_time",
                S::None,
                Low,
                ReadOnly,
                true,
                &[][..],
                2_000,
                4_096,
            ),
            (
                "math.calculate",
                S::None,
                Low,
                ReadOnly,
                true,
                &[][..],
                2_000,
                4_096,
            ),
            (
                "demo.external_write",
                S::ExternalWrite,
                High,
                NonIdempotent,
                false,
                &["demo.write"][..],
                10_000,
                4_096,
            ),
        ];
        let specs = builtin_specs();
        assert_eq!(specs.len(), expected.len());
        for (
            spec,
            (name, side_effect, risk, idempotency, parallel, scope, timeout_ms, max_output),
        ) in specs.iter().zip(expected)
        {
            assert_eq!(spec.name, name);
            assert_eq!(spec.side_effect, side_effect, "{name}");
            assert_eq!(spec.risk, risk, "{name}");
            assert_eq!(spec.idempotency, idempotency, "{name}");
            assert_eq!(spec.allow_parallel, parallel, "{name}");
            assert_eq!(spec.required_scopes, scopes(scope), "{name}");
            assert_eq!(spec.timeout_ms, timeout_ms, "{name}");
            assert_eq!(spec.max_output_bytes, max_output, "{name}");
        }
    }

    #[test]
    fn input_schemas_follow_the_bullets() {
        let schema_of = |spec: ToolSpec| spec.input_schema.to_json();
        assert_eq!(
            schema_of(workspace_read_text_spec()),
            json!({"type": "object", "additionalProperties": false, "required": ["path"],
                   "properties": {"path": {"type": "string", "maxLength": 4096}}})
        );
        assert_eq!(
            schema_of(workspace_list_files_spec()),
            json!({"type": "object", "additionalProperties": false, "required": [],
                   "properties": {"path": {"type": "string", "maxLength": 4096, "default": ""},
                                  "recursive": {"type": "boolean", "default": false}}})
        );
        assert_eq!(
            schema_of(workspace_write_text_spec()),
            json!({"type": "object", "additionalProperties": false, "required": ["content", "path"],
                   "properties": {"path": {"type": "string", "maxLength": 4096},
                                  "content": {"type": "string", "maxLength": 1_048_576}}})
        );
        assert_eq!(
            schema_of(system_current_time_spec()),
            json!({"type": "object", "additionalProperties": false, "required": [],
                   "properties": {"timezone": {"type": "string", "maxLength": 16, "default": "UTC"}}})
        );
        assert_eq!(
            schema_of(math_calculate_spec()),
            json!({"type": "object", "additionalProperties": false, "required": ["expression"],
                   "properties": {"expression": {"type": "string", "minLength": 1, "maxLength": 256}}})
        );
        assert_eq!(
            schema_of(demo_external_write_spec()),
            json!({"type": "object", "additionalProperties": false, "required": ["content", "destination"],
                   "properties": {"destination": {"type": "string", "minLength": 1, "maxLength": 256},
                                  "content": {"type": "string", "maxLength": 4096}}})
        );
    }

    #[test]
    fn defaults_are_filled_for_the_optional_arguments() {
        let listed = workspace_list_files_spec()
            .normalize_arguments(&json!({}))
            .unwrap();
        assert_eq!(
            serde_json::Value::Object(listed),
            json!({"path": "", "recursive": false})
        );
        let time = system_current_time_spec()
            .normalize_arguments(&json!({}))
            .unwrap();
        assert_eq!(serde_json::Value::Object(time), json!({"timezone": "UTC"}));
        assert!(
            math_calculate_spec()
                .normalize_arguments(&json!({"expression": ""}))
                .is_err()
        );
    }

    #[test]
    fn the_write_description_calls_the_workspace_scratch_space() {
        assert!(
            workspace_write_text_spec()
                .description
                .contains("scratch space")
        );
    }

    #[test]
    fn the_core_bodies_register_under_their_specs() {
        let mut registry = ToolRegistry::new();
        registry
            .register(std::sync::Arc::new(MathCalculate::new()))
            .unwrap();
        registry
            .register(std::sync::Arc::new(CurrentTime::new()))
            .unwrap();
        assert_eq!(
            registry.resolve("math.calculate", None).unwrap().spec(),
            &math_calculate_spec()
        );
        assert_eq!(
            registry
                .resolve("system.current_time", Some("1.0.0"))
                .unwrap()
                .spec(),
            &system_current_time_spec()
        );
    }
}
