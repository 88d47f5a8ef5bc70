//! The `airlock` command line (SPEC Appendix A): argument parsing and dispatch. Each command
//! module translates between the terminal and core; none makes a policy or run decision.

mod approvals;
mod conversations;
mod demo;
mod duration;
mod globals;
mod id_arg;
mod invocations;
mod json;
mod lines;
mod mcp;
mod notify;
mod output;
mod policy;
mod policy_change;
mod runs;
mod serve;
mod table;
mod tokens;
mod worker;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::exit::Exit;

pub use globals::{Globals, check_id_flag, check_lease_ms};

#[derive(Debug, Parser)]
#[command(
    name = "airlock",
    version,
    about = "Decide, record and execute every tool call an agent proposes."
)]
pub struct Cli {
    #[command(flatten)]
    pub globals: Globals,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Walk through submit, park, approve, resume, crash and the review queue on a fresh data dir.
    Demo(demo::DemoArgs),
    /// Inspect and exercise the policy gate.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Submit runs.
    #[command(subcommand)]
    Run(runs::RunCommand),
    /// Inspect, cancel and resume runs.
    #[command(subcommand)]
    Runs(runs::RunsCommand),
    /// Run a worker: claim, execute, heartbeat, reclaim, sweep approvals.
    Worker(worker::WorkerArgs),
    /// The approval queue.
    #[command(subcommand)]
    Approvals(approvals::ApprovalsCommand),
    /// The UNCERTAIN review queue.
    #[command(subcommand)]
    Invocations(invocations::InvocationsCommand),
    /// MCP conversations: their calls, their taint, and clearing it.
    #[command(subcommand)]
    Conversations(conversations::ConversationsCommand),
    /// Serve the HTTP API and the web console (and a worker, unless --no-worker).
    Serve(serve::ServeArgs),
    /// API tokens for the HTTP API and the console.
    #[command(subcommand)]
    Tokens(tokens::TokensCommand),
    /// The MCP gateway: serve a client in front of MCP servers, or list their tools.
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
    /// Notification targets: signed webhooks, Slack and ntfy for approvers and reviewers.
    #[command(subcommand)]
    Notify(notify::NotifyCommand),
}

/// Help and version print on stdout and exit 0. A usage error is an invalid input like any
/// other (Appendix A): the error object on stdout, exit 2; clap's own text, with the usage line
/// and its hint, still goes to stderr for whoever is at the terminal.
fn usage_error(error: &clap::Error) -> Exit {
    if !error.use_stderr() {
        let _ = error.print();
        return Exit::Ok;
    }
    // A command given without its subcommand makes clap print the help page, whose first
    // paragraph is the command's description, not an error.
    if error.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        || error.kind() == clap::error::ErrorKind::MissingSubcommand
    {
        let _ = error.print();
        return output::invalid_argument("a subcommand is required; see --help");
    }
    // clap's first paragraph is the error; some errors continue it on indented lines (the
    // missing arguments), which belong in the message too.
    let rendered = error.to_string();
    let paragraph: Vec<&str> = rendered
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let joined = paragraph.join(" ");
    let message = joined.strip_prefix("error: ").unwrap_or(&joined);
    let _ = error.print();
    output::invalid_argument(if message.is_empty() {
        "invalid arguments"
    } else {
        message
    })
}

/// Parses the process arguments and runs the command.
pub fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error).into(),
    };
    // `RUST_LOG` selects what goes to stderr (default `warn`). Core's spans — `run`, `step` and
    // `call` — are logged when they close, with their fields and durations, so
    // `RUST_LOG=airlock_core=info` shows one line per finished call, step and run. With an OTLP
    // endpoint the spans are exported too (crate::telemetry).
    let telemetry = match crate::telemetry::init(cli.globals.otlp_endpoint.as_deref()) {
        Ok(telemetry) => telemetry,
        Err(message) => return output::invalid_argument(&message).into(),
    };
    // The policy commands that read only the policy files need no runtime.
    if let Command::Policy(command) = &cli.command
        && !command.reads_store()
    {
        let Command::Policy(command) = cli.command else {
            return Exit::Ok.into();
        };
        let exit = policy::run(&cli.globals, command);
        telemetry.shutdown();
        return exit.into();
    }
    let runtime = match build_runtime() {
        Ok(runtime) => runtime,
        Err(e) => {
            let message = format!("cannot start the runtime: {e}");
            output::line(crate::exit::error_json("storage", &message));
            eprintln!("error: {message}");
            return Exit::Storage.into();
        }
    };
    let globals = cli.globals;
    let exit = runtime.block_on(async move {
        match cli.command {
            Command::Policy(command) => policy::run_on_store(&globals, command).await,
            Command::Demo(args) => demo::run(&globals, args).await,
            Command::Run(runs::RunCommand::Submit {
                script,
                inline,
                max_script_bytes,
            }) => runs::submit(&globals, &script, inline, max_script_bytes).await,
            Command::Runs(command) => runs::runs(&globals, command).await,
            Command::Conversations(command) => {
                conversations::conversations(&globals, command).await
            }
            Command::Worker(args) => worker::run(&globals, args).await,
            Command::Approvals(command) => approvals::run(&globals, command).await,
            Command::Invocations(command) => invocations::run(&globals, command).await,
            Command::Serve(args) => serve::run(&globals, args).await,
            Command::Tokens(command) => tokens::run(&globals, command).await,
            Command::Mcp(command) => mcp::run(&globals, command).await,
            Command::Notify(command) => notify::run(&globals, command).await,
        }
    });
    shut_down(runtime);
    telemetry.shutdown();
    exit.into()
}

/// How long the process waits, once its command has ended, for blocking work still running on
/// the runtime. Only a tool body stuck in the file system is left by then, and its call has
/// already timed out and been recorded (SPEC §9.2 step 10); dropping the runtime instead would
/// wait for that thread forever, and the signal listener is gone, so only SIGKILL would end it.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

fn build_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

fn shut_down(runtime: tokio::runtime::Runtime) {
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocking_body_that_never_returns_does_not_keep_the_process_from_exiting() {
        let runtime = build_runtime().expect("runtime");
        let (_never, stuck) = std::sync::mpsc::channel::<()>();
        runtime.block_on(async move {
            let body = tokio::task::spawn_blocking(move || stuck.recv());
            // The pipeline gives up on the call (its timeout) and the command ends.
            let timed_out = tokio::time::timeout(std::time::Duration::from_millis(20), body).await;
            assert!(timed_out.is_err(), "the body is stuck");
        });
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            shut_down(runtime);
            let _ = done.send(());
        });
        assert!(
            finished
                .recv_timeout(SHUTDOWN_GRACE + std::time::Duration::from_secs(5))
                .is_ok(),
            "shutting down waited for the stuck body"
        );
    }
}
