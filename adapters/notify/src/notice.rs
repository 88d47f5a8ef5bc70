//! One event worth a person's attention, as a notification says it.
//!
//! Built from the records the event names (the approval, or the invocation), never from the
//! event's payload alone: a notification shows the tool, its risk, the arguments **redacted as
//! the approval view redacts them** (credential-named keys and credential-shaped strings
//! replaced, long strings and collections cut), the expiry, and a link to the console page where
//! the person acts. Every string here may come from an agent or an upstream server; [`format`]
//! escapes each for its target.
//!
//! [`format`]: crate::format

use airlock_core::approval::Approval;
use airlock_core::approval::redact::redact;
use airlock_core::invocation::Invocation;
use airlock_core::notify::{Due, NotifyEvent, Subject};
use serde_json::Value;

/// A short headline for each event a notification is about (core's [`NotifyEvent`]: the
/// three a target may subscribe to).
pub fn headline(kind: NotifyEvent) -> &'static str {
    match kind {
        NotifyEvent::ApprovalRequested => "Approval requested",
        NotifyEvent::ApprovalExpired => "Approval expired unanswered",
        NotifyEvent::CallUncertain => "Call outcome unknown: settle it",
    }
}

/// A notification's content.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub kind: NotifyEvent,
    /// The event's id in the tenant's log: the delivery's idempotency key.
    pub event_id: i64,
    pub tenant_id: String,
    /// Who the call acts for.
    pub principal_id: String,
    pub tool: String,
    pub risk: String,
    /// Redacted ([`redact`]).
    pub arguments: Value,
    /// RFC 3339; approvals only.
    pub expires_at: Option<String>,
    /// When the event happened (RFC 3339).
    pub at: String,
    pub approval_id: Option<String>,
    pub invocation_id: String,
    pub run_id: String,
    /// The console page where a person acts on it, when the console's address is configured.
    pub link: Option<String>,
}

impl Notice {
    /// `approval.requested` or `approval.expired` of `approval`.
    pub fn of_approval(
        kind: NotifyEvent,
        event_id: i64,
        at: String,
        approval: &Approval,
        console: Option<&str>,
    ) -> Notice {
        Notice {
            kind,
            event_id,
            tenant_id: approval.tenant_id.clone(),
            principal_id: approval.principal_id.clone(),
            tool: approval.tool_name.clone(),
            risk: approval.risk.as_str().to_owned(),
            arguments: redact(&approval.arguments),
            expires_at: Some(approval.expires_at.to_string()),
            at,
            approval_id: Some(approval.id.to_string()),
            invocation_id: approval.tool_invocation_id.to_string(),
            run_id: approval.run_id.to_string(),
            link: console
                .map(|base| format!("{}/approvals/{}", base.trim_end_matches('/'), approval.id)),
        }
    }

    /// `tool.call.uncertain` of `invocation`, for whoever settles it (the review page).
    pub fn of_uncertain(
        event_id: i64,
        at: String,
        invocation: &Invocation,
        principal_id: &str,
        console: Option<&str>,
    ) -> Notice {
        Notice {
            kind: NotifyEvent::CallUncertain,
            event_id,
            tenant_id: invocation.tenant_id.clone(),
            principal_id: principal_id.to_owned(),
            tool: invocation.tool_name.clone(),
            risk: invocation.risk.as_str().to_owned(),
            arguments: redact(&invocation.raw_arguments),
            expires_at: None,
            at,
            approval_id: None,
            invocation_id: invocation.id.to_string(),
            run_id: invocation.run_id.to_string(),
            link: console.map(|base| format!("{}/review", base.trim_end_matches('/'))),
        }
    }
}

impl Notice {
    /// What `due` is about, as a notification says it.
    pub fn of_due(due: &Due, console: Option<&str>) -> Notice {
        let at = due.event.created_at.to_string();
        match &due.subject {
            Subject::Approval(approval) => {
                Notice::of_approval(due.kind, due.event.id, at, approval, console)
            }
            Subject::Uncertain {
                invocation,
                principal_id,
            } => Notice::of_uncertain(due.event.id, at, invocation, principal_id, console),
        }
    }
}
