//! Issue 33 (SQLite M17, M18): a scripted run's call content is stored once beside its script,
//! in the PENDING checkpoint of its step, and everything that refers to it reads it back whole.
//! The real binary runs a script of two one-call steps and one two-call step; then the store's
//! own reads return every call's arguments and every step's calls as the script gave them.

use std::process::Command;

use airlock_core::store::Store;
use airlock_e2e::airlock_bin;
use airlock_sqlite::SqliteStore;
use serde_json::{Value, json};

fn write(call_id: &str, n: usize) -> Value {
    json!({"call_id": call_id, "tool": "workspace.write_text",
        "arguments": {"path": format!("notes/{call_id}.txt"), "content": "é\"x\n".repeat(n)},
        "argument_trust": {"path": "user", "content": "user"}})
}

#[test]
fn each_calls_content_is_stored_once_and_reads_back_whole() {
    let dir = tempfile::tempdir().expect("temp dir");
    let steps = [
        vec![write("a", 100)],
        vec![write("b", 200)],
        vec![write("c", 300), write("d", 5)],
    ];
    let script = json!({"schema_version": 1, "tenant_id": "acme", "principal_id": "alice",
        "principal_scopes": ["workspace.read", "workspace.write"], "origin_trust": "user",
        "steps": steps.iter().map(|calls| json!({"calls": calls})).collect::<Vec<_>>()});
    let script_path = dir.path().join("script.json");
    std::fs::write(&script_path, script.to_string()).expect("script");
    let data = dir.path().join("data");
    let output = Command::new(airlock_bin())
        .arg("--data-dir")
        .arg(&data)
        .args(["run", "submit"])
        .arg(&script_path)
        .arg("--inline")
        .output()
        .expect("run airlock");
    let submitted: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {} {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert_eq!(submitted["status"], "COMPLETED", "{submitted}");
    let run_id = submitted["run_id"]
        .as_str()
        .expect("run_id")
        .parse()
        .expect("a run id");

    let db = data.join("airlock.sqlite3");
    let raw = rusqlite::Connection::open(&db).expect("open");
    let count = |sql: &str| -> i64 { raw.query_row(sql, [], |row| row.get(0)).expect(sql) };
    assert_eq!(
        count("SELECT COUNT(*) FROM step_records WHERE calls IS NULL"),
        3,
        "every step's calls are its PENDING checkpoint's"
    );
    assert_eq!(
        count("SELECT COUNT(*) FROM tool_invocations WHERE raw_arguments IS NULL"),
        3,
        "each step's first call keeps its arguments in the PENDING of its own transaction"
    );
    assert_eq!(
        count("SELECT COUNT(*) FROM tool_invocations WHERE arguments IS NULL"),
        4,
        "no call's effective arguments differ from its raw ones"
    );
    drop(raw);

    let store = SqliteStore::open(&db).expect("open the store");
    let (invocations, records) = store
        .read(|tx| {
            Ok((
                tx.invocations_of_run(run_id)?,
                tx.step_records(run_id, 0, 10)?,
            ))
        })
        .expect("read");
    let scripted: Vec<&Value> = steps.iter().flatten().collect();
    assert_eq!(invocations.len(), scripted.len());
    for (invocation, call) in invocations.iter().zip(&scripted) {
        assert_eq!(invocation.call_id, call["call_id"].as_str().expect("id"));
        assert_eq!(
            invocation.raw_arguments, call["arguments"],
            "{}",
            invocation.call_id
        );
        assert_eq!(
            invocation.arguments,
            airlock_core::canonical::to_canonical_string(&call["arguments"])
        );
    }
    let recorded: Vec<Vec<Value>> = records
        .iter()
        .map(|record| {
            record
                .calls
                .iter()
                .map(|c| json!({"call_id": c.call_id, "arguments": c.arguments}))
                .collect()
        })
        .collect();
    let expected: Vec<Vec<Value>> = steps
        .iter()
        .map(|calls| {
            calls
                .iter()
                .map(|c| json!({"call_id": c["call_id"], "arguments": c["arguments"]}))
                .collect()
        })
        .collect();
    assert_eq!(recorded, expected, "each step record's calls, as scripted");
}
