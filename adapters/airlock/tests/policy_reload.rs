//! Reloading the policy without a restart (issue 32 item 4), through the real binary:
//! `POST /v1/admin/reload` on `airlock serve` (scope `policy.admin`), and `SIGHUP` to a worker
//! that keeps executing runs meanwhile. A file that does not load keeps the rules in force; a
//! new version is recorded as `policy.profile.loaded` before it decides anything.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::{BIN, Server, airlock, http};

/// A policy dir holding the shipped files.
fn policy_dir(root: &Path) -> PathBuf {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    let dir = root.join("policy");
    std::fs::create_dir_all(&dir).expect("policy dir");
    for file in ["default.toml", "hardline.toml"] {
        std::fs::copy(shipped.join(file), dir.join(file)).expect("copy a shipped file");
    }
    dir
}

/// The profile with `workspace_write` denied: another `policy_version`.
fn deny_workspace_writes(dir: &Path) {
    let path = dir.join("default.toml");
    let text = std::fs::read_to_string(&path).expect("profile");
    let denied = text.replace(
        "[rules.workspace_write]\ndecision = \"allow\"\ncondition = \"path_inside_workspace\"\notherwise = \"deny\"",
        "[rules.workspace_write]\ndecision = \"deny\"",
    );
    assert_ne!(denied, text, "the edit applies");
    std::fs::write(&path, denied).expect("write the profile");
}

fn break_profile(dir: &Path) {
    std::fs::write(dir.join("default.toml"), "schema_version = 1\nname = [").expect("write");
}

fn versions_recorded(data: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open_with_flags(
        data.join("airlock.sqlite3"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the store");
    let mut statement = conn
        .prepare(
            "SELECT json_extract(payload, '$.policy_version') FROM process_events \
             WHERE event_type = 'policy.profile.loaded' ORDER BY rowid",
        )
        .expect("query");
    statement
        .query_map([], |row| row.get(0))
        .expect("rows")
        .collect::<Result<Vec<String>, _>>()
        .expect("versions")
}

fn token(data: &Path, policy: &Path, scopes: &str) -> String {
    common::token(
        data,
        &["--policy-dir", policy.to_str().expect("utf-8")],
        scopes,
    )
}

#[test]
fn post_admin_reload_puts_new_files_in_force_and_keeps_the_old_on_a_broken_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let policy = policy_dir(dir.path());
    let admin = token(&data, &policy, "policy.admin");
    let reader = token(&data, &policy, "run.read");
    let server = Server::start(
        &data,
        &["--policy-dir", policy.to_str().expect("utf-8")],
        &[],
    );
    let health = |what: &str| -> String {
        let (status, body) = http(&server.addr, "GET", "/healthz", None, None);
        assert_eq!(status, 200, "{what}: {body}");
        body["policy_version"].as_str().expect("version").to_owned()
    };
    let started = health("at start");

    // Without the scope: 403, and nothing reloads.
    let (status, body) = http(
        &server.addr,
        "POST",
        "/v1/admin/reload",
        Some(&reader),
        None,
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "forbidden");
    let (status, _) = http(&server.addr, "POST", "/v1/admin/reload", None, None);
    assert_eq!(status, 401);

    // Unchanged files: the same version, harmless.
    let (status, body) = http(&server.addr, "POST", "/v1/admin/reload", Some(&admin), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["policy_version"], started.as_str());
    assert_eq!(body["previous_version"], started.as_str());

    // Edited files: a new version, in force and recorded.
    deny_workspace_writes(&policy);
    let (status, body) = http(&server.addr, "POST", "/v1/admin/reload", Some(&admin), None);
    assert_eq!(status, 200, "{body}");
    let edited = body["policy_version"].as_str().expect("version").to_owned();
    assert_ne!(edited, started);
    assert_eq!(body["previous_version"], started.as_str());
    assert_eq!(health("after the reload"), edited);
    assert!(
        versions_recorded(&data).contains(&edited),
        "policy.profile.loaded of {edited}"
    );

    // A broken file: 422, and the edited rules stay in force.
    break_profile(&policy);
    let (status, body) = http(&server.addr, "POST", "/v1/admin/reload", Some(&admin), None);
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["code"], "policy_load");
    let detail = body["detail"].as_str().unwrap_or("");
    assert!(detail.contains("did not load"), "{body}");
    assert!(
        !detail.contains(policy.to_str().unwrap_or("?")),
        "no server path reaches the caller: {body}"
    );
    assert_eq!(health("after a failed reload"), edited);
}

fn pid(child: &Child) -> String {
    child.id().to_string()
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid(child)])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Under load: a worker executing runs is sent `SIGHUP` with edited, broken and restored files
/// in turn; it keeps going (every run completes, the process does not die of the signal), each
/// reload's rules decide the calls proposed after it (a workspace write is denied under the
/// edited file, still denied after the broken one, allowed again once restored), each good
/// file's version is recorded, and the broken one changes nothing.
#[test]
fn sighup_reloads_a_busy_worker_without_dropping_a_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let policy = policy_dir(dir.path());
    let policy_arg = policy.to_str().expect("utf-8").to_owned();
    let script = |name: &str, steps: Vec<Value>| -> PathBuf {
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(
            &path,
            json!({"schema_version": 1, "tenant_id": "acme", "principal_id": "alice",
                "principal_scopes": ["workspace.write"], "origin_trust": "user",
                "steps": steps})
            .to_string(),
        )
        .expect("script");
        path
    };
    let busy = script(
        "busy",
        (0..6)
            .map(|i| {
                json!({"calls": [{"call_id": format!("m{i}"),
                "tool": "math.calculate", "arguments": {"expression": "6 * 7"}}]})
            })
            .collect(),
    );
    let write = script(
        "write",
        vec![
            json!({"calls": [{"call_id": "w1", "tool": "workspace.write_text",
            "arguments": {"path": "notes/a.txt", "content": "one"},
            "argument_trust": {"path": "user", "content": "user"}}]}),
        ],
    );
    // Submitted under the shipped files (the policy dir's are broken for a while): the same
    // version the worker starts with, so submitting records nothing new.
    let submit = |path: &Path| -> String {
        let (code, submitted) = airlock(&data, &["run", "submit", path.to_str().expect("utf-8")]);
        assert_eq!(code, 0, "{submitted}");
        submitted["run_id"].as_str().expect("run id").to_owned()
    };
    let mut runs: Vec<String> = (0..12).map(|_| submit(&busy)).collect();
    let stderr = dir.path().join("worker.log");
    let worker = Command::new(BIN)
        .arg("--data-dir")
        .arg(&data)
        .args(["--policy-dir", &policy_arg])
        .args(["worker", "--concurrency", "2"])
        .env("RUST_LOG", "airlock=info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).expect("log file"))
        .spawn()
        .expect("worker starts");
    let mut worker = Guard(worker);
    let status_of = |run: &str| -> String {
        let (code, shown) = airlock(&data, &["--tenant", "acme", "runs", "show", run]);
        assert_eq!(code, 0, "{shown}");
        shown["status"].as_str().unwrap_or("").to_owned()
    };
    let finished = |run: &str| {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let status = status_of(run);
            if matches!(status.as_str(), "COMPLETED" | "FAILED") {
                return status;
            }
            assert!(Instant::now() < deadline, "run {run} is {status}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // The handler is in place once the worker has opened its store and claims.
    let started = Instant::now();
    while status_of(&runs[0]) == "QUEUED" {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "nothing claimed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = versions_recorded(&data);
    let log = || std::fs::read_to_string(&stderr).unwrap_or_default();
    // Sends SIGHUP and waits for the worker to log the outcome of that reload.
    let reload = |outcome: &str| {
        let seen = log().matches(outcome).count();
        signal(&worker.0, "HUP");
        let deadline = Instant::now() + Duration::from_secs(30);
        while log().matches(outcome).count() == seen {
            assert!(
                Instant::now() < deadline,
                "no '{outcome}' logged: {}",
                log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let write_outcome = |run: &str| -> String {
        finished(run);
        let conn = rusqlite::Connection::open_with_flags(
            data.join("airlock.sqlite3"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .expect("open the store");
        conn.query_row(
            "SELECT status FROM tool_invocations WHERE run_id = ?1 AND call_id = 'w1'",
            [run],
            |row| row.get(0),
        )
        .expect("the write's row")
    };

    deny_workspace_writes(&policy);
    reload("policy reloaded");
    runs.push(submit(&busy));
    let denied = submit(&write);
    assert_eq!(write_outcome(&denied), "DENIED", "the edited rules decide");

    break_profile(&policy);
    reload("policy reload failed");
    let still_denied = submit(&write);
    assert_eq!(
        write_outcome(&still_denied),
        "DENIED",
        "a broken file keeps the edited rules"
    );

    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/default.toml");
    std::fs::copy(shipped, policy.join("default.toml")).expect("restore");
    reload("policy reloaded");
    let allowed = submit(&write);
    assert_eq!(
        write_outcome(&allowed),
        "SUCCEEDED",
        "the restored rules decide"
    );

    for run in &runs {
        assert_eq!(finished(run), "COMPLETED", "run {run}");
    }
    assert_eq!(
        worker.0.try_wait().expect("wait"),
        None,
        "the worker is still running after three SIGHUPs"
    );
    signal(&worker.0, "TERM");
    let exit = worker.0.wait().expect("worker exits");
    assert_eq!(exit.code(), Some(0));

    let after = versions_recorded(&data);
    assert_eq!(
        after.len(),
        before.len() + 1,
        "one new version (the edited one); the broken file recorded nothing and the restored \
         one was recorded already: before {before:?}, after {after:?}"
    );
}

/// Kills the child if a test fails before it ends.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
