//! `airlock notify add|list|remove` (issue 32 item 1): where the tenant's approvers are told of
//! approval requests, expiries and UNCERTAIN calls; and the notifier `serve` and `worker` run.
//!
//! Administration is local, as for tokens: whoever can open the store manages the targets of
//! `--tenant`, recorded as `--principal`. The HTTP API offers the same under the scope
//! `notify.admin`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use airlock_core::ids::NotifyTargetId;
use airlock_core::notify::{Notifier, SecretSource};
use airlock_http::notify::{NewTargetBody, TargetList, TargetRecord, target_spec};
use airlock_notify::backoff::Backoff;
use airlock_notify::deliver::{Deliverer, DeliverySettings};
use clap::Subcommand;

use super::globals::Globals;
use super::output::{invalid_argument, line, record, service_error};
use crate::app::App;
use crate::exit::Exit;

#[derive(Debug, Subcommand)]
pub enum NotifyCommand {
    /// Add a target: POSTs signed notifications of the tenant's events from now on.
    Add {
        /// Where to POST: `https://…` (a Slack incoming webhook, an ntfy server and topic, or
        /// any receiver of the generic JSON).
        #[arg(long)]
        url: String,
        /// `json` (generic), `slack` (incoming-webhook blocks) or `ntfy`.
        #[arg(long, default_value = "json")]
        format: String,
        /// Where the HMAC signing secret is: `env:AIRLOCK_NOTIFY_…` (a variable of every
        /// process that notifies) or `file:/absolute/path`. Only this reference is stored.
        #[arg(long)]
        secret: String,
        /// `approval.requested`, `approval.expired` or `tool.call.uncertain`; repeat for
        /// several. Default: all three.
        #[arg(long = "event")]
        events: Vec<String>,
        /// A note for `notify list`.
        #[arg(long)]
        label: Option<String>,
    },
    /// The tenant's targets, oldest first (URLs as scheme and host only).
    List,
    /// Remove a target: nothing more is sent to it.
    Remove { id: NotifyTargetId },
    /// The names the tenant's signing secrets must have: the environment variable
    /// `AIRLOCK_NOTIFY_<tag>_NAME` and the directory `<tag>` a secret file lies in.
    SecretName {
        /// The variable's last part (A–Z, 0–9, _).
        #[arg(default_value = "WEBHOOK")]
        name: String,
    },
}

pub async fn run(globals: &Globals, command: NotifyCommand) -> Exit {
    let principal = match globals.principal() {
        Ok(p) => p,
        Err(exit) => return exit,
    };
    match command {
        NotifyCommand::SecretName { name } => {
            let tag = airlock_core::notify::target::tenant_tag(&principal.tenant_id);
            let variable = format!(
                "{}{tag}_{name}",
                airlock_core::notify::target::SECRET_ENV_PREFIX
            );
            // The rules a target's secret is held to, not a copy of them.
            let secret = format!("env:{variable}");
            if let Err(message) = SecretSource::parse(&secret)
                .and_then(|source| source.check_for(&principal.tenant_id))
            {
                return invalid_argument(&format!("NAME '{}': {message}", name.escape_debug()));
            }
            line(serde_json::json!({
                "tenant_id": principal.tenant_id,
                "tag": tag,
                "env": variable,
                "secret": secret,
                "file_directory": tag,
            }));
            Exit::Ok
        }
        NotifyCommand::Add {
            url,
            format,
            secret,
            events,
            label,
        } => {
            let body = NewTargetBody {
                url,
                format,
                secret,
                events: (!events.is_empty()).then_some(events),
                label,
            };
            let spec = match target_spec(&body) {
                Ok(spec) => spec,
                Err(e) => return service_error(&e),
            };
            let app = match globals.open_app().await {
                Ok(app) => app,
                Err(exit) => return exit,
            };
            match app.control(None).add_notify_target(
                &principal.tenant_id,
                &principal.principal_id,
                &spec,
            ) {
                Ok(target) => record(&TargetRecord::from(&target)),
                Err(e) => service_error(&e),
            }
        }
        NotifyCommand::List => {
            let app = match globals.open_existing_app().await {
                Ok(app) => app,
                Err(exit) => return exit,
            };
            match app.control(None).list_notify_targets(&principal.tenant_id) {
                Ok(targets) => record(&TargetList {
                    items: targets.iter().map(TargetRecord::from).collect(),
                }),
                Err(e) => service_error(&e),
            }
        }
        NotifyCommand::Remove { id } => {
            let app = match globals.open_existing_app().await {
                Ok(app) => app,
                Err(exit) => return exit,
            };
            match app.control(None).remove_notify_target(
                &principal.tenant_id,
                &principal.principal_id,
                id,
            ) {
                Ok(target) => record(&TargetRecord::from(&target)),
                Err(e) => service_error(&e),
            }
        }
    }
}

/// The notifier's flags on `serve` and `worker`.
#[derive(Debug, Clone, clap::Args)]
pub struct NotifyArgs {
    /// Deliver no notifications from this process (another process on the store may).
    #[arg(long)]
    pub no_notify: bool,
    /// The console's public base URL, for the link in each notification
    /// (`https://airlock.example.com`). Without it, notifications carry no link.
    #[arg(long, env = "AIRLOCK_CONSOLE_URL")]
    pub console_url: Option<String>,
    /// Attempts per notification before it is given up, 1..=100.
    #[arg(long, default_value_t = 10)]
    pub notify_attempts: u32,
    /// The first retry's delay in milliseconds, 10..=600000; it doubles per attempt, up to 10
    /// minutes, with jitter.
    #[arg(long, default_value_t = 1000)]
    pub notify_backoff_ms: u64,
}

impl NotifyArgs {
    /// The delivery settings, or the flag that is out of range.
    pub fn settings(&self) -> Result<DeliverySettings, Exit> {
        if !(1..=100).contains(&self.notify_attempts) {
            return Err(invalid_argument("--notify-attempts must be 1..=100"));
        }
        if !(10..=600_000).contains(&self.notify_backoff_ms) {
            return Err(invalid_argument("--notify-backoff-ms must be 10..=600000"));
        }
        if let Some(url) = &self.console_url
            && airlock_core::notify::target::check_url(url).is_err()
        {
            return Err(invalid_argument(
                "--console-url must be an http:// or https:// URL",
            ));
        }
        Ok(DeliverySettings {
            backoff: Backoff {
                base_ms: self.notify_backoff_ms,
                cap_ms: 600_000,
                max_attempts: self.notify_attempts,
            },
            console_url: self.console_url.clone(),
            ..DeliverySettings::default()
        })
    }
}

/// A running notifier: [`Running::stop`] ends it after the attempt in flight and releases its
/// leases.
pub struct Running {
    stopping: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops the notifier: the attempt in flight ends, the last round runs, the leases are
    /// released; after [`STOP_LIMIT`] the task is abandoned (its leases then expire).
    pub async fn stop(self) {
        self.stopping.store(true, Ordering::SeqCst);
        let abort = self.task.abort_handle();
        if tokio::time::timeout(STOP_LIMIT, self.task).await.is_err() {
            tracing::warn!("notifications: the notifier did not stop in time");
            abort.abort();
        }
    }
}

/// How long stopping the notifier may take: an attempt (10 s) and the last round (15 s).
pub const STOP_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Starts this process's notifier as `holder` (its worker id), unless `--no-notify`.
pub fn start(
    app: &App,
    settings: DeliverySettings,
    args: &NotifyArgs,
    holder: String,
) -> Option<Running> {
    if args.no_notify {
        return None;
    }
    // Unique per process even when two workers are given one --worker-id: the lease tells
    // processes apart by this name.
    let holder = format!("{holder}/{}", uuid::Uuid::new_v4());
    let notifier = Notifier::new(app.env.clone(), holder, LEASE_SECONDS);
    let deliverer = match Deliverer::new(notifier, settings) {
        Ok(deliverer) => deliverer,
        Err(error) => {
            tracing::error!(%error, "notifications are off");
            return None;
        }
    };
    let stopping = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stopping);
    let task = tokio::spawn(async move {
        deliverer.run(|| flag.load(Ordering::SeqCst)).await;
    });
    Some(Running { stopping, task })
}

/// How long a notifier's lease of a tenant lasts without renewal: how long a dead process's
/// tenants wait before another process delivers for them.
pub const LEASE_SECONDS: i64 = 30;
