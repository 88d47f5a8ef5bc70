//! The module graph of a crate, from its source text (SPEC §24 "no import cycles"): which module
//! (file) reaches which through `use crate::…`, `use super::…`, `self::…` and paths written in
//! code, and the cycles among them (strongly connected components of more than one module).
//!
//! Read as text, not compiled: comments, doc comments and `#[cfg(test)]` modules are left out
//! (a module's tests may use anything); a path is charged to the deepest module it names that
//! has a file. A parent module's own mention of a child (`child::item`, `use child::…`) is an
//! edge too, since a parent that uses its child while the child uses the parent is a cycle
//! like any other; a bare `mod child;` declaration is not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's modules: module path (`""` for the crate root, `a::b`) → its code.
pub type Modules = BTreeMap<String, String>;

/// The library (or, without one, the binary) crate rooted at `src`: every `.rs` file but the
/// extra binaries under `src/bin/` (crates of their own).
pub fn read_crate(src: &Path) -> Modules {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    let has_lib = src.join("lib.rs").exists();
    let mut modules = Modules::new();
    for file in files {
        let Ok(relative) = file.strip_prefix(src) else {
            continue;
        };
        let parts: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.first().is_some_and(|p| p == "bin") {
            continue;
        }
        let name = match parts.as_slice() {
            [root] if root == "lib.rs" || (root == "main.rs" && !has_lib) => String::new(),
            [root] if root == "main.rs" => continue,
            _ => {
                let mut segments: Vec<String> = parts.clone();
                let last = segments.pop().unwrap_or_default();
                if last != "mod.rs" {
                    segments.push(last.trim_end_matches(".rs").to_owned());
                }
                segments.join("::")
            }
        };
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        modules.insert(name, code_of(&text));
    }
    modules
}

/// `text` without comments, string literals' contents and `#[cfg(test)]` items.
pub fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let next = bytes.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < bytes.len() && bytes[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < bytes.len() {
                if bytes[i] == '/' && bytes.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if bytes[i] == '*' && bytes.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            continue;
        }
        if c == '"' {
            // A string's contents are not paths (raw strings are rare in imports; their
            // contents are skipped the same way up to the closing quote).
            out.push('"');
            i += 1;
            while i < bytes.len() && bytes[i] != '"' {
                if bytes[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            out.push('"');
            i += 1;
            continue;
        }
        if c == '\'' && bytes.get(i + 2) == Some(&'\'') {
            // A char literal such as '{' must not count as a brace.
            out.push_str("' '");
            i += 3;
            continue;
        }
        out.push(c);
        i += 1;
    }
    strip_test_items(&out)
}

/// Removes each item that follows `#[cfg(test)]` (a `mod … { … }` or any braced item; a
/// `use` up to its `;`).
fn strip_test_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let brace = after.find('{');
        let semi = after.find(';');
        let end = match (brace, semi) {
            (Some(b), Some(s)) if s < b => s + 1,
            (Some(b), _) => {
                let mut depth = 0usize;
                let mut end = after.len();
                for (offset, ch) in after[b..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + offset + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, Some(s)) => s + 1,
            (None, None) => after.len(),
        };
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The paths `code` names, each as segments from the crate root: `crate::…`, `super::…` and
/// `self::…` (resolved from `module`), `use` groups expanded, and a child module's name used as
/// a path (`child::…`).
fn named_paths(module: &str, code: &str, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let here: Vec<String> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").map(str::to_owned).collect()
    };
    let mut found = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':');
        if !starts_word || !is_ident(chars[i]) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len() && is_ident(chars[j]) {
            j += 1;
        }
        let word: String = chars[i..j].iter().collect();
        let followed_by_path = chars.get(j) == Some(&':') && chars.get(j + 1) == Some(&':');
        let base: Option<Vec<String>> = match word.as_str() {
            "crate" => Some(Vec::new()),
            "self" => Some(here.clone()),
            "super" => here
                .split_last()
                .map(|(_, parent)| parent.to_vec())
                .or(Some(Vec::new())),
            w if children.contains(w) && followed_by_path => {
                let mut base = here.clone();
                base.push(w.to_owned());
                Some(base)
            }
            _ => None,
        };
        let Some(mut base) = base.filter(|_| followed_by_path) else {
            i = j;
            continue;
        };
        // Further `super::` hops, then the rest of the path (or a `{…}` group).
        let mut k = j + 2;
        loop {
            let rest: String = chars[k..chars.len().min(k + 7)].iter().collect();
            if rest == "super::" {
                base.pop();
                k += 7;
            } else {
                break;
            }
        }
        for tail in path_tails(&chars, k) {
            let mut full = base.clone();
            full.extend(tail);
            found.push(full);
        }
        i = j;
    }
    found
}

/// The paths starting at `chars[k]`: `a::b::c`, or `{a::b, c::{d, e}}` expanded.
fn path_tails(chars: &[char], k: usize) -> Vec<Vec<String>> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut segments = Vec::new();
    let mut k = k;
    loop {
        if chars.get(k) == Some(&'{') {
            // A group: split its top level at commas, expand each.
            let mut depth = 0usize;
            let mut end = k;
            for (offset, c) in chars[k..].iter().enumerate() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = k + offset;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let inner = &chars[k + 1..end.max(k + 1)];
            let mut tails = Vec::new();
            let mut start = 0;
            let mut depth = 0usize;
            for (offset, c) in inner.iter().enumerate() {
                match c {
                    '{' => depth += 1,
                    '}' => depth = depth.saturating_sub(1),
                    ',' if depth == 0 => {
                        tails.extend(item_tails(&inner[start..offset]));
                        start = offset + 1;
                    }
                    _ => {}
                }
            }
            tails.extend(item_tails(&inner[start..]));
            return tails
                .into_iter()
                .map(|t| segments.iter().cloned().chain(t).collect())
                .collect();
        }
        let mut j = k;
        while j < chars.len() && is_ident(chars[j]) {
            j += 1;
        }
        if j == k {
            return vec![segments];
        }
        segments.push(chars[k..j].iter().collect());
        if chars.get(j) == Some(&':') && chars.get(j + 1) == Some(&':') {
            k = j + 2;
        } else {
            return vec![segments];
        }
    }
}

/// One item of a `use` group (`a::b as c`, `self`, `{…}`), as path tails.
fn item_tails(item: &[char]) -> Vec<Vec<String>> {
    let text: String = item.iter().collect();
    let text = text.trim();
    if text.is_empty() || text == "self" || text == "*" {
        return vec![Vec::new()];
    }
    let chars: Vec<char> = text.chars().collect();
    path_tails(&chars, 0)
}

/// The module a path reaches: the deepest prefix of it that is a module of the crate.
fn module_of(path: &[String], modules: &Modules) -> String {
    let mut best = String::new();
    for n in 1..=path.len() {
        let candidate = path[..n].join("::");
        if modules.contains_key(&candidate) {
            best = candidate;
        }
    }
    best
}

/// The crate's edges: module → the modules it reaches (itself left out).
pub fn edges(modules: &Modules) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in modules {
        let children: BTreeSet<String> = modules
            .keys()
            .filter_map(|m| {
                let rest = if module.is_empty() {
                    Some(m.as_str())
                } else {
                    m.strip_prefix(module.as_str())?.strip_prefix("::")
                };
                rest.filter(|r| !r.is_empty() && !r.contains("::"))
                    .map(str::to_owned)
            })
            .collect();
        let reached = graph.entry(module.clone()).or_default();
        for path in named_paths(module, code, &children) {
            let target = module_of(&path, modules);
            if &target != module {
                reached.insert(target);
            }
        }
    }
    graph
}

/// The cycles of `graph`: each strongly connected component of more than one module, sorted.
pub fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Tarjan<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g str) {
            self.index.insert(v, self.next);
            self.low.insert(v, self.next);
            self.next += 1;
            self.stack.push(v);
            self.on_stack.insert(v);
            if let Some(out) = self.graph.get(v) {
                for w in out {
                    let w = w.as_str();
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let low = self.low[w].min(self.low[v]);
                        self.low.insert(v, low);
                    } else if self.on_stack.contains(w) {
                        let low = self.index[w].min(self.low[v]);
                        self.low.insert(v, low);
                    }
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !tarjan.index.contains_key(v.as_str()) {
            tarjan.visit(v);
        }
    }
    tarjan.found.sort();
    tarjan.found
}
