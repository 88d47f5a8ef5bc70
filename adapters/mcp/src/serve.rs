//! `airlock mcp serve` (SPEC §19.1): one process serving one client over stdio, in front of
//! the upstreams of the gateway file, on any store.
//!
//! What runs in the process: the [`Gateway`] (upstream sessions and the tool table, re-listed on
//! list changes), the connection's [`ConnectionDriver`] (its runs, claimed for this connection
//! only) and its renewal, a maintenance loop (the connection sweep and RECLAIM of §19.4, and
//! approval expiry, at the worker's intervals, so a dead gateway's runs end within a lease plus
//! a sweep even when no `airlock worker` runs), and the MCP server of [`ClientSession`]. The
//! gateway never claims a run that is not its connection's (a scripted run waits for `airlock
//! worker`).
//!
//! When the client goes (end of its stream), the connection is closed (DISCONNECT): a parked or
//! queued call's run is cancelled, a call in flight finishes and is recorded (its answer is
//! dropped), and the process exits once the run has ended.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use airlock_core::connection::live::{
    ConnectionDriver, LiveConnection, LivePlanner, MCP_PLANNER_KIND, RunTemplate,
};
use airlock_core::control::ControlService;
use airlock_core::env::Env;
use airlock_core::events::ProcessEvent;
use airlock_core::ids::{ConnectionId, RunId, SessionId};
use airlock_core::ports::{Dispatcher, Planner, PlannerError, PlannerFactory};
use airlock_core::principal::Principal;
use airlock_core::run::Run;
use airlock_core::scope::Scope;
use airlock_core::store::{Store, TxError};
use airlock_core::vocab::TrustLevel;
use airlock_core::worker::{Worker, WorkerSettings};
use rmcp::ServiceExt;

use crate::config::GatewayConfig;
use crate::gateway::Gateway;
use crate::server::{ClientSession, ElicitedApprovals};

/// Why serving stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("storage: {0}")]
    Storage(#[from] TxError),
    #[error("client transport: {0}")]
    Transport(String),
}

/// The planners of this process's live connections, by session.
pub struct LivePlanners<S: Store> {
    store: Arc<S>,
    connections: Mutex<BTreeMap<SessionId, Arc<LiveConnection>>>,
}

impl<S: Store> LivePlanners<S> {
    pub fn new(store: Arc<S>) -> Arc<LivePlanners<S>> {
        Arc::new(LivePlanners {
            store,
            connections: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn add(&self, session: SessionId, live: Arc<LiveConnection>) {
        self.connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session, live);
    }
}

impl<S: Store + 'static> PlannerFactory for LivePlanners<S> {
    fn for_run(&self, run: &Run) -> Result<Arc<dyn Planner>, PlannerError> {
        if run.planner_kind != MCP_PLANNER_KIND {
            return Err(PlannerError(format!(
                "a gateway plans only '{MCP_PLANNER_KIND}' runs, not '{}'",
                run.planner_kind
            )));
        }
        let live = self
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&run.session_id)
            .cloned()
            .ok_or_else(|| PlannerError("no live connection for this run's session".into()))?;
        Ok(Arc::new(LivePlanner::new(live, Arc::clone(&self.store))))
    }
}

/// Queued connection runs are claimed by their driver's own polling: nothing to dispatch.
struct DriverPolls;

impl Dispatcher for DriverPolls {
    fn dispatch(&self, _run: RunId) {}
    fn resume(&self, _run: RunId) {}
}

/// The run template of the file's connections.
pub fn run_template(config: &GatewayConfig) -> RunTemplate {
    RunTemplate {
        principal_scopes: config.scopes.clone(),
        origin_trust: config.origin_trust,
        limits: config.limits,
    }
}

/// The principal elicited approvals resolve as: the file's principal, with the scopes to read
/// and resolve approvals that `approve_via_elicitation = true` grants.
pub fn elicitation_principal(config: &GatewayConfig) -> Principal {
    let mut scopes = config.scopes.clone();
    for scope in ["approval.read", "approval.resolve"] {
        if let Ok(scope) = Scope::parse(scope) {
            scopes.insert(scope);
        }
    }
    Principal {
        tenant_id: config.tenant_id.clone(),
        principal_id: config.principal_id.clone(),
        scopes,
    }
}

/// Records process events in transactions of their own; a failure is logged, never fatal.
pub fn event_sink<S: Store + 'static>(store: Arc<S>) -> crate::gateway::EventSink {
    Arc::new(move |event: ProcessEvent| {
        if let Err(error) = store.transact(|tx| tx.append_process_event(&event).map(|_| ())) {
            tracing::warn!(event = %event.derivation_key, error = %error, "a process event was not recorded");
        }
    })
}

/// Starts the gateway's upstreams over `env`'s registry (which gains their tools).
pub async fn start_gateway<S: Store + 'static>(
    config: GatewayConfig,
    env: &Env<S>,
    gateway_id: &str,
) -> Arc<Gateway> {
    let clock = Arc::clone(&env.clock);
    let (gateway, changes) = Gateway::start(
        config,
        gateway_id.to_owned(),
        Arc::clone(&env.tools),
        Arc::clone(&env.ruleset),
        event_sink(Arc::clone(&env.store)),
        Arc::new(move || clock.now()),
    )
    .await;
    tokio::spawn(Arc::clone(&gateway).watch(changes));
    gateway
}

/// The connection sweep, RECLAIM and approval expiry, each at the worker's interval
/// ([`Worker::maintain`]), forever.
async fn maintain<S: Store + 'static>(worker: Arc<Worker<S>>, control: ControlService<S>) {
    let settings = worker.settings();
    let every = std::time::Duration::from_millis(
        settings
            .reclaim_every_ms
            .min(settings.approval_sweep_every_ms)
            .max(1),
    );
    loop {
        tokio::time::sleep(every).await;
        if let Err(error) = worker.maintain(&control).await {
            tracing::warn!(error = %error, "maintenance (connection sweep, reclaim, approval expiry) failed; the next one retries");
        }
    }
}

/// Serves one client over stdio until it goes; see the module docs.
pub async fn serve_stdio<S: Store + 'static>(
    config: GatewayConfig,
    env: Env<S>,
    settings: WorkerSettings,
) -> Result<(), ServeError> {
    serve_on(config, env, settings, rmcp::transport::stdio()).await
}

/// [`serve_stdio`] over any byte transport (a benchmark's in-memory pipe, say).
pub async fn serve_on<S, T, E, A>(
    config: GatewayConfig,
    mut env: Env<S>,
    settings: WorkerSettings,
    transport: T,
) -> Result<(), ServeError>
where
    S: Store + 'static,
    T: rmcp::transport::IntoTransport<rmcp::RoleServer, E, A> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let gateway = start_gateway(config.clone(), &env, &settings.worker_id).await;
    let planners = LivePlanners::new(Arc::clone(&env.store));
    env.planners = Arc::clone(&planners) as Arc<dyn PlannerFactory>;
    let worker = Worker::new(env.clone(), settings);
    let control = || {
        ControlService::new(
            env.clone(),
            Arc::new(DriverPolls),
            Some(worker.tokens().clone()),
        )
    };
    let maintenance = tokio::spawn(maintain(Arc::clone(&worker), control()));

    let live = LiveConnection::new(
        ConnectionId(env.new_uuid()),
        config.origin_trust == TrustLevel::User,
    );
    let driver = Arc::new(ConnectionDriver::open(
        Arc::clone(&worker),
        Arc::clone(&live),
        &config.tenant_id,
        &config.principal_id,
        run_template(&config),
    )?);
    planners.add(driver.connection().session_id, Arc::clone(&live));
    let running = Arc::clone(&driver);
    let run_task = tokio::spawn(async move { running.run().await });
    let renewing = Arc::clone(&driver);
    let renew_task = tokio::spawn(async move { renewing.keep_alive().await });

    let elicitation = config.approve_via_elicitation.then(|| ElicitedApprovals {
        control: control(),
        principal: elicitation_principal(&config),
    });
    let session = ClientSession::new(Arc::clone(&gateway), Arc::clone(&live), elicitation)
        .with_session(driver.connection().session_id);
    // In-call traffic of this session's runs is relayed to this client: attached before the
    // first request can come, its peer added once the session is up.
    let session_id = driver.connection().session_id;
    gateway.clients().attach(session_id, live.id(), None);
    let served = session.serve(transport).await;
    let result = match served {
        Ok(service) => {
            gateway
                .clients()
                .attach(session_id, live.id(), Some(service.peer().clone()));
            // A 2025-11-25 client hears of list changes as plain notifications.
            let peer = service.peer().clone();
            let mut changes = gateway.subscribe_list_changed();
            let notify_task = tokio::spawn(async move {
                loop {
                    if let Err(tokio::sync::broadcast::error::RecvError::Closed) =
                        changes.recv().await
                    {
                        return;
                    }
                    let legacy = peer
                        .peer_info()
                        .is_some_and(|info| info.protocol_version.has_initialize());
                    if legacy && peer.notify_tool_list_changed().await.is_err() {
                        return;
                    }
                }
            });
            let quit = service.waiting().await;
            notify_task.abort();
            tracing::info!(reason = ?quit, "the client went");
            Ok(())
        }
        Err(error) => Err(ServeError::Transport(error.to_string())),
    };
    gateway.clients().detach(session_id);
    // DISCONNECT, then let the run end (a call in flight finishes and is recorded).
    let closed = driver.disconnect();
    let ended = run_task.await;
    renew_task.abort();
    maintenance.abort();
    gateway.shutdown().await;
    closed?;
    match ended {
        Ok(Err(error)) => Err(ServeError::Storage(error)),
        _ => result,
    }
}
