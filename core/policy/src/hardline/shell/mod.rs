//! The shell reading and the argv readings (SPEC §21.3): every simple command of a command line
//! becomes a static argv — the words a shell would pass, as far as they can be known without
//! running anything — after wrappers, `cd`, `sh -c`/`eval`/`echo … | sh` recursion, `xargs` and
//! `find` have been read the way the shell and those programs would.
//!
//! The parser lives behind [`parser::parse`]; words are expanded by [`word::expand`]; protected
//! globs are matched by [`glob`]. Everything here is pure and bounded: at most
//! [`MAX_DEPTH`] levels of recursion and [`MAX_ARGVS`] argvs per string.

pub mod glob;
pub mod parser;
pub mod word;

use parser::{AssignOp, Assignment, RawCommand, Script};
pub use word::{UNKNOWN, Word};
use word::{Variables, expand};

use super::prefilter::Prefilter;

/// Deepest recursion into `sh -c`, `eval`, `echo … | sh` and command substitutions.
pub const MAX_DEPTH: usize = 8;
/// Most argvs one string yields; further commands are not read.
pub const MAX_ARGVS: usize = 4096;

/// One static argv with the redirection targets of its command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Argv {
    pub words: Vec<Word>,
    pub redirects: Vec<Word>,
}

/// Everything the shell reading found in one string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShellReading {
    pub argvs: Vec<Argv>,
    /// A `curl`/`wget` `-u`/`--user` word with a non-empty password (SPEC §21.4).
    pub user_password: bool,
}

/// The directory later commands run in, as `cd` and `pushd` leave it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cwd {
    /// No `cd` yet: relative operands stay as written.
    Initial,
    Known(String),
    /// A `cd` to something only a running shell knows: relative operands are unknown.
    Unknown,
}

/// Characters after which a string is no longer just blank-separated plain words; a string
/// without any is read without calling the parser (the pre-filter of SPEC §21.1).
fn is_plain_char(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            ' ' | '\t' | '-' | '_' | '.' | '/' | ',' | ':' | '+' | '%' | '@' | '^' | '='
        )
}

/// The programs a command word only a running shell knows is read as (SPEC §21.3, fail
/// closed): `rm`, the program of the destructive-command rule, and the programs whose own
/// reading reads further commands (the shells, `eval`, `xargs`, `find`), so that what they
/// would run is read too. A glob is read only as those its last component matches.
pub const DYNAMIC_PROGRAMS: [&str; 9] = [
    "rm", "sh", "bash", "dash", "zsh", "ksh", "eval", "xargs", "find",
];

/// How many dynamic command words of one string are also read as `eval` and `xargs`. Those two
/// read the rest of the same command again as a command, whose first word may be dynamic again,
/// so a string of many dynamic words would cost a parse per word and level; past this many, a
/// dynamic word is read as `rm`, the shells and `find` only (their readings read only what they
/// are given: a `-c` script, piped input, `find`'s operands), still fail-closed for the
/// destructive-command rule and for a shell's script. Measured on `$a $a …` (2,000 bytes,
/// release): 0.56 ms before dynamic words were read, 6.4 ms with every one read fully as an
/// argv per program; with this bound and the programs other than `rm` read only for what they
/// run, the bench's 4,000 such words take about 1.7× what they took before (BENCHMARKS.md),
/// within SPEC §21.5's 10 ms.
pub const MAX_FULL_DYNAMIC: usize = 4;

/// The programs a command word could be when no static reading knows it: every one of
/// [`DYNAMIC_PROGRAMS`] for a word made by a substitution or a variable without a literal
/// value (`⟨?⟩`), those its last component matches for a glob whose last component is a
/// pattern (`/b??/r?`, `/bin/r*`, `[r]m`); `None` for a static word (a glob only in a
/// directory, `/b?n/rm`, names its program already).
fn dynamic_programs(word: &Word) -> Option<Vec<&'static str>> {
    match word {
        Word::Unknown => Some(DYNAMIC_PROGRAMS.to_vec()),
        Word::Known {
            glob: Some(pattern),
            ..
        } => {
            let last = basename(pattern);
            glob::is_pattern(last).then(|| {
                DYNAMIC_PROGRAMS
                    .into_iter()
                    .filter(|program| glob::matches(last, program, false))
                    .collect()
            })
        }
        Word::Known { glob: None, .. } => None,
    }
}

/// Whether `text` would parse as itself, one word: plain characters and no blank.
fn is_one_plain_word(text: &str) -> bool {
    // An `=` may make the word an assignment (`X+=/` is one the static argv would not apply)
    // and a reserved word is grammar: both go through the parser.
    !text.is_empty()
        && !RESERVED.contains(&text)
        && text
            .chars()
            .all(|c| is_plain_char(c) && !matches!(c, ' ' | '\t' | '='))
}

/// Words the grammar treats specially at the start of a command.
const RESERVED: [&str; 22] = [
    "!", "{", "}", "case", "do", "done", "elif", "else", "esac", "fi", "for", "if", "in", "then",
    "until", "while", "[[", "]]", "function", "select", "coproc", "time",
];

/// Reads one collected string as a bash command line.
pub fn read_shell(text: &str, prefilter: Prefilter) -> ShellReading {
    let mut reader = Reader::new(prefilter);
    reader.read_text(text, 0);
    reader.finish()
}

/// Reads an argv given as a list (SPEC §21.3, argv readings): no quote removal, but wrappers,
/// `sh -c`, `find` and `xargs` as for a shell command.
pub fn read_argv<S: AsRef<str>>(words: &[S], prefilter: Prefilter) -> ShellReading {
    let mut reader = Reader::new(prefilter);
    let argv: Vec<Word> = words.iter().map(|w| Word::literal(w.as_ref())).collect();
    reader.analyze(argv, Vec::new(), &[], true, 0);
    reader.finish()
}

/// The parse of `text`: the word fast path when it applies (and the pre-filter is on), else
/// the parser.
fn script_of(text: &str, prefilter: Prefilter) -> Option<Script> {
    if prefilter == Prefilter::On
        && let Some(words) = simple_words(text)
    {
        if words.iter().any(|w| RESERVED.contains(w)) {
            return parser::parse(text);
        }
        let mut command = RawCommand::default();
        let mut leading = true;
        for word in words {
            match prefix_assignment(word) {
                Some(assignment) if leading => command.assignments.push(assignment),
                _ => {
                    leading = false;
                    command.words.push(word.to_owned());
                }
            }
        }
        return Some(Script {
            pipelines: vec![vec![command]],
        });
    }
    parser::parse(text)
}

/// The raw words of `text` when it is one simple command of blank-separated words made of
/// plain characters and quoted runs, which bash splits at the unquoted blanks and nowhere
/// else; `None` for anything else (the parser reads it).
///
/// A quoted run is `'…'` or `"…"` of printable ASCII, the double-quoted kind without `$`,
/// `` ` ``, `\` and `!` (the characters that expand or escape inside double quotes). The
/// words keep their quotes, as the parser's do: quote removal is [`word::expand`]'s, the same
/// for both paths. A string with quotes must also pass the parser's own guards, so that a
/// string the parser would refuse is refused here too. Agents' commands quote their arguments
/// (`grep -rn 'fn main' src`, `git commit -m "fix the build"`), and this path spares them the
/// tokenizer and the grammar (BENCHMARKS.md, "Hardline v2", run E).
fn simple_words(text: &str) -> Option<Vec<&str>> {
    let bytes = text.as_bytes();
    let mut words = Vec::new();
    let mut start = None;
    let mut quoted = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b' ' | b'\t' => {
                if let Some(from) = start.take() {
                    words.push(&text[from..i]);
                }
                i += 1;
            }
            quote @ (b'\'' | b'"') => {
                let close = bytes[i + 1..].iter().position(|b| *b == quote)? + i + 1;
                let allowed = |b: &u8| {
                    (0x20..0x7f).contains(b)
                        && (quote == b'\'' || !matches!(*b, b'$' | b'`' | b'\\' | b'!'))
                };
                if !bytes[i + 1..close].iter().all(allowed) {
                    return None;
                }
                quoted = true;
                start.get_or_insert(i);
                i = close + 1;
            }
            b if is_plain_char(char::from(b)) => {
                start.get_or_insert(i);
                i += 1;
            }
            _ => return None,
        }
    }
    if let Some(from) = start {
        words.push(&text[from..]);
    }
    if quoted && !parser::within_guards(text) {
        return None;
    }
    Some(words)
}

/// `NAME=value` split at the first `=`, if `NAME` is a shell name.
fn assignment(word: &str) -> Option<(&str, &str)> {
    let (name, value) = word.split_once('=')?;
    is_name(name).then_some((name, value))
}

/// A prefix assignment as the parser reads it: `NAME=value`, or bash's append `NAME+=value`.
fn prefix_assignment(word: &str) -> Option<Assignment> {
    let (name, raw) = word.split_once('=')?;
    let (name, op) = match name.strip_suffix('+') {
        Some(name) => (name, AssignOp::Append),
        None => (name, AssignOp::Set),
    };
    is_name(name).then(|| Assignment {
        name: name.to_owned(),
        op,
        raw: raw.to_owned(),
    })
}

/// A shell name: a letter or `_`, then letters, digits and `_`.
fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The last path component of a program word (`/bin/rm` → `rm`).
pub fn basename(text: &str) -> &str {
    text.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(text)
}

struct Reader {
    prefilter: Prefilter,
    variables: Variables,
    cwd: Cwd,
    out: ShellReading,
    /// Dynamic command words read as `eval` and `xargs` so far (see [`MAX_FULL_DYNAMIC`]).
    full_dynamic: usize,
}

/// What an `echo`/`printf` earlier in the same pipeline wrote.
type Piped = [Vec<Word>];

impl Reader {
    fn new(prefilter: Prefilter) -> Reader {
        Reader {
            prefilter,
            variables: Variables::new(),
            cwd: Cwd::Initial,
            out: ShellReading::default(),
            full_dynamic: 0,
        }
    }

    fn finish(self) -> ShellReading {
        self.out
    }

    fn full(&self) -> bool {
        self.out.argvs.len() >= MAX_ARGVS
    }

    fn read_text(&mut self, text: &str, depth: usize) {
        if depth > MAX_DEPTH || self.full() {
            return;
        }
        let Some(script) = script_of(text, self.prefilter) else {
            return;
        };
        for pipeline in &script.pipelines {
            self.read_pipeline(pipeline, depth);
        }
    }

    fn read_pipeline(&mut self, pipeline: &[RawCommand], depth: usize) {
        // Expand every command first: `echo … | xargs …` needs the earlier commands' words.
        let mut expanded = Vec::with_capacity(pipeline.len());
        for command in pipeline {
            for assignment in &command.assignments {
                self.assign_prefix(assignment);
            }
            let mut readings: Vec<Vec<Word>> = vec![Vec::new()];
            let mut substitutions = Vec::new();
            for raw in &command.words {
                let expansion = expand(raw, &self.variables);
                substitutions.extend(expansion.substitutions);
                readings = cross(readings, expansion.readings);
            }
            let mut redirects = Vec::new();
            for raw in &command.redirects {
                let expansion = expand(raw, &self.variables);
                substitutions.extend(expansion.substitutions);
                redirects.extend(expansion.readings.into_iter().flatten());
            }
            for inner in substitutions {
                self.read_text(&inner, depth + 1);
            }
            expanded.push((readings, redirects));
        }
        let last = expanded.len().saturating_sub(1);
        for (index, (readings, redirects)) in expanded.iter().enumerate() {
            let piped: Vec<Vec<Word>> = expanded[..index]
                .iter()
                .flat_map(|(r, _)| r.iter())
                .filter(|argv| {
                    argv.first()
                        .and_then(Word::text)
                        .is_some_and(|w| matches!(basename(w), "echo" | "printf"))
                })
                .cloned()
                .collect();
            for argv in readings {
                self.analyze(
                    argv.clone(),
                    redirects.clone(),
                    &piped,
                    index == last,
                    depth,
                );
            }
        }
    }

    /// `NAME=raw`: a fully known single-word value is remembered; anything else forgets `NAME`.
    fn assign(&mut self, name: &str, raw: &str) {
        let expansion = expand(raw, &self.variables);
        let value = match expansion.readings.first().map(Vec::as_slice) {
            Some([Word::Known { text, .. }]) => Some(text.clone()),
            Some([]) => Some(String::new()),
            _ => None,
        };
        self.set(name, value);
    }

    /// A prefix assignment. `NAME+=raw` appends to the value this string gave `NAME` earlier
    /// (`X=/etc; X+=/shadow; cat $X` reads `/etc/shadow`); when the string gave none that is
    /// known, the value alone is read, the conservative reading of SPEC §21.1 (bash appends to
    /// an unset variable's empty value).
    fn assign_prefix(&mut self, assignment: &Assignment) {
        match assignment.op {
            AssignOp::Set => self.assign(&assignment.name, &assignment.raw),
            AssignOp::Append => {
                let earlier = self.variables.get(&assignment.name).cloned();
                self.assign(&assignment.name, &assignment.raw);
                if let (Some(earlier), Some(value)) =
                    (earlier, self.variables.get_mut(&assignment.name))
                {
                    value.insert_str(0, &earlier);
                }
            }
        }
    }

    fn set(&mut self, name: &str, value: Option<String>) {
        match value {
            Some(v) => {
                self.variables.insert(name.to_owned(), v);
            }
            None => {
                self.variables.remove(name);
            }
        }
    }

    /// Reads one expanded simple command: wrappers, the program's own rules, then the argv.
    fn analyze(
        &mut self,
        argv: Vec<Word>,
        redirects: Vec<Word>,
        piped: &Piped,
        last_in_pipeline: bool,
        depth: usize,
    ) {
        if depth > MAX_DEPTH || self.full() {
            return;
        }
        let mut words = self.strip_wrappers(argv);
        if let Some(programs) = words.first().and_then(dynamic_programs) {
            self.read_dynamic(programs, words, redirects, piped, last_in_pipeline, depth);
            return;
        }
        let Some(program) = words
            .first()
            .and_then(Word::text)
            .map(|t| basename(t).to_owned())
        else {
            if !redirects.is_empty() || !words.is_empty() {
                self.emit(words, redirects);
            }
            return;
        };
        words[0] = Word::literal(&program);
        let args: Vec<Word> = words[1..].to_vec();
        match program.as_str() {
            "cd" | "pushd" => self.change_directory(&args),
            "export" | "declare" | "typeset" | "local" | "readonly" => {
                for arg in args.iter().filter_map(Word::text) {
                    if let Some((name, value)) = assignment(arg) {
                        self.set(name, Some(value.to_owned()));
                    }
                }
            }
            "curl" | "wget" if user_password(&args) => self.out.user_password = true,
            other => self.read_what_it_runs(other, &args, piped, last_in_pipeline, depth),
        }
        self.emit(words, redirects);
    }

    /// The commands a program of [`DYNAMIC_PROGRAMS`] other than `rm` would run with `args`:
    /// a shell's `-c` script or piped input, `eval`'s words, `xargs`'s command, `find`'s
    /// deletions and `-exec`s. Other programs run nothing further.
    fn read_what_it_runs(
        &mut self,
        program: &str,
        args: &[Word],
        piped: &Piped,
        last_in_pipeline: bool,
        depth: usize,
    ) {
        match program {
            "sh" | "bash" | "dash" | "zsh" | "ksh" => {
                self.shell_program(args, piped, last_in_pipeline, depth)
            }
            // Words with nothing for a parser to find (unknown, or plain text without blanks)
            // are read as the command they are, without printing and parsing them again.
            "eval" if args.iter().all(|w| w.text().is_none_or(is_one_plain_word)) => self.analyze(
                args.to_vec(),
                Vec::new(),
                piped,
                last_in_pipeline,
                depth + 1,
            ),
            "eval" => {
                let script: Vec<&str> = args.iter().map(Word::shown).collect();
                self.read_text(&script.join(" "), depth + 1);
            }
            "xargs" => self.xargs(args, piped, depth),
            "find" => self.find(args, depth),
            _ => {}
        }
    }

    /// A command word only a running shell knows (SPEC §21.3, fail closed): read as `rm` (an
    /// argv, for the destructive-command rule) and as what each other program it could be would
    /// run ([`Reader::read_what_it_runs`]; their own argvs would add nothing a rule could
    /// match), and as written, so a glob is also tested as every protected path it can match.
    /// Past [`MAX_FULL_DYNAMIC`] such words in one string, as `rm` and as written only.
    fn read_dynamic(
        &mut self,
        mut programs: Vec<&'static str>,
        words: Vec<Word>,
        redirects: Vec<Word>,
        piped: &Piped,
        last_in_pipeline: bool,
        depth: usize,
    ) {
        let rereads = |p: &&str| matches!(*p, "eval" | "xargs");
        if self.full_dynamic >= MAX_FULL_DYNAMIC {
            programs.retain(|p| !rereads(p));
        } else if programs.iter().any(rereads) {
            self.full_dynamic += 1;
        }
        let as_rm = programs.contains(&"rm");
        for program in programs {
            if program == "rm" {
                let mut as_rm = words.clone();
                as_rm[0] = Word::literal(program);
                self.emit(as_rm, redirects.clone());
            } else {
                self.read_what_it_runs(program, &words[1..], piped, last_in_pipeline, depth);
            }
        }
        // As written, for a glob's `protected_path` test on its pattern. An unknown word read as
        // `rm` needs no second argv: `⟨?⟩` matches nothing, so its argv shows nothing the `rm`
        // one does not (and one argv per word, as before, keeps the MAX_ARGVS budget as it was).
        if !(as_rm && words[0] == Word::Unknown) {
            self.emit(words, redirects);
        }
    }

    /// Drops leading assignments and the wrappers of SPEC §21.3 with their options.
    fn strip_wrappers(&mut self, mut words: Vec<Word>) -> Vec<Word> {
        loop {
            let Some(first) = words.first().and_then(Word::text) else {
                return words;
            };
            if let Some((name, value)) = assignment(first) {
                let (name, value) = (name.to_owned(), value.to_owned());
                self.set(&name, Some(value));
                words.remove(0);
                continue;
            }
            let skip = match basename(first) {
                "sudo" => options_end(
                    &words,
                    &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U"],
                ),
                "doas" => options_end(&words, &["-u", "-C"]),
                "env" => self.env_end(&mut words),
                "command" | "builtin" | "nohup" | "busybox" => options_end(&words, &[]),
                "exec" => options_end(&words, &["-a"]),
                "nice" => options_end(&words, &["-n"]),
                "time" => options_end(&words, &["-f", "-o"]),
                "stdbuf" => options_end(&words, &["-i", "-o", "-e"]),
                "timeout" => {
                    let end = options_end(&words, &["-s", "-k"]);
                    (end + 1).min(words.len())
                }
                _ => return words,
            };
            words.drain(..skip.max(1).min(words.len()));
        }
    }

    /// `env`: options, then `NAME=value` words (remembered); `-S STRING` is split into words.
    fn env_end(&mut self, words: &mut Vec<Word>) -> usize {
        let mut i = 1;
        while i < words.len() {
            let Some(text) = words[i].text() else { break };
            if text == "--" {
                return i + 1;
            }
            if let Some((name, value)) = assignment(text) {
                let (name, value) = (name.to_owned(), value.to_owned());
                self.set(&name, Some(value));
                i += 1;
                continue;
            }
            if matches!(text, "-S" | "--split-string") && i + 1 < words.len() {
                let split: Vec<Word> = words[i + 1]
                    .text()
                    .map(|s| {
                        s.split([' ', '\t'])
                            .filter(|w| !w.is_empty())
                            .map(Word::literal)
                            .collect()
                    })
                    .unwrap_or_else(|| vec![Word::Unknown]);
                words.splice(i..i + 2, split);
                return i;
            }
            if !text.starts_with('-') || text == "-" {
                break;
            }
            i += if matches!(text, "-u" | "-C" | "--unset" | "--chdir") {
                2
            } else {
                1
            };
        }
        i
    }

    fn change_directory(&mut self, args: &[Word]) {
        let target = args
            .iter()
            .find(|w| w.text().is_none_or(|t| !t.starts_with('-') || t == "-"));
        self.cwd = match target {
            None => Cwd::Known("/home".to_owned()),
            Some(Word::Unknown) => Cwd::Unknown,
            Some(Word::Known { text, glob }) => {
                if glob.is_some() || text == "-" {
                    Cwd::Unknown
                } else if text.starts_with('/') || text.starts_with('~') {
                    Cwd::Known(absolute(text))
                } else {
                    match &self.cwd {
                        Cwd::Known(dir) => Cwd::Known(absolute(&format!("{dir}/{text}"))),
                        Cwd::Initial | Cwd::Unknown => Cwd::Unknown,
                    }
                }
            }
        };
    }

    /// `sh -c SCRIPT`, or a shell reading its script from a pipe (`echo 'rm -rf /' | sh`).
    fn shell_program(&mut self, args: &[Word], piped: &Piped, last: bool, depth: usize) {
        let mut i = 0;
        let mut command_mode = false;
        let mut stdin_mode = false;
        while let Some(text) = args.get(i).and_then(Word::text) {
            if text == "--" || text == "-" {
                i += 1;
                break;
            }
            let Some(cluster) = text.strip_prefix('-').or_else(|| text.strip_prefix('+')) else {
                break;
            };
            if cluster.starts_with('-') {
                i += 1;
                continue;
            }
            command_mode |= cluster.contains('c');
            stdin_mode |= cluster.contains('s');
            i += if cluster.contains('o') || cluster.contains('O') {
                2
            } else {
                1
            };
        }
        if command_mode {
            if let Some(script) = args.get(i) {
                self.read_text(script.shown(), depth + 1);
            }
        } else if last && (stdin_mode || args.get(i).is_none()) {
            for argv in piped {
                let text: Vec<&str> = argv[1..]
                    .iter()
                    .filter(|w| !matches!(w.text(), Some("-n" | "-e" | "-E" | "-ne" | "-en")))
                    .map(Word::shown)
                    .collect();
                self.read_text(&text.join(" "), depth + 1);
            }
        }
    }

    /// `xargs [options] CMD ARGS…` reads as `CMD ARGS… W` for each word W piped in by an
    /// `echo`/`printf`, else `CMD ARGS… ⟨?⟩`.
    fn xargs(&mut self, args: &[Word], piped: &Piped, depth: usize) {
        let mut i = 0;
        while let Some(text) = args.get(i).and_then(Word::text) {
            if text == "--" {
                i += 1;
                break;
            }
            if !text.starts_with('-') || text == "-" {
                break;
            }
            let takes_value = matches!(
                text,
                "-n" | "-L"
                    | "-l"
                    | "-s"
                    | "-P"
                    | "-I"
                    | "-d"
                    | "-E"
                    | "-a"
                    | "--max-args"
                    | "--max-lines"
                    | "--max-chars"
                    | "--max-procs"
                    | "--delimiter"
                    | "--arg-file"
                    | "--eof"
                    | "--replace"
            );
            i += if takes_value { 2 } else { 1 };
        }
        let mut command: Vec<Word> = args[i.min(args.len())..].to_vec();
        if command.is_empty() {
            command.push(Word::literal("echo"));
        }
        let inputs: Vec<Word> = piped
            .iter()
            .flat_map(|argv| argv[1..].iter())
            .filter(|w| !matches!(w.text(), Some(t) if t.starts_with('-') && t.len() > 1))
            .flat_map(|w| match w {
                Word::Known { text, .. } => text
                    .split(|c: char| c.is_ascii_whitespace() || c == '\0')
                    .filter(|s| !s.is_empty())
                    .map(Word::literal)
                    .collect::<Vec<_>>(),
                Word::Unknown => vec![Word::Unknown],
            })
            .collect();
        let inputs = if inputs.is_empty() {
            vec![Word::Unknown]
        } else {
            inputs
        };
        for input in inputs {
            let mut argv = command.clone();
            argv.push(input);
            self.analyze(argv, Vec::new(), &[], false, depth + 1);
        }
    }

    /// `find PATH… -delete` and `find PATH… -exec rm …` read as `rm -r PATH`; an `-exec`'d
    /// command is also read as a command of its own.
    fn find(&mut self, args: &[Word], depth: usize) {
        let mut i = 0;
        while let Some(text) = args.get(i).and_then(Word::text) {
            match text {
                "-H" | "-L" | "-P" => i += 1,
                "-D" => i += 2,
                t if t.starts_with("-O") => i += 1,
                _ => break,
            }
        }
        let mut paths = Vec::new();
        while let Some(word) = args.get(i) {
            if word
                .text()
                .is_some_and(|t| t.starts_with('-') || t == "(" || t == "!" || t == ",")
            {
                break;
            }
            paths.push(word.clone());
            i += 1;
        }
        if paths.is_empty() {
            paths.push(Word::literal("."));
        }
        let mut deletes = false;
        while i < args.len() {
            match args[i].text() {
                Some("-delete") => deletes = true,
                Some("-exec" | "-execdir" | "-ok" | "-okdir") => {
                    let end = args[i + 1..]
                        .iter()
                        .position(|w| matches!(w.text(), Some(";" | "+")))
                        .map_or(args.len(), |p| i + 1 + p);
                    let command = args[i + 1..end].to_vec();
                    if command
                        .first()
                        .and_then(Word::text)
                        .is_some_and(|t| basename(t) == "rm")
                    {
                        deletes = true;
                    }
                    if !command.is_empty() {
                        self.analyze(command, Vec::new(), &[], false, depth + 1);
                    }
                    i = end;
                }
                _ => {}
            }
            i += 1;
        }
        if deletes {
            for path in paths {
                let argv = vec![Word::literal("rm"), Word::literal("-r"), path];
                self.emit(argv, Vec::new());
            }
        }
    }

    /// Records an argv, and its `cd`-resolved reading when a `cd` came earlier.
    fn emit(&mut self, words: Vec<Word>, redirects: Vec<Word>) {
        if self.full() {
            return;
        }
        if self.cwd != Cwd::Initial {
            let resolve = |w: &Word, skip_options: bool| -> Word {
                match (w, &self.cwd) {
                    (Word::Known { text, .. }, _)
                        if text.starts_with('/')
                            || text.starts_with('~')
                            || (skip_options && text.starts_with('-')) =>
                    {
                        w.clone()
                    }
                    (Word::Known { text, glob }, Cwd::Known(dir)) => Word::Known {
                        text: format!("{}/{text}", dir.trim_end_matches('/')),
                        glob: glob
                            .as_ref()
                            .map(|g| format!("{}/{g}", glob::escape(dir.trim_end_matches('/')))),
                    },
                    (Word::Known { .. }, _) => Word::Unknown,
                    (Word::Unknown, _) => Word::Unknown,
                }
            };
            let resolved = Argv {
                words: words
                    .iter()
                    .enumerate()
                    .map(|(i, w)| if i == 0 { w.clone() } else { resolve(w, true) })
                    .collect(),
                redirects: redirects.iter().map(|w| resolve(w, false)).collect(),
            };
            let original = Argv { words, redirects };
            if resolved != original {
                self.out.argvs.push(resolved);
            }
            self.out.argvs.push(original);
            return;
        }
        self.out.argvs.push(Argv { words, redirects });
    }
}

/// Where a wrapper's options end: the index of its first non-option word. `with_value` lists
/// the options that take the next word as their value.
fn options_end(words: &[Word], with_value: &[&str]) -> usize {
    let mut i = 1;
    while let Some(text) = words.get(i).and_then(Word::text) {
        if text == "--" {
            return i + 1;
        }
        if !text.starts_with('-') || text == "-" {
            break;
        }
        i += if with_value.contains(&text) { 2 } else { 1 };
    }
    i
}

/// `curl -u user:pw`, `--user user:pw`, `--user=user:pw`, `-uuser:pw`: a password is present.
fn user_password(args: &[Word]) -> bool {
    let has_password = |value: &str| value.split_once(':').is_some_and(|(_, pw)| !pw.is_empty());
    args.iter().enumerate().any(|(i, word)| {
        let Some(text) = word.text() else {
            return false;
        };
        if matches!(text, "-u" | "--user") {
            return args
                .get(i + 1)
                .and_then(Word::text)
                .is_some_and(has_password);
        }
        text.strip_prefix("--user=")
            .or_else(|| {
                text.strip_prefix("-u")
                    .filter(|v| !v.is_empty() && !text.starts_with("--"))
            })
            .is_some_and(has_password)
    })
}

/// An absolute directory, canonicalized (`~` read as `/home`).
fn absolute(path: &str) -> String {
    let components = super::components::canonical_components(path);
    format!("/{}", components.join("/"))
}

/// Every reading of the command so far combined with every reading of the next word, at most
/// two in all (two readings per quoted `$IFS` word could multiply; two hold both ways). The
/// common case, one reading on each side, extends in place: building an argv stays linear.
fn cross(mut left: Vec<Vec<Word>>, right: Vec<Vec<Word>>) -> Vec<Vec<Word>> {
    if let [only] = right.as_slice() {
        for argv in &mut left {
            argv.extend(only.iter().cloned());
        }
        return left;
    }
    let mut out = Vec::with_capacity(2);
    'outer: for l in &left {
        for r in &right {
            if out.len() == 2 {
                break 'outer;
            }
            let mut argv = l.clone();
            argv.extend(r.iter().cloned());
            out.push(argv);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// brush-parser 0.4 panics on an I/O number too large for a file descriptor; the guard
    /// refuses such a line before the parser sees it (it gets no shell reading, §21.3), and an
    /// ordinary I/O number still reads. The fuzz target's input is in its corpus.
    #[test]
    fn an_oversized_io_number_gets_no_shell_reading_and_no_panic() {
        assert!(joined("cat 143474676128<5252031").is_empty());
        assert!(joined("cat 99999999999>out").is_empty());
        assert_eq!(joined("cat 2>out a"), ["cat a"]);
    }

    /// brush-parser 0.4 never returns on a here-document whose delimiter is a carriage return
    /// or a form feed followed by an operator and a comment (the fuzz target's input, 2.6 KB that
    /// took 2.3 GB in 3 s, is in its corpus); in a text with `<<` the two characters are read as
    /// blanks, and the reading returns. Run on a thread so that a regression fails here rather
    /// than hanging the suite.
    #[test]
    fn a_heredoc_delimited_by_a_carriage_return_or_form_feed_reads_and_returns() {
        let readings = joined_within_5_s(&[
            "<<\r<<#",
            "<<\x0c;#",
            "cat x\r <<EOF >/etc/hosts\r\nhi\nEOF\n",
        ]);
        assert_eq!(readings[2], ["cat x"], "{readings:?}");
    }

    /// brush-parser 0.4 never returns on a here-document with an empty delimiter followed by an
    /// operator and a comment running to the end of the text (the fuzz target's 2.7 KB input is
    /// in its corpus); such a text is parsed with a newline at its end, and the reading returns.
    #[test]
    fn a_heredoc_with_an_empty_delimiter_before_a_final_comment_reads_and_returns() {
        let readings = joined_within_5_s(&[
            "<<'';#",
            "<<\"\" >#",
            "<<''<x #",
            "x\n<<'';#",
            "cat <<'' >x #\n\nrm -rf /",
        ]);
        assert!(readings[4].contains(&"cat".to_owned()), "{readings:?}");
    }

    /// Nor on one whose text ends in a line continuation (CI's 60 s fuzz run, minimized to
    /// `<<''<\` and the newline the fold above adds): a final backslash is read as bash reads
    /// it, itself, and a final continuation as nothing.
    #[test]
    fn a_heredoc_with_an_empty_delimiter_before_a_final_backslash_reads_and_returns() {
        let readings = joined_within_5_s(&[
            "<<''<\\",
            "<<''<\\\n",
            "<<''<\\\\\\",
            "cat <<'' x\\",
            "cat <<'' x\\\n",
            "cat <<'' x\\\\",
        ]);
        assert_eq!(
            readings[3],
            ["cat x\\"],
            "a final backslash is itself: {readings:?}"
        );
        assert_eq!(
            readings[4],
            ["cat x"],
            "a final continuation is nothing: {readings:?}"
        );
        assert_eq!(
            readings[5],
            ["cat x\\"],
            "an escaped backslash is one: {readings:?}"
        );
    }

    /// brush-parser 0.4 panics (an `unwrap` in its tokenizer) on an arithmetic expansion left
    /// open around a command substitution on a line with a here-document operator (CI's fuzz
    /// run, minimized to `<<''<$(($())`): the panic is caught and the text has no reading, as
    /// for any text the parser refuses; the readings of the well-formed neighbours are
    /// unchanged.
    #[test]
    fn a_parser_panic_is_caught_and_reads_as_nothing() {
        let readings = joined_within_5_s(&[
            "<<''<$(($())",
            "cat <<EOF $(($(x))\nEOF\n",
            "cat <<EOF $(($(x)))\nbody\nEOF\n",
        ]);
        assert!(readings[0].is_empty(), "{readings:?}");
        // Refused whole, the text is read line by line, as any: the first line panics too.
        assert_eq!(readings[1], ["EOF"], "{readings:?}");
        assert!(readings[2][0].starts_with("cat "), "{readings:?}");
    }

    /// [`joined`] of each text, on a thread that must answer within 5 s: a parser that never
    /// returns fails the test instead of hanging the suite.
    fn joined_within_5_s(texts: &[&'static str]) -> Vec<Vec<String>> {
        let texts = texts.to_vec();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(texts.iter().map(|text| joined(text)).collect());
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("the readings return (they take microseconds)")
    }

    /// Each argv of the shell reading of `text`, joined by spaces.
    fn joined(text: &str) -> Vec<String> {
        joined_argvs(&read_shell(text, Prefilter::On))
    }

    /// Each argv of a reading, joined by spaces.
    fn joined_argvs(reading: &ShellReading) -> Vec<String> {
        reading
            .argvs
            .iter()
            .map(|a| {
                a.words
                    .iter()
                    .map(Word::shown)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    #[test]
    fn quote_removal_and_expansions_build_the_static_argv() {
        assert_eq!(joined("r''m -rf /"), ["rm -rf /"]);
        assert_eq!(joined("rm${IFS}-rf${IFS}/"), ["rm -rf /"]);
        assert_eq!(joined("{rm,-rf,/}"), ["rm -rf /"]);
        assert_eq!(joined("$'\\x72\\x6d' -rf /"), ["rm -rf /"]);
        assert_eq!(joined("/\\b\\i\\n/////r\\m -rf /"), ["rm -rf /"]);
        assert_eq!(joined("rm -rf \\\n/"), ["rm -rf /"]);
        assert_eq!(joined("1;rm${IFS}-rf${IFS}/"), ["1", "rm -rf /"]);
    }

    #[test]
    fn literal_parameters_are_substituted() {
        assert_eq!(joined("a=r;b=m;$a$b -rf /"), ["rm -rf /"]);
        assert_eq!(joined("R=/; rm -rf $R"), ["rm -rf /"]);
        assert_eq!(
            joined("LFILE=/etc/shadow; cat \"$LFILE\""),
            ["cat /etc/shadow"]
        );
        assert_eq!(
            joined("export X=/etc/shadow; cat $X"),
            ["export X=/etc/shadow", "cat /etc/shadow"]
        );
        assert_eq!(joined("cat $UNSET"), [format!("cat {UNKNOWN}")]);
    }

    /// bash's `NAME+=value` appends to what the string gave `NAME`; without a known earlier
    /// value the value alone is read (conservative), and an unknown addition stays unknown.
    #[test]
    fn append_assignments_append() {
        assert_eq!(joined("X=/etc;X+=/shadow;cat $X"), ["cat /etc/shadow"]);
        assert_eq!(
            joined("a=/etc/sha; a+=dow; cat \"$a\""),
            ["cat /etc/shadow"]
        );
        assert_eq!(joined("X+=/etc/shadow; cat $X"), ["cat /etc/shadow"]);
        assert_eq!(joined("X+=/etc/shadow cat"), ["cat"]);
        assert_eq!(joined("X=/etc; X+=$Y; cat $X"), [format!("cat {UNKNOWN}")]);
    }

    #[test]
    fn wrappers_are_dropped_and_the_program_is_its_basename() {
        assert_eq!(joined("sudo -u root /bin/rm -rf /"), ["rm -rf /"]);
        assert_eq!(
            joined("env -i X=1 nice -n 5 nohup timeout 60 rm -rf /"),
            ["rm -rf /"]
        );
        assert_eq!(
            joined("command exec stdbuf -o L busybox rm -rf /"),
            ["rm -rf /"]
        );
        assert_eq!(joined("time rm -rf /"), ["rm -rf /"]);
    }

    /// Issue 30 item 4: a command word only a running shell knows is read as each protected
    /// program it could be, each read as that program's command, and as written.
    #[test]
    fn dynamic_command_words_read_as_each_program_they_could_be() {
        let globbed = joined("/b??/r? -rf /");
        assert!(globbed.contains(&"rm -rf /".to_owned()), "{globbed:?}");
        assert!(globbed.contains(&"/b??/r? -rf /".to_owned()), "{globbed:?}");
        assert_eq!(globbed.len(), 2, "only rm matches r?: {globbed:?}");
        assert_eq!(
            joined("/bin/l? -la /"),
            ["/bin/l? -la /"],
            "no program of the list"
        );
        assert_eq!(joined("/b?n/rm -rf /"), ["rm -rf /"], "a static program");
        let found = joined("$(which rm) -rf /");
        for reading in ["which rm", "rm -rf /"] {
            assert!(found.contains(&reading.to_owned()), "{reading}: {found:?}");
        }
        assert_eq!(
            found,
            ["which rm", "rm -rf /", "-rf /", " ⟨?⟩"],
            "the substitution's own command, as rm, and as eval's and xargs's commands (xargs \
             without input runs its command with an unknown word)"
        );
        // Review of 2026-12-05: an assignment eval's words make is applied as before.
        assert!(
            joined("eval X+=/; rm -rf $X").contains(&"rm -rf /".to_owned()),
            "{:?}",
            joined("eval X+=/; rm -rf $X")
        );
        // A shell's script is read however many dynamic words came before.
        let late = joined("$a $a; $a $a; $a $a; $a $a; $a $a; $SHELL -c 'X=/; rm -rf $X'");
        assert!(late.contains(&"rm -rf /".to_owned()), "{late:?}");
        let shell = joined("$SHELL -c 'r\"\"m -rf /'");
        assert!(shell.contains(&"rm -rf /".to_owned()), "{shell:?}");
    }

    #[test]
    fn cd_sets_the_directory_of_later_relative_operands() {
        assert_eq!(
            joined("cd / && rm -rf *"),
            ["cd /", "rm -rf /*", "rm -rf *"]
        );
        assert_eq!(
            joined("cd $X; rm -rf build"),
            [
                format!("cd {UNKNOWN}"),
                format!("rm -rf {UNKNOWN}"),
                "rm -rf build".into()
            ]
        );
        assert_eq!(joined("rm -rf build"), ["rm -rf build"]);
    }

    #[test]
    fn shells_eval_and_pipes_are_read_recursively() {
        assert!(joined("sh -c \"rm -rf /\"").contains(&"rm -rf /".to_owned()));
        assert!(joined("bash -lc 'r\"\"m -rf /'").contains(&"rm -rf /".to_owned()));
        assert!(joined("eval 'rm -rf /'").contains(&"rm -rf /".to_owned()));
        assert!(joined("echo 'rm -rf /' | sh").contains(&"rm -rf /".to_owned()));
        assert!(!joined("echo 'rm -rf /' > x.sh").contains(&"rm -rf /".to_owned()));
        assert!(joined("echo \"$(rm -rf /)\"").contains(&"rm -rf /".to_owned()));
    }

    #[test]
    fn recursion_stops_after_eight_levels() {
        let mut script = "rm -rf /".to_owned();
        for _ in 0..12 {
            script = format!("eval {}", shell_quote(&script));
        }
        assert!(!joined(&script).contains(&"rm -rf /".to_owned()));
        let mut script = "rm -rf /".to_owned();
        for _ in 0..MAX_DEPTH {
            script = format!("eval {}", shell_quote(&script));
        }
        assert!(joined(&script).contains(&"rm -rf /".to_owned()));
    }

    fn shell_quote(s: &str) -> String {
        format!("'{}'", s.replace('\'', "'\\''"))
    }

    #[test]
    fn xargs_and_find_read_as_the_commands_they_run() {
        assert!(joined("echo / | xargs rm -rf").contains(&"rm -rf /".to_owned()));
        assert!(joined("printf '/' | xargs -0 rm -rf").contains(&"rm -rf /".to_owned()));
        assert!(joined("xargs rm -rf").contains(&format!("rm -rf {UNKNOWN}")));
        assert!(joined("find / -delete").contains(&"rm -r /".to_owned()));
        assert!(joined("find / -name x -exec rm -f {} +").contains(&"rm -r /".to_owned()));
        assert!(
            !joined("find / -name x -print")
                .iter()
                .any(|a| a.starts_with("rm"))
        );
    }

    #[test]
    fn argv_lists_are_read_without_quote_removal() {
        let read = |words: &[&str]| joined_argvs(&read_argv(words, Prefilter::On));
        assert_eq!(read(&["sudo", "rm", "-rf", "/"]), ["rm -rf /"]);
        assert!(read(&["sh", "-c", "rm -rf /"]).contains(&"rm -rf /".to_owned()));
        assert_eq!(read(&["r''m", "-rf", "/"]), ["r''m -rf /"]);
    }

    #[test]
    fn curl_user_passwords_are_found() {
        assert!(read_shell("curl -u admin:S3cret https://x", Prefilter::On).user_password);
        assert!(read_shell("wget --user=admin:pw https://x", Prefilter::On).user_password);
        assert!(read_shell("curl -uadmin:pw https://x", Prefilter::On).user_password);
        assert!(!read_shell("curl -u admin: https://x", Prefilter::On).user_password);
        assert!(!read_shell("curl -u admin https://x", Prefilter::On).user_password);
    }

    #[test]
    fn redirection_targets_are_kept() {
        let reading = read_shell("echo x > /etc/hosts", Prefilter::On);
        assert_eq!(reading.argvs[0].redirects, [Word::literal("/etc/hosts")]);
    }

    #[test]
    fn plain_strings_read_like_the_parser_reads_them() {
        for text in [
            "cat /etc/passwd",
            "rm -rf /",
            "X=1 cmd a=b",
            "dd if=/etc/shadow of=/dev/null",
            "a  b\tc",
            "python -c 'print(1)'",
            "git commit -m \"fix the build\"",
            "grep -rn 'fn main' src",
            "X='a b' cat $X",
            "cat '/etc/'passwd",
            "'rm' -rf /",
            "r''m -rf \"/\"",
            "echo 'it''s' \"a;b|c\" '$HOME'",
            "X=\"/etc\"'/shadow' cat",
            "'if' x",
        ] {
            let fast = script_of(text, Prefilter::On);
            let parsed = parser::parse(text);
            assert_eq!(fast, parsed, "{text}");
        }
        // Quoted brackets deeper than the parser's guard: refused by both paths alike.
        let deep = format!("python -c '{}'", "(".repeat(parser::MAX_NESTING + 1));
        assert_eq!(script_of(&deep, Prefilter::On), None);
        assert_eq!(parser::parse(&deep), None);
    }

    use proptest::prelude::*;

    /// Plain strings: the fast path's whole alphabet, reserved words and assignments.
    fn plain_text() -> impl Strategy<Value = String> {
        let word = prop_oneof![
            proptest::sample::select(&RESERVED[..]).prop_map(str::to_owned),
            "[a-zA-Z0-9 \t_./,:+%@^=-]{0,6}",
            proptest::sample::select(
                &[
                    "X=1", "X+=/etc", "=", "a=", "1=a", "a++=", "-", " ", "\t", "rm", "-rf", "/"
                ][..]
            )
            .prop_map(str::to_owned),
        ];
        // Characters outside the alphabet (`!`, `{`, `[[` of the reserved words) are dropped.
        proptest::collection::vec(word, 0..6).prop_map(|words| {
            words
                .concat()
                .chars()
                .filter(|c| is_plain_char(*c))
                .collect()
        })
    }

    /// Strings of plain words and quoted runs: the quoted-word fast path's alphabet, with
    /// characters inside quotes that would be operators, expansions or escapes outside them
    /// (or inside double quotes), and unbalanced quotes.
    fn quoted_text() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            plain_text(),
            "'[ -~]{0,8}'",
            "\"[ -~]{0,8}\"",
            proptest::sample::select(
                &[
                    "'",
                    "\"",
                    "''",
                    "\"\"",
                    "'a b'",
                    "\"$X\"",
                    "\"a\\\"b\"",
                    "'it'\\''s'",
                    "X='/etc'",
                    "X+=\"/shadow\"",
                    "'X'=1",
                    "\"{a,b}\"",
                    "'(((('",
                    "rm",
                    " ",
                    "/"
                ][..]
            )
            .prop_map(str::to_owned),
        ];
        proptest::collection::vec(piece, 0..6).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 4096,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x7175_6f74_6564),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// SPEC §21.1: the quoted-word fast path reads every string it takes as the parser
        /// does (the strings it does not take go to the parser on both sides).
        #[test]
        fn the_quoted_word_fast_path_reads_as_the_parser(text in quoted_text()) {
            prop_assert_eq!(
                read_shell(&text, Prefilter::On),
                read_shell(&text, Prefilter::Off),
                "{:?}", text
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 2048,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x0073_6865_6c6c),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// SPEC §21.1: the plain-word fast path (a pre-filter that skips the parser) reads every
        /// plain string as the parser does.
        #[test]
        fn the_plain_word_fast_path_reads_as_the_parser(text in plain_text()) {
            prop_assert_eq!(
                read_shell(&text, Prefilter::On),
                read_shell(&text, Prefilter::Off),
                "{:?}", text
            );
        }
    }
}
