//! The body of an upstream tool (SPEC §19.2, §9.3): core's pipeline calls it only after START
//! committed (with the watermark when the tool has a side effect); it forwards the call to its
//! server and returns the upstream's result as the structured result, unchanged.
//!
//! **Failures** (the unknown-outcome rule of §9.3 is core's; this body only says what it knows):
//! nothing sent → `tool.upstream_unavailable`; the upstream answered a JSON-RPC error (it ran
//! nothing) → `tool.upstream_error`, or `tool.arguments_invalid` for −32602, or
//! `tool.client_capability_missing` for −32021 (the client is answered that error, §23); sent and no answer
//! (the connection broke, a reply that is not a tool result) → `outcome_unknown` for a tool with a
//! side effect, `tool.upstream_error` for one without; no answer in time → `timeout`, which
//! core turns UNCERTAIN for a watermarked non-idempotent call. An oversized result is refused
//! by core's step 11 (`tool.output_invalid`).
//!
//! **Relays.** The body finds the live client whose request the call serves (by its session,
//! run and step) and hands it to the upstream, which relays the call's in-call traffic to it
//! (SPEC §19.6, [`crate::relay`]).

use std::sync::Arc;
use std::time::Duration;

use airlock_core::action::JsonMap;
use airlock_core::ports::{BoxFut, Tool, ToolContext, ToolFailure, ToolSuccess};
use airlock_core::tool::spec::ToolSpec;
use airlock_core::vocab::{SideEffectClass, ToolFailureKind};

use crate::relay::Clients;
use crate::upstream::{CallError, Upstream};

/// JSON-RPC's "invalid params".
const INVALID_PARAMS: i32 = -32602;

/// MCP 2026-07-28's `MissingRequiredClientCapability`: the upstream needs something of the
/// client it did not declare (SPEC §23); passed on to the client as that error, since only the
/// client can change what it declares.
const MISSING_CLIENT_CAPABILITY: i32 = -32021;

/// The reason code of a call the upstream refused for a client capability the client did not
/// declare ([`MISSING_CLIENT_CAPABILITY`]).
pub const CLIENT_CAPABILITY_MISSING: &str = "tool.client_capability_missing";

/// One upstream tool at one registered version.
pub struct UpstreamTool {
    spec: ToolSpec,
    upstream_name: String,
    upstream: Arc<Upstream>,
    clients: Arc<Clients>,
}

impl UpstreamTool {
    pub fn new(
        spec: ToolSpec,
        upstream_name: String,
        upstream: Arc<Upstream>,
        clients: Arc<Clients>,
    ) -> UpstreamTool {
        UpstreamTool {
            spec,
            upstream_name,
            upstream,
            clients,
        }
    }
}

/// The reason code of a −32021 refusal: [`CLIENT_CAPABILITY_MISSING`], then each capability
/// the upstream's `data.requiredCapabilities` names (a name of lowercase letters and `_` only;
/// others are left out), so the client can be told which without keeping the upstream's error.
fn missing_capability_code(data: Option<&serde_json::Value>) -> String {
    let mut code = CLIENT_CAPABILITY_MISSING.to_owned();
    let named = data
        .and_then(|d| d.get("requiredCapabilities"))
        .and_then(serde_json::Value::as_object);
    for name in named.into_iter().flat_map(|m| m.keys()) {
        if !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            code.push('.');
            code.push_str(name);
        }
    }
    code
}

/// The capabilities a reason code of [`missing_capability_code`] names, as the
/// `requiredCapabilities` of the −32021 the client is answered; `None` for another code.
pub fn required_capabilities(reason_code: &str) -> Option<serde_json::Value> {
    let rest = reason_code.strip_prefix(CLIENT_CAPABILITY_MISSING)?;
    if !(rest.is_empty() || rest.starts_with('.')) {
        return None;
    }
    let named: serde_json::Map<String, serde_json::Value> = rest
        .split('.')
        .filter(|name| !name.is_empty())
        .map(|name| (name.to_owned(), serde_json::json!({})))
        .collect();
    Some(serde_json::json!({"requiredCapabilities": named}))
}

/// What a forwarded call's error means for the row.
pub fn failure_of(error: &CallError, side_effect: SideEffectClass) -> ToolFailure {
    match error {
        CallError::NotSent(detail) => ToolFailure::new(
            ToolFailureKind::UpstreamError,
            "tool.upstream_unavailable",
            detail.clone(),
        ),
        CallError::Rejected { code, message, .. } if *code == INVALID_PARAMS => ToolFailure::new(
            ToolFailureKind::InvalidArguments,
            "tool.arguments_invalid",
            message.clone(),
        ),
        CallError::Rejected {
            code,
            message,
            data,
        } if *code == MISSING_CLIENT_CAPABILITY => ToolFailure::new(
            ToolFailureKind::UpstreamError,
            &missing_capability_code(data.as_ref()),
            message.clone(),
        ),
        CallError::Rejected { code, message, .. } => ToolFailure::new(
            ToolFailureKind::UpstreamError,
            "tool.upstream_error",
            format!("{code}: {message}"),
        ),
        CallError::Lost(detail) if side_effect != SideEffectClass::None => ToolFailure::new(
            ToolFailureKind::OutcomeUnknown,
            "tool.outcome_unknown",
            detail.clone(),
        ),
        CallError::Lost(detail) => ToolFailure::new(
            ToolFailureKind::UpstreamError,
            "tool.upstream_error",
            detail.clone(),
        ),
        CallError::TimedOut(after) => ToolFailure::new(
            ToolFailureKind::Timeout,
            "tool.timeout",
            format!("no answer within {after:?}"),
        ),
    }
}

impl Tool for UpstreamTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn invoke<'a>(
        &'a self,
        ctx: &'a ToolContext<'a>,
        args: &'a JsonMap,
    ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>> {
        Box::pin(async move {
            let arguments = args.clone().into_iter().collect();
            let timeout = Duration::from_millis(self.spec.timeout_ms);
            let client = self
                .clients
                .link_of(ctx.session_id, ctx.run_id, ctx.step_number);
            match self
                .upstream
                .call(&self.upstream_name, arguments, timeout, client)
                .await
            {
                Ok(structured) => Ok(ToolSuccess {
                    structured,
                    trust: None,
                }),
                Err(error) => Err(failure_of(&error, self.spec.side_effect)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_what_the_gateway_knows_of_the_effect() {
        let lost = CallError::Lost("closed".into());
        assert_eq!(
            failure_of(&lost, SideEffectClass::ExternalWrite).kind,
            ToolFailureKind::OutcomeUnknown,
            "a sent write without an answer may have happened"
        );
        assert_eq!(
            failure_of(&lost, SideEffectClass::None).kind,
            ToolFailureKind::UpstreamError
        );
        let invalid = CallError::Rejected {
            code: INVALID_PARAMS,
            message: "bad".into(),
            data: None,
        };
        assert_eq!(
            failure_of(&invalid, SideEffectClass::ExternalWrite).reason_code,
            "tool.arguments_invalid"
        );
        let timed_out = CallError::TimedOut(Duration::from_secs(1));
        assert_eq!(
            failure_of(&timed_out, SideEffectClass::ExternalWrite).kind,
            ToolFailureKind::Timeout
        );
        let missing = CallError::Rejected {
            code: MISSING_CLIENT_CAPABILITY,
            message: "needs sampling".into(),
            data: Some(
                serde_json::json!({"requiredCapabilities": {"sampling": {}, "Bad.Name": {}}}),
            ),
        };
        let code = failure_of(&missing, SideEffectClass::None).reason_code;
        assert_eq!(code, "tool.client_capability_missing.sampling");
        assert_eq!(
            required_capabilities(&code),
            Some(serde_json::json!({"requiredCapabilities": {"sampling": {}}}))
        );
        assert_eq!(required_capabilities("tool.upstream_error"), None);
        assert_eq!(
            required_capabilities("tool.client_capability_missingx"),
            None
        );
        let not_sent = CallError::NotSent("gone".into());
        assert_eq!(
            failure_of(&not_sent, SideEffectClass::ExternalWrite).reason_code,
            "tool.upstream_unavailable"
        );
    }
}
