//! airlock supplies the real world and decides nothing.
//!
//! This crate is the production adapter: it reads policy files and input from disk and stdin,
//! will host the SQLite store, the tokio worker and the local workspace, and maps core's error
//! kinds to the CLI's exit codes (SPEC Appendix A). Every decision is made by `airlock-core`.

pub mod cli;
pub mod exit;
pub mod policy_source;
