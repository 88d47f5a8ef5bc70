//! `airlock serve` and `airlock tokens` as a user runs them (SPEC §20): the real binary on a
//! fresh data directory and an ephemeral loopback port. The HTTP bodies are the CLI's JSON
//! records byte for byte (compared field by field here), a revoked token stops working at once,
//! SIGTERM ends the server cleanly, and bad listen/TLS options are refused before anything is
//! opened.

use serde_json::json;

mod common;

use common::{Server, airlock, http};

#[test]
fn serve_answers_with_the_clis_records_and_revocation_is_immediate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        json!({"schema_version": 1, "tenant_id": "acme", "principal_id": "alice",
            "principal_scopes": ["demo.write"], "origin_trust": "user",
            "steps": [{"calls": [{"call_id": "c1", "tool": "demo.external_write",
                "arguments": {"destination": "demo", "content": "hello"},
                "argument_trust": {"destination": "user", "content": "user"}}]}]})
        .to_string(),
    )
    .expect("script");
    let (code, submitted) = airlock(
        &data,
        &["--tenant", "acme", "--principal", "alice", "run", "submit"],
    );
    assert_eq!(code, 2, "run submit needs a script path: {submitted}");
    let script_path = script.to_str().expect("utf-8");
    let (code, submitted) = airlock(
        &data,
        &[
            "--tenant",
            "acme",
            "--principal",
            "alice",
            "run",
            "submit",
            script_path,
            "--inline",
        ],
    );
    assert_eq!(code, 0, "{submitted}");
    assert_eq!(submitted["status"], "WAITING_FOR_APPROVAL");
    let run = submitted["run_id"].as_str().expect("run").to_owned();
    let (code, minted) = airlock(
        &data,
        &[
            "--tenant",
            "acme",
            "--principal",
            "bob",
            "tokens",
            "create",
            "--label",
            "e2e",
        ],
    );
    assert_eq!(code, 0, "{minted}");
    let token = minted["token"]
        .as_str()
        .expect("token shown once")
        .to_owned();
    assert!(token.starts_with("alk_") && token.len() == 68);
    let (_, listed) = airlock(&data, &["--tenant", "acme", "tokens", "list"]);
    assert_eq!(listed["items"][0]["id"], minted["id"]);
    assert!(
        listed["items"][0].get("token").is_none(),
        "list never shows the token"
    );
    let stored = std::fs::read(data.join("airlock.sqlite3")).expect("store");
    assert!(
        !stored.windows(token.len()).any(|w| w == token.as_bytes()),
        "the token's text is not in the store"
    );

    let server = Server::start(&data, &[], &[]);
    let (status, health) = http(&server.addr, "GET", "/healthz", None, None);
    assert_eq!((status, &health["status"]), (200, &json!("ok")));

    // The HTTP records are the CLI's records.
    let (_, page) = http(&server.addr, "GET", "/v1/approvals", Some(&token), None);
    let approval = page["items"][0]["id"]
        .as_str()
        .expect("a pending approval")
        .to_owned();
    let (_, cli_approval) = airlock(&data, &["--tenant", "acme", "approvals", "get", &approval]);
    assert_eq!(page["items"][0], cli_approval);
    let (status, http_run) = http(
        &server.addr,
        "GET",
        &format!("/v1/runs/{run}"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200);
    let (_, cli_run) = airlock(&data, &["--tenant", "acme", "runs", "show", &run]);
    assert_eq!(http_run, cli_run);

    let (status, resolved) = http(
        &server.addr,
        "POST",
        &format!("/v1/approvals/{approval}/approve"),
        Some(&token),
        Some(&json!({"reason": "over HTTP"})),
    );
    assert_eq!(status, 200, "{resolved}");
    assert_eq!(resolved["state"], "applied");
    let (_, cli_resolved) = airlock(&data, &["--tenant", "acme", "approvals", "get", &approval]);
    assert_eq!(
        resolved["approval"], cli_resolved,
        "the CLI sees the HTTP resolution"
    );

    let id = minted["id"].as_str().expect("id");
    let (code, revoked) = airlock(&data, &["--tenant", "acme", "tokens", "revoke", id]);
    assert_eq!(code, 0, "{revoked}");
    assert!(revoked["revoked_at"].is_string());
    let (status, problem) = http(&server.addr, "GET", "/v1/approvals", Some(&token), None);
    assert_eq!((status, &problem["code"]), (401, &json!("unauthenticated")));
    let (code, _) = airlock(&data, &["--tenant", "globex", "tokens", "revoke", id]);
    assert_eq!(code, 1, "another tenant's token is not found");

    assert_eq!(server.terminate(), 0, "SIGTERM ends serve with exit 0");
}

#[test]
fn unsafe_or_incomplete_listen_options_are_refused_before_the_store_is_opened() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    for (args, code, text) in [
        (
            vec!["serve", "--listen", "0.0.0.0:0"],
            2,
            "not a loopback address",
        ),
        (vec!["serve", "--tls-cert", "c.pem"], 2, "go together"),
        (
            vec![
                "serve",
                "--listen",
                "0.0.0.0:0",
                "--tls-cert",
                "/nonexistent/c.pem",
                "--tls-key",
                "/nonexistent/k.pem",
            ],
            4,
            "cannot read certificate",
        ),
        (
            vec!["tokens", "create", "--expires-in", "soon"],
            2,
            "--expires-in",
        ),
        (vec!["--tenant", "", "tokens", "create"], 2, "--tenant"),
    ] {
        let (status, error) = airlock(&data, &args);
        assert_eq!(status, code, "{args:?}: {error}");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains(text),
            "{args:?}: {error}"
        );
    }
    assert!(!data.exists(), "nothing was created");
}
