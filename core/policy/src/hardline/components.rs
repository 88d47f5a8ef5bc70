//! A path's canonical components (SPEC §6.3): the one canonicalization the protected-path rules
//! and the shell reading share, below both.

/// The canonical components of a path: `\` → `/`, `~/` → `/home/`, rooted, empty and `.` dropped,
/// `..` popping but never above the root.
pub fn canonical_components(path: &str) -> Vec<&str> {
    let rest = if path == "~" {
        "home"
    } else if let Some(rest) = path.strip_prefix("~/").or_else(|| path.strip_prefix("~\\")) {
        // `~/` becomes `/home/`; the `home` component is pushed below.
        return with_home(rest);
    } else {
        path
    };
    let mut out = Vec::new();
    push_components(&mut out, rest);
    out
}

fn with_home(rest: &str) -> Vec<&str> {
    let mut out = vec!["home"];
    push_components(&mut out, rest);
    out
}

fn push_components<'a>(out: &mut Vec<&'a str>, path: &'a str) {
    for component in path.split(['/', '\\']) {
        match component {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            other => out.push(other),
        }
    }
}
