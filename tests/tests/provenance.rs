//! SPEC §12.3 and §16 #38, end to end: a workspace read is `internal_tool` only when this
//! worker process wrote the same bytes. A file planted behind the worker's back reads as
//! `external_untrusted`, and after a restart so does every file, its own included.

use airlock_core::canonical::sha256_hex;
use airlock_e2e::*;
use serde_json::{Value, json};

fn read(call_id: &str, path: &str) -> Value {
    call(call_id, "workspace.read_text", json!({"path": path}))
}

/// `(status, trust)` of one call's result item.
fn trust_of(data: &DataDir, run: &str, step: i64, call_id: &str) -> (String, String) {
    let calls = step_calls(data, run, step);
    let (status, _, item) = calls
        .get(call_id)
        .unwrap_or_else(|| panic!("no row for {call_id} at step {step}: {calls:?}"));
    (
        status.clone(),
        item["trust"].as_str().expect("trust").to_owned(),
    )
}

#[test]
fn reads_are_internal_only_for_bytes_this_worker_process_wrote() {
    let data = DataDir::new();
    let run = data.submit(&script(json!([
        [workspace_write("w1", "notes/mine.txt", "mine")],
        [
            read("r_mine", "notes/mine.txt"),
            read("r_planted", "planted.txt")
        ],
        [external_write("x1", "pause here")],
        [read("r_mine_again", "notes/mine.txt")]
    ])));
    // A file planted in the run's workspace before any worker runs.
    let root = data
        .path()
        .join("workspaces")
        .join(sha256_hex(b"acme"))
        .join(&run);
    std::fs::create_dir_all(&root).expect("workspace root");
    std::fs::write(root.join("planted.txt"), "planted").expect("plant");
    assert_eq!(data.worker_until_idle(1_000).status.code(), Some(0));
    assert_eq!(data.run_status(&run), "WAITING_FOR_APPROVAL");

    // The same process wrote these bytes: internal. A file it never wrote: untrusted.
    assert_eq!(
        trust_of(&data, &run, 2, "r_mine"),
        ("SUCCEEDED".into(), "internal_tool".into())
    );
    assert_eq!(
        trust_of(&data, &run, 2, "r_planted"),
        ("SUCCEEDED".into(), "external_untrusted".into())
    );

    // A new worker process resumes the run: its handle wrote nothing, so the same file, bytes
    // unchanged, is untrusted now (provenance never survives a restart).
    data.approve_first_pending(&run);
    assert_eq!(data.worker_until_idle(1_000).status.code(), Some(0));
    assert_eq!(data.run_status(&run), "COMPLETED");
    assert_eq!(
        std::fs::read_to_string(root.join("notes/mine.txt")).expect("still there"),
        "mine"
    );
    assert_eq!(
        trust_of(&data, &run, 4, "r_mine_again"),
        ("SUCCEEDED".into(), "external_untrusted".into())
    );
}
