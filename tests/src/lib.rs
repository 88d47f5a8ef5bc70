//! airlock-e2e: end-to-end tests that drive the real `airlock` binary in separate processes over
//! real SQLite files, or a real PostgreSQL database (`pg`). This library holds only the helpers
//! the tests in `tests/` share.

pub mod layers;
pub mod mcp;
pub mod pg;
pub mod skip;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

/// The `airlock` binary: `$AIRLOCK_BIN`, or the one `cargo test --workspace` built next to this
/// test executable.
pub fn airlock_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("AIRLOCK_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile dir");
    let bin = dir.join("airlock");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p airlock` (cargo test --workspace builds it)",
        bin.display()
    );
    bin
}

/// A fresh data directory, removed when dropped; its store is the SQLite file inside, or a
/// PostgreSQL schema of its own ([`DataDir::on_postgres`]).
pub struct DataDir {
    pub dir: tempfile::TempDir,
    /// The PostgreSQL store every command gets through `AIRLOCK_STORE`; `None`: SQLite.
    pub postgres: Option<pg::Scratch>,
}

impl DataDir {
    pub fn new() -> DataDir {
        DataDir {
            dir: tempfile::tempdir().expect("temp dir"),
            postgres: None,
        }
    }

    /// A data dir for workspaces and the outbox whose store is a fresh schema on `server`.
    pub fn on_postgres(server: &str) -> DataDir {
        DataDir {
            dir: tempfile::tempdir().expect("temp dir"),
            postgres: Some(pg::Scratch::new(server)),
        }
    }

    /// The `--store` value of this data dir's store, if it is not the default file.
    pub fn store_url(&self) -> Option<&str> {
        self.postgres.as_ref().map(|p| p.url.as_str())
    }

    /// `SELECT COUNT(*) …` (or any one-integer query) on the store, SQLite or PostgreSQL.
    pub fn count(&self, sql: &str) -> i64 {
        match &self.postgres {
            Some(pg) => pg.rows(sql)[0][0]
                .as_deref()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{sql}: not a count")),
            None => db(self)
                .query_row(sql, [], |r| r.get(0))
                .unwrap_or_else(|e| panic!("{sql}: {e}")),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `airlock --data-dir D --tenant acme --principal <who> ARGS…`.
    pub fn command(&self, principal: &str, args: &[&str]) -> Command {
        let mut command = Command::new(airlock_bin());
        command
            .arg("--data-dir")
            .arg(self.path())
            .args(["--tenant", "acme", "--principal", principal])
            .args(args);
        command.env_remove("AIRLOCK_CRASH_AT").stdin(Stdio::null());
        match self.store_url() {
            Some(url) => command.env("AIRLOCK_STORE", url),
            None => command.env_remove("AIRLOCK_STORE"),
        };
        command
    }

    /// Runs a command to completion.
    pub fn run(&self, principal: &str, args: &[&str]) -> Output {
        self.command(principal, args)
            .output()
            .expect("airlock runs")
    }

    /// Runs a command that must exit 0 and print one JSON value.
    pub fn json(&self, principal: &str, args: &[&str]) -> Value {
        let output = self.run(principal, args);
        assert_eq!(
            output.status.code(),
            Some(0),
            "airlock {args:?} failed: stdout {} stderr {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "airlock {args:?} printed no JSON ({e}): {}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
    }

    /// Approves, as `operator`, every approval the first page (100) of `approvals list` shows;
    /// returns how many it tried. Exit 1 is accepted: a racing worker, expiry or cancel may
    /// settle an approval between the list and the approve (a refusal, exit 1).
    pub fn approve_all(&self) -> usize {
        let pending = self.json("operator", &["approvals", "list", "--limit", "100"])["items"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for approval in &pending {
            let output = self.run(
                "operator",
                &["approvals", "approve", approval["id"].as_str().expect("id")],
            );
            assert!(
                output.status.code() == Some(0) || output.status.code() == Some(1),
                "approve: {output:?}"
            );
        }
        pending.len()
    }

    /// Writes a run script and returns its path.
    pub fn script(&self, name: &str, script: &Value) -> PathBuf {
        let path = self.path().join(format!("{name}.json"));
        std::fs::write(&path, script.to_string()).expect("write script");
        path
    }

    /// Submits a script (durable dispatch) and returns the run id.
    pub fn submit(&self, script: &Value) -> String {
        let path = self.script(&format!("script-{}", std::process::id()), script);
        let submitted = self.json(
            "alice",
            &["run", "submit", path.to_str().expect("utf-8 path")],
        );
        submitted["run_id"].as_str().expect("run_id").to_owned()
    }

    /// `worker --until-idle` in a child process, to completion.
    pub fn worker_until_idle(&self, lease_ms: u64) -> Output {
        self.run(
            "operator",
            &[
                "worker",
                "--until-idle",
                "--lease-ms",
                &lease_ms.to_string(),
            ],
        )
    }

    /// A worker child process (not waited for).
    pub fn spawn_worker(&self, lease_ms: u64, crash_at: Option<&str>) -> Child {
        let mut command = self.command(
            "operator",
            &[
                "worker",
                "--until-idle",
                "--lease-ms",
                &lease_ms.to_string(),
            ],
        );
        if let Some(point) = crash_at {
            command.env("AIRLOCK_CRASH_AT", point);
        }
        command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("worker starts")
    }

    pub fn run_status(&self, run: &str) -> String {
        self.json("alice", &["runs", "show", run])["status"]
            .as_str()
            .expect("status")
            .to_owned()
    }

    /// The run's status and attempts, read from the store directly.
    pub fn status_and_attempts(&self, run: &str) -> (String, i64) {
        if let Some(pg) = &self.postgres {
            let rows = pg.rows(&format!(
                "SELECT status, attempts FROM runs WHERE id = '{}'",
                run.replace('\'', "")
            ));
            let row = rows.first().expect("the run");
            return (
                row[0].clone().expect("status"),
                row[1]
                    .as_deref()
                    .and_then(|a| a.parse().ok())
                    .expect("attempts"),
            );
        }
        db(self)
            .query_row(
                "SELECT status, attempts FROM runs WHERE id = ?1",
                [run],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("the run")
    }

    pub fn events(&self, run: &str) -> Vec<Value> {
        let output = self.run("alice", &["runs", "events", run]);
        assert_eq!(output.status.code(), Some(0));
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("event JSON"))
            .collect()
    }

    pub fn pending(&self, run: &str) -> Vec<Value> {
        self.json("operator", &["approvals", "list", "--run", run])["items"]
            .as_array()
            .expect("items")
            .clone()
    }

    /// The id of the first pending approval of `run`.
    pub fn first_pending_id(&self, run: &str) -> String {
        self.pending(run)
            .first()
            .and_then(|approval| approval["id"].as_str())
            .unwrap_or_else(|| panic!("run {run} has no pending approval"))
            .to_owned()
    }

    /// `approvals approve` of the first pending approval of `run`, as `operator`.
    pub fn approve_first_pending(&self, run: &str) {
        let id = self.first_pending_id(run);
        self.json("operator", &["approvals", "approve", &id]);
    }

    pub fn outbox(&self) -> Vec<Value> {
        match std::fs::read_to_string(self.path().join("outbox.jsonl")) {
            Ok(text) => text
                .lines()
                .map(|l| serde_json::from_str(l).expect("outbox line is JSON"))
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

impl Default for DataDir {
    fn default() -> Self {
        DataDir::new()
    }
}

/// A script for alice with the given steps (each a JSON array of calls).
pub fn script(steps: Value) -> Value {
    let steps: Vec<Value> = steps
        .as_array()
        .expect("steps")
        .iter()
        .map(|calls| serde_json::json!({"calls": calls}))
        .collect();
    serde_json::json!({
        "schema_version": 1,
        "tenant_id": "acme",
        "principal_id": "alice",
        "principal_scopes": ["workspace.read", "workspace.write", "demo.write"],
        "origin_trust": "user",
        "limits": {"max_steps": 8, "max_tool_calls": 16},
        "steps": steps,
        "final_message": "done"
    })
}

/// One `demo.external_write` call with trusted arguments.
pub fn external_write(call_id: &str, content: &str) -> Value {
    serde_json::json!({"call_id": call_id, "tool": "demo.external_write",
        "arguments": {"destination": "e2e", "content": content},
        "argument_trust": {"destination": "user", "content": "user"}})
}

/// One `workspace.write_text` call with trusted arguments.
pub fn workspace_write(call_id: &str, path: &str, content: &str) -> Value {
    serde_json::json!({"call_id": call_id, "tool": "workspace.write_text",
        "arguments": {"path": path, "content": content},
        "argument_trust": {"path": "user", "content": "user"}})
}

/// A read-only look at the SQLite file, for checks the CLI does not expose (watermarks, rows).
pub fn db(data: &DataDir) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open_with_flags(
        data.path().join("airlock.sqlite3"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the store read-only");
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .expect("busy timeout");
    conn
}

/// `(status, tool_name, idempotency_key, effect_sent_at)` of every invocation.
pub fn invocations(data: &DataDir) -> Vec<(String, String, String, Option<i64>)> {
    let sql = "SELECT status, tool_name, idempotency_key, effect_sent_at FROM tool_invocations \
               ORDER BY created_at, id";
    if let Some(pg) = &data.postgres {
        return pg
            .rows(sql)
            .into_iter()
            .map(|row| {
                (
                    row[0].clone().expect("status"),
                    row[1].clone().expect("tool"),
                    row[2].clone().expect("key"),
                    row[3].as_deref().and_then(|t| t.parse().ok()),
                )
            })
            .collect();
    }
    let conn = db(data);
    let mut stmt = conn.prepare("SELECT status, tool_name, idempotency_key, effect_sent_at FROM tool_invocations ORDER BY created_at, id").expect("query");
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect()
}

/// Checks the end state the crash tests require (SPEC §16 #13, #30, #41): at most one outbox line
/// per idempotency key; every line's invocation SUCCEEDED or UNCERTAIN; no SUCCEEDED external
/// write without its line; every run terminal or parked; no terminal run with an open call.
pub fn assert_no_duplicate_effects(data: &DataDir) {
    let outbox = data.outbox();
    let mut keys = BTreeMap::<String, usize>::new();
    for line in &outbox {
        *keys
            .entry(line["idempotency_key"].as_str().expect("key").to_owned())
            .or_default() += 1;
    }
    for (key, count) in &keys {
        assert_eq!(*count, 1, "idempotency key {key} has {count} outbox lines");
    }
    let rows = invocations(data);
    for (status, tool, key, _) in &rows {
        if tool == "demo.external_write" {
            let has_line = keys.contains_key(key);
            if has_line {
                assert!(
                    status == "SUCCEEDED" || status == "UNCERTAIN",
                    "an outbox line's call is {status}"
                );
            }
            if status == "SUCCEEDED" {
                assert!(has_line, "a SUCCEEDED external write has no outbox line");
            }
        }
    }
    for key in keys.keys() {
        assert!(
            rows.iter().any(|(_, _, k, _)| k == key),
            "an outbox line has no invocation"
        );
    }
    let open = data.count("SELECT COUNT(*) FROM runs WHERE status IN ('QUEUED','RUNNING')");
    assert_eq!(open, 0, "every run is terminal or parked");
    let dangling = data.count(
        "SELECT COUNT(*) FROM tool_invocations i JOIN runs r ON r.id = i.run_id WHERE r.status IN ('COMPLETED','FAILED','CANCELLED') AND i.status NOT IN ('SUCCEEDED','FAILED','DENIED','UNCERTAIN')",
    );
    assert_eq!(dangling, 0, "a terminal run has an open invocation");
}

/// Makes `command`'s process fail every write past `bytes` of any file, as a full disk does: the
/// write that crosses the limit is cut short there, and the next one fails (`EFBIG`;
/// `RLIMIT_FSIZE`, with `SIGXFSZ` ignored so the process sees the error instead of being
/// killed). Both settings are inherited across `exec` by the child only.
pub fn limit_file_size(command: &mut Command, bytes: u64) -> &mut Command {
    use std::os::unix::process::CommandExt;
    let limit = libc::rlimit {
        rlim_cur: bytes as libc::rlim_t,
        rlim_max: bytes as libc::rlim_t,
    };
    // SAFETY: between fork and exec the closure calls only `signal` and `setrlimit`, both
    // async-signal-safe, and touches no memory shared with the parent.
    unsafe {
        command.pre_exec(move || {
            if libc::signal(libc::SIGXFSZ, libc::SIG_IGN) == libc::SIG_ERR
                || libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Waits for `child` to exit, at most `limit`; kills it and panics otherwise.
pub fn wait_within(child: &mut Child, limit: std::time::Duration, what: &str) -> Output {
    let started = std::time::Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            break;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    use std::io::Read;
    if let Some(mut out) = child.stdout.take() {
        out.read_to_end(&mut stdout).expect("stdout");
    }
    if let Some(mut err) = child.stderr.take() {
        err.read_to_end(&mut stderr).expect("stderr");
    }
    Output {
        status: child.wait().expect("status"),
        stdout,
        stderr,
    }
}

/// One call with every argument trusted as `user`.
pub use airlock_core::testing::fixtures::user_call as call;

/// `{call_id: (status, reason_code, result_item)}` of one step's calls, read through the store
/// (a finished row may keep its result item as the columns it follows from, M20).
pub fn step_calls(
    data: &DataDir,
    run: &str,
    step: i64,
) -> BTreeMap<String, (String, String, Value)> {
    invocations_of_run(data, run)
        .into_iter()
        .filter(|invocation| i64::from(invocation.step_number) == step)
        .map(|invocation| {
            let item = invocation
                .result_item
                .expect("a finished call's result item");
            (
                invocation.call_id,
                (
                    invocation.status.as_str().to_owned(),
                    invocation
                        .reason_code
                        .expect("a finished call's reason code"),
                    serde_json::from_str(&item).expect("result item JSON"),
                ),
            )
        })
        .collect()
}

/// Every invocation of `run`, read through the store as the binary wrote it.
pub fn invocations_of_run(data: &DataDir, run: &str) -> Vec<airlock_core::invocation::Invocation> {
    use airlock_core::store::Store;
    let store = airlock_sqlite::SqliteStore::open(&data.path().join("airlock.sqlite3"))
        .expect("open the store");
    let run = run.parse().expect("a run id");
    store
        .read(|tx| tx.invocations_of_run(run))
        .expect("the run's invocations")
}

/// A policy directory in `data` holding the shipped files, except that `high`-risk approvals
/// expire after one second. Returns its path for `--policy-dir`.
pub fn short_expiry_policies(data: &DataDir) -> String {
    let policies = data.path().join("policies");
    std::fs::create_dir_all(&policies).expect("policy dir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let profile = std::fs::read_to_string(root.join("default.toml"))
        .expect("shipped profile")
        .replace("high = 14400", "high = 1");
    std::fs::write(policies.join("default.toml"), profile).expect("write profile");
    std::fs::copy(root.join("hardline.toml"), policies.join("hardline.toml"))
        .expect("copy hardline");
    policies.to_str().expect("UTF-8 path").to_owned()
}

/// A small deterministic generator (xorshift64*) for the torture tests, so a failure reproduces
/// from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
