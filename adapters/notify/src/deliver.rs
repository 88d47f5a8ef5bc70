//! The delivery loop: core's [`Notifier`] decides what is due and records how each attempt
//! ended; this module reads the signing secret, renders, signs and posts.
//!
//! Each round (every [`DeliverySettings::poll`]) it takes or renews the lease of every tenant
//! with targets, and follows every target of the tenants it holds at once, each sending its due
//! events in order until it is caught up, waits out a back-off, or [`MAX_PER_ROUND`] were sent:
//! a slow or failing receiver holds back its own target only. Before every attempt the lease is
//! made to have at least half its length left, so an attempt (at most
//! [`DeliverySettings::timeout`]) never outlives it; one that ends after its lease was lost
//! anyway records nothing (`Fenced`), and whoever holds the lease then sends the event again
//! (at least once).
//!
//! A request carries:
//! - `Airlock-Signature: t=…,v1=…` ([`crate::signature`]);
//! - `Idempotency-Key`: the event's id in the log, the same on every attempt and from every
//!   process, so a receiver drops a repeat;
//! - `Airlock-Event`: the event type; `Airlock-Delivery-Attempt`: the attempt's number.
//!
//! An ntfy target's URL is the server and topic (`https://ntfy.example/approvals`): the body
//! goes to the server's root with the topic inside (ntfy's JSON publishing form).
//!
//! Redirects are not followed (a receiver's 3xx is a refusal): a redirect would carry a signed
//! body somewhere the operator did not name.

use std::collections::BTreeSet;
use std::time::Duration;

use tracing::Instrument;

use airlock_core::notify::{Due, Notifier, NotifyFormat, NotifyTarget, SecretSource, Settle};
use airlock_core::store::{Store, TxError};

use crate::backoff::{Answer, Backoff, Outcome};
use crate::format::render;
use crate::notice::Notice;
use crate::signature::{HEADER, sign};

/// At most this many events per target per round: one busy target does not starve the others.
pub const MAX_PER_ROUND: usize = 50;

/// How long the last round at shutdown may take.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(15);

/// How following a target ended.
enum Followed {
    Done,
    /// This notifier no longer holds the tenant's lease.
    LeaseLost(String),
}

/// The largest secret file read (bytes).
const MAX_SECRET_FILE_BYTES: u64 = 4096;

/// How the loop runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliverySettings {
    /// How often the store is asked for new events while caught up.
    pub poll: Duration,
    /// How long one request may take before it counts as no answer.
    pub timeout: Duration,
    pub backoff: Backoff,
    /// The console's public base URL, for the links in notifications (none: no link).
    pub console_url: Option<String>,
}

impl Default for DeliverySettings {
    fn default() -> Self {
        DeliverySettings {
            poll: Duration::from_secs(1),
            timeout: Duration::from_secs(10),
            backoff: Backoff::default(),
            console_url: None,
        }
    }
}

/// Why the loop could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the notifier's HTTP client: {0}")]
pub struct ClientError(String);

/// One process's delivery loop.
pub struct Deliverer<S: Store> {
    notifier: Notifier<S>,
    http: reqwest::Client,
    settings: DeliverySettings,
}

/// What reading a target's secret found.
fn read_secret(source: &SecretSource) -> Result<Vec<u8>, String> {
    let text = match source {
        SecretSource::Env(name) => std::env::var(name)
            .map_err(|_| format!("the environment variable {name} is not set"))?,
        SecretSource::File(path) => {
            use std::io::Read;
            // Only a regular file: a FIFO or a terminal would block the reading thread.
            let is_file = std::fs::metadata(path)
                .map_err(|e| format!("cannot read {path}: {e}"))?
                .is_file();
            if !is_file {
                return Err(format!("{path} is not a regular file"));
            }
            let file = std::fs::File::open(path).map_err(|e| format!("cannot open {path}: {e}"))?;
            let mut text = String::new();
            file.take(MAX_SECRET_FILE_BYTES + 1)
                .read_to_string(&mut text)
                .map_err(|e| format!("cannot read {path}: {e}"))?;
            if text.len() as u64 > MAX_SECRET_FILE_BYTES {
                return Err(format!(
                    "{path} is over {MAX_SECRET_FILE_BYTES} bytes: not a secret"
                ));
            }
            text
        }
    };
    let secret = text.trim();
    if secret.is_empty() {
        return Err(format!("the secret of {} is empty", source.to_text()));
    }
    Ok(secret.as_bytes().to_vec())
}

/// Where an ntfy target's body goes, and its topic: the URL's origin (the query stays: ntfy
/// takes an access token as `?auth=…`), and its topic as core reads it (`ntfy_topic`, also
/// checked when the target was added).
pub fn ntfy_endpoint(url: &reqwest::Url) -> Result<(reqwest::Url, String), String> {
    let topic = airlock_core::notify::target::ntfy_topic(url.as_str())
        .ok_or_else(|| "an ntfy URL must end in its topic (https://ntfy.example/topic)".to_owned())?
        .to_owned();
    let mut root = url.clone();
    root.set_path("/");
    Ok((root, topic))
}

/// Seconds since the Unix epoch, for the signature's `t`.
fn unix_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl<S: Store> Deliverer<S> {
    pub fn new(notifier: Notifier<S>, settings: DeliverySettings) -> Result<Self, ClientError> {
        // rustls' process-wide provider is ring (the workspace's); if another part of the
        // process installed it first, that one stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(settings.timeout)
            .build()
            .map_err(|e| ClientError(e.to_string()))?;
        Ok(Deliverer {
            notifier,
            http,
            settings,
        })
    }

    /// Delivers until `stop()` is true (checked between attempts and every poll), then sends
    /// what is due at that moment in one last round (bounded by [`DRAIN_LIMIT`]: a `worker
    /// --until-idle` tells of the approval its run just asked for before it exits) and gives
    /// up the leases it holds so another process takes over at once. A store error ends the
    /// round (logged), not the loop: notifications are not worth stopping a server for.
    pub async fn run(&self, stop: impl Fn() -> bool) {
        let mut held = BTreeSet::new();
        while !stop() {
            if let Err(error) = self.round(&mut held, &stop).await {
                tracing::warn!(%error, "notifications: a round ended on a store error");
            }
            let mut waited = Duration::ZERO;
            let step = Duration::from_millis(100).min(self.settings.poll);
            while waited < self.settings.poll && !stop() {
                tokio::time::sleep(step).await;
                waited += step;
            }
        }
        match tokio::time::timeout(DRAIN_LIMIT, self.round(&mut held, &|| false)).await {
            Ok(Err(error)) => tracing::warn!(%error, "notifications: the last round failed"),
            Err(_) => tracing::warn!("notifications: the last round was cut short"),
            Ok(Ok(())) => {}
        }
        for tenant in held {
            if let Err(error) = self.notifier.release(&tenant) {
                tracing::warn!(%error, %tenant, "notifications: cannot release the lease");
            }
        }
    }

    /// One pass: takes or renews the lease of every tenant with targets, then follows every
    /// target of the tenants it holds **at once** (each target's own events in order), so a
    /// slow or failing receiver holds back only its own target.
    pub async fn round(
        &self,
        held: &mut BTreeSet<String>,
        stop: &impl Fn() -> bool,
    ) -> Result<(), TxError> {
        let mut targets = Vec::new();
        for (tenant, of_tenant) in self.notifier.targets_by_tenant()? {
            if self.notifier.hold(&tenant)? {
                held.insert(tenant);
                targets.extend(of_tenant);
            } else {
                held.remove(&tenant);
            }
        }
        let ends = futures_util::future::join_all(
            targets.into_iter().map(|target| self.follow(target, stop)),
        )
        .await;
        for end in ends {
            if let Followed::LeaseLost(tenant) = end? {
                held.remove(&tenant);
            }
        }
        Ok(())
    }

    /// Sends `target`'s due events in order, at most [`MAX_PER_ROUND`], until it is caught up,
    /// backs off, or the lease is lost.
    async fn follow(
        &self,
        mut target: NotifyTarget,
        stop: &impl Fn() -> bool,
    ) -> Result<Followed, TxError> {
        let lost = |target: &NotifyTarget| Ok(Followed::LeaseLost(target.tenant_id.clone()));
        for _ in 0..MAX_PER_ROUND {
            if stop() {
                break;
            }
            let due = match self.notifier.due(&target) {
                Ok(Some(due)) => due,
                Ok(None) => break,
                // Stepping over events found the lease lost, or the cursor moved.
                Err(TxError::Fenced | TxError::Conflict(_)) => return lost(&target),
                Err(error) => return Err(error),
            };
            if !self.notifier.hold(&target.tenant_id)? {
                return lost(&target);
            }
            let settle = self.attempt(&due).await;
            match self.notifier.settle(&due, &settle) {
                Ok(next) => target = next,
                // Another notifier took over or moved the cursor, or the target was removed.
                Err(TxError::Fenced | TxError::Conflict(_)) => return lost(&target),
                Err(error) => return Err(error),
            }
            if matches!(settle, Settle::RetryAt(_)) {
                break;
            }
        }
        Ok(Followed::Done)
    }

    /// One attempt at `due`, and how it ended.
    async fn attempt(&self, due: &Due) -> Settle {
        let span = tracing::info_span!(
            "notify",
            target_id = %due.target.id,
            event_id = due.event.id,
            attempt = due.attempt
        );
        self.attempt_in_span(due).instrument(span).await
    }

    async fn attempt_in_span(&self, due: &Due) -> Settle {
        let answer = match self.send(due).await {
            Ok(answer) => answer,
            Err(Prepared::Failed(why)) => {
                tracing::warn!(%why, "notification not sent");
                return self.retry_or_give_up(due, &why);
            }
            Err(Prepared::Never(why)) => {
                tracing::warn!(%why, "notification given up");
                return Settle::GiveUp { why };
            }
        };
        match answer.outcome() {
            Outcome::Delivered => {
                tracing::info!(?answer, "notification delivered");
                Settle::Delivered
            }
            Outcome::Refused => {
                tracing::warn!(?answer, "notification refused by the receiver");
                Settle::GiveUp {
                    why: format!("refused by the receiver: {}", describe(answer)),
                }
            }
            Outcome::Retry => {
                tracing::warn!(?answer, "notification failed");
                self.retry_or_give_up(due, &describe(answer))
            }
        }
    }

    fn retry_or_give_up(&self, due: &Due, why: &str) -> Settle {
        let key = format!("{}:{}", due.target.id, due.event.id);
        match self.settings.backoff.delay_ms(&key, due.attempt) {
            Some(ms) => {
                Settle::RetryAt(self.notifier.now().saturating_add_micros(
                    i64::try_from(ms.saturating_mul(1000)).unwrap_or(i64::MAX),
                ))
            }
            None => Settle::GiveUp {
                why: format!("{} attempts failed; the last: {why}", due.attempt),
            },
        }
    }

    /// Builds and posts the request.
    async fn send(&self, due: &Due) -> Result<Answer, Prepared> {
        let target = &due.target;
        let url = reqwest::Url::parse(&target.url)
            .map_err(|e| Prepared::Never(format!("the target URL does not parse: {e}")))?;
        let (url, topic) = match target.format {
            NotifyFormat::Ntfy => ntfy_endpoint(&url).map_err(Prepared::Never)?,
            NotifyFormat::Json | NotifyFormat::Slack => (url, String::new()),
        };
        // Checked again at each delivery: a secret that is not the tenant's is never read.
        target
            .secret
            .check_for(&target.tenant_id)
            .map_err(Prepared::Never)?;
        let secret = read_secret(&target.secret).map_err(Prepared::Failed)?;
        let notice = Notice::of_due(due, self.settings.console_url.as_deref());
        let rendered = render(target.format, &notice, &topic);
        let signature = sign(&secret, unix_seconds(), &rendered.body);
        let sent = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, rendered.content_type)
            .header(HEADER, signature)
            .header("Idempotency-Key", due.event.id.to_string())
            .header("Airlock-Event", due.kind.as_str())
            .header("Airlock-Delivery-Attempt", due.attempt.to_string())
            .body(rendered.body)
            .send()
            .await;
        Ok(match sent {
            Ok(response) => Answer::Status(response.status().as_u16()),
            Err(error) => {
                // Without the URL: its path may be the target's credential.
                tracing::debug!(error = %error.without_url(), "no answer");
                Answer::NoAnswer
            }
        })
    }
}

/// Why a request was not sent.
enum Prepared {
    /// Something that may be fixed (a secret not yet in place): retried like a failed request.
    Failed(String),
    /// Something no retry fixes (a URL that does not parse): given up at once.
    Never(String),
}

fn describe(answer: Answer) -> String {
    match answer {
        Answer::Status(status) => format!("HTTP {status}"),
        Answer::NoAnswer => "no answer (connection failed or timed out)".to_owned(),
    }
}
