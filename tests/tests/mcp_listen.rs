//! `airlock mcp serve --listen` (SPEC §19.1, §19.6): MCP over Streamable HTTP to the real binary,
//! with the Python `mcp` SDK as the client (`tests/mcp/http_client.py`) and the project's own
//! test server (`tests/mcp/airlock_test_server.py`) upstream; the guard's refusals with raw
//! HTTP requests.
//!
//! The SDK is installed by `.ci/mcp.sh` into `.ci/.venv`; without it every scenario here is
//! skipped with a line on stderr; under `CI=true` a missing SDK fails the test instead.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use airlock_e2e::mcp::{Need, repo};
use airlock_e2e::*;
use serde_json::{Value, json};

/// CI's virtual environment's Python with the `mcp` SDK, or `None` (skip; a failure in CI).
fn python(test: &str) -> Option<PathBuf> {
    airlock_e2e::mcp::peers(&format!("mcp_listen::{test}"), Need::Sdk).map(|peers| peers.python)
}

/// A data dir with a gateway file in front of the project's test server only.
/// `state` with its last character changed (still hex): a tampered `requestState`.
fn changed_state(state: &str) -> String {
    let mut changed = state.to_owned().into_bytes();
    if let Some(last) = changed.last_mut() {
        *last = if *last == b'0' { b'1' } else { b'0' };
    }
    String::from_utf8(changed).unwrap_or_default()
}

struct Scene {
    data: DataDir,
    config: PathBuf,
    ledger: PathBuf,
    python: PathBuf,
}

impl Scene {
    fn new(python: PathBuf) -> Scene {
        Scene::with(python, &["mcp.test.call"], "")
    }

    /// A scene whose file holds `scopes`, with `extra` TOML appended to the server tables.
    fn with(python: PathBuf, scopes: &[&str], extra: &str) -> Scene {
        Scene::over(DataDir::new(), python, scopes, extra)
    }

    /// A scene of test `test` whose store is a fresh schema on the PostgreSQL of
    /// `AIRLOCK_TEST_PG_URL`; `None` (skipped, a failure in CI) without it or the SDK.
    fn on_postgres(test: &str) -> Option<Scene> {
        let python = python(test)?;
        let server = airlock_e2e::pg::server(&format!("mcp_listen::{test}"))?;
        Some(Scene::over(
            DataDir::on_postgres(&server),
            python,
            &["mcp.test.call"],
            "",
        ))
    }

    fn over(data: DataDir, python: PathBuf, scopes: &[&str], extra: &str) -> Scene {
        let ledger = data.path().join("ledger.txt");
        let config = data.path().join("gateway.toml");
        std::fs::write(
            &config,
            format!(
                r#"schema_version = 1
tenant_id = "acme"
principal_id = "alice"
scopes = {scopes:?}
origin_trust = "user"

{test_tables}{extra}"#,
                test_tables = airlock_e2e::mcp::test_server_tables(&python, &ledger),
            ),
        )
        .unwrap();
        Scene {
            data,
            config,
            ledger,
            python,
        }
    }

    /// `airlock mcp serve --config FILE` with `flags`, to its end (for refusals at start).
    fn serve_output(&self, flags: &[&str]) -> Output {
        let mut command = self.data.command("operator", &["mcp", "serve", "--config"]);
        command.arg(&self.config).args(flags);
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_within(&mut child, Duration::from_secs(30), "mcp serve")
    }

    /// A listening gateway: the child and its URL (read from the line on stderr), and the
    /// stderr lines before it.
    fn listen(&self, flags: &[&str]) -> Gateway {
        self.listen_with_env(flags, &[])
    }

    /// [`Scene::listen`] with `env` set for the gateway.
    #[allow(
        clippy::zombie_processes,
        reason = "the child moves into the Gateway, whose Drop kills and waits for it"
    )]
    fn listen_with_env(&self, flags: &[&str], env: &[(&str, &str)]) -> Gateway {
        let mut command = self.data.command("operator", &["mcp", "serve", "--config"]);
        command
            .arg(&self.config)
            .args(["--lease-ms", "2000", "--listen", "127.0.0.1:0"])
            .args(flags)
            .envs(env.iter().copied());
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut before = Vec::new();
        loop {
            let mut line = String::new();
            let read = stderr.read_line(&mut line).unwrap_or(0);
            if read == 0 {
                let _ = child.kill();
                let _ = child.wait();
                panic!("mcp serve ended before listening: {before:?}");
            }
            if let Some(url) = line.trim().strip_prefix("airlock mcp serve: listening on ") {
                // Keep draining stderr so the gateway never blocks on a full pipe.
                std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
                let url = url.to_owned();
                let authority = url
                    .trim_start_matches("http://")
                    .trim_end_matches("/mcp")
                    .to_owned();
                return Gateway {
                    child,
                    url,
                    authority,
                    before,
                };
            }
            before.push(line);
        }
    }

    /// `airlock tokens create` for `tenant`/`principal`: the token text.
    fn token(&self, tenant: &str, principal: &str) -> String {
        self.token_with(tenant, principal, "mcp.test.call")
    }

    /// `tokens create`'s whole record (its `id` and `token`), with `scopes` (comma-separated).
    fn token_record(&self, tenant: &str, principal: &str, scopes: &str) -> Value {
        self.data.json(
            "operator",
            &[
                "tokens",
                "create",
                "--tenant",
                tenant,
                "--principal",
                principal,
                "--scopes",
                scopes,
            ],
        )
    }

    /// The same with `scopes` (comma-separated).
    fn token_with(&self, tenant: &str, principal: &str, scopes: &str) -> String {
        self.token_record(tenant, principal, scopes)["token"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Runs `http_client.py SCENARIO` against `gateway`; its JSON observations.
    fn client(&self, gateway: &Gateway, scenario: &str, token: Option<&str>) -> Value {
        self.client_at(&gateway.url, scenario, token)
    }

    /// [`Scene::client`] at `url` (several gateways' URLs, comma-separated, for a scenario that
    /// takes them).
    fn client_at(&self, url: &str, scenario: &str, token: Option<&str>) -> Value {
        self.client_at_with(url, scenario, token, &[])
    }

    /// [`Scene::client_at`] with `extra` arguments for the scenario.
    fn client_at_with(
        &self,
        url: &str,
        scenario: &str,
        token: Option<&str>,
        extra: &[&str],
    ) -> Value {
        let mut command = Command::new(&self.python);
        command
            .arg(repo().join("tests/mcp/http_client.py"))
            .arg(scenario)
            .args(["--url", url])
            .arg("--airlock")
            .arg(airlock_bin())
            .arg("--data")
            .arg(self.data.path())
            .args(
                self.data
                    .store_url()
                    .map(|url| ["--store", url])
                    .iter()
                    .flatten(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(token) = token {
            command.args(["--token", token]);
        }
        command.args(extra);
        let mut child = command.spawn().unwrap();
        let output = wait_within(&mut child, Duration::from_secs(120), scenario);
        assert!(
            output.status.success(),
            "http_client.py {scenario} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "http_client.py {scenario} printed no JSON ({e}): {}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
    }

    /// Every test-server process the gateway started has ended (the server writes its pid
    /// beside the ledger): a stopped gateway leaves no upstream behind. A zombie counts as
    /// ended: its parent is gone, and reaping is init's.
    fn assert_upstreams_ended(&self) {
        for pid in airlock_e2e::mcp::test_server_pids(&self.ledger) {
            if let Err(why) = airlock_e2e::mcp::wait_until_ended(&pid, Duration::from_secs(10)) {
                panic!("an upstream test server outlived the gateway: {why}");
            }
        }
    }

    /// The principals of the runs, oldest first.
    fn run_principals(&self) -> Vec<String> {
        let conn = db(&self.data);
        let mut statement = conn
            .prepare("SELECT principal_id FROM runs ORDER BY created_at")
            .unwrap();
        statement
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }
}

struct Gateway {
    child: Child,
    url: String,
    /// `127.0.0.1:PORT`.
    authority: String,
    /// stderr lines printed before the listening line (warnings).
    before: Vec<String>,
}

impl Gateway {
    /// The URLs of `gateways`, comma-separated (for a scenario that alternates between them).
    fn urls(gateways: &[&Gateway]) -> String {
        gateways
            .iter()
            .map(|g| g.url.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// One raw HTTP/1.1 `initialize` POST with `headers` (the Host header is the caller's):
    /// the status code and the body.
    fn raw_initialize(&self, headers: &[(&str, &str)]) -> (u16, String) {
        let answer = self.raw("POST", headers, INITIALIZE);
        (answer.status, answer.body)
    }

    /// One raw HTTP/1.1 request to `/mcp` with `headers` (this listener's Host unless they name
    /// one), read to the end of its answer (`connection: close`; an SSE answer ends with its
    /// request's response).
    /// Opens a 2025-11-25 session with `bearer` (`initialize`, then `initialized`) and returns
    /// its `Mcp-Session-Id`.
    fn open_session(&self, bearer: &str) -> String {
        let opened = self.raw("POST", &[("authorization", bearer)], INITIALIZE);
        assert_eq!(opened.status, 200, "{}", opened.body);
        let session = opened
            .header("mcp-session-id")
            .expect("a session id")
            .to_owned();
        let headers = [
            ("authorization", bearer),
            ("mcp-session-id", session.as_str()),
        ];
        assert_eq!(self.raw("POST", &headers, INITIALIZED).status, 202);
        session
    }

    fn raw(&self, method: &str, headers: &[(&str, &str)], body: &str) -> RawAnswer {
        let mut request = format!("{method} /mcp HTTP/1.1\r\n");
        if !headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("host"))
        {
            request.push_str(&format!("host: {}\r\n", self.authority));
        }
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str(&format!(
            "content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ));
        let mut stream = TcpStream::connect(&self.authority).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        RawAnswer::parse(&String::from_utf8_lossy(&answer))
    }

    /// One sessionless 2026-07-28 request (SPEC §23) of a client declaring the tasks
    /// extension, with `token` if any: `method` with `params` (given `_meta` here), its
    /// `Mcp-Name` header `name`; the JSON-RPC answer, from a JSON body or the SSE stream's
    /// last message.
    fn modern(&self, token: Option<&str>, method: (&str, &str), params: Value) -> Value {
        self.modern_as(
            token,
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
            method,
            params,
        )
    }

    /// A sessionless 2026-07-28 `tools/call` of `tool` with `arguments` (and `extra` params: a
    /// `requestState`, `inputResponses`) by a client declaring `capabilities`.
    fn modern_call(
        &self,
        token: Option<&str>,
        capabilities: &Value,
        (tool, arguments): (&str, Value),
        extra: Value,
    ) -> Value {
        let mut params = json!({"name": tool, "arguments": arguments});
        if let (Some(params), Value::Object(extra)) = (params.as_object_mut(), extra) {
            params.extend(extra);
        }
        self.modern_as(token, capabilities.clone(), ("tools/call", tool), params)
    }

    /// [`Gateway::modern`] for a client declaring `capabilities`.
    fn modern_as(
        &self,
        token: Option<&str>,
        capabilities: Value,
        (method, name): (&str, &str),
        mut params: Value,
    ) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        });
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", method),
            ("mcp-name", name),
        ];
        if let Some(bearer) = &bearer {
            headers.push(("authorization", bearer));
        }
        let answer = self.raw("POST", &headers, &body.to_string());
        let text = answer
            .body
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .rfind(|data| !data.trim().is_empty())
            .unwrap_or(&answer.body);
        serde_json::from_str(text).unwrap_or_else(|e| {
            panic!(
                "{method}: not a JSON-RPC answer ({e}): {} {}",
                answer.status, answer.body
            )
        })
    }

    /// SIGKILL: the process ends where it stands.
    fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `GET /mcp` (the session's event stream) with `headers`: its status, and a channel that
    /// receives once the server ends the stream.
    fn open_stream(&self, headers: &[(&str, &str)]) -> (u16, std::sync::mpsc::Receiver<()>) {
        let mut request = format!(
            "GET /mcp HTTP/1.1\r\nhost: {}\r\naccept: text/event-stream\r\nconnection: close\r\n",
            self.authority
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        let mut stream = TcpStream::connect(&self.authority).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut reader = BufReader::new(stream);
        let mut status_line = String::new();
        reader.read_line(&mut status_line).unwrap();
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let (ended, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = reader.read_to_end(&mut sink);
            let _ = ended.send(());
        });
        (status, receiver)
    }

    /// SIGTERM, then the exit code.
    fn stop(mut self) -> Option<i32> {
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the gateway did not stop"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A raw answer: status, headers (names lower-cased) and body.
struct RawAnswer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl RawAnswer {
    fn parse(text: &str) -> RawAnswer {
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text, ""));
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        RawAnswer {
            status,
            headers,
            body: body.to_owned(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_allowed_call_passes_over_http_as_the_tokens_principal_and_a_parked_call_keeps_its_stream_while_another_is_answered()
 {
    let Some(python) = python("pass_through") else {
        return;
    };
    let scene = Scene::new(python);
    let gateway = scene.listen(&[]);
    let token = scene.token("acme", "bob");

    let called = scene.client(&gateway, "call", Some(&token));
    assert_eq!(called["server"], "airlock", "{called}");
    assert_eq!(called["protocol_version"], "2025-11-25", "{called}");
    assert_eq!(called["slow"]["is_error"], false, "{called}");
    assert_eq!(called["slow"]["text"], "slept 0.0", "{called}");
    // The session's principal is the token's, not the file's.
    assert_eq!(scene.run_principals(), ["bob"]);

    // Two SSE streams at once in one session: a parked call's, and a tools/list answered
    // while it is parked; the approval comes only after the list was answered.
    let concurrent = scene.client(&gateway, "concurrent", Some(&token));
    assert_eq!(concurrent["timed_out"], false, "{concurrent}");
    assert_eq!(
        concurrent["order"],
        serde_json::json!(["list", "parked_call"]),
        "{concurrent}"
    );
    assert_eq!(concurrent["approve_exit"], 0, "{concurrent}");
    assert_eq!(
        concurrent["parked_call"]["text"], "appended",
        "{concurrent}"
    );
    assert_eq!(
        std::fs::read_to_string(&scene.ledger).unwrap(),
        "over http\n"
    );

    // A definition changed upstream reaches the HTTP client as a list change.
    let changed = scene.client(&gateway, "list_changed", Some(&token));
    assert_eq!(changed["set"]["text"], "changed", "{changed}");
    assert!(
        changed["notifications"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "notifications/tools/list_changed"),
        "{changed}"
    );
    assert_eq!(gateway.stop(), Some(0));
    scene.assert_upstreams_ended();
}

/// SPEC §22.2, §22.3 over Streamable HTTP: a read is answered beside a parked call of the same
/// session; the parked call's request cancelled (a host's timeout) keeps its approval, and the
/// identical call sent again after approval returns the result with the effect done once; a
/// call without a `progressToken` is answered at once, naming its approval.
#[test]
fn over_http_a_parked_call_delays_nothing_and_its_approval_outlives_the_request() {
    let Some(python) = python("over_http_a_parked_call_delays_nothing") else {
        return;
    };
    let scene = Scene::new(python);
    let gateway = scene.listen(&[]);
    let token = scene.token("acme", "bob");
    let seen = scene.client(&gateway, "waiting", Some(&token));
    assert_eq!(seen["timed_out"], false, "{seen}");
    assert_eq!(seen["beside"]["is_error"], false, "{seen}");
    assert!(seen.get("cancelled_answer").is_none(), "{seen}");
    assert_eq!(
        seen["approve_exit"], 0,
        "the approval was still pending: {seen}"
    );
    assert_eq!(seen["retry"]["text"], "appended", "{seen}");
    assert_eq!(seen["no_progress"]["is_error"], true, "{seen}");
    let told = seen["no_progress"]["text"].as_str().unwrap_or_default();
    assert!(told.contains("needs approval"), "{told}");
    assert_eq!(
        std::fs::read_to_string(&scene.ledger).unwrap(),
        "waited\n",
        "the approved call once, the unanswered one not at all"
    );
    assert_eq!(gateway.stop(), Some(0));
}

/// SPEC §22.3 over Streamable HTTP: a session that asked for an approval and then ended
/// (DELETE) leaves it pending; the identical call on a new session of the same principal binds to
/// it instead of asking again, and once approved the call sent again returns the result, the
/// effect done once.
#[test]
fn over_http_an_ended_sessions_approval_is_bound_by_the_identical_call_on_a_new_session() {
    let Some(python) = python("over_http_an_ended_sessions_approval_is_bound") else {
        return;
    };
    let scene = Scene::new(python);
    let gateway = scene.listen(&[]);
    let token = scene.token("acme", "bob");
    let left = scene.client(&gateway, "leave", Some(&token));
    let approval = left["approval"]
        .as_str()
        .expect("the answer names its approval");
    let rejoined = scene.client(&gateway, "rejoin", Some(&token));
    assert_eq!(
        rejoined["approval"].as_str(),
        Some(approval),
        "the new session was told of the same approval: {rejoined}"
    );
    assert_eq!(rejoined["approve_exit"], 0, "{rejoined}");
    assert_eq!(rejoined["retry"]["text"], "appended", "{rejoined}");
    assert_eq!(
        std::fs::read_to_string(&scene.ledger).unwrap(),
        "rejoined\n",
        "the effect done once"
    );
    assert_eq!(gateway.stop(), Some(0));
}

/// SPEC §22.1, §23: a 2026-07-28 client is served over HTTP without a session. Its requests
/// name their version in `_meta` and the header, and its conversation is the store's row of
/// (tenant, principal, token, `clientInfo.name`), so two gateway processes on one store serve it
/// as one: the Python SDK (2.3, `negotiate_auto`) settles on 2026-07-28, lists tools and calls a
/// read through one gateway; a new client with the same name, through the other gateway, calls
/// a write that needs approval (answered at once, no progressToken), approved from the CLI, and
/// sends it again: the approved result, the effect done once, one conversation row counting
/// the calls of both and tainted by the read's untrusted result. A version neither era is is
/// told −32022 with both; a sessionless request naming none, how to begin (−32600); a sessionless
/// 2026-07-28 notification, 202.
#[test]
fn a_2026_07_28_client_without_a_session_is_one_conversation_across_two_gateways() {
    let Some(python) = python("a_2026_07_28_client_without_a_session") else {
        return;
    };
    let scene = Scene::new(python);
    let first = scene.listen(&["--listen-no-auth"]);
    let second = scene.listen(&["--listen-no-auth"]);
    let discover = first.raw(
        "POST",
        &[("mcp-protocol-version", "2099-01-01")],
        r#"{"jsonrpc":"2.0","id":"probe-1","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}}"#,
    );
    assert_eq!(discover.status, 400, "{}", discover.body);
    assert_eq!(
        discover.header("content-type"),
        Some("application/json"),
        "{:?}",
        discover.headers
    );
    let error: Value = serde_json::from_str(&discover.body).expect("a JSON-RPC error body");
    assert_eq!(error["id"], "probe-1", "{error}");
    assert_eq!(error["error"]["code"], -32022, "{error}");
    assert_eq!(
        error["error"]["data"],
        json!({"requested": "2099-01-01", "supported": ["2025-11-25", "2026-07-28"]}),
        "{error}"
    );
    let listed = first.raw("POST", &[], TOOLS_LIST);
    assert_eq!(listed.status, 400, "{}", listed.body);
    let error: Value = serde_json::from_str(&listed.body).expect("a JSON-RPC error body");
    assert_eq!(error["error"]["code"], -32600, "{error}");
    assert_eq!(error["id"], 2, "{error}");
    let notified = first.raw(
        "POST",
        &[("mcp-protocol-version", "2026-07-28")],
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
    );
    assert_eq!(notified.status, 202, "{}", notified.body);
    let auto = scene.client(&first, "auto", None);
    assert_eq!(auto["protocol_version"], "2026-07-28", "{auto}");
    assert_eq!(auto["slow"]["is_error"], false, "{auto}");

    one_conversation_across(&scene, &first, &second, 3);
}

/// §23's scale-out, on PostgreSQL: two gateway processes on one store serve a 2026-07-28
/// client's requests alternately as one conversation (its taint, its approval and the bound
/// retry), as on one SQLite file above.
#[test]
fn a_2026_07_28_conversation_spans_two_gateways_on_postgresql() {
    let Some(scene) =
        Scene::on_postgres("a_2026_07_28_conversation_spans_two_gateways_on_postgresql")
    else {
        return;
    };
    let first = scene.listen(&["--listen-no-auth"]);
    let second = scene.listen(&["--listen-no-auth"]);
    one_conversation_across(&scene, &first, &second, 2);
}

/// The `modern` scenario through `first` then `second`: the Python SDK (2.3) settles on
/// 2026-07-28, its listing is private for a minute, a read through `first` is answered and
/// taints; a new client of the same name through `second` asks for a write that needs approval
/// (answered at once, no progressToken), which the CLI approves, and its retry gets the result,
/// the effect once. One conversation row holds it all, with `calls` admitted calls (the
/// `modern` scenario's read and write, and any earlier call of the same client name), tainted by
/// the read.
fn one_conversation_across(scene: &Scene, first: &Gateway, second: &Gateway, calls: u64) {
    let both = Gateway::urls(&[first, second]);
    let seen = scene.client_at(&both, "modern", None);
    assert_eq!(seen["protocol_version"], "2026-07-28", "{seen}");
    assert_eq!(
        seen["list_cache"],
        json!([60000, "private"]),
        "a listing depends on the principal's scopes: {seen}"
    );
    assert_eq!(seen["slow"]["is_error"], false, "{seen}");
    assert_eq!(seen["asked"]["is_error"], true, "{seen}");
    assert!(
        seen["asked"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("needs approval") && t.contains("retry the same call")),
        "{seen}"
    );
    assert_eq!(seen["approve_exit"], 0, "{seen}");
    assert_eq!(seen["retry"]["is_error"], false, "{seen}");
    assert_eq!(seen["retry"]["text"], "appended", "{seen}");
    let ledger = std::fs::read_to_string(&scene.ledger).unwrap_or_default();
    assert_eq!(
        ledger.lines().filter(|l| *l == "stateless").count(),
        1,
        "{ledger}"
    );

    // One key (the SDK's own client name, no token), so one conversation, which the second
    // gateway joined instead of opening its own.
    let listed = scene.data.json("operator", &["conversations", "list"]);
    let items = listed["items"].as_array().cloned().unwrap_or_default();
    let served: Vec<&Value> = items
        .iter()
        .filter(|c| c["call_count"].as_u64().unwrap_or(0) > 0)
        .collect();
    assert_eq!(served.len(), 1, "{listed}");
    assert_eq!(served[0]["status"], "open", "{listed}");
    assert_eq!(
        served[0]["call_count"], calls,
        "the reads and the write (its retry bound to it): {listed}"
    );
    assert!(
        served[0]["tainted_by"]
            .as_str()
            .is_some_and(|by| by.contains("mcp.test.slow")),
        "the first read's untrusted result tainted it: {listed}"
    );
}

/// SPEC §22.3 item 1 with §23: a 2026-07-28 client that declared the tasks extension is answered
/// a task the moment its write parks (`resultType: "task"`, status `working`, the approval named,
/// `ttlMs` past the approval's expiry); `tasks/get` reads it. Another principal's poll, a guessed
/// id, a `tasks/update` (airlock's tasks ask for no input) are −32602. The gateway is killed
/// with SIGKILL while the task waits; a new gateway process starts on the store; the CLI
/// approves; polls through the new process complete the task with the upstream's result, and
/// the ledger has exactly one line.
#[test]
fn an_approval_task_outlives_kill_9_of_its_gateway_and_completes_once() {
    let Some(python) = python("an_approval_task_outlives_kill_9_of_its_gateway") else {
        return;
    };
    task_outlives_kill_9(Scene::new(python));
}

/// The same on PostgreSQL (SPEC §23's scale-out: the task is the store's).
#[test]
fn an_approval_task_outlives_kill_9_of_its_gateway_on_postgresql() {
    let Some(scene) =
        Scene::on_postgres("an_approval_task_outlives_kill_9_of_its_gateway_on_postgresql")
    else {
        return;
    };
    task_outlives_kill_9(scene);
}

fn task_outlives_kill_9(scene: Scene) {
    let alice = scene.token("acme", "alice");
    let bob = scene.token("acme", "bob");
    let first = scene.listen(&[]);
    let answered = first.modern(
        Some(&alice),
        ("tools/call", "test__append"),
        json!({"name": "test__append", "arguments": {"text": "by task"}}),
    );
    let task = &answered["result"];
    assert_eq!(task["resultType"], "task", "{answered}");
    assert_eq!(task["status"], "working", "{answered}");
    let id = task["taskId"].as_str().expect("a task id").to_owned();
    assert!(id.starts_with("tsk_") && id.len() > 60, "{id}");
    let message = task["statusMessage"].as_str().unwrap_or_default();
    let approval = message
        .split_whitespace()
        .nth(3)
        .expect("the approval's id in the message")
        .to_owned();
    assert!(message.starts_with("waiting for approval "), "{message}");
    assert!(
        task["ttlMs"].as_u64().is_some_and(|ttl| ttl > 3_600_000),
        "{answered}"
    );

    let get = |gateway: &Gateway, token: &str, id: &str| {
        gateway.modern(Some(token), ("tasks/get", id), json!({"taskId": id}))
    };
    assert_eq!(get(&first, &alice, &id)["result"]["status"], "working");
    assert_eq!(
        get(&first, &bob, &id)["error"]["code"],
        -32602,
        "another's task"
    );
    assert_eq!(get(&first, &alice, "tsk_guess")["error"]["code"], -32602);
    let update = first.modern(
        Some(&alice),
        ("tasks/update", &id),
        json!({"taskId": id, "inputResponses": {}}),
    );
    assert_eq!(update["error"]["code"], -32602, "{update}");

    first.kill9();
    let second = scene.listen(&[]);
    let approved = scene.data.run(
        "operator",
        &[
            "approvals",
            "approve",
            &approval,
            "--reason",
            "checked by ci",
        ],
    );
    assert!(approved.status.success(), "{approved:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let done = loop {
        let polled = get(&second, &alice, &id);
        if polled["result"]["status"] == "completed" {
            break polled;
        }
        assert_eq!(polled["result"]["status"], "working", "{polled}");
        assert!(
            std::time::Instant::now() < deadline,
            "never completed: {polled}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(done["result"]["result"]["isError"], false, "{done}");
    assert_eq!(
        done["result"]["result"]["content"][0]["text"], "appended",
        "{done}"
    );
    std::thread::sleep(Duration::from_secs(2));
    let ledger = std::fs::read_to_string(&scene.ledger).unwrap_or_default();
    assert_eq!(
        ledger.lines().filter(|l| *l == "by task").count(),
        1,
        "{ledger}"
    );
    assert_eq!(
        get(&second, &alice, &id)["result"]["status"],
        "completed",
        "still there for the next poll"
    );
    // The Python SDK's own session polls it too, through the gateway that replaced the first.
    let polled = scene.client_at_with(&second.url, "task_poll", Some(&alice), &["--arg", &id]);
    assert_eq!(polled["final"]["status"], "completed", "{polled}");
    assert_eq!(
        polled["final"]["result"]["content"][0]["text"], "appended",
        "{polled}"
    );
}

/// SPEC §22.3 item 2: with `approve_via_elicitation`, a 2026-07-28 client that declared form
/// elicitation (and no tasks) is answered, when its write parks, `input_required`: the approval
/// form as its one input request and a sealed `requestState`. A changed state, another
/// principal's use of it, or its use for another call are −32602 and move nothing. The retry
/// with the form's yes, through a second gateway process of the store (which opens the state
/// with the store's key), approves and executes the call once; the same state used again is
/// −32602 (used). URL mode (a client that declared only URL elicitation, `console_url` set):
/// the input request is the approval's console page, the client's "accept" decides nothing, and
/// the retry after a reviewer approved from the CLI gets the result.
#[test]
fn an_input_required_approval_is_answered_on_the_retry_through_another_gateway() {
    let Some(python) = python("an_input_required_approval") else {
        return;
    };
    input_required_across_gateways(Scene::new(python));
}

/// The same on PostgreSQL (SPEC §23's scale-out: a sealed `requestState` is opened by another
/// gateway process with the store's key).
#[test]
fn an_input_required_approval_crosses_gateways_on_postgresql() {
    let Some(scene) =
        Scene::on_postgres("an_input_required_approval_crosses_gateways_on_postgresql")
    else {
        return;
    };
    input_required_across_gateways(scene);
}

fn input_required_across_gateways(scene: Scene) {
    let file = std::fs::read_to_string(&scene.config).unwrap();
    std::fs::write(
        &scene.config,
        file.replacen(
            "origin_trust = \"user\"\n",
            "origin_trust = \"user\"\napprove_via_elicitation = true\n\
             console_url = \"https://console.example/\"\n",
            1,
        ),
    )
    .unwrap();
    let alice = scene.token("acme", "alice");
    let bob = scene.token("acme", "bob");
    let first = scene.listen(&[]);
    let second = scene.listen(&[]);
    let form = json!({"elicitation": {"form": {}}});
    let call = |gateway: &Gateway, token: &str, text: &str, extra: Value| {
        gateway.modern_call(
            Some(token),
            &form,
            ("test__append", json!({"text": text})),
            extra,
        )
    };
    let asked = call(&first, &alice, "sealed", json!({}));
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    let request = &result["inputRequests"]["approval"];
    assert_eq!(request["method"], "elicitation/create", "{asked}");
    assert_eq!(request["params"]["mode"], "form", "{asked}");
    assert!(
        request["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("approve this call?")),
        "{asked}"
    );
    let state = result["requestState"]
        .as_str()
        .expect("a requestState")
        .to_owned();
    let yes = json!({"approval": {"action": "accept", "content": {"approve": true}}});

    let changed = changed_state(&state);
    for (who, text, state, why) in [
        (&alice, "sealed", changed.as_str(), "changed"),
        (&bob, "sealed", state.as_str(), "another principal"),
        (&alice, "other", state.as_str(), "another call"),
    ] {
        let refused = call(
            &second,
            who,
            text,
            json!({"requestState": state, "inputResponses": yes}),
        );
        assert_eq!(refused["error"]["code"], -32602, "{why}: {refused}");
    }
    let ledger = || std::fs::read_to_string(&scene.ledger).unwrap_or_default();
    assert!(!ledger().contains("sealed"), "{}", ledger());

    let answered = call(
        &second,
        &alice,
        "sealed",
        json!({"requestState": state, "inputResponses": yes}),
    );
    assert_eq!(answered["result"]["isError"], false, "{answered}");
    assert_eq!(
        answered["result"]["content"][0]["text"], "appended",
        "{answered}"
    );
    let again = call(
        &first,
        &alice,
        "sealed",
        json!({"requestState": state, "inputResponses": yes}),
    );
    assert_eq!(again["error"]["code"], -32602, "used: {again}");
    assert_eq!(
        ledger().lines().filter(|l| *l == "sealed").count(),
        1,
        "{}",
        ledger()
    );

    // URL mode: a client that declared only URL elicitation is sent to the approval's console
    // page; its "accept" (it opened the page) decides nothing; a reviewer does.
    let url_only = json!({"elicitation": {"url": {}}});
    let by_url = |extra: Value| {
        first.modern_call(
            Some(&alice),
            &url_only,
            ("test__append", json!({"text": "by url"})),
            extra,
        )
    };
    let asked = by_url(json!({}));
    let request = &asked["result"]["inputRequests"]["approval"]["params"];
    assert_eq!(request["mode"], "url", "{asked}");
    let approval = request["elicitationId"]
        .as_str()
        .expect("the approval")
        .to_owned();
    assert_eq!(
        request["url"],
        format!("https://console.example/approvals/{approval}"),
        "{asked}"
    );
    let state = asked["result"]["requestState"]
        .as_str()
        .expect("a state")
        .to_owned();
    let opened = json!({"approval": {"action": "accept"}});
    let still = by_url(json!({"requestState": state, "inputResponses": opened}));
    assert_eq!(
        still["result"]["resultType"], "input_required",
        "opening decides nothing: {still}"
    );
    let approved = scene.data.run(
        "operator",
        &[
            "approvals",
            "approve",
            &approval,
            "--reason",
            "checked by ci",
        ],
    );
    assert!(approved.status.success(), "{approved:?}");
    let state = still["result"]["requestState"]
        .as_str()
        .expect("a new state")
        .to_owned();
    let done = by_url(json!({"requestState": state, "inputResponses": opened}));
    assert_eq!(done["result"]["content"][0]["text"], "appended", "{done}");
    assert_eq!(ledger().lines().filter(|l| *l == "by url").count(), 1);
}

/// SPEC §22.3 items 1 and 2 and §23 over Streamable HTTP with the Python SDK 2.3's own session
/// at 2026-07-28 (the stdio twin is `mcp_gateway::over_stdio_a_2026_07_28_client_gets_rounds_and_tasks`):
/// an allowed call; the approval form as an input-required round, a changed state refused, the
/// answer moving the call once; the test server's roots round relayed; then, for a client that
/// declared tasks, an approval task approved from another process and polled to completed.
#[test]
fn over_http_the_sdk_gets_rounds_and_tasks_at_2026_07_28() {
    let Some(python) = python("over_http_the_sdk_gets_rounds_and_tasks_at_2026_07_28") else {
        return;
    };
    let scene = Scene::new(python);
    let file = std::fs::read_to_string(&scene.config).unwrap();
    std::fs::write(
        &scene.config,
        file.replacen(
            "origin_trust = \"user\"\n",
            "origin_trust = \"user\"\napprove_via_elicitation = true\n",
            1,
        ),
    )
    .unwrap();
    let alice = scene.token("acme", "alice");
    let gateway = scene.listen(&[]);
    let seen = scene.client(&gateway, "rounds", Some(&alice));
    assert_eq!(seen["protocol_version"], "2026-07-28", "{seen}");
    assert_eq!(seen["allowed"]["is_error"], false, "{seen}");
    assert_eq!(
        seen["asked"]["requests"]["approval"]["params"]["mode"], "form",
        "{seen}"
    );
    assert_eq!(seen["tampered"]["error_code"], -32602, "{seen}");
    assert_eq!(seen["answered"]["text"], "appended", "{seen}");
    assert_eq!(
        seen["roots"]["text"], "roots: file:///client/root",
        "{seen}"
    );
    let seen = scene.client(&gateway, "task", Some(&alice));
    assert_eq!(seen["created"]["resultType"], "task", "{seen}");
    assert_eq!(seen["pending"], 1, "{seen}");
    assert_eq!(seen["approve_exit"], 0, "{seen}");
    assert_eq!(seen["final"]["status"], "completed", "{seen}");
    assert_eq!(
        seen["final"]["result"]["content"][0]["text"], "appended",
        "{seen}"
    );
    let ledger = std::fs::read_to_string(&scene.ledger).unwrap_or_default();
    assert_eq!(
        ledger.lines().collect::<Vec<_>>(),
        ["http-form", "http-task"],
        "{ledger}"
    );
}

/// SPEC §23: an upstream's own input-required round reaches a 2026-07-28 client as a round of
/// the gateway's: the upstream's input request as it is, and its `requestState` sealed inside
/// one of the gateway's (the client never sees it). The client answers through another gateway
/// process of the store, which hands the upstream its own state back. A changed state, another
/// principal's, another call's, or one already used moves nothing.
#[test]
fn an_upstreams_input_round_is_relayed_with_its_state_sealed_across_gateways() {
    let Some(python) =
        python("an_upstreams_input_round_is_relayed_with_its_state_sealed_across_gateways")
    else {
        return;
    };
    let scene = Scene::new(python);
    let alice = scene.token("acme", "alice");
    let bob = scene.token("acme", "bob");
    let first = scene.listen(&[]);
    let second = scene.listen(&[]);
    let form = json!({"elicitation": {"form": {}}});
    let call = |gateway: &Gateway, token: &str, text: &str, extra: Value| {
        gateway.modern_call(
            Some(token),
            &form,
            ("test__confirm", json!({"text": text})),
            extra,
        )
    };
    let asked = call(&first, &alice, "deploy", json!({}));
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    let request = &result["inputRequests"]["confirm"];
    assert_eq!(request["method"], "elicitation/create", "{asked}");
    assert_eq!(request["params"]["message"], "Confirm deploy?", "{asked}");
    let state = result["requestState"]
        .as_str()
        .expect("a requestState")
        .to_owned();
    assert!(state.starts_with("v1."), "the gateway's own form: {state}");
    assert!(
        !asked.to_string().contains("upstream-state"),
        "the upstream's state stays sealed: {asked}"
    );
    let relayed = "SELECT count(*) FROM process_events WHERE event_type = 'mcp.upstream.request'";
    assert_eq!(
        scene.data.count(relayed),
        1,
        "the relayed elicitation is recorded"
    );
    // A client that declared no elicitation is not passed a round asking for one.
    let undeclared = first.modern_call(
        Some(&alice),
        &json!({}),
        ("test__confirm", json!({"text": "deploy"})),
        json!({}),
    );
    assert_eq!(
        undeclared["result"]["resultType"], "complete",
        "no round: {undeclared}"
    );
    assert_eq!(undeclared["result"]["isError"], true, "{undeclared}");
    assert_eq!(
        scene.data.count(relayed),
        1,
        "nothing relayed, nothing recorded"
    );
    let yes = json!({"confirm": {"action": "accept", "content": {"ok": true}}});

    let changed = changed_state(&state);
    for (who, text, state, why) in [
        (&alice, "deploy", changed.as_str(), "changed"),
        (&bob, "deploy", state.as_str(), "another principal"),
        (&alice, "other", state.as_str(), "another call"),
    ] {
        let refused = call(
            &second,
            who,
            text,
            json!({"requestState": state, "inputResponses": yes}),
        );
        assert_eq!(refused["error"]["code"], -32602, "{why}: {refused}");
    }

    let answered = call(
        &second,
        &alice,
        "deploy",
        json!({"requestState": state, "inputResponses": yes}),
    );
    assert_eq!(
        answered["result"]["content"][0]["text"],
        r#"confirmed deploy: {"action": "accept", "content": {"ok": true}}"#,
        "the upstream got its own state and the client's answer: {answered}"
    );
    let again = call(
        &first,
        &alice,
        "deploy",
        json!({"requestState": state, "inputResponses": yes}),
    );
    assert_eq!(again["error"]["code"], -32602, "used: {again}");
    assert!(
        again["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("already used")),
        "{again}"
    );
}

/// SPEC §23: a 2025-11-25 upstream (server-everything) asks for input in the call
/// (`elicitation/create`) while it serves a 2026-07-28 client, which cannot be sent requests.
/// The client is answered an input-required round naming the upstream's request, while the
/// upstream's call waits in the gateway; the retry's answer goes upstream and the retry gets
/// the call's result. The state is the gateway's: another gateway process (which does not hold
/// the call) refuses it, saying so, and it is good once.
#[test]
fn a_legacy_upstreams_in_call_request_becomes_an_input_round_for_a_2026_07_28_client() {
    let test = "a_legacy_upstreams_in_call_request_becomes_an_input_round_for_a_2026_07_28_client";
    let Some(peers) =
        airlock_e2e::mcp::peers(&format!("mcp_listen::{test}"), Need::SdkAndNpmServers)
    else {
        return;
    };
    let scene = Scene::with(
        peers.python.clone(),
        &["mcp.test.call", "mcp.everything.call"],
        &format!(
            "\n[servers.everything]\ncommand = \"node\"\nargs = [\"{}\"]\ndefault = {{ side_effect = \"none\", idempotency = \"read_only\", risk = \"low\" }}\n",
            peers.everything.display()
        ),
    );
    let alice = scene.token_with("acme", "alice", "mcp.everything.call");
    let gateway = scene.listen(&[]);
    let other = scene.listen(&[]);
    let form = json!({"elicitation": {"form": {}}});
    let call = |gateway: &Gateway, extra: Value| {
        gateway.modern_call(
            Some(&alice),
            &form,
            ("everything__trigger-elicitation-request", json!({})),
            extra,
        )
    };
    let asked = call(&gateway, json!({}));
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    let request = &result["inputRequests"]["upstream"];
    assert_eq!(request["method"], "elicitation/create", "{asked}");
    assert!(request["params"]["requestedSchema"].is_object(), "{asked}");
    let state = result["requestState"].as_str().expect("a state").to_owned();
    let answer = json!({"upstream": {"action": "decline"}});

    let answered = call(
        &gateway,
        json!({"requestState": state, "inputResponses": answer}),
    );
    assert_eq!(answered["result"]["resultType"], "complete", "{answered}");
    let text = answered["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.to_lowercase().contains("decline"),
        "the upstream heard the answer: {answered}"
    );

    // A new round, its state brought to another process.
    let asked = call(&gateway, json!({}));
    let state = asked["result"]["requestState"]
        .as_str()
        .expect("a state")
        .to_owned();
    let elsewhere = call(
        &other,
        json!({"requestState": state, "inputResponses": answer}),
    );
    assert_eq!(elsewhere["error"]["code"], -32602, "{elsewhere}");
    assert!(
        elsewhere["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("another gateway process")),
        "{elsewhere}"
    );
    // That refusal used the state up: a state is good once, wherever it is brought.
    let again = call(
        &gateway,
        json!({"requestState": state, "inputResponses": answer}),
    );
    assert_eq!(again["error"]["code"], -32602, "used: {again}");
}

/// Step 7 of the listener for sessionless clients: a 2026-07-28 request that would open a new
/// conversation beyond the token's cap (`--listen-max-sessions-per-token 1` here) is 429 with
/// `Retry-After` and a JSON-RPC body, while the conversation the token holds is still served.
/// Without the cap a client naming itself anew on each request would open a conversation row
/// per request.
#[test]
fn sessionless_conversations_count_against_the_tokens_cap() {
    let Some(python) = python("sessionless_conversations_count_against_the_tokens_cap") else {
        return;
    };
    let scene = Scene::new(python);
    let gateway = scene.listen(&["--listen-no-auth", "--listen-max-sessions-per-token", "1"]);
    let list = |client: &str| {
        let body = json!({
            "jsonrpc": "2.0", "id": 9, "method": "tools/list",
            "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {},
            }},
        });
        gateway.raw(
            "POST",
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/list"),
            ],
            &body.to_string(),
        )
    };
    let first = list("one");
    assert_eq!(first.status, 200, "{}", first.body);
    let refused = list("two");
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(
        refused.header("retry-after"),
        Some("30"),
        "{:?}",
        refused.headers
    );
    let error: Value = serde_json::from_str(&refused.body).expect("a JSON-RPC error body");
    assert_eq!(error["id"], 9, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("conversations")),
        "{error}"
    );
    let again = list("one");
    assert_eq!(
        again.status, 200,
        "the conversation it holds: {}",
        again.body
    );
}

/// SPEC §19.7: an upstream's log messages outside any call (server-everything's simulated
/// logging, a random level every 5 s) reach every connected session whose level admits them:
/// after the call that turned it on was answered (the message the tool sends at once comes
/// during the call, to its client alone), one that asked for `debug` hears messages below
/// `error` and above, one that asked for `error` hears only those at `error` or above, and the
/// stricter session, which asked first, does not silence the other. (Before, with two
/// sessions, such a message went to neither.)
#[test]
fn log_messages_outside_calls_reach_every_session_whose_level_admits_them() {
    let test = "log_messages_outside_calls_reach_every_session_whose_level_admits_them";
    let Some(peers) =
        airlock_e2e::mcp::peers(&format!("mcp_listen::{test}"), Need::SdkAndNpmServers)
    else {
        return;
    };
    let scene = Scene::with(
        peers.python.clone(),
        &["mcp.test.call", "mcp.everything.call"],
        &format!(
            "\n[servers.everything]\ncommand = \"node\"\nargs = [\"{}\"]\ndefault = {{ side_effect = \"none\", idempotency = \"read_only\", risk = \"low\" }}\n",
            peers.everything.display()
        ),
    );
    let gateway = scene.listen(&["--listen-no-auth"]);
    let seen = scene.client(&gateway, "logs", None);
    assert_eq!(seen["toggle"]["is_error"], false, "{seen}");
    let levels = |who: &str| -> Vec<String> {
        seen[who]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|l| l.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let below_error = ["debug", "info", "notice", "warning"];
    let chatty = levels("chatty");
    assert!(
        chatty.iter().any(|l| below_error.contains(&l.as_str()))
            && chatty.iter().any(|l| !below_error.contains(&l.as_str())),
        "the debug session hears every level: {seen}"
    );
    let strict = levels("strict");
    assert!(
        !strict.is_empty(),
        "the error session hears the severe ones: {seen}"
    );
    assert!(
        strict.iter().all(|l| !below_error.contains(&l.as_str())),
        "the error session hears nothing below error: {seen}"
    );
}

#[test]
fn requests_without_a_valid_token_of_the_files_tenant_or_from_a_foreign_host_or_origin_are_refused()
{
    let Some(python) = python("refusals") else {
        return;
    };
    let scene = Scene::new(python);
    let gateway = scene.listen(&[]);
    let token = scene.token("acme", "alice");
    let bearer = format!("Bearer {token}");
    let host = gateway.authority.clone();

    let (status, body) = gateway.raw_initialize(&[("Host", &host)]);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("Authorization: Bearer"), "{body}");
    let (status, body) = gateway.raw_initialize(&[
        ("Host", &host),
        ("Authorization", &format!("Bearer alk_{}", "0".repeat(64))),
    ]);
    assert_eq!(status, 401, "{body}");
    let other_tenant = format!("Bearer {}", scene.token("globex", "alice"));
    let (status, body) =
        gateway.raw_initialize(&[("Host", &host), ("Authorization", &other_tenant)]);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("another tenant"), "{body}");

    // DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1.
    let port = host.rsplit_once(':').unwrap().1;
    let (status, body) = gateway.raw_initialize(&[
        ("Host", &format!("evil.example:{port}")),
        ("Authorization", &bearer),
    ]);
    assert_eq!(status, 421, "{body}");
    assert!(body.contains("DNS rebinding"), "{body}");
    let (status, body) = gateway.raw_initialize(&[
        ("Host", &host),
        ("Origin", "http://evil.example"),
        ("Authorization", &bearer),
    ]);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("Origin"), "{body}");

    // The same request from this listener's own origin, with the token, is served.
    let (status, body) = gateway.raw_initialize(&[
        ("Host", &format!("localhost:{port}")),
        ("Origin", &format!("http://localhost:{port}")),
        ("Authorization", &bearer),
    ]);
    assert_eq!(status, 200, "{body}");
    // Nothing was opened for the refused requests: one connection (and the stdio one, whose
    // stdin is empty).
    assert_eq!(
        scene
            .data
            .count("SELECT COUNT(*) FROM connections WHERE principal_id = 'alice'"),
        2
    );
}

#[test]
fn listen_no_auth_is_loopback_only_warns_and_serves_the_files_principal() {
    let Some(python) = python("no_auth") else {
        return;
    };
    let scene = Scene::new(python);
    let refused = scene.serve_output(&["--listen", "0.0.0.0:0", "--listen-no-auth"]);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--listen-no-auth is accepted only with a loopback --listen address"),
        "{stderr}"
    );
    // A non-loopback listener without TLS follows `airlock serve`'s rule.
    let refused = scene.serve_output(&["--listen", "0.0.0.0:0"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--tls-cert and --tls-key"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let gateway = scene.listen(&["--listen-no-auth"]);
    assert!(
        gateway
            .before
            .iter()
            .any(|l| l.starts_with("warning: --listen-no-auth")),
        "{:?}",
        gateway.before
    );
    let called = scene.client(&gateway, "call", None);
    assert_eq!(called["slow"]["text"], "slept 0.0", "{called}");
    assert_eq!(scene.run_principals(), ["alice"]);
    // A token, when sent, is still checked; so is any other Authorization.
    let host = gateway.authority.clone();
    for bad in [
        format!("Bearer alk_{}", "0".repeat(64)),
        "Basic YWxpY2U6".to_owned(),
    ] {
        let (status, body) = gateway.raw_initialize(&[("Host", &host), ("Authorization", &bad)]);
        assert_eq!(status, 401, "{bad}: {body}");
    }
}

/// An HTTP session's scopes are its token's intersected with the file's (SPEC §19.6, §20): a
/// token can narrow what the gateway's file grants, never widen it; and tools/list shows the
/// session what its scopes reach, not what the file's would.
#[test]
fn a_tokens_scopes_narrow_the_files_for_listing_and_calling_and_never_widen_them() {
    let Some(python) = python("token_scopes") else {
        return;
    };
    // `slow` needs a scope the file holds; `note` one the file does not hold.
    let scene = Scene::with(
        python,
        &["mcp.test.call", "mcp.test.slow"],
        &["slow", "note"]
            .map(|tool| {
                format!(
                    "\n[servers.test.tools.{tool}]\nside_effect = \"none\"\n\
                     idempotency = \"read_only\"\nrisk = \"low\"\nscope = \"mcp.test.{tool}\"\n"
                )
            })
            .concat(),
    );
    let gateway = scene.listen(&[]);
    // bob's token holds `note` (the file does not) and lacks `slow` (the file holds it).
    let bob = scene.token_with("acme", "bob", "mcp.test.call,mcp.test.note");
    let carol = scene.token_with("acme", "carol", "mcp.test.call,mcp.test.slow");

    let narrowed = scene.client(&gateway, "scopes", Some(&bob));
    let listed: Vec<&str> = narrowed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(listed.contains(&"test__append"), "{narrowed}");
    assert!(
        !listed.contains(&"test__slow"),
        "bob's token lacks mcp.test.slow, so tools/list must not offer it: {narrowed}"
    );
    assert!(
        !listed.contains(&"test__note"),
        "no session is offered a tool whose scope the file does not hold: {narrowed}"
    );
    // Called anyway (a client may call what it was not offered), both are denied by the gate.
    let denied_for_scope = |answer: &Value| {
        answer["is_error"] == true
            && answer["text"]
                .as_str()
                .is_some_and(|t| t.contains("policy.scope.missing"))
    };
    assert!(denied_for_scope(&narrowed["slow"]), "{narrowed}");
    assert!(
        denied_for_scope(&narrowed["note"]),
        "a token scope the file does not hold must not widen the session: {narrowed}"
    );

    let granted = scene.client(&gateway, "scopes", Some(&carol));
    assert!(
        granted["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "test__slow"),
        "{granted}"
    );
    assert_eq!(granted["slow"]["text"], "slept 0.0", "{granted}");
    assert!(denied_for_scope(&granted["note"]), "{granted}");
    assert_eq!(gateway.stop(), Some(0));
}

/// Issue 26, items 1 and 2: a session belongs to the token that opened it. Another token of
/// the same principal is refused on it (403, nothing served); revoking the opening token ends
/// the session: its event stream closes within a few seconds (the listener rechecks every 2 s)
/// and the token's next request is 401.
#[test]
fn a_session_belongs_to_its_token_and_ends_with_it() {
    let Some(python) = python("session_token") else {
        return;
    };
    let scene = Scene::new(python);
    let gateway = scene.listen(&[]);
    let opening = scene.token_record("acme", "alice", "mcp.test.call");
    let opening_id = opening["id"].as_str().unwrap().to_owned();
    let bearer = format!("Bearer {}", opening["token"].as_str().unwrap());
    let other = format!("Bearer {}", scene.token("acme", "alice"));

    let opened = gateway.raw("POST", &[("authorization", &bearer)], INITIALIZE);
    assert_eq!(opened.status, 200, "{}", opened.body);
    let session = opened.header("mcp-session-id").unwrap().to_owned();
    let mine = [
        ("authorization", bearer.as_str()),
        ("mcp-session-id", session.as_str()),
    ];
    let theirs = [
        ("authorization", other.as_str()),
        ("mcp-session-id", session.as_str()),
    ];
    assert_eq!(gateway.raw("POST", &mine, INITIALIZED).status, 202);

    let refused = gateway.raw("POST", &theirs, TOOLS_LIST);
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.body.contains("token that opened it"),
        "{}",
        refused.body
    );
    assert!(
        !refused.body.contains("test__append"),
        "nothing served: {}",
        refused.body
    );
    let (status, _) = gateway.open_stream(&theirs);
    assert_eq!(status, 403, "nor its event stream");

    let listed = gateway.raw("POST", &mine, TOOLS_LIST);
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(listed.body.contains("test__append"), "{}", listed.body);

    let (status, ended) = gateway.open_stream(&mine);
    assert_eq!(status, 200);
    assert!(
        ended.recv_timeout(Duration::from_secs(3)).is_err(),
        "the stream stays open while the token works"
    );
    let revoked = std::time::Instant::now();
    scene.data.json(
        "operator",
        &["tokens", "revoke", &opening_id, "--tenant", "acme"],
    );
    ended
        .recv_timeout(Duration::from_secs(10))
        .expect("the revoked token's event stream closed");
    assert!(revoked.elapsed() < Duration::from_secs(10));
    assert_eq!(gateway.raw("POST", &mine, TOOLS_LIST).status, 401);
    // The session's connection was closed (DISCONNECT), as for a client that left.
    let open = scene
        .data
        .count("SELECT COUNT(*) FROM connections WHERE principal_id = 'alice' AND status = 'open'");
    assert!(open <= 1, "only the stdio connection may stay open: {open}");
}

/// Issue 26, items 4 and 8: every token failure gets the same 401 body; a body that is not
/// JSON gets 400 with the JSON-RPC parse error; with `--listen-max-sessions-per-token 3` one
/// token may hold 3 open sessions and its next `initialize` is 429 with Retry-After, and with
/// `--listen-max-sessions 4` the fifth session of any token is 503.
#[test]
fn uniform_refusals_parse_errors_and_the_session_cap_per_token() {
    let Some(python) = python("uniform_refusals") else {
        return;
    };
    let scene = Scene::new(python);
    let gateway = scene.listen(&[
        "--listen-max-sessions-per-token",
        "3",
        "--listen-max-sessions",
        "4",
    ]);
    let revoked = scene.token_record("acme", "alice", "mcp.test.call");
    scene.data.json(
        "operator",
        &[
            "tokens",
            "revoke",
            revoked["id"].as_str().unwrap(),
            "--tenant",
            "acme",
        ],
    );
    let revoked = format!("Bearer {}", revoked["token"].as_str().unwrap());
    let unknown = format!("Bearer alk_{}", "0".repeat(64));
    let mut bodies = Vec::new();
    for headers in [
        vec![],
        vec![("authorization", "Bearer nonsense")],
        vec![("authorization", unknown.as_str())],
        vec![("authorization", revoked.as_str())],
    ] {
        let answer = gateway.raw("POST", &headers, INITIALIZE);
        assert_eq!(answer.status, 401, "{}", answer.body);
        bodies.push(answer.body);
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{bodies:?}");
    for word in ["revoked", "unknown", "malformed", "expired"] {
        assert!(!bodies[0].contains(word), "{}", bodies[0]);
    }

    let bearer = format!("Bearer {}", scene.token("acme", "alice"));
    let not_json = gateway.raw("POST", &[("authorization", &bearer)], "{not json");
    assert_eq!(not_json.status, 400, "{}", not_json.body);
    let error: Value = serde_json::from_str(&not_json.body).expect("a JSON-RPC error");
    assert_eq!(error["error"]["code"], -32700, "{error}");

    for n in 0..3 {
        let answer = gateway.raw("POST", &[("authorization", &bearer)], INITIALIZE);
        assert_eq!(answer.status, 200, "session {n}: {}", answer.body);
    }
    let over = gateway.raw("POST", &[("authorization", &bearer)], INITIALIZE);
    assert_eq!(over.status, 429, "{}", over.body);
    assert!(over.header("retry-after").is_some(), "{:?}", over.headers);
    // Another token still opens its own, up to the listener's limit.
    let second = format!("Bearer {}", scene.token("acme", "alice"));
    let answer = gateway.raw("POST", &[("authorization", &second)], INITIALIZE);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let full = gateway.raw("POST", &[("authorization", &second)], INITIALIZE);
    assert_eq!(full.status, 503, "{}", full.body);
    assert!(full.header("retry-after").is_some(), "{:?}", full.headers);
    // A session that ends (DELETE) makes room again.
    let session = answer.header("mcp-session-id").unwrap().to_owned();
    let deleted = gateway.raw(
        "DELETE",
        &[("authorization", &second), ("mcp-session-id", &session)],
        "",
    );
    assert!(deleted.status < 300, "{} {}", deleted.status, deleted.body);
    let again = gateway.raw("POST", &[("authorization", &second)], INITIALIZE);
    assert_eq!(again.status, 200, "{}", again.body);
}

/// A loopback server answering every request with `body` (an issuer's key set, JSON).
fn keys_server(body: String) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// A loopback HTTP server that records every request's header lines and answers 500: an
/// upstream that shows what the gateway sends it.
fn recording_upstream() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = std::sync::Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                record.lock().unwrap().push(line.trim_end().to_owned());
                line.clear();
            }
            let _ = stream.write_all(
                b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    (port, seen)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Issue 31 item 2: with an `[auth]` section the listener takes the bearer JWTs of its issuer
/// (keys made for this run, served on loopback): a good token opens a session as its subject,
/// with its scopes narrowed by the file's; a token of another tenant is 403; every bad token
/// is 401 with `WWW-Authenticate: Bearer resource_metadata=…`, whose document is served
/// without a token; the session ends when the last token that used it expires; and the
/// caller's token never reaches an upstream.
#[test]
fn an_issuers_token_opens_a_session_until_it_expires_and_never_reaches_an_upstream() {
    use airlock_oauth::testing::TestIssuer;
    let Some(python) = python("issuer_tokens") else {
        return;
    };
    const RESOURCE: &str = "https://gateway.test/mcp";
    let issuer = TestIssuer::new("http://127.0.0.1/realms/acme");
    let keys = keys_server(issuer.jwks().to_string());
    let (upstream, recorded) = recording_upstream();
    let scene = Scene::with(
        python,
        &["mcp.test.call"],
        &format!(
            r#"
[servers.recorded]
url = "http://127.0.0.1:{upstream}/mcp"

[auth]
issuer = "{issuer}"
resource = "{RESOURCE}"
jwks_url = "http://127.0.0.1:{keys}/certs"
tenant_claim = "org"
leeway_seconds = 0
"#,
            issuer = issuer.issuer
        ),
    );
    let gateway = scene.listen(&[]);
    let claims = |org: &str, scope: &str, lifetime: i64| {
        let mut claims = issuer.claims(RESOURCE, unix_now(), scope);
        claims["org"] = json!(org);
        claims["sub"] = json!("bob");
        claims["exp"] = json!(unix_now() + lifetime);
        claims
    };
    // `openid` and a scope the file does not hold grant nothing here.
    let token = issuer.token(&claims("acme", "openid mcp.test.call mcp.other.call", 300));
    let bearer = format!("Bearer {token}");
    let session = gateway.open_session(&bearer);
    let mine = [
        ("authorization", bearer.as_str()),
        ("mcp-session-id", session.as_str()),
    ];
    let listed = gateway.raw("POST", &mine, TOOLS_LIST);
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(listed.body.contains("test__append"), "{}", listed.body);
    assert_eq!(
        scene.data.count(
            "SELECT COUNT(*) FROM connections WHERE principal_id = 'bob' AND tenant_id = 'acme'"
        ),
        1,
        "the session is the token's subject's"
    );

    // A refreshed token of the same subject and scopes keeps the session; one whose scopes
    // were cut at the issuer does not (403: the session stays the first caller's).
    let refreshed = format!(
        "Bearer {}",
        issuer.token(&claims("acme", "openid mcp.test.call mcp.other.call", 600))
    );
    let same = gateway.raw(
        "POST",
        &[("authorization", &refreshed), ("mcp-session-id", &session)],
        TOOLS_LIST,
    );
    assert_eq!(same.status, 200, "{}", same.body);
    let narrowed = format!("Bearer {}", issuer.token(&claims("acme", "openid", 600)));
    let refused = gateway.raw(
        "POST",
        &[("authorization", &narrowed), ("mcp-session-id", &session)],
        TOOLS_LIST,
    );
    assert_eq!(refused.status, 403, "{}", refused.body);
    let other_tenant = format!(
        "Bearer {}",
        issuer.token(&claims("globex", "mcp.test.call", 300))
    );
    let refused = gateway.raw("POST", &[("authorization", &other_tenant)], INITIALIZE);
    assert_eq!(refused.status, 403, "{}", refused.body);

    let challenge = "Bearer resource_metadata=\"https://gateway.test/.well-known/oauth-protected-resource/mcp\"";
    let good = claims("acme", "mcp.test.call", 300);
    let mut wrong_audience = good.clone();
    wrong_audience["aud"] = json!("https://other.test/mcp");
    for (what, bad) in [
        (
            "expired",
            issuer.token(&claims("acme", "mcp.test.call", -5)),
        ),
        ("wrong audience", issuer.token(&wrong_audience)),
        ("alg none", issuer.sign(json!({"alg": "none"}), &good)),
        (
            "unknown kid",
            issuer.sign(json!({"alg": "ES256", "kid": "gone"}), &good),
        ),
    ] {
        let answer = gateway.raw(
            "POST",
            &[("authorization", &format!("Bearer {bad}"))],
            INITIALIZE,
        );
        assert_eq!(answer.status, 401, "{what}: {}", answer.body);
        assert_eq!(
            answer.header("www-authenticate"),
            Some(format!("{challenge}, error=\"invalid_token\"").as_str()),
            "{what}"
        );
    }
    let anonymous = gateway.raw("POST", &[], INITIALIZE);
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.header("www-authenticate"), Some(challenge));

    // The metadata document, without a token.
    let mut stream = TcpStream::connect(&gateway.authority).unwrap();
    write!(
        stream,
        "GET /.well-known/oauth-protected-resource/mcp HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
        gateway.authority
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let answer = RawAnswer::parse(&text);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let document: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(document["resource"], RESOURCE);
    assert_eq!(document["authorization_servers"], json!([issuer.issuer]));

    // A session whose token expires in a few seconds ends then: its event stream closes.
    let short = format!(
        "Bearer {}",
        issuer.token(&claims("acme", "mcp.test.call", 4))
    );
    let opened = gateway.raw("POST", &[("authorization", &short)], INITIALIZE);
    assert_eq!(opened.status, 200, "{}", opened.body);
    let short_session = opened.header("mcp-session-id").unwrap().to_owned();
    let theirs = [
        ("authorization", short.as_str()),
        ("mcp-session-id", short_session.as_str()),
    ];
    assert_eq!(gateway.raw("POST", &theirs, INITIALIZED).status, 202);
    let (status, ended) = gateway.open_stream(&theirs);
    assert_eq!(status, 200);
    ended
        .recv_timeout(Duration::from_secs(15))
        .expect("the expired token's session closed");
    // The long-lived session is untouched.
    assert_eq!(gateway.raw("POST", &mine, TOOLS_LIST).status, 200);

    let seen = recorded.lock().unwrap().join("\n");
    assert!(
        seen.contains("POST /mcp") || seen.contains("GET /mcp"),
        "the upstream was contacted: {seen}"
    );
    assert!(
        !seen.contains(&token) && !seen.contains(&short[7..]),
        "a caller's token reached the upstream: {seen}"
    );
}

/// What an OTLP receiver got: each request's path and JSON body.
type Received = std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>;

/// A loopback OTLP/HTTP receiver (JSON encoding): every request's path and body, answered 200.
fn otlp_receiver() -> (u16, Received) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = std::sync::Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let record = std::sync::Arc::clone(&record);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                loop {
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = request_line
                        .split_whitespace()
                        .nth(1)
                        .unwrap_or("")
                        .to_owned();
                    let mut length = 0usize;
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                        if let Some((name, value)) = line.trim_end().split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap_or(0);
                        }
                        line.clear();
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    record.lock().unwrap().push((path, value));
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
                    );
                }
            });
        }
    });
    (port, seen)
}

/// Approves what is pending as soon as something is (within 10 s): how many were approved.
fn approve_when_parked(scene: &Scene) -> usize {
    for _ in 0..100 {
        let approved = scene.data.approve_all();
        if approved > 0 {
            return approved;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    0
}

/// One exported span, flattened: name, ids, kind and attributes (values as JSON).
#[derive(Debug, Clone)]
struct ExportedSpan {
    name: String,
    trace: String,
    id: String,
    parent: String,
    kind: i64,
    attributes: serde_json::Map<String, Value>,
}

impl ExportedSpan {
    fn text(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).and_then(Value::as_str)
    }
}

fn exported_spans(requests: &[(String, Value)]) -> Vec<ExportedSpan> {
    let mut spans = Vec::new();
    for (path, body) in requests {
        if path != "/v1/traces" {
            continue;
        }
        for resource in body["resourceSpans"].as_array().into_iter().flatten() {
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                for span in scope["spans"].as_array().into_iter().flatten() {
                    let mut attributes = serde_json::Map::new();
                    for attribute in span["attributes"].as_array().into_iter().flatten() {
                        let value = &attribute["value"];
                        let flat = value
                            .get("stringValue")
                            .or_else(|| value.get("boolValue"))
                            .or_else(|| value.get("intValue"))
                            .or_else(|| value.get("doubleValue"))
                            .cloned()
                            .unwrap_or(Value::Null);
                        attributes.insert(attribute["key"].as_str().unwrap_or("").to_owned(), flat);
                    }
                    spans.push(ExportedSpan {
                        name: span["name"].as_str().unwrap_or("").to_owned(),
                        trace: span["traceId"].as_str().unwrap_or("").to_owned(),
                        id: span["spanId"].as_str().unwrap_or("").to_owned(),
                        parent: span["parentSpanId"].as_str().unwrap_or("").to_owned(),
                        kind: span["kind"].as_i64().unwrap_or(0),
                        attributes,
                    });
                }
            }
        }
    }
    spans
}

/// Issue 31 item 1: with `OTEL_EXPORTER_OTLP_ENDPOINT` the gateway exports a server span per
/// MCP request in the MCP semantic conventions, to a receiver written here (OTLP/HTTP, JSON).
/// An allowed call (continuing the client's `traceparent`, with the upstream call as a client
/// span below it), a denied call, a parked call approved (with its `approval wait` span) and a
/// call whose outcome became unknown (UNCERTAIN) each carry their attributes; the gate's
/// `policy decision` spans are exported with the worker's; and a gateway started without the
/// variable exports nothing.
#[test]
fn spans_in_the_mcp_conventions_reach_an_otlp_receiver_only_when_configured() {
    let Some(python) = python("otel") else {
        return;
    };
    let scene = Scene::with(
        python,
        &["mcp.test.call"],
        r#"
[servers.test.tools.note]
side_effect = "package_install"
idempotency = "read_only"
risk = "high"

[servers.test.tools.slow]
side_effect = "external_write"
idempotency = "non_idempotent"
risk = "low"
timeout_seconds = 1
"#,
    );
    let (port, received) = otlp_receiver();
    let endpoint = format!("http://127.0.0.1:{port}");
    let gateway = scene.listen_with_env(
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
            ("OTEL_SERVICE_NAME", "gateway-under-test"),
        ],
    );
    let bearer = format!("Bearer {}", scene.token("acme", "bob"));
    let session = gateway.open_session(&bearer);
    let headers = [
        ("authorization", bearer.as_str()),
        ("mcp-session-id", session.as_str()),
    ];
    let listed = gateway.raw("POST", &headers, TOOLS_LIST);
    assert!(listed.body.contains("test__mutable"), "{}", listed.body);
    let call = |id: u64, tool: &str, arguments: Value, meta: Value| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": meta}});
        gateway.raw("POST", &headers, &body.to_string())
    };
    let client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let allowed = call(
        3,
        "test__trace_context",
        json!({}),
        // Flags 00: the client asks not to be sampled; airlock records anyway.
        json!({"traceparent": format!("00-{client_trace}-{client_span}-00")}),
    );
    assert!(
        allowed.body.contains("\"isError\":false"),
        "{}",
        allowed.body
    );
    let denied = call(4, "test__note", json!({}), json!({}));
    assert!(denied.body.contains("airlock denied"), "{}", denied.body);
    // Parked: answered once approved (the request waits, it carries a progress token).
    std::thread::scope(|threads| {
        let parked = threads.spawn(|| {
            call(
                5,
                "test__append",
                json!({"text": "never-exported-7f3a"}),
                json!({"progressToken": 5}),
            )
        });
        assert_eq!(approve_when_parked(&scene), 1, "the append parked once");
        let parked = parked.join().unwrap();
        assert!(parked.body.contains("appended"), "{}", parked.body);
        // Approved, then slower than its 1 s timeout: its outcome is unknown.
        let unknown = threads.spawn(|| {
            call(
                6,
                "test__slow",
                json!({"seconds": 3}),
                json!({"progressToken": 6}),
            )
        });
        assert_eq!(approve_when_parked(&scene), 1, "the slow call parked once");
        let unknown = unknown.join().unwrap();
        assert!(unknown.body.contains("unknown"), "{}", unknown.body);
    });
    assert_eq!(gateway.stop(), Some(0));

    let spans = exported_spans(&received.lock().unwrap());
    let server = |name: &str| {
        spans
            .iter()
            .find(|s| s.name == name && s.kind == 2)
            .unwrap_or_else(|| {
                let names: Vec<_> = spans.iter().map(|s| (&s.name, s.kind)).collect();
                panic!("no server span {name:?} among {names:?}")
            })
            .clone()
    };
    let greet = server("tools/call test__trace_context");
    assert_eq!(greet.trace, client_trace, "the client's trace continues");
    assert_eq!(greet.parent, client_span);
    for (key, value) in [
        ("mcp.method.name", "tools/call"),
        ("gen_ai.tool.name", "test__trace_context"),
        ("gen_ai.operation.name", "execute_tool"),
        ("mcp.protocol.version", "2025-11-25"),
        ("airlock.policy.decision", "allow"),
        ("airlock.invocation.status", "SUCCEEDED"),
    ] {
        assert_eq!(greet.text(key), Some(value), "{key}: {greet:?}");
    }
    assert_eq!(greet.attributes["jsonrpc.request.id"], "3", "{greet:?}");
    assert!(greet.text("mcp.session.id").is_some_and(|s| !s.is_empty()));
    assert!(
        greet
            .text("airlock.policy.version")
            .is_some_and(|v| !v.is_empty())
    );
    // The test server's results are untrusted: this call's own answer taints the conversation.
    assert_eq!(
        greet.attributes["airlock.conversation.tainted"], true,
        "{greet:?}"
    );
    assert!(!greet.attributes.contains_key("error.type"), "{greet:?}");
    let upstream = spans
        .iter()
        .find(|s| s.kind == 3 && s.name == "tools/call trace_context")
        .expect("the upstream call's client span");
    assert_eq!(upstream.parent, greet.id, "below the request");
    assert_eq!(upstream.trace, client_trace);
    // The upstream heard the client span's own context in `params._meta`.
    let heard = format!("traceparent=00-{client_trace}-{}-01", upstream.id);
    assert!(
        allowed.body.contains(&heard),
        "{heard} not in {}",
        allowed.body
    );

    let status = server("tools/call test__note");
    assert_eq!(
        status.text("airlock.policy.decision"),
        Some("deny"),
        "{status:?}"
    );
    assert_eq!(status.text("airlock.invocation.status"), Some("DENIED"));
    assert_eq!(status.text("error.type"), Some("tool_error"));
    assert!(
        status
            .text("airlock.policy.reason_code")
            .is_some_and(|r| r.starts_with("policy.")),
        "{status:?}"
    );

    let append = server("tools/call test__append");
    assert_eq!(
        append.text("airlock.policy.decision"),
        Some("require_approval"),
        "{append:?}"
    );
    assert_eq!(append.text("airlock.invocation.status"), Some("SUCCEEDED"));
    assert!(append.text("airlock.approval.id").is_some(), "{append:?}");
    assert!(
        append.attributes.contains_key("airlock.approval.wait_ms"),
        "{append:?}"
    );
    assert!(
        spans
            .iter()
            .any(|s| s.name == "approval wait" && s.parent == append.id),
        "the approval wait is a child of the request"
    );

    let slow = server("tools/call test__slow");
    assert_eq!(
        slow.text("airlock.invocation.status"),
        Some("UNCERTAIN"),
        "{slow:?}"
    );
    assert!(slow.text("airlock.invocation.id").is_some(), "{slow:?}");

    // The run executes inside the request's span: its `policy decision` is in the client's
    // trace, below the request (request > run > step > call > policy decision).
    let ancestors = |span: &ExportedSpan| {
        let mut chain = Vec::new();
        let mut parent = span.parent.clone();
        while let Some(up) = spans.iter().find(|s| s.id == parent) {
            chain.push(up.name.clone());
            parent = up.parent.clone();
        }
        chain
    };
    let gate = spans
        .iter()
        .find(|s| s.name == "policy decision" && s.trace == client_trace)
        .expect("the allowed call's gate span in the client's trace");
    assert_eq!(
        gate.text("airlock.policy.decision"),
        Some("allow"),
        "{gate:?}"
    );
    assert_eq!(
        ancestors(gate),
        ["call", "step", "run", "tools/call test__trace_context"],
        "{gate:?}"
    );
    let worker_call = spans
        .iter()
        .find(|s| s.id == gate.parent)
        .expect("the call span");
    assert_eq!(
        worker_call.text("airlock.invocation.status"),
        Some("SUCCEEDED"),
        "{worker_call:?}"
    );
    // The gate's own spans, from the worker's calls.
    let decisions: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "policy decision")
        .filter_map(|s| s.text("airlock.policy.decision"))
        .collect();
    for decision in ["allow", "deny", "require_approval"] {
        assert!(
            decisions.contains(&decision),
            "{decision} among {decisions:?}"
        );
    }
    // The metrics, sent at the latest when the gateway stopped.
    let metrics: Vec<String> = received
        .lock()
        .unwrap()
        .iter()
        .filter(|(path, _)| path == "/v1/metrics")
        .map(|(_, body)| body.to_string())
        .collect();
    for name in [
        "mcp.server.operation.duration",
        "airlock.calls",
        "airlock.approval.wait_time",
        "airlock.calls.parked",
        "airlock.approvals.open",
        "airlock.invocations.uncertain",
    ] {
        assert!(
            metrics.iter().any(|m| m.contains(&format!("\"{name}\""))),
            "metric {name} not exported"
        );
    }
    // Arguments never leave the process.
    let everything = serde_json::to_string(&*received.lock().unwrap()).unwrap();
    assert!(
        !everything.contains("never-exported-7f3a"),
        "arguments exported"
    );

    // Without the variable, nothing is sent.
    let before = received.lock().unwrap().len();
    let quiet = scene.listen(&[]);
    let opened = quiet.raw("POST", &[("authorization", &bearer)], INITIALIZE);
    assert_eq!(opened.status, 200);
    assert_eq!(quiet.stop(), Some(0));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        received.lock().unwrap().len(),
        before,
        "nothing exported without the variable"
    );

    // Opted in (AIRLOCK_OTEL_TOOL_CONTENT=redacted): a call's arguments and result go on its
    // span, redacted as the approval view redacts them.
    let (port, received) = otlp_receiver();
    let endpoint = format!("http://127.0.0.1:{port}");
    let opted_in = scene.listen_with_env(
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
            ("AIRLOCK_OTEL_TOOL_CONTENT", "redacted"),
        ],
    );
    let session = opted_in.open_session(&bearer);
    let headers = [
        ("authorization", bearer.as_str()),
        ("mcp-session-id", session.as_str()),
    ];
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "test__note",
            "arguments": {"visible": "shown-5e1c", "api_key": "sk-live-0123456789abcdef"}}});
    let denied = opted_in.raw("POST", &headers, &body.to_string());
    assert!(denied.body.contains("airlock denied"), "{}", denied.body);
    assert_eq!(opted_in.stop(), Some(0));
    let spans = exported_spans(&received.lock().unwrap());
    let note = spans
        .iter()
        .find(|s| s.name == "tools/call test__note" && s.kind == 2)
        .expect("the call's server span");
    let arguments = note
        .text("gen_ai.tool.call.arguments")
        .expect("arguments on the span");
    assert!(arguments.contains("shown-5e1c"), "{arguments}");
    assert!(arguments.contains("[REDACTED]"), "{arguments}");
    assert!(!arguments.contains("sk-live"), "{arguments}");
    let result = note
        .text("gen_ai.tool.call.result")
        .expect("the result on the span");
    assert!(result.contains("airlock denied"), "{result}");
    // A bad value is refused before anything starts.
    let refused = scene
        .data
        .command("operator", &["mcp", "serve", "--config"])
        .arg(&scene.config)
        .env("AIRLOCK_OTEL_TOOL_CONTENT", "everything")
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stdout);
    assert!(said.contains("AIRLOCK_OTEL_TOOL_CONTENT"), "{said}");
}

/// Issue 32 item 4: `SIGHUP` reloads the gateway file. A server added to the file is connected
/// and its tools listed, one removed is closed and its tools gone, and the client session open
/// since the start keeps working throughout; a file that changes more than its servers (the
/// tenant) is refused and changes nothing.
#[test]
fn sighup_connects_added_servers_and_closes_removed_ones_while_sessions_stay_open() {
    let Some(python) = python("gateway_reload") else {
        return;
    };
    let scene = Scene::with(python.clone(), &["mcp.test.call", "mcp.second.call"], "");
    // The shipped policy files in a directory of their own, edited at the end.
    let policy = scene.data.path().join("policy");
    std::fs::create_dir_all(&policy).unwrap();
    for file in ["default.toml", "hardline.toml"] {
        std::fs::copy(repo().join("policies").join(file), policy.join(file)).unwrap();
    }
    let gateway = scene.listen(&["--policy-dir", policy.to_str().unwrap()]);
    let bearer = format!(
        "Bearer {}",
        scene.token_with("acme", "bob", "mcp.test.call,mcp.second.call")
    );
    let session = gateway.open_session(&bearer);
    let headers = [
        ("authorization", bearer.as_str()),
        ("mcp-session-id", session.as_str()),
    ];
    let listed = || gateway.raw("POST", &headers, TOOLS_LIST).body;
    assert!(listed().contains("test__mutable"));
    assert!(!listed().contains("second__mutable"));
    let call = |id: u64, tool: &str| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {}}});
        gateway.raw("POST", &headers, &body.to_string()).body
    };
    let hup = || {
        let status = Command::new("kill")
            .args(["-HUP", &gateway.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    let wait_for = |what: &str, holds: &dyn Fn(&str) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = listed();
            if holds(&now) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: {now}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    let original = std::fs::read_to_string(&scene.config).unwrap();
    let second = airlock_e2e::mcp::test_server_tables(&python, &scene.ledger)
        .replace("[servers.test", "[servers.second");
    std::fs::write(&scene.config, format!("{original}\n{second}")).unwrap();
    hup();
    wait_for("the added server's tools", &|l| {
        l.contains("second__mutable")
    });
    assert!(
        call(3, "second__mutable").contains("same"),
        "the new server answers"
    );
    assert!(
        call(4, "test__mutable").contains("same"),
        "the old one still does"
    );

    // A changed section reconnects the server; its tools come back as new versions, so a call
    // pinned to the old one cannot be taken for the new server's.
    let registered = |version: &str| {
        scene.data.count(&format!(
            "SELECT COUNT(*) FROM process_events WHERE derivation_key LIKE \
             'mcp.tool.registered:%:mcp.second.mutable@{version}'"
        ))
    };
    assert_eq!(registered("1.0.0"), 1);
    let changed = format!(
        "{second}\n[servers.second.tools.mutable]\nside_effect = \"none\"\nidempotency = \"read_only\"\nrisk = \"high\"\n"
    );
    std::fs::write(&scene.config, format!("{original}\n{changed}")).unwrap();
    hup();
    let deadline = Instant::now() + Duration::from_secs(30);
    while registered("1.0.1") == 0 {
        assert!(
            Instant::now() < deadline,
            "mutable not registered again as 1.0.1"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for("the reconnected server's tools", &|l| {
        l.contains("second__mutable")
    });
    assert!(call(8, "second__mutable").contains("same"));
    std::fs::write(&scene.config, format!("{original}\n{second}")).unwrap();

    // More than the servers changed: refused, nothing changes.
    std::fs::write(
        &scene.config,
        format!("{original}\n{second}").replace("tenant_id = \"acme\"", "tenant_id = \"globex\""),
    )
    .unwrap();
    hup();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(listed().contains("second__mutable"), "{}", listed());
    assert!(call(5, "second__mutable").contains("same"));

    // Removed again: closed and its tools gone; the session carries on.
    std::fs::write(&scene.config, &original).unwrap();
    hup();
    wait_for("the removed server's tools gone", &|l| {
        !l.contains("second__mutable") && l.contains("test__mutable")
    });
    let gone = call(6, "second__mutable");
    assert!(!gone.contains("\"same\""), "{gone}");
    assert!(call(7, "test__mutable").contains("same"));

    // The same SIGHUP reloads the policy first, and the listing follows it: a class the new
    // rules deny outright is no longer listed, and its calls are denied.
    let profile = policy.join("default.toml");
    let text = std::fs::read_to_string(&profile).unwrap();
    let denied = text.replace(
        "[rules.none]\ndecision = \"allow\"",
        "[rules.none]\ndecision = \"deny\"",
    );
    assert_ne!(denied, text, "the edit applies");
    std::fs::write(&profile, denied).unwrap();
    hup();
    wait_for("the denied class unlisted", &|l| {
        l.contains("test__append") && !l.contains("test__mutable")
    });
    let refused = call(9, "test__mutable");
    assert!(refused.contains("airlock denied"), "{refused}");
    assert_eq!(gateway.stop(), Some(0));
}
