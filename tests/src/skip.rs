//! What an end-to-end test does when a real peer it needs (PostgreSQL, the MCP servers) is not
//! on this machine: a plain `cargo test` skips it and says so; under `CI=true` (or `CI=1`),
//! where `.ci/run` must have installed and started the peer, it fails.

use std::io::Write;

/// Whether this run is CI's (`CI=true` or `CI=1`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Fails under CI with `message` and `ci_rule`; otherwise writes `message` as one line to the
/// process's stderr. Not `eprintln!`: the harness captures a passing test's macro output and a
/// skip nobody sees reads as a pass. One write of the whole line, so the lines of tests running
/// in parallel do not interleave.
pub fn skip_or_fail(message: &str, ci_rule: &str) {
    assert!(!in_ci(), "{message}; {ci_rule}");
    let _ = std::io::stderr().write_all(format!("{message}\n").as_bytes());
}
