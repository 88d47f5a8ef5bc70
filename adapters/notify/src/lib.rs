//! airlock-notify: what airlock tells approvers and reviewers outside the console, and how
//! (issue 32 item 1). Three events are worth a person's attention: an approval was requested,
//! an approval expired unanswered, and a call's outcome became unknown (UNCERTAIN).
//!
//! Which event is due at which target, the per-tenant lease and the cursors are core's
//! (`airlock_core::notify`). This crate holds, each a module:
//! - [`notice`]: one such event as a notification says it (tool, risk, redacted arguments,
//!   expiry, a link to the console), built from the event log's record;
//! - [`format`]: the request body of each target format (generic JSON, Slack incoming-webhook
//!   blocks, ntfy), every string from a call escaped for its format;
//! - [`signature`]: the `Airlock-Signature` header (HMAC-SHA256 over a timestamp and the body)
//!   and its verification, so a receiver rejects forgeries and replays;
//! - [`backoff`]: when a failed delivery is tried again (exponential, with jitter derived from the
//!   delivery itself, so no randomness and the same schedule on every process), and when it is
//!   given up;
//! - [`deliver`]: the loop that reads a target's secret, renders, signs and posts each due
//!   event, and tells core how the attempt ended (the only module with I/O).

pub mod backoff;
pub mod deliver;
pub mod format;
pub mod notice;
pub mod signature;
