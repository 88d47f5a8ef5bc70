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

/// The cycles the workspace still has (`tests/module_cycles.txt`: `crate: a ↔ b ↔ …`, the root
/// module written `(root)`), which may only shrink: SPEC §24 wants none.
fn recorded() -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(repo().join("tests/module_cycles.txt"))
        .expect("tests/module_cycles.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (krate, members) = l.split_once(": ")?;
            let members = members
                .split(" ↔ ")
                .map(|m| {
                    if m == "(root)" {
                        String::new()
                    } else {
                        m.to_owned()
                    }
                })
                .collect();
            Some((krate.to_owned(), members))
        })
        .collect()
}

fn shown(members: &[String]) -> String {
    members
        .iter()
        .map(|m| if m.is_empty() { "(root)" } else { m.as_str() })
        .collect::<Vec<_>>()
        .join(" ↔ ")
}

/// Every crate's import cycles: none that is not recorded, none grown beyond its record, and
/// no record left for a cycle that is gone (so the list only ever shrinks, to nothing).
#[test]
fn no_module_reaches_itself_beyond_the_recorded_cycles() {
    let recorded = recorded();
    let mut problems = Vec::new();
    let mut still = vec![false; recorded.len()];
    for (name, src) in crates() {
        let modules = read_crate(&src);
        assert!(!modules.is_empty(), "{name}: no sources read from {src:?}");
        for cycle in cycles(&edges(&modules)) {
            // A recorded cycle is still there if a found one shares two of its members (a
            // grown cycle is reported as new, not its record as gone).
            for (i, (krate, members)) in recorded.iter().enumerate() {
                let shared = cycle.iter().filter(|m| members.contains(m)).count();
                if krate == &name && shared >= 2 {
                    still[i] = true;
                }
            }
            let within = recorded.iter().any(|(krate, members)| {
                krate == &name && cycle.iter().all(|m| members.contains(m))
            });
            if !within {
                problems.push(format!("{name}: a new import cycle: {}", shown(&cycle)));
            }
        }
    }
    for ((krate, members), seen) in recorded.iter().zip(still) {
        if !seen {
            problems.push(format!(
                "{krate}: the recorded cycle {} is gone: delete its line from tests/module_cycles.txt",
                shown(members)
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
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
