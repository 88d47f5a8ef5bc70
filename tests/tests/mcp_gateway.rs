//! `airlock mcp serve` with real peers (SPEC §19.5): the Python `mcp` SDK as the client
//! (`tests/mcp/client.py`), `@modelcontextprotocol/server-filesystem` and
//! `@modelcontextprotocol/server-everything` (npm) and the project's own test server
//! (`tests/mcp/airlock_test_server.py`) as upstreams, over stdio and Streamable HTTP.
//!
//! The peers are installed by `.ci/mcp.sh`: the SDK into CI's virtual environment `.ci/.venv`
//! (pinned in `.ci/requirements.txt`), the npm servers into the local prefix `.ci/.mcp/npm`. Without them every scenario here is skipped with a line on stderr saying so;
//! under `CI=true` a missing peer fails the test instead.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use airlock_e2e::mcp::{Need, Peers};
use airlock_e2e::*;
use serde_json::{Value, json};

/// The peers every scenario here needs (SDK, Node.js, both npm servers).
fn peers(test: &str) -> Option<Peers> {
    airlock_e2e::mcp::peers(&format!("mcp_gateway::{test}"), Need::SdkAndNpmServers)
}

/// One scenario's files: a data dir, a sandbox for the filesystem server, a ledger.
struct Scene {
    data: DataDir,
    sandbox: PathBuf,
    ledger: PathBuf,
    config: PathBuf,
    policy_dir: Option<String>,
}

/// The gateway file of the scenarios; `extra` is appended (more tables).
fn scene_with(peers: &Peers, extra: &str) -> Scene {
    scene_on(DataDir::new(), peers, extra)
}

/// [`scene_with`] on the store of `data` (SQLite in its directory, or a PostgreSQL schema).
fn scene_on(data: DataDir, peers: &Peers, extra: &str) -> Scene {
    let sandbox = data.path().join("sandbox");
    std::fs::create_dir_all(&sandbox).unwrap();
    std::fs::write(sandbox.join("a.txt"), "hello\n").unwrap();
    let ledger = data.path().join("ledger.txt");
    let config = data.path().join("gateway.toml");
    let text = format!(
        r#"schema_version = 1
tenant_id = "acme"
principal_id = "alice"
scopes = ["mcp.test.call", "mcp.files.read", "mcp.files.write", "mcp.everything.call", "mcp.everything.read", "mcp.web.call"]
origin_trust = "user"
{extra_top}
{test_tables}
[servers.files]
command = "node"
args = ["{filesystem}", "{sandbox}"]

[servers.files.tools.read_text_file]
side_effect = "none"
idempotency = "read_only"
risk = "low"
scope = "mcp.files.read"

# Writes are workspace writes, which the hardline rules check for protected host paths.
[servers.files.tools.write_file]
side_effect = "workspace_write"
idempotency = "idempotent"
risk = "medium"
scope = "mcp.files.write"

# A class the default profile denies unconditionally: not listed, and denied when called.
[servers.files.tools.move_file]
side_effect = "package_install"
idempotency = "non_idempotent"
risk = "high"
scope = "mcp.files.write"

[servers.everything]
command = "node"
args = ["{everything}"]

[servers.everything.tools.echo]
side_effect = "none"
idempotency = "read_only"
risk = "low"
{extra}
"#,
        extra_top = if extra.contains("approve_via_elicitation") {
            "approve_via_elicitation = true"
        } else {
            ""
        },
        extra = extra.replace("approve_via_elicitation = true", ""),
        test_tables = airlock_e2e::mcp::test_server_tables(&peers.python, &ledger),
        filesystem = peers.filesystem.display(),
        sandbox = sandbox.display(),
        everything = peers.everything.display(),
    );
    std::fs::write(&config, text).unwrap();
    Scene {
        data,
        sandbox,
        ledger,
        config,
        policy_dir: None,
    }
}

impl Scene {
    /// Runs `client.py SCENARIO` to its end; its JSON observations.
    fn client(&self, peers: &Peers, scenario: &str, mode: &str, arg: &str) -> Value {
        let child = self.spawn_client(peers, scenario, mode, arg, None);
        let output = wait_within_output(child, Duration::from_secs(180), scenario);
        parse_observations(&output, scenario)
    }

    fn spawn_client(
        &self,
        peers: &Peers,
        scenario: &str,
        mode: &str,
        arg: &str,
        pidfile: Option<&Path>,
    ) -> Child {
        let mut command = Command::new(&peers.python);
        command
            .arg(&peers.client)
            .arg(scenario)
            .arg("--airlock")
            .arg(airlock_bin())
            .arg("--data")
            .arg(self.data.path())
            .arg("--config")
            .arg(&self.config)
            .args(["--mode", mode, "--arg", arg])
            .arg("--ledger")
            .arg(&self.ledger)
            .args(["--lease-ms", "2000"])
            .env_remove("AIRLOCK_CRASH_AT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = &self.policy_dir {
            command.args(["--policy-dir", dir]);
        }
        if let Some(store) = self.data.store_url() {
            command.args(["--store", store]);
        }
        if let Some(pidfile) = pidfile {
            command.arg("--pidfile").arg(pidfile);
        }
        command.spawn().expect("start the python client")
    }

    fn ledger(&self) -> Vec<String> {
        std::fs::read_to_string(&self.ledger)
            .map(|t| t.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Serves with a copy of the shipped policy whose matrix allows `external_write` (the
    /// shipped profile asks for approval), so only what a scenario is about makes a write wait.
    fn allow_external_writes(&mut self) {
        let policies = airlock_e2e::mcp::policy_allowing_external_writes(self.data.path());
        self.policy_dir = Some(policies.to_str().unwrap().to_owned());
    }

    /// `approvals list` is empty: every approval the scenario asked for was resolved.
    fn assert_no_approval_pending(&self, why: &str) {
        let approvals = self.airlock(&["approvals", "list"]);
        assert_eq!(approvals["items"], json!([]), "{why}: {approvals}");
    }

    /// `airlock mcp tools --config FILE`: it exits 0; its JSON table.
    fn mcp_tools(&self) -> Value {
        let output = self
            .data
            .command("operator", &["mcp", "tools", "--config"])
            .arg(&self.config)
            .stderr(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0));
        serde_json::from_slice(&output.stdout).unwrap()
    }

    /// `airlock … ARGS` as a reviewer of tenant acme.
    fn airlock(&self, args: &[&str]) -> Value {
        self.data.json("operator", args)
    }
}

fn wait_within_output(mut child: Child, limit: Duration, what: &str) -> std::process::Output {
    let started = Instant::now();
    loop {
        if child.try_wait().expect("poll the client").is_some() {
            return child.wait_with_output().expect("client output");
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let output = child.wait_with_output().expect("client output");
            panic!(
                "{what}: the client did not finish within {limit:?}\nstderr:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn parse_observations(output: &std::process::Output, scenario: &str) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|_| {
        panic!(
            "{scenario}: no observations (exit {:?})\nstdout:\n{stdout}\nstderr:\n{}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The strings of the list `key` of a scenario's observations (tool names, notification
/// methods).
fn names<'v>(seen: &'v Value, key: &str) -> Vec<&'v str> {
    seen[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} is a list: {seen}"))
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

fn text(v: &Value) -> &str {
    v["text"].as_str().unwrap_or_default()
}

#[test]
fn pass_through_reads_listing_filter_denials_and_unknown_names() {
    let Some(peers) = peers("pass_through_reads_listing_filter_denials_and_unknown_names") else {
        return;
    };
    let scene = scene_with(&peers, "");
    let a = scene.sandbox.join("a.txt");
    let seen = scene.client(&peers, "basic", "legacy", a.to_str().unwrap());
    assert_eq!(seen["protocol_version"], "2025-11-25");
    let tools = names(&seen, "tools");
    // Listed: held scopes and a matrix row that is not an unconditional deny.
    for listed in [
        "files__read_text_file",
        "files__write_file",
        "test__append",
        "everything__echo",
    ] {
        assert!(tools.contains(&listed), "{listed} listed: {tools:?}");
    }
    // Not listed: files' unconfigured tools need mcp.files.call (not held); move_file's
    // class is denied by the matrix.
    for unlisted in ["files__list_directory", "files__move_file"] {
        assert!(!tools.contains(&unlisted), "{unlisted} not listed");
    }
    assert_eq!(seen["read"]["is_error"], false);
    assert_eq!(
        text(&seen["read"]),
        "hello\n",
        "the upstream result unchanged"
    );
    assert_eq!(seen["unknown"]["error_code"], -32602);
    assert_eq!(
        text(&seen["matrix_denied"]),
        "airlock denied this call (policy.matrix.package_install): Not performed. Policy does not permit this action."
    );
    assert_eq!(seen["matrix_denied"]["is_error"], true);
    assert_eq!(
        text(&seen["hardline_denied"]),
        "airlock denied this call (policy.hardline.host_path): Not performed. Policy does not permit this action."
    );
    assert!(
        !Path::new("/etc/airlock-test").exists(),
        "nothing was written"
    );
    assert!(
        scene.sandbox.join("a.txt").exists() && !scene.sandbox.join("a.txt.moved").exists(),
        "the denied move did not happen"
    );
}

/// SPEC §22.3 items 1 and 2 and §23 over stdio, with the Python SDK 2.3 at 2026-07-28 (its own
/// `call_tool`, which returns an input-required round instead of raising on it): an allowed
/// call; a parked write answered with the approval form and a sealed state, which refused once
/// changed and moved the call once answered yes (one ledger line); the test server's own
/// roots round relayed (it keeps no state, so none is handed out), and the client's roots
/// reaching the tool. Then, for a
/// client declaring the tasks extension, the parked write is a task: approved from another
/// process and polled with `tasks/get` until completed, the ledger holding it once.
#[test]
fn over_stdio_a_2026_07_28_client_gets_rounds_and_tasks() {
    let Some(peers) = peers("over_stdio_a_2026_07_28_client_gets_rounds_and_tasks") else {
        return;
    };
    let scene = scene_with(&peers, "approve_via_elicitation = true\n");
    let seen = scene.client(&peers, "rounds", "modern", "stdio-form");
    assert_eq!(seen["protocol_version"], "2026-07-28", "{seen}");
    assert_eq!(seen["allowed"]["is_error"], false, "{seen}");
    let asked = &seen["asked"];
    assert_eq!(
        asked["requests"]["approval"]["method"], "elicitation/create",
        "{seen}"
    );
    assert_eq!(
        asked["requests"]["approval"]["params"]["mode"], "form",
        "{seen}"
    );
    assert_eq!(seen["tampered"]["error_code"], -32602, "{seen}");
    assert_eq!(seen["answered"]["is_error"], false, "{seen}");
    assert_eq!(seen["answered"]["text"], "appended", "{seen}");
    assert_eq!(
        seen["roots_asked"]["requests"]["roots"]["method"], "roots/list",
        "{seen}"
    );
    assert!(
        seen["roots_asked"]["state"].is_null(),
        "the upstream kept no state, so the gateway hands out none: {seen}"
    );
    assert_eq!(
        seen["roots"]["text"], "roots: file:///client/root",
        "{seen}"
    );
    assert_eq!(scene.ledger(), ["stdio-form"]);

    let seen = scene.client(&peers, "task", "modern", "stdio-task");
    assert_eq!(seen["created"]["resultType"], "task", "{seen}");
    assert_eq!(seen["pending"], 1, "{seen}");
    assert_eq!(seen["final"]["status"], "completed", "{seen}");
    assert_eq!(
        seen["final"]["result"]["content"][0]["text"], "appended",
        "{seen}"
    );
    assert_eq!(scene.ledger(), ["stdio-form", "stdio-task"]);
}

#[test]
fn a_parked_write_is_answered_after_another_process_approves_it_on_both_protocols() {
    let Some(peers) = peers("a_parked_write_is_answered_after_another_process_approves_it") else {
        return;
    };
    for (mode, version) in [("legacy", "2025-11-25"), ("modern", "2026-07-28")] {
        let scene = scene_with(&peers, "");
        let seen = scene.client(&peers, "approve", mode, &format!("line-{mode}"));
        assert_eq!(seen["protocol_version"], version);
        let approval = seen["approval"]
            .as_str()
            .expect("a progress notification named the approval");
        let progress = seen["progress"][0].as_str().unwrap();
        assert!(
            progress.starts_with(&format!("waiting for approval {approval} (expires ")),
            "{progress}"
        );
        assert_eq!(seen["resolve"]["state"], "applied");
        assert_eq!(seen["result"]["is_error"], false);
        assert_eq!(text(&seen["result"]), "appended");
        assert_eq!(scene.ledger(), [format!("line-{mode}")]);
    }
}

#[test]
fn a_reviewer_denial_is_answered_as_an_error_with_its_reason() {
    let Some(peers) = peers("a_reviewer_denial_is_answered_as_an_error_with_its_reason") else {
        return;
    };
    let scene = scene_with(&peers, "");
    let seen = scene.client(&peers, "reviewer_deny", "legacy", "never");
    assert_eq!(seen["resolve"]["state"], "applied");
    assert_eq!(seen["result"]["is_error"], true);
    assert_eq!(
        text(&seen["result"]),
        "airlock denied this call: denied by a reviewer (checked by ci)"
    );
    assert!(scene.ledger().is_empty());
}

/// §22.2 across concurrent calls: a write already in flight when an untrusted result is
/// answered was proposed untainted and finishes without approval; a write sent after that
/// answer is tainted and waits for approval; the conversation names what tainted it.
#[test]
fn taint_reaches_calls_proposed_after_the_untrusted_answer_not_calls_in_flight() {
    let Some(peers) = peers("taint_reaches_calls_proposed_after_the_untrusted_answer") else {
        return;
    };
    let mut scene = scene_with(&peers, "");
    scene.allow_external_writes();
    let seen = scene.client(&peers, "taint_concurrent", "legacy", "");
    assert_eq!(seen["read"]["is_error"], false, "{seen}");
    assert_eq!(
        seen["in_flight_done_at_read"], false,
        "the first write was still in flight when the read was answered: {seen}"
    );
    assert_eq!(seen["in_flight"]["is_error"], false, "{seen}");
    let after = &seen["after"];
    assert!(
        after["approval"].is_string(),
        "the write sent after the untrusted answer waits: {seen}"
    );
    assert_eq!(after["result"]["is_error"], false, "{seen}");
    assert_eq!(scene.ledger(), ["in-flight", "after"]);
    let conversation = &seen["conversations"]["items"][0];
    assert!(
        conversation["tainted_at"].is_string(),
        "the conversation is tainted: {conversation}"
    );
}

#[test]
fn an_untrusted_result_makes_the_next_write_wait_for_approval() {
    let Some(peers) = peers("an_untrusted_result_makes_the_next_write_wait_for_approval") else {
        return;
    };
    let mut scene = scene_with(&peers, "");
    // A profile that allows external writes, so only the taint makes one wait.
    scene.allow_external_writes();
    let seen = scene.client(&peers, "taint", "legacy", "");
    assert_eq!(
        seen["before"]["is_error"], false,
        "a user's write runs without approval"
    );
    assert_eq!(seen["read"]["is_error"], false);
    let after = &seen["after"];
    assert!(
        after["approval"].is_string(),
        "after an untrusted result the write waits: {after}"
    );
    assert_eq!(after["result"]["is_error"], false);
    assert_eq!(scene.ledger(), ["before", "after"]);
}

#[test]
fn elicitation_yes_approves_and_decline_denies() {
    let Some(peers) = peers("elicitation_yes_approves_and_decline_denies") else {
        return;
    };
    let scene = scene_with(&peers, "approve_via_elicitation = true");
    let seen = scene.client(&peers, "elicit_accept", "legacy", "elicited");
    let message = seen["elicitation_message"]
        .as_str()
        .expect("the client was asked");
    assert!(message.contains("tool: mcp.test.append"), "{message}");
    assert!(message.contains("risk: medium"), "{message}");
    assert_eq!(seen["result"]["is_error"], false, "{seen}");
    assert_eq!(scene.ledger(), ["elicited"]);

    let declining = scene_with(&peers, "approve_via_elicitation = true");
    let seen = declining.client(&peers, "elicit_decline", "legacy", "declined");
    assert_eq!(seen["result"]["is_error"], true);
    assert_eq!(
        text(&seen["result"]),
        "airlock denied this call: denied by a reviewer (declined by the client (elicitation))"
    );
    assert!(declining.ledger().is_empty());
}

/// §22.3: a host that gives up on a parked call (its tool timeout cancels the request) no longer
/// loses the approval: it stays pending, the conversation goes on, and once a reviewer approves
/// it the identical call sent again binds to it and returns the result, the effect done once.
#[test]
fn a_host_timeout_keeps_the_approval_and_the_retried_call_returns_the_approved_result() {
    let Some(peers) = peers("a_host_timeout_keeps_the_approval") else {
        return;
    };
    let scene = scene_with(&peers, "");
    let seen = scene.client(&peers, "cancel", "legacy", "kept");
    assert_eq!(seen["timed_out"], false);
    assert!(
        seen.get("answer").is_none(),
        "no answer to a cancelled request"
    );
    assert_eq!(seen["approval_after"]["status"], "pending", "{seen}");
    assert_eq!(seen["next"]["is_error"], false, "the conversation goes on");
    assert_eq!(seen["resolve"]["approval"]["status"], "approved", "{seen}");
    assert_eq!(
        seen["ledger_before_retry"],
        json!([]),
        "approved, but no request waits for it: not sent"
    );
    assert_eq!(seen["retry"]["is_error"], false, "{seen}");
    assert_eq!(scene.ledger(), ["kept"], "the effect done once");
    scene.assert_no_approval_pending("no second approval was asked");
}

/// §22.3: a host that sends no `progressToken` is answered at once, naming the approval, its
/// expiry and how to retry; sent again while pending it is told the same; after approval the
/// same call returns the result.
#[test]
fn a_call_without_a_progress_token_is_answered_at_once_and_its_retry_binds() {
    let Some(peers) = peers("a_call_without_a_progress_token_is_answered_at_once") else {
        return;
    };
    let scene = scene_with(&peers, "");
    let seen = scene.client(&peers, "no_progress", "legacy", "once");
    assert_eq!(seen["first"]["is_error"], true, "{seen}");
    let first = text(&seen["first"]);
    assert!(first.contains("needs approval"), "{first}");
    assert!(first.contains("retry the same call"), "{first}");
    assert!(
        seen["approval"].is_string(),
        "the answer names the approval: {first}"
    );
    assert!(
        seen["first_seconds"].as_f64().unwrap() < 10.0,
        "answered at once, not at a timeout: {seen}"
    );
    assert_eq!(
        seen["approval"].as_str(),
        approval_named_in(&seen["pending_again"]).as_deref(),
        "the same approval, not a second one"
    );
    assert_eq!(seen["retry"]["is_error"], false, "{seen}");
    assert_eq!(scene.ledger(), ["once"]);
}

/// §22.2, §22.3 with the real server-filesystem (as server `web`, whose `mcp.web.call` the
/// scene's principal holds), its `write_file` classed `external_write` (so
/// it waits for approval; the scene's own `files` server classes it a workspace write, which
/// the matrix confines to the run's workspace): a read is answered beside the waiting write;
/// the host gives up on the write (its request is cancelled), the approval stays pending, and
/// once approved the identical write sent again is performed once.
#[test]
fn with_server_filesystem_a_waiting_write_delays_no_read_and_its_retry_writes_once() {
    let Some(peers) = peers("with_server_filesystem_a_waiting_write") else {
        return;
    };
    let outside = tempfile::tempdir().unwrap();
    let sandbox = outside.path().to_str().unwrap().to_owned();
    std::fs::write(outside.path().join("a.txt"), "hello\n").unwrap();
    let fs = format!(
        r#"[servers.web]
command = "node"
args = ["{filesystem}", "{sandbox}"]

[servers.web.tools.read_text_file]
side_effect = "none"
idempotency = "read_only"
risk = "low"

[servers.web.tools.write_file]
side_effect = "external_write"
idempotency = "idempotent"
risk = "medium"
"#,
        filesystem = peers.filesystem.display(),
    );
    let scene = scene_with(&peers, &fs);
    let seen = scene.client(&peers, "files_waiting", "legacy", &sandbox);
    assert_eq!(seen["first_read"]["is_error"], false, "{seen}");
    assert_eq!(seen["timed_out"], false, "{seen}");
    assert_eq!(text(&seen["beside"]), "hello\n", "{seen}");
    assert!(seen.get("cancelled_answer").is_none(), "{seen}");
    assert_eq!(seen["approval_after"], "pending", "{seen}");
    assert_eq!(seen["written_before_retry"], false, "{seen}");
    assert_eq!(seen["retry"]["is_error"], false, "{seen}");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("out.txt")).unwrap(),
        "approved\n"
    );
    scene.assert_no_approval_pending("no second approval was asked");
}

/// §22.2: an allowed call is answered while another call of the conversation waits.
#[test]
fn an_allowed_call_is_answered_while_another_waits_for_approval() {
    let Some(peers) = peers("an_allowed_call_is_answered_while_another_waits") else {
        return;
    };
    let scene = scene_with(&peers, "");
    let seen = scene.client(&peers, "read_while_parked", "legacy", "parked");
    assert_eq!(seen["read"]["is_error"], false, "{seen}");
    assert_eq!(
        seen["write_pending"], "pending",
        "answered while the write waited"
    );
    assert_eq!(seen["write"]["is_error"], false, "{seen}");
    assert_eq!(scene.ledger(), ["parked"]);
}

/// §22.3, §19.7: the gateway is killed with -9 while a call waits for approval; the host
/// restarts it and sends the identical call again at once (before the dead connection has even
/// expired): it is told the same approval is needed, not asked for a second one; once a reviewer
/// approves it, the call sent again returns the result, the effect done once.
#[test]
fn kill_9_while_a_call_waits_leaves_its_approval_to_the_retried_call() {
    let Some(peers) = peers("kill_9_while_a_call_waits_leaves_its_approval") else {
        return;
    };
    let scene = scene_with(&peers, "");
    let pidfile = scene.data.path().join("gateway.pid");
    let client = scene.spawn_client(&peers, "park", "legacy", "survives", Some(&pidfile));
    let started = Instant::now();
    let approval = loop {
        // The store exists once the gateway opened it; until then the CLI says so.
        let listed = scene
            .data
            .command("operator", &["approvals", "list"])
            .stderr(Stdio::null())
            .output()
            .unwrap();
        let pending: Value = serde_json::from_slice(&listed.stdout).unwrap_or(Value::Null);
        if let Some(id) = pending["items"][0]["id"].as_str() {
            break id.to_owned();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the call never parked: {pending}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let pid = gateway_pid(&pidfile).expect("the gateway wrote its pid");
    // SAFETY: kill(2) on the gateway's pid, which this test's client started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    drop(wait_within_output(client, Duration::from_secs(60), "park"));
    let seen = scene.client(&peers, "no_progress", "legacy", "survives");
    assert_eq!(
        seen["approval"].as_str(),
        Some(approval.as_str()),
        "the retried call is told of the surviving approval: {seen}"
    );
    assert_eq!(
        approval_named_in(&seen["pending_again"]).as_deref(),
        Some(approval.as_str()),
        "{seen}"
    );
    assert_eq!(seen["retry"]["is_error"], false, "{seen}");
    assert_eq!(scene.ledger(), ["survives"], "the effect done once");
    scene.assert_no_approval_pending("no second approval was asked");
}

/// How a stdio gateway ends in [`a_stdio_upstream_ends_with_its_gateway`].
#[derive(Debug, Clone, Copy)]
enum GatewayEnd {
    /// Its client closes its stdin; it exits.
    ClientLeaves,
    /// kill -9: nothing of it runs after.
    Killed,
}

/// SPEC §19.7: a stdio upstream (here the test server told to outlive its closed stdin) ends
/// with the gateway that started it, however the gateway ends.
fn a_stdio_upstream_ends_with_its_gateway(test: &str, end: GatewayEnd) {
    let Some(peers) = peers(test) else {
        return;
    };
    let data = DataDir::new();
    let ledger = data.path().join("ledger.txt");
    let tables = airlock_e2e::mcp::test_server_tables(&peers.python, &ledger);
    let lingering = tables.replace(
        "env = { AIRLOCK_TEST_LEDGER",
        "env = { AIRLOCK_TEST_LINGER = \"1\", AIRLOCK_TEST_LEDGER",
    );
    assert_ne!(lingering, tables, "the test server's env table moved");
    let config = data.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "schema_version = 1\ntenant_id = \"acme\"\nprincipal_id = \"alice\"\nscopes = [\"mcp.test.call\"]\norigin_trust = \"user\"\n{lingering}"
        ),
    )
    .unwrap();
    let mut gateway = data
        .command("operator", &["mcp", "serve", "--config"])
        .arg(&config)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The upstream is started before any client; it writes its pid once it runs.
    let mut pids = ledger.as_os_str().to_owned();
    pids.push(".pids");
    let started = Instant::now();
    while !std::path::Path::new(&pids).exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the gateway never started its upstream"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let upstream = airlock_e2e::mcp::test_server_pids(&ledger);
    match end {
        GatewayEnd::ClientLeaves => drop(gateway.stdin.take()),
        // SAFETY: kill(2) on the gateway's pid, which this test started.
        GatewayEnd::Killed => {
            assert_eq!(unsafe { libc::kill(gateway.id() as i32, libc::SIGKILL) }, 0)
        }
    }
    // A client that leaves before `initialize` ends the gateway with status 2; how it exits is
    // not the point, only that it does and takes its upstream along.
    wait_within(&mut gateway, Duration::from_secs(30), "the gateway");
    for pid in upstream {
        if let Err(why) = airlock_e2e::mcp::wait_until_ended(&pid, Duration::from_secs(10)) {
            // Leave nothing behind for the next test.
            if let Ok(pid) = pid.parse::<i32>() {
                // SAFETY: kill(2) on the upstream this test's gateway started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            panic!("the upstream outlived its gateway ({end:?}): {why}");
        }
    }
}

#[test]
fn a_stdio_upstream_ends_when_its_gateway_is_killed_with_9() {
    a_stdio_upstream_ends_with_its_gateway(
        "a_stdio_upstream_ends_when_its_gateway_is_killed_with_9",
        GatewayEnd::Killed,
    );
}

#[test]
fn a_stdio_upstream_ends_when_its_gateway_shuts_down() {
    a_stdio_upstream_ends_with_its_gateway(
        "a_stdio_upstream_ends_when_its_gateway_shuts_down",
        GatewayEnd::ClientLeaves,
    );
}

/// SPEC §23: server-filesystem asks for the client's roots as soon as it starts, before any
/// client is there; the gateway answers with FILE's `roots` of that server, so the server
/// serves the configured directory instead of its command-line one (before, the answer was an
/// error, and the server warned and fell back).
#[test]
fn an_upstreams_roots_outside_a_call_are_the_files() {
    let Some(peers) = peers("an_upstreams_roots_outside_a_call_are_the_files") else {
        return;
    };
    let scene = scene_with(&peers, "");
    let root = scene.data.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let root = root.canonicalize().unwrap();
    let text = std::fs::read_to_string(&scene.config).unwrap();
    let sandbox_args = format!(
        "args = [\"{}\", \"{}\"]\n",
        peers.filesystem.display(),
        scene.sandbox.display()
    );
    let with_roots = text.replacen(
        &sandbox_args,
        &format!(
            "{sandbox_args}roots = [\"{}\"]\n\n[servers.files.tools.list_allowed_directories]\nside_effect = \"none\"\nidempotency = \"read_only\"\nrisk = \"low\"\nscope = \"mcp.files.read\"\n",
            root.display()
        ),
        1,
    );
    assert_ne!(with_roots, text, "the files server's table moved");
    std::fs::write(&scene.config, with_roots).unwrap();
    let root = root.display().to_string();
    let seen = scene.client(&peers, "allowed_directories", "legacy", &root);
    let said = seen["allowed"]["text"].as_str().unwrap_or_default();
    assert!(
        said.contains(&root),
        "the configured root is served: {seen}"
    );
    assert!(
        !said.contains(&scene.sandbox.display().to_string()),
        "the command-line directory is replaced: {seen}"
    );
}

/// The approval id an `isError` answer names.
fn approval_named_in(result: &Value) -> Option<String> {
    let said = result["text"].as_str()?;
    let at = said.find("approval ")? + "approval ".len();
    Some(said.get(at..at + 36)?.to_owned())
}

#[test]
fn kill_9_during_append_leaves_it_uncertain_and_a_retry_is_refused() {
    let Some(peers) = peers("kill_9_during_append_leaves_it_uncertain_and_a_retry_is_refused")
    else {
        return;
    };
    let mut scene = scene_with(&peers, "");
    // Appends run without approval here, so the call is in flight at once.
    scene.allow_external_writes();
    let pidfile = scene.data.path().join("gateway.pid");
    let client = scene.spawn_client(&peers, "kill", "legacy", "once", Some(&pidfile));
    // The effect is in the ledger; the answer is 60 s away.
    let started = Instant::now();
    while scene.ledger().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "append never ran"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill(2) on the gateway's pid, which this test's client started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let output = wait_within_output(client, Duration::from_secs(60), "kill");
    drop(output);
    // Any airlock process on the store ends the dead gateway's run within a lease plus a sweep.
    let worker = scene.data.worker_until_idle(2_000);
    assert_eq!(worker.status.code(), Some(0));
    let uncertain = scene.airlock(&["invocations", "uncertain"]);
    let items = uncertain["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{uncertain}");
    assert_eq!(items[0]["tool_name"], "mcp.test.append");
    assert_eq!(items[0]["status"], "UNCERTAIN");
    assert_eq!(scene.ledger(), ["once"], "at most one effect");
    // The agent restarts and retries: refused across runs.
    let seen = scene.client(&peers, "repeat", "legacy", "once");
    assert_eq!(
        text(&seen["answer"]),
        "airlock denied this call (policy.uncertain.repeat): Not performed. An identical earlier call has an unknown outcome."
    );
    assert_eq!(scene.ledger(), ["once"]);
}

/// The pid a gateway wrote to `pidfile` once it started.
fn gateway_pid(pidfile: &Path) -> Option<i32> {
    std::fs::read_to_string(pidfile).ok()?.trim().parse().ok()
}

/// SPEC §19.7 (issue 25): two hosts send the identical non-idempotent call at once through
/// two gateway processes on one store; one call takes the effect and waits 60 s for its
/// answer, the other is refused `policy.uncertain.in_flight`. The first gateway is killed
/// with -9 after the effect and before the answer, and the host restarts it and sends the
/// identical call again at once, while the dead gateway's invocation is still RUNNING under
/// an unexpired lease: refused `policy.uncertain.in_flight` again, naming the invocation. Once
/// a worker's recovery made that invocation UNCERTAIN, the retry is refused
/// `policy.uncertain.repeat`. The ledger holds one line throughout.
fn a_retry_racing_recovery_never_repeats_the_effect(mut scene: Scene, peers: &Peers) {
    scene.allow_external_writes();
    let pidfiles = [
        scene.data.path().join("gateway-a.pid"),
        scene.data.path().join("gateway-b.pid"),
    ];
    let mut clients: Vec<Option<Child>> = pidfiles
        .iter()
        .map(|pidfile| Some(scene.spawn_client(peers, "kill", "legacy", "once", Some(pidfile))))
        .collect();
    // One of the two is refused at once; the other takes the effect and waits.
    let started = Instant::now();
    let mut refused = None;
    while refused.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "neither identical call was refused"
        );
        for (index, slot) in clients.iter_mut().enumerate() {
            let exited = slot
                .as_mut()
                .is_some_and(|child| child.try_wait().expect("poll the client").is_some());
            if exited && let Some(child) = slot.take() {
                let output = child.wait_with_output().expect("client output");
                refused = Some((index, parse_observations(&output, "kill")));
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (refused_index, seen) = refused.expect("a refusal");
    let in_flight = "airlock denied this call (policy.uncertain.in_flight): Not performed. \
                     An identical earlier call (invocation ";
    assert!(text(&seen["answer"]).starts_with(in_flight), "{seen}");
    assert_eq!(seen["answer"]["is_error"], true, "{seen}");
    while scene.ledger().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "append never ran"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let running = 1 - refused_index;
    let pid = gateway_pid(&pidfiles[running]).expect("the running gateway's pid");
    // SAFETY: kill(2) on the gateway's pid, which this test's client started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    if let Some(child) = clients[running].take() {
        drop(wait_within_output(child, Duration::from_secs(60), "kill"));
    }
    // The host restarts the gateway and retries at once: the lease (2 s) has not run out.
    let seen = scene.client(peers, "repeat", "legacy", "once");
    let answer = text(&seen["answer"]);
    assert!(answer.starts_with(in_flight), "{seen}");
    assert_eq!(
        scene.ledger(),
        ["once"],
        "the retry did not repeat the effect"
    );
    // Any airlock process ends the dead gateway's run within a lease plus a sweep.
    let worker = scene.data.worker_until_idle(2_000);
    assert_eq!(worker.status.code(), Some(0));
    let items = scene.airlock(&["invocations", "uncertain"])["items"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(items.len(), 1, "{items:?}");
    let twin = items[0]["id"].as_str().expect("the invocation's id");
    assert!(
        answer.contains(twin),
        "the refusal names its twin: {answer}"
    );
    let seen = scene.client(peers, "repeat", "legacy", "once");
    assert_eq!(
        text(&seen["answer"]),
        "airlock denied this call (policy.uncertain.repeat): Not performed. An identical earlier call has an unknown outcome."
    );
    assert_eq!(scene.ledger(), ["once"], "one effect, ever");
}

#[test]
fn a_retry_at_once_after_kill_9_is_refused_in_flight_and_never_repeats_the_effect() {
    let Some(peers) = peers("a_retry_at_once_after_kill_9_is_refused_in_flight") else {
        return;
    };
    let scene = scene_with(&peers, "");
    a_retry_racing_recovery_never_repeats_the_effect(scene, &peers);
}

#[test]
fn on_postgresql_two_gateways_and_a_retry_at_once_never_repeat_the_effect() {
    let test = "on_postgresql_two_gateways_and_a_retry_at_once_never_repeat_the_effect";
    let Some(peers) = peers(test) else {
        return;
    };
    let Some(server) = airlock_e2e::pg::server(&format!("mcp_gateway::{test}")) else {
        return;
    };
    let scene = scene_on(DataDir::on_postgres(&server), &peers, "");
    a_retry_racing_recovery_never_repeats_the_effect(scene, &peers);
}

/// The definition hash `mcp tools` reports for `exposed`.
fn hash_of(scene: &Scene, exposed: &str) -> String {
    tool_row(&scene.mcp_tools(), exposed)["definition_sha256"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The row of `exposed` in an `mcp tools` table.
fn tool_row<'t>(table: &'t Value, exposed: &str) -> &'t Value {
    table["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["exposed_name"] == exposed)
        .unwrap_or_else(|| panic!("{exposed} is in the table: {table}"))
}

#[test]
fn a_definition_that_stops_matching_its_pin_is_unlisted_and_denied_unknown_tool() {
    let Some(peers) = peers("a_definition_that_stops_matching_its_pin_is_unlisted") else {
        return;
    };
    let unpinned = scene_with(&peers, "");
    let hash = hash_of(&unpinned, "test__mutable");
    let scene = scene_with(
        &peers,
        &format!(
            "\n[servers.test.tools.mutable]\nside_effect = \"none\"\nidempotency = \"read_only\"\nrisk = \"low\"\npin = \"{hash}\"\n"
        ),
    );
    let seen = scene.client(&peers, "pin", "legacy", "");
    assert!(
        names(&seen, "tools").contains(&"test__mutable"),
        "listed while it matches its pin"
    );
    assert_eq!(seen["before"]["is_error"], false);
    assert!(
        names(&seen, "notifications").contains(&"notifications/tools/list_changed"),
        "the client was told: {seen}"
    );
    assert!(
        !names(&seen, "tools_after").contains(&"test__mutable"),
        "unlisted after the change"
    );
    assert_eq!(
        text(&seen["after"]),
        "airlock denied this call (policy.matrix.unknown_tool): Not performed. The requested capability is unknown."
    );
    let db = db(&scene.data);
    let mismatches: i64 = db
        .query_row(
            "SELECT count(*) FROM process_events WHERE event_type = 'mcp.tool.pin_mismatch'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(mismatches, 1);
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child that is killed when dropped.
struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_port(port: u16) {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "nothing listens on {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn streamable_http_upstreams_pass_through_and_a_changed_definition_denies_the_pinned_call() {
    let Some(peers) = peers("streamable_http_upstreams") else {
        return;
    };
    let (web_port, everything_port) = (free_port(), free_port());
    let data_ledger = tempfile::tempdir().unwrap();
    let _web = Background(
        Command::new(&peers.python)
            .arg(&peers.test_server)
            .args(["--http", &web_port.to_string()])
            .env("AIRLOCK_TEST_LEDGER", data_ledger.path().join("web-ledger"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let _everything = Background(
        Command::new("node")
            .arg(&peers.everything)
            .arg("streamableHttp")
            .env("PORT", everything_port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(web_port);
    wait_for_port(everything_port);
    let scene = scene_with(
        &peers,
        &format!(
            r#"
[servers.web]
url = "http://127.0.0.1:{web_port}/mcp"

[servers.web.tools.mutable]
side_effect = "external_write"
idempotency = "idempotent"
risk = "medium"

[servers.everyhttp]
url = "http://127.0.0.1:{everything_port}/mcp"

[servers.everyhttp.tools.echo]
side_effect = "none"
idempotency = "read_only"
risk = "low"
scope = "mcp.everyhttp.call"
"#
        ),
    );
    let text_config = std::fs::read_to_string(&scene.config).unwrap().replace(
        "\"mcp.web.call\"]",
        "\"mcp.web.call\", \"mcp.everyhttp.call\"]",
    );
    std::fs::write(&scene.config, text_config).unwrap();
    let seen = scene.client(
        &peers,
        "changed",
        "legacy",
        &format!("http://127.0.0.1:{web_port}/mcp"),
    );
    assert!(
        names(&seen, "tools").contains(&"everyhttp__echo"),
        "server-everything over Streamable HTTP is listed: {seen}"
    );
    assert_eq!(seen["resolve"]["state"], "applied", "{seen}");
    assert_eq!(
        text(&seen["result"]),
        "airlock denied this call (policy.revalidation.changed): Not performed. The approved action changed.",
        "{seen}"
    );
    assert!(
        names(&seen, "notifications").contains(&"notifications/tools/list_changed"),
        "{seen}"
    );
}

#[test]
fn mcp_tools_prints_the_table_and_a_bad_file_exits_4_naming_the_key() {
    let Some(peers) = peers("mcp_tools_prints_the_table") else {
        return;
    };
    let scene = scene_with(&peers, "");
    let table = scene.mcp_tools();
    let append = tool_row(&table, "test__append");
    assert_eq!(append["internal_name"], "mcp.test.append");
    assert_eq!(append["server"], "test");
    assert_eq!(append["upstream_name"], "append");
    assert_eq!(append["class"]["idempotency"], "non_idempotent");
    assert_eq!(append["class"]["output_trust"], "external_untrusted");
    assert_eq!(append["listed"], true);
    assert!(
        append["definition_sha256"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    let list_directory = tool_row(&table, "files__list_directory");
    assert_eq!(list_directory["listed"], false);
    assert_eq!(
        list_directory["why_not"],
        "principal does not hold scope mcp.files.call"
    );
    for server in table["servers"].as_array().unwrap() {
        assert_eq!(server["status"], "connected", "{server}");
    }

    // A bad value: exit 4 and the key's path.
    let broken = scene.data.path().join("broken.toml");
    let text = std::fs::read_to_string(&scene.config)
        .unwrap()
        .replace("risk = \"medium\"", "risk = \"enormous\"");
    std::fs::write(&broken, text).unwrap();
    for command in ["tools", "serve"] {
        let output = scene
            .data
            .command("operator", &["mcp", command, "--config"])
            .arg(&broken)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(4), "mcp {command}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("servers.files.tools.write_file.risk: invalid value 'enormous'"),
            "{stderr}"
        );
    }
}

/// The error a request of a scenario was answered with: code, message and data.
fn seen_error<'v>(seen: &'v Value, key: &str) -> (i64, &'v str, &'v Value) {
    let answer = &seen[key];
    (
        answer["error_code"]
            .as_i64()
            .unwrap_or_else(|| panic!("{key} was answered with an error: {answer}")),
        answer["error_message"].as_str().unwrap_or_default(),
        &answer["error_data"],
    )
}

/// Checks the `resources` scenario's observations of server-everything (SPEC §19.6) whose
/// URIs carry `uri_prefix` and whose prompts `name_prefix`. `legacy`: a 2025-11-25 client,
/// which also subscribes (2026-07-28 removed `resources/subscribe` for `subscriptions/listen`).
fn assert_everything_passes_through(
    seen: &Value,
    uri_prefix: &str,
    name_prefix: &str,
    legacy: bool,
) {
    let caps = &seen["capabilities"];
    assert_eq!(caps["resources"]["subscribe"], true, "{caps}");
    for offered in ["prompts", "completions", "logging"] {
        assert!(caps[offered].is_object(), "{offered} declared: {caps}");
    }
    let resources = names(seen, "resources");
    let text_uri = seen["text_uri"].as_str().unwrap();
    assert!(
        text_uri.starts_with(&format!("{uri_prefix}demo://resource/static/document/")),
        "{resources:?}"
    );
    let templates = names(seen, "templates");
    for template in ["text", "blob"] {
        let expected = format!("{uri_prefix}demo://resource/dynamic/{template}/{{resourceId}}");
        assert!(templates.contains(&expected.as_str()), "{templates:?}");
    }
    // A text and a binary resource, read through the gate, under their exposed URIs.
    let text = &seen["read_text"]["ok"]["contents"][0];
    assert_eq!(text["uri"], text_uri, "{text}");
    assert!(
        !text["text"].as_str().unwrap_or_default().is_empty(),
        "{text}"
    );
    let blob = &seen["read_blob"]["ok"]["contents"][0];
    assert_eq!(
        blob["uri"],
        format!("{uri_prefix}demo://resource/dynamic/blob/1"),
        "{blob}"
    );
    assert!(
        !blob["blob"].as_str().unwrap_or_default().is_empty(),
        "{blob}"
    );
    let prompts = names(seen, "prompts");
    for prompt in ["args-prompt", "simple-prompt", "completable-prompt"] {
        let expected = format!("{name_prefix}{prompt}");
        assert!(prompts.contains(&expected.as_str()), "{prompts:?}");
    }
    let message = &seen["prompt"]["ok"]["messages"][0]["content"]["text"];
    assert_eq!(
        message, "What's weather in Paris, TX?",
        "{}",
        seen["prompt"]
    );
    assert_eq!(
        seen["completion"]["ok"]["completion"]["values"],
        serde_json::json!(["Engineering"]),
        "{}",
        seen["completion"]
    );
    assert!(seen["set_level"]["ok"].is_object(), "{}", seen["set_level"]);
    if legacy {
        assert!(seen["subscribe"]["ok"].is_object(), "{}", seen["subscribe"]);
        assert_eq!(seen["updated_seen"], true, "updates relayed: {seen}");
        assert!(
            names(seen, "updated_uris").contains(&text_uri),
            "the update names the exposed URI: {}",
            seen["updated_uris"]
        );
    }
    // A protected host path as a resource URI meets the hardline rules (SPEC §19.6).
    let (code, message, data) = seen_error(seen, "shadow");
    assert_eq!(code, -32001, "{message}");
    assert!(
        message.starts_with("airlock denied this read (policy.hardline.host_path)"),
        "{message}"
    );
    assert_eq!(data["reason_code"], "policy.hardline.host_path");
}

#[test]
fn resources_prompts_completion_and_logging_pass_through_the_read_gate() {
    let Some(peers) = peers("resources_prompts_completion_and_logging_pass_through_the_read_gate")
    else {
        return;
    };
    let scene = scene_with(
        &peers,
        "[servers.everything.tools.toggle-subscriber-updates]\nside_effect = \"none\"\nidempotency = \"read_only\"\nrisk = \"low\"\n",
    );
    let seen = scene.client(&peers, "resources", "legacy", "everything+");
    assert_everything_passes_through(&seen, "everything+", "everything__", true);
    let (code, message, _) = seen_error(&seen, "unknown_server");
    assert_eq!(code, -32002, "{message}");
    // The test server's reads need mcp.test.read, which the file does not grant.
    let (code, message, data) = seen_error(&seen, "scope_refused");
    assert_eq!(code, -32001, "{message}");
    assert_eq!(data["reason_code"], "policy.scope.missing", "{message}");
    // Reads are not journalled: the only invocations are the two tool calls.
    let conn = db(&scene.data);
    let tools: Vec<String> = conn
        .prepare("SELECT tool_name FROM tool_invocations ORDER BY step_number")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        tools,
        [
            "mcp.everything.toggle_subscriber_updates",
            "mcp.everything.toggle_subscriber_updates"
        ]
    );
}

/// The same through a 2026-07-28 client (no handshake; `resultType` on every answer, which a
/// 2025-11-25 upstream does not send and the gateway adds).
#[test]
fn resources_and_prompts_reach_a_2026_07_28_client() {
    let Some(peers) = peers("resources_and_prompts_reach_a_2026_07_28_client") else {
        return;
    };
    let scene = scene_with(
        &peers,
        "[servers.everything.tools.toggle-subscriber-updates]\nside_effect = \"none\"\nidempotency = \"read_only\"\nrisk = \"low\"\n",
    );
    let seen = scene.client(&peers, "resources", "modern", "everything+");
    assert_eq!(seen["protocol_version"], "2026-07-28");
    assert_everything_passes_through(&seen, "everything+", "everything__", false);
    assert_eq!(seen["toggle"]["is_error"], false, "{}", seen["toggle"]);
    let (code, message, data) = seen_error(&seen, "scope_refused");
    assert_eq!(code, -32001, "{message}");
    assert_eq!(data["reason_code"], "policy.scope.missing", "{message}");
}

#[test]
fn an_untrusted_resource_read_taints_the_run_so_a_later_write_needs_approval() {
    let Some(peers) =
        peers("an_untrusted_resource_read_taints_the_run_so_a_later_write_needs_approval")
    else {
        return;
    };
    let mut scene = scene_with(&peers, "");
    scene.allow_external_writes();
    // Without a read, the user's write runs at once.
    let control = scene.client(&peers, "resource_taint", "legacy", "");
    assert!(control["after"]["approval"].is_null(), "{control}");
    assert_eq!(control["after"]["result"]["is_error"], false, "{control}");
    // After an untrusted resource read on the connection, the same write waits for a human.
    let seen = scene.client(
        &peers,
        "resource_taint",
        "legacy",
        "everything+demo://resource/dynamic/text/1",
    );
    assert!(
        seen["read"]["ok"]["contents"].is_array(),
        "{}",
        seen["read"]
    );
    let after = &seen["after"];
    assert!(
        after["approval"].is_string(),
        "after an untrusted resource read the write waits: {after}"
    );
    assert_eq!(after["result"]["is_error"], false);
    assert_eq!(scene.ledger(), ["after", "after"]);
}

/// A file with server-everything alone, unprefixed (SPEC §19.6).
fn unprefixed_scene(peers: &Peers, servers: &str) -> Scene {
    let data = DataDir::new();
    let config = data.path().join("gateway.toml");
    let text = format!(
        r#"schema_version = 1
tenant_id = "acme"
principal_id = "alice"
scopes = ["mcp.everything.call", "mcp.everything.read"]

[servers.everything]
command = "node"
args = ["{everything}"]
expose_unprefixed = true
default = {{ side_effect = "none", idempotency = "read_only", risk = "low" }}
{servers}"#,
        everything = peers.everything.display(),
    );
    std::fs::write(&config, text).unwrap();
    Scene {
        sandbox: data.path().to_owned(),
        ledger: data.path().join("ledger.txt"),
        data,
        config,
        policy_dir: None,
    }
}

#[test]
fn one_upstream_is_exposed_unprefixed_and_two_refuse_the_key() {
    let Some(peers) = peers("one_upstream_is_exposed_unprefixed_and_two_refuse_the_key") else {
        return;
    };
    let scene = unprefixed_scene(&peers, "");
    let seen = scene.client(&peers, "resources", "legacy", "");
    let tools = names(&seen, "tools");
    assert!(tools.contains(&"echo"), "{tools:?}");
    assert!(!tools.iter().any(|t| t.contains("__")), "{tools:?}");
    assert_everything_passes_through(&seen, "", "", true);
    // Internal names are unchanged: the table still says mcp.everything.echo.
    let table = scene.mcp_tools();
    let echo = table["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["upstream_name"] == "echo")
        .expect("echo");
    assert_eq!(echo["exposed_name"], "echo");
    assert_eq!(echo["internal_name"], "mcp.everything.echo");

    let two = unprefixed_scene(&peers, "\n[servers.other]\ncommand = \"true\"\n");
    let output = two
        .data
        .command("operator", &["mcp", "tools", "--config"])
        .arg(&two.config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(4));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("servers.everything.expose_unprefixed"),
        "{stderr}"
    );
}

/// An upstream's resource and prompt list changes reach the client as notifications, outside
/// any call (SPEC §19.6).
#[test]
fn resource_and_prompt_list_changes_of_an_upstream_reach_the_client() {
    let Some(peers) = peers("resource_and_prompt_list_changes_of_an_upstream_reach_the_client")
    else {
        return;
    };
    let scene = scene_with(&peers, "");
    let seen = scene.client(&peers, "list_notices", "legacy", "");
    assert_eq!(text(&seen["announce"]), "announced", "{seen}");
    assert_eq!(seen["resources_seen"], true, "{seen}");
    assert_eq!(seen["prompts_seen"], true, "{seen}");
}

/// Issue 27: `airlock mcp init` drafts a gateway file from server-filesystem's own annotations
/// that loads unchanged: its read-only tools are classed none/read_only/low under the read
/// scope, every pin matches (every tool is listed), the header says to review every class, and
/// `mcp tools` shows each tool's annotations. An existing --out file is never overwritten.
#[test]
fn mcp_init_drafts_a_file_that_loads_unchanged_with_matching_pins() {
    let Some(peers) = peers("mcp_init_drafts_a_file_that_loads_unchanged") else {
        return;
    };
    let data = DataDir::new();
    let sandbox = data.path().join("sandbox");
    std::fs::create_dir_all(&sandbox).unwrap();
    let file = data.path().join("drafted.toml");
    let output = data
        .command("alice", &["mcp", "init", "--server", "files", "--out"])
        .arg(&file)
        .arg("--")
        .arg("node")
        .arg(&peers.filesystem)
        .arg(&sandbox)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("REVIEW EVERY CLASS"), "{text}");
    let tools = data
        .command("operator", &["mcp", "tools", "--config"])
        .arg(&file)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(tools.status.code(), Some(0));
    let table: Value = serde_json::from_slice(&tools.stdout).unwrap();
    let rows = table["tools"].as_array().unwrap();
    assert_eq!(rows.len(), 14, "{table}");
    let mut read_only = 0;
    for row in rows {
        assert_eq!(row["listed"], true, "every pin matches: {row}");
        let annotated_read_only = row["annotations"]["readOnlyHint"] == true;
        if annotated_read_only {
            read_only += 1;
            assert_eq!(row["class"]["side_effect"], "none", "{row}");
            assert_eq!(row["class"]["idempotency"], "read_only", "{row}");
            assert_eq!(row["class"]["risk"], "low", "{row}");
            assert_eq!(row["class"]["scope"], "mcp.files.read", "{row}");
        } else {
            assert_ne!(row["class"]["side_effect"], "none", "{row}");
            assert_eq!(row["class"]["scope"], "mcp.files.write", "{row}");
        }
    }
    assert_eq!(
        read_only, 10,
        "server-filesystem 2026.8.31 marks 10 of its 14 tools read-only"
    );
    // `mcp serve` loads it too and lists the same 14 tools to a client.
    let listed = list_over_stdio(&data, &file);
    assert_eq!(listed.len(), 14, "{listed:?}");
    assert!(
        listed.iter().any(|n| n == "files__read_text_file"),
        "{listed:?}"
    );
    let again = data
        .command("operator", &["mcp", "init", "--server", "files", "--out"])
        .arg(&file)
        .args(["--", "node"])
        .arg(&peers.filesystem)
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(2),
        "an existing file is never overwritten"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
}

/// `mcp serve --config FILE` over stdio: initialize, then `tools/list`; the tool names.
fn list_over_stdio(data: &DataDir, config: &Path) -> Vec<String> {
    use std::io::{BufRead, BufReader, Write};
    let mut child = data
        .command("alice", &["mcp", "serve", "--config"])
        .arg(config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut answer = |request: &str, id: i64| -> Value {
        writeln!(stdin, "{request}").unwrap();
        stdin.flush().unwrap();
        loop {
            let line = lines.next().expect("an answer").expect("a line");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    };
    answer(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        1,
    );
    // A notification gets no answer; the id-less line is written by the same writer.
    let listed = answer(
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n\
         {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}",
        2,
    );
    let _ = child.kill();
    let _ = child.wait();
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}
