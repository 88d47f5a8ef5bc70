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
//!
//! [`GatewayProcess`] is what the process's connections share; [`GatewayProcess::open`] opens one
//! connection (the stdio client's here, each HTTP session's in [`crate::listen`]) as its
//! [`SessionPrincipal`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use airlock_core::connection::live::{
    ConnectionDriver, LiveConnection, LivePlanner, MCP_PLANNER_KIND, RunTemplate,
};
use airlock_core::connection::tasks::Tasks;
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
use crate::sealed_state::StateSeal;
use crate::server::{ClientSession, ElicitedApprovals};
use crate::sessionless::{Full, Holds, JoinWith};
use airlock_core::conversation::ConversationKey;

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

    /// Forgets a connection whose driver has returned (nothing of it runs any more), so a
    /// long-lived process keeps only its open connections.
    pub fn remove(&self, session: SessionId) {
        self.connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&session);
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
        // The connection holding a request for the run (its own, or one whose identical call
        // sent again bound to the run's parked call, SPEC §22.3), else the run's own.
        let connections = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        let live = connections
            .values()
            .find(|live| live.serves(run.id))
            .or_else(|| connections.get(&run.session_id))
            .cloned()
            .ok_or_else(|| PlannerError("no live connection for this run's session".into()))?;
        drop(connections);
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
        conversation_calls: config.conversation_calls,
        upstreams: upstreams_fingerprint(config),
    }
}

/// Where the file's tools run, as one hash: each server's id and transport (command, arguments,
/// environment and working directory, or URL and headers; only the hash is kept), and the
/// `roots` it is given (they decide what a server such as server-filesystem may reach), and
/// the OAuth client it is called as, if any (token URL, client id, scopes, audience, resource;
/// not the secret). A call
/// binds only to a parked call of the same fingerprint (SPEC §22.3), so an approval given
/// through one gateway file never runs against another file's server of the same name. A
/// server without `roots` hashes as it did before the key existed, so an upgrade keeps the
/// parked calls of an unchanged file bindable.
pub fn upstreams_fingerprint(config: &GatewayConfig) -> String {
    let servers: serde_json::Map<String, serde_json::Value> = config
        .servers
        .iter()
        .map(|(id, server)| {
            let mut runs = format!("{:?}", server.transport);
            if !server.roots.is_empty() {
                runs.push_str(&format!(" roots {:?}", server.roots));
            }
            // Whose token the server is called with (never the secret, as for headers).
            if let Some(oauth) = &server.oauth {
                runs.push_str(&format!(
                    " oauth {:?}",
                    (
                        &oauth.token_url,
                        &oauth.client_id,
                        &oauth.scopes,
                        &oauth.audience,
                        &oauth.resource
                    )
                ));
            }
            (id.clone(), serde_json::Value::String(runs))
        })
        .collect();
    airlock_core::canonical::arguments_hash(&serde_json::Value::Object(servers))
}

/// The principal elicited approvals resolve as: the session's principal, with the scopes to
/// read and resolve approvals that `approve_via_elicitation = true` grants.
pub fn elicitation_principal(config: &GatewayConfig, who: &SessionPrincipal) -> Principal {
    let mut scopes = who.scopes.clone();
    for scope in ["approval.read", "approval.resolve"] {
        if let Ok(scope) = Scope::parse(scope) {
            scopes.insert(scope);
        }
    }
    Principal {
        tenant_id: config.tenant_id.clone(),
        principal_id: who.principal_id.clone(),
        scopes,
    }
}

/// Records process events in transactions of their own; a failure is logged, never fatal.
pub fn event_sink<S: Store + 'static>(store: Arc<S>) -> crate::process_events::EventSink {
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
        Arc::clone(&env.policy),
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

/// Every so often (a tenth of the idle time, at most a minute), lets go of the sessionless
/// conversations idle for `idle_seconds` here ([`Holds::let_go_of_idle`]), forever.
async fn let_go_of_idle_holds<S: Store + 'static>(
    holds: Arc<Holds<S>>,
    gateway: Arc<Gateway>,
    planners: Arc<LivePlanners<S>>,
    idle_seconds: u32,
) {
    let idle = std::time::Duration::from_secs(u64::from(idle_seconds));
    let every = (idle / 10).min(std::time::Duration::from_secs(60));
    loop {
        tokio::time::sleep(every).await;
        holds
            .let_go_of_idle(idle, &|session| {
                gateway.clients().detach(session);
                planners.remove(session);
            })
            .await;
    }
}

/// Who one client connection's airlock session belongs to: the tenant is always the file's;
/// the principal and scopes are the file's for stdio (and `--listen-no-auth`), and the token's
/// principal with the token's scopes intersected with the file's for an authenticated HTTP
/// client (so a token never widens what the file grants, nor the file what the token grants).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPrincipal {
    pub principal_id: String,
    pub scopes: airlock_core::scope::ScopeSet,
}

impl SessionPrincipal {
    /// The file's own principal and scopes.
    pub fn of_file(config: &GatewayConfig) -> SessionPrincipal {
        SessionPrincipal {
            principal_id: config.principal_id.clone(),
            scopes: config.scopes.clone(),
        }
    }
}

/// What one process shares between its client connections: the upstreams and tool table, the
/// live planners, the worker that drives connection runs, and the maintenance loop.
pub struct GatewayProcess<S: Store> {
    env: Env<S>,
    gateway: Arc<Gateway>,
    planners: Arc<LivePlanners<S>>,
    worker: Arc<Worker<S>>,
    maintenance: tokio::task::JoinHandle<()>,
    /// This process's holds on sessionless 2026-07-28 conversations (SPEC §22.1).
    sessionless: Arc<Holds<S>>,
    /// Lets go of the holds idle for the file's `conversation_idle_seconds`.
    reaper: tokio::task::JoinHandle<()>,
}

impl<S: Store + 'static> GatewayProcess<S> {
    /// Starts the upstreams and the maintenance loop over `env`'s store.
    pub async fn start(
        config: GatewayConfig,
        mut env: Env<S>,
        settings: WorkerSettings,
    ) -> Arc<GatewayProcess<S>> {
        let gateway = start_gateway(config.clone(), &env, &settings.worker_id).await;
        let planners = LivePlanners::new(Arc::clone(&env.store));
        env.planners = Arc::clone(&planners) as Arc<dyn PlannerFactory>;
        let worker = Worker::new(env.clone(), settings);
        let control = ControlService::new(
            env.clone(),
            Arc::new(DriverPolls),
            Some(worker.tokens().clone()),
        );
        let maintenance = tokio::spawn(maintain(Arc::clone(&worker), control));
        // Only while exporting (the binary says so); ends with the runtime.
        tokio::spawn(crate::telemetry::observe_store(
            env.clone(),
            config.tenant_id.clone(),
        ));
        let sessionless = Arc::new(Holds::default());
        let reaper = tokio::spawn(let_go_of_idle_holds(
            Arc::clone(&sessionless),
            Arc::clone(&gateway),
            Arc::clone(&planners),
            config.conversation_idle_seconds,
        ));
        Arc::new(GatewayProcess {
            env,
            gateway,
            planners,
            worker,
            maintenance,
            sessionless,
            reaper,
        })
    }

    /// The gateway file in force now (a reload may replace it, [`Gateway::reload`]).
    pub fn config(&self) -> Arc<GatewayConfig> {
        self.gateway.config()
    }

    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// A control service on this process's store (tokens, approvals).
    pub fn control(&self) -> ControlService<S> {
        ControlService::new(
            self.env.clone(),
            Arc::new(DriverPolls),
            Some(self.worker.tokens().clone()),
        )
    }

    /// Opens one client connection as `who`: a new airlock session whose runs this process
    /// drives, and the MCP server the client talks to. Close it with [`OpenConnection::close`].
    pub fn open(
        &self,
        who: &SessionPrincipal,
    ) -> Result<(ClientSession<S>, OpenConnection<S>), TxError> {
        // The file in force when the connection opens binds it for its life.
        let config = self.config();
        let live = LiveConnection::new(
            ConnectionId(self.env.new_uuid()),
            config.origin_trust == TrustLevel::User,
        );
        let mut template = run_template(&config);
        template.principal_scopes = who.scopes.clone();
        let driver = Arc::new(ConnectionDriver::open(
            Arc::clone(&self.worker),
            Arc::clone(&live),
            &config.tenant_id,
            &who.principal_id,
            template,
        )?);
        self.planners
            .add(driver.connection().session_id, Arc::clone(&live));
        let running = Arc::clone(&driver);
        let run_task = tokio::spawn(async move { running.run().await });
        let renewing = Arc::clone(&driver);
        let renew_task = tokio::spawn(async move { renewing.keep_alive().await });
        let session_id = driver.connection().session_id;
        // In-call traffic of this session's runs is relayed to its client: attached before the
        // first request can come, its peer added once the session is up (serve_connection for
        // stdio, ClientSession::on_initialized for an HTTP session).
        self.gateway.clients().attach(session_id, live.id(), None);
        let session = self.client_session(who, live, session_id);
        Ok((
            session,
            OpenConnection {
                driver,
                run_task,
                renew_task,
                gateway: Arc::clone(&self.gateway),
                planners: Arc::clone(&self.planners),
            },
        ))
    }

    /// The MCP server for one sessionless 2026-07-28 request of `who` (SPEC §22.1, §23): its
    /// conversation is the store's row of `key`, joined (or opened) by this process at the
    /// key's first request since it last let go of it; every request of the key served here
    /// shares one live connection and one driver.
    pub fn sessionless(
        &self,
        who: &SessionPrincipal,
        (key, owner): (&ConversationKey, &str),
    ) -> Result<ClientSession<S>, TxError> {
        let config = self.config();
        let mut template = run_template(&config);
        template.principal_scopes = who.scopes.clone();
        let request = self.sessionless.for_request(
            key,
            JoinWith {
                owner,
                worker: &self.worker,
                tenant_id: &config.tenant_id,
                principal_id: &who.principal_id,
                idle_seconds: config.conversation_idle_seconds,
                arguments_from_user: config.origin_trust == TrustLevel::User,
                template,
            },
        )?;
        let hold = request.hold;
        let session_id = hold.session_id();
        let live = Arc::clone(hold.driver().live());
        if let Some(ended) = request.ended {
            let gateway = Arc::clone(&self.gateway);
            let planners = Arc::clone(&self.planners);
            tokio::spawn(async move {
                Holds::let_go(&ended, &|session| {
                    gateway.clients().detach(session);
                    planners.remove(session);
                })
                .await;
            });
        }
        if request.joined {
            self.planners.add(session_id, Arc::clone(&live));
            self.gateway.clients().attach(session_id, live.id(), None);
        }
        Ok(self
            .client_session(who, live, session_id)
            .with_request_keys(hold.request_keys()))
    }

    /// The MCP server of `who`'s connection `live` (session `session_id`): elicited approvals
    /// when the file asks for them, the principal's scopes, tasks and sealed states.
    fn client_session(
        &self,
        who: &SessionPrincipal,
        live: Arc<LiveConnection>,
        session_id: SessionId,
    ) -> ClientSession<S> {
        let elicitation = self
            .config()
            .approve_via_elicitation
            .then(|| ElicitedApprovals {
                control: self.control(),
                principal: elicitation_principal(&self.config(), who),
            });
        ClientSession::new(Arc::clone(&self.gateway), live, elicitation)
            .with_session(session_id)
            .with_scopes(who.scopes.clone())
            .with_tasks(self.tasks_of(who))
            .with_states(self.state_seal(), &who.principal_id)
    }

    /// The approval tasks of `who` (SPEC §22.3 item 1).
    fn tasks_of(&self, who: &SessionPrincipal) -> Tasks<S> {
        Tasks::new(
            self.env.clone(),
            &self.config().tenant_id,
            &who.principal_id,
        )
    }

    /// Sealing of `input_required` states with the store's keys (SPEC §22.3 item 2).
    fn state_seal(&self) -> StateSeal<S> {
        StateSeal::new(Arc::clone(&self.env.store), Arc::clone(&self.env.clock))
    }

    /// Whether a sessionless request of `key` from `owner` may be served now, under the caps
    /// `(per owner, in all)` ([`Holds::room_for`]).
    pub fn sessionless_room(
        &self,
        key: &ConversationKey,
        owner: &str,
        caps: (usize, usize),
    ) -> Result<(), Full> {
        self.sessionless.room_for(key, owner, caps)
    }

    /// How many sessionless conversations this process holds now.
    pub fn sessionless_held(&self) -> usize {
        self.sessionless.len()
    }

    /// Stops the maintenance loop, lets go of the sessionless conversations (their rows stay
    /// for other processes) and stops the upstreams (after every connection has closed).
    pub async fn shutdown(&self) {
        self.maintenance.abort();
        self.reaper.abort();
        let gateway = Arc::clone(&self.gateway);
        let planners = Arc::clone(&self.planners);
        self.sessionless
            .let_go_of_all(&|session| {
                gateway.clients().detach(session);
                planners.remove(session);
            })
            .await;
        self.gateway.shutdown().await;
    }
}

/// One open client connection's driver and tasks.
pub struct OpenConnection<S: Store> {
    driver: Arc<ConnectionDriver<S>>,
    run_task: tokio::task::JoinHandle<Result<(), TxError>>,
    renew_task: tokio::task::JoinHandle<()>,
    /// Where its session is attached for relays (detached on close).
    gateway: Arc<Gateway>,
    /// Where its planner is registered (removed once its driver has returned).
    planners: Arc<LivePlanners<S>>,
}

impl<S: Store + 'static> OpenConnection<S> {
    /// DISCONNECT, then lets the run end (a call in flight finishes and is recorded).
    pub fn session_id(&self) -> SessionId {
        self.driver.connection().session_id
    }

    pub fn connection_id(&self) -> ConnectionId {
        self.driver.connection().id
    }

    pub async fn close(self) -> Result<(), TxError> {
        let session = self.session_id();
        self.gateway.clients().detach(session);
        let closed = self.driver.disconnect();
        let ended = self.run_task.await;
        self.renew_task.abort();
        self.planners.remove(session);
        closed?;
        match ended {
            Ok(Err(error)) => Err(error),
            _ => Ok(()),
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

/// Serves one stdio client of an already running `process` (beside an HTTP listener).
pub async fn serve_stdio_connection<S: Store + 'static>(
    process: &GatewayProcess<S>,
) -> Result<(), ServeError> {
    serve_connection(process, rmcp::transport::stdio()).await
}

/// [`serve_stdio`] over any byte transport (a benchmark's in-memory pipe, say).
pub async fn serve_on<S, T, E, A>(
    config: GatewayConfig,
    env: Env<S>,
    settings: WorkerSettings,
    transport: T,
) -> Result<(), ServeError>
where
    S: Store + 'static,
    T: rmcp::transport::IntoTransport<rmcp::RoleServer, E, A> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let process = GatewayProcess::start(config, env, settings).await;
    let result = serve_connection(&process, transport).await;
    process.shutdown().await;
    result
}

/// Serves one client of `process` over `transport` as the file's principal until it goes,
/// then closes its connection (the process keeps running).
pub async fn serve_connection<S, T, E, A>(
    process: &GatewayProcess<S>,
    transport: T,
) -> Result<(), ServeError>
where
    S: Store + 'static,
    T: rmcp::transport::IntoTransport<rmcp::RoleServer, E, A> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let (session, connection) = process.open(&SessionPrincipal::of_file(&process.config()))?;
    let gateway = Arc::clone(process.gateway());
    let session_id = connection.session_id();
    let connection_id = connection.connection_id();
    let served = session.traced().serve(transport).await;
    let result = match served {
        Ok(service) => {
            gateway
                .clients()
                .attach(session_id, connection_id, Some(service.peer().clone()));
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
    connection.close().await?;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(root: &str, scopes: &str) -> GatewayConfig {
        let text = format!(
            r#"schema_version = 1
tenant_id = "acme"
principal_id = "alice"
scopes = [{scopes}]
origin_trust = "user"
[servers.fs]
command = "npx"
args = ["@modelcontextprotocol/server-filesystem", "{root}"]
"#
        );
        match GatewayConfig::parse(&text) {
            Ok(config) => config,
            Err(error) => panic!("the test file loads: {error}"),
        }
    }

    /// SPEC §22.3: a call binds only within the same upstreams, so the fingerprint follows where
    /// the servers run (a server `fs` over another root is another fingerprint) and nothing else
    /// of the file (its scopes).
    #[test]
    fn the_upstreams_fingerprint_follows_the_servers_and_only_them() {
        let one = upstreams_fingerprint(&file("/srv/a", r#""mcp.fs.call""#));
        assert_eq!(
            one,
            upstreams_fingerprint(&file("/srv/a", r#""mcp.fs.call", "mcp.fs.read""#))
        );
        assert_ne!(
            one,
            upstreams_fingerprint(&file("/srv/b", r#""mcp.fs.call""#))
        );
        let mut rooted = file("/srv/a", r#""mcp.fs.call""#);
        if let Some(fs) = rooted.servers.get_mut("fs") {
            fs.roots = vec!["file:///srv/b".into()];
        }
        assert_ne!(
            one,
            upstreams_fingerprint(&rooted),
            "roots change what it reaches"
        );
        // The value a store written before `roots` existed holds for this file: an upgrade
        // must not change it, or its parked calls would no longer bind.
        assert_eq!(
            one,
            "ba35f18d98564a1abc52edc38d24907047cce00e3bfe4657be08b9293e159d4d"
        );
    }
}
