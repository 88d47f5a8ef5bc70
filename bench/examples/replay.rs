//! `airlock policy replay` over a million recorded calls (issue 32 item 3: "fast enough for a
//! million recorded calls in minutes").
//!
//! Seeds a SQLite store with N recorded calls through the store's own API (a third each of
//! `math.calculate`, `workspace.write_text` with 200 bytes of content, and
//! `demo.external_write`; each row carrying what the shipped policy decides for it, as the
//! pipeline would have stored), then times the release binary's `policy replay --json` over it,
//! twice: under the shipped policy (nothing may change) and under a candidate that denies
//! `workspace_write` (a third must change, allow → deny). Prints wall and CPU seconds and calls
//! per second of each.
//!
//! ```sh
//! cargo build --release -p airlock
//! cd bench && cargo run --release --example replay -- ../target/release/airlock 1000000
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use airlock_core::invocation::replay::proposed_action;
use airlock_core::policy::{Ruleset, evaluate};
use airlock_core::store::Store;
use airlock_core::testing::fixtures::{sample_invocation, seed_run};
use airlock_core::time::Timestamp;
use airlock_core::vocab::{
    IdempotencyClass, InvocationStatus, RiskLevel, RunStatus, SideEffectClass, TargetKind,
};
use airlock_sqlite::SqliteStore;
use serde_json::{Value, json};

const BATCH: usize = 10_000;

fn main() {
    let mut args = std::env::args().skip(1);
    let binary = PathBuf::from(args.next().unwrap_or_else(|| {
        eprintln!("usage: replay PATH_TO_AIRLOCK [CALLS]");
        std::process::exit(2);
    }));
    let calls: usize = args
        .next()
        .map(|s| s.parse().expect("CALLS is a number"))
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    seed(&dir.path().join("airlock.sqlite3"), calls);
    let size = std::fs::metadata(dir.path().join("airlock.sqlite3"))
        .map(|m| m.len())
        .unwrap_or(0);
    println!(
        "seeded {calls} calls in {:.1} s ({:.0} MB)",
        started.elapsed().as_secs_f64(),
        size as f64 / 1e6
    );
    let candidate = candidate_dir(dir.path());
    for (name, policy) in [("shipped", None), ("candidate", Some(&candidate))] {
        let (table, wall, cpu) = replay(&binary, dir.path(), policy);
        println!(
            "{name:>9}: {} compared, {} changed, {wall:.1} s wall, {cpu:.1} s CPU, {:.0} calls/s",
            table["compared"],
            table["changed"],
            calls as f64 / wall
        );
        let expected_changed = if policy.is_some() { calls.div_ceil(3) } else { 0 };
        assert_eq!(table["compared"], calls, "{table}");
        assert_eq!(table["changed"], expected_changed, "{table}");
    }
}

/// One recorded call of each kind, in turn.
fn call(n: usize) -> (&'static str, SideEffectClass, IdempotencyClass, Value) {
    match n % 3 {
        0 => (
            "workspace.write_text",
            SideEffectClass::WorkspaceWrite,
            IdempotencyClass::Idempotent,
            json!({"path": format!("notes/f{n}.txt"), "content": "x".repeat(200)}),
        ),
        1 => (
            "math.calculate",
            SideEffectClass::None,
            IdempotencyClass::ReadOnly,
            json!({"expression": format!("{n} + 1")}),
        ),
        _ => (
            "demo.external_write",
            SideEffectClass::ExternalWrite,
            IdempotencyClass::NonIdempotent,
            json!({"destination": "bench", "content": format!("message {n}")}),
        ),
    }
}

fn seed(path: &Path, calls: usize) {
    let store = SqliteStore::open(path).expect("open the store");
    let shipped = Ruleset::shipped().expect("the shipped policy");
    let run = seed_run(&store, 1, RunStatus::Completed);
    let t0 = Timestamp::from_micros(1_780_000_000_000_000);
    for start in (0..calls).step_by(BATCH) {
        let rows: Vec<_> = (start..(start + BATCH).min(calls))
            .map(|n| {
                let (tool, side_effect, idempotency, arguments) = call(n);
                let mut row = sample_invocation(
                    n as u128 + 1,
                    &run,
                    n as u32 + 1,
                    &format!("c{n}"),
                    InvocationStatus::Succeeded,
                );
                row.tool_name = tool.to_owned();
                row.side_effect = side_effect;
                row.idempotency_class = idempotency;
                row.risk = RiskLevel::Medium;
                row.required_scopes = Vec::new();
                row.arguments = airlock_core::canonical::to_canonical_string(&arguments);
                row.normalized_arguments_hash = airlock_core::canonical::arguments_hash(&arguments);
                row.effective_arguments_hash = row.normalized_arguments_hash.clone();
                row.raw_arguments = arguments;
                row.target_kind = Some(TargetKind::InProcess);
                row.created_at = t0.saturating_add_micros(n as i64);
                row.updated_at = row.created_at;
                let action = proposed_action(&row).expect("a whole action");
                row.policy_decision = Some(evaluate(&action, &shipped));
                row
            })
            .collect();
        store
            .transact(|tx| {
                for row in &rows {
                    tx.insert_invocation(row)?;
                }
                Ok(())
            })
            .expect("seed a batch");
    }
}

/// The shipped policy files with `workspace_write` denied.
fn candidate_dir(data: &Path) -> PathBuf {
    let dir = data.join("candidate");
    std::fs::create_dir_all(&dir).expect("candidate dir");
    let profile = std::str::from_utf8(airlock_core::policy::shipped::DEFAULT_PROFILE)
        .expect("UTF-8 profile")
        .replace(
            "[rules.workspace_write]\ndecision = \"allow\"\ncondition = \"path_inside_workspace\"\notherwise = \"deny\"",
            "[rules.workspace_write]\ndecision = \"deny\"",
        );
    std::fs::write(dir.join("default.toml"), profile).expect("candidate profile");
    std::fs::write(dir.join("hardline.toml"), airlock_core::policy::shipped::HARDLINE)
        .expect("hardline");
    dir
}

/// `policy replay --json` in a child; its table, wall seconds and CPU seconds (user + system of
/// the child, from getrusage).
fn replay(binary: &Path, data: &Path, policy: Option<&PathBuf>) -> (Value, f64, f64) {
    let before = children_cpu();
    let started = Instant::now();
    let mut command = Command::new(binary);
    command.arg("--data-dir").arg(data);
    if let Some(policy) = policy {
        command.arg("--policy-dir").arg(policy);
    }
    let output = command
        .args(["policy", "replay", "--json"])
        .env_remove("AIRLOCK_STORE")
        .output()
        .expect("airlock runs");
    let wall = started.elapsed().as_secs_f64();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let table: Value = serde_json::from_slice(&output.stdout).expect("one JSON table");
    (table, wall, children_cpu() - before)
}

fn children_cpu() -> f64 {
    // SAFETY: getrusage writes one struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}
