//! The ports and data one host process plugs into core, shared by the worker, the executor, the
//! pipeline and the control service.

use std::sync::Arc;

use crate::live_policy::LivePolicy;
use crate::policy::Ruleset;
use crate::ports::{Clock, FaultHook, IdSource, PlannerFactory, WorkspaceFactory};
use crate::store::{Store, StoreTx, TxError};
use crate::tool::registry::ToolRegistry;
use crate::vocab::CrashPoint;

/// Everything core needs from its host. Cheap to clone.
pub struct Env<S: Store> {
    pub store: Arc<S>,
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn IdSource>,
    /// The policy in force and, in shadow mode, the candidate decided beside it: shared by every
    /// clone, replaced whole by a reload ([`LivePolicy`]). Only the live ruleset's decision
    /// acts; a call the candidate decides differently is recorded as a `policy.shadow.diff`
    /// process event in the call's own PROPOSE transaction.
    pub policy: Arc<LivePolicy>,
    pub tools: Arc<ToolRegistry>,
    /// Workspace tools fail with `tool.internal_error` when a host provides no workspaces.
    pub workspaces: Option<Arc<dyn WorkspaceFactory>>,
    pub planners: Arc<dyn PlannerFactory>,
    pub faults: Arc<dyn FaultHook>,
}

impl<S: Store> Clone for Env<S> {
    fn clone(&self) -> Self {
        Env {
            store: Arc::clone(&self.store),
            clock: Arc::clone(&self.clock),
            ids: Arc::clone(&self.ids),
            policy: Arc::clone(&self.policy),
            tools: Arc::clone(&self.tools),
            workspaces: self.workspaces.clone(),
            planners: Arc::clone(&self.planners),
            faults: Arc::clone(&self.faults),
        }
    }
}

impl<S: Store> Env<S> {
    /// The live ruleset in force now.
    pub fn ruleset(&self) -> Arc<Ruleset> {
        self.policy.current().live
    }

    /// The same environment over another store (the worker's `Watched` wrapper, say).
    pub fn with_store<T: Store>(&self, store: Arc<T>) -> Env<T> {
        Env {
            store,
            clock: Arc::clone(&self.clock),
            ids: Arc::clone(&self.ids),
            policy: Arc::clone(&self.policy),
            tools: Arc::clone(&self.tools),
            workspaces: self.workspaces.clone(),
            planners: Arc::clone(&self.planners),
            faults: Arc::clone(&self.faults),
        }
    }

    /// One transaction.
    pub fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.store.transact(f)
    }

    /// One read-only transaction (see [`Store::read`]).
    pub fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.store.read(f)
    }

    /// Awaits the host's fault hook right after a commit (or a tool's return).
    pub async fn reached(&self, point: CrashPoint) {
        self.faults.reached(point).await;
    }

    pub fn new_uuid(&self) -> uuid::Uuid {
        self.ids.new_uuid()
    }
}
