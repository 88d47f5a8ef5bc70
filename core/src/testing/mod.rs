//! Test support shared by core's tests, the simulator and the adapters (SPEC §14, §16): valid
//! sample records ([`fixtures`]) and the reusable `Store` contract suite ([`contract`], with [`contract_http`]) that
//! `MemStore` and `SqliteStore` both pass.
//!
//! Compiled only for core's own tests and under the `testing` cargo feature, so nothing here
//! reaches a release build. Being test support, it panics freely on unexpected results.

pub mod contract;
pub mod contract_http;
pub mod contract_notify;
pub mod earlier_build;
pub mod fixtures;
pub mod invariants;
#[cfg(feature = "mutants")]
pub mod mutants;

/// SPEC §13.1: the events of a granted approval, by wire name, as a subsequence of the run's
/// events. Core's scenarios and the end-to-end tests check it against what was stored.
pub const GRANTED_APPROVAL_EVENTS: [&str; 9] = [
    "tool.call.proposed",
    "run.waiting_for_approval",
    "approval.requested",
    "approval.resolved",
    "run.requeued",
    "run.started",
    "tool.call.authorized",
    "tool.call.started",
    "tool.call.completed",
];

/// Asserts that `needle` occurs in `haystack` in order, other items allowed in between (event
/// types, usually).
pub fn assert_subsequence(haystack: &[String], needle: &[&str]) {
    let mut rest = haystack.iter();
    for want in needle {
        assert!(
            rest.any(|h| h == want),
            "{want} missing or out of order in {haystack:#?}"
        );
    }
}
