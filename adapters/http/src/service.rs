//! The one door from HTTP into core: [`Control`], the `ControlService` operations the routes
//! and the console call, object-safe so the router is not generic over the store. Each method
//! is one `ControlService` call under the caller's `Principal`; nothing here decides. Two are
//! reads core has no operation for, and neither decides who may see what: a conversation's
//! calls are read only after `get_conversation` allowed the conversation itself, and the
//! conversation of an approval's session is looked up only for approvals core already showed
//! the caller (and within the caller's tenant).

use std::collections::BTreeMap;
use std::sync::Arc;

use airlock_core::access::{AuthError, Authenticated};
use airlock_core::approval::Approval;
use airlock_core::connection::Connection;
use airlock_core::control::{
    CancelOutcome, ControlService, Page, Resolved, ServiceError, Submitted,
};
use airlock_core::events::Event;
use airlock_core::ids::{
    ApiTokenId, ApprovalId, ConnectionId, InvocationId, NotifyTargetId, RunId, SessionId,
};
use airlock_core::invocation::Invocation;
use airlock_core::notify::{NotifyTarget, TargetSpec};
use airlock_core::ports::BoxFut;
use airlock_core::principal::Principal;
use airlock_core::run::Run;
use airlock_core::session::Settlement;
use airlock_core::store::Store;
use airlock_core::time::Timestamp;
use airlock_core::vocab::{ApprovalResolution, SettlementOutcome};

/// What the HTTP layer may ask of core.
pub trait Control: Send + Sync + 'static {
    fn authenticate(&self, presented: &str) -> Result<Authenticated, AuthError>;
    fn authenticate_id(&self, id: ApiTokenId) -> Result<Authenticated, AuthError>;
    fn get_approval(&self, who: &Principal, id: ApprovalId) -> Result<Approval, ServiceError>;
    fn list_pending(
        &self,
        who: &Principal,
        run: Option<RunId>,
        limit: Option<usize>,
        cursor: Option<&str>,
    ) -> Result<Page<Approval>, ServiceError>;
    fn approval_explanations(
        &self,
        who: &Principal,
        ids: &[ApprovalId],
    ) -> Result<BTreeMap<ApprovalId, String>, ServiceError>;
    fn resolve<'a>(
        &'a self,
        who: &'a Principal,
        id: ApprovalId,
        resolution: ApprovalResolution,
        reason: Option<&'a str>,
    ) -> BoxFut<'a, Result<Resolved, ServiceError>>;
    fn list_uncertain(
        &self,
        who: &Principal,
        all: bool,
    ) -> Result<Vec<(Invocation, Option<Settlement>)>, ServiceError>;
    fn settle<'a>(
        &'a self,
        who: &'a Principal,
        id: InvocationId,
        outcome: SettlementOutcome,
        note: &'a str,
    ) -> BoxFut<'a, Result<Settlement, ServiceError>>;
    fn submit_run<'a>(
        &'a self,
        who: &'a Principal,
        script: &'a str,
    ) -> BoxFut<'a, Result<Submitted, ServiceError>>;
    fn get_run(&self, who: &Principal, id: RunId) -> Result<Run, ServiceError>;
    fn list_events(
        &self,
        who: &Principal,
        run: RunId,
        after_id: Option<i64>,
        limit: Option<usize>,
    ) -> Result<Page<Event>, ServiceError>;
    fn cancel_run<'a>(
        &'a self,
        who: &'a Principal,
        id: RunId,
    ) -> BoxFut<'a, Result<CancelOutcome, ServiceError>>;
    fn tenant_events(
        &self,
        who: &Principal,
        after_id: Option<i64>,
        limit: Option<usize>,
    ) -> Result<Page<Event>, ServiceError>;
    fn last_event_id(&self, who: &Principal) -> Result<Option<i64>, ServiceError>;
    /// The tenant's conversations, newest first (SPEC §22.1; `run.read`).
    fn list_conversations(
        &self,
        who: &Principal,
        limit: Option<usize>,
    ) -> Result<Vec<Connection>, ServiceError>;
    fn get_conversation(
        &self,
        who: &Principal,
        id: ConnectionId,
    ) -> Result<Connection, ServiceError>;
    /// The conversation (as [`Control::get_conversation`] allows it) and its newest calls.
    fn conversation_calls(
        &self,
        who: &Principal,
        id: ConnectionId,
        limit: usize,
    ) -> Result<(Connection, Calls), ServiceError>;
    /// CLEAR-TAINT (`approval.resolve`, a non-empty reason).
    fn clear_conversation_taint(
        &self,
        who: &Principal,
        id: ConnectionId,
        reason: &str,
        seen: Option<Timestamp>,
    ) -> Result<Connection, ServiceError>;
    /// The conversation each of `sessions` belongs to, if any, within the caller's tenant:
    /// for the link from an approval the caller was already shown to its conversation.
    fn conversations_of_sessions(
        &self,
        who: &Principal,
        sessions: &[SessionId],
    ) -> Result<BTreeMap<SessionId, ConnectionId>, ServiceError>;
    /// The tenant's notification targets (issue 32 item 1; the route checks `notify.admin`).
    fn list_notify_targets(&self, tenant: &str) -> Result<Vec<NotifyTarget>, ServiceError>;
    fn add_notify_target(
        &self,
        tenant: &str,
        by: &str,
        spec: &TargetSpec,
    ) -> Result<NotifyTarget, ServiceError>;
    fn remove_notify_target(
        &self,
        tenant: &str,
        by: &str,
        id: NotifyTargetId,
    ) -> Result<NotifyTarget, ServiceError>;
    /// One read of the store, for `/healthz`.
    fn check_store(&self) -> Result<(), ServiceError>;
    fn now(&self) -> Timestamp;
    fn policy_version(&self) -> String;
}

impl<S: Store + 'static> Control for ControlService<S> {
    fn authenticate(&self, presented: &str) -> Result<Authenticated, AuthError> {
        ControlService::authenticate(self, presented)
    }
    fn authenticate_id(&self, id: ApiTokenId) -> Result<Authenticated, AuthError> {
        ControlService::authenticate_id(self, id)
    }
    fn get_approval(&self, who: &Principal, id: ApprovalId) -> Result<Approval, ServiceError> {
        ControlService::get_approval(self, who, id)
    }
    fn list_pending(
        &self,
        who: &Principal,
        run: Option<RunId>,
        limit: Option<usize>,
        cursor: Option<&str>,
    ) -> Result<Page<Approval>, ServiceError> {
        ControlService::list_pending(self, who, run, limit, cursor)
    }
    fn approval_explanations(
        &self,
        who: &Principal,
        ids: &[ApprovalId],
    ) -> Result<BTreeMap<ApprovalId, String>, ServiceError> {
        ControlService::approval_explanations(self, who, ids)
    }
    fn resolve<'a>(
        &'a self,
        who: &'a Principal,
        id: ApprovalId,
        resolution: ApprovalResolution,
        reason: Option<&'a str>,
    ) -> BoxFut<'a, Result<Resolved, ServiceError>> {
        Box::pin(ControlService::resolve(self, who, id, resolution, reason))
    }
    fn list_uncertain(
        &self,
        who: &Principal,
        all: bool,
    ) -> Result<Vec<(Invocation, Option<Settlement>)>, ServiceError> {
        ControlService::list_uncertain_with_settlements(self, who, all)
    }
    fn settle<'a>(
        &'a self,
        who: &'a Principal,
        id: InvocationId,
        outcome: SettlementOutcome,
        note: &'a str,
    ) -> BoxFut<'a, Result<Settlement, ServiceError>> {
        Box::pin(ControlService::settle(self, who, id, outcome, note))
    }
    fn submit_run<'a>(
        &'a self,
        who: &'a Principal,
        script: &'a str,
    ) -> BoxFut<'a, Result<Submitted, ServiceError>> {
        Box::pin(ControlService::submit_run(self, who, script))
    }
    fn get_run(&self, who: &Principal, id: RunId) -> Result<Run, ServiceError> {
        ControlService::get_run(self, who, id)
    }
    fn list_events(
        &self,
        who: &Principal,
        run: RunId,
        after_id: Option<i64>,
        limit: Option<usize>,
    ) -> Result<Page<Event>, ServiceError> {
        ControlService::list_events(self, who, run, after_id, limit)
    }
    fn cancel_run<'a>(
        &'a self,
        who: &'a Principal,
        id: RunId,
    ) -> BoxFut<'a, Result<CancelOutcome, ServiceError>> {
        Box::pin(ControlService::cancel_run(self, who, id))
    }
    fn tenant_events(
        &self,
        who: &Principal,
        after_id: Option<i64>,
        limit: Option<usize>,
    ) -> Result<Page<Event>, ServiceError> {
        ControlService::tenant_events(self, who, after_id, limit)
    }
    fn last_event_id(&self, who: &Principal) -> Result<Option<i64>, ServiceError> {
        ControlService::last_event_id(self, who)
    }
    fn list_conversations(
        &self,
        who: &Principal,
        limit: Option<usize>,
    ) -> Result<Vec<Connection>, ServiceError> {
        ControlService::list_conversations(self, who, limit)
    }
    fn get_conversation(
        &self,
        who: &Principal,
        id: ConnectionId,
    ) -> Result<Connection, ServiceError> {
        ControlService::get_conversation(self, who, id)
    }
    fn conversation_calls(
        &self,
        who: &Principal,
        id: ConnectionId,
        limit: usize,
    ) -> Result<(Connection, Calls), ServiceError> {
        ControlService::conversation_calls(self, who, id, limit)
    }
    fn clear_conversation_taint(
        &self,
        who: &Principal,
        id: ConnectionId,
        reason: &str,
        seen: Option<Timestamp>,
    ) -> Result<Connection, ServiceError> {
        ControlService::clear_conversation_taint(self, who, id, reason, seen)
    }
    fn conversations_of_sessions(
        &self,
        who: &Principal,
        sessions: &[SessionId],
    ) -> Result<BTreeMap<SessionId, ConnectionId>, ServiceError> {
        Ok(self.env().read(|tx| {
            let mut found = BTreeMap::new();
            for &session in sessions {
                if found.contains_key(&session) {
                    continue;
                }
                if let Some(c) = tx.connection_by_session(session)?
                    && c.tenant_id == who.tenant_id
                {
                    found.insert(session, c.id);
                }
            }
            Ok(found)
        })?)
    }
    fn list_notify_targets(&self, tenant: &str) -> Result<Vec<NotifyTarget>, ServiceError> {
        ControlService::list_notify_targets(self, tenant)
    }
    fn add_notify_target(
        &self,
        tenant: &str,
        by: &str,
        spec: &TargetSpec,
    ) -> Result<NotifyTarget, ServiceError> {
        ControlService::add_notify_target(self, tenant, by, spec)
    }
    fn remove_notify_target(
        &self,
        tenant: &str,
        by: &str,
        id: NotifyTargetId,
    ) -> Result<NotifyTarget, ServiceError> {
        ControlService::remove_notify_target(self, tenant, by, id)
    }
    fn check_store(&self) -> Result<(), ServiceError> {
        Ok(self.env().read(|tx| tx.last_event_id().map(drop))?)
    }
    fn now(&self) -> Timestamp {
        self.env().clock.now()
    }
    fn policy_version(&self) -> String {
        self.env().ruleset().version.as_str().to_owned()
    }
}

/// The shared handle every route holds.
pub type SharedControl = Arc<dyn Control>;

/// The calls of a conversation, as core reads them ([`airlock_core::connection::calls`]).
pub use airlock_core::connection::calls::{Call, Calls};
