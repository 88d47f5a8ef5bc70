//! airlock-core decides everything and touches nothing.
//!
//! Every decision airlock makes — policy, run and invocation state, approvals, recovery — is
//! computed here from explicit inputs, and every persisted change is built here and committed
//! through one `Store::transact`. This crate knows nothing of tokio, SQLite, files, sockets,
//! environment variables, the system clock or randomness: time, ids, storage, tools and
//! spawning arrive through the ports in [`ports`] (SPEC §2). A structural test scans `src/` for
//! the forbidden names.

pub mod access;
pub mod action;
pub mod approval;
pub mod canonical;
pub mod connection;
pub mod control;
pub mod conversation;
pub mod env;
pub mod events;
pub mod ids;
pub mod invocation;
pub mod mem_store;
pub mod planner;
pub mod policy;
pub mod ports;
pub mod principal;
pub mod run;
pub mod scope;
pub mod session;
pub mod store;
pub mod time;
pub mod tool;
pub mod tx_error;
pub mod vocab;
pub mod worker;
pub mod workspace;

#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;

#[cfg(any(test, feature = "testing"))]
pub mod testing;
