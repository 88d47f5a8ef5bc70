//! SPEC §16 #37, end to end: symlinks planted in a run's workspace while the run waits for an
//! approval are never followed by the workspace tools of the worker process that resumes it.
//! The run goes on (a refused path is a failed call, not a failed run), nothing outside the root
//! is read or written, and each call gets the §12.5 code.

use std::os::unix::fs::symlink;

use airlock_core::canonical::sha256_hex;
use airlock_e2e::*;
use serde_json::{Value, json};

const SECRET: &str = "outside the workspace";

#[test]
fn symlinks_planted_during_a_park_are_never_followed_by_the_resuming_worker() {
    let data = DataDir::new();
    let run = data.submit(&script(json!([
        [workspace_write("w1", "notes/a.txt", "mine")],
        [external_write("x1", "pause here")],
        [
            call("r_file", "workspace.read_text", json!({"path": "link.txt"})),
            call(
                "r_dir",
                "workspace.read_text",
                json!({"path": "dir/secret.txt"})
            ),
            call(
                "ls",
                "workspace.list_files",
                json!({"path": "", "recursive": true})
            ),
            call(
                "w_dir",
                "workspace.write_text",
                json!({"path": "dir/new.txt", "content": "x"})
            ),
            call(
                "w_file",
                "workspace.write_text",
                json!({"path": "link.txt", "content": "x"})
            )
        ]
    ])));
    assert_eq!(data.worker_until_idle(1_000).status.code(), Some(0));
    assert_eq!(data.run_status(&run), "WAITING_FOR_APPROVAL");

    // The run's workspace root (§12.2), as written by the first step.
    let root = data
        .path()
        .join("workspaces")
        .join(sha256_hex(b"acme"))
        .join(&run);
    assert_eq!(
        std::fs::read_to_string(root.join("notes/a.txt")).expect("step 1 wrote it"),
        "mine"
    );
    let outside = tempfile::tempdir().expect("outside dir");
    std::fs::write(outside.path().join("secret.txt"), SECRET).expect("secret");
    symlink(outside.path().join("secret.txt"), root.join("link.txt")).expect("file link");
    symlink(outside.path(), root.join("dir")).expect("directory link");

    data.approve_first_pending(&run);
    assert_eq!(data.worker_until_idle(1_000).status.code(), Some(0));
    assert_eq!(data.run_status(&run), "COMPLETED");

    let calls = step_calls(&data, &run, 3);
    for refused in ["r_file", "r_dir", "w_dir", "w_file"] {
        let (status, code, _) = &calls[refused];
        assert_eq!(
            (status.as_str(), code.as_str()),
            ("FAILED", "tool.arguments_invalid"),
            "{refused}"
        );
    }
    let (status, _, listing) = &calls["ls"];
    assert_eq!(status, "SUCCEEDED");
    // The planner's result item carries the structured output as canonical JSON text.
    let content: Value = serde_json::from_str(listing["content"].as_str().expect("content text"))
        .expect("content JSON");
    let listed: Vec<&str> = content["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("entries in {listing}"))
        .iter()
        .map(|e| e["path"].as_str().expect("path"))
        .collect();
    assert_eq!(
        listed,
        ["notes", "notes/a.txt"],
        "links are neither listed nor entered"
    );

    // Nothing outside the root changed, and the links are still links.
    let names: Vec<String> = std::fs::read_dir(outside.path())
        .expect("outside")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["secret.txt"]);
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).expect("secret"),
        SECRET
    );
    for link in ["link.txt", "dir"] {
        assert!(
            std::fs::symlink_metadata(root.join(link))
                .expect("link")
                .file_type()
                .is_symlink(),
            "{link}"
        );
    }
    // No result the planner saw carries the secret.
    let results: String = invocations_of_run(&data, &run)
        .into_iter()
        .filter_map(|invocation| invocation.result_item)
        .collect();
    assert!(!results.is_empty(), "the run's calls have results");
    assert!(!results.contains(SECRET));
}
