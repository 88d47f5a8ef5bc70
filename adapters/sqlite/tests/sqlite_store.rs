//! `SqliteStore` beyond the shared contract (SPEC §14, §16 #40): the connection pragmas, the
//! append-only triggers and CHECKs as another connection meets them, full records round-tripping
//! through every JSON column, group commit under concurrency, and a second store ("another
//! process") on the same file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use serde_json::json;

use airlock_core::events::{Event, EventType};
use airlock_core::ids::ParallelGroupId;
use airlock_core::invocation::Invocation;
use airlock_core::ports::ProposedCall;
use airlock_core::run::checkpoint::{
    Admission, Checkpoint, CheckpointState, PendingBatch, PinnedCall, ResultRef, StepRecord,
};
use airlock_core::run::{Failure, Run, RunState};
use airlock_core::store::{Store, TxError};
use airlock_core::testing::fixtures::*;
use airlock_core::vocab::{
    ApprovalStatus, CheckpointTrigger, FailureReason, InvocationStatus, RunStatus, TrustLevel,
};
use airlock_sqlite::{SCHEMA_VERSION, SqliteStore};

fn raw(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).expect("raw connection");
    conn.busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    conn
}

fn fresh() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("airlock.sqlite3")).expect("open");
    (dir, store)
}

/// Version 1 of `run`'s checkpoints: PENDING for its step 1, holding `calls`.
fn pending_of_step_one(run: &Run, calls: Vec<PinnedCall>) -> Checkpoint {
    Checkpoint {
        run_id: run.id,
        version: 1,
        trigger: CheckpointTrigger::ToolPending,
        state: CheckpointState {
            step: 0,
            pending: Some(PendingBatch {
                step: 1,
                calls,
                admission: Admission::Sequential,
            }),
            tainted: false,
            denial_counts: BTreeMap::new(),
        },
        created_at: at(1),
    }
}

/// A RUNNING invocation `n` of `run`'s step 1 for `call`: its id, raw arguments and their
/// canonical text.
fn invocation_of_call(n: u128, run: &Run, call: &ProposedCall) -> Invocation {
    let mut invocation = sample_invocation(n, run, 1, &call.call_id, InvocationStatus::Running);
    invocation.raw_arguments = call.arguments.clone();
    invocation.arguments = airlock_core::canonical::to_canonical_string(&invocation.raw_arguments);
    invocation
}

/// Writes step 1 as a worker does: `pending` and its first call's `invocation` in one
/// transaction (the run read first, as core does, so the store keeps its input), then the step
/// record, its calls named by the PENDING; returns the record.
fn write_step_one(
    store: &SqliteStore,
    pending: &Checkpoint,
    invocation: &Invocation,
) -> StepRecord {
    commit(store, "PENDING and its first call", |tx| {
        tx.run(pending.run_id)?;
        tx.insert_checkpoint(pending)?;
        tx.insert_invocation(invocation)
    });
    let record = StepRecord {
        run_id: pending.run_id,
        step: 1,
        calls: pending
            .state
            .pending
            .iter()
            .flat_map(|batch| batch.calls.iter().map(|pinned| pinned.call.clone()))
            .collect(),
        results: vec![],
        created_at: at(2),
    };
    commit(store, "the step record, its calls in the PENDING", |tx| {
        tx.insert_step_record(&record, Some(pending.version))
    });
    record
}

#[test]
fn pragmas_are_those_of_section_14() {
    let (dir, store) = fresh();
    let report = store.pragma_report().expect("pragmas");
    assert_eq!(report.journal_mode, "wal");
    assert_eq!(report.synchronous, 2, "synchronous = FULL");
    assert_eq!(report.foreign_keys, 1);
    assert_eq!(report.busy_timeout_ms, 5000);
    assert_eq!(report.user_version, SCHEMA_VERSION);
    assert_eq!(
        SCHEMA_VERSION, 23,
        "M1 (§14), M2 (§17.2 step records), M3 (§19.4 connections), M4 (§20 api_tokens), M5 \
         (§19.7 the repeat check's index), M6 (runs by tenant), M7 (§22 conversations), M8 (§22.1 conversation keys), M9 (§22.3 tasks), M10 (§22.3 requestState keys), M11 (replay), M12 (notification targets), M13 (no trigger on a hot path), M14 (vocabulary checks without temporary b-trees), M15 (run inputs in their own table), M16 (the journal: events and checkpoints, one row per phase) , M17 (a call's arguments stored once), M18 (a step record's calls stored once), M19 (a journal row's events in a shorter shape), M20 (a finished call's outcome and result item derived) , M21 (a PENDING checkpoint's calls by reference to the script), M22 (events leave out what their row says) and M23 (a policy decision's text stored once)"
    );

    // Reopening an existing file keeps the schema version and the settings.
    drop(store);
    let again = SqliteStore::open(&dir.path().join("airlock.sqlite3")).expect("reopen");
    assert_eq!(again.pragma_report().expect("pragmas"), report);
}

/// Fills each audit table with one row through the store.
fn seed_audit_rows(store: &SqliteStore) {
    let run = seed_run(store, 1, RunStatus::Running);
    let uncertain = seed_invocation(
        store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::Uncertain),
    );
    commit(store, "audit rows", |tx| {
        tx.append_event(&sample_event(&run, EventType::RunStarted, json!({}), None))?;
        tx.append_process_event(&sample_process_event(1, "v1"))?;
        tx.insert_policy_profile(&sample_policy_profile("v1"))?;
        tx.insert_settlement(&sample_settlement(1, &uncertain))?;
        tx.insert_step_record(&sample_step_record(run.id, 1), None)
    });
}

#[test]
fn a_store_whose_schema_was_changed_is_refused_at_open() {
    // user_version only counts migrations, so only the objects themselves tell a store edited
    // by hand, or made by another build, from a good one.
    let (dir, store) = fresh();
    drop(store);
    let path = dir.path().join("airlock.sqlite3");
    SqliteStore::open(&path).expect("an untouched store reopens");
    raw(&path)
        .execute_batch("DROP TRIGGER journal_no_update")
        .expect("drop");
    let message = SqliteStore::open(&path)
        .expect_err("a store without its append-only trigger")
        .to_string();
    assert!(
        message.contains("schema differs") && message.contains("trigger journal_no_update"),
        "{message}"
    );
    raw(&path)
        .execute_batch("CREATE TABLE notes (x)")
        .expect("create");
    let message = SqliteStore::open(&path)
        .expect_err("still refused")
        .to_string();
    assert!(message.contains("table notes"), "{message}");
}

#[test]
fn audit_tables_reject_update_and_delete_from_any_connection() {
    let (dir, store) = fresh();
    seed_audit_rows(&store);
    let conn = raw(&dir.path().join("airlock.sqlite3"));
    for (table, column) in [
        ("journal", "key_subject"),
        ("process_events", "created_at"),
        ("policy_profiles", "loaded_at"),
        ("uncertain_settlements", "settled_at"),
        ("step_records", "created_at"),
        ("policy_decision_texts", "text"),
    ] {
        let count = |conn: &rusqlite::Connection| -> i64 {
            conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
                .expect("count")
        };
        let seeded = count(&conn);
        assert!(seeded >= 1, "{table}: seeded");
        let update = conn.execute(&format!("UPDATE {table} SET {column} = {column} + 1"), []);
        let message = update.expect_err("UPDATE must fail").to_string();
        assert!(message.contains("append-only"), "{table}: {message}");
        let delete = conn.execute(&format!("DELETE FROM {table}"), []);
        let message = delete.expect_err("DELETE must fail").to_string();
        assert!(message.contains("append-only"), "{table}: {message}");
        assert_eq!(count(&conn), seeded, "{table}: the rows are still there");
    }
}

#[test]
fn schema_checks_hold_for_raw_writes() {
    let (dir, store) = fresh();
    let running = seed_run(&store, 1, RunStatus::Running);
    let waiting = seed_run(&store, 2, RunStatus::WaitingForApproval);
    let authorized = seed_invocation(
        &store,
        sample_invocation(1, &running, 1, "c1", InvocationStatus::Authorized),
    );
    let conn = raw(&dir.path().join("airlock.sqlite3"));
    let rejects = |sql: &str, constraint: &str| {
        let message = conn.execute(sql, []).expect_err(sql).to_string();
        assert!(message.contains(constraint), "{sql}: {message}");
    };
    rejects(
        &format!(
            "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL WHERE id = '{}'",
            running.id
        ),
        "ck_runs_lease_iff_running",
    );
    rejects(
        &format!(
            "UPDATE runs SET lease_owner = 'w', lease_expires_at = 1 WHERE id = '{}'",
            waiting.id
        ),
        "ck_runs_lease_iff_running",
    );
    rejects(
        &format!(
            "UPDATE runs SET status = 'PAUSED' WHERE id = '{}'",
            waiting.id
        ),
        "ck_runs_status",
    );
    rejects(
        &format!(
            "UPDATE runs SET session_id = '{}' WHERE id = '{}'",
            running.session_id, waiting.id
        ),
        "UNIQUE constraint failed: runs.session_id",
    );
    rejects(
        &format!(
            "UPDATE tool_invocations SET effect_sent_at = 1 WHERE id = '{}'",
            authorized.id
        ),
        "ck_tool_invocations_effect_sent_at",
    );
    rejects(
        &format!(
            "UPDATE tool_invocations SET status = 'SUCCEEDED' WHERE id = '{}'",
            authorized.id
        ),
        "ck_tool_invocations_terminal_outcome",
    );
    // Since M16 checkpoints are rows of the journal (a view reads them); the writer checks the
    // run and contiguity, and a unique index still refuses a repeated version.
    rejects(
        "INSERT INTO checkpoints (run_id, version, \"trigger\", state, created_at) \
         VALUES ('no-such-run', 1, 'seed', '{}', 0)",
        "cannot modify checkpoints because it is a view",
    );
    let seeded = format!(
        "INSERT INTO journal (session_id, run_id, checkpoint_version, checkpoint_trigger, \
         checkpoint_state, checkpoint_created_at) VALUES ('{}', '{}', 1, 'seed', '{{}}', 0)",
        running.session_id, running.id
    );
    conn.execute_batch(&seeded).expect("a first checkpoint");
    rejects(&seeded, "UNIQUE");
    rejects(
        &seeded.replace("'seed'", "'resumed'"),
        "ck_journal_checkpoint_trigger",
    );
    rejects(
        "INSERT INTO journal (session_id, run_id) VALUES ('s', 'r')",
        "ck_journal_not_empty",
    );
    rejects(
        "INSERT INTO journal (session_id, first_event_id, last_event_id, first_sequence, \
         last_sequence, events) VALUES ('s', 5, 7, 1, 2, '[]')",
        "ck_journal_event_range",
    );
}

/// A checkpoint, run and invocation with every optional field set survive the round trip.
#[test]
fn full_records_round_trip_through_every_column() {
    let (_dir, store) = fresh();
    let mut session = sample_session(1);
    session.next_event_sequence = 1;
    let mut run = sample_run(1, session.id, RunStatus::Running);
    run.principal_scopes = ["workspace.write", "demo.write", "run.read"]
        .into_iter()
        .map(|s| airlock_core::scope::Scope::parse(s).expect("scope"))
        .collect();
    run.deadline_at = Some(at(3600));
    run.cancel_requested_at = Some(at(5));
    run.limits.deadline_seconds = Some(3600);
    run.step_count = 3;
    run.tool_call_count = 2;
    commit(&store, "session and run", |tx| {
        tx.insert_session(&session)?;
        tx.insert_run(&run)
    });
    assert_eq!(
        commit(&store, "read", |tx| tx.run(run.id)),
        Some(run.clone())
    );

    let call = ProposedCall {
        call_id: "c1".to_owned(),
        tool: TOOL.to_owned(),
        version: Some("1.0.0".to_owned()),
        arguments: json!({"destination": "demo", "content": "x", "n": 1.5, "deep": [[[{"a": null}]]]}),
        argument_trust: BTreeMap::from([("destination".to_owned(), TrustLevel::User)]),
    };
    let checkpoint = Checkpoint {
        run_id: run.id,
        version: 1,
        trigger: CheckpointTrigger::ToolBatch,
        state: CheckpointState {
            step: 2,
            pending: Some(PendingBatch {
                step: 3,
                calls: vec![PinnedCall {
                    call: call.clone(),
                    pinned_version: None,
                }],
                admission: Admission::Parallel {
                    parallel_group: ParallelGroupId(uuid::Uuid::from_u128(7)),
                },
            }),
            tainted: true,
            denial_counts: BTreeMap::from([("t\0h\0r".to_owned(), 2)]),
        },
        created_at: at(9),
    };
    commit(&store, "checkpoint", |tx| tx.insert_checkpoint(&checkpoint));
    assert_eq!(
        commit(&store, "read", |tx| tx.latest_checkpoint(run.id)),
        Some(checkpoint)
    );
    let record = StepRecord {
        run_id: run.id,
        step: 1,
        calls: vec![call],
        results: vec![
            ResultRef::Invocation {
                invocation_id: invocation_id(1),
            },
            ResultRef::Refusal {
                derivation_key: "tool.call.refused:x:1:c2".to_owned(),
            },
        ],
        created_at: at(9),
    };
    commit(&store, "step record", |tx| {
        tx.insert_step_record(&record, None)
    });
    assert_eq!(
        commit(&store, "read", |tx| tx.step_records(run.id, 0, 10)),
        vec![record]
    );

    let mut invocation = sample_invocation(1, &run, 1, "c1", InvocationStatus::Succeeded);
    invocation.parallel_group = Some(ParallelGroupId(uuid::Uuid::from_u128(7)));
    invocation.argument_trust = BTreeMap::from([
        ("content".to_owned(), TrustLevel::ExternalUntrusted),
        ("destination".to_owned(), TrustLevel::User),
    ]);
    invocation.output_bytes = Some(42);
    invocation.structured_result = Some(json!({"ok": true, "list": [1, -2, 3.25], "s": "é"}));
    commit(&store, "invocation", |tx| tx.insert_invocation(&invocation));
    assert_eq!(
        commit(&store, "read", |tx| tx.invocation(invocation.id)),
        Some(invocation.clone())
    );

    let waiting = sample_invocation(2, &run, 1, "c2", InvocationStatus::WaitingForApproval);
    let approval = sample_approval(2, &waiting, ApprovalStatus::Pending);
    commit(&store, "waiting invocation and its approval", |tx| {
        tx.insert_invocation(&waiting)?;
        tx.insert_approval(&approval)
    });
    assert_eq!(
        commit(&store, "read", |tx| tx.invocation(waiting.id)),
        Some(waiting.clone())
    );
    assert_eq!(
        commit(&store, "read", |tx| tx.approval(approval.id)),
        Some(approval)
    );

    // Terminal states keep their data.
    let failed_session = sample_session(2);
    let mut failed = sample_run(2, failed_session.id, RunStatus::Failed);
    failed.state = RunState::Failed {
        failure: Failure::new(FailureReason::BudgetExceeded, 4, at(7)),
    };
    let mut queued = sample_run(3, failed_session.id, RunStatus::Queued);
    queued.state = RunState::Queued {
        scheduled_for: Some(at(60)),
    };
    commit(&store, "failed and queued runs", |tx| {
        tx.insert_session(&failed_session)?;
        tx.insert_run(&failed)?;
        tx.insert_run(&queued)
    });
    assert_eq!(commit(&store, "read", |tx| tx.run(failed.id)), Some(failed));
    assert_eq!(commit(&store, "read", |tx| tx.run(queued.id)), Some(queued));
}

/// M17 (issue 33): a call's raw arguments are stored once, in the PENDING checkpoint its own
/// transaction wrote, and its effective arguments not at all when they are the raw ones'
/// canonical text; every row reads back whole. A call the checkpoint does not hold with equal
/// arguments, or whose batch was fixed by an earlier transaction, keeps them inline.
#[test]
fn a_calls_arguments_are_stored_once_beside_the_pending_checkpoint_of_its_transaction() {
    let (dir, store) = fresh();
    let run = seed_run(&store, 1, RunStatus::Running);
    let proposed = |call_id: &str, content: &str| PinnedCall {
        call: ProposedCall {
            call_id: call_id.to_owned(),
            tool: TOOL.to_owned(),
            version: None,
            arguments: json!({"destination": "demo", "content": content, "n": [1.5, -0.0, 1e300]}),
            argument_trust: BTreeMap::new(),
        },
        pinned_version: Some("1.0.0".to_owned()),
    };
    let pending = pending_of_step_one(&run, vec![proposed("a", "first"), proposed("b", "second")]);
    let of_call = |n: u128, pinned: &PinnedCall| invocation_of_call(n, &run, &pinned.call);
    let calls = &pending.state.pending.as_ref().expect("batch").calls;
    // b: held by the checkpoint, but its effective arguments were normalized differently.
    let mut b = of_call(2, &calls[1]);
    b.arguments = r#"{"content":"second","destination":"demo","n":[1.5,0.0,1e300]}"#.to_owned();
    let a = of_call(1, &calls[0]);
    // c: a call of the same step the checkpoint does not hold with these arguments.
    let mut c = of_call(3, &proposed("c", "third"));
    c.raw_arguments = json!({"other": true});
    commit(&store, "PENDING and two calls", |tx| {
        tx.insert_checkpoint(&pending)?;
        tx.insert_invocation(&b)?;
        tx.insert_invocation(&a)?;
        tx.insert_invocation(&c)
    });
    // d: in a later transaction, its batch's PENDING already committed.
    let d = of_call(4, &calls[0]);
    let d = Invocation {
        call_id: "a-again".to_owned(),
        idempotency_key: "d".to_owned(),
        step_number: 2,
        ..d
    };
    commit(&store, "a later call", |tx| tx.insert_invocation(&d));

    let conn = raw(&dir.path().join("airlock.sqlite3"));
    let stored = |id: &Invocation| -> (Option<String>, Option<String>, Option<u32>, Option<u32>) {
        conn.query_row(
            "SELECT raw_arguments, arguments, arguments_checkpoint, arguments_call \
             FROM tool_invocations WHERE id = ?1",
            [id.id.to_string()],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )
        .expect("row")
    };
    assert_eq!(
        stored(&a),
        (None, None, Some(1), Some(0)),
        "a: once, in the checkpoint"
    );
    assert_eq!(
        stored(&b),
        (None, Some(b.arguments.clone()), Some(1), Some(1)),
        "b: raw in the checkpoint, its own effective text"
    );
    assert!(
        stored(&c).0.is_some() && stored(&c).2.is_none(),
        "c: inline"
    );
    assert!(
        stored(&d).0.is_some() && stored(&d).2.is_none(),
        "d: inline"
    );
    assert_eq!(stored(&d).1, None, "d: effective = canonical raw");
    for invocation in [&a, &b, &c, &d] {
        assert_eq!(
            commit(&store, "read", |tx| tx.invocation(invocation.id)).as_ref(),
            Some(invocation),
            "{} reads back whole",
            invocation.call_id
        );
    }
    assert_eq!(
        commit(&store, "read", |tx| tx.invocations_of_run(run.id)).len(),
        4
    );
}

#[test]
fn a_panicking_transaction_commits_nothing_and_the_store_keeps_working() {
    let (_dir, store) = fresh();
    let run = seed_run(&store, 1, RunStatus::Running);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.transact(|tx| -> Result<(), TxError> {
            tx.append_event(&sample_event(
                &run,
                EventType::RunStarted,
                json!({}),
                Some("k"),
            ))?;
            panic!("simulated bug inside a transaction");
        })
    }));
    assert!(outcome.is_err(), "the panic reaches the caller");
    let event = commit(&store, "after the panic", |tx| {
        assert_eq!(tx.event_by_key("k")?, None, "the panicked write is gone");
        tx.append_event(&sample_event(
            &run,
            EventType::RunStarted,
            json!({}),
            Some("k"),
        ))
    });
    assert_eq!(event.sequence, 1, "no sequence was consumed");
}

/// Two transactions forced into one group: the first holds the lock while the second arrives,
/// so it must leave its group open; the second fails and rolls back only its own writes; one
/// COMMIT makes the first durable.
#[test]
fn one_group_commits_its_members_and_a_failed_member_rolls_back_alone() {
    let (dir, store) = fresh();
    let store = Arc::new(store);
    let run = seed_run(&*store, 1, RunStatus::Running);
    let before = store.group_stats();
    let started = Arc::new(Barrier::new(2));

    let second = {
        let (store, run, started) = (Arc::clone(&store), run.clone(), Arc::clone(&started));
        thread::spawn(move || {
            started.wait();
            store.transact(|tx| -> Result<(), TxError> {
                tx.append_event(&sample_event(
                    &run,
                    EventType::RunCheckpointed,
                    json!({"n": 2}),
                    Some("second"),
                ))?;
                Err(TxError::Conflict("the second member fails".to_owned()))
            })
        })
    };
    let first = store.transact(|tx| {
        started.wait();
        // Long enough for the second caller to queue on the lock behind this closure.
        thread::sleep(Duration::from_millis(300));
        tx.append_event(&sample_event(
            &run,
            EventType::RunStarted,
            json!({"n": 1}),
            Some("first"),
        ))
    });
    let second = second.join().expect("second thread");

    let first = first.expect("the first member commits");
    assert_eq!(
        second,
        Err(TxError::Conflict("the second member fails".to_owned()))
    );
    let after = store.group_stats();
    assert_eq!(after.transactions - before.transactions, 2);
    assert_eq!(after.groups - before.groups, 1, "both shared one COMMIT");

    // Another connection sees exactly the first member's write.
    let conn = raw(&dir.path().join("airlock.sqlite3"));
    let keys: Vec<(String, i64)> = conn
        .prepare("SELECT derivation_key, sequence FROM events ORDER BY id")
        .expect("query")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(keys, vec![("first".to_owned(), 1)]);
    assert_eq!(first.sequence, 1);
    let next = commit(&*store, "read", |tx| tx.session(run.session_id))
        .map(|session| session.next_event_sequence);
    assert_eq!(next, Some(2), "the failed member's sequence was given back");
}

/// SPEC §16 #40 under group commit: many threads appending to one session get unique,
/// gap-free sequences in commit (id) order; failing transactions leave nothing behind.
#[test]
fn concurrent_transactions_all_commit_with_unique_sequences() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 40;
    let (_dir, store) = fresh();
    let store = Arc::new(store);
    let shared = seed_run(&*store, 1, RunStatus::Running);
    let before = store.group_stats();

    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, shared) = (Arc::clone(&store), shared.clone());
            thread::spawn(move || {
                // Each thread also owns a run in its own session.
                let own = seed_run(&*store, 100 + t as u128, RunStatus::Running);
                let mut committed = Vec::new();
                for i in 0..PER_THREAD {
                    let fail = t == 0 && i % 5 == 0;
                    let result = store.transact(|tx| {
                        let event = tx.append_event(&sample_event(
                            &shared,
                            EventType::RunCheckpointed,
                            json!({"t": t, "i": i}),
                            Some(&format!("t{t}:{i}")),
                        ))?;
                        tx.append_event(&sample_event(
                            &own,
                            EventType::RunCheckpointed,
                            json!({"i": i}),
                            None,
                        ))?;
                        if fail {
                            return Err(TxError::Conflict("planned failure".to_owned()));
                        }
                        Ok(event)
                    });
                    match result {
                        Ok(event) => committed.push(event),
                        Err(error) => assert!(fail, "thread {t} transaction {i}: {error:?}"),
                    }
                }
                (own, committed)
            })
        })
        .collect();
    let results: Vec<(Run, Vec<Event>)> = workers
        .into_iter()
        .map(|w| w.join().expect("worker"))
        .collect();

    let failures = PER_THREAD / 5;
    let expected = THREADS * PER_THREAD - failures;
    let returned: usize = results.iter().map(|(_, events)| events.len()).sum();
    assert_eq!(returned, expected);

    let stored = commit(&*store, "read", |tx| {
        tx.events_of_run(shared.id, None, 10_000)
    });
    assert_eq!(stored.len(), expected, "every Ok is stored, nothing else");
    let sequences: Vec<u64> = stored.iter().map(|e| e.sequence).collect();
    assert_eq!(
        sequences,
        (1..=expected as u64).collect::<Vec<_>>(),
        "unique, gap-free and increasing in commit order"
    );
    let keys: BTreeSet<&str> = stored
        .iter()
        .filter_map(|e| e.derivation_key.as_deref())
        .collect();
    for i in (0..PER_THREAD).step_by(5) {
        assert!(
            !keys.contains(format!("t0:{i}").as_str()),
            "failed transaction t0:{i} left an event"
        );
    }
    for (own, committed) in &results {
        for event in committed {
            assert!(
                stored.contains(event),
                "a returned event is stored as returned"
            );
        }
        let own_events = commit(&*store, "read", |tx| tx.events_of_run(own.id, None, 1000));
        let own_sequences: Vec<u64> = own_events.iter().map(|e| e.sequence).collect();
        assert_eq!(
            own_sequences,
            (1..=committed.len() as u64).collect::<Vec<_>>()
        );
    }

    let stats = store.group_stats().since(&before);
    let (transactions, groups) = (stats.transactions, stats.groups);
    assert!(transactions >= (THREADS * PER_THREAD) as u64);
    assert!(groups <= transactions);
    // The writer's clock: every group's COMMIT lies inside some member's hold of the writer,
    // and the statements took time of their own.
    assert!(stats.commit_nanos > 0, "{stats:?}");
    assert!(stats.held_nanos > stats.commit_nanos, "{stats:?}");
    assert!(stats.statement_nanos() > 0, "{stats:?}");
    eprintln!("{transactions} transactions in {groups} commits");
}

/// SPEC §14: several processes may share the file. A second store on the same path sees what
/// the first committed, and both can write, concurrently too (BEGIN IMMEDIATE + busy_timeout).
#[test]
fn a_second_store_on_the_same_file_sees_and_writes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("airlock.sqlite3");
    let first = Arc::new(SqliteStore::open(&path).expect("first"));
    let second = Arc::new(SqliteStore::open(&path).expect("second"));

    let run = seed_run(&*first, 1, RunStatus::Running);
    assert_eq!(
        commit(&*second, "read", |tx| tx.run(run.id)),
        Some(run.clone())
    );
    let other = seed_run(&*second, 2, RunStatus::Queued);
    assert_eq!(commit(&*first, "read", |tx| tx.run(other.id)), Some(other));

    let writers: Vec<_> = [Arc::clone(&first), Arc::clone(&second)]
        .into_iter()
        .enumerate()
        .map(|(n, store)| {
            let run = run.clone();
            thread::spawn(move || {
                for i in 0..30 {
                    commit(&*store, "append", |tx| {
                        tx.append_event(&sample_event(
                            &run,
                            EventType::RunCheckpointed,
                            json!({"store": n, "i": i}),
                            None,
                        ))
                    });
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().expect("writer");
    }
    let events = commit(&*first, "read", |tx| tx.events_of_run(run.id, None, 1000));
    let sequences: Vec<u64> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(
        sequences,
        (1..=60).collect::<Vec<_>>(),
        "one sequence per event across both stores"
    );

    // A store opened on an existing file migrates nothing and agrees on the version.
    let third = SqliteStore::open(&path).expect("third");
    assert_eq!(
        third.pragma_report().expect("pragmas").user_version,
        SCHEMA_VERSION
    );
}

/// Opening the same new file from several threads at once (as several processes might) leaves
/// one migrated schema, every time. Switching a new file to WAL needs its write lock while the
/// other openers hold read locks, and SQLite answers that upgrade "database is locked" without
/// waiting (it could deadlock), so one round alone rarely shows the race: 40 rounds of 8
/// openers released together by a barrier do.
#[test]
fn concurrent_opens_of_a_new_file_all_succeed() {
    const OPENERS: usize = 8;
    for round in 0..40 {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = Arc::new(dir.path().join("airlock.sqlite3"));
        let start = Arc::new(std::sync::Barrier::new(OPENERS));
        let openers: Vec<_> = (0..OPENERS)
            .map(|_| {
                let path = Arc::clone(&path);
                let start = Arc::clone(&start);
                thread::spawn(move || {
                    start.wait();
                    SqliteStore::open(&path).map(|s| s.pragma_report().map(|r| r.user_version))
                })
            })
            .collect();
        for opener in openers {
            let version = opener
                .join()
                .expect("opener")
                .unwrap_or_else(|error| panic!("round {round}: open: {error}"))
                .expect("pragmas");
            assert_eq!(version, SCHEMA_VERSION);
        }
    }
}

/// `Store::read` runs beside the writer: while a write transaction is open (and holds the
/// writer's lock), a read on another thread completes, and it sees the last committed state,
/// not the open transaction's write.
#[test]
fn a_read_completes_while_a_write_transaction_is_open_and_sees_only_committed_rows() {
    let (_dir, store) = fresh();
    let store = Arc::new(store);
    let committed = seed_run(&*store, 1, RunStatus::Queued);
    let uncommitted = sample_session(9);
    let (inside_tx, writer_inside) = std::sync::mpsc::channel();
    let (read_done, reader_done) = std::sync::mpsc::channel();

    let writer = {
        let store = Arc::clone(&store);
        let uncommitted = uncommitted.clone();
        thread::spawn(move || {
            store
                .transact(|tx| {
                    tx.insert_session(&uncommitted)?;
                    inside_tx.send(()).expect("signal");
                    // Stay inside the transaction until the read has finished (or give up).
                    Ok(reader_done.recv_timeout(Duration::from_secs(10)).is_ok())
                })
                .expect("the write commits")
        })
    };
    writer_inside
        .recv_timeout(Duration::from_secs(10))
        .expect("the writer opened its transaction");
    let (run, session) = store
        .read(|tx| Ok((tx.run(committed.id)?, tx.session(uncommitted.id)?)))
        .expect("read");
    read_done.send(()).expect("signal");
    assert!(
        writer.join().expect("writer thread"),
        "the read finished while the write transaction was still open"
    );
    assert_eq!(run.as_ref(), Some(&committed), "sees the committed run");
    assert_eq!(session, None, "does not see the open transaction's write");
    assert_eq!(
        store.read(|tx| tx.session(uncommitted.id)).expect("read"),
        Some(uncommitted),
        "a read after the COMMIT sees it"
    );
}

/// A run update names only the columns that change (`SqliteTx::update_run`): moving a counter
/// must not rewrite the status, lease or script columns, or SQLite rewrites the indexes over
/// them and the script's overflow pages. An `UPDATE OF` trigger fires exactly when one of its
/// columns is in the SET list, whatever the value.
#[test]
fn a_run_update_names_only_the_columns_that_change() {
    let (dir, store) = fresh();
    let run = seed_run(&store, 1, RunStatus::Running);
    let conn = raw(&dir.path().join("airlock.sqlite3"));
    conn.execute_batch(
        "CREATE TABLE untouched_columns_written (n INTEGER);
         CREATE TRIGGER untouched_columns AFTER UPDATE OF status, lease_owner, lease_epoch,
             lease_expires_at, attempts ON runs
         BEGIN INSERT INTO untouched_columns_written VALUES (1); END;",
    )
    .expect("trigger");
    let writes = || -> i64 {
        conn.query_row("SELECT COUNT(*) FROM untouched_columns_written", [], |r| {
            r.get(0)
        })
        .expect("count")
    };
    let guard = guard_of(&run);

    let mut counted = run.clone();
    counted.step_count += 1;
    counted.tool_call_count += 1;
    counted.updated_at = counted.updated_at.saturating_add_seconds(1);
    store
        .transact(|tx| tx.update_run(&guard, &counted))
        .expect("a counter update");
    assert_eq!(
        writes(),
        0,
        "a counter update wrote a column that did not change"
    );
    let stored = store.read(|tx| tx.run(run.id)).expect("read");
    assert_eq!(stored.as_ref(), Some(&counted), "the update is stored");

    // The trigger does see a status change, so the assertion above can fail.
    let mut parked = counted.clone();
    parked.state = RunState::WaitingForApproval;
    store
        .transact(|tx| tx.update_run(&guard, &parked))
        .expect("a status change");
    assert_eq!(
        writes(),
        1,
        "a status change writes the status and lease columns"
    );
    assert_eq!(store.read(|tx| tx.run(run.id)).expect("read"), Some(parked));
}

#[test]
fn api_tokens_change_only_by_one_revocation_and_are_never_deleted() {
    // SPEC §20: the table is the record of who could act through the HTTP API; the triggers
    // hold that against any connection, not only this store's code.
    let (dir, store) = fresh();
    let conn = raw(&dir.path().join("airlock.sqlite3"));
    conn.execute_batch(
        "INSERT INTO api_tokens (id, tenant_id, principal_id, scopes, token_sha256, label, \
         created_at, expires_at, revoked_at) VALUES ('t1', 'acme', 'alice', '[]', \
         printf('%064d', 1), NULL, 1, NULL, NULL)",
    )
    .expect("insert");
    for (statement, what) in [
        (
            "UPDATE api_tokens SET scopes = '[\"run.read\"]'",
            "widening scopes",
        ),
        ("UPDATE api_tokens SET expires_at = 99", "extending expiry"),
        ("DELETE FROM api_tokens", "deleting"),
    ] {
        let message = conn.execute(statement, []).expect_err(what).to_string();
        assert!(message.contains("api_tokens"), "{what}: {message}");
    }
    conn.execute("UPDATE api_tokens SET revoked_at = 5", [])
        .expect("the one revocation");
    let message = conn
        .execute("UPDATE api_tokens SET revoked_at = NULL", [])
        .expect_err("un-revoking")
        .to_string();
    assert!(message.contains("only once"), "{message}");
    drop(store);
}

#[test]
fn the_tenant_event_tail_walks_the_journal_by_event_id() {
    // A poll of the event stream must cost about its page, not the tenant's whole log: the plan
    // scans the journal by its last event id from the cursor and needs no sort.
    let (dir, store) = fresh();
    let conn = raw(&dir.path().join("airlock.sqlite3"));
    let plan: Vec<String> = conn
        .prepare(
            "EXPLAIN QUERY PLAN SELECT events FROM journal WHERE last_event_id > ?2 AND EXISTS \
             (SELECT 1 FROM sessions WHERE sessions.id = journal.session_id \
              AND sessions.tenant_id = ?1) ORDER BY last_event_id LIMIT ?3",
        )
        .expect("plan")
        .query_map([&"acme" as &dyn rusqlite::ToSql, &0, &10], |row| {
            row.get::<_, String>(3)
        })
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("plan rows");
    let text = plan.join("\n");
    assert!(
        text.contains("SEARCH journal USING INDEX uq_journal_event_ids (last_event_id>?)"),
        "{text}"
    );
    assert!(!text.contains("TEMP B-TREE"), "{text}");
    drop(store);
}

#[test]
fn the_repeat_check_reads_only_the_open_rows_of_its_identity() {
    // Every call's first transaction runs `twins` (SPEC §19.7): its plan must search the
    // partial index of RUNNING and UNCERTAIN rows by identity, never the tenant's history.
    let (dir, store) = fresh();
    let conn = raw(&dir.path().join("airlock.sqlite3"));
    let plan: Vec<String> = conn
        .prepare(
            "EXPLAIN QUERY PLAN SELECT id FROM tool_invocations WHERE tenant_id = ?1 \
             AND tool_name = ?2 AND effective_arguments_hash = ?3 \
             AND status IN ('RUNNING', 'UNCERTAIN') AND (?4 IS NULL OR run_id = ?4) \
             ORDER BY created_at, id",
        )
        .expect("plan")
        .query_map(
            [
                &"acme" as &dyn rusqlite::ToSql,
                &"demo.tool",
                &"h",
                &None::<String>,
            ],
            |row| row.get::<_, String>(3),
        )
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("plan rows");
    let text = plan.join("\n");
    assert!(
        text.contains("SEARCH tool_invocations USING INDEX ix_tool_invocations_twins"),
        "{text}"
    );
    drop(store);
}

/// Issue 33: the writer never checkpoints the whole WAL itself while the checkpointer thread
/// keeps up. About 16 MB of commits (four times SQLite's automatic threshold) ask the thread for
/// checkpoints, which it runs, no commit copies more than a pass's tail, and the WAL restarts.
#[test]
fn wal_checkpoints_run_off_the_writer() {
    let (_dir, store) = fresh();
    let before = store.group_stats();
    // Four batches of about 1,150 pages each, each more than a pass's threshold. After each
    // one the test gives the thread its pass (up to 5 s) before writing on: on a loaded machine
    // the thread may get no CPU while the writer commits, and the WAL's size (its file's high
    // mark) would then say how the scheduler ran, not what the store does.
    let passes = |store: &SqliteStore| store.group_stats().since(&before).background_checkpoints;
    for batch in 0..4u128 {
        let passed = passes(&store);
        for n in batch * 100..(batch + 1) * 100 {
            let session = sample_session(1_000 + n);
            let mut run = sample_run(1_000 + n, session.id, RunStatus::Queued);
            run.planner_input = format!("\"{}\"", "x".repeat(40_000)).into();
            commit(&store, "a large run", |tx| {
                tx.insert_session(&session)?;
                tx.insert_run(&run)
            });
        }
        for _ in 0..200 {
            if passes(&store) > passed {
                break;
            }
            thread::sleep(Duration::from_millis(25));
        }
    }
    let stats = store.group_stats().since(&before);
    assert!(stats.background_checkpoints > 0, "{stats:?}");
    assert_eq!(stats.inline_checkpoints, 0, "{stats:?}");
    // The WAL restarted from its beginning after the thread's passes (the writer copied their
    // tails): its file never held much more than the background threshold's 1,000 pages, not
    // the 16 MB written.
    let wal = std::fs::metadata(_dir.path().join("airlock.sqlite3-wal")).expect("the WAL");
    assert!(
        wal.len() < 3_000 * 4_120,
        "WAL of {} bytes; {stats:?}",
        wal.len()
    );
}

/// Issue 33: a run's planner input is kept after the first read, and a row whose input another
/// writer changed to another length is read afresh.
#[test]
fn a_kept_planner_input_gives_way_to_a_changed_row() {
    let (dir, store) = fresh();
    let run = seed_run(&store, 1, RunStatus::Queued);
    let read = |store: &SqliteStore| {
        store
            .read(|tx| tx.run(run.id))
            .expect("read")
            .expect("the run")
    };
    assert_eq!(read(&store), run, "the first read");
    assert_eq!(read(&store), run, "the kept input");
    assert_eq!(
        commit(&store, "in a write", |tx| tx.run(run.id)),
        Some(run.clone()),
        "the writer shares what the readers kept"
    );
    let conn = raw(&dir.path().join("airlock.sqlite3"));
    let refused = conn
        .execute(
            "UPDATE run_inputs SET planner_input = '{}' WHERE run_id = ?1",
            [run.id.to_string()],
        )
        .expect_err("an input never changes");
    assert!(
        refused.to_string().contains("run_inputs never change"),
        "{refused}"
    );
    // A hand edit with the trigger dropped: another length is read afresh.
    conn.execute_batch("DROP TRIGGER run_inputs_no_update")
        .expect("drop the trigger");
    conn.execute(
        "UPDATE run_inputs SET planner_input = '{\"edited\":true}' WHERE run_id = ?1",
        [run.id.to_string()],
    )
    .expect("an edit outside airlock");
    assert_eq!(&*read(&store).planner_input, "{\"edited\":true}");
}

/// M15: `insert_run` writes the row and its input; when the input would be refused (here an
/// input row left by a write outside airlock), neither is written, so a caller that carries
/// on commits no run without its input.
#[test]
fn a_refused_input_leaves_no_run_row() {
    let (dir, store) = fresh();
    let session = sample_session(1);
    let run = sample_run(1, session.id, RunStatus::Queued);
    commit(&store, "session", |tx| tx.insert_session(&session));
    let conn = raw(&dir.path().join("airlock.sqlite3"));
    conn.pragma_update(None, "foreign_keys", "OFF")
        .expect("foreign keys off");
    conn.execute(
        "INSERT INTO run_inputs (run_id, planner_input) VALUES (?1, '{}')",
        [run.id.to_string()],
    )
    .expect("an orphan input");
    let carried_on = store
        .transact(|tx| {
            let refused = tx.insert_run(&run);
            Ok((refused, tx.run(run.id)?))
        })
        .expect("the transaction commits");
    assert!(
        matches!(carried_on.0, Err(TxError::Conflict(_))),
        "{:?}",
        carried_on.0
    );
    assert_eq!(
        carried_on.1, None,
        "the row was taken back inside the transaction"
    );
    assert_eq!(store.read(|tx| tx.run(run.id)).expect("read"), None);
}

/// The journal gathers a transaction's events into rows (see the crate's `journal` module): a
/// key appended, then an event of another session (which writes the first row), then the same
/// key again, all in one transaction, finds the stored event and appends nothing; and the rows
/// read back are the events as they were returned.
#[test]
fn a_key_written_earlier_in_the_transaction_is_found_after_its_row_was_written() {
    let (dir, store) = fresh();
    let first = seed_run(&store, 1, RunStatus::Running);
    let second = seed_run(&store, 2, RunStatus::Running);
    let keyed = sample_event(
        &first,
        EventType::RunStarted,
        json!({"n": 1}),
        Some("tool.call.started:k1"),
    );
    let (appended, repeated, other) = commit(&store, "three appends", |tx| {
        let appended = tx.append_event(&keyed)?;
        let other = tx.append_event(&sample_event(
            &second,
            EventType::RunStarted,
            json!({}),
            None,
        ))?;
        let repeated = tx.append_event(&keyed)?;
        Ok((appended, repeated, other))
    });
    assert_eq!(repeated, appended, "the stored event, not a second one");
    assert_eq!(other.id, appended.id + 1);
    let rows: i64 = raw(&dir.path().join("airlock.sqlite3"))
        .query_row(
            "SELECT COUNT(*) FROM journal WHERE events IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(rows, 2, "one row per session");
    let read = commit(&store, "read", |tx| {
        Ok((
            tx.events_of_run(first.id, None, 10)?,
            tx.events_of_tenant(TENANT, None, 10)?,
        ))
    });
    assert_eq!(read.0, vec![appended.clone()]);
    assert_eq!(read.1, vec![appended, other]);
}

/// A transaction answers its later reads of a run and an invocation from what it already read
/// or wrote (see the crate's `kept` module); a heartbeat, which changes the run in a way the
/// transaction does not hold, makes the next read go to the row again.
#[test]
fn reads_after_a_write_in_the_same_transaction_see_the_write() {
    let (_dir, store) = fresh();
    let (run, invocation) = seed_run_and_call(&store);
    let lease = run.lease().expect("a running run's lease");
    let (before, after) = commit(&store, "read, heartbeat, read", |tx| {
        let before = tx.run(run.id)?;
        tx.heartbeat(&lease, at(100), at(50))?;
        Ok((before, tx.run(run.id)?))
    });
    let expiry = |run: Option<Run>| match run.map(|r| r.state) {
        Some(RunState::Running {
            lease_expires_at, ..
        }) => lease_expires_at,
        other => panic!("not running: {other:?}"),
    };
    assert_eq!(expiry(before), at(LEASE_SECONDS));
    assert_eq!(
        expiry(after),
        at(100),
        "the heartbeat's renewal, not the kept row"
    );

    let mut running = invocation.clone();
    running.status = InvocationStatus::Running;
    running.effect_sent_at = Some(at(60));
    let read = commit(&store, "read, update, read", |tx| {
        tx.invocation(invocation.id)?;
        tx.update_invocation(InvocationStatus::Authorized, &running)?;
        tx.invocation(invocation.id)
    });
    assert_eq!(read, Some(running.clone()));
    assert_eq!(
        commit(&store, "a new transaction", |tx| tx
            .invocation(invocation.id)),
        Some(running)
    );
}

/// A journal row the INSERT refuses fails its whole transaction, whether it is written when a
/// later event does not fit (an `append_event` error the closure ignores) or when the closure
/// returns: the events already returned as appended are never committed without their row,
/// and nothing else the transaction wrote is either. (A trigger added after the store opened
/// stands in for the refusal; nothing in airlock's own schema should refuse such a row.)
#[test]
fn a_journal_row_that_cannot_be_written_fails_its_transaction_and_leaves_nothing() {
    let (dir, store) = fresh();
    let first = seed_run(&store, 1, RunStatus::Running);
    let second = seed_run(&store, 2, RunStatus::Running);
    let conn = raw(&dir.path().join("airlock.sqlite3"));
    conn.execute_batch(
        "CREATE TRIGGER refuse_boom BEFORE INSERT ON journal WHEN NEW.key_subject = 'boom' \
         BEGIN SELECT RAISE(ABORT, 'boom refused'); END",
    )
    .expect("trigger");
    let rows = |conn: &rusqlite::Connection| -> i64 {
        conn.query_row("SELECT COUNT(*) FROM journal", [], |r| r.get(0))
            .expect("count")
    };
    let before = rows(&conn);
    let refused = sample_event(&first, EventType::RunStarted, json!({}), Some("x:boom"));

    // Written when the next event does not fit: the append reports it, the closure carries on.
    let mid = store.transact(|tx| -> Result<(), TxError> {
        tx.append_event(&refused)?;
        let flushed = tx.append_event(&sample_event(
            &second,
            EventType::RunStarted,
            json!({}),
            None,
        ));
        assert!(
            matches!(&flushed, Err(TxError::Backend(m)) if m.contains("boom refused")),
            "{flushed:?}"
        );
        tx.insert_session(&sample_session(3))
    });
    assert!(matches!(mid, Err(TxError::Backend(_))), "{mid:?}");

    // Written when the closure returns.
    let at_end = store.transact(|tx| -> Result<(), TxError> {
        tx.insert_session(&sample_session(4))?;
        tx.append_event(&refused).map(drop)
    });
    assert!(matches!(at_end, Err(TxError::Backend(m)) if m.contains("boom refused")));

    assert_eq!(rows(&conn), before, "no journal row committed");
    for n in [3, 4] {
        assert_eq!(
            commit(&store, "read", |tx| tx.session(sample_session(n).id)),
            None,
            "the transaction's other writes rolled back"
        );
    }
    conn.execute_batch("DROP TRIGGER refuse_boom")
        .expect("drop");
    let appended = commit(&store, "the store carries on", |tx| {
        tx.append_event(&refused)
    });
    assert_eq!(appended.derivation_key.as_deref(), Some("x:boom"));
}

/// M19: a journal row keeps what its events share once (actor, time, the subject of their
/// keys, a `run.checkpointed` that repeats the row's checkpoint), and every event reads back
/// whole, through the store and through the `events` view alike. An event that differs from
/// the row's first (another actor, no actor id, another time, another payload than the
/// checkpoint's, a key without a `:`) keeps what differs.
#[test]
fn a_journal_rows_events_read_back_whole_through_the_store_and_the_events_view() {
    use airlock_core::events::Actor;
    use airlock_core::time::Timestamp;
    let (dir, store) = fresh();
    let run = seed_run(&store, 1, RunStatus::Running);
    let later = Timestamp::from_micros(T0.as_micros() + 7);
    let event =
        |event_type, payload, key: Option<&str>| sample_event(&run, event_type, payload, key);
    let appended = commit(&store, "a watermark-shaped row and more", |tx| {
        tx.insert_checkpoint(&sample_checkpoint(run.id, 1))?;
        let mut appended = vec![tx.append_event(&event(
            EventType::RunCheckpointed,
            json!({"trigger": "seed", "version": 1}),
            None,
        ))?];
        for kind in ["proposed", "authorized"] {
            appended.push(tx.append_event(&event(
                EventType::ToolCallProposed,
                json!({"call_id": "c1", "quote": "say \"hi\"", "kind": kind}),
                Some(&format!("tool.call.{kind}:inv-1")),
            ))?);
        }
        let mut other_actor = event(
            EventType::ToolCallStarted,
            json!({}),
            Some("tool.call.started:inv-1"),
        );
        other_actor.actor = Actor::application();
        other_actor.created_at = later;
        appended.push(tx.append_event(&other_actor)?);
        // Not the row's checkpoint: its payload is kept.
        appended.push(tx.append_event(&event(
            EventType::RunCheckpointed,
            json!({"trigger": "seed", "version": 2}),
            None,
        ))?);
        // A key without a `:` is its own subject, so it opens a row of its own.
        appended.push(tx.append_event(&event(
            EventType::RunStarted,
            json!({"n": 1}),
            Some("plain"),
        ))?);
        Ok(appended)
    });
    assert_eq!(appended.len(), 6);

    let conn = raw(&dir.path().join("airlock.sqlite3"));
    let texts: Vec<String> = conn
        .prepare("SELECT events FROM journal WHERE events IS NOT NULL ORDER BY id")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("texts");
    assert_eq!(texts.len(), 2, "{texts:?}");
    let watermark = &texts[0];
    assert_eq!(
        watermark.matches(WORKER).count(),
        1,
        "the actor once: {watermark}"
    );
    assert_eq!(
        watermark.matches("inv-1").count(),
        0,
        "keys by their prefix: {watermark}"
    );
    assert!(
        watermark.contains(r#""t":"tool.call.proposed","p":{"call_id":"c1","kind":"proposed","quote":"say \"hi\""},"s":true}"#)
            && watermark.contains(r#""s":"tool.call.authorized""#),
        "a key's prefix: the event type (M22), else its own text: {watermark}"
    );
    assert!(
        watermark.starts_with(r#"{"a":"worker","#)
            && watermark.contains(r#"{"t":"run.checkpointed"}"#),
        "the row's own checkpoint leaves its payload out: {watermark}"
    );
    assert!(
        watermark.contains(r#""quote":"say \"hi\"""#),
        "a payload is JSON, not a string of it: {watermark}"
    );
    assert!(texts[1].contains(r#""k":"plain""#), "{}", texts[1]);

    let (of_run, of_tenant) = commit(&store, "read", |tx| {
        Ok((
            tx.events_of_run(run.id, None, 100)?,
            tx.events_of_tenant(TENANT, None, 100)?,
        ))
    });
    assert_eq!(of_run, appended, "the store reads every event back whole");
    assert_eq!(of_tenant, appended);
    let key_found = commit(&store, "by key", |tx| {
        let mut repeat = event(
            EventType::ToolCallProposed,
            json!({"call_id": "c1", "quote": "say \"hi\"", "kind": "authorized"}),
            Some("tool.call.authorized:inv-1"),
        );
        repeat.created_at = later;
        tx.append_event(&repeat)
    });
    assert_eq!(key_found, appended[2], "a key by its prefix is found again");

    let viewed: Vec<Vec<rusqlite::types::Value>> = conn
        .prepare(
            "SELECT id, session_id, run_id, sequence, event_type, payload_schema_version, \
             actor_type, actor_id, payload, derivation_key, created_at FROM events ORDER BY id",
        )
        .expect("prepare")
        .query_map([], |r| (0..11).map(|i| r.get(i)).collect())
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("view rows");
    use rusqlite::types::Value as V;
    let expected: Vec<Vec<V>> = appended
        .iter()
        .map(|e: &Event| {
            let text = |s: Option<String>| s.map_or(V::Null, V::Text);
            vec![
                V::Integer(e.id),
                V::Text(e.session_id.to_string()),
                text(e.run_id.map(|r| r.to_string())),
                V::Integer(i64::try_from(e.sequence).expect("sequence")),
                V::Text(e.event_type.as_str().to_owned()),
                V::Integer(i64::from(e.payload_schema_version)),
                V::Text(e.actor.actor_type.as_str().to_owned()),
                text(e.actor.actor_id.clone()),
                V::Text(e.payload.to_string()),
                text(e.derivation_key.clone()),
                V::Integer(e.created_at.as_micros()),
            ]
        })
        .collect();
    assert_eq!(viewed, expected, "the events view reads the same events");
}

/// M20: a succeeded call whose outcome and result item follow from its row keeps neither (only
/// the item's trust level), a failure keeps its outcome and derives its item from it, and every
/// row reads back whole; a message of its own, or an item of another shape, is kept.
#[test]
fn a_finished_calls_outcome_and_result_item_are_derived_from_its_row() {
    use airlock_core::invocation::outcome::{Outcome, ResultItem};
    use airlock_core::vocab::OutcomeStatus;
    let (dir, store) = fresh();
    let run = seed_run(&store, 1, RunStatus::Running);
    let succeeded = sample_invocation(1, &run, 1, "c1", InvocationStatus::Succeeded);
    let denied = sample_invocation(2, &run, 1, "c2", InvocationStatus::Denied);
    let mut own_message = sample_invocation(3, &run, 1, "c3", InvocationStatus::Failed);
    let outcome = Outcome::with_message(
        OutcomeStatus::Failed,
        &own_message.tool_name,
        "tool.internal_error",
        "the upstream said no".to_owned(),
    );
    let item = ResultItem::from_outcome("c3", &outcome, TrustLevel::InternalTool).to_canonical();
    own_message.close(outcome, item, T0);
    let mut other_item = sample_invocation(4, &run, 1, "c4", InvocationStatus::Succeeded);
    other_item.result_item = Some(
        ResultItem::success(
            "c4",
            "another.name",
            TrustLevel::ExternalUntrusted,
            &json!({"ok": true}),
        )
        .to_canonical(),
    );
    // Written as RUNNING and closed by an update, as a call is.
    let mut running = sample_invocation(5, &run, 1, "c5", InvocationStatus::Running);
    running.effect_sent_at = Some(T0);
    let finished = sample_invocation(5, &run, 1, "c5", InvocationStatus::Succeeded);
    let mut closed = running.clone();
    closed.status = InvocationStatus::Succeeded;
    closed.structured_result = finished.structured_result.clone();
    closed.outcome = finished.outcome.clone();
    closed.result_item = finished.result_item.clone();
    closed.outcome_status = finished.outcome_status;
    closed.reason_code = finished.reason_code.clone();
    // A caller other than core may leave the reason code out; the row is written as before.
    let mut no_reason = sample_invocation(6, &run, 1, "c6", InvocationStatus::Denied);
    no_reason.reason_code = None;
    let all = [&succeeded, &denied, &own_message, &other_item, &no_reason];
    commit(&store, "insert", |tx| {
        for invocation in all {
            tx.insert_invocation(invocation)?;
        }
        tx.insert_invocation(&running)?;
        tx.update_invocation(InvocationStatus::Running, &closed)
    });
    let conn = raw(&dir.path().join("airlock.sqlite3"));
    let stored = |call: &str| -> (bool, bool, Option<String>) {
        conn.query_row(
            "SELECT outcome IS NULL, result_item IS NULL, result_trust FROM tool_invocations \
             WHERE call_id = ?1",
            [call],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect(call)
    };
    let derived = (true, true, Some("internal_tool".to_owned()));
    let item_derived = (false, true, Some("internal_tool".to_owned()));
    assert_eq!(stored("c1"), derived, "a success");
    assert_eq!(
        stored("c2"),
        item_derived,
        "a denial's outcome is kept (only a success's is derived); its item follows from it"
    );
    assert_eq!(
        stored("c3"),
        item_derived,
        "a message of its own is kept; the item follows from the outcome"
    );
    assert_eq!(stored("c6"), item_derived, "a row without a reason code");
    assert_eq!(
        stored("c4"),
        (false, false, None),
        "an item of another name is kept, and the outcome beside it"
    );
    assert_eq!(stored("c5"), derived, "closed by an update");
    let read = commit(&store, "read", |tx| {
        [
            succeeded.id,
            denied.id,
            own_message.id,
            other_item.id,
            closed.id,
        ]
        .into_iter()
        .map(|id| tx.invocation(id))
        .collect::<Result<Vec<_>, _>>()
    });
    let expected =
        [&succeeded, &denied, &own_message, &other_item, &closed].map(|i| Some((*i).clone()));
    assert_eq!(read, expected.to_vec(), "every row reads back whole");
}

/// M21: a scripted run's pending calls that are its script's are stored by reference to the
/// run's input and read back whole, from a store that kept the input and from one that never
/// saw it (a second process), through every read that meets them: the latest checkpoint, an
/// invocation's raw arguments, a step record's calls and the `checkpoints` view.
#[test]
fn a_pending_call_of_the_runs_script_is_stored_by_reference_and_read_back_whole() {
    let (dir, store) = fresh();
    let content = "y".repeat(600);
    let script_calls = json!([
        [{"argument_trust": {"content": "user", "path": "user"},
          "arguments": {"content": content, "path": "b.txt"},
          "call_id": "c2", "tool": "workspace.write_text"},
         {"arguments": {"content": content, "path": "c.txt"}, "call_id": "c3",
          "tool": "workspace.write_text"}],
        [{"argument_trust": {"path": "user"}, "arguments": {"path": "a.txt"},
          "call_id": "c1", "tool": "workspace.read_text"}]
    ]);
    let steps: Vec<_> = script_calls
        .as_array()
        .expect("steps")
        .iter()
        .map(|calls| json!({"calls": calls}))
        .collect();
    let session = sample_session(1);
    let mut run = sample_run(1, session.id, RunStatus::Running);
    run.planner_input = json!({"final_message": "done", "steps": steps})
        .to_string()
        .into();
    commit(&store, "seed", |tx| {
        tx.insert_session(&session)?;
        tx.insert_run(&run)
    });
    let of_script = |step: usize, index: usize| -> ProposedCall {
        serde_json::from_value(script_calls[step][index].clone()).expect("a call")
    };
    // Step 1: c2 as the script has it, c3 with other arguments than the script's.
    let mut changed = of_script(0, 1);
    changed.arguments = json!({"content": "z", "path": "c.txt"});
    let pinned = |call: ProposedCall| PinnedCall {
        call,
        pinned_version: Some("1.0.0".to_owned()),
    };
    let pending = pending_of_step_one(&run, vec![pinned(of_script(0, 0)), pinned(changed.clone())]);
    let invocation = invocation_of_call(1, &run, &of_script(0, 0));
    let record = write_step_one(&store, &pending, &invocation);

    let conn = raw(&dir.path().join("airlock.sqlite3"));
    let stored: String = conn
        .query_row(
            "SELECT checkpoint_state FROM journal WHERE checkpoint_version = 1",
            [],
            |r| r.get(0),
        )
        .expect("the PENDING row");
    assert!(
        stored.contains(r#""call":{"script_call":[0,0]}"#),
        "c2 by reference: {stored}"
    );
    assert_eq!(
        stored.matches(&content).count(),
        0,
        "the script's content is not repeated: {stored}"
    );
    assert!(stored.contains(r#""content":"z""#), "c3 whole: {stored}");

    let reopened = SqliteStore::open(&dir.path().join("airlock.sqlite3")).expect("reopen");
    for (name, store) in [("the writing store", &store), ("a second store", &reopened)] {
        assert_eq!(
            commit(store, "read", |tx| tx.latest_checkpoint(run.id)).as_ref(),
            Some(&pending),
            "{name}: the checkpoint reads back whole"
        );
        assert_eq!(
            commit(store, "read", |tx| tx.invocation(invocation.id)).as_ref(),
            Some(&invocation),
            "{name}: the invocation's raw arguments resolve"
        );
        assert_eq!(
            commit(store, "read", |tx| tx.step_records(run.id, 0, 10)),
            vec![record.clone()],
            "{name}: the step record's calls resolve"
        );
    }

    let view: String = conn
        .query_row(
            "SELECT state FROM checkpoints WHERE run_id = ?1 AND version = 1",
            [run.id.to_string()],
            |r| r.get(0),
        )
        .expect("the view's row");
    let view: serde_json::Value = serde_json::from_str(&view).expect("JSON");
    assert_eq!(
        view["pending"]["calls"][0],
        json!({"call": script_calls[0][0], "pinned_version": "1.0.0"}),
        "the view shows the script's call"
    );
    assert_eq!(
        view["pending"]["calls"][1]["call"]["arguments"],
        json!({"content": "z", "path": "c.txt"})
    );
    assert_eq!(view["step"], 0);
}

/// M22: a result row's `tool.call.*` events leave out what the row says already (the key
/// prefix that is the event type, the invocation id that is the row's subject, a result item
/// the store rebuilds from the call id, name and three fields) and read back whole through the
/// store and the `events` view; a value the store would not rebuild exactly is kept.
#[test]
fn a_result_rows_events_leave_out_what_the_row_says_and_read_back_whole() {
    use airlock_core::invocation::outcome::ResultItem;
    let (dir, store) = fresh();
    let run = seed_run(&store, 1, RunStatus::Running);
    let subject = "9b0c6a1e-0000-4000-8000-000000000002";
    let structured = json!({"text": "quote \" backslash \\ line\n tab\t é \u{1} </script>",
        "n": [1.5, -0.0, 1e300, 12345678901234567890u64]});
    let item = |call_id: &str, name: &str| {
        ResultItem::success(call_id, name, TrustLevel::ExternalUntrusted, &structured)
            .to_canonical()
    };
    let canonical = item("c1", "demo.external_write");
    let payloads = [
        // Left out: the invocation id and the item.
        json!({"call_id": "c1", "invocation_id": subject, "name": "demo.external_write",
               "reason_code": "tool.succeeded", "result_item": canonical}),
        // Kept: an item of another call id than the payload's, an invocation of another id.
        json!({"call_id": "c1", "invocation_id": "another", "name": "demo.external_write",
               "result_item": item("c9", "demo.external_write")}),
        // Kept: an item that is not canonical text (a space after a colon).
        json!({"call_id": "c1", "name": "demo.external_write",
               "result_item": canonical.replacen("\":", "\": ", 1)}),
        // Only the item left out; only the invocation id left out.
        json!({"call_id": "c1", "name": "demo.external_write", "result_item": canonical}),
        json!({"call_id": "c1", "invocation_id": subject, "step_number": 1}),
    ];
    let appended = commit(&store, "a result-shaped row", |tx| {
        payloads
            .iter()
            .enumerate()
            .map(|(n, payload)| {
                let key = format!("tool.call.result{n}:{subject}");
                let key = if n == 0 {
                    format!("tool.call.completed:{subject}")
                } else {
                    key
                };
                tx.append_event(&sample_event(
                    &run,
                    EventType::ToolCallCompleted,
                    payload.clone(),
                    Some(&key),
                ))
            })
            .collect::<Result<Vec<_>, _>>()
    });

    let conn = raw(&dir.path().join("airlock.sqlite3"));
    let text: String = conn
        .query_row(
            "SELECT events FROM journal WHERE events IS NOT NULL ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("the row");
    let stored: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let first = &stored["e"][0];
    assert_eq!(first["s"], json!(true), "prefix = type: {text}");
    assert_eq!(first["q"], json!(true), "{text}");
    assert_eq!(
        first["r"],
        json!([structured.to_string(), false, "external_untrusted"]),
        "{text}"
    );
    assert_eq!(
        first["p"],
        json!({"call_id": "c1", "name": "demo.external_write", "reason_code": "tool.succeeded"})
    );
    assert_eq!(text.matches(subject).count(), 0, "{text}");
    for kept in [&stored["e"][1], &stored["e"][2]] {
        assert!(
            kept.get("r").is_none() && kept["p"]["result_item"].is_string(),
            "{kept}"
        );
        assert!(
            kept["s"].is_string(),
            "a prefix that is not the type: {kept}"
        );
    }
    assert_eq!(stored["e"][1]["p"]["invocation_id"], "another");
    assert!(stored["e"][1].get("q").is_none());
    assert!(stored["e"][3].get("q").is_none() && stored["e"][3]["r"].is_array());
    assert!(stored["e"][4]["q"] == json!(true) && stored["e"][4].get("r").is_none());

    let read = commit(&store, "read", |tx| tx.events_of_run(run.id, None, 100));
    assert_eq!(read, appended, "the store reads every event back whole");

    let viewed: Vec<(String, String)> = conn
        .prepare("SELECT payload, derivation_key FROM events ORDER BY id")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("view rows");
    assert_eq!(viewed.len(), appended.len());
    for (event, (payload, key)) in appended.iter().zip(&viewed) {
        let payload: serde_json::Value = serde_json::from_str(payload).expect("JSON");
        assert_eq!(payload, event.payload, "the view's payload: {key}");
        assert_eq!(
            payload["result_item"].as_str(),
            event.payload["result_item"].as_str(),
            "the item's text, byte for byte"
        );
        assert_eq!(Some(key), event.derivation_key.as_ref());
    }
}

/// M23: a call's policy decision is kept once per distinct text and reads back whole; an update
/// that changes it refers to the new text; a text added by a transaction that rolled back is
/// not referred to by a later one; a row holding its text inline (written before M23) reads as
/// it did, and no row may hold both.
#[test]
fn a_policy_decisions_text_is_kept_once_and_read_back_whole() {
    let (dir, store) = fresh();
    let run = seed_run(&store, 1, RunStatus::Running);
    let first = sample_invocation(1, &run, 1, "c1", InvocationStatus::Running);
    let second = sample_invocation(2, &run, 2, "c2", InvocationStatus::Running);
    let mut other = sample_invocation(3, &run, 3, "c3", InvocationStatus::Running);
    if let Some(decision) = other.policy_decision.as_mut() {
        decision.explanation = "another \"explanation\"".to_owned();
    }
    commit(&store, "two calls of one decision", |tx| {
        tx.insert_invocation(&first)?;
        tx.insert_invocation(&second)
    });
    // A transaction that adds a new text, then fails: its text is gone with it.
    let failed = store.transact(|tx| {
        tx.insert_invocation(&other)?;
        Err::<(), _>(TxError::Conflict("rolled back on purpose".to_owned()))
    });
    assert!(failed.is_err());
    commit(&store, "the other decision", |tx| {
        tx.insert_invocation(&other)
    });
    let mut changed = first.clone();
    changed.policy_decision = other.policy_decision.clone();
    changed.updated_at = at(5);
    commit(&store, "an update to the other decision", |tx| {
        tx.update_invocation(InvocationStatus::Running, &changed)
    });

    let conn = raw(&dir.path().join("airlock.sqlite3"));
    let texts: i64 = conn
        .query_row("SELECT COUNT(*) FROM policy_decision_texts", [], |r| {
            r.get(0)
        })
        .expect("count");
    assert_eq!(texts, 2, "one row per distinct text");
    let inline: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM tool_invocations WHERE policy_decision IS NOT NULL \
             OR policy_decision_id IS NULL",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(inline, 0, "every row refers to its text");
    for invocation in [&changed, &second, &other] {
        assert_eq!(
            commit(&store, "read", |tx| tx.invocation(invocation.id)).as_ref(),
            Some(invocation),
            "{} reads back whole",
            invocation.call_id
        );
    }

    // A row as M22 wrote it: its text inline.
    let text: String = conn
        .query_row(
            "SELECT text FROM policy_decision_texts WHERE id = \
             (SELECT policy_decision_id FROM tool_invocations WHERE id = ?1)",
            [second.id.to_string()],
            |r| r.get(0),
        )
        .expect("text");
    let edited = conn
        .execute(
            "UPDATE tool_invocations SET policy_decision = ?2, policy_decision_id = NULL \
             WHERE id = ?1",
            [second.id.to_string(), text.clone()],
        )
        .expect("an inline row");
    assert_eq!(edited, 1);
    let reopened = SqliteStore::open(&dir.path().join("airlock.sqlite3")).expect("reopen");
    assert_eq!(
        commit(&reopened, "read", |tx| tx.invocation(second.id)).as_ref(),
        Some(&second),
        "an inline text reads as before"
    );
    // An update that keeps the decision keeps it as stored: inline here.
    let mut later = second.clone();
    later.updated_at = at(9);
    commit(&reopened, "an update keeping the decision", |tx| {
        tx.update_invocation(InvocationStatus::Running, &later)
    });
    let (inline_text, id): (Option<String>, Option<i64>) = conn
        .query_row(
            "SELECT policy_decision, policy_decision_id FROM tool_invocations WHERE id = ?1",
            [second.id.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("row");
    assert_eq!((inline_text, id), (Some(text.clone()), None));
    assert_eq!(
        commit(&reopened, "read", |tx| tx.invocation(second.id)).as_ref(),
        Some(&later)
    );
    let both = conn.execute(
        "UPDATE tool_invocations SET policy_decision_id = 1 WHERE id = ?1",
        [second.id.to_string()],
    );
    assert!(
        both.is_err_and(|e| e
            .to_string()
            .contains("ck_tool_invocations_policy_decision_once")),
        "a row with both is refused"
    );
}

/// A pending call whose arguments nest as deep as a call's may (128 levels) reads back through
/// every read that meets it, whole (a gateway's call) or by reference to its script (M21): the
/// stored state nests it a few levels deeper, past serde_json's default limit of 128.
#[test]
fn a_pending_call_nested_as_deep_as_arguments_may_reads_back() {
    use airlock_core::tool::spec::MAX_ARGUMENT_DEPTH;
    let nested = (1..MAX_ARGUMENT_DEPTH).fold(json!({}), |inner, _| json!({ "a": inner }));
    let call = ProposedCall {
        call_id: "deep".to_owned(),
        tool: TOOL.to_owned(),
        version: None,
        arguments: nested,
        argument_trust: BTreeMap::new(),
    };
    for (n, input) in [
        (1, "{}".to_owned()),
        (2, json!({"steps": [{"calls": [call.clone()]}]}).to_string()),
    ] {
        let (dir, store) = fresh();
        let session = sample_session(n);
        let mut run = sample_run(n, session.id, RunStatus::Running);
        run.planner_input = input.into();
        commit(&store, "seed", |tx| {
            tx.insert_session(&session)?;
            tx.insert_run(&run)
        });
        let pending = pending_of_step_one(
            &run,
            vec![PinnedCall {
                call: call.clone(),
                pinned_version: None,
            }],
        );
        let invocation = invocation_of_call(n, &run, &call);
        let record = write_step_one(&store, &pending, &invocation);
        let stored: String = raw(&dir.path().join("airlock.sqlite3"))
            .query_row(
                "SELECT checkpoint_state FROM journal WHERE checkpoint_version = 1",
                [],
                |r| r.get(0),
            )
            .expect("the PENDING row");
        assert_eq!(
            stored.contains("script_call"),
            n == 2,
            "run {n}: by reference only to a script: {stored:.80}"
        );
        let reopened = SqliteStore::open(&dir.path().join("airlock.sqlite3")).expect("reopen");
        assert_eq!(
            commit(&reopened, "read", |tx| tx.latest_checkpoint(run.id)).as_ref(),
            Some(&pending),
            "run {n}: the checkpoint"
        );
        assert_eq!(
            commit(&reopened, "read", |tx| tx.invocation(invocation.id)).as_ref(),
            Some(&invocation),
            "run {n}: the invocation"
        );
        assert_eq!(
            commit(&reopened, "read", |tx| tx.step_records(run.id, 0, 10)),
            vec![record],
            "run {n}: the step record"
        );
    }
}

/// A RUNNING run (sample 1) with one AUTHORIZED call.
fn seed_run_and_call(store: &SqliteStore) -> (Run, Invocation) {
    let run = seed_run(store, 1, RunStatus::Running);
    let invocation = seed_invocation(
        store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::Authorized),
    );
    (run, invocation)
}

/// The run and the call as the writer reads them in a transaction of its own.
fn read_run_and_call(
    store: &SqliteStore,
    run: &Run,
    invocation: &Invocation,
) -> (Option<Run>, Option<Invocation>) {
    commit(store, "read", |tx| {
        Ok((tx.run(run.id)?, tx.invocation(invocation.id)?))
    })
}

/// The writer answers a run or an invocation it wrote or read in an earlier transaction from
/// memory (the `recent` module); another connection's commit makes it read the row again.
#[test]
fn the_writers_memory_of_earlier_transactions_gives_way_to_another_connections_commit() {
    let (dir, store) = fresh();
    let (run, invocation) = seed_run_and_call(&store);
    // Read once by the writer: both are now kept between its transactions.
    let (kept_run, kept_invocation) = read_run_and_call(&store, &run, &invocation);
    assert_eq!(kept_run.as_ref(), Some(&run));
    assert_eq!(kept_invocation.as_ref(), Some(&invocation));

    let conn = raw(&dir.path().join("airlock.sqlite3"));
    conn.execute("UPDATE runs SET attempts = attempts + 7", [])
        .expect("another connection changes the run");
    conn.execute(
        "UPDATE tool_invocations SET updated_at = updated_at + 1000",
        [],
    )
    .expect("another connection changes the invocation");

    let (now_run, now_invocation) = read_run_and_call(&store, &run, &invocation);
    assert_eq!(
        now_run.map(|r| r.attempts),
        Some(run.attempts + 7),
        "the writer read the run another connection changed"
    );
    let now_updated = now_invocation.map(|i| i.updated_at);
    assert!(
        now_updated.is_some_and(|updated| updated > invocation.updated_at),
        "the writer read the invocation another connection changed: {now_updated:?}"
    );
}

/// A transaction that fails is undone, and the writer forgets what it
/// wrote: the next transaction reads the row as stored, not as the failed one left it.
#[test]
fn a_failed_transactions_writes_are_not_remembered_by_the_writer() {
    let (_dir, store) = fresh();
    let (run, invocation) = seed_run_and_call(&store);
    let guard = guard_of(&run);
    let mut counted = run.clone();
    counted.step_count += 1;
    let mut started = invocation.clone();
    started.status = InvocationStatus::Running;
    started.effect_sent_at = Some(at(1));
    let failed = store.transact(|tx| -> Result<(), TxError> {
        tx.update_run(&guard, &counted)?;
        tx.update_invocation(InvocationStatus::Authorized, &started)?;
        Err(TxError::Conflict("this transaction fails".to_owned()))
    });
    assert_eq!(
        failed,
        Err(TxError::Conflict("this transaction fails".to_owned()))
    );
    let (after_run, after_invocation) = read_run_and_call(&store, &run, &invocation);
    assert_eq!(after_run, Some(run), "the run as stored");
    assert_eq!(
        after_invocation,
        Some(invocation),
        "the invocation as stored"
    );
}

/// The heartbeat changes a run's lease by a statement whose result the writer does not keep:
/// the run is read from its row afterwards, not from what an earlier transaction saw.
#[test]
fn a_heartbeat_makes_the_writer_read_the_run_again() {
    let (_dir, store) = fresh();
    let run = seed_run(&store, 1, RunStatus::Running);
    assert_eq!(
        commit(&store, "read", |tx| tx.run(run.id)),
        Some(run.clone())
    );
    let lease = run.lease().expect("a RUNNING sample holds its lease");
    let until = at(LEASE_SECONDS + 60);
    commit(&store, "heartbeat", |tx| tx.heartbeat(&lease, until, at(1)));
    let after = commit(&store, "read", |tx| tx.run(run.id));
    let expires = after.map(|r| match r.state {
        RunState::Running {
            lease_expires_at, ..
        } => Some(lease_expires_at),
        _ => None,
    });
    assert_eq!(expires, Some(Some(until)), "the renewed lease is read");
}

/// Members share one transaction without a savepoint each: a member that fails after writing
/// is undone by rolling the group back and replaying the members before it (the `write_log`
/// module). The member before it commits with the group, as if nothing had happened; nothing
/// of the failed one remains.
#[test]
fn a_member_that_fails_after_writing_is_undone_and_its_group_mate_commits() {
    let (dir, store) = fresh();
    let store = Arc::new(store);
    let first_run = seed_run(&*store, 1, RunStatus::Running);
    let second_run = seed_run(&*store, 2, RunStatus::Running);
    let before = store.group_stats();
    let arrived = Arc::new(Barrier::new(2));

    let second = {
        let (store, run, arrived) = (Arc::clone(&store), second_run.clone(), Arc::clone(&arrived));
        thread::spawn(move || {
            arrived.wait();
            store.transact(|tx| -> Result<(), TxError> {
                let mut counted = run.clone();
                counted.step_count += 1;
                tx.update_run(&guard_of(&run), &counted)?;
                tx.insert_invocation(&sample_invocation(
                    9,
                    &run,
                    1,
                    "c9",
                    InvocationStatus::Authorized,
                ))?;
                Err(TxError::Conflict(
                    "the second member fails after writing".to_owned(),
                ))
            })
        })
    };
    let mut first_counted = first_run.clone();
    first_counted.step_count += 1;
    let first = store.transact(|tx| {
        arrived.wait();
        // Long enough for the second caller to queue behind this member.
        thread::sleep(Duration::from_millis(300));
        tx.append_event(&sample_event(
            &first_run,
            EventType::RunStarted,
            json!({"n": 1}),
            Some("first"),
        ))?;
        tx.update_run(&guard_of(&first_run), &first_counted)
    });
    let second = second.join().expect("second thread");

    assert_eq!(first, Ok(first_counted.clone()), "the first member commits");
    assert_eq!(
        second,
        Err(TxError::Conflict(
            "the second member fails after writing".to_owned()
        ))
    );
    let after = store.group_stats();
    assert_eq!(after.groups - before.groups, 1, "both shared one COMMIT");

    let conn = raw(&dir.path().join("airlock.sqlite3"));
    let steps: Vec<(String, i64)> = conn
        .prepare("SELECT id, step_count FROM runs ORDER BY id")
        .expect("query")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(
        steps,
        vec![
            (first_run.id.to_string(), 1),
            (second_run.id.to_string(), 0)
        ],
        "the first member's update is kept, the second's undone"
    );
    let invocations: i64 = conn
        .query_row("SELECT COUNT(*) FROM tool_invocations", [], |r| r.get(0))
        .expect("count");
    assert_eq!(invocations, 0, "the failed member's invocation is undone");
    let events: Vec<String> = conn
        .prepare("SELECT derivation_key FROM events ORDER BY id")
        .expect("query")
        .query_map([], |r| r.get(0))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(
        events,
        vec!["first".to_owned()],
        "the first member's event is kept"
    );
    // The writer's memory agrees with the rows.
    assert_eq!(
        commit(&*store, "read", |tx| Ok((
            tx.run(first_run.id)?,
            tx.run(second_run.id)?
        ))),
        (Some(first_counted), Some(second_run))
    );
}
