//! The tool registry (SPEC §12.4): `(name, version)` is unique, and an unpinned lookup takes the
//! highest registered version.
//!
//! Most hosts build the registry once at startup and then only read it, behind an `Arc`. A
//! gateway also registers tools it discovers while running, and retires a version whose
//! upstream definition changed (SPEC §19.2): [`ToolRegistry::add`] and [`ToolRegistry::retire`]
//! take `&self`, so the map sits behind a lock that is held only for a lookup or an insert,
//! never across an await. A spec is validated when it is registered, so every tool the pipeline
//! can resolve has a spec that satisfies §12.4.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::ports::Tool;

use super::spec::{ToolSpec, ToolSpecError, ToolVersion};

/// Every registered tool, ordered by name and then numerically by version.
#[derive(Default)]
pub struct ToolRegistry {
    tools: RwLock<BTreeMap<(String, ToolVersion), Arc<dyn Tool>>>,
}

type Tools = BTreeMap<(String, ToolVersion), Arc<dyn Tool>>;

impl Clone for ToolRegistry {
    fn clone(&self) -> ToolRegistry {
        ToolRegistry {
            tools: RwLock::new(self.read().clone()),
        }
    }
}

impl ToolRegistry {
    pub fn new() -> ToolRegistry {
        ToolRegistry::default()
    }

    /// Registers a tool after validating its spec; a second tool with the same name and version
    /// is refused rather than replacing the first, because PENDING pins calls to `(name,
    /// version)` and a replay must reach the same body.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), ToolSpecError> {
        self.add(tool)
    }

    /// [`ToolRegistry::register`] on a shared registry: a tool discovered at runtime.
    pub fn add(&self, tool: Arc<dyn Tool>) -> Result<(), ToolSpecError> {
        let spec = tool.spec();
        spec.validate()?;
        let key = (spec.name.clone(), spec.version);
        let mut tools = self.write();
        if tools.contains_key(&key) {
            return Err(ToolSpecError::Duplicate {
                name: key.0,
                version: key.1,
            });
        }
        tools.insert(key, tool);
        Ok(())
    }

    /// Unregisters one version (its definition changed upstream, SPEC §19.2): calls pinned to
    /// it resolve nothing from now on, so a pending one is refused `policy.matrix.unknown_tool`
    /// and an approved one denied `policy.revalidation.changed` (§10.3). Returns whether it was
    /// registered.
    pub fn retire(&self, name: &str, version: ToolVersion) -> bool {
        self.write().remove(&(name.to_owned(), version)).is_some()
    }

    fn read(&self) -> RwLockReadGuard<'_, Tools> {
        // Inserts and removals are single map operations: a panic cannot leave one half done.
        self.tools.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Tools> {
        self.tools.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Finds a tool by name and optional version string. `None` takes the highest registered
    /// version; a version string that does not parse resolves nothing (the call stays
    /// unresolved, SPEC §8.3) rather than being an error, since planners supply it.
    pub fn resolve(&self, name: &str, version: Option<&str>) -> Option<Arc<dyn Tool>> {
        match version {
            Some(text) => {
                let version: ToolVersion = text.parse().ok()?;
                self.read().get(&(name.to_owned(), version)).cloned()
            }
            None => {
                let lowest = ToolVersion::new(0, 0, 0);
                let highest = ToolVersion::new(u32::MAX, u32::MAX, u32::MAX);
                self.read()
                    .range((name.to_owned(), lowest)..=(name.to_owned(), highest))
                    .next_back()
                    .map(|(_, tool)| Arc::clone(tool))
            }
        }
    }

    /// Every registered spec, by name and then version.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.read()
            .values()
            .map(|tool| tool.spec().clone())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(
                self.read()
                    .keys()
                    .map(|(name, version)| format!("{name}@{version}")),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use serde_json::json;

    use super::*;
    use crate::action::JsonMap;
    use crate::ports::{BoxFut, ToolContext, ToolFailure, ToolSuccess};
    use crate::scope::ScopeSet;
    use crate::tool::spec::InputSchema;
    use crate::vocab::{IdempotencyClass, RiskLevel, SideEffectClass, TargetKind, TrustLevel};

    /// A tool whose body answers with its own version, so tests can see which one resolved.
    struct Versioned(ToolSpec);

    impl Tool for Versioned {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }

        fn invoke<'a>(
            &'a self,
            _ctx: &'a ToolContext<'a>,
            _args: &'a JsonMap,
        ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>> {
            let structured = json!({"version": self.0.version.to_string()});
            Box::pin(std::future::ready(Ok(ToolSuccess {
                structured,
                trust: None,
            })))
        }
    }

    fn tool(name: &str, version: &str) -> Arc<dyn Tool> {
        Arc::new(Versioned(ToolSpec {
            name: name.to_owned(),
            version: version.parse().unwrap(),
            description: String::new(),
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
            max_output_bytes: 1024,
            allow_parallel: true,
            target: TargetKind::InProcess,
            output_trust: TrustLevel::InternalTool,
        }))
    }

    fn resolved_version(
        registry: &ToolRegistry,
        name: &str,
        version: Option<&str>,
    ) -> Option<String> {
        registry
            .resolve(name, version)
            .map(|t| t.spec().version.to_string())
    }

    #[test]
    fn unpinned_lookup_takes_the_numerically_highest_version() {
        let mut registry = ToolRegistry::new();
        for version in ["1.9.0", "1.10.0", "1.2.3"] {
            registry.register(tool("demo.tool", version)).unwrap();
        }
        registry.register(tool("demo.toolbox", "9.0.0")).unwrap();
        registry.register(tool("demo.too", "8.0.0")).unwrap();
        assert_eq!(
            resolved_version(&registry, "demo.tool", None).as_deref(),
            Some("1.10.0")
        );
        assert_eq!(
            resolved_version(&registry, "demo.tool", Some("1.2.3")).as_deref(),
            Some("1.2.3")
        );
        assert_eq!(
            resolved_version(&registry, "demo.toolbox", None).as_deref(),
            Some("9.0.0")
        );
        assert_eq!(registry.len(), 5);
        assert!(!registry.is_empty());
    }

    #[test]
    fn unknown_names_and_versions_resolve_nothing() {
        let mut registry = ToolRegistry::default();
        assert!(registry.is_empty());
        registry.register(tool("demo.tool", "1.0.0")).unwrap();
        assert!(registry.resolve("demo.other", None).is_none());
        assert!(registry.resolve("demo.tool", Some("2.0.0")).is_none());
        assert!(registry.resolve("demo.tool", Some("1.0")).is_none());
        assert!(registry.resolve("demo.tool", Some("01.0.0")).is_none());
        assert!(registry.resolve("", None).is_none());
    }

    #[test]
    fn duplicates_and_invalid_specs_are_refused() {
        let mut registry = ToolRegistry::new();
        registry.register(tool("demo.tool", "1.0.0")).unwrap();
        let err = registry.register(tool("demo.tool", "1.0.0")).unwrap_err();
        assert_eq!(
            err,
            ToolSpecError::Duplicate {
                name: "demo.tool".to_owned(),
                version: ToolVersion::new(1, 0, 0)
            }
        );
        assert_eq!(
            err.to_string(),
            "tool demo.tool@1.0.0 is already registered"
        );
        assert_eq!(
            registry.register(tool("Demo", "1.0.0")),
            Err(ToolSpecError::Name("Demo".to_owned()))
        );
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn specs_are_listed_by_name_then_version() {
        let mut registry = ToolRegistry::new();
        registry.register(tool("b.tool", "1.0.0")).unwrap();
        registry.register(tool("a.tool", "10.0.0")).unwrap();
        registry.register(tool("a.tool", "2.0.0")).unwrap();
        let listed: Vec<String> = registry
            .specs()
            .iter()
            .map(|s| format!("{}@{}", s.name, s.version))
            .collect();
        assert_eq!(listed, ["a.tool@2.0.0", "a.tool@10.0.0", "b.tool@1.0.0"]);
        assert_eq!(
            format!("{registry:?}"),
            r#"["a.tool@2.0.0", "a.tool@10.0.0", "b.tool@1.0.0"]"#
        );
    }
}
