//! What the tests of `airlock serve` share: the binary, and one command's exit code and last
//! JSON line.

use std::path::Path;
use std::process::Command;

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
