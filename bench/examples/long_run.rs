//! SPEC §17.3's long-run figures, measured as a new user would meet them: a 990-step run of
//! 1 KB `workspace.write_text` calls submitted with `airlock run submit --inline` (release
//! binary, SQLite FULL), then the database's size and the median step latency of steps 891–990
//! against steps 2–100 (a step's latency: from the previous step's BATCH checkpoint to its own,
//! read from the `run.checkpointed` events' timestamps; step 1 has no predecessor).
//!
//! ```sh
//! cargo build --release -p airlock
//! cd bench && cargo run --release --example long_run -- ../target/release/airlock
//! ```
//! An optional second argument sets the step count (default 990).

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

fn main() {
    let mut args = std::env::args().skip(1);
    let binary = PathBuf::from(args.next().unwrap_or_else(|| {
        eprintln!("usage: long_run PATH_TO_AIRLOCK [STEPS]");
        std::process::exit(2);
    }));
    let steps: usize = args
        .next()
        .map(|s| s.parse().expect("STEPS is a number"))
        .unwrap_or(990);
    let dir = tempfile::tempdir().expect("temp dir");
    let content = "x".repeat(1024);
    let calls: Vec<Value> = (1..=steps)
        .map(|i| {
            json!({"calls": [{"call_id": format!("w{i}"), "tool": "workspace.write_text",
                "arguments": {"path": format!("notes/f{i}.txt"), "content": content},
                "argument_trust": {"path": "user", "content": "user"}}]})
        })
        .collect();
    let script = json!({"schema_version": 1, "tenant_id": "acme", "principal_id": "alice",
        "principal_scopes": ["workspace.read", "workspace.write"], "origin_trust": "user",
        "limits": {"max_steps": steps + 1, "max_tool_calls": steps}, "steps": calls});
    let script_path = dir.path().join("script.json");
    std::fs::write(&script_path, script.to_string()).expect("write the script");
    let data = dir.path().join("data");
    let started = std::time::Instant::now();
    let output = Command::new(&binary)
        .arg("--data-dir")
        .arg(&data)
        .args(["run", "submit"])
        .arg(&script_path)
        .arg("--inline")
        .output()
        .expect("run airlock");
    let wall = started.elapsed();
    assert!(
        output.status.success(),
        "airlock failed: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    let submitted: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(submitted["status"], "COMPLETED", "{submitted}");
    let db_path = data.join("airlock.sqlite3");
    let conn = rusqlite::Connection::open(&db_path).expect("open the store");
    // Fold the WAL back so the file's size is the database's.
    conn.pragma_update(None, "wal_checkpoint", "TRUNCATE")
        .expect("checkpoint");
    let bytes = std::fs::metadata(&db_path).expect("size").len();
    let mut statement = conn
        .prepare(
            "SELECT created_at, payload FROM events WHERE event_type = 'run.checkpointed' \
             ORDER BY id",
        )
        .expect("prepare");
    let batches: Vec<i64> = statement
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
        .expect("query")
        .map(|row| row.expect("row"))
        .filter(|(_, payload)| payload.contains("\"tool_batch\""))
        .map(|(at, _)| at)
        .collect();
    assert_eq!(batches.len(), steps, "one BATCH per step");
    // latency[i] is step i + 2's.
    let latency: Vec<f64> = batches
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1000.0)
        .collect();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let early = median(latency[..99.min(latency.len())].to_vec());
    let late_from = steps.saturating_sub(100).max(1);
    let late = median(latency[late_from - 1..].to_vec());
    println!("steps: {steps}; wall: {:.1} s", wall.as_secs_f64());
    println!(
        "database: {:.2} MB ({bytes} bytes, after a WAL checkpoint)",
        bytes as f64 / 1_000_000.0
    );
    println!(
        "median step latency: steps 2–100 {early:.2} ms, steps {}–{steps} {late:.2} ms, ratio {:.3}",
        late_from + 1,
        late / early
    );
}
