//! The simulated world's catalog: the specs of the simulated external services (one per
//! side-effect/idempotency shape the recovery table distinguishes), the tool catalogs a rolling
//! deploy can mix (new versions, a removed tool, a spec changed in place, and the previous
//! build's tool that this build no longer has), and the policy profiles. Bodies live in
//! `world` (they need the simulated clock).

use airlock_core::policy::Ruleset;
use airlock_core::policy::shipped::{DEFAULT_PROFILE, HARDLINE};
use airlock_core::scope::{Scope, ScopeSet};
use airlock_core::tool::spec::{InputSchema, ToolSpec, ToolVersion};
use airlock_core::vocab::{IdempotencyClass, RiskLevel, SideEffectClass, TargetKind, TrustLevel};
use serde_json::json;

use crate::plan::Profile;

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

/// Which tools a process registers (SPEC §12.4). Incarnations of one world may differ, as in
/// a rolling deploy, so a call can be pinned by one process and replayed by another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Catalog {
    /// Every simulated tool at 1.0.0.
    Base,
    /// The next release: `sim.lookup` 1.1.0 beside 1.0.0 (unpinned calls now pin 1.1.0, which
    /// base processes cannot resolve); `sim.email` only at 2.0.0, whose schema fills in a
    /// `priority` (1.0.0 is gone); `sim.pay` 1.0.0 changed in place to fill in a `currency`
    /// (the re-normalized hash of an approved call changes: `policy.revalidation.changed`);
    /// `sim.post` removed.
    Rollout,
    /// The previous build (it wrote the store a world may start from): the base tools and
    /// `sim.legacy_export`, which no process of this build registers.
    Legacy,
}

/// `(spec, body)` for every tool of `catalog`.
pub fn catalog(catalog: Catalog) -> Vec<(ToolSpec, Body)> {
    match catalog {
        Catalog::Base => tools(),
        Catalog::Legacy => {
            let mut all = tools();
            all.push((
                spec(
                    "sim.legacy_export",
                    SideEffectClass::WorkspaceWrite,
                    IdempotencyClass::NonIdempotent,
                    RiskLevel::Medium,
                    false,
                    &[],
                ),
                Body::Service { claim: None },
            ));
            all
        }
        Catalog::Rollout => {
            let mut all: Vec<(ToolSpec, Body)> = tools()
                .into_iter()
                .filter(|(spec, _)| !matches!(spec.name.as_str(), "sim.post" | "sim.email"))
                .map(|(mut spec, body)| {
                    if spec.name == "sim.pay" {
                        spec.input_schema = schema(Some(("currency", "EUR"))).into();
                    }
                    (spec, body)
                })
                .collect();
            let (mut lookup, body) = tools()
                .into_iter()
                .find(|(spec, _)| spec.name == "sim.lookup")
                .expect("the base catalog has sim.lookup");
            lookup.version = ToolVersion {
                major: 1,
                minor: 1,
                patch: 0,
            };
            all.push((lookup, body));
            let (mut email, body) = tools()
                .into_iter()
                .find(|(spec, _)| spec.name == "sim.email")
                .expect("the base catalog has sim.email");
            email.version = ToolVersion {
                major: 2,
                minor: 0,
                patch: 0,
            };
            email.input_schema = schema(Some(("priority", "normal"))).into();
            all.push((email, body));
            all
        }
    }
}

/// The spec `catalog` registers for `(name, version)`, if any.
pub fn resolve(catalog_kind: Catalog, name: &str, version: Option<&str>) -> Option<ToolSpec> {
    let specs: Vec<ToolSpec> = catalog(catalog_kind)
        .into_iter()
        .map(|(spec, _)| spec)
        .filter(|spec| spec.name == name)
        .collect();
    match version {
        Some(text) => {
            let wanted: ToolVersion = text.parse().ok()?;
            specs.into_iter().find(|spec| spec.version == wanted)
        }
        None => specs.into_iter().max_by_key(|spec| spec.version),
    }
}

/// `(spec, body)` for every simulated tool of the base catalog.
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
        (
            // Denied by the shipped matrix (not on the allowlist); the cautious profile asks
            // for approval, so a parallel batch holding it parks.
            spec(
                "sim.fetch",
                NetworkRead,
                ReadOnly,
                RiskLevel::Low,
                true,
                &[],
            ),
            service,
        ),
    ]
}

/// The simulated tools' argument schema; `default` adds one string property with a default
/// (a newer spec that fills in a field the older one did not have).
fn schema(default: Option<(&str, &str)>) -> InputSchema {
    let mut properties = json!({
        "path": {"type": "string", "maxLength": 200},
        "text": {"type": "string", "maxLength": 200},
        "to": {"type": "string", "maxLength": 64},
        "amount": {"type": "integer", "minimum": 0, "maximum": 100000}
    });
    if let Some((name, value)) = default {
        properties[name] = json!({"type": "string", "maxLength": 16, "default": value});
    }
    InputSchema::from_json(&json!({
        "type": "object",
        "properties": properties,
        "additionalProperties": false
    }))
    .expect("the simulated tools' schema is valid")
}

fn spec(
    name: &str,
    side_effect: SideEffectClass,
    idempotency: IdempotencyClass,
    risk: RiskLevel,
    allow_parallel: bool,
    scopes: &[&str],
) -> ToolSpec {
    let schema = schema(None);
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

/// The world's base rules (policy version A): the shipped profile, or the cautious one.
pub fn ruleset_base(profile: Profile) -> Ruleset {
    match profile {
        Profile::Shipped => Ruleset::shipped().expect("the shipped policy loads"),
        Profile::Cautious => Ruleset::load(cautious_profile().as_bytes(), HARDLINE)
            .expect("the cautious profile loads"),
    }
}

/// The shipped profile with `network_read` requiring approval.
fn cautious_profile() -> String {
    let profile = String::from_utf8(DEFAULT_PROFILE.to_vec()).expect("UTF-8 profile");
    let cautious = profile
        .replacen("name = \"default\"", "name = \"cautious\"", 1)
        .replacen(
            "[rules.network_read]\ndecision = \"allow\"\ncondition = \"host_on_allowlist\"\notherwise = \"deny\"",
            "[rules.network_read]\ndecision = \"require_approval\"",
            1,
        );
    assert!(
        cautious.contains("[rules.network_read]\ndecision = \"require_approval\""),
        "the cautious profile asks for network reads"
    );
    cautious
}

/// A rollout profile (policy version B) of the world's base: external messages become `deny`
/// and critical approvals expire sooner, so an approval granted under A and resumed under B
/// must be revalidated away.
pub fn ruleset_rollout(base: Profile) -> Ruleset {
    let profile = match base {
        Profile::Shipped => String::from_utf8(DEFAULT_PROFILE.to_vec()).expect("UTF-8 profile"),
        Profile::Cautious => cautious_profile(),
    };
    let rollout = profile
        .replacen("name = \"default\"", "name = \"rollout\"", 1)
        .replacen("name = \"cautious\"", "name = \"rollout\"", 1)
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
    fn every_catalog_registers_and_the_policies_differ() {
        for kind in [Catalog::Base, Catalog::Rollout, Catalog::Legacy] {
            let mut registry = airlock_core::tool::registry::ToolRegistry::new();
            for (spec, _) in catalog(kind) {
                spec.validate().expect("valid spec");
                registry
                    .register(std::sync::Arc::new(Dummy(spec)))
                    .expect("registers");
            }
        }
        let versions: Vec<String> = [
            ruleset_base(Profile::Shipped),
            ruleset_base(Profile::Cautious),
            ruleset_rollout(Profile::Shipped),
            ruleset_rollout(Profile::Cautious),
        ]
        .iter()
        .map(|r| r.version.as_str().to_owned())
        .collect();
        let distinct: std::collections::BTreeSet<&String> = versions.iter().collect();
        assert_eq!(distinct.len(), 4, "{versions:?}");
    }

    #[test]
    fn the_rollout_catalog_moves_pins() {
        let version = |c, name| resolve(c, name, None).map(|s| s.version.to_string());
        assert_eq!(
            version(Catalog::Base, "sim.lookup").as_deref(),
            Some("1.0.0")
        );
        assert_eq!(
            version(Catalog::Rollout, "sim.lookup").as_deref(),
            Some("1.1.0")
        );
        assert!(resolve(Catalog::Base, "sim.lookup", Some("1.1.0")).is_none());
        assert!(resolve(Catalog::Rollout, "sim.lookup", Some("1.0.0")).is_some());
        assert!(resolve(Catalog::Rollout, "sim.post", None).is_none());
        assert!(resolve(Catalog::Rollout, "sim.email", Some("1.0.0")).is_none());
        assert!(resolve(Catalog::Base, "sim.email", Some("2.0.0")).is_none());
        assert!(resolve(Catalog::Base, "sim.legacy_export", None).is_none());
        assert!(resolve(Catalog::Legacy, "sim.legacy_export", None).is_some());
        let args = serde_json::json!({"to": "vendor", "amount": 5});
        let base = resolve(Catalog::Base, "sim.pay", Some("1.0.0")).expect("pay");
        let rollout = resolve(Catalog::Rollout, "sim.pay", Some("1.0.0")).expect("pay");
        assert_ne!(
            base.normalize_arguments(&args).expect("valid"),
            rollout.normalize_arguments(&args).expect("valid")
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
