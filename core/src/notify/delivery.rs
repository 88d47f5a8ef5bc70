//! The notifier's decisions against the store; the adapter only sends.
//!
//! **One notifier per tenant at a time.** Any number of processes (`serve`, `worker`, on one
//! store) run a notifier; for each tenant with targets, the one holding the tenant's lease
//! delivers. A lease lasts [`Notifier::new`]'s `lease_seconds` and is renewed on every round;
//! a process that stops releases its leases, one that dies leaves them to expire, and then
//! another takes over from the stored cursors. Taking is compare-and-set
//! ([`StoreTx::swap_notify_lease`]), so two processes never both win.
//!
//! **The cursor.** [`Notifier::due`] reads the tenant's log after each target's cursor and
//! answers the first event the target subscribes to, with the record it is about (the approval,
//! or the UNCERTAIN invocation); events before it that the target does not subscribe to are
//! stepped over in a transaction of their own. [`Notifier::settle`] records how the attempt
//! ended: delivered or given up moves the cursor past the event (given up with a
//! `notify.delivery.given_up` process event in the same transaction); a retry keeps it and
//! records the attempt count and the time before which no attempt is made. Both writes check
//! that this notifier still holds the lease and compare the cursor they move, so a notifier that
//! lost its lease mid-attempt changes nothing ([`TxError::Fenced`]).
//!
//! [`StoreTx::swap_notify_lease`]: crate::store::StoreTx::swap_notify_lease

use std::collections::BTreeMap;

use serde_json::json;

pub use super::target::NotifyLease;
use super::target::{NotifyEvent, NotifyTarget, Progress};
use crate::approval::Approval;
use crate::env::Env;
use crate::events::{Actor, Event, EventType, PAYLOAD_SCHEMA_VERSION, ProcessEvent, keys};
use crate::ids::{ApprovalId, InvocationId};
use crate::invocation::Invocation;
use crate::store::{Store, StoreTx, TxError};
use crate::time::Timestamp;

/// Events read per store query while looking for a target's next one.
const PAGE: usize = 200;

/// What an event to notify is about, as read when it is due.
#[derive(Debug, Clone, PartialEq)]
pub enum Subject {
    Approval(Box<Approval>),
    Uncertain {
        invocation: Box<Invocation>,
        /// The run's principal: whom the call acted for.
        principal_id: String,
    },
}

/// An event due at a target now.
#[derive(Debug, Clone, PartialEq)]
pub struct Due {
    pub target: NotifyTarget,
    pub event: Event,
    pub kind: NotifyEvent,
    pub subject: Subject,
    /// This attempt's number, from 1.
    pub attempt: u32,
}

/// How an attempt ended, as the adapter decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    Delivered,
    /// Failed; try again, not before this time.
    RetryAt(Timestamp),
    /// Failed for good (refused, or out of attempts): `why` is recorded.
    GiveUp {
        why: String,
    },
}

/// One process's notifier.
pub struct Notifier<S: Store> {
    env: Env<S>,
    holder: String,
    lease_micros: i64,
}

impl<S: Store> Notifier<S> {
    /// `holder` names this process in the lease rows (unique per process: a worker id).
    pub fn new(env: Env<S>, holder: String, lease_seconds: i64) -> Notifier<S> {
        Notifier {
            env,
            holder,
            lease_micros: lease_seconds.saturating_mul(1_000_000),
        }
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Every live target, by tenant (tenants in order, each tenant's targets by creation):
    /// one read per round.
    pub fn targets_by_tenant(&self) -> Result<BTreeMap<String, Vec<NotifyTarget>>, TxError> {
        let mut by_tenant: BTreeMap<String, Vec<NotifyTarget>> = BTreeMap::new();
        for target in self.env.read(|tx| tx.notify_targets(None))? {
            by_tenant
                .entry(target.tenant_id.clone())
                .or_default()
                .push(target);
        }
        Ok(by_tenant)
    }

    /// Takes or renews the tenant's lease: `true` if this notifier holds it now, with at least
    /// half of a lease's length left. A lease with more than half left is not written again
    /// (a read only), so an idle notifier does not commit every round.
    pub fn hold(&self, tenant: &str) -> Result<bool, TxError> {
        let now = self.env.clock.now();
        let seen = self.env.read(|tx| tx.notify_lease(tenant))?;
        match &seen {
            Some(lease) if lease.holder != self.holder && lease.expires_at > now => {
                return Ok(false);
            }
            Some(lease)
                if lease.holder == self.holder
                    && lease.expires_at.as_micros().saturating_sub(now.as_micros())
                        > self.lease_micros / 2 =>
            {
                return Ok(true);
            }
            _ => {}
        }
        let next = NotifyLease {
            tenant_id: tenant.to_owned(),
            holder: self.holder.clone(),
            expires_at: now.saturating_add_micros(self.lease_micros),
        };
        let taken = self.env.transact(|tx| {
            let current = tx.notify_lease(tenant)?;
            if current
                .as_ref()
                .is_some_and(|l| l.holder != self.holder && l.expires_at > now)
            {
                return Ok(false);
            }
            tx.swap_notify_lease(current.as_ref(), &next)?;
            Ok(true)
        });
        match taken {
            Err(TxError::Conflict(_)) => Ok(false),
            other => other,
        }
    }

    /// Gives the tenant's lease up now if this notifier holds it, so another process takes over
    /// at once rather than after the lease runs out.
    pub fn release(&self, tenant: &str) -> Result<(), TxError> {
        let now = self.env.clock.now();
        let released = self.env.transact(|tx| {
            match tx.notify_lease(tenant)? {
                Some(current) if current.holder == self.holder && current.expires_at > now => {
                    let next = NotifyLease {
                        expires_at: now,
                        ..current.clone()
                    };
                    tx.swap_notify_lease(Some(&current), &next)?;
                }
                _ => {}
            }
            Ok(())
        });
        match released {
            Err(TxError::Conflict(_)) => Ok(()),
            other => other,
        }
    }

    /// The event due at `target` now, if any: `None` when the target is caught up or waits
    /// out a back-off. Steps the cursor over events the target does not subscribe to (and over
    /// an event whose record is gone, which a store never does).
    pub fn due(&self, target: &NotifyTarget) -> Result<Option<Due>, TxError> {
        let now = self.env.clock.now();
        if target.progress.retry_at.is_some_and(|at| at > now) {
            return Ok(None);
        }
        let mut progress = target.progress;
        loop {
            let (events, found) = self.env.read(|tx| {
                // The tail first: a store may require it to be a read transaction's first read
                // (PostgreSQL waits there for event writers still in flight).
                let events = tx.events_of_tenant(&target.tenant_id, Some(progress.after), PAGE)?;
                // Removed since it was listed: nothing more is sent to it.
                if tx
                    .notify_target(target.id)?
                    .is_none_or(|t| t.removed_at.is_some())
                {
                    return Ok((Vec::new(), None));
                }
                for (index, event) in events.iter().enumerate() {
                    let Some(kind) = NotifyEvent::of(event.event_type)
                        .filter(|kind| target.events.contains(kind))
                    else {
                        continue;
                    };
                    let subject = subject_of(tx, event)?;
                    return Ok((events, Some((index, kind, subject))));
                }
                Ok((events, None))
            })?;
            // The events before the one found (all of them if none was) are stepped over.
            let stepped = match &found {
                Some((index, _, _)) => index.checked_sub(1).and_then(|i| events.get(i)),
                None => events.last(),
            };
            if let Some(last) = stepped {
                let next = Progress::past(last.id);
                self.advance(target, &progress, &next, None)?;
                progress = next;
            }
            match found {
                Some((index, kind, Some(subject))) => {
                    let Some(event) = events.get(index).cloned() else {
                        return Ok(None);
                    };
                    let mut target = target.clone();
                    target.progress = progress;
                    return Ok(Some(Due {
                        attempt: progress.attempts.saturating_add(1),
                        target,
                        event,
                        kind,
                        subject,
                    }));
                }
                Some((index, kind, None)) => {
                    // The record the event names is gone (no store removes one) or the payload
                    // does not name it: nothing can be said of it, and that is recorded.
                    let Some(event) = events.get(index) else {
                        return Ok(None);
                    };
                    let next = Progress::past(event.id);
                    let given_up = self.given_up(
                        target,
                        event.id,
                        kind,
                        0,
                        "the record the event names was not found",
                    );
                    self.advance(target, &progress, &next, Some(&given_up))?;
                    progress = next;
                    continue;
                }
                None => {}
            }
            if events.len() < PAGE {
                return Ok(None);
            }
        }
    }

    /// This notifier's clock.
    pub fn now(&self) -> Timestamp {
        self.env.clock.now()
    }

    /// Records how `due`'s attempt ended (see the module docs); answers the target as it now
    /// stands.
    pub fn settle(&self, due: &Due, settle: &Settle) -> Result<NotifyTarget, TxError> {
        let (next, given_up) = match settle {
            Settle::Delivered => (Progress::past(due.event.id), None),
            Settle::RetryAt(at) => (
                Progress {
                    after: due.target.progress.after,
                    attempts: due.attempt,
                    retry_at: Some(*at),
                },
                None,
            ),
            Settle::GiveUp { why } => (
                Progress::past(due.event.id),
                Some(self.given_up(&due.target, due.event.id, due.kind, due.attempt, why)),
            ),
        };
        self.advance(&due.target, &due.target.progress, &next, given_up.as_ref())?;
        Ok(NotifyTarget {
            progress: next,
            ..due.target.clone()
        })
    }

    /// The `notify.delivery.given_up` event of `target` for `event_id`.
    fn given_up(
        &self,
        target: &NotifyTarget,
        event_id: i64,
        kind: NotifyEvent,
        attempts: u32,
        why: &str,
    ) -> ProcessEvent {
        ProcessEvent {
            id: self.env.new_uuid(),
            event_type: EventType::NotifyDeliveryGivenUp,
            payload_schema_version: PAYLOAD_SCHEMA_VERSION,
            actor: Actor::worker(&self.holder),
            payload: json!({
                "tenant_id": target.tenant_id,
                "target_id": target.id.to_string(),
                "event_id": event_id,
                "event_type": kind.as_str(),
                "attempts": attempts,
                "why": why,
            }),
            derivation_key: keys::notify_given_up(target.id, event_id),
            created_at: self.env.clock.now(),
        }
    }

    /// Moves a target's cursor from `expected` to `next` if this notifier holds the tenant's
    /// lease (`Fenced` otherwise), with `also` appended in the same transaction.
    fn advance(
        &self,
        target: &NotifyTarget,
        expected: &Progress,
        next: &Progress,
        also: Option<&ProcessEvent>,
    ) -> Result<(), TxError> {
        let now = self.env.clock.now();
        self.env.transact(|tx| {
            let held = tx
                .notify_lease(&target.tenant_id)?
                .is_some_and(|l| l.holder == self.holder && l.expires_at > now);
            if !held {
                return Err(TxError::Fenced);
            }
            tx.advance_notify_target(target.id, expected, next)?;
            if let Some(event) = also {
                tx.append_process_event(event)?;
            }
            Ok(())
        })
    }
}

/// The record an event to notify is about.
fn subject_of(tx: &mut dyn StoreTx, event: &Event) -> Result<Option<Subject>, TxError> {
    let id_of = |field: &str| {
        event
            .payload
            .get(field)
            .and_then(|v| v.as_str())
            .and_then(|s| s.parse::<uuid::Uuid>().ok())
    };
    match event.event_type {
        EventType::ApprovalRequested | EventType::ApprovalExpired => {
            let Some(id) = id_of("approval_id") else {
                return Ok(None);
            };
            Ok(tx
                .approval(ApprovalId(id))?
                .map(|a| Subject::Approval(Box::new(a))))
        }
        EventType::ToolCallUncertain => {
            let Some(id) = id_of("invocation_id") else {
                return Ok(None);
            };
            let Some(invocation) = tx.invocation(InvocationId(id))? else {
                return Ok(None);
            };
            let principal_id = tx
                .run(invocation.run_id)?
                .map(|r| r.principal_id)
                .unwrap_or_default();
            Ok(Some(Subject::Uncertain {
                invocation: Box::new(invocation),
                principal_id,
            }))
        }
        _ => Ok(None),
    }
}
