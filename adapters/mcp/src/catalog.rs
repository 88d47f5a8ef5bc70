//! The gateway's view of one upstream tool (SPEC §19.2): its exposed and internal names, its
//! definition hash, its class (from the file; annotations only ever stricter) and the core
//! [`ToolSpec`] it is registered under; and the names of its prompts and resource URIs
//! (§19.6), so every naming rule of the gateway lives here.
//!
//! **Exposure.** Prefixed (the default), a tool or prompt is `{server_id}__{name}` and a
//! resource URI (or URI template) `{server_id}+{uri}`; with `expose_unprefixed = true` (one
//! server only, checked by the loader) they keep their own names. Tool and prompt names must
//! fit `^[A-Za-z0-9_-]{1,64}$` either way; a name that does not fit is not listed. Internal
//! names never change: `mcp.{server_id}.{t}` for tools, `mcp.{server_id}.resource.read` and
//! `mcp.{server_id}.prompt.get` for reads.

use serde_json::{Value, json};

use airlock_core::canonical::arguments_hash;
use airlock_core::scope::{Scope, ScopeSet};
use airlock_core::tool::spec::{ArgumentSchema, MAX_TOOL_NAME_BYTES, ToolSpec, ToolVersion};
use airlock_core::vocab::{SideEffectClass, TargetKind, TrustLevel};

use airlock_core::connection::read::{ReadKind, action_name};

use crate::config::{Exposure, GatewayConfig, ServerConfig, ToolClass};

/// Whether `name` fits `^[A-Za-z0-9_-]{1,64}$`.
fn fits(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `{server_id}__{upstream name}`, if it fits `^[A-Za-z0-9_-]{1,64}$`.
pub fn exposed_name(server: &str, upstream: &str) -> Option<String> {
    let name = format!("{server}__{upstream}");
    fits(&name).then_some(name)
}

/// The name a tool or prompt of `server` is exposed under (see the module docs), if it fits.
pub fn exposed_name_of(server: &ServerConfig, upstream: &str) -> Option<String> {
    match server.exposure {
        Exposure::Prefixed => exposed_name(&server.id, upstream),
        Exposure::Unprefixed => fits(upstream).then(|| upstream.to_owned()),
    }
}

/// The server and upstream name an exposed tool or prompt name stands for; `None` when it
/// stands for none, or (ids such as `a` and `a__b`) for more than one.
pub fn route_name<'c>(
    config: &'c GatewayConfig,
    exposed: &str,
) -> Option<(&'c ServerConfig, String)> {
    let mut found = config.servers.values().filter_map(|server| {
        let upstream = match server.exposure {
            Exposure::Prefixed => exposed.strip_prefix(&format!("{}__", server.id))?,
            Exposure::Unprefixed => exposed,
        };
        (exposed_name_of(server, upstream).as_deref() == Some(exposed))
            .then(|| (server, upstream.to_owned()))
    });
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// The URI (or URI template) a resource of `server` is exposed under.
pub fn exposed_uri(server: &ServerConfig, uri: &str) -> String {
    match server.exposure {
        Exposure::Prefixed => format!("{}+{uri}", server.id),
        Exposure::Unprefixed => uri.to_owned(),
    }
}

/// The server and upstream URI an exposed URI stands for. Server ids hold no `+`, so the
/// prefix ends at the first one; the rest (which may hold `+`, as in `svn+ssh:`) is the URI.
pub fn route_uri<'c>(
    config: &'c GatewayConfig,
    exposed: &str,
) -> Option<(&'c ServerConfig, String)> {
    config
        .servers
        .values()
        .find_map(|server| match server.exposure {
            Exposure::Prefixed => {
                let (id, uri) = exposed.split_once('+')?;
                (id == server.id && !uri.is_empty()).then(|| (server, uri.to_owned()))
            }
            Exposure::Unprefixed => Some((server, exposed.to_owned())),
        })
}

/// `mcp.{server_id}.resource.read` / `mcp.{server_id}.prompt.get` (core owns the spelling,
/// since its matrix condition recognizes them).
pub fn read_name(server: &ServerConfig, kind: ReadKind) -> String {
    action_name(&server.id, kind)
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
            // What the server says of the tool (untrusted unless `trust_annotations`): the
            // hints a person classing it by hand looks at.
            "annotations": self.definition.get("annotations").cloned().unwrap_or(Value::Null),
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

/// Whether `scopes` hold the scope a tool's entry names (an unparsable one is held by nobody).
pub fn holds(scopes: &ScopeSet, scope: &str) -> bool {
    Scope::parse(scope).is_ok_and(|s| scopes.contains(&s))
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
            let exposed = exposed_name_of(server, &upstream);
            let internal = internal_name(&server.id, &upstream);
            let hash = definition_hash(tool);
            let class = class_of(server, &upstream, tool.get("annotations"));
            let scope = scope_of(server, &upstream);
            let pin = server.tools.get(&upstream).and_then(|t| t.pin.clone());
            let unlisted = if exposed.is_none() || internal.is_none() {
                Some(Unlisted::NameDoesNotFit)
            } else if let Some(pin) = pin.filter(|pin| *pin != hash) {
                Some(Unlisted::PinMismatch { pin })
            } else if !holds(scopes, &scope) {
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

    fn config(text: &str) -> GatewayConfig {
        GatewayConfig::parse(&format!(
            "schema_version = 1\ntenant_id = \"acme\"\nprincipal_id = \"alice\"\n{text}"
        ))
        .unwrap()
    }

    #[test]
    fn prompts_and_uris_are_prefixed_and_routed_back() {
        let c = config("[servers.files]\ncommand = \"x\"\n[servers.every]\ncommand = \"y\"\n");
        let every = &c.servers["every"];
        assert_eq!(
            exposed_name_of(every, "simple-prompt").as_deref(),
            Some("every__simple-prompt")
        );
        assert_eq!(exposed_name_of(every, "a.b"), None, "a dot does not fit");
        assert_eq!(
            exposed_uri(every, "demo://resource/static/document/x.md"),
            "every+demo://resource/static/document/x.md"
        );
        let (server, name) = route_name(&c, "every__simple-prompt").unwrap();
        assert_eq!(
            (server.id.as_str(), name.as_str()),
            ("every", "simple-prompt")
        );
        assert!(
            route_name(&c, "simple-prompt").is_none(),
            "unprefixed is unknown"
        );
        assert!(route_name(&c, "other__x").is_none());
        let (server, uri) = route_uri(&c, "files+svn+ssh://h/x").unwrap();
        assert_eq!(
            (server.id.as_str(), uri.as_str()),
            ("files", "svn+ssh://h/x")
        );
        assert!(
            route_uri(&c, "file:///etc/shadow").is_none(),
            "no prefix, no server"
        );
        assert!(route_uri(&c, "every+").is_none());
        assert_eq!(
            read_name(every, ReadKind::Resource),
            "mcp.every.resource.read"
        );
        assert_eq!(read_name(every, ReadKind::Prompt), "mcp.every.prompt.get");
    }

    #[test]
    fn an_unprefixed_server_keeps_its_names_and_its_internal_names() {
        let c = config("[servers.every]\ncommand = \"y\"\nexpose_unprefixed = true\n");
        let every = &c.servers["every"];
        assert_eq!(exposed_name_of(every, "echo").as_deref(), Some("echo"));
        assert_eq!(exposed_name_of(every, "a.b"), None);
        assert_eq!(exposed_uri(every, "demo://x"), "demo://x");
        let (server, name) = route_name(&c, "echo").unwrap();
        assert_eq!((server.id.as_str(), name.as_str()), ("every", "echo"));
        let (_, uri) = route_uri(&c, "file:///etc/shadow").unwrap();
        assert_eq!(uri, "file:///etc/shadow");
        let scopes: ScopeSet = ["mcp.every.call"]
            .iter()
            .map(|s| Scope::parse(s).unwrap())
            .collect();
        let listed = entries(every, &[json!({"name": "echo"})], &scopes, &|_| false);
        assert_eq!(listed[0].exposed.as_deref(), Some("echo"));
        assert_eq!(listed[0].internal.as_deref(), Some("mcp.every.echo"));
        assert_eq!(
            read_name(every, ReadKind::Resource),
            "mcp.every.resource.read"
        );
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
