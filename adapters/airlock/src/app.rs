//! One process's assembly: policy files, the SQLite store, builtin tools, workspaces, the fault
//! hook and the durable dispatcher, wired into core's `Env`. Opening a store records the loaded
//! policy (PROFILE, SPEC §7.5).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_core::control::{ControlService, ServiceError};
use airlock_core::env::Env;
use airlock_core::planner::script::ScriptedPlannerFactory;
use airlock_core::run::cancel::TokenRegistry;
use airlock_core::worker::{Worker, WorkerSettings};

use airlock_host::crash::AbortAt;
use airlock_host::tools::builtin_registry;
use airlock_host::workspace::LocalWorkspaces;
use airlock_host::{BlockingStore, DurableDispatcher, SystemClock, V4Ids};
use airlock_sqlite::SqliteStore;

use crate::policy_source::{PolicySourceError, load_ruleset};

/// The store every command uses.
pub type HostStore = BlockingStore<SqliteStore>;

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

/// The store's file inside a data directory (Appendix A).
pub const STORE_FILE: &str = "airlock.sqlite3";

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
}

impl App {
    /// [`App::open`] for commands that only act on what is already stored (listing, showing,
    /// resolving, cancelling, settling): a data dir without a store is a storage error, not a
    /// new empty store, so a mistyped `--data-dir` cannot answer "nothing pending" from a
    /// store it just created.
    pub async fn open_existing(
        data_dir: &Path,
        policy_dir: Option<&Path>,
    ) -> Result<App, AppError> {
        App::open_with(data_dir, policy_dir, MissingStore::Refuse).await
    }

    /// Loads the policy, opens `{data_dir}/airlock.sqlite3` (creating the directory and the
    /// store if needed) and records the loaded policy.
    pub async fn open(data_dir: &Path, policy_dir: Option<&Path>) -> Result<App, AppError> {
        App::open_with(data_dir, policy_dir, MissingStore::Create).await
    }

    async fn open_with(
        data_dir: &Path,
        policy_dir: Option<&Path>,
        missing: MissingStore,
    ) -> Result<App, AppError> {
        let ruleset = load_ruleset(policy_dir)?;
        // Configuration is checked before anything is created, so a typo creates no store.
        let faults = AbortAt::from_env().map_err(|e| AppError::Config(e.to_string()))?;
        let store_path = data_dir.join(STORE_FILE);
        if missing == MissingStore::Refuse && !store_path.exists() {
            return Err(AppError::Storage(format!(
                "no store at '{}': nothing was submitted to this data dir (check --data-dir)",
                store_path.display()
            )));
        }
        std::fs::create_dir_all(data_dir).map_err(|e| {
            AppError::Config(format!("cannot create '{}': {e}", data_dir.display()))
        })?;
        let store = SqliteStore::open(&store_path).map_err(|e| AppError::Storage(e.to_string()))?;
        let tools = builtin_registry(data_dir).map_err(|e| AppError::Config(e.to_string()))?;
        let dispatcher = Arc::new(DurableDispatcher::default());
        let env = Env {
            store: Arc::new(BlockingStore(store)),
            clock: Arc::new(SystemClock),
            ids: Arc::new(V4Ids),
            ruleset: Arc::new(ruleset),
            tools: Arc::new(tools),
            workspaces: Some(Arc::new(LocalWorkspaces::new(data_dir))),
            planners: Arc::new(ScriptedPlannerFactory),
            faults: Arc::new(faults),
        };
        let app = App {
            env,
            dispatcher,
            data_dir: data_dir.to_owned(),
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

    /// A worker over this process's environment.
    pub fn worker(&self, settings: WorkerSettings) -> Arc<Worker<HostStore>> {
        Worker::new(self.env.clone(), settings)
    }
}
