//! Issue 17, end to end: the faults and bad input a hostile-user sweep found, one test per item,
//! each through the real binary. Every one of them failed on the build the sweep was run
//! against; each now gets a clear error (or the right result) and loses nothing.
//!
//! Disk-full conditions are real: the child process runs with `RLIMIT_FSIZE` (`limit_file_size`),
//! so its writes past the limit are cut short and then fail, exactly as on a full disk.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use airlock_core::canonical::sha256_hex;
use airlock_e2e::*;
use serde_json::{Value, json};

/// The error object a failed command printed on stdout.
fn error_of(output: &std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let value: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "no JSON error object ({e}): stdout {stdout} stderr {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    value["error"].clone()
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_micros() as i64
}

/// Parks `run` on its external write and approves it.
fn park_and_approve(data: &DataDir, run: &str) {
    assert_eq!(data.worker_until_idle(1_000).status.code(), Some(0));
    assert_eq!(data.run_status(run), "WAITING_FOR_APPROVAL");
    data.approve_first_pending(run);
}

/// `(status, reason_code)` of each invocation of `run`, in creation order.
fn invocation_states(data: &DataDir, run: &str) -> Vec<(String, String)> {
    let conn = db(data);
    let mut statement = conn
        .prepare(
            "SELECT status, reason_code FROM tool_invocations WHERE run_id = ?1 \
             ORDER BY created_at, id",
        )
        .expect("query");
    statement
        .query_map([run], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect()
}

// ----- 1. Torn effect record -----

#[test]
fn item_01_a_failed_outbox_append_leaves_no_torn_record_for_the_next_one_to_glue_onto() {
    // The worker's outbox append runs into a full disk part-way: the call is UNCERTAIN and the
    // partial record is removed again, so the next approved write's record parses.
    const LIMIT: u64 = 8 * 1024 * 1024;
    let data = DataDir::new();
    let outbox = data.path().join("outbox.jsonl");
    // The outbox already holds records up to 1000 bytes below the limit.
    let pad = format!("{{\"pad\":\"{}\"}}\n", "p".repeat(1000));
    let mut prefill = pad.repeat(((LIMIT - 1000) / pad.len() as u64) as usize);
    prefill.push_str(&format!(
        "{{\"pad\":\"{}\"}}\n",
        "q".repeat((LIMIT - 1000) as usize - prefill.len() - 11)
    ));
    assert_eq!(prefill.len() as u64, LIMIT - 1000);
    std::fs::create_dir_all(data.path()).expect("data dir");
    std::fs::write(&outbox, &prefill).expect("prefill");

    let first = data.submit(&script(json!([[external_write("e2", &"x".repeat(4000))]])));
    park_and_approve(&data, &first);
    let mut worker = data.command(
        "operator",
        &["worker", "--until-idle", "--lease-ms", "1000"],
    );
    let output = limit_file_size(&mut worker, LIMIT)
        .output()
        .expect("worker runs");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        invocation_states(&data, &first),
        [("UNCERTAIN".to_owned(), "tool.outcome_unknown".to_owned())],
        "the append failed part-way: its outcome is unknown (§9.3)"
    );
    let after = std::fs::read_to_string(&outbox).expect("outbox");
    assert!(
        after == prefill,
        "nothing of the failed record is left: {} bytes instead of {}, ending {:?}",
        after.len(),
        prefill.len(),
        &after[after.len().saturating_sub(120)..]
    );

    let second = data.submit(&script(json!([[external_write("e3", "third")]])));
    park_and_approve(&data, &second);
    assert_eq!(data.worker_until_idle(1_000).status.code(), Some(0));
    assert_eq!(
        invocation_states(&data, &second),
        [("SUCCEEDED".to_owned(), "tool.succeeded".to_owned())]
    );
    let text = std::fs::read_to_string(&outbox).expect("outbox");
    let records: Vec<Value> = text
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("unparseable line ({e}): {line}"))
        })
        .collect();
    let effects: Vec<&Value> = records
        .iter()
        .filter(|r| r.get("idempotency_key").is_some())
        .collect();
    assert_eq!(effects.len(), 1, "only the SUCCEEDED call has a record");
    assert_eq!(effects[0]["content"], "third");
}

// ----- 2. Storage errors reach the user -----

/// Steps of the runs that must still be executing when the test takes the write lock. 150 was
/// once enough; a clean-clone CI run on 2026-12-04 saw such a run finish between the test
/// seeing it RUNNING and taking the lock (a test thread descheduled on a loaded machine). The
/// runs end in a storage error while the lock is held, so more steps cost no time.
const LONG_RUN_STEPS: usize = 900;

/// A run of `steps` single-call steps, long enough to be mid-way when the lock is taken.
fn long_script(steps: usize) -> Value {
    let steps: Vec<Value> = (0..steps)
        .map(|i| {
            json!({"calls": [call(&format!("m{i}"), "math.calculate", json!({"expression": "1 + 1"}))]})
        })
        .collect();
    json!({
        "schema_version": 1,
        "tenant_id": "acme",
        "principal_id": "alice",
        "principal_scopes": [],
        "origin_trust": "user",
        "limits": {"max_steps": 1000, "max_tool_calls": 1000},
        "steps": steps,
        "final_message": "done"
    })
}

/// Waits until a run is RUNNING, then holds SQLite's write lock from this process for nine
/// seconds. The store's busy timeout is five seconds of requested sleeps, which a loaded machine
/// stretches: nine leaves four seconds of slack for the executor's transaction to fail while the
/// lock is held, and the worker's release, which waits up to five more, still gets the lock.
/// Returns the run id, read under the lock.
fn hold_the_write_lock_while_a_run_executes(data: &DataDir) -> String {
    let started = Instant::now();
    while !data.path().join("airlock.sqlite3").exists()
        || db(data)
            .query_row(
                "SELECT COUNT(*) FROM runs WHERE status = 'RUNNING'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap_or(0)
            == 0
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no run started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let conn = rusqlite::Connection::open(data.path().join("airlock.sqlite3")).expect("open");
    conn.busy_timeout(Duration::from_secs(10)).expect("busy");
    conn.execute_batch("BEGIN IMMEDIATE")
        .expect("the write lock");
    let run: String = conn
        .query_row("SELECT id FROM runs WHERE status = 'RUNNING'", [], |r| {
            r.get(0)
        })
        .expect("the run is still executing when the lock is taken (make the script longer)");
    std::thread::sleep(Duration::from_secs(9));
    conn.execute_batch("ROLLBACK").expect("release the lock");
    run
}

/// The run's lease expiry, in µs.
fn lease_expires_at(data: &DataDir, run: &str) -> i64 {
    db(data)
        .query_row(
            "SELECT lease_expires_at FROM runs WHERE id = ?1",
            [run],
            |r| r.get(0),
        )
        .expect("a RUNNING run has a lease")
}

#[test]
fn item_02_inline_execution_reports_a_storage_error_and_gives_the_lease_back() {
    let data = DataDir::new();
    let path = data.script("long", &long_script(LONG_RUN_STEPS));
    let inline = data
        .command(
            "alice",
            &["run", "submit", path.to_str().expect("utf-8"), "--inline"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("submit starts");
    let run = hold_the_write_lock_while_a_run_executes(&data);
    let output = inline.wait_with_output().expect("submit ends");
    let ended = now_micros();

    assert_eq!(output.status.code(), Some(4), "{output:?}");
    let error = error_of(&output);
    assert_eq!(error["code"], "storage");
    assert!(
        error["message"]
            .as_str()
            .expect("message")
            .contains("database is locked"),
        "{error}"
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(&run),
        "the warning names the run: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Still RUNNING (RECLAIM moves it), but its lease no longer outlives the process.
    assert_eq!(data.status_and_attempts(&run), ("RUNNING".to_owned(), 0));
    assert!(
        lease_expires_at(&data, &run) <= ended,
        "the lease was given back"
    );

    assert_eq!(data.worker_until_idle(30_000).status.code(), Some(0));
    assert_eq!(data.status_and_attempts(&run), ("COMPLETED".to_owned(), 1));
}

#[test]
fn item_02_a_worker_logs_the_run_and_cause_of_an_abandoned_execution() {
    let data = DataDir::new();
    data.submit(&long_script(LONG_RUN_STEPS));
    // One run at a time: with its only slot taken the worker does not try to claim while the
    // lock is held, so the transaction that meets the lock is the executor's (a blocked claim
    // would hold the store's writer for its five seconds and the executor would wait behind it
    // instead of failing).
    let worker = data
        .command(
            "operator",
            &["worker", "--until-idle", "--concurrency", "1"],
        )
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("worker starts");
    let run = hold_the_write_lock_while_a_run_executes(&data);
    let output = worker.wait_with_output().expect("worker ends");
    let ended = now_micros();

    let log = String::from_utf8_lossy(&output.stderr);
    let warning = log
        .lines()
        .find(|l| l.contains("WARN") && l.contains("execution was abandoned"))
        .unwrap_or_else(|| panic!("no warning at the default level in {log}"));
    for expected in [
        format!("run_id={run}"),
        "database is locked".to_owned(),
        "released for RECLAIM".to_owned(),
    ] {
        assert!(warning.contains(&expected), "{expected} in {warning}");
    }
    // Either the run still waits for RECLAIM, its lease no longer outliving this worker, or
    // this worker already reclaimed and finished it (attempts 1) instead of waiting 30 s.
    match data.status_and_attempts(&run) {
        (status, 0) if status == "RUNNING" => {
            assert!(
                lease_expires_at(&data, &run) <= ended,
                "the lease was given back"
            );
        }
        (status, 1) if status == "COMPLETED" => {}
        other => panic!("unexpected state {other:?}"),
    }
    assert_eq!(data.worker_until_idle(30_000).status.code(), Some(0));
    assert_eq!(data.status_and_attempts(&run), ("COMPLETED".to_owned(), 1));
}

// ----- 3. `runs resume` of a run in its back-off -----

#[test]
fn item_03_resuming_a_run_in_its_retry_back_off_says_when_it_is_due() {
    let data = DataDir::new();
    let run = data.submit(&script(json!([[workspace_write("w1", "a.txt", "x")]])));
    let crash = |point: &str| {
        let mut child = data.spawn_worker(300, Some(point));
        let output = wait_within(&mut child, Duration::from_secs(30), point);
        assert_eq!(output.status.code(), None, "{point}: aborted");
    };
    crash("after_claim");
    std::thread::sleep(Duration::from_millis(400));
    crash("after_claim"); // reclaims (attempts 1), waits out 1 s, claims again
    std::thread::sleep(Duration::from_millis(400));
    crash("after_reclaim"); // attempts 2: due in 2 s
    assert_eq!(data.status_and_attempts(&run), ("QUEUED".to_owned(), 2));

    let resumed = data.run("operator", &["runs", "resume", &run]);
    assert_eq!(resumed.status.code(), Some(1), "{resumed:?}");
    let error = error_of(&resumed);
    assert_eq!(error["code"], "conflict");
    assert!(
        error["message"]
            .as_str()
            .expect("message")
            .contains("not due until"),
        "{error}"
    );
    assert_eq!(data.status_and_attempts(&run), ("QUEUED".to_owned(), 2));

    std::thread::sleep(Duration::from_millis(2100));
    let resumed = data.json("operator", &["runs", "resume", &run]);
    assert_eq!(resumed["status"], "COMPLETED");
}

// ----- 4. `--data-dir file:dd` -----

#[test]
fn item_04_a_data_dir_named_like_a_uri_is_a_path() {
    let cwd = tempfile::tempdir().expect("cwd");
    std::fs::create_dir(cwd.path().join("dd")).expect("a decoy ./dd");
    let script_path = cwd.path().join("s.json");
    std::fs::write(
        &script_path,
        script(json!([[workspace_write("w1", "a.txt", "x")]])).to_string(),
    )
    .expect("script");
    let airlock = |args: &[&str]| {
        Command::new(airlock_bin())
            .current_dir(cwd.path())
            .args(["--data-dir", "file:dd", "--tenant", "acme"])
            .args(args)
            .env_remove("AIRLOCK_CRASH_AT")
            .output()
            .expect("airlock runs")
    };
    let submitted = airlock(&[
        "--principal",
        "alice",
        "run",
        "submit",
        script_path.to_str().expect("utf-8"),
    ]);
    assert_eq!(submitted.status.code(), Some(0), "{submitted:?}");
    assert!(cwd.path().join("file:dd/airlock.sqlite3").exists());
    assert!(
        !cwd.path().join("dd/airlock.sqlite3").exists(),
        "nothing went to ./dd"
    );
    let listed = airlock(&["approvals", "list"]);
    assert_eq!(listed.status.code(), Some(0), "{listed:?}");
}

// ----- 5. Disk full during a commit -----

#[test]
fn item_05_a_full_disk_is_reported_as_such() {
    // 4 MB of arguments against a 2 MiB file size limit: SQLite spills the page cache to the WAL
    // mid-statement, the write fails, and SQLite rolls the transaction back itself.
    let data = DataDir::new();
    let big = script(json!([[call(
        "c1",
        "math.calculate",
        json!({"expression": "1 + 1", "pad": "x".repeat(4_000_000)})
    )]]));
    let path = data.script("big", &big);
    let mut submit = data.command(
        "alice",
        &[
            "run",
            "submit",
            path.to_str().expect("utf-8"),
            "--max-script-bytes",
            "8000000",
        ],
    );
    let output = limit_file_size(&mut submit, 2 * 1024 * 1024)
        .output()
        .expect("submit runs");
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    let message = error_of(&output)["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(
        message.contains("disk I/O error") || message.contains("database or disk is full"),
        "the cause, not only the rollback: {message}"
    );
}

// ----- 6. Repeated resolve or settle with invalid input -----

#[test]
fn item_06_a_repeated_resolve_or_settle_still_validates_its_input() {
    let data = DataDir::new();
    let run = data.submit(&script(json!([[external_write("x", "once")]])));
    assert_eq!(data.worker_until_idle(1_000).status.code(), Some(0));
    let approval = data.first_pending_id(&run);
    data.json(
        "operator",
        &["approvals", "approve", &approval, "--reason", "ok"],
    );
    let long = "r".repeat(4097);
    let again = data.run(
        "operator",
        &["approvals", "approve", &approval, "--reason", &long],
    );
    assert_eq!(again.status.code(), Some(2), "{again:?}");
    assert_eq!(error_of(&again)["code"], "invalid_argument");

    let crashed = data
        .spawn_worker(1_000, Some("after_invoke"))
        .wait_with_output()
        .expect("worker");
    assert_eq!(crashed.status.code(), None, "aborted after the effect");
    assert_eq!(data.worker_until_idle(1_000).status.code(), Some(0));
    let queue = data.json("operator", &["invocations", "uncertain"]);
    let id = queue["items"][0]["id"]
        .as_str()
        .expect("an UNCERTAIN call")
        .to_owned();
    let settle = |note: &str| {
        data.run(
            "operator",
            &[
                "invocations",
                "settle",
                &id,
                "--outcome",
                "failed",
                "--note",
                note,
            ],
        )
    };
    assert_eq!(settle("checked the ledger").status.code(), Some(0));
    let again = settle("");
    assert_eq!(again.status.code(), Some(2), "{again:?}");
    assert_eq!(error_of(&again)["code"], "invalid_argument");
}

// ----- 7. Bounded leases and approval expiries -----

/// A policy directory holding the shipped files with `critical` approvals expiring after
/// `seconds`.
fn policies_with_critical_expiry(data: &DataDir, seconds: u64) -> String {
    let policies = data.path().join(format!("policies-{seconds}"));
    std::fs::create_dir_all(&policies).expect("policy dir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let profile = std::fs::read_to_string(root.join("default.toml"))
        .expect("shipped profile")
        .replace("critical = 3600", &format!("critical = {seconds}"));
    std::fs::write(policies.join("default.toml"), profile).expect("profile");
    std::fs::copy(root.join("hardline.toml"), policies.join("hardline.toml")).expect("hardline");
    policies.to_str().expect("utf-8").to_owned()
}

#[test]
fn item_07_leases_and_approval_expiries_have_maxima() {
    let data = DataDir::new();
    for lease in ["18446744073709551615", "3600001", "2"] {
        let output = data.run("operator", &["worker", "--until-idle", "--lease-ms", lease]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "--lease-ms {lease}: {output:?}"
        );
        assert!(
            error_of(&output)["message"]
                .as_str()
                .expect("message")
                .contains("--lease-ms must be 3..=3600000"),
            "{output:?}"
        );
    }
    assert!(
        !data.path().join("airlock.sqlite3").exists(),
        "refused before the store was created"
    );
    let output = data.run(
        "operator",
        &["worker", "--until-idle", "--lease-ms", "3600000"],
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "one hour is allowed: {output:?}"
    );

    let too_long = policies_with_critical_expiry(&data, 315_360_001);
    let output = data.run(
        "operator",
        &["--policy-dir", &too_long, "policy", "version"],
    );
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    assert_eq!(
        error_of(&output)["message"],
        "profile: approval expiry values must be at most 315360000 seconds (10 years)"
    );
    let ten_years = policies_with_critical_expiry(&data, 315_360_000);
    let output = data.run(
        "operator",
        &["--policy-dir", &ten_years, "policy", "version"],
    );
    assert_eq!(output.status.code(), Some(0), "ten years loads: {output:?}");
}

// ----- 8. Policy files that are not regular files, or too large -----

#[test]
fn item_08_policy_files_must_be_regular_and_bounded() {
    let data = DataDir::new();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let dir = |name: &str| {
        let dir = data.path().join(name);
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::copy(shipped.join("hardline.toml"), dir.join("hardline.toml")).expect("hardline");
        dir
    };
    let fifo = dir("fifo");
    let made = Command::new("mkfifo")
        .arg(fifo.join("default.toml"))
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let zero = dir("zero");
    symlink("/dev/zero", zero.join("default.toml")).expect("symlink");
    let huge = dir("huge");
    let mut profile = std::fs::read_to_string(shipped.join("default.toml")).expect("profile");
    profile.push_str(&format!("# {}\n", "x".repeat(1024 * 1024)));
    std::fs::write(huge.join("default.toml"), profile).expect("huge profile");

    for (policy_dir, expected) in [
        (&fifo, "not a regular file (a FIFO)"),
        (&zero, "not a regular file (a character device)"),
        (&huge, "larger than the limit of 1048576 bytes"),
    ] {
        for args in [&["policy", "version"][..], &["approvals", "list"][..]] {
            let mut child = data
                .command("operator", args)
                .arg("--policy-dir")
                .arg(policy_dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("airlock starts");
            let output = wait_within(&mut child, Duration::from_secs(20), "a policy load");
            assert_eq!(output.status.code(), Some(3), "{expected}: {output:?}");
            let message = error_of(&output)["message"]
                .as_str()
                .expect("message")
                .to_owned();
            assert!(message.starts_with("profile: cannot read '"), "{message}");
            assert!(message.ends_with(expected), "{message}");
        }
    }
}

// ----- 9. A read-only data directory -----

/// Makes `dir` read-only for this test: a read-only bind mount when running as root (root
/// writes through permission bits), else mode 0555/0444. Undone when dropped.
struct ReadOnly {
    dir: std::path::PathBuf,
    mounted: bool,
}

impl ReadOnly {
    fn make(dir: &Path) -> Option<ReadOnly> {
        use std::os::unix::fs::PermissionsExt;
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        if root {
            let run = |args: &[&str]| {
                Command::new("mount")
                    .args(args)
                    .arg(dir)
                    .arg(dir)
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            };
            if !run(&["--bind"]) {
                return None;
            }
            let guard = ReadOnly {
                dir: dir.to_owned(),
                mounted: true,
            };
            return run(&["-o", "remount,ro,bind"]).then_some(guard);
        }
        for entry in std::fs::read_dir(dir).expect("dir") {
            let path = entry.expect("entry").path();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).expect("chmod");
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).expect("chmod");
        Some(ReadOnly {
            dir: dir.to_owned(),
            mounted: false,
        })
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        if self.mounted {
            let _ = Command::new("umount").arg(&self.dir).status();
        } else {
            let _ = std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o755));
            for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
                let _ =
                    std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o755));
            }
        }
    }
}

#[test]
fn item_09_a_read_only_store_is_reported_as_read_only() {
    let data = DataDir::new();
    let run = data.submit(&script(json!([[workspace_write("w1", "a.txt", "x")]])));
    let Some(_read_only) = ReadOnly::make(data.path()) else {
        airlock_e2e::skip::skip(
            "hostile_sweep::item_09_a_read_only_store_is_reported_as_read_only",
            "no permission to mount a read-only tmpfs here",
            "a machine where root may mount (CI's)",
        );
        return;
    };
    for args in [&["approvals", "list"][..], &["runs", "show", &run][..]] {
        let output = data.run("operator", args);
        assert_eq!(output.status.code(), Some(4), "{args:?}: {output:?}");
        let error = error_of(&output);
        assert_eq!(error["code"], "storage");
        let message = error["message"].as_str().expect("message");
        assert!(message.contains("is read-only here"), "{message}");
    }
}

// ----- 10. Listing a planted hard link -----

#[test]
fn item_10_a_listing_does_not_report_a_planted_hard_link() {
    let data = DataDir::new();
    let run = data.submit(&script(json!([
        [workspace_write("w1", "mine.txt", "mine")],
        [external_write("x1", "pause here")],
        [call(
            "ls",
            "workspace.list_files",
            json!({"path": "", "recursive": true})
        )]
    ])));
    assert_eq!(data.worker_until_idle(1_000).status.code(), Some(0));
    assert_eq!(data.run_status(&run), "WAITING_FOR_APPROVAL");
    let root = data
        .path()
        .join("workspaces")
        .join(sha256_hex(b"acme"))
        .join(&run);
    // An outside file on the same file system (hard links cannot cross one).
    let outside = data.path().join("outside-secret.txt");
    std::fs::write(&outside, "x".repeat(12_345)).expect("outside file");
    std::fs::hard_link(&outside, root.join("hard.txt")).expect("hard link");

    data.approve_first_pending(&run);
    assert_eq!(data.worker_until_idle(1_000).status.code(), Some(0));
    assert_eq!(data.run_status(&run), "COMPLETED");
    let (status, _, listing) = &step_calls(&data, &run, 3)["ls"];
    assert_eq!(status, "SUCCEEDED");
    let content = listing["content"].as_str().expect("content");
    assert!(!content.contains("hard.txt"), "{content}");
    assert!(!content.contains("12345"), "{content}");
    assert!(content.contains("mine.txt"), "{content}");
}

// ----- 11. A cap on a script's size -----

#[test]
fn item_11_a_script_over_the_size_limit_is_invalid_input() {
    let data = DataDir::new();
    let big = script(json!([[workspace_write(
        "w1",
        "a.txt",
        &"x".repeat(3_000_000)
    )]]));
    let path = data.script("big", &big);
    let path = path.to_str().expect("utf-8");
    let refused = data.run("alice", &["run", "submit", path]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let message = error_of(&refused)["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(
        message.contains("larger than the limit of 2097152 bytes"),
        "{message}"
    );
    assert!(
        !data.path().join("airlock.sqlite3").exists(),
        "refused before the store was created"
    );

    let small = data.script(
        "small",
        &script(json!([[workspace_write("w1", "a.txt", "x")]])),
    );
    let small = small.to_str().expect("utf-8");
    let limit = std::fs::metadata(small).expect("size").len();
    let refused = data.run(
        "alice",
        &[
            "run",
            "submit",
            small,
            "--max-script-bytes",
            &(limit - 1).to_string(),
        ],
    );
    assert_eq!(refused.status.code(), Some(2), "configurable: {refused:?}");
    // Its planner_input adds the defaults (`session_id`, `argument_trust`…): give it room.
    let accepted = data.json(
        "alice",
        &[
            "run",
            "submit",
            small,
            "--max-script-bytes",
            &(limit * 2).to_string(),
        ],
    );
    assert_eq!(accepted["status"], "QUEUED");
}

/// Issue 27: a bad run script is answered with the file's name and the real cause; the size
/// flag is named only when the size is the cause. Nothing is created for any of them.
#[test]
fn a_bad_script_names_its_file_and_the_real_cause() {
    let data = DataDir::new();
    let dir = data.path().join("scripts");
    std::fs::create_dir_all(&dir).expect("dir");
    let write = |name: &str, text: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path.to_str().expect("utf-8").to_owned()
    };
    let missing = dir.join("missing.json").to_str().expect("utf-8").to_owned();
    let cases = [
        (
            missing.clone(),
            vec![],
            format!("cannot read '{missing}': No such file or directory"),
        ),
        (
            write("bad.json", b"{bad"),
            vec![],
            format!("'{}': invalid JSON", dir.join("bad.json").display()),
        ),
        (
            write("latin1.json", b"{\"a\": \"\xe9\"}"),
            vec![],
            format!("'{}' is not UTF-8 text", dir.join("latin1.json").display()),
        ),
        (
            write("big.json", &[b' '; 100]),
            vec!["--max-script-bytes", "10"],
            format!(
                "'{}' is larger than the limit of 10 bytes (raise it with --max-script-bytes)",
                dir.join("big.json").display()
            ),
        ),
    ];
    for (path, flags, expected) in cases {
        let mut args = vec!["run", "submit", path.as_str()];
        args.extend(flags.iter().copied());
        let output = data.run("alice", &args);
        assert_eq!(output.status.code(), Some(2), "{path}");
        let message = error_of(&output)["message"]
            .as_str()
            .expect("message")
            .to_owned();
        assert!(
            message.starts_with(&expected),
            "{message}\nexpected: {expected}"
        );
        if !expected.contains("--max-script-bytes") {
            assert!(!message.contains("--max-script-bytes"), "{message}");
        }
    }
    assert!(
        !data.path().join("airlock.sqlite3").exists(),
        "nothing was created"
    );
}
