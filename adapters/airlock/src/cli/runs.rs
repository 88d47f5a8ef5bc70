//! `airlock run submit` and `airlock runs list|show|events|cancel|resume` (Appendix A).

use std::path::{Path, PathBuf};

use airlock_core::control::ServiceError;
use airlock_core::ids::RunId;
use airlock_core::planner::script::{DEFAULT_MAX_SCRIPT_BYTES, RunScript};
use airlock_core::principal::Principal;
use airlock_core::store::TxError;
use airlock_core::worker::WorkerSettings;
use clap::Subcommand;
use serde_json::json;

use super::globals::Globals;
use super::json;
use super::output::{invalid_argument, line, print, service_error};
use super::table::{self, OutputFormat};
use crate::exit::Exit;
use crate::input_file::{FileKind, InputFileError, read_bounded};

#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Submit a run script (SPEC §15); acts as the script's tenant and principal.
    Submit {
        /// The run script JSON file.
        script: PathBuf,
        /// Execute it in this process until it parks or ends.
        #[arg(long)]
        inline: bool,
        /// The largest script (and stored planner_input) accepted, in bytes.
        #[arg(long, default_value_t = DEFAULT_MAX_SCRIPT_BYTES)]
        max_script_bytes: usize,
    },
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// The tenant's runs, newest first.
    List {
        /// 1..=100 (default 50).
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=100))]
        limit: Option<u16>,
        /// The previous page's `next_cursor`.
        #[arg(long)]
        cursor: Option<String>,
        /// `table`: aligned columns for a person (short id, status, principal, steps, calls,
        /// age, planner); JSON by default.
        #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
        output: OutputFormat,
    },
    /// Show a run.
    Show { run: RunId },
    /// Print a run's events as JSON Lines.
    Events { run: RunId },
    /// Cancel a run.
    Cancel { run: RunId },
    /// Execute a QUEUED run in this process until it parks or ends.
    Resume { run: RunId },
}

/// The worker id of in-process execution (`--inline`, `runs resume`).
fn inline_worker_id() -> String {
    format!("inline-{}", uuid::Uuid::new_v4())
}

/// What `run_inline` failed with, as the service error the CLI prints: a storage error (exit 4)
/// whatever the transaction's own kind, since the run was neither refused nor invalid. The
/// worker has logged it and given the lease back, so any worker resumes the run.
fn inline_failure(error: TxError) -> ServiceError {
    let cause = match error {
        TxError::Backend(message) => message,
        other => other.to_string(),
    };
    ServiceError::Storage(format!(
        "the run could not be executed in this process: {cause}; a worker resumes it"
    ))
}

/// An I/O error as a person says it: the OS's message without its `(os error N)` suffix.
fn io_cause(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.rsplit_once(" (os error ") {
        Some((cause, _)) => cause.to_owned(),
        None => text,
    }
}

pub async fn submit(
    globals: &Globals,
    script: &Path,
    inline: bool,
    max_script_bytes: usize,
) -> Exit {
    // Bounded: a huge file (or `/dev/zero`) is refused without being read whole. Each message
    // names the file and the real cause; the flag only when the limit is the cause.
    let shown = script.display().to_string().escape_default().to_string();
    let text = match read_bounded(script, FileKind::Readable, max_script_bytes as u64) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => return invalid_argument(&format!("'{shown}' is not UTF-8 text")),
        },
        Err(InputFileError::TooLarge { max_bytes }) => {
            return invalid_argument(&format!(
                "'{shown}' is larger than the limit of {max_bytes} bytes (raise it with \
                 --max-script-bytes)"
            ));
        }
        Err(InputFileError::Io(e)) => {
            return invalid_argument(&format!("cannot read '{shown}': {}", io_cause(&e)));
        }
        Err(e) => return invalid_argument(&format!("cannot read '{shown}': {e}")),
    };
    let parsed = match RunScript::parse(&text) {
        Ok(parsed) => parsed,
        Err(e) => return invalid_argument(&format!("'{shown}': {e}")),
    };
    // Every argument is checked before the store is opened (and created): invalid input
    // leaves nothing behind.
    let principal = match globals.principal() {
        Ok(p) => Principal {
            tenant_id: parsed.tenant_id.clone(),
            principal_id: parsed.principal_id.clone(),
            scopes: p.scopes,
        },
        Err(exit) => return exit,
    };
    let app = match globals.open_app().await {
        Ok(app) => app,
        Err(exit) => return exit,
    };
    let control = app.control(None).with_max_script_bytes(max_script_bytes);
    let submitted = match control.submit_run(&principal, &text).await {
        Ok(submitted) => submitted,
        Err(e) => return service_error(&e),
    };
    let mut status = submitted.status;
    if inline {
        let worker = app.worker(WorkerSettings::new(inline_worker_id()));
        if let Err(e) = worker.run_inline(submitted.run_id).await {
            return service_error(&inline_failure(e));
        }
        match control.get_run(&principal, submitted.run_id) {
            Ok(run) => status = run.status(),
            Err(e) => return service_error(&e),
        }
    }
    print(&json!({
        "run_id": submitted.run_id.to_string(),
        "session_id": submitted.session_id.to_string(),
        "status": status.as_str(),
    }))
}

pub async fn runs(globals: &Globals, command: RunsCommand) -> Exit {
    let principal = match globals.principal() {
        Ok(p) => p,
        Err(exit) => return exit,
    };
    let app = match globals.open_existing_app().await {
        Ok(app) => app,
        Err(exit) => return exit,
    };
    let control = app.control(None);
    let id = match &command {
        RunsCommand::List {
            limit,
            cursor,
            output,
        } => {
            return match control.list_runs(&principal, limit.map(usize::from), cursor.as_deref()) {
                Ok(page) if *output == OutputFormat::Table => {
                    let now = app.env.clock.now();
                    let rows: Vec<Vec<String>> = page
                        .items
                        .iter()
                        .map(|r| {
                            vec![
                                table::short(r.id),
                                r.status.as_str().to_owned(),
                                r.principal_id.clone(),
                                r.step_count.to_string(),
                                r.tool_call_count.to_string(),
                                table::age(now, r.created_at),
                                r.planner_kind.clone(),
                            ]
                        })
                        .collect();
                    table::print_page(
                        &[
                            "ID",
                            "STATUS",
                            "PRINCIPAL",
                            "STEPS",
                            "CALLS",
                            "AGE",
                            "PLANNER",
                        ],
                        &rows,
                        page.next_cursor.as_deref(),
                    );
                    Exit::Ok
                }
                Ok(page) => print(&json!({
                    "items": page.items.iter().map(json::run_summary).collect::<Vec<_>>(),
                    "next_cursor": page.next_cursor,
                })),
                Err(e) => service_error(&e),
            };
        }
        RunsCommand::Show { run }
        | RunsCommand::Events { run }
        | RunsCommand::Cancel { run }
        | RunsCommand::Resume { run } => *run,
    };
    match command {
        RunsCommand::List { .. } => Exit::Ok,
        RunsCommand::Show { .. } => match control.get_run(&principal, id) {
            Ok(run) => print(&json::run(&run)),
            Err(e) => service_error(&e),
        },
        RunsCommand::Events { .. } => {
            let mut after = None;
            loop {
                match control.list_events(&principal, id, after, Some(1000)) {
                    Ok(page) => {
                        for event in &page.items {
                            line(event.to_json());
                        }
                        match page.next_cursor.and_then(|c| c.parse::<i64>().ok()) {
                            Some(next) => after = Some(next),
                            None => return Exit::Ok,
                        }
                    }
                    Err(e) => return service_error(&e),
                }
            }
        }
        RunsCommand::Cancel { .. } => match control.cancel_run(&principal, id).await {
            Ok(outcome) => {
                print(&json!({"accepted": outcome.accepted, "status": outcome.status.as_str()}))
            }
            Err(e) => service_error(&e),
        },
        RunsCommand::Resume { .. } => {
            if let Err(e) = control.resume_run(&principal, id) {
                return service_error(&e);
            }
            let worker = app.worker(WorkerSettings::new(inline_worker_id()));
            match worker.run_inline(id).await {
                Ok(Some(_)) => {}
                // The claim was lost: the run changed (another worker took it, say) since
                // `resume_run` saw it QUEUED and due. Nothing ran here; say what it is now.
                Ok(None) => {
                    let now = match control.get_run(&principal, id) {
                        Ok(run) => run.status().as_str().to_owned(),
                        Err(e) => return service_error(&e),
                    };
                    return service_error(&ServiceError::Conflict(format!(
                        "the run could not be claimed here: it is {now} (changed meanwhile)"
                    )));
                }
                Err(e) => return service_error(&inline_failure(e)),
            }
            match control.get_run(&principal, id) {
                Ok(run) => print(&json::run(&run)),
                Err(e) => service_error(&e),
            }
        }
    }
}
