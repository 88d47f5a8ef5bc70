//! The six shipped builtins of SPEC §12.5: their specs are core data, and so are the two bodies
//! that need no I/O (`math.calculate`, `system.current_time`). The workspace and outbox bodies
//! live in `airlock`, which pairs them with these specs.
//!
//! Descriptions are what a planner reads to choose a tool, so they state limits and effects in
//! plain words; `workspace.write_text` says the workspace is scratch space, as §12.5 requires.

pub mod math;
pub mod specs;
pub mod time;

pub use math::MathCalculate;
pub use specs::*;
pub use time::CurrentTime;

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
    use crate::scope::{Scope, ScopeSet};
    use crate::tool::registry::ToolRegistry;
    use crate::tool::spec::{InputSchema, ToolSpec};
    use crate::vocab::{IdempotencyClass, RiskLevel, SideEffectClass, TargetKind, TrustLevel};

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
