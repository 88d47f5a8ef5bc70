//! kill -9 torture of the gateway's retry race (SPEC §19.7, issue 25): in each round a host
//! sends a slow non-idempotent call (`test__append`, which writes one ledger line and then
//! waits before answering) through `airlock mcp serve`; the gateway is SIGKILLed at a
//! pseudo-random moment after the call was sent (before the call reached the upstream, or
//! between its effect and its answer); unless the gateway had written its answer, the host at
//! once starts a new gateway on the same store and sends the identical call again, as a host
//! that saw no answer does. Whatever the
//! moment, the round's line is in the ledger at most once: the retry is refused
//! (`policy.uncertain.in_flight` while the first invocation is in flight), or runs because the
//! first call never started.
//!
//! The host is this test, speaking MCP's JSON-RPC over the gateway's stdio; the upstream is the
//! project's own test server (`tests/mcp/airlock_test_server.py`, the Python `mcp` SDK). Without
//! the SDK the test prints that it was skipped (a failure under `CI=true`).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use airlock_e2e::mcp::{Need, policy_allowing_external_writes};
use airlock_e2e::*;
use serde_json::{Value, json};

/// Rounds, and how long the upstream waits between its effect and its answer.
const ROUNDS: u64 = 12;
const ANSWER_AFTER_SECONDS: f64 = 0.6;

/// One `airlock mcp serve` child and the lines of its stdout.
struct Gateway {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Gateway {
    fn start(data: &DataDir, config: &Path, policies: &Path) -> Gateway {
        let mut child = data
            .command(
                "operator",
                &["mcp", "serve", "--lease-ms", "2000", "--config"],
            )
            .arg(config)
            .arg("--policy-dir")
            .arg(policies)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the gateway");
        let stdin = child.stdin.take().expect("the gateway's stdin");
        let stdout = child.stdout.take().expect("the gateway's stdout");
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut gateway = Gateway {
            child,
            stdin,
            lines,
        };
        gateway.send(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "retry-torture", "version": "1"},
            }}),
        );
        gateway.response(1, Duration::from_secs(60));
        gateway.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        gateway
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").expect("write to the gateway");
        self.stdin.flush().expect("flush to the gateway");
    }

    fn call_append(&mut self, id: u64, text: &str) {
        self.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": "test__append",
                "arguments": {"text": text, "delay_seconds": ANSWER_AFTER_SECONDS},
            }}),
        );
    }

    /// The response to request `id`, or `None` if none came within `limit`.
    fn try_response(&mut self, id: u64, limit: Duration) -> Option<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let message: Value = serde_json::from_str(&line)
                        .unwrap_or_else(|e| panic!("the gateway wrote no JSON ({e}): {line}"));
                    if message["id"] == id {
                        return Some(message);
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    fn response(&mut self, id: u64, limit: Duration) -> Value {
        self.try_response(id, limit)
            .unwrap_or_else(|| panic!("no response to request {id} within {limit:?}"))
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGKILL, then whether the gateway had written its response to request `id` before it
    /// died (every line it wrote is read to the pipe's end).
    fn kill_and_see_answer(mut self, id: u64) -> bool {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.try_response(id, Duration::from_secs(10)).is_some()
    }
}

/// The statuses of the round's invocations, for a failure's message.
fn first_status(data: &DataDir, text: &str) -> Vec<String> {
    let conn = db(data);
    let mut statement = conn
        .prepare("SELECT status FROM tool_invocations WHERE arguments LIKE ?1 ORDER BY created_at")
        .expect("query");
    statement
        .query_map([format!("%\"{text}\"%")], |row| row.get(0))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect()
}

fn ledger_count(ledger: &Path, text: &str) -> usize {
    std::fs::read_to_string(ledger)
        .unwrap_or_default()
        .lines()
        .filter(|line| *line == text)
        .count()
}

/// The answer's text, and whether it is an error.
fn answer_text(response: &Value) -> (String, bool) {
    let result = &response["result"];
    let text = result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<String>();
    (text, result["isError"] == true)
}

#[test]
fn sigkilled_gateways_and_immediate_retries_never_repeat_an_effect() {
    let Some(peers) = airlock_e2e::mcp::peers(
        "mcp_retry_torture::sigkilled_gateways_and_immediate_retries_never_repeat_an_effect",
        Need::Sdk,
    ) else {
        return;
    };
    let data = DataDir::new();
    let ledger = data.path().join("ledger.txt");
    let config = data.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "schema_version = 1\ntenant_id = \"acme\"\nprincipal_id = \"alice\"\n\
             scopes = [\"mcp.test.call\"]\norigin_trust = \"user\"\n{}",
            airlock_e2e::mcp::test_server_tables(&peers.python, &ledger)
        ),
    )
    .expect("write the gateway file");
    // The shipped profile with external writes allowed, so the call is in flight at once.
    let policies = policy_allowing_external_writes(data.path());

    let mut rng = Rng(0x5EED_0025_0019_0007);
    let (mut refused_in_flight, mut after_effect, mut retried_ran) = (0, 0, 0);
    for round in 0..ROUNDS {
        let text = format!("round-{round}");
        let mut first = Gateway::start(&data, &config, &policies);
        first.call_append(2, &text);
        // Before the call reached the upstream, or between its effect and its answer.
        let wait = if round % 2 == 0 {
            rng.below(40)
        } else {
            40 + rng.below(560)
        };
        std::thread::sleep(Duration::from_millis(wait));
        let answered = first.kill_and_see_answer(2);
        let effects_before_retry = ledger_count(&ledger, &text);
        if answered {
            // The host saw the answer: it has nothing to retry.
            continue;
        }
        after_effect += usize::from(effects_before_retry == 1);

        let mut retry = Gateway::start(&data, &config, &policies);
        retry.call_append(2, &text);
        let response = retry.response(2, Duration::from_secs(60));
        retry.kill();
        let (answer, is_error) = answer_text(&response);
        let effects = ledger_count(&ledger, &text);
        assert!(
            effects <= 1,
            "round {round}: the effect happened {effects} times (retry answered {answer:?}, \
             first invocation {:?})",
            first_status(&data, &text)
        );
        if answer.contains("(policy.uncertain.in_flight)") {
            refused_in_flight += 1;
            assert!(is_error, "round {round}: {answer}");
        } else if !is_error {
            retried_ran += 1;
            assert_eq!(
                effects_before_retry, 0,
                "round {round}: the retry ran although the first call had taken effect"
            );
        }
    }
    eprintln!(
        "mcp_retry_torture: {ROUNDS} rounds; kills after an effect and before its answer: \
         {after_effect}; retries refused in flight: {refused_in_flight}; retries that ran: \
         {retried_ran}; duplicated effects: 0"
    );
    assert!(
        after_effect > 0 && refused_in_flight > 0,
        "no kill landed between an effect and its answer: the torture tested nothing"
    );
}
