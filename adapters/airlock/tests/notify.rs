//! Notifications end to end (issue 32 item 1): targets added with `airlock notify` and the HTTP
//! API, a real `airlock serve` delivering to a webhook receiver on loopback, which checks every
//! request's signature. A 500 is retried with the same idempotency key; a delivery is not
//! repeated after the server restarts; a receiver that keeps failing, or refuses, is given up
//! with a `notify.delivery.given_up` event; each format renders a `<script>` argument inert.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_core::notify::target::tenant_tag;
use airlock_notify::signature::{DEFAULT_TOLERANCE_SECONDS, verify};
use serde_json::{Value, json};

mod common;

use common::{Server, airlock, http};

const SECRET: &str = "a signing secret of the test";

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// A webhook receiver on loopback: `/flaky` answers 500 the first time and 200 after, `/down`
/// always 503, `/gone` 404, `/slow…` 200 after 2.5 s, anything else 200 at once. Every request
/// is recorded when it arrives.
struct Receiver {
    addr: String,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let record = Arc::clone(&got);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let Some(request) = read_request(&mut stream) else {
                    continue;
                };
                let status = {
                    let mut got = record.lock().expect("lock");
                    let earlier = got.iter().filter(|r| r.path == request.path).count();
                    got.push(request.clone());
                    match request.path.as_str() {
                        "/flaky" if earlier == 0 => 500,
                        "/down" => 503,
                        "/gone" => 404,
                        _ => 200,
                    }
                };
                if request.path.starts_with("/slow") {
                    std::thread::sleep(Duration::from_millis(2500));
                }
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            }
        });
        Receiver { addr, got }
    }

    fn at(&self, path: &str) -> Vec<Received> {
        self.got
            .lock()
            .expect("lock")
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// Waits up to 30 s until `path` got `count` requests.
    fn wait_for(&self, path: &str, count: usize) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.at(path);
            if got.len() >= count {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "{path} got {} of {count} requests: {got:?}",
                got.len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn read_request(stream: &mut std::net::TcpStream) -> Option<Received> {
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut reader = BufReader::new(stream);
    let mut first = String::new();
    reader.read_line(&mut first).ok()?;
    let path = first.split_whitespace().nth(1)?.to_owned();
    let mut headers = BTreeMap::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
    }
    let length: usize = headers.get("content-length")?.parse().ok()?;
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Received {
        path,
        headers,
        body,
    })
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The request is signed with the target's secret over exactly its body.
fn assert_signed(request: &Received) {
    let header = request.header("airlock-signature");
    assert_eq!(
        verify(
            SECRET.as_bytes(),
            header,
            &request.body,
            now_unix(),
            DEFAULT_TOLERANCE_SECONDS
        ),
        Ok(()),
        "{request:?}"
    );
    let mut forged = request.body.clone();
    forged.extend_from_slice(b" ");
    assert!(
        verify(
            SECRET.as_bytes(),
            header,
            &forged,
            now_unix(),
            DEFAULT_TOLERANCE_SECONDS
        )
        .is_err(),
        "a changed body fails"
    );
    assert!(
        verify(
            SECRET.as_bytes(),
            header,
            &request.body,
            now_unix() + 3600,
            DEFAULT_TOLERANCE_SECONDS
        )
        .is_err(),
        "a replay an hour later fails"
    );
}

/// acme's secret file: in a directory named after acme's tag, as a secret must be.
fn acme_key(dir: &Path, text: &str) -> std::path::PathBuf {
    let own = dir.join("secrets").join(tenant_tag("acme"));
    std::fs::create_dir_all(&own).expect("secrets dir");
    let key = own.join("hook.key");
    std::fs::write(&key, text).expect("key");
    key
}

/// A test's scene: its directory, data dir and receiver, and `target(path, format, event)`,
/// which adds a target of acme at the receiver's `path`, signed with acme's key file holding
/// `secret`, and answers its id.
fn scene(
    secret: &str,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    Receiver,
    impl Fn(&str, &str, &str) -> String + use<>,
) {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let key = acme_key(dir.path(), secret);
    let receiver = Receiver::start();
    let base = format!("http://{}", receiver.addr);
    let at = data.clone();
    let target = move |path: &str, format: &str, event: &str| {
        add_target(&at, &key, &format!("{base}{path}"), format, event)
    };
    (dir, data, receiver, target)
}

fn add_target(data: &Path, key: &Path, url: &str, format: &str, event: &str) -> String {
    let secret = format!("file:{}", key.display());
    let (code, added) = airlock(
        data,
        &[
            "--tenant",
            "acme",
            "--principal",
            "ops",
            "notify",
            "add",
            "--url",
            url,
            "--format",
            format,
            "--secret",
            &secret,
            "--event",
            event,
        ],
    );
    assert_eq!(code, 0, "{added}");
    added["id"].as_str().expect("id").to_owned()
}

fn given_up_events(data: &Path) -> Vec<Value> {
    let conn = rusqlite::Connection::open(data.join("airlock.sqlite3")).expect("open");
    let mut statement = conn
        .prepare(
            "SELECT payload FROM process_events WHERE event_type = 'notify.delivery.given_up' \
             ORDER BY created_at",
        )
        .expect("prepare");
    statement
        .query_map([], |row| row.get::<_, String>(0))
        .expect("query")
        .map(|p| serde_json::from_str(&p.expect("row")).expect("JSON"))
        .collect()
}

#[test]
fn deliveries_are_signed_retried_once_each_and_inert_in_every_format() {
    let (dir, data, receiver, target) = scene(&format!("{SECRET}\n"));
    let requested = "approval.requested";
    target("/flaky", "json", requested);
    target("/slack", "slack", requested);
    target("/approvals", "ntfy", requested);
    let down = target("/down", "json", requested);
    target("/gone", "json", requested);
    target("/expired", "json", "approval.expired");
    common::waiting_run(&data, dir.path(), "<script>alert(1)</script>");

    let notify_flags = ["--notify-backoff-ms", "10", "--notify-attempts", "3"];
    let server = Server::start(&data, &[], &notify_flags);

    // The generic JSON target: a 500, then the same event again, and delivered.
    let flaky = receiver.wait_for("/flaky", 2);
    for request in &flaky {
        assert_signed(request);
    }
    assert_eq!(
        flaky[0].header("idempotency-key"),
        flaky[1].header("idempotency-key"),
        "a retry carries the same idempotency key"
    );
    assert_eq!(flaky[0].header("airlock-delivery-attempt"), "1");
    assert_eq!(flaky[1].header("airlock-delivery-attempt"), "2");
    assert_eq!(flaky[1].header("airlock-event"), "approval.requested");
    let generic = flaky[1].json();
    assert_eq!(generic["type"], "approval.requested");
    assert_eq!(generic["tool"], "demo.external_write");
    assert_eq!(
        generic["id"].to_string(),
        flaky[1].header("idempotency-key"),
        "the key is the event's id"
    );
    assert_eq!(generic["arguments"]["content"], "<script>alert(1)</script>");
    let raw = String::from_utf8_lossy(&flaky[1].body);
    assert!(
        !raw.contains('<') && raw.contains("\\u003cscript\\u003e"),
        "no markup in the JSON text: {raw}"
    );

    // Slack: entity-escaped inside code, never a link or a mention.
    let slack = receiver.wait_for("/slack", 1);
    assert_signed(&slack[0]);
    let slack_text = String::from_utf8_lossy(&slack[0].body);
    assert!(
        !slack_text.contains("<script>") && slack_text.contains("&lt;script&gt;"),
        "{slack_text}"
    );

    // ntfy: posted to the server's root, the topic in the body, the message plain text.
    let ntfy = receiver.wait_for("/", 1);
    assert_signed(&ntfy[0]);
    let published = ntfy[0].json();
    assert_eq!(published["topic"], "approvals");
    assert!(
        published["message"]
            .as_str()
            .is_some_and(|m| m.contains("demo.external_write")),
        "{published}"
    );

    // Refused (404) is given up at once; failing (503) after its three attempts.
    receiver.wait_for("/gone", 1);
    receiver.wait_for("/down", 3);
    let deadline = Instant::now() + Duration::from_secs(30);
    while given_up_events(&data).len() < 2 {
        assert!(Instant::now() < deadline, "{:?}", given_up_events(&data));
        std::thread::sleep(Duration::from_millis(100));
    }
    let given_up = given_up_events(&data);
    let of_down = given_up
        .iter()
        .find(|e| e["target_id"] == down.as_str())
        .expect("the failing target gave up");
    assert_eq!(of_down["attempts"], 3);
    assert!(
        of_down["why"].as_str().is_some_and(|w| w.contains("503")),
        "{of_down}"
    );
    assert!(
        receiver.at("/expired").is_empty(),
        "a target is sent only what it subscribes to"
    );

    // The server restarts: nothing is sent twice.
    assert_eq!(server.terminate(), 0);
    let counts = |r: &Receiver| ["/flaky", "/slack", "/", "/down", "/gone"].map(|p| r.at(p).len());
    let before = counts(&receiver);
    let server = Server::start(&data, &[], &notify_flags);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        counts(&receiver),
        before,
        "no delivery repeated after a restart"
    );
    let (_, listed) = airlock(&data, &["--tenant", "acme", "notify", "list"]);
    let items = listed["items"].as_array().expect("items");
    assert_eq!(items.len(), 6);
    assert!(
        items
            .iter()
            .all(|t| t["failed_attempts"] == 0 && t["retry_at"].is_null()),
        "{listed}"
    );
    drop(server);
}

#[test]
fn the_http_api_manages_the_callers_tenants_targets_under_notify_admin() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let mint = |scopes: &str| common::token(&data, &[], scopes);
    let admin = mint("notify.admin");
    let reader = mint("run.read");
    let server = Server::start(&data, &[], &[]);
    let secret = format!("env:AIRLOCK_NOTIFY_{}_SLACK", tenant_tag("acme"));
    let (code, named) = airlock(
        &data,
        &["--tenant", "acme", "notify", "secret-name", "SLACK"],
    );
    assert_eq!((code, &named["secret"]), (0, &json!(secret)), "{named}");
    let (code, refused) = airlock(&data, &["--tenant", "acme", "notify", "secret-name", "a-b"]);
    assert_eq!(code, 2, "{refused}");
    let body = json!({"url": "https://hooks.slack.com/services/T0/B0/XYZ", "format": "slack",
        "secret": secret, "label": "<b>ops</b>"});

    let (status, refused) = http(
        &server.addr,
        "POST",
        "/v1/notify/targets",
        Some(&reader),
        Some(&body),
    );
    assert_eq!((status, &refused["code"]), (403, &json!("forbidden")));
    let (status, added) = http(
        &server.addr,
        "POST",
        "/v1/notify/targets",
        Some(&admin),
        Some(&body),
    );
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["url"], "https://hooks.slack.com/…");
    assert_eq!(
        added["events"],
        json!([
            "approval.requested",
            "approval.expired",
            "tool.call.uncertain"
        ])
    );
    let (_, listed) = http(
        &server.addr,
        "GET",
        "/v1/notify/targets",
        Some(&admin),
        None,
    );
    let (_, cli) = airlock(&data, &["--tenant", "acme", "notify", "list"]);
    assert_eq!(listed, cli, "the API's records are the CLI's");
    for (bad, why) in [
        (
            json!({"url": "ftp://x", "format": "json", "secret": secret}),
            "scheme",
        ),
        (
            json!({"url": "https://x/", "format": "xml", "secret": secret}),
            "format",
        ),
        (
            json!({"url": "https://x/", "format": "json", "secret": "env:HOME"}),
            "variable",
        ),
        (
            json!({"url": "https://x/", "format": "json", "secret": secret, "events": ["run.completed"]}),
            "event",
        ),
        (
            json!({"url": "https://x/", "format": "json", "secret": secret, "extra": 1}),
            "unknown field",
        ),
    ] {
        let (status, problem) = http(
            &server.addr,
            "POST",
            "/v1/notify/targets",
            Some(&admin),
            Some(&bad),
        );
        assert_eq!(status, 400, "{why}: {problem}");
    }
    let id = added["id"].as_str().expect("id");
    let path = format!("/v1/notify/targets/{id}");
    let (status, _) = http(&server.addr, "DELETE", &path, Some(&reader), None);
    assert_eq!(status, 403);
    let (status, removed) = http(&server.addr, "DELETE", &path, Some(&admin), None);
    assert_eq!(status, 200, "{removed}");
    assert!(removed["removed_at"].is_string());
    let (status, _) = http(&server.addr, "DELETE", &path, Some(&admin), None);
    assert_eq!(status, 404, "removed once");
    let (code, _) = airlock(
        &data,
        &[
            "--tenant",
            "evil",
            "--principal",
            "m",
            "notify",
            "remove",
            id,
        ],
    );
    assert_eq!(code, 1, "another tenant's target is not found");
}

/// `airlock ARGS…` with `AIRLOCK_CRASH_AT` set (or removed): the exit code.
fn airlock_crashing(data: &Path, crash_at: Option<&str>, args: &[&str]) -> Option<i32> {
    let mut command = std::process::Command::new(common::BIN);
    command.arg("--data-dir").arg(data).args(args);
    match crash_at {
        Some(point) => command.env("AIRLOCK_CRASH_AT", point),
        None => command.env_remove("AIRLOCK_CRASH_AT"),
    };
    command.output().expect("airlock runs").status.code()
}

#[test]
fn an_uncertain_call_reaches_its_target_and_two_servers_send_each_event_once() {
    let (dir, data, receiver, target) = scene(SECRET);
    // A slow receiver: the event stays due while it answers, so only the lease keeps the other
    // server from sending it too.
    target("/slow", "json", "approval.requested");
    target("/uncertain", "json", "tool.call.uncertain");

    // Two servers on one store: each notifies, one per tenant at a time.
    let first = Server::start(&data, &[], &[]);
    let second = Server::start(&data, &[], &[]);
    let run = common::waiting_run(&data, dir.path(), "<script>alert(1)</script>");
    let requested = receiver.wait_for("/slow", 1);
    assert_signed(&requested[0]);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        receiver.at("/slow").len(),
        1,
        "one notifier per tenant: the event is sent once"
    );

    // Approved, then the worker dies right after the effect: a restarted worker finds the
    // call UNCERTAIN, and its target is told.
    let (_, page) = airlock(
        &data,
        &["--tenant", "acme", "approvals", "list", "--run", &run],
    );
    let approval = page["items"][0]["id"]
        .as_str()
        .expect("approval")
        .to_owned();
    let (code, resolved) = airlock(
        &data,
        &[
            "--tenant",
            "acme",
            "--principal",
            "bob",
            "approvals",
            "approve",
            &approval,
        ],
    );
    assert_eq!(code, 0, "{resolved}");
    let worker = [
        "worker",
        "--until-idle",
        "--no-notify",
        "--lease-ms",
        "1000",
    ];
    let crashed = airlock_crashing(&data, Some("after_invoke"), &worker);
    if crashed == Some(0) {
        // Not expected; say what the store holds, to find out why.
        let (_, runs) = airlock(&data, &["--tenant", "acme", "runs", "list"]);
        let (_, approvals) = airlock(&data, &["--tenant", "acme", "approvals", "get", &approval]);
        panic!("the worker was to die after the effect; runs {runs}; approval {approvals}");
    }
    // The restarted worker reclaims the run once the dead one's lease (1 s) runs out.
    assert_eq!(airlock_crashing(&data, None, &worker), Some(0));
    let uncertain = receiver.wait_for("/uncertain", 1);
    assert_signed(&uncertain[0]);
    let notice = uncertain[0].json();
    assert_eq!(notice["type"], "tool.call.uncertain");
    assert_eq!(notice["run_id"], run.as_str());
    assert_eq!(notice["principal_id"], "alice");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(receiver.at("/uncertain").len(), 1, "sent once");
    drop((first, second));
}

#[test]
fn a_worker_tells_of_the_approval_its_run_asked_for_before_it_exits() {
    let (dir, data, receiver, target) = scene(SECRET);
    target("/worker", "json", "approval.requested");
    let script = common::write_script(dir.path(), "x");
    let (code, submitted) = airlock(
        &data,
        &[
            "--tenant",
            "acme",
            "--principal",
            "alice",
            "run",
            "submit",
            script.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(code, 0, "{submitted}");
    assert_eq!(submitted["status"], "QUEUED");
    // The worker parks the run and, stopping once idle, sends what is due in a last round.
    let (code, summary) = airlock(&data, &["worker", "--until-idle"]);
    assert_eq!(code, 0, "{summary}");
    assert_eq!(summary["parked_for_approval"], 1, "{summary}");
    let got = receiver.at("/worker");
    assert_eq!(got.len(), 1, "delivered before the worker exited: {got:?}");
    assert_signed(&got[0]);
    assert_eq!(got[0].json()["run_id"], submitted["run_id"]);
}

#[test]
fn an_mcp_gateway_process_notifies_too() {
    let (dir, data, receiver, target) = scene(SECRET);
    target("/gateway", "json", "approval.requested");
    let run = common::waiting_run(&data, dir.path(), "x");
    // A gateway whose one upstream never answers: only the notifier has work to do.
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        "schema_version = 1\ntenant_id = \"acme\"\nprincipal_id = \"alice\"\nscopes = []\n\
         origin_trust = \"user\"\n[servers.quiet]\ncommand = \"sleep\"\nargs = [\"60\"]\n",
    )
    .expect("gateway file");
    let mut gateway = std::process::Command::new(common::BIN)
        .arg("--data-dir")
        .arg(&data)
        .args(["mcp", "serve", "--config"])
        .arg(&config)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("mcp serve starts");
    let got = receiver.wait_for("/gateway", 1);
    let _ = gateway.kill();
    let _ = gateway.wait();
    assert_signed(&got[0]);
    assert_eq!(got[0].json()["run_id"], run.as_str());
}
