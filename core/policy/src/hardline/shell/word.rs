//! Static expansion of one raw shell word (SPEC §21.3): quote removal (`'…'`, `"…"`, `$'…'` with
//! its ANSI-C escapes, backslashes, line continuations), brace expansion, `$IFS` splitting,
//! literal parameter substitution, and the expansions that give nothing (`$@`, `$*`, an empty
//! `$()`). Anything else that would need a running shell makes the word unknown (`⟨?⟩`), which
//! matches nothing. Command substitutions are handed back so the caller reads their commands too.

use std::collections::BTreeMap;

/// One word of a static argv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Word {
    /// A word whose text is fully known. `glob` is set when it holds an unquoted `*`, `?` or
    /// `[`: the text as a pattern, quoted metacharacters escaped with `\`.
    Known { text: String, glob: Option<String> },
    /// A word that depends on something only a running shell knows: `⟨?⟩`, which matches nothing.
    Unknown,
}

impl Word {
    pub fn literal(text: &str) -> Word {
        Word::Known {
            text: text.to_owned(),
            glob: None,
        }
    }

    pub fn text(&self) -> Option<&str> {
        match self {
            Word::Known { text, .. } => Some(text),
            Word::Unknown => None,
        }
    }

    /// The text as it appears in a joined argv.
    pub fn shown(&self) -> &str {
        self.text().unwrap_or(UNKNOWN)
    }
}

/// How an unknown word is written in a joined argv.
pub const UNKNOWN: &str = "⟨?⟩";

/// Most words one raw word may expand into (brace expansion multiplies).
const MAX_EXPANSION: usize = 256;

/// Known variables: a name maps to its literal value.
pub type Variables = BTreeMap<String, String>;

/// One piece of a word after quote removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    Char {
        c: char,
        quoted: bool,
    },
    /// `$IFS` outside double quotes: the word splits here.
    Split,
    /// `$IFS` inside double quotes: read both split and as a quoted space.
    QuotedIfs,
    /// An expansion only a running shell could make.
    Unknown,
    /// Quotes were here, so the word exists even if empty (`''`).
    Quotes,
}

/// The expansion of one raw word: its alternative readings (one, or two when `$IFS` appears
/// inside double quotes), each a list of words, and the command substitutions found in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expansion {
    pub readings: Vec<Vec<Word>>,
    pub substitutions: Vec<String>,
}

/// Expands one raw word with the variables known so far.
pub fn expand(raw: &str, variables: &Variables) -> Expansion {
    if !raw.is_empty() && !raw.contains(['\\', '\'', '"', '`', '$', '{']) {
        return Expansion {
            readings: vec![vec![literal_word(raw)]],
            substitutions: Vec::new(),
        };
    }
    expand_pieces(raw, variables)
}

/// A non-empty raw word with nothing to remove or expand (no quote, escape, `$`, backtick or
/// `{`): the word is its own text, and its own pattern when it holds `*`, `?` or `[`. This is
/// what [`expand_pieces`] makes of it (every character an unquoted [`Piece::Char`], no brace
/// and no split), without building the pieces: most words of real commands are like this.
fn literal_word(raw: &str) -> Word {
    Word::Known {
        text: raw.to_owned(),
        glob: raw.contains(['*', '?', '[']).then(|| raw.to_owned()),
    }
}

/// The general expansion: quote removal, escapes, parameters, substitutions, braces and `$IFS`
/// splitting, character by character.
fn expand_pieces(raw: &str, variables: &Variables) -> Expansion {
    let mut pieces = Vec::new();
    let mut substitutions = Vec::new();
    let chars: Vec<char> = raw.chars().collect();
    scan(&chars, variables, false, &mut pieces, &mut substitutions);
    let mut braced = Vec::new();
    brace_expand(&pieces, &mut braced);
    let has_quoted_ifs = braced.iter().any(|word| word.contains(&Piece::QuotedIfs));
    let mut readings = vec![split_words(&braced, true)];
    if has_quoted_ifs {
        readings.push(split_words(&braced, false));
    }
    Expansion {
        readings,
        substitutions,
    }
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Quote removal and expansion over `chars`; `in_double` inside `"…"`.
fn scan(
    chars: &[char],
    variables: &Variables,
    in_double: bool,
    out: &mut Vec<Piece>,
    substitutions: &mut Vec<String>,
) {
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                match chars.get(i + 1) {
                    // A line continuation disappears.
                    Some('\n') => {}
                    Some(&next) if !in_double || matches!(next, '$' | '`' | '"' | '\\') => {
                        out.push(Piece::Char {
                            c: next,
                            quoted: true,
                        });
                    }
                    Some(&next) => {
                        out.push(Piece::Char { c, quoted: true });
                        out.push(Piece::Char {
                            c: next,
                            quoted: true,
                        });
                    }
                    None => out.push(Piece::Char {
                        c,
                        quoted: in_double,
                    }),
                }
                i += 2;
            }
            '\'' if !in_double => {
                let end = find_char(chars, i + 1, '\'');
                out.push(Piece::Quotes);
                for &q in &chars[i + 1..end] {
                    out.push(Piece::Char { c: q, quoted: true });
                }
                i = end + 1;
            }
            '"' if !in_double => {
                let end = find_double_quote_end(chars, i + 1);
                out.push(Piece::Quotes);
                scan(&chars[i + 1..end], variables, true, out, substitutions);
                i = end + 1;
            }
            '`' => {
                let end = find_backtick_end(chars, i + 1);
                let inner: String = chars[i + 1..end].iter().collect();
                substitution(inner, out, substitutions);
                i = end + 1;
            }
            '$' => i = dollar(chars, i, variables, in_double, out, substitutions),
            _ => {
                out.push(Piece::Char {
                    c,
                    quoted: in_double,
                });
                i += 1;
            }
        }
    }
}

/// A command substitution: empty gives nothing, anything else is unknown and read separately.
fn substitution(inner: String, out: &mut Vec<Piece>, substitutions: &mut Vec<String>) {
    if inner.trim().is_empty() {
        return;
    }
    out.push(Piece::Unknown);
    substitutions.push(inner);
}

/// One `$…` expansion starting at `chars[start] == '$'`; returns the index after it.
fn dollar(
    chars: &[char],
    start: usize,
    variables: &Variables,
    in_double: bool,
    out: &mut Vec<Piece>,
    substitutions: &mut Vec<String>,
) -> usize {
    let literal_dollar = |out: &mut Vec<Piece>| {
        out.push(Piece::Char {
            c: '$',
            quoted: in_double,
        });
        start + 1
    };
    let Some(&next) = chars.get(start + 1) else {
        return literal_dollar(out);
    };
    match next {
        '\'' if !in_double => {
            let end = find_ansi_c_end(chars, start + 2);
            out.push(Piece::Quotes);
            for c in ansi_c(&chars[start + 2..end]) {
                out.push(Piece::Char { c, quoted: true });
            }
            end + 1
        }
        '"' if !in_double => {
            let end = find_double_quote_end(chars, start + 2);
            out.push(Piece::Quotes);
            scan(&chars[start + 2..end], variables, true, out, substitutions);
            end + 1
        }
        '(' if chars.get(start + 2) == Some(&'(') => {
            // Arithmetic expansion: only a shell can evaluate it.
            let end = find_paren_end(chars, start + 2);
            out.push(Piece::Unknown);
            (end + 1).min(chars.len())
        }
        '(' => {
            let end = find_paren_end(chars, start + 1);
            let inner: String = chars[start + 2..end.min(chars.len())].iter().collect();
            substitution(inner, out, substitutions);
            (end + 1).min(chars.len())
        }
        '{' => {
            let end = find_brace_end(chars, start + 1);
            let inner: String = chars[start + 2..end.min(chars.len())].iter().collect();
            braced_parameter(&inner, variables, in_double, out);
            (end + 1).min(chars.len())
        }
        '@' | '*' => start + 2,
        c if is_name_start(c) => {
            let mut end = start + 1;
            while end < chars.len() && is_name_char(chars[end]) {
                end += 1;
            }
            let name: String = chars[start + 1..end].iter().collect();
            parameter(&name, variables, in_double, out);
            end
        }
        c if c.is_ascii_digit() || matches!(c, '#' | '?' | '-' | '$' | '!') => {
            out.push(Piece::Unknown);
            start + 2
        }
        _ => literal_dollar(out),
    }
}

/// `${…}`: `${IFS…}` with any modifier splits, `${@}`/`${*}` give nothing, `${NAME}` with a
/// known value is that value; anything else is unknown.
fn braced_parameter(inner: &str, variables: &Variables, in_double: bool, out: &mut Vec<Piece>) {
    if let Some(rest) = inner.strip_prefix("IFS")
        && !rest.starts_with(is_name_char)
    {
        out.push(if in_double {
            Piece::QuotedIfs
        } else {
            Piece::Split
        });
        return;
    }
    match inner {
        "@" | "*" => {}
        name if !name.is_empty()
            && name.starts_with(is_name_start)
            && name.chars().all(is_name_char) =>
        {
            parameter(name, variables, in_double, out);
        }
        _ => out.push(Piece::Unknown),
    }
}

/// `$NAME`: `IFS` splits, a known variable is substituted (split on blanks outside double
/// quotes, as the shell would), anything else is unknown.
fn parameter(name: &str, variables: &Variables, in_double: bool, out: &mut Vec<Piece>) {
    if name == "IFS" {
        out.push(if in_double {
            Piece::QuotedIfs
        } else {
            Piece::Split
        });
        return;
    }
    match variables.get(name) {
        Some(value) => {
            for c in value.chars() {
                if !in_double && matches!(c, ' ' | '\t' | '\n') {
                    out.push(Piece::Split);
                } else {
                    out.push(Piece::Char { c, quoted: true });
                }
            }
        }
        None => out.push(Piece::Unknown),
    }
}

fn find_char(chars: &[char], from: usize, target: char) -> usize {
    chars[from.min(chars.len())..]
        .iter()
        .position(|&c| c == target)
        .map_or(chars.len(), |p| from + p)
}

/// The index of the closing `"` (or the end), skipping escapes and nested substitutions.
fn find_double_quote_end(chars: &[char], from: usize) -> usize {
    let mut i = from;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i,
            '`' => i = find_backtick_end(chars, i + 1) + 1,
            '$' if chars.get(i + 1) == Some(&'(') => i = find_paren_end(chars, i + 1) + 1,
            '$' if chars.get(i + 1) == Some(&'{') => i = find_brace_end(chars, i + 1) + 1,
            _ => i += 1,
        }
    }
    chars.len()
}

fn find_backtick_end(chars: &[char], from: usize) -> usize {
    let mut i = from;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '`' => return i,
            _ => i += 1,
        }
    }
    chars.len()
}

fn find_ansi_c_end(chars: &[char], from: usize) -> usize {
    let mut i = from;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '\'' => return i,
            _ => i += 1,
        }
    }
    chars.len()
}

/// The index of the `)` matching the `(` at `open`, skipping quotes (or the end).
fn find_paren_end(chars: &[char], open: usize) -> usize {
    find_close(chars, open, '(', ')')
}

fn find_brace_end(chars: &[char], open: usize) -> usize {
    find_close(chars, open, '{', '}')
}

fn find_close(chars: &[char], open: usize, opening: char, closing: char) -> usize {
    let mut depth = 0usize;
    let mut i = open;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '\'' => i = find_char(chars, i + 1, '\''),
            '"' => i = find_double_quote_end(chars, i + 1),
            c if c == opening => depth += 1,
            c if c == closing => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
        i += 1;
    }
    chars.len()
}

/// Decodes the body of `$'…'`.
fn ansi_c(body: &[char]) -> Vec<char> {
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        if body[i] != '\\' || i + 1 >= body.len() {
            out.push(body[i]);
            i += 1;
            continue;
        }
        let e = body[i + 1];
        i += 2;
        let simple = match e {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'e' | 'E' => Some('\u{1b}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '\'' | '"' | '?' => Some(e),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            continue;
        }
        let (radix, max, start) = match e {
            '0'..='7' => (8, 3, i - 1),
            'x' => (16, 2, i),
            'u' => (16, 4, i),
            'U' => (16, 8, i),
            'c' => {
                if let Some(&ctl) = body.get(i) {
                    out.push(char::from_u32(ctl as u32 & 0x1f).unwrap_or(ctl));
                    i += 1;
                }
                continue;
            }
            _ => {
                out.push('\\');
                out.push(e);
                continue;
            }
        };
        let digits: String = body[start..]
            .iter()
            .take(max)
            .take_while(|c| c.is_digit(radix))
            .collect();
        if digits.is_empty() {
            out.push('\\');
            out.push(e);
            continue;
        }
        i = start + digits.chars().count();
        if let Some(c) = u32::from_str_radix(&digits, radix)
            .ok()
            .map(|v| if radix == 8 { v & 0xff } else { v })
            .and_then(char::from_u32)
        {
            out.push(c);
        }
    }
    out
}

/// Brace expansion over unquoted `{a,b}` (nested) and `{x..y}` sequences; at most
/// [`MAX_EXPANSION`] results, the rest left unexpanded.
fn brace_expand(pieces: &[Piece], out: &mut Vec<Vec<Piece>>) {
    let mut pending = vec![pieces.to_vec()];
    while let Some(word) = pending.pop() {
        if out.len() + pending.len() >= MAX_EXPANSION {
            out.push(word);
            continue;
        }
        match expand_first_brace(&word) {
            Some(alternatives) => pending.extend(alternatives.into_iter().rev()),
            None => out.push(word),
        }
    }
}

fn unquoted(piece: &Piece, c: char) -> bool {
    *piece == Piece::Char { c, quoted: false }
}

/// The alternatives of the first expandable brace expression in `word`, if any.
fn expand_first_brace(word: &[Piece]) -> Option<Vec<Vec<Piece>>> {
    for open in 0..word.len() {
        if !unquoted(&word[open], '{') {
            continue;
        }
        let mut depth = 0usize;
        let mut commas = Vec::new();
        for close in open + 1..word.len() {
            if unquoted(&word[close], '{') {
                depth += 1;
            } else if unquoted(&word[close], '}') {
                if depth > 0 {
                    depth -= 1;
                    continue;
                }
                let (prefix, body, suffix) =
                    (&word[..open], &word[open + 1..close], &word[close + 1..]);
                let parts: Vec<&[Piece]> = if commas.is_empty() {
                    match sequence(body) {
                        Some(items) => {
                            return Some(
                                items
                                    .into_iter()
                                    .map(|item| {
                                        let mut w = prefix.to_vec();
                                        w.extend(
                                            item.chars().map(|c| Piece::Char { c, quoted: true }),
                                        );
                                        w.extend_from_slice(suffix);
                                        w
                                    })
                                    .collect(),
                            );
                        }
                        None => break,
                    }
                } else {
                    let mut parts = Vec::new();
                    let mut from = open + 1;
                    for &comma in &commas {
                        parts.push(&word[from..comma]);
                        from = comma + 1;
                    }
                    parts.push(&word[from..close]);
                    parts
                };
                return Some(
                    parts
                        .into_iter()
                        .map(|part| {
                            let mut w = prefix.to_vec();
                            w.extend_from_slice(part);
                            w.extend_from_slice(suffix);
                            w
                        })
                        .collect(),
                );
            } else if depth == 0 && unquoted(&word[close], ',') {
                commas.push(close);
            }
        }
    }
    None
}

/// `{a..e}` or `{1..5}` (optionally with an increment): the items, or `None` if it is not one.
fn sequence(body: &[Piece]) -> Option<Vec<String>> {
    let text: String = body
        .iter()
        .map(|p| match p {
            Piece::Char { c, quoted: false } => Some(*c),
            _ => None,
        })
        .collect::<Option<String>>()?;
    let parts: Vec<&str> = text.split("..").collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let step: i64 = match parts.get(2) {
        Some(s) => s.parse::<i64>().ok()?.checked_abs()?.max(1),
        None => 1,
    };
    if let (Ok(a), Ok(b)) = (parts[0].parse::<i64>(), parts[1].parse::<i64>()) {
        let count = (a.abs_diff(b) / step.unsigned_abs()).min(MAX_EXPANSION as u64 - 1) as i64;
        let dir = if b >= a { step } else { -step };
        return Some((0..=count).map(|k| (a + k * dir).to_string()).collect());
    }
    let (mut a, mut b) = (parts[0].chars(), parts[1].chars());
    let (Some(x), None, Some(y), None) = (a.next(), a.next(), b.next(), b.next()) else {
        return None;
    };
    if !x.is_ascii_alphabetic() || !y.is_ascii_alphabetic() {
        return None;
    }
    let (lo, hi) = (x.min(y) as u8, x.max(y) as u8);
    Some(
        (lo..=hi)
            .step_by(step as usize)
            .map(|b| (b as char).to_string())
            .collect(),
    )
}

/// Splits brace-expanded words at `$IFS`; `split_quoted` decides how `"$IFS"` reads.
fn split_words(words: &[Vec<Piece>], split_quoted: bool) -> Vec<Word> {
    let mut out = Vec::new();
    for pieces in words {
        let mut current: Vec<Piece> = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Split => finish(&mut current, &mut out),
                Piece::QuotedIfs if split_quoted => finish(&mut current, &mut out),
                Piece::QuotedIfs => current.push(Piece::Char {
                    c: ' ',
                    quoted: true,
                }),
                other => current.push(*other),
            }
        }
        finish(&mut current, &mut out);
    }
    out
}

/// Turns the pieces of one word into a [`Word`]; an unquoted empty word disappears.
fn finish(current: &mut Vec<Piece>, out: &mut Vec<Word>) {
    let pieces = std::mem::take(current);
    if pieces.is_empty() {
        return;
    }
    if pieces.contains(&Piece::Unknown) {
        out.push(Word::Unknown);
        return;
    }
    let mut text = String::new();
    let mut pattern = String::new();
    let mut glob = false;
    let mut any = false;
    for piece in &pieces {
        match *piece {
            Piece::Char { c, quoted } => {
                any = true;
                text.push(c);
                if !quoted {
                    glob |= matches!(c, '*' | '?' | '[');
                } else if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                    pattern.push('\\');
                }
                pattern.push(c);
            }
            Piece::Quotes => any = true,
            Piece::Split | Piece::QuotedIfs | Piece::Unknown => {}
        }
    }
    if any {
        out.push(Word::Known {
            text,
            glob: glob.then_some(pattern),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(raw: &str) -> Vec<Vec<String>> {
        expand(raw, &Variables::new())
            .readings
            .into_iter()
            .map(|r| r.iter().map(|w| w.shown().to_owned()).collect())
            .collect()
    }

    #[test]
    fn quote_removal_concatenates_adjacent_parts() {
        assert_eq!(words("r''m"), [["rm"]]);
        assert_eq!(words("\"r\"m"), [["rm"]]);
        assert_eq!(words("c\"a\"t"), [["cat"]]);
        assert_eq!(words("r\\m"), [["rm"]]);
        assert_eq!(words("r\\\nm"), [["rm"]]);
        assert_eq!(words("''"), [[""]]);
        assert_eq!(words("/''"), [["/"]]);
    }

    #[test]
    fn ansi_c_quotes_are_decoded() {
        assert_eq!(words("$'\\x72\\x6d'"), [["rm"]]);
        assert_eq!(words("$'\\162\\155'"), [["rm"]]);
        assert_eq!(words("$'\\u0072m'"), [["rm"]]);
        assert_eq!(words("$'a\\'b'"), [["a'b"]]);
    }

    #[test]
    fn brace_expansion() {
        assert_eq!(words("{rm,-rf,/}"), [["rm", "-rf", "/"]]);
        assert_eq!(words("/{etc,usr}/x"), [["/etc/x", "/usr/x"]]);
        assert_eq!(words("/et{c,}/passwd"), [["/etc/passwd", "/et/passwd"]]);
        assert_eq!(words("{,a,b,}"), [["a", "b"]]);
        assert_eq!(words("'{a,b}'"), [["{a,b}"]]);
        assert_eq!(words("{1..3}"), [["1", "2", "3"]]);
        assert_eq!(words("{a}"), [["{a}"]]);
    }

    #[test]
    fn ifs_splits_and_quoted_ifs_reads_both_ways() {
        assert_eq!(words("rm${IFS}-rf${IFS}/"), [["rm", "-rf", "/"]]);
        assert_eq!(words("cat$IFS/etc/passwd"), [["cat", "/etc/passwd"]]);
        assert_eq!(words("a${IFS%?}b"), [["a", "b"]]);
        assert_eq!(words("\"a${IFS}b\""), [vec!["a", "b"], vec!["a b"]]);
    }

    #[test]
    fn empty_expansions_vanish_and_others_are_unknown() {
        assert_eq!(words("ca$@t"), [["cat"]]);
        assert_eq!(words("r${*}m"), [["rm"]]);
        assert_eq!(words("r$()m"), [["rm"]]);
        assert_eq!(words("r``m"), [["rm"]]);
        assert_eq!(words("$HOME/x"), [[UNKNOWN]]);
        assert_eq!(words("$((1+1))"), [[UNKNOWN]]);
        let e = expand("`echo -e \"\\x2f\"`", &Variables::new());
        assert_eq!(e.readings, vec![vec![Word::Unknown]]);
        assert_eq!(e.substitutions, ["echo -e \"\\x2f\""]);
    }

    #[test]
    fn known_variables_are_substituted() {
        let mut vars = Variables::new();
        vars.insert("X".into(), "/etc/shadow".into());
        vars.insert("F".into(), "-rf /".into());
        let read = |raw| {
            expand(raw, &vars)
                .readings
                .remove(0)
                .into_iter()
                .map(|w| w.shown().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(read("\"$X\""), ["/etc/shadow"]);
        assert_eq!(read("${X}"), ["/etc/shadow"]);
        assert_eq!(read("$F"), ["-rf", "/"]);
        assert_eq!(read("\"$F\""), ["-rf /"]);
        assert_eq!(read("${X:-y}"), [UNKNOWN]);
    }

    #[test]
    fn globs_are_marked_only_when_unquoted() {
        let e = expand("/e?c/'*'", &Variables::new());
        assert_eq!(
            e.readings[0],
            [Word::Known {
                text: "/e?c/*".into(),
                glob: Some("/e?c/\\*".into())
            }]
        );
        assert_eq!(
            expand("'/e?c'", &Variables::new()).readings[0],
            [Word::literal("/e?c")]
        );
        let e = expand("/[e]tc/'['", &Variables::new());
        assert_eq!(
            e.readings[0],
            [Word::Known {
                text: "/[e]tc/[".into(),
                glob: Some("/[e]tc/\\[".into())
            }]
        );
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 4096,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x6c69_7465_7261),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// The literal-word shortcut of `expand` gives what the piece-by-piece expansion gives,
        /// on words with and without the characters that send them the long way.
        #[test]
        fn the_literal_word_shortcut_expands_as_the_pieces_do(
            raw in "[a-z/.*?\\[\\]{},$'\"`\\\\ -]{0,10}",
            known in proptest::bool::ANY,
        ) {
            let mut variables = Variables::new();
            if known {
                variables.insert("X".into(), "/etc".into());
            }
            prop_assert_eq!(expand(&raw, &variables), expand_pieces(&raw, &variables), "{:?}", raw);
        }
    }
}
