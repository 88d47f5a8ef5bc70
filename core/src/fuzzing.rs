//! Entry points shared by the runtime's cargo-fuzz targets and the corpus-replay tests, so CI
//! exercises exactly what the fuzzer ran. The policy gate's targets live in
//! `airlock_policy::fuzzing`.

use crate::planner::script::RunScript;
use crate::workspace::WsPath;

/// `ws_path`: arbitrary bytes as a workspace path (SPEC §12.2). Parsing must never panic, and an
/// accepted path is the input exactly: its components, joined with `/`, give the input back
/// (parsing rejects, it never normalizes).
pub fn ws_path(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(path) = WsPath::parse(text) else {
        return;
    };
    assert_eq!(
        path.components().join("/"),
        text,
        "§12.2: an accepted path is never normalized"
    );
    assert_eq!(path.is_root(), text.is_empty(), "only \"\" is the root");
    assert!(
        path.components()
            .iter()
            .all(|c| !matches!(c.as_str(), "" | "." | "..") && c.len() <= 255 && !c.contains('\0')),
        "§12.2: every accepted component is valid"
    );
}

/// `run_script`: arbitrary bytes as a run script (SPEC §15). Parsing must never panic, and a
/// parsed script's stored form parses again to an equal script.
pub fn run_script(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(script) = RunScript::parse(text) else {
        return;
    };
    let stored = script.to_json();
    match RunScript::parse(&stored) {
        Ok(again) => assert_eq!(again, script, "a stored script reads back equal"),
        Err(error) => panic!("a stored script must parse again: {error}"),
    }
}
