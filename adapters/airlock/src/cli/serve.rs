//! `airlock serve` (SPEC §20): the JSON API under `/v1`, the web console at `/` and, unless
//! `--no-worker`, a worker, in one process on one store. Loopback by default; another address
//! needs TLS or `--insecure-remote`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use airlock_core::worker::WorkerSettings;
use airlock_host::TokioSpawner;
use airlock_host::authority::AllowedHosts;
use airlock_http::server::{Exposure, exposure, load_tls, serve};
use airlock_http::{AppState, Settings, router};

use super::globals::Globals;
use super::output::{app_error, invalid_argument, line, service_error};
use crate::app::AppError;
use crate::exit::Exit;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub shadow: super::globals::ShadowArgs,
    #[command(flatten)]
    pub notify: super::notify::NotifyArgs,
    /// Address to listen on (port 0: any free port; the chosen one is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Serve the API and console only; run no worker in this process.
    #[arg(long)]
    pub no_worker: bool,
    /// PEM certificate chain for HTTPS (with --tls-key).
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for HTTPS (with --tls-cert).
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// Listen on a non-loopback address without TLS: tokens then cross the network in clear
    /// text. Prints a warning.
    #[arg(long)]
    pub insecure_remote: bool,
    /// Runs the worker executes at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Another host name (or host:port) browsers and clients reach this server by, accepted
    /// in `Host` and a console form's `Origin` besides the listen address itself (for a
    /// loopback address also localhost, 127.0.0.1 and [::1]); repeatable. Any other `Host`
    /// is 421, against DNS rebinding.
    #[arg(long, value_name = "HOST")]
    pub listen_host: Vec<String>,
    /// The server's config file (TOML). Its `[auth]` section names an OAuth issuer whose JWT
    /// access tokens `/v1` takes beside airlock tokens (docs/auth.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub async fn run(globals: &Globals, args: ServeArgs) -> Exit {
    // Every argument is checked before the store is opened.
    let tls_files = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        (None, None) => None,
        _ => return invalid_argument("--tls-cert and --tls-key go together"),
    };
    if args.concurrency == 0 {
        return invalid_argument("--concurrency must be at least 1");
    }
    let notify_settings = match args.notify.settings() {
        Ok(settings) => settings,
        Err(exit) => return exit,
    };
    let exposed = match exposure(args.listen, tls_files.is_some(), args.insecure_remote) {
        Ok(exposed) => exposed,
        Err(e) => return invalid_argument(&e.to_string()),
    };
    // The names are checked now; the port is known once the socket is bound.
    if let Err(e) = AllowedHosts::new(args.listen, &args.listen_host) {
        return invalid_argument(&e.to_string());
    }
    let tls = match &tls_files {
        Some((cert, key)) => match load_tls(cert, key) {
            Ok(config) => Some(config),
            Err(e) => return app_error(&AppError::Config(e.to_string())),
        },
        None => None,
    };
    let auth = match args
        .config
        .as_deref()
        .map(crate::server_file::auth_of)
        .transpose()
    {
        Ok(auth) => auth.flatten(),
        Err(message) => return app_error(&AppError::Config(message)),
    };
    // The issuer's keys are fetched before anything listens: a wrong URL stops the start.
    let issuer = match auth {
        Some(config) => match airlock_oauth::ResourceServer::start(config).await {
            Ok(issuer) => Some(Arc::new(issuer)),
            Err(e) => return app_error(&AppError::Config(e.to_string())),
        },
        None => None,
    };
    let (app, sources) = match args
        .shadow
        .open_app(globals, super::globals::Hangup::ReloadsPolicy)
        .await
    {
        Ok(opened) => opened,
        Err(exit) => return exit,
    };
    let process_id = format!("serve-{}", uuid::Uuid::new_v4());
    let worker = (!args.no_worker).then(|| {
        let mut settings = WorkerSettings::new(process_id.clone());
        settings.concurrency = args.concurrency;
        app.worker(settings)
    });
    // PostgreSQL: any process's queued run wakes this server's worker at once (SPEC §18).
    let _listening = worker.as_ref().and_then(|_| app.wake_on_queued_runs());
    let control = Arc::new(app.control(worker.as_ref().map(|w| w.tokens().clone())));
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(e) => {
            return app_error(&AppError::Config(format!(
                "cannot listen on {}: {e}",
                args.listen
            )));
        }
    };
    let bound = listener.local_addr().unwrap_or(args.listen);
    let hosts = match AllowedHosts::new(bound, &args.listen_host) {
        Ok(hosts) => hosts,
        Err(e) => return invalid_argument(&e.to_string()),
    };
    let state = AppState::new(
        control.clone(),
        Settings {
            tls: tls.is_some(),
            hosts: Some(hosts),
            ..Settings::default()
        },
    );
    let state = match issuer {
        Some(issuer) => state.with_issuer(issuer),
        None => state,
    };
    // POST /v1/admin/reload: the reload SIGHUP does (crate::reload).
    let state = state.with_reload(Arc::new(crate::reload::HttpReload {
        sources,
        control: app.control(None),
    }));
    let scheme = if tls.is_some() { "https" } else { "http" };
    if exposed == Exposure::RemoteInsecure {
        eprintln!(
            "warning: serving {bound} without TLS (--insecure-remote): bearer tokens and \
             session cookies cross the network in clear text"
        );
    }
    line(serde_json::json!({
        "listening": bound.to_string(),
        "url": format!("{scheme}://{bound}/"),
        "worker": worker.is_some(),
        "policy_version": app.env.ruleset().version.as_str(),
    }));

    let stopping = Arc::new(AtomicBool::new(false));
    let stop_signal = Arc::new(tokio::sync::Notify::new());
    spawn_signal_listener(Arc::clone(&stopping), Arc::clone(&stop_signal));
    let shutdown = {
        let state = state.clone();
        let stop_signal = Arc::clone(&stop_signal);
        async move {
            stop_signal.notified().await;
            state.close();
        }
    };
    let server = serve(router(state.clone()), listener, tls, shutdown);
    let worker_loop = async {
        let Some(worker) = &worker else {
            return Ok(());
        };
        let stop = || stopping.load(Ordering::SeqCst);
        // Polls, and wakes early on a hint: a run queued through this server's API or, on
        // PostgreSQL, by any process's commit.
        let result = worker
            .run_with_hints(&TokioSpawner, &control, &stop, &*app.dispatcher)
            .await;
        if result.is_err() {
            // Fail-stop like `airlock worker`: the server goes down with it.
            stopping.store(true, Ordering::SeqCst);
            stop_signal.notify_one();
        }
        result
    };
    // Notifications (issue 32 item 1): delivered by one process per tenant at a time, whether
    // or not this one runs a worker.
    let notifier = super::notify::start(&app, notify_settings, &args.notify, process_id);
    let (served, worked) = tokio::join!(server, worker_loop);
    if let Some(notifier) = notifier {
        notifier.stop().await;
    }
    if let Err(e) = worked {
        return service_error(&e.into());
    }
    match served {
        Ok(()) => Exit::Ok,
        Err(e) => app_error(&AppError::Config(format!("server: {e}"))),
    }
}

/// SIGINT or SIGTERM: stop claiming, end the event streams, stop accepting; in-flight runs end
/// or park and open requests finish before the process exits.
pub(super) fn spawn_signal_listener(
    stopping: Arc<AtomicBool>,
    stop_signal: Arc<tokio::sync::Notify>,
) {
    tokio::spawn(async move {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminate => {}
        }
        stopping.store(true, Ordering::SeqCst);
        stop_signal.notify_one();
    });
}
