//! The runtime's closed vocabularies of SPEC §3 (run, invocation, approval and recovery states),
//! beside the policy gate's own, which live in `airlock-policy` and are re-exported here so that
//! one `vocab` module names every wire enum.

pub use airlock_policy::vocab::*;
use airlock_policy::wire_enum;

wire_enum! {
    /// A run's status (SPEC §8.1). The lease lives in [`crate::run::RunState::Running`].
    RunStatus: "run status" {
        Queued = "QUEUED",
        Running = "RUNNING",
        WaitingForApproval = "WAITING_FOR_APPROVAL",
        Completed = "COMPLETED",
        Failed = "FAILED",
        Cancelled = "CANCELLED",
    }
}

impl RunStatus {
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

wire_enum! {
    /// An invocation's status (SPEC §9.1).
    InvocationStatus: "invocation status" {
        Proposed = "PROPOSED",
        Authorized = "AUTHORIZED",
        WaitingForApproval = "WAITING_FOR_APPROVAL",
        Running = "RUNNING",
        Succeeded = "SUCCEEDED",
        Failed = "FAILED",
        Denied = "DENIED",
        Uncertain = "UNCERTAIN",
    }
}

impl InvocationStatus {
    /// The statuses that are not terminal, in declaration order: the calls a run still owes
    /// an outcome (the terminal sweep of SPEC §8.1 reads just these).
    pub const UNFINISHED: [InvocationStatus; 4] = [
        Self::Proposed,
        Self::Authorized,
        Self::WaitingForApproval,
        Self::Running,
    ];

    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Denied | Self::Uncertain
        )
    }

    /// The edges of SPEC §9.1.
    pub fn may_become(self, next: InvocationStatus) -> bool {
        use InvocationStatus::*;
        matches!(
            (self, next),
            (Proposed, Authorized | WaitingForApproval | Denied)
                | (Authorized, Running | Denied)
                | (WaitingForApproval, Authorized | Denied)
                | (Running, Succeeded | Failed | Uncertain)
        )
    }

    /// The status changes one commit may make to a row that existed before it: one §9.1 edge,
    /// or a path of edges that one transaction takes without running anything in between
    /// (SPEC §17.1): REVALIDATE that authorizes and STARTs (`WAITING_FOR_APPROVAL → AUTHORIZED
    /// → RUNNING`, F3), and the RECOVER of an AUTHORIZED row whose tool is gone (`AUTHORIZED →
    /// RUNNING → FAILED`, no watermark, the body never entered). A path through RUNNING to a
    /// result the body produced (SUCCEEDED, UNCERTAIN) never fits in one commit: the body runs
    /// between START and FINISH.
    pub fn may_become_in_one_commit(self, next: InvocationStatus) -> bool {
        use InvocationStatus::*;
        self.may_become(next)
            || matches!(
                (self, next),
                (WaitingForApproval, Running) | (Authorized, Failed)
            )
    }
}

wire_enum! {
    /// An approval's status (SPEC §10.1).
    ApprovalStatus: "approval status" {
        Pending = "pending",
        Approved = "approved",
        Denied = "denied",
        Expired = "expired",
        Cancelled = "cancelled",
    }
}

wire_enum! {
    /// What a principal asks of a pending approval.
    ApprovalResolution: "resolution" { ApproveOnce = "approve_once", Deny = "deny" }
}

wire_enum! {
    /// The answer to a resolve (SPEC §10.4).
    ResolveState: "resolve state" {
        Applied = "applied",
        AlreadyResolvedIdentically = "already_resolved_identically",
        AlreadyResolvedDifferently = "already_resolved_differently",
    }
}

wire_enum! {
    /// The recovery table's actions (SPEC §9.4).
    RecoveryAction: "recovery action" {
        ReturnOutcome = "RETURN_OUTCOME",
        ResumeAuthorization = "RESUME_AUTHORIZATION",
        ResumeApproval = "RESUME_APPROVAL",
        Reexecute = "REEXECUTE",
        ReplayIdempotencyKey = "REPLAY_IDEMPOTENCY_KEY",
        MarkUncertain = "MARK_UNCERTAIN",
    }
}

wire_enum! {
    /// An outcome's status, mirroring the terminal invocation status.
    OutcomeStatus: "outcome status" { Succeeded = "succeeded", Failed = "failed", Denied = "denied", Uncertain = "uncertain" }
}

wire_enum! {
    /// What the planner may do about a failed call.
    Remediation: "remediation" { None = "none", ModifyArguments = "modify_arguments" }
}

wire_enum! {
    /// Why a run failed (SPEC §13.1 gives each its message).
    FailureReason: "failure reason" {
        MaxAttemptsExceeded = "max_attempts_exceeded",
        MaxStepsExceeded = "max_steps_exceeded",
        BudgetExceeded = "budget_exceeded",
        DeadlineExceeded = "deadline_exceeded",
        RepeatedDenial = "repeated_denial",
        PlannerError = "planner_error",
        InternalError = "internal_error",
    }
}

impl FailureReason {
    /// The `failure.message` of SPEC §13.1.
    pub const fn message(self) -> &'static str {
        match self {
            Self::MaxAttemptsExceeded => "The run was interrupted too many times.",
            Self::MaxStepsExceeded => "The run reached its step limit.",
            Self::BudgetExceeded => "The run reached its tool-call limit.",
            Self::DeadlineExceeded => "The run passed its deadline.",
            Self::RepeatedDenial => "The planner repeated a denied action.",
            Self::PlannerError => "The planner failed or returned an invalid turn.",
            Self::InternalError => "The run failed because of an internal error.",
        }
    }
}

wire_enum! {
    /// How a tool says it failed (SPEC §9.3).
    ToolFailureKind: "tool failure kind" {
        InvalidArguments = "invalid_arguments",
        NotFound = "not_found",
        Timeout = "timeout",
        OutputInvalid = "output_invalid",
        UpstreamError = "upstream_error",
        OutcomeUnknown = "outcome_unknown",
        Internal = "internal",
    }
}

wire_enum! {
    /// Why a run's token was cancelled; never persisted.
    CancelReason: "cancel reason" { Requested = "requested", Fenced = "fenced" }
}

wire_enum! {
    /// A human's finding about an UNCERTAIN call (SPEC §9.5).
    SettlementOutcome: "settlement outcome" { Succeeded = "succeeded", Failed = "failed" }
}

wire_enum! {
    /// Who caused an event (SPEC §13.1).
    ActorType: "actor type" {
        Principal = "principal",
        Worker = "worker",
        Application = "application",
        Maintenance = "maintenance",
        Process = "process",
    }
}

wire_enum! {
    /// Why a checkpoint was written (SPEC §3).
    CheckpointTrigger: "checkpoint trigger" {
        Seed = "seed",
        ToolPending = "tool_pending",
        ToolBatch = "tool_batch",
        Suspended = "suspended",
        Final = "final",
    }
}

wire_enum! {
    /// Where a host may stop the process: right after each transaction's commit (except
    /// HEARTBEAT), and after a tool returns (SPEC §2.2).
    CrashPoint: "crash point" {
        AfterSubmit = "after_submit",
        AfterClaim = "after_claim",
        AfterPending = "after_pending",
        AfterRefuse = "after_refuse",
        AfterPropose = "after_propose",
        AfterStart = "after_start",
        AfterInvoke = "after_invoke",
        AfterFinish = "after_finish",
        AfterRecover = "after_recover",
        AfterRevalidate = "after_revalidate",
        AfterBatch = "after_batch",
        AfterPark = "after_park",
        AfterFinal = "after_final",
        AfterResolve = "after_resolve",
        AfterExpire = "after_expire",
        AfterCancel = "after_cancel",
        AfterReclaim = "after_reclaim",
        AfterSettle = "after_settle",
        AfterProfile = "after_profile",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unfinished_statuses_are_exactly_the_non_terminal_ones() {
        let non_terminal: Vec<InvocationStatus> = InvocationStatus::ALL
            .iter()
            .copied()
            .filter(|status| !status.is_terminal())
            .collect();
        assert_eq!(InvocationStatus::UNFINISHED.to_vec(), non_terminal);
    }
}
