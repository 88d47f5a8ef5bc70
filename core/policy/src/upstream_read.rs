//! How a read of a configured MCP upstream is named (SPEC §19.6): the gateway's reads outside
//! the journal are actions `mcp.{server}.resource.read` / `mcp.{server}.prompt.get`, and the
//! matrix condition `host_on_allowlist` recognizes them by that name and their class.

use crate::action::ProposedAction;
use crate::vocab::{IdempotencyClass, SideEffectClass, TargetKind};

wire_enum! {
    /// What a read outside the journal fetches.
    ReadKind: "read kind" {
        /// `resources/read`: the arguments are `{"uri": …}`.
        Resource = "resource.read",
        /// `prompts/get`: the arguments are `{"name": …, "arguments": {…}}`.
        Prompt = "prompt.get",
    }
}

/// `mcp.{server_id}.resource.read` or `mcp.{server_id}.prompt.get`: the internal name of a
/// server's reads (policy, audit). A tool's internal name has three segments, so these never
/// collide with one.
pub fn action_name(server_id: &str, kind: ReadKind) -> String {
    format!("mcp.{server_id}.{}", kind.as_str())
}

/// Whether `action` is a read of an upstream the operator configured: the target names the
/// server and the action's name is that server's read. Used by the matrix condition
/// `host_on_allowlist` (the upstream is in the operator's file, no argument names it).
pub fn is_configured_upstream_read(action: &ProposedAction) -> bool {
    let Some(server) = action.target.server_id.as_deref() else {
        return false;
    };
    action.target.kind == TargetKind::McpServer
        && action.side_effect == SideEffectClass::NetworkRead
        && action.idempotency == IdempotencyClass::ReadOnly
        && [ReadKind::Resource, ReadKind::Prompt]
            .iter()
            .any(|kind| action.name == action_name(server, *kind))
}
