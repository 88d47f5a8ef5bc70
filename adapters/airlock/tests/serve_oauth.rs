//! `airlock serve --config` with an `[auth]` section (issue 31): the API takes the bearer JWTs
//! of one issuer beside airlock's own tokens. The issuer is a test issuer whose keys are made
//! for this run and served on loopback by a server written here; the real binary fetches them.
//! A good token is its claims' caller (tenant, principal, scopes); every bad one is 401 with
//! the challenge pointing at the protected-resource metadata, which is served without a token.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use airlock_oauth::testing::TestIssuer;
use serde_json::{Value, json};

mod common;

use common::{BIN, Server, airlock};
const RESOURCE: &str = "https://airlock.test/api";
const METADATA_URL: &str = "https://airlock.test/.well-known/oauth-protected-resource/api";

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A loopback server answering every request with `body` (JSON); the number of requests.
fn keys_server(body: String) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().expect("a clone"));
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            counted.fetch_add(1, Ordering::SeqCst);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, hits)
}

fn http(addr: &str, method: &str, path: &str, token: Option<&str>) -> common::Answer {
    common::request(addr, method, path, token, None)
}

/// A run of tenant acme waiting for an approval, submitted by alice.

#[test]
fn an_issuers_tokens_are_their_claims_caller_and_every_bad_one_is_401_with_the_metadata() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let issuer = TestIssuer::new("http://127.0.0.1/realms/acme");
    let (port, hits) = keys_server(issuer.jwks().to_string());
    let config = dir.path().join("server.toml");
    std::fs::write(
        &config,
        format!(
            r#"[auth]
issuer = "{issuer}"
resource = "{RESOURCE}"
jwks_url = "http://127.0.0.1:{port}/certs"
tenant_claim = "org"
scopes_supported = ["run.read", "approval.read", "approval.resolve", "policy.admin"]
"#,
            issuer = issuer.issuer
        ),
    )
    .expect("config");
    let run = common::waiting_run(&data, dir.path(), "hello");
    let server = Server::start(&data, &[], &["--config", config.to_str().expect("utf-8")]);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the keys are fetched at start"
    );
    let addr = server.addr.as_str();
    let claims = |org: &str, sub: &str, scope: &str| {
        let mut claims = issuer.claims(RESOURCE, now(), scope);
        claims["org"] = json!(org);
        claims["sub"] = json!(sub);
        claims
    };

    // The caller is the token's claims: tenant from `org`, principal from `sub`, its scopes.
    let bob = issuer.token(&claims(
        "acme",
        "bob",
        "run.read approval.read approval.resolve",
    ));
    let seen = http(addr, "GET", &format!("/v1/runs/{run}"), Some(&bob));
    assert_eq!(seen.status, 200, "{}", seen.body);
    assert_eq!(seen.body["id"], json!(run));
    let other_tenant = issuer.token(&claims("globex", "bob", "run.read"));
    assert_eq!(
        http(addr, "GET", &format!("/v1/runs/{run}"), Some(&other_tenant)).status,
        404,
        "another tenant's caller does not see acme's run"
    );
    let without_scope = issuer.token(&claims("acme", "bob", "approval.read"));
    let seen = http(
        addr,
        "GET",
        &format!("/v1/runs/{run}"),
        Some(&without_scope),
    );
    assert_eq!(seen.status, 403, "{}", seen.body);
    // The process's policy is every tenant's: an issuer's token never reloads it, whatever its
    // scopes (issue 32 item 4).
    let policy_admin = issuer.token(&claims("acme", "ops", "policy.admin"));
    let reload = http(addr, "POST", "/v1/admin/reload", Some(&policy_admin));
    assert_eq!(reload.status, 403, "{}", reload.body);

    // An approval resolved with the issuer's token is recorded as its subject's.
    let listed = http(addr, "GET", "/v1/approvals", Some(&bob));
    assert_eq!(listed.status, 200, "{}", listed.body);
    let approval = listed.body["items"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a pending approval: {}", listed.body))
        .to_owned();
    let approved = http(
        addr,
        "POST",
        &format!("/v1/approvals/{approval}/approve"),
        Some(&bob),
    );
    assert_eq!(approved.status, 200, "{}", approved.body);
    let (_, record) = airlock(&data, &["--tenant", "acme", "approvals", "get", &approval]);
    assert_eq!(record["resolved_by"], "bob", "{record}");

    // airlock's own tokens keep working beside the issuer's.
    let (code, minted) = airlock(
        &data,
        &[
            "--tenant",
            "acme",
            "--principal",
            "carol",
            "tokens",
            "create",
        ],
    );
    assert_eq!(code, 0, "{minted}");
    let own = minted["token"].as_str().expect("token");
    assert_eq!(
        http(addr, "GET", &format!("/v1/runs/{run}"), Some(own)).status,
        200
    );

    // Every bad token: 401, one body, and the challenge naming the metadata.
    let good = claims("acme", "bob", "run.read");
    let with = |key: &str, value: Value| {
        let mut claims = good.clone();
        claims[key] = value;
        claims
    };
    let mut forged = issuer.token(&with("scope", json!("run.read run.write")));
    let genuine = issuer.token(&good);
    // The widened payload with the genuine token's signature.
    forged = format!(
        "{}.{}",
        forged.rsplit_once('.').expect("parts").0,
        genuine.rsplit_once('.').expect("parts").1
    );
    let bad = [
        ("expired", issuer.token(&with("exp", json!(now() - 120)))),
        (
            "wrong audience",
            issuer.token(&with("aud", json!("https://other.test"))),
        ),
        (
            "wrong issuer",
            issuer.token(&with("iss", json!("https://evil.test"))),
        ),
        ("alg none", issuer.sign(json!({"alg": "none"}), &good)),
        (
            "unknown kid",
            issuer.sign(json!({"alg": "RS256", "kid": "gone"}), &good),
        ),
        ("bad signature", forged),
        (
            "another issuer's key",
            TestIssuer::new(&issuer.issuer).token(&good),
        ),
    ];
    for (what, token) in bad {
        let seen = http(addr, "GET", &format!("/v1/runs/{run}"), Some(&token));
        assert_eq!(seen.status, 401, "{what}: {}", seen.body);
        assert_eq!(seen.body["code"], "unauthenticated", "{what}");
        assert_eq!(
            seen.challenge.as_deref(),
            Some(
                format!("Bearer resource_metadata=\"{METADATA_URL}\", error=\"invalid_token\"")
                    .as_str()
            ),
            "{what}"
        );
    }
    let anonymous = http(addr, "GET", &format!("/v1/runs/{run}"), None);
    assert_eq!(anonymous.status, 401);
    assert_eq!(
        anonymous.challenge.as_deref(),
        Some(format!("Bearer resource_metadata=\"{METADATA_URL}\"").as_str())
    );
    // An unknown kid fetches the keys again only 30 s after the last fetch (here: the start),
    // so a flood of made-up kids cannot make airlock hammer the issuer.
    assert_eq!(hits.load(Ordering::SeqCst), 1, "no refetch within 30 s");

    // The metadata, without a token, at the path form and the plain name.
    for path in [
        "/.well-known/oauth-protected-resource/api",
        "/.well-known/oauth-protected-resource",
    ] {
        let seen = http(addr, "GET", path, None);
        assert_eq!(seen.status, 200, "{path}");
        assert_eq!(
            seen.body,
            json!({
                "resource": RESOURCE,
                "authorization_servers": [issuer.issuer],
                "bearer_methods_supported": ["header"],
                "resource_name": "airlock",
                "scopes_supported": ["run.read", "approval.read", "approval.resolve", "policy.admin"],
            }),
            "{path}"
        );
    }
}

#[test]
fn a_bad_auth_section_or_unreachable_keys_stop_the_start_with_the_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let closed_port = {
        let probe = TcpListener::bind("127.0.0.1:0").expect("port");
        probe.local_addr().expect("addr").port()
    };
    let cases = [
        (
            "[auth]\nissuer = \"https://idp.test\"\nresource = \"https://a.test\"\njwks_url = \"https://idp.test/k\"\naudence = \"x\"\ntenant = \"acme\"\n",
            "audence",
        ),
        (
            "[auth]\nissuer = \"https://idp.test\"\nresource = \"https://a.test\"\njwks_url = \"https://idp.test/k\"\ntenant = \"acme\"\nalgorithms = [\"HS256\"]\n",
            "auth.algorithms: \\\"HS256\\\" is never accepted",
        ),
        (
            "[auth]\nissuer = \"http://idp.example.com\"\nresource = \"https://a.test\"\njwks_url = \"https://idp.test/k\"\ntenant = \"acme\"\n",
            "auth.issuer: must be https",
        ),
        ("[listen]\nport = 1\n", "listen"),
        (
            &format!(
                "[auth]\nissuer = \"https://idp.test\"\nresource = \"https://a.test\"\njwks_url = \"http://127.0.0.1:{closed_port}/k\"\ntenant = \"acme\"\n"
            ),
            "cannot fetch the issuer's keys",
        ),
    ];
    for (index, (text, expected)) in cases.iter().enumerate() {
        let config = dir.path().join(format!("server-{index}.toml"));
        std::fs::write(&config, text).expect("config");
        let output = Command::new(BIN)
            .arg("--data-dir")
            .arg(&data)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--no-worker",
                "--config",
            ])
            .arg(&config)
            .output()
            .expect("serve runs");
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert_ne!(output.status.code(), Some(0), "{printed}");
        assert!(printed.contains(expected), "case {index}: {printed}");
        assert!(!printed.contains("listening"), "case {index}: {printed}");
    }
}
