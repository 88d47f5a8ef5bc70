//! The CLI across separate processes (Appendix A): submit, a worker until idle, approve or deny
//! from another process, a worker resumes; expiry; cancel of a parked run; the review queue.

use airlock_core::testing::{GRANTED_APPROVAL_EVENTS, assert_subsequence};
use airlock_e2e::*;
use serde_json::{Value, json};

#[test]
fn approved_run_resumes_in_a_new_worker_process_and_completes() {
    // A parked run holds nothing: a later, separate worker finishes it after approval.
    let data = DataDir::new();
    let run = data.submit(&script(json!([
        [workspace_write("w", "notes/a.txt", "hi")],
        [external_write("x", "hello")]
    ])));
    assert_eq!(data.run_status(&run), "QUEUED");
    assert_eq!(data.worker_until_idle(30_000).status.code(), Some(0));
    assert_eq!(data.run_status(&run), "WAITING_FOR_APPROVAL");
    let pending = data.pending(&run);
    assert_eq!(pending.len(), 1);
    let id = pending[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(pending[0]["tool_name"], "demo.external_write");
    let resolved = data.json(
        "operator",
        &["approvals", "approve", &id, "--reason", "fine"],
    );
    assert_eq!(resolved["state"], "applied");
    assert_eq!(resolved["approval"]["status"], "approved");
    assert_eq!(data.run_status(&run), "QUEUED");
    assert_eq!(data.worker_until_idle(30_000).status.code(), Some(0));
    assert_eq!(data.run_status(&run), "COMPLETED");
    let outbox = data.outbox();
    assert_eq!(outbox.len(), 1);
    assert_eq!(outbox[0]["content"], "hello");
    let again = data.run("operator", &["approvals", "approve", &id]);
    assert_eq!(again.status.code(), Some(0));
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["state"], "already_resolved_identically");
    let differently = data.run("operator", &["approvals", "deny", &id]);
    assert_eq!(
        differently.status.code(),
        Some(1),
        "a different second resolution exits 1"
    );
    let types: Vec<String> = data
        .events(&run)
        .iter()
        .map(|e| e["event_type"].as_str().unwrap().to_owned())
        .collect();
    assert_subsequence(&types, &GRANTED_APPROVAL_EVENTS);
}

#[test]
fn denied_run_records_the_denial_and_completes() {
    let data = DataDir::new();
    let run = data.submit(&script(json!([[external_write("x", "no")]])));
    data.worker_until_idle(30_000);
    let id = data.first_pending_id(&run);
    assert_eq!(
        data.json("operator", &["approvals", "deny", &id])["state"],
        "applied"
    );
    data.worker_until_idle(30_000);
    assert_eq!(data.run_status(&run), "COMPLETED");
    assert!(data.outbox().is_empty(), "a denied call has no effect");
    let denied = data
        .events(&run)
        .into_iter()
        .find(|e| e["event_type"] == "tool.call.denied")
        .expect("denial event");
    assert_eq!(denied["payload"]["reason_code"], "approval.denied");
}

#[test]
fn expired_approval_is_reported_expired() {
    // A profile whose approvals expire after one second; `approvals expire` closes them.
    let data = DataDir::new();
    let policy_dir = short_expiry_policies(&data);
    let with_policy = |principal: &str, args: &[&str]| {
        let mut all = vec!["--policy-dir", policy_dir.as_str()];
        all.extend_from_slice(args);
        data.run(principal, &all)
    };
    let path = data.script("expiring", &script(json!([[external_write("x", "late")]])));
    let submitted = with_policy("alice", &["run", "submit", path.to_str().unwrap()]);
    let run = serde_json::from_slice::<serde_json::Value>(&submitted.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        with_policy("operator", &["worker", "--until-idle"])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(data.run_status(&run), "WAITING_FOR_APPROVAL");
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let expired = with_policy("operator", &["approvals", "expire"]);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&expired.stdout).unwrap(),
        json!({"expired": 1})
    );
    assert_eq!(
        with_policy("operator", &["worker", "--until-idle"])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(data.run_status(&run), "COMPLETED");
    let events = data.events(&run);
    assert!(events.iter().any(|e| e["event_type"] == "approval.expired"));
    assert!(
        !events
            .iter()
            .any(|e| e["event_type"] == "approval.resolved")
    );
    let denied = events
        .iter()
        .find(|e| e["event_type"] == "tool.call.denied")
        .expect("closed call");
    assert_eq!(denied["payload"]["reason_code"], "approval.expired");
}

#[test]
fn cancelling_a_parked_run_closes_it_in_one_step() {
    let data = DataDir::new();
    let run = data.submit(&script(json!([[external_write("x", "never")]])));
    data.worker_until_idle(30_000);
    assert_eq!(data.run_status(&run), "WAITING_FOR_APPROVAL");
    assert_eq!(
        data.json("alice", &["runs", "cancel", &run]),
        json!({"accepted": true, "status": "CANCELLED"})
    );
    assert!(data.pending(&run).is_empty());
    assert_eq!(
        data.json("alice", &["runs", "cancel", &run]),
        json!({"accepted": false, "status": "CANCELLED"})
    );
    let resume = data.run("alice", &["runs", "resume", &run]);
    assert_eq!(
        resume.status.code(),
        Some(1),
        "resuming a cancelled run is a conflict"
    );
}

#[test]
fn interrupted_effect_enters_the_review_queue_and_can_be_settled() {
    // A worker aborts right after the effect; the next one marks the call UNCERTAIN, never repeats it.
    let data = DataDir::new();
    let run = data.submit(&script(json!([[external_write("x", "once")]])));
    data.worker_until_idle(1_000);
    data.approve_first_pending(&run);
    let crashed = data
        .spawn_worker(1_000, Some("after_invoke"))
        .wait_with_output()
        .unwrap();
    assert_eq!(crashed.status.code(), None, "the worker aborted");
    assert_eq!(data.worker_until_idle(1_000).status.code(), Some(0));
    assert_eq!(data.run_status(&run), "COMPLETED");
    let queue = data.json("operator", &["invocations", "uncertain"]);
    let items = queue["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    let call = &items[0];
    assert_eq!(call["status"], "UNCERTAIN");
    assert_eq!(call["reason_code"], "tool.outcome_unknown");
    assert_eq!(call["settlement"], Value::Null, "not settled yet");
    let outbox = data.outbox();
    assert_eq!(outbox.len(), 1, "the effect happened exactly once");
    assert_eq!(outbox[0]["idempotency_key"], call["idempotency_key"]);
    let call_id = call["id"].as_str().unwrap();
    let settled = data.json(
        "operator",
        &[
            "invocations",
            "settle",
            call_id,
            "--outcome",
            "succeeded",
            "--note",
            "billing confirmed",
        ],
    );
    assert_eq!(settled["outcome"], "succeeded");
    assert!(
        data.json("operator", &["invocations", "uncertain"])["items"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let all = data.json("operator", &["invocations", "uncertain", "--all"])["items"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0]["id"], call["id"]);
    assert_eq!(
        all[0]["settlement"], settled,
        "--all shows the finding each settled call has"
    );
    let conflict = data.run(
        "operator",
        &[
            "invocations",
            "settle",
            call_id,
            "--outcome",
            "failed",
            "--note",
            "x",
        ],
    );
    assert_eq!(conflict.status.code(), Some(1));
}

/// Issue 27: what a person types. `approvals list --output table` and `invocations uncertain
/// --output table` print aligned columns with short ids; `approvals approve` and `invocations
/// settle` take those as prefixes (8 or more hex digits); a shorter one is invalid (exit 2), one
/// that names nothing pending is `not_found` (exit 1).
#[test]
fn tables_for_people_and_id_prefixes() {
    let data = DataDir::new();
    let run = data.submit(&script(json!([[external_write("x", "once")]])));
    data.worker_until_idle(1_000);
    let id = data.first_pending_id(&run);
    let table = data.run("operator", &["approvals", "list", "--output", "table"]);
    assert_eq!(table.status.code(), Some(0));
    let text = String::from_utf8_lossy(&table.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    for (header, cell) in [
        ("ID", &id[..8]),
        ("TOOL", "demo.external_write"),
        ("RISK", "high"),
        ("RUN", &run[..8]),
    ] {
        let at = lines[0]
            .find(header)
            .unwrap_or_else(|| panic!("{header}: {text}"));
        assert_eq!(
            lines[1].get(at..at + cell.len()),
            Some(cell),
            "{header} column: {text}"
        );
    }
    assert!(
        lines[1].contains("59m") || lines[1].contains("58m"),
        "{text}"
    );

    let short = data.run("operator", &["approvals", "approve", &id[..7]]);
    assert_eq!(short.status.code(), Some(2));
    let elsewhere = data.run("operator", &["approvals", "approve", "00000000"]);
    assert_eq!(elsewhere.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&elsewhere.stdout).contains("not_found"));
    let approved = data.json("operator", &["approvals", "approve", &id[..8]]);
    assert_eq!(approved["approval"]["id"], id.as_str());
    assert_eq!(approved["state"], "applied");

    let crashed = data
        .spawn_worker(1_000, Some("after_invoke"))
        .wait_with_output()
        .unwrap();
    assert_eq!(crashed.status.code(), None, "the worker aborted");
    data.worker_until_idle(1_000);
    let call = data.json("operator", &["invocations", "uncertain"])["items"][0].clone();
    let call_id = call["id"].as_str().unwrap();
    let queue = data.run(
        "operator",
        &["invocations", "uncertain", "--output", "table"],
    );
    let text = String::from_utf8_lossy(&queue.stdout);
    assert!(text.starts_with("ID        TOOL"), "{text}");
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with(&call_id[..8])),
        "{text}"
    );
    let settled = data.json(
        "operator",
        &[
            "invocations",
            "settle",
            &call_id[..10],
            "--outcome",
            "succeeded",
            "--note",
            "checked the outbox",
        ],
    );
    assert_eq!(settled["invocation_id"], call_id);
}
