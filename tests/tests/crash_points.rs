//! Every `CrashPoint` through `AIRLOCK_CRASH_AT` against the real binary (SPEC §2.2, §16 #41):
//! the process aborts right after the named commit, and a fresh process recovers per §9.4 with
//! no duplicate effect and every committed watermark still present.

use airlock_core::vocab::CrashPoint;
use airlock_e2e::*;
use serde_json::{Value, json};

/// Each crash point's test is named after it, so a point added to core without an end-to-end
/// test here fails this check instead of going unexercised (acceptance: every `CrashPoint`).
#[test]
fn every_crash_point_has_its_own_test() {
    let source = include_str!("crash_points.rs");
    let missing: Vec<&str> = CrashPoint::ALL
        .iter()
        .map(|point| point.as_str())
        .filter(|name| !source.contains(&format!("fn {name}() {{")))
        .collect();
    assert!(missing.is_empty(), "no end-to-end test for {missing:?}");
}

/// A command with a crash point: it must abort (SIGABRT, no exit code).
fn crash(data: &DataDir, point: &str, principal: &str, args: &[&str]) {
    let output = data
        .command(principal, args)
        .env("AIRLOCK_CRASH_AT", point)
        .output()
        .expect("airlock runs");
    assert_eq!(
        output.status.code(),
        None,
        "{point}: expected an abort, got {:?}; stderr {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(point),
        "{point}: the abort names the point"
    );
}

/// Workers until nothing is queued or running, approving every pending approval in between.
fn settle_everything(data: &DataDir) {
    for _ in 0..10 {
        let worker = data.worker_until_idle(1_000);
        assert_eq!(
            worker.status.code(),
            Some(0),
            "worker: {}",
            String::from_utf8_lossy(&worker.stderr)
        );
        let pending = data.json("operator", &["approvals", "list"])["items"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if pending.is_empty() {
            return;
        }
        for approval in pending {
            data.json(
                "operator",
                &["approvals", "approve", approval["id"].as_str().unwrap()],
            );
        }
    }
    panic!("runs did not settle");
}

/// The mixed script: a workspace write, a parallel read-only pair, a refusal, an approval.
fn mixed() -> Value {
    script(json!([
        [workspace_write("w1", "notes/a.txt", "hello")],
        [{"call_id": "r1", "tool": "workspace.read_text", "arguments": {"path": "notes/a.txt"}},
         {"call_id": "t1", "tool": "system.current_time", "arguments": {}}],
        [{"call_id": "u1", "tool": "no.such_tool", "arguments": {}}],
        [external_write("x1", "effect")]
    ]))
}

/// One row of [`invocations`]: status, tool, idempotency key, watermark.
type InvocationRow = (String, String, String, Option<i64>);

/// Runs the mixed script with a worker crashing at `point` (after approving when needed), then
/// recovers with fresh workers and checks the end state. Returns the data dir and the
/// invocation rows as the crash left them.
fn worker_crash(point: &str, approve_first: bool) -> (DataDir, Vec<InvocationRow>) {
    let data = DataDir::new();
    let run = data.submit(&mixed());
    if approve_first {
        assert_eq!(data.worker_until_idle(1_000).status.code(), Some(0));
        data.approve_first_pending(&run);
    }
    crash(
        &data,
        point,
        "operator",
        &["worker", "--until-idle", "--lease-ms", "1000"],
    );
    let at_crash = invocations(&data);
    settle_everything(&data);
    assert_eq!(data.run_status(&run), "COMPLETED", "{point}");
    assert!(data.outbox().len() <= 1, "{point}: at most one effect");
    assert_no_duplicate_effects(&data);
    assert_recovery_kept_the_watermarks(point, &at_crash, &invocations(&data));
    (data, at_crash)
}

/// SPEC §9.4 across a crash: a watermark committed before the abort is there after recovery,
/// unchanged (never rewritten); a row that was terminal stays as it was; and a RUNNING
/// `demo.external_write` (non-idempotent) with a watermark is never invoked again: it ends
/// UNCERTAIN.
fn assert_recovery_kept_the_watermarks(
    point: &str,
    at_crash: &[InvocationRow],
    after: &[InvocationRow],
) {
    for (status, tool, key, watermark) in at_crash {
        let (end_status, _, _, end_watermark) = after
            .iter()
            .find(|row| &row.2 == key)
            .unwrap_or_else(|| panic!("{point}: the row of {key} is gone"));
        if watermark.is_some() {
            assert_eq!(end_watermark, watermark, "{point}: {tool}'s watermark");
        }
        if ["SUCCEEDED", "FAILED", "DENIED", "UNCERTAIN"].contains(&status.as_str()) {
            assert_eq!(end_status, status, "{point}: terminal {tool} changed");
        }
        if status == "RUNNING" && tool == "demo.external_write" && watermark.is_some() {
            assert_eq!(
                end_status, "UNCERTAIN",
                "{point}: {tool} after its watermark"
            );
        }
    }
}

#[test]
fn after_claim() {
    worker_crash("after_claim", false);
}

#[test]
fn after_pending() {
    worker_crash("after_pending", false);
}

#[test]
fn after_refuse() {
    worker_crash("after_refuse", false);
}

#[test]
fn after_propose() {
    worker_crash("after_propose", false);
}

#[test]
fn after_start() {
    worker_crash("after_start", false);
}

#[test]
fn after_invoke() {
    worker_crash("after_invoke", false);
}

#[test]
fn after_finish() {
    worker_crash("after_finish", false);
}

#[test]
fn after_batch() {
    worker_crash("after_batch", false);
}

#[test]
fn after_park() {
    worker_crash("after_park", false);
}

#[test]
fn after_final() {
    worker_crash("after_final", true);
}

#[test]
fn after_revalidate() {
    worker_crash("after_revalidate", true);
}

#[test]
fn after_pending_the_step_its_first_call_and_its_start_committed_together() {
    // SPEC §17.1 F1, F2: PENDING, PROPOSE and START of an allowed call are one commit, so an
    // abort right after it finds all three in the file: the checkpointed batch, the row
    // RUNNING with its watermark, and the call counted; a fresh worker finishes it once.
    let data = DataDir::new();
    let run = data.submit(&script(json!([[workspace_write("w1", "a.txt", "x")]])));
    crash(
        &data,
        "after_pending",
        "operator",
        &["worker", "--until-idle", "--lease-ms", "1000"],
    );
    let conn = db(&data);
    let (trigger, state): (String, String) = conn
        .query_row(
            "SELECT \"trigger\", state FROM checkpoints WHERE run_id = ?1 ORDER BY version DESC LIMIT 1",
            [&run],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(trigger, "tool_pending");
    let state: Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["pending"]["step"], 1);
    let rows = invocations(&data);
    assert_eq!(
        rows.len(),
        1,
        "the step's first call committed with its PENDING"
    );
    assert_eq!(rows[0].0, "RUNNING", "START folded into PROPOSE");
    assert!(rows[0].3.is_some(), "with its watermark");
    let count: i64 = conn
        .query_row(
            "SELECT tool_call_count FROM runs WHERE id = ?1",
            [&run],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(count, 1);
    drop(conn);
    settle_everything(&data);
    assert_eq!(data.run_status(&run), "COMPLETED");
    let rows = invocations(&data);
    assert_eq!(
        rows[0].0, "SUCCEEDED",
        "an idempotent write re-executes under its key"
    );
}

#[test]
fn after_start_of_the_approved_external_write_never_sends_it() {
    // After approval the first START is the external write's: its watermark is committed, the
    // body has not run. Recovery must mark it UNCERTAIN, not send it (§9.4, §16 #11).
    let (data, at_crash) = worker_crash("after_start", true);
    assert!(
        at_crash
            .iter()
            .any(|(status, tool, _, watermark)| status == "RUNNING"
                && tool == "demo.external_write"
                && watermark.is_some()),
        "the crash came right after the external write's START: {at_crash:?}"
    );
    assert!(
        data.outbox().is_empty(),
        "the write's body never ran, so nothing may have been sent"
    );
}

#[test]
fn after_invoke_of_the_approved_external_write_leaves_it_uncertain_with_its_watermark() {
    // The effect happened; the worker died before FINISH. The watermark survives the abort and
    // recovery marks the call UNCERTAIN instead of sending it again.
    let data = DataDir::new();
    let run = data.submit(&script(json!([[external_write("x1", "once")]])));
    data.worker_until_idle(1_000);
    data.approve_first_pending(&run);
    crash(
        &data,
        "after_invoke",
        "operator",
        &["worker", "--until-idle", "--lease-ms", "1000"],
    );
    let rows = invocations(&data);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].0, "RUNNING");
    assert!(
        rows[0].3.is_some(),
        "the committed watermark is present on reopen"
    );
    assert_eq!(data.outbox().len(), 1);
    settle_everything(&data);
    let rows = invocations(&data);
    assert_eq!(rows[0].0, "UNCERTAIN");
    assert_eq!(data.outbox().len(), 1);
    assert_no_duplicate_effects(&data);
}

#[test]
fn after_recover() {
    // A second crash, right after RECOVER marked the call UNCERTAIN.
    let data = DataDir::new();
    let run = data.submit(&script(json!([[external_write("x1", "once")]])));
    data.worker_until_idle(1_000);
    data.approve_first_pending(&run);
    crash(
        &data,
        "after_start",
        "operator",
        &["worker", "--until-idle", "--lease-ms", "1000"],
    );
    crash(
        &data,
        "after_recover",
        "operator",
        &["worker", "--until-idle", "--lease-ms", "1000"],
    );
    assert_eq!(invocations(&data)[0].0, "UNCERTAIN");
    settle_everything(&data);
    assert_eq!(data.run_status(&run), "COMPLETED");
    assert!(
        data.outbox().is_empty(),
        "the body never ran: START committed, the crash came before invoke"
    );
    assert_no_duplicate_effects(&data);
}

#[test]
fn after_reclaim() {
    let data = DataDir::new();
    let run = data.submit(&script(json!([[workspace_write("w1", "a.txt", "x")]])));
    crash(
        &data,
        "after_start",
        "operator",
        &["worker", "--until-idle", "--lease-ms", "1000"],
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    crash(
        &data,
        "after_reclaim",
        "operator",
        &["worker", "--until-idle", "--lease-ms", "1000"],
    );
    assert_eq!(data.run_status(&run), "QUEUED");
    settle_everything(&data);
    assert_eq!(data.run_status(&run), "COMPLETED");
}

#[test]
fn after_submit() {
    let data = DataDir::new();
    let path = data.script("s", &script(json!([[workspace_write("w1", "a.txt", "x")]])));
    crash(
        &data,
        "after_submit",
        "alice",
        &["run", "submit", path.to_str().unwrap()],
    );
    settle_everything(&data);
    let conn = db(&data);
    let statuses: Vec<String> = conn
        .prepare("SELECT status FROM runs")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        statuses,
        ["COMPLETED"],
        "the committed submission survived the abort"
    );
}

#[test]
fn after_resolve() {
    let data = DataDir::new();
    let run = data.submit(&script(json!([[external_write("x1", "once")]])));
    data.worker_until_idle(1_000);
    let id = data.first_pending_id(&run);
    crash(
        &data,
        "after_resolve",
        "operator",
        &["approvals", "approve", &id],
    );
    assert_eq!(
        data.json("operator", &["approvals", "get", &id])["status"],
        "approved"
    );
    assert_eq!(data.run_status(&run), "QUEUED");
    settle_everything(&data);
    assert_eq!(data.run_status(&run), "COMPLETED");
    assert_eq!(data.outbox().len(), 1);
}

#[test]
fn after_expire() {
    let data = DataDir::new();
    let dir = short_expiry_policies(&data);
    let dir = dir.as_str();
    let path = data.script("s", &script(json!([[external_write("x1", "late")]])));
    let submitted = data.run(
        "alice",
        &["--policy-dir", dir, "run", "submit", path.to_str().unwrap()],
    );
    let run = serde_json::from_slice::<Value>(&submitted.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        data.run("operator", &["--policy-dir", dir, "worker", "--until-idle"])
            .status
            .code(),
        Some(0)
    );
    std::thread::sleep(std::time::Duration::from_millis(1200));
    crash(
        &data,
        "after_expire",
        "operator",
        &["--policy-dir", dir, "approvals", "expire"],
    );
    assert_eq!(data.run_status(&run), "QUEUED");
    assert_eq!(
        data.run("operator", &["--policy-dir", dir, "worker", "--until-idle"])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(data.run_status(&run), "COMPLETED");
    assert!(data.outbox().is_empty());
}

#[test]
fn after_cancel() {
    let data = DataDir::new();
    let run = data.submit(&script(json!([[external_write("x1", "never")]])));
    data.worker_until_idle(1_000);
    crash(&data, "after_cancel", "alice", &["runs", "cancel", &run]);
    assert_eq!(data.run_status(&run), "CANCELLED");
    assert!(data.pending(&run).is_empty());
}

#[test]
fn after_settle() {
    let data = DataDir::new();
    let run = data.submit(&script(json!([[external_write("x1", "once")]])));
    data.worker_until_idle(1_000);
    data.approve_first_pending(&run);
    crash(
        &data,
        "after_invoke",
        "operator",
        &["worker", "--until-idle", "--lease-ms", "1000"],
    );
    settle_everything(&data);
    let call = data.json("operator", &["invocations", "uncertain"])["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    crash(
        &data,
        "after_settle",
        "operator",
        &[
            "invocations",
            "settle",
            &call,
            "--outcome",
            "failed",
            "--note",
            "not delivered",
        ],
    );
    let again = data.json(
        "operator",
        &[
            "invocations",
            "settle",
            &call,
            "--outcome",
            "failed",
            "--note",
            "same finding",
        ],
    );
    assert_eq!(
        again["note"], "not delivered",
        "the committed settlement is returned"
    );
}

#[test]
fn after_profile() {
    // Every process that opens the store records its policy first; the record survives an abort.
    let data = DataDir::new();
    crash(
        &data,
        "after_profile",
        "operator",
        &["worker", "--until-idle"],
    );
    let conn = db(&data);
    let (version, rules): (String, i64) = conn
        .query_row(
            "SELECT policy_version, rule_count FROM policy_profiles",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let shipped = airlock_core::policy::Ruleset::shipped().expect("the shipped policy loads");
    assert_eq!(version, shipped.version.as_str());
    assert_eq!(rules, shipped.rule_count() as i64);
    let loaded: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM process_events WHERE event_type = 'policy.profile.loaded'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(loaded, 1);
    data.json("operator", &["approvals", "list"]);
    let loaded: i64 = db(&data)
        .query_row("SELECT COUNT(*) FROM process_events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        loaded, 1,
        "one policy.profile.loaded per policy_version (§16 #7)"
    );
}
