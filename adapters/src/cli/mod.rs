//! The `airlock` command line (SPEC Appendix A): argument parsing and dispatch. Each command
//! module translates between the terminal and core; none makes a policy or run decision.

mod policy;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::exit::Exit;

/// Options every command accepts.
#[derive(Debug, clap::Args)]
pub struct Globals {
    /// Directory holding airlock.sqlite3, workspaces/ and outbox.jsonl.
    #[arg(long, global = true, default_value = "./.airlock")]
    pub data_dir: PathBuf,
    /// Directory holding default.toml and hardline.toml (default: the embedded shipped files).
    #[arg(long, global = true)]
    pub policy_dir: Option<PathBuf>,
    /// Tenant the caller acts for.
    #[arg(long, global = true, default_value = "default")]
    pub tenant: String,
    /// Principal the caller acts as.
    #[arg(long, global = true, default_value = "operator")]
    pub principal: String,
    /// Comma-separated scopes the caller holds (default: the ten platform scopes).
    #[arg(long, global = true, value_delimiter = ',')]
    pub scopes: Option<Vec<String>>,
}

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
    /// Inspect and exercise the policy gate.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
}

/// Parses the process arguments and runs the command.
pub fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // Help and version exit 0 on stdout; usage errors exit 2 on stderr.
            let _ = error.print();
            return ExitCode::from(if error.use_stderr() {
                Exit::InvalidInput.code()
            } else {
                Exit::Ok.code()
            });
        }
    };
    let exit = match cli.command {
        Command::Policy(command) => policy::run(&cli.globals, command),
    };
    exit.into()
}
