//! One process's assembly: policy files, the store (SQLite or PostgreSQL, `--store`), builtin
//! tools, workspaces, the fault hook and the durable dispatcher, wired into core's `Env`. Opening
//! a store records the loaded policy (PROFILE, SPEC §7.5).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_core::control::{ControlService, ServiceError};
use airlock_core::env::Env;
use airlock_core::live_policy::LivePolicy;
use airlock_core::planner::script::ScriptedPlannerFactory;
use airlock_core::run::cancel::TokenRegistry;
use airlock_core::worker::{Worker, WorkerSettings};

use airlock_host::crash::AbortAt;
use airlock_host::tools::builtin_registry;
use airlock_host::workspace::LocalWorkspaces;
use airlock_host::{BlockingStore, DurableDispatcher, SystemClock, V4Ids};
use airlock_pg::{Listener, PgStore, SchemaAction};
use airlock_sqlite::SqliteStore;

use crate::policy_source::{PolicySourceError, load_ruleset};
use crate::store::{AnyStore, StoreUrl};

/// The store every command uses.
pub type HostStore = BlockingStore<AnyStore>;

/// Why a process could not start; each maps to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Policy(#[from] PolicySourceError),
    #[error("storage: {0}")]
    Storage(String),
    #[error("configuration: {0}")]
    Config(String),
}

/// The `loaded_by` of this binary's policy records.
pub fn loaded_by() -> String {
    format!("airlock/{}", env!("CARGO_PKG_VERSION"))
}

/// What opening a data directory does when it holds no store yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MissingStore {
    Create,
    Refuse,
}

/// An opened data directory.
pub struct App {
    pub env: Env<HostStore>,
    pub dispatcher: Arc<DurableDispatcher>,
    pub data_dir: PathBuf,
    /// The store as messages show it (a path, or a URL without its password).
    pub store_description: String,
}

impl App {
    /// [`App::open`] for commands that only act on what is already stored (listing, showing,
    /// resolving, cancelling, settling): a data dir without a store is a storage error, not a
    /// new empty store, so a mistyped `--data-dir` cannot answer "nothing pending" from a
    /// store it just created.
    /// On PostgreSQL: a database without this build's schema is refused the same way, and
    /// nothing is migrated (SPEC §18).
    pub async fn open_existing(
        data_dir: &Path,
        store: Option<&str>,
        policy_dir: Option<&Path>,
    ) -> Result<App, AppError> {
        App::open_with(data_dir, store, policy_dir, MissingStore::Refuse).await
    }

    /// Loads the policy, opens the store (`store`: the `--store` value; by default
    /// `{data_dir}/airlock.sqlite3`), creating the directory and the store or migrating its
    /// schema if needed, and records the loaded policy.
    pub async fn open(
        data_dir: &Path,
        store: Option<&str>,
        policy_dir: Option<&Path>,
    ) -> Result<App, AppError> {
        App::open_with(data_dir, store, policy_dir, MissingStore::Create).await
    }

    async fn open_with(
        data_dir: &Path,
        store: Option<&str>,
        policy_dir: Option<&Path>,
        missing: MissingStore,
    ) -> Result<App, AppError> {
        let ruleset = load_ruleset(policy_dir)?;
        // Configuration is checked before anything is created, so a typo creates no store.
        let faults = AbortAt::from_env().map_err(|e| AppError::Config(e.to_string()))?;
        let location = StoreUrl::parse(store, data_dir).map_err(AppError::Config)?;
        if missing == MissingStore::Refuse {
            refuse_missing(&location)?;
        }
        std::fs::create_dir_all(data_dir).map_err(|e| {
            AppError::Config(format!("cannot create '{}': {e}", data_dir.display()))
        })?;
        let store = open_store(&location, missing)?;
        let tools = builtin_registry(data_dir).map_err(|e| AppError::Config(e.to_string()))?;
        let dispatcher = Arc::new(DurableDispatcher::default());
        let env = Env {
            store: Arc::new(BlockingStore(store)),
            clock: Arc::new(SystemClock),
            ids: Arc::new(V4Ids),
            policy: LivePolicy::fixed(ruleset),
            tools: Arc::new(tools),
            workspaces: Some(Arc::new(LocalWorkspaces::new(data_dir))),
            planners: Arc::new(ScriptedPlannerFactory),
            faults: Arc::new(faults),
        };
        let app = App {
            env,
            dispatcher,
            data_dir: data_dir.to_owned(),
            store_description: location.describe(),
        };
        app.control(None)
            .record_policy_profile(&loaded_by())
            .await
            .map_err(|e| match e {
                ServiceError::Storage(message) => AppError::Storage(message),
                other => AppError::Storage(other.to_string()),
            })?;
        Ok(app)
    }

    /// The application service, optionally able to cancel this process's running tokens.
    pub fn control(&self, tokens: Option<TokenRegistry>) -> ControlService<HostStore> {
        ControlService::new(self.env.clone(), self.dispatcher.clone(), tokens)
    }

    /// Wakes this process's durable dispatcher whenever any process's commit queues a run
    /// (PostgreSQL's LISTEN, SPEC §18); `None` on SQLite, whose workers share one machine and
    /// poll. A hint only: workers poll as well. Listens while the returned value lives.
    pub fn wake_on_queued_runs(&self) -> Option<Listener> {
        match &self.env.store.0 {
            AnyStore::Postgres(store) => {
                let dispatcher = Arc::clone(&self.dispatcher);
                Some(store.listen(move |run| {
                    airlock_core::ports::Dispatcher::dispatch(&*dispatcher, run)
                }))
            }
            AnyStore::Sqlite(_) => None,
        }
    }

    /// A worker over this process's environment.
    pub fn worker(&self, settings: WorkerSettings) -> Arc<Worker<HostStore>> {
        Worker::new(self.env.clone(), settings)
    }
}

/// The store of a data directory or `--store`, opened only to read what it holds (`policy
/// replay`, `policy shadow report`): never created or migrated, and no policy is loaded or
/// recorded, so reading a history under a candidate policy leaves no trace of that policy.
pub fn open_store_for_reading(data_dir: &Path, store: Option<&str>) -> Result<HostStore, AppError> {
    let location = StoreUrl::parse(store, data_dir).map_err(AppError::Config)?;
    refuse_missing(&location)?;
    open_store(&location, MissingStore::Refuse).map(BlockingStore)
}

/// A SQLite data dir without a store is a storage error, not a new empty store, so a mistyped
/// `--data-dir` cannot answer "nothing pending" from a store it just created.
fn refuse_missing(location: &StoreUrl) -> Result<(), AppError> {
    match location {
        StoreUrl::Sqlite(store_path) if !store_path.exists() => Err(AppError::Storage(format!(
            "no store at '{}': nothing was submitted to this data dir (check --data-dir)",
            store_path.display()
        ))),
        _ => Ok(()),
    }
}

/// Opens the chosen store. PostgreSQL migrates only for the commands that create (SPEC §18);
/// its connection and schema checks block, so they run off the async executor's threads.
fn open_store(location: &StoreUrl, missing: MissingStore) -> Result<AnyStore, AppError> {
    match location {
        StoreUrl::Sqlite(path) => SqliteStore::open(path)
            .map(AnyStore::Sqlite)
            .map_err(|e| AppError::Storage(e.to_string())),
        StoreUrl::Postgres(url) => {
            let action = match missing {
                MissingStore::Create => SchemaAction::Migrate,
                MissingStore::Refuse => SchemaAction::RequireCurrent,
            };
            airlock_host::blocking(|| PgStore::open(url, action))
                .map(AnyStore::Postgres)
                .map_err(|e| AppError::Storage(e.to_string()))
        }
    }
}
