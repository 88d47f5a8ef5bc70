//! What the tests of `airlock serve` share: the binary, one command's exit code and last JSON
//! line, a running server, and one HTTP request to it.
#![allow(dead_code)] // each test binary uses its own part

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_airlock");

/// `airlock --data-dir DATA ARGS…` to its end: the exit code and the last stdout line as JSON.
pub fn airlock(data: &Path, args: &[&str]) -> (i32, Value) {
    let output = Command::new(BIN)
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .output()
        .expect("airlock runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    (output.status.code().unwrap_or(-1), value)
}

/// `airlock GLOBAL… --tenant acme --principal ops --scopes SCOPES tokens create`: the token's
/// text.
pub fn token(data: &Path, global: &[&str], scopes: &str) -> String {
    let mut args = global.to_vec();
    args.extend([
        "--tenant",
        "acme",
        "--principal",
        "ops",
        "--scopes",
        scopes,
        "tokens",
        "create",
    ]);
    let (code, created) = airlock(data, &args);
    assert_eq!(code, 0, "{created}");
    created["token"].as_str().expect("token").to_owned()
}

/// A run script of alice's in tenant acme whose one call, an external write of `content`,
/// waits for approval under the shipped policy; written to `dir/script.json`.
pub fn write_script(dir: &Path, content: &str) -> std::path::PathBuf {
    let script = dir.join("script.json");
    std::fs::write(
        &script,
        serde_json::json!({"schema_version": 1, "tenant_id": "acme", "principal_id": "alice",
            "principal_scopes": ["demo.write"], "origin_trust": "user",
            "steps": [{"calls": [{"call_id": "c1", "tool": "demo.external_write",
                "arguments": {"destination": "demo", "content": content},
                "argument_trust": {"destination": "user", "content": "user"}}]}]})
        .to_string(),
    )
    .expect("script");
    script
}

/// Submits [`write_script`]'s run with `--inline`: it parks; answers its id.
pub fn waiting_run(data: &Path, dir: &Path, content: &str) -> String {
    let script = write_script(dir, content);
    let (code, submitted) = airlock(
        data,
        &[
            "--tenant",
            "acme",
            "--principal",
            "alice",
            "run",
            "submit",
            script.to_str().expect("utf-8"),
            "--inline",
        ],
    );
    assert_eq!(code, 0, "{submitted}");
    assert_eq!(submitted["status"], "WAITING_FOR_APPROVAL");
    submitted["run_id"].as_str().expect("run").to_owned()
}

/// `airlock --data-dir DATA GLOBAL… serve --listen 127.0.0.1:0 --no-worker SERVE…`, running
/// until dropped (killed) or [`Server::terminate`]d; `addr` is where it listens.
pub struct Server {
    pub child: Child,
    pub addr: String,
}

impl Server {
    pub fn start(data: &Path, global: &[&str], serve: &[&str]) -> Server {
        let mut child = Command::new(BIN)
            .arg("--data-dir")
            .arg(data)
            .args(global)
            .args(["serve", "--listen", "127.0.0.1:0", "--no-worker"])
            .args(serve)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut first = String::new();
        BufReader::new(stdout)
            .read_line(&mut first)
            .expect("the listening line");
        let line: Value = serde_json::from_str(&first).expect("JSON");
        assert_eq!(line["worker"], false, "{line}");
        let addr = line["listening"]
            .as_str()
            .unwrap_or_else(|| panic!("not listening: {line}"))
            .to_owned();
        Server { child, addr }
    }

    /// SIGTERM, then its exit code (within 20 s).
    pub fn terminate(mut self) -> i32 {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status.code().unwrap_or(-1);
            }
            assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An answer: status, `WWW-Authenticate` (if any), body as JSON (`null` if it is not).
pub struct Answer {
    pub status: u16,
    pub challenge: Option<String>,
    pub body: Value,
}

/// One HTTP/1.1 request on a fresh connection.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Answer {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let body = body.map(Value::to_string).unwrap_or_default();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let (head, body) = response.split_once("\r\n\r\n").expect("a response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let challenge = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("www-authenticate")
            .then(|| value.trim().to_owned())
    });
    Answer {
        status,
        challenge,
        body: serde_json::from_str(body).unwrap_or(Value::Null),
    }
}

/// [`request`]'s status and body.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let answer = request(addr, method, path, token, body);
    (answer.status, answer.body)
}
