//! Test support shared by core's tests, the simulator and the adapters (SPEC §14, §16): valid
//! sample records ([`fixtures`]) and the reusable `Store` contract suite ([`contract`]) that
//! `MemStore` and `SqliteStore` both pass.
//!
//! Compiled only for core's own tests and under the `testing` cargo feature, so nothing here
//! reaches a release build. Being test support, it panics freely on unexpected results.

pub mod contract;
pub mod fixtures;
pub mod invariants;
#[cfg(feature = "mutants")]
pub mod mutants;
