//! Adding, listing and removing a tenant's notification targets (`airlock notify …` and
//! `/v1/notify/targets`). Each change is recorded as a process event (`notify.target.added`,
//! `notify.target.removed`) in the transaction that makes it, naming the target, who changed it,
//! its shown URL (never the path, which may be a credential) and where its secret is (never
//! the secret).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::target::{
    MAX_LABEL_CHARS, NotifyEvent, NotifyFormat, NotifyTarget, Progress, SecretSource, check_url,
    ntfy_topic,
};
use crate::control::{ControlService, ServiceError};
use crate::events::{Actor, EventType, PAYLOAD_SCHEMA_VERSION, ProcessEvent, keys};
use crate::ids::NotifyTargetId;
use crate::principal::check_identity;
use crate::store::{Store, TxError};

/// What adding a target asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSpec {
    pub url: String,
    /// At least one.
    pub events: BTreeSet<NotifyEvent>,
    pub format: NotifyFormat,
    pub secret: SecretSource,
    pub label: Option<String>,
}

impl TargetSpec {
    fn check(&self, tenant: &str) -> Result<(), ServiceError> {
        check_url(&self.url).map_err(ServiceError::InvalidArgument)?;
        if self.format == NotifyFormat::Ntfy && ntfy_topic(&self.url).is_none() {
            return Err(ServiceError::InvalidArgument(
                "an ntfy URL ends in its topic: https://ntfy.example/topic".to_owned(),
            ));
        }
        if self.events.is_empty() {
            return Err(ServiceError::InvalidArgument(
                "a target must subscribe to at least one event".to_owned(),
            ));
        }
        if let Some(label) = &self.label
            && (label.chars().count() > MAX_LABEL_CHARS || label.chars().any(char::is_control))
        {
            return Err(ServiceError::InvalidArgument(format!(
                "label must be at most {MAX_LABEL_CHARS} characters without control characters"
            )));
        }
        // A reference built in code (not parsed) is held to the same rules.
        SecretSource::parse(&self.secret.to_text()).map_err(ServiceError::InvalidArgument)?;
        self.secret
            .check_for(tenant)
            .map_err(ServiceError::InvalidArgument)?;
        Ok(())
    }
}

/// A target as its audit events describe it.
fn described(target: &NotifyTarget) -> Value {
    json!({
        "tenant_id": target.tenant_id,
        "target_id": target.id.to_string(),
        "url": target.shown_url(),
        "format": target.format.as_str(),
        "events": target.events.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
        "secret": target.secret.to_text(),
        "label": target.label,
    })
}

impl<S: Store> ControlService<S> {
    /// Adds a target for `tenant`, added by `by` (a principal id). It is told of events that
    /// commit after it is added: a new target is not sent the tenant's history.
    pub fn add_notify_target(
        &self,
        tenant: &str,
        by: &str,
        spec: &TargetSpec,
    ) -> Result<NotifyTarget, ServiceError> {
        for (field, value) in [("tenant", tenant), ("principal", by)] {
            check_identity(value)
                .map_err(|e| ServiceError::InvalidArgument(format!("{field} {e}")))?;
        }
        spec.check(tenant)?;
        let env = self.env();
        let now = env.clock.now();
        let id = NotifyTargetId(env.new_uuid());
        let event_id = env.new_uuid();
        Ok(env.transact(|tx| {
            let target = NotifyTarget {
                id,
                tenant_id: tenant.to_owned(),
                url: spec.url.clone(),
                events: spec.events.clone(),
                format: spec.format,
                secret: spec.secret.clone(),
                label: spec.label.clone(),
                created_by: by.to_owned(),
                created_at: now,
                removed_at: None,
                progress: Progress::past(tx.last_event_id()?.unwrap_or(0)),
            };
            tx.insert_notify_target(&target)?;
            tx.append_process_event(&ProcessEvent {
                id: event_id,
                event_type: EventType::NotifyTargetAdded,
                payload_schema_version: PAYLOAD_SCHEMA_VERSION,
                actor: Actor::principal(by),
                payload: described(&target),
                derivation_key: keys::notify_target_added(id),
                created_at: now,
            })?;
            Ok(target)
        })?)
    }

    /// The tenant's targets not removed, oldest first.
    pub fn list_notify_targets(&self, tenant: &str) -> Result<Vec<NotifyTarget>, ServiceError> {
        Ok(self.env().read(|tx| tx.notify_targets(Some(tenant)))?)
    }

    /// Removes one of the tenant's targets: nothing more is sent to it. Another tenant's
    /// target, and one already removed, is `NotFound`.
    pub fn remove_notify_target(
        &self,
        tenant: &str,
        by: &str,
        id: NotifyTargetId,
    ) -> Result<NotifyTarget, ServiceError> {
        let env = self.env();
        let now = env.clock.now();
        let event_id = env.new_uuid();
        Ok(env.transact(|tx| {
            tx.notify_target(id)?
                .filter(|t| t.tenant_id == tenant && t.removed_at.is_none())
                .ok_or(TxError::NotFound)?;
            // Removed by a concurrent request since the check: as if it were not found.
            let removed = match tx.remove_notify_target(id, now) {
                Err(TxError::Conflict(_)) => return Err(TxError::NotFound),
                other => other?,
            };
            let mut payload = described(&removed);
            if let Some(object) = payload.as_object_mut() {
                object.insert("removed_by".to_owned(), json!(by));
            }
            tx.append_process_event(&ProcessEvent {
                id: event_id,
                event_type: EventType::NotifyTargetRemoved,
                payload_schema_version: PAYLOAD_SCHEMA_VERSION,
                actor: Actor::principal(by),
                payload,
                derivation_key: keys::notify_target_removed(id),
                created_at: now,
            })?;
            Ok(removed)
        })?)
    }
}
