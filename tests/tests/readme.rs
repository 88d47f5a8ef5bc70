//! The by-hand walkthrough, typed as a newcomer would type it (adapter acceptance item 5: "a new
//! user following the README gets the same"). The commands are read from `docs/walkthrough.md`,
//! where the README links to, so a walkthrough that drifts from the binary, or names a file the
//! repository does not ship, fails here. They run `target/release/airlock`, the binary the
//! README's first command built (no second compile); here that is the binary under test. The
//! README's quick start is checked too: the two commands first, and on one screen.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use airlock_core::testing::{GRANTED_APPROVAL_EVENTS, assert_subsequence};
use airlock_e2e::*;
use serde_json::Value;

/// How every walkthrough line starts: the release binary the README's first command built.
const RELEASE_BIN: &str = "target/release/airlock ";

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
    let readme =
        std::fs::read_to_string(root.join("docs/walkthrough.md")).expect("docs/walkthrough.md");
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
            .strip_prefix(RELEASE_BIN)
            .unwrap_or_else(|| panic!("not a `{RELEASE_BIN}` line: {line}"));
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

/// Issue 27: the README opens with the two commands, fits its quick start (everything before the
/// first section) in 60 lines, and every page it links to exists.
#[test]
fn the_readme_quick_start_fits_one_screen_and_its_links_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let first_block = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a first sh block");
    let commands: Vec<&str> = first_block
        .lines()
        .map(|l| l.split(" #").next().unwrap_or(l).trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        commands,
        [
            "cargo run --release -p airlock -- demo",
            "cargo test --workspace"
        ],
        "exactly the two set-up commands, first"
    );
    let quick_start = readme
        .lines()
        .position(|l| l.starts_with("## "))
        .expect("reference sections follow the quick start");
    assert!(quick_start <= 60, "the quick start is {quick_start} lines");
    let mut links = 0;
    for target in readme
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
    {
        if target.starts_with('#') || target.starts_with("http") {
            continue;
        }
        links += 1;
        assert!(
            root.join(target).exists(),
            "README links to {target}, which is missing"
        );
    }
    assert!(links >= 5, "the README links to its docs pages ({links})");
}
