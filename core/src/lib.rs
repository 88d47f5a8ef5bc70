//! airlock-core decides everything and touches nothing.
//!
//! Every decision airlock makes — run and invocation state, approvals, recovery, and through
//! the gate of `airlock-policy` the policy decision — is computed here from explicit inputs, and every persisted change is built here and committed
//! through one `Store::transact`. This crate knows nothing of tokio, SQLite, files, sockets,
//! environment variables, the system clock or randomness: time, ids, storage, tools and
//! spawning arrive through the ports in [`ports`] (SPEC §2). A structural test scans `src/` for
//! the forbidden names.

pub mod access;
pub mod approval;
pub mod connection;
pub mod control;
pub mod conversation;
pub mod env;
pub mod events;
pub mod ids;
pub mod invocation;
pub mod live_policy;
pub mod mem_store;
pub mod notify;
pub mod planner;
pub mod ports;
pub mod run;
pub mod session;
pub mod store;
pub mod tool;
pub mod tx_error;
pub mod vocab;
pub mod worker;
pub mod workspace;

/// The gate itself: the loader, the ruleset, the engine and the hardline rules.
pub use airlock_policy as policy;
/// The policy gate (SPEC §24) is its own crate; the runtime reads actions, decisions, canonical
/// JSON, scopes and time through it, under the module names it has always used.
pub use airlock_policy::{action, canonical, principal, scope, time};

#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;

#[cfg(any(test, feature = "testing"))]
pub mod testing;
