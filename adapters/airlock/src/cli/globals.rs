//! The options every command accepts and the checks several commands share: below every
//! command module.

use std::path::PathBuf;
use std::sync::Arc;

use airlock_core::principal::{Principal, check_identity};
use airlock_core::scope::{Scope, ScopeSet, platform_scopes};
use airlock_core::worker::{MAX_LEASE_MS, MIN_LEASE_MS};

use super::output;
use crate::app::App;
use crate::exit::Exit;
use crate::reload::{PolicySources, reload_on_sighup};
use airlock_core::live_policy::Rulesets;

/// Options every command accepts.
#[derive(Debug, clap::Args)]
pub struct Globals {
    /// Directory holding airlock.sqlite3, workspaces/ and outbox.jsonl [default: ./.airlock; the
    /// demo: a new temporary directory].
    #[arg(long = "data-dir", global = true)]
    pub data_dir_arg: Option<PathBuf>,
    /// The store: sqlite:PATH, or a postgres:// (postgresql://) URL [default: sqlite in the data
    /// dir]. On PostgreSQL the data dir still holds workspaces/ and outbox.jsonl.
    #[arg(long, global = true, env = "AIRLOCK_STORE", hide_env_values = true)]
    pub store: Option<String>,
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
    /// Export spans and metrics over OTLP/HTTP to this collector (e.g. http://localhost:4318);
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` does the same. Off unless one of them is set.
    #[arg(long, global = true, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

impl Globals {
    /// `--data-dir`, or `./.airlock`.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir_arg
            .clone()
            .unwrap_or_else(|| PathBuf::from("./.airlock"))
    }

    /// [`App::open`] on `--data-dir`, `--store` and `--policy-dir` (creating or migrating the
    /// store), or the exit its error maps to.
    pub async fn open_app(&self) -> Result<App, Exit> {
        App::open(
            &self.data_dir(),
            self.store.as_deref(),
            self.policy_dir.as_deref(),
        )
        .await
        .map_err(|e| output::app_error(&e))
    }

    /// [`App::open_existing`] on `--data-dir`, `--store` and `--policy-dir` (a missing store is
    /// an error, never created), or the exit its error maps to.
    pub async fn open_existing_app(&self) -> Result<App, Exit> {
        App::open_existing(
            &self.data_dir(),
            self.store.as_deref(),
            self.policy_dir.as_deref(),
        )
        .await
        .map_err(|e| output::app_error(&e))
    }

    /// The caller, or an `invalid_argument` exit for a malformed tenant, principal or scope.
    /// Tenant and principal follow the script rule of SPEC §15 (1..=128 characters, no control
    /// characters); scopes may be written with spaces after the commas.
    pub fn principal(&self) -> Result<Principal, Exit> {
        for (flag, value) in [("--tenant", &self.tenant), ("--principal", &self.principal)] {
            check_identity(value).map_err(|e| output::invalid_argument(&format!("{flag} {e}")))?;
        }
        let scopes: ScopeSet = match &self.scopes {
            None => platform_scopes(),
            Some(list) => {
                let mut set = ScopeSet::new();
                for scope in list.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
                    match Scope::parse(scope) {
                        Ok(scope) => {
                            set.insert(scope);
                        }
                        Err(e) => return Err(output::invalid_argument(&format!("--scopes: {e}"))),
                    }
                }
                set
            }
        };
        Ok(Principal {
            tenant_id: self.tenant.clone(),
            principal_id: self.principal.clone(),
            scopes,
        })
    }
}

/// `--lease-ms` of a process that claims runs (`worker`, `mcp serve`): bounded below by core's
/// heartbeat arithmetic and above, since a lease is how long a crashed process's run waits
/// before another may take it and a huge one would never expire (core's `MAX_LEASE_MS`).
pub fn check_lease_ms(lease_ms: u64) -> Result<(), Exit> {
    if (MIN_LEASE_MS..=MAX_LEASE_MS).contains(&lease_ms) {
        return Ok(());
    }
    Err(output::invalid_argument(&format!(
        "--lease-ms must be {MIN_LEASE_MS}..={MAX_LEASE_MS} (at most one hour), got {lease_ms}"
    )))
}

/// An optional process id flag (`--worker-id`, `--gateway-id`): the script rule of SPEC §15.
pub fn check_id_flag(flag: &str, id: Option<&str>) -> Result<(), Exit> {
    match id.map(check_identity) {
        Some(Err(e)) => Err(output::invalid_argument(&format!("{flag} {e}"))),
        _ => Ok(()),
    }
}

/// Who answers `SIGHUP` in a process that decides calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hangup {
    /// [`crate::reload::reload_on_sighup`]: the policy files.
    ReloadsPolicy,
    /// The command installs its own handler (and reloads the policy in it).
    CallerHandles,
}

/// `--shadow-policy-dir` of the commands that decide calls (`worker`, `serve`, `mcp serve`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ShadowArgs {
    /// Policy shadow mode: a candidate policy directory (`default.toml`, `hardline.toml`)
    /// decided beside the live policy on every call. Only the live decision acts; each call the
    /// candidate decides differently is recorded as a `policy.shadow.diff` event, read back by
    /// `airlock policy shadow report`.
    #[arg(long, value_name = "DIR")]
    pub shadow_policy_dir: Option<PathBuf>,
}

impl ShadowArgs {
    /// [`Globals::open_app`] for a process that decides calls, with the shadow candidate in
    /// place, reloading its rules on `SIGHUP` ([`crate::reload`]) unless the caller handles
    /// `SIGHUP` itself (`mcp serve`, which reloads its gateway file after the rules). The
    /// candidate is loaded first, so a broken candidate stops the process before it opens (or
    /// creates) a store. Returns the sources a reload reads again.
    pub async fn open_app(
        &self,
        globals: &Globals,
        hangup: Hangup,
    ) -> Result<(App, PolicySources), Exit> {
        let sources =
            PolicySources::new(globals.policy_dir.clone(), self.shadow_policy_dir.clone());
        let shadow = match &sources.shadow_dir {
            Some(dir) => Some(Arc::new(
                crate::policy_source::load_ruleset(Some(dir))
                    .map_err(|e| output::policy_error(&e))?,
            )),
            None => None,
        };
        let app = globals.open_app().await?;
        let live = app.env.ruleset();
        if let Some(candidate) = &shadow {
            tracing::info!(
                live = %live.version,
                candidate = %candidate.version,
                "policy shadow mode: the candidate is decided beside the live policy"
            );
        }
        app.env.policy.replace(Rulesets { live, shadow });
        if hangup == Hangup::ReloadsPolicy {
            reload_on_sighup(sources.clone(), app.control(None));
        }
        Ok((app, sources))
    }
}
