//! A live client as a planner (SPEC §19.1, §22.2): each of the client's `tools/call` requests
//! becomes a **call run** of its own (one step, one call), in the conversation's session, so the
//! calls of a conversation run side by side and a call waiting for approval delays no other.
//!
//! Three parts, all free of I/O:
//! - [`LiveConnection`], the mailbox a gateway hands requests into ([`LiveConnection::submit`])
//!   and takes answers from ([`Ticket`]); it also carries client cancellations, detaches a
//!   request from a parked call ([`LiveConnection::detach`]) and the disconnect.
//! - [`LivePlanner`], a call run's planner: asked for step 1 it hands out the run's request as
//!   call `r1`; asked for step 2 it answers that request (with §17.1 folding the call's FINISH
//!   committed with its step) and ends the run.
//! - [`ConnectionDriver`], which keeps the conversation's call runs moving: it admits each
//!   request against the conversation's `[limits]` and submits its run in one transaction,
//!   claims each run for this connection only, executes it through the worker, waits while it
//!   is parked (any process may resolve the approval), applies client cancellations (§8.5) and,
//!   when the client goes, commits DISCONNECT ([`crate::conversation::close_in_tx`]).
//!
//! **Approvals outlive the request (§22.3).** A client's cancel or timeout of a parked call, a
//! parked call answered at once because its client asked for no progress, or the client's
//! disconnect (or its gateway's death), **detaches** the request: the run stays parked and its
//! approval pending. A later request of the same tenant and principal, on this conversation or
//! any other, for the same tool with equal arguments (so the same effective arguments hash)
//! **binds** to the parked run instead of asking again ([`StoreTx::waiting_call_approvals`]),
//! and gets its answer. A gateway holding such a request may claim the run once its call is
//! parked, whichever connection sent it first ([`Worker::claim_for_connection`]). An approved
//! call executes only while a request waits for it: a run no request claims before its
//! approval's expiry is cancelled, never sent (by its own driver while its connection is open,
//! by the orphan sweep after that). A parked run whose approval is denied or expired is still
//! executed while its connection is open, which only records the resolution.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use serde_json::Value;

use futures_util::StreamExt;
use futures_util::future::select;
use futures_util::stream::FuturesUnordered;

use crate::conversation::answer::{CallAnswer, CallState, call_state};
use crate::conversation::{CallAdmission, CloseReason, Connection, ConnectionState};
pub use crate::conversation::{MCP_PLANNER_KIND, call_id_of};
use crate::events::Actor;
use crate::ids::{ApprovalId, ConnectionId, RunId};
use crate::invocation::outcome::codes;
use crate::ports::{BoxFut, Planner, PlannerError, PlannerInput, PlannerTurn, ProposedCall};
use crate::run::executor::ExecutionEnd;
use crate::run::first_write::{Carried, CarriedWrites, FirstWriteOutcome};
use crate::run::{Lease, Limits, Run, RunState};
use crate::scope::ScopeSet;
use crate::session::Session;
use crate::store::{Store, TxError};
use crate::time::Timestamp;
use crate::vocab::ApprovalStatus;
use crate::vocab::{CancelReason, RunStatus, TrustLevel};
use crate::worker::Worker;

/// The final message of a call run whose request left before the run proposed anything.
pub const DISCONNECTED_MESSAGE: &str = "client disconnected";

/// The final message of a call run whose call was answered.
pub const ANSWERED_MESSAGE: &str = "call answered";

/// The answer to a call the conversation's `[limits] max_tool_calls` refuses (§22.1).
pub const CONVERSATION_CALLS_SPENT: &str = "conversation.max_tool_calls";

/// The answer to a call after the conversation's `[limits] deadline_seconds` (§22.1).
pub const CONVERSATION_DEADLINE_PASSED: &str = "conversation.deadline_passed";

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
    /// Whether the conversation was tainted when the answer was read, if the answer's read
    /// also read that ([`Ticket::conversation_tainted_at_end`]).
    tainted_at_end: Option<bool>,
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
            tainted_at_end: None,
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

    /// Whether the conversation was tainted when this request's answer was read: known for
    /// an answer read from its run (the same read transaction reads the conversation's row),
    /// `None` for an end decided without a read (a refused admission, a drop). Telemetry's
    /// `airlock.conversation.tainted` (issue 33: no read transaction of its own per call).
    pub fn conversation_tainted_at_end(&self) -> Option<bool> {
        lock(&self.0).tainted_at_end
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
        self.finish_read(end, None);
    }

    /// [`Ticket::finish`], with the conversation's taint read beside the answer.
    fn finish_read(&self, end: TicketEnd, tainted_at_end: Option<bool>) {
        let waker = {
            let mut slot = lock(&self.0);
            if slot.end.is_some() {
                return;
            }
            slot.end = Some(end);
            slot.tainted_at_end = tainted_at_end;
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
    /// The tracing span current when the request was submitted (the gateway's span of the
    /// client's request): its run executes inside it, so the run's spans, the gate's among
    /// them, are the request's children in an exported trace. Observation only.
    span: tracing::Span,
}

/// A request handed to a run, until it is answered.
#[derive(Debug)]
struct Handed {
    entry: Entry,
    run: RunId,
    step: u32,
    origin: Origin,
}

/// Whose run a request was handed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A run of this conversation.
    Own,
    /// Another conversation's parked call, bound to an identical call sent here (§22.3). Its
    /// result taints that conversation's row in the run's writes, and this one's when it is
    /// answered here ([`LiveConnection::settle`]).
    Bound,
}

impl Handed {
    fn call_id(&self) -> String {
        call_id_of(self.step)
    }
}

#[derive(Debug, Default)]
struct Mailbox {
    /// Requests not yet given a run.
    queue: VecDeque<Entry>,
    handed: Vec<Handed>,
    /// Requests the client cancelled after they were handed to a run.
    cancelled: Vec<RequestKey>,
    /// Task runs this connection executes without a request (SPEC §22.3 item 1): a task stands
    /// for its request.
    adopted: std::collections::BTreeSet<RunId>,
    /// Adopted runs the driver has not picked up yet.
    adopting: Vec<RunId>,
    closed: bool,
    wakers: Vec<Waker>,
}

impl Mailbox {
    fn wake_all(&mut self) -> Vec<Waker> {
        std::mem::take(&mut self.wakers)
    }

    /// Detaches the request of `key` from its run: its ticket ends; the run stays parked in the
    /// store, where an identical request finds it.
    fn detach(&mut self, key: RequestKey) -> Option<Ticket> {
        let position = self.handed.iter().position(|h| h.entry.key == key)?;
        let handed = self.handed.remove(position);
        self.cancelled.retain(|k| *k != key);
        Some(handed.entry.ticket)
    }

    /// Detaches every request of `run` (the client has gone and the run is parked).
    fn release(&mut self, run: RunId) -> Vec<(Ticket, Cancelled)> {
        let (released, kept): (Vec<Handed>, Vec<Handed>) = std::mem::take(&mut self.handed)
            .into_iter()
            .partition(|h| h.run == run);
        self.handed = kept;
        let keys: Vec<RequestKey> = released.iter().map(|h| h.entry.key).collect();
        let cancelled: Vec<RequestKey> = self.cancelled.clone();
        self.cancelled.retain(|k| !keys.contains(k));
        released
            .into_iter()
            .map(|h| {
                let by_client = cancelled.contains(&h.entry.key);
                (h.entry.ticket, Cancelled(by_client))
            })
            .collect()
    }
}

/// Whether the client cancelled a released request.
struct Cancelled(bool);

/// The mailbox between a gateway's client and the connection's runs.
pub struct LiveConnection {
    id: ConnectionId,
    /// `origin_trust = "user"` in the gateway's file: arguments are the user's until the run is
    /// tainted; otherwise they are `external_untrusted` (the pipeline's default).
    arguments_from_user: bool,
    /// Set once a read outside the journal (§19.6) returned tainting content; never cleared.
    /// The read gate decides later reads with it (over-tainting a read is safe).
    read_tainted: AtomicBool,
    /// Set when such a read's taint could not be committed to the conversation's row: then
    /// this flag, not the row, taints the connection's calls, and a human's clear cannot reach
    /// it. When the row holds the taint, calls follow the row, so a clear takes effect.
    read_taint_unrecorded: AtomicBool,
    /// Commits a read's taint to the conversation (installed by [`ConnectionDriver::open`]).
    taint_recorder: Mutex<Option<TaintRecorder>>,
    /// Reads whether the conversation's row is tainted (installed with the recorder).
    taint_reader: Mutex<Option<TaintReader>>,
    /// The conversation's row, which a settle reads beside the answers it reads (installed
    /// with the reader).
    taint_row: Mutex<Option<ConnectionId>>,
    mailbox: Mutex<Mailbox>,
}

/// Commits the conversation's taint, naming what tainted it; `false` if it did not commit.
pub type TaintRecorder = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Whether the conversation's row is tainted now; `true` when it cannot be read (fail closed).
pub type TaintReader = Arc<dyn Fn() -> bool + Send + Sync>;

impl std::fmt::Debug for LiveConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveConnection")
            .field("id", &self.id)
            .field("arguments_from_user", &self.arguments_from_user)
            .field("read_tainted", &self.read_tainted)
            .field("mailbox", &self.mailbox)
            .finish_non_exhaustive()
    }
}

impl LiveConnection {
    pub fn new(id: ConnectionId, arguments_from_user: bool) -> Arc<LiveConnection> {
        Arc::new(LiveConnection {
            id,
            arguments_from_user,
            read_tainted: AtomicBool::new(false),
            read_taint_unrecorded: AtomicBool::new(false),
            taint_recorder: Mutex::new(None),
            taint_reader: Mutex::new(None),
            taint_row: Mutex::new(None),
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
    pub fn note_read_content(&self, trust: TrustLevel, what: &str) {
        if crate::conversation::taints(trust) {
            self.read_tainted.store(true, Ordering::SeqCst);
            self.record_taint(what);
        }
    }

    /// Installs what commits a read's taint to the conversation's row.
    pub fn set_taint_recorder(&self, recorder: TaintRecorder) {
        *lock(&self.taint_recorder) = Some(recorder);
    }

    /// Whether a read outside the journal returned tainting content on this connection.
    pub fn tainted_by_read(&self) -> bool {
        self.read_tainted.load(Ordering::SeqCst)
    }

    /// Installs what reads the conversation row's taint.
    pub fn set_taint_reader(&self, reader: TaintReader) {
        *lock(&self.taint_reader) = Some(reader);
    }

    /// Names the conversation's row, which each settle then reads beside the answers
    /// ([`Ticket::conversation_tainted_at_end`]).
    pub fn set_taint_row(&self, connection: ConnectionId) {
        *lock(&self.taint_row) = Some(connection);
    }

    /// Whether the conversation is tainted, for the read gate (SPEC §22.2): a tainting read of
    /// this process, or the conversation's row, which holds what every process serving it
    /// learnt (a sessionless conversation is served by several, §22.1), tool results included.
    pub fn conversation_tainted(&self) -> bool {
        if self.tainted_by_read() {
            return true;
        }
        let reader = lock(&self.taint_reader).clone();
        reader.is_some_and(|read| read())
    }

    /// Whether such a read's taint holds for this connection's calls outside the conversation's
    /// row (its commit failed, or no recorder is installed).
    fn calls_tainted_by_read(&self) -> bool {
        self.read_taint_unrecorded.load(Ordering::SeqCst)
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
                span: tracing::Span::current(),
            });
            true
        });
        if !accepted {
            ticket.finish(TicketEnd::Dropped);
        }
        ticket
    }

    /// The span of the request handed to `run`, if one waits for it (observation only: see
    /// [`Entry`]).
    fn request_span_of(&self, run: RunId) -> Option<tracing::Span> {
        self.with(|m| {
            m.handed
                .iter()
                .find(|h| h.run == run)
                .map(|h| h.entry.span.clone())
        })
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

    /// The client left request `key` while its call is parked (it was answered at once, §22.3
    /// item 3, or it timed out): the run stays parked with its approval pending, for a later
    /// identical request to bind to. `false` when the request is not handed to a run.
    pub fn detach(&self, key: RequestKey) -> bool {
        match self.with(|m| m.detach(key)) {
            Some(ticket) => {
                ticket.finish(TicketEnd::Dropped);
                true
            }
            None => false,
        }
    }

    /// Whether a request waits for `run` (SPEC §22.3: outside tasks, an approved call executes
    /// only while one does).
    pub fn waits_for(&self, run: RunId) -> bool {
        lock(&self.mailbox).handed.iter().any(|h| h.run == run)
    }

    /// Whether this connection serves `run` now: a request waits for it, or it is a task run
    /// this connection adopted ([`Self::adopt`]).
    pub fn serves(&self, run: RunId) -> bool {
        let mailbox = lock(&self.mailbox);
        mailbox.adopted.contains(&run) || mailbox.handed.iter().any(|h| h.run == run)
    }

    /// ADOPT (SPEC §22.3 item 1): the driver drives task run `run` to its end, executing its
    /// call once approved, with no request waiting. Only for a run that has a task
    /// ([`crate::conversation::task`]): outside tasks an approved call executes only while a
    /// request waits. Another process may adopt the same run; the store's claim lets one of
    /// them execute it.
    pub fn adopt(&self, run: RunId) {
        self.with(|m| {
            if m.adopted.insert(run) {
                m.adopting.push(run);
            }
        });
    }

    /// Hands `entry` to `run` as its call `r1`.
    fn hand(&self, entry: Entry, run: RunId, origin: Origin) {
        entry
            .ticket
            .set_status(TicketStatus::Proposed { run, step: 1 });
        self.with(|m| {
            m.handed.push(Handed {
                entry,
                run,
                step: 1,
                origin,
            })
        });
    }

    /// Taints this conversation for content that reaches its client outside its own runs' writes
    /// (a read outside the journal, or another conversation's result bound here): on the
    /// conversation's row (§22.2), so a later call run, or another process, sees it; if that
    /// commit fails, this connection's calls are tainted by the in-memory flag instead.
    fn record_taint(&self, what: &str) {
        let recorder = lock(&self.taint_recorder).clone();
        let recorded = recorder.is_some_and(|record| record(what));
        if !recorded {
            self.read_taint_unrecorded.store(true, Ordering::SeqCst);
        }
    }

    /// Ends the requests of `run`, a call run that was never written (its admission declined,
    /// or its first write never committed): each is answered `answer`, unless the client
    /// cancelled it or has gone (§19.3), or there is no answer to give.
    fn end_unrecorded(&self, run: RunId, answer: Option<CallAnswer>) {
        let (closed, released) = self.with(|m| (m.closed, m.release(run)));
        for (ticket, Cancelled(cancelled)) in released {
            ticket.finish(match &answer {
                Some(answer) if !closed && !cancelled => TicketEnd::Answered(answer.clone()),
                Some(_) | None => TicketEnd::Dropped,
            });
        }
    }

    /// Ends the requests of `run` without an answer (the client has gone).
    fn release(&self, run: RunId) {
        for (ticket, _) in self.with(|m| m.release(run)) {
            ticket.finish(TicketEnd::Dropped);
        }
    }

    /// Resolves when `ready` holds for the mailbox.
    fn until(&self, ready: fn(&Mailbox) -> bool) -> MailboxWait<'_> {
        MailboxWait { live: self, ready }
    }

    /// Answers the handed requests of `run` that the store has answered, and notes parked ones
    /// (only while their approval is pending: an approved call is on its way, and its request
    /// must not be answered "needs approval"). With `ended`, the run is terminal: a request it
    /// never recorded is answered that nothing ran, and none is left waiting. `false` when the
    /// store could not be read (nothing changed; read again).
    fn settle<S: Store>(&self, store: &S, run: RunId, ended: Option<RunStatus>) -> bool {
        let handed: Vec<(RequestKey, u32, String)> = self.with(|m| {
            m.handed
                .iter()
                .filter(|h| h.run == run)
                .map(|h| (h.entry.key, h.step, h.call_id()))
                .collect()
        });
        if handed.is_empty() {
            return true;
        }
        let taint_row = *lock(&self.taint_row);
        let read = store.read(|tx| {
            let states = handed
                .iter()
                .map(|(key, step, call_id)| Ok((*key, call_state(tx, run, *step, call_id)?)))
                .collect::<Result<Vec<_>, TxError>>()?;
            let row_tainted = match taint_row {
                Some(connection) => Some(crate::conversation::row_tainted_in_tx(tx, connection)?),
                None => None,
            };
            Ok((states, row_tainted))
        });
        // A failed read changes nothing: the next settle reads again.
        let Ok((states, row_tainted)) = read else {
            return false;
        };
        let mut finished: Vec<(Ticket, TicketEnd)> = Vec::new();
        let mut bound_untrusted = false;
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
                        if handed.origin == Origin::Bound
                            && matches!(&answer, CallAnswer::Executed { trust, .. } if crate::conversation::taints(*trust))
                        {
                            bound_untrusted = true;
                        }
                        // A client that cancelled, or has gone, gets no answer (§19.3).
                        let end = if cancelled || m.closed {
                            TicketEnd::Dropped
                        } else {
                            TicketEnd::Answered(answer)
                        };
                        finished.push((handed.entry.ticket, end));
                    }
                    CallState::Parked { .. } | CallState::InFlight if ended.is_some() => {
                        // A terminal run leaves no request waiting (its call was closed with
                        // the run; the next look would find its answer, but none comes).
                        let handed = m.handed.remove(position);
                        m.cancelled.retain(|k| *k != key);
                        finished.push((handed.entry.ticket, TicketEnd::Dropped));
                    }
                    CallState::Parked { approval } if approval.status == ApprovalStatus::Pending => {
                        m.handed[position]
                            .entry
                            .ticket
                            .set_status(TicketStatus::Parked {
                                run,
                                approval_id: approval.id,
                                expires_at: approval.expires_at,
                            });
                    }
                    CallState::Parked { .. } | CallState::InFlight => {
                        m.handed[position]
                            .entry
                            .ticket
                            .set_status(TicketStatus::Proposed { run, step: 1 });
                    }
                    CallState::Unrecorded => {
                        if let Some(status) = ended {
                            // The run ended before it recorded the call (its deadline, say):
                            // nothing was decided about it, and nothing ran.
                            let handed = m.handed.remove(position);
                            m.cancelled.retain(|k| *k != key);
                            let end = if cancelled || m.closed || status == RunStatus::Cancelled {
                                TicketEnd::Dropped
                            } else {
                                TicketEnd::Answered(CallAnswer::Denied {
                                    reason_code: codes::RUN_TERMINATED.to_owned(),
                                    message: format!(
                                        "Not performed. The call's run ended {status} before it recorded the call."
                                    ),
                                })
                            };
                            finished.push((handed.entry.ticket, end));
                        }
                    }
                }
            }
        });
        // Before any answer leaves: what this conversation is told taints it (§22.2).
        if bound_untrusted {
            self.record_taint(&format!("the result of run {run}, bound here"));
        }
        // What `conversation_tainted` would say now, without reading the row again.
        let tainted_at_end =
            row_tainted.map(|tainted| tainted || bound_untrusted || self.tainted_by_read());
        for (ticket, end) in finished {
            ticket.finish_read(end, tainted_at_end);
        }
        true
    }

    /// The requests handed to `run` that the client cancelled.
    fn cancelled_of(&self, run: RunId) -> Vec<RequestKey> {
        self.with(|m| {
            m.handed
                .iter()
                .filter(|h| h.run == run && m.cancelled.contains(&h.entry.key))
                .map(|h| h.entry.key)
                .collect()
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
    /// The conversation's taint as read when the call was handed out, so the gate usually
    /// decides the call as tainted at once; PROPOSE reads it again inside its transaction
    /// (§22.2), which is what the guarantee rests on.
    conversation_tainted: AtomicBool,
}

impl<S: Store> LivePlanner<S> {
    pub fn new(live: Arc<LiveConnection>, store: Arc<S>) -> LivePlanner<S> {
        LivePlanner {
            live,
            store,
            conversation_tainted: AtomicBool::new(false),
        }
    }
}

impl<S: Store + 'static> Planner for LivePlanner<S> {
    /// The client keeps its own transcript: no step records are read for it (§17.2).
    fn wants_history(&self) -> bool {
        false
    }

    fn tainted_outside_journal(&self) -> bool {
        self.live.calls_tainted_by_read() || self.conversation_tainted.load(Ordering::SeqCst)
    }

    /// A call run is one step of one call (§22.2): its second turn is always the end. Its
    /// request is then answered once the run is terminal (`ConnectionDriver::drive_once`).
    fn final_after(&self, step: u32) -> Option<String> {
        (step >= 1).then(|| ANSWERED_MESSAGE.to_owned())
    }

    fn next_turn<'a>(
        &'a self,
        input: PlannerInput<'a>,
    ) -> BoxFut<'a, Result<PlannerTurn, PlannerError>> {
        Box::pin(async move {
            let run = input.run.id;
            if input.step > 1 {
                // The call's step has committed (§17.1 F4): answer it before the run ends.
                let _ = self.live.settle(self.store.as_ref(), run, None);
                return Ok(PlannerTurn::Final {
                    message: ANSWERED_MESSAGE.to_owned(),
                });
            }
            // A request the client cancelled before its call was proposed is not proposed.
            let call = self.live.with(|m| {
                m.handed
                    .iter()
                    .find(|h| h.run == run && !m.cancelled.contains(&h.entry.key))
                    .map(|h| h.entry.call.clone())
            });
            // The request left before its run proposed anything: nothing to do.
            let Some(call) = call else {
                return Ok(PlannerTurn::Final {
                    message: DISCONNECTED_MESSAGE.to_owned(),
                });
            };
            // `user` unless the conversation is tainted (§19.3, §22.2): the pipeline reads the
            // conversation's taint again inside the call's first transaction; a read outside
            // the journal (§19.6) on this connection counts at once. A failed read leaves it
            // to that transaction.
            let session = input.run.session_id;
            #[cfg(feature = "mutants")]
            let session = if crate::testing::mutants::stale_conversation_taint() {
                crate::ids::SessionId(uuid::Uuid::nil())
            } else {
                session
            };
            if let Ok(true) = self
                .store
                .read(|tx| crate::conversation::tainted_in_tx(tx, session))
            {
                self.conversation_tainted.store(true, Ordering::SeqCst);
            }
            let arguments_from_user = self.live.arguments_from_user
                && !self.live.calls_tainted_by_read()
                && !self.conversation_tainted.load(Ordering::SeqCst);
            let argument_trust: BTreeMap<String, TrustLevel> =
                match (&call.arguments, arguments_from_user && !input.tainted) {
                    (Value::Object(map), true) => {
                        map.keys().map(|k| (k.clone(), TrustLevel::User)).collect()
                    }
                    _ => BTreeMap::new(),
                };
            Ok(PlannerTurn::Calls(vec![ProposedCall {
                call_id: call_id_of(1),
                tool: call.tool,
                version: None,
                arguments: call.arguments,
                argument_trust,
            }]))
        })
    }
}

/// A new call run of this driver: what its claim will be, and the writes that admit, submit
/// and claim it, which its execution's first write transaction carries.
struct Admission {
    claimed: Run,
    lease: Lease,
    writes: CarriedWrites<CallAdmission>,
}

/// The answer to a call whose run could not be recorded: nothing ran.
fn not_recorded() -> CallAnswer {
    CallAnswer::Failed {
        reason_code: codes::INTERNAL_ERROR.to_owned(),
        message:
            "Not performed. The gateway could not record the call (storage error); send it again."
                .to_owned(),
    }
}

/// What one look at a call run decided.
enum Drive {
    /// Terminal, and its request settled.
    Ended,
    /// Look again now (it executed, or was cancelled).
    Again,
    /// Look again at this time.
    Until(Timestamp),
}

/// What a connection's call runs are submitted with (from the gateway's file, §19.2, §22.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunTemplate {
    pub principal_scopes: ScopeSet,
    pub origin_trust: TrustLevel,
    /// Each call run's limits; `deadline_seconds` counts from the conversation's opening.
    pub limits: Limits,
    /// The conversation's `[limits] max_tool_calls`: `None` when the file sets none, so a long
    /// session is never cut off by a default it did not choose.
    pub conversation_calls: Option<u32>,
    /// An opaque fingerprint of where the conversation's tools run (the gateway file's
    /// upstreams), kept in each call run's `planner_input`. A call binds only to a parked call
    /// of the same fingerprint (§22.3): two gateway files of one principal may both have a server
    /// `fs`, over different roots, and an approval given for one must not run against the other.
    pub upstreams: String,
}

/// How a driver's connection stays open, and who ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The connection is its client's (stdio, an HTTP `Mcp-Session-Id`): this driver renews it
    /// every lease/3 and closes it (DISCONNECT) when the client goes.
    Leased,
    /// A sessionless 2026-07-28 conversation (SPEC §22.1), which any gateway process of the
    /// store may serve: each request, and each lease/3 while a call of this process is in
    /// flight, pushes its `alive_until` to `idle_micros` ahead; no process closes it (the sweep
    /// does, once no request came for that long). When this process lets go of it, it cancels
    /// only the calls its own requests started (parked ones stay, §22.3).
    Idle { idle_micros: i64 },
}

/// Keeps one connection's runs moving; see the module docs.
pub struct ConnectionDriver<S: Store> {
    worker: Arc<Worker<S>>,
    live: Arc<LiveConnection>,
    connection: Connection,
    template: RunTemplate,
    liveness: Liveness,
    /// When this process last pushed an idle conversation's `alive_until` ([`Self::touch`]).
    extended_at: Mutex<Timestamp>,
    /// The runs [`Self::run`] drives now, so a request bound to one of them adds no second
    /// driver.
    driving: Mutex<std::collections::BTreeSet<RunId>>,
    /// Another conversation's runs this driver executes now, claimed for requests bound to
    /// their parked calls.
    executing_bound: Mutex<std::collections::BTreeSet<RunId>>,
}

/// The session a new connection's call runs live in.
fn new_session(connection: &Connection, now: Timestamp) -> Session {
    Session {
        id: connection.session_id,
        tenant_id: connection.tenant_id.clone(),
        principal_id: connection.principal_id.clone(),
        next_event_sequence: 1,
        created_at: now,
    }
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
            taint: None,
            call_count: 0,
            last_seen_at: now,
            conversation_key: None,
        };
        env.transact(|tx| {
            tx.insert_session(&new_session(&connection, now))?;
            crate::conversation::open_in_tx(tx, &connection, now)
        })?;
        Ok(Self::over(
            worker,
            live,
            connection,
            template,
            Liveness::Leased,
        ))
    }

    /// JOIN (SPEC §22.1): the open conversation of `key` (a sessionless 2026-07-28 client of
    /// the tenant and principal), opened when there is none, its `alive_until` pushed
    /// `idle_seconds` ahead. Another process may serve the same conversation at the same time:
    /// the row, its taint and its call counter are the store's. The live connection is new and
    /// this process's alone.
    pub fn join(
        worker: Arc<Worker<S>>,
        tenant_id: &str,
        principal_id: &str,
        key: crate::conversation::ConversationKey,
        idle_seconds: u32,
        arguments_from_user: bool,
        template: RunTemplate,
    ) -> Result<ConnectionDriver<S>, TxError> {
        let env = worker.env();
        let idle_micros = i64::from(idle_seconds).saturating_mul(1_000_000);
        let mut attempts = 0;
        let joined = loop {
            let now = env.clock.now();
            let fresh = Connection {
                id: ConnectionId(env.new_uuid()),
                tenant_id: tenant_id.to_owned(),
                principal_id: principal_id.to_owned(),
                session_id: crate::ids::SessionId(env.new_uuid()),
                gateway_id: worker.settings().worker_id.clone(),
                state: ConnectionState::Open {
                    alive_until: now.saturating_add_micros(idle_micros),
                },
                opened_at: now,
                taint: None,
                call_count: 0,
                last_seen_at: now,
                conversation_key: Some(key.clone()),
            };
            let session = new_session(&fresh, now);
            let joined = env.transact(|tx| {
                crate::conversation::join_in_tx(
                    tx,
                    &fresh,
                    &mut |tx| tx.insert_session(&session),
                    now,
                )
            });
            match joined {
                // Another process opened the conversation between our read and our insert.
                Err(TxError::Conflict(_)) if attempts == 0 => attempts += 1,
                joined => break joined?,
            }
        };
        let connection = joined.connection().clone();
        let live = LiveConnection::new(connection.id, arguments_from_user);
        Ok(Self::over(
            worker,
            live,
            connection,
            template,
            Liveness::Idle { idle_micros },
        ))
    }

    /// The driver of `connection`, committed, served through `live`.
    fn over(
        worker: Arc<Worker<S>>,
        live: Arc<LiveConnection>,
        connection: Connection,
        template: RunTemplate,
        liveness: Liveness,
    ) -> ConnectionDriver<S> {
        let session_id = connection.session_id;
        let now = worker.env().clock.now();
        let recording = worker.env().clone();
        let reading = worker.env().clone();
        let connection_id = connection.id;
        live.set_taint_reader(Arc::new(move || {
            reading
                .read(|tx| crate::conversation::row_tainted_in_tx(tx, connection_id))
                .unwrap_or(true)
        }));
        live.set_taint_row(connection_id);
        live.set_taint_recorder(Arc::new(move |by: &str| {
            let now = recording.clock.now();
            match recording
                .transact(|tx| crate::conversation::taint_in_tx(tx, session_id, None, by, now))
            {
                Ok(()) => true,
                Err(error) => {
                    tracing::warn!(%error, "a read's taint was not recorded on the conversation");
                    false
                }
            }
        }));
        ConnectionDriver {
            worker,
            live,
            connection,
            template,
            liveness,
            extended_at: Mutex::new(now),
            driving: Mutex::new(std::collections::BTreeSet::new()),
            executing_bound: Mutex::new(std::collections::BTreeSet::new()),
        }
    }

    pub fn liveness(&self) -> Liveness {
        self.liveness
    }

    /// A request of an idle conversation arrived in this process: its `alive_until` is pushed
    /// ahead, at most once per tenth of the idle time (a busy client does not write a row per
    /// request; the horizon is then at least nine tenths of it). `false` once the conversation
    /// is no longer open (the sweep ended it): the caller joins a new one. A leased connection
    /// is renewed by [`Self::keep_alive`] and always answers `true`.
    pub fn touch(&self) -> Result<bool, TxError> {
        let Liveness::Idle { idle_micros } = self.liveness else {
            return Ok(!self.live.is_closed());
        };
        if self.live.is_closed() {
            return Ok(false);
        }
        let env = self.worker.env();
        let now = env.clock.now();
        {
            let extended_at = lock(&self.extended_at);
            if now.as_micros() - extended_at.as_micros() < idle_micros / 10 {
                return Ok(true);
            }
        }
        let open = env.transact(|tx| {
            crate::conversation::renew_in_tx(
                tx,
                self.connection.id,
                now.saturating_add_micros(idle_micros),
            )
        })?;
        *lock(&self.extended_at) = now;
        if !open {
            self.live.close();
        }
        Ok(open)
    }

    /// Whether any call of this process's requests is still being driven.
    pub fn is_busy(&self) -> bool {
        !lock(&self.driving).is_empty()
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
            // The client has gone: if its DISCONNECT could not commit, the sweep closes the
            // connection once it is no longer renewed (and cancels what it left).
            if self.live.is_closed() {
                return;
            }
            let now = env.clock.now();
            let renewed = match self.liveness {
                Liveness::Leased => {
                    let until = now.saturating_add_micros(lease_micros);
                    env.transact(|tx| {
                        crate::conversation::renew_in_tx(tx, self.connection.id, until)
                    })
                }
                // A call in flight is a request still being served: the conversation stays.
                Liveness::Idle { idle_micros } if self.is_busy() => env.transact(|tx| {
                    crate::conversation::renew_in_tx(
                        tx,
                        self.connection.id,
                        now.saturating_add_micros(idle_micros),
                    )
                }),
                Liveness::Idle { .. } => env.read(|tx| {
                    Ok(tx
                        .connection(self.connection.id)?
                        .is_some_and(|c| c.is_open()))
                }),
            };
            match renewed {
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

    /// DISCONNECT: the client has gone. The close commits now: queued call runs are cancelled at
    /// once, running ones are flagged (their START observations then refuse every further call,
    /// §19.4), parked ones stay for an identical call sent again (§22.3); [`Self::run`] returns
    /// once the others have ended.
    pub fn disconnect(&self) -> Result<(), TxError> {
        self.live.close();
        self.close_now()
    }

    fn close_now(&self) -> Result<(), TxError> {
        let env = self.worker.env();
        let now = env.clock.now();
        match self.liveness {
            Liveness::Leased => {
                let flagged = env.transact(|tx| {
                    crate::conversation::close_in_tx(
                        tx,
                        self.connection.id,
                        CloseReason::Disconnected,
                        now,
                    )
                })?;
                for run in flagged {
                    self.worker.tokens().cancel(run, CancelReason::Requested);
                }
            }
            // The conversation is not this process's to close (others may serve it): only the
            // calls its own requests started go with them, as close_in_tx would end them, and a
            // parked one stays for an identical call sent again (§22.3).
            Liveness::Idle { .. } => {
                let own: Vec<RunId> = lock(&self.driving).iter().copied().collect();
                for run_id in own {
                    let ends = env.read(|tx| {
                        let Some(run) = tx.run(run_id)? else {
                            return Ok(false);
                        };
                        Ok(run.session_id == self.connection.session_id
                            && !run.status().is_terminal()
                            && crate::conversation::awaits_request_in_tx(tx, &run, now)?.is_none())
                    })?;
                    if ends {
                        self.cancel_run(run_id)?;
                    }
                }
            }
        }
        // Another conversation's parked call that this connection claimed for its request and
        // executes now: that request has gone with the client, and an approved call executes
        // only while a request waits (§22.3), so its START must refuse like this conversation's
        // own calls.
        let executing: Vec<RunId> = lock(&self.executing_bound).iter().copied().collect();
        for run in executing {
            self.cancel_run(run)?;
        }
        Ok(())
    }

    /// Serves the connection until the client has gone and its last call run has ended or been
    /// left parked; then the connection is closed. Each request is admitted (or bound to a
    /// parked call, §22.3) as it arrives and its run driven beside the others. A storage error ends nothing: a request
    /// that could not be admitted is answered that nothing ran, and a run's driver looks again
    /// after a poll (one failing store must not leave the conversation's other calls hanging).
    pub async fn run(&self) -> Result<(), TxError> {
        let mut runs = FuturesUnordered::new();
        loop {
            let (arrived, adopted): (Vec<Entry>, Vec<RunId>) = self
                .live
                .with(|m| (m.queue.drain(..).collect(), m.adopting.drain(..).collect()));
            for entry in arrived {
                if let Some((run, claimed)) = self.admit(entry) {
                    runs.push(self.drive(run, claimed));
                }
            }
            for run in adopted {
                if self.start_driving(run).is_some() {
                    runs.push(self.drive(run, None));
                }
            }
            if self.live.is_closed() {
                if runs.next().await.is_none() {
                    break;
                }
                continue;
            }
            if runs.is_empty() {
                self.live
                    .until(|m| !m.queue.is_empty() || !m.adopting.is_empty() || m.closed)
                    .await;
                continue;
            }
            let arrivals = self
                .live
                .until(|m| !m.queue.is_empty() || !m.adopting.is_empty() || m.closed);
            let _ = select(arrivals, runs.next()).await;
        }
        self.close_now()
    }

    /// A request's way in: bound to a parked call of the identical call (§22.3, any
    /// conversation of the tenant and principal), or a call run of its own (§22.2), driven by
    /// this driver. Returns the run to drive when this driver does not drive it yet, with its
    /// admission when the run is new; a request of a closed connection is dropped.
    ///
    /// A new call run is not written here: its ADMIT (§22.1 `[limits]` per conversation),
    /// SUBMIT and CLAIM are carried by the first write transaction of its execution, in the same
    /// commit as its call's PENDING·PROPOSE·START (issue 33: one commit per call where there
    /// were two; [`Worker::execute_carrying`]). Until then the run exists only here: nobody else
    /// could see, claim or bind to it (a call run is claimed only by a driver of its
    /// connection, §22.3), and a crash before that commit leaves nothing of it, nor of its call.
    fn admit(&self, entry: Entry) -> Option<(RunId, Option<Admission>)> {
        match self.parked_twin(&entry.call) {
            Ok(Some((run, origin))) => {
                tracing::info!(run = %run, connection = %self.connection.id, "a call sent again binds to its parked twin");
                self.live.hand(entry, run, origin);
                return self.start_driving(run).map(|run| (run, None));
            }
            Ok(None) => {}
            // Unknown: the call asks again (a second approval, never a second effect).
            Err(error) => {
                tracing::warn!(%error, "parked calls could not be read; the call is admitted as new");
            }
        }
        if self.live.is_closed() {
            // The client has gone: it is told nothing (§19.3), and nothing is recorded.
            entry.ticket.finish(TicketEnd::Dropped);
            return None;
        }
        let env = self.worker.env();
        let now = env.clock.now();
        let run_id = RunId(env.new_uuid());
        let deadline_at = crate::conversation::call_deadline(
            self.connection.opened_at,
            self.template.limits.deadline_seconds,
        );
        let run = self.call_run(run_id, deadline_at, now);
        let Some((claimed, lease)) = self.worker.admitted_claim(&run, now) else {
            entry.ticket.finish(TicketEnd::Answered(not_recorded()));
            return None;
        };
        let writes = self.admission_writes(run, claimed.clone(), now);
        self.live.hand(entry, run_id, Origin::Own);
        self.start_driving(run_id).map(|run| {
            (
                run,
                Some(Admission {
                    claimed,
                    lease,
                    writes,
                }),
            )
        })
    }

    /// ADMIT, SUBMIT and CLAIM of call run `run`, as its execution's first write transaction
    /// carries them: declined with the conversation's refusal (its calls spent, its deadline
    /// passed, its connection closed), or written, the claim checked against `claimed`, what
    /// the execution began from.
    fn admission_writes(
        &self,
        run: Run,
        claimed: Run,
        now: Timestamp,
    ) -> CarriedWrites<CallAdmission> {
        let worker = Arc::clone(&self.worker);
        let connection = self.connection.id;
        let calls = self.template.conversation_calls;
        let deadline_seconds = self.template.limits.deadline_seconds;
        let renew_until = match self.liveness {
            Liveness::Idle { idle_micros } => Some(now.saturating_add_micros(idle_micros)),
            _ => None,
        };
        let actor = Actor::principal(&self.connection.principal_id);
        Box::new(move |tx| {
            let admission = crate::conversation::admit_call_in_tx(
                tx,
                connection,
                calls,
                deadline_seconds,
                now,
            )?;
            match admission {
                CallAdmission::Admitted { deadline_at } if deadline_at == run.deadline_at => {}
                CallAdmission::Admitted { .. } => {
                    return Err(TxError::Backend(
                        "the conversation's deadline is not the one its call run was built with"
                            .to_owned(),
                    ));
                }
                refused => return Ok(Carried::Declined(refused)),
            }
            crate::run::submit::insert_queued_run(tx, &run, &actor, now)?;
            if let Some(until) = renew_until {
                crate::conversation::renew_in_tx(tx, connection, until)?;
            }
            let (stored, _) = worker.claim_admitted_in_tx(tx, &run, now)?;
            if stored != claimed {
                return Err(TxError::Backend(
                    "a call run's claim is not the one its execution began from".to_owned(),
                ));
            }
            Ok(Carried::Written)
        })
    }

    /// What a request is told when its call run could not be recorded, or was refused by
    /// its conversation's limits; `None`: nothing (its connection closed).
    fn declined_answer(admission: &CallAdmission) -> Option<CallAnswer> {
        match admission {
            CallAdmission::Admitted { .. } => Some(not_recorded()),
            CallAdmission::Closed => None,
            CallAdmission::CallsSpent { max_tool_calls } => Some(CallAnswer::Denied {
                reason_code: CONVERSATION_CALLS_SPENT.to_owned(),
                message: format!(
                    "Not performed. This conversation has made its {max_tool_calls} calls ([limits] max_tool_calls)."
                ),
            }),
            CallAdmission::DeadlinePassed => Some(CallAnswer::Denied {
                reason_code: CONVERSATION_DEADLINE_PASSED.to_owned(),
                message: "Not performed. This conversation's deadline ([limits] deadline_seconds) has passed.".to_owned(),
            }),
        }
    }

    /// `Some(run)` when no driver of this connection drives `run` yet (it is now counted).
    fn start_driving(&self, run: RunId) -> Option<RunId> {
        lock(&self.driving).insert(run).then_some(run)
    }

    /// The parked call an identical request binds to (SPEC §22.3), and whose run it is.
    fn parked_twin(&self, call: &ClientCall) -> Result<Option<(RunId, Origin)>, TxError> {
        let env = self.worker.env();
        let now = env.clock.now();
        let twin = env.read(|tx| {
            crate::conversation::parked_twin_in_tx(
                tx,
                &self.connection,
                &self.template.principal_scopes,
                &self.template.upstreams,
                (&call.tool, &call.arguments),
                now,
            )
        })?;
        Ok(twin.map(|run| {
            let origin = if run.session_id == self.connection.session_id {
                Origin::Own
            } else {
                Origin::Bound
            };
            (run.id, origin)
        }))
    }

    /// A call run, QUEUED, planner kind `mcp`, with the conversation's deadline.
    fn call_run(&self, run_id: RunId, deadline_at: Option<Timestamp>, now: Timestamp) -> Run {
        Run {
            id: run_id,
            session_id: self.connection.session_id,
            tenant_id: self.connection.tenant_id.clone(),
            principal_id: self.connection.principal_id.clone(),
            principal_scopes: self.template.principal_scopes.clone(),
            origin_trust: self.template.origin_trust,
            planner_kind: MCP_PLANNER_KIND.to_owned(),
            planner_input: crate::conversation::call_planner_input(
                self.connection.id,
                &self.template.upstreams,
            )
            .into(),
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
        }
    }

    /// A client's cancel of the request handed to `run`: a parked call is detached (its
    /// approval stays pending, §22.3); anything else cancels the run (§8.5, §19.3).
    fn apply_cancels(&self, run_id: RunId) -> Result<(), TxError> {
        let cancelled = self.live.cancelled_of(run_id);
        if cancelled.is_empty() {
            return Ok(());
        }
        let env = self.worker.env();
        let parked = env.read(|tx| {
            Ok(matches!(
                call_state(tx, run_id, 1, &call_id_of(1))?,
                CallState::Parked { .. }
            ))
        })?;
        if parked {
            for key in cancelled {
                self.live.detach(key);
            }
            return Ok(());
        }
        self.cancel_run(run_id)
    }

    fn cancel_run(&self, run_id: RunId) -> Result<(), TxError> {
        let env = self.worker.env();
        let now = env.clock.now();
        let actor = Actor::principal(&self.connection.principal_id);
        let outcome = env.transact(|tx| {
            let run = tx.run(run_id)?.ok_or(TxError::NotFound)?;
            crate::run::cancel_request::request_cancel_in_tx(tx, &run, &actor, now)
        })?;
        if outcome.0.status == RunStatus::Running {
            self.worker.tokens().cancel(run_id, CancelReason::Requested);
        }
        Ok(())
    }

    /// For a QUEUED run no request waits for: whether its approval is approved (then it is not
    /// executed: `Some(expiry)`); a run whose approval was denied or expired is executed to
    /// record that, and sends nothing.
    fn withheld_until(&self, run_id: RunId) -> Result<Option<Timestamp>, TxError> {
        if self.live.serves(run_id) {
            return Ok(None);
        }
        #[cfg(feature = "mutants")]
        if crate::testing::mutants::approved_without_request() {
            return Ok(None);
        }
        self.worker.env().read(|tx| {
            Ok(match call_state(tx, run_id, 1, &call_id_of(1))? {
                CallState::Parked { approval } if approval.status == ApprovalStatus::Approved => {
                    Some(approval.expires_at)
                }
                _ => None,
            })
        })
    }

    /// Moves one call run until it is terminal and its request is answered. A storage error
    /// is looked at again after one poll.
    async fn drive(&self, run_id: RunId, mut admitted: Option<Admission>) {
        let mut cancel_sent = false;
        loop {
            let wake_at = match self
                .drive_once(run_id, &mut cancel_sent, &mut admitted)
                .await
            {
                Ok(Drive::Ended) => {
                    lock(&self.driving).remove(&run_id);
                    self.live.with(|m| m.adopted.remove(&run_id));
                    return;
                }
                Ok(Drive::Again) => continue,
                Ok(Drive::Until(at)) => at,
                Err(error) => {
                    tracing::warn!(%error, run = %run_id, "a call run's driver looks again after a poll");
                    self.worker
                        .env()
                        .clock
                        .now()
                        .saturating_add_micros(poll_micros(&self.worker))
                }
            };
            self.worker.env().clock.sleep_until(wake_at).await;
        }
    }

    /// Runs `execution` of `run_id` inside the request's span when one waits (telemetry; the
    /// run's own spans then belong to the client's trace).
    async fn in_request_span<T>(&self, run_id: RunId, execution: impl Future<Output = T>) -> T {
        match self.live.request_span_of(run_id) {
            Some(span) => tracing::Instrument::instrument(execution, span).await,
            None => execution.await,
        }
    }

    /// Executes a new call run of this driver, its admission carried by its first write
    /// transaction ([`ConnectionDriver::admit`]). A run whose admission never committed, or was
    /// declined, does not exist: its request is answered (or dropped) here.
    async fn execute_admission(&self, run_id: RunId, admission: Admission) -> Drive {
        // A slow process's pause between admitting a call and writing it (the simulator's).
        self.worker.reached_after_claim().await;
        if self.live.is_closed() {
            // The client left before anything was written: nothing is, and nothing is sent.
            self.live.end_unrecorded(run_id, None);
            return Drive::Ended;
        }
        let Admission {
            claimed,
            lease,
            writes,
        } = admission;
        let (end, outcome) = self
            .in_request_span(run_id, self.worker.execute_carrying(claimed, lease, writes))
            .await;
        match outcome {
            FirstWriteOutcome::Committed => self.after_execution(run_id, end),
            FirstWriteOutcome::Declined(refusal) => {
                self.live
                    .end_unrecorded(run_id, Self::declined_answer(&refusal));
                Drive::Ended
            }
            FirstWriteOutcome::Due => {
                tracing::warn!(run = %run_id, "a call run's first write did not commit; it is answered that nothing ran");
                self.live.end_unrecorded(run_id, Some(not_recorded()));
                Drive::Ended
            }
        }
    }

    /// What follows an execution of `run_id` by this driver. A run it finished is settled
    /// with the status its FINAL committed, which no later write changes, instead of being
    /// read back on the next look (issue 33: a read transaction fewer per call); a run that
    /// parked or was abandoned is looked at again.
    fn after_execution(&self, run_id: RunId, end: ExecutionEnd) -> Drive {
        match end {
            ExecutionEnd::Finished(status) if status.is_terminal() => {
                let env = self.worker.env();
                if self.live.settle(env.store.as_ref(), run_id, Some(status)) {
                    Drive::Ended
                } else {
                    // A failed read: the next look reads the run and settles again.
                    Drive::Until(
                        env.clock
                            .now()
                            .saturating_add_micros(poll_micros(&self.worker)),
                    )
                }
            }
            ExecutionEnd::Finished(_) | ExecutionEnd::Parked | ExecutionEnd::Abandoned => {
                Drive::Again
            }
        }
    }

    /// One look at a call run: cancels, the answer, and a claim when it is due (or the
    /// execution of the claim `admit` committed).
    async fn drive_once(
        &self,
        run_id: RunId,
        cancel_sent: &mut bool,
        admitted: &mut Option<Admission>,
    ) -> Result<Drive, TxError> {
        // First: until its admission commits, the run is not in the store to be read or
        // cancelled (a request cancelled before its call is proposed is never proposed).
        if let Some(admission) = admitted.take() {
            return Ok(self.execute_admission(run_id, admission).await);
        }
        let env = self.worker.env();
        if !*cancel_sent {
            self.apply_cancels(run_id)?;
            *cancel_sent = !self.live.cancelled_of(run_id).is_empty();
        }
        let run = env.read(|tx| tx.run(run_id))?.ok_or(TxError::NotFound)?;
        let status = run.status();
        let settled = self.live.settle(
            env.store.as_ref(),
            run_id,
            status.is_terminal().then_some(status),
        );
        let now = env.clock.now();
        let mut wake_at = now.saturating_add_micros(poll_micros(&self.worker));
        if self.live.is_closed() && !status.is_terminal() {
            // The client has gone. A parked call stays for an identical call sent again
            // (§22.3), and another conversation's run bound here is that conversation's: this
            // connection's requests of it end without an answer. Anything else of this
            // conversation was cancelled by the close, and is followed to its end.
            let parked = env.read(|tx| crate::conversation::awaits_request_in_tx(tx, &run, now))?;
            if parked.is_some() || run.session_id != self.connection.session_id {
                self.live.release(run_id);
                return Ok(Drive::Ended);
            }
        }
        match &run.state {
            // Terminal: done once its request has been settled (a failed read looks again).
            _ if status.is_terminal() && settled => return Ok(Drive::Ended),
            _ if status.is_terminal() => {}
            RunState::Queued { scheduled_for } => {
                if let Some(at) = scheduled_for.filter(|at| *at > now) {
                    wake_at = wake_at.min(at);
                } else if self.live.is_closed() {
                    // The client has gone; its DISCONNECT (or the sweep) cancels the run.
                } else if let Some(expires_at) = self.withheld_until(run_id)? {
                    // Approved, and no request waits for it (§22.3): never sent after its
                    // approval's expiry.
                    if expires_at <= now {
                        self.cancel_run(run_id)?;
                        return Ok(Drive::Again);
                    }
                    wake_at = wake_at.min(expires_at);
                } else if let Some((claimed, lease)) = self
                    .worker
                    .claim_for_connection(run_id, self.connection.id)
                    .await?
                {
                    // This conversation's own runs are cancelled by its close (close_in_tx);
                    // another's, bound here, by `close_now` through this set.
                    let bound = claimed.session_id != self.connection.session_id;
                    if bound {
                        lock(&self.executing_bound).insert(run_id);
                        // A client that left between the claim and here: look once more, now
                        // that a close would see this run.
                        if self.live.is_closed() {
                            self.cancel_run(run_id)?;
                        }
                    }
                    let end = self
                        .in_request_span(run_id, self.worker.execute_for_request(claimed, lease))
                        .await;
                    if bound {
                        lock(&self.executing_bound).remove(&run_id);
                    }
                    return Ok(self.after_execution(run_id, end));
                }
            }
            // Parked (any process may resolve it), or running under a lease this process
            // lost (RECLAIM will re-queue it): look again after one poll.
            RunState::WaitingForApproval | RunState::Running { .. } => {}
            _ => {}
        }
        Ok(Drive::Until(wake_at))
    }
}
