//! A live client as a planner (SPEC §19.1): the client's `tools/call` requests become one-call
//! steps of its session's run, and each request is answered from what committed.
//!
//! Three parts, all free of I/O:
//! - [`LiveConnection`], the mailbox a gateway hands requests into ([`LiveConnection::submit`])
//!   and takes answers from ([`Ticket`]); it also carries client cancellations and the
//!   disconnect.
//! - [`LivePlanner`], the run's planner: asked for step k, it first answers the request it
//!   handed out for step k−1 (with §17.1 folding, that step's BATCH committed with its last
//!   FINISH, so its answer is in the store), then hands out the next request as call `r{k}`,
//!   or ends the run when the client has gone and nothing is waiting.
//! - [`ConnectionDriver`], which keeps the connection's runs moving: it opens a run on the first
//!   request (and after one ends), claims it for this connection only, executes it through the
//!   worker, waits while it is parked (any process may resolve the approval), re-claims it when
//!   it is queued again, applies client cancellations (§8.5) and, when the client goes, commits
//!   DISCONNECT ([`super::close_in_tx`]).
//!
//! Requests are taken in arrival order, one per step. A request that a run never recorded
//! (the run ended between the planner's turn and PENDING: a budget, the step limit or the
//! deadline) is handed to the next run, since nothing was decided about it.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use serde_json::{Value, json};

use super::answer::{CallAnswer, CallState, call_state};
use super::{CloseReason, Connection, ConnectionState};
use crate::events::{Actor, EventType, NewEvent};
use crate::ids::{ApprovalId, ConnectionId, RunId};
use crate::ports::{BoxFut, Planner, PlannerError, PlannerInput, PlannerTurn, ProposedCall};
use crate::run::checkpoint::{Checkpoint, CheckpointState};
use crate::run::{Limits, Run, RunState};
use crate::scope::ScopeSet;
use crate::session::Session;
use crate::store::{Store, StoreTx, TxError};
use crate::time::Timestamp;
use crate::vocab::{CancelReason, CheckpointTrigger, RunStatus, TrustLevel};
use crate::worker::Worker;

/// The `runs.planner_kind` of a run whose planner is a live client connection.
pub const MCP_PLANNER_KIND: &str = "mcp";

/// The final message of a run whose client went while nothing was outstanding.
pub const DISCONNECTED_MESSAGE: &str = "client disconnected";

/// The gateway's own key for one client request (unique per connection).
pub type RequestKey = u64;

/// One `tools/call` as the gateway hands it in: the tool's internal name and the arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientCall {
    pub tool: String,
    pub arguments: Value,
}

/// Where a request stands, for progress notifications.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TicketStatus {
    /// Waiting for its turn in the run.
    Queued,
    /// Handed to the run as call `call_id` of `step`.
    Proposed { run: RunId, step: u32 },
    /// Waiting for approval `approval_id` until `expires_at`.
    Parked {
        run: RunId,
        approval_id: ApprovalId,
        expires_at: Timestamp,
    },
}

/// How a request ends.
#[derive(Debug, Clone, PartialEq)]
pub enum TicketEnd {
    Answered(CallAnswer),
    /// Cancelled by the client, or the client went: no answer is sent (§19.3).
    Dropped,
}

#[derive(Debug)]
struct Slot {
    status: TicketStatus,
    end: Option<TicketEnd>,
    waker: Option<Waker>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A request's handle: its status now, and its end once decided.
#[derive(Debug, Clone)]
pub struct Ticket(Arc<Mutex<Slot>>);

impl Ticket {
    fn new() -> Ticket {
        Ticket(Arc::new(Mutex::new(Slot {
            status: TicketStatus::Queued,
            end: None,
            waker: None,
        })))
    }

    pub fn status(&self) -> TicketStatus {
        lock(&self.0).status.clone()
    }

    /// The end, if decided.
    pub fn end(&self) -> Option<TicketEnd> {
        lock(&self.0).end.clone()
    }

    /// Resolves when the end is decided.
    pub fn ended(&self) -> TicketWait {
        TicketWait(self.clone())
    }

    fn set_status(&self, status: TicketStatus) {
        lock(&self.0).status = status;
    }

    /// Decides the end once; later calls change nothing.
    fn finish(&self, end: TicketEnd) {
        let waker = {
            let mut slot = lock(&self.0);
            if slot.end.is_some() {
                return;
            }
            slot.end = Some(end);
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The future of [`Ticket::ended`].
pub struct TicketWait(Ticket);

impl Future for TicketWait {
    type Output = TicketEnd;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<TicketEnd> {
        let mut slot = lock(&(self.0).0);
        match &slot.end {
            Some(end) => Poll::Ready(end.clone()),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

#[derive(Debug)]
struct Entry {
    key: RequestKey,
    call: ClientCall,
    ticket: Ticket,
}

/// A request handed to a run, until it is answered.
#[derive(Debug)]
struct Handed {
    entry: Entry,
    run: RunId,
    step: u32,
}

impl Handed {
    fn call_id(&self) -> String {
        call_id_of(self.step)
    }
}

/// `r{n}` (SPEC §19.1): one call per step, so n is the step number.
pub fn call_id_of(step: u32) -> String {
    format!("r{step}")
}

#[derive(Debug, Default)]
struct Mailbox {
    queue: VecDeque<Entry>,
    handed: Vec<Handed>,
    /// Requests the client cancelled after they were handed to a run.
    cancelled: Vec<RequestKey>,
    closed: bool,
    /// Whether the planner is waiting for a request with nothing outstanding.
    planner_idle: bool,
    wakers: Vec<Waker>,
}

impl Mailbox {
    fn wake_all(&mut self) -> Vec<Waker> {
        std::mem::take(&mut self.wakers)
    }
}

/// The mailbox between a gateway's client and the connection's runs.
#[derive(Debug)]
pub struct LiveConnection {
    id: ConnectionId,
    /// `origin_trust = "user"` in the gateway's file: arguments are the user's until the run is
    /// tainted; otherwise they are `external_untrusted` (the pipeline's default).
    arguments_from_user: bool,
    /// Set once a read outside the journal (§19.6) returned tainting content; never cleared,
    /// since the client keeps that content for the rest of the connection.
    read_tainted: AtomicBool,
    mailbox: Mutex<Mailbox>,
}

impl LiveConnection {
    pub fn new(id: ConnectionId, arguments_from_user: bool) -> Arc<LiveConnection> {
        Arc::new(LiveConnection {
            id,
            arguments_from_user,
            read_tainted: AtomicBool::new(false),
            mailbox: Mutex::new(Mailbox::default()),
        })
    }

    pub fn id(&self) -> ConnectionId {
        self.id
    }

    fn with<R>(&self, f: impl FnOnce(&mut Mailbox) -> R) -> R {
        let (result, wakers) = {
            let mut mailbox = lock(&self.mailbox);
            let result = f(&mut mailbox);
            (result, mailbox.wake_all())
        };
        for waker in wakers {
            waker.wake();
        }
        result
    }

    /// A read outside the journal (an MCP `resources/read` or `prompts/get`, §19.6) returned
    /// content of `trust` to the client. Tainting content taints every run of the connection
    /// from its next step on (the executor checkpoints it at that step's PENDING, §8.6): the
    /// active run, and a run not started yet, because the client holds the content for the
    /// rest of the connection. Call it before the content is sent, so that no call the client
    /// writes after reading it is proposed untainted.
    pub fn note_read_content(&self, trust: TrustLevel) {
        if super::read::taints(trust) {
            self.read_tainted.store(true, Ordering::SeqCst);
        }
    }

    /// Whether a read outside the journal returned tainting content on this connection.
    pub fn tainted_by_read(&self) -> bool {
        self.read_tainted.load(Ordering::SeqCst)
    }

    /// Hands in a request; its ticket resolves once it is answered or dropped.
    pub fn submit(&self, key: RequestKey, call: ClientCall) -> Ticket {
        let ticket = Ticket::new();
        let accepted = self.with(|m| {
            if m.closed {
                return false;
            }
            m.queue.push_back(Entry {
                key,
                call,
                ticket: ticket.clone(),
            });
            true
        });
        if !accepted {
            ticket.finish(TicketEnd::Dropped);
        }
        ticket
    }

    /// The client cancelled request `key` (`notifications/cancelled`): a request still waiting
    /// for its turn is dropped here; one already handed to a run cancels that run (§19.3), which
    /// the driver applies.
    pub fn cancel(&self, key: RequestKey) {
        let dropped = self.with(|m| {
            if let Some(position) = m.queue.iter().position(|e| e.key == key) {
                return m.queue.remove(position).map(|e| e.ticket);
            }
            if m.handed.iter().any(|h| h.entry.key == key) && !m.cancelled.contains(&key) {
                m.cancelled.push(key);
            }
            None
        });
        if let Some(ticket) = dropped {
            ticket.finish(TicketEnd::Dropped);
        }
    }

    /// The client has gone: nothing more is accepted, and waiting requests are dropped.
    pub fn close(&self) {
        let dropped: Vec<Ticket> = self.with(|m| {
            m.closed = true;
            m.queue.drain(..).map(|e| e.ticket).collect()
        });
        for ticket in dropped {
            ticket.finish(TicketEnd::Dropped);
        }
    }

    pub fn is_closed(&self) -> bool {
        lock(&self.mailbox).closed
    }

    /// Whether the planner waits for a request with nothing handed out: ending the run now
    /// leaves nothing undone.
    fn is_idle(&self) -> bool {
        let m = lock(&self.mailbox);
        m.planner_idle && m.handed.is_empty() && m.queue.is_empty()
    }

    /// Resolves when `ready` holds for the mailbox.
    fn until(&self, ready: fn(&Mailbox) -> bool) -> MailboxWait<'_> {
        MailboxWait { live: self, ready }
    }

    /// Answers the handed requests of `run` that the store has answered, and notes parked ones.
    /// With `ended`, the run is terminal: requests it never recorded go back to the queue's
    /// front (a later run takes them), except after a cancellation, when they are dropped.
    fn settle<S: Store>(&self, store: &S, run: RunId, ended: Option<RunStatus>) {
        let handed: Vec<(RequestKey, u32, String)> = self.with(|m| {
            m.handed
                .iter()
                .filter(|h| h.run == run)
                .map(|h| (h.entry.key, h.step, h.call_id()))
                .collect()
        });
        if handed.is_empty() {
            return;
        }
        let states = store.read(|tx| {
            handed
                .iter()
                .map(|(key, step, call_id)| Ok((*key, call_state(tx, run, *step, call_id)?)))
                .collect::<Result<Vec<_>, TxError>>()
        });
        // A failed read changes nothing: the next settle reads again.
        let Ok(states) = states else { return };
        let mut finished: Vec<(Ticket, TicketEnd)> = Vec::new();
        self.with(|m| {
            for (key, state) in states {
                let Some(position) = m.handed.iter().position(|h| h.entry.key == key) else {
                    continue;
                };
                let cancelled = m.cancelled.contains(&key);
                match state {
                    CallState::Answered(answer) => {
                        let handed = m.handed.remove(position);
                        m.cancelled.retain(|k| *k != key);
                        // A client that cancelled, or has gone, gets no answer (§19.3).
                        let end = if cancelled || m.closed {
                            TicketEnd::Dropped
                        } else {
                            TicketEnd::Answered(answer)
                        };
                        finished.push((handed.entry.ticket, end));
                    }
                    CallState::Parked { approval } => {
                        m.handed[position]
                            .entry
                            .ticket
                            .set_status(TicketStatus::Parked {
                                run,
                                approval_id: approval.id,
                                expires_at: approval.expires_at,
                            });
                    }
                    CallState::InFlight => {}
                    CallState::Unrecorded => {
                        if ended.is_some() {
                            let handed = m.handed.remove(position);
                            m.cancelled.retain(|k| *k != key);
                            if cancelled || m.closed || ended == Some(RunStatus::Cancelled) {
                                finished.push((handed.entry.ticket, TicketEnd::Dropped));
                            } else {
                                handed.entry.ticket.set_status(TicketStatus::Queued);
                                m.queue.push_front(handed.entry);
                            }
                        }
                    }
                }
            }
        });
        for (ticket, end) in finished {
            ticket.finish(end);
        }
    }

    /// Whether the client cancelled a request handed to `run`.
    fn take_cancelled(&self, run: RunId) -> bool {
        self.with(|m| {
            m.handed
                .iter()
                .any(|h| h.run == run && m.cancelled.contains(&h.entry.key))
        })
    }
}

/// The future of [`LiveConnection::until`].
struct MailboxWait<'a> {
    live: &'a LiveConnection,
    ready: fn(&Mailbox) -> bool,
}

impl Future for MailboxWait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut m = lock(&self.live.mailbox);
        if (self.ready)(&m) {
            Poll::Ready(())
        } else {
            m.wakers.push(cx.waker().clone());
            Poll::Pending
        }
    }
}

/// The planner of a run bound to a live connection.
pub struct LivePlanner<S: Store> {
    live: Arc<LiveConnection>,
    store: Arc<S>,
}

impl<S: Store> LivePlanner<S> {
    pub fn new(live: Arc<LiveConnection>, store: Arc<S>) -> LivePlanner<S> {
        LivePlanner { live, store }
    }
}

impl<S: Store + 'static> Planner for LivePlanner<S> {
    /// The client keeps its own transcript: no step records are read for it (§17.2).
    fn wants_history(&self) -> bool {
        false
    }

    fn tainted_outside_journal(&self) -> bool {
        self.live.tainted_by_read()
    }

    fn next_turn<'a>(
        &'a self,
        input: PlannerInput<'a>,
    ) -> BoxFut<'a, Result<PlannerTurn, PlannerError>> {
        Box::pin(async move {
            let run = input.run.id;
            let step = input.step;
            // Asked for step k: every earlier step of this run has committed (§17.1 F4).
            self.live.settle(self.store.as_ref(), run, None);
            // A request handed out for this very step before an abandoned execution: the same
            // call again (nothing of it was recorded).
            let again = self.live.with(|m| {
                m.handed
                    .iter()
                    .find(|h| h.run == run && h.step == step)
                    .map(|h| h.entry.call.clone())
            });
            let call = match again {
                Some(call) => Some(call),
                None => {
                    self.live.with(|m| m.planner_idle = true);
                    self.live.until(|m| !m.queue.is_empty() || m.closed).await;
                    self.live.with(|m| {
                        m.planner_idle = false;
                        let entry = m.queue.pop_front()?;
                        entry
                            .ticket
                            .set_status(TicketStatus::Proposed { run, step });
                        let call = entry.call.clone();
                        m.handed.push(Handed { entry, run, step });
                        Some(call)
                    })
                }
            };
            let Some(call) = call else {
                return Ok(PlannerTurn::Final {
                    message: DISCONNECTED_MESSAGE.to_owned(),
                });
            };
            // `user` until the run is tainted (§19.3): the checkpoint's taint, not a copy of it,
            // or a read outside the journal (§19.6) before this call was handed out.
            let arguments_from_user = self.live.arguments_from_user && !self.live.tainted_by_read();
            let argument_trust: BTreeMap<String, TrustLevel> =
                match (&call.arguments, arguments_from_user && !input.tainted) {
                    (Value::Object(map), true) => {
                        map.keys().map(|k| (k.clone(), TrustLevel::User)).collect()
                    }
                    _ => BTreeMap::new(),
                };
            Ok(PlannerTurn::Calls(vec![ProposedCall {
                call_id: call_id_of(step),
                tool: call.tool,
                version: None,
                arguments: call.arguments,
                argument_trust,
            }]))
        })
    }
}

/// What a connection's runs are submitted with (from the gateway's file, §19.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunTemplate {
    pub principal_scopes: ScopeSet,
    pub origin_trust: TrustLevel,
    pub limits: Limits,
}

/// Keeps one connection's runs moving; see the module docs.
pub struct ConnectionDriver<S: Store> {
    worker: Arc<Worker<S>>,
    live: Arc<LiveConnection>,
    connection: Connection,
    template: RunTemplate,
}

/// How often a driver looks at a parked or not-yet-due run: the worker's poll interval.
fn poll_micros<S: Store + 'static>(worker: &Worker<S>) -> i64 {
    i64::try_from(worker.settings().poll_ms)
        .unwrap_or(250)
        .saturating_mul(1000)
}

impl<S: Store + 'static> ConnectionDriver<S> {
    /// OPEN: a new session and its connection, alive for one lease.
    pub fn open(
        worker: Arc<Worker<S>>,
        live: Arc<LiveConnection>,
        tenant_id: &str,
        principal_id: &str,
        template: RunTemplate,
    ) -> Result<ConnectionDriver<S>, TxError> {
        let env = worker.env();
        let now = env.clock.now();
        let session_id = crate::ids::SessionId(env.new_uuid());
        let lease_ms = i64::try_from(worker.settings().lease_ms).unwrap_or(30_000);
        let connection = Connection {
            id: live.id(),
            tenant_id: tenant_id.to_owned(),
            principal_id: principal_id.to_owned(),
            session_id,
            gateway_id: worker.settings().worker_id.clone(),
            state: ConnectionState::Open {
                alive_until: now.saturating_add_micros(lease_ms.saturating_mul(1000)),
            },
            opened_at: now,
        };
        env.transact(|tx| {
            tx.insert_session(&Session {
                id: session_id,
                tenant_id: tenant_id.to_owned(),
                principal_id: principal_id.to_owned(),
                next_event_sequence: 1,
                created_at: now,
            })?;
            super::open_in_tx(tx, &connection, now)
        })?;
        Ok(ConnectionDriver {
            worker,
            live,
            connection,
            template,
        })
    }

    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    pub fn live(&self) -> &Arc<LiveConnection> {
        &self.live
    }

    /// RENEW every lease/3 until the connection closes. Returns when it is closed, by this
    /// process or by a sweep (then the mailbox is closed too, so the gateway stops serving).
    pub async fn keep_alive(&self) {
        let env = self.worker.env();
        let lease_micros = i64::try_from(self.worker.settings().lease_ms)
            .unwrap_or(30_000)
            .saturating_mul(1000);
        loop {
            let next = env
                .clock
                .now()
                .saturating_add_micros((lease_micros / 3).max(1));
            env.clock.sleep_until(next).await;
            let now = env.clock.now();
            let until = now.saturating_add_micros(lease_micros);
            match env.transact(|tx| super::renew_in_tx(tx, self.connection.id, until)) {
                Ok(true) => {}
                Ok(false) => {
                    self.live.close();
                    return;
                }
                // A transient storage error: the next renewal tries again before expiry.
                Err(_) => {}
            }
        }
    }

    /// DISCONNECT: the client has gone. When the run waits for a request with nothing
    /// outstanding, the planner ends it COMPLETED ([`DISCONNECTED_MESSAGE`]) and [`Self::run`]
    /// commits the close afterwards; otherwise the close commits now, cancelling a parked or
    /// queued run at once and flagging a running one (its START observations then refuse every
    /// further call, §19.4).
    pub fn disconnect(&self) -> Result<(), TxError> {
        let idle = self.live.is_idle();
        self.live.close();
        if idle {
            return Ok(());
        }
        self.close_now()
    }

    fn close_now(&self) -> Result<(), TxError> {
        let env = self.worker.env();
        let now = env.clock.now();
        let flagged = env.transact(|tx| {
            super::close_in_tx(tx, self.connection.id, CloseReason::Disconnected, now)
        })?;
        if let Some(run) = flagged {
            self.worker.tokens().cancel(run, CancelReason::Requested);
        }
        Ok(())
    }

    /// Serves the connection until the client has gone and its last run has ended; then the
    /// connection is closed. A storage error ends the driver (the sweep closes what it left).
    pub async fn run(&self) -> Result<(), TxError> {
        loop {
            self.live.until(|m| !m.queue.is_empty() || m.closed).await;
            let active = self
                .worker
                .env()
                .read(|tx| tx.active_run_in_session(self.connection.session_id))?;
            let run = match active {
                Some(run) => run,
                None if self.live.is_closed() => break,
                None => self.submit()?,
            };
            self.drive(run).await?;
            if self.live.is_closed() && lock(&self.live.mailbox).handed.is_empty() {
                break;
            }
        }
        self.close_now()
    }

    /// SUBMIT of a connection run: QUEUED with its seed checkpoint, planner kind `mcp`.
    fn submit(&self) -> Result<RunId, TxError> {
        let env = self.worker.env();
        let now = env.clock.now();
        let run_id = RunId(env.new_uuid());
        let deadline_at = self
            .template
            .limits
            .deadline_seconds
            .map(|s| now.saturating_add_seconds(i64::from(s)));
        let run = Run {
            id: run_id,
            session_id: self.connection.session_id,
            tenant_id: self.connection.tenant_id.clone(),
            principal_id: self.connection.principal_id.clone(),
            principal_scopes: self.template.principal_scopes.clone(),
            origin_trust: self.template.origin_trust,
            planner_kind: MCP_PLANNER_KIND.to_owned(),
            planner_input: json!({"connection_id": self.connection.id.to_string()}).to_string(),
            state: RunState::Queued {
                scheduled_for: None,
            },
            step_count: 0,
            tool_call_count: 0,
            limits: self.template.limits,
            deadline_at,
            lease_epoch: 0,
            attempts: 0,
            cancel_requested_at: None,
            created_at: now,
            updated_at: now,
        };
        let actor = Actor::principal(&self.connection.principal_id);
        env.transact(|tx| insert_queued_run(tx, &run, &actor, now))?;
        Ok(run_id)
    }

    /// Moves one run until it is terminal, answering its requests as they close.
    async fn drive(&self, run_id: RunId) -> Result<(), TxError> {
        let env = self.worker.env().clone();
        let store = Arc::clone(&env.store);
        loop {
            if self.live.take_cancelled(run_id) {
                let now = env.clock.now();
                let actor = Actor::principal(&self.connection.principal_id);
                let outcome = env.transact(|tx| {
                    let run = tx.run(run_id)?.ok_or(TxError::NotFound)?;
                    crate::control::request_cancel_in_tx(tx, &run, &actor, now)
                })?;
                if outcome.0.status == RunStatus::Running {
                    self.worker.tokens().cancel(run_id, CancelReason::Requested);
                }
            }
            let run = env.read(|tx| tx.run(run_id))?.ok_or(TxError::NotFound)?;
            let status = run.status();
            self.live.settle(
                store.as_ref(),
                run_id,
                status.is_terminal().then_some(status),
            );
            let now = env.clock.now();
            let mut wake_at = now.saturating_add_micros(poll_micros(&self.worker));
            match &run.state {
                _ if status.is_terminal() => return Ok(()),
                RunState::Queued { scheduled_for } => {
                    if scheduled_for.is_none_or(|at| at <= now) {
                        if let Some((claimed, lease)) = self
                            .worker
                            .claim_for_connection(run_id, self.connection.id)
                            .await?
                        {
                            self.worker.execute(claimed, lease).await;
                            continue;
                        }
                    } else if let Some(at) = scheduled_for {
                        wake_at = wake_at.min(*at);
                    }
                }
                // Parked (any process may resolve it), or running under a lease this process
                // lost (RECLAIM will re-queue it): look again after one poll.
                RunState::WaitingForApproval | RunState::Running { .. } => {}
                _ => {}
            }
            env.clock.sleep_until(wake_at).await;
        }
    }
}

/// SUBMIT's writes for a built run: the row, its seed checkpoint, `run.queued` and
/// `run.checkpointed` (shared with [`crate::control::ControlService::submit_run`]).
pub(crate) fn insert_queued_run(
    tx: &mut dyn StoreTx,
    run: &Run,
    actor: &Actor,
    now: Timestamp,
) -> Result<(), TxError> {
    tx.insert_run(run)?;
    tx.insert_checkpoint(&Checkpoint {
        run_id: run.id,
        version: 1,
        trigger: CheckpointTrigger::Seed,
        state: CheckpointState::default(),
        created_at: now,
    })?;
    for (event_type, payload) in [
        (EventType::RunQueued, json!({"run_id": run.id.to_string()})),
        (
            EventType::RunCheckpointed,
            json!({"version": 1, "trigger": "seed"}),
        ),
    ] {
        tx.append_event(&NewEvent {
            session_id: run.session_id,
            run_id: Some(run.id),
            event_type,
            actor: actor.clone(),
            payload,
            derivation_key: None,
            created_at: now,
        })?;
    }
    Ok(())
}
