//! `airlock policy replay` and `airlock policy shadow report` (issue 32 items 2 and 3): what a
//! candidate policy would decide differently, from the store's own history.
//!
//! - `replay` decides every recorded call again under the policy of `--policy-dir` (the shipped
//!   policy without it) and compares each with the decision stored on its row. Nothing runs.
//! - `shadow report` reads the `policy.shadow.diff` events a process started with
//!   `--shadow-policy-dir` recorded beside its live decisions.
//!
//! Both print the same table: one line per transition (`allow → deny`, …) with its count, and
//! up to three examples each (time, action id, tenant, tool, both reason codes and versions;
//! never arguments). `--json` prints it as one object. Both read every tenant of the store: they
//! are operator commands over a store the operator opens directly, like `policy check` over the
//! policy files. Neither loads the policy as the store's policy nor writes anything.

use std::time::{SystemTime, UNIX_EPOCH};

use airlock_core::invocation::replay::{Window, replay};
use airlock_core::invocation::shadow;
use airlock_core::time::Timestamp;
use clap::{Args, Subcommand};
use serde_json::json;

use super::globals::Globals;
use super::output::{app_error, invalid_argument, line, policy_error};
use crate::app::open_store_for_reading;
use crate::exit::{Exit, error_json};
use crate::policy_source::load_ruleset;

/// `--since` / `--until`: which recorded calls.
#[derive(Debug, Clone, Args)]
pub struct WindowArgs {
    /// Only calls decided at or after this time: RFC 3339 (`2026-12-06T09:00:00Z`) or an age
    /// (`30m`, `24h`, `7d`: that long before now).
    #[arg(long, value_parser = parse_time)]
    since: Option<Timestamp>,
    /// Only calls decided before this time (same forms).
    #[arg(long, value_parser = parse_time)]
    until: Option<Timestamp>,
    /// Print the table as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ShadowCommand {
    /// The calls a shadow candidate decided differently from the live policy, by transition.
    Report {
        #[command(flatten)]
        window: WindowArgs,
    },
}

/// `policy replay`.
pub async fn replay_command(globals: &Globals, window: WindowArgs) -> Exit {
    let candidate = match load_ruleset(globals.policy_dir.as_deref()) {
        Ok(ruleset) => ruleset,
        Err(error) => return policy_error(&error),
    };
    let (store, span) = match open(globals, &window) {
        Ok(opened) => opened,
        Err(exit) => return exit,
    };
    let replayed = airlock_host::blocking(move || replay(&store, &candidate, span));
    let replayed = match replayed {
        Ok(replayed) => replayed,
        Err(error) => return storage_error(&error.to_string()),
    };
    let skipped: serde_json::Map<String, serde_json::Value> = replayed
        .skipped
        .iter()
        .map(|(why, count)| (why.as_str().to_owned(), json!(count)))
        .collect();
    if window.json {
        let mut out = replayed.table.to_json();
        out["skipped"] = json!(skipped);
        line(out);
    } else {
        let mut text = replayed.table.render_text();
        for (why, count) in &replayed.skipped {
            text.push_str(&format!("{count} calls not decided again: {why}\n"));
        }
        print!("{text}");
    }
    Exit::Ok
}

/// `policy shadow report`.
pub async fn shadow_command(globals: &Globals, command: ShadowCommand) -> Exit {
    let ShadowCommand::Report { window } = command;
    let (store, span) = match open(globals, &window) {
        Ok(opened) => opened,
        Err(exit) => return exit,
    };
    let read = airlock_host::blocking(move || shadow::report(&store, span));
    let (table, unreadable) = match read {
        Ok(read) => read,
        Err(error) => return storage_error(&error.to_string()),
    };
    if window.json {
        let mut out = table.to_json();
        out["unreadable"] = json!(unreadable);
        line(out);
    } else {
        let mut text = table.render_text();
        if unreadable > 0 {
            text.push_str(&format!(
                "{unreadable} policy.shadow.diff events this build cannot read\n"
            ));
        }
        print!("{text}");
    }
    Exit::Ok
}

fn open(globals: &Globals, window: &WindowArgs) -> Result<(crate::app::HostStore, Window), Exit> {
    if let (Some(since), Some(until)) = (window.since, window.until)
        && until <= since
    {
        return Err(invalid_argument("--until must be later than --since"));
    }
    let span = Window {
        from: window.since.unwrap_or(Window::ALL.from),
        until: window.until,
    };
    let store = open_store_for_reading(&globals.data_dir(), globals.store.as_deref())
        .map_err(|e| app_error(&e))?;
    Ok((store, span))
}

fn storage_error(message: &str) -> Exit {
    line(error_json("storage", message));
    eprintln!("error: storage: {message}");
    Exit::Storage
}

/// RFC 3339, or an age before now: digits and one of `s`, `m`, `h`, `d`.
fn parse_time(text: &str) -> Result<Timestamp, String> {
    if let Ok(at) = text.parse::<Timestamp>() {
        return Ok(at);
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| "the system clock is before 1970".to_owned())?;
    let now = Timestamp::from_micros(i64::try_from(now.as_micros()).unwrap_or(i64::MAX));
    age_before(text, now)
}

/// `text` as an age before `now` (`30m` → 30 minutes before).
fn age_before(text: &str, now: Timestamp) -> Result<Timestamp, String> {
    let seconds = super::duration::seconds(text).ok_or_else(|| {
        format!(
            "'{}' is neither an RFC 3339 time nor an age like 30m, 24h or 7d",
            text.escape_debug()
        )
    })?;
    Ok(now.saturating_add_seconds(-seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc_3339_or_an_age_before_now() {
        let now: Timestamp = "2026-12-06T12:00:00Z".parse().unwrap();
        assert_eq!(
            age_before("30m", now).unwrap(),
            "2026-12-06T11:30:00Z".parse::<Timestamp>().unwrap()
        );
        assert_eq!(
            age_before("7d", now).unwrap(),
            "2026-11-29T12:00:00Z".parse::<Timestamp>().unwrap()
        );
        for bad in [
            "",
            "m",
            "-5m",
            "5 m",
            "5w",
            "1.5h",
            "99999999999999999999d",
            "5ḿ",
        ] {
            assert!(age_before(bad, now).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_time("2026-12-06T09:00:00Z").unwrap(),
            "2026-12-06T09:00:00Z".parse::<Timestamp>().unwrap()
        );
    }
}
