//! Structural rules (SPEC §2.1, §16 #9, #27, #42): core's dependency list, the forbidden-API scan,
//! and the "only X does Y" rules, checked over the source text.

use std::path::{Path, PathBuf};

fn core_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `core/src` and the policy gate's `core/policy/src` (SPEC §24: the
/// gate keeps core's purity rules), with its text.
fn sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).expect("readable source dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("readable source");
                out.push((path, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&core_dir().join("src"), &mut out);
    let runtime = out.len();
    walk(&core_dir().join("policy").join("src"), &mut out);
    assert!(
        runtime > 20 && out.len() - runtime > 10,
        "the scan must see core's and the policy gate's sources"
    );
    out
}

/// The lines of a file outside `#[cfg(test)]` modules and comments.
fn code_lines(text: &str) -> Vec<&str> {
    let body = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    body.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect()
}

fn relative(path: &Path) -> String {
    path.strip_prefix(core_dir())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The `[dependencies]` keys of a manifest under `core/`, sorted.
fn dependency_keys(relative_manifest: &str) -> Vec<String> {
    let manifest =
        std::fs::read_to_string(core_dir().join(relative_manifest)).expect("readable manifest");
    let table: toml::Table = manifest.parse().expect("manifest is TOML");
    let mut deps: Vec<String> = table["dependencies"]
        .as_table()
        .expect("dependencies")
        .keys()
        .cloned()
        .collect();
    deps.sort();
    deps
}

#[test]
fn core_depends_on_exactly_the_allowed_crates() {
    let deps = dependency_keys("Cargo.toml");
    assert_eq!(
        deps,
        [
            // The policy gate (SPEC §24).
            "airlock-policy",
            "futures-util",
            "regex",
            "serde",
            "serde_json",
            "sha2",
            "thiserror",
            "tracing",
            "uuid"
        ]
    );
    for forbidden in ["airlock", "airlock-sim", "tokio", "rusqlite", "madsim"] {
        assert!(
            !deps.iter().any(|d| d == forbidden),
            "core must not depend on {forbidden}"
        );
    }
}

/// SPEC §24: the gate depends on no other workspace crate, and on the policy dependencies of
/// SPEC §2.1 only.
#[test]
fn the_policy_gate_depends_on_exactly_the_allowed_crates() {
    let deps = dependency_keys("policy/Cargo.toml");
    assert_eq!(
        deps,
        [
            // Hardline v2 (SPEC §2.1, §21): the bash parser, snake_case names, WHATWG URLs.
            "brush-parser",
            "heck",
            "ipnet",
            "regex",
            "serde",
            "serde_json",
            "sha2",
            "thiserror",
            "toml",
            "url",
            "uuid"
        ]
    );
    let (name, all) = dependency_packages(&core_dir().join("policy").join("Cargo.toml"));
    let ours: Vec<&String> = all
        .iter()
        .filter(|d| d.starts_with("airlock") && *d != &name)
        .collect();
    assert!(
        ours.is_empty(),
        "{name} depends on no other workspace crate, not {ours:?}"
    );
}

/// The package names a manifest depends on: every dependency table, target-specific ones
/// included, by the package each entry names (a renamed dependency's `package`, else its key).
fn dependency_packages(manifest_path: &Path) -> (String, Vec<String>) {
    let manifest = std::fs::read_to_string(manifest_path)
        .unwrap_or_else(|e| panic!("{}: {e}", manifest_path.display()));
    let table: toml::Table = manifest.parse().expect("manifest is TOML");
    let name = table["package"]["name"]
        .as_str()
        .expect("package name")
        .to_owned();
    let mut tables: Vec<&toml::Table> = vec![&table];
    if let Some(targets) = table.get("target").and_then(toml::Value::as_table) {
        tables.extend(targets.values().filter_map(toml::Value::as_table));
    }
    let mut names = Vec::new();
    for section in tables.iter().flat_map(|t| {
        ["dependencies", "dev-dependencies", "build-dependencies"]
            .iter()
            .filter_map(|name| t.get(*name).and_then(toml::Value::as_table))
    }) {
        for (key, value) in section {
            let package = value
                .get("package")
                .and_then(toml::Value::as_str)
                .unwrap_or(key);
            names.push(package.to_owned());
        }
    }
    (name, names)
}

/// The stores (SPEC §2.1, Part II layout): they know core and nothing else of airlock.
const STORE_CRATES: [&str; 2] = ["airlock-sqlite", "airlock-pg"];
/// The crate that wires the parts together and owns the CLI; the only one that may depend on
/// several adapter crates.
const BINARY_CRATE: &str = "airlock";
/// The host crate, an adapter other adapters may build on.
const HOST_CRATE: &str = "airlock-host";
/// The OAuth resource server (issue 31), the other one: both listeners (the HTTP API and the
/// MCP gateway) check bearer tokens with it. It builds on core alone.
const OAUTH_CRATE: &str = "airlock-oauth";

#[test]
fn adapters_and_the_simulator_depend_only_in_the_allowed_directions() {
    // SPEC §2.1 and §16 #42: production and simulation differ only in the ports they plug into
    // core, so neither reaches into the other; each adapter crate depends on core and on the
    // host crate at most; the stores depend on core alone (never on the host, the MCP gateway
    // or the HTTP crate); only the binary crate wires several adapters together.
    let workspace = core_dir().parent().expect("workspace root").to_owned();
    let mut manifests = vec![workspace.join("sim").join("Cargo.toml")];
    let adapters = std::fs::read_dir(workspace.join("adapters")).expect("adapters/ is a folder");
    for entry in adapters {
        let manifest = entry.expect("dir entry").path().join("Cargo.toml");
        if manifest.is_file() {
            manifests.push(manifest);
        }
    }
    assert!(
        manifests.len() >= 4,
        "the scan must see the simulator, the SQLite store, the host and the binary crate"
    );
    let mut seen = Vec::new();
    for manifest in &manifests {
        let (name, deps) = dependency_packages(manifest);
        assert!(
            deps.iter().any(|d| d == "airlock-core"),
            "{name} depends on core"
        );
        let ours: Vec<&String> = deps
            .iter()
            // The policy gate sits below core (SPEC §24): any crate may use it directly.
            // A crate naming itself (for its own test features) is not a dependency.
            .filter(|d| {
                d.starts_with("airlock")
                    && *d != "airlock-core"
                    && *d != "airlock-policy"
                    && **d != name
            })
            .collect();
        let allowed: &[&str] = if name == "airlock-sim"
            || STORE_CRATES.contains(&name.as_str())
            || name == OAUTH_CRATE
        {
            &[]
        } else if name == BINARY_CRATE {
            // Anything but the simulator.
            assert!(
                !ours.iter().any(|d| *d == "airlock-sim"),
                "{name} must not depend on the simulator: {deps:?}"
            );
            seen.push(name);
            continue;
        } else {
            &[HOST_CRATE, OAUTH_CRATE]
        };
        assert!(
            ours.iter().all(|d| allowed.contains(&d.as_str())),
            "{name} may depend on core and {allowed:?} only, not {ours:?}"
        );
        seen.push(name);
    }
    for expected in [
        "airlock-sim",
        "airlock-sqlite",
        HOST_CRATE,
        OAUTH_CRATE,
        BINARY_CRATE,
    ] {
        assert!(
            seen.iter().any(|s| s == expected),
            "{expected} was not scanned"
        );
    }
}

#[test]
fn core_sources_use_no_forbidden_api() {
    let forbidden = [
        "tokio::",
        "rusqlite",
        "madsim",
        "std::fs",
        // All of std::net: the IP value types core needs are in `core::net`, which has no sockets.
        "std::net",
        "std::env",
        "SystemTime::now",
        "Instant::now",
        "thread_rng",
        "std::thread",
        "std::process",
        "Uuid::new_v4",
        "rand::",
    ];
    let mut hits = Vec::new();
    for (path, text) in sources() {
        let lines = code_lines(&text);
        for line in &lines {
            for name in forbidden {
                if line.contains(name) {
                    hits.push(format!("{}: {name}: {}", relative(&path), line.trim()));
                }
            }
        }
        for item in std_group_imports(&lines.join("\n")) {
            if forbidden_std_item(&item) {
                hits.push(format!(
                    "{}: grouped import std::{{{item}}}",
                    relative(&path)
                ));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "core must stay sans-I/O (SPEC §2.1):\n{}",
        hits.join("\n")
    );
}

/// The items of every `std::{…}` group in `code`, nested groups flattened (`time::{Instant`
/// keeps its prefix), so `use std::{env, fs};` is seen like `use std::fs;`.
fn std_group_imports(code: &str) -> Vec<String> {
    let compact: String = code.chars().filter(|c| !c.is_whitespace()).collect();
    let mut items = Vec::new();
    let mut rest = compact.as_str();
    while let Some(at) = rest.find("std::{") {
        let body = &rest[at + "std::{".len()..];
        let mut depth = 1;
        let mut end = body.len();
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        items.extend(
            body[..end]
                .split(',')
                .filter(|i| !i.is_empty())
                .map(str::to_owned),
        );
        rest = &body[end..];
    }
    items
}

/// Whether an item of a `std::{…}` group names something core may not use.
fn forbidden_std_item(item: &str) -> bool {
    let head = item.split("::").next().unwrap_or(item);
    matches!(head, "fs" | "net" | "env" | "thread" | "process")
        || item.contains("SystemTime")
        || item.contains("Instant")
}

#[test]
fn the_scan_sees_grouped_std_imports() {
    let code = "use std::{\n    collections::BTreeMap,\n    env, fs::File,\n    time::{Duration, Instant},\n};";
    let flagged: Vec<String> = std_group_imports(code)
        .into_iter()
        .filter(|i| forbidden_std_item(i))
        .collect();
    assert_eq!(flagged, ["env", "fs::File", "Instant}"]);
    assert!(std_group_imports("use std::sync::Arc;").is_empty());
}

#[test]
fn only_run_state_transition_updates_runs() {
    // §16 #27: `update_run` is called only in run/state.rs (`transition` and the status-preserving
    // `update_fields`); stores implement it.
    let mut callers = Vec::new();
    for (path, text) in sources() {
        let name = relative(&path);
        if name == "src/run/state.rs"
            || name == "src/store.rs"
            || name == "src/mem_store.rs"
            || name.starts_with("src/testing/")
        {
            continue;
        }
        for line in code_lines(&text) {
            if line.contains("update_run(") {
                callers.push(format!("{name}: {}", line.trim()));
            }
        }
    }
    assert!(
        callers.is_empty(),
        "only run::state may call update_run:\n{}",
        callers.join("\n")
    );
    // And within run/state.rs, only `transition` assigns a new state.
    let state = std::fs::read_to_string(core_dir().join("src/run/state.rs")).expect("state.rs");
    let update_fields = state
        .split("pub fn update_fields")
        .nth(1)
        .expect("update_fields exists");
    let update_fields_body = update_fields.split("\n}\n").next().unwrap_or_default();
    assert!(
        !update_fields_body.contains("next.state ="),
        "update_fields must not change the state"
    );
}

#[test]
fn only_the_single_gate_produces_authorized() {
    // §16 #9: the only assignment of AUTHORIZED is in invocation/gate.rs.
    let mut producers = Vec::new();
    for (path, text) in sources() {
        let name = relative(&path);
        if name == "src/invocation/gate.rs" || name.starts_with("src/testing/") {
            continue;
        }
        for line in code_lines(&text) {
            let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
            if compact.contains("status=InvocationStatus::Authorized")
                || compact.contains("status:InvocationStatus::Authorized")
            {
                producers.push(format!("{name}: {}", line.trim()));
            }
        }
    }
    assert!(
        producers.is_empty(),
        "only invocation::gate may produce AUTHORIZED:\n{}",
        producers.join("\n")
    );
    let gate = std::fs::read_to_string(core_dir().join("src/invocation/gate.rs")).expect("gate.rs");
    assert!(
        gate.contains("invocation.status = InvocationStatus::Authorized;"),
        "the gate is where AUTHORIZED is produced"
    );
}

#[test]
fn every_core_file_opens_with_a_module_doc() {
    let missing: Vec<String> = sources()
        .into_iter()
        .filter(|(_, text)| !text.trim_start().starts_with("//!"))
        .map(|(path, _)| relative(&path))
        .collect();
    assert!(
        missing.is_empty(),
        "files without a //! header: {missing:?}"
    );
}

/// SPEC §22, issue 28: the durable conversation (`conversation/`: its row, taint, limits, which
/// request may claim a call run, what a call is told) sits below everything that uses it. It
/// reaches neither the live planner (`connection`), nor the worker, the executor or the control
/// service, which all reach it: so no import cycle runs through it. The live planner is the one
/// module of the two that may import the worker.
#[test]
fn the_conversation_module_reaches_no_module_that_uses_it() {
    let above = [
        "crate::connection",
        "crate::worker",
        "crate::control",
        "crate::run::executor",
        "crate::access",
    ];
    let mut seen = 0;
    for (path, text) in sources() {
        let rel = relative(&path);
        if !rel.starts_with("src/conversation/") {
            continue;
        }
        seen += 1;
        for line in code_lines(&text) {
            for module in above {
                assert!(
                    !line.contains(module),
                    "{rel} reaches {module}, which uses the conversation: {line}"
                );
            }
        }
    }
    assert!(
        seen >= 4,
        "the scan must see the conversation module's files"
    );
    for (path, text) in sources() {
        let rel = relative(&path);
        if rel.starts_with("src/connection/") {
            continue;
        }
        let imports_live = code_lines(&text)
            .iter()
            .any(|line| line.contains("crate::connection::live"));
        assert!(
            !imports_live,
            "{rel} imports the live planner, which sits on top of the worker"
        );
    }
}
