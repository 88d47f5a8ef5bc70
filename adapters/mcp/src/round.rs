//! An upstream's input-required round relayed to a 2026-07-28 client (SPEC §23).
//!
//! A 2026-07-28 client cannot be sent requests, so when an upstream answers its request
//! (`tools/call`, `prompts/get`, `resources/read`) with `input_required`, the gateway answers
//! the client the same: the upstream's input requests as they are, and a `requestState` of
//! the gateway's own that carries the upstream's state sealed inside it
//! ([`airlock_core::conversation::request_state::SealedRelay`]). The client answers and sends
//! the request again with that state; the gateway opens it, checks it is this principal's state
//! for this very request, unexpired and unused, and forwards the retry with the client's
//! answers and the upstream's own state ([`Round`]). A retried call is a new call to the gate.
//!
//! A 2025-11-25 client is asked the upstream's requests in the call instead (server-to-client
//! requests, [`crate::relay`]), and is never answered `input_required`.
//!
//! **What the upstream is told the client can do.** On a 2026-07-28 upstream each forwarded
//! request names, in `_meta`, the capabilities of the client it is made for (what the gateway
//! relays, narrowed to what that client declared), so the upstream asks only what the client
//! can answer.

use rmcp::model::{ClientCapabilities, InputResponses, RequestMetaObject};

/// The answers a retried request carries upstream: the client's `inputResponses`, and the
/// upstream's own `requestState` from the gateway's sealed one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Round {
    pub input_responses: Option<InputResponses>,
    pub upstream_state: Option<String>,
}

impl Round {
    /// Nothing to carry: a first request.
    pub fn is_empty(&self) -> bool {
        self.input_responses.is_none() && self.upstream_state.is_none()
    }
}

/// What a request made for a client that declared `declared` tells a 2026-07-28 upstream the
/// client can do: the capabilities the gateway relays (sampling, roots, elicitation), each only
/// if the client declared it. Nothing else the client declared (tasks, extensions) goes
/// upstream: those are the gateway's own business with its client.
pub fn relayed_capabilities(declared: &ClientCapabilities) -> ClientCapabilities {
    let mut capabilities = ClientCapabilities::default();
    capabilities.sampling = declared.sampling.clone();
    capabilities.roots = declared.roots.clone();
    capabilities.elicitation = declared.elicitation.clone();
    capabilities
}

/// The `_meta` that names `declared`'s relayed capabilities on a forwarded request.
pub fn capabilities_meta(declared: &ClientCapabilities) -> RequestMetaObject {
    let mut meta = RequestMetaObject::new();
    meta.set_client_capabilities(relayed_capabilities(declared));
    meta
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ElicitationCapability, SamplingCapability};

    #[test]
    fn the_upstream_hears_only_what_the_client_declared_and_the_gateway_relays() {
        let mut declared = ClientCapabilities::default();
        declared.sampling = Some(SamplingCapability::default());
        let relayed = relayed_capabilities(&declared);
        assert!(relayed.sampling.is_some());
        assert!(relayed.elicitation.is_none(), "not declared, not claimed");
        assert!(relayed.roots.is_none());
        declared.elicitation = Some(ElicitationCapability::new());
        let meta = serde_json::to_value(capabilities_meta(&declared)).unwrap_or_default();
        let named = &meta["io.modelcontextprotocol/clientCapabilities"];
        assert!(named.get("elicitation").is_some(), "{meta}");
        assert!(named.get("sampling").is_some(), "{meta}");
        assert!(named.get("extensions").is_none(), "{meta}");
    }
}
