//! `airlock policy version | check | eval` (SPEC Appendix A).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use airlock_policy::action_ref::ActionRef;
use airlock_policy::{Ruleset, decide};
use clap::Subcommand;
use serde::Serialize;

use super::globals::Globals;
use super::lines::{LinesStopped, for_each_line};
use super::output::policy_error;
use super::policy_change::{ShadowCommand, WindowArgs, replay_command, shadow_command};
use crate::exit::{Exit, error_json};
use crate::policy_source::load_ruleset;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Print the bare policy_version.
    Version,
    /// Load and validate the policy files; print their hashes and each hardline rule's near-miss
    /// verdict.
    Check {
        /// Print only the JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Evaluate proposed actions (SPEC §4.1) and print decision JSON.
    Eval {
        /// Action file, or `-` for stdin.
        #[arg(default_value = "-")]
        file: PathBuf,
        /// One action per line in, one decision per line out.
        #[arg(long)]
        jsonl: bool,
    },
    /// Decide every recorded call of the store again under the policy of `--policy-dir` (the
    /// shipped policy without it) and print what would change, by transition (allow → deny,
    /// …), with examples. Nothing is executed and nothing is written.
    Replay {
        #[command(flatten)]
        window: WindowArgs,
    },
    /// What a shadow candidate (`--shadow-policy-dir` on `worker`, `serve`, `mcp serve`)
    /// decided differently from the live policy.
    #[command(subcommand)]
    Shadow(ShadowCommand),
}

impl PolicyCommand {
    /// Whether the command reads the store (and so runs on the async runtime).
    pub fn reads_store(&self) -> bool {
        matches!(
            self,
            PolicyCommand::Replay { .. } | PolicyCommand::Shadow(_)
        )
    }
}

/// `policy replay` and `policy shadow report`, which read the store.
pub async fn run_on_store(globals: &Globals, command: PolicyCommand) -> Exit {
    match command {
        PolicyCommand::Replay { window } => replay_command(globals, window).await,
        PolicyCommand::Shadow(command) => shadow_command(globals, command).await,
        PolicyCommand::Version | PolicyCommand::Check { .. } | PolicyCommand::Eval { .. } => {
            run(globals, command)
        }
    }
}

#[derive(Serialize)]
struct CheckReport<'a> {
    policy_version: &'a str,
    profile_sha256: &'a str,
    hardline_sha256: &'a str,
}

pub fn run(globals: &Globals, command: PolicyCommand) -> Exit {
    let ruleset = match load_ruleset(globals.policy_dir.as_deref()) {
        Ok(ruleset) => ruleset,
        Err(error) => return policy_error(&error),
    };
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(OUTPUT_BUFFER, stdout.lock());
    let exit = match command {
        PolicyCommand::Version => writeln!(out, "{}", ruleset.version).map(|_| Exit::Ok),
        PolicyCommand::Check { json } => check(&mut out, &ruleset, json),
        PolicyCommand::Eval { file, jsonl } => eval(&mut out, &ruleset, &file, jsonl),
        // Routed to `run_on_store` by the caller; never reached.
        PolicyCommand::Replay { .. } | PolicyCommand::Shadow(_) => Ok(Exit::Ok),
    };
    match exit.and_then(|exit| out.flush().map(|_| exit)) {
        Ok(exit) => exit,
        // A closed stdout (e.g. `| head`) is not worth a panic; report and fail.
        Err(error) => {
            eprintln!("error: cannot write output: {error}");
            Exit::Storage
        }
    }
}

fn check(out: &mut impl Write, ruleset: &Ruleset, json_only: bool) -> std::io::Result<Exit> {
    let report = CheckReport {
        policy_version: ruleset.version.as_str(),
        profile_sha256: &ruleset.version.profile_sha256,
        hardline_sha256: &ruleset.version.hardline_sha256,
    };
    let json = serde_json::to_string(&report).map_err(std::io::Error::other)?;
    writeln!(out, "{json}")?;
    if json_only {
        return Ok(Exit::Ok);
    }
    for rule in &ruleset.hardline {
        let verdict = if rule.matches_own_near_miss() {
            "MATCHES (load would fail)"
        } else {
            "not matched"
        };
        let classes: Vec<&str> = rule.applies_to.iter().map(|c| c.as_str()).collect();
        writeln!(
            out,
            "hardline {} ({}; {}): near_miss {:?} {verdict}",
            rule.id,
            rule.matcher.kind(),
            classes.join(", "),
            rule.near_miss
        )?;
    }
    writeln!(
        out,
        "ok: profile '{}' with {} rules ({} matrix, {} hardline)",
        ruleset.profile.name,
        ruleset.rule_count(),
        airlock_policy::MATRIX_RULE_COUNT,
        ruleset.hardline.len()
    )?;
    Ok(Exit::Ok)
}

/// Reads the whole input: a file, or stdin for `-`.
fn read_input(file: &PathBuf) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    open_input(file)?
        .read_to_end(&mut bytes)
        .map_err(|e| read_error(file, &e))?;
    Ok(bytes)
}

/// The input as a buffered reader: a file, or stdin for `-` (locked once).
fn open_input(file: &PathBuf) -> Result<Box<dyn BufRead>, String> {
    if file.as_os_str() == "-" {
        Ok(Box::new(std::io::stdin().lock()))
    } else {
        let opened = File::open(file).map_err(|e| read_error(file, &e))?;
        Ok(Box::new(BufReader::with_capacity(INPUT_BUFFER, opened)))
    }
}

fn read_error(file: &Path, error: &std::io::Error) -> String {
    if file.as_os_str() == "-" {
        format!("cannot read stdin: {error}")
    } else {
        format!("cannot read '{}': {error}", file.display())
    }
}

/// Read and write buffers of the `--jsonl` stream: a few hundred actions per system call.
const INPUT_BUFFER: usize = 1 << 16;
const OUTPUT_BUFFER: usize = 1 << 16;

/// Reads one action, borrowing its strings from `bytes` (the gate's borrowed parse accepts and
/// refuses exactly what the owned one does, with the same errors).
fn parse_action(bytes: &[u8]) -> Result<ActionRef<'_>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    if text.trim().is_empty() {
        return Err("empty input: expected one action object".to_owned());
    }
    ActionRef::from_json(text).map_err(|e| e.to_string())
}

/// Writes one decision line: the bytes of `PolicyDecision::to_json` and a newline, written
/// straight into the output buffer from the verdict (no intermediate strings).
fn write_decision(
    out: &mut impl Write,
    ruleset: &Ruleset,
    action: &ActionRef<'_>,
) -> std::io::Result<()> {
    decide(action, ruleset).write_json(&mut *out)?;
    out.write_all(b"\n")
}

fn eval(
    out: &mut impl Write,
    ruleset: &Ruleset,
    file: &PathBuf,
    jsonl: bool,
) -> std::io::Result<Exit> {
    if jsonl {
        return eval_jsonl(out, ruleset, file);
    }
    let input = match read_input(file) {
        Ok(input) => input,
        Err(message) => {
            writeln!(out, "{}", error_json("invalid_argument", &message))?;
            return Ok(Exit::InvalidInput);
        }
    };
    Ok(match parse_action(&input) {
        Ok(action) => {
            write_decision(out, ruleset, &action)?;
            Exit::Ok
        }
        Err(message) => {
            writeln!(out, "{}", error_json("invalid_action", &message))?;
            Exit::InvalidInput
        }
    })
}

/// `--jsonl`: streamed line by line through one reused buffer, so a corpus of any size is
/// decided in constant memory. Every input line gets exactly one output line, so answers stay
/// aligned with questions; a blank line is an invalid action like any other. A newline ends a
/// line, so empty input has no lines and "\n" has one (blank) line. A read error (at open, or
/// part-way through) prints the `invalid_argument` object after the answers already given and
/// exits 2, as an unreadable file always did.
fn eval_jsonl(out: &mut impl Write, ruleset: &Ruleset, file: &PathBuf) -> std::io::Result<Exit> {
    let mut input = match open_input(file) {
        Ok(input) => input,
        Err(message) => {
            writeln!(out, "{}", error_json("invalid_argument", &message))?;
            return Ok(Exit::InvalidInput);
        }
    };
    let mut failed = 0usize;
    let mut index = 0usize;
    let walked = for_each_line(&mut *input, |line| {
        index += 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match parse_action(line) {
            Ok(action) => write_decision(out, ruleset, &action),
            Err(message) => {
                failed += 1;
                writeln!(
                    out,
                    "{}",
                    error_json("invalid_action", &format!("line {index}: {message}"))
                )
            }
        }
    });
    match walked {
        Ok(()) => {}
        Err(LinesStopped::Handler(error)) => return Err(error),
        Err(LinesStopped::Read(error)) => {
            let message = read_error(file, &error);
            writeln!(out, "{}", error_json("invalid_argument", &message))?;
            return Ok(Exit::InvalidInput);
        }
    }
    if failed > 0 {
        eprintln!("error: {failed} line(s) were not valid actions");
        return Ok(Exit::InvalidInput);
    }
    Ok(Exit::Ok)
}
