//! The v2 readings of one action's arguments (SPEC §21.1–§21.3), made lazily and at most once
//! per evaluation: pass 2 runs every rule, and several rules share a reading (the URL reading
//! serves `protected_path`, `protected_url_path`, `network_range` and `trust_flow`).
//!
//! Readings are pure functions of the arguments and the side effect, total (a reading that
//! cannot be made gives nothing) and bounded: a string longer than [`MAX_READ_BYTES`] gets the
//! v1 readings only.

use serde_json::{Map, Value};

use crate::vocab::SideEffectClass;

use super::prefilter::Prefilter;
use super::shell::{self, ShellReading};
use super::strings::{any_string_in, is_ws};
use super::url::{UrlReading, read_urls};

/// The longest string (in UTF-8 bytes) that gets the v2 readings.
pub const MAX_READ_BYTES: usize = 64 * 1024;

/// The lazily made v2 readings of one action.
pub struct Readings<'a> {
    arguments: &'a Map<String, Value>,
    side_effect: SideEffectClass,
    prefilter: Prefilter,
    strings: Option<Vec<&'a str>>,
    urls: Option<UrlReading>,
    commands: Option<ShellReading>,
}

/// Names under which an object holds a program and its arguments (SPEC §21.3, argv readings).
const PROGRAM_KEYS: [&str; 5] = ["cmd", "command", "program", "executable", "bin"];
const ARGUMENT_KEYS: [&str; 3] = ["args", "argv", "arguments"];

impl<'a> Readings<'a> {
    pub fn new(
        arguments: &'a Map<String, Value>,
        side_effect: SideEffectClass,
        prefilter: Prefilter,
    ) -> Readings<'a> {
        Readings {
            arguments,
            side_effect,
            prefilter,
            strings: None,
            urls: None,
            commands: None,
        }
    }

    pub fn prefilter(&self) -> Prefilter {
        self.prefilter
    }

    /// The collected strings of SPEC §6.3 (the v1 walk, in its order) short enough to be read.
    pub fn strings(&mut self) -> &[&'a str] {
        let arguments = self.arguments;
        self.strings.get_or_insert_with(|| {
            let mut out: Vec<&'a str> = Vec::new();
            any_string_in(arguments, &mut |s| {
                if s.len() <= MAX_READ_BYTES {
                    out.push(s);
                }
                false
            });
            out
        })
    }

    /// The URL reading of every collected string.
    pub fn urls(&mut self) -> &UrlReading {
        if self.urls.is_none() {
            let prefilter = self.prefilter;
            let mut reading = UrlReading::default();
            for s in self.strings().to_vec() {
                reading.merge(read_urls(s, prefilter));
            }
            self.urls = Some(reading);
        }
        self.urls.get_or_insert_with(UrlReading::default)
    }

    /// The static argvs of the action: the shell reading of every collected string (for
    /// `code_execution` and `sandbox_network` only) and the argv readings (for every class).
    pub fn commands(&mut self) -> &ShellReading {
        if self.commands.is_none() {
            let mut reading = ShellReading::default();
            if matches!(
                self.side_effect,
                SideEffectClass::CodeExecution | SideEffectClass::SandboxNetwork
            ) {
                for s in self.strings().to_vec() {
                    merge(&mut reading, shell::read_shell(s, self.prefilter));
                }
            }
            for argv in argv_lists(self.arguments, self.prefilter) {
                merge(&mut reading, shell::read_argv(&argv, self.prefilter));
            }
            self.commands = Some(reading);
        }
        self.commands.get_or_insert_with(ShellReading::default)
    }
}

fn merge(into: &mut ShellReading, from: ShellReading) {
    into.argvs.extend(from.argvs);
    into.user_password |= from.user_password;
}

/// The argv readings (SPEC §21.3): every array's string elements; every bracketed list of two
/// or more quoted literals inside a string (`['rm','-rf','/']`); every object with a program
/// member and an argument-list member, read as `[program, …arguments]`.
fn argv_lists(arguments: &Map<String, Value>, prefilter: Prefilter) -> Vec<Vec<String>> {
    fn walk(value: &Value, prefilter: Prefilter, out: &mut Vec<Vec<String>>) {
        match value {
            Value::Array(items) => {
                let words: Vec<String> = items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect();
                if !words.is_empty() {
                    out.push(words);
                }
                items.iter().for_each(|item| walk(item, prefilter, out));
            }
            Value::Object(map) => {
                object_argv(map, out);
                map.values().for_each(|item| walk(item, prefilter, out));
            }
            Value::String(s) => {
                if s.len() <= MAX_READ_BYTES
                    && (prefilter == Prefilter::Off || (s.contains('[') && s.contains(['"', '\''])))
                {
                    bracketed_lists(s, out);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    let mut out = Vec::new();
    object_argv(arguments, &mut out);
    for item in arguments.values() {
        walk(item, prefilter, &mut out);
    }
    out
}

fn object_argv(map: &Map<String, Value>, out: &mut Vec<Vec<String>>) {
    for program in PROGRAM_KEYS
        .iter()
        .filter_map(|k| map.get(*k).and_then(Value::as_str))
    {
        for args in ARGUMENT_KEYS
            .iter()
            .filter_map(|k| map.get(*k).and_then(Value::as_array))
        {
            if let Some(args) = args
                .iter()
                .map(|a| a.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
            {
                let mut argv = vec![program.to_owned()];
                argv.extend(args);
                out.push(argv);
            }
        }
    }
}

/// Every `[ 'a', "b", … ]` with at least two quoted literals in `s`, unescaped.
fn bracketed_lists(s: &str, out: &mut Vec<Vec<String>>) {
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '[' {
            i += 1;
            continue;
        }
        match list_at(&chars, i + 1) {
            Some((items, end)) => {
                if items.len() >= 2 {
                    out.push(items);
                }
                i = end;
            }
            None => i += 1,
        }
    }
}

/// A list of quoted literals starting after a `[`: the items and the index after the `]`.
fn list_at(chars: &[char], mut i: usize) -> Option<(Vec<String>, usize)> {
    let skip_ws = |i: &mut usize| {
        while *i < chars.len() && is_ws(chars[*i]) {
            *i += 1;
        }
    };
    let mut items = Vec::new();
    loop {
        skip_ws(&mut i);
        let quote = *chars.get(i).filter(|c| matches!(c, '"' | '\''))?;
        i += 1;
        let mut item = String::new();
        loop {
            let c = *chars.get(i)?;
            i += 1;
            if c == quote {
                break;
            }
            if c == '\\' {
                let escaped = *chars.get(i)?;
                i += 1;
                item.push(match escaped {
                    'n' => '\n',
                    't' => '\t',
                    other => other,
                });
            } else {
                item.push(c);
            }
        }
        items.push(item);
        skip_ws(&mut i);
        match chars.get(i)? {
            ',' => {
                i += 1;
                skip_ws(&mut i);
                if chars.get(i) == Some(&']') {
                    return Some((items, i + 1));
                }
            }
            ']' => return Some((items, i + 1)),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lists(value: Value) -> Vec<Vec<String>> {
        argv_lists(value.as_object().unwrap(), Prefilter::On)
    }

    #[test]
    fn argv_readings_of_arrays_lists_and_objects() {
        assert_eq!(
            lists(json!({"argv": ["rm", "-rf", 0, "/"]})),
            [["rm", "-rf", "/"]]
        );
        assert_eq!(
            lists(json!({"cmd": "rm", "args": ["-rf", "/"]})),
            [vec!["rm", "-rf", "/"], vec!["-rf", "/"]]
        );
        assert_eq!(
            lists(json!({"code": "subprocess.run(['rm','-rf','/'])"})),
            [["rm", "-rf", "/"]]
        );
        assert_eq!(
            lists(json!({"code": "x = [\"cat\", \"/etc/shadow\"]"})),
            [["cat", "/etc/shadow"]]
        );
        assert!(lists(json!({"code": "x = ['only']"})).is_empty());
        assert!(lists(json!({"code": "a[1] = 'x'"})).is_empty());
    }

    #[test]
    fn long_strings_are_not_read() {
        let long = "a".repeat(MAX_READ_BYTES + 1);
        let args = json!({ "s": long, "t": "short" });
        let mut readings = Readings::new(
            args.as_object().unwrap(),
            SideEffectClass::CodeExecution,
            Prefilter::On,
        );
        assert_eq!(readings.strings(), ["s", "t", "short"]);
    }
}
