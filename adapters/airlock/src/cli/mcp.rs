//! `airlock mcp serve` and `airlock mcp tools` (SPEC §19.1): the gateway of `airlock-mcp` on
//! this process's store and policy.
//!
//! A gateway file that does not load exits 4 with the offending key's dotted path (§19.2), as
//! the error object on stdout and a line on stderr. `mcp serve` speaks MCP on stdout, so
//! nothing else is ever printed there once it serves; its logs go to stderr (`RUST_LOG`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_core::tool::registry::ToolRegistry;
use airlock_core::worker::WorkerSettings;
use airlock_mcp::config::GatewayConfig;
use airlock_mcp::gateway::Gateway;
use airlock_mcp::serve::{ServeError, serve_stdio};

use super::Globals;
use super::output::{line, policy_error, print};
use crate::exit::{Exit, error_json};
use crate::input_file::{FileKind, read_bounded};
use crate::policy_source::load_ruleset;

/// The largest gateway file read.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

#[derive(Debug, clap::Subcommand)]
pub enum McpCommand {
    /// Serve MCP over stdio to one client, in front of the file's upstream servers.
    Serve(ServeArgs),
    /// Connect to every upstream and print each tool's names, hash, class and listing (JSON).
    Tools(ToolsArgs),
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The gateway file (SPEC §19.2).
    #[arg(long)]
    pub config: PathBuf,
    /// Lease length in milliseconds (the connection's renewal and its runs' leases),
    /// 3..=3600000; a dead gateway's runs end within about one lease plus a sweep.
    #[arg(long, default_value_t = 30_000)]
    pub lease_ms: u64,
    /// This gateway's id in the store (default: a fresh one).
    #[arg(long)]
    pub gateway_id: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ToolsArgs {
    /// The gateway file (SPEC §19.2).
    #[arg(long)]
    pub config: PathBuf,
}

pub async fn run(globals: &Globals, command: McpCommand) -> Exit {
    match command {
        McpCommand::Serve(args) => serve(globals, args).await,
        McpCommand::Tools(args) => tools(globals, args).await,
    }
}

fn config_error(message: &str) -> Exit {
    line(error_json("configuration", message));
    eprintln!("error: {message}");
    Exit::Storage
}

/// Reads and loads the gateway file; the error names the key's path.
fn load(path: &Path) -> Result<GatewayConfig, Exit> {
    let bytes = read_bounded(path, FileKind::Readable, MAX_CONFIG_BYTES)
        .map_err(|e| config_error(&format!("{}: {e}", path.display())))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| config_error(&format!("{}: not UTF-8 text", path.display())))?;
    GatewayConfig::parse(&text).map_err(|e| config_error(&format!("{}: {e}", path.display())))
}

async fn serve(globals: &Globals, args: ServeArgs) -> Exit {
    if let Err(exit) = super::check_lease_ms(args.lease_ms) {
        return exit;
    }
    if let Err(exit) = super::check_id_flag("--gateway-id", args.gateway_id.as_deref()) {
        return exit;
    }
    let config = match load(&args.config) {
        Ok(config) => config,
        Err(exit) => return exit,
    };
    let app = match globals.open_app().await {
        Ok(app) => app,
        Err(exit) => return exit,
    };
    let mut settings = WorkerSettings::new(
        args.gateway_id
            .unwrap_or_else(|| format!("mcp-{}", uuid::Uuid::new_v4())),
    );
    settings.lease_ms = args.lease_ms;
    settings.reclaim_every_ms = settings.reclaim_every_ms.min(args.lease_ms);
    match serve_stdio(config, app.env.clone(), settings).await {
        Ok(()) => Exit::Ok,
        Err(ServeError::Storage(e)) => {
            eprintln!("error: storage: {e}");
            Exit::Storage
        }
        Err(ServeError::Transport(e)) => {
            eprintln!("error: {e}");
            Exit::InvalidInput
        }
    }
}

async fn tools(globals: &Globals, args: ToolsArgs) -> Exit {
    let config = match load(&args.config) {
        Ok(config) => config,
        Err(exit) => return exit,
    };
    let ruleset = match load_ruleset(globals.policy_dir.as_deref()) {
        Ok(ruleset) => ruleset,
        Err(e) => return policy_error(&e),
    };
    // Nothing is recorded: listing touches no store.
    let (gateway, _changes) = Gateway::start(
        config,
        "mcp-tools".to_owned(),
        Arc::new(ToolRegistry::new()),
        Arc::new(ruleset),
        Arc::new(|_| {}),
        Arc::new(airlock_core::time::Timestamp::default),
    )
    .await;
    let report = gateway.report();
    gateway.shutdown().await;
    print(&report)
}
