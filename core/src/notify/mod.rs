//! Notifications (issue 32 item 1): telling a tenant's approvers, where they are, that an
//! approval was requested, that one expired unanswered, or that a call's outcome became unknown.
//!
//! - [`target`]: a tenant's targets (URL, events, format, where the signing secret is) and how
//!   far each one's delivery has come; [`manage`]: adding, listing and removing them, each
//!   change recorded as a process event.
//! - [`delivery`]: the notifier's decisions against the store: which process delivers a
//!   tenant's notifications (a lease), which event is next for a target (its cursor in the
//!   tenant's durable event log), and what an attempt's end does to the cursor.
//!
//! Delivery is **at least once, in log order, per target**: a target's cursor moves past an
//! event only after the event was delivered, given up, or found not subscribed to, in a
//! transaction that also checks the lease; a notifier that stops between a delivery and that
//! commit delivers the event again when it (or another) resumes, with the same event id as the
//! idempotency key. A failing target holds its own later events back until the failing one is
//! delivered or given up, and holds no other target back.
//!
//! The sending, signing and formatting are the `airlock-notify` adapter's.

pub mod delivery;
pub mod manage;
pub mod target;

pub use delivery::{Due, Notifier, NotifyLease, Settle, Subject};
pub use manage::TargetSpec;
pub use target::{NotifyEvent, NotifyFormat, NotifyTarget, Progress, SecretSource};
