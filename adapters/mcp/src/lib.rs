//! airlock-mcp is the MCP gateway's adapter and decides nothing (SPEC §19): it reads the
//! gateway file strictly, names and classifies upstream tools, hashes their definitions for
//! pins, and builds the core tool specs they are registered under. Whether a call runs, waits
//! for approval or is refused, and what its client is told, is core's
//! (`airlock_core::connection`): a live client is the planner of its session's runs, and the
//! gateway only carries requests in and answers out. It depends on core alone.

pub mod body;
pub mod catalog;
pub mod child;
pub mod config;
pub mod draft;
pub mod fuzzing;
pub mod gateway;
pub mod listen;
pub mod process_events;
pub mod relay;
pub mod render;
pub mod round;
pub mod sealed_state;
pub mod secret_ref;
pub mod serve;
pub mod server;
pub mod sessionless;
pub mod telemetry;
pub mod tls;
pub mod upstream;
pub mod upstream_oauth;
