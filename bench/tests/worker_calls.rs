//! The worker benchmark's workload does what it claims: every submitted call runs through the
//! worker to SUCCEEDED, the report counts exactly those calls, and group commit was in play.

use airlock_bench::worker_calls::{BenchTool, WorkerLoad, measure, tool_script};

#[test]
fn every_call_of_the_load_succeeds_and_is_counted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let load = WorkerLoad {
        tool: BenchTool::WriteText,
        concurrent_runs: 3,
        runs_per_slot: 2,
        calls_per_run: 4,
        calls_per_step: 2,
    };
    let report = measure(dir.path(), load).expect("the load runs to completion");
    assert_eq!(report.calls.operations, 3 * 2 * 4, "calls counted");
    assert!(report.calls.per_second() > 0.0);
    assert!(
        report.cpu > std::time::Duration::ZERO && report.cpu_ceiling(2) > 0.0,
        "the process's CPU time is measured: {:?}",
        report.cpu
    );
    assert!(
        report.transactions >= report.groups && report.groups > 0,
        "transactions {} in {} groups",
        report.transactions,
        report.groups
    );
    // The files the calls wrote exist in the runs' workspaces.
    assert_eq!(
        txt_files(dir.path()),
        3 * 2 * 4,
        "one file per write_text call"
    );
}

#[test]
fn calculate_calls_succeed_and_write_no_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let load = WorkerLoad {
        tool: BenchTool::Calculate,
        concurrent_runs: 2,
        runs_per_slot: 2,
        calls_per_run: 3,
        calls_per_step: 1,
    };
    let report = measure(dir.path(), load).expect("the load runs to completion");
    assert_eq!(report.calls.operations, 2 * 2 * 3, "calls counted");
    assert_eq!(txt_files(dir.path()), 0, "math.calculate writes nothing");
    let script: serde_json::Value =
        serde_json::from_str(&tool_script(BenchTool::Calculate, 2, 1)).expect("JSON");
    assert_eq!(script["steps"][1]["calls"][0]["tool"], "math.calculate");
    assert_eq!(
        script["steps"][1]["calls"][0]["arguments"]["expression"],
        "1 * 17 + 3"
    );
}

#[test]
fn the_script_groups_writes_into_steps_and_fits_its_limits() {
    let one: serde_json::Value =
        serde_json::from_str(&tool_script(BenchTool::WriteText, 5, 1)).expect("JSON");
    assert_eq!(one["steps"].as_array().map(Vec::len), Some(5));
    assert_eq!(
        one["limits"]["max_steps"], 6,
        "the final message is a step too"
    );
    assert_eq!(one["limits"]["max_tool_calls"], 5);
    assert_eq!(one["steps"][4]["calls"][0]["tool"], "workspace.write_text");

    let grouped: serde_json::Value =
        serde_json::from_str(&tool_script(BenchTool::WriteText, 5, 2)).expect("JSON");
    let sizes: Vec<usize> = grouped["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["calls"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(sizes, vec![2, 2, 1]);
    assert_eq!(grouped["limits"]["max_steps"], 4);
    assert_eq!(grouped["steps"][2]["calls"][0]["call_id"], "w4");
}

/// The `.txt` files below `dir` (what `workspace.write_text` calls of the load write).
fn txt_files(dir: &std::path::Path) -> usize {
    walk(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .count()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
