//! The one place the bash parser is called (SPEC §21.3, §21.5: "whichever it is lives behind one
//! function"): [`parse`] turns a command line into the flat [`Script`] the shell reading walks,
//! so nothing else in core knows `brush-parser`'s syntax tree.
//!
//! Why `brush-parser` and not `tree-sitter-bash` (side by side on the shell strings of both
//! conformance files and on the fuzz target; figures in BENCHMARKS.md, "Hardline v2: parser
//! choice"): both accept the same 729 of 734 strings; brush-parser parses them in about 2.5 µs
//! each against about 6 µs, is one pure-Rust crate where tree-sitter needs its C runtime crate as
//! well, and its worst cases can be fenced off before it runs, while tree-sitter's error recovery
//! took 2.2 s on 16 KiB of `a|` and 10.5 s on 64 KiB of `<<`.
//!
//! brush-parser's PEG grammar backtracks exponentially on an unmatched `(` (24 of them take a
//! second) and on an unclosed `case`, and recurses once per nesting level, so [`parse`] refuses,
//! before parsing, a string whose brackets nest deeper than [`MAX_NESTING`], whose `(` operators
//! are not all closed, whose `case` words outnumber its `esac` words, or that has more than
//! [`MAX_TOKENS`] tokens, and one whose I/O number overflows a file descriptor (the grammar
//! unwraps its parse). A refused or rejected string is retried line by line (bash runs the
//! complete commands before a syntax error, so a bad last line must not hide the first ones); a
//! line that still fails gets no shell reading, which SPEC §21.3 allows ("a string the parser
//! rejects keeps the other readings"). The tokenizer and parser are called through their uncached
//! entry points: the cached ones keep a process-wide table behind a lock.

use brush_parser::ast::{
    self, Command, CommandPrefixOrSuffixItem, CompoundCommand, CompoundList, IoFileRedirectTarget,
    IoRedirect, Pipeline,
};
use brush_parser::{ParserOptions, Token};

/// Deepest bracket nesting (`(`, `{`, `[` counted together, quoted or not) handed to the parser.
pub const MAX_NESTING: usize = 32;
/// Most tokens handed to the parser in one call (about 2 µs per token at worst on the project
/// machine); a longer script is read line by line.
pub const MAX_TOKENS: usize = 4096;

/// One simple command as written: raw words (quotes and expansions still in them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawCommand {
    /// `NAME=value` and `NAME+=value` assignments before the command word.
    pub assignments: Vec<Assignment>,
    /// The command word and its arguments.
    pub words: Vec<String>,
    /// Raw targets of file redirections (`> /etc/hosts`, `< /etc/passwd`, here-strings).
    pub redirects: Vec<String>,
}

/// One prefix assignment as written: the name, whether it sets or appends, and the raw value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub name: String,
    pub op: AssignOp,
    pub raw: String,
}

/// `=` or bash's `+=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignOp {
    Set,
    Append,
}

/// A parsed command line: pipelines in textual order, each a list of simple commands. Compound
/// commands (subshells, groups, `if`, loops, `case`, function bodies) are flattened into it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    pub pipelines: Vec<Vec<RawCommand>>,
}

fn options() -> ParserOptions {
    ParserOptions::default()
}

/// Parses `text` as a bash command line; `None` when no line of it could be parsed.
pub fn parse(text: &str) -> Option<Script> {
    let text = &*blank_heredoc_breaks(text);
    if let Some(script) = parse_whole(text) {
        return Some(script);
    }
    if !text.contains('\n') {
        return None;
    }
    let mut script = Script::default();
    let mut any = false;
    // The lines share one token budget, so a long script of short lines stays bounded too.
    let mut budget = 2 * MAX_TOKENS;
    for line in text.split('\n') {
        let tokens = estimated_tokens(line);
        if tokens > budget {
            break;
        }
        budget -= tokens;
        if let Some(part) = parse_whole(line) {
            any = true;
            script.pipelines.extend(part.pipelines);
        }
    }
    any.then_some(script)
}

/// brush-parser 0.4 never returns (its memory grows by about a gigabyte a second) on a
/// here-document operator whose delimiter is a carriage return or a form feed followed by an
/// operator and a comment: `<<\r<<#`, `<<\x0c;#` (found by the `hardline_readings` fuzz
/// target: 2.3 GB in 3 s on 2.6 KB of `<` with one `\r` and one `#`). Bash reads both characters
/// as part of a word; in a text with a here-document operator they are read as blanks instead.
/// That can split a word where bash would not (`/\r` reads as `/`): the readings of such texts
/// (a here-document and a carriage return or form feed, rare outside attacks) may differ from
/// bash's words, where before they got no reading at all, since the parser never returned.
fn blank_heredoc_breaks(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains("<<") && text.contains(['\r', '\x0c']) {
        std::borrow::Cow::Owned(text.replace(['\r', '\x0c'], " "))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// Whether `text` passes the guards [`parse`] applies before calling the parser on it whole.
pub fn within_guards(text: &str) -> bool {
    nesting_depth(text) <= MAX_NESTING && estimated_tokens(text) <= MAX_TOKENS
}

/// brush-parser 0.4 also never returns on a here-document with an empty delimiter (`<<''`,
/// `<<""`) followed by an operator and a comment that runs to the end of the text: `<<'';#`,
/// `<<'' >#`, `<<''<x #` (the `hardline_readings` fuzz target again: 2.7 KB, mostly `<`, past its
/// 2 s limit). A comment ended by a newline does not trigger it, and neither do the carriage
/// return and form feed cases above; a newline after a command line's last character changes
/// nothing in bash. So a text holding a here-document operator is parsed with a newline at its
/// end when it has none.
///
/// Nor does it return (in a release build it panics on an `unwrap`; found by the fuzz target
/// on 1.4 KB, minimized to `<<''<\` with that newline) when such a text ends in a line
/// continuation, a backslash and a newline. Bash reads a backslash at the very end of its
/// input as itself and a continuation at the end as nothing: so a text ending in an odd run of
/// backslashes gets one more backslash and a newline (the backslash escaped, as bash reads
/// it), and one ending in a continuation gets a second newline (the continuation joins an empty
/// line).
fn end_heredoc_line(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("<<") {
        return std::borrow::Cow::Borrowed(text);
    }
    match text.strip_suffix('\n') {
        None if ends_in_an_odd_run_of_backslashes(text) => {
            std::borrow::Cow::Owned(format!("{text}\\\n"))
        }
        None => std::borrow::Cow::Owned(format!("{text}\n")),
        Some(line) if ends_in_an_odd_run_of_backslashes(line) => {
            std::borrow::Cow::Owned(format!("{text}\n"))
        }
        Some(_) => std::borrow::Cow::Borrowed(text),
    }
}

/// Whether `text`'s last character is a backslash that no backslash before it escapes.
fn ends_in_an_odd_run_of_backslashes(text: &str) -> bool {
    text.bytes().rev().take_while(|b| *b == b'\\').count() % 2 == 1
}

/// One call of the parser on the whole of `text`, behind the guards.
fn parse_whole(text: &str) -> Option<Script> {
    if !within_guards(text) {
        return None;
    }
    let text = &*end_heredoc_line(text);
    let program = caught(|| {
        let options = options();
        let tokens =
            brush_parser::uncached_tokenize_str(text, &options.tokenizer_options()).ok()?;
        if tokens.len() > MAX_TOKENS || !tokens_are_safe(&tokens) {
            return None;
        }
        brush_parser::parse_tokens(&tokens, &options).ok()
    })?;
    let mut script = Script::default();
    for complete in &program.complete_commands {
        flatten_list(complete, &mut script);
    }
    Some(script)
}

/// `parse`'s call of brush-parser, with a panic inside it caught and answered `None`, as for any
/// text the parser refuses (no reading; the hardline layer reads nothing from it). brush-parser
/// 0.4's tokenizer `unwrap`s a character it expects after a nested construct
/// (`tokenizer.rs:665`), and an arithmetic expansion left open around a command substitution on
/// a line with a here-document operator (`<<EOF $(($(x))` and a newline) reaches the end of the
/// input there (CI's 60 s fuzz run on 666de97, minimized to `<<''<$(($())`). A text an agent
/// sends must never unwind the policy gate, and the parser may have more such `unwrap`s than
/// inputs can be guarded against here, so every call is caught rather than only this one
/// shape. Nothing of the parser's state outlives the call (it owns its tokenizer), so the
/// unwound state is not observed. The panic message still goes to the process's panic hook
/// (standard error by default).
fn caught<T>(parse: impl FnOnce() -> Option<T>) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse))
        .ok()
        .flatten()
}

/// An upper bound on the tokenizer's output, counted before tokenizing (the tokenizer itself
/// costs about a microsecond per token): every run of non-blank characters and every operator
/// character may be a token.
fn estimated_tokens(text: &str) -> usize {
    let mut count = 0;
    let mut in_word = false;
    for b in text.bytes() {
        let blank = matches!(b, b' ' | b'\t');
        let operator = matches!(b, b';' | b'&' | b'|' | b'<' | b'>' | b'(' | b')' | b'\n');
        if operator {
            count += 1;
        }
        if !blank && !operator && !in_word {
            count += 1;
        }
        in_word = !blank && !operator;
    }
    count
}

/// The deepest nesting of `(`, `{` and `[`, quotes ignored (so the figure is never lower than
/// what the tokenizer and parser recurse on).
fn nesting_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for b in text.bytes() {
        match b {
            b'(' | b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Every `(` operator is closed by a later `)` (a `)` with nothing open is a `case` pattern's),
/// and no `case` is left without its `esac`: the two shapes on which the grammar backtracks
/// exponentially. And no I/O number (digits right before a `<` or `>` operator) is too large
/// for a file descriptor: brush-parser 0.4 parses one with `unwrap` and panics (found by the
/// `hardline_readings` fuzz target: `14347467612 8<…`).
fn tokens_are_safe(tokens: &[Token]) -> bool {
    let oversized_io_number = tokens.windows(2).any(|pair| {
        matches!(
            pair,
            [Token::Word(word, _), Token::Operator(op, _)]
                if op.starts_with(['<', '>'])
                    && !word.is_empty()
                    && word.chars().all(|c| c.is_ascii_digit())
                    && word.parse::<ast::IoFd>().is_err()
        )
    });
    if oversized_io_number {
        return false;
    }
    let (mut open, mut cases) = (0usize, 0isize);
    for token in tokens {
        match token {
            Token::Operator(op, _) if op == "(" => open += 1,
            Token::Operator(op, _) if op == ")" => open = open.saturating_sub(1),
            Token::Word(word, _) if word == "case" => cases += 1,
            Token::Word(word, _) if word == "esac" => cases -= 1,
            _ => {}
        }
    }
    open == 0 && cases <= 0
}

fn flatten_list(list: &CompoundList, script: &mut Script) {
    for item in &list.0 {
        let and_or = &item.0;
        flatten_pipeline(&and_or.first, script);
        for next in &and_or.additional {
            match next {
                ast::AndOr::And(p) | ast::AndOr::Or(p) => flatten_pipeline(p, script),
            }
        }
    }
}

fn flatten_pipeline(pipeline: &Pipeline, script: &mut Script) {
    let mut simple = Vec::new();
    for command in &pipeline.seq {
        match command {
            Command::Simple(c) => simple.push(simple_command(c, script)),
            Command::Compound(compound, redirects) => {
                flatten_compound(compound, script);
                if let Some(list) = redirects {
                    simple.push(RawCommand {
                        redirects: list.0.iter().filter_map(redirect_target).collect(),
                        ..RawCommand::default()
                    });
                }
            }
            Command::Function(function) => {
                flatten_compound(&function.body.0, script);
            }
            Command::ExtendedTest(test, _) => {
                let mut words = vec!["[[".to_owned()];
                extended_test_words(&test.expr, &mut words);
                simple.push(RawCommand {
                    words,
                    ..RawCommand::default()
                });
            }
        }
    }
    script.pipelines.push(simple);
}

fn extended_test_words(expr: &ast::ExtendedTestExpr, out: &mut Vec<String>) {
    use ast::ExtendedTestExpr as E;
    match expr {
        E::And(a, b) | E::Or(a, b) => {
            extended_test_words(a, out);
            extended_test_words(b, out);
        }
        E::Not(a) | E::Parenthesized(a) => extended_test_words(a, out),
        E::UnaryTest(_, w) => out.push(w.value.clone()),
        E::BinaryTest(_, a, b) => {
            out.push(a.value.clone());
            out.push(b.value.clone());
        }
    }
}

fn flatten_compound(compound: &CompoundCommand, script: &mut Script) {
    match compound {
        CompoundCommand::Arithmetic(_) | CompoundCommand::ArithmeticForClause(_) => {}
        CompoundCommand::BraceGroup(g) => flatten_list(&g.list, script),
        CompoundCommand::Subshell(s) => flatten_list(&s.list, script),
        CompoundCommand::ForClause(f) => {
            if let Some(values) = &f.values {
                // The loop's values are words of the command line too (`for f in /etc/*`).
                script.pipelines.push(vec![RawCommand {
                    words: std::iter::once("for".to_owned())
                        .chain(values.iter().map(|w| w.value.clone()))
                        .collect(),
                    ..RawCommand::default()
                }]);
            }
            flatten_list(&f.body.list, script);
        }
        CompoundCommand::CaseClause(c) => {
            for item in &c.cases {
                if let Some(list) = &item.cmd {
                    flatten_list(list, script);
                }
            }
        }
        CompoundCommand::IfClause(i) => {
            flatten_list(&i.condition, script);
            flatten_list(&i.then, script);
            for clause in i.elses.iter().flatten() {
                if let Some(condition) = &clause.condition {
                    flatten_list(condition, script);
                }
                flatten_list(&clause.body, script);
            }
        }
        CompoundCommand::WhileClause(w) | CompoundCommand::UntilClause(w) => {
            flatten_list(&w.0, script);
            flatten_list(&w.1.list, script);
        }
        CompoundCommand::Coprocess(c) => {
            let mut inner = Script::default();
            flatten_pipeline(
                &Pipeline {
                    timed: None,
                    bang: false,
                    seq: vec![(*c.body).clone()],
                },
                &mut inner,
            );
            script.pipelines.extend(inner.pipelines);
        }
    }
}

fn simple_command(command: &ast::SimpleCommand, script: &mut Script) -> RawCommand {
    let mut raw = RawCommand::default();
    for item in command.prefix.iter().flat_map(|p| p.0.iter()) {
        prefix_or_suffix(item, true, &mut raw, script);
    }
    if let Some(word) = &command.word_or_name {
        raw.words.push(word.value.clone());
    }
    for item in command.suffix.iter().flat_map(|s| s.0.iter()) {
        prefix_or_suffix(item, false, &mut raw, script);
    }
    raw
}

fn prefix_or_suffix(
    item: &CommandPrefixOrSuffixItem,
    in_prefix: bool,
    raw: &mut RawCommand,
    script: &mut Script,
) {
    match item {
        CommandPrefixOrSuffixItem::IoRedirect(redirect) => {
            if let Some(target) = redirect_target(redirect) {
                raw.redirects.push(target);
            }
            if let IoRedirect::File(_, _, IoFileRedirectTarget::ProcessSubstitution(_, sub)) =
                redirect
            {
                flatten_list(&sub.list, script);
            }
        }
        CommandPrefixOrSuffixItem::Word(word) => raw.words.push(word.value.clone()),
        CommandPrefixOrSuffixItem::AssignmentWord(assignment, word) => {
            match (&assignment.name, &assignment.value) {
                (ast::AssignmentName::VariableName(name), ast::AssignmentValue::Scalar(value))
                    if in_prefix =>
                {
                    raw.assignments.push(Assignment {
                        name: name.clone(),
                        op: if assignment.append {
                            AssignOp::Append
                        } else {
                            AssignOp::Set
                        },
                        raw: value.value.clone(),
                    });
                }
                // An assignment after the command word is an argument (`export X=1`, `env
                // X=1 cmd`), and array assignments stay whole words.
                _ => raw.words.push(word.value.clone()),
            }
        }
        CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => flatten_list(&sub.list, script),
    }
}

/// The target word of a file redirection or here-string (here-documents are bodies, not paths).
fn redirect_target(redirect: &IoRedirect) -> Option<String> {
    match redirect {
        IoRedirect::File(_, _, IoFileRedirectTarget::Filename(word))
        | IoRedirect::File(_, _, IoFileRedirectTarget::Duplicate(word))
        | IoRedirect::HereString(_, word)
        | IoRedirect::OutputAndError(word, _) => Some(word.value.clone()),
        IoRedirect::File(..) | IoRedirect::HereDocument(..) => None,
    }
}
