//! Reloading the policy files without a restart (issue 32 item 4): on `SIGHUP`, and on
//! `POST /v1/admin/reload` (scope `policy.admin`) for `airlock serve`.
//!
//! A reload reads the files again from where the process first read them (`--policy-dir`, or
//! the embedded shipped files; and `--shadow-policy-dir` in shadow mode) and then, in order:
//!
//! 1. if either does not load, nothing changes: the rules in force stay, and the error is
//!    logged (and answered, over HTTP);
//! 2. core's `ControlService::put_in_force` records the new live rules (`policy_profiles` and
//!    `policy.profile.loaded`, as at start) **before** they are put in force, so no call is
//!    ever decided by rules the store has no record of; if recording fails, nothing changes;
//! 3. the new rules replace the old in the process's shared `LivePolicy`, reaching the
//!    worker, the HTTP API and the MCP gateway at once. A call decided before and executed
//!    after is revalidated as SPEC §10.3 says for any change of `policy_version`.
//!
//! Reloading unchanged files is harmless: the record is idempotent per version.
//!
//! `mcp serve` answers `SIGHUP` itself (`cli::mcp`): this reload, then its gateway file
//! (`Gateway::reload`), then a re-listing of every upstream.

use std::path::PathBuf;
use std::sync::Arc;

use airlock_core::control::ControlService;
use airlock_core::live_policy::Rulesets;
use airlock_core::store::Store;

use crate::app::loaded_by;
use crate::policy_source::{PolicySourceError, load_ruleset};

/// Where a process reads its rules from. Clones share one lock, so reloads (a `SIGHUP` and an
/// HTTP request at once, say) run one after the other: a slow reload that read older files can
/// never put them back in force after a later one.
#[derive(Debug, Clone, Default)]
pub struct PolicySources {
    /// `--policy-dir`; `None`: the embedded shipped files.
    pub policy_dir: Option<PathBuf>,
    /// `--shadow-policy-dir`; `None`: no shadow mode.
    pub shadow_dir: Option<PathBuf>,
    one_at_a_time: Arc<tokio::sync::Mutex<()>>,
}

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("policy files: {0}")]
    Policy(PolicySourceError),
    #[error("shadow policy files: {0}")]
    Shadow(PolicySourceError),
    #[error("recording the new policy: {0}")]
    Record(String),
}

impl ReloadError {
    /// The error code answered over HTTP and printed in logs.
    pub fn code(&self) -> &'static str {
        match self {
            ReloadError::Policy(_) | ReloadError::Shadow(_) => "policy_load",
            ReloadError::Record(_) => "storage",
        }
    }
}

/// What a reload put in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    pub previous_version: String,
    pub policy_version: String,
    pub shadow_version: Option<String>,
}

impl PolicySources {
    pub fn new(policy_dir: Option<PathBuf>, shadow_dir: Option<PathBuf>) -> PolicySources {
        PolicySources {
            policy_dir,
            shadow_dir,
            one_at_a_time: Arc::default(),
        }
    }

    /// Reads both sources; the shadow candidate only in shadow mode.
    pub fn load(&self) -> Result<Rulesets, ReloadError> {
        let live = load_ruleset(self.policy_dir.as_deref()).map_err(ReloadError::Policy)?;
        let shadow = match &self.shadow_dir {
            Some(dir) => Some(Arc::new(
                load_ruleset(Some(dir)).map_err(ReloadError::Shadow)?,
            )),
            None => None,
        };
        Ok(Rulesets {
            live: Arc::new(live),
            shadow,
        })
    }

    /// Reads the files again and, if they load and the new rules are recorded, puts them in
    /// force (see the module docs). On error the rules in force are unchanged.
    pub async fn reload<S: Store>(
        &self,
        control: &ControlService<S>,
    ) -> Result<Reloaded, ReloadError> {
        // From reading the files to putting them in force, one reload at a time.
        let _one = self.one_at_a_time.lock().await;
        let next = self.load()?;
        let policy_version = next.live.version.as_str().to_owned();
        let shadow_version = next.shadow.as_ref().map(|s| s.version.as_str().to_owned());
        let previous = control
            .put_in_force(next, &loaded_by())
            .await
            .map_err(|e| ReloadError::Record(e.to_string()))?;
        Ok(Reloaded {
            previous_version: previous.live.version.as_str().to_owned(),
            policy_version,
            shadow_version,
        })
    }

    /// [`PolicySources::reload`], logged: the outcome at `info`, a failure at `error` with why
    /// (the rules in force stay).
    pub async fn reload_logged<S: Store>(
        &self,
        control: &ControlService<S>,
        trigger: &str,
    ) -> Result<Reloaded, ReloadError> {
        let outcome = self.reload(control).await;
        match &outcome {
            Ok(reloaded) => tracing::info!(
                trigger,
                previous = %reloaded.previous_version,
                policy_version = %reloaded.policy_version,
                shadow = reloaded.shadow_version.as_deref().unwrap_or("-"),
                "policy reloaded"
            ),
            Err(error) => tracing::error!(
                trigger,
                code = error.code(),
                %error,
                "policy reload failed; the rules in force stay"
            ),
        }
        outcome
    }
}

/// Reloads on every `SIGHUP` until the process ends (Unix only; elsewhere nothing listens).
/// The handler is in place when this returns (before any task runs), so a `SIGHUP` sent once
/// the process has opened its store never ends it.
pub fn reload_on_sighup<S: Store + 'static>(sources: PolicySources, control: ControlService<S>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = match signal(SignalKind::hangup()) {
            Ok(hangups) => hangups,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGHUP: the policy reloads only by restart");
                return;
            }
        };
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                let _ = sources.reload_logged(&control, "SIGHUP").await;
            }
        });
    }
    #[cfg(not(unix))]
    let _ = (sources, control);
}

/// `POST /v1/admin/reload` of `airlock serve`: the same reload as `SIGHUP`.
pub struct HttpReload<S: Store> {
    pub sources: PolicySources,
    pub control: ControlService<S>,
}

impl<S: Store + 'static> airlock_http::policy_reload::PolicyReload for HttpReload<S> {
    fn reload(
        &self,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Result<
                        airlock_http::policy_reload::ReloadedRecord,
                        airlock_http::policy_reload::ReloadFailure,
                    >,
                > + Send
                + '_,
        >,
    > {
        Box::pin(async move {
            self.sources
                .reload_logged(&self.control, "POST /v1/admin/reload")
                .await
                .map(|reloaded| airlock_http::policy_reload::ReloadedRecord {
                    policy_version: reloaded.policy_version,
                    previous_version: reloaded.previous_version,
                    shadow_version: reloaded.shadow_version,
                })
                // The caller hears what kind of failure, not the server's paths or store errors:
                // those are in the process's log.
                .map_err(|error| airlock_http::policy_reload::ReloadFailure {
                    code: error.code(),
                    message: match error {
                        ReloadError::Policy(_) => {
                            "the policy files did not load; the rules in force stay (see the server's log)"
                        }
                        ReloadError::Shadow(_) => {
                            "the shadow policy files did not load; the rules in force stay (see the server's log)"
                        }
                        ReloadError::Record(_) => {
                            "the new rules could not be recorded; the rules in force stay (see the server's log)"
                        }
                    }
                    .to_owned(),
                })
        })
    }
}
