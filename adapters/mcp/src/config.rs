//! The gateway file (SPEC §19.2): strict TOML like the policy loader (§7.4). Every key is known;
//! an unknown key or a bad value stops the load with the key's dotted path, and the CLI exits 4.
//!
//! Choices the spec leaves open: a tool's own `timeout_seconds` (1..=3600, default: the server's,
//! else 60) and `max_output_bytes` (1..=8 MiB, default: the server's, else 1 MiB); `[limits]`
//! also takes `max_steps`; `max_tool_calls` and `deadline_seconds` count per conversation
//! (§22.1: each call is its own run), and a file that sets no `max_tool_calls` puts no cap on a
//! conversation;
//! `origin_trust` is `user` or `external_untrusted`; `output_trust` is `external_untrusted` or
//! `internal_tool`.
//!
//! SPEC §19.6 adds two server keys: `read_scope` (the scope a `resources/read` or `prompts/get`
//! of the server needs; default `mcp.{server_id}.read`, and like a tool's `scope` it must start
//! with `mcp.{server_id}.`), and `expose_unprefixed` (a boolean, valid only when the file has
//! exactly one server).

use crate::secret_ref::SecretTemplate;
use std::collections::BTreeMap;

use toml::{Table, Value};

use airlock_core::run::Limits;
use airlock_core::scope::{Scope, ScopeSet};
use airlock_core::vocab::{IdempotencyClass, RiskLevel, SideEffectClass, TrustLevel};

/// A load failure: the dotted path of the offending key and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

fn error(path: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// A tool's class (SPEC §19.2 "Class").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolClass {
    pub side_effect: SideEffectClass,
    pub idempotency: IdempotencyClass,
    pub risk: RiskLevel,
}

impl ToolClass {
    /// The class of a tool nobody classified: the strictest usual one.
    pub const UNCONFIGURED: ToolClass = ToolClass {
        side_effect: SideEffectClass::ExternalWrite,
        idempotency: IdempotencyClass::NonIdempotent,
        risk: RiskLevel::High,
    };

    /// What `readOnlyHint: true` may give an unconfigured tool with `trust_annotations`.
    pub const READ_ONLY: ToolClass = ToolClass {
        side_effect: SideEffectClass::None,
        idempotency: IdempotencyClass::ReadOnly,
        risk: RiskLevel::Low,
    };
}

/// One `[servers.X.tools.T]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolConfig {
    pub class: ToolClass,
    pub scope: Option<Scope>,
    /// `sha256:{hex}`.
    pub pin: Option<String>,
    pub timeout_seconds: Option<u32>,
    pub max_output_bytes: Option<u64>,
}

/// How the gateway reaches an upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<String>,
    },
    StreamableHttp {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// One `[servers.X]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    pub id: String,
    pub transport: Transport,
    pub output_trust: TrustLevel,
    pub trust_annotations: bool,
    /// The class of a tool without a table of its own.
    pub default: ToolClass,
    pub timeout_seconds: u32,
    pub max_output_bytes: u64,
    pub tools: BTreeMap<String, ToolConfig>,
    /// The scope its reads (resources, prompts) need (§19.6).
    pub read_scope: Scope,
    /// Its tools, prompts and resource URIs go to the client under their own names (§19.6).
    pub exposure: Exposure,
    /// `roots`: the `file://` URIs the gateway answers the server's `roots/list` with when it
    /// asks outside any call (SPEC §23); empty when the file gives none. An absolute path in
    /// the file is turned into its URI here.
    pub roots: Vec<String>,
    /// `[servers.X.oauth]`: the OAuth 2.1 client-credentials grant the gateway uses to get
    /// this (url) server's bearer token (issue 31); `None` when the file gives none.
    pub oauth: Option<OAuthClient>,
}

/// `[servers.X.oauth]`: where and as whom the gateway asks for an upstream's access token.
/// Its `Debug` leaves the secret out (it may be a literal).
#[derive(Clone, PartialEq, Eq)]
pub struct OAuthClient {
    pub token_url: String,
    pub client_id: String,
    /// As written: `${env:…}`/`${file:…}` references are resolved at each token request.
    pub client_secret: String,
    pub scopes: Vec<String>,
    pub audience: Option<String>,
    /// RFC 8707 `resource`.
    pub resource: Option<String>,
    /// How the client authenticates to the token endpoint (RFC 6749 §2.3.1).
    pub auth: TokenEndpointAuth,
}

impl std::fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthClient")
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<not shown>")
            .field("scopes", &self.scopes)
            .field("audience", &self.audience)
            .field("resource", &self.resource)
            .field("auth", &self.auth)
            .finish()
    }
}

/// `token_endpoint_auth`, named as RFC 8414's `token_endpoint_auth_methods_supported` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenEndpointAuth {
    /// HTTP Basic with the form-encoded id and secret: the method every server must support,
    /// and the default.
    ClientSecretBasic,
    /// `client_id` and `client_secret` in the form body.
    ClientSecretPost,
}

/// How a server's names reach the client (SPEC §19.2, §19.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// `{server_id}__{name}` and `{server_id}+{uri}`.
    Prefixed,
    /// The server's own names (`expose_unprefixed = true`, a file with one server only).
    Unprefixed,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    pub tenant_id: String,
    pub principal_id: String,
    pub scopes: ScopeSet,
    pub origin_trust: TrustLevel,
    pub approve_via_elicitation: bool,
    pub limits: Limits,
    /// `[limits] max_tool_calls` as the file gives it: per conversation (SPEC §22.1); `None`
    /// when the file sets none (no cap on a long session).
    pub conversation_calls: Option<u32>,
    /// `conversation_idle_seconds` (SPEC §22.1): a sessionless 2026-07-28 HTTP conversation ends
    /// after this long without a request (default [`DEFAULT_CONVERSATION_IDLE_SECONDS`]).
    pub conversation_idle_seconds: u32,
    /// `console_url` (SPEC §22.3): where the web console (`airlock serve`) is reached, so an
    /// approval's page is `{console_url}/approvals/{id}` (URL elicitation, task messages).
    /// An `http(s)` URL without query or fragment, kept without a trailing `/`.
    pub console_url: Option<String>,
    pub servers: BTreeMap<String, ServerConfig>,
    /// `[auth]` (issue 31): the OAuth issuer whose bearer tokens `--listen` takes beside
    /// airlock tokens; its tenant is the file's unless the section names one. Unused over stdio.
    pub auth: Option<airlock_oauth::AuthConfig>,
}

/// How long a sessionless conversation lasts without a request unless the file says otherwise
/// (SPEC §22.1): an hour, long enough for a person to read an answer and ask the next thing.
pub const DEFAULT_CONVERSATION_IDLE_SECONDS: u32 = 3600;

/// The default per-call timeout (SPEC §19.2).
pub const DEFAULT_TIMEOUT_SECONDS: u32 = 60;
/// The default output limit (SPEC §19.2).
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 1024 * 1024;

/// Whether `id` matches `[a-z][a-z0-9_]*`.
pub fn is_server_id(id: &str) -> bool {
    let mut bytes = id.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Refuses the first key of `table` (in key order) that `known` does not list.
fn only_keys(table: &Table, known: &[&str], at: &str) -> Result<(), ConfigError> {
    match table.keys().find(|k| !known.contains(&k.as_str())) {
        Some(key) => Err(error(&join(at, key), "unknown key")),
        None => Ok(()),
    }
}

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

fn string(table: &Table, key: &str, at: &str) -> Result<Option<String>, ConfigError> {
    match table.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(error(&join(at, key), "must be a string")),
    }
}

fn required_string(table: &Table, key: &str, at: &str) -> Result<String, ConfigError> {
    string(table, key, at)?.ok_or_else(|| error(&join(at, key), "is required"))
}

fn boolean(table: &Table, key: &str, at: &str) -> Result<Option<bool>, ConfigError> {
    match table.get(key) {
        None => Ok(None),
        Some(Value::Boolean(b)) => Ok(Some(*b)),
        Some(_) => Err(error(&join(at, key), "must be a boolean")),
    }
}

/// `console_url`'s value: an absolute `http` or `https` URL with a host and no query or
/// fragment, without its trailing `/`.
fn console_url(text: &str) -> Result<String, ConfigError> {
    let bad = |why: &str| {
        error(
            "console_url",
            format!("{why} (e.g. \"https://airlock.example.com\")"),
        )
    };
    let url = url::Url::parse(text).map_err(|_| bad("must be an absolute URL"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(bad("must be an http or https URL with a host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("must have no query or fragment"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

fn integer_in(
    table: &Table,
    key: &str,
    at: &str,
    range: std::ops::RangeInclusive<i64>,
) -> Result<Option<i64>, ConfigError> {
    match table.get(key) {
        None => Ok(None),
        Some(Value::Integer(n)) if range.contains(n) => Ok(Some(*n)),
        Some(_) => Err(error(
            &join(at, key),
            format!("must be an integer in {}..={}", range.start(), range.end()),
        )),
    }
}

fn strings(table: &Table, key: &str, at: &str) -> Result<Option<Vec<String>>, ConfigError> {
    match table.get(key) {
        None => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| error(&join(at, key), "must be an array of strings"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(error(&join(at, key), "must be an array of strings")),
    }
}

fn string_map(table: &Table, key: &str, at: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    match table.get(key) {
        None => Ok(BTreeMap::new()),
        Some(Value::Table(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(error(&join(&join(at, key), k), "must be a string")),
            })
            .collect(),
        Some(_) => Err(error(&join(at, key), "must be a table of strings")),
    }
}

fn table<'t>(value: &'t Value, at: &str) -> Result<&'t Table, ConfigError> {
    value.as_table().ok_or_else(|| error(at, "must be a table"))
}

fn parsed<T: std::str::FromStr>(
    table: &Table,
    key: &str,
    at: &str,
) -> Result<Option<T>, ConfigError> {
    match string(table, key, at)? {
        None => Ok(None),
        Some(text) => text
            .parse()
            .map(Some)
            .map_err(|_| error(&join(at, key), format!("invalid value '{text}'"))),
    }
}

/// An id of the script rule: 1..=128 characters, no control characters.
fn identifier(table: &Table, key: &str, at: &str) -> Result<String, ConfigError> {
    let value = required_string(table, key, at)?;
    let length = value.chars().count();
    if !(1..=128).contains(&length) || value.chars().any(char::is_control) {
        return Err(error(
            &join(at, key),
            "must be 1..=128 characters without control characters",
        ));
    }
    Ok(value)
}

/// A class table: all three keys, or (for `default`) all three too.
fn class(table: &Table, at: &str) -> Result<ToolClass, ConfigError> {
    let require = |key: &str| error(&join(at, key), "is required");
    Ok(ToolClass {
        side_effect: parsed(table, "side_effect", at)?.ok_or_else(|| require("side_effect"))?,
        idempotency: parsed(table, "idempotency", at)?.ok_or_else(|| require("idempotency"))?,
        risk: parsed(table, "risk", at)?.ok_or_else(|| require("risk"))?,
    })
}

fn pin(table: &Table, at: &str) -> Result<Option<String>, ConfigError> {
    let Some(pin) = string(table, "pin", at)? else {
        return Ok(None);
    };
    let well_formed = pin.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if !well_formed {
        return Err(error(
            &join(at, "pin"),
            "must be 'sha256:' and 64 lowercase hex digits",
        ));
    }
    Ok(Some(pin))
}

/// `[auth]`, read by `airlock-oauth`'s own rules; an error names its key.
fn auth_section(value: &Value, tenant_id: &str) -> Result<airlock_oauth::AuthConfig, ConfigError> {
    table(value, "auth")?;
    let section: airlock_oauth::AuthSection = value
        .clone()
        .try_into()
        .map_err(|e: toml::de::Error| error("auth", e.message().to_owned()))?;
    section.check(Some(tenant_id)).map_err(|e| match e {
        airlock_oauth::AuthConfigError::Key { key, why } => error(&format!("auth.{key}"), why),
        other => {
            let text = other.to_string();
            error(
                "auth",
                text.strip_prefix("auth: ").unwrap_or(&text).to_owned(),
            )
        }
    })
}

const TOP_KEYS: [&str; 11] = [
    "auth",
    "console_url",
    "schema_version",
    "tenant_id",
    "principal_id",
    "scopes",
    "origin_trust",
    "approve_via_elicitation",
    "conversation_idle_seconds",
    "limits",
    "servers",
];
const SERVER_KEYS: [&str; 16] = [
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "output_trust",
    "trust_annotations",
    "default",
    "timeout_seconds",
    "max_output_bytes",
    "tools",
    "read_scope",
    "expose_unprefixed",
    "roots",
    "oauth",
];
const OAUTH_KEYS: [&str; 7] = [
    "token_endpoint_auth",
    "token_url",
    "client_id",
    "client_secret",
    "scopes",
    "audience",
    "resource",
];
const TOOL_KEYS: [&str; 7] = [
    "side_effect",
    "idempotency",
    "risk",
    "scope",
    "pin",
    "timeout_seconds",
    "max_output_bytes",
];
const CLASS_KEYS: [&str; 3] = ["side_effect", "idempotency", "risk"];
const MAX_OUTPUT: i64 = 8 * 1024 * 1024;

impl GatewayConfig {
    /// Loads the file's text; the first problem found, in key order, is the error.
    pub fn parse(text: &str) -> Result<GatewayConfig, ConfigError> {
        let root: Table = text.parse().map_err(|e: toml::de::Error| {
            error("(file)", format!("invalid TOML: {}", e.message()))
        })?;
        only_keys(&root, &TOP_KEYS, "")?;
        match root.get("schema_version") {
            Some(Value::Integer(1)) => {}
            Some(_) => return Err(error("schema_version", "must be 1")),
            None => return Err(error("schema_version", "is required")),
        }
        let tenant_id = identifier(&root, "tenant_id", "")?;
        let principal_id = identifier(&root, "principal_id", "")?;
        let mut scopes = ScopeSet::new();
        for (index, text) in strings(&root, "scopes", "")?
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let scope =
                Scope::parse(text).map_err(|e| error(&format!("scopes.{index}"), e.to_string()))?;
            scopes.insert(scope);
        }
        let origin_trust = match string(&root, "origin_trust", "")?.as_deref() {
            None | Some("external_untrusted") => TrustLevel::ExternalUntrusted,
            Some("user") => TrustLevel::User,
            Some(other) => {
                return Err(error(
                    "origin_trust",
                    format!("invalid value '{other}' (user or external_untrusted)"),
                ));
            }
        };
        let approve_via_elicitation =
            boolean(&root, "approve_via_elicitation", "")?.unwrap_or(false);
        // At least a minute (a conversation shorter than a person's pause would drop its taint
        // between two questions: over-taint is safe, under-taint is not); at most a week.
        let console_url = match string(&root, "console_url", "")? {
            None => None,
            Some(text) => Some(console_url(&text)?),
        };
        let conversation_idle_seconds =
            integer_in(&root, "conversation_idle_seconds", "", 60..=604_800)?
                .map_or(DEFAULT_CONVERSATION_IDLE_SECONDS, |n| n as u32);
        let mut limits = Limits {
            max_steps: 1000,
            max_tool_calls: 1000,
            deadline_seconds: None,
        };
        let mut conversation_calls = None;
        if let Some(value) = root.get("limits") {
            let at = "limits";
            let t = table(value, at)?;
            only_keys(t, &["max_steps", "max_tool_calls", "deadline_seconds"], at)?;
            if let Some(n) = integer_in(t, "max_steps", at, 1..=1000)? {
                limits.max_steps = n as u32;
            }
            if let Some(n) = integer_in(t, "max_tool_calls", at, 1..=10_000)? {
                limits.max_tool_calls = n as u32;
                conversation_calls = Some(n as u32);
            }
            limits.deadline_seconds =
                integer_in(t, "deadline_seconds", at, 1..=604_800)?.map(|n| n as u32);
        }
        let auth = match root.get("auth") {
            None => None,
            Some(value) => Some(auth_section(value, &tenant_id)?),
        };
        let mut servers = BTreeMap::new();
        if let Some(value) = root.get("servers") {
            for (id, server) in table(value, "servers")? {
                let at = format!("servers.{id}");
                if !is_server_id(id) {
                    return Err(error(&at, "server ids match [a-z][a-z0-9_]*"));
                }
                servers.insert(id.clone(), Self::server(id, table(server, &at)?, &at)?);
            }
        }
        if servers.is_empty() {
            return Err(error("servers", "at least one server is required"));
        }
        if servers.len() > 1
            && let Some(server) = servers
                .values()
                .find(|s: &&ServerConfig| s.exposure == Exposure::Unprefixed)
        {
            return Err(error(
                &format!("servers.{}.expose_unprefixed", server.id),
                "is valid only when the file has exactly one server",
            ));
        }
        Ok(GatewayConfig {
            tenant_id,
            principal_id,
            scopes,
            origin_trust,
            approve_via_elicitation,
            limits,
            conversation_calls,
            conversation_idle_seconds,
            console_url,
            servers,
            auth,
        })
    }

    fn server(id: &str, t: &Table, at: &str) -> Result<ServerConfig, ConfigError> {
        only_keys(t, &SERVER_KEYS, at)?;
        let transport = match (string(t, "command", at)?, string(t, "url", at)?) {
            (Some(command), None) => {
                for key in ["headers"] {
                    if t.contains_key(key) {
                        return Err(error(&join(at, key), "belongs to a url server"));
                    }
                }
                Transport::Stdio {
                    command,
                    args: strings(t, "args", at)?.unwrap_or_default(),
                    env: string_map(t, "env", at)?,
                    cwd: string(t, "cwd", at)?,
                }
            }
            (None, Some(url)) => {
                for key in ["args", "env", "cwd"] {
                    if t.contains_key(key) {
                        return Err(error(&join(at, key), "belongs to a command server"));
                    }
                }
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(error(
                        &join(at, "url"),
                        "must be an http:// or https:// URL",
                    ));
                }
                let headers = string_map(t, "headers", at)?;
                // A value may name a secret (`${env:NAME}`, `${file:/path}`); a malformed
                // reference is refused here, and references are resolved at connect time.
                for (name, value) in &headers {
                    SecretTemplate::parse(value)
                        .map_err(|e| error(&join(&join(at, "headers"), name), e.to_string()))?;
                }
                Transport::StreamableHttp { url, headers }
            }
            (Some(_), Some(_)) => {
                return Err(error(at, "has both command and url; give exactly one"));
            }
            (None, None) => return Err(error(at, "needs command or url")),
        };
        let output_trust = match string(t, "output_trust", at)?.as_deref() {
            None | Some("external_untrusted") => TrustLevel::ExternalUntrusted,
            Some("internal_tool") => TrustLevel::InternalTool,
            Some(other) => {
                return Err(error(
                    &join(at, "output_trust"),
                    format!("invalid value '{other}' (external_untrusted or internal_tool)"),
                ));
            }
        };
        let default = match t.get("default") {
            None => ToolClass::UNCONFIGURED,
            Some(value) => {
                let dat = join(at, "default");
                let d = table(value, &dat)?;
                only_keys(d, &CLASS_KEYS, &dat)?;
                class(d, &dat)?
            }
        };
        let timeout_seconds = integer_in(t, "timeout_seconds", at, 1..=3600)?
            .map_or(DEFAULT_TIMEOUT_SECONDS, |n| n as u32);
        let max_output_bytes = integer_in(t, "max_output_bytes", at, 1..=MAX_OUTPUT)?
            .map_or(DEFAULT_MAX_OUTPUT_BYTES, |n| n as u64);
        let read_scope = match string(t, "read_scope", at)? {
            None => Scope::parse(&format!("mcp.{id}.read"))
                .map_err(|e| error(&join(at, "read_scope"), e.to_string()))?,
            Some(text) => server_scope(id, &text, &join(at, "read_scope"))?,
        };
        let exposure = match boolean(t, "expose_unprefixed", at)? {
            Some(true) => Exposure::Unprefixed,
            None | Some(false) => Exposure::Prefixed,
        };
        let mut tools = BTreeMap::new();
        if let Some(value) = t.get("tools") {
            let tat = join(at, "tools");
            for (name, tool) in table(value, &tat)? {
                let at = join(&tat, name);
                let tool = table(tool, &at)?;
                only_keys(tool, &TOOL_KEYS, &at)?;
                let scope = match string(tool, "scope", &at)? {
                    None => None,
                    Some(text) => Some(server_scope(id, &text, &join(&at, "scope"))?),
                };
                tools.insert(
                    name.clone(),
                    ToolConfig {
                        class: class(tool, &at)?,
                        scope,
                        pin: pin(tool, &at)?,
                        timeout_seconds: integer_in(tool, "timeout_seconds", &at, 1..=3600)?
                            .map(|n| n as u32),
                        max_output_bytes: integer_in(
                            tool,
                            "max_output_bytes",
                            &at,
                            1..=MAX_OUTPUT,
                        )?
                        .map(|n| n as u64),
                    },
                );
            }
        }
        Ok(ServerConfig {
            id: id.to_owned(),
            output_trust,
            trust_annotations: boolean(t, "trust_annotations", at)?.unwrap_or(false),
            default,
            timeout_seconds,
            max_output_bytes,
            tools,
            read_scope,
            exposure,
            roots: roots(t, at)?,
            oauth: oauth(t, &transport, at)?,
            transport,
        })
    }
}

/// `[servers.X.oauth]`, for a url server whose headers leave `Authorization` to it.
fn oauth(t: &Table, transport: &Transport, at: &str) -> Result<Option<OAuthClient>, ConfigError> {
    let Some(value) = t.get("oauth") else {
        return Ok(None);
    };
    let at = join(at, "oauth");
    let headers = match transport {
        Transport::StreamableHttp { headers, .. } => headers,
        Transport::Stdio { .. } => return Err(error(&at, "belongs to a url server")),
    };
    if headers
        .keys()
        .any(|name| name.eq_ignore_ascii_case("authorization"))
    {
        return Err(error(
            &at,
            "sets Authorization itself; remove the Authorization header",
        ));
    }
    let o = table(value, &at)?;
    only_keys(o, &OAUTH_KEYS, &at)?;
    let required = |key: &str| {
        string(o, key, &at)?
            .filter(|v| !v.is_empty())
            .ok_or_else(|| error(&join(&at, key), "is required"))
    };
    let token_url = required("token_url")?;
    if !(token_url.starts_with("https://") || token_url.starts_with("http://")) {
        return Err(error(
            &join(&at, "token_url"),
            "must be an http:// or https:// URL",
        ));
    }
    let client_id = required("client_id")?;
    let client_secret = required("client_secret")?;
    SecretTemplate::parse(&client_secret)
        .map_err(|e| error(&join(&at, "client_secret"), e.to_string()))?;
    Ok(Some(OAuthClient {
        token_url,
        client_id,
        client_secret,
        scopes: strings(o, "scopes", &at)?.unwrap_or_default(),
        audience: string(o, "audience", &at)?,
        resource: string(o, "resource", &at)?,
        auth: match string(o, "token_endpoint_auth", &at)?.as_deref() {
            None | Some("client_secret_basic") => TokenEndpointAuth::ClientSecretBasic,
            Some("client_secret_post") => TokenEndpointAuth::ClientSecretPost,
            Some(other) => {
                return Err(error(
                    &join(&at, "token_endpoint_auth"),
                    format!("invalid value '{other}' (client_secret_basic or client_secret_post)"),
                ));
            }
        },
    }))
}

/// `roots`: absolute paths or `file://` URIs, each as the URI an MCP root names (SPEC §23).
fn roots(t: &Table, at: &str) -> Result<Vec<String>, ConfigError> {
    let listed = strings(t, "roots", at)?.unwrap_or_default();
    let at = join(at, "roots");
    let mut uris = Vec::new();
    for (i, root) in listed.into_iter().enumerate() {
        let uri = if root.starts_with("file://") {
            url::Url::parse(&root)
                .ok()
                .filter(|u| u.scheme() == "file" && u.to_file_path().is_ok())
        } else if root.starts_with('/') {
            url::Url::from_file_path(&root).ok()
        } else {
            None
        };
        let Some(uri) = uri else {
            return Err(error(
                &format!("{at}[{i}]"),
                format!("'{root}' is neither an absolute path nor a file:// URI of one"),
            ));
        };
        uris.push(uri.to_string());
    }
    Ok(uris)
}

/// A scope of server `id`: valid, and starting with `mcp.{id}.` (§19.2).
fn server_scope(id: &str, text: &str, at: &str) -> Result<Scope, ConfigError> {
    let scope = Scope::parse(text).map_err(|e| error(at, e.to_string()))?;
    if !text.starts_with(&format!("mcp.{id}.")) {
        return Err(error(at, format!("must start with 'mcp.{id}.'")));
    }
    Ok(scope)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
schema_version = 1
tenant_id = "acme"
principal_id = "alice"
scopes = ["mcp.files.read", "mcp.files.write"]
origin_trust = "user"
approve_via_elicitation = false
[limits]
max_tool_calls = 500
deadline_seconds = 86400

[servers.files]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/sandbox"]
output_trust = "external_untrusted"
trust_annotations = false
default = { side_effect = "external_write", idempotency = "non_idempotent", risk = "high" }

[servers.files.tools.read_text_file]
side_effect = "none"
idempotency = "read_only"
risk = "low"
scope = "mcp.files.read"

[servers.files.tools.write_file]
side_effect = "external_write"
idempotency = "idempotent"
risk = "medium"
scope = "mcp.files.write"
pin = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
"#;

    /// `[auth]` (issue 31): read by `airlock-oauth`'s rules, its tenant the file's unless named,
    /// and each mistake named by its key under `auth`.
    #[test]
    fn an_auth_section_takes_the_files_tenant_and_its_errors_name_their_key() {
        let section = "\n[auth]\nissuer = \"https://sso.example.com/realms/acme\"\n\
                       resource = \"https://gw.example.com/mcp\"\n\
                       jwks_url = \"https://sso.example.com/certs\"\n";
        let config = GatewayConfig::parse(&format!("{EXAMPLE}{section}")).expect("loads");
        let auth = config.auth.expect("the section");
        assert_eq!(
            auth.rules.claims.tenant,
            airlock_oauth::token::TenantRule::Fixed("acme".to_owned())
        );
        assert_eq!(auth.rules.audience, "https://gw.example.com/mcp");
        assert_eq!(GatewayConfig::parse(EXAMPLE).expect("loads").auth, None);
        for (extra, path, message) in [
            (
                "leeway_seconds = 900\n",
                "auth.leeway_seconds",
                "must be 0 to 300",
            ),
            ("audence = \"x\"\n", "auth", "unknown field `audence`"),
            (
                "jwks_file = \"/k.json\"\n",
                "auth",
                "set exactly one of jwks_url and jwks_file",
            ),
        ] {
            let error =
                GatewayConfig::parse(&format!("{EXAMPLE}{section}{extra}")).expect_err(extra);
            assert_eq!(error.path, path, "{extra}");
            assert!(
                error.message.contains(message),
                "{extra}: {}",
                error.message
            );
        }
    }

    #[test]
    fn the_spec_example_loads() {
        let config = GatewayConfig::parse(EXAMPLE).expect("loads");
        assert_eq!(config.tenant_id, "acme");
        assert_eq!(config.origin_trust, TrustLevel::User);
        assert_eq!(config.limits.max_tool_calls, 500);
        assert_eq!(config.conversation_calls, Some(500), "per conversation");
        assert_eq!(config.limits.deadline_seconds, Some(86400));
        assert_eq!(
            config.conversation_idle_seconds, DEFAULT_CONVERSATION_IDLE_SECONDS,
            "an hour unless the file says"
        );
        let idle = EXAMPLE.replacen(
            "origin_trust = \"user\"",
            "origin_trust = \"user\"\nconversation_idle_seconds = 900",
            1,
        );
        assert_eq!(
            GatewayConfig::parse(&idle)
                .expect("loads")
                .conversation_idle_seconds,
            900
        );
        assert_eq!(config.console_url, None);
        let console = EXAMPLE.replacen(
            "origin_trust = \"user\"",
            "origin_trust = \"user\"\nconsole_url = \"https://airlock.example.com/\"",
            1,
        );
        assert_eq!(
            GatewayConfig::parse(&console)
                .expect("loads")
                .console_url
                .as_deref(),
            Some("https://airlock.example.com")
        );
        let files = &config.servers["files"];
        assert_eq!(files.timeout_seconds, 60);
        assert_eq!(files.max_output_bytes, 1024 * 1024);
        assert_eq!(files.tools["read_text_file"].class, ToolClass::READ_ONLY);
        assert_eq!(
            files.tools["write_file"].class.idempotency,
            IdempotencyClass::Idempotent
        );
        assert!(
            matches!(&files.transport, Transport::Stdio { command, args, .. } if command == "npx" && args.len() == 3)
        );
    }

    /// Each broken variant names the offending key's path.
    #[test]
    fn unknown_keys_and_bad_values_name_their_path() {
        let cases: [(&str, &str, &str); 21] = [
            (
                "origin_trust = \"user\"",
                "origin_trust = \"user\"\nconversation_idle_seconds = 5",
                "conversation_idle_seconds",
            ),
            (
                "origin_trust = \"user\"",
                "origin_trust = \"user\"\nconsole_url = \"javascript:alert(1)\"",
                "console_url",
            ),
            (
                "origin_trust = \"user\"",
                "origin_trust = \"user\"\nconsole_url = \"https://a.example/?x=1\"",
                "console_url",
            ),
            (
                "trust_annotations = false",
                "trust_annotations = false\nroots = \"/srv\"",
                "servers.files.roots",
            ),
            (
                "trust_annotations = false",
                "trust_annotations = false\nroots = [\"/srv\", \"srv/relative\"]",
                "servers.files.roots[1]",
            ),
            (
                "trust_annotations = false",
                "trust_annotations = false\nroots = [\"https://example.com/srv\"]",
                "servers.files.roots[0]",
            ),
            (
                "trust_annotations = false",
                "trust_annotations = false\nread_scope = \"mcp.other.read\"",
                "servers.files.read_scope",
            ),
            (
                "trust_annotations = false",
                "trust_annotations = false\nread_scope = \"not a scope\"",
                "servers.files.read_scope",
            ),
            (
                "trust_annotations = false",
                "trust_annotations = false\nexpose_unprefixed = \"yes\"",
                "servers.files.expose_unprefixed",
            ),
            (
                "origin_trust = \"user\"",
                "origin_trust = \"user\"\ncolour = 1",
                "colour",
            ),
            ("schema_version = 1", "schema_version = 2", "schema_version"),
            (
                "max_tool_calls = 500",
                "max_tool_calls = 0",
                "limits.max_tool_calls",
            ),
            (
                "deadline_seconds = 86400",
                "deadline = 5",
                "limits.deadline",
            ),
            (
                "trust_annotations = false",
                "trust_annotations = \"no\"",
                "servers.files.trust_annotations",
            ),
            (
                "risk = \"low\"",
                "risk = \"tiny\"",
                "servers.files.tools.read_text_file.risk",
            ),
            (
                "scope = \"mcp.files.read\"",
                "scope = \"mcp.other.read\"",
                "servers.files.tools.read_text_file.scope",
            ),
            (
                "pin = \"sha256:0000000000000000000000000000000000000000000000000000000000000000\"",
                "pin = \"md5:00\"",
                "servers.files.tools.write_file.pin",
            ),
            ("[servers.files]", "[servers.Files]", "servers.Files"),
            (
                "command = \"npx\"",
                "command = \"npx\"\nurl = \"http://127.0.0.1:1/mcp\"",
                "servers.files",
            ),
            (
                "output_trust = \"external_untrusted\"",
                "output_trust = \"platform\"",
                "servers.files.output_trust",
            ),
            (
                "idempotency = \"idempotent\"",
                "idempotency = \"idempotent\"\nsize = 3",
                "servers.files.tools.write_file.size",
            ),
        ];
        for (from, to, path) in cases {
            assert!(EXAMPLE.contains(from), "{from}");
            let text = EXAMPLE.replacen(from, to, 1);
            let err = GatewayConfig::parse(&text).expect_err(path);
            assert_eq!(err.path, path, "{to}: {err}");
        }
        let err =
            GatewayConfig::parse("schema_version = 1\ntenant_id = \"a\"\nprincipal_id = \"b\"\n")
                .unwrap_err();
        assert_eq!(err.path, "servers");
        let err = GatewayConfig::parse("not toml [").unwrap_err();
        assert_eq!(err.path, "(file)");
    }

    /// SPEC §23: the roots a server is answered with outside a call are file URIs, whichever
    /// way the file names them; none when it names none.
    #[test]
    fn roots_are_file_uris_of_absolute_paths() {
        let config = GatewayConfig::parse(EXAMPLE).expect("loads");
        assert_eq!(config.servers["files"].roots, Vec::<String>::new());
        let text = EXAMPLE.replacen(
            "trust_annotations = false",
            "trust_annotations = false\nroots = [\"/srv/my repo\", \"file:///srv/other\"]",
            1,
        );
        let config = GatewayConfig::parse(&text).expect("loads");
        assert_eq!(
            config.servers["files"].roots,
            ["file:///srv/my%20repo", "file:///srv/other"]
        );
    }

    #[test]
    fn a_file_without_a_call_limit_puts_no_cap_on_a_conversation() {
        let start = EXAMPLE.find("[limits]").expect("the example has [limits]");
        let end = EXAMPLE[start..]
            .find("\n\n")
            .map_or(EXAMPLE.len(), |n| start + n);
        let without = format!("{}{}", &EXAMPLE[..start], &EXAMPLE[end..]);
        let config = GatewayConfig::parse(&without).expect("loads");
        assert_eq!(config.conversation_calls, None);
    }

    #[test]
    fn reads_need_the_servers_read_scope_unless_the_file_names_another() {
        let config = GatewayConfig::parse(EXAMPLE).expect("loads");
        assert_eq!(
            config.servers["files"].read_scope.as_str(),
            "mcp.files.read"
        );
        assert_eq!(config.servers["files"].exposure, Exposure::Prefixed);
        let text = EXAMPLE.replacen(
            "trust_annotations = false",
            "trust_annotations = false\nread_scope = \"mcp.files.resources\"",
            1,
        );
        let config = GatewayConfig::parse(&text).expect("loads");
        assert_eq!(
            config.servers["files"].read_scope.as_str(),
            "mcp.files.resources"
        );
    }

    #[test]
    fn expose_unprefixed_needs_exactly_one_server() {
        let one = EXAMPLE.replacen(
            "trust_annotations = false",
            "trust_annotations = false\nexpose_unprefixed = true",
            1,
        );
        let config = GatewayConfig::parse(&one).expect("one server may be unprefixed");
        assert_eq!(config.servers["files"].exposure, Exposure::Unprefixed);
        let two = format!("{one}\n[servers.other]\ncommand = \"x\"\n");
        let err = GatewayConfig::parse(&two).expect_err("two servers");
        assert_eq!(err.path, "servers.files.expose_unprefixed");
        assert!(err.message.contains("exactly one server"), "{err}");
        // `false` is the default and stays valid with several servers.
        let off = EXAMPLE.replacen(
            "trust_annotations = false",
            "trust_annotations = false\nexpose_unprefixed = false",
            1,
        );
        let two_off = format!("{off}\n[servers.other]\ncommand = \"x\"\n");
        assert!(GatewayConfig::parse(&two_off).is_ok());
    }

    #[test]
    fn server_ids_follow_the_grammar() {
        assert!(is_server_id("files"));
        assert!(is_server_id("a1_b"));
        for bad in ["", "1a", "Files", "a-b", "_a", "a.b"] {
            assert!(!is_server_id(bad), "{bad}");
        }
    }

    /// `[servers.X.oauth]` (issue 31): loaded for a url server, refused with its path when it
    /// is misplaced, incomplete or malformed.
    #[test]
    fn an_oauth_table_loads_for_a_url_server_and_is_refused_when_wrong() {
        let head = "schema_version = 1\ntenant_id = \"acme\"\nprincipal_id = \"alice\"\n";
        let url = "[servers.r]\nurl = \"https://mcp.example/mcp\"\n";
        let good = "[servers.r.oauth]\ntoken_url = \"https://auth.example/token\"\n\
                    client_id = \"gw\"\nclient_secret = \"${env:SECRET}\"\nscopes = [\"a\", \"b\"]\n\
                    resource = \"https://mcp.example/mcp\"\n";
        let config = GatewayConfig::parse(&format!("{head}{url}{good}")).expect("loads");
        assert_eq!(
            config.servers["r"].oauth,
            Some(OAuthClient {
                token_url: "https://auth.example/token".to_owned(),
                client_id: "gw".to_owned(),
                client_secret: "${env:SECRET}".to_owned(),
                scopes: vec!["a".to_owned(), "b".to_owned()],
                audience: None,
                resource: Some("https://mcp.example/mcp".to_owned()),
                auth: TokenEndpointAuth::ClientSecretBasic,
            })
        );
        for (text, path, message) in [
            (
                format!("{head}[servers.r]\ncommand = \"x\"\n{good}"),
                "servers.r.oauth",
                "belongs to a url server",
            ),
            (
                format!("{head}{url}headers = {{ authorization = \"Bearer x\" }}\n{good}"),
                "servers.r.oauth",
                "remove the Authorization header",
            ),
            (
                format!(
                    "{head}{url}[servers.r.oauth]\ntoken_url = \"https://a/t\"\nclient_secret = \"s\"\n"
                ),
                "servers.r.oauth.client_id",
                "is required",
            ),
            (
                format!(
                    "{head}{url}[servers.r.oauth]\ntoken_url = \"ftp://a/t\"\nclient_id = \"c\"\nclient_secret = \"s\"\n"
                ),
                "servers.r.oauth.token_url",
                "http:// or https://",
            ),
            (
                format!(
                    "{head}{url}[servers.r.oauth]\ntoken_url = \"https://a/t\"\nclient_id = \"c\"\nclient_secret = \"${{secret}}\"\n"
                ),
                "servers.r.oauth.client_secret",
                "unknown reference",
            ),
            (
                format!("{head}{url}{good}grant = \"password\"\n"),
                "servers.r.oauth.grant",
                "",
            ),
            (
                format!("{head}{url}{good}token_endpoint_auth = \"private_key_jwt\"\n"),
                "servers.r.oauth.token_endpoint_auth",
                "client_secret_basic or client_secret_post",
            ),
        ] {
            let error = GatewayConfig::parse(&text).expect_err(path);
            assert_eq!(error.path, path, "{text}");
            assert!(
                error.message.contains(message),
                "{}: {}",
                error.path,
                error.message
            );
        }
    }
}
