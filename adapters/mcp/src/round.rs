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
//! A 2025-11-25 upstream asks its requests in the call instead (server-to-client requests),
//! and waits for each answer. For a 2026-07-28 client the gateway answers the client's request
//! with the upstream's request as an input-required round too, while it holds the upstream's
//! request open ([`HeldCalls`]); the state it seals names the held round, and only the process
//! holding it can answer: a retry that reaches another gateway process is refused (−32602,
//! saying so). The client's answer goes upstream, and the retry waits for the call's answer (or
//! the upstream's next request, another round). A round not answered within
//! [`airlock_core::conversation::request_state::RELAY_STATE_SECONDS`] (or the call's timeout)
//! is let go: the upstream hears that the client did not answer.
//!
//! A 2025-11-25 client is asked the upstream's requests in the call instead (server-to-client
//! requests, [`crate::relay`]), and is never answered `input_required`.
//!
//! **What the upstream is told the client can do.** On a 2026-07-28 upstream each forwarded
//! request names, in `_meta`, the capabilities of the client it is made for (what the gateway
//! relays, narrowed to what that client declared), so the upstream asks only what the client
//! can answer.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use airlock_core::connection::live::Ticket;
use rmcp::model::{ClientCapabilities, InputRequest, InputResponses, RequestMetaObject};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// The key of a held upstream request in the client's `inputRequests`.
pub const HELD_INPUT: &str = "upstream";

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

/// A 2025-11-25 upstream's request (sampling, elicitation, roots) made during a 2026-07-28
/// client's call. That client cannot be sent it, so its request is answered it as an
/// input-required round while the upstream's request stays open in this process; the
/// client's retry brings the answer (`answer`), which goes upstream.
pub struct HeldRequest {
    pub request: InputRequest,
    pub answer: oneshot::Sender<Value>,
}

/// A 2026-07-28 client's call whose 2025-11-25 upstream waits, in this process, for the
/// client's answer to `request`.
pub struct HeldCall {
    /// What the upstream asked (asked again if the retry brings no answer to it).
    pub request: InputRequest,
    /// Where the answer goes upstream.
    pub answer: oneshot::Sender<Value>,
    /// The call's answer, when it comes.
    pub ticket: Ticket,
    /// The upstream's next requests in the same call.
    pub asks: mpsc::UnboundedReceiver<HeldRequest>,
    /// Keeps the call's relays routed to its client while no request of it is open (its
    /// registration with the process's clients).
    pub registration: Box<dyn std::any::Any + Send>,
    until: Instant,
}

impl HeldCall {
    pub fn new(
        asked: HeldRequest,
        ticket: Ticket,
        asks: mpsc::UnboundedReceiver<HeldRequest>,
        registration: Box<dyn std::any::Any + Send>,
        for_at_most: Duration,
    ) -> HeldCall {
        HeldCall {
            request: asked.request,
            answer: asked.answer,
            ticket,
            asks,
            registration,
            until: Instant::now() + for_at_most,
        }
    }
}

/// The held calls of this process, by the id of the state that names them.
#[derive(Default)]
pub struct HeldCalls(Mutex<BTreeMap<String, HeldCall>>);

impl HeldCalls {
    /// Holds `call` under `state_id`; lets go of those whose time passed (their upstream
    /// requests end unanswered).
    pub fn hold(&self, state_id: String, call: HeldCall) {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        held.retain(|_, call| call.until > now);
        held.insert(state_id, call);
    }

    /// The call `state_id` names, if this process holds it still.
    pub fn take(&self, state_id: &str) -> Option<HeldCall> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(state_id)
    }
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
