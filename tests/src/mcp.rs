//! The MCP gateway's real peers for the end-to-end tests (SPEC §19.5, §19.6), as `.ci/mcp.sh`
//! installs them: the Python `mcp` SDK in CI's virtual environment `.ci/.venv`, and
//! server-filesystem and server-everything in the npm prefix `.ci/.mcp/npm`; plus the project's
//! own test server and client scripts under `tests/mcp/`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repository root")
}

/// A policy directory under `dir`: the shipped profile with `external_write` allowed (so a
/// gateway's external write is in flight at once, or waits only because of taint) and the
/// shipped hardline rules. Returns the directory, for `--policy-dir`.
pub fn policy_allowing_external_writes(dir: &Path) -> PathBuf {
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies).expect("policy dir");
    let shipped = repo().join("policies");
    let profile = std::fs::read_to_string(shipped.join("default.toml"))
        .expect("shipped profile")
        .replace(
            "[rules.external_write]\ndecision = \"require_approval\"",
            "[rules.external_write]\ndecision = \"allow\"",
        );
    assert!(profile.contains("[rules.external_write]\ndecision = \"allow\""));
    std::fs::write(policies.join("default.toml"), profile).expect("write profile");
    std::fs::copy(
        shipped.join("hardline.toml"),
        policies.join("hardline.toml"),
    )
    .expect("copy hardline");
    policies
}

/// Where the peers are.
pub struct Peers {
    /// `.ci/.venv`'s Python, which has the SDK.
    pub python: PathBuf,
    pub filesystem: PathBuf,
    pub everything: PathBuf,
    /// `tests/mcp/airlock_test_server.py`.
    pub test_server: PathBuf,
    /// `tests/mcp/client.py` (stdio scenarios).
    pub client: PathBuf,
    /// `tests/mcp/http_client.py` (Streamable HTTP scenarios).
    pub http_client: PathBuf,
}

/// What a test needs besides the SDK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The SDK only (the project's own test server is Python).
    Sdk,
    /// The SDK, Node.js and both npm servers.
    SdkAndNpmServers,
}

/// The installed peers, or `None` after a line on stderr naming what is missing and
/// `{test}` (a failure under `CI=true`, where `.ci/mcp.sh` must have installed them).
pub fn peers(test: &str, need: Need) -> Option<Peers> {
    let root = repo();
    let modules = root.join(".ci/.mcp/npm/node_modules/@modelcontextprotocol");
    let peers = Peers {
        python: root.join(".ci/.venv/bin/python"),
        filesystem: modules.join("server-filesystem/dist/index.js"),
        everything: modules.join("server-everything/dist/index.js"),
        test_server: root.join("tests/mcp/airlock_test_server.py"),
        client: root.join("tests/mcp/client.py"),
        http_client: root.join("tests/mcp/http_client.py"),
    };
    let sdk = peers.python.exists()
        && Command::new(&peers.python)
            .args(["-c", "import mcp"])
            .output()
            .is_ok_and(|o| o.status.success());
    let mut checks = vec![("the Python mcp SDK in .ci/.venv", sdk)];
    if need == Need::SdkAndNpmServers {
        let node = Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        checks.extend([
            ("node", node),
            (
                "server-filesystem in .ci/.mcp/npm",
                peers.filesystem.exists(),
            ),
            (
                "server-everything in .ci/.mcp/npm",
                peers.everything.exists(),
            ),
        ]);
    }
    let missing: Vec<&str> = checks
        .iter()
        .filter(|(_, present)| !present)
        .map(|(what, _)| *what)
        .collect();
    if missing.is_empty() {
        return Some(peers);
    }
    crate::skip::skip_or_fail(
        test,
        &format!("missing {}", missing.join(", ")),
        "`bash .ci/mcp.sh install` (the pinned Python SDK and npm servers, into .ci/)",
        "under CI=true the MCP peers are required",
    );
    None
}

/// The `[servers.test]` tables of a gateway file: the project's test server, read-only unless
/// configured, whose `append` is a non-idempotent external write of one line per call to
/// `ledger`.
pub fn test_server_tables(python: &Path, ledger: &Path) -> String {
    format!(
        r#"[servers.test]
command = "{python}"
args = ["{server}"]
env = {{ AIRLOCK_TEST_LEDGER = "{ledger}" }}
default = {{ side_effect = "none", idempotency = "read_only", risk = "low" }}

[servers.test.tools.append]
side_effect = "external_write"
idempotency = "non_idempotent"
risk = "medium"
"#,
        python = python.display(),
        server = repo().join("tests/mcp/airlock_test_server.py").display(),
        ledger = ledger.display(),
    )
}

/// The pids of every test-server process started with `ledger` as its ledger: each appends
/// its pid to `{ledger}.pids` when it starts (`tests/mcp/airlock_test_server.py`).
pub fn test_server_pids(ledger: &Path) -> Vec<String> {
    let mut pids = ledger.as_os_str().to_owned();
    pids.push(".pids");
    std::fs::read_to_string(&pids)
        .unwrap_or_else(|e| panic!("no test server wrote its pid to {pids:?}: {e}"))
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Waits until process `pid` has ended (gone, or a zombie: its parent is gone and reaping is
/// init's); `Err` with its state when it still runs after `within`.
pub fn wait_until_ended(pid: &str, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(") ")
                    .and_then(|(_, rest)| rest.chars().next())
            });
        if matches!(state, None | Some('Z' | 'X')) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("process {pid} still runs (state {state:?})"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
