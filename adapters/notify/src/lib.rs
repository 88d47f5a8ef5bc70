//! airlock-notify: what airlock tells approvers and reviewers outside the console, and how
//! (issue 32 item 1). Three events are worth a person's attention: an approval was requested,
//! an approval expired unanswered, and a call's outcome became unknown (UNCERTAIN).
//!
//! This crate holds the parts without I/O, each a module:
//! - [`notice`]: one such event as a notification says it (tool, risk, redacted arguments,
//!   expiry, a link to the console), built from the event log's record;
//! - [`format`]: the request body of each target format (generic JSON, Slack incoming-webhook
//!   blocks, ntfy), every string from a call escaped for its format;
//! - [`signature`]: the `Airlock-Signature` header (HMAC-SHA256 over a timestamp and the body)
//!   and its verification, so a receiver rejects forgeries and replays;
//! - [`backoff`]: when a failed delivery is tried again (exponential, with jitter derived from the
//!   delivery itself, so no randomness and the same schedule on every process), and when it is
//!   given up.
//!
//! Not built yet: the targets' store rows, the delivery loop that follows the durable event log
//! from a stored cursor under a per-tenant lease, `airlock notify add|list|remove` and the HTTP
//! routes (see the issue note).

pub mod backoff;
pub mod format;
pub mod notice;
pub mod signature;
