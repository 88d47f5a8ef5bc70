//! `airlock demo` as a newcomer runs it (Appendix A; adapter acceptance item 5): the real binary
//! on a fresh data directory. What the narration says is checked against the store and the
//! outbox the demo leaves behind, so a timeline that claims something the data does not hold
//! fails here.

use std::path::Path;
use std::process::{Command, Output};

use airlock_e2e::*;
use serde_json::Value;

fn demo_output(args: &[&str], tmpdir: Option<&Path>) -> Output {
    let mut command = Command::new(airlock_bin());
    command
        .arg("demo")
        .args(args)
        .env_remove("AIRLOCK_CRASH_AT");
    if let Some(dir) = tmpdir {
        command.env("TMPDIR", dir);
    }
    command.output().expect("airlock runs")
}

/// The demo, which must succeed.
fn demo(args: &[&str], tmpdir: Option<&Path>) -> Output {
    let output = demo_output(args, tmpdir);
    assert_eq!(
        output.status.code(),
        Some(0),
        "demo failed: stdout {} stderr {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// `(id, status)` of every row of `table`, oldest first.
fn rows(data: &DataDir, table: &str) -> Vec<(String, String)> {
    let conn = db(data);
    let mut stmt = conn
        .prepare(&format!(
            "SELECT id, status FROM {table} ORDER BY created_at, id"
        ))
        .expect("query");
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect()
}

#[test]
fn demo_parks_for_approval_completes_and_leaves_one_uncertain_effect() {
    let data = DataDir::new();
    let output = demo(&["--data-dir", data.path().to_str().expect("utf-8")], None);
    let text = String::from_utf8_lossy(&output.stdout);

    // The store: two runs, both completed; both approvals granted; one effect left UNCERTAIN
    // with its watermark, the other SUCCEEDED; and no effect twice.
    let runs = rows(&data, "runs");
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(
        runs.iter().all(|(_, status)| status == "COMPLETED"),
        "{runs:?}"
    );
    let approvals = rows(&data, "approvals");
    assert_eq!(approvals.len(), 2, "{approvals:?}");
    assert!(approvals.iter().all(|(_, status)| status == "approved"));
    let writes: Vec<_> = invocations(&data)
        .into_iter()
        .filter(|(_, tool, _, _)| tool == "demo.external_write")
        .collect();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert_eq!(writes[0].0, "SUCCEEDED");
    let (status, _, key, watermark) = &writes[1];
    assert_eq!(status, "UNCERTAIN");
    assert!(
        watermark.is_some(),
        "the interrupted call kept its watermark"
    );
    assert_no_duplicate_effects(&data);
    let outbox = data.outbox();
    assert_eq!(outbox.len(), 2, "one line per approved effect");
    assert_eq!(
        outbox
            .iter()
            .filter(|line| line["idempotency_key"] == key.as_str())
            .count(),
        1
    );

    // Appendix A: only the first script runs on the inline dispatcher (the demo's own
    // process); the second is executed by durable `airlock worker` child processes.
    let started_by = |run: &str| -> Vec<String> {
        let conn = db(&data);
        let mut stmt = conn
            .prepare(
                "SELECT actor_id FROM events WHERE run_id = ?1 AND event_type = 'run.started' \
                 ORDER BY id",
            )
            .expect("query");
        stmt.query_map([run], |r| r.get(0))
            .expect("rows")
            .map(|r| r.expect("row"))
            .collect()
    };
    let (first_run, second_run) = (&runs[0].0, &runs[1].0);
    let inline = started_by(first_run);
    let durable = started_by(second_run);
    assert!(!inline.is_empty() && !durable.is_empty());
    assert!(
        inline.iter().all(|w| !w.starts_with("worker-")),
        "first script: the demo's inline worker, {inline:?}"
    );
    assert!(
        durable.iter().all(|w| w.starts_with("worker-")),
        "second script: child workers only, {durable:?}"
    );

    // The narration shows the same approval, crash and review-queue entry, in order.
    let first_approval = &approvals[0].0;
    let queue = data.json("operator", &["invocations", "uncertain"])["items"]
        .as_array()
        .expect("items")
        .clone();
    assert_eq!(queue.len(), 1, "{queue:?}");
    let uncertain = queue[0]["id"].as_str().expect("id");
    let expected_in_order = [
        "tool.call.proposed         name=demo.external_write call_id=c4".to_owned(),
        "run.waiting_for_approval".to_owned(),
        "== 2. The approval queue holds one request".to_owned(),
        format!("approval {first_approval}  tool demo.external_write  risk high"),
        "run.completed              final_message=done".to_owned(),
        "child worker with AIRLOCK_CRASH_AT=after_invoke exited: aborted (SIGABRT)".to_owned(),
        "restarted worker (--until-idle) exited: exit code 0".to_owned(),
        "tool.call.uncertain        name=demo.external_write call_id=send reason_code=tool.outcome_unknown".to_owned(),
        format!(
            "UNCERTAIN {uncertain} demo.external_write reason tool.outcome_unknown  idempotency_key {key}"
        ),
        "outbox.jsonl holds exactly 1 line with that idempotency_key".to_owned(),
    ];
    let mut from = 0;
    for expected in &expected_in_order {
        let at = text[from..]
            .find(expected.as_str())
            .unwrap_or_else(|| panic!("missing or out of order: {expected:?} in\n{text}"));
        from += at + expected.len();
    }

    // The settle command the demo prints works as printed (tenant acme, a platform principal).
    let settled = data.json(
        "operator",
        &[
            "invocations",
            "settle",
            uncertain,
            "--outcome",
            "succeeded",
            "--note",
            "checked billing",
        ],
    );
    assert_eq!(settled["outcome"], "succeeded");
    assert!(
        text.contains(&format!(
            "invocations settle {uncertain} --outcome succeeded"
        )),
        "the demo prints the settle command"
    );
}

#[test]
fn demo_without_a_data_dir_uses_a_new_temporary_one_and_prints_it() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let output = demo(&[], Some(tmp.path()));
    let text = String::from_utf8_lossy(&output.stdout);
    let printed = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("data dir:"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no data dir line in\n{text}"));
    let dir = Path::new(printed);
    assert_eq!(dir.parent(), Some(tmp.path()), "under the temp dir");
    assert!(
        dir.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("airlock-demo-")),
        "{printed}"
    );
    assert!(dir.join("airlock.sqlite3").is_file());
    assert!(dir.join("outbox.jsonl").is_file());
    // It says, last, that the directory stays and how to remove it.
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.contains(&format!("data dir stays at {printed}"))
            && last.contains(&format!("rm -rf {printed}")),
        "{last}"
    );
}

#[test]
fn demo_json_prints_event_envelopes_only() {
    let data = DataDir::new();
    let output = demo(
        &["--json", "--data-dir", data.path().to_str().expect("utf-8")],
        None,
    );
    let events: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.lines().next().unwrap_or_default(),
        format!("airlock demo: data dir {}", data.path().display()),
        "with stdout kept for events, the data dir is named on stderr"
    );
    assert!(
        stderr.contains(&format!("data dir stays at {}", data.path().display())),
        "{stderr}"
    );
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["event_type"].as_str().expect("event_type"))
        .collect();
    for expected in [
        "approval.requested",
        "approval.resolved",
        "tool.call.uncertain",
        "run.completed",
    ] {
        assert!(types.contains(&expected), "{expected} missing: {types:?}");
    }
    let stored: i64 = db(&data)
        .query_row(
            "SELECT COUNT(*) FROM events WHERE event_type = 'tool.call.uncertain'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(
        types
            .iter()
            .filter(|t| **t == "tool.call.uncertain")
            .count() as i64,
        stored
    );
}

#[test]
fn demo_refuses_a_data_dir_that_already_holds_a_store_and_touches_nothing() {
    let data = DataDir::new();
    let run = data.submit(&script(serde_json::json!([[external_write(
        "x", "theirs"
    )]])));
    let output = demo_output(&["--data-dir", data.path().to_str().expect("utf-8")], None);
    assert_eq!(output.status.code(), Some(2));
    let error: Value = serde_json::from_slice(&output.stdout).expect("the error object");
    assert_eq!(error["error"]["code"], "invalid_argument");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("fresh data dir")),
        "{error}"
    );
    let (status, attempts) = data.status_and_attempts(&run);
    assert_eq!(
        (status.as_str(), attempts),
        ("QUEUED", 0),
        "nobody claimed it"
    );
    let runs: i64 = db(&data)
        .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
        .expect("count");
    assert_eq!(runs, 1, "the demo submitted nothing");
    assert!(data.outbox().is_empty());
}
