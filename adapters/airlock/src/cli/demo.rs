//! `airlock demo` (Appendix A): the newcomer's walkthrough on a fresh data directory. It submits
//! the SPEC §15 example, runs it to the park, approves and resumes it; then a second run whose
//! approved `demo.external_write` is interrupted by a real process abort at `after_invoke` in a
//! child worker, a restarted worker marks the call UNCERTAIN, and the review queue and the
//! outbox show exactly one effect. Everything is decided by core; this file only narrates.
//!
//! With `--store postgres://…` the store is that database and the data dir (a new temporary one
//! unless given) holds only workspaces and the outbox; the child workers get the same store
//! through `AIRLOCK_STORE` (never on their command line, where the password would show). A
//! database that still has open runs is refused, as a used data dir is.

use std::path::Path;
use std::process::Stdio;

use airlock_core::events::Event;
use airlock_core::ids::RunId;
use airlock_core::principal::Principal;
use airlock_core::scope::{Scope, platform_scopes};
use airlock_core::time::Timestamp;
use airlock_core::vocab::{ApprovalResolution, InvocationStatus, RunStatus};
use airlock_core::worker::WorkerSettings;
use serde_json::Value;

use super::globals::Globals;
use super::output::{app_error, invalid_argument, line};
use crate::app::App;
use crate::exit::Exit;
use crate::store::StoreUrl;
use airlock_host::tools::outbox_path;

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Print the events as JSON Lines instead of the timeline.
    #[arg(long)]
    pub json: bool,
}

/// The SPEC §15 example script: the file the by-hand walkthrough (`docs/walkthrough.md`)
/// submits, so the demo and a newcomer typing the commands run the same script.
const EXAMPLE_SCRIPT: &str = include_str!("../../../../examples/example-run.json");

/// A run whose one effect will be interrupted after it happened.
const CRASH_SCRIPT: &str = r#"{"schema_version": 1, "tenant_id": "acme", "principal_id": "alice",
 "principal_scopes": ["demo.write"], "origin_trust": "user",
 "limits": {"max_steps": 3, "max_tool_calls": 4},
 "steps": [{"calls": [{"call_id": "send", "tool": "demo.external_write",
   "arguments": {"destination": "billing", "content": "invoice #42 sent"},
   "argument_trust": {"destination": "user", "content": "user"}}]}],
 "final_message": "sent"}"#;

/// Why the walkthrough stopped.
#[derive(Debug, thiserror::Error)]
enum DemoError {
    #[error("{0}")]
    Step(String),
}

fn step(message: impl Into<String>) -> DemoError {
    DemoError::Step(message.into())
}

struct Demo {
    app: App,
    alice: Principal,
    operator: Principal,
    json: bool,
    started: Timestamp,
}

fn principal(id: &str) -> Principal {
    let mut scopes = platform_scopes();
    scopes.extend(
        ["workspace.read", "workspace.write", "demo.write"]
            .iter()
            .filter_map(|s| Scope::parse(s).ok()),
    );
    Principal {
        tenant_id: "acme".to_owned(),
        principal_id: id.to_owned(),
        scopes,
    }
}

pub async fn run(globals: &Globals, args: DemoArgs) -> Exit {
    let data_dir = globals.data_dir_arg.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("airlock-demo-{}", uuid::Uuid::new_v4()))
    });
    // The demo's workers claim any queued run and one of them aborts on purpose, so on a store
    // that already holds runs it would interrupt someone's work: it refuses before opening it.
    let location = StoreUrl::parse(globals.store.as_deref(), &data_dir);
    if let Ok(StoreUrl::Sqlite(path)) = &location
        && path.exists()
    {
        return invalid_argument(&format!(
            "the demo needs a fresh data dir, and '{}' already holds a store; pass a new \
             --data-dir or none (a new temporary one)",
            data_dir.display()
        ));
    }
    if args.json {
        // stdout carries only events; the directory still has to be findable.
        eprintln!("airlock demo: data dir {}", data_dir.display());
    }
    let app = match App::open(
        &data_dir,
        globals.store.as_deref(),
        globals.policy_dir.as_deref(),
    )
    .await
    {
        Ok(app) => app,
        Err(e) => return app_error(&e),
    };
    // A shared database is checked once open: it must hold no run that is not finished.
    if let Ok(StoreUrl::Postgres(_)) = &location {
        let open = app.env.read(|tx| {
            let mut open = 0;
            for status in [
                RunStatus::Queued,
                RunStatus::Running,
                RunStatus::WaitingForApproval,
            ] {
                open += tx.count_runs(status)?;
            }
            Ok(open)
        });
        match open {
            Ok(0) => {}
            Ok(n) => {
                return invalid_argument(&format!(
                    "the demo needs a database without open runs, and {} holds {n}; use a \
                     fresh database",
                    app.store_description
                ));
            }
            Err(e) => return super::output::service_error(&e.into()),
        }
    }
    let started = app.env.clock.now();
    let demo = Demo {
        app,
        alice: principal("alice"),
        operator: principal("operator"),
        json: args.json,
        started,
    };
    if !demo.json {
        line("airlock demo");
        line(format_args!("  data dir:       {}", data_dir.display()));
        if let Ok(StoreUrl::Postgres(_)) = &location {
            line(format_args!(
                "  store:          {}",
                demo.app.store_description
            ));
        }
        line(format_args!(
            "  policy version: {}",
            demo.app.env.ruleset().version
        ));
        line("");
    }
    let ended = demo.walkthrough(globals).await;
    // The directory is the demo's record: it stays, for the commands the walkthrough printed.
    let stays = format!(
        "The demo's data dir stays at {dir}: look around with `airlock --data-dir {dir} --tenant \
         acme approvals list --output table` or `… runs show RUN`; remove it with `rm -rf {dir}`.",
        dir = data_dir.display()
    );
    if demo.json {
        eprintln!("airlock demo: {stays}");
    } else {
        line("");
        line(&stays);
    }
    match ended {
        Ok(()) => Exit::Ok,
        Err(e) => {
            eprintln!("demo failed: {e}");
            Exit::Refusal
        }
    }
}

impl Demo {
    fn say(&self, text: &str) {
        if !self.json {
            line(text);
        }
    }

    async fn walkthrough(&self, globals: &Globals) -> Result<(), DemoError> {
        let control = self.app.control(None);
        // Part 1: the §15 example, parked for approval, approved, resumed.
        self.say("== 1. Submit the example script and run it until it needs a human");
        let first = control
            .submit_run(&self.alice, EXAMPLE_SCRIPT)
            .await
            .map_err(|e| step(format!("submit: {e}")))?;
        self.run_inline(first.run_id).await?;
        self.timeline(first.run_id, None)?;
        let status = self.status(first.run_id)?;
        if status != RunStatus::WaitingForApproval {
            return Err(step(format!(
                "expected the example to park, it is {status}"
            )));
        }
        let approval = self.pending_one(first.run_id)?;
        self.say("");
        self.say("== 2. The approval queue holds one request");
        self.say(&format!(
            "  approval {}  tool {}  risk {}  arguments {}  expires {}",
            approval.id, approval.tool_name, approval.risk, approval.arguments, approval.expires_at
        ));
        self.say("== 3. operator approves it; a worker resumes the run");
        control
            .resolve(
                &self.operator,
                approval.id,
                ApprovalResolution::ApproveOnce,
                Some("demo: looks right"),
            )
            .await
            .map_err(|e| step(format!("approve: {e}")))?;
        let mark = self.last_event_id(first.run_id)?;
        self.run_inline(first.run_id).await?;
        self.timeline(first.run_id, Some(mark))?;
        let status = self.status(first.run_id)?;
        if status != RunStatus::Completed {
            return Err(step(format!(
                "expected the example to complete, it is {status}"
            )));
        }
        self.say(&format!("  run {} is COMPLETED", first.run_id));

        // Part 2: a real crash between the effect and its acknowledgement.
        self.say("");
        self.say("== 4. A second run: its external write is approved, then the worker process dies right after the effect");
        let second = control
            .submit_run(&self.alice, CRASH_SCRIPT)
            .await
            .map_err(|e| step(format!("submit: {e}")))?;
        // Only the first script runs on the inline dispatcher (Appendix A); this one is
        // executed by durable workers, child processes like the ones that follow.
        let parked = self.child_worker(globals, None).await?;
        if !parked.success() {
            return Err(step(format!(
                "the worker that runs it to the park ended: {}",
                describe(parked)
            )));
        }
        let approval = self.pending_one(second.run_id)?;
        control
            .resolve(
                &self.operator,
                approval.id,
                ApprovalResolution::ApproveOnce,
                Some("demo: send it"),
            )
            .await
            .map_err(|e| step(format!("approve: {e}")))?;
        let crashed = describe(self.child_worker(globals, Some("after_invoke")).await?);
        self.say(&format!(
            "  child worker with AIRLOCK_CRASH_AT=after_invoke exited: {crashed}"
        ));
        self.say("== 5. A restarted worker reclaims the run; the watermarked, non-idempotent call is never repeated");
        let restarted = describe(self.child_worker(globals, None).await?);
        self.say(&format!(
            "  restarted worker (--until-idle) exited: {restarted}"
        ));
        self.timeline(second.run_id, None)?;

        self.say("");
        self.say("== 6. The review queue and the outbox");
        let uncertain = control
            .list_uncertain(&self.operator, false)
            .map_err(|e| step(format!("review queue: {e}")))?;
        let call = uncertain
            .iter()
            .find(|i| i.run_id == second.run_id)
            .ok_or_else(|| step("the interrupted call is not in the review queue"))?;
        if call.status != InvocationStatus::Uncertain {
            return Err(step("the interrupted call is not UNCERTAIN"));
        }
        self.say(&format!(
            "  UNCERTAIN {} {} reason {}  idempotency_key {}",
            call.id,
            call.tool_name,
            call.reason_code.as_deref().unwrap_or(""),
            call.idempotency_key
        ));
        let lines = outbox_lines(&outbox_path(&self.app.data_dir), &call.idempotency_key)?;
        if lines != 1 {
            return Err(step(format!(
                "expected exactly one outbox line for the key, found {lines}"
            )));
        }
        self.say(&format!("  outbox.jsonl holds exactly {lines} line with that idempotency_key: the effect happened once"));
        let store = if self.app.store_description.starts_with("sqlite:") {
            String::new()
        } else {
            format!("--store {} ", shell_word(&self.app.store_description))
        };
        self.say(&format!("  settle it with: airlock {store}--data-dir {} --tenant acme invocations settle {} --outcome succeeded --note 'checked billing'", shell_word(&self.app.data_dir.display().to_string()), call.id));
        self.say(&format!(
            "  run {} is {}",
            second.run_id,
            self.status(second.run_id)?
        ));
        Ok(())
    }

    async fn run_inline(&self, run: RunId) -> Result<(), DemoError> {
        let worker = self.app.worker(WorkerSettings::new(format!(
            "demo-{}",
            uuid::Uuid::new_v4()
        )));
        worker
            .run_inline(run)
            .await
            .map_err(|e| step(format!("inline run: {e}")))?;
        Ok(())
    }

    fn status(&self, run: RunId) -> Result<RunStatus, DemoError> {
        Ok(self
            .app
            .control(None)
            .get_run(&self.alice, run)
            .map_err(|e| step(format!("get run: {e}")))?
            .status())
    }

    fn pending_one(&self, run: RunId) -> Result<airlock_core::approval::Approval, DemoError> {
        let page = self
            .app
            .control(None)
            .list_pending(&self.operator, Some(run), None, None)
            .map_err(|e| step(format!("list approvals: {e}")))?;
        page.items
            .into_iter()
            .next()
            .ok_or_else(|| step("no pending approval"))
    }

    fn events(&self, run: RunId) -> Result<Vec<Event>, DemoError> {
        Ok(self
            .app
            .control(None)
            .list_events(&self.alice, run, None, Some(1000))
            .map_err(|e| step(format!("events: {e}")))?
            .items)
    }

    fn last_event_id(&self, run: RunId) -> Result<i64, DemoError> {
        Ok(self.events(run)?.last().map_or(0, |e| e.id))
    }

    /// Prints the run's events after `after` as a timeline (or JSON Lines with `--json`).
    fn timeline(&self, run: RunId, after: Option<i64>) -> Result<(), DemoError> {
        for event in self
            .events(run)?
            .iter()
            .filter(|e| after.is_none_or(|a| e.id > a))
        {
            if self.json {
                line(event.to_json());
                continue;
            }
            let seconds = (event.created_at.as_micros() - self.started.as_micros()) as f64 / 1e6;
            line(format_args!(
                "  {seconds:>7.3}s  {:<26} {}",
                event.event_type.as_str(),
                detail(&event.payload)
            ));
        }
        Ok(())
    }

    /// Runs `airlock worker --until-idle --lease-ms 1000` as a child process, optionally with a
    /// crash point; returns how it exited.
    async fn child_worker(
        &self,
        globals: &Globals,
        crash_at: Option<&str>,
    ) -> Result<std::process::ExitStatus, DemoError> {
        let exe = std::env::current_exe()
            .map_err(|e| step(format!("cannot find the airlock binary: {e}")))?;
        let mut command = tokio::process::Command::new(exe);
        command.arg("--data-dir").arg(&self.app.data_dir);
        // The same store, through the environment: a URL may carry a password.
        match &globals.store {
            Some(store) => command.env("AIRLOCK_STORE", store),
            None => command.env_remove("AIRLOCK_STORE"),
        };
        if let Some(dir) = &globals.policy_dir {
            command.arg("--policy-dir").arg(dir);
        }
        command
            .args(["worker", "--until-idle", "--lease-ms", "1000"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        match crash_at {
            Some(point) => command.env("AIRLOCK_CRASH_AT", point),
            None => command.env_remove("AIRLOCK_CRASH_AT"),
        };
        let status = command
            .status()
            .await
            .map_err(|e| step(format!("cannot start a worker: {e}")))?;
        Ok(status)
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(6)) => "aborted (SIGABRT)".to_owned(),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "unknown".to_owned(),
    }
}

/// A short human detail of an event payload.
fn detail(payload: &Value) -> String {
    let mut parts = Vec::new();
    for key in [
        "name",
        "call_id",
        "reason_code",
        "resolution",
        "reason",
        "final_message",
        "trigger",
        "worker_id",
    ] {
        if let Some(value) = payload.get(key).filter(|v| !v.is_null()) {
            let shown = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            parts.push(format!("{key}={shown}"));
        }
    }
    if let Some(failure) = payload.get("failure") {
        parts.push(format!(
            "failure={}",
            failure["reason"].as_str().unwrap_or("?")
        ));
    }
    parts.join(" ")
}

/// `word` as one POSIX shell word: as it is when that is safe, else single-quoted, so the
/// printed settle command can be pasted whatever the data dir is called.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@%,=".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// How many outbox lines carry `key`.
fn outbox_lines(path: &Path, key: &str) -> Result<usize, DemoError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| step(format!("cannot read '{}': {e}", path.display())))?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["idempotency_key"].as_str() == Some(key))
        .count())
}

#[cfg(test)]
mod tests {
    use super::shell_word;

    #[test]
    fn shell_words_quote_only_when_needed() {
        assert_eq!(shell_word("/tmp/airlock-demo-1"), "/tmp/airlock-demo-1");
        assert_eq!(shell_word("/tmp/sp ace"), "'/tmp/sp ace'");
        assert_eq!(shell_word("/tmp/it's"), r"'/tmp/it'\''s'");
        assert_eq!(shell_word("$HOME"), "'$HOME'");
        assert_eq!(shell_word(""), "''");
    }
}
