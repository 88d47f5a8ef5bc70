//! What an end-to-end test does when a real peer it needs (PostgreSQL, the MCP servers) is not
//! on this machine: a plain `cargo test` skips it and says so; under `CI=true` (or `CI=1`),
//! where `.ci/run` must have installed and started the peer, it fails.

use std::io::Write;

/// Whether this run is CI's (`CI=true` or `CI=1`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The one line every skipped test prints, whatever it lacked (issue 27), so `grep ^SKIPPED`
/// finds them all and each says how to include it:
/// `SKIPPED <test>: <reason>; include it with <command>`.
pub fn skip_line(test: &str, reason: &str, include_with: &str) -> String {
    format!("SKIPPED {test}: {reason}; include it with {include_with}")
}

/// Fails under CI with the skip line and `ci_rule`; otherwise writes the skip line to the
/// process's stderr. Not `eprintln!`: the harness captures a passing test's macro output and a
/// skip nobody sees reads as a pass. One write of the whole line, so the lines of tests running
/// in parallel do not interleave.
pub fn skip_or_fail(test: &str, reason: &str, include_with: &str, ci_rule: &str) {
    let line = skip_line(test, reason, include_with);
    assert!(!in_ci(), "{line}; {ci_rule}");
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// A skip that CI also allows (the machine cannot do it at all, e.g. no permission to mount).
pub fn skip(test: &str, reason: &str, include_with: &str) {
    let _ = std::io::stderr()
        .write_all(format!("{}\n", skip_line(test, reason, include_with)).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skip_line_names_the_test_the_reason_and_the_way_in() {
        assert_eq!(
            skip_line(
                "pg_workers::three",
                "AIRLOCK_TEST_PG_URL is not set",
                "`. .ci/postgres.sh`"
            ),
            "SKIPPED pg_workers::three: AIRLOCK_TEST_PG_URL is not set; include it with `. .ci/postgres.sh`"
        );
    }
}
