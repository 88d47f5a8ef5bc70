//! `airlock worker` (Appendix A, SPEC §8.2): core's worker loop on the tokio host, with graceful
//! shutdown on SIGINT/SIGTERM and `--until-idle`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use airlock_core::vocab::InvocationStatus;
use airlock_core::worker::{ExecutionTally, WorkerSettings};

use super::globals::Globals;
use super::output::{invalid_argument, line, service_error};
use crate::exit::Exit;
use airlock_host::TokioSpawner;

#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub shadow: super::globals::ShadowArgs,
    #[command(flatten)]
    pub notify: super::notify::NotifyArgs,
    /// Runs executed at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Exit once nothing is in flight and no run is QUEUED or RUNNING, printing one JSON line:
    /// claims, runs, completed, failed, cancelled, parked_for_approval, abandoned and the
    /// runs' calls_uncertain.
    #[arg(long)]
    pub until_idle: bool,
    /// This worker's lease owner id (default: a fresh one).
    #[arg(long)]
    pub worker_id: Option<String>,
    /// Lease length in milliseconds, 3..=3600000 (one hour); heartbeats run every lease/3.
    #[arg(long, default_value_t = 30_000)]
    pub lease_ms: u64,
}

pub async fn run(globals: &Globals, args: WorkerArgs) -> Exit {
    if args.concurrency == 0 {
        return invalid_argument("--concurrency must be at least 1");
    }
    // Bounded above too: a lease is how long a crashed worker's run waits before another
    // worker may take it, and a huge one would never expire (core's `MAX_LEASE_MS`).
    if let Err(exit) = super::globals::check_lease_ms(args.lease_ms) {
        return exit;
    }
    if let Err(exit) = super::globals::check_id_flag("--worker-id", args.worker_id.as_deref()) {
        return exit;
    }
    let notify_settings = match args.notify.settings() {
        Ok(settings) => settings,
        Err(exit) => return exit,
    };
    let app = match args
        .shadow
        .open_app(globals, super::globals::Hangup::ReloadsPolicy)
        .await
    {
        Ok((app, _reloads)) => app,
        Err(exit) => return exit,
    };
    let mut settings = WorkerSettings::new(
        args.worker_id
            .unwrap_or_else(|| format!("worker-{}", uuid::Uuid::new_v4())),
    );
    settings.concurrency = args.concurrency;
    settings.lease_ms = args.lease_ms;
    let worker = app.worker(settings);
    // PostgreSQL: any process's queued run wakes this worker at once (SPEC §18).
    let _listening = app.wake_on_queued_runs();
    let control = app.control(Some(worker.tokens().clone()));
    let stopping = Arc::new(AtomicBool::new(false));
    spawn_signal_listener(Arc::clone(&stopping));
    tracing::info!(worker_id = %worker.settings().worker_id, "worker started");
    let until_idle = args.until_idle;
    let idle_worker = Arc::clone(&worker);
    let stop = move || {
        stopping.load(Ordering::SeqCst) || (until_idle && idle_worker.is_idle().unwrap_or(false))
    };
    // Fail-stop: a storage error in the loop (a claim, reclaim or sweep) stops claiming, lets the
    // runs in flight finish, and then ends the process with exit 4 rather than retrying blind.
    // Notifications (issue 32 item 1): one process per tenant at a time delivers them.
    let notifier = super::notify::start(
        &app,
        notify_settings,
        &args.notify,
        worker.settings().worker_id.clone(),
    );
    let ran = worker
        .run_with_hints(&TokioSpawner, &control, &stop, &*app.dispatcher)
        .await;
    if let Some(notifier) = notifier {
        notifier.stop().await;
    }
    if until_idle {
        print_summary(&app.env, &worker.settings().worker_id, &worker.tally());
    }
    match ran {
        Ok(()) => Exit::Ok,
        Err(e) => service_error(&e.into()),
    }
}

/// `--until-idle`'s one JSON line on stdout: how this worker's executions ended, and how many
/// calls of the runs it executed are UNCERTAIN and wait for a human (`invocations uncertain`).
/// A store that cannot be read for the count reports it as null.
fn print_summary<S: airlock_core::store::Store>(
    env: &airlock_core::env::Env<S>,
    worker_id: &str,
    tally: &ExecutionTally,
) {
    let uncertain = env
        .read(|tx| {
            let mut count = 0usize;
            for run in &tally.runs {
                count += tx
                    .invocations_of_run_in(*run, &[InvocationStatus::Uncertain])?
                    .len();
            }
            Ok(count)
        })
        .ok();
    line(serde_json::json!({
        "worker_id": worker_id,
        "claims": tally.executions,
        "runs": tally.runs.len(),
        "completed": tally.completed,
        "failed": tally.failed,
        "cancelled": tally.cancelled,
        "parked_for_approval": tally.parked,
        "abandoned": tally.abandoned,
        "calls_uncertain": uncertain,
    }));
}

/// SIGINT or SIGTERM: stop claiming; in-flight runs end or park before the process exits.
///
/// Both handlers are installed here, before the worker claims anything, not when the listening
/// task first runs: until a handler is installed a signal keeps its default action and kills the
/// process, so a SIGINT that arrived while the task still waited for a thread would abandon the
/// run it had just claimed.
fn spawn_signal_listener(stopping: Arc<AtomicBool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).ok();
    let mut terminate = signal(SignalKind::terminate()).ok();
    tokio::spawn(async move {
        let interrupted = async {
            match interrupt.as_mut() {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let terminated = async {
            match terminate.as_mut() {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = interrupted => {}
            () = terminated => {}
        }
        stopping.store(true, Ordering::SeqCst);
    });
}
