//! Reads outside the journal (SPEC §19.6): an MCP `resources/read` or `prompts/get` that a
//! gateway forwards for a live connection. Such a read is not a run step (no invocation row, no
//! checkpoint, no approval), but it passes the same two checks a call's PROPOSE makes: the
//! principal's scope, then the policy gate, as a `network_read`, `read_only`, `low` action whose
//! arguments are the URI (or the prompt's name and arguments), so a resource URI such as
//! `file:///etc/shadow` meets the hardline rules like any tool argument.
//!
//! **No parking.** A read cannot wait for a human: nothing durable holds it. A decision other
//! than `allow` (a `deny`, or a `require_approval` from the profile) refuses the read with the
//! decision's reason code; the client may retry after the operator changes the policy.
//!
//! **Taint.** What the read returned reaches the client, that is the planner, without passing
//! the journal; [`super::live::LiveConnection::note_read_content`] records its trust and the
//! connection's runs are tainted from their next step on (§8.6), durably from that step's
//! PENDING checkpoint.

use serde_json::Value;
use uuid::Uuid;

use crate::action::{JsonMap, PolicyDecision, ProposedAction, Target};
use crate::canonical::arguments_hash;
use crate::invocation::outcome::codes;
use crate::policy::{Ruleset, evaluate};
use crate::scope::{Scope, ScopeSet};
use crate::time::Timestamp;
use crate::vocab::{
    ActionKind, IdempotencyClass, PolicyDecisionType, RiskLevel, SideEffectClass, TargetKind,
    TrustLevel,
};

pub use crate::policy::upstream_read::{ReadKind, action_name, is_configured_upstream_read};

/// One read as the gateway hands it in.
#[derive(Debug, Clone, PartialEq)]
pub struct OutsideRead {
    pub server_id: String,
    pub kind: ReadKind,
    /// The scope the read needs (`mcp.{server_id}.read` unless the file says otherwise).
    pub required_scope: Scope,
    /// What the policy inspects: `{"uri": …}` or `{"name": …, "arguments": {…}}`.
    pub arguments: JsonMap,
}

/// Who reads, and when.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadContext<'a> {
    pub tenant_id: &'a str,
    pub session_id: Uuid,
    /// Any fresh id: the action's id in audit logs; nothing is stored under it.
    pub action_id: Uuid,
    pub principal_scopes: &'a ScopeSet,
    pub origin_trust: TrustLevel,
    pub now: Timestamp,
}

/// Why a read was refused: the reason code a client is told, and the explanation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason_code}: {explanation}")]
pub struct ReadRefusal {
    pub reason_code: String,
    pub explanation: String,
}

impl OutsideRead {
    /// The action the policy gate evaluates.
    pub fn action(&self, context: &ReadContext<'_>) -> ProposedAction {
        let name = action_name(&self.server_id, self.kind);
        ProposedAction {
            kind: ActionKind::ToolCall,
            action_id: context.action_id,
            tenant_id: context.tenant_id.to_owned(),
            session_id: context.session_id,
            // Not a run's step: a read belongs to the connection, not to one of its runs.
            run_id: Uuid::nil(),
            step_number: 0,
            summary: format!("Read from MCP server {} ({}).", self.server_id, self.kind),
            name,
            version: None,
            side_effect: SideEffectClass::NetworkRead,
            risk: RiskLevel::Low,
            idempotency: IdempotencyClass::ReadOnly,
            required_scopes: vec![self.required_scope.as_str().to_owned()],
            normalized_arguments_hash: arguments_hash(&Value::Object(self.arguments.clone())),
            arguments: self.arguments.clone(),
            argument_trust: Default::default(),
            origin_trust: context.origin_trust,
            target: Target {
                kind: TargetKind::McpServer,
                isolated: false,
                network_enabled: true,
                device_id: None,
                server_id: Some(self.server_id.clone()),
            },
            evaluated_at: context.now,
        }
    }

    /// Scope, then the policy gate. `Ok` carries the `allow` decision (for logs); anything else
    /// refuses the read (see the module docs).
    pub fn gate(
        &self,
        context: &ReadContext<'_>,
        ruleset: &Ruleset,
    ) -> Result<PolicyDecision, ReadRefusal> {
        if !context.principal_scopes.contains(&self.required_scope) {
            return Err(ReadRefusal {
                reason_code: codes::SCOPE_MISSING.to_owned(),
                explanation: format!(
                    "the principal does not hold scope {}",
                    self.required_scope.as_str()
                ),
            });
        }
        let decision = evaluate(&self.action(context), ruleset);
        match decision.decision {
            PolicyDecisionType::Allow => Ok(decision),
            PolicyDecisionType::RequireApproval => Err(ReadRefusal {
                reason_code: decision.reason_code,
                explanation: format!(
                    "{} A read outside a run cannot wait for an approval, so it is refused.",
                    decision.explanation
                ),
            }),
            _ => Err(ReadRefusal {
                reason_code: decision.reason_code,
                explanation: decision.explanation,
            }),
        }
    }
}

pub use crate::conversation::taints;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(kind: ReadKind, arguments: Value) -> OutsideRead {
        OutsideRead {
            server_id: "files".into(),
            kind,
            required_scope: Scope::parse("mcp.files.read").unwrap(),
            arguments: arguments.as_object().unwrap().clone(),
        }
    }

    fn gate(read: &OutsideRead, scopes: &[&str]) -> Result<PolicyDecision, ReadRefusal> {
        let scopes: ScopeSet = scopes.iter().map(|s| Scope::parse(s).unwrap()).collect();
        let context = ReadContext {
            tenant_id: "acme",
            session_id: Uuid::from_u128(1),
            action_id: Uuid::from_u128(2),
            principal_scopes: &scopes,
            origin_trust: TrustLevel::ExternalUntrusted,
            now: Timestamp::from_micros(0),
        };
        read.gate(&context, &Ruleset::shipped().unwrap())
    }

    #[test]
    fn a_configured_upstream_read_is_allowed_by_the_shipped_policy() {
        let ok = gate(
            &read(
                ReadKind::Resource,
                json!({"uri": "demo://resource/static/1"}),
            ),
            &["mcp.files.read"],
        )
        .expect("allowed");
        assert_eq!(ok.reason_code, "policy.matrix.network_read");
        let prompt = read(
            ReadKind::Prompt,
            json!({"name": "simple", "arguments": {"city": "Paris"}}),
        );
        assert!(gate(&prompt, &["mcp.files.read"]).is_ok());
    }

    #[test]
    fn a_protected_file_uri_meets_the_hardline_rules() {
        let refused = gate(
            &read(ReadKind::Resource, json!({"uri": "file:///etc/shadow"})),
            &["mcp.files.read"],
        )
        .unwrap_err();
        assert_eq!(refused.reason_code, "policy.hardline.host_path");
        let metadata = gate(
            &read(
                ReadKind::Resource,
                json!({"uri": "http://169.254.169.254/latest"}),
            ),
            &["mcp.files.read"],
        )
        .unwrap_err();
        assert_eq!(metadata.reason_code, "policy.hardline.metadata_egress");
    }

    #[test]
    fn a_read_without_its_scope_is_refused_before_the_policy() {
        let refused = gate(
            &read(ReadKind::Resource, json!({"uri": "file:///etc/shadow"})),
            &["mcp.files.call"],
        )
        .unwrap_err();
        assert_eq!(refused.reason_code, "policy.scope.missing");
    }

    #[test]
    fn only_the_named_servers_reads_count_as_configured() {
        let r = read(ReadKind::Resource, json!({"uri": "x"}));
        let context_scopes = ScopeSet::new();
        let context = ReadContext {
            tenant_id: "acme",
            session_id: Uuid::nil(),
            action_id: Uuid::nil(),
            principal_scopes: &context_scopes,
            origin_trust: TrustLevel::User,
            now: Timestamp::from_micros(0),
        };
        let action = r.action(&context);
        assert!(is_configured_upstream_read(&action));
        let mut other = action.clone();
        other.target.server_id = Some("other".into());
        assert!(
            !is_configured_upstream_read(&other),
            "another server's name"
        );
        let mut tool = action.clone();
        tool.name = "mcp.files.read_text_file".into();
        assert!(!is_configured_upstream_read(&tool), "a tool is not a read");
        let mut unnamed = action;
        unnamed.target.server_id = None;
        assert!(!is_configured_upstream_read(&unnamed));
        assert_eq!(
            action_name("files", ReadKind::Prompt),
            "mcp.files.prompt.get"
        );
    }

    #[test]
    fn an_mcp_tool_classed_network_read_still_meets_the_matrix_deny() {
        // The tool pipeline's target names no server, and a tool's name has three segments:
        // the allowance is the gateway's reads', not every `network_read` of an MCP server.
        let r = read(ReadKind::Resource, json!({"uri": "https://example.com/"}));
        let scopes = ScopeSet::new();
        let context = ReadContext {
            tenant_id: "acme",
            session_id: Uuid::nil(),
            action_id: Uuid::nil(),
            principal_scopes: &scopes,
            origin_trust: TrustLevel::User,
            now: Timestamp::from_micros(0),
        };
        let mut tool = r.action(&context);
        tool.name = "mcp.files.fetch".into();
        tool.target = Target::for_kind(TargetKind::McpServer);
        let decision = evaluate(&tool, &Ruleset::shipped().unwrap());
        assert_eq!(decision.decision, PolicyDecisionType::Deny);
        assert_eq!(decision.reason_code, "policy.matrix.network_read");
        let allowed = evaluate(&r.action(&context), &Ruleset::shipped().unwrap());
        assert_eq!(allowed.decision, PolicyDecisionType::Allow);
    }

    #[test]
    fn untrusted_and_knowledge_content_taints() {
        assert!(taints(TrustLevel::ExternalUntrusted));
        assert!(taints(TrustLevel::Knowledge));
        assert!(!taints(TrustLevel::InternalTool));
        assert!(!taints(TrustLevel::User));
    }
}
