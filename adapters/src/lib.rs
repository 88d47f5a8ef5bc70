//! airlock supplies the real world and decides nothing.
//!
//! This crate is the production adapter: the SQLite store, the tokio host (clock, ids, spawner,
//! crash hook, dispatchers, the worker loop), the local workspace, the builtin tool bodies and the
//! CLI. It implements core's ports and maps core's error kinds to the CLI's exit codes (SPEC
//! Appendix A). Every decision is made by `airlock-core`.

pub mod cli;
pub mod exit;
pub mod host;
pub mod policy_source;
pub mod sqlite;
pub mod tools;
pub mod workspace;
