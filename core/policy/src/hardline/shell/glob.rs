//! Bash pathname patterns, one path component at a time (SPEC §21.3): `*`, `?` and `[…]`
//! (with `!`/`^` negation and ranges), `\` escaping the next character, and a leading `.` that
//! only a pattern starting with `.` matches. Used to tell whether a glob word could name a
//! protected entry (`/e?c/passwd`, `cat .e*`).

/// Escapes the pattern metacharacters of a literal text.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One element of a compiled component pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    Any,
    Star,
    /// `[…]`: negated, and the members as inclusive ranges.
    Class(bool, Vec<(char, char)>),
}

fn compile(pattern: &str) -> Vec<Token> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' if i + 1 < chars.len() => {
                out.push(Token::Literal(chars[i + 1]));
                i += 2;
            }
            '*' => {
                if out.last() != Some(&Token::Star) {
                    out.push(Token::Star);
                }
                i += 1;
            }
            '?' => {
                out.push(Token::Any);
                i += 1;
            }
            '[' => match class(&chars, i) {
                Some((token, next)) => {
                    out.push(token);
                    i = next;
                }
                None => {
                    out.push(Token::Literal('['));
                    i += 1;
                }
            },
            c => {
                out.push(Token::Literal(c));
                i += 1;
            }
        }
    }
    out
}

/// A bracket expression starting at `chars[open] == '['`, and the index after it.
fn class(chars: &[char], open: usize) -> Option<(Token, usize)> {
    let mut i = open + 1;
    let negated = matches!(chars.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut members = Vec::new();
    let mut first = true;
    while i < chars.len() {
        let c = chars[i];
        if c == ']' && !first {
            return Some((Token::Class(negated, members), i + 1));
        }
        first = false;
        let c = if c == '\\' && i + 1 < chars.len() {
            i += 1;
            chars[i]
        } else {
            c
        };
        if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|e| *e != ']') {
            members.push((c, chars[i + 2]));
            i += 3;
        } else {
            members.push((c, c));
            i += 1;
        }
    }
    None
}

fn same(a: char, b: char, fold_case: bool) -> bool {
    a == b || (fold_case && a.eq_ignore_ascii_case(&b))
}

fn in_class(negated: bool, members: &[(char, char)], c: char, fold_case: bool) -> bool {
    let hit = members.iter().any(|&(lo, hi)| {
        (lo..=hi).contains(&c)
            || (fold_case
                && ((lo..=hi).contains(&c.to_ascii_lowercase())
                    || (lo..=hi).contains(&c.to_ascii_uppercase())))
    });
    hit != negated
}

/// Matches `tokens` against `name`; with `prefix_only`, succeeds as soon as all of `name` is
/// consumed (the pattern could match `name` followed by something). Iterative, with one saved
/// `*` position, so the time is bounded by the product of the two lengths.
fn run(tokens: &[Token], name: &[char], fold_case: bool, prefix_only: bool) -> bool {
    let (mut t, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if n == name.len() && (prefix_only || tokens[t..].iter().all(|x| *x == Token::Star)) {
            return true;
        }
        let step = match (tokens.get(t), name.get(n)) {
            (Some(Token::Star), _) => {
                star = Some((t, n));
                t += 1;
                continue;
            }
            (Some(Token::Literal(p)), Some(c)) => same(*p, *c, fold_case),
            (Some(Token::Any), Some(_)) => true,
            (Some(Token::Class(neg, members)), Some(c)) => in_class(*neg, members, *c, fold_case),
            _ => false,
        };
        if step {
            t += 1;
            n += 1;
            continue;
        }
        match star {
            Some((st, sn)) if sn < name.len() => {
                star = Some((st, sn + 1));
                t = st + 1;
                n = sn + 1;
            }
            _ => return false,
        }
    }
}

/// A leading `.` of a name is matched only by a pattern that starts with a literal `.`.
fn dot_rule(tokens: &[Token], name: &[char]) -> bool {
    name.first() != Some(&'.') || tokens.first() == Some(&Token::Literal('.'))
}

/// Whether the component pattern matches `name` exactly.
pub fn matches(pattern: &str, name: &str, fold_case: bool) -> bool {
    let tokens = compile(pattern);
    let name: Vec<char> = name.chars().collect();
    dot_rule(&tokens, &name) && run(&tokens, &name, fold_case, false)
}

/// Whether the component pattern matches some name that starts with `prefix`.
pub fn matches_some_name_starting_with(pattern: &str, prefix: &str, fold_case: bool) -> bool {
    let tokens = compile(pattern);
    let prefix: Vec<char> = prefix.chars().collect();
    dot_rule(&tokens, &prefix) && run(&tokens, &prefix, fold_case, true)
}

/// Whether a component holds an unescaped metacharacter.
pub fn is_pattern(component: &str) -> bool {
    compile(component)
        .iter()
        .any(|t| !matches!(t, Token::Literal(_)))
}

/// A pattern's canonical components: split on `/`, empty and `.` dropped, `..` popping (never
/// above the root), `~/` read as `/home/`.
pub fn components(pattern: &str) -> Vec<&str> {
    let rest = pattern
        .strip_prefix("~/")
        .or(if pattern == "~" { Some("") } else { None });
    let mut out: Vec<&str> = Vec::new();
    if rest.is_some() {
        out.push("home");
    }
    for component in rest.unwrap_or(pattern).split('/') {
        match component {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_component_matching() {
        assert!(matches("e?c", "etc", false));
        assert!(matches("*", "etc", false));
        assert!(matches("[e]tc", "etc", false));
        assert!(matches("[!a]tc", "etc", false));
        assert!(matches("[a-f]tc", "etc", false));
        assert!(!matches("[!e]tc", "etc", false));
        assert!(matches("p??s??", "passwd", false));
        assert!(!matches("e?", "etc", false));
        assert!(matches(".e*", ".env", false));
        assert!(!matches("*", ".env", false));
        assert!(!matches("?env", ".env", false));
        assert!(matches("\\*", "*", false));
        assert!(!matches("\\*", "x", false));
        assert!(matches(".E*", ".env", true));
        assert!(!matches(".E*", ".env", false));
        assert!(matches("a*b*c", "axxbyyc", false));
        assert!(!matches("a*b*c", "axxbyy", false));
    }

    #[test]
    fn prefix_matching_for_dotted_entries() {
        assert!(matches_some_name_starting_with(".env.*", ".env.", false));
        assert!(matches_some_name_starting_with(".e*", ".env.", false));
        assert!(!matches_some_name_starting_with("x*", ".env.", false));
        assert!(!matches_some_name_starting_with("*", ".env.", false));
    }

    #[test]
    fn components_and_escaping() {
        assert_eq!(components("/e?c//./x/../passwd"), ["e?c", "passwd"]);
        assert_eq!(components("~/.s*"), ["home", ".s*"]);
        assert_eq!(escape("a*b"), "a\\*b");
        assert!(is_pattern("a*"));
        assert!(!is_pattern("a\\*"));
    }

    proptest::proptest! {
        /// Matching never panics on any pattern and name, and a pattern made by `escape`
        /// matches exactly its own text.
        #[test]
        fn any_pattern_and_name(pattern in "[a-c*?\\[\\]!^\\\\.-]{0,12}", name in "[a-c.*?-]{0,8}") {
            let _ = matches(&pattern, &name, false);
            let _ = matches_some_name_starting_with(&pattern, &name, true);
            proptest::prop_assert!(matches(&escape(&name), &name, false));
        }
    }
}
