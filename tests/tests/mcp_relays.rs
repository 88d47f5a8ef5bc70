//! In-call relays through `airlock mcp serve` (SPEC §19.6): `@modelcontextprotocol/server-everything`
//! as the upstream and the Python `mcp` SDK (`tests/mcp/client.py`, scenario `relays`) as the
//! client, over stdio. The upstream's progress during a long tool reaches the client under the
//! client's own token; its sampling and elicitation requests are answered by the client, each
//! recorded as `mcp.upstream.request`; its log messages reach the client. Its `roots/list` at start, before any client is there, is answered with the gateway
//! file's roots. The project's test server (`tests/mcp/airlock_test_server.py`, tools `ask` and
//! `roots`) covers a 2026-07-28 upstream, whose sampling and roots requests come as
//! input-required results.
//!
//! The peers are the ones of `mcp_gateway.rs` (installed by `.ci/mcp.sh`); without them the test is
//! skipped with a line on stderr, and under `CI=true` it fails instead.

use std::process::{Command, Stdio};
use std::time::Duration;

use airlock_e2e::mcp::{Need, Peers};
use airlock_e2e::*;
use serde_json::Value;

/// The peers the relay scenarios need (server-everything and the SDK).
fn peers(test: &str) -> Option<Peers> {
    airlock_e2e::mcp::peers(&format!("mcp_relays::{test}"), Need::SdkAndNpmServers)
}

/// Runs `scenario` of client.py against a gateway fronting server-everything and the project's
/// test server; its observations.
fn relays(peers: &Peers, data: &DataDir, scenario: &str, mode: &str) -> Value {
    let config = data.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            r#"schema_version = 1
tenant_id = "acme"
principal_id = "alice"
scopes = ["mcp.everything.call", "mcp.test.call"]
origin_trust = "user"

[servers.everything]
command = "node"
args = ["{everything}"]
default = {{ side_effect = "none", idempotency = "read_only", risk = "low" }}
roots = ["/srv/everything-root"]

{test_tables}"#,
            everything = peers.everything.display(),
            test_tables = airlock_e2e::mcp::test_server_tables(
                &peers.python,
                &data.path().join("ledger.txt")
            ),
        ),
    )
    .unwrap();
    let mut child = Command::new(&peers.python)
        .arg(&peers.client)
        .arg(scenario)
        .arg("--airlock")
        .arg(airlock_bin())
        .arg("--data")
        .arg(data.path())
        .arg("--config")
        .arg(&config)
        .args(["--mode", mode, "--lease-ms", "2000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the python client");
    let output = wait_within(&mut child, Duration::from_secs(120), "the relays scenario");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|_| {
        panic!(
            "relays: no observations (exit {:?})\nstdout:\n{stdout}\nstderr:\n{}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn text(v: &Value) -> &str {
    v["text"].as_str().unwrap_or_default()
}

/// `(method, size)` of every `mcp.upstream.request` event.
fn upstream_requests(data: &DataDir) -> Vec<(String, i64, String)> {
    let db = db(data);
    let mut statement = db
        .prepare(
            "SELECT payload FROM process_events WHERE event_type = 'mcp.upstream.request' ORDER BY created_at, rowid",
        )
        .unwrap();
    statement
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|payload| {
            let payload: Value = serde_json::from_str(&payload.unwrap()).unwrap();
            (
                payload["method"].as_str().unwrap_or_default().to_owned(),
                payload["size"].as_i64().unwrap_or(-1),
                payload["server"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn progress_logs_sampling_elicitation_and_roots_reach_the_client_of_the_call() {
    let Some(peers) =
        peers("progress_logs_sampling_elicitation_and_roots_reach_the_client_of_the_call")
    else {
        return;
    };
    let data = DataDir::new();
    let seen = relays(&peers, &data, "relays", "legacy");
    assert_eq!(seen["protocol_version"], "2025-11-25", "{seen}");

    // Progress: the upstream's three steps, under the token the client's SDK chose (its callback
    // fires only for its own token), never the gateway's `airlock:{n}`.
    assert!(
        text(&seen["long"]).contains("Long running operation completed"),
        "{seen}"
    );
    assert_eq!(
        seen["progress"],
        serde_json::json!([[1.0, 3.0], [2.0, 3.0], [3.0, 3.0]]),
        "{seen}"
    );
    let tokens = seen["progress_tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 3, "{seen}");
    assert!(
        tokens
            .iter()
            .all(|t| !t.as_str().unwrap().starts_with("airlock:")),
        "the gateway's token leaked to the client: {seen}"
    );

    // Sampling: asked of the client, whose answer is in the tool's result.
    assert_eq!(
        seen["sampled"],
        serde_json::json!([["Resource trigger-sampling-request context: relay me"]]),
        "{seen}"
    );
    let sampling = text(&seen["sampling"]);
    assert!(
        sampling.contains("sampled by the python client") && sampling.contains("client-model-7"),
        "{seen}"
    );

    // Elicitation: asked of the client; its decline is what the tool saw.
    assert_eq!(seen["elicited"].as_array().map(Vec::len), Some(1), "{seen}");
    assert!(text(&seen["elicitation"]).contains("decline"), "{seen}");

    // Roots: server-everything asks at its start, before any client is there, and is answered
    // the gateway file's roots (SPEC §23), which its tool then reports. Asked during a call (the
    // project's test server, through an input-required round), they are the client's.
    assert!(
        text(&seen["roots"]).contains("file:///srv/everything-root"),
        "{seen}"
    );
    assert_eq!(seen["roots_asked"], 1, "{seen}");
    assert_eq!(
        text(&seen["test_roots"]),
        "roots: file:///relayed/root",
        "{seen}"
    );

    // Logs: the message server-everything sends during the call that turns its simulated
    // logging on reaches the client of that call.
    let logs = seen["logs_during_toggle"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        logs.iter()
            .any(|l| l["data"].as_str().is_some_and(|d| d.contains("message"))),
        "{seen}"
    );

    // One event per relayed sampling or elicitation request (roots are not recorded).
    let events = upstream_requests(&data);
    let methods: Vec<&str> = events.iter().map(|(m, _, _)| m.as_str()).collect();
    assert_eq!(
        methods,
        ["sampling/createMessage", "elicitation/create"],
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .all(|(_, size, server)| *size > 50 && server == "everything"),
        "{events:?}"
    );
}

/// The project's test server speaks 2026-07-28 to the gateway, so its sampling request comes as an
/// input-required result of the forwarded call: the gateway asks the (2025-11-25) client and sends
/// the call again with the answer.
#[test]
fn an_input_required_round_of_a_2026_07_28_upstream_is_answered_by_the_client() {
    let Some(peers) =
        peers("an_input_required_round_of_a_2026_07_28_upstream_is_answered_by_the_client")
    else {
        return;
    };
    let data = DataDir::new();
    let seen = relays(&peers, &data, "ask", "legacy");
    assert_eq!(seen["sampled"], serde_json::json!([["relay me"]]), "{seen}");
    let answer = text(&seen["ask"]);
    assert!(
        answer.starts_with("sampled on 2026-07-28:")
            && answer.contains("sampled by the python client"),
        "{seen}"
    );
    let events = upstream_requests(&data);
    assert_eq!(
        events,
        [(
            "sampling/createMessage".to_owned(),
            events.first().map_or(-1, |e| e.1),
            "test".to_owned()
        )],
        "{events:?}"
    );
    assert!(events[0].1 > 20, "{events:?}");
}
