//! The README's by-hand walkthrough, typed as a newcomer would type it (adapter acceptance item
//! 5: "a new user following the README gets the same"). The commands are read from README.md
//! itself, so a walkthrough that drifts from the binary, or names a file the repository does not
//! ship, fails here.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use airlock_core::testing::{GRANTED_APPROVAL_EVENTS, assert_subsequence};
use airlock_e2e::*;
use serde_json::Value;

const CARGO_RUN: &str = "cargo run -q -p airlock -- ";

/// The shell lines of the first `sh` block after the "The same by hand" paragraph.
fn walkthrough(readme: &str) -> Vec<String> {
    let start = readme
        .find("The same by hand")
        .expect("README has the by-hand walkthrough");
    let block = &readme[start..];
    let open = block.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let close = block[open..].find("```").expect("the block ends") + open;
    block[open..close]
        .lines()
        .map(|line| line.split(" #").next().unwrap_or(line).trim().to_owned())
        .filter(|line| !line.is_empty())
        .collect()
}

#[test]
fn the_by_hand_walkthrough_parks_approves_and_completes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let lines = walkthrough(&readme);
    let data = DataDir::new();
    let mut values: BTreeMap<&str, String> = BTreeMap::new();
    let mut outputs: Vec<(String, String)> = Vec::new();
    let mut commands = 0;
    for line in &lines {
        if let Some(dir) = line.strip_prefix("D=") {
            assert!(!dir.is_empty(), "D is set to a directory");
            continue;
        }
        let args = line
            .strip_prefix(CARGO_RUN)
            .unwrap_or_else(|| panic!("not a `{CARGO_RUN}` line: {line}"));
        let args: Vec<String> = args
            .split_whitespace()
            .map(|word| {
                let word = word.replace("$D", data.path().to_str().expect("utf-8"));
                match word.as_str() {
                    "<APPROVAL_ID>" | "<RUN_ID>" => values
                        .get(word.as_str())
                        .unwrap_or_else(|| panic!("{word} is used before any output gave it"))
                        .clone(),
                    _ => word,
                }
            })
            .collect();
        let output = Command::new(airlock_bin())
            .current_dir(root)
            .args(&args)
            .env_remove("AIRLOCK_CRASH_AT")
            .output()
            .expect("airlock runs");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert_eq!(
            output.status.code(),
            Some(0),
            "`{line}` failed: stdout {stdout} stderr {}",
            String::from_utf8_lossy(&output.stderr)
        );
        commands += 1;
        if args.iter().any(|a| a == "submit") {
            let submitted: Value = serde_json::from_str(&stdout).expect("submit prints JSON");
            values.insert(
                "<RUN_ID>",
                submitted["run_id"].as_str().expect("run_id").into(),
            );
        }
        if args.ends_with(&["approvals".to_owned(), "list".to_owned()]) {
            let page: Value = serde_json::from_str(&stdout).expect("list prints JSON");
            let items = page["items"].as_array().expect("items");
            assert_eq!(
                items.len(),
                1,
                "one pending approval after the park: {page}"
            );
            values.insert("<APPROVAL_ID>", items[0]["id"].as_str().expect("id").into());
        }
        outputs.push((line.clone(), stdout));
    }
    assert!(commands >= 6, "the walkthrough ran {commands} commands");

    let run = values.get("<RUN_ID>").expect("a run was submitted");
    assert_eq!(data.run_status(run), "COMPLETED");
    let (last, events) = outputs.last().expect("outputs");
    assert!(
        last.contains("runs events"),
        "the walkthrough ends on the audit trail"
    );
    let types: Vec<String> = events
        .lines()
        .map(|l| {
            let event: Value = serde_json::from_str(l).expect("an event per line");
            event["event_type"].as_str().expect("event_type").to_owned()
        })
        .collect();
    assert_subsequence(&types, &GRANTED_APPROVAL_EVENTS);
    assert_eq!(types.last().map(String::as_str), Some("run.completed"));
}
