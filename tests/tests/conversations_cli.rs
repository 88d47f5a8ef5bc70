//! `airlock conversations list|show|clear-taint` (SPEC §22.1) as a person runs them: the real
//! binary, in its own process, on a real SQLite store, with Appendix A's exit codes (0 done,
//! 1 a refusal, 2 invalid input, 4 no store).
//!
//! A conversation exists only while an MCP client talks to `airlock mcp serve`, and is open
//! only while it does, so the first test writes conversations into the store with core's own
//! gateway transactions (OPEN, ADMIT with its call run, TAINT: what the gateway commits) and
//! needs no peers. The second drives the real gateway with the project's Python test client and
//! server when they are installed, and checks what the CLI shows of the conversation it leaves.

use std::path::Path;
use std::process::Output;

use airlock_core::connection::{self, CallAdmission, CloseReason, Connection, ConnectionState};
use airlock_core::ids::{ConnectionId, RunId, SessionId};
use airlock_core::run::RunState;
use airlock_core::session::Session;
use airlock_core::store::Store;
use airlock_core::testing::fixtures::{commit, sample_invocation, sample_run};
use airlock_core::time::Timestamp;
use airlock_core::vocab::{InvocationStatus, RunStatus};
use airlock_e2e::mcp::{Need, policy_allowing_external_writes};
use airlock_e2e::*;
use airlock_sqlite::SqliteStore;
use serde_json::Value;

/// A conversation as a gateway writes one: opened at `at`, then a call each second.
struct Seed<'a> {
    n: u128,
    tenant: &'a str,
    principal: &'a str,
    calls: u32,
    taint: bool,
    close: bool,
}

/// What a seeded conversation is called, and the run its taint names.
struct Seeded {
    id: ConnectionId,
    tainted_by: Option<String>,
}

fn seed(store: &SqliteStore, at: Timestamp, s: &Seed<'_>) -> Seeded {
    let base = 0xc11_0000 + s.n * 1000;
    let session: SessionId = id_of(base);
    let conversation = Connection {
        id: id_of(base + 1),
        tenant_id: s.tenant.to_owned(),
        principal_id: s.principal.to_owned(),
        session_id: session,
        gateway_id: "gw-e2e".to_owned(),
        state: ConnectionState::Open {
            // Far ahead: no sweep of a CLI process closes it while the test runs.
            alive_until: at.saturating_add_seconds(30 * 86_400),
        },
        opened_at: at,
        taint: None,
        call_count: 0,
        last_seen_at: at,
        conversation_key: None,
    };
    commit(store, "open", |tx| {
        tx.insert_session(&Session {
            id: session,
            tenant_id: s.tenant.to_owned(),
            principal_id: s.principal.to_owned(),
            next_event_sequence: 1,
            created_at: at,
        })?;
        connection::open_in_tx(tx, &conversation, at)
    });
    let mut last_run: Option<RunId> = None;
    for k in 0..s.calls {
        let now = at.saturating_add_seconds(i64::from(k) + 1);
        let mut run = sample_run(base + 10 + u128::from(k), session, RunStatus::Completed);
        run.tenant_id = s.tenant.to_owned();
        run.principal_id = s.principal.to_owned();
        run.planner_kind = connection::live::MCP_PLANNER_KIND.to_owned();
        run.state = RunState::Completed {
            final_message: "answered".to_owned(),
        };
        run.created_at = now;
        run.updated_at = now;
        let mut call = sample_invocation(
            base + 10 + u128::from(k),
            &run,
            1,
            "call-1",
            InvocationStatus::Succeeded,
        );
        call.tool_name = "test__note".to_owned();
        call.created_at = now;
        call.updated_at = now;
        commit(store, "a call", |tx| {
            let admitted = connection::admit_call_in_tx(tx, conversation.id, None, None, now)?;
            assert!(
                matches!(admitted, CallAdmission::Admitted { .. }),
                "{admitted:?}"
            );
            tx.insert_run(&run)?;
            tx.insert_invocation(&call)
        });
        last_run = Some(run.id);
    }
    let end = at.saturating_add_seconds(i64::from(s.calls) + 1);
    let tainted_by = s.taint.then(|| {
        let by = format!(
            "test__note (call call-1 of run {})",
            last_run.map(|r| r.to_string()).unwrap_or_default()
        );
        commit(store, "taint", |tx| {
            connection::taint_in_tx(tx, session, last_run, &by, end)
        });
        by
    });
    if s.close {
        commit(store, "close", |tx| {
            connection::close_in_tx(tx, conversation.id, CloseReason::Disconnected, end).map(drop)
        });
    }
    Seeded {
        id: conversation.id,
        tainted_by,
    }
}

/// Id `n` in the only spelling SPEC §2.2 allows (the e2e crate does not depend on `uuid`).
fn id_of<T: std::str::FromStr>(n: u128) -> T
where
    T::Err: std::fmt::Debug,
{
    format!("{n:08x}-0000-4000-8000-{n:012x}")
        .parse()
        .expect("a well-formed id")
}

/// A command's exit code and its stdout as JSON (the error object for a refusal).
fn run_json(data: &DataDir, principal: &str, args: &[&str]) -> (Option<i32>, Value) {
    let output = data.run(principal, args);
    (output.status.code(), stdout_json(&output, args))
}

fn stdout_json(output: &Output, args: &[&str]) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "airlock {args:?} printed no JSON ({e}): stdout {} stderr {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The row of `--output table` that starts with `short` (an id's first 8 characters).
fn table_row<'t>(table: &'t str, short: &str) -> &'t str {
    table
        .lines()
        .find(|l| l.starts_with(short))
        .unwrap_or_else(|| panic!("no row {short} in:\n{table}"))
}

/// `airlock serve --no-worker` on a free loopback port of `data`'s store, with a token of
/// tenant acme: the HTTP API reads what the CLI reads. Stopped when dropped.
struct Served {
    child: std::process::Child,
    addr: String,
    token: String,
}

impl Served {
    fn start(data: &DataDir) -> Served {
        use std::io::{BufRead, BufReader};
        let minted = data.json("bob", &["tokens", "create", "--label", "conversations-e2e"]);
        let token = minted["token"].as_str().expect("the token").to_owned();
        let mut child = data
            .command(
                "operator",
                &["serve", "--no-worker", "--listen", "127.0.0.1:0"],
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("serve starts");
        let mut first = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut first)
            .expect("the listening line");
        let listening: Value = serde_json::from_str(&first).expect("a JSON line");
        let addr = listening["listening"].as_str().expect("address").to_owned();
        Served { child, addr, token }
    }

    /// `GET path` with the bearer token: the status and the JSON body.
    fn get(&self, path: &str) -> (u16, Value) {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&self.addr).expect("connect");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .expect("timeout");
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            self.addr, self.token
        )
        .expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        let (head, body) = response.split_once("\r\n\r\n").expect("a response");
        assert!(
            !head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked"),
            "{head}"
        );
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status");
        let json = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
        (status, json)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The record of a `GET /v1/conversations/{id}` answer without its calls: what the CLI prints.
fn without_calls(detail: &Value) -> Value {
    let mut record = detail.clone();
    if let Some(object) = record.as_object_mut() {
        object.remove("calls");
        object.remove("calls_truncated");
    }
    record
}

fn store_path(data: &DataDir) -> std::path::PathBuf {
    data.path().join("airlock.sqlite3")
}

#[test]
fn conversations_are_listed_shown_and_their_taint_cleared_once_with_a_reason() {
    let data = DataDir::new();
    // Before anything wrote a store, there is nothing to list: exit 4 and no store created.
    let (code, error) = run_json(&data, "operator", &["conversations", "list"]);
    assert_eq!(code, Some(4), "{error}");
    assert_eq!(error["error"]["code"], "storage");
    assert!(!store_path(&data).exists());

    // Ten minutes ago: the ages the table shows are minutes, and every conversation is alive.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or_default();
    let t0 = Timestamp::from_micros(now).saturating_add_seconds(-600);
    let (tainted, quiet, closed, theirs) = {
        let store = SqliteStore::open(&store_path(&data)).expect("open the store");
        let seeded = (
            seed(
                &store,
                t0,
                &Seed {
                    n: 1,
                    tenant: "acme",
                    principal: "alice",
                    calls: 2,
                    taint: true,
                    close: false,
                },
            ),
            seed(
                &store,
                t0.saturating_add_seconds(60),
                &Seed {
                    n: 2,
                    tenant: "acme",
                    principal: "carol",
                    calls: 1,
                    taint: false,
                    close: false,
                },
            ),
            seed(
                &store,
                t0.saturating_add_seconds(120),
                &Seed {
                    n: 3,
                    tenant: "acme",
                    principal: "alice",
                    calls: 1,
                    taint: true,
                    close: true,
                },
            ),
            seed(
                &store,
                t0.saturating_add_seconds(180),
                &Seed {
                    n: 4,
                    tenant: "globex",
                    principal: "mallory",
                    calls: 1,
                    taint: true,
                    close: false,
                },
            ),
        );
        assert!(store.read(|tx| tx.last_event_id()).is_ok());
        seeded
    };

    // list: acme's three, newest first, in the record the HTTP API answers with.
    let listed = data.json("operator", &["conversations", "list"]);
    let items = listed["items"].as_array().expect("items");
    let ids: Vec<&str> = items.iter().filter_map(|i| i["id"].as_str()).collect();
    let expected = [closed.id, quiet.id, tainted.id].map(|id| id.to_string());
    assert_eq!(ids, expected, "acme's only, newest first: {listed}");
    let record = &items[2];
    assert_eq!(record["status"], "open");
    assert_eq!(record["principal_id"], "alice");
    assert_eq!(record["call_count"], 2);
    assert_eq!(record["gateway_id"], "gw-e2e");
    assert_eq!(
        record["tainted_by"].as_str(),
        tainted.tainted_by.as_deref(),
        "{record}"
    );
    assert!(record["tainted_at"].is_string());
    assert!(record["alive_until"].is_string());
    assert_eq!(items[1]["tainted_at"], Value::Null);
    assert_eq!(items[0]["status"], "closed");
    assert_eq!(items[0]["close_reason"], "disconnected");
    let one = data.json("operator", &["conversations", "list", "--limit", "1"]);
    assert_eq!(one["items"].as_array().map(Vec::len), Some(1));
    for bad in ["0", "101", "x"] {
        let output = data.run("operator", &["conversations", "list", "--limit", bad]);
        assert_eq!(output.status.code(), Some(2), "--limit {bad}");
    }

    // list --output table: a person's view of the same rows.
    let output = data.run("operator", &["conversations", "list", "--output", "table"]);
    assert_eq!(output.status.code(), Some(0));
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    let header = table.lines().next().unwrap_or_default();
    for column in ["ID", "STATUS", "PRINCIPAL", "CALLS", "TAINTED", "AGE"] {
        assert!(header.contains(column), "{table}");
    }
    let short = |id: &ConnectionId| id.to_string()[..8].to_owned();
    let row = table_row(&table, &short(&tainted.id));
    assert!(
        row.contains("open") && row.contains("alice") && !row.contains(" no "),
        "{table}"
    );
    let row = table_row(&table, &short(&quiet.id));
    assert!(
        row.contains("carol") && row.trim_end().contains(" no "),
        "{table}"
    );
    assert!(table_row(&table, &short(&closed.id)).contains("closed"));
    assert!(!table.contains(&short(&theirs.id)), "another tenant's");

    // show: the list's record; another tenant's, or none, is not found (exit 1).
    let shown = data.json(
        "operator",
        &["conversations", "show", &tainted.id.to_string()],
    );
    assert_eq!(&shown, record);
    for id in [
        theirs.id.to_string(),
        "0190a6f1-2b3c-7d4e-8f90-123456789abc".to_owned(),
    ] {
        let (code, error) = run_json(&data, "operator", &["conversations", "show", &id]);
        assert_eq!(code, Some(1), "{error}");
        assert_eq!(error["error"]["code"], "not_found");
    }
    let output = data.run("operator", &["conversations", "show", "not-an-id"]);
    assert_eq!(output.status.code(), Some(2));

    // The HTTP API on the same store answers the same records, and the calls of the
    // conversation's session (SQLite's `runs_of_tenant`, not just the in-memory store's).
    let served = Served::start(&data);
    let (status, page) = served.get("/v1/conversations");
    assert_eq!(status, 200, "{page}");
    assert_eq!(page, listed, "the API's list is the CLI's");
    let (status, detail) = served.get(&format!("/v1/conversations/{}", tainted.id));
    assert_eq!(status, 200, "{detail}");
    assert_eq!(without_calls(&detail), shown);
    let calls = detail["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 2, "{detail}");
    assert!(calls.iter().all(|c| c["tool_name"] == "test__note"));
    assert_eq!(detail["calls_truncated"], false);
    let (status, _) = served.get(&format!("/v1/conversations/{}", theirs.id));
    assert_eq!(status, 404, "another tenant's");
    drop(served);

    // clear-taint: refused without approval.resolve (1), without a reason (2), for one not
    // tainted or closed (1, conflict), for another tenant's (1, not found).
    let id = tainted.id.to_string();
    let output = data
        .command(
            "operator",
            &["conversations", "clear-taint", &id, "--reason", "mine"],
        )
        .args(["--scopes", "run.read,approval.read"])
        .output()
        .expect("airlock runs");
    assert_eq!(output.status.code(), Some(1));
    let error = stdout_json(&output, &["clear-taint --scopes"]);
    assert_eq!(error["error"]["code"], "forbidden");
    let output = data.run("operator", &["conversations", "clear-taint", &id]);
    assert_eq!(output.status.code(), Some(2), "--reason is required");
    let (code, error) = run_json(
        &data,
        "operator",
        &["conversations", "clear-taint", &id, "--reason", "  "],
    );
    assert_eq!(code, Some(2), "{error}");
    assert_eq!(error["error"]["code"], "invalid_argument");
    for (other, code_name) in [
        (quiet.id.to_string(), "conflict"),
        (closed.id.to_string(), "conflict"),
        (theirs.id.to_string(), "not_found"),
    ] {
        let (code, error) = run_json(
            &data,
            "operator",
            &["conversations", "clear-taint", &other, "--reason", "x"],
        );
        assert_eq!(code, Some(1), "{other}: {error}");
        assert_eq!(error["error"]["code"], code_name, "{other}: {error}");
    }
    let still = data.json("operator", &["conversations", "show", &id]);
    assert!(still["tainted_at"].is_string(), "nothing was cleared yet");
    assert_eq!(
        data.count("SELECT COUNT(*) FROM events WHERE event_type = 'conversation.taint_cleared'"),
        0
    );

    // Cleared once, by operator, with the reason, as the event records it.
    let cleared = data.json(
        "operator",
        &[
            "conversations",
            "clear-taint",
            &id,
            "--reason",
            "the note is our own",
        ],
    );
    assert_eq!(cleared["id"], id);
    assert_eq!(cleared["tainted_at"], Value::Null);
    assert_eq!(cleared["tainted_by"], Value::Null);
    assert_eq!(cleared["status"], "open");
    let shown = data.json("operator", &["conversations", "show", &id]);
    assert_eq!(shown, cleared);
    let (actor, payload): (String, String) = db(&data)
        .query_row(
            "SELECT actor_id, payload FROM events WHERE event_type = 'conversation.taint_cleared'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("the clear is recorded");
    assert_eq!(actor, "operator");
    let payload: Value = serde_json::from_str(&payload).expect("payload JSON");
    assert_eq!(payload["reason"], "the note is our own");
    assert_eq!(payload["conversation_id"], id);
    assert_eq!(
        payload["tainted_by"].as_str(),
        tainted.tainted_by.as_deref()
    );
    // Again: no longer tainted, a refusal, and still one record.
    let (code, error) = run_json(
        &data,
        "operator",
        &["conversations", "clear-taint", &id, "--reason", "again"],
    );
    assert_eq!(code, Some(1), "{error}");
    assert_eq!(error["error"]["code"], "conflict");
    assert_eq!(
        data.count("SELECT COUNT(*) FROM events WHERE event_type = 'conversation.taint_cleared'"),
        1
    );
}

/// A gateway file with only the project's test server, whose results are untrusted.
fn gateway_file(dir: &Path, python: &Path) -> std::path::PathBuf {
    let ledger = dir.join("ledger.txt");
    let config = dir.join("gateway.toml");
    let text = format!(
        "schema_version = 1\ntenant_id = \"acme\"\nprincipal_id = \"alice\"\n\
         scopes = [\"mcp.test.call\"]\norigin_trust = \"user\"\n\n{}",
        airlock_e2e::mcp::test_server_tables(python, &ledger)
    );
    std::fs::write(&config, text).expect("write the gateway file");
    config
}

/// The real thing: the Python SDK client talks to `airlock mcp serve` (the test server's
/// results are untrusted, so its first result taints the conversation; the last write waits
/// for the approval the client gives with the CLI), then disconnects. The CLI lists the
/// conversation it leaves closed, tainted, with its three calls, and refuses to clear a closed
/// conversation's taint: it is the record of what happened.
#[test]
fn a_real_gateway_conversation_is_listed_tainted_and_a_closed_ones_taint_stays() {
    let test = "conversations_cli::a_real_gateway_conversation_is_listed_tainted_and_a_closed_ones_taint_stays";
    let Some(peers) = airlock_e2e::mcp::peers(test, Need::Sdk) else {
        return;
    };
    let data = DataDir::new();
    let config = gateway_file(data.path(), &peers.python);
    let policies = policy_allowing_external_writes(data.path());
    let output = std::process::Command::new(&peers.python)
        .arg(&peers.client)
        .arg("taint")
        .arg("--airlock")
        .arg(airlock_bin())
        .arg("--data")
        .arg(data.path())
        .arg("--config")
        .arg(&config)
        .arg("--policy-dir")
        .arg(&policies)
        .args(["--mode", "legacy", "--lease-ms", "2000"])
        .arg("--ledger")
        .arg(data.path().join("ledger.txt"))
        .env_remove("AIRLOCK_CRASH_AT")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the python client");
    let seen: Value = String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "no observations (exit {:?}): {}",
                output.status.code(),
                String::from_utf8_lossy(&output.stderr)
            )
        });
    assert!(
        seen["after"]["approval"].is_string(),
        "the write after an untrusted result waited for approval: {seen}"
    );

    let listed = data.json("operator", &["conversations", "list"]);
    let items = listed["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{listed}");
    let conversation = &items[0];
    assert_eq!(conversation["principal_id"], "alice");
    assert_eq!(conversation["status"], "closed", "the client went");
    assert_eq!(conversation["close_reason"], "disconnected");
    assert_eq!(conversation["call_count"], 3, "{conversation}");
    assert!(conversation["tainted_at"].is_string(), "{conversation}");
    assert!(
        conversation["tainted_by"]
            .as_str()
            .is_some_and(|by| by.contains("test") && by.contains(" of run ")),
        "what tainted it names the tool's call and run: {conversation}"
    );
    let id = conversation["id"].as_str().expect("id");
    assert_eq!(
        &data.json("operator", &["conversations", "show", id]),
        conversation
    );
    let output = data.run("operator", &["conversations", "list", "--output", "table"]);
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(table_row(&table, &id[..8]).contains("closed"), "{table}");

    // Its calls as the API lists them: the gateway's three call runs (SPEC §22.2), newest
    // first: the write that waited, the read, the write before; the last two were proposed
    // after the first result tainted the conversation.
    let served = Served::start(&data);
    let (status, detail) = served.get(&format!("/v1/conversations/{id}"));
    assert_eq!(status, 200, "{detail}");
    assert_eq!(&without_calls(&detail), conversation);
    let calls = detail["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 3, "{detail}");
    let runs: std::collections::BTreeSet<&str> =
        calls.iter().filter_map(|c| c["run_id"].as_str()).collect();
    assert_eq!(runs.len(), 3, "one run per call: {detail}");
    let trust: Vec<&str> = calls
        .iter()
        .map(|c| c["origin_trust"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        trust,
        ["external_untrusted", "external_untrusted", "user"],
        "{detail}"
    );
    assert_eq!(
        calls[0]["approval_id"], seen["after"]["approval"],
        "{detail}"
    );
    assert_eq!(calls[0]["approval_status"], "approved", "{detail}");
    assert_eq!(calls[1]["approval_id"], Value::Null, "the read needed none");
    assert!(calls.iter().all(|c| c["status"] == "SUCCEEDED"), "{detail}");
    drop(served);

    let (code, error) = run_json(
        &data,
        "operator",
        &["conversations", "clear-taint", id, "--reason", "too late"],
    );
    assert_eq!(code, Some(1), "{error}");
    assert_eq!(error["error"]["code"], "conflict");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("closed")),
        "{error}"
    );
    let still = data.json("operator", &["conversations", "show", id]);
    assert_eq!(still["tainted_at"], conversation["tainted_at"]);
}
