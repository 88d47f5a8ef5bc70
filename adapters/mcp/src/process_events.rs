//! How the gateway records what it does outside any run (its process events): where they go
//! and what time it is. Below the gateway and the relays, which both record.

use std::sync::Arc;

use airlock_core::events::{Actor, EventType, PAYLOAD_SCHEMA_VERSION, ProcessEvent};
use airlock_core::time::Timestamp;
use serde_json::Value;

/// Where the gateway records its process events (the store, in a transaction of its own).
pub type EventSink = Arc<dyn Fn(ProcessEvent) + Send + Sync>;

/// The process's clock, for event times.
pub type Now = Arc<dyn Fn() -> Timestamp + Send + Sync>;

pub(crate) fn process_event(
    key: String,
    event_type: EventType,
    payload: Value,
    now: Timestamp,
) -> ProcessEvent {
    ProcessEvent {
        id: uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, key.as_bytes()),
        event_type,
        payload_schema_version: PAYLOAD_SCHEMA_VERSION,
        actor: Actor::process(),
        payload,
        derivation_key: key,
        created_at: now,
    }
}
