//! SPEC §20's external checks (schemathesis against the running server, a real headless
//! Chromium driving the console) need tools `cargo test` does not install, so they run in
//! `.ci/http.sh`, which `.ci/run` calls. This test checks that wiring and, through its name,
//! tells a `cargo test` run that they were skipped here.

use std::path::PathBuf;

#[test]
fn skipped_here_schemathesis_and_headless_chromium_run_in_ci_http_sh() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root");
    let run = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run");
    assert!(
        run.contains("bash .ci/http.sh"),
        ".ci/run calls .ci/http.sh"
    );
    let script = std::fs::read_to_string(root.join(".ci/http.sh")).expect(".ci/http.sh");
    let requirements =
        std::fs::read_to_string(root.join(".ci/requirements.txt")).expect(".ci/requirements.txt");
    assert!(
        requirements
            .lines()
            .any(|l| l.starts_with("schemathesis==")),
        ".ci/requirements.txt pins schemathesis"
    );
    for needed in [
        "ci_venv",
        "\"$CI_VENV/bin/st\"",
        "playwright-core@$PLAYWRIGHT_CORE_VERSION",
        "apt_install chromium chromium-driver",
        "node .ci/browser/console.cjs",
        "adapters/http/openapi.json",
    ] {
        assert!(script.contains(needed), ".ci/http.sh lacks {needed}");
    }
    for (tool, path) in [
        ("Chromium", PathBuf::from("/usr/bin/chromium")),
        ("schemathesis", root.join(".ci/.venv/bin/st")),
    ] {
        if !path.exists() {
            // The workspace's one skip line (`airlock_e2e::skip::skip_line`).
            eprintln!(
                "SKIPPED external::{tool}: not installed here; include it with `bash .ci/http.sh` \
                 (installs and runs it)"
            );
        }
    }
}
