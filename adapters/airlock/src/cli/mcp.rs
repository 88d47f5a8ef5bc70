//! `airlock mcp serve` and `airlock mcp tools` (SPEC §19.1): the gateway of `airlock-mcp` on
//! this process's store and policy.
//!
//! A gateway file that does not load exits 4 with the offending key's dotted path (§19.2), as
//! the error object on stdout and a line on stderr. `mcp serve` speaks MCP on stdout, so
//! nothing else is ever printed there once it serves; its logs go to stderr (`RUST_LOG`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use airlock_core::tool::registry::ToolRegistry;
use airlock_core::worker::WorkerSettings;
use airlock_host::authority::AllowedHosts;
use airlock_http::server::{Exposure, exposure, load_tls};
use airlock_mcp::config::GatewayConfig;
use airlock_mcp::draft::{self, Upstream};
use airlock_mcp::gateway::Gateway;
use airlock_mcp::listen::{ListenAuth, ListenSettings, MCP_PATH, listener};
use airlock_mcp::serve::{GatewayProcess, ServeError, serve_stdio_connection};

use super::globals::Globals;
use super::output::{invalid_argument, line, policy_error, print};
use crate::exit::{Exit, error_json};
use crate::input_file::{FileKind, read_bounded};
use crate::policy_source::load_ruleset;

/// The largest gateway file read.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

#[derive(Debug, clap::Subcommand)]
pub enum McpCommand {
    /// Serve MCP over stdio to one client, in front of the file's upstream servers (with
    /// --listen, also over Streamable HTTP to any number of clients).
    Serve(ServeArgs),
    /// Connect to every upstream and print each tool's names, hash, class and listing (JSON).
    Tools(ToolsArgs),
    /// Connect to one upstream server and draft a gateway file for it: a table per tool, its
    /// class drafted from the server's own annotations (review every one), its scope and pin.
    Init(InitArgs),
}

#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The server's id in the file: [a-z][a-z0-9_]*.
    #[arg(long)]
    pub server: String,
    /// A Streamable HTTP server's URL, instead of a command after `--`.
    #[arg(long, conflicts_with = "command")]
    pub url: Option<String>,
    /// Write the file here (refused if it exists); default: standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The stdio server's command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub shadow: super::globals::ShadowArgs,
    #[command(flatten)]
    pub notify: super::notify::NotifyArgs,
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
    /// Also serve MCP over Streamable HTTP at http://ADDR/mcp (port 0: any free port; the
    /// URL is printed on stderr). Each request needs `Authorization: Bearer <token>` of the
    /// file's tenant (airlock tokens create). The process then serves until SIGINT/SIGTERM.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Let HTTP clients without a token in as the file's principal. Loopback --listen only.
    #[arg(long, requires = "listen")]
    pub listen_no_auth: bool,
    /// Another host name (or host:port) HTTP clients reach --listen by, accepted in `Host`
    /// and `Origin` besides the listen address itself (repeatable).
    #[arg(long, value_name = "HOST", requires = "listen")]
    pub listen_host: Vec<String>,
    /// PEM certificate chain for HTTPS on --listen (with --tls-key).
    #[arg(long, requires = "listen")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for HTTPS on --listen (with --tls-cert).
    #[arg(long, requires = "listen")]
    pub tls_key: Option<PathBuf>,
    /// Listen on a non-loopback address without TLS: tokens then cross the network in clear
    /// text. Prints a warning.
    #[arg(long, requires = "listen")]
    pub insecure_remote: bool,
    /// Open MCP sessions one token may hold on --listen; the next `initialize` is 429 with
    /// Retry-After.
    #[arg(long, value_name = "N", requires = "listen",
          default_value_t = airlock_mcp::listen::DEFAULT_MAX_SESSIONS_PER_CREDENTIAL as u32,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub listen_max_sessions_per_token: u32,
    /// Open MCP sessions on --listen in all; the next `initialize` is 503 with Retry-After.
    #[arg(long, value_name = "N", requires = "listen",
          default_value_t = airlock_mcp::listen::DEFAULT_MAX_SESSIONS as u32,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub listen_max_sessions: u32,
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
        McpCommand::Init(args) => init(globals, args).await,
    }
}

fn config_error(message: &str) -> Exit {
    line(error_json("configuration", message));
    eprintln!("error: {message}");
    Exit::Storage
}

/// Reads and loads the gateway file; the error names the key's path.
fn load(path: &Path) -> Result<GatewayConfig, Exit> {
    read_config(path).map_err(|message| config_error(&message))
}

/// The gateway file at `path`, or why not (naming the file).
fn read_config(path: &Path) -> Result<GatewayConfig, String> {
    let bytes = read_bounded(path, FileKind::Readable, MAX_CONFIG_BYTES)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let text =
        String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", path.display()))?;
    GatewayConfig::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// What `SIGHUP` reloads in `mcp serve` (issue 32 item 4), in order.
struct Reloads<S: airlock_core::store::Store> {
    sources: crate::reload::PolicySources,
    control: airlock_core::control::ControlService<S>,
    gateway_file: PathBuf,
}

/// On each `SIGHUP`: the policy files ([`crate::reload`]), then the gateway file
/// ([`Gateway::reload`]: new servers connected, removed ones closed, every client session kept
/// open), then every upstream listed again, so the listing (which hides tools of a class the
/// rules deny outright) follows the new rules too. A file that does not load, or a gateway
/// file that changes more than its servers, is logged and changes nothing of its own. The
/// handler is in place when this returns.
fn reload_on_sighup<S: airlock_core::store::Store + 'static>(
    process: Arc<GatewayProcess<S>>,
    reloads: Reloads<S>,
) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = match signal(SignalKind::hangup()) {
            Ok(hangups) => hangups,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGHUP: policy and gateway file reload only by restart");
                return;
            }
        };
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                let _ = reloads
                    .sources
                    .reload_logged(&reloads.control, "SIGHUP")
                    .await;
                let outcome = match read_config(&reloads.gateway_file) {
                    Ok(next) => process.gateway().reload(next).await,
                    Err(message) => Err(message),
                };
                match outcome {
                    Ok(reloaded) => tracing::info!(
                        removed = ?reloaded.removed,
                        added = ?reloaded.added,
                        "gateway file reloaded"
                    ),
                    Err(message) => tracing::error!(
                        %message,
                        "gateway file reload failed; the file in force stays"
                    ),
                }
                process.gateway().refresh_all().await;
            }
        });
    }
    #[cfg(not(unix))]
    let _ = (process, reloads);
}

/// What `--listen` resolved to before anything is opened.
struct ListenPlan {
    addr: SocketAddr,
    auth: ListenAuth,
    exposure: Exposure,
    tls: Option<Arc<rustls::ServerConfig>>,
    max_sessions_per_credential: usize,
    max_sessions: usize,
}

fn refuse(message: &str) -> Exit {
    eprintln!("error: {message}");
    invalid_argument(message)
}

/// Checks the listener's flags (exit 2): `--listen-no-auth` only on a loopback address; a
/// non-loopback address needs TLS or `--insecure-remote`, as for `airlock serve` (§20).
fn listen_plan(args: &ServeArgs) -> Result<Option<ListenPlan>, Exit> {
    let Some(addr) = args.listen else {
        return Ok(None);
    };
    if args.listen_no_auth && !addr.ip().is_loopback() {
        return Err(refuse(&format!(
            "--listen-no-auth is accepted only with a loopback --listen address (127.0.0.1, [::1]); \
             {addr} is reachable from other machines, whose clients must send a token"
        )));
    }
    let tls_files = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        (None, None) => None,
        _ => return Err(refuse("--tls-cert and --tls-key go together")),
    };
    let exposure = exposure(addr, tls_files.is_some(), args.insecure_remote)
        .map_err(|e| refuse(&e.to_string()))?;
    let tls = match &tls_files {
        Some((cert, key)) => Some(load_tls(cert, key).map_err(|e| config_error(&e.to_string()))?),
        None => None,
    };
    let auth = if args.listen_no_auth {
        ListenAuth::NoneOnLoopback
    } else {
        ListenAuth::Token
    };
    Ok(Some(ListenPlan {
        addr,
        auth,
        exposure,
        tls,
        max_sessions_per_credential: args.listen_max_sessions_per_token as usize,
        max_sessions: args.listen_max_sessions as usize,
    }))
}

async fn serve(globals: &Globals, args: ServeArgs) -> Exit {
    if let Err(exit) = super::globals::check_lease_ms(args.lease_ms) {
        return exit;
    }
    if let Err(exit) = super::globals::check_id_flag("--gateway-id", args.gateway_id.as_deref()) {
        return exit;
    }
    let plan = match listen_plan(&args) {
        Ok(plan) => plan,
        Err(exit) => return exit,
    };
    let config = match load(&args.config) {
        Ok(config) => config,
        Err(exit) => return exit,
    };
    let notify_settings = match args.notify.settings() {
        Ok(settings) => settings,
        Err(exit) => return exit,
    };
    let (app, sources) = match args
        .shadow
        .open_app(globals, super::globals::Hangup::CallerHandles)
        .await
    {
        Ok(opened) => opened,
        Err(exit) => return exit,
    };
    let reloads = Reloads {
        sources,
        control: app.control(None),
        gateway_file: args.config.clone(),
    };
    let mut settings = WorkerSettings::new(
        args.gateway_id
            .clone()
            .unwrap_or_else(|| format!("mcp-{}", uuid::Uuid::new_v4())),
    );
    settings.lease_ms = args.lease_ms;
    settings.reclaim_every_ms = settings.reclaim_every_ms.min(args.lease_ms);
    // Notifications (issue 32 item 1): a gateway's calls wait for people too; one process per
    // tenant delivers, whichever of the gateways, servers and workers on the store holds the
    // tenant's lease.
    let notifier = super::notify::start(
        &app,
        notify_settings,
        &args.notify,
        settings.worker_id.clone(),
    );
    let exit = match plan {
        None => {
            let process = GatewayProcess::start(config, app.env.clone(), settings).await;
            reload_on_sighup(Arc::clone(&process), reloads);
            let served = serve_stdio_connection(&process).await;
            process.shutdown().await;
            served_exit(served)
        }
        Some(plan) => {
            serve_listening(
                config,
                app.env.clone(),
                settings,
                plan,
                &args.listen_host,
                reloads,
            )
            .await
        }
    };
    if let Some(notifier) = notifier {
        notifier.stop().await;
    }
    exit
}

fn served_exit(served: Result<(), ServeError>) -> Exit {
    match served {
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

/// How long shutdown waits for the HTTP clients' runs to end.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// Serves the stdio client and the HTTP listener until SIGINT or SIGTERM. The stdio client's
/// end (or an stdin with no client) ends only its connection.
async fn serve_listening<S: airlock_core::store::Store + 'static>(
    config: airlock_mcp::config::GatewayConfig,
    env: airlock_core::env::Env<S>,
    settings: WorkerSettings,
    plan: ListenPlan,
    extra_hosts: &[String],
    reloads: Reloads<S>,
) -> Exit {
    // The `[auth]` issuer's keys are fetched before anything listens: a wrong URL stops the start.
    let issuer = match config.auth.clone() {
        Some(auth) => match airlock_oauth::ResourceServer::start(auth).await {
            Ok(issuer) => Some(Arc::new(issuer)),
            Err(e) => return config_error(&e.to_string()),
        },
        None => None,
    };
    let socket = match tokio::net::TcpListener::bind(plan.addr).await {
        Ok(socket) => socket,
        Err(e) => return config_error(&format!("cannot listen on {}: {e}", plan.addr)),
    };
    let bound = socket.local_addr().unwrap_or(plan.addr);
    let hosts = match AllowedHosts::new(bound, extra_hosts) {
        Ok(hosts) => hosts,
        Err(e) => return refuse(&e.to_string()),
    };
    let process = GatewayProcess::start(config, env, settings).await;
    reload_on_sighup(Arc::clone(&process), reloads);
    let listening = listener(
        Arc::clone(&process),
        ListenSettings {
            hosts,
            auth: plan.auth,
            tls: plan.tls.is_some(),
            max_sessions_per_credential: plan.max_sessions_per_credential,
            max_sessions: plan.max_sessions,
            issuer,
        },
    );
    let scheme = if plan.tls.is_some() { "https" } else { "http" };
    if plan.exposure == Exposure::RemoteInsecure {
        eprintln!(
            "warning: serving MCP on {bound} without TLS (--insecure-remote): bearer tokens \
             cross the network in clear text"
        );
    }
    if plan.auth == ListenAuth::NoneOnLoopback {
        eprintln!(
            "warning: --listen-no-auth: any local process that reaches {bound} is served as \
             principal '{}' of tenant '{}' without a token",
            process.config().principal_id,
            process.config().tenant_id
        );
    }
    eprintln!("airlock mcp serve: listening on {scheme}://{bound}{MCP_PATH}");

    let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_signal = Arc::new(tokio::sync::Notify::new());
    super::serve::spawn_signal_listener(stopping, Arc::clone(&stop_signal));
    let stdio_process = Arc::clone(&process);
    let stdio = tokio::spawn(async move {
        if let Err(error) = serve_stdio_connection(&stdio_process).await {
            tracing::info!(%error, "no stdio client, or it ended with an error");
        }
    });
    let shutdown = {
        let stop_signal = Arc::clone(&stop_signal);
        async move { stop_signal.notified().await }
    };
    let served =
        airlock_http::server::serve(listening.router.clone(), socket, plan.tls, shutdown).await;
    listening.close(CLOSE_WAIT).await;
    stdio.abort();
    process.shutdown().await;
    match served {
        Ok(()) => Exit::Ok,
        Err(e) => config_error(&format!("server: {e}")),
    }
}

/// `mcp init`: the server is reached through a one-server gateway file made in memory (so it
/// is checked like any other), nothing is recorded, and the draft is written only once the
/// server answered.
async fn init(globals: &Globals, args: InitArgs) -> Exit {
    let server = args.server.as_str();
    let id_ok = server
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase())
        && server
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !id_ok {
        return refuse(&format!(
            "--server '{}' is not a server id ([a-z][a-z0-9_]*)",
            server.escape_default()
        ));
    }
    let upstream = match (&args.url, args.command.split_first()) {
        (Some(url), None) => Upstream::StreamableHttp { url: url.clone() },
        (None, Some((command, rest))) => Upstream::Stdio {
            command: command.clone(),
            args: rest.to_vec(),
        },
        _ => {
            return refuse(
                "give the server to draft: `--url URL`, or its command after `--` \
                 (airlock mcp init --server files -- npx -y @modelcontextprotocol/server-filesystem /srv)",
            );
        }
    };
    if let Some(out) = &args.out
        && out.exists()
    {
        return refuse(&format!(
            "'{}' exists; mcp init never overwrites a file (choose another --out)",
            out.display()
        ));
    }
    let principal = match globals.principal() {
        Ok(p) => p,
        Err(exit) => return exit,
    };
    // The file mcp init itself reads: the server alone, no tables.
    let probe = draft::gateway_file(
        server,
        &upstream,
        &principal.tenant_id,
        &principal.principal_id,
        &[],
    );
    let config = match GatewayConfig::parse(&probe) {
        Ok(config) => config,
        Err(e) => return refuse(&e.to_string()),
    };
    let gateway = match listing_gateway(globals, config, "mcp-init").await {
        Ok(gateway) => gateway,
        Err(exit) => return exit,
    };
    let failed = gateway.server_error(server);
    let tools = gateway.definitions(server);
    gateway.shutdown().await;
    if let Some(error) = failed {
        return config_error(&format!("server {server}: {error}"));
    }
    let text = draft::gateway_file(
        server,
        &upstream,
        &principal.tenant_id,
        &principal.principal_id,
        &tools,
    );
    match &args.out {
        None => {
            print_text(&text);
            Exit::Ok
        }
        Some(out) => {
            let written = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(out)
                .and_then(|mut file| std::io::Write::write_all(&mut file, text.as_bytes()));
            match written {
                Ok(()) => {
                    eprintln!(
                        "airlock mcp init: wrote {} ({} tools): review every class, then `airlock mcp tools --config {}`",
                        out.display(),
                        tools.len(),
                        out.display()
                    );
                    Exit::Ok
                }
                Err(e) => config_error(&format!("cannot write '{}': {e}", out.display())),
            }
        }
    }
}

/// A gateway that only lists (`mcp tools`, `mcp init`): connected to the file's upstreams,
/// under the policy files' matrix, recording nothing (listing touches no store).
async fn listing_gateway(
    globals: &Globals,
    config: GatewayConfig,
    id: &str,
) -> Result<Arc<Gateway>, Exit> {
    let ruleset = load_ruleset(globals.policy_dir.as_deref()).map_err(|e| policy_error(&e))?;
    let (gateway, _changes) = Gateway::start(
        config,
        id.to_owned(),
        Arc::new(ToolRegistry::new()),
        airlock_core::live_policy::LivePolicy::fixed(ruleset),
        Arc::new(|_| {}),
        Arc::new(airlock_core::time::Timestamp::default),
    )
    .await;
    Ok(gateway)
}

/// Writes `text` to stdout as is (it ends with a newline).
fn print_text(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(error) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        eprintln!("error: cannot write output: {error}");
        std::process::exit(Exit::Storage.code().into());
    }
}

async fn tools(globals: &Globals, args: ToolsArgs) -> Exit {
    let config = match load(&args.config) {
        Ok(config) => config,
        Err(exit) => return exit,
    };
    let gateway = match listing_gateway(globals, config, "mcp-tools").await {
        Ok(gateway) => gateway,
        Err(exit) => return exit,
    };
    let report = gateway.report();
    gateway.shutdown().await;
    print(&report)
}
