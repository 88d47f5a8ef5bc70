//! Entry points for the gateway's fuzz targets (`fuzz/fuzz_targets/gateway_config.rs`,
//! `client_frame.rs`) and their corpus replay (`adapters/mcp/tests/fuzz_corpus.rs`): the two
//! inputs an attacker or a careless operator controls. Each panics only when a property fails.

use airlock_core::canonical::arguments_hash;
use airlock_core::scope::ScopeSet;
use airlock_core::tool::spec::ToolVersion;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest};
use serde_json::{Value, json};

use crate::catalog::{definition_hash, entries, exposed_name, internal_name, spec_of};
use crate::config::{GatewayConfig, is_server_id};

/// Arbitrary bytes as a gateway file (SPEC §19.2): the loader never panics; an error names a
/// key path; a file that loads has valid server ids and scopes under `mcp.{server}.`, and its
/// tools classify and build valid core specs.
pub fn gateway_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let config = match GatewayConfig::parse(text) {
        Ok(config) => config,
        Err(error) => {
            assert!(!error.path.is_empty(), "an error names its key: {error}");
            return;
        }
    };
    assert!(!config.servers.is_empty());
    for (id, server) in &config.servers {
        assert!(is_server_id(id), "server id {id}");
        for (name, tool) in &server.tools {
            if let Some(scope) = &tool.scope {
                assert!(scope.as_str().starts_with(&format!("mcp.{id}.")), "{name}");
            }
            let definition = json!({"name": name, "inputSchema": {"type": "object"}});
            if let Some(internal) = internal_name(id, name) {
                let spec = spec_of(
                    server,
                    name,
                    &internal,
                    &definition,
                    ToolVersion::new(1, 0, 0),
                );
                assert!(spec.validate().is_ok(), "{internal}: {:?}", spec.validate());
            }
        }
        let tools: Vec<Value> = server
            .tools
            .keys()
            .map(|name| json!({"name": name}))
            .collect();
        let listed = entries(server, &tools, &config.scopes, &|_| false);
        assert_eq!(listed.len(), tools.len());
    }
}

/// Arbitrary bytes as one client frame (a JSON-RPC line): decoding as rmcp's transport does
/// never panics; a `tools/call` goes through what the gateway does with it before core (the
/// exposed name's lookup shapes, the arguments normalized by an upstream tool's spec and
/// hashed, deterministically), and any JSON hashes as a tool definition.
pub fn client_frame(data: &[u8]) {
    if let Ok(value) = serde_json::from_slice::<Value>(data) {
        assert_eq!(definition_hash(&value), definition_hash(&value));
    }
    let Ok(message) = serde_json::from_slice::<ClientJsonRpcMessage>(data) else {
        return;
    };
    let ClientJsonRpcMessage::Request(request) = message else {
        return;
    };
    let ClientRequest::CallToolRequest(call) = request.request else {
        return;
    };
    let name = call.params.name.as_ref();
    if let Some((server, upstream)) = name.split_once("__") {
        if let Some(exposed) = exposed_name(server, upstream) {
            assert_eq!(exposed, name);
        }
        if let Some(internal) = internal_name(server, upstream) {
            assert!(internal.starts_with("mcp."));
        }
    }
    let text = "schema_version = 1\ntenant_id = \"t\"\nprincipal_id = \"p\"\n[servers.s]\ncommand = \"x\"\n";
    let Ok(config) = GatewayConfig::parse(text) else {
        panic!("the fixed gateway file loads");
    };
    let server = &config.servers["s"];
    let spec = spec_of(
        server,
        "t",
        "mcp.s.t",
        &json!({"name": "t", "inputSchema": {"type": "object"}}),
        ToolVersion::new(1, 0, 0),
    );
    let arguments = Value::Object(call.params.arguments.unwrap_or_default());
    if let Ok(normalized) = spec.normalize_arguments(&arguments) {
        let value = Value::Object(normalized.into_iter().collect());
        assert_eq!(arguments_hash(&value), arguments_hash(&value));
    }
    let _ = entries(server, &[arguments], &ScopeSet::new(), &|_| true);
}
