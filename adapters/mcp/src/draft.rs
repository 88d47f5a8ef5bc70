//! `airlock mcp init`: a gateway file drafted from what one upstream server says of its tools
//! (issue 27), for a person to review before serving it. Writing a table per tool by hand is
//! the slowest part of a first gateway file (server-filesystem has 14 tools); the server's own
//! annotations give a starting class for each:
//!
//! | annotations | side effect | idempotency | risk | scope |
//! |---|---|---|---|---|
//! | `readOnlyHint: true` | `none` | `read_only` | `low` | `mcp.{server}.read` |
//! | `destructiveHint: true` | `external_delete` | `non_idempotent` | `high` | `mcp.{server}.write` |
//! | `idempotentHint: true` | `external_write` | `idempotent` | `medium` | `mcp.{server}.write` |
//! | none of these | `external_write` | `non_idempotent` | `high` (the gateway's default) | `mcp.{server}.write` |
//!
//! An untrusted server can lie in its annotations (the MCP specification says clients must
//! treat them as untrusted), so the file says, at its top, that every class must be reviewed;
//! the gateway itself never trusts annotations unless a server's `trust_annotations` says so.
//! Each table carries the tool's `pin` (its definition hash now), so a later change of the
//! definition unlists it until a person looks again, and the first line of its description as
//! a comment. Every name and value is written as a TOML string literal, whatever it holds.

use serde_json::Value;

use crate::catalog::definition_hash;

/// How the gateway reaches the upstream, as the file will say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    Stdio { command: String, args: Vec<String> },
    StreamableHttp { url: String },
}

/// Whether a drafted tool reads or writes, for its scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// A drafted class: side effect, idempotency, risk and whether it reads or writes.
fn drafted_class(
    annotations: Option<&Value>,
) -> (&'static str, &'static str, &'static str, Access) {
    let hint = |name: &str| {
        annotations
            .and_then(|a| a.get(name))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    if hint("readOnlyHint") {
        ("none", "read_only", "low", Access::Read)
    } else if hint("destructiveHint") {
        ("external_delete", "non_idempotent", "high", Access::Write)
    } else if hint("idempotentHint") {
        ("external_write", "idempotent", "medium", Access::Write)
    } else {
        ("external_write", "non_idempotent", "high", Access::Write)
    }
}

/// `text` as a one-line TOML basic string (valid as a value and as a quoted key): `\` and `"`
/// escaped, every control character as `\uXXXX`.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `text`'s first line, made safe for a `#` comment (no control characters), at most 100
/// characters.
fn comment(text: &str) -> String {
    let first = text.lines().next().unwrap_or_default().trim();
    let mut safe: String = first
        .chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect();
    if safe.chars().count() > 100 {
        safe = safe.chars().take(99).collect::<String>() + "…";
    }
    safe
}

/// The gateway file for `server` (its id, already checked to match `[a-z][a-z0-9_]*`) reached
/// through `upstream`, acting as `tenant`/`principal`, with a table for each of `tools` (the
/// definitions the server listed, in its order).
pub fn gateway_file(
    server: &str,
    upstream: &Upstream,
    tenant: &str,
    principal: &str,
    tools: &[Value],
) -> String {
    let read = format!("mcp.{server}.read");
    let write = format!("mcp.{server}.write");
    let mut out = String::new();
    out.push_str(&format!(
        "# Drafted by `airlock mcp init` from what the server {server} says of its {} tool(s).\n",
        tools.len()
    ));
    out.push_str(
        "# REVIEW EVERY CLASS BELOW before serving this file: each was drafted from the tool's own\n\
         # annotations (readOnlyHint, destructiveHint, idempotentHint), which an untrusted server\n\
         # can lie about. A tool that changes anything must not be classed `none`/`read_only`.\n\
         # Each `pin` is the tool's definition hash today: a changed definition is unlisted and\n\
         # refused until you review it and update the pin (`airlock mcp tools` prints the new one).\n\n",
    );
    out.push_str("schema_version = 1\n");
    out.push_str(&format!("tenant_id = {}\n", quoted(tenant)));
    out.push_str(&format!("principal_id = {}\n", quoted(principal)));
    out.push_str(&format!(
        "scopes = [{}, {}]\n",
        quoted(&read),
        quoted(&write)
    ));
    out.push_str(&format!("\n[servers.{server}]\n"));
    match upstream {
        Upstream::Stdio { command, args } => {
            out.push_str(&format!("command = {}\n", quoted(command)));
            let args: Vec<String> = args.iter().map(|a| quoted(a)).collect();
            out.push_str(&format!("args = [{}]\n", args.join(", ")));
        }
        Upstream::StreamableHttp { url } => {
            out.push_str(&format!("url = {}\n", quoted(url)));
        }
    }
    out.push_str(
        "# output_trust = \"external_untrusted\" (the default): its results taint the run, so a\n\
         # later effect needs approval. Say \"internal_tool\" only for a server you trust.\n",
    );
    for tool in tools {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        let (side_effect, idempotency, risk, access) = drafted_class(tool.get("annotations"));
        let scope = match access {
            Access::Read => &read,
            Access::Write => &write,
        };
        out.push('\n');
        if let Some(description) = tool.get("description").and_then(Value::as_str) {
            let line = comment(description);
            if !line.is_empty() {
                out.push_str(&format!("# {line}\n"));
            }
        }
        out.push_str(&format!("[servers.{server}.tools.{}]\n", quoted(name)));
        out.push_str(&format!("side_effect = {}\n", quoted(side_effect)));
        out.push_str(&format!("idempotency = {}\n", quoted(idempotency)));
        out.push_str(&format!("risk = {}\n", quoted(risk)));
        out.push_str(&format!("scope = {}\n", quoted(scope)));
        out.push_str(&format!("pin = {}\n", quoted(&definition_hash(tool))));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GatewayConfig;
    use serde_json::json;

    #[test]
    fn annotations_draft_classes_and_the_file_loads_as_written() {
        let tools = vec![
            json!({"name": "read_text_file", "description": "Read a file.\nMore.", "annotations": {"readOnlyHint": true}}),
            json!({"name": "delete-all", "annotations": {"destructiveHint": true}}),
            json!({"name": "write_file", "annotations": {"idempotentHint": true, "destructiveHint": false}}),
            json!({"name": "odd \"name\"\n", "description": "# not a key = 1\u{1b}[2J"}),
        ];
        let text = gateway_file(
            "files",
            &Upstream::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "a \"b\"".into()],
            },
            "acme",
            "alice",
            &tools,
        );
        assert!(text.contains("REVIEW EVERY CLASS"), "{text}");
        let config = GatewayConfig::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let server = &config.servers["files"];
        let class = |name: &str| {
            let c = &server.tools[name].class;
            (
                c.side_effect.as_str(),
                c.idempotency.as_str(),
                c.risk.as_str(),
            )
        };
        assert_eq!(class("read_text_file"), ("none", "read_only", "low"));
        assert_eq!(
            class("delete-all"),
            ("external_delete", "non_idempotent", "high")
        );
        assert_eq!(
            class("write_file"),
            ("external_write", "idempotent", "medium")
        );
        assert_eq!(
            class("odd \"name\"\n"),
            ("external_write", "non_idempotent", "high")
        );
        assert_eq!(
            server.tools["read_text_file"]
                .scope
                .as_ref()
                .map(|s| s.as_str()),
            Some("mcp.files.read")
        );
        assert_eq!(
            server.tools["read_text_file"].pin.as_deref(),
            Some(definition_hash(&tools[0]).as_str())
        );
        // The comment is one line, its control characters escaped.
        assert!(text.contains("# Read a file.\n"), "{text}");
        assert!(text.contains("# # not a key = 1\\u{1b}[2J\n"), "{text}");
    }
}
