//! The worker (SPEC §8.2): claims due runs, keeps their leases alive, reclaims expired leases
//! and sweeps due approvals. Hosts run [`Worker::run`] (or drive [`Worker::tick`] themselves);
//! the simulator runs exactly this code.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::{Either, select};

use crate::control::ControlService;
use crate::conversation::{
    CloseReason, RunBinding, awaits_request_in_tx, binding_of, claimable_for_request_in_tx,
    close_in_tx,
};
use crate::env::Env;
use crate::events::Actor;
use crate::ids::{ConnectionId, RunId};
use crate::ports::{BoxFut, NoHints, Spawner, WakeHints};
use crate::run::abandon::{self, Watched};
use crate::run::cancel::{CancelToken, TokenRegistry};
use crate::run::executor::{ClaimedFor, ExecutionEnd, HeartbeatSwitch, RunExecutor, Start};
use crate::run::first_write::{CarriedWrites, FirstWrite, FirstWriteOutcome};
use crate::run::state::{Change, RequeueReason, transition};
use crate::run::{Failure, Lease, Run};
use crate::store::{Store, StoreTx, TxError};
use crate::time::Timestamp;
use crate::vocab::{CancelReason, CrashPoint, FailureReason, InvocationStatus, RunStatus};

/// The shortest lease a host may configure, in milliseconds: heartbeats run every lease/3.
pub const MIN_LEASE_MS: u64 = 3;
/// The longest lease a host may configure, in milliseconds: one hour. A lease is how long a run
/// waits after its worker died before another may take it (and how long `worker --until-idle`
/// may wait for it); past an hour that is an outage rather than a setting, and a value near
/// `u64::MAX` would put the expiry at the end of time, so the run would never be reclaimed.
pub const MAX_LEASE_MS: u64 = 3_600_000;

/// Worker settings with the defaults of SPEC §8.2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSettings {
    pub worker_id: String,
    pub lease_ms: u64,
    pub poll_ms: u64,
    pub reclaim_every_ms: u64,
    pub approval_sweep_every_ms: u64,
    pub max_attempts: u32,
    pub concurrency: usize,
}

impl WorkerSettings {
    pub fn new(worker_id: impl Into<String>) -> WorkerSettings {
        WorkerSettings {
            worker_id: worker_id.into(),
            lease_ms: 30_000,
            poll_ms: 250,
            reclaim_every_ms: 5_000,
            approval_sweep_every_ms: 30_000,
            max_attempts: 3,
            concurrency: 4,
        }
    }

    fn lease_micros(&self) -> i64 {
        i64::try_from(self.lease_ms)
            .unwrap_or(i64::MAX / 1000)
            .saturating_mul(1000)
    }

    fn heartbeat_micros(&self) -> i64 {
        (self.lease_micros() / 3).max(1)
    }
}

/// What one poll did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TickReport {
    pub claimed: usize,
    pub reclaimed: usize,
    pub expired: usize,
    /// Gateway connections closed because their gateway stopped renewing them.
    pub closed: usize,
}

/// How this worker's executions ended, for a host's summary (`worker --until-idle`). One
/// execution is one CLAIM: a run resumed after its approval is claimed, and counted, again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecutionTally {
    pub executions: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// Parked for approval (`WAITING_FOR_APPROVAL`).
    pub parked: u64,
    /// Fenced, or given back after a failed transaction: RECLAIM recovers the run.
    pub abandoned: u64,
    /// Every run it executed.
    pub runs: BTreeSet<RunId>,
}

impl ExecutionTally {
    fn record(&mut self, run: RunId, end: ExecutionEnd) {
        self.executions += 1;
        self.runs.insert(run);
        match end {
            ExecutionEnd::Finished(RunStatus::Completed) => self.completed += 1,
            ExecutionEnd::Finished(RunStatus::Cancelled) => self.cancelled += 1,
            ExecutionEnd::Finished(_) => self.failed += 1,
            ExecutionEnd::Parked => self.parked += 1,
            ExecutionEnd::Abandoned => self.abandoned += 1,
        }
    }
}

/// One worker process's state: its settings, token registry and in-flight count.
pub struct Worker<S: Store> {
    env: Env<S>,
    settings: WorkerSettings,
    tokens: TokenRegistry,
    in_flight: Arc<AtomicUsize>,
    last_reclaim: std::sync::Mutex<Option<Timestamp>>,
    last_sweep: std::sync::Mutex<Option<Timestamp>>,
    tally: std::sync::Mutex<ExecutionTally>,
}

/// Expired leases read per RECLAIM page.
const RECLAIM_PAGE: usize = 100;

/// CLAIM's writes inside an open transaction: `run` (QUEUED, as read or just inserted) becomes
/// RUNNING under `worker_id`'s new lease, which is returned with the claimed run.
fn claim_writes(
    tx: &mut dyn StoreTx,
    run: &Run,
    worker_id: &str,
    lease_expires_at: Timestamp,
    actor: &Actor,
    now: Timestamp,
) -> Result<(Run, Lease), TxError> {
    let change = Change::Claim {
        worker_id: worker_id.to_owned(),
        lease_expires_at,
    };
    let claimed = transition(tx, run, run.clone(), change, actor, now)?;
    let lease = claimed
        .lease()
        .ok_or_else(|| TxError::Backend("claimed run has no lease".into()))?;
    Ok((claimed, lease))
}
/// Orphaned call runs read per sweep. Those whose approved call waits for a request sent again
/// stay in the list until their approval expires, so the page is wider than the number of
/// such calls a tenant is expected to leave at once.
const ORPHAN_PAGE: usize = 500;

/// What one page of RECLAIM found and did.
struct ReclaimPage {
    candidates: usize,
    reclaimed: usize,
}

/// One execution's share of the worker's bookkeeping: counted in flight from entry, and on the
/// way out (a return, or a panic unwinding through the task) its token is unregistered and the
/// count given back. Without this, one panicking run would keep `--until-idle` and a graceful
/// shutdown waiting forever and hold a concurrency slot.
struct InFlight<'a> {
    count: &'a AtomicUsize,
    tokens: &'a TokenRegistry,
    run: RunId,
    epoch: u64,
}

impl<'a> InFlight<'a> {
    fn enter<S: Store>(worker: &'a Worker<S>, lease: &Lease) -> InFlight<'a> {
        worker.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight {
            count: &worker.in_flight,
            tokens: &worker.tokens,
            run: lease.run_id,
            epoch: lease.lease_epoch,
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.tokens.unregister(self.run, self.epoch);
        self.count.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<S: Store + 'static> Worker<S> {
    pub fn new(env: Env<S>, settings: WorkerSettings) -> Arc<Self> {
        Arc::new(Worker {
            env,
            settings,
            tokens: TokenRegistry::default(),
            in_flight: Arc::new(AtomicUsize::new(0)),
            last_reclaim: std::sync::Mutex::new(None),
            last_sweep: std::sync::Mutex::new(None),
            tally: std::sync::Mutex::new(ExecutionTally::default()),
        })
    }

    /// How this worker's executions ended so far.
    pub fn tally(&self) -> ExecutionTally {
        self.tally.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn settings(&self) -> &WorkerSettings {
        &self.settings
    }

    pub fn env(&self) -> &Env<S> {
        &self.env
    }

    /// The tokens of runs this process executes (the control service cancels through them).
    pub fn tokens(&self) -> &TokenRegistry {
        &self.tokens
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// CLAIM: the oldest due QUEUED run (or exactly `only`), under a new lease epoch. A run
    /// bound to an open gateway connection is never claimed here, not even by id (SPEC §19.4:
    /// only its gateway executes it); one bound to a closed connection is claimed to be ended
    /// (the executor finalizes it without a planner, [`crate::conversation`]).
    pub async fn claim(&self, only: Option<RunId>) -> Result<Option<(Run, Lease)>, TxError> {
        self.claim_where(only, None).await
    }

    /// CLAIM of a call run for a request this gateway holds (`connection` is the request's):
    /// `run` only, and only while it is bound to `connection` and that connection is open, or,
    /// for a run of another connection (open or closed), while its call is parked (an identical
    /// call sent again bound to it, SPEC §22.3), read inside the claim's transaction. Execute it
    /// with [`Worker::execute_for_request`].
    pub async fn claim_for_connection(
        &self,
        run: RunId,
        connection: ConnectionId,
    ) -> Result<Option<(Run, Lease)>, TxError> {
        self.claim_where(Some(run), Some(connection)).await
    }

    async fn claim_where(
        &self,
        only: Option<RunId>,
        connection: Option<ConnectionId>,
    ) -> Result<Option<(Run, Lease)>, TxError> {
        let now = self.env.clock.now();
        let until = now.saturating_add_micros(self.settings.lease_micros());
        let actor = Actor::worker(&self.settings.worker_id);
        let claimed = self.env.transact(|tx| {
            let Some(run) = tx.next_claimable_run(now, only)? else {
                return Ok(None);
            };
            let allowed = match (connection, binding_of(tx, &run)?) {
                (Some(ours), RunBinding::Live(bound)) if ours == bound => true,
                // Another conversation's parked call, bound to a request held here (§22.3):
                // its call is recorded, so no planner of that conversation is needed.
                (Some(ours), RunBinding::Live(_) | RunBinding::Orphaned(_)) => {
                    claimable_for_request_in_tx(tx, &run, ours, now)?
                }
                (Some(_), RunBinding::Unbound) => false,
                (None, RunBinding::Live(_)) => false,
                (None, RunBinding::Unbound) => true,
                // An orphan whose call waits for a request sent again is not ended (§22.3).
                (None, RunBinding::Orphaned(_)) => awaits_request_in_tx(tx, &run, now)?.is_none(),
            };
            if !allowed {
                return Ok(None);
            }
            claim_writes(tx, &run, &self.settings.worker_id, until, &actor, now).map(Some)
        })?;
        if claimed.is_some() {
            self.env.reached(CrashPoint::AfterClaim).await;
        }
        Ok(claimed)
    }

    /// CLAIM of `run`, a QUEUED run the open transaction has just inserted, by this worker:
    /// the gateway's ADMIT, SUBMIT and CLAIM of a call run, which the first write transaction
    /// of its execution carries ([`Worker::execute_carrying`]; issue 33).
    pub fn claim_admitted_in_tx(
        &self,
        tx: &mut dyn StoreTx,
        run: &Run,
        now: Timestamp,
    ) -> Result<(Run, Lease), TxError> {
        let until = now.saturating_add_micros(self.settings.lease_micros());
        let actor = Actor::worker(&self.settings.worker_id);
        claim_writes(tx, run, &self.settings.worker_id, until, &actor, now)
    }

    /// The run and lease [`Worker::claim_admitted_in_tx`] returns for `run` at `now`, known
    /// before it writes: what an execution whose claim its first write transaction carries
    /// begins from ([`Worker::execute_carrying`]). The carried writes check that the claim
    /// returned exactly this, so the two cannot drift apart unnoticed.
    pub fn admitted_claim(&self, run: &Run, now: Timestamp) -> Option<(Run, Lease)> {
        let mut claimed = run.clone();
        let until = now.saturating_add_micros(self.settings.lease_micros());
        crate::run::state::apply_claim(&mut claimed, run, &self.settings.worker_id, until);
        claimed.updated_at = now;
        let lease = claimed.lease()?;
        Some((claimed, lease))
    }

    /// The crash point of a claim folded into another transaction, passed before the
    /// execution that carries it ([`Worker::execute_carrying`]): there a crash leaves nothing
    /// of the call, and a pause (the simulator's slow process) delays its first write.
    pub async fn reached_after_claim(&self) {
        self.env.reached(CrashPoint::AfterClaim).await;
    }

    /// Executes a claimed run with its heartbeat until it parks or ends.
    pub async fn execute(&self, run: Run, lease: Lease) -> ExecutionEnd {
        self.execute_and_report(run, lease, ClaimedFor::Work, Start::Read)
            .await
            .0
    }

    /// [`Worker::execute`] of a call run claimed for a request this process holds
    /// ([`Worker::claim_for_connection`]): a run whose connection closed is executed for that
    /// request instead of ended (SPEC §22.3).
    pub async fn execute_for_request(&self, run: Run, lease: Lease) -> ExecutionEnd {
        self.execute_and_report(run, lease, ClaimedFor::WaitingRequest, Start::Read)
            .await
            .0
    }

    /// [`Worker::execute_for_request`] of a call run not yet in the store: `writes` insert and
    /// claim it ([`Worker::claim_admitted_in_tx`]) inside the execution's first write
    /// transaction ([`FirstWrite`]: one commit per call fewer, issue 33), and `run` and `lease`
    /// are what that claim will return ([`Worker::admitted_claim`]). The execution begins from
    /// them and the seed checkpoint ([`Start::Admitted`]); the heartbeat writes through the
    /// same store, so whichever writes first carries the claim. Returns how the execution
    /// ended and where the carried writes stand.
    pub async fn execute_carrying<D: Clone + Send + Sync + 'static>(
        &self,
        run: Run,
        lease: Lease,
        writes: CarriedWrites<D>,
    ) -> (ExecutionEnd, FirstWriteOutcome<D>) {
        let carrier = Arc::new(FirstWrite::new(Arc::clone(&self.env.store), writes));
        let start = Start::Admitted(Box::new(run.clone()));
        let (end, _) = self
            .execute_on(
                Arc::clone(&carrier),
                run,
                lease,
                ClaimedFor::WaitingRequest,
                start,
            )
            .await;
        (end, carrier.outcome())
    }

    /// [`Worker::execute`], also returning the failed transaction an `Abandoned` execution was
    /// abandoned for (`None` when it was fenced). Such an execution is logged as a warning and
    /// its lease released for RECLAIM (see `run::abandon`).
    async fn execute_and_report(
        &self,
        run: Run,
        lease: Lease,
        claimed_for: ClaimedFor,
        start: Start,
    ) -> (ExecutionEnd, Option<TxError>) {
        self.execute_on(Arc::clone(&self.env.store), run, lease, claimed_for, start)
            .await
    }

    /// [`Worker::execute_and_report`] writing through `store`: the worker's own, or one over it
    /// that carries writes of the claim ([`Worker::execute_carrying`]).
    async fn execute_on<T: Store>(
        &self,
        store: Arc<T>,
        run: Run,
        lease: Lease,
        claimed_for: ClaimedFor,
        start: Start,
    ) -> (ExecutionEnd, Option<TxError>) {
        let _in_flight = InFlight::enter(self, &lease);
        let token = self.tokens.register(run.id, lease.lease_epoch);
        if run.cancel_requested_at.is_some() {
            token.cancel(CancelReason::Requested);
        }
        if let crate::run::RunState::Running {
            lease_expires_at, ..
        } = &run.state
        {
            token.hold_lease_until(*lease_expires_at);
        }
        let watched = Arc::new(Watched::new(Arc::clone(&store)));
        let env = self.env.with_store(Arc::clone(&watched));
        let switch = HeartbeatSwitch::default();
        let executor =
            RunExecutor::new(&env, &self.settings.worker_id, switch.clone(), claimed_for);
        let span = tracing::info_span!("run", run_id = %run.id, lease_epoch = lease.lease_epoch, worker_id = %self.settings.worker_id);
        let execution = Box::pin(tracing::Instrument::instrument(
            executor.execute(&lease, &token, start),
            span,
        ));
        let heartbeat = Box::pin(self.heartbeat(store.as_ref(), &lease, &token, &switch));
        let end = match select(execution, heartbeat).await {
            Either::Left((end, _)) => end,
            // The heartbeat loop never ends by itself; if it did, the executor still owns the run.
            Either::Right(((), execution)) => execution.await,
        };
        self.tally
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(run.id, end);
        let cause = match end {
            ExecutionEnd::Abandoned => watched.latest_failure(),
            ExecutionEnd::Parked | ExecutionEnd::Finished(_) => None,
        };
        if let Some(cause) = &cause {
            self.give_back(&lease, cause);
        }
        (end, cause)
    }

    /// Logs an execution abandoned for a failed transaction and releases its lease (see
    /// `run::abandon`); the execution, heartbeat included, has ended.
    fn give_back(&self, lease: &Lease, cause: &TxError) {
        let released = abandon::release(self.env.store.as_ref(), lease, self.env.clock.now());
        let released = match &released {
            Ok(true) => "released for RECLAIM".to_owned(),
            Ok(false) => "already taken over".to_owned(),
            Err(error) => format!("not released ({error}); it runs out instead"),
        };
        tracing::warn!(
            run_id = %lease.run_id,
            lease_epoch = lease.lease_epoch,
            worker_id = %self.settings.worker_id,
            error = %cause,
            lease = %released,
            "a worker transaction failed: the execution was abandoned; RECLAIM recovers the run"
        );
    }

    /// Renews the lease every lease/3 and reports cancellation (SPEC §8.2).
    async fn heartbeat<T: Store>(
        &self,
        store: &T,
        lease: &Lease,
        token: &CancelToken,
        switch: &HeartbeatSwitch,
    ) {
        let mut next = self
            .env
            .clock
            .now()
            .saturating_add_micros(self.settings.heartbeat_micros());
        loop {
            self.env.clock.sleep_until(next).await;
            let now = self.env.clock.now();
            next = now.saturating_add_micros(self.settings.heartbeat_micros());
            if switch.is_paused() || token.reason() == Some(CancelReason::Fenced) {
                continue;
            }
            let until = now.saturating_add_micros(self.settings.lease_micros());
            match store.transact(|tx| tx.heartbeat(lease, until, now)) {
                Ok(None) => {
                    self.tokens
                        .cancel_epoch(lease.run_id, lease.lease_epoch, CancelReason::Fenced)
                }
                Ok(Some(observed)) if observed.cancel_requested_at.is_some() => {
                    token.hold_lease_until(until);
                    #[cfg(feature = "mutants")]
                    if crate::testing::mutants::ignore_heartbeat_cancel() {
                        continue;
                    }
                    self.tokens.cancel_epoch(
                        lease.run_id,
                        lease.lease_epoch,
                        CancelReason::Requested,
                    )
                }
                Ok(Some(_)) => token.hold_lease_until(until),
                // A transient storage error: the next beat tries again before the lease runs out.
                Err(_) => {}
            }
        }
    }

    /// RECLAIM every run whose lease expired (SPEC §8.2), a page of [`RECLAIM_PAGE`] at a time
    /// until none is left. Returns how many were reclaimed.
    pub async fn reclaim(&self) -> Result<usize, TxError> {
        let now = self.env.clock.now();
        let mut count = 0;
        loop {
            let page = self.reclaim_page(now).await?;
            count += page.reclaimed;
            // A short page was the last; a page that reclaimed nothing (every candidate taken
            // by another worker meanwhile) would only be read again.
            if page.candidates < RECLAIM_PAGE || page.reclaimed == 0 {
                return Ok(count);
            }
        }
    }

    async fn reclaim_page(&self, now: Timestamp) -> Result<ReclaimPage, TxError> {
        let expired = self.env.read(|tx| tx.expired_leases(now, RECLAIM_PAGE))?;
        let candidates = expired.len();
        let mut count = 0;
        for candidate in expired {
            let committed = self.env.transact(|tx| {
                let Some(run) = tx.run(candidate.id)? else { return Ok(false) };
                let still_expired = matches!(&run.state, crate::run::RunState::Running { lease_expires_at, .. } if *lease_expires_at <= now);
                if !still_expired || run.lease_epoch != candidate.lease_epoch {
                    return Ok(false);
                }
                let actor = Actor::maintenance();
                let running = !tx.invocations_of_run_in(run.id, &[InvocationStatus::Running])?.is_empty();
                if run.cancel_requested_at.is_some() && !running {
                    transition(tx, &run, run.clone(), Change::Cancel, &actor, now)?;
                    return Ok(true);
                }
                // A run whose client has gone is never re-queued (SPEC §19.4): nothing of it may
                // run again, so it ends here, its in-flight calls swept (UNCERTAIN when
                // watermarked and not idempotent, else FAILED tool.interrupted).
                if let RunBinding::Orphaned(_) = binding_of(tx, &run)? {
                    let change = if running {
                        Change::Fail(Failure::new(FailureReason::PlannerError, run.step_count, now))
                    } else {
                        Change::Cancel
                    };
                    transition(tx, &run, run.clone(), change, &actor, now)?;
                    return Ok(true);
                }
                let mut next = run.clone();
                // Saturating: a count read back from the store must end in max_attempts_exceeded,
                // never wrap to a fresh run.
                next.attempts = next.attempts.saturating_add(1);
                let change = if next.attempts >= self.settings.max_attempts {
                    Change::Fail(Failure::new(FailureReason::MaxAttemptsExceeded, next.step_count, now))
                } else {
                    let backoff_seconds = 1i64 << (next.attempts - 1).min(30);
                    Change::Requeue {
                        reason: RequeueReason::LeaseExpired { reclaimed_epoch: run.lease_epoch },
                        scheduled_for: Some(now.saturating_add_seconds(backoff_seconds)),
                    }
                };
                transition(tx, &run, next, change, &actor, now)?;
                Ok(true)
            })?;
            if committed {
                count += 1;
                self.env.reached(CrashPoint::AfterReclaim).await;
            }
        }
        Ok(ReclaimPage {
            candidates,
            reclaimed: count,
        })
    }

    /// The connection sweep (SPEC §19.4): closes every open connection whose `alive_until`
    /// passed (its gateway died or stalled), which cancels its parked and queued runs at once
    /// and flags its running one; RECLAIM then ends the running one when its lease expires.
    /// Runs with each reclaim sweep, before it. Returns how many it closed.
    pub async fn sweep_connections(&self) -> Result<usize, TxError> {
        let now = self.env.clock.now();
        let mut closed = 0;
        loop {
            let expired = self
                .env
                .read(|tx| tx.expired_connections(now, RECLAIM_PAGE))?;
            let candidates = expired.len();
            let mut page_closed = 0;
            for connection in expired {
                let result = self.env.transact(|tx| {
                    let Some(current) = tx.connection(connection.id)? else {
                        return Ok(None);
                    };
                    let still_expired = matches!(current.state, crate::conversation::ConnectionState::Open { alive_until } if alive_until <= now);
                    if !still_expired {
                        return Ok(None);
                    }
                    Ok(Some(close_in_tx(tx, current.id, CloseReason::Expired, now)?))
                })?;
                if let Some(flagged) = result {
                    page_closed += 1;
                    for run in flagged {
                        self.tokens.cancel(run, CancelReason::Requested);
                    }
                }
            }
            closed += page_closed;
            if candidates < RECLAIM_PAGE || page_closed == 0 {
                break;
            }
        }
        self.end_orphaned_calls().await?;
        Ok(closed)
    }

    /// The orphan sweep (SPEC §19.4, §22.3): each QUEUED call run whose connection has closed is
    /// claimed and ended (finalized without a planner, nothing invoked), unless its call waits
    /// for an identical call sent again (approved, not expired: [`awaits_request_in_tx`], read in
    /// the claim). Ordinary claims never take call runs, so this is what ends them, in every
    /// process's sweep. One page, oldest first.
    async fn end_orphaned_calls(&self) -> Result<(), TxError> {
        let now = self.env.clock.now();
        let orphans = self
            .env
            .read(|tx| tx.orphaned_call_runs(now, ORPHAN_PAGE))?;
        for run in orphans {
            if let Some((claimed, lease)) = self.claim(Some(run)).await? {
                self.execute(claimed, lease).await;
            }
        }
        Ok(())
    }

    /// The periodic jobs every airlock process on the store runs, each when due: the connection
    /// sweep and RECLAIM every `reclaim_every_ms`, approval expiry every
    /// `approval_sweep_every_ms`. A worker runs them in each [`Worker::tick`]; a gateway, which
    /// claims nothing but its own connection's runs, runs them alone (SPEC §19.4: a dead
    /// gateway's runs end within a lease plus a sweep even when no `airlock worker` runs).
    pub async fn maintain(&self, control: &ControlService<S>) -> Result<TickReport, TxError> {
        let now = self.env.clock.now();
        let mut report = TickReport::default();
        if due(&self.last_reclaim, now, self.settings.reclaim_every_ms) {
            report.closed += self.sweep_connections().await?;
            report.reclaimed += self.reclaim().await?;
        }
        if due(&self.last_sweep, now, self.settings.approval_sweep_every_ms) {
            report.expired += control.expire_due_all(now).await?;
        }
        Ok(report)
    }

    /// One poll: the periodic jobs when due ([`Worker::maintain`]; sweep and reclaim also when
    /// there is nothing to claim), then claim up to the free slots and hand each run to
    /// `spawner`.
    pub async fn tick(
        self: &Arc<Self>,
        spawner: &dyn Spawner,
        control: &ControlService<S>,
    ) -> Result<TickReport, TxError> {
        let mut report = self.maintain(control).await?;
        // A claimed run counts in `in_flight` from here on (below), so the free slots are
        // `concurrency - in_flight` alone; adding this tick's claims again would count each
        // twice and fill only half the free slots per poll.
        while self.in_flight() < self.settings.concurrency {
            match self.claim(None).await? {
                Some((run, lease)) => {
                    report.claimed += 1;
                    let worker = Arc::clone(self);
                    // Count the run as in flight before the task starts, so the slot is taken.
                    worker.in_flight.fetch_add(1, Ordering::SeqCst);
                    let task: BoxFut<'static, ()> = Box::pin(async move {
                        worker.in_flight.fetch_sub(1, Ordering::SeqCst);
                        worker.execute(run, lease).await;
                    });
                    spawner.spawn(task);
                }
                None => {
                    // Nothing to claim: reclaim now too, so an expired lease does not wait.
                    if report.reclaimed == 0 {
                        report.closed += self.sweep_connections().await?;
                        report.reclaimed += self.reclaim().await?;
                    }
                    break;
                }
            }
        }
        Ok(report)
    }

    /// Claims and executes one specific run in this task (the inline dispatcher, `runs resume`).
    /// An execution abandoned for a failed transaction is that transaction's error, so the
    /// caller can report it instead of a run that seems to be still RUNNING.
    pub async fn run_inline(&self, run: RunId) -> Result<Option<ExecutionEnd>, TxError> {
        match self.claim(Some(run)).await? {
            Some((run, lease)) => match self
                .execute_and_report(run, lease, ClaimedFor::Work, Start::Read)
                .await
            {
                (ExecutionEnd::Abandoned, Some(cause)) => Err(cause),
                (end, _) => Ok(Some(end)),
            },
            None => Ok(None),
        }
    }

    /// Whether the store holds no QUEUED and no RUNNING run and nothing is in flight here
    /// (`worker --until-idle`); waiting runs do not count.
    pub fn is_idle(&self) -> Result<bool, TxError> {
        if self.in_flight() > 0 {
            return Ok(false);
        }
        self.env.read(|tx| {
            Ok(tx.count_runs(RunStatus::Queued)? == 0 && tx.count_runs(RunStatus::Running)? == 0)
        })
    }

    /// The worker loop: tick, then sleep one poll interval, until `stop` says so. Stops claiming
    /// once stopping and returns when in-flight runs have ended or parked.
    ///
    /// A tick that fails (a storage error in a sweep or a claim) stops the loop the same way
    /// and is then returned: the worker claims nothing more, but the runs it already executes
    /// finish first, since their own transactions may well succeed. Dropping them instead would
    /// leave their leases to expire, cost each an attempt, and turn a started non-idempotent
    /// call UNCERTAIN.
    pub async fn run(
        self: &Arc<Self>,
        spawner: &dyn Spawner,
        control: &ControlService<S>,
        stop: &dyn Fn() -> bool,
    ) -> Result<(), TxError> {
        self.run_with_hints(spawner, control, stop, &NoHints).await
    }

    /// [`Worker::run`] whose wait between ticks also ends at a hint (a run queued by this
    /// process, or on PostgreSQL by any process's commit), so such a run is claimed at once
    /// instead of at the next poll. The hint is armed before each tick.
    pub async fn run_with_hints(
        self: &Arc<Self>,
        spawner: &dyn Spawner,
        control: &ControlService<S>,
        stop: &dyn Fn() -> bool,
        hints: &dyn WakeHints,
    ) -> Result<(), TxError> {
        let mut failed = None;
        while !stop() {
            let hinted = hints.armed();
            if let Err(error) = self.tick(spawner, control).await {
                failed = Some(error);
                break;
            }
            let poll = std::pin::pin!(self.sleep_one_poll());
            let _ = select(poll, hinted).await;
        }
        while self.in_flight() > 0 {
            self.sleep_one_poll().await;
        }
        failed.map_or(Ok(()), Err)
    }

    async fn sleep_one_poll(&self) {
        let next = self.env.clock.now().saturating_add_micros(
            i64::try_from(self.settings.poll_ms)
                .unwrap_or(250)
                .saturating_mul(1000),
        );
        self.env.clock.sleep_until(next).await;
    }
}

/// Whether a periodic job is due, recording `now` if so.
fn due(last: &std::sync::Mutex<Option<Timestamp>>, now: Timestamp, every_ms: u64) -> bool {
    let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
    let every = i64::try_from(every_ms)
        .unwrap_or(i64::MAX / 1000)
        .saturating_mul(1000);
    let is_due = last.is_none_or(|t| now >= t.saturating_add_micros(every));
    if is_due {
        *last = Some(now);
    }
    is_due
}
