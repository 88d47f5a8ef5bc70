//! How a read of a configured MCP upstream is named (SPEC §19.6): the gateway's reads outside
//! the journal are actions `mcp.{server}.resource.read` / `mcp.{server}.prompt.get`, and the
//! matrix condition `host_on_allowlist` recognizes them by that name and their class.

use crate::facts::ActionFacts;
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
pub fn is_configured_upstream_read(action: &(impl ActionFacts + ?Sized)) -> bool {
    let Some(server) = action.target_server_id() else {
        return false;
    };
    *action.target_kind() == TargetKind::McpServer
        && action.side_effect() == SideEffectClass::NetworkRead
        && action.idempotency() == IdempotencyClass::ReadOnly
        && [ReadKind::Resource, ReadKind::Prompt]
            .iter()
            .any(|kind| is_action_name(action.name(), server, *kind))
}

/// Whether `name` is [`action_name`]`(server_id, kind)`, compared piece by piece (no `String`).
fn is_action_name(name: &str, server_id: &str, kind: ReadKind) -> bool {
    name.strip_prefix("mcp.")
        .and_then(|rest| rest.strip_prefix(server_id))
        .and_then(|rest| rest.strip_prefix('.'))
        == Some(kind.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The piecewise comparison is the equality with the built name, for servers whose ids
    /// contain dots and for names one piece off.
    #[test]
    fn a_name_is_a_read_exactly_when_it_equals_the_built_name() {
        let servers = ["files", "a.b", "a", "", "mcp"];
        let names = [
            "mcp.files.resource.read",
            "mcp.files.prompt.get",
            "mcp.a.b.resource.read",
            "mcp.a.resource.read",
            "mcp..prompt.get",
            "mcp.mcp.prompt.get",
            "mcp.files.resource.read.x",
            "mcp.filesresource.read",
            "files.resource.read",
            "mcp.files.tool",
        ];
        for server in servers {
            for name in names {
                for kind in [ReadKind::Resource, ReadKind::Prompt] {
                    assert_eq!(
                        is_action_name(name, server, kind),
                        name == action_name(server, kind),
                        "{name} for {server:?} {kind}"
                    );
                }
            }
        }
    }
}
