//! The simulated world's catalog: the specs of the simulated external services (one per
//! side-effect/idempotency shape the recovery table distinguishes) and the two policy versions a
//! rolling deploy can mix. Bodies live in `world` (they need the simulated clock).

use airlock_core::policy::Ruleset;
use airlock_core::policy::shipped::{DEFAULT_PROFILE, HARDLINE};
use airlock_core::scope::{Scope, ScopeSet};
use airlock_core::tool::spec::{InputSchema, ToolSpec, ToolVersion};
use airlock_core::vocab::{IdempotencyClass, RiskLevel, SideEffectClass, TargetKind, TrustLevel};
use serde_json::json;

/// What a simulated tool's body does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// Answers from a simulated service; `claim` is the trust the service claims.
    Service { claim: Option<TrustLevel> },
    /// Reads the run's workspace; trust from the handle's provenance (SPEC §12.3).
    WorkspaceRead,
    /// Writes the run's workspace.
    WorkspaceWrite,
}

/// The tool timeout every simulated service has.
pub const TOOL_TIMEOUT_MS: u64 = 2_000;

/// `(spec, body)` for every simulated tool.
pub fn tools() -> Vec<(ToolSpec, Body)> {
    use IdempotencyClass::*;
    use SideEffectClass::*;
    let service = Body::Service {
        claim: Option::None,
    };
    vec![
        (
            spec("sim.lookup", None, ReadOnly, RiskLevel::Low, true, &[]),
            service,
        ),
        (
            spec("sim.search", None, ReadOnly, RiskLevel::Low, true, &[]),
            Body::Service {
                claim: Some(TrustLevel::ExternalUntrusted),
            },
        ),
        (
            spec(
                "sim.ws_read",
                WorkspaceRead,
                ReadOnly,
                RiskLevel::Low,
                true,
                &[],
            ),
            Body::WorkspaceRead,
        ),
        (
            spec(
                "sim.ws_write",
                WorkspaceWrite,
                Idempotent,
                RiskLevel::Low,
                false,
                &[],
            ),
            Body::WorkspaceWrite,
        ),
        (
            spec(
                "sim.note",
                WorkspaceWrite,
                NonIdempotent,
                RiskLevel::Medium,
                false,
                &[],
            ),
            service,
        ),
        (
            spec(
                "sim.sync",
                WorkspaceWrite,
                ConditionallyIdempotent,
                RiskLevel::Medium,
                false,
                &[],
            ),
            service,
        ),
        (
            spec(
                "sim.email",
                ExternalMessage,
                NonIdempotent,
                RiskLevel::High,
                false,
                &[],
            ),
            service,
        ),
        (
            spec(
                "sim.pay",
                Financial,
                ConditionallyIdempotent,
                RiskLevel::Critical,
                false,
                &["demo.write"],
            ),
            service,
        ),
        (
            spec(
                "sim.post",
                ExternalWrite,
                Idempotent,
                RiskLevel::Medium,
                false,
                &[],
            ),
            service,
        ),
        (
            spec(
                "sim.shell",
                HostAccess,
                NonIdempotent,
                RiskLevel::High,
                false,
                &[],
            ),
            service,
        ),
    ]
}

fn spec(
    name: &str,
    side_effect: SideEffectClass,
    idempotency: IdempotencyClass,
    risk: RiskLevel,
    allow_parallel: bool,
    scopes: &[&str],
) -> ToolSpec {
    let schema = InputSchema::from_json(&json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "maxLength": 200},
            "text": {"type": "string", "maxLength": 200},
            "to": {"type": "string", "maxLength": 64},
            "amount": {"type": "integer", "minimum": 0, "maximum": 100000}
        },
        "additionalProperties": false
    }))
    .expect("the simulated tools' schema is valid");
    let required_scopes: ScopeSet = scopes
        .iter()
        .map(|s| Scope::parse_required(s).expect("a valid scope"))
        .collect();
    ToolSpec {
        name: name.to_owned(),
        version: ToolVersion {
            major: 1,
            minor: 0,
            patch: 0,
        },
        description: format!("simulated service {name}"),
        input_schema: schema.into(),
        side_effect,
        risk,
        idempotency,
        required_scopes,
        timeout_ms: TOOL_TIMEOUT_MS,
        max_output_bytes: 4_096,
        allow_parallel,
        target: TargetKind::InProcess,
        output_trust: TrustLevel::InternalTool,
    }
}

/// The shipped rules (policy version A).
pub fn ruleset_shipped() -> Ruleset {
    Ruleset::shipped().expect("the shipped policy loads")
}

/// A rollout profile (policy version B): external messages become `deny` and critical approvals
/// expire sooner, so an approval granted under A and resumed under B must be revalidated away.
pub fn ruleset_rollout() -> Ruleset {
    let profile = String::from_utf8(DEFAULT_PROFILE.to_vec()).expect("UTF-8 profile");
    let rollout = profile
        .replacen("name = \"default\"", "name = \"rollout\"", 1)
        .replacen(
            "[rules.external_message]\ndecision = \"require_approval\"",
            "[rules.external_message]\ndecision = \"deny\"",
            1,
        )
        .replacen("critical = 3600", "critical = 1800", 1);
    assert_ne!(
        rollout, profile,
        "the rollout profile differs from the shipped one"
    );
    Ruleset::load(rollout.as_bytes(), HARDLINE).expect("the rollout profile loads")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_registers_and_the_policies_differ() {
        let mut registry = airlock_core::tool::registry::ToolRegistry::new();
        for (spec, _) in tools() {
            spec.validate().expect("valid spec");
            registry
                .register(std::sync::Arc::new(Dummy(spec)))
                .expect("registers");
        }
        assert_ne!(
            ruleset_shipped().version.as_str(),
            ruleset_rollout().version.as_str()
        );
    }

    struct Dummy(ToolSpec);
    impl airlock_core::ports::Tool for Dummy {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        fn invoke<'a>(
            &'a self,
            _ctx: &'a airlock_core::ports::ToolContext<'a>,
            _args: &'a airlock_core::action::JsonMap,
        ) -> airlock_core::ports::BoxFut<
            'a,
            Result<airlock_core::ports::ToolSuccess, airlock_core::ports::ToolFailure>,
        > {
            Box::pin(async {
                Err(airlock_core::ports::ToolFailure::new(
                    airlock_core::vocab::ToolFailureKind::Internal,
                    "tool.internal_error",
                    "dummy",
                ))
            })
        }
    }
}
