//! SPEC §24: the modules of every crate of the workspace form layers: no module reaches itself
//! through its imports (`airlock_e2e::layers` builds each crate's module graph from the text).

use airlock_e2e::layers::{Modules, cycles, edges, read_crate};
use airlock_e2e::mcp::repo;

/// The workspace's crates (their `src` directories), as `Cargo.toml`'s members list them.
fn crates() -> Vec<(String, std::path::PathBuf)> {
    let root = repo();
    let manifest =
        std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace manifest");
    let members = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members list");
    members
        .split('"')
        .skip(1)
        .step_by(2)
        .map(|member| (member.to_owned(), root.join(member).join("src")))
        .collect()
}

fn shown(members: &[String]) -> String {
    members
        .iter()
        .map(|m| if m.is_empty() { "(root)" } else { m.as_str() })
        .collect::<Vec<_>>()
        .join(" ↔ ")
}

/// No crate of the workspace has an import cycle: each one found is named with its members (the
/// crate root written `(root)`). Break one by moving a concept to the layer where it belongs.
#[test]
fn no_module_reaches_itself_in_any_crate() {
    let mut found = Vec::new();
    let mut read = 0;
    for (name, src) in crates() {
        let modules = read_crate(&src);
        assert!(!modules.is_empty(), "{name}: no sources read from {src:?}");
        read += modules.len();
        for cycle in cycles(&edges(&modules)) {
            found.push(format!("{name}: {}", shown(&cycle)));
        }
    }
    assert!(
        read > 150,
        "the scan must see the workspace's modules ({read})"
    );
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn a_planted_cycle_is_found_and_named() {
    let modules: Modules = [
        ("", "mod a; mod b; mod c;"),
        ("a", "use crate::b::Thing;"),
        ("b", "use super::c::{Other, deeper::X};"),
        ("c", "pub fn f() { crate::a::g() }"),
    ]
    .into_iter()
    .map(|(m, code)| (m.to_owned(), code.to_owned()))
    .collect();
    assert_eq!(cycles(&edges(&modules)), [["a", "b", "c"]]);
}
