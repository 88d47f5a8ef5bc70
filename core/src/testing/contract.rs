//! The `Store` contract suite (SPEC §2.2, §8.1–§8.2, §9.1, §10.1, §13, §14, §16 #15, #19,
//! #27–#29, #40): what every store — `MemStore`, `SqliteStore` — must do, as one generic
//! [`run_contract`].
//!
//! Each check gets a fresh store from `make`, exercises one rule and panics with a message that
//! names it. The checks use only behaviour the trait documents, SPEC §14 requires of the SQLite
//! schema, or SPEC §8.1, §8.2, §9.1 and §13 state as rules of the rows (run edges, epoch and
//! attempts discipline, the watermark, missing parents as `NotFound`). Reads go through
//! `Store::read`, so SQLite's reader connections are exercised too.

use std::collections::BTreeMap;
use std::fmt::Debug;

use serde_json::json;

use crate::approval::Approval;
use crate::events::{Actor, EventType, keys};
use crate::ids::InvocationId;
use crate::invocation::Invocation;
use crate::run::checkpoint::{Admission, Checkpoint, CheckpointState, PendingBatch, PinnedCall};
use crate::run::{Lease, Run, RunGuard, RunState, RunSummary};
use crate::store::{
    ApprovalCursor, CallIdentity, CreatedPage, RunCursor, Store, StoreTx, TwinScope, TxError,
};
use crate::testing::fixtures::*;
use crate::vocab::{
    ApprovalResolution, ApprovalStatus, CheckpointTrigger, InvocationStatus, RunStatus, TargetKind,
};

/// Runs every check on a fresh store from `make`.
pub fn run_contract<S: Store>(make: impl Fn() -> S) {
    transact_returns_the_closure_value_and_commits(&make());
    read_sees_commits_and_refuses_writes(&make());
    error_from_f_rolls_back_every_write(&make());
    fenced_transaction_rolls_back_its_earlier_writes(&make());
    guard_lease_fences_wrong_owner_epoch_or_status(&make());
    guarded_run_update_fences_or_conflicts(&make());
    run_immutable_fields_conflict(&make());
    duplicate_primary_keys_conflict(&make());
    a_session_starts_at_sequence_one(&make());
    one_active_run_per_session(&make());
    heartbeat_renews_only_a_held_lease(&make());
    next_claimable_run_is_the_oldest_due_queued_run(&make());
    expired_leases_oldest_expiry_first(&make());
    count_runs_by_status(&make());
    checkpoint_versions_are_contiguous(&make());
    step_records_are_contiguous_and_paged(&make());
    a_step_records_calls_read_back_from_the_checkpoint_it_names(&make());
    a_calls_arguments_read_back_from_its_transactions_pending_checkpoint(&make());
    invocation_uniqueness(&make());
    invocation_lookups_and_run_order(&make());
    invocations_of_run_by_status(&make());
    invocation_transitions_follow_the_edges(&make());
    invocation_immutable_fields_conflict(&make());
    terminal_invocations_never_change(&make());
    invocation_row_checks(&make());
    uncertain_invocations_filter_and_order(&make());
    twins_are_the_open_rows_of_one_identity(&make());
    runs_of_tenant_page_newest_first(&make());
    approval_action_id_is_unique(&make());
    approvals_of_run_by_creation_then_id(&make());
    approval_updates_are_guarded_by_status(&make());
    terminal_approval_changes_only_by_revalidation(&make());
    approval_row_checks(&make());
    pending_approvals_keyset_paging(&make());
    due_approvals_order(&make());
    event_sequences_are_per_session(&make());
    append_event_needs_its_session(&make());
    refused_events_consume_nothing(&make());
    rolled_back_events_leave_no_trace(&make());
    derivation_key_idempotency(&make());
    events_of_run_paging(&make());
    process_event_idempotency(&make());
    creation_order_pages_cross_tenants_and_windows(&make());
    settlement_is_unique_per_invocation(&make());
    policy_profile_idempotency(&make());
    run_edges_of_section_8_1_only(&make());
    lease_epoch_advances_by_one_only_at_claim(&make());
    attempts_grow_only_when_a_run_leaves_running(&make());
    the_watermark_is_written_only_by_start(&make());
    terminal_outcome_must_match_the_status(&make());
    event_payloads_are_objects_of_the_runs_session(&make());
    missing_parents_are_not_found(&make());
    settlements_only_of_uncertain_invocations(&make());
    connections_are_guarded_and_bind_their_sessions_runs(&make());
    a_conversation_key_has_one_open_row_per_tenant(&make());
    a_call_task_is_one_per_run_and_found_by_its_hash(&make());
    state_keys_are_kept_and_the_newest_seals(&make());
    waiting_call_approvals_are_the_parked_calls_of_a_principal_and_tool(&make());
    crate::testing::contract_http::run(&make);
    crate::testing::contract_notify::run(&make);
}

// ----- helpers -------------------------------------------------------------------------------

/// One change to a sample row, for table-driven checks.
type Edit<T> = Box<dyn Fn(&mut T)>;

/// A `Conflict` that refuses a write breaking a rule of the rows (§8.1, §8.2, §9.1), not one
/// any other error would satisfy.
#[track_caller]
fn assert_rule_breach<R: Debug>(result: Result<R, TxError>, rule: &str) {
    match result {
        Err(error) if crate::mem_store::is_rule_breach(&error) => {}
        other => panic!("{rule}: expected a rule-breach Conflict, got {other:?}"),
    }
}

#[track_caller]
fn assert_fenced<R: Debug>(result: Result<R, TxError>, rule: &str) {
    assert!(
        matches!(result, Err(TxError::Fenced)),
        "{rule}: expected Fenced, got {result:?}"
    );
}

/// The message of a `Conflict`; panics on anything else.
#[track_caller]
fn conflict_message<R: Debug>(result: Result<R, TxError>) -> String {
    match result {
        Err(TxError::Conflict(message)) => message,
        other => panic!("expected Conflict, got {other:?}"),
    }
}

/// A read-only transaction, through `Store::read`: SQLite serves it from its reader
/// connections, so every lookup, listing and ordering check below runs on the path production
/// reads take.
fn read<S: Store, R>(store: &S, f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>) -> R {
    store
        .read(f)
        .unwrap_or_else(|error| panic!("read failed: {error:?}"))
}

fn stored_run<S: Store>(store: &S, run: &Run) -> Run {
    read(store, |tx| tx.run(run.id)).unwrap_or_else(|| panic!("run {} is missing", run.id))
}

fn held_lease(run: &Run) -> Lease {
    run.lease()
        .unwrap_or_else(|| panic!("sample run {} is not RUNNING", run.id))
}

fn lease_guard(run: &Run) -> RunGuard {
    RunGuard {
        run_id: run.id,
        status: run.status(),
        lease: run.lease(),
    }
}

fn status_guard(run: &Run) -> RunGuard {
    RunGuard {
        run_id: run.id,
        status: run.status(),
        lease: None,
    }
}

/// A second run in its own session (`n` is used for both), with tenant `tenant`.
fn seed_run_of_tenant<S: Store>(store: &S, n: u128, status: RunStatus, tenant: &str) -> Run {
    let mut session = sample_session(n);
    session.tenant_id = tenant.to_owned();
    let mut run = sample_run(n, session.id, status);
    run.tenant_id = tenant.to_owned();
    commit(store, "seed run of tenant", |tx| {
        tx.insert_session(&session)?;
        tx.insert_run(&run)
    });
    run
}

// ----- transactions --------------------------------------------------------------------------

/// `transact` returns what `f` returns and commits it.
fn transact_returns_the_closure_value_and_commits<S: Store>(store: &S) {
    let session = sample_session(1);
    let value = store.transact(|tx| {
        tx.insert_session(&session)?;
        Ok(42)
    });
    assert_eq!(value, Ok(42), "transact: returns the closure's value");
    assert_eq!(
        read(store, |tx| tx.session(session.id)),
        Some(session),
        "transact: an Ok commits"
    );
}

/// SPEC §2.2: an `Err` from `f` rolls back everything it wrote, and is returned unchanged.
fn error_from_f_rolls_back_every_write<S: Store>(store: &S) {
    let session = sample_session(1);
    let run = sample_run(1, session.id, RunStatus::Queued);
    let result: Result<(), TxError> = store.transact(|tx| {
        tx.insert_session(&session)?;
        tx.insert_run(&run)?;
        tx.insert_checkpoint(&sample_checkpoint(run.id, 1))?;
        tx.append_event(&sample_event(
            &run,
            EventType::RunQueued,
            json!({"run_id": run.id.to_string()}),
            None,
        ))?;
        Err(TxError::Conflict("abort".to_owned()))
    });
    assert_eq!(
        result,
        Err(TxError::Conflict("abort".to_owned())),
        "rollback: the closure's error is returned"
    );
    let (session_row, run_row, checkpoint, queued, events) = read(store, |tx| {
        Ok((
            tx.session(session.id)?,
            tx.run(run.id)?,
            tx.latest_checkpoint(run.id)?,
            tx.count_runs(RunStatus::Queued)?,
            tx.events_of_run(run.id, None, 10)?,
        ))
    });
    assert_eq!(session_row, None, "rollback: the session insert is undone");
    assert_eq!(run_row, None, "rollback: the run insert is undone");
    assert_eq!(
        checkpoint, None,
        "rollback: the checkpoint insert is undone"
    );
    assert_eq!(queued, 0, "rollback: no run is counted");
    assert!(events.is_empty(), "rollback: the event append is undone");

    // Updates and the sequence counter of an existing session roll back too.
    let run = seed_run(store, 2, RunStatus::Queued);
    let result: Result<(), TxError> = store.transact(|tx| {
        tx.append_event(&sample_event(
            &run,
            EventType::RunQueued,
            json!({}),
            Some("rollback:k"),
        ))?;
        let mut next = run.clone();
        next.state = RunState::Cancelled;
        tx.update_run(&status_guard(&run), &next)?;
        Err(TxError::Backend("abort".to_owned()))
    });
    assert!(result.is_err(), "rollback: the closure failed");
    assert_eq!(
        stored_run(store, &run),
        run,
        "rollback: the run update is undone"
    );
    let (event, next_sequence) = read(store, |tx| {
        Ok((
            tx.event_by_key("rollback:k")?,
            tx.session(run.session_id)?.map(|s| s.next_event_sequence),
        ))
    });
    assert_eq!(event, None, "rollback: the keyed event is undone");
    assert_eq!(
        next_sequence,
        Some(1),
        "rollback: the session's sequence counter is restored"
    );
}

/// SPEC §8.2 Fencing: a fenced worker commits nothing, not even the writes it made before the
/// guard failed.
fn fenced_transaction_rolls_back_its_earlier_writes<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let stale = Lease {
        lease_epoch: run.lease_epoch + 7,
        ..held_lease(&run)
    };
    let invocation = sample_invocation(1, &run, 1, "c1", InvocationStatus::Authorized);
    let result: Result<(), TxError> = store.transact(|tx| {
        tx.append_event(&sample_event(
            &run,
            EventType::ToolCallProposed,
            json!({}),
            Some("fenced:k"),
        ))?;
        tx.insert_invocation(&invocation)?;
        tx.guard_lease(&stale)
    });
    assert_fenced(result, "fencing: a stale epoch");
    let (event, row, next_sequence) = read(store, |tx| {
        Ok((
            tx.event_by_key("fenced:k")?,
            tx.invocation(invocation.id)?,
            tx.session(run.session_id)?.map(|s| s.next_event_sequence),
        ))
    });
    assert_eq!(
        event, None,
        "fencing: a fenced transaction commits no event"
    );
    assert_eq!(
        row, None,
        "fencing: a fenced transaction commits no invocation"
    );
    assert_eq!(
        next_sequence,
        Some(1),
        "fencing: a fenced transaction consumes no sequence"
    );

    // The same through a lease-guarded update_run.
    let result: Result<Run, TxError> = store.transact(|tx| {
        tx.insert_invocation(&invocation)?;
        let mut next = run.clone();
        next.step_count = 1;
        tx.update_run(
            &RunGuard {
                lease: Some(stale.clone()),
                ..lease_guard(&run)
            },
            &next,
        )
    });
    assert_fenced(result, "fencing: update_run under a stale lease");
    assert_eq!(
        read(store, |tx| tx.invocation(invocation.id)),
        None,
        "fencing: update_run's Fenced rolls back the insert before it"
    );
    assert_eq!(
        stored_run(store, &run),
        run,
        "fencing: the run is unchanged"
    );
}

// ----- runs ----------------------------------------------------------------------------------

/// SPEC §8.2: `guard_lease` passes only for a RUNNING run under exactly this owner and epoch.
fn guard_lease_fences_wrong_owner_epoch_or_status<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let lease = held_lease(&run);
    assert_eq!(
        store.transact(|tx| tx.guard_lease(&lease)),
        Ok(()),
        "guard_lease: the held lease passes"
    );
    let wrong_epoch = Lease {
        lease_epoch: lease.lease_epoch + 1,
        ..lease.clone()
    };
    assert_fenced(
        store.transact(|tx| tx.guard_lease(&wrong_epoch)),
        "guard_lease: wrong epoch",
    );
    let wrong_owner = Lease {
        worker_id: "worker-2".to_owned(),
        ..lease.clone()
    };
    assert_fenced(
        store.transact(|tx| tx.guard_lease(&wrong_owner)),
        "guard_lease: wrong owner",
    );
    let unknown_run = Lease {
        run_id: run_id(99),
        ..lease.clone()
    };
    assert_fenced(
        store.transact(|tx| tx.guard_lease(&unknown_run)),
        "guard_lease: unknown run",
    );

    let waiting = seed_run(store, 2, RunStatus::WaitingForApproval);
    let former = Lease {
        run_id: waiting.id,
        worker_id: WORKER.to_owned(),
        lease_epoch: waiting.lease_epoch,
    };
    assert_fenced(
        store.transact(|tx| tx.guard_lease(&former)),
        "guard_lease: a run that left RUNNING",
    );
}

/// SPEC §8.1: a guarded update whose lease no longer holds is `Fenced`; one whose status does
/// not match (without a lease) is `Conflict`; a matching one replaces the row and returns it.
fn guarded_run_update_fences_or_conflicts<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let mut next = run.clone();
    next.step_count = 1;
    next.updated_at = at(1);

    let wrong_epoch = RunGuard {
        lease: Some(Lease {
            lease_epoch: run.lease_epoch + 1,
            ..held_lease(&run)
        }),
        ..lease_guard(&run)
    };
    assert_fenced(
        store.transact(|tx| tx.update_run(&wrong_epoch, &next)),
        "update_run: wrong lease epoch",
    );
    // An update that changes nothing is guarded all the same (a store may skip the write).
    assert_fenced(
        store.transact(|tx| tx.update_run(&wrong_epoch, &run)),
        "update_run: an unchanged row under a stale lease",
    );
    let wrong_owner = Lease {
        worker_id: "worker-2".to_owned(),
        ..held_lease(&run)
    };
    assert_fenced(
        store.transact(|tx| {
            tx.update_run(
                &RunGuard {
                    lease: Some(wrong_owner),
                    ..lease_guard(&run)
                },
                &next,
            )
        }),
        "update_run: wrong lease owner",
    );
    assert_conflict(
        store.transact(|tx| {
            tx.update_run(
                &RunGuard {
                    run_id: run.id,
                    status: RunStatus::Queued,
                    lease: None,
                },
                &next,
            )
        }),
        "update_run: wrong expected status",
    );
    assert_eq!(
        stored_run(store, &run),
        run,
        "update_run: failed guards change nothing"
    );
    assert_eq!(
        commit(store, "an unchanged row under the held lease", |tx| {
            tx.update_run(&lease_guard(&run), &run)
        }),
        run,
        "update_run: an unchanged row under the held lease returns it"
    );

    let updated = commit(store, "update_run under the held lease", |tx| {
        tx.update_run(&lease_guard(&run), &next)
    });
    assert_eq!(updated, next, "update_run: returns the new row");
    assert_eq!(
        stored_run(store, &run),
        next,
        "update_run: stores the new row"
    );

    // PARK releases the lease; the old lease then fences, whatever status it expects.
    let mut parked = next.clone();
    parked.state = RunState::WaitingForApproval;
    commit(store, "park", |tx| {
        tx.update_run(&lease_guard(&next), &parked)
    });
    let mut again = next.clone();
    again.step_count = 2;
    assert_fenced(
        store.transact(|tx| tx.update_run(&lease_guard(&next), &again)),
        "update_run: the lease of a parked run",
    );

    // A status guard without a lease: RESOLVE requeues the waiting run.
    assert_conflict(
        store.transact(|tx| {
            tx.update_run(
                &RunGuard {
                    status: RunStatus::Running,
                    ..status_guard(&parked)
                },
                &parked,
            )
        }),
        "update_run: a waiting run guarded as RUNNING without a lease",
    );
    let mut requeued = parked.clone();
    requeued.state = RunState::Queued {
        scheduled_for: None,
    };
    commit(store, "resolve requeues", |tx| {
        tx.update_run(&status_guard(&parked), &requeued)
    });
    assert_eq!(
        stored_run(store, &run).status(),
        RunStatus::Queued,
        "update_run: the status guard passed"
    );
}

/// SPEC §14: the fields fixed at SUBMIT never change; a changed one is `Conflict`.
fn run_immutable_fields_conflict<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let other_session = sample_session(2);
    commit(store, "second session", |tx| {
        tx.insert_session(&other_session)
    });
    let other_session_id = other_session.id;
    let changes: Vec<(&str, Edit<Run>)> = vec![
        ("tenant_id", Box::new(|r| r.tenant_id = "other".to_owned())),
        (
            "principal_id",
            Box::new(|r| r.principal_id = "mallory".to_owned()),
        ),
        (
            "session_id",
            Box::new(move |r| r.session_id = other_session_id),
        ),
        (
            "planner_input",
            Box::new(|r| r.planner_input = "{\"x\":1}".into()),
        ),
        (
            "planner_kind",
            Box::new(|r| r.planner_kind = "other".to_owned()),
        ),
        ("limits", Box::new(|r| r.limits.max_steps += 1)),
        ("deadline_at", Box::new(|r| r.deadline_at = Some(at(9)))),
        ("created_at", Box::new(|r| r.created_at = at(9))),
        (
            "origin_trust",
            Box::new(|r| r.origin_trust = crate::vocab::TrustLevel::ExternalUntrusted),
        ),
    ];
    for (field, change) in changes {
        let mut next = run.clone();
        change(&mut next);
        assert_conflict(
            store.transact(|tx| tx.update_run(&lease_guard(&run), &next)),
            &format!("runs: immutable {field}"),
        );
    }
    let mut renamed = run.clone();
    renamed.id = run_id(77);
    assert!(
        store
            .transact(|tx| tx.update_run(&lease_guard(&run), &renamed))
            .is_err(),
        "runs: the row's id cannot change"
    );
    assert_eq!(
        stored_run(store, &run),
        run,
        "runs: rejected immutable changes leave the row"
    );
}

/// §13.1 "first is 1"; §14 `next_event_sequence` (1): a session can never hand out 0.
fn a_session_starts_at_sequence_one<S: Store>(store: &S) {
    let mut session = sample_session(1);
    session.next_event_sequence = 0;
    assert_conflict(
        store.transact(|tx| tx.insert_session(&session)),
        "sessions: next_event_sequence 0",
    );
    assert!(
        read(store, |tx| tx.session(session.id)).is_none(),
        "nothing stored"
    );
}

/// Primary keys: a second session, run, invocation or approval with a used id is `Conflict`.
fn duplicate_primary_keys_conflict<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Completed);
    assert_conflict(
        store.transact(|tx| tx.insert_session(&sample_session(1))),
        "sessions: duplicate id",
    );
    assert_conflict(
        store.transact(|tx| tx.insert_run(&run)),
        "runs: duplicate id",
    );
    let invocation = seed_invocation(
        store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::WaitingForApproval),
    );
    let mut same_id = sample_invocation(1, &run, 2, "c2", InvocationStatus::WaitingForApproval);
    same_id.idempotency_key = "unused-key".to_owned();
    assert_conflict(
        store.transact(|tx| tx.insert_invocation(&same_id)),
        "tool_invocations: duplicate id",
    );
    let approval = sample_approval(1, &invocation, ApprovalStatus::Pending);
    commit(store, "approval", |tx| tx.insert_approval(&approval));
    let other = seed_invocation(
        store,
        sample_invocation(2, &run, 1, "c2", InvocationStatus::WaitingForApproval),
    );
    let same_approval_id = sample_approval(1, &other, ApprovalStatus::Pending);
    assert_conflict(
        store.transact(|tx| tx.insert_approval(&same_approval_id)),
        "approvals: duplicate id",
    );
}

/// SPEC §14 `uq_runs_one_active_per_session`, as §22.2 amends it: a conversation's call runs
/// (`planner_kind = mcp`) share its session and are active side by side; any other run still
/// conflicts with another active non-mcp run of its session. `active_runs_in_session` lists
/// every active run of the session, of either kind, by `(created_at, id)`.
fn one_active_run_per_session<S: Store>(store: &S) {
    use crate::conversation::MCP_PLANNER_KIND;
    let first = seed_run(store, 1, RunStatus::Queued);
    for status in [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::WaitingForApproval,
    ] {
        let second = sample_run(2, first.session_id, status);
        assert_conflict(
            store.transact(|tx| tx.insert_run(&second)),
            &format!("uq_runs_one_active_per_session: a second {status} run"),
        );
    }
    let finished = sample_run(3, first.session_id, RunStatus::Completed);
    commit(store, "a terminal run beside the active one", |tx| {
        tx.insert_run(&finished)
    });
    assert_eq!(
        read(store, |tx| tx.active_runs_in_session(first.session_id)),
        vec![first.id],
        "active_runs_in_session: the QUEUED run"
    );

    let mut cancelled = first.clone();
    cancelled.state = RunState::Cancelled;
    commit(store, "cancel the queued run", |tx| {
        tx.update_run(&status_guard(&first), &cancelled)
    });
    assert_eq!(
        read(store, |tx| tx.active_runs_in_session(first.session_id)),
        Vec::<crate::ids::RunId>::new(),
        "active_runs_in_session: none once terminal"
    );
    let next = sample_run(4, first.session_id, RunStatus::Queued);
    commit(store, "a new run once the old one ended", |tx| {
        tx.insert_run(&next)
    });
    assert_eq!(
        read(store, |tx| tx.active_runs_in_session(first.session_id)),
        vec![next.id],
        "active_runs_in_session: the new run"
    );

    // A conversation's call runs (§22.2), inserted out of order: two share a creation time,
    // so the id breaks the tie.
    let call = |n: u128, status: RunStatus, created: i64| {
        let mut run = sample_run(n, first.session_id, status);
        run.planner_kind = MCP_PLANNER_KIND.to_owned();
        run.created_at = at(created);
        run.updated_at = run.created_at;
        run
    };
    let (c6, c5, c7) = (
        call(6, RunStatus::WaitingForApproval, 10),
        call(5, RunStatus::Running, 10),
        call(7, RunStatus::Queued, 5),
    );
    for (what, run) in [("c6", &c6), ("c5", &c5), ("c7", &c7)] {
        commit(store, &format!("call run {what} beside the others"), |tx| {
            tx.insert_run(run)
        });
    }
    commit(store, "a terminal call run", |tx| {
        tx.insert_run(&call(8, RunStatus::Completed, 1))
    });
    assert_eq!(
        read(store, |tx| tx.active_runs_in_session(first.session_id)),
        vec![next.id, c7.id, c5.id, c6.id],
        "active_runs_in_session: every active run of either kind, by (created_at, id)"
    );
    assert_conflict(
        store.transact(|tx| tx.insert_run(&sample_run(9, first.session_id, RunStatus::Queued))),
        "uq_runs_one_active_per_session: a second non-mcp run beside call runs",
    );
    let mut next_cancelled = next.clone();
    next_cancelled.state = RunState::Cancelled;
    commit(store, "cancel the non-mcp run", |tx| {
        tx.update_run(&status_guard(&next), &next_cancelled)
    });
    let beside = sample_run(10, first.session_id, RunStatus::Queued);
    commit(store, "a non-mcp run beside active call runs only", |tx| {
        tx.insert_run(&beside)
    });
    assert_eq!(
        read(store, |tx| tx.active_runs_in_session(first.session_id)),
        vec![beside.id, c7.id, c5.id, c6.id],
        "active_runs_in_session: the non-mcp run (created first) and the call runs"
    );
}

/// SPEC §8.2 Heartbeat: renews only a held lease of a RUNNING run, changes nothing else and
/// reports `cancel_requested_at`.
fn heartbeat_renews_only_a_held_lease<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let lease = held_lease(&run);
    let obs = commit(store, "heartbeat", |tx| {
        tx.heartbeat(&lease, at(100), at(50))
    });
    assert_eq!(
        obs.map(|o| o.cancel_requested_at),
        Some(None),
        "heartbeat: renews and reports no cancellation"
    );
    let renewed = stored_run(store, &run);
    let mut expected = run.clone();
    expected.state = RunState::Running {
        lease_owner: WORKER.to_owned(),
        lease_expires_at: at(100),
    };
    assert_eq!(
        renewed, expected,
        "heartbeat: sets lease_expires_at and nothing else"
    );

    let mut cancel = renewed.clone();
    cancel.cancel_requested_at = Some(at(60));
    commit(store, "request cancellation", |tx| {
        tx.update_run(&lease_guard(&renewed), &cancel)
    });
    let obs = commit(store, "heartbeat", |tx| {
        tx.heartbeat(&lease, at(110), at(60))
    });
    assert_eq!(
        obs.map(|o| o.cancel_requested_at),
        Some(Some(at(60))),
        "heartbeat: reports cancel_requested_at"
    );

    let before = stored_run(store, &run);
    let wrong_epoch = Lease {
        lease_epoch: lease.lease_epoch + 1,
        ..lease.clone()
    };
    assert_eq!(
        commit(store, "heartbeat", |tx| tx.heartbeat(
            &wrong_epoch,
            at(500),
            at(70)
        )),
        None,
        "heartbeat: wrong epoch → None"
    );
    let wrong_owner = Lease {
        worker_id: "worker-2".to_owned(),
        ..lease.clone()
    };
    assert_eq!(
        commit(store, "heartbeat", |tx| tx.heartbeat(
            &wrong_owner,
            at(500),
            at(70)
        )),
        None,
        "heartbeat: wrong owner → None"
    );
    let unknown = Lease {
        run_id: run_id(99),
        ..lease.clone()
    };
    assert_eq!(
        commit(store, "heartbeat", |tx| tx.heartbeat(
            &unknown,
            at(500),
            at(70)
        )),
        None,
        "heartbeat: unknown run → None"
    );
    assert_eq!(
        stored_run(store, &run),
        before,
        "heartbeat: a failed renewal changes nothing"
    );

    let mut parked = before.clone();
    parked.state = RunState::WaitingForApproval;
    commit(store, "park", |tx| {
        tx.update_run(&lease_guard(&before), &parked)
    });
    assert_eq!(
        commit(store, "heartbeat", |tx| tx.heartbeat(
            &lease,
            at(500),
            at(80)
        )),
        None,
        "heartbeat: a parked run → None"
    );
    assert_eq!(
        stored_run(store, &run),
        parked,
        "heartbeat: a parked run is unchanged"
    );
}

/// SPEC §8.2 CLAIM: the oldest `(created_at, id)` QUEUED run with `scheduled_for` null or ≤ now.
fn next_claimable_run_is_the_oldest_due_queued_run<S: Store>(store: &S) {
    let seed = |n: u128, created: i64, state: RunState| {
        let session = sample_session(n);
        let mut run = sample_run(n, session.id, state.status());
        run.state = state;
        run.created_at = at(created);
        commit(store, "seed run", |tx| {
            tx.insert_session(&session)?;
            tx.insert_run(&run)
        });
        run
    };
    let r1 = seed(
        1,
        10,
        RunState::Queued {
            scheduled_for: None,
        },
    );
    let r2 = seed(
        2,
        5,
        RunState::Queued {
            scheduled_for: Some(at(100)),
        },
    );
    let r3 = seed(
        3,
        10,
        RunState::Queued {
            scheduled_for: None,
        },
    );
    let r4 = seed(4, 1, sample_state(RunStatus::Running));
    let r5 = seed(
        5,
        2,
        RunState::Queued {
            scheduled_for: Some(at(50)),
        },
    );
    let _r6 = seed(6, 0, sample_state(RunStatus::WaitingForApproval));

    let claimable = |now: i64, only: Option<&Run>| {
        read(store, |tx| {
            tx.next_claimable_run(at(now), only.map(|r| r.id))
        })
        .map(|r| r.id)
    };
    assert_eq!(
        claimable(50, None),
        Some(r5.id),
        "next_claimable_run: scheduled_for == now is due, and it is the oldest"
    );
    assert_eq!(
        claimable(49, None),
        Some(r1.id),
        "next_claimable_run: not yet due is skipped; created_at ties break by id"
    );
    assert_eq!(
        claimable(49, Some(&r3)),
        Some(r3.id),
        "next_claimable_run: only"
    );
    assert_eq!(
        claimable(99, Some(&r2)),
        None,
        "next_claimable_run: only, not yet due"
    );
    assert_eq!(
        claimable(100, Some(&r2)),
        Some(r2.id),
        "next_claimable_run: only, due"
    );
    assert_eq!(
        claimable(100, Some(&r4)),
        None,
        "next_claimable_run: a RUNNING run is not claimable"
    );
    assert_eq!(
        claimable(1000, None),
        Some(r5.id),
        "next_claimable_run: oldest created first"
    );
    assert_eq!(stored_run(store, &r1), r1, "next_claimable_run: reads only");
}

/// SPEC §8.2 RECLAIM input: RUNNING runs with `lease_expires_at ≤ now`, oldest expiry first.
fn expired_leases_oldest_expiry_first<S: Store>(store: &S) {
    let seed = |n: u128, state: RunState| {
        let session = sample_session(n);
        let mut run = sample_run(n, session.id, state.status());
        run.state = state;
        commit(store, "seed run", |tx| {
            tx.insert_session(&session)?;
            tx.insert_run(&run)
        });
        run.id
    };
    let running = |expires: i64| RunState::Running {
        lease_owner: WORKER.to_owned(),
        lease_expires_at: at(expires),
    };
    let r1 = seed(1, running(30));
    let r2 = seed(2, running(10));
    let r3 = seed(3, running(10));
    let _r4 = seed(4, running(100));
    let _r5 = seed(
        5,
        RunState::Queued {
            scheduled_for: Some(at(0)),
        },
    );
    let expired = |now: i64, limit: usize| {
        read(store, |tx| tx.expired_leases(at(now), limit))
            .into_iter()
            .map(|r| r.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        expired(30, 10),
        vec![r2, r3, r1],
        "expired_leases: by (lease_expires_at, id), inclusive of now"
    );
    assert_eq!(expired(30, 2), vec![r2, r3], "expired_leases: limit");
    assert_eq!(
        expired(10, 10),
        vec![r2, r3],
        "expired_leases: lease_expires_at == now has expired"
    );
    assert_eq!(
        expired(9, 10),
        Vec::new(),
        "expired_leases: none before the first expiry"
    );
}

fn count_runs_by_status<S: Store>(store: &S) {
    seed_run(store, 1, RunStatus::Queued);
    seed_run(store, 2, RunStatus::Queued);
    seed_run(store, 3, RunStatus::Running);
    seed_run(store, 4, RunStatus::Completed);
    let counts = read(store, |tx| {
        Ok((
            tx.count_runs(RunStatus::Queued)?,
            tx.count_runs(RunStatus::Running)?,
            tx.count_runs(RunStatus::Completed)?,
            tx.count_runs(RunStatus::Failed)?,
        ))
    });
    assert_eq!(counts, (2, 1, 1, 0), "count_runs: per status");
}

/// SPEC §17.2 step records: PK(run_id, step), steps contiguous from 1 per run, read back in
/// step order after a given step, at most `limit`.
fn step_records_are_contiguous_and_paged<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    assert_eq!(
        read(store, |tx| tx.step_records(run.id, 0, 10)),
        Vec::new(),
        "step_records: none yet"
    );
    assert_conflict(
        store.transact(|tx| tx.insert_step_record(&sample_step_record(run.id, 2), None)),
        "step_records: the first step is 1",
    );
    for step in 1..=3 {
        commit(store, "step record", |tx| {
            tx.insert_step_record(&sample_step_record(run.id, step), None)
        });
    }
    assert_conflict(
        store.transact(|tx| tx.insert_step_record(&sample_step_record(run.id, 3), None)),
        "step_records: duplicate step",
    );
    assert_conflict(
        store.transact(|tx| tx.insert_step_record(&sample_step_record(run.id, 5), None)),
        "step_records: a gap",
    );
    let other = seed_run(store, 2, RunStatus::Running);
    commit(store, "another run's step 1", |tx| {
        tx.insert_step_record(&sample_step_record(other.id, 1), None)
    });
    assert_eq!(
        read(store, |tx| tx.step_records(run.id, 0, 10)),
        (1..=3)
            .map(|step| sample_step_record(run.id, step))
            .collect::<Vec<_>>(),
        "step_records: the run's own, in step order, as written"
    );
    assert_eq!(
        read(store, |tx| tx.step_records(run.id, 1, 1)),
        vec![sample_step_record(run.id, 2)],
        "step_records: strictly after the given step, at most the limit"
    );
    assert_eq!(
        read(store, |tx| tx.step_records(run.id, u32::MAX, 10)),
        Vec::new(),
        "step_records: nothing after the last step"
    );
    let orphan = sample_run(9, session_id(9), RunStatus::Queued);
    assert_eq!(
        store.transact(|tx| tx.insert_step_record(&sample_step_record(orphan.id, 1), None)),
        Err(TxError::NotFound),
        "step_records: a record needs its run"
    );
}

/// A pending checkpoint of `run` at `version` whose batch is step `step` of `calls`.
fn pending_checkpoint(
    run: &Run,
    version: u32,
    step: u32,
    calls: &[crate::ports::ProposedCall],
) -> Checkpoint {
    Checkpoint {
        run_id: run.id,
        version,
        trigger: CheckpointTrigger::ToolPending,
        state: CheckpointState {
            step: step - 1,
            pending: Some(PendingBatch {
                step,
                calls: calls
                    .iter()
                    .map(|call| PinnedCall {
                        call: call.clone(),
                        pinned_version: Some("1.0.0".to_owned()),
                    })
                    .collect(),
                admission: Admission::Sequential,
            }),
            tainted: false,
            denial_counts: BTreeMap::new(),
        },
        created_at: T0,
    }
}

/// `insert_step_record`'s `pending` (issue 33): a store may keep the step's calls as a
/// reference to the checkpoint that holds them; the record reads back whole either way, in a
/// later transaction and in the one that wrote the checkpoint, before and after it is read.
fn a_step_records_calls_read_back_from_the_checkpoint_it_names<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let first = sample_step_record(run.id, 1);
    commit(store, "PENDING of step 1", |tx| {
        tx.insert_checkpoint(&pending_checkpoint(&run, 1, 1, &first.calls))
    });
    commit(store, "step 1's record", |tx| {
        tx.insert_step_record(&first, Some(1))
    });
    let second = sample_step_record(run.id, 2);
    let in_its_transaction = commit(store, "PENDING and record of step 2", |tx| {
        tx.insert_checkpoint(&pending_checkpoint(&run, 2, 2, &second.calls))?;
        tx.insert_step_record(&second, Some(2))?;
        tx.step_records(run.id, 0, 10)
    });
    let expected = vec![first, second];
    assert_eq!(
        in_its_transaction, expected,
        "step_records: read in the transaction that wrote the checkpoint"
    );
    assert_eq!(
        read(store, |tx| tx.step_records(run.id, 0, 10)),
        expected,
        "step_records: the calls of the checkpoint each record names"
    );
}

/// An invocation inserted in the transaction that wrote its batch's PENDING checkpoint (as a
/// step's first call is) reads back whole from every lookup, inside that transaction and after.
fn a_calls_arguments_read_back_from_its_transactions_pending_checkpoint<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let invocation = sample_invocation(1, &run, 1, "c1", InvocationStatus::Running);
    let call = crate::ports::ProposedCall {
        call_id: "c1".to_owned(),
        tool: TOOL.to_owned(),
        version: None,
        arguments: invocation.raw_arguments.clone(),
        argument_trust: BTreeMap::new(),
    };
    let lookups = |tx: &mut dyn StoreTx| -> Result<Vec<Invocation>, TxError> {
        let mut found = tx.invocations_of_run(run.id)?;
        found.extend(tx.invocations_of_run_in(run.id, &[InvocationStatus::Running])?);
        found.extend(tx.invocation_by_call(run.id, 1, "c1")?);
        found.extend(tx.invocation_by_key(&invocation.idempotency_key)?);
        found.extend(tx.invocation(invocation.id)?);
        Ok(found)
    };
    let inside = commit(store, "PENDING and its first call", |tx| {
        tx.insert_checkpoint(&pending_checkpoint(&run, 1, 1, std::slice::from_ref(&call)))?;
        tx.insert_invocation(&invocation)?;
        lookups(tx)
    });
    assert_eq!(
        inside,
        vec![invocation.clone(); 5],
        "invocations: read in the transaction that wrote them"
    );
    assert_eq!(
        read(store, |tx| lookups(tx)),
        vec![invocation; 5],
        "invocations: read after it"
    );
}

/// SPEC §14 checkpoints: PK(run_id, version), versions contiguous from 1.
fn checkpoint_versions_are_contiguous<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    assert_eq!(
        read(store, |tx| tx.latest_checkpoint(run.id)),
        None,
        "checkpoints: none yet"
    );
    assert_conflict(
        store.transact(|tx| tx.insert_checkpoint(&sample_checkpoint(run.id, 2))),
        "checkpoints: the first version is 1",
    );
    commit(store, "checkpoint v1", |tx| {
        tx.insert_checkpoint(&sample_checkpoint(run.id, 1))
    });
    assert_conflict(
        store.transact(|tx| tx.insert_checkpoint(&sample_checkpoint(run.id, 1))),
        "checkpoints: duplicate version",
    );
    assert_conflict(
        store.transact(|tx| tx.insert_checkpoint(&sample_checkpoint(run.id, 3))),
        "checkpoints: a gap",
    );
    commit(store, "checkpoint v2", |tx| {
        tx.insert_checkpoint(&sample_checkpoint(run.id, 2))
    });
    assert_eq!(
        read(store, |tx| tx.latest_checkpoint(run.id)),
        Some(sample_checkpoint(run.id, 2)),
        "checkpoints: latest is the highest version"
    );

    let other = seed_run(store, 2, RunStatus::Running);
    commit(store, "another run's v1", |tx| {
        tx.insert_checkpoint(&sample_checkpoint(other.id, 1))
    });
    assert_eq!(
        read(store, |tx| tx.latest_checkpoint(run.id)).map(|c| c.version),
        Some(2),
        "checkpoints: versions are per run"
    );
}

// ----- invocations ---------------------------------------------------------------------------

/// SPEC §14 `uq_tool_invocations_idempotency_key` and UNIQUE(run_id, step_number, call_id).
fn invocation_uniqueness<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let first = seed_invocation(
        store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::Authorized),
    );

    let mut same_key = sample_invocation(2, &run, 1, "c2", InvocationStatus::Authorized);
    same_key.idempotency_key.clone_from(&first.idempotency_key);
    assert_conflict(
        store.transact(|tx| tx.insert_invocation(&same_key)),
        "uq_tool_invocations_idempotency_key",
    );
    let mut same_call = sample_invocation(3, &run, 1, "c1", InvocationStatus::Authorized);
    same_call.idempotency_key = "another-key".to_owned();
    assert_conflict(
        store.transact(|tx| tx.insert_invocation(&same_call)),
        "UNIQUE(run_id, step_number, call_id)",
    );

    seed_invocation(
        store,
        sample_invocation(4, &run, 2, "c1", InvocationStatus::Authorized),
    );
    let other_run = seed_run(store, 2, RunStatus::Running);
    seed_invocation(
        store,
        sample_invocation(5, &other_run, 1, "c1", InvocationStatus::Authorized),
    );
    assert_eq!(
        read(store, |tx| tx.invocations_of_run(run.id)).len(),
        2,
        "tool_invocations: the same call_id in another step or run is fine"
    );
}

/// Lookups by id, key and call, and `invocations_of_run` by `(step_number, created_at, id)`.
fn invocation_lookups_and_run_order<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let other = seed_run(store, 2, RunStatus::Running);
    let with_time = |n: u128, step: u32, call: &str, created: i64| {
        let mut invocation = sample_invocation(n, &run, step, call, InvocationStatus::Authorized);
        invocation.created_at = at(created);
        invocation.updated_at = at(created);
        seed_invocation(store, invocation)
    };
    let a = with_time(5, 2, "a", 0);
    let b = with_time(4, 1, "b", 9);
    let c = with_time(3, 1, "c", 9);
    let d = with_time(9, 1, "d", 1);
    seed_invocation(
        store,
        sample_invocation(6, &other, 1, "x", InvocationStatus::Authorized),
    );

    let ids: Vec<_> = read(store, |tx| tx.invocations_of_run(run.id))
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(
        ids,
        vec![d.id, c.id, b.id, a.id],
        "invocations_of_run: by (step_number, created_at, id), this run only"
    );
    let (by_id, by_key, by_call, missing) = read(store, |tx| {
        Ok((
            tx.invocation(b.id)?,
            tx.invocation_by_key(&b.idempotency_key)?,
            tx.invocation_by_call(run.id, 1, "b")?,
            tx.invocation_by_call(run.id, 2, "b")?,
        ))
    });
    assert_eq!(by_id.as_ref(), Some(&b), "invocation: by id");
    assert_eq!(by_key.as_ref(), Some(&b), "invocation_by_key");
    assert_eq!(by_call.as_ref(), Some(&b), "invocation_by_call");
    assert_eq!(missing, None, "invocation_by_call: step is part of the key");
}

/// `invocations_of_run_in`: exactly the run's rows in those statuses, in the run order.
fn invocations_of_run_by_status<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let other = seed_run(store, 2, RunStatus::Running);
    let later = seed_invocation(
        store,
        sample_invocation(1, &run, 2, "c1", InvocationStatus::Authorized),
    );
    let earlier = seed_invocation(
        store,
        sample_invocation(2, &run, 1, "c1", InvocationStatus::Authorized),
    );
    let to_start = seed_invocation(
        store,
        sample_invocation(3, &run, 1, "c2", InvocationStatus::Authorized),
    );
    seed_invocation(
        store,
        sample_invocation(4, &other, 1, "c1", InvocationStatus::Authorized),
    );
    let mut started = to_start.clone();
    started.status = InvocationStatus::Running;
    started.effect_sent_at = Some(at(1));
    started.updated_at = at(1);
    store
        .transact(|tx| tx.update_invocation(InvocationStatus::Authorized, &started))
        .expect("AUTHORIZED → RUNNING");

    let ids = |statuses: &[InvocationStatus]| -> Vec<_> {
        read(store, |tx| tx.invocations_of_run_in(run.id, statuses))
            .into_iter()
            .map(|i| i.id)
            .collect()
    };
    assert_eq!(
        ids(&[InvocationStatus::Authorized]),
        vec![earlier.id, later.id],
        "invocations_of_run_in: this run's AUTHORIZED rows by step"
    );
    assert_eq!(
        ids(&[InvocationStatus::Running]),
        vec![started.id],
        "invocations_of_run_in: the RUNNING row only"
    );
    assert_eq!(
        ids(&[InvocationStatus::Uncertain]),
        Vec::new(),
        "invocations_of_run_in: no row in a status nobody has"
    );
    assert_eq!(
        ids(&[InvocationStatus::Running, InvocationStatus::Authorized]),
        vec![earlier.id, started.id, later.id],
        "invocations_of_run_in: two statuses, in the run order (not the order they are named in)"
    );
    assert_eq!(
        ids(&[]),
        Vec::new(),
        "invocations_of_run_in: no status, no row"
    );
    let full: Vec<_> = read(store, |tx| tx.invocations_of_run(run.id));
    let statuses: [&[InvocationStatus]; 4] = [
        &[InvocationStatus::Authorized],
        &[InvocationStatus::Running],
        &[InvocationStatus::Authorized, InvocationStatus::Running],
        &[
            InvocationStatus::Proposed,
            InvocationStatus::WaitingForApproval,
            InvocationStatus::Running,
            InvocationStatus::Uncertain,
        ],
    ];
    for wanted in statuses {
        let filtered: Vec<_> = full
            .iter()
            .filter(|i| wanted.contains(&i.status))
            .cloned()
            .collect();
        assert_eq!(
            read(store, |tx| tx.invocations_of_run_in(run.id, wanted)),
            filtered,
            "invocations_of_run_in agrees with invocations_of_run filtered by {wanted:?}"
        );
    }
}

/// `Store::read`: sees every transaction committed before it, returns the closure's value and
/// errors as they are, and refuses a write inside with `Backend`, keeping nothing of it.
fn read_sees_commits_and_refuses_writes<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Queued);
    let seen = store.read(|tx| tx.run(run.id)).expect("read");
    assert_eq!(seen.as_ref(), Some(&run), "read: sees the committed run");
    assert!(
        matches!(
            store.read(|tx| tx.run(run.id).and(Err::<(), _>(TxError::NotFound))),
            Err(TxError::NotFound)
        ),
        "read: the closure's error comes back as it is"
    );

    let written = store.read(|tx| tx.insert_session(&sample_session(7)));
    assert!(
        matches!(written, Err(TxError::Backend(_))),
        "read: a write inside is refused with Backend, got {written:?}"
    );
    assert_eq!(
        read(store, |tx| tx.session(sample_session(7).id)),
        None,
        "read: nothing of a refused write is kept"
    );

    let mut next = run.clone();
    next.updated_at = at(5);
    let guard = RunGuard {
        run_id: run.id,
        status: RunStatus::Queued,
        lease: None,
    };
    store
        .transact(|tx| tx.update_run(&guard, &next))
        .expect("a write transaction");
    assert_eq!(
        store
            .read(|tx| tx.run(run.id))
            .expect("read")
            .map(|r| r.updated_at),
        Some(at(5)),
        "read: sees a write committed after an earlier read"
    );
}

/// SPEC §9.1: updates are guarded by the expected status and follow `may_become`.
fn invocation_transitions_follow_the_edges<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let authorized = seed_invocation(
        store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::Authorized),
    );

    let mut started = authorized.clone();
    started.status = InvocationStatus::Running;
    started.effect_sent_at = Some(at(1));
    started.updated_at = at(1);
    assert_conflict(
        store.transact(|tx| tx.update_invocation(InvocationStatus::Proposed, &started)),
        "update_invocation: wrong expected status",
    );

    let mut skipped = sample_invocation(1, &run, 1, "c1", InvocationStatus::Succeeded);
    skipped.effect_sent_at = None;
    assert_conflict(
        store.transact(|tx| tx.update_invocation(InvocationStatus::Authorized, &skipped)),
        "invocation edges: AUTHORIZED -> SUCCEEDED",
    );
    let mut waiting = authorized.clone();
    waiting.status = InvocationStatus::WaitingForApproval;
    assert_conflict(
        store.transact(|tx| tx.update_invocation(InvocationStatus::Authorized, &waiting)),
        "invocation edges: AUTHORIZED -> WAITING_FOR_APPROVAL",
    );
    assert_eq!(
        read(store, |tx| tx.invocation(authorized.id)),
        Some(authorized.clone()),
        "update_invocation: rejected updates change nothing"
    );

    commit(store, "START", |tx| {
        tx.update_invocation(InvocationStatus::Authorized, &started)
    });
    let mut back = started.clone();
    back.status = InvocationStatus::Authorized;
    assert_conflict(
        store.transact(|tx| tx.update_invocation(InvocationStatus::Running, &back)),
        "invocation edges: RUNNING -> AUTHORIZED",
    );
    let mut finished = sample_invocation(1, &run, 1, "c1", InvocationStatus::Succeeded);
    finished.effect_sent_at = started.effect_sent_at;
    commit(store, "FINISH", |tx| {
        tx.update_invocation(InvocationStatus::Running, &finished)
    });
    assert_eq!(
        read(store, |tx| tx.invocation(finished.id)),
        Some(finished.clone()),
        "update_invocation: stores the row"
    );

    let parked = seed_invocation(
        store,
        sample_invocation(2, &run, 1, "c2", InvocationStatus::WaitingForApproval),
    );
    let mut revalidated = parked.clone();
    revalidated.status = InvocationStatus::Authorized;
    commit(store, "REVALIDATE", |tx| {
        tx.update_invocation(InvocationStatus::WaitingForApproval, &revalidated)
    });
    let parked = seed_invocation(
        store,
        sample_invocation(3, &run, 1, "c3", InvocationStatus::WaitingForApproval),
    );
    let mut denied = sample_invocation(3, &run, 1, "c3", InvocationStatus::Denied);
    denied.suspended_approval = parked.suspended_approval;
    commit(store, "deny a waiting call", |tx| {
        tx.update_invocation(InvocationStatus::WaitingForApproval, &denied)
    });
}

/// SPEC §9.1: changing an immutable field is a `Conflict`.
fn invocation_immutable_fields_conflict<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let invocation = seed_invocation(
        store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::WaitingForApproval),
    );
    let changes: Vec<(&str, Edit<Invocation>)> = vec![
        (
            "tool_name",
            Box::new(|i| i.tool_name = "demo.other".to_owned()),
        ),
        (
            "tool_version",
            Box::new(|i| i.tool_version = "2.0.0".to_owned()),
        ),
        ("arguments", Box::new(|i| i.arguments = "{}".to_owned())),
        ("raw_arguments", Box::new(|i| i.raw_arguments = json!({}))),
        (
            "effective_arguments_hash",
            Box::new(|i| i.effective_arguments_hash = "0".repeat(64)),
        ),
        (
            "idempotency_key",
            Box::new(|i| i.idempotency_key = "changed".to_owned()),
        ),
        (
            "side_effect",
            Box::new(|i| i.side_effect = crate::vocab::SideEffectClass::None),
        ),
        (
            "idempotency_class",
            Box::new(|i| i.idempotency_class = crate::vocab::IdempotencyClass::ReadOnly),
        ),
        ("step_number", Box::new(|i| i.step_number = 7)),
        ("call_id", Box::new(|i| i.call_id = "c9".to_owned())),
        ("created_at", Box::new(|i| i.created_at = at(5))),
    ];
    for (field, change) in changes {
        let mut next = invocation.clone();
        change(&mut next);
        next.status = InvocationStatus::Authorized;
        assert_conflict(
            store.transact(|tx| tx.update_invocation(InvocationStatus::WaitingForApproval, &next)),
            &format!("tool_invocations: immutable {field}"),
        );
    }
    assert_eq!(
        read(store, |tx| tx.invocation(invocation.id)),
        Some(invocation),
        "tool_invocations: rejected changes leave the row"
    );
}

/// SPEC §16 #15: terminal rows never change.
fn terminal_invocations_never_change<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let succeeded = seed_invocation(
        store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::Succeeded),
    );
    let mut touched = succeeded.clone();
    touched.output_bytes = Some(99);
    touched.updated_at = at(9);
    assert_conflict(
        store.transact(|tx| tx.update_invocation(InvocationStatus::Succeeded, &touched)),
        "terminal invocation: a mutable field",
    );
    let mut reclosed = sample_invocation(1, &run, 1, "c1", InvocationStatus::Failed);
    reclosed.effect_sent_at = succeeded.effect_sent_at;
    assert_conflict(
        store.transact(|tx| tx.update_invocation(InvocationStatus::Succeeded, &reclosed)),
        "terminal invocation: SUCCEEDED -> FAILED",
    );
    let uncertain = seed_invocation(
        store,
        sample_invocation(2, &run, 1, "c2", InvocationStatus::Uncertain),
    );
    let mut settled = sample_invocation(2, &run, 1, "c2", InvocationStatus::Succeeded);
    settled.effect_sent_at = uncertain.effect_sent_at;
    assert_conflict(
        store.transact(|tx| tx.update_invocation(InvocationStatus::Uncertain, &settled)),
        "terminal invocation: UNCERTAIN -> SUCCEEDED",
    );
    assert_eq!(
        read(store, |tx| tx.invocation(succeeded.id)),
        Some(succeeded),
        "terminal invocation: unchanged"
    );
}

/// SPEC §14 CHECKs: `effect_sent_at` only on RUNNING/SUCCEEDED/FAILED/UNCERTAIN rows; terminal
/// rows have `outcome` and `result_item`.
fn invocation_row_checks<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    for (n, status) in [
        (1, InvocationStatus::Authorized),
        (2, InvocationStatus::WaitingForApproval),
        (3, InvocationStatus::Denied),
    ] {
        let mut row = sample_invocation(n, &run, 1, &format!("c{n}"), status);
        row.effect_sent_at = Some(T0);
        assert_conflict(
            store.transact(|tx| tx.insert_invocation(&row)),
            &format!("CHECK effect_sent_at: not on {status}"),
        );
    }
    let mut no_outcome = sample_invocation(4, &run, 1, "c4", InvocationStatus::Succeeded);
    no_outcome.outcome = None;
    assert_conflict(
        store.transact(|tx| tx.insert_invocation(&no_outcome)),
        "CHECK terminal => outcome",
    );
    let mut no_item = sample_invocation(5, &run, 1, "c5", InvocationStatus::Denied);
    no_item.result_item = None;
    assert_conflict(
        store.transact(|tx| tx.insert_invocation(&no_item)),
        "CHECK terminal => result_item",
    );

    let authorized = seed_invocation(
        store,
        sample_invocation(6, &run, 1, "c6", InvocationStatus::Authorized),
    );
    let mut bare_denial = authorized.clone();
    bare_denial.status = InvocationStatus::Denied;
    assert_conflict(
        store.transact(|tx| tx.update_invocation(InvocationStatus::Authorized, &bare_denial)),
        "CHECK terminal => outcome (update)",
    );
    let ids: Vec<_> = read(store, |tx| tx.invocations_of_run(run.id))
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(
        ids,
        vec![authorized.id],
        "CHECK: rejected rows are not stored"
    );
}

/// `uncertain_invocations`: the tenant's UNCERTAIN rows, unsettled unless asked, by
/// `updated_at DESC, id DESC`.
fn uncertain_invocations_filter_and_order<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let uncertain = |n: u128, updated: i64| {
        let mut row = sample_invocation(n, &run, 1, &format!("c{n}"), InvocationStatus::Uncertain);
        row.updated_at = at(updated);
        seed_invocation(store, row)
    };
    let u1 = uncertain(1, 5);
    let u2 = uncertain(2, 7);
    let u3 = uncertain(3, 7);
    seed_invocation(
        store,
        sample_invocation(4, &run, 1, "c4", InvocationStatus::Succeeded),
    );
    let foreign_run = seed_run_of_tenant(store, 2, RunStatus::Running, "other");
    let foreign = seed_invocation(
        store,
        sample_invocation(5, &foreign_run, 1, "c5", InvocationStatus::Uncertain),
    );
    commit(store, "settle u2", |tx| {
        tx.insert_settlement(&sample_settlement(1, &u2))
    });

    let list = |tenant: &str, all: bool| {
        read(store, |tx| tx.uncertain_invocations(tenant, all))
            .into_iter()
            .map(|i| i.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        list(TENANT, false),
        vec![u3.id, u1.id],
        "uncertain_invocations: unsettled, by updated_at DESC, id DESC"
    );
    assert_eq!(
        list(TENANT, true),
        vec![u3.id, u2.id, u1.id],
        "uncertain_invocations: include_settled"
    );
    assert_eq!(
        list("other", true),
        vec![foreign.id],
        "uncertain_invocations: per tenant"
    );
}

/// `twins` (SPEC §9.2 step 5, §19.7): the RUNNING and UNCERTAIN rows of one tenant, tool and
/// effective arguments hash, of one run or the whole tenant, by `(created_at, id)`, each with
/// whether it is settled.
fn twins_are_the_open_rows_of_one_identity<S: Store>(store: &S) {
    let run1 = seed_run(store, 1, RunStatus::Running);
    let run2 = seed_run(store, 2, RunStatus::Running);
    let foreign_run = seed_run_of_tenant(store, 3, RunStatus::Running, "other");
    let hash = "h".repeat(64);
    let row = |n: u128, run: &Run, status: InvocationStatus, created: i64| {
        let mut row = sample_invocation(n, run, 1, &format!("c{n}"), status);
        row.effective_arguments_hash = hash.clone();
        row.created_at = at(created);
        row
    };
    let flying = seed_invocation(store, row(1, &run1, InvocationStatus::Running, 5));
    let unknown = seed_invocation(store, row(2, &run2, InvocationStatus::Uncertain, 3));
    seed_invocation(store, row(3, &run1, InvocationStatus::Succeeded, 1));
    seed_invocation(
        store,
        row(4, &run2, InvocationStatus::WaitingForApproval, 1),
    );
    let mut other_hash = row(5, &run1, InvocationStatus::Running, 1);
    other_hash.effective_arguments_hash = "g".repeat(64);
    seed_invocation(store, other_hash);
    let mut other_tool = row(6, &run2, InvocationStatus::Uncertain, 1);
    other_tool.tool_name = "demo.other".to_owned();
    seed_invocation(store, other_tool);
    seed_invocation(store, row(7, &foreign_run, InvocationStatus::Uncertain, 1));
    commit(store, "settle the uncertain twin", |tx| {
        tx.insert_settlement(&sample_settlement(1, &unknown))
    });

    let identity = CallIdentity {
        tenant_id: TENANT,
        tool_name: &flying.tool_name,
        effective_arguments_hash: &hash,
    };
    let found = |scope: TwinScope| {
        read(store, |tx| tx.twins(&identity, scope))
            .into_iter()
            .map(|t| (t.invocation.id, t.settled))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        found(TwinScope::Tenant),
        vec![(unknown.id, true), (flying.id, false)],
        "twins: the tenant's RUNNING and UNCERTAIN rows of the identity, by created_at"
    );
    assert_eq!(
        found(TwinScope::Run(run1.id)),
        vec![(flying.id, false)],
        "twins: one run's"
    );
    let whole = read(store, |tx| tx.twins(&identity, TwinScope::Tenant));
    assert_eq!(whole[1].invocation, flying, "twins: the whole row");
    // In a write transaction too (a store may lock the identity there).
    let written = commit(store, "twins in a write transaction", |tx| {
        tx.twins(&identity, TwinScope::Tenant)
    });
    assert_eq!(written.len(), 2, "twins: in a write transaction");
}

/// `runs_of_tenant`: the tenant's runs by `created_at DESC, id DESC`, strictly after the
/// cursor, at most `limit`, as summaries.
fn runs_of_tenant_page_newest_first<S: Store>(store: &S) {
    let seed = |n: u128, created: i64, tenant: &str| {
        let mut session = sample_session(n);
        session.tenant_id = tenant.to_owned();
        let mut run = sample_run(n, session.id, RunStatus::Queued);
        run.tenant_id = tenant.to_owned();
        run.created_at = at(created);
        run.updated_at = at(created);
        commit(store, "seed a run", |tx| {
            tx.insert_session(&session)?;
            tx.insert_run(&run)
        });
        run
    };
    let r1 = seed(1, 5, TENANT);
    let r2 = seed(2, 9, TENANT);
    let r3 = seed(3, 9, TENANT);
    seed(4, 20, "other");
    let page = |after: Option<RunCursor>, limit: usize| {
        read(store, |tx| tx.runs_of_tenant(TENANT, after, limit))
    };
    let all = page(None, 10);
    assert_eq!(
        all.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![r3.id, r2.id, r1.id],
        "runs_of_tenant: the tenant's only, newest first, then id DESC"
    );
    assert_eq!(
        all[2],
        RunSummary::from(&r1),
        "runs_of_tenant: the summary of the row"
    );
    let first = page(None, 2);
    assert_eq!(first.len(), 2, "runs_of_tenant: limit");
    let last = &first[1];
    let rest = page(
        Some(RunCursor {
            created_at: last.created_at,
            id: last.id,
        }),
        10,
    );
    assert_eq!(
        rest.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![r1.id],
        "runs_of_tenant: strictly after the cursor"
    );
}

// ----- approvals -----------------------------------------------------------------------------

/// SPEC §14 `uq_approvals_action_id` (§16 #19).
fn approval_action_id_is_unique<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let invocation = seed_invocation(
        store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::WaitingForApproval),
    );
    let approval = sample_approval(1, &invocation, ApprovalStatus::Pending);
    commit(store, "approval", |tx| tx.insert_approval(&approval));
    let second = sample_approval(2, &invocation, ApprovalStatus::Pending);
    assert_conflict(
        store.transact(|tx| tx.insert_approval(&second)),
        "uq_approvals_action_id",
    );
    let (by_id, by_action, of_run) = read(store, |tx| {
        Ok((
            tx.approval(approval.id)?,
            tx.approval_by_action(invocation.id)?,
            tx.approvals_of_run(run.id)?,
        ))
    });
    assert_eq!(by_id.as_ref(), Some(&approval), "approval: by id");
    assert_eq!(by_action.as_ref(), Some(&approval), "approval_by_action");
    assert_eq!(
        of_run,
        vec![approval],
        "approvals_of_run: one approval per action"
    );
}

/// `approvals_of_run` is ordered by `(created_at, id)`: PARK appends `approval.requested` and the
/// sweep closes approvals in that order, so both stores must agree on it.
fn approvals_of_run_by_creation_then_id<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let mut approvals = Vec::new();
    // Inserted out of both orders: the tie at 0 s is inserted in descending id order.
    for (n, created_seconds) in [(1u128, 5), (3, 0), (2, 0)] {
        let invocation = seed_invocation(
            store,
            sample_invocation(
                n,
                &run,
                1,
                &format!("c{n}"),
                InvocationStatus::WaitingForApproval,
            ),
        );
        let mut approval = sample_approval(n, &invocation, ApprovalStatus::Pending);
        approval.created_at = at(created_seconds);
        commit(store, "approval", |tx| tx.insert_approval(&approval));
        approvals.push(approval);
    }
    let of_run = read(store, |tx| tx.approvals_of_run(run.id));
    let ids: Vec<_> = of_run.iter().map(|a| a.id).collect();
    assert_eq!(
        ids,
        vec![approvals[2].id, approvals[1].id, approvals[0].id],
        "approvals_of_run: by created_at, then id"
    );
}

/// SPEC §10.1: each change is guarded by the expected status, so racing resolve, expiry and
/// cancel have one winner; immutable fields never change.
fn approval_updates_are_guarded_by_status<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let invocation = seed_invocation(
        store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::WaitingForApproval),
    );
    let mut unannounced = sample_approval(1, &invocation, ApprovalStatus::Pending);
    unannounced.requested_at = None;
    commit(store, "PROPOSE", |tx| tx.insert_approval(&unannounced));
    let mut announced = unannounced.clone();
    announced.requested_at = Some(at(1));
    commit(store, "PARK announces", |tx| {
        tx.update_approval(ApprovalStatus::Pending, &announced)
    });

    let mut renamed = announced.clone();
    renamed.tool_name = "demo.other".to_owned();
    assert_conflict(
        store.transact(|tx| tx.update_approval(ApprovalStatus::Pending, &renamed)),
        "approvals: immutable tool_name",
    );
    let mut rehashed = announced.clone();
    rehashed.effective_arguments_hash = "0".repeat(64);
    assert_conflict(
        store.transact(|tx| tx.update_approval(ApprovalStatus::Pending, &rehashed)),
        "approvals: immutable effective_arguments_hash",
    );
    let mut extended = announced.clone();
    extended.expires_at = at(99_999);
    assert_conflict(
        store.transact(|tx| tx.update_approval(ApprovalStatus::Pending, &extended)),
        "approvals: immutable expires_at",
    );

    let mut approved = announced.clone();
    approved.status = ApprovalStatus::Approved;
    approved.resolution = Some(ApprovalResolution::ApproveOnce);
    approved.resolved_at = Some(at(2));
    approved.resolved_by = Some(PRINCIPAL.to_owned());
    assert_conflict(
        store.transact(|tx| tx.update_approval(ApprovalStatus::Expired, &approved)),
        "update_approval: wrong expected status",
    );
    commit(store, "RESOLVE", |tx| {
        tx.update_approval(ApprovalStatus::Pending, &approved)
    });

    let mut expired = announced.clone();
    expired.status = ApprovalStatus::Expired;
    expired.resolved_at = Some(at(3));
    assert_conflict(
        store.transact(|tx| tx.update_approval(ApprovalStatus::Pending, &expired)),
        "update_approval: a lost race against RESOLVE",
    );
    assert_eq!(
        read(store, |tx| tx.approval(approved.id)),
        Some(approved),
        "update_approval: the winner's row stays"
    );
}

/// SPEC §10.1: a terminal approval changes only by the single write of
/// `revalidated_policy_version`.
fn terminal_approval_changes_only_by_revalidation<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let invocation = seed_invocation(
        store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::WaitingForApproval),
    );
    let approved = sample_approval(1, &invocation, ApprovalStatus::Approved);
    commit(store, "approved approval", |tx| {
        tx.insert_approval(&approved)
    });

    let mut reasoned = approved.clone();
    reasoned.resolution_reason = Some("changed my mind".to_owned());
    assert_conflict(
        store.transact(|tx| tx.update_approval(ApprovalStatus::Approved, &reasoned)),
        "terminal approval: resolution_reason",
    );
    let mut denied = approved.clone();
    denied.status = ApprovalStatus::Denied;
    denied.resolution = Some(ApprovalResolution::Deny);
    assert_conflict(
        store.transact(|tx| tx.update_approval(ApprovalStatus::Approved, &denied)),
        "terminal approval: approved -> denied",
    );

    let mut revalidated = approved.clone();
    revalidated.revalidated_policy_version = Some("policy-v2".to_owned());
    commit(store, "REVALIDATE records the version", |tx| {
        tx.update_approval(ApprovalStatus::Approved, &revalidated)
    });
    let mut rewritten = approved.clone();
    rewritten.revalidated_policy_version = Some("policy-v3".to_owned());
    assert_conflict(
        store.transact(|tx| tx.update_approval(ApprovalStatus::Approved, &rewritten)),
        "terminal approval: revalidated_policy_version is written once",
    );
    let mut both = revalidated.clone();
    both.resolved_by = Some("mallory".to_owned());
    assert_conflict(
        store.transact(|tx| tx.update_approval(ApprovalStatus::Approved, &both)),
        "terminal approval: resolved_by",
    );
    assert_eq!(
        read(store, |tx| tx.approval(approved.id)),
        Some(revalidated),
        "terminal approval: only the single write landed"
    );
}

/// SPEC §14 CHECKs: `(status IN (approved, denied)) = (resolution IS NOT NULL)` and
/// `(status = pending) = (resolved_at IS NULL)`.
fn approval_row_checks<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let invocation = seed_invocation(
        store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::WaitingForApproval),
    );
    let cases: Vec<(&str, ApprovalStatus, Edit<Approval>)> = vec![
        (
            "approved without resolution",
            ApprovalStatus::Approved,
            Box::new(|a| a.resolution = None),
        ),
        (
            "denied without resolution",
            ApprovalStatus::Denied,
            Box::new(|a| a.resolution = None),
        ),
        (
            "pending with resolution",
            ApprovalStatus::Pending,
            Box::new(|a| a.resolution = Some(ApprovalResolution::Deny)),
        ),
        (
            "expired with resolution",
            ApprovalStatus::Expired,
            Box::new(|a| a.resolution = Some(ApprovalResolution::Deny)),
        ),
        (
            "pending with resolved_at",
            ApprovalStatus::Pending,
            Box::new(|a| a.resolved_at = Some(at(1))),
        ),
        (
            "cancelled without resolved_at",
            ApprovalStatus::Cancelled,
            Box::new(|a| a.resolved_at = None),
        ),
    ];
    for (case, status, change) in cases {
        let mut row = sample_approval(1, &invocation, status);
        change(&mut row);
        assert_conflict(
            store.transact(|tx| tx.insert_approval(&row)),
            &format!("CHECK approvals: {case}"),
        );
    }
    let pending = sample_approval(1, &invocation, ApprovalStatus::Pending);
    commit(store, "pending approval", |tx| tx.insert_approval(&pending));
    let mut bare_denial = pending.clone();
    bare_denial.status = ApprovalStatus::Denied;
    bare_denial.resolved_at = Some(at(2));
    assert_conflict(
        store.transact(|tx| tx.update_approval(ApprovalStatus::Pending, &bare_denial)),
        "CHECK approvals: denied without resolution (update)",
    );
    assert_eq!(
        read(store, |tx| tx.approval(pending.id)),
        Some(pending),
        "CHECK approvals: rejected update changes nothing"
    );
}

/// `pending_approvals`: announced pending approvals of a tenant (optionally one run) by
/// `created_at DESC, id DESC`, strictly after the cursor, at most `limit`.
fn pending_approvals_keyset_paging<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::WaitingForApproval);
    let second_run = seed_run(store, 2, RunStatus::WaitingForApproval);
    let foreign_run = seed_run_of_tenant(store, 3, RunStatus::WaitingForApproval, "other");
    let add = |n: u128, run: &Run, created: i64, status: ApprovalStatus, announced: bool| {
        let invocation = seed_invocation(
            store,
            sample_invocation(
                n,
                run,
                1,
                &format!("c{n}"),
                InvocationStatus::WaitingForApproval,
            ),
        );
        let mut approval = sample_approval(n, &invocation, status);
        approval.created_at = at(created);
        approval.requested_at = announced.then_some(at(created));
        commit(store, "approval", |tx| tx.insert_approval(&approval));
        approval
    };
    let a1 = add(1, &run, 1, ApprovalStatus::Pending, true);
    let a2 = add(2, &run, 2, ApprovalStatus::Pending, true);
    let a3 = add(3, &run, 2, ApprovalStatus::Pending, true);
    let a4 = add(4, &second_run, 2, ApprovalStatus::Pending, true);
    let a5 = add(5, &run, 3, ApprovalStatus::Pending, true);
    let _unannounced = add(6, &run, 5, ApprovalStatus::Pending, false);
    let _resolved = add(7, &run, 6, ApprovalStatus::Approved, true);
    let _foreign = add(8, &foreign_run, 7, ApprovalStatus::Pending, true);

    let page = |run: Option<&Run>, after: Option<&Approval>, limit: usize| {
        let cursor = after.map(|a| ApprovalCursor {
            created_at: a.created_at,
            id: a.id,
        });
        read(store, |tx| {
            tx.pending_approvals(TENANT, run.map(|r| r.id), cursor, limit)
        })
        .into_iter()
        .map(|a| a.id)
        .collect::<Vec<_>>()
    };
    let expected = vec![a5.id, a4.id, a3.id, a2.id, a1.id];
    assert_eq!(
        page(None, None, 100),
        expected,
        "pending_approvals: announced, pending, this tenant, by created_at DESC, id DESC"
    );

    let mut walked = Vec::new();
    let mut cursor: Option<Approval> = None;
    for _ in 0..10 {
        let ids = page(None, cursor.as_ref(), 2);
        assert!(ids.len() <= 2, "pending_approvals: at most limit");
        let Some(last) = ids.last().copied() else {
            break;
        };
        walked.extend(ids);
        cursor = read(store, |tx| tx.approval(last));
    }
    assert_eq!(
        walked, expected,
        "pending_approvals: keyset pages concatenate to the full list, without repeats"
    );
    assert_eq!(
        page(None, Some(&a3), 100),
        vec![a2.id, a1.id],
        "pending_approvals: strictly after a created_at tie"
    );
    assert_eq!(
        page(None, Some(&a1), 100),
        Vec::new(),
        "pending_approvals: nothing after the last"
    );
    assert_eq!(
        page(Some(&second_run), None, 100),
        vec![a4.id],
        "pending_approvals: one run"
    );
    assert_eq!(
        page(None, None, 0),
        Vec::new(),
        "pending_approvals: limit 0"
    );
}

/// `due_approvals`: announced pending approvals with `expires_at ≤ now`, by `expires_at, id`.
fn due_approvals_order<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::WaitingForApproval);
    let foreign_run = seed_run_of_tenant(store, 2, RunStatus::WaitingForApproval, "other");
    let add = |n: u128, run: &Run, expires: i64, status: ApprovalStatus, announced: bool| {
        let invocation = seed_invocation(
            store,
            sample_invocation(
                n,
                run,
                1,
                &format!("c{n}"),
                InvocationStatus::WaitingForApproval,
            ),
        );
        let mut approval = sample_approval(n, &invocation, status);
        approval.expires_at = at(expires);
        if !announced {
            approval.requested_at = None;
        }
        commit(store, "approval", |tx| tx.insert_approval(&approval));
        approval.id
    };
    let a1 = add(1, &run, 10, ApprovalStatus::Pending, true);
    let a2 = add(2, &run, 5, ApprovalStatus::Pending, true);
    let a3 = add(3, &run, 5, ApprovalStatus::Pending, true);
    let _later = add(4, &run, 100, ApprovalStatus::Pending, true);
    let _unannounced = add(5, &run, 5, ApprovalStatus::Pending, false);
    let _expired = add(6, &run, 1, ApprovalStatus::Expired, true);
    let a7 = add(7, &foreign_run, 2, ApprovalStatus::Pending, true);

    let due = |tenant: Option<&str>, limit: usize| {
        read(store, |tx| tx.due_approvals(at(10), tenant, limit))
            .into_iter()
            .map(|a| a.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        due(None, 100),
        vec![a7, a2, a3, a1],
        "due_approvals: announced pending with expires_at <= now, by (expires_at, id)"
    );
    assert_eq!(
        due(Some(TENANT), 100),
        vec![a2, a3, a1],
        "due_approvals: one tenant"
    );
    assert_eq!(due(None, 2), vec![a7, a2], "due_approvals: limit");
}

// ----- events --------------------------------------------------------------------------------

/// SPEC §13.1, §16 #40: `append_event` takes the session's next sequence (first 1), so
/// sequences are per session and increase in commit order; ids increase in commit order.
fn event_sequences_are_per_session<S: Store>(store: &S) {
    let one = seed_run(store, 1, RunStatus::Running);
    let two = seed_run(store, 2, RunStatus::Running);
    let (e1, e2, e3) = commit(store, "three events", |tx| {
        Ok((
            tx.append_event(&sample_event(
                &one,
                EventType::RunStarted,
                json!({"n": 1}),
                None,
            ))?,
            tx.append_event(&sample_event(
                &one,
                EventType::RunCheckpointed,
                json!({"n": 2}),
                None,
            ))?,
            tx.append_event(&sample_event(
                &two,
                EventType::RunStarted,
                json!({"n": 3}),
                None,
            ))?,
        ))
    });
    let mut session_level = sample_event(
        &one,
        EventType::RunQueued,
        json!({"n": 4}),
        Some("session-level"),
    );
    session_level.run_id = None;
    let e4 = commit(store, "a session-level event", |tx| {
        tx.append_event(&session_level)
    });
    assert_eq!(
        (e1.sequence, e2.sequence, e3.sequence, e4.sequence),
        (1, 2, 1, 3),
        "events: sequences are per session, from 1"
    );
    assert!(
        e1.id < e2.id && e2.id < e3.id && e3.id < e4.id,
        "events: ids increase in commit order"
    );
    assert_eq!(e4.run_id, None, "events: run_id is optional");
    let next = read(store, |tx| tx.session(one.session_id)).map(|s| s.next_event_sequence);
    assert_eq!(
        next,
        Some(4),
        "events: sessions.next_event_sequence advances"
    );

    let expected = sample_event(&one, EventType::RunStarted, json!({"n": 1}), None);
    assert_eq!(
        (
            e1.session_id,
            e1.run_id,
            e1.event_type,
            &e1.actor,
            &e1.payload,
            &e1.derivation_key,
            e1.created_at,
            e1.payload_schema_version
        ),
        (
            expected.session_id,
            expected.run_id,
            expected.event_type,
            &expected.actor,
            &expected.payload,
            &expected.derivation_key,
            expected.created_at,
            1
        ),
        "events: the envelope stores what was appended, schema version 1",
    );
    assert_eq!(
        read(store, |tx| tx.events_of_run(one.id, None, 10)),
        vec![e1, e2],
        "events: stored as returned"
    );
}

/// SPEC §13.1: an event names an existing run of its own session and carries an object; an
/// append refused for any of these reasons, inside a transaction that goes on and commits,
/// takes no sequence number.
fn refused_events_consume_nothing<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let other = seed_run(store, 2, RunStatus::Running);
    let mut unknown_run = sample_event(&run, EventType::RunStarted, json!({}), None);
    unknown_run.run_id = Some(run_id(99));
    let mut foreign_run = sample_event(&run, EventType::RunStarted, json!({}), None);
    foreign_run.run_id = Some(other.id);
    let not_an_object = sample_event(&run, EventType::RunStarted, json!([1]), None);
    let appended = commit(store, "refusals, then an event", |tx| {
        assert_eq!(
            tx.append_event(&unknown_run),
            Err(TxError::NotFound),
            "append_event: an unknown run is NotFound"
        );
        assert!(
            matches!(tx.append_event(&foreign_run), Err(TxError::Conflict(_))),
            "append_event: a run of another session is a Conflict"
        );
        assert!(
            matches!(tx.append_event(&not_an_object), Err(TxError::Conflict(_))),
            "append_event: a payload that is not an object is a Conflict"
        );
        tx.append_event(&sample_event(&run, EventType::RunStarted, json!({}), None))
    });
    assert_eq!(
        appended.sequence, 1,
        "append_event: refused appends take no sequence number"
    );
}

/// SPEC §13.1: events belong to an existing session.
fn append_event_needs_its_session<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let mut orphan = sample_event(&run, EventType::RunStarted, json!({}), None);
    orphan.session_id = session_id(99);
    orphan.run_id = None;
    assert_eq!(
        store.transact(|tx| tx.append_event(&orphan)),
        Err(TxError::NotFound),
        "append_event: unknown session is NotFound"
    );
}

/// SPEC §13.1: rollbacks may leave gaps, but a committed history never reuses a sequence and
/// rolled-back events are invisible.
fn rolled_back_events_leave_no_trace<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let first = commit(store, "first", |tx| {
        tx.append_event(&sample_event(&run, EventType::RunStarted, json!({}), None))
    });
    let aborted: Result<(), TxError> = store.transact(|tx| {
        tx.append_event(&sample_event(
            &run,
            EventType::RunCheckpointed,
            json!({"lost": 1}),
            Some("lost:1"),
        ))?;
        tx.append_event(&sample_event(
            &run,
            EventType::RunCheckpointed,
            json!({"lost": 2}),
            None,
        ))?;
        Err(TxError::Fenced)
    });
    assert_fenced(aborted, "rollback: the aborted transaction fails");
    let second = commit(store, "second", |tx| {
        tx.append_event(&sample_event(
            &run,
            EventType::RunCheckpointed,
            json!({}),
            None,
        ))
    });
    assert!(
        second.sequence > first.sequence,
        "events: sequences increase in commit order across a rollback"
    );
    assert!(
        second.id > first.id,
        "events: ids increase in commit order across a rollback"
    );
    let stored = read(store, |tx| tx.events_of_run(run.id, None, 100));
    assert_eq!(
        stored,
        vec![first, second],
        "events: rolled-back events are not stored"
    );
    assert_eq!(
        read(store, |tx| tx.event_by_key("lost:1")),
        None,
        "events: a rolled-back derivation key is free"
    );
    let reused = commit(store, "reuse the key", |tx| {
        tx.append_event(&sample_event(
            &run,
            EventType::RunCheckpointed,
            json!({"other": true}),
            Some("lost:1"),
        ))
    });
    assert!(
        reused.sequence > stored[1].sequence,
        "events: a freed key appends as new"
    );
}

/// SPEC §13.1: a repeated derivation key returns the stored event when type, run and payload are
/// equal — consuming no sequence — else `Conflict`; events are append-only.
fn derivation_key_idempotency<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let ended = sample_run(2, run.session_id, RunStatus::Completed);
    commit(store, "a finished run in the same session", |tx| {
        tx.insert_run(&ended)
    });
    let key = keys::proposed(invocation_id(1));
    let original = sample_event(
        &run,
        EventType::ToolCallProposed,
        json!({"call_id": "c1"}),
        Some(&key),
    );
    let stored = commit(store, "append", |tx| tx.append_event(&original));

    let mut repeat = original.clone();
    repeat.actor = Actor::principal("someone-else");
    repeat.created_at = at(99);
    let again = commit(store, "repeat", |tx| tx.append_event(&repeat));
    assert_eq!(
        again, stored,
        "derivation key: an equal repeat returns the stored event"
    );
    let (twice, next) = commit(store, "repeat and append in one transaction", |tx| {
        let twice = tx.append_event(&original)?;
        let next = tx.append_event(&sample_event(
            &run,
            EventType::RunCheckpointed,
            json!({}),
            None,
        ))?;
        Ok((twice, next))
    });
    assert_eq!(
        twice, stored,
        "derivation key: a repeat inside a transaction returns the stored event"
    );
    assert_eq!(
        next.sequence,
        stored.sequence + 1,
        "derivation key: a repeat consumes no sequence"
    );

    let mut other_payload = original.clone();
    other_payload.payload = json!({"call_id": "c2"});
    assert_conflict(
        store.transact(|tx| tx.append_event(&other_payload)),
        "derivation key: a different payload",
    );
    let mut other_type = original.clone();
    other_type.event_type = EventType::ToolCallAuthorized;
    assert_conflict(
        store.transact(|tx| tx.append_event(&other_type)),
        "derivation key: a different event type",
    );
    let mut other_run = original.clone();
    other_run.run_id = Some(ended.id);
    assert_conflict(
        store.transact(|tx| tx.append_event(&other_run)),
        "derivation key: a different run",
    );

    // A caller that handles the Conflict and carries on has consumed nothing.
    let after = commit(store, "conflict handled inside a transaction", |tx| {
        assert!(
            matches!(tx.append_event(&other_payload), Err(TxError::Conflict(_))),
            "derivation key: Conflict inside a transaction"
        );
        tx.append_event(&sample_event(
            &run,
            EventType::RunCheckpointed,
            json!({"after": true}),
            None,
        ))
    });
    assert_eq!(
        after.sequence,
        next.sequence + 1,
        "derivation key: a Conflict consumes no sequence"
    );
    assert_eq!(
        read(store, |tx| tx.event_by_key(&key)),
        Some(stored),
        "events are append-only: the stored event is unchanged"
    );
}

/// `events_of_run`: the run's events by id, strictly after `after_id`, at most `limit`.
fn events_of_run_paging<S: Store>(store: &S) {
    let a = seed_run(store, 1, RunStatus::Running);
    let b = seed_run(store, 2, RunStatus::Running);
    let mut ids = Vec::new();
    for (n, run) in [&a, &b, &a, &a, &b, &a].into_iter().enumerate() {
        let event = commit(store, "append", |tx| {
            tx.append_event(&sample_event(
                run,
                EventType::RunCheckpointed,
                json!({"n": n}),
                None,
            ))
        });
        ids.push((run.id, event.id));
    }
    let of = |run: &Run| {
        ids.iter()
            .filter(|(r, _)| *r == run.id)
            .map(|(_, id)| *id)
            .collect::<Vec<_>>()
    };
    let (a_ids, b_ids) = (of(&a), of(&b));
    let page = |run: &Run, after: Option<i64>, limit: usize| {
        read(store, |tx| tx.events_of_run(run.id, after, limit))
            .into_iter()
            .map(|e| e.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        page(&a, None, 100),
        a_ids,
        "events_of_run: this run's events by id"
    );
    assert_eq!(
        page(&a, None, 2),
        a_ids[..2].to_vec(),
        "events_of_run: limit"
    );
    assert_eq!(
        page(&a, Some(a_ids[1]), 2),
        a_ids[2..].to_vec(),
        "events_of_run: strictly after the cursor"
    );
    assert_eq!(
        page(&a, Some(a_ids[3]), 100),
        Vec::<i64>::new(),
        "events_of_run: nothing after the last"
    );
    assert_eq!(
        page(&b, Some(a_ids[0]), 100),
        b_ids,
        "events_of_run: any id works as a cursor"
    );
}

/// SPEC §13.3: process events are idempotent by derivation key like conversation events.
fn process_event_idempotency<S: Store>(store: &S) {
    let first = sample_process_event(1, "v1");
    assert_eq!(
        commit(store, "append", |tx| tx.append_process_event(&first)),
        first,
        "process events: returns the stored event"
    );
    let mut repeat = sample_process_event(2, "v1");
    repeat.created_at = at(50);
    assert_eq!(
        commit(store, "repeat", |tx| tx.append_process_event(&repeat)),
        first,
        "process events: an equal repeat returns the first"
    );
    let mut different = sample_process_event(3, "v1");
    different.payload = json!({"policy_version": "v1", "extra": true});
    assert_conflict(
        store.transact(|tx| tx.append_process_event(&different)),
        "process events: a different payload under one key",
    );
    let second = sample_process_event(4, "v2");
    commit(store, "another key", |tx| tx.append_process_event(&second));
    assert_eq!(
        read(store, |tx| tx.process_events()),
        vec![first, second],
        "process events: one per key, in commit order"
    );
}

/// `invocations_created` and `process_events_created` (`policy replay`, `policy shadow
/// report`): every tenant's rows in `(created_at, id)` order, a window `[from, until)`, pages that
/// resume after their last row with none lost at a shared microsecond, and the target kind kept.
fn creation_order_pages_cross_tenants_and_windows<S: Store>(store: &S) {
    let acme = seed_run(store, 1, RunStatus::Running);
    let other = seed_run_of_tenant(store, 2, RunStatus::Running, "globex");
    // Five calls, two tenants; ids 3 and 4 share one second.
    let times = [
        (1, &acme, 10),
        (2, &other, 20),
        (4, &acme, 30),
        (3, &other, 30),
        (5, &acme, 40),
    ];
    for (n, run, micros) in times {
        let mut row = sample_invocation(
            n,
            run,
            n as u32,
            &format!("c{n}"),
            InvocationStatus::Proposed,
        );
        row.created_at = at(micros);
        row.updated_at = at(micros);
        row.target_kind = Some(if n == 5 {
            TargetKind::Other("custom_target".to_owned())
        } else {
            TargetKind::McpServer
        });
        seed_invocation(store, row);
    }
    let all = read(store, |tx| {
        tx.invocations_created(&CreatedPage::first(at(0), None, 100))
    });
    let order: Vec<InvocationId> = all.iter().map(|i| i.id).collect();
    let mut tied = [invocation_id(3), invocation_id(4)];
    tied.sort();
    assert_eq!(
        order,
        vec![
            invocation_id(1),
            invocation_id(2),
            tied[0],
            tied[1],
            invocation_id(5)
        ],
        "creation order, ties by id, every tenant"
    );
    assert_eq!(
        all[0].target_kind,
        Some(TargetKind::McpServer),
        "target kind kept"
    );
    assert_eq!(
        all[4].target_kind,
        Some(TargetKind::Other("custom_target".to_owned()))
    );
    // Pages of two resume after their last row, through the tie.
    let mut paged = Vec::new();
    let mut page = CreatedPage::first(at(0), None, 2);
    loop {
        let rows = read(store, |tx| tx.invocations_created(&page));
        let Some(last) = rows.last() else { break };
        page = page.after(last.created_at, last.id.as_uuid());
        paged.extend(rows.iter().map(|i| i.id));
    }
    assert_eq!(paged, order, "pages lose and repeat nothing");
    // The window [20, 40): from is inclusive, until exclusive.
    let window = read(store, |tx| {
        tx.invocations_created(&CreatedPage::first(at(20), Some(at(40)), 100))
    });
    assert_eq!(window.len(), 3, "window [20, 40)");
    assert!(
        window
            .iter()
            .all(|i| i.created_at >= at(20) && i.created_at < at(40))
    );

    // Process events of one type, in the same order and windows.
    for (n, micros) in [(1, 15), (2, 5), (3, 25)] {
        let mut event = sample_process_event(n, &format!("v{n}"));
        event.created_at = at(micros);
        commit(store, "profile event", |tx| tx.append_process_event(&event));
    }
    let mut other_type = sample_process_event(9, "v9");
    other_type.event_type = EventType::McpStateKeyRotated;
    other_type.derivation_key = "mcp.state_key.rotated:k9".to_owned();
    commit(store, "other type", |tx| {
        tx.append_process_event(&other_type)
    });
    let events = read(store, |tx| {
        tx.process_events_created(
            EventType::PolicyProfileLoaded,
            &CreatedPage::first(at(6), None, 100),
        )
    });
    let versions: Vec<&str> = events
        .iter()
        .map(|e| e.payload["policy_version"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(versions, ["v1", "v3"], "one type, from 6 on, by time");
}

/// SPEC §14 `uncertain_settlements` UNIQUE(invocation_id).
fn settlement_is_unique_per_invocation<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Failed);
    let invocation = seed_invocation(
        store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::Uncertain),
    );
    let settlement = sample_settlement(1, &invocation);
    commit(store, "SETTLE", |tx| tx.insert_settlement(&settlement));
    assert_eq!(
        read(store, |tx| tx.settlement_by_invocation(invocation.id)),
        Some(settlement.clone()),
        "settlement_by_invocation"
    );
    let second = sample_settlement(2, &invocation);
    assert_conflict(
        store.transact(|tx| tx.insert_settlement(&second)),
        "uncertain_settlements: UNIQUE(invocation_id)",
    );
    let other = seed_invocation(
        store,
        sample_invocation(2, &run, 1, "c2", InvocationStatus::Uncertain),
    );
    let same_id = sample_settlement(1, &other);
    assert_conflict(
        store.transact(|tx| tx.insert_settlement(&same_id)),
        "uncertain_settlements: duplicate id",
    );
    assert_eq!(
        read(store, |tx| tx.settlement_by_invocation(other.id)),
        None,
        "uncertain_settlements: the rejected one is not stored"
    );
}

/// SPEC §7.5: the first of identical profile records is kept; different content under one
/// version is a `Conflict`.
fn policy_profile_idempotency<S: Store>(store: &S) {
    let first = sample_policy_profile("v1");
    assert_eq!(
        commit(store, "PROFILE", |tx| tx.insert_policy_profile(&first)),
        first,
        "policy_profiles: returns the stored record"
    );
    let mut reloaded = first.clone();
    reloaded.loaded_at = at(500);
    reloaded.loaded_by = "worker-2".to_owned();
    assert_eq!(
        commit(store, "PROFILE again", |tx| tx
            .insert_policy_profile(&reloaded)),
        first,
        "policy_profiles: an identical reload keeps the first"
    );
    let mut changed = first.clone();
    changed.profile_sha256 = "c".repeat(64);
    assert_eq!(
        store.transact(|tx| tx.insert_policy_profile(&changed)),
        Err(TxError::Conflict(
            "policy version identifies different rules".to_owned()
        )),
        "policy_profiles: different content under one version",
    );
    let second = sample_policy_profile("v2");
    commit(store, "another version", |tx| {
        tx.insert_policy_profile(&second)
    });
    let earlier = sample_policy_profile("v0");
    commit(store, "a version that sorts first", |tx| {
        tx.insert_policy_profile(&earlier)
    });
    let versions: Vec<String> = read(store, |tx| tx.policy_profiles())
        .into_iter()
        .map(|p| p.policy_version)
        .collect();
    assert_eq!(
        versions,
        ["v0", "v1", "v2"],
        "policy_profiles: one row per version, by version"
    );
    assert!(
        read(store, |tx| tx.policy_profiles()).contains(&first),
        "policy_profiles: the first record is kept"
    );
}

// ----- rules SPEC §8.1, §8.2, §9.1 and §13 state, once only MemStore's ----------------------

fn run_edges_of_section_8_1_only<S: Store>(store: &S) {
    let queued = seed_run(store, 1, RunStatus::Queued);
    let guard = RunGuard {
        run_id: queued.id,
        status: RunStatus::Queued,
        lease: None,
    };
    let mut completed = queued.clone();
    completed.state = RunState::Completed {
        final_message: "done".to_owned(),
    };
    let message = conflict_message(store.transact(|tx| tx.update_run(&guard, &completed)));
    assert_eq!(message, "invalid run transition QUEUED->COMPLETED");

    let mut waiting = queued.clone();
    waiting.state = RunState::WaitingForApproval;
    assert_rule_breach(
        store.transact(|tx| tx.update_run(&guard, &waiting)),
        "QUEUED -> WAITING_FOR_APPROVAL is no edge",
    );

    let cancelled = seed_run(store, 2, RunStatus::Cancelled);
    let mut revived = cancelled.clone();
    revived.state = RunState::Queued {
        scheduled_for: None,
    };
    let guard = RunGuard {
        run_id: cancelled.id,
        status: RunStatus::Cancelled,
        lease: None,
    };
    assert_eq!(
        conflict_message(store.transact(|tx| tx.update_run(&guard, &revived))),
        "invalid run transition CANCELLED->QUEUED"
    );
}

fn lease_epoch_advances_by_one_only_at_claim<S: Store>(store: &S) {
    let queued = seed_run(store, 1, RunStatus::Queued);
    let guard = RunGuard {
        run_id: queued.id,
        status: RunStatus::Queued,
        lease: None,
    };
    let mut claimed = queued.clone();
    claimed.state = sample_state(RunStatus::Running);
    assert!(
        conflict_message(store.transact(|tx| tx.update_run(&guard, &claimed)))
            .contains("lease_epoch"),
        "a claim without a new epoch"
    );
    claimed.lease_epoch = queued.lease_epoch + 2;
    assert_rule_breach(
        store.transact(|tx| tx.update_run(&guard, &claimed)),
        "a claim skipping an epoch",
    );
    claimed.lease_epoch = queued.lease_epoch + 1;
    commit(store, "CLAIM", |tx| tx.update_run(&guard, &claimed));

    let held = RunGuard {
        run_id: claimed.id,
        status: RunStatus::Running,
        lease: claimed.lease(),
    };
    let mut stolen = claimed.clone();
    stolen.state = RunState::Running {
        lease_owner: "worker-2".to_owned(),
        lease_expires_at: at(99),
    };
    assert!(
        conflict_message(store.transact(|tx| tx.update_run(&held, &stolen)))
            .contains("lease owner"),
        "a guarded update cannot move the lease"
    );
    let mut bumped = claimed.clone();
    bumped.lease_epoch += 1;
    assert_rule_breach(
        store.transact(|tx| tx.update_run(&held, &bumped)),
        "RUNNING -> RUNNING keeps the epoch",
    );
    let mut parked = claimed.clone();
    parked.state = RunState::WaitingForApproval;
    parked.lease_epoch = 0;
    assert!(
        conflict_message(store.transact(|tx| tx.update_run(&held, &parked)))
            .contains("lease_epoch"),
        "lease_epoch never resets"
    );
}

fn attempts_grow_only_when_a_run_leaves_running<S: Store>(store: &S) {
    let running = seed_run(store, 1, RunStatus::Running);
    let held = RunGuard {
        run_id: running.id,
        status: RunStatus::Running,
        lease: running.lease(),
    };
    let mut counted = running.clone();
    counted.attempts = 1;
    assert!(
        conflict_message(store.transact(|tx| tx.update_run(&held, &counted))).contains("attempts"),
        "not while running"
    );
    let mut requeued = running.clone();
    requeued.state = RunState::Queued {
        scheduled_for: Some(at(31)),
    };
    requeued.attempts = 2;
    let reclaim = RunGuard {
        lease: None,
        ..held.clone()
    };
    assert_rule_breach(
        store.transact(|tx| tx.update_run(&reclaim, &requeued)),
        "by one at a time",
    );
    requeued.attempts = 1;
    commit(store, "RECLAIM", |tx| tx.update_run(&reclaim, &requeued));
    let mut reset = requeued.clone();
    reset.attempts = 0;
    let queued = RunGuard {
        run_id: running.id,
        status: RunStatus::Queued,
        lease: None,
    };
    assert_rule_breach(
        store.transact(|tx| tx.update_run(&queued, &reset)),
        "attempts never decrease",
    );
}

fn the_watermark_is_written_only_by_start<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let running = seed_invocation(
        store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::Running),
    );
    let mut moved = running.clone();
    moved.effect_sent_at = Some(at(5));
    assert!(
        conflict_message(
            store.transact(|tx| tx.update_invocation(InvocationStatus::Running, &moved))
        )
        .contains("never changes")
    );
    let mut cleared = sample_invocation(1, &run, 1, "c1", InvocationStatus::Failed);
    cleared.effect_sent_at = None;
    assert_rule_breach(
        store.transact(|tx| tx.update_invocation(InvocationStatus::Running, &cleared)),
        "FINISH cannot clear it",
    );

    let mut unsent = sample_invocation(2, &run, 1, "c2", InvocationStatus::Running);
    unsent.effect_sent_at = None;
    let unsent = seed_invocation(store, unsent);
    let mut late = unsent.clone();
    late.effect_sent_at = Some(at(5));
    assert!(
        conflict_message(
            store.transact(|tx| tx.update_invocation(InvocationStatus::Running, &late))
        )
        .contains("only by START")
    );
}

fn terminal_outcome_must_match_the_status<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let mut mismatched = sample_invocation(1, &run, 1, "c1", InvocationStatus::Failed);
    mismatched.status = InvocationStatus::Uncertain;
    assert!(
        conflict_message(store.transact(|tx| tx.insert_invocation(&mismatched)))
            .contains("does not match")
    );
}

fn event_payloads_are_objects_of_the_runs_session<S: Store>(store: &S) {
    let one = seed_run(store, 1, RunStatus::Running);
    let two = seed_run(store, 2, RunStatus::Running);
    let scalar = sample_event(&one, EventType::RunStarted, json!("text"), None);
    assert!(conflict_message(store.transact(|tx| tx.append_event(&scalar))).contains("object"));
    let mut crossed = sample_event(&one, EventType::RunStarted, json!({}), None);
    crossed.run_id = Some(two.id);
    assert!(
        conflict_message(store.transact(|tx| tx.append_event(&crossed))).contains("not in session")
    );
    let mut unknown_run = sample_event(&one, EventType::RunStarted, json!({}), None);
    unknown_run.run_id = Some(run_id(99));
    assert_eq!(
        store.transact(|tx| tx.append_event(&unknown_run)),
        Err(TxError::NotFound)
    );
    assert_eq!(
        read(store, |tx| tx.session(one.session_id)).map(|s| s.next_event_sequence),
        Some(1),
        "no sequence consumed"
    );
}

fn missing_parents_are_not_found<S: Store>(store: &S) {
    let orphan = sample_run(1, session_id(1), RunStatus::Queued);
    assert_eq!(
        store.transact(|tx| tx.insert_run(&orphan)),
        Err(TxError::NotFound),
        "run without session"
    );
    assert_eq!(
        store.transact(|tx| tx.insert_checkpoint(&sample_checkpoint(orphan.id, 1))),
        Err(TxError::NotFound),
        "checkpoint without run"
    );
    let invocation = sample_invocation(1, &orphan, 1, "c1", InvocationStatus::Uncertain);
    assert_eq!(
        store.transact(|tx| tx.insert_invocation(&invocation)),
        Err(TxError::NotFound),
        "invocation without run"
    );
    let approval = sample_approval(1, &invocation, ApprovalStatus::Pending);
    assert_eq!(
        store.transact(|tx| tx.insert_approval(&approval)),
        Err(TxError::NotFound),
        "approval without run"
    );
    let settlement = sample_settlement(1, &invocation);
    assert_eq!(
        store.transact(|tx| tx.insert_settlement(&settlement)),
        Err(TxError::NotFound),
        "settlement without invocation"
    );
    assert_eq!(
        store.transact(|tx| tx.update_run(
            &RunGuard {
                run_id: orphan.id,
                status: RunStatus::Queued,
                lease: None
            },
            &orphan
        )),
        Err(TxError::NotFound)
    );
    assert_eq!(
        store.transact(|tx| tx.update_invocation(InvocationStatus::Uncertain, &invocation)),
        Err(TxError::NotFound)
    );
    assert_eq!(
        store.transact(|tx| tx.update_approval(ApprovalStatus::Pending, &approval)),
        Err(TxError::NotFound)
    );
}

fn settlements_only_of_uncertain_invocations<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::Running);
    let failed = seed_invocation(
        store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::Failed),
    );
    assert!(
        conflict_message(store.transact(|tx| tx.insert_settlement(&sample_settlement(1, &failed))))
            .contains("not UNCERTAIN")
    );
}

/// SPEC §22.3: the parked calls an identical call may bind to are the announced approvals of
/// one tenant, principal and tool, pending or approved, not expired, whose action still waits;
/// oldest first.
fn waiting_call_approvals_are_the_parked_calls_of_a_principal_and_tool<S: Store>(store: &S) {
    let run = seed_run(store, 1, RunStatus::WaitingForApproval);
    let waiting = |n: u128| {
        seed_invocation(
            store,
            sample_invocation(
                n,
                &run,
                n as u32,
                &format!("c{n}"),
                InvocationStatus::WaitingForApproval,
            ),
        )
    };
    let (i1, i2, i3, i4, i5) = (waiting(1), waiting(2), waiting(3), waiting(4), waiting(5));
    let pending = sample_approval(1, &i1, ApprovalStatus::Pending);
    let mut approved = sample_approval(2, &i2, ApprovalStatus::Approved);
    approved.created_at = at(-1);
    let denied = sample_approval(3, &i3, ApprovalStatus::Denied);
    let mut unannounced = sample_approval(4, &i4, ApprovalStatus::Pending);
    unannounced.requested_at = None;
    let mut soon = sample_approval(5, &i5, ApprovalStatus::Pending);
    soon.expires_at = at(100);
    for approval in [&pending, &approved, &denied, &unannounced, &soon] {
        commit(store, "insert approval", |tx| tx.insert_approval(approval));
    }
    let tool = i1.tool_name.clone();
    let found = |tenant: &str, principal: &str, tool: &str, now: i64, limit: usize| {
        read(store, |tx| {
            tx.waiting_call_approvals(tenant, principal, tool, at(now), limit)
        })
        .into_iter()
        .map(|a| a.id)
        .collect::<Vec<_>>()
    };
    assert_eq!(
        found(TENANT, PRINCIPAL, &tool, 99, 10),
        vec![approved.id, pending.id, soon.id],
        "waiting_call_approvals: pending and approved, announced, oldest first"
    );
    assert_eq!(
        found(TENANT, PRINCIPAL, &tool, 100, 10),
        vec![approved.id, pending.id],
        "waiting_call_approvals: not expired at now"
    );
    assert_eq!(
        found(TENANT, PRINCIPAL, &tool, 99, 1),
        vec![approved.id],
        "waiting_call_approvals: limit"
    );
    assert!(
        found("other-tenant", PRINCIPAL, &tool, 0, 10).is_empty(),
        "waiting_call_approvals: one tenant"
    );
    assert!(
        found(TENANT, "someone-else", &tool, 0, 10).is_empty(),
        "waiting_call_approvals: one principal"
    );
    assert!(
        found(TENANT, PRINCIPAL, "another.tool", 0, 10).is_empty(),
        "waiting_call_approvals: one tool"
    );
    // Once the approved call is authorized it no longer waits.
    let mut authorized = i2.clone();
    authorized.status = InvocationStatus::Authorized;
    authorized.suspended_approval = None;
    commit(store, "authorize the approved call", |tx| {
        tx.update_invocation(InvocationStatus::WaitingForApproval, &authorized)
    });
    assert_eq!(
        found(TENANT, PRINCIPAL, &tool, 99, 10),
        vec![pending.id, soon.id],
        "waiting_call_approvals: an action that no longer waits is not listed"
    );
}

/// SPEC §22.3 item 2: keys round-trip, are found by id, a duplicate id is refused, and the
/// newest (by creation, then id) is the one that seals.
fn state_keys_are_kept_and_the_newest_seals<S: Store>(store: &S) {
    use crate::conversation::request_state::StateKey;
    let key = |id: &str, created: i64| StateKey {
        id: id.to_owned(),
        secret_hex: "ab".repeat(32),
        created_at: at(created),
    };
    assert_eq!(read(store, |tx| tx.newest_state_key()), None, "no key yet");
    commit(store, "first key", |tx| tx.insert_state_key(&key("k1", 1)));
    commit(store, "second key", |tx| tx.insert_state_key(&key("k2", 5)));
    commit(store, "an older third", |tx| {
        tx.insert_state_key(&key("k0", 3))
    });
    assert_eq!(
        read(store, |tx| tx.newest_state_key()),
        Some(key("k2", 5)),
        "newest_state_key: by created_at"
    );
    assert_eq!(read(store, |tx| tx.state_key("k1")), Some(key("k1", 1)));
    assert_eq!(read(store, |tx| tx.state_key("nope")), None);
    assert_conflict(
        store.transact(|tx| tx.insert_state_key(&key("k1", 9))),
        "state_keys: duplicate id",
    );
}

/// SPEC §22.3 item 1: a task row round-trips and is found by its id's hash alone; a second task
/// of the same run, or a duplicate id, is refused; a task of no run is `NotFound`.
fn a_call_task_is_one_per_run_and_found_by_its_hash<S: Store>(store: &S) {
    use crate::conversation::task::{CallTask, task_id_sha256};
    let run = seed_run(store, 0x7a5c, RunStatus::WaitingForApproval);
    let task = CallTask {
        id_sha256: task_id_sha256("tsk_one"),
        run_id: run.id,
        tenant_id: TENANT.to_owned(),
        principal_id: PRINCIPAL.to_owned(),
        created_at: T0,
    };
    assert_eq!(
        read(store, |tx| tx.call_task(&task.id_sha256)),
        None,
        "call_task: none yet"
    );
    commit(store, "insert a task", |tx| tx.insert_call_task(&task));
    assert_eq!(
        read(store, |tx| tx.call_task(&task.id_sha256)),
        Some(task.clone()),
        "call_task: reads back as written"
    );
    assert_eq!(
        read(store, |tx| tx.call_task_of_run(run.id)),
        Some(task.clone()),
        "call_task_of_run: the run's task"
    );
    assert_eq!(
        read(store, |tx| tx.call_task(&task_id_sha256("tsk_other"))),
        None,
        "call_task: another id finds nothing"
    );
    assert_conflict(
        store.transact(|tx| {
            tx.insert_call_task(&CallTask {
                id_sha256: task_id_sha256("tsk_two"),
                ..task.clone()
            })
        }),
        "call_tasks: one task per run",
    );
    let other = seed_run(store, 0x7a5d, RunStatus::WaitingForApproval);
    assert_conflict(
        store.transact(|tx| {
            tx.insert_call_task(&CallTask {
                run_id: other.id,
                ..task.clone()
            })
        }),
        "call_tasks: duplicate id",
    );
    assert_eq!(
        store.transact(|tx| {
            tx.insert_call_task(&CallTask {
                id_sha256: task_id_sha256("tsk_three"),
                run_id: crate::ids::RunId(uuid::Uuid::from_u128(0x7a5e_dead)),
                ..task.clone()
            })
        }),
        Err(TxError::NotFound),
        "call_tasks: the run must exist"
    );
    assert_eq!(
        read(store, |tx| tx.call_task_of_run(other.id)),
        None,
        "call_task_of_run: a run without a task"
    );
}

/// SPEC §22.1: a sessionless conversation's key round-trips and finds its open row; a second
/// open row of the same tenant and key is refused (two gateway processes opening one at once:
/// one commits, the other retries and joins), while another tenant's row of the same key, or a
/// new row once the old one closed, is accepted. The key never changes once written.
fn a_conversation_key_has_one_open_row_per_tenant<S: Store>(store: &S) {
    use crate::conversation::{
        CloseReason, Connection, ConnectionState, ConnectionStatus, ConversationKey,
    };
    use crate::ids::ConnectionId;
    let key = ConversationKey::of(PRINCIPAL, Some("token"), "claude-code");
    let keyed = |n: u128, tenant: &str| {
        let session = crate::session::Session {
            tenant_id: tenant.to_owned(),
            ..sample_session(0x7e00 + n)
        };
        commit(store, "seed a conversation's session", |tx| {
            tx.insert_session(&session)
        });
        Connection {
            id: ConnectionId(uuid::Uuid::from_u128(0xc045_0000 + n)),
            tenant_id: tenant.to_owned(),
            principal_id: PRINCIPAL.to_owned(),
            session_id: session.id,
            gateway_id: WORKER.to_owned(),
            state: ConnectionState::Open {
                alive_until: at(30),
            },
            opened_at: T0,
            taint: None,
            call_count: 0,
            last_seen_at: T0,
            conversation_key: Some(key.clone()),
        }
    };
    assert_eq!(
        read(store, |tx| tx.open_connection_by_key(TENANT, &key)),
        None,
        "open_connection_by_key: none yet"
    );
    let first = keyed(1, TENANT);
    commit(store, "open a keyed conversation", |tx| {
        tx.insert_connection(&first)
    });
    assert_eq!(
        read(store, |tx| tx.connection(first.id)),
        Some(first.clone()),
        "a keyed connection reads back as written"
    );
    assert_eq!(
        read(store, |tx| tx.open_connection_by_key(TENANT, &key)),
        Some(first.clone()),
        "open_connection_by_key"
    );
    let second = keyed(2, TENANT);
    assert_conflict(
        store.transact(|tx| tx.insert_connection(&second)),
        "connections: one open row per tenant and conversation key",
    );
    let elsewhere = keyed(3, "other-tenant");
    commit(store, "the same key in another tenant", |tx| {
        tx.insert_connection(&elsewhere)
    });
    assert_eq!(
        read(store, |tx| tx.open_connection_by_key(TENANT, &key)).map(|c| c.id),
        Some(first.id),
        "open_connection_by_key: the tenant's own"
    );
    let mut rekeyed = first.clone();
    rekeyed.conversation_key = Some(ConversationKey::of(PRINCIPAL, None, "claude-code"));
    assert_conflict(
        store.transact(|tx| tx.update_connection(ConnectionStatus::Open, &rekeyed)),
        "connections: the conversation key never changes",
    );
    let mut closed = first.clone();
    closed.state = ConnectionState::Closed {
        closed_at: at(31),
        reason: CloseReason::Expired,
    };
    commit(store, "close it", |tx| {
        tx.update_connection(ConnectionStatus::Open, &closed)
    });
    assert_eq!(
        read(store, |tx| tx.open_connection_by_key(TENANT, &key)),
        None,
        "open_connection_by_key: a closed row is not the conversation"
    );
    commit(store, "the key's next conversation", |tx| {
        tx.insert_connection(&second)
    });
    assert_eq!(
        read(store, |tx| tx.open_connection_by_key(TENANT, &key)).map(|c| c.id),
        Some(second.id)
    );
}

/// SPEC §19.4: a connection per session, guarded by its status, closed for good; the sweep's
/// input is open connections past `alive_until`, oldest first; a run of an open connection's
/// session is claimed only by id, one of a closed connection's by anyone. §22.1: the
/// conversation's taint, call counter and last-seen time round-trip through
/// `update_connection` while it is open, the counter never goes down, and
/// `connections_of_tenant` lists one tenant's newest first.
fn connections_are_guarded_and_bind_their_sessions_runs<S: Store>(store: &S) {
    use crate::conversation::{CloseReason, Connection, ConnectionState, ConnectionStatus, Taint};
    use crate::ids::ConnectionId;
    let connection = |n: u128, session: crate::ids::SessionId, alive: i64| Connection {
        id: ConnectionId(uuid::Uuid::from_u128(0xc044_0000 + n)),
        tenant_id: TENANT.to_owned(),
        principal_id: PRINCIPAL.to_owned(),
        session_id: session,
        gateway_id: WORKER.to_owned(),
        state: ConnectionState::Open {
            alive_until: at(alive),
        },
        opened_at: T0,
        taint: None,
        call_count: 0,
        last_seen_at: T0,
        conversation_key: None,
    };
    // The conversation's call run (§22.2), and a scripted run of no connection.
    let bound = {
        let session = sample_session(1);
        let mut run = sample_run(1, session.id, RunStatus::Queued);
        run.planner_kind = crate::conversation::MCP_PLANNER_KIND.to_owned();
        commit(store, "seed a call run", |tx| {
            tx.insert_session(&session)?;
            tx.insert_run(&run)
        });
        run
    };
    let free = seed_run(store, 2, RunStatus::Queued);
    let c1 = connection(1, bound.session_id, 30);
    commit(store, "insert connection", |tx| tx.insert_connection(&c1));
    assert_eq!(
        read(store, |tx| tx.connection(c1.id)),
        Some(c1.clone()),
        "connection: reads back as written"
    );
    assert_eq!(
        read(store, |tx| tx.connection_by_session(bound.session_id)),
        Some(c1.clone()),
        "connection_by_session"
    );
    assert_eq!(
        read(store, |tx| tx.connection_by_session(free.session_id)),
        None,
        "connection_by_session: none"
    );
    assert_conflict(
        store.transact(|tx| tx.insert_connection(&connection(2, bound.session_id, 30))),
        "connections: one per session",
    );
    assert_conflict(
        store.transact(|tx| tx.insert_connection(&c1)),
        "connections: duplicate id",
    );
    assert_eq!(
        store.transact(|tx| tx.insert_connection(&connection(3, session_id(99), 30))),
        Err(TxError::NotFound),
        "connections: the session must exist"
    );
    // Ordinary claims skip the call run (it is older); a claim by id still sees it.
    assert_eq!(
        read(store, |tx| tx.next_claimable_run(at(0), None)).map(|r| r.id),
        Some(free.id),
        "next_claimable_run: a call run is skipped without `only`"
    );
    assert_eq!(
        read(store, |tx| tx.next_claimable_run(at(0), Some(bound.id))).map(|r| r.id),
        Some(bound.id),
        "next_claimable_run: a call run is found by id"
    );
    assert_eq!(
        read(store, |tx| tx.orphaned_call_runs(at(0), 10)),
        Vec::<crate::ids::RunId>::new(),
        "orphaned_call_runs: none while the connection is open"
    );
    // The sweep's input.
    let other = seed_run(store, 3, RunStatus::Completed);
    let c3 = connection(4, other.session_id, 20);
    commit(store, "insert second connection", |tx| {
        tx.insert_connection(&c3)
    });
    let expired = |now: i64, limit: usize| {
        read(store, |tx| tx.expired_connections(at(now), limit))
            .into_iter()
            .map(|c| c.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        expired(19, 10),
        Vec::<ConnectionId>::new(),
        "expired_connections: none yet"
    );
    assert_eq!(
        expired(30, 10),
        vec![c3.id, c1.id],
        "expired_connections: oldest first, at or before now"
    );
    assert_eq!(expired(30, 1), vec![c3.id], "expired_connections: limit");
    // Renewal, guarded by status.
    let mut renewed = c1.clone();
    renewed.state = ConnectionState::Open {
        alive_until: at(60),
    };
    commit(store, "renew", |tx| {
        tx.update_connection(ConnectionStatus::Open, &renewed)
    });
    assert_eq!(
        expired(30, 10),
        vec![c3.id],
        "expired_connections: a renewed one is alive"
    );
    // The conversation's fields (§22.1): a call counted, then a taint, then its clearing.
    let mut counted = renewed.clone();
    counted.call_count = 3;
    counted.last_seen_at = at(7);
    commit(store, "count calls", |tx| {
        tx.update_connection(ConnectionStatus::Open, &counted)
    });
    assert_eq!(
        read(store, |tx| tx.connection(c1.id)),
        Some(counted.clone()),
        "call_count and last_seen_at read back as written"
    );
    let mut tainted = counted.clone();
    tainted.taint = Some(Taint {
        at: at(8),
        by: "invocation 1".to_owned(),
    });
    commit(store, "taint", |tx| {
        tx.update_connection(ConnectionStatus::Open, &tainted)
    });
    assert_eq!(
        read(store, |tx| tx.connection_by_session(bound.session_id)),
        Some(tainted.clone()),
        "the taint reads back as written"
    );
    let mut uncounted = tainted.clone();
    uncounted.call_count = 2;
    assert_rule_breach(
        store.transact(|tx| tx.update_connection(ConnectionStatus::Open, &uncounted)),
        "connections: call_count only grows",
    );
    let mut cleared = tainted.clone();
    cleared.taint = None;
    commit(store, "clear the taint", |tx| {
        tx.update_connection(ConnectionStatus::Open, &cleared)
    });
    assert_eq!(
        read(store, |tx| tx.connection(c1.id)),
        Some(cleared.clone()),
        "a cleared taint reads back as none"
    );
    let renewed = cleared;
    let mut moved = renewed.clone();
    moved.session_id = free.session_id;
    assert_conflict(
        store.transact(|tx| tx.update_connection(ConnectionStatus::Open, &moved)),
        "connections: immutable fields",
    );
    assert_conflict(
        store.transact(|tx| tx.update_connection(ConnectionStatus::Closed, &renewed)),
        "connections: guarded by status",
    );
    let mut closed = renewed.clone();
    closed.state = ConnectionState::Closed {
        closed_at: at(40),
        reason: CloseReason::Disconnected,
    };
    commit(store, "close", |tx| {
        tx.update_connection(ConnectionStatus::Open, &closed)
    });
    assert_eq!(
        read(store, |tx| tx.connection(c1.id)),
        Some(closed.clone()),
        "closed reads back"
    );
    assert_conflict(
        store.transact(|tx| tx.update_connection(ConnectionStatus::Closed, &closed)),
        "connections: a closed connection never changes",
    );
    assert_eq!(
        expired(1000, 10),
        vec![c3.id],
        "expired_connections: closed ones are not listed"
    );
    // Closed: the call run is an orphan, listed for the sweep and still not claimed ordinarily.
    assert_eq!(
        read(store, |tx| tx.next_claimable_run(at(0), None)).map(|r| r.id),
        Some(free.id),
        "next_claimable_run: a call run of a closed connection is skipped too"
    );
    assert_eq!(
        read(store, |tx| tx.orphaned_call_runs(at(0), 10)),
        vec![bound.id],
        "orphaned_call_runs: a QUEUED call run of a closed connection"
    );
    assert_eq!(
        read(store, |tx| tx.orphaned_call_runs(at(0), 0)),
        Vec::<crate::ids::RunId>::new(),
        "orphaned_call_runs: limit"
    );
    let mut later = bound.clone();
    later.state = RunState::Queued {
        scheduled_for: Some(at(5)),
    };
    commit(store, "schedule the orphan later", |tx| {
        tx.update_run(&status_guard(&bound), &later)
    });
    assert_eq!(
        read(store, |tx| tx.orphaned_call_runs(at(4), 10)),
        Vec::<crate::ids::RunId>::new(),
        "orphaned_call_runs: only due runs"
    );
    assert_eq!(
        read(store, |tx| tx.orphaned_call_runs(at(5), 10)),
        vec![bound.id],
        "orphaned_call_runs: due at scheduled_for"
    );

    // A tenant's conversations, newest first (`opened_at DESC, id DESC`), closed ones too.
    let of_tenant = |tenant: &str, limit: usize| {
        read(store, |tx| tx.connections_of_tenant(tenant, limit))
            .into_iter()
            .map(|c| c.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        of_tenant(TENANT, 10),
        vec![c3.id, c1.id],
        "connections_of_tenant: same opened_at, higher id first"
    );
    let later = |n: u128, session_n: u128, tenant: &str, opened: i64| {
        let session = crate::session::Session {
            tenant_id: tenant.to_owned(),
            ..sample_session(session_n)
        };
        let mut c = connection(n, session.id, 1000);
        c.tenant_id = tenant.to_owned();
        c.opened_at = at(opened);
        c.last_seen_at = c.opened_at;
        (session, c)
    };
    let (s5, c5) = later(5, 50, TENANT, 5);
    let (s6, c6) = later(6, 60, "other-tenant", 9);
    let (s7, c7) = later(7, 70, TENANT, 3);
    for (session, c) in [(&s5, &c5), (&s6, &c6), (&s7, &c7)] {
        commit(store, "a later connection", |tx| {
            tx.insert_session(session)?;
            tx.insert_connection(c)
        });
    }
    assert_eq!(
        of_tenant(TENANT, 10),
        vec![c5.id, c7.id, c3.id, c1.id],
        "connections_of_tenant: newest first, one tenant only"
    );
    assert_eq!(
        of_tenant(TENANT, 2),
        vec![c5.id, c7.id],
        "connections_of_tenant: limit"
    );
    assert_eq!(
        read(store, |tx| tx.connections_of_tenant("other-tenant", 10)),
        vec![c6.clone()],
        "connections_of_tenant: the other tenant's, whole"
    );
    assert_eq!(
        of_tenant("nobody", 10),
        Vec::<ConnectionId>::new(),
        "connections_of_tenant: none"
    );
}
