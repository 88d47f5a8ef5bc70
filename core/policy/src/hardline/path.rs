//! `protected_path` matching (SPEC §6.3): canonicalize every candidate path, then compare by
//! components against absolute and relative entries.

use super::components::canonical_components;
use super::prefilter::Prefilter;
use super::strings::{is_ws, percent_decode};

/// Characters a shell treats specially (SPEC §6.3). A command is tokenized twice when it holds
/// any: once with them removed, as the spec says (`cat /e''tc/passwd` → `/etc/passwd`), and once
/// with them replaced by spaces (`cat</etc/passwd` → `/etc/passwd`, which removal would glue into
/// one token). A token of either reading that names a protected path matches, so this is the
/// spec's rule plus a tightening, never less.
const SHELL_CHARACTERS: [char; 9] = ['"', '\'', '<', '>', '|', ';', '&', '(', ')'];

/// One entry of a rule's `paths`, pre-split into components.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// Matches the canonical path equal to or below it, case-sensitively.
    Absolute(Vec<String>),
    /// Matches when its components occur consecutively anywhere, ASCII-case-insensitively.
    Relative(Vec<String>),
}

/// A compiled `paths` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedPaths {
    entries: Vec<Entry>,
}

/// [`canonical_components`] plus SPEC §21.3's `/proc` reading (a v2 reading): a leading
/// `/proc/self/root`, `/proc/thread-self/root` or `/proc/{digits}/root` is removed, repeatedly,
/// and `/proc/{digits}/` and `/proc/thread-self/` read as `/proc/self/`.
pub fn canonical_components_v2(path: &str) -> Vec<&str> {
    let mut components = canonical_components(path);
    let is_process = |c: &str| c == "self" || c == "thread-self" || is_digits(c);
    while components.len() >= 3
        && components[0] == "proc"
        && is_process(components[1])
        && components[2] == "root"
    {
        components.drain(..3);
    }
    if components.len() >= 2
        && components[0] == "proc"
        && (components[1] == "thread-self" || is_digits(components[1]))
    {
        components[1] = "self";
    }
    components
}

/// Whether a candidate of `s` (SPEC §6.3: `s`, a `file:` URL's percent-decoded path, and for
/// code execution each token with the shell characters removed or replaced) can have a `proc`
/// component. Canonicalization only splits and drops, so the component's text must be in the
/// candidate: in `s` itself, behind a `%` escape the URL path decodes (`%70roc`), or joined by
/// removing shell characters (`/p''roc`). The pre-filter of [`ProtectedPaths::matches_string_v2`].
fn may_name_proc(s: &str, code_execution: bool) -> bool {
    if s.contains("proc") || s.contains('%') {
        return true;
    }
    if !code_execution || !s.contains(SHELL_CHARACTERS) {
        return false;
    }
    // `proc` in `s` with the shell characters removed, found without building that string.
    let mut last = ['\0'; 4];
    s.chars()
        .filter(|c| !SHELL_CHARACTERS.contains(c))
        .any(|c| {
            last = [last[1], last[2], last[3], c];
            last == ['p', 'r', 'o', 'c']
        })
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// How candidates are canonicalized: SPEC §6.3 (pass 1), or with §21.3's `/proc` reading too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canon {
    V1,
    V2,
}

/// The path of a `file:` URL, percent-decoded, if `s` is one. The scheme is matched
/// case-insensitively and any authority (`file://host/…`) is dropped.
fn file_url_path(s: &str) -> Option<String> {
    let scheme = s.get(..5)?;
    if !scheme.eq_ignore_ascii_case("file:") {
        return None;
    }
    let rest = &s[5..];
    let path = match rest.strip_prefix("//") {
        Some(after) => after.find('/').map_or("", |i| &after[i..]),
        None => rest,
    };
    Some(percent_decode(path))
}

impl ProtectedPaths {
    /// Compiles the entries of a rule. `~/x` yields both `/home/x` and the relative `x`; a `~`
    /// entry that climbs out of home (`~/../etc`) is just the absolute path it names. A relative
    /// entry that names nothing once canonical (`""`, `.`, `a/..`) would protect nothing, so it is
    /// refused (returned as the error) rather than silently weakening the rule.
    pub fn new(paths: &[String]) -> Result<ProtectedPaths, String> {
        let mut entries = Vec::new();
        for raw in paths {
            let normalized = raw.replace('\\', "/");
            let owned = |parts: &[&str]| parts.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>();
            if normalized == "~" || normalized.starts_with("~/") {
                let components = canonical_components(&normalized);
                let under_home = match components.split_first() {
                    Some((&"home", rest)) if !rest.is_empty() => owned(rest),
                    _ => Vec::new(),
                };
                entries.push(Entry::Absolute(owned(&components)));
                if !under_home.is_empty() {
                    entries.push(Entry::Relative(under_home));
                }
            } else if normalized.starts_with('/') {
                entries.push(Entry::Absolute(owned(&canonical_components(&normalized))));
            } else {
                let relative = owned(&canonical_components(&normalized));
                if relative.is_empty() {
                    return Err(raw.clone());
                }
                entries.push(Entry::Relative(relative));
            }
        }
        Ok(ProtectedPaths { entries })
    }

    /// Whether any entry protects `path` canonicalized the given way.
    pub fn protects_with(&self, path: &str, canon: Canon) -> bool {
        match canon {
            Canon::V1 => self.protects_components(&canonical_components(path)),
            Canon::V2 => self.protects_components(&canonical_components_v2(path)),
        }
    }

    fn protects_components(&self, components: &[&str]) -> bool {
        self.entries.iter().any(|entry| match entry {
            Entry::Absolute(prefix) => {
                components.len() >= prefix.len()
                    && components.iter().zip(prefix).all(|(c, p)| *c == p.as_str())
            }
            Entry::Relative(needle) => {
                let consecutive = components.windows(needle.len()).any(|window| {
                    window
                        .iter()
                        .zip(needle)
                        .all(|(c, n)| c.eq_ignore_ascii_case(n))
                });
                consecutive
                    || (needle.len() == 1
                        && components.iter().any(|c| has_dotted_prefix(c, &needle[0])))
            }
        })
    }

    /// Tests one collected string: itself, a `file:` URL's path, and — for code execution — each
    /// shell token (SPEC §6.3; the token reading is a v1 reading by §21.1).
    pub fn matches_string(&self, s: &str, code_execution: bool) -> bool {
        self.matches_string_with_canon(s, code_execution, Canon::V1)
    }

    /// The same candidates canonicalized with the `/proc` reading: pass 2. The pre-filter skips
    /// a string none of whose candidates can hold a `proc` component, since those canonicalize
    /// the same both ways.
    pub fn matches_string_v2(&self, s: &str, code_execution: bool, prefilter: Prefilter) -> bool {
        (prefilter == Prefilter::Off || may_name_proc(s, code_execution))
            && self.matches_string_with_canon(s, code_execution, Canon::V2)
    }

    fn matches_string_with_canon(&self, s: &str, code_execution: bool, canon: Canon) -> bool {
        if self.matches_candidate(s, canon) {
            return true;
        }
        if !code_execution {
            return false;
        }
        if !s.contains(SHELL_CHARACTERS) {
            return self.matches_any_token(s, canon);
        }
        self.matches_any_token(&s.replace(SHELL_CHARACTERS, ""), canon)
            || self.matches_any_token(&s.replace(SHELL_CHARACTERS, " "), canon)
    }

    /// Whether any whitespace-separated token of `command` names a protected path.
    fn matches_any_token(&self, command: &str, canon: Canon) -> bool {
        command
            .split(is_ws)
            .filter(|t| !t.is_empty())
            .any(|token| self.matches_candidate(token, canon))
    }

    fn matches_candidate(&self, s: &str, canon: Canon) -> bool {
        self.protects_with(s, canon) || self.matches_file_url_with(s, canon)
    }

    /// The v1 `file:` URL path reading alone: what `protected_url_path` tests in pass 1.
    pub fn matches_file_url(&self, s: &str) -> bool {
        self.matches_file_url_with(s, Canon::V1)
    }

    /// Whether `s` is a `file:` URL whose path, as given or without a query or fragment, names
    /// a protected entry.
    fn matches_file_url_with(&self, s: &str, canon: Canon) -> bool {
        file_url_path(s).is_some_and(|path| {
            let bare = path.split(['?', '#']).next().unwrap_or_default();
            self.protects_with(&path, canon) || self.protects_with(bare, canon)
        })
    }

    /// Whether a glob word could name a protected entry (SPEC §21.3): component by component,
    /// the pattern matches the entry's path or a path below it. An absolute (or `cd`-resolved)
    /// pattern is matched against absolute entries, a relative one against relative entries,
    /// anywhere in it and ASCII-case-insensitively.
    pub fn protects_glob(&self, pattern: &str) -> bool {
        use super::shell::glob;
        let absolute = pattern.starts_with('/') || pattern.starts_with("~/") || pattern == "~";
        let parts = glob::components(pattern);
        self.entries.iter().any(|entry| match entry {
            Entry::Absolute(prefix) if absolute => {
                parts.len() >= prefix.len()
                    && parts
                        .iter()
                        .zip(prefix)
                        .all(|(p, e)| glob::matches(p, e, false))
            }
            Entry::Relative(needle) if !absolute => {
                let consecutive = parts.len() >= needle.len()
                    && parts.windows(needle.len()).any(|window| {
                        window
                            .iter()
                            .zip(needle)
                            .all(|(p, e)| glob::matches(p, e, true))
                    });
                consecutive
                    || (needle.len() == 1
                        && parts.iter().any(|p| {
                            glob::matches_some_name_starting_with(
                                p,
                                &format!("{}.", needle[0]),
                                true,
                            )
                        }))
            }
            Entry::Absolute(_) | Entry::Relative(_) => false,
        })
    }
}

/// A one-component relative entry `e` also matches `e.<anything>`, except exactly `e.example`.
fn has_dotted_prefix(component: &str, entry: &str) -> bool {
    let Some(head) = component.get(..entry.len()) else {
        return false;
    };
    head.eq_ignore_ascii_case(entry)
        && component.as_bytes().get(entry.len()) == Some(&b'.')
        && component != format!("{entry}.example")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> ProtectedPaths {
        ProtectedPaths::new(&["/etc", "/usr", "~/.ssh", ".git/config", ".env"].map(String::from))
            .unwrap()
    }

    #[test]
    fn canonicalization() {
        assert_eq!(canonical_components("/etc//passwd"), ["etc", "passwd"]);
        assert_eq!(
            canonical_components("workspace/../etc/passwd"),
            ["etc", "passwd"]
        );
        assert_eq!(canonical_components("\\etc\\passwd"), ["etc", "passwd"]);
        assert_eq!(canonical_components("../../../etc"), ["etc"]);
        assert_eq!(
            canonical_components("~/.ssh/id_rsa"),
            ["home", ".ssh", "id_rsa"]
        );
        assert_eq!(canonical_components("~"), ["home"]);
        assert!(canonical_components("/").is_empty());
    }

    proptest::proptest! {
        /// Any entry list compiles or is refused, never panics, and a compiled list answers
        /// any string; the alphabet leans on the characters canonicalization treats specially.
        #[test]
        fn any_entries_compile_or_are_refused_and_never_panic(
            entries in proptest::collection::vec("[~/\\\\.a ]{0,8}", 0..4),
            probe in "[~/\\\\.a ]{0,8}",
        ) {
            if let Ok(paths) = ProtectedPaths::new(&entries) {
                let _ = paths.matches_string(&probe, false);
                let _ = paths.matches_string(&probe, true);
            }
        }
    }

    #[test]
    fn shell_characters_inside_a_command_token_are_removed_and_also_split_on() {
        let paths = shipped();
        for command in [
            "cat /e''tc/passwd",
            "cat /e\"\"tc/shadow",
            "cat .e''nv",
            "cat</etc/passwd",
            "(cat /etc/passwd)",
            "ls;cat ~/.ssh/id_rsa",
        ] {
            assert!(
                paths.matches_string(command, true),
                "{command} should match"
            );
        }
        assert!(
            !paths.matches_string("cat /e''tc/passwd", false),
            "only code execution is tokenized"
        );
        for command in ["cat /e''tcetera/passwd", "echo 'hello' > notes.txt"] {
            assert!(
                !paths.matches_string(command, true),
                "{command} should not match"
            );
        }
    }

    #[test]
    fn a_home_entry_that_climbs_out_of_home_is_the_absolute_path_it_names() {
        let paths = ProtectedPaths::new(&["~/../etc".to_owned(), "~/..".to_owned()]).unwrap();
        assert_eq!(
            paths.entries,
            vec![Entry::Absolute(vec!["etc".into()]), Entry::Absolute(vec![])]
        );
        assert_eq!(
            ProtectedPaths::new(&["/etc".to_owned(), "a/..".to_owned()]),
            Err("a/..".to_owned())
        );
    }

    #[test]
    fn entries_compile_home_as_absolute_and_relative() {
        let paths = ProtectedPaths::new(&["~/.ssh".to_owned()]).unwrap();
        assert_eq!(
            paths.entries,
            vec![
                Entry::Absolute(vec!["home".into(), ".ssh".into()]),
                Entry::Relative(vec![".ssh".into()])
            ]
        );
    }

    #[test]
    fn absolute_entries_compare_whole_components_case_sensitively() {
        let p = shipped();
        assert!(p.matches_string("/etc", false));
        assert!(p.matches_string("/etc/passwd", false));
        assert!(!p.matches_string("/etcetera/x", false));
        assert!(!p.matches_string("/ETC/passwd", false));
        assert!(p.matches_string("/home/.ssh/config", false));
    }

    #[test]
    fn relative_entries_match_anywhere_case_insensitively() {
        let p = shipped();
        assert!(p.matches_string("sub/.git/config", false));
        assert!(p.matches_string(".GIT/CONFIG", false));
        assert!(!p.matches_string(".git/configs", false));
        assert!(p.matches_string("notes/.env.local", false));
        assert!(p.matches_string("notes/.env.Example", false));
        assert!(!p.matches_string("./.env.example", false));
        assert!(!p.matches_string(".ssh-backup/id_rsa", false));
        assert!(p.matches_string("x/.SSH.old/key", false));
    }

    #[test]
    fn file_urls_are_decoded() {
        let p = shipped();
        assert!(p.matches_string("file:///etc/passwd", false));
        assert!(p.matches_string("FILE://localhost/%65tc/passwd", false));
        assert!(p.matches_string("file:/x/.env?download=1", false));
        assert!(!p.matches_string("file:///tmp/x", false));
    }

    #[test]
    fn commands_are_tokenized_only_for_code_execution() {
        let p = shipped();
        assert!(p.matches_string("cat /etc/passwd", true));
        assert!(p.matches_string("echo x > /etc/hosts", true));
        assert!(p.matches_string("cat</etc/passwd", true));
        assert!(p.matches_string("cat\u{1c}/usr/bin/x", true));
        assert!(!p.matches_string("cat /etc/passwd", false));
        assert!(!p.matches_string("cat /tmp/passwd", true));
    }

    /// The `/proc` pre-filter passes every string one of whose candidates can hold `proc`.
    #[test]
    fn the_proc_prefilter_sees_what_the_readings_make() {
        for (s, code_execution) in [
            ("cat /proc/1/environ", false),
            ("file:///%70roc/self/environ", false),
            ("cat /p''roc/self/environ", true),
            ("cat /p\"r\"o'c'/self/environ", true),
        ] {
            assert!(may_name_proc(s, code_execution), "{s:?}");
        }
        for (s, code_execution) in [
            ("cat /p''roc/self/environ", false),
            ("cat /etc/passwd", true),
            ("p r o c", true),
            ("pro;", true),
        ] {
            assert!(!may_name_proc(s, code_execution), "{s:?}");
        }
    }
}
