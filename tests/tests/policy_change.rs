//! Changing policy safely (issue 32 items 2 and 3), through the real binary on a recorded store:
//! a worker in shadow mode records what a candidate would decide differently without changing
//! what runs, `policy shadow report` prints it, and `policy replay` decides the recorded calls
//! again under the candidate. The candidate denies one tool (`workspace.write_text`, the only
//! `workspace_write` tool of the script), so exactly its calls must show as `allow → deny`.

use std::path::PathBuf;

use airlock_e2e::{DataDir, script, workspace_write};
use serde_json::{Value, json};

/// The shipped policy files with `workspace_write` denied.
fn candidate_dir(data: &DataDir) -> PathBuf {
    let shipped = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let dir = data.path().join("candidate");
    std::fs::create_dir_all(&dir).expect("candidate dir");
    let profile = std::fs::read_to_string(shipped.join("default.toml")).expect("shipped profile");
    let denied = profile.replace(
        "[rules.workspace_write]\ndecision = \"allow\"\ncondition = \"path_inside_workspace\"\notherwise = \"deny\"",
        "[rules.workspace_write]\ndecision = \"deny\"",
    );
    assert_ne!(denied, profile, "the candidate edit applies");
    std::fs::write(dir.join("default.toml"), denied).expect("write candidate");
    std::fs::copy(shipped.join("hardline.toml"), dir.join("hardline.toml")).expect("hardline");
    dir
}

fn calculate(call_id: &str) -> Value {
    json!({"call_id": call_id, "tool": "math.calculate", "arguments": {"expression": "6 * 7"}})
}

/// Two workspace writes among three other calls, run by a worker in shadow mode.
fn recorded(data: &DataDir, candidate: &str) -> String {
    let run = data.submit(&script(json!([
        [calculate("m1")],
        [workspace_write("w1", "notes/a.txt", "one")],
        [calculate("m2"), {"call_id": "t1", "tool": "system.current_time", "arguments": {}}],
        [workspace_write("w2", "notes/b.txt", "two")],
    ])));
    let worker = data.run(
        "operator",
        &["worker", "--until-idle", "--shadow-policy-dir", candidate],
    );
    assert_eq!(
        worker.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&worker.stderr)
    );
    run
}

fn transitions(table: &Value) -> Vec<(String, String, u64, Vec<String>)> {
    table["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .map(|t| {
            let tools = t["examples"]
                .as_array()
                .expect("examples")
                .iter()
                .map(|e| e["tool"].as_str().unwrap_or("").to_owned())
                .collect();
            (
                t["from"].as_str().unwrap_or("").to_owned(),
                t["to"].as_str().unwrap_or("").to_owned(),
                t["count"].as_u64().unwrap_or(0),
                tools,
            )
        })
        .collect()
}

fn allow_to_deny_of_the_writes() -> Vec<(String, String, u64, Vec<String>)> {
    vec![(
        "allow".to_owned(),
        "deny".to_owned(),
        2,
        vec!["workspace.write_text".to_owned(); 2],
    )]
}

fn shadow_and_replay_find_exactly_the_denied_tools_calls(data: &DataDir) {
    let candidate = candidate_dir(data);
    let candidate = candidate.to_str().expect("utf-8 path");
    let run = recorded(data, candidate);

    // The live policy alone acted: the run completed, every call (both writes too) succeeded.
    assert_eq!(data.run_status(&run), "COMPLETED");
    assert_eq!(
        data.count("SELECT COUNT(*) FROM tool_invocations WHERE status = 'SUCCEEDED'"),
        5
    );
    let profiles_before = data
        .count("SELECT COUNT(*) FROM process_events WHERE event_type = 'policy.profile.loaded'");

    // Shadow: exactly the two writes, allow → deny.
    let report = data.json("operator", &["policy", "shadow", "report", "--json"]);
    assert_eq!(report["changed"], 2, "{report}");
    assert_eq!(
        transitions(&report),
        allow_to_deny_of_the_writes(),
        "{report}"
    );
    let example = &report["transitions"][0]["examples"][0];
    assert_eq!(example["tenant_id"], "acme");
    assert_eq!(example["candidate"]["decision"], "deny", "{example}");
    assert!(
        example["candidate"]["reason_code"]
            .as_str()
            .is_some_and(|code| code.starts_with("policy.")),
        "{example}"
    );
    assert_ne!(
        example["live"]["policy_version"], example["candidate"]["policy_version"],
        "{example}"
    );

    // Replay under the candidate: five calls compared, the same two changed.
    let replayed = data.json(
        "operator",
        &["--policy-dir", candidate, "policy", "replay", "--json"],
    );
    assert_eq!(replayed["compared"], 5, "{replayed}");
    assert_eq!(replayed["changed"], 2, "{replayed}");
    assert_eq!(
        transitions(&replayed),
        allow_to_deny_of_the_writes(),
        "{replayed}"
    );
    assert_eq!(replayed["skipped"], json!({}), "{replayed}");

    // Replay under the policy in force changes nothing.
    let same = data.json("operator", &["policy", "replay", "--json"]);
    assert_eq!(
        (same["compared"].clone(), same["changed"].clone()),
        (json!(5), json!(0))
    );

    // The text table.
    let text = data.run("operator", &["--policy-dir", candidate, "policy", "replay"]);
    assert_eq!(text.status.code(), Some(0));
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0], "5 calls compared, 2 decided differently",
        "{text}"
    );
    assert!(
        lines[1].starts_with("allow → deny") && lines[1].ends_with(" 2"),
        "{text}"
    );
    assert_eq!(
        lines.len(),
        4,
        "a header, one transition, two examples: {text}"
    );
    assert!(lines[2].contains("tool=workspace.write_text"), "{text}");

    // Windows: nothing recorded after now; an empty window is refused.
    let later = data.json(
        "operator",
        &[
            "policy",
            "replay",
            "--json",
            "--since",
            "2100-01-01T00:00:00Z",
        ],
    );
    assert_eq!(later["compared"], 0);
    let recent = data.json(
        "operator",
        &["policy", "shadow", "report", "--json", "--since", "1h"],
    );
    assert_eq!(recent["changed"], 2, "{recent}");
    let backwards = data.run(
        "operator",
        &["policy", "replay", "--since", "1h", "--until", "2h"],
    );
    assert_eq!(backwards.status.code(), Some(2));
    let garbage = data.run("operator", &["policy", "replay", "--since", "yesterday"]);
    assert_eq!(garbage.status.code(), Some(2));

    // Reading under a candidate leaves no trace of it in the store.
    assert_eq!(
        data.count(
            "SELECT COUNT(*) FROM process_events WHERE event_type = 'policy.profile.loaded'"
        ),
        profiles_before,
        "replay and report record no policy"
    );
}

#[test]
fn shadow_and_replay_find_exactly_the_denied_tools_calls_on_sqlite() {
    shadow_and_replay_find_exactly_the_denied_tools_calls(&DataDir::new());
}

#[test]
fn shadow_and_replay_find_exactly_the_denied_tools_calls_on_postgresql() {
    let Some(server) = airlock_e2e::pg::server(
        "policy_change::shadow_and_replay_find_exactly_the_denied_tools_calls_on_postgresql",
    ) else {
        return;
    };
    shadow_and_replay_find_exactly_the_denied_tools_calls(&DataDir::on_postgres(&server));
}

/// A broken candidate stops the worker before it opens a store; replay and report never create
/// a store in an empty data dir.
#[test]
fn a_broken_candidate_or_a_missing_store_is_refused_and_creates_nothing() {
    let data = DataDir::new();
    let broken = data.path().join("broken");
    std::fs::create_dir_all(&broken).expect("dir");
    std::fs::write(broken.join("default.toml"), "schema_version = 1\nname = [").expect("write");
    let worker = data.run(
        "operator",
        &[
            "worker",
            "--until-idle",
            "--shadow-policy-dir",
            broken.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(worker.status.code(), Some(3), "policy load exit");
    assert!(
        !data.path().join("airlock.sqlite3").exists(),
        "no store created"
    );
    for args in [
        &["policy", "replay"][..],
        &["policy", "shadow", "report"][..],
    ] {
        let output = data.run("operator", args);
        assert_eq!(output.status.code(), Some(4), "{args:?}");
        assert!(!data.path().join("airlock.sqlite3").exists(), "{args:?}");
    }
}
