//! Replays the committed cargo-fuzz seed corpora of the runtime's targets (`fuzz/corpus/<target>/`;
//! the policy gate's are replayed by `airlock-policy`'s own test) through the very entry
//! points the fuzz targets call, so CI covers every seed and every crash regression input without
//! installing cargo-fuzz. A panic in an entry point fails the test and names the file.

#[path = "../policy/tests/common/corpus.rs"]
mod corpus;

use corpus::{corpus, fuzz_dir, replay};

#[test]
fn ws_path_corpus_replays_clean() {
    replay("ws_path", airlock_core::fuzzing::ws_path);
}

#[test]
fn run_script_corpus_replays_clean() {
    replay("run_script", airlock_core::fuzzing::run_script);
}

/// The `ws_path` seeds are named for what §12.2 does with them, so the replay also checks the
/// verdicts: `accept-*` parse, `reject-*` do not.
#[test]
fn ws_path_seeds_get_the_verdict_their_names_state() {
    use airlock_core::workspace::WsPath;
    for path in corpus("ws_path") {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let data = std::fs::read(&path).expect("readable corpus file");
        let accepted = std::str::from_utf8(&data).is_ok_and(|text| WsPath::parse(text).is_ok());
        if name.starts_with("accept-") {
            assert!(accepted, "{name} should be accepted");
        } else if name.starts_with("reject-") {
            assert!(!accepted, "{name} should be rejected");
        }
    }
}

/// The §15 example and the other valid seeds parse, so the replay exercises the round trip.
#[test]
fn run_script_valid_seeds_parse() {
    use airlock_core::planner::script::RunScript;
    let dir = fuzz_dir().join("corpus").join("run_script");
    for name in [
        "spec-15-example.json",
        "minimal.json",
        "with-session-id.json",
        "with-version.json",
        "float-arguments.json",
        "nested-arguments.json",
        "no-limits-default.json",
        "duplicate-scopes.json",
        "null-version.json",
        "crash-float-roundtrip.json",
    ] {
        let text = std::fs::read_to_string(dir.join(name)).expect("readable seed");
        let script = RunScript::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            RunScript::parse(&script.to_json()).as_ref(),
            Ok(&script),
            "{name}"
        );
    }
}

/// Regression for the first `run_script` fuzz crash: serde_json's default float parser may be
/// one ulp off, so `123.5678901234567890` parsed to a number whose shortest form,
/// `123.56789012345679`, parsed back to a different one and a stored script did not read back
/// equal. The workspace enables serde_json's `float_roundtrip` feature; this pins it.
#[test]
fn a_float_argument_survives_the_stored_round_trip() {
    use airlock_core::planner::script::RunScript;
    let text = r#"{"schema_version":1,"tenant_id":"a","principal_id":"b","principal_scopes":[],
        "steps":[{"calls":[{"call_id":"c1","tool":"t.x","arguments":{"z":123.5678901234567890}}]}]}"#;
    let script = RunScript::parse(text).expect("the script parses");
    let z = &script.steps[0].calls[0].arguments["z"];
    assert_eq!(z.as_f64(), Some(123.567_890_123_456_79));
    assert_eq!(RunScript::parse(&script.to_json()).as_ref(), Ok(&script));
}
