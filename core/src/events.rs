//! Events (SPEC §13): the per-session conversation stream and the process stream, with their
//! derivation keys. Events commit in the same transaction as the state change they report.

use serde_json::{Value, json};

use crate::ids::{ApprovalId, InvocationId, RunId, SessionId};
use crate::time::Timestamp;
use crate::tx_error::TxError;
use crate::vocab::ActorType;

airlock_policy::wire_enum! {
    /// Every event type of SPEC §13.1 and §13.3, and the process events of issue 32's
    /// notification targets (`notify.*`), which the specification does not list.
    EventType: "event type" {
        RunQueued = "run.queued",
        RunCheckpointed = "run.checkpointed",
        RunStarted = "run.started",
        RunCancelRequested = "run.cancel_requested",
        RunWaitingForApproval = "run.waiting_for_approval",
        RunRequeued = "run.requeued",
        RunCompleted = "run.completed",
        RunFailed = "run.failed",
        RunCancelled = "run.cancelled",
        ToolCallProposed = "tool.call.proposed",
        ToolCallAuthorized = "tool.call.authorized",
        ToolCallStarted = "tool.call.started",
        ToolCallCompleted = "tool.call.completed",
        ToolCallFailed = "tool.call.failed",
        ToolCallUncertain = "tool.call.uncertain",
        ToolCallDenied = "tool.call.denied",
        ToolCallSettled = "tool.call.settled",
        ApprovalRequested = "approval.requested",
        ApprovalResolved = "approval.resolved",
        ApprovalExpired = "approval.expired",
        ApprovalCancelled = "approval.cancelled",
        ApprovalInvalidated = "approval.invalidated",
        PolicyProfileLoaded = "policy.profile.loaded",
        PolicyShadowDiff = "policy.shadow.diff",
        McpConnectionOpened = "mcp.connection.opened",
        McpConnectionClosed = "mcp.connection.closed",
        McpToolRegistered = "mcp.tool.registered",
        McpToolPinMismatch = "mcp.tool.pin_mismatch",
        McpUpstreamRequest = "mcp.upstream.request",
        McpTaskOpened = "mcp.task.opened",
        McpStateKeyRotated = "mcp.state_key.rotated",
        McpRequestStateUsed = "mcp.request_state.used",
        ConversationTainted = "conversation.tainted",
        ConversationTaintCleared = "conversation.taint_cleared",
        NotifyTargetAdded = "notify.target.added",
        NotifyTargetRemoved = "notify.target.removed",
        NotifyDeliveryGivenUp = "notify.delivery.given_up",
    }
}

/// Who caused an event: the type and, for principals and workers, their id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub actor_type: ActorType,
    pub actor_id: Option<String>,
}

impl Actor {
    pub fn principal(id: &str) -> Actor {
        Actor {
            actor_type: ActorType::Principal,
            actor_id: Some(id.to_owned()),
        }
    }
    pub fn worker(id: &str) -> Actor {
        Actor {
            actor_type: ActorType::Worker,
            actor_id: Some(id.to_owned()),
        }
    }
    pub fn application() -> Actor {
        Actor {
            actor_type: ActorType::Application,
            actor_id: None,
        }
    }
    pub fn maintenance() -> Actor {
        Actor {
            actor_type: ActorType::Maintenance,
            actor_id: None,
        }
    }
    pub fn process() -> Actor {
        Actor {
            actor_type: ActorType::Process,
            actor_id: None,
        }
    }
}

/// An event about to be appended; the store assigns `id` and `sequence`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub session_id: SessionId,
    pub run_id: Option<RunId>,
    pub event_type: EventType,
    pub actor: Actor,
    pub payload: Value,
    pub derivation_key: Option<String>,
    pub created_at: Timestamp,
}

impl NewEvent {
    /// SPEC §13.1: appending under a derivation key that is already stored returns the stored
    /// event when its type, run and payload are this one's, and is a `Conflict` otherwise. A
    /// store calls this when it finds the key, before anything else.
    pub fn repeat_of(&self, stored: Event) -> Result<Event, TxError> {
        if stored.event_type == self.event_type
            && stored.run_id == self.run_id
            && stored.payload == self.payload
        {
            return Ok(stored);
        }
        Err(TxError::Conflict(format!(
            "events: derivation key {} already names a different event",
            self.derivation_key.as_deref().unwrap_or_default()
        )))
    }

    /// The event as stored under the `id` and `sequence` a store assigned it.
    pub fn stored_as(&self, id: i64, sequence: u64) -> Event {
        Event {
            id,
            session_id: self.session_id,
            run_id: self.run_id,
            sequence,
            event_type: self.event_type,
            payload_schema_version: PAYLOAD_SCHEMA_VERSION,
            actor: self.actor.clone(),
            payload: self.payload.clone(),
            derivation_key: self.derivation_key.clone(),
            created_at: self.created_at,
        }
    }
}

/// The payload schema version of every event v1 writes (SPEC §13.1, §13.3).
pub const PAYLOAD_SCHEMA_VERSION: u32 = 1;

/// A stored conversation event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: i64,
    pub session_id: SessionId,
    pub run_id: Option<RunId>,
    pub sequence: u64,
    pub event_type: EventType,
    pub payload_schema_version: u32,
    pub actor: Actor,
    pub payload: Value,
    pub derivation_key: Option<String>,
    pub created_at: Timestamp,
}

impl Event {
    /// The JSON envelope of SPEC §13.1, as `runs events` prints it.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "session_id": self.session_id.to_string(),
            "run_id": self.run_id.map(|r| r.to_string()),
            "sequence": self.sequence,
            "event_type": self.event_type.as_str(),
            "payload_schema_version": self.payload_schema_version,
            "actor_type": self.actor.actor_type.as_str(),
            "actor_id": self.actor.actor_id,
            "payload": self.payload,
            "derivation_key": self.derivation_key,
            "created_at": self.created_at.to_string(),
        })
    }
}

/// A process-wide event (SPEC §13.3); its derivation key is required.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessEvent {
    pub id: uuid::Uuid,
    pub event_type: EventType,
    pub payload_schema_version: u32,
    pub actor: Actor,
    pub payload: Value,
    pub derivation_key: String,
    pub created_at: Timestamp,
}

impl ProcessEvent {
    /// SPEC §13.3: idempotent by derivation key as conversation events are
    /// ([`NewEvent::repeat_of`]): the stored event when type and payload are this one's, else
    /// a `Conflict`.
    pub fn repeat_of(&self, stored: ProcessEvent) -> Result<ProcessEvent, TxError> {
        if stored.event_type == self.event_type && stored.payload == self.payload {
            return Ok(stored);
        }
        Err(TxError::Conflict(format!(
            "process_events: derivation key {} already names a different event",
            self.derivation_key
        )))
    }
}

/// The derivation keys of SPEC §13.1.
pub mod keys {
    use super::*;

    pub fn proposed(id: InvocationId) -> String {
        format!("tool.call.proposed:{id}")
    }
    pub fn authorized(id: InvocationId) -> String {
        format!("tool.call.authorized:{id}")
    }
    pub fn started(id: InvocationId) -> String {
        format!("tool.call.started:{id}")
    }
    pub fn settled(id: InvocationId) -> String {
        format!("tool.call.settled:{id}")
    }
    /// Every terminal tool event of one invocation shares this key: a row closes once.
    pub fn result(id: InvocationId) -> String {
        format!("tool.call.result:{id}")
    }
    pub fn refused(run: RunId, step: u32, call_id: &str) -> String {
        format!("tool.call.refused:{run}:{step}:{call_id}")
    }
    pub fn approval_requested(id: ApprovalId) -> String {
        format!("approval.requested:{id}")
    }
    /// Resolved, expired and cancelled share one key: an approval closes once.
    pub fn approval_closed(id: ApprovalId) -> String {
        format!("approval.closed:{id}")
    }
    pub fn approval_invalidated(id: ApprovalId) -> String {
        format!("approval.invalidated:{id}")
    }
    pub fn profile_loaded(policy_version: &str) -> String {
        format!("policy.profile.loaded:{policy_version}")
    }
    /// One shadow difference per proposed action (its id is the invocation's).
    pub fn shadow_diff(action_id: uuid::Uuid) -> String {
        format!("policy.shadow.diff:{action_id}")
    }
    pub fn notify_target_added(id: crate::ids::NotifyTargetId) -> String {
        format!("notify.target.added:{id}")
    }
    pub fn notify_target_removed(id: crate::ids::NotifyTargetId) -> String {
        format!("notify.target.removed:{id}")
    }
    /// A target gives up one event once.
    pub fn notify_given_up(target: crate::ids::NotifyTargetId, event_id: i64) -> String {
        format!("notify.delivery.given_up:{target}:{event_id}")
    }
}
