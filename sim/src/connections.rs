//! The connection world (SPEC §19.5): runs whose planner is a simulated MCP client that may
//! disconnect, or whose gateway may die, at any point. Only under `--cfg madsim`.
//!
//! Each gateway node runs core's unchanged `ConnectionDriver` (its renewal, its runs claimed for
//! its connection only, the connection sweep and RECLAIM) with core's `LivePlanner` fed by a
//! simulated client: calls of the catalog's services at drawn times (reads that run at once and
//! writes that park for approval), an occasional client cancel of a parked call, and then a
//! fate: a DISCONNECT at a drawn time, or a crash (the node is killed, never restarted; its
//! connection expires and any other node's sweep closes it). A worker node runs `Worker::run`
//! (the sweep, RECLAIM and the orphan claims of §19.4); an approver node resolves pending
//! approvals after a drawn delay, often after the client left. A fault hook waits a drawn time
//! after each CLAIM, so a disconnect can land between a resumed run's claim and its REVALIDATE.
//!
//! After a crash the agent host may restart (SPEC §19.7, issue 25): a new gateway node opens a
//! new connection after a drawn pause (often none) and sends every call of the dead one that
//! was never answered again, with identical arguments, as a host that saw no answer does. Some
//! crashes are aimed: the gateway dies right after a service took the effect of its
//! non-idempotent call, while the invocation is still RUNNING under an unexpired lease.
//!
//! Each call is its own run (SPEC §22.2): a client's calls run side by side, and
//! `sim.search` returns untrusted content, which taints the conversation. A client that
//! cancels a parked call (a host's timeout) may send the identical call again after a drawn
//! pause, which binds to the parked run (§22.3).
//!
//! After the seed: every S invariant (`testing::invariants::check`), every connection closed,
//! every run terminal (liveness), and the rules this world exists for:
//! - **no call of a disconnected client is sent after the disconnect committed**, checked at
//!   each commit: no `tool.call.started` of a session commits after the commit that closed its
//!   connection, and no service sees a request of a session whose connection had closed before
//!   the call STARTed;
//! - **no effect of a non-idempotent call happens twice, across runs and connections**: of two
//!   effects of identical calls (tenant, tool, effective arguments hash) taken by different
//!   invocations, the later invocation STARTed only after the earlier one's known outcome
//!   (SUCCEEDED or FAILED) had committed (§19.7: once the twin has an outcome, an identical
//!   call is a new call);
//! - **every call proposed after an untrusted result was answered is tainted** (§22.2): an
//!   invocation of a conversation created after its client was answered untrusted content was
//!   decided `external_untrusted`;
//! - **an approved call executes only while a request waits for it, outside tasks** (§22.3): no
//!   service gets a call whose run has no request attached in its gateway's mailbox and no task
//!   row in the store. (No call executes before its approval, and none twice, are S
//!   invariants: for a task across crashes too.)
//!
//! Some clients declare the tasks extension (§22.3 item 1): a write of theirs that parks is
//! answered as a task (the run adopted, the request detached) and polled every second until
//! it ends; the gateway may crash while it waits, and a restarted host polls the task through
//! its new gateway instead of sending the call again, adopting the approved run nobody drives.
//! Those clients speak 2026-07-28 without a session: their conversation is the store's row of
//! their key (§22.1), which each of their gateways joins, so it outlives a crash. A task whose
//! call was sent when its gateway died is then re-queued (its conversation is still open) and
//! claimed by the adopting gateway, whose recovery must record it UNCERTAIN, never send it
//! again (the mutant `task_replayed_after_crash`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use airlock_core::action::JsonMap;
use airlock_core::connection::answer::CallAnswer;
use airlock_core::connection::live::{
    ClientCall, ConnectionDriver, LiveConnection, LivePlanner, MCP_PLANNER_KIND, RunTemplate,
    Ticket, TicketEnd, TicketStatus,
};
use airlock_core::connection::tasks::Tasks;
use airlock_core::control::ControlService;
use airlock_core::conversation::ConversationKey;
use airlock_core::conversation::request_state::{SealedCall, check_in_tx};
use airlock_core::conversation::task::TaskView;
use airlock_core::env::Env;
use airlock_core::events::EventType;
use airlock_core::ids::{RunId, SessionId};
use airlock_core::mem_store::MemSnapshot;
use airlock_core::ports::Clock as _;
use airlock_core::ports::{
    BoxFut, Dispatcher, FaultHook, IdSource, Planner, PlannerError, PlannerFactory, Tool,
    ToolContext, ToolFailure, ToolSpec, ToolSuccess,
};
use airlock_core::principal::Principal;
use airlock_core::run::{Limits, Run};
use airlock_core::scope::{ScopeSet, platform_scopes};
use airlock_core::store::{Store, StoreTx, TxError};
use airlock_core::testing::invariants::{Effect, Violation, check};
use airlock_core::time::Timestamp;
use airlock_core::tool::registry::ToolRegistry;
use airlock_core::vocab::{ApprovalResolution, CrashPoint, IdempotencyClass, TrustLevel};
use airlock_core::worker::{Worker, WorkerSettings};
use madsim::runtime::Handle;
use madsim::time::{Instant, sleep};
use serde_json::{Value, json};

use crate::catalog;
use crate::plan::SimRng;
use crate::ports::{SeqIds, SimClock};
use crate::store::SimStore;

const LEASE_MS: u64 = 3_000;
/// Simulated time for the workload; then a quiet phase until every run is terminal.
const WORKLOAD: Duration = Duration::from_secs(40);
/// A sessionless conversation's idle time: longer than the workload, so a client's
/// conversation stays one across its calls (and its gateway's crash), and far shorter than the
/// quiet phase, so every one has ended by then.
const CONVERSATION_IDLE_SECONDS: u32 = 60;
const QUIET_BOUND: Duration = Duration::from_secs(600);
/// Every approval's lifetime in this world (see [`short_lived_approvals`]).
const APPROVAL_EXPIRY: Duration = Duration::from_secs(90);
/// The services a client calls: reads that run at once (`sim.search` returns untrusted
/// content, which taints the conversation, §22.2) and writes that wait for approval.
const TOOLS: [&str; 4] = ["sim.lookup", "sim.post", "sim.email", "sim.search"];
/// The actions of one simulated client, by weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Disconnect,
    Crash,
}

/// One client's plan.
#[derive(Debug, Clone)]
struct ClientPlan {
    /// `(at, tool index)` in submission order.
    calls: Vec<(Duration, usize)>,
    /// Cancels the call with this index once it is parked, if any (a host's timeout).
    cancel: Option<usize>,
    /// After that cancel, the host sends the identical call again after this pause (§22.3:
    /// it binds to the parked run), if it does.
    resend_after: Option<Duration>,
    fate: Fate,
    fate_at: Duration,
    /// For a crash: the gateway dies as soon as a service took the effect of one of its
    /// non-idempotent calls, if that comes before `fate_at`.
    crash_after_effect: bool,
    /// For a crash: the host restarts after this pause and sends the unanswered calls again.
    retry_after: Option<Duration>,
    /// How long the restarted host stays connected before it disconnects.
    retry_stays: Duration,
    /// The client declared the tasks extension: its parked calls are answered as tasks and
    /// polled (§22.3 item 1).
    tasks: bool,
    /// The client is a 2026-07-28 one without tasks that declared elicitation: its parked calls
    /// are answered `input_required` with a sealed state, which it brings back on each retry
    /// (§22.3 item 2); a leaked copy is sometimes brought back by another principal first.
    input_required: bool,
}

/// The seed's plan, drawn before the world starts.
#[derive(Debug, Clone)]
pub struct ConnectionPlan {
    seed: u64,
    clients: Vec<ClientPlan>,
    /// The approver's delay range, milliseconds.
    approve_after_ms: (u64, u64),
    deny_rate: f64,
    /// The longest wait after a CLAIM.
    claim_pause_ms: u64,
}

impl ConnectionPlan {
    pub fn new(seed: u64) -> ConnectionPlan {
        let mut rng = SimRng::new(seed, 19);
        let clients = (0..rng.range(1, 4))
            .map(|_| {
                let mut at = Duration::ZERO;
                let calls: Vec<(Duration, usize)> = (0..rng.range(1, 7))
                    .map(|_| {
                        at += Duration::from_millis(rng.range(0, 3_000));
                        (at, rng.below(TOOLS.len() as u64) as usize)
                    })
                    .collect();
                let cancel = rng
                    .chance(0.4)
                    .then(|| rng.below(calls.len() as u64) as usize);
                let resend_after = (cancel.is_some() && rng.chance(0.7))
                    .then(|| Duration::from_millis(rng.range(0, 10_000)));
                let fate = if rng.chance(0.3) {
                    Fate::Crash
                } else {
                    Fate::Disconnect
                };
                let fate_at = Duration::from_millis(rng.range(200, 25_000));
                let crash_after_effect = fate == Fate::Crash && rng.chance(0.5);
                // At once, soon (the twin is still in flight), or after recovery made it
                // UNCERTAIN (a lease plus a sweep).
                let retry_after = (fate == Fate::Crash && rng.chance(0.7)).then(|| {
                    Duration::from_millis(match rng.below(6) {
                        0 | 1 => 0,
                        2 => rng.range(1, 2_000),
                        _ => rng.range(LEASE_MS + 1_000, 3 * LEASE_MS),
                    })
                });
                let asks = rng.below(10);
                let (tasks, input_required) = (asks < 3, (3..6).contains(&asks));
                ClientPlan {
                    tasks,
                    input_required,
                    cancel: cancel.filter(|_| !tasks && !input_required),
                    resend_after,
                    fate,
                    fate_at,
                    crash_after_effect,
                    retry_after,
                    retry_stays: Duration::from_millis(rng.range(5_000, 20_000)),
                    calls,
                }
            })
            .collect();
        let low = rng.range(50, 2_000);
        ConnectionPlan {
            seed,
            clients,
            approve_after_ms: (low, low + rng.range(1, 6_000)),
            deny_rate: rng.unit() * 0.3,
            claim_pause_ms: rng.range(0, 1_500),
        }
    }

    pub fn describe(&self) -> Value {
        json!({
            "seed": self.seed,
            "clients": self.clients.iter().map(|c| json!({
                "calls": c.calls.iter().map(|(at, tool)| json!([at.as_millis() as u64, TOOLS[*tool]])).collect::<Vec<_>>(),
                "cancel": c.cancel,
                "resend_after_ms": c.resend_after.map(|d| d.as_millis() as u64),
                "fate": format!("{:?}", c.fate),
                "fate_at_ms": c.fate_at.as_millis() as u64,
                "crash_after_effect": c.crash_after_effect,
                "retry_after_ms": c.retry_after.map(|d| d.as_millis() as u64),
                "retry_stays_ms": c.retry_stays.as_millis() as u64,
                "tasks": c.tasks,
                "input_required": c.input_required,
            })).collect::<Vec<_>>(),
            "approve_after_ms": [self.approve_after_ms.0, self.approve_after_ms.1],
            "deny_rate": self.deny_rate,
            "claim_pause_ms": self.claim_pause_ms,
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The simulator's `SimStore` plus the one rule of this world, checked at every commit.
pub struct ConnectionStore {
    inner: SimStore,
    commits: AtomicU64,
    /// Per session, the commit that closed its connection.
    closed_at: Mutex<BTreeMap<SessionId, u64>>,
    /// Per invocation, the commit of its START and of its known outcome (SUCCEEDED or FAILED).
    started_in: Mutex<BTreeMap<String, u64>>,
    known_in: Mutex<BTreeMap<String, u64>>,
    violations: Mutex<Vec<String>>,
    /// Every connection's mailbox by session: whether a request waits for a run (§22.3).
    lives: Mutex<BTreeMap<SessionId, Arc<LiveConnection>>>,
    /// STARTs of a call whose client had left, for an identical call sent again on another
    /// connection that waited for it (§22.3): the cross-connection binding at work.
    rebound_starts: AtomicU64,
}

impl ConnectionStore {
    fn new() -> ConnectionStore {
        ConnectionStore {
            inner: SimStore::new(),
            commits: AtomicU64::new(0),
            closed_at: Mutex::new(BTreeMap::new()),
            started_in: Mutex::new(BTreeMap::new()),
            known_in: Mutex::new(BTreeMap::new()),
            violations: Mutex::new(Vec::new()),
            lives: Mutex::new(BTreeMap::new()),
            rebound_starts: AtomicU64::new(0),
        }
    }

    fn closed(&self, session: SessionId) -> bool {
        lock(&self.closed_at).contains_key(&session)
    }

    /// The client's side of a disconnect: `ConnectionDriver::disconnect` returned, so by §19.4
    /// its close has committed (or the run was idle and ends without another call).
    /// Whether a request of a client that has not left waits for `run`: an identical call
    /// sent again on another connection, bound to the run's parked call (§22.3).
    fn waited_elsewhere(&self, run: RunId, closed_at: &BTreeMap<SessionId, u64>) -> bool {
        lock(&self.lives)
            .iter()
            .any(|(session, live)| !closed_at.contains_key(session) && live.serves(run))
    }

    /// Whether any connection's request waits for `run`, or `run` is a task's (a task stands
    /// for its request, §22.3 item 1), as the store says.
    fn waited(&self, run: RunId) -> bool {
        lock(&self.lives).values().any(|live| live.waits_for(run)) || self.has_task(run)
    }

    /// Whether the store holds a task of `run`.
    fn has_task(&self, run: RunId) -> bool {
        self.inner
            .inspect(|s| s.call_tasks.values().any(|task| task.run_id == run))
    }

    fn client_left(&self, session: SessionId) {
        let commit = self.commits.load(Ordering::SeqCst);
        lock(&self.closed_at).entry(session).or_insert(commit);
    }
}

impl Store for ConnectionStore {
    fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        let before = self.inner.inspect(|s| s.events.len());
        let result = self.inner.transact(f);
        if result.is_ok() {
            let commit = self.commits.fetch_add(1, Ordering::SeqCst) + 1;
            let mut closed_at = lock(&self.closed_at);
            self.inner.inspect(|s| {
                for event in &s.events[before..] {
                    let invocation = event.payload["invocation_id"].as_str().map(str::to_owned);
                    match (event.event_type, invocation) {
                        (EventType::ToolCallStarted, Some(id)) => {
                            lock(&self.started_in).entry(id).or_insert(commit);
                        }
                        (EventType::ToolCallCompleted | EventType::ToolCallFailed, Some(id)) => {
                            lock(&self.known_in).entry(id).or_insert(commit);
                        }
                        _ => {}
                    }
                    if event.event_type != EventType::ToolCallStarted {
                        continue;
                    }
                    // A parked call left by its client may be executed for an identical call
                    // sent again on a connection that is still open (§22.3).
                    let rebound = event
                        .run_id
                        .is_some_and(|run| self.waited_elsewhere(run, &closed_at));
                    if closed_at.contains_key(&event.session_id) && rebound {
                        self.rebound_starts.fetch_add(1, Ordering::SeqCst);
                    }
                    if let Some(closed) = closed_at.get(&event.session_id)
                        && !rebound
                    {
                        lock(&self.violations).push(format!(
                            "§19.4: call {} of session {} STARTed in commit {commit}, after its client left (commit {closed})",
                            event.payload["invocation_id"], event.session_id
                        ));
                    }
                }
                for connection in s.connections.values() {
                    if !connection.is_open() {
                        closed_at.entry(connection.session_id).or_insert(commit);
                    }
                }
            });
        }
        result
    }

    fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.inner.read(f)
    }
}

/// Waits a drawn time after each CLAIM (a slow process), and nowhere else.
struct ClaimPause {
    rng: Mutex<SimRng>,
    max_ms: u64,
}

impl FaultHook for ClaimPause {
    fn reached(&self, point: CrashPoint) -> BoxFut<'static, ()> {
        if point != CrashPoint::AfterClaim || self.max_ms == 0 {
            return Box::pin(std::future::ready(()));
        }
        let ms = lock(&self.rng).below(self.max_ms);
        Box::pin(sleep(Duration::from_millis(ms)))
    }
}

/// The world shared by every node.
struct ConnectionWorld {
    plan: ConnectionPlan,
    store: Arc<ConnectionStore>,
    clock: SimClock,
    effects: Mutex<Vec<Effect>>,
    rng: Mutex<SimRng>,
    /// Every call a first gateway's client sent, by `(client, call index)`: a restarted host
    /// sends again those never answered.
    tickets: Mutex<BTreeMap<(usize, usize), Ticket>>,
    /// Clients whose gateway a service asked to die right after an effect.
    crash_requests: Mutex<BTreeSet<usize>>,
    /// The session of each client's first gateway, so its crash can take its mailbox out of
    /// [`ConnectionStore::lives`]: a dead gateway's requests wait for nothing.
    gateway_sessions: Mutex<BTreeMap<usize, SessionId>>,
    /// When a client was answered untrusted content, by session (§22.2's taint rule).
    untrusted_answers: Mutex<Vec<(SessionId, Timestamp)>>,
    /// Calls a service got while no request waited for their run (§22.3).
    unwaited: Mutex<Vec<String>>,
    /// Tasks a client holds, by `(client, call index)`: the task id and its run (§22.3 item 1).
    tasks: Mutex<BTreeMap<(usize, usize), (String, RunId)>>,
    /// Task runs a restarted host's gateway adopted on a poll.
    adopted_after_crash: AtomicU64,
    /// Sealed states another principal brought back and that were accepted (§22.3 item 2).
    foreign_states: Mutex<Vec<String>>,
    /// Retries with a sealed state that moved their call.
    state_retries: AtomicU64,
}

/// A simulated service: records the request (the effect happens), waits, answers.
struct Service {
    spec: ToolSpec,
    world: Arc<ConnectionWorld>,
    /// The first gateway of this client, whose plan may crash it right after an effect.
    client: Option<usize>,
}

impl Tool for Service {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn invoke<'a>(
        &'a self,
        ctx: &'a ToolContext<'a>,
        _args: &'a JsonMap,
    ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>> {
        Box::pin(async move {
            let store = &self.world.store.inner;
            let key = ctx.idempotency_key.to_owned();
            let session_closed = self.world.store.closed(ctx.session_id);
            let started = store.started(&key);
            let waiting = self.world.store.waited(ctx.run_id);
            if !waiting {
                lock(&self.world.unwaited).push(format!(
                    "service {} got call {} of run {} while no request waited for it",
                    self.spec.name, ctx.call_id, ctx.run_id
                ));
            }
            if session_closed && !started {
                lock(&self.world.store.violations).push(format!(
                    "§19.4: service {} got call {} of session {} after its connection closed, without a START",
                    self.spec.name, ctx.call_id, ctx.session_id
                ));
            }
            lock(&self.world.effects).push(Effect {
                tool_name: self.spec.name.clone(),
                idempotency_key: key.clone(),
                idempotency: self.spec.idempotency,
                replay: ctx.replay,
                watermarked_at_entry: store.watermarked(&key),
                transaction_open_at_entry: store.transaction_open(),
                started_at_entry: started,
            });
            if let Some(client) = self.client
                && self.spec.idempotency == IdempotencyClass::NonIdempotent
                && self.world.plan.clients[client].crash_after_effect
            {
                // The supervisor kills this gateway: the answer never comes.
                lock(&self.world.crash_requests).insert(client);
                std::future::pending::<()>().await;
            }
            let ms = lock(&self.world.rng).range(10, 1_500);
            sleep(Duration::from_millis(ms)).await;
            Ok(ToolSuccess {
                structured: json!({"ok": true}),
                trust: (self.spec.name == "sim.search").then_some(TrustLevel::ExternalUntrusted),
            })
        })
    }
}

/// Plans only the one live connection of a gateway node.
struct OneConnection {
    session: SessionId,
    live: Arc<LiveConnection>,
    store: Arc<ConnectionStore>,
}

impl PlannerFactory for OneConnection {
    fn for_run(&self, run: &Run) -> Result<Arc<dyn Planner>, PlannerError> {
        // Its own connection's runs, and another's parked call bound to a request here (§22.3).
        if run.planner_kind != MCP_PLANNER_KIND
            || (run.session_id != self.session && !self.live.serves(run.id))
        {
            return Err(PlannerError("not this gateway's connection".into()));
        }
        Ok(Arc::new(LivePlanner::new(
            Arc::clone(&self.live),
            Arc::clone(&self.store),
        )))
    }
}

/// Plans nothing: the worker node only ends orphaned runs.
struct NoPlanner;

impl PlannerFactory for NoPlanner {
    fn for_run(&self, _run: &Run) -> Result<Arc<dyn Planner>, PlannerError> {
        Err(PlannerError("no planner on this node".into()))
    }
}

struct NoDispatch;

impl Dispatcher for NoDispatch {
    fn dispatch(&self, _run: RunId) {}
    fn resume(&self, _run: RunId) {}
}

struct SimSpawner;

impl airlock_core::ports::Spawner for SimSpawner {
    fn spawn(&self, f: BoxFut<'static, ()>) {
        madsim::task::spawn(f);
    }
}

/// Approvals of this world expire after [`APPROVAL_EXPIRY`] (the shipped profile's hours
/// would outlast the quiet phase): a parked call its client left, and no identical call binds,
/// is then cancelled by the orphan sweep within the seed (§22.3), which liveness checks.
fn short_lived_approvals(
    mut ruleset: airlock_core::policy::Ruleset,
) -> airlock_core::policy::Ruleset {
    let seconds = APPROVAL_EXPIRY.as_secs();
    ruleset.profile.approval_expiry = airlock_core::policy::profile::ApprovalExpiry {
        low: seconds,
        medium: seconds,
        high: seconds,
        critical: seconds,
    };
    ruleset
}

fn settings(id: &str) -> WorkerSettings {
    let mut settings = WorkerSettings::new(id);
    settings.lease_ms = LEASE_MS;
    settings.poll_ms = 100;
    settings.reclaim_every_ms = 1_000;
    settings.approval_sweep_every_ms = 5_000;
    settings
}

impl ConnectionWorld {
    fn env(
        self: &Arc<Self>,
        salt: u64,
        client: Option<usize>,
        planners: Arc<dyn PlannerFactory>,
    ) -> Env<ConnectionStore> {
        let mut tools = ToolRegistry::new();
        for (spec, _) in catalog::tools() {
            if TOOLS.contains(&spec.name.as_str()) {
                let service = Service {
                    spec,
                    world: Arc::clone(self),
                    client,
                };
                if let Err(error) = tools.register(Arc::new(service)) {
                    panic!("the catalog's services register: {error}");
                }
            }
        }
        Env {
            store: Arc::clone(&self.store),
            clock: Arc::new(self.clock.clone()),
            ids: Arc::new(SeqIds::new(salt, 1)),
            policy: airlock_core::live_policy::LivePolicy::new(
                Arc::new(short_lived_approvals(catalog::ruleset_base(
                    crate::plan::Profile::Shipped,
                ))),
                None,
            ),
            tools: Arc::new(tools),
            workspaces: None,
            planners,
            faults: Arc::new(ClaimPause {
                rng: Mutex::new(SimRng::new(self.plan.seed, 100 + salt)),
                max_ms: self.plan.claim_pause_ms,
            }),
        }
    }

    /// Starts a gateway process's parts: its worker, one connection (its driver, renewal and
    /// sweeps running); returns the driver, the live connection and its session.
    /// A gateway process's driver of its client's conversation: its own connection (a stdio
    /// client, or an HTTP session), or, for a client of `keyed` (one that declared tasks), the
    /// sessionless conversation of its key (SPEC §22.1), which the gateway joins and which
    /// outlives the process: a restarted host's gateway joins the same one.
    fn open_gateway(
        self: &Arc<Self>,
        salt: u64,
        connection: u64,
        (client, keyed): (Option<usize>, Option<usize>),
        name: &str,
    ) -> (
        Arc<ConnectionDriver<ConnectionStore>>,
        Arc<LiveConnection>,
        SessionId,
    ) {
        // The session is known once the driver opened it; the factory needs it first.
        let placeholder = Arc::new(Mutex::new(None::<Arc<OneConnection>>));
        struct Late(Arc<Mutex<Option<Arc<OneConnection>>>>);
        impl PlannerFactory for Late {
            fn for_run(&self, run: &Run) -> Result<Arc<dyn Planner>, PlannerError> {
                match lock(&self.0).as_ref() {
                    Some(factory) => factory.for_run(run),
                    None => Err(PlannerError("not open yet".into())),
                }
            }
        }
        let env = self.env(salt, client, Arc::new(Late(Arc::clone(&placeholder))));
        let worker = Worker::new(env, settings(name));
        let scopes: ScopeSet = platform_scopes();
        let template = RunTemplate {
            principal_scopes: scopes,
            origin_trust: TrustLevel::User,
            limits: Limits {
                max_steps: 1000,
                max_tool_calls: 1000,
                deadline_seconds: None,
            },
            conversation_calls: None,
            upstreams: String::new(),
        };
        let opened = match keyed {
            Some(index) => ConnectionDriver::join(
                Arc::clone(&worker),
                "acme",
                "alice",
                ConversationKey::of("alice", None, &format!("client{index}")),
                CONVERSATION_IDLE_SECONDS,
                true,
                template,
            ),
            None => ConnectionDriver::open(
                Arc::clone(&worker),
                LiveConnection::new(
                    airlock_core::ids::ConnectionId(SeqIds::new(connection, 0).new_uuid()),
                    true,
                ),
                "acme",
                "alice",
                template,
            ),
        };
        let driver = match opened {
            Ok(driver) => Arc::new(driver),
            Err(error) => panic!("OPEN of a simulated connection failed: {error}"),
        };
        let live = Arc::clone(driver.live());
        let session = driver.connection().session_id;
        lock(&self.store.lives).insert(session, Arc::clone(&live));
        *lock(&placeholder) = Some(Arc::new(OneConnection {
            session,
            live: Arc::clone(&live),
            store: Arc::clone(&self.store),
        }));
        let running = Arc::clone(&driver);
        madsim::task::spawn(async move {
            let _ = running.run().await;
        });
        let renewing = Arc::clone(&driver);
        madsim::task::spawn(async move { renewing.keep_alive().await });
        let sweeping = Arc::clone(&worker);
        madsim::task::spawn(async move {
            loop {
                sleep(Duration::from_millis(1_000)).await;
                let _ = sweeping.sweep_connections().await;
                let _ = sweeping.reclaim().await;
            }
        });
        (driver, live, session)
    }

    /// The client's side of an answer: when it is untrusted content, the time the client had
    /// it (every call of the conversation proposed after that must be tainted, §22.2).
    fn watch(self: &Arc<Self>, session: SessionId, ticket: &Ticket) {
        let world = Arc::clone(self);
        let ticket = ticket.clone();
        madsim::task::spawn(async move {
            if let TicketEnd::Answered(CallAnswer::Executed {
                trust: TrustLevel::ExternalUntrusted,
                ..
            }) = ticket.ended().await
            {
                let now = world.clock.now();
                lock(&world.untrusted_answers).push((session, now));
            }
        });
    }

    /// A gateway process with one client.
    async fn gateway_main(self: Arc<Self>, index: usize) {
        let plan = self.plan.clients[index].clone();
        let (driver, live, session) = self.open_gateway(
            10 + index as u64,
            1_000 + index as u64,
            (Some(index), plan.tasks.then_some(index)),
            &format!("gw{index}"),
        );
        lock(&self.gateway_sessions).insert(index, session);
        // The client, and its gateway's side of tasks (one id source for all of them).
        let tasks = Arc::new(Tasks::new(
            self.env(70 + index as u64, Some(index), Arc::new(NoPlanner)),
            "acme",
            "alice",
        ));
        let started = Instant::now();
        let mut tickets = Vec::new();
        for (n, (at, tool)) in plan.calls.iter().enumerate() {
            if started.elapsed() >= plan.fate_at {
                break;
            }
            let wait = at.saturating_sub(started.elapsed());
            let until_fate = plan.fate_at.saturating_sub(started.elapsed());
            sleep(wait.min(until_fate)).await;
            if started.elapsed() >= plan.fate_at {
                break;
            }
            // Each request of a sessionless conversation pushes its horizon, as the listener does.
            let _ = driver.touch();
            let ticket = live.submit(
                n as u64,
                ClientCall {
                    tool: TOOLS[*tool].to_owned(),
                    arguments: json!({"text": format!("c{index}-{n}")}),
                },
            );
            self.watch(session, &ticket);
            if plan.tasks {
                let world = Arc::clone(&self);
                let (live, watched) = (Arc::clone(&live), ticket.clone());
                let tasks = Arc::clone(&tasks);
                madsim::task::spawn(async move {
                    world.answer_as_task(index, n, &live, &watched, tasks).await;
                });
            }
            if plan.input_required {
                let world = Arc::clone(&self);
                let (live, watched) = (Arc::clone(&live), ticket.clone());
                let call = ClientCall {
                    tool: TOOLS[*tool].to_owned(),
                    arguments: json!({"text": format!("c{index}-{n}")}),
                };
                madsim::task::spawn(async move {
                    world
                        .retry_with_state(session, n, &live, watched, call)
                        .await;
                });
            }
            if plan.cancel == Some(n) {
                let cancelling = Arc::clone(&live);
                let watched = ticket.clone();
                let world = Arc::clone(&self);
                let call = ClientCall {
                    tool: TOOLS[*tool].to_owned(),
                    arguments: json!({"text": format!("c{index}-{n}")}),
                };
                let resend_after = plan.resend_after;
                madsim::task::spawn(async move {
                    for _ in 0..200 {
                        if matches!(
                            watched.status(),
                            airlock_core::connection::live::TicketStatus::Parked { .. }
                        ) {
                            cancelling.cancel(n as u64);
                            // The host sends the same call again (§22.3): it binds.
                            if let Some(pause) = resend_after {
                                sleep(pause).await;
                                let again = cancelling.submit(1_000 + n as u64, call);
                                world.watch(session, &again);
                            }
                            return;
                        }
                        sleep(Duration::from_millis(50)).await;
                    }
                });
            }
            lock(&self.tickets).insert((index, n), ticket.clone());
            tickets.push(ticket);
        }
        sleep(plan.fate_at.saturating_sub(started.elapsed())).await;
        match plan.fate {
            // A crash is the supervisor's: it kills this node at `fate_at`.
            Fate::Crash => std::future::pending::<()>().await,
            Fate::Disconnect => {
                let _ = driver.disconnect();
                self.store.client_left(session);
                std::future::pending::<()>().await;
            }
        }
    }

    /// The host of client `index` restarted after its gateway died: a new gateway and
    /// connection, and every call of the dead one that was never answered (and not cancelled
    /// by the client) sent again at once, with identical arguments.
    async fn retry_main(self: Arc<Self>, index: usize) {
        let plan = self.plan.clients[index].clone();
        let (driver, live, session) = self.open_gateway(
            50 + index as u64,
            2_000 + index as u64,
            (None, plan.tasks.then_some(index)),
            &format!("gw{index}r"),
        );
        // A task is polled, not sent again (§22.3 item 1): the restarted host still holds it.
        let held: Vec<(String, RunId)> = lock(&self.tasks)
            .iter()
            .filter(|((client, _), _)| *client == index)
            .map(|(_, task)| task.clone())
            .collect();
        let tasks = Arc::new(Tasks::new(
            self.env(90 + index as u64, None, Arc::new(NoPlanner)),
            "acme",
            "alice",
        ));
        for (id, run) in held.iter().cloned() {
            let world = Arc::clone(&self);
            let (live, tasks) = (Arc::clone(&live), Arc::clone(&tasks));
            madsim::task::spawn(async move {
                world.poll_task(&tasks, &id, run, &live, true).await;
            });
        }
        let tasked = |n: usize| lock(&self.tasks).contains_key(&(index, n));
        let unanswered: Vec<usize> = lock(&self.tickets)
            .iter()
            .filter(|((client, n), ticket)| {
                *client == index
                    && plan.cancel != Some(*n)
                    && !matches!(ticket.end(), Some(TicketEnd::Answered(_)))
            })
            .map(|((_, n), _)| *n)
            .filter(|n| !tasked(*n))
            .collect();
        for n in unanswered {
            let ticket = live.submit(
                n as u64,
                ClientCall {
                    tool: TOOLS[plan.calls[n].1].to_owned(),
                    arguments: json!({"text": format!("c{index}-{n}")}),
                },
            );
            self.watch(session, &ticket);
        }
        sleep(plan.retry_stays).await;
        let _ = driver.disconnect();
        self.store.client_left(session);
        std::future::pending::<()>().await;
    }

    /// A client that declared tasks (§22.3 item 1): once call `n`'s request parks, it is answered
    /// as a task (the task row, the run adopted, the request detached, as the gateway does), and
    /// the client polls it.
    async fn answer_as_task(
        self: Arc<Self>,
        index: usize,
        n: usize,
        live: &Arc<LiveConnection>,
        ticket: &Ticket,
        tasks: Arc<Tasks<ConnectionStore>>,
    ) {
        let run = loop {
            match ticket.status() {
                TicketStatus::Parked { run, .. } => break run,
                _ if ticket.end().is_some() => return,
                _ => sleep(Duration::from_millis(50)).await,
            }
        };
        let Ok(id) = tasks.open(run) else {
            return;
        };
        live.adopt(run);
        if !live.detach(n as u64) {
            return;
        }
        lock(&self.tasks).insert((index, n), (id.clone(), run));
        self.poll_task(&tasks, &id, run, live, false).await;
    }

    /// A 2026-07-28 client without tasks (§22.3 item 2): each time call `n`'s request parks it
    /// is answered `input_required` with a state sealed for alice and this call (the request
    /// detached, as the gateway does); after a drawn pause the client sends the call again
    /// with the state, checked first (core's `check_in_tx`), and the retry binds to the parked
    /// run. Half the time a leaked copy of the state is first brought back by bob: it must be
    /// refused.
    async fn retry_with_state(
        self: Arc<Self>,
        session: SessionId,
        n: usize,
        live: &Arc<LiveConnection>,
        first: Ticket,
        call: ClientCall,
    ) {
        let hash = airlock_core::canonical::arguments_hash(&call.arguments);
        let mut ticket = first;
        let mut key = n as u64;
        for round in 1..=20u64 {
            let (run, approval, expires_at) = loop {
                match ticket.status() {
                    TicketStatus::Parked {
                        run,
                        approval_id,
                        expires_at,
                    } => break (run, approval_id, expires_at),
                    _ if ticket.end().is_some() => return,
                    _ => sleep(Duration::from_millis(50)).await,
                }
            };
            let sealed = SealedCall {
                approval_id: approval,
                run_id: run,
                tenant_id: "acme".into(),
                principal_id: "alice".into(),
                tool: call.tool.clone(),
                arguments_hash: hash.clone(),
                expires_at: expires_at.as_micros(),
                answers_form: true,
            };
            if !live.detach(key) {
                return;
            }
            let (pause, leaked) = {
                let mut rng = lock(&self.rng);
                (rng.range(200, 4_000), rng.chance(0.5))
            };
            sleep(Duration::from_millis(pause)).await;
            if live.is_closed() {
                return;
            }
            let check = |principal: &str| {
                let now = self.clock.now();
                self.store.read(|tx| {
                    check_in_tx(tx, &sealed, ("acme", principal), (&call.tool, &hash), now)
                })
            };
            if leaked && let Ok(Ok(())) = check("bob") {
                lock(&self.foreign_states).push(format!(
                    "bob's retry with alice's state for approval {approval} of run {run} was accepted"
                ));
            }
            if !matches!(check("alice"), Ok(Ok(()))) {
                return;
            }
            self.state_retries.fetch_add(1, Ordering::SeqCst);
            key = 100_000 + (n as u64) * 100 + round;
            ticket = live.submit(key, call.clone());
            self.watch(session, &ticket);
        }
    }

    /// Polls task `id` every second until it ends; a poll that finds it adoptable while this
    /// gateway does not serve it adopts it (after a crash: `after_crash`).
    async fn poll_task(
        &self,
        tasks: &Tasks<ConnectionStore>,
        id: &str,
        run: RunId,
        live: &Arc<LiveConnection>,
        after_crash: bool,
    ) {
        loop {
            if live.is_closed() {
                return;
            }
            if let Ok(Ok(polled)) = tasks.poll(id) {
                if matches!(polled.view, TaskView::Answered(_) | TaskView::Cancelled) {
                    return;
                }
                if polled.adoptable && !live.serves(run) {
                    live.adopt(run);
                    if after_crash {
                        self.adopted_after_crash.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            sleep(Duration::from_millis(1_000)).await;
        }
    }

    /// Resolves pending approvals after a drawn delay, whether or not the client is still there.
    async fn approver_main(self: Arc<Self>) {
        let env = self.env(3, None, Arc::new(NoPlanner));
        let control = ControlService::new(env, Arc::new(NoDispatch), None);
        let bob = Principal {
            tenant_id: "acme".into(),
            principal_id: "bob".into(),
            scopes: platform_scopes(),
        };
        let mut scheduled: BTreeMap<airlock_core::ids::ApprovalId, Duration> = BTreeMap::new();
        let started = Instant::now();
        loop {
            sleep(Duration::from_millis(100)).await;
            let Ok(page) = control.list_pending(&bob, None, Some(100), None) else {
                continue;
            };
            for approval in page.items {
                let due = *scheduled.entry(approval.id).or_insert_with(|| {
                    let (lo, hi) = self.plan.approve_after_ms;
                    started.elapsed() + Duration::from_millis(lock(&self.rng).range(lo, hi))
                });
                if started.elapsed() < due {
                    continue;
                }
                let deny = lock(&self.rng).chance(self.plan.deny_rate);
                let resolution = if deny {
                    ApprovalResolution::Deny
                } else {
                    ApprovalResolution::ApproveOnce
                };
                let _ = control
                    .resolve(&bob, approval.id, resolution, Some("simulated"))
                    .await;
            }
        }
    }

    /// An `airlock worker` process: sweeps, RECLAIM, approval expiry, orphan claims.
    async fn worker_main(self: Arc<Self>) {
        let env = self.env(2, None, Arc::new(NoPlanner));
        let worker = Worker::new(env.clone(), settings("w"));
        let control = ControlService::new(env, Arc::new(NoDispatch), None);
        let never = || false;
        let _ = worker.run(&SimSpawner, &control, &never).await;
    }
}

/// §22.2 over the clients' side: a call of a conversation whose first transaction began after
/// the client had been answered untrusted content (its `created_at` is later) was decided as
/// tainted (`origin_trust = external_untrusted`; every client of this world is `user`).
fn tainted_after_untrusted_answers(
    snapshot: &MemSnapshot,
    answers: &[(SessionId, Timestamp)],
) -> Vec<String> {
    let mut violations = Vec::new();
    for invocation in snapshot.invocations.values() {
        let answered_before = answers
            .iter()
            .filter(|(session, _)| *session == invocation.session_id)
            .map(|(_, at)| *at)
            .min()
            .is_some_and(|at| at < invocation.created_at);
        if answered_before && invocation.origin_trust != TrustLevel::ExternalUntrusted {
            violations.push(format!(
                "invocation {} ({}) of session {} was proposed {} after an untrusted answer, as {}",
                invocation.id,
                invocation.tool_name,
                invocation.session_id,
                invocation.created_at,
                invocation.origin_trust
            ));
        }
    }
    violations
}

/// §19.7 over the ground truth: the services' effects in the order they were taken. Two
/// effects of identical non-idempotent calls (tenant, tool, effective arguments hash) taken by
/// different invocations are one effect repeated unless the earlier invocation's known outcome
/// committed before the later one's START (then the later call was a new call).
fn effects_once_across_runs(
    snapshot: &MemSnapshot,
    effects: &[Effect],
    started_in: &BTreeMap<String, u64>,
    known_in: &BTreeMap<String, u64>,
) -> Vec<String> {
    let by_key: BTreeMap<&str, &airlock_core::invocation::Invocation> = snapshot
        .invocations
        .values()
        .map(|i| (i.idempotency_key.as_str(), i))
        .collect();
    let mut first_of: BTreeMap<(&str, &str, &str), &airlock_core::invocation::Invocation> =
        BTreeMap::new();
    let mut failures = Vec::new();
    for effect in effects
        .iter()
        .filter(|e| e.idempotency == IdempotencyClass::NonIdempotent)
    {
        let Some(row) = by_key.get(effect.idempotency_key.as_str()).copied() else {
            failures.push(format!(
                "an effect of {} has no invocation (key {})",
                effect.tool_name, effect.idempotency_key
            ));
            continue;
        };
        let identity = (
            row.tenant_id.as_str(),
            row.tool_name.as_str(),
            row.effective_arguments_hash.as_str(),
        );
        let Some(earlier) = first_of.insert(identity, row) else {
            continue;
        };
        if earlier.id == row.id {
            continue;
        }
        let known = known_in.get(&earlier.id.to_string());
        let started = started_in.get(&row.id.to_string());
        let new_call = matches!((known, started), (Some(known), Some(started)) if known < started);
        if !new_call {
            failures.push(format!(
                "{} {}: invocation {} (run {}) took the effect of invocation {} (run {}) again; \
                 the earlier outcome was {} when the later one STARTed (commit {:?}, known in {:?})",
                row.tool_name,
                row.arguments,
                row.id,
                row.run_id,
                earlier.id,
                earlier.run_id,
                if known.is_some() { "not yet known" } else { "never known" },
                started,
                known,
            ));
        }
    }
    failures
}

/// What one seed found.
pub struct ConnectionReport {
    pub seed: u64,
    pub violations: Vec<Violation>,
    pub runs: usize,
    pub calls: usize,
    pub effects: usize,
    pub connections: usize,
    /// Calls of a restarted host refused `policy.uncertain.in_flight` / `.repeat` (§19.7).
    pub refused_in_flight: usize,
    pub refused_repeat: usize,
    /// Calls STARTed for an identical call sent again on another connection after their own
    /// client had left (§22.3).
    pub rebound_starts: u64,
    /// Tasks answered (§22.3 item 1), and task runs a restarted host's gateway adopted.
    pub tasks: usize,
    pub adopted_after_crash: u64,
    /// Retries that brought back a sealed state and moved their call (§22.3 item 2).
    pub state_retries: u64,
    pub plan: Value,
}

fn liveness(snapshot: &MemSnapshot) -> Vec<Violation> {
    let mut found = Vec::new();
    for connection in snapshot.connections.values() {
        if connection.is_open() {
            found.push(Violation {
                invariant: "§19.4 connection closed",
                detail: format!(
                    "connection {} still open after the quiet phase",
                    connection.id
                ),
            });
        }
    }
    for run in snapshot.runs.values() {
        if !run.status().is_terminal() {
            found.push(Violation {
                invariant: "§19.4 liveness",
                detail: format!(
                    "run {} of a gone client is {} after the quiet phase",
                    run.id,
                    run.status().as_str()
                ),
            });
        }
    }
    found
}

/// Runs one seed of the connection world.
pub fn run_seed(seed: u64) -> ConnectionReport {
    let plan = ConnectionPlan::new(seed);
    let described = plan.describe();
    let mut runtime =
        madsim::runtime::Runtime::with_seed_and_config(seed, madsim::Config::default());
    runtime.set_time_limit(WORKLOAD + QUIET_BOUND + Duration::from_secs(60));
    let (snapshot, effects, mut violations, (rebound_starts, adopted_after_crash, state_retries)) =
        runtime.block_on(simulate(plan));
    violations.extend(check(&snapshot, &effects, 3));
    violations.extend(liveness(&snapshot));
    let refused = |code: &str| {
        snapshot
            .events
            .iter()
            .filter(|e| {
                e.event_type == EventType::ToolCallDenied && e.payload["reason_code"] == code
            })
            .count()
    };
    ConnectionReport {
        seed,
        refused_in_flight: refused("policy.uncertain.in_flight"),
        refused_repeat: refused("policy.uncertain.repeat"),
        rebound_starts,
        tasks: snapshot.call_tasks.len(),
        adopted_after_crash,
        state_retries,
        runs: snapshot.runs.len(),
        calls: snapshot.invocations.len(),
        effects: effects.len(),
        connections: snapshot.connections.len(),
        violations,
        plan: described,
    }
}

async fn simulate(
    plan: ConnectionPlan,
) -> (MemSnapshot, Vec<Effect>, Vec<Violation>, (u64, u64, u64)) {
    let seed = plan.seed;
    let world = Arc::new(ConnectionWorld {
        store: Arc::new(ConnectionStore::new()),
        clock: SimClock::starting_now(),
        effects: Mutex::new(Vec::new()),
        rng: Mutex::new(SimRng::new(seed, 20)),
        tickets: Mutex::new(BTreeMap::new()),
        crash_requests: Mutex::new(BTreeSet::new()),
        untrusted_answers: Mutex::new(Vec::new()),
        unwaited: Mutex::new(Vec::new()),
        gateway_sessions: Mutex::new(BTreeMap::new()),
        tasks: Mutex::new(BTreeMap::new()),
        adopted_after_crash: AtomicU64::new(0),
        foreign_states: Mutex::new(Vec::new()),
        state_retries: AtomicU64::new(0),
        plan,
    });
    let handle = Handle::current();
    let mut gateways = Vec::new();
    for index in 0..world.plan.clients.len() {
        let w = Arc::clone(&world);
        let node = handle
            .create_node()
            .name(format!("gw{index}"))
            .init(move || Arc::clone(&w).gateway_main(index))
            .build();
        gateways.push(node.id());
    }
    let w = Arc::clone(&world);
    let worker = handle
        .create_node()
        .name("worker")
        .init(move || Arc::clone(&w).worker_main())
        .build();
    let w = Arc::clone(&world);
    let approver = handle
        .create_node()
        .name("approver")
        .init(move || Arc::clone(&w).approver_main())
        .build();
    // Crashes at their drawn times, or right after a service took an aimed effect; then the
    // host's restart, if it has one.
    let started = Instant::now();
    let restarts = Arc::new(Mutex::new(Vec::new()));
    for (index, client) in world.plan.clients.iter().enumerate() {
        if client.fate != Fate::Crash {
            continue;
        }
        let (w, node, fate_at) = (Arc::clone(&world), gateways[index], client.fate_at);
        let restarts = Arc::clone(&restarts);
        let handle = handle.clone();
        madsim::task::spawn(async move {
            while started.elapsed() < fate_at && !lock(&w.crash_requests).contains(&index) {
                sleep(Duration::from_millis(5)).await;
            }
            handle.kill(node);
            if let Some(session) = lock(&w.gateway_sessions).get(&index) {
                lock(&w.store.lives).remove(session);
            }
            let Some(pause) = w.plan.clients[index].retry_after else {
                return;
            };
            sleep(pause).await;
            let host = Arc::clone(&w);
            let node = handle
                .create_node()
                .name(format!("gw{index}r"))
                .init(move || Arc::clone(&host).retry_main(index))
                .build();
            lock(&restarts).push(node.id());
        });
    }
    sleep(WORKLOAD.saturating_sub(started.elapsed())).await;
    // Quiet: no new calls (every client has met its fate); wait until every run is terminal
    // and every connection closed.
    let quiet_start = Instant::now();
    while quiet_start.elapsed() < QUIET_BOUND {
        let settled = world.store.inner.inspect(|s| {
            s.runs.values().all(|r| r.status().is_terminal())
                && s.connections.values().all(|c| !c.is_open())
        });
        if settled {
            break;
        }
        sleep(Duration::from_millis(500)).await;
    }
    let restarted: Vec<_> = lock(&restarts).clone();
    for id in gateways
        .into_iter()
        .chain(restarted)
        .chain([worker.id(), approver.id()])
    {
        handle.kill(id);
    }
    let snapshot = world.store.inner.snapshot();
    let effects = std::mem::take(&mut *lock(&world.effects));
    let mut violations: Vec<Violation> = lock(&world.store.violations)
        .drain(..)
        .map(|detail| Violation {
            invariant: "§19.4 no call of a disconnected client is sent after the disconnect committed",
            detail,
        })
        .collect();
    violations.extend(
        effects_once_across_runs(
            &snapshot,
            &effects,
            &lock(&world.store.started_in),
            &lock(&world.store.known_in),
        )
        .into_iter()
        .map(|detail| Violation {
            invariant: "§19.7 no effect of a non-idempotent call happens twice, across runs and connections",
            detail,
        }),
    );
    violations.extend(
        lock(&world.foreign_states)
            .drain(..)
            .map(|detail| Violation {
                invariant: "§22.3 a sealed requestState moves only its own principal's call",
                detail,
            }),
    );
    violations.extend(lock(&world.unwaited).drain(..).map(|detail| Violation {
        invariant: "§22.3 outside tasks, an approved call executes only while a request waits for it",
        detail,
    }));
    violations.extend(
        tainted_after_untrusted_answers(&snapshot, &lock(&world.untrusted_answers))
            .into_iter()
            .map(|detail| Violation {
                invariant: "§22.2 every call proposed after an untrusted result was answered is tainted",
                detail,
            }),
    );
    let log = world.store.inner.log();
    for detail in log.violations.iter().chain(log.refused.iter()) {
        violations.push(Violation {
            invariant: "§16 #15 rows",
            detail: detail.clone(),
        });
    }
    for detail in &log.started_after_cancel {
        violations.push(Violation {
            invariant: "§8.5 START after cancel",
            detail: detail.clone(),
        });
    }
    let rebound_starts = world.store.rebound_starts.load(Ordering::SeqCst);
    let adopted = world.adopted_after_crash.load(Ordering::SeqCst);
    let state_retries = world.state_retries.load(Ordering::SeqCst);
    (
        snapshot,
        effects,
        violations,
        (rebound_starts, adopted, state_retries),
    )
}
