//! The application service (SPEC §10.4, §8.5, §9.5, §15): transport-neutral operations on runs,
//! approvals and the UNCERTAIN review queue. Every call takes the caller's `Principal`; another
//! tenant's rows are `NotFound`, never `Forbidden`.

use std::sync::Arc;

use serde_json::json;

use crate::approval::Approval;
use crate::env::Env;
use crate::events::{Actor, Event, EventType, NewEvent, ProcessEvent, keys};
use crate::ids::{ApprovalId, InvocationId, RunId, SessionId, SettlementId};
use crate::invocation::Invocation;
use crate::planner::script::{DEFAULT_MAX_SCRIPT_BYTES, RunScript};
use crate::ports::Dispatcher;
use crate::principal::Principal;
use crate::run::cancel::TokenRegistry;
pub use crate::run::cancel_request::CancelOutcome;
use crate::run::cancel_request::request_cancel_in_tx;
use crate::run::state::{Change, RequeueReason, transition};
use crate::run::{Run, RunState, RunSummary};
use crate::scope::Scope;
use crate::session::{PolicyProfileRecord, Session, Settlement};
use crate::store::{ApprovalCursor, RunCursor, Store, StoreTx, TxError};
use crate::time::Timestamp;
use crate::vocab::{
    ApprovalResolution, ApprovalStatus, CancelReason, CrashPoint, InvocationStatus, ResolveState,
    RunStatus, SettlementOutcome,
};

/// `list_pending`'s page size when none is given, and its largest (SPEC §10.4).
pub const APPROVAL_PAGE_DEFAULT: usize = 50;
pub const APPROVAL_PAGE_MAX: usize = 100;
/// The longest resolution reason (SPEC §10.1) and settlement note (§9.5), in characters.
pub const MAX_REASON_CHARS: usize = 4096;
pub const MAX_NOTE_CHARS: usize = 4096;

/// The service's error kinds; the CLI maps each to an exit code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    Forbidden(String),
    #[error("not found")]
    NotFound,
    #[error("the run's own principal may not resolve its approvals")]
    SelfApproval,
    #[error("the approval is no longer pending (status {status})")]
    NoLongerPending { status: ApprovalStatus },
    #[error("the approval expired")]
    Expired,
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    Conflict(String),
    #[error("storage: {0}")]
    Storage(String),
}

impl ServiceError {
    /// The snake_case code of Appendix A.
    pub fn code(&self) -> &'static str {
        match self {
            ServiceError::Forbidden(_) => "forbidden",
            ServiceError::NotFound => "not_found",
            ServiceError::SelfApproval => "self_approval",
            ServiceError::NoLongerPending { .. } => "no_longer_pending",
            ServiceError::Expired => "expired",
            ServiceError::InvalidArgument(_) => "invalid_argument",
            ServiceError::Conflict(_) => "conflict",
            ServiceError::Storage(_) => "storage",
        }
    }
}

impl From<TxError> for ServiceError {
    fn from(error: TxError) -> ServiceError {
        match error {
            TxError::NotFound => ServiceError::NotFound,
            TxError::Conflict(message) => ServiceError::Conflict(message),
            TxError::Fenced => ServiceError::Conflict("fenced".to_owned()),
            TxError::Backend(message) => ServiceError::Storage(message),
        }
    }
}

/// A service result that commits even when the caller is refused (an expiry found by resolve).
enum Committed<T> {
    Value(T),
    ExpiredNow { requeued: Option<RunId> },
}

/// `submit_run`'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub run_id: RunId,
    pub session_id: SessionId,
    pub status: RunStatus,
}

/// A page and the cursor of the next one (`None` iff no further row exists).
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// `resolve`'s answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub state: ResolveState,
    pub approval: Approval,
}

pub struct ControlService<S: Store> {
    env: Env<S>,
    dispatcher: Arc<dyn Dispatcher>,
    /// This process's run tokens, when it also executes runs.
    tokens: Option<TokenRegistry>,
    /// The largest run script, and `planner_input`, `submit_run` accepts.
    max_script_bytes: usize,
}

/// A resolution reason longer than [`MAX_REASON_CHARS`], as the error it gets.
fn invalid_reason(reason: Option<&str>) -> Option<ServiceError> {
    reason
        .is_some_and(|r| r.chars().count() > MAX_REASON_CHARS)
        .then(|| {
            ServiceError::InvalidArgument(format!(
                "reason must be at most {MAX_REASON_CHARS} characters"
            ))
        })
}

fn require(principal: &Principal, scope: &str) -> Result<(), ServiceError> {
    let held = Scope::parse(scope).is_ok_and(|s| principal.scopes.contains(&s));
    if held {
        Ok(())
    } else {
        Err(ServiceError::Forbidden(format!(
            "missing required scope: {scope}"
        )))
    }
}

impl<S: Store> ControlService<S> {
    pub fn new(
        env: Env<S>,
        dispatcher: Arc<dyn Dispatcher>,
        tokens: Option<TokenRegistry>,
    ) -> Self {
        ControlService {
            env,
            dispatcher,
            tokens,
            max_script_bytes: DEFAULT_MAX_SCRIPT_BYTES,
        }
    }

    /// Sets the largest run script `submit_run` accepts (default [`DEFAULT_MAX_SCRIPT_BYTES`]).
    pub fn with_max_script_bytes(mut self, max_script_bytes: usize) -> Self {
        self.max_script_bytes = max_script_bytes;
        self
    }

    pub fn env(&self) -> &Env<S> {
        &self.env
    }

    /// SUBMIT (SPEC §15): a new run from a run script, queued with its seed checkpoint.
    ///
    /// The script, and the `planner_input` stored from it, may be at most the configured
    /// number of bytes ([`ControlService::with_max_script_bytes`]): every worker reads the
    /// script back and every checkpoint's history repeats its calls, so an unbounded script is
    /// an unbounded cost for the store and every process that touches the run.
    pub async fn submit_run(
        &self,
        principal: &Principal,
        script_text: &str,
    ) -> Result<Submitted, ServiceError> {
        require(principal, "run.write")?;
        self.check_script_size("the run script", script_text.len())?;
        let script = RunScript::parse(script_text)
            .map_err(|e| ServiceError::InvalidArgument(e.to_string()))?;
        let planner_input: Arc<str> = script.to_json().into();
        self.check_script_size("its planner_input", planner_input.len())?;
        if script.tenant_id != principal.tenant_id || script.principal_id != principal.principal_id
        {
            return Err(ServiceError::Forbidden(
                "the script's tenant and principal must be the caller's".to_owned(),
            ));
        }
        if !script.principal_scopes.is_subset(&principal.scopes) {
            return Err(ServiceError::Forbidden(
                "the script's scopes must be a subset of the caller's".to_owned(),
            ));
        }
        let now = self.env.clock.now();
        let run_id = RunId(self.env.new_uuid());
        let fresh_session = SessionId(self.env.new_uuid());
        let deadline_at = script
            .limits
            .deadline_seconds
            .map(|s| now.saturating_add_seconds(i64::from(s)));
        let actor = Actor::principal(&principal.principal_id);
        let submitted = self.env.transact(|tx| {
            let session_id = match script.session_id {
                Some(id) => {
                    let session = tx.session(id)?.ok_or(TxError::NotFound)?;
                    if session.tenant_id != principal.tenant_id {
                        return Err(TxError::NotFound);
                    }
                    if session.principal_id != principal.principal_id {
                        return Err(TxError::Conflict(
                            "the session belongs to another principal".to_owned(),
                        ));
                    }
                    // A gateway connection's session takes runs only from its client (§19.1).
                    if tx.connection_by_session(id)?.is_some() {
                        return Err(TxError::Conflict(
                            "the session belongs to an MCP connection".to_owned(),
                        ));
                    }
                    if !tx.active_runs_in_session(id)?.is_empty() {
                        return Err(TxError::Conflict(
                            "the session already has an active run".to_owned(),
                        ));
                    }
                    id
                }
                None => {
                    tx.insert_session(&Session {
                        id: fresh_session,
                        tenant_id: principal.tenant_id.clone(),
                        principal_id: principal.principal_id.clone(),
                        next_event_sequence: 1,
                        created_at: now,
                    })?;
                    fresh_session
                }
            };
            let run = Run {
                id: run_id,
                session_id,
                tenant_id: script.tenant_id.clone(),
                principal_id: script.principal_id.clone(),
                principal_scopes: script.principal_scopes.clone(),
                origin_trust: script.origin_trust,
                planner_kind: "scripted".to_owned(),
                planner_input: Arc::clone(&planner_input),
                state: RunState::Queued {
                    scheduled_for: None,
                },
                step_count: 0,
                tool_call_count: 0,
                limits: script.limits,
                deadline_at,
                lease_epoch: 0,
                attempts: 0,
                cancel_requested_at: None,
                created_at: now,
                updated_at: now,
            };
            crate::run::submit::insert_queued_run(tx, &run, &actor, now)?;
            Ok(Submitted {
                run_id,
                session_id,
                status: RunStatus::Queued,
            })
        })?;
        self.env.reached(CrashPoint::AfterSubmit).await;
        self.dispatcher.dispatch(run_id);
        Ok(submitted)
    }

    fn check_script_size(&self, what: &str, bytes: usize) -> Result<(), ServiceError> {
        if bytes > self.max_script_bytes {
            return Err(ServiceError::InvalidArgument(format!(
                "{what} is {bytes} bytes, over the limit of {} bytes",
                self.max_script_bytes
            )));
        }
        Ok(())
    }

    fn visible_run(tx: &mut dyn StoreTx, principal: &Principal, id: RunId) -> Result<Run, TxError> {
        tx.run(id)?
            .filter(|r| r.tenant_id == principal.tenant_id)
            .ok_or(TxError::NotFound)
    }

    fn visible_approval(
        tx: &mut dyn StoreTx,
        principal: &Principal,
        id: ApprovalId,
    ) -> Result<Approval, TxError> {
        tx.approval(id)?
            .filter(|a| a.tenant_id == principal.tenant_id && a.requested_at.is_some())
            .ok_or(TxError::NotFound)
    }

    pub fn get_run(&self, principal: &Principal, id: RunId) -> Result<Run, ServiceError> {
        require(principal, "run.read")?;
        Ok(self.env.read(|tx| Self::visible_run(tx, principal, id))?)
    }

    /// The tenant's runs, newest first (`runs list`), without their planner input; `cursor` is
    /// the previous page's `next_cursor`, `limit` 1..=100 (default 50).
    pub fn list_runs(
        &self,
        principal: &Principal,
        limit: Option<usize>,
        cursor: Option<&str>,
    ) -> Result<Page<RunSummary>, ServiceError> {
        require(principal, "run.read")?;
        let limit = limit.unwrap_or(APPROVAL_PAGE_DEFAULT);
        if !(1..=APPROVAL_PAGE_MAX).contains(&limit) {
            return Err(ServiceError::InvalidArgument(format!(
                "limit must be in 1..={APPROVAL_PAGE_MAX}"
            )));
        }
        let after = cursor
            .map(|c| {
                parse_cursor(c).map(|a| RunCursor {
                    created_at: a.created_at,
                    id: RunId(a.id.as_uuid()),
                })
            })
            .transpose()?;
        let mut items = self
            .env
            .read(|tx| tx.runs_of_tenant(&principal.tenant_id, after, limit + 1))?;
        let more = items.len() > limit;
        items.truncate(limit);
        let next_cursor = if more {
            items
                .last()
                .map(|r| format!("{}:{}", r.created_at.as_micros(), r.id))
        } else {
            None
        };
        Ok(Page { items, next_cursor })
    }

    /// The run's events by id; `after_id` is the previous page's `next_cursor`.
    pub fn list_events(
        &self,
        principal: &Principal,
        run: RunId,
        after_id: Option<i64>,
        limit: Option<usize>,
    ) -> Result<Page<Event>, ServiceError> {
        require(principal, "run.read")?;
        let limit = limit.unwrap_or(100);
        if !(1..=1000).contains(&limit) {
            return Err(ServiceError::InvalidArgument(
                "limit must be in 1..=1000".to_owned(),
            ));
        }
        let mut items = self.env.read(|tx| {
            Self::visible_run(tx, principal, run)?;
            tx.events_of_run(run, after_id, limit + 1)
        })?;
        let more = items.len() > limit;
        items.truncate(limit);
        let next_cursor = if more {
            items.last().map(|e| e.id.to_string())
        } else {
            None
        };
        Ok(Page { items, next_cursor })
    }

    /// The caller tenant's events of every run, by id, strictly after `after_id` (SPEC §20's
    /// event stream). Scope `run.read`: the stream is the runs' audit log, the same records
    /// `list_events` gives per run. `next_cursor` is the last item's id whenever the page is
    /// not empty, since a tail asks again after it even when the page was short.
    pub fn tenant_events(
        &self,
        principal: &Principal,
        after_id: Option<i64>,
        limit: Option<usize>,
    ) -> Result<Page<Event>, ServiceError> {
        require(principal, "run.read")?;
        let limit = limit.unwrap_or(100);
        if !(1..=1000).contains(&limit) {
            return Err(ServiceError::InvalidArgument(
                "limit must be in 1..=1000".to_owned(),
            ));
        }
        let items = self
            .env
            .read(|tx| tx.events_of_tenant(&principal.tenant_id, after_id, limit))?;
        let next_cursor = items.last().map(|e| e.id.to_string());
        Ok(Page { items, next_cursor })
    }

    /// The highest event id committed so far (scope `run.read`): where a view rendered now
    /// starts its tail, so that nothing committed after the render is missed.
    pub fn last_event_id(&self, principal: &Principal) -> Result<Option<i64>, ServiceError> {
        require(principal, "run.read")?;
        Ok(self.env.read(|tx| tx.last_event_id())?)
    }

    pub fn get_approval(
        &self,
        principal: &Principal,
        id: ApprovalId,
    ) -> Result<Approval, ServiceError> {
        require(principal, "approval.read")?;
        Ok(self
            .env
            .read(|tx| Self::visible_approval(tx, principal, id))?)
    }

    /// The explanation of the decision behind each of these approvals (SPEC §4.1: for audit and
    /// approvers only, never the planner), read in one transaction. Not in SPEC §10.4: the
    /// approval record carries the reason code but not its explanation, and a reviewer needs
    /// both. Ids that are not the caller's announced approvals are left out, as `get` would
    /// answer `NotFound` for them.
    pub fn approval_explanations(
        &self,
        principal: &Principal,
        ids: &[ApprovalId],
    ) -> Result<std::collections::BTreeMap<ApprovalId, String>, ServiceError> {
        require(principal, "approval.read")?;
        Ok(self.env.read(|tx| {
            let mut explanations = std::collections::BTreeMap::new();
            for &id in ids {
                let approval = match Self::visible_approval(tx, principal, id) {
                    Ok(approval) => approval,
                    Err(TxError::NotFound) => continue,
                    Err(error) => return Err(error),
                };
                if let Some(decision) = tx
                    .invocation(approval.action_id)?
                    .and_then(|i| i.policy_decision)
                {
                    explanations.insert(id, decision.explanation);
                }
            }
            Ok(explanations)
        })?)
    }

    /// The tenant's conversations (SPEC §22.1), newest first (scope `run.read`).
    pub fn list_conversations(
        &self,
        principal: &Principal,
        limit: Option<usize>,
    ) -> Result<Vec<crate::conversation::Connection>, ServiceError> {
        require(principal, "run.read")?;
        let limit = limit.unwrap_or(APPROVAL_PAGE_DEFAULT);
        if !(1..=APPROVAL_PAGE_MAX).contains(&limit) {
            return Err(ServiceError::InvalidArgument(format!(
                "limit must be in 1..={APPROVAL_PAGE_MAX}"
            )));
        }
        Ok(self
            .env
            .read(|tx| tx.connections_of_tenant(&principal.tenant_id, limit))?)
    }

    /// One of the tenant's conversations (scope `run.read`); another tenant's is `NotFound`.
    pub fn get_conversation(
        &self,
        principal: &Principal,
        id: crate::ids::ConnectionId,
    ) -> Result<crate::conversation::Connection, ServiceError> {
        require(principal, "run.read")?;
        let found = self.env.read(|tx| tx.connection(id))?;
        match found {
            Some(c) if c.tenant_id == principal.tenant_id => Ok(c),
            _ => Err(ServiceError::NotFound),
        }
    }

    /// One of the tenant's conversations and its newest calls, at most `limit` (scope
    /// `run.read`): the calls are read only after the conversation was found visible.
    pub fn conversation_calls(
        &self,
        principal: &Principal,
        id: crate::ids::ConnectionId,
        limit: usize,
    ) -> Result<
        (
            crate::conversation::Connection,
            crate::conversation::calls::Calls,
        ),
        ServiceError,
    > {
        let conversation = self.get_conversation(principal, id)?;
        let now = self.env.clock.now();
        let calls = self
            .env
            .read(|tx| crate::conversation::calls::calls_of(tx, &conversation, limit, now))?;
        Ok((conversation, calls))
    }

    /// CLEAR-TAINT (SPEC §22.1): only a human holding `approval.resolve` clears a
    /// conversation's taint, with a reason; the clear is the event
    /// `conversation.taint_cleared`. An untainted or closed conversation is a `Conflict`, and so
    /// is one tainted at another time than `seen`, when given (the taint the reviewer saw).
    pub fn clear_conversation_taint(
        &self,
        principal: &Principal,
        id: crate::ids::ConnectionId,
        reason: &str,
        seen: Option<crate::time::Timestamp>,
    ) -> Result<crate::conversation::Connection, ServiceError> {
        require(principal, "approval.resolve")?;
        if reason.trim().is_empty() {
            return Err(ServiceError::InvalidArgument(
                "a reason is required to clear a conversation's taint".to_owned(),
            ));
        }
        let now = self.env.clock.now();
        let actor = Actor::principal(&principal.principal_id);
        let cleared = self.env.transact(|tx| {
            match tx.connection(id)? {
                Some(c) if c.tenant_id == principal.tenant_id => {}
                _ => return Err(TxError::NotFound),
            }
            crate::conversation::clear_taint_in_tx(tx, id, &actor, reason, seen, now)
        })?;
        cleared.map_err(|refused| ServiceError::Conflict(refused.to_string()))
    }

    /// The tenant's announced pending approvals, newest first.
    pub fn list_pending(
        &self,
        principal: &Principal,
        run: Option<RunId>,
        limit: Option<usize>,
        cursor: Option<&str>,
    ) -> Result<Page<Approval>, ServiceError> {
        require(principal, "approval.read")?;
        let limit = limit.unwrap_or(APPROVAL_PAGE_DEFAULT);
        if !(1..=APPROVAL_PAGE_MAX).contains(&limit) {
            return Err(ServiceError::InvalidArgument(format!(
                "limit must be in 1..={APPROVAL_PAGE_MAX}"
            )));
        }
        let after = cursor.map(parse_cursor).transpose()?;
        let mut items = self
            .env
            .read(|tx| tx.pending_approvals(&principal.tenant_id, run, after, limit + 1))?;
        let more = items.len() > limit;
        items.truncate(limit);
        let next_cursor = if more {
            items
                .last()
                .map(|a| format!("{}:{}", a.created_at.as_micros(), a.id))
        } else {
            None
        };
        Ok(Page { items, next_cursor })
    }

    /// RESOLVE (SPEC §10.4), checks in the spec's order; one transaction.
    pub async fn resolve(
        &self,
        principal: &Principal,
        id: ApprovalId,
        resolution: ApprovalResolution,
        reason: Option<&str>,
    ) -> Result<Resolved, ServiceError> {
        require(principal, "approval.resolve")?;
        let self_approval = self.env.ruleset().profile.self_approval_enabled;
        let committed = self.env.transact(|tx| {
            // Read once the write lock is held: a resolve that waited for the lock must not
            // approve with a time from before it waited (§16 #23, nothing approved at or after
            // expires_at).
            let now = self.env.clock.now();
            let approval = Self::visible_approval(tx, principal, id)?;
            // The request itself is checked before any answer that depends on the row's state:
            // a repeat of an applied resolution is still a request, and one with an invalid
            // reason is refused (exit 2) rather than answered `already_resolved_identically`.
            // Only the visibility check comes first, so another tenant's id stays NotFound.
            if let Some(invalid) = invalid_reason(reason) {
                return Ok(Err(invalid));
            }
            if !self_approval && approval.principal_id == principal.principal_id {
                return Ok(Err(ServiceError::SelfApproval));
            }
            match approval.status {
                ApprovalStatus::Approved | ApprovalStatus::Denied => {
                    #[cfg(feature = "mutants")]
                    if crate::testing::mutants::second_resolution_wins(&approval, resolution) {
                        return Ok(Ok(Committed::Value((
                            Resolved {
                                state: ResolveState::Applied,
                                approval: crate::testing::mutants::resolved_as(
                                    &approval, resolution, now,
                                ),
                            },
                            None,
                        ))));
                    }
                    let requested = match resolution {
                        ApprovalResolution::ApproveOnce => ApprovalStatus::Approved,
                        ApprovalResolution::Deny => ApprovalStatus::Denied,
                    };
                    let state = if approval.status == requested {
                        ResolveState::AlreadyResolvedIdentically
                    } else {
                        ResolveState::AlreadyResolvedDifferently
                    };
                    return Ok(Ok(Committed::Value((Resolved { state, approval }, None))));
                }
                ApprovalStatus::Expired | ApprovalStatus::Cancelled => {
                    return Ok(Err(ServiceError::NoLongerPending {
                        status: approval.status,
                    }));
                }
                ApprovalStatus::Pending => {}
            }
            if now >= approval.expires_at {
                let requeued = expire_one(tx, &approval, now)?;
                return Ok(Ok(Committed::ExpiredNow { requeued }));
            }
            let mut next = approval.clone();
            next.status = match resolution {
                ApprovalResolution::ApproveOnce => ApprovalStatus::Approved,
                ApprovalResolution::Deny => ApprovalStatus::Denied,
            };
            next.resolution = Some(resolution);
            next.resolution_reason = reason.map(str::to_owned);
            next.resolved_at = Some(now);
            next.resolved_by = Some(principal.principal_id.clone());
            tx.update_approval(ApprovalStatus::Pending, &next)?;
            let actor = Actor::principal(&principal.principal_id);
            tx.append_event(&NewEvent {
                session_id: approval.session_id,
                run_id: Some(approval.run_id),
                event_type: EventType::ApprovalResolved,
                actor: actor.clone(),
                payload: json!({"approval_id": id.to_string(), "resolution": resolution.as_str()}),
                derivation_key: Some(keys::approval_closed(id)),
                created_at: now,
            })?;
            let requeued = requeue_waiting(
                tx,
                approval.run_id,
                RequeueReason::ApprovalResolved(id),
                &actor,
                now,
            )?;
            Ok(Ok(Committed::Value((
                Resolved {
                    state: ResolveState::Applied,
                    approval: next,
                },
                requeued,
            ))))
        })?;
        match committed? {
            Committed::Value((resolved, requeued)) => {
                if resolved.state == ResolveState::Applied {
                    self.env.reached(CrashPoint::AfterResolve).await;
                }
                if let Some(run) = requeued {
                    self.dispatcher.resume(run);
                }
                Ok(resolved)
            }
            Committed::ExpiredNow { requeued } => {
                self.env.reached(CrashPoint::AfterExpire).await;
                if let Some(run) = requeued {
                    self.dispatcher.resume(run);
                }
                Err(ServiceError::Expired)
            }
        }
    }

    /// EXPIRE for the caller's tenant (`airlock approvals expire`).
    pub async fn expire_due(&self, principal: &Principal) -> Result<usize, ServiceError> {
        require(principal, "approval.resolve")?;
        let now = self.env.clock.now();
        Ok(self.expire_pass(now, Some(&principal.tenant_id)).await?)
    }

    /// EXPIRE for every tenant: the worker's approval sweep, without a principal.
    pub async fn expire_due_all(&self, now: Timestamp) -> Result<usize, TxError> {
        self.expire_pass(now, None).await
    }

    async fn expire_pass(&self, now: Timestamp, tenant: Option<&str>) -> Result<usize, TxError> {
        let mut expired = 0;
        loop {
            let due = self.env.read(|tx| tx.due_approvals(now, tenant, 100))?;
            if due.is_empty() {
                return Ok(expired);
            }
            for approval in due {
                // One transaction per approval; a racing resolve or cancel may win it first.
                let result = self.env.transact(|tx| match tx.approval(approval.id)? {
                    Some(current) if current.status == ApprovalStatus::Pending => {
                        Ok(Some(expire_one(tx, &current, now)?))
                    }
                    _ => Ok(None),
                })?;
                if let Some(requeued) = result {
                    expired += 1;
                    self.env.reached(CrashPoint::AfterExpire).await;
                    if let Some(run) = requeued {
                        self.dispatcher.resume(run);
                    }
                }
            }
        }
    }

    /// CANCEL (SPEC §8.5).
    pub async fn cancel_run(
        &self,
        principal: &Principal,
        id: RunId,
    ) -> Result<CancelOutcome, ServiceError> {
        require(principal, "run.cancel")?;
        let now = self.env.clock.now();
        let actor = Actor::principal(&principal.principal_id);
        // With whether the transaction wrote anything: the crash point follows a commit
        // (§2.2), and a repeated request for a run that is still running commits nothing.
        let (outcome, wrote) = self.env.transact(|tx| {
            let run = Self::visible_run(tx, principal, id)?;
            request_cancel_in_tx(tx, &run, &actor, now)
        })?;
        if wrote {
            self.env.reached(CrashPoint::AfterCancel).await;
        }
        if outcome.accepted
            && outcome.status == RunStatus::Running
            && let Some(tokens) = &self.tokens
        {
            tokens.cancel(id, CancelReason::Requested);
        }
        Ok(outcome)
    }

    /// Re-dispatches a QUEUED run without changing it. A run still in its retry back-off
    /// (`scheduled_for` after now) is a `Conflict` naming the time it is due: every dispatcher
    /// claims only due runs (SPEC §10.5), so a resume answered `Ok` would execute nothing, and
    /// `runs resume` would print an unchanged QUEUED run with exit 0.
    pub fn resume_run(&self, principal: &Principal, id: RunId) -> Result<(), ServiceError> {
        require(principal, "run.write")?;
        let run = self.env.read(|tx| Self::visible_run(tx, principal, id))?;
        match run.state {
            RunState::Queued {
                scheduled_for: Some(due),
            } if due > self.env.clock.now() => Err(ServiceError::Conflict(format!(
                "run is QUEUED but not due until {due}: it waits out its retry back-off after \
                 a lost lease (SPEC §8.2); a worker claims it then, or resume it again after \
                 that time"
            ))),
            RunState::Queued { .. } => {
                self.dispatcher.resume(id);
                Ok(())
            }
            _ => Err(ServiceError::Conflict(format!(
                "run is {}, not QUEUED",
                run.status()
            ))),
        }
    }

    /// The UNCERTAIN review queue (SPEC §9.5), newest first.
    pub fn list_uncertain(
        &self,
        principal: &Principal,
        all: bool,
    ) -> Result<Vec<Invocation>, ServiceError> {
        require(principal, "invocation.read")?;
        Ok(self
            .env
            .read(|tx| tx.uncertain_invocations(&principal.tenant_id, all))?)
    }

    /// [`ControlService::list_uncertain`] with each invocation's settlement, if it has one, read
    /// in the same transaction. Not in SPEC §9.5: with `all`, the queue also holds settled calls,
    /// and a reviewer needs to see which finding each one already has.
    pub fn list_uncertain_with_settlements(
        &self,
        principal: &Principal,
        all: bool,
    ) -> Result<Vec<(Invocation, Option<Settlement>)>, ServiceError> {
        require(principal, "invocation.read")?;
        Ok(self.env.read(|tx| {
            let invocations = tx.uncertain_invocations(&principal.tenant_id, all)?;
            invocations
                .into_iter()
                .map(|invocation| {
                    let settlement = tx.settlement_by_invocation(invocation.id)?;
                    Ok((invocation, settlement))
                })
                .collect::<Result<Vec<_>, TxError>>()
        })?)
    }

    /// SETTLE: records a human finding; the invocation stays UNCERTAIN.
    pub async fn settle(
        &self,
        principal: &Principal,
        id: InvocationId,
        outcome: SettlementOutcome,
        note: &str,
    ) -> Result<Settlement, ServiceError> {
        require(principal, "invocation.settle")?;
        let now = self.env.clock.now();
        let settlement_id = SettlementId(self.env.new_uuid());
        let (settlement, fresh) = self.env.transact(|tx| {
            let invocation = tx
                .invocation(id)?
                .filter(|i| i.tenant_id == principal.tenant_id)
                .ok_or(TxError::NotFound)?;
            // The note is checked before any state-dependent answer, the idempotent repeat
            // included (see `resolve`); another tenant's id is NotFound whatever the note.
            if !(1..=MAX_NOTE_CHARS).contains(&note.chars().count()) {
                return Ok(Err(ServiceError::InvalidArgument(format!(
                    "note must be 1 to {MAX_NOTE_CHARS} characters"
                ))));
            }
            if invocation.status != InvocationStatus::Uncertain {
                return Err(TxError::Conflict("invocation is not uncertain".to_owned()));
            }
            if let Some(existing) = tx.settlement_by_invocation(id)? {
                if existing.outcome == outcome {
                    return Ok(Ok((existing, false)));
                }
                return Err(TxError::Conflict(
                    "the invocation was settled with a different outcome".to_owned(),
                ));
            }
            let settlement = Settlement {
                id: settlement_id,
                invocation_id: id,
                run_id: invocation.run_id,
                tenant_id: invocation.tenant_id.clone(),
                outcome,
                note: note.to_owned(),
                settled_by: principal.principal_id.clone(),
                settled_at: now,
            };
            tx.insert_settlement(&settlement)?;
            tx.append_event(&NewEvent {
                session_id: invocation.session_id,
                run_id: Some(invocation.run_id),
                event_type: EventType::ToolCallSettled,
                actor: Actor::principal(&principal.principal_id),
                payload: json!({
                    "invocation_id": id.to_string(),
                    "settlement_id": settlement_id.to_string(),
                    "outcome": outcome.as_str(),
                    "note": note,
                }),
                derivation_key: Some(keys::settled(id)),
                created_at: now,
            })?;
            Ok(Ok((settlement, true)))
        })??;
        if fresh {
            self.env.reached(CrashPoint::AfterSettle).await;
        }
        Ok(settlement)
    }

    /// PROFILE (SPEC §7.5): every process that opens a store records the rules it loaded.
    pub async fn record_policy_profile(
        &self,
        loaded_by: &str,
    ) -> Result<PolicyProfileRecord, ServiceError> {
        self.record_ruleset(&self.env.ruleset(), loaded_by).await
    }

    /// PROFILE for `ruleset`, which need not be in force yet: a reload records the rules it is
    /// about to put in force first, so no call is ever decided by rules the store has no
    /// record of (issue 32 item 4).
    pub async fn record_ruleset(
        &self,
        ruleset: &crate::policy::Ruleset,
        loaded_by: &str,
    ) -> Result<PolicyProfileRecord, ServiceError> {
        let now = self.env.clock.now();
        let version = ruleset.version.as_str().to_owned();
        let record = PolicyProfileRecord {
            policy_version: version.clone(),
            profile_name: ruleset.version.profile_name.clone(),
            profile_sha256: ruleset.version.profile_sha256.clone(),
            hardline_sha256: ruleset.version.hardline_sha256.clone(),
            rule_count: u32::try_from(ruleset.rule_count()).unwrap_or(u32::MAX),
            loaded_at: now,
            loaded_by: loaded_by.to_owned(),
        };
        let key = keys::profile_loaded(&version);
        let event = ProcessEvent {
            id: uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, key.as_bytes()),
            event_type: EventType::PolicyProfileLoaded,
            payload_schema_version: crate::events::PAYLOAD_SCHEMA_VERSION,
            actor: Actor::process(),
            payload: json!({
                "policy_version": version,
                "profile_name": record.profile_name,
                "profile_sha256": record.profile_sha256,
                "hardline_sha256": record.hardline_sha256,
            }),
            derivation_key: key,
            created_at: now,
        };
        let stored = self
            .env
            .transact(|tx| {
                let stored = tx.insert_policy_profile(&record)?;
                tx.append_process_event(&event)?;
                Ok(stored)
            })
            .map_err(|e| match e {
                TxError::Conflict(_) => {
                    ServiceError::Conflict("policy version identifies different rules".to_owned())
                }
                other => other.into(),
            })?;
        self.env.reached(CrashPoint::AfterProfile).await;
        Ok(stored)
    }

    /// RELOAD (issue 32 item 4): puts `next` in force for every clone of this environment, and
    /// returns the rulesets that were. Its live rules are recorded first (PROFILE), so no call is
    /// ever decided by rules the store has no record of; if recording fails, nothing changes.
    /// Calls decided before and executed after are revalidated (SPEC §10.3), as for any change
    /// of `policy_version`.
    pub async fn put_in_force(
        &self,
        next: crate::live_policy::Rulesets,
        loaded_by: &str,
    ) -> Result<crate::live_policy::Rulesets, ServiceError> {
        self.record_ruleset(&next.live, loaded_by).await?;
        Ok(self.env.policy.replace(next))
    }
}

/// `"{created_at_micros}:{id}"`.
fn parse_cursor(cursor: &str) -> Result<ApprovalCursor, ServiceError> {
    let invalid = || ServiceError::InvalidArgument("invalid cursor".to_owned());
    let (micros, id) = cursor.split_once(':').ok_or_else(invalid)?;
    Ok(ApprovalCursor {
        created_at: Timestamp::from_micros(micros.parse().map_err(|_| invalid())?),
        id: id.parse().map_err(|_| invalid())?,
    })
}

/// EXPIRE of one pending approval inside an open transaction; returns the re-queued run.
fn expire_one(
    tx: &mut dyn StoreTx,
    approval: &Approval,
    now: Timestamp,
) -> Result<Option<RunId>, TxError> {
    let mut next = approval.clone();
    next.status = ApprovalStatus::Expired;
    next.resolved_at = Some(now);
    tx.update_approval(ApprovalStatus::Pending, &next)?;
    let actor = Actor::application();
    tx.append_event(&NewEvent {
        session_id: approval.session_id,
        run_id: Some(approval.run_id),
        event_type: EventType::ApprovalExpired,
        actor: actor.clone(),
        payload: json!({"approval_id": approval.id.to_string()}),
        derivation_key: Some(keys::approval_closed(approval.id)),
        created_at: now,
    })?;
    requeue_waiting(
        tx,
        approval.run_id,
        RequeueReason::ApprovalExpired(approval.id),
        &actor,
        now,
    )
}

/// Re-queues the run if it waits for approval, so it records the resolution.
fn requeue_waiting(
    tx: &mut dyn StoreTx,
    run: RunId,
    reason: RequeueReason,
    actor: &Actor,
    now: Timestamp,
) -> Result<Option<RunId>, TxError> {
    let current = tx.run(run)?.ok_or(TxError::NotFound)?;
    if current.status() != RunStatus::WaitingForApproval {
        return Ok(None);
    }
    transition(
        tx,
        &current,
        current.clone(),
        Change::Requeue {
            reason,
            scheduled_for: None,
        },
        actor,
        now,
    )?;
    Ok(Some(run))
}
