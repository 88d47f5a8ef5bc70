//! §16 #37: `WsPath::parse` accepts and rejects exactly per SPEC §12.2 (checked against an
//! independent model of the four rules), and no workspace API yields a host path: every entry a
//! listing returns is a relative path that parses again.

use std::sync::Arc;

use airlock_core::ids::RunId;
use airlock_core::ports::{Workspace, WorkspaceError, WorkspaceFactory, WsPath};
use airlock_host::workspace::LocalWorkspaces;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use uuid::Uuid;

/// Fixed seed, no persistence: the same cases on every run.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x7773_5f70_6174_6873),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The four rules of §12.2, written from the text rather than from the implementation.
fn accepted_by_the_spec(s: &str) -> bool {
    // (1) NUL anywhere or a leading '/'.
    if s.bytes().any(|b| b == 0) || s.as_bytes().first() == Some(&b'/') {
        return false;
    }
    // (2) Exactly "" is the root.
    if s.is_empty() {
        return true;
    }
    // (3) No component "", "." or "..".
    let components: Vec<&str> = s.split('/').collect();
    if components
        .iter()
        .any(|c| c.is_empty() || *c == "." || *c == "..")
    {
        return false;
    }
    // (4) No component over 255 bytes, no path over 4096 bytes.
    components.iter().all(|c| c.len() <= 255) && s.len() <= 4096
}

/// Strings built from the characters that matter to the rules, plus long runs.
fn candidate() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => Just("/".to_owned()),
        3 => Just(".".to_owned()),
        2 => Just("..".to_owned()),
        1 => Just("\0".to_owned()),
        1 => Just("\\".to_owned()),
        4 => "[a-z]{1,4}",
        1 => Just("é".to_owned()),
        1 => Just(" ".to_owned()),
        1 => (250usize..260).prop_map(|n| "x".repeat(n)),
        1 => (1usize..3).prop_map(|n| "ab/".repeat(n * 700)),
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
}

/// Paths that should be accepted: one to four short components.
fn valid_path() -> impl Strategy<Value = String> {
    proptest::collection::vec("[a-zA-Z0-9_é\\\\ -]{1,6}(\\.[a-z]{1,3})?", 1..5)
        .prop_map(|components| components.join("/"))
        .prop_filter("not a dot component", |s| {
            s.split('/').all(|c| c != "." && c != "..")
        })
}

proptest! {
    #![proptest_config(config(2048))]

    #[test]
    fn parse_accepts_exactly_what_section_12_2_accepts(s in candidate()) {
        let parsed = WsPath::parse(&s);
        prop_assert_eq!(parsed.is_ok(), accepted_by_the_spec(&s), "{:?}", s);
        match parsed {
            Ok(path) => {
                // Never normalized: the components are the input, split.
                prop_assert_eq!(path.components().join("/"), s.clone());
                prop_assert_eq!(path.as_relative(), s.clone());
                prop_assert_eq!(path.is_root(), s.is_empty());
            }
            Err(error) => prop_assert_eq!(error, WorkspaceError::Escape),
        }
    }

    #[test]
    fn valid_paths_are_accepted_and_any_bad_component_is_not(
        s in valid_path(),
        bad in prop_oneof![Just(""), Just("."), Just(".."), Just("a\0b")],
        position in 0usize..5,
    ) {
        prop_assert!(WsPath::parse(&s).is_ok(), "{:?}", s);
        let mut components: Vec<&str> = s.split('/').collect();
        let at = position.min(components.len());
        components.insert(at, bad);
        let broken = components.join("/");
        prop_assert_eq!(WsPath::parse(&broken), Err(WorkspaceError::Escape), "{:?}", broken);
        let rooted = format!("/{s}");
        prop_assert_eq!(WsPath::parse(&rooted), Err(WorkspaceError::Escape));
    }
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn listings_return_relative_paths_that_parse_again(
        paths in proptest::collection::vec(valid_path(), 1..6),
    ) {
        let data = tempfile::tempdir().unwrap();
        let factory = LocalWorkspaces::new(data.path());
        let workspace: Arc<dyn Workspace> =
            factory.for_run("acme", RunId(Uuid::from_u128(5))).unwrap();
        for p in &paths {
            // A path may collide with an earlier file or directory; only success matters here.
            let _ = workspace.write(&WsPath::parse(p).unwrap(), p.as_bytes());
        }
        let host = data.path().to_str().unwrap().to_owned();
        let entries = workspace.list(&WsPath::parse("").unwrap(), true).unwrap();
        prop_assert!(!entries.is_empty());
        let mut previous: Option<String> = None;
        for entry in &entries {
            prop_assert!(!entry.path.starts_with('/'), "{:?}", entry.path);
            prop_assert!(!entry.path.contains(&host), "{:?}", entry.path);
            prop_assert!(WsPath::parse(&entry.path).is_ok(), "{:?}", entry.path);
            if let Some(previous) = &previous {
                prop_assert!(previous.as_bytes() < entry.path.as_bytes());
            }
            previous = Some(entry.path.clone());
        }
    }
}

#[test]
fn the_spec_examples() {
    for ok in ["notes/a.txt", "", "a\\b"] {
        assert!(WsPath::parse(ok).is_ok(), "{ok:?}");
    }
    for bad in [
        "../outside",
        "/etc/passwd",
        "a//b",
        "a/./b",
        "a/",
        "./a",
        "nul\0path",
    ] {
        assert_eq!(WsPath::parse(bad), Err(WorkspaceError::Escape), "{bad:?}");
    }
}
