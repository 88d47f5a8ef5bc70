//! The `airlock` binary crate wires the real world together and decides nothing.
//!
//! It picks the store (`airlock-sqlite`, or `airlock-pg` for `--store postgres://…`), plugs the host's ports (`airlock-host`) into core's
//! `Env` ([`app::App`]), reads the policy files, and owns the CLI, which maps core's error kinds
//! to the exit codes of SPEC Appendix A. Every decision is made by `airlock-core`.

pub mod app;
pub mod cli;
pub mod exit;
pub mod input_file;
pub mod policy_source;
pub mod reload;
pub mod server_file;
pub mod store;
pub mod telemetry;
