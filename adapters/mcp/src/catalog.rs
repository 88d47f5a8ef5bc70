//! The gateway's view of one upstream tool (SPEC §19.2): its exposed and internal names, its
//! definition hash, its class (from the file; annotations only ever stricter) and the core
//! [`ToolSpec`] it is registered under.

use serde_json::{Value, json};

use airlock_core::canonical::arguments_hash;
use airlock_core::scope::{Scope, ScopeSet};
use airlock_core::tool::spec::{ArgumentSchema, MAX_TOOL_NAME_BYTES, ToolSpec, ToolVersion};
use airlock_core::vocab::{SideEffectClass, TargetKind, TrustLevel};

use crate::config::{ServerConfig, ToolClass};

/// `{server_id}__{upstream name}`, if it fits `^[A-Za-z0-9_-]{1,64}$`.
pub fn exposed_name(server: &str, upstream: &str) -> Option<String> {
    let name = format!("{server}__{upstream}");
    let fits = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    fits.then_some(name)
}

/// `mcp.{server_id}.{t}`, `t` the upstream name lower-cased with `-` and `.` mapped to `_`, if
/// the result is a valid core tool name.
pub fn internal_name(server: &str, upstream: &str) -> Option<String> {
    let t: String = upstream
        .chars()
        .map(|c| match c {
            '-' | '.' => '_',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    let name = format!("mcp.{server}.{t}");
    let segment_ok = |s: &str| {
        let mut bytes = s.bytes();
        bytes.next().is_some_and(|b| b.is_ascii_lowercase())
            && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
    (name.len() <= MAX_TOOL_NAME_BYTES && name.split('.').all(segment_ok)).then_some(name)
}

/// `sha256:` and the SHA-256 of the canonical JSON of the definition's name, description,
/// input schema, output schema and annotations (absent members as null).
pub fn definition_hash(tool: &Value) -> String {
    let part = |key: &str| tool.get(key).cloned().unwrap_or(Value::Null);
    let definition = json!({
        "name": part("name"),
        "description": part("description"),
        "inputSchema": part("inputSchema"),
        "outputSchema": part("outputSchema"),
        "annotations": part("annotations"),
    });
    format!("sha256:{}", arguments_hash(&definition))
}

/// The class of `upstream` on `server`: its own table exactly; else, with `trust_annotations`
/// and `readOnlyHint: true`, read-only; else the server's default. No other hint is read, and
/// a configured class is never weakened by annotations.
pub fn class_of(server: &ServerConfig, upstream: &str, annotations: Option<&Value>) -> ToolClass {
    if let Some(tool) = server.tools.get(upstream) {
        return tool.class;
    }
    let read_only_hint = annotations
        .and_then(|a| a.get("readOnlyHint"))
        .and_then(Value::as_bool)
        == Some(true);
    if server.trust_annotations && read_only_hint {
        ToolClass::READ_ONLY
    } else {
        server.default
    }
}

/// Why a discovered tool is not listed (`mcp tools`' `why_not`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unlisted {
    /// The exposed or internal name does not fit its grammar.
    NameDoesNotFit,
    /// Another tool of the same server maps to the same internal name.
    Collides(String),
    /// The definition hash differs from the file's `pin`.
    PinMismatch { pin: String },
    /// The principal does not hold the tool's scope.
    ScopeNotHeld(String),
    /// The matrix row of its side-effect class is an unconditional `deny`.
    DeniedByPolicy,
}

impl Unlisted {
    /// Whether calls of the tool can be registered with core at all: a tool that is only
    /// filtered from the listing (scope, policy) stays callable, and core refuses or denies
    /// it with the usual reason; the others resolve nothing (`policy.matrix.unknown_tool`).
    pub fn registrable(&self) -> bool {
        matches!(self, Unlisted::ScopeNotHeld(_) | Unlisted::DeniedByPolicy)
    }

    /// The `why_not` text of `mcp tools`.
    pub fn describe(&self) -> String {
        match self {
            Unlisted::NameDoesNotFit => {
                "name does not fit ^[A-Za-z0-9_-]{1,64}$ or the internal tool name grammar".into()
            }
            Unlisted::Collides(other) => {
                format!("internal name collides with upstream tool '{other}'")
            }
            Unlisted::PinMismatch { pin } => format!("definition hash differs from pin {pin}"),
            Unlisted::ScopeNotHeld(scope) => format!("principal does not hold scope {scope}"),
            Unlisted::DeniedByPolicy => {
                "the policy matrix denies its side-effect class unconditionally".into()
            }
        }
    }
}

/// One discovered upstream tool, as the gateway treats it now.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub server: String,
    pub upstream: String,
    /// `None` when the name does not fit.
    pub exposed: Option<String>,
    pub internal: Option<String>,
    pub definition_sha256: String,
    pub class: ToolClass,
    pub scope: String,
    pub output_trust: TrustLevel,
    /// `None`: listed to the client.
    pub unlisted: Option<Unlisted>,
    /// The upstream's definition as it listed it.
    pub definition: Value,
}

impl Entry {
    pub fn listed(&self) -> bool {
        self.unlisted.is_none()
    }

    /// Whether core knows the tool (see [`Unlisted::registrable`]).
    pub fn registrable(&self) -> bool {
        self.internal.is_some() && self.unlisted.as_ref().is_none_or(Unlisted::registrable)
    }

    /// The row of `airlock mcp tools` (SPEC §19.1).
    pub fn to_json(&self) -> Value {
        json!({
            "server": self.server,
            "upstream_name": self.upstream,
            "exposed_name": self.exposed,
            "internal_name": self.internal,
            "definition_sha256": self.definition_sha256,
            "class": {
                "side_effect": self.class.side_effect.as_str(),
                "idempotency": self.class.idempotency.as_str(),
                "risk": self.class.risk.as_str(),
                "scope": self.scope,
                "output_trust": self.output_trust.as_str(),
            },
            "listed": self.listed(),
            "why_not": self.unlisted.as_ref().map(Unlisted::describe),
        })
    }
}

/// The scope a tool of `server` requires: its table's, else `mcp.{server_id}.call`.
pub fn scope_of(server: &ServerConfig, upstream: &str) -> String {
    server
        .tools
        .get(upstream)
        .and_then(|t| t.scope.as_ref())
        .map_or_else(
            || format!("mcp.{}.call", server.id),
            |s| s.as_str().to_owned(),
        )
}

/// Builds the entries of every tool `server` listed, in the server's order. `denied` says
/// whether the policy matrix denies a side-effect class unconditionally; `scopes` are the
/// principal's.
pub fn entries(
    server: &ServerConfig,
    tools: &[Value],
    scopes: &ScopeSet,
    denied: &dyn Fn(SideEffectClass) -> bool,
) -> Vec<Entry> {
    let mut entries: Vec<Entry> = tools
        .iter()
        .map(|tool| {
            let upstream = tool
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let exposed = exposed_name(&server.id, &upstream);
            let internal = internal_name(&server.id, &upstream);
            let hash = definition_hash(tool);
            let class = class_of(server, &upstream, tool.get("annotations"));
            let scope = scope_of(server, &upstream);
            let pin = server.tools.get(&upstream).and_then(|t| t.pin.clone());
            let unlisted = if exposed.is_none() || internal.is_none() {
                Some(Unlisted::NameDoesNotFit)
            } else if let Some(pin) = pin.filter(|pin| *pin != hash) {
                Some(Unlisted::PinMismatch { pin })
            } else if !Scope::parse(&scope).is_ok_and(|s| scopes.contains(&s)) {
                Some(Unlisted::ScopeNotHeld(scope.clone()))
            } else if denied(class.side_effect) {
                Some(Unlisted::DeniedByPolicy)
            } else {
                None
            };
            Entry {
                server: server.id.clone(),
                upstream,
                exposed,
                internal,
                definition_sha256: hash,
                class,
                scope,
                output_trust: server.output_trust,
                unlisted,
                definition: tool.clone(),
            }
        })
        .collect();
    // Collisions after mapping: every tool sharing an internal name is refused, since a call
    // could not say which one it meant.
    for i in 0..entries.len() {
        let Some(name) = entries[i].internal.clone() else {
            continue;
        };
        let other = entries
            .iter()
            .enumerate()
            .find(|(j, e)| *j != i && e.internal.as_deref() == Some(name.as_str()))
            .map(|(_, e)| e.upstream.clone());
        if let Some(other) = other
            && !matches!(entries[i].unlisted, Some(Unlisted::NameDoesNotFit))
        {
            entries[i].unlisted = Some(Unlisted::Collides(other));
        }
    }
    entries
}

/// The core spec of an upstream tool at `version`.
pub fn spec_of(
    server: &ServerConfig,
    upstream: &str,
    internal: &str,
    tool: &Value,
    version: ToolVersion,
) -> ToolSpec {
    let own = server.tools.get(upstream);
    let class = class_of(server, upstream, tool.get("annotations"));
    let required_scopes: ScopeSet = Scope::parse(&scope_of(server, upstream))
        .into_iter()
        .collect();
    let timeout = own
        .and_then(|t| t.timeout_seconds)
        .unwrap_or(server.timeout_seconds);
    ToolSpec {
        name: internal.to_owned(),
        version,
        description: tool
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        input_schema: ArgumentSchema::Upstream(
            tool.get("inputSchema")
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"})),
        ),
        side_effect: class.side_effect,
        risk: class.risk,
        idempotency: class.idempotency,
        required_scopes,
        timeout_ms: u64::from(timeout) * 1000,
        max_output_bytes: own
            .and_then(|t| t.max_output_bytes)
            .unwrap_or(server.max_output_bytes),
        allow_parallel: false,
        target: TargetKind::McpServer,
        output_trust: server.output_trust,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GatewayConfig;
    use airlock_core::vocab::IdempotencyClass;

    fn server(trust_annotations: bool) -> ServerConfig {
        let text = format!(
            "schema_version = 1\ntenant_id = \"acme\"\nprincipal_id = \"alice\"\n\
             [servers.files]\ncommand = \"x\"\ntrust_annotations = {trust_annotations}\n\
             [servers.files.tools.write_file]\nside_effect = \"external_write\"\n\
             idempotency = \"idempotent\"\nrisk = \"medium\"\nscope = \"mcp.files.write\"\n"
        );
        GatewayConfig::parse(&text).unwrap().servers["files"].clone()
    }

    #[test]
    fn names_map_and_refuse_what_does_not_fit() {
        assert_eq!(
            exposed_name("files", "read_text_file").as_deref(),
            Some("files__read_text_file")
        );
        assert_eq!(exposed_name("files", "a.b"), None, "a dot does not fit");
        assert_eq!(exposed_name("files", &"x".repeat(60)), None, "too long");
        assert_eq!(
            internal_name("files", "Read-Text.File").as_deref(),
            Some("mcp.files.read_text_file")
        );
        assert_eq!(
            internal_name("files", "9lives"),
            None,
            "a segment starts with a letter"
        );
        assert_eq!(internal_name("files", "naïve"), None);
    }

    #[test]
    fn the_definition_hash_covers_the_five_members_and_nothing_else() {
        let tool = json!({"name": "t", "description": "d", "inputSchema": {"type": "object"}});
        let same = json!({"inputSchema": {"type": "object"}, "description": "d", "name": "t", "title": "ignored"});
        assert_eq!(definition_hash(&tool), definition_hash(&same));
        let changed = json!({"name": "t", "description": "d!", "inputSchema": {"type": "object"}});
        assert_ne!(definition_hash(&tool), definition_hash(&changed));
        assert!(definition_hash(&tool).starts_with("sha256:"));
        assert_eq!(definition_hash(&tool).len(), 7 + 64);
    }

    #[test]
    fn annotations_only_ever_make_an_unconfigured_tool_read_only_when_trusted() {
        let hint = json!({"readOnlyHint": true, "destructiveHint": false});
        assert_eq!(
            class_of(&server(false), "other", Some(&hint)),
            ToolClass::UNCONFIGURED
        );
        assert_eq!(
            class_of(&server(true), "other", Some(&hint)),
            ToolClass::READ_ONLY
        );
        let configured = class_of(&server(true), "write_file", Some(&hint));
        assert_eq!(
            configured.side_effect,
            SideEffectClass::ExternalWrite,
            "the file wins"
        );
        assert_eq!(configured.idempotency, IdempotencyClass::Idempotent);
    }

    #[test]
    fn specs_are_mcp_server_tools_with_the_upstream_schema() {
        let tool = json!({"name": "write_file", "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}});
        let spec = spec_of(
            &server(false),
            "write_file",
            "mcp.files.write_file",
            &tool,
            ToolVersion::new(1, 0, 0),
        );
        spec.validate().expect("valid");
        assert_eq!(spec.target, TargetKind::McpServer);
        assert_eq!(spec.output_trust, TrustLevel::ExternalUntrusted);
        assert_eq!(spec.timeout_ms, 60_000);
        assert_eq!(
            spec.required_scopes
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>(),
            ["mcp.files.write"]
        );
        // The upstream validates: core passes any object through unchanged.
        let args = json!({"path": "a", "extra": [1, {"deep": true}]});
        assert_eq!(
            spec.normalize_arguments(&args).unwrap(),
            *args.as_object().unwrap()
        );
        assert!(spec.normalize_arguments(&json!([1])).is_err());
        let other = spec_of(
            &server(false),
            "read",
            "mcp.files.read",
            &json!({"name": "read"}),
            ToolVersion::new(1, 0, 0),
        );
        assert_eq!(
            other
                .required_scopes
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>(),
            ["mcp.files.call"]
        );
    }
}
