//! `airlock policy version | check | eval` (SPEC Appendix A).

use std::io::{BufWriter, Read, Write};
use std::path::PathBuf;

use airlock_core::action::ProposedAction;
use airlock_core::policy::{Ruleset, evaluate};
use clap::Subcommand;
use serde::Serialize;

use super::Globals;
use super::output::policy_error;
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
    let mut out = BufWriter::new(stdout.lock());
    let exit = match command {
        PolicyCommand::Version => writeln!(out, "{}", ruleset.version).map(|_| Exit::Ok),
        PolicyCommand::Check { json } => check(&mut out, &ruleset, json),
        PolicyCommand::Eval { file, jsonl } => eval(&mut out, &ruleset, &file, jsonl),
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
        airlock_core::policy::MATRIX_RULE_COUNT,
        ruleset.hardline.len()
    )?;
    Ok(Exit::Ok)
}

/// Reads the whole input: a file, or stdin for `-`.
fn read_input(file: &PathBuf) -> Result<Vec<u8>, String> {
    if file.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read stdin: {e}"))?;
        Ok(bytes)
    } else {
        std::fs::read(file).map_err(|e| format!("cannot read '{}': {e}", file.display()))
    }
}

/// One action's decision JSON, or the message of why it is not an action.
fn decide(ruleset: &Ruleset, bytes: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    if text.trim().is_empty() {
        return Err("empty input: expected one action object".to_owned());
    }
    let action = ProposedAction::from_json(text).map_err(|e| e.to_string())?;
    Ok(evaluate(&action, ruleset).to_json())
}

fn eval(
    out: &mut impl Write,
    ruleset: &Ruleset,
    file: &PathBuf,
    jsonl: bool,
) -> std::io::Result<Exit> {
    let input = match read_input(file) {
        Ok(input) => input,
        Err(message) => {
            writeln!(out, "{}", error_json("invalid_argument", &message))?;
            return Ok(Exit::InvalidInput);
        }
    };
    if !jsonl {
        return Ok(match decide(ruleset, &input) {
            Ok(decision) => {
                writeln!(out, "{decision}")?;
                Exit::Ok
            }
            Err(message) => {
                writeln!(out, "{}", error_json("invalid_action", &message))?;
                Exit::InvalidInput
            }
        });
    }
    // Every input line gets exactly one output line, so answers stay aligned with questions; a
    // blank line is an invalid action like any other. A newline ends a line, so empty input has
    // no lines and "\n" has one (blank) line.
    let mut failed = 0usize;
    if input.is_empty() {
        return Ok(Exit::Ok);
    }
    let body = input.strip_suffix(b"\n").unwrap_or(&input);
    for (index, line) in body.split(|b| *b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match decide(ruleset, line) {
            Ok(decision) => writeln!(out, "{decision}")?,
            Err(message) => {
                failed += 1;
                writeln!(
                    out,
                    "{}",
                    error_json("invalid_action", &format!("line {}: {message}", index + 1))
                )?;
            }
        }
    }
    if failed > 0 {
        eprintln!("error: {failed} line(s) were not valid actions");
        return Ok(Exit::InvalidInput);
    }
    Ok(Exit::Ok)
}
