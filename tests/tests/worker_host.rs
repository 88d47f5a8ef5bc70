//! The tokio host around core's worker, through the real binary: tracing spans under `RUST_LOG`,
//! and graceful shutdown on SIGTERM and SIGINT (Appendix A: "stops claiming and exits when its
//! in-flight runs end or park").

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use airlock_e2e::*;
use serde_json::{Value, json};

#[test]
fn rust_log_shows_a_line_per_finished_call_step_and_run() {
    let data = DataDir::new();
    let run = data.submit(&script(json!([
        [workspace_write("w1", "a.txt", "one")],
        [workspace_write("w2", "b.txt", "two")]
    ])));
    let traced = data
        .command("operator", &["worker", "--until-idle"])
        .env("RUST_LOG", "airlock_core=info")
        .output()
        .expect("worker runs");
    assert_eq!(traced.status.code(), Some(0));
    let log = String::from_utf8_lossy(&traced.stderr);
    let run_span = format!("run{{run_id={run} lease_epoch=1 ");
    // A call's line carries what it came to (recorded as it ends), and its gate's line the
    // verdict.
    for expected in [
        "}:step{step=1 calls=1}:call{step=1 call_id=w1 tool=workspace.write_text \
         airlock.invocation.status=\"SUCCEEDED\" airlock.policy.reason_code=\"tool.succeeded\"}: ",
        "}:step{step=2 calls=1}:call{step=2 call_id=w2 tool=workspace.write_text \
         airlock.invocation.status=\"SUCCEEDED\" airlock.policy.reason_code=\"tool.succeeded\"}: ",
        "}:step{step=1 calls=1}:call{step=1 call_id=w1 tool=workspace.write_text}:policy{\
         otel.name=\"policy decision\" airlock.policy.decision=\"allow\" \
         airlock.policy.reason_code=\"policy.matrix.workspace_write\" ",
        "}:step{step=2 calls=1}: ",
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains(&run_span) && l.contains(expected) && l.contains("close")),
            "no line with {run_span}…{expected} in\n{log}"
        );
    }
    assert!(
        !log.contains('\u{1b}'),
        "no colour codes when stderr is not a terminal"
    );

    let quiet = DataDir::new();
    quiet.submit(&script(json!([[workspace_write("w1", "a.txt", "one")]])));
    let untraced = quiet.worker_until_idle(30_000);
    assert_eq!(untraced.status.code(), Some(0));
    assert!(
        !String::from_utf8_lossy(&untraced.stderr).contains("run{"),
        "spans are logged only when RUST_LOG asks for them"
    );
}

/// A run long enough to still be executing when the signal arrives: `steps` single-call steps.
fn long_script(steps: usize) -> Value {
    let steps: Vec<Value> = (0..steps)
        .map(|i| json!({"calls": [workspace_write(&format!("w{i}"), &format!("f{}.txt", i % 7), "x")]}))
        .collect();
    json!({
        "schema_version": 1,
        "tenant_id": "acme",
        "principal_id": "alice",
        "principal_scopes": ["workspace.write"],
        "origin_trust": "user",
        "limits": {"max_steps": 1000, "max_tool_calls": 1000},
        "steps": steps,
        "final_message": "done"
    })
}

fn wait_for_exit(worker: &mut Child, limit: Duration) -> Option<i32> {
    let started = Instant::now();
    loop {
        if let Some(status) = worker.try_wait().expect("try_wait") {
            return status.code();
        }
        if started.elapsed() > limit {
            let _ = worker.kill();
            panic!("the worker did not exit within {limit:?} of the signal");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn graceful_shutdown_on(signal: &str) {
    let data = DataDir::new();
    let long = data.submit(&long_script(400));
    let waiting = data.submit(&script(json!([[workspace_write("w1", "a.txt", "one")]])));
    let mut worker = data
        .command("operator", &["worker", "--concurrency", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("worker starts");
    // Wait until the long run is executing, then signal.
    let started = Instant::now();
    while data.status_and_attempts(&long).0 != "RUNNING" {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the long run never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let sent = Command::new("kill")
        .args([signal, &worker.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    assert_eq!(wait_for_exit(&mut worker, Duration::from_secs(60)), Some(0));

    // The in-flight run was finished, not abandoned to a lease expiry; nothing new was claimed.
    assert_eq!(
        data.status_and_attempts(&long),
        ("COMPLETED".to_owned(), 0),
        "{signal}"
    );
    assert_eq!(
        data.status_and_attempts(&waiting),
        ("QUEUED".to_owned(), 0),
        "{signal}: a stopping worker claims nothing"
    );
}

#[test]
fn sigterm_stops_claiming_and_exits_0_once_the_in_flight_run_ends() {
    graceful_shutdown_on("-TERM");
}

#[test]
fn sigint_stops_claiming_and_exits_0_once_the_in_flight_run_ends() {
    graceful_shutdown_on("-INT");
}

/// Issue 27: `worker --until-idle` ends with one JSON line saying what it did, so a person sees
/// that a run parked (and a script can read it): one run completed, one parked for approval.
#[test]
fn until_idle_ends_with_a_summary_of_what_the_worker_did() {
    let data = DataDir::new();
    data.submit(&script(json!([[workspace_write("w1", "a.txt", "one")]])));
    data.submit(&script(json!([[external_write("x", "needs a human")]])));
    let worker = data.worker_until_idle(2_000);
    assert_eq!(worker.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&worker.stdout);
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no summary line ({e}): {stdout}"));
    assert_eq!(summary["claims"], 2, "{summary}");
    assert_eq!(summary["runs"], 2, "{summary}");
    assert_eq!(summary["completed"], 1, "{summary}");
    assert_eq!(summary["parked_for_approval"], 1, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(summary["calls_uncertain"], 0, "{summary}");
    assert!(
        summary["worker_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("worker-"))
    );
}
