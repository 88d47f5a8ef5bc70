//! `airlock policy …` and the CLI's shared error paths through the real binary: output, exit
//! codes and error reporting (SPEC Appendix A, §7.4). Snapshots pin output a human reviewed.

use airlock_core::policy::shipped::SHIPPED_VERSION;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn airlock(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("airlock starts");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(stdin)
        .expect("stdin accepts input");
    child.wait_with_output().expect("airlock finishes")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

fn shipped_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../policies")
}

/// A policy dir holding the shipped files with one of them edited.
fn edited_policy_dir(name: &str, file: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("policy-{name}"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for shipped in ["default.toml", "hardline.toml"] {
        let text = std::fs::read_to_string(shipped_dir().join(shipped)).expect("shipped file");
        let text = if shipped == file { edit(text) } else { text };
        std::fs::write(dir.join(shipped), text).expect("write policy file");
    }
    dir
}

fn dir_arg(dir: &Path) -> String {
    dir.display().to_string()
}

/// The first conformance action, as JSON text.
fn sample_action() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/conformance/policy-cases.jsonl");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("conformance data missing at {}: {e}", path.display()));
    let case: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("one case")).expect("case is JSON");
    case["action"].to_string()
}

#[test]
fn version_prints_the_shipped_label() {
    let output = airlock(&["policy", "version"], b"");
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(stdout(&output), format!("{SHIPPED_VERSION}\n"));
}

#[test]
fn check_reports_hashes_and_near_miss_verdicts() {
    let output = airlock(&["policy", "check"], b"");
    assert_eq!(output.status.code(), Some(0), "stderr: {}", stderr(&output));
    insta::assert_snapshot!(stdout(&output));
}

#[test]
fn check_json_prints_only_the_object() {
    let output = airlock(&["policy", "check", "--json"], b"");
    assert_eq!(output.status.code(), Some(0));
    let value: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("one JSON object");
    // The hashes are core's over the embedded files (their values are pinned in core's
    // loader_rows); the CLI must print exactly those.
    let shipped = airlock_core::policy::Ruleset::shipped().expect("the shipped policy loads");
    assert_eq!(value["policy_version"], SHIPPED_VERSION);
    assert_eq!(value["profile_sha256"], shipped.version.profile_sha256);
    assert_eq!(value["hardline_sha256"], shipped.version.hardline_sha256);
    assert_eq!(stdout(&output).lines().count(), 1);
}

#[test]
fn policy_dir_with_the_shipped_files_gives_the_shipped_version() {
    let output = airlock(
        &[
            "policy",
            "version",
            "--policy-dir",
            &dir_arg(&shipped_dir()),
        ],
        b"",
    );
    assert_eq!(stdout(&output), format!("{SHIPPED_VERSION}\n"));
}

#[test]
fn broken_profile_exits_3_naming_the_profile() {
    let dir = edited_policy_dir("broken-profile", "default.toml", |t| {
        t.replace("default_effect = \"deny\"", "default_effect = \"allow\"")
    });
    let output = airlock(&["policy", "check", "--policy-dir", &dir_arg(&dir)], b"");
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(
        stderr(&output),
        "error: profile: default_effect must fail closed\n"
    );
    assert_eq!(
        stdout(&output),
        "{\"error\":{\"code\":\"policy_load\",\"message\":\"profile: default_effect must fail closed\"}}\n",
        "Appendix A: the error object on stdout"
    );
}

#[test]
fn broken_hardline_exits_3_naming_the_hardline_file() {
    let dir = edited_policy_dir("broken-hardline", "hardline.toml", |t| {
        t.replace("near_miss = \"rm -rf ./build\"", "near_miss = \"rm -rf /\"")
    });
    let output = airlock(
        &["policy", "eval", "--policy-dir", &dir_arg(&dir)],
        sample_action().as_bytes(),
    );
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(
        stderr(&output),
        "error: hardline: destructive_root_delete: rule matches its own near_miss\n"
    );
    let error: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("one object");
    assert_eq!(error["error"]["code"], "policy_load");
}

#[test]
fn unparsable_policy_file_exits_3() {
    let dir = edited_policy_dir("not-toml", "default.toml", |t| format!("{t}\n[[[ nonsense"));
    let output = airlock(&["policy", "version", "--policy-dir", &dir_arg(&dir)], b"");
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).starts_with("error: profile: invalid TOML: "),
        "{}",
        stderr(&output)
    );
}

#[test]
fn missing_policy_file_exits_3() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("policy-empty");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let output = airlock(&["policy", "check", "--policy-dir", &dir_arg(&dir)], b"");
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).starts_with("error: profile: cannot read '"),
        "{}",
        stderr(&output)
    );
    let error: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("one object");
    assert_eq!(error["error"]["code"], "policy_load");
}

#[test]
fn a_store_command_with_broken_policy_files_exits_3_with_the_error_object() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("policy-empty-store");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let data = tempfile::tempdir().expect("data dir");
    let output = airlock(
        &[
            "--data-dir",
            &dir_arg(data.path()),
            "approvals",
            "list",
            "--policy-dir",
            &dir_arg(&dir),
        ],
        b"",
    );
    assert_eq!(output.status.code(), Some(3));
    let error: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("one object");
    assert_eq!(error["error"]["code"], "policy_load");
}

#[test]
fn usage_errors_exit_2_with_the_error_object() {
    for args in [
        &["approvals", "list", "--limit=-1"][..],
        &["no-such-command"][..],
        &["worker", "--concurrency", "many"][..],
    ] {
        let output = airlock(args, b"");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let error: serde_json::Value =
            serde_json::from_str(&stdout(&output)).expect("one object on stdout");
        assert_eq!(error["error"]["code"], "invalid_argument", "{args:?}");
        assert!(
            stderr(&output).contains("--help"),
            "clap's usage hint stays on stderr"
        );
    }
    let missing = airlock(
        &[
            "invocations",
            "settle",
            "0190a6f1-2b3c-7d4e-8f90-123456789abc",
            "--outcome",
            "succeeded",
        ],
        b"",
    );
    let error: serde_json::Value = serde_json::from_str(&stdout(&missing)).expect("object");
    assert_eq!(
        error["error"]["message"],
        "the following required arguments were not provided: --note <NOTE>",
        "the missing flag is named"
    );
    let help = airlock(&["--help"], b"");
    assert_eq!(help.status.code(), Some(0));
    assert!(stdout(&help).contains("Usage"));
}

#[test]
fn a_command_without_its_subcommand_is_a_usage_error_with_an_error_message() {
    for args in [&[][..], &["runs"][..], &["approvals"][..]] {
        let output = airlock(args, b"");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let error: serde_json::Value =
            serde_json::from_str(&stdout(&output)).expect("one object on stdout");
        assert_eq!(
            error["error"]["message"], "a subcommand is required; see --help",
            "{args:?}: not the command's description"
        );
    }
}

#[test]
fn invalid_arguments_are_refused_before_any_store_is_opened_or_created() {
    // Exit 2 (invalid input), not 4 (no store), and nothing is created.
    let data = tempfile::tempdir().expect("data dir");
    let data_dir = dir_arg(&data.path().join("never"));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/example-run.json");
    let script = script.to_str().expect("utf-8");
    for args in [
        vec!["approvals", "list", "--limit", "0"],
        vec!["approvals", "list", "--limit", "101"],
        vec![
            "invocations",
            "settle",
            "0190a6f1-2b3c-7d4e-8f90-123456789abc",
            "--outcome",
            "maybe",
            "--note",
            "x",
        ],
        vec!["--scopes", "Bad", "run", "submit", script],
    ] {
        let mut all = vec!["--data-dir", data_dir.as_str()];
        all.extend(&args);
        let output = airlock(&all, b"");
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stdout(&output)
        );
        let error: serde_json::Value =
            serde_json::from_str(&stdout(&output)).expect("one object on stdout");
        assert_eq!(error["error"]["code"], "invalid_argument", "{args:?}");
        assert!(
            !data.path().join("never").exists(),
            "{args:?} created the data dir"
        );
    }
}

#[test]
fn empty_or_unprintable_identities_and_loose_ids_are_invalid_input() {
    let data = tempfile::tempdir().expect("data dir");
    let data_dir = dir_arg(data.path());
    for (args, message) in [
        (
            vec!["--principal", "", "approvals", "list"],
            "--principal must be 1..=128 characters",
        ),
        (
            vec!["--tenant", "ac\tme", "approvals", "list"],
            "--tenant must not contain control characters",
        ),
        (
            vec!["worker", "--worker-id", ""],
            "--worker-id must be 1..=128 characters",
        ),
        (
            vec!["approvals", "get", "0190A6F1-2B3C-7D4E-8F90-123456789ABC"],
            "invalid value '0190A6F1-2B3C-7D4E-8F90-123456789ABC' for '<ID>': expected a lowercase hyphenated UUID, got '0190A6F1-2B3C-7D4E-8F90-123456789ABC'",
        ),
        (
            vec![
                "runs",
                "show",
                "urn:uuid:0190a6f1-2b3c-7d4e-8f90-123456789abc",
            ],
            "invalid value 'urn:uuid:0190a6f1-2b3c-7d4e-8f90-123456789abc' for '<RUN>': expected a lowercase hyphenated UUID, got 'urn:uuid:0190a6f1-2b3c-7d4e-8f90-123456789abc'",
        ),
    ] {
        let mut full = vec!["--data-dir", data_dir.as_str()];
        full.extend(args.iter().copied());
        let output = airlock(&full, b"");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let error: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("object");
        assert_eq!(error["error"]["code"], "invalid_argument", "{args:?}");
        assert_eq!(error["error"]["message"], message, "{args:?}");
    }
    // Spaces after the commas of --scopes are not part of the scope. (A worker with nothing to
    // do creates the store, which listing requires.)
    let created = airlock(&["--data-dir", &data_dir, "worker", "--until-idle"], b"");
    assert_eq!(created.status.code(), Some(0));
    let output = airlock(
        &[
            "--data-dir",
            &data_dir,
            "--scopes",
            "approval.read, run.read",
            "approvals",
            "list",
        ],
        b"",
    );
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
}

#[test]
fn eval_reads_one_action_from_stdin() {
    let output = airlock(&["policy", "eval"], sample_action().as_bytes());
    assert_eq!(output.status.code(), Some(0), "stderr: {}", stderr(&output));
    assert_eq!(
        stdout(&output),
        format!(
            "{{\"decision\":\"allow\",\"reason_code\":\"policy.matrix.none\",\"explanation\":\"The default profile evaluated none.\",\"policy_version\":\"{SHIPPED_VERSION}\",\"modified_arguments\":null}}\n"
        )
    );
}

#[test]
fn eval_of_an_invalid_action_prints_the_error_object_and_exits_2() {
    let output = airlock(&["policy", "eval", "-"], b"{\"kind\":\"tool_call\"}");
    assert_eq!(output.status.code(), Some(2));
    let value: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("error object");
    assert_eq!(value["error"]["code"], "invalid_action");
    assert!(
        value["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("missing field")),
        "{value}"
    );
}

#[test]
fn eval_jsonl_answers_every_line_and_exits_2_after_a_bad_one() {
    let action = sample_action();
    let mut unknown_field: serde_json::Value = serde_json::from_str(&action).expect("action");
    unknown_field["surprise"] = serde_json::Value::Bool(true);
    let input = format!("{action}\nnot json\n{unknown_field}\n\n\u{0}\n{action}\n");
    let output = airlock(&["policy", "eval", "--jsonl"], input.as_bytes());
    assert_eq!(output.status.code(), Some(2));
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 6, "one answer per input line");
    insta::assert_snapshot!(text);
    assert_eq!(stderr(&output), "error: 4 line(s) were not valid actions\n");
}

#[test]
fn eval_jsonl_counts_lines_the_same_way_at_every_length() {
    // A newline ends a line: no input has no lines, "\n" one blank line, "\n\n" two.
    for (input, answers) in [("", 0), ("\n", 1), ("\n\n", 2), ("\r\n", 1)] {
        let output = airlock(&["policy", "eval", "--jsonl"], input.as_bytes());
        let text = stdout(&output);
        assert_eq!(text.lines().count(), answers, "{input:?}: {text}");
        let expected_exit = if answers == 0 { 0 } else { 2 };
        assert_eq!(output.status.code(), Some(expected_exit), "{input:?}");
        for (index, line) in text.lines().enumerate() {
            let error: serde_json::Value = serde_json::from_str(line).expect("an error object");
            assert_eq!(error["error"]["code"], "invalid_action");
            assert!(
                error["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(&format!("line {}: ", index + 1))),
                "{line}"
            );
        }
    }
}

#[test]
fn eval_jsonl_streams_a_file_larger_than_its_buffers_and_keeps_answers_aligned() {
    // About 140 KB, so lines cross the 64 KiB read buffer's edges; CRLF endings and bad lines
    // at the first, a middle and the last position.
    let action = sample_action();
    let bad = [1usize, 97, 200];
    let mut input = String::new();
    for n in 1..=200 {
        input.push_str(if bad.contains(&n) {
            "{\"kind\":"
        } else {
            &action
        });
        input.push_str(if n % 2 == 0 { "\r\n" } else { "\n" });
    }
    assert!(input.len() > 2 * 65_536, "{}", input.len());
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("actions.jsonl");
    std::fs::write(&path, &input).expect("write input");
    let path = path.to_str().expect("UTF-8 path");
    let output = airlock(&["policy", "eval", "--jsonl", path], b"");
    assert_eq!(output.status.code(), Some(2));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 200);
    for (index, line) in lines.iter().enumerate() {
        let n = index + 1;
        if bad.contains(&n) {
            assert!(line.contains(&format!("\"line {n}: ")), "{n}: {line}");
        } else {
            assert!(line.starts_with("{\"decision\":\"allow\""), "{n}: {line}");
        }
    }
    assert_eq!(stderr(&output), "error: 3 line(s) were not valid actions\n");
}

#[test]
fn eval_of_a_missing_file_is_invalid_input() {
    let output = airlock(&["policy", "eval", "/nonexistent/airlock-action.json"], b"");
    assert_eq!(output.status.code(), Some(2));
    assert!(stdout(&output).starts_with("{\"error\":{\"code\":\"invalid_argument\""));
}

#[test]
fn usage_errors_exit_2() {
    let output = airlock(&["policy", "frobnicate"], b"");
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("unrecognized subcommand"));
}

#[test]
fn output_that_cannot_be_written_ends_with_exit_4_not_a_panic() {
    let data = tempfile::tempdir().expect("data dir");
    let data_dir = dir_arg(data.path());
    let created = airlock(&["--data-dir", &data_dir, "worker", "--until-idle"], b"");
    assert_eq!(created.status.code(), Some(0), "a worker creates the store");
    for args in [
        vec!["approvals", "list"],
        vec!["policy", "version"],
        vec!["approvals", "get", "not-a-uuid"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let output = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .arg("--data-dir")
            .arg(data.path())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(full)
            .stderr(Stdio::piped())
            .output()
            .expect("airlock runs");
        assert_eq!(output.status.code(), Some(4), "{args:?}: {output:?}");
        assert!(
            stderr(&output).contains("error: cannot write output: "),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn commands_on_stored_records_refuse_a_data_dir_without_a_store_and_create_nothing() {
    let parent = tempfile::tempdir().expect("temp dir");
    let missing = parent.path().join("typo");
    for args in [
        vec!["approvals", "list"],
        vec!["approvals", "expire"],
        vec!["invocations", "uncertain"],
        vec!["runs", "show", "0190a6f1-2b3c-7d4e-8f90-123456789abc"],
    ] {
        let mut full = vec!["--data-dir", missing.to_str().expect("utf-8")];
        full.extend(args.iter().copied());
        let output = airlock(&full, b"");
        assert_eq!(output.status.code(), Some(4), "{args:?}");
        let error: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("object");
        assert_eq!(error["error"]["code"], "storage", "{args:?}");
        assert!(
            error["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("no store at")),
            "{error}"
        );
        assert!(!missing.exists(), "{args:?} created the data dir");
    }
}
