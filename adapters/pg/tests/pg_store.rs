//! What the PostgreSQL store does beyond the Store contract (SPEC §18): schema refusal and
//! migration races, PostgreSQL itself enforcing the append-only rules, NOTIFY only after a
//! commit that queued a run, the lost-COMMIT rule, SKIP LOCKED claims and the round trips a
//! transaction costs. Each test works in schemas of its own on `AIRLOCK_TEST_PG_URL`.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use airlock_core::events::EventType;
use airlock_core::store::{CallIdentity, Store, TwinScope, TxError};
use airlock_core::testing::fixtures::*;
use airlock_core::time::Timestamp;
use airlock_core::vocab::{InvocationStatus, RunStatus};
use airlock_pg::{PgError, PgSettings, PgStore, SchemaAction};
use serde_json::json;

fn open(url: &str, schema: &str, action: SchemaAction) -> Result<PgStore, PgError> {
    PgStore::open_with(
        url,
        action,
        &PgSettings {
            schema: Some(schema.to_owned()),
            ..PgSettings::default()
        },
    )
}

#[test]
fn open_refuses_a_database_without_the_schema_and_creates_nothing() {
    let Some(url) = common::server("open_refuses_a_database_without_the_schema") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("empty");
    cleanup.add(&schema);
    common::execute(&url, "public", &format!("CREATE SCHEMA {schema}")).expect("schema");
    let refused = open(&url, &schema, SchemaAction::RequireCurrent).expect_err("no schema");
    assert!(
        matches!(refused, PgError::SchemaMissing { .. }),
        "{refused:?}"
    );
    let tables = common::query_texts(
        &url,
        &schema,
        &format!("SELECT COUNT(*) FROM pg_tables WHERE schemaname = '{schema}'"),
    );
    assert_eq!(tables, ["0"], "a refused open creates nothing");
    // The commands that start work migrate; afterwards the others open it.
    open(&url, &schema, SchemaAction::Migrate).expect("migrate");
    open(&url, &schema, SchemaAction::RequireCurrent).expect("now it is there");
}

#[test]
fn open_refuses_a_schema_it_does_not_know() {
    let Some(url) = common::server("open_refuses_a_schema_it_does_not_know") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);

    // An append-only trigger dropped by hand.
    let edited = common::fresh_schema("edited");
    cleanup.add(&edited);
    drop(common::store_in(&url, &edited));
    common::execute(&url, &edited, "DROP TRIGGER events_append_only ON events").expect("drop");
    for action in [SchemaAction::RequireCurrent, SchemaAction::Migrate] {
        let refused = open(&url, &edited, action).expect_err("a trigger is missing");
        let message = refused.to_string();
        assert!(
            matches!(refused, PgError::SchemaUnknown { .. }),
            "{refused:?}"
        );
        assert!(message.contains("events_append_only"), "{message}");
    }

    // A newer build's migration in the history.
    let newer = common::fresh_schema("newer");
    cleanup.add(&newer);
    drop(common::store_in(&url, &newer));
    common::execute(
        &url,
        &newer,
        &format!(
            "INSERT INTO refinery_schema_history (version, name, applied_on, checksum) \
             VALUES ({}, 'from_the_future', '2030-01-01T00:00:00Z', '1')",
            airlock_pg::SCHEMA_VERSION + 1
        ),
    )
    .expect("history row");
    for action in [SchemaAction::RequireCurrent, SchemaAction::Migrate] {
        let refused = open(&url, &newer, action).expect_err("a newer schema");
        assert!(
            refused.to_string().contains("newer than this build"),
            "{refused}"
        );
    }

    // A migration recorded with another checksum (its file was edited after it ran).
    let changed = common::fresh_schema("changed");
    cleanup.add(&changed);
    drop(common::store_in(&url, &changed));
    common::execute(
        &url,
        &changed,
        "UPDATE refinery_schema_history SET checksum = '42' WHERE version = 1",
    )
    .expect("edit history");
    let refused = open(&url, &changed, SchemaAction::RequireCurrent).expect_err("checksum");
    assert!(refused.to_string().contains("checksum"), "{refused}");
}

/// V5 upgrades a store of V4 in place (SPEC §22.1): its connections, open or closed (whose
/// trigger otherwise refuses any change), become conversations untainted, with no calls, last
/// seen when they opened; the result is the schema a new store gets.
#[test]
fn v5_upgrades_a_v4_store_in_place() {
    let Some(url) = common::server("v5_upgrades_a_v4_store_in_place") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("upgrade");
    cleanup.add(&schema);
    // The previous build's migrations, exactly as it recorded them (name, version, checksum).
    let previous = [
        (
            "V1__airlock_schema",
            include_str!("../migrations/V1__airlock_schema.sql"),
        ),
        (
            "V2__connections_api_tokens_event_order",
            include_str!("../migrations/V2__connections_api_tokens_event_order.sql"),
        ),
        (
            "V3__call_twins",
            include_str!("../migrations/V3__call_twins.sql"),
        ),
        (
            "V4__runs_by_tenant",
            include_str!("../migrations/V4__runs_by_tenant.sql"),
        ),
    ]
    .iter()
    .map(|(name, sql)| refinery::Migration::unapplied(name, sql).expect("migration"))
    .collect::<Vec<_>>();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let (mut client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        client
            .batch_execute(&format!(
                "CREATE SCHEMA \"{schema}\"; SET search_path = \"{schema}\""
            ))
            .await
            .expect("schema");
        refinery::Runner::new(&previous)
            .run_async(&mut client)
            .await
            .expect("V1..V4");
    });
    common::execute(
        &url,
        &schema,
        &format!(
            "INSERT INTO sessions (id, tenant_id, principal_id, created_at) VALUES \
             ('{s1}', '{TENANT}', 'alice', 1), ('{s2}', '{TENANT}', 'alice', 1); \
             INSERT INTO connections (id, tenant_id, principal_id, session_id, gateway_id, \
             status, alive_until, opened_at) VALUES \
             ('00000000-0000-0000-0000-0000000000c1', '{TENANT}', 'alice', '{s1}', 'g', 'open', \
             900, 100); \
             INSERT INTO connections (id, tenant_id, principal_id, session_id, gateway_id, \
             status, closed_at, close_reason, opened_at) VALUES \
             ('00000000-0000-0000-0000-0000000000c2', '{TENANT}', 'alice', '{s2}', 'g', \
             'closed', 300, 'expired', 200)",
            s1 = session_id(1),
            s2 = session_id(2),
        ),
    )
    .expect("V4 rows");

    let store = common::store_in(&url, &schema);
    let upgraded = store
        .read(|tx| tx.connections_of_tenant(TENANT, 10))
        .expect("read");
    let summary: Vec<_> = upgraded
        .iter()
        .map(|c| {
            (
                c.opened_at.as_micros(),
                c.is_open(),
                c.taint.clone(),
                c.call_count,
                c.last_seen_at.as_micros(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![(200, false, None, 0, 200), (100, true, None, 0, 100),],
        "newest first; untainted, no calls, last seen when opened"
    );
    let enabled = common::query_texts(
        &url,
        &schema,
        "SELECT tgenabled FROM pg_trigger WHERE tgname = 'connections_guarded' \
         AND tgrelid = 'connections'::regclass",
    );
    assert_eq!(enabled, ["O"], "the guard trigger is on again");
    let reopened = common::execute(
        &url,
        &schema,
        "UPDATE connections SET call_count = 1 WHERE status = 'closed'",
    )
    .expect_err("a closed connection never changes");
    assert!(reopened.contains("never changes"), "{reopened}");
    open(&url, &schema, SchemaAction::RequireCurrent).expect("the upgraded schema is current");
}

#[test]
fn concurrent_first_opens_migrate_once() {
    let Some(url) = common::server("concurrent_first_opens_migrate_once") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("race");
    cleanup.add(&schema);
    let opened: Vec<Result<PgStore, PgError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| open(&url, &schema, SchemaAction::Migrate)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    for result in &opened {
        assert!(result.is_ok(), "{:?}", result.as_ref().err());
    }
    let history = common::query_texts(
        &url,
        &schema,
        "SELECT COUNT(*) FROM refinery_schema_history",
    );
    assert_eq!(
        history,
        [airlock_pg::SCHEMA_VERSION.to_string()],
        "each migration recorded once"
    );
}

#[test]
fn postgres_itself_rejects_changes_to_audit_rows() {
    let Some(url) = common::server("postgres_itself_rejects_changes_to_audit_rows") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("audit");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let run = seed_run(&store, 1, RunStatus::Running);
    commit(&store, "audit rows", |tx| {
        tx.append_event(&sample_event(
            &run,
            airlock_core::events::EventType::RunStarted,
            json!({}),
            Some("k1"),
        ))?;
        tx.insert_step_record(&sample_step_record(run.id, 1), None)?;
        tx.insert_policy_profile(&sample_policy_profile("v1"))
            .map(drop)
    });
    for sql in [
        "UPDATE events SET payload = '{}'",
        "DELETE FROM events",
        "TRUNCATE events CASCADE",
        "UPDATE step_records SET calls = '[]'",
        "DELETE FROM policy_profiles",
    ] {
        let refused = common::execute(&url, &schema, sql).expect_err(sql);
        assert!(refused.contains("append-only"), "{sql}: {refused}");
    }
    // A duplicate session sequence, written around the store, meets the unique constraint.
    let duplicate = common::execute(
        &url,
        &schema,
        "INSERT INTO events (session_id, run_id, sequence, event_type, payload_schema_version, \
         actor_type, payload, created_at) SELECT session_id, run_id, sequence, event_type, \
         payload_schema_version, actor_type, payload, created_at FROM events",
    )
    .expect_err("a repeated sequence");
    assert!(
        duplicate.contains("uq_events_session_sequence"),
        "{duplicate}"
    );
}

/// The rules of migrations V2 and V5 hold for any writer, not only through the store: a token
/// changes only by its one revocation and is never deleted; a connection keeps its identity, a
/// closed one never changes, its columns agree with its status, its taint's time and cause are
/// set together, and its call counter is never negative.
#[test]
fn postgres_itself_guards_tokens_and_connections() {
    let Some(url) = common::server("postgres_itself_guards_tokens_and_connections") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("guards");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let run = seed_run(&store, 1, RunStatus::Queued);
    let session = run.session_id;
    let digest = "a".repeat(64);
    common::execute(
        &url,
        &schema,
        &format!(
            "INSERT INTO api_tokens (id, tenant_id, principal_id, scopes, token_sha256, \
             created_at) VALUES ('t1', 'acme', 'alice', '[]', '{digest}', 1); \
             INSERT INTO connections (id, tenant_id, principal_id, session_id, gateway_id, \
             status, alive_until, opened_at, last_seen_at) VALUES ('c1', 'acme', 'alice', \
             '{session}', 'g', 'open', 10, 1, 1)"
        ),
    )
    .expect("rows written around the store");
    for (sql, refusal) in [
        (
            "UPDATE api_tokens SET label = 'x'",
            "only revoked_at changes",
        ),
        ("DELETE FROM api_tokens", "revoke a token instead"),
        ("TRUNCATE api_tokens", "append-only"),
        (
            "UPDATE api_tokens SET revoked_at = 5, label = 'x'",
            "only revoked_at changes",
        ),
        (
            "INSERT INTO api_tokens (id, tenant_id, principal_id, scopes, token_sha256, \
             created_at) VALUES ('t2', 'acme', 'alice', '[]', 'short', 1)",
            "ck_api_tokens_token_sha256",
        ),
        (
            "UPDATE connections SET gateway_id = 'other'",
            "immutable field",
        ),
        ("DELETE FROM connections", "close a connection instead"),
        (
            "UPDATE connections SET status = 'closed'",
            "ck_connections_alive_iff_open",
        ),
        (
            "INSERT INTO connections (id, tenant_id, principal_id, session_id, gateway_id, \
             status, alive_until, opened_at, last_seen_at) SELECT 'c2', tenant_id, \
             principal_id, session_id, gateway_id, status, alive_until, opened_at, \
             last_seen_at FROM connections",
            "uq_connections_session",
        ),
        (
            "UPDATE connections SET tainted_at = 5",
            "ck_connections_taint_together",
        ),
        (
            "UPDATE connections SET tainted_by = 'invocation x'",
            "ck_connections_taint_together",
        ),
        (
            "UPDATE connections SET call_count = -1",
            "ck_connections_call_count",
        ),
        ("UPDATE connections SET last_seen_at = NULL", "last_seen_at"),
    ] {
        let refused = common::execute(&url, &schema, sql).expect_err(sql);
        assert!(refused.contains(refusal), "{sql}: {refused}");
    }
    common::execute(&url, &schema, "UPDATE api_tokens SET revoked_at = 5")
        .expect("the one revocation");
    let again = common::execute(&url, &schema, "UPDATE api_tokens SET revoked_at = 6")
        .expect_err("a second revocation");
    assert!(again.contains("only once"), "{again}");
    common::execute(
        &url,
        &schema,
        "UPDATE connections SET status = 'closed', alive_until = NULL, closed_at = 20, \
         close_reason = 'expired'",
    )
    .expect("closing");
    let reopened = common::execute(
        &url,
        &schema,
        "UPDATE connections SET status = 'open', alive_until = 30, closed_at = NULL, \
         close_reason = NULL",
    )
    .expect_err("a closed connection never changes");
    assert!(reopened.contains("never changes"), "{reopened}");
}

#[test]
fn a_commit_that_queues_a_run_notifies_and_a_rollback_does_not() {
    let Some(url) = common::server("a_commit_that_queues_a_run_notifies") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("notify");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let (sender, received) = mpsc::channel();
    let sender = std::sync::Mutex::new(sender);
    let _listener = store.listen(move |run| {
        let _ = sender.lock().map(|s| s.send(run));
    });
    // The listener connects in the background: queue runs until one is heard.
    let mut heard = None;
    for n in 1..=50 {
        let run = seed_run(&store, n, RunStatus::Queued);
        if let Ok(id) = received.recv_timeout(Duration::from_millis(200)) {
            assert_eq!(id, run.id, "the notification names the queued run");
            heard = Some(n);
            break;
        }
    }
    let heard = heard.expect("a queued run was notified within 10 s");
    // Not queued: no notification. Queued but rolled back: none either.
    seed_run(&store, 100, RunStatus::Running);
    let rolled_back: Result<(), TxError> = store.transact(|tx| {
        let session = sample_session(101);
        tx.insert_session(&session)?;
        tx.insert_run(&sample_run(101, session.id, RunStatus::Queued))?;
        Err(TxError::Conflict("changed my mind".to_owned()))
    });
    assert!(rolled_back.is_err());
    let committed = seed_run(&store, heard + 200, RunStatus::Queued);
    let next = received
        .recv_timeout(Duration::from_secs(5))
        .expect("the next commit is heard");
    assert_eq!(
        next, committed.id,
        "neither the RUNNING run nor the rolled-back QUEUED one was notified"
    );
}

#[test]
fn a_lost_commit_answer_is_a_backend_error_never_retried() {
    let Some(base) = common::server("a_lost_commit_answer_is_a_backend_error") else {
        return;
    };
    let cleanup = common::Cleanup::new(&base);
    let schema = common::fresh_schema("lost");
    cleanup.add(&schema);
    drop(common::store_in(&base, &schema));
    let app = format!("airlock_{schema}");
    let separator = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{separator}application_name={app}");
    let store = open(&url, &schema, SchemaAction::RequireCurrent).expect("open");
    let session = sample_session(1);
    let result = store.transact(|tx| {
        tx.insert_session(&session)?;
        // The server goes away between the last statement and the COMMIT.
        common::execute(
            &base,
            "public",
            &format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = '{app}' AND state = 'idle in transaction'"
            ),
        )
        .map_err(TxError::Backend)?;
        Ok(())
    });
    match &result {
        Err(TxError::Backend(message)) => {
            assert!(message.contains("COMMIT's outcome is unknown"), "{message}")
        }
        other => panic!("a lost COMMIT answer must be Backend, got {other:?}"),
    }
    // Nothing was retried behind the caller's back, and the store goes on with a new connection.
    assert_eq!(store.read(|tx| tx.session(session.id)).expect("read"), None);
    commit(&store, "after the lost connection", |tx| {
        tx.insert_session(&session)
    });
}

#[test]
fn claims_skip_a_run_another_worker_is_claiming() {
    let Some(url) = common::server("claims_skip_a_run_another_worker_is_claiming") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("claims");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let first = seed_run(&store, 1, RunStatus::Queued);
    let second = seed_run(&store, 2, RunStatus::Queued);
    let (holding, held) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let store = &store;
        let claimer = scope.spawn(move || {
            store.transact(|tx| {
                let run = tx.next_claimable_run(at(100), None)?;
                let _ = holding.send(run.map(|r| r.id));
                let _ = released.recv_timeout(Duration::from_secs(10));
                Ok(())
            })
        });
        let first_claim = held
            .recv_timeout(Duration::from_secs(10))
            .expect("claiming");
        assert_eq!(first_claim, Some(first.id), "the oldest due run");
        let started = std::time::Instant::now();
        let other = store
            .transact(|tx| tx.next_claimable_run(at(100), None))
            .expect("a second claim");
        assert_eq!(
            other.map(|r| r.id),
            Some(second.id),
            "a run locked by another claim is skipped"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the second claim did not wait for the first"
        );
        release.send(()).expect("release");
        claimer
            .join()
            .expect("thread")
            .expect("first claim commits");
    });
}

#[test]
fn a_transaction_costs_its_statements_plus_one_round_trip() {
    let Some(url) = common::server("a_transaction_costs_its_statements_plus_one") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("trips");
    cleanup.add(&schema);
    let settings = PgSettings {
        schema: Some(schema.clone()),
        pool_size: 1,
    };
    let store = PgStore::open_with(&url, SchemaAction::RequireCurrent, &settings)
        .or_else(|_| PgStore::open_with(&url, SchemaAction::Migrate, &settings))
        .expect("open");
    let run = seed_run(&store, 1, RunStatus::Queued);
    let cost = |f: &dyn Fn()| {
        f(); // prepares the statements on the pool's one connection
        let before = store.round_trips();
        f();
        store.round_trips().round_trips - before.round_trips
    };
    // BEGIN travels with the first statement. A transaction that wrote nothing sends its
    // COMMIT without waiting for the answer.
    assert_eq!(
        cost(&|| {
            store.read(|tx| tx.run(run.id)).expect("read");
        }),
        1
    );
    assert_eq!(
        cost(&|| {
            store
                .transact(|tx| {
                    tx.run(run.id)?;
                    tx.count_runs(RunStatus::Queued)
                })
                .expect("two reads");
        }),
        2
    );
    // A run read again is answered from the transaction's kept row; a guarded update of a
    // locked row is sent ahead and answered with the COMMIT.
    assert_eq!(
        cost(&|| {
            store
                .transact(|tx| {
                    let current = tx.run(run.id)?.ok_or(TxError::NotFound)?;
                    let mut next = tx.run(run.id)?.ok_or(TxError::NotFound)?;
                    next.updated_at = Timestamp::from_micros(current.updated_at.as_micros() + 1);
                    let guard = airlock_core::run::RunGuard {
                        run_id: run.id,
                        status: RunStatus::Queued,
                        lease: None,
                    };
                    tx.update_run(&guard, &next)?;
                    tx.run(run.id)
                })
                .expect("read, read, update, read");
        }),
        2
    );
    // After a transaction's first append, appends whose id, sequence and key are known are
    // sent ahead; a key of a new subject costs one read of the subject's keys.
    let subjects = std::cell::Cell::new(0);
    assert_eq!(
        cost(&|| {
            subjects.set(subjects.get() + 1);
            let subject = format!("s{}", subjects.get());
            store
                .transact(|tx| {
                    tx.run(run.id)?;
                    tx.append_event(&sample_event(&run, EventType::RunStarted, json!({}), None))?;
                    for kind in ["tool.call.proposed", "tool.call.authorized"] {
                        let key = format!("{kind}:{subject}");
                        let event =
                            sample_event(&run, EventType::RunStarted, json!({}), Some(&key));
                        tx.append_event(&event)?;
                    }
                    tx.append_event(&sample_event(&run, EventType::RunStarted, json!({}), None))
                })
                .expect("four appends");
        }),
        4,
        "the run, the first append, the subject's keys, the COMMIT"
    );
    // An inserted invocation is sent ahead, and its events with it: its id is new, so no key
    // of its subject is taken.
    let calls = std::cell::Cell::new(0);
    assert_eq!(
        cost(&|| {
            calls.set(calls.get() + 1);
            let n = 100 + calls.get();
            let call_id = format!("c{n}");
            let invocation = sample_invocation(n, &run, 1, &call_id, InvocationStatus::Authorized);
            store
                .transact(|tx| {
                    tx.run(run.id)?;
                    tx.append_event(&sample_event(&run, EventType::RunStarted, json!({}), None))?;
                    tx.insert_invocation(&invocation)?;
                    for key in [
                        airlock_core::events::keys::proposed(invocation.id),
                        airlock_core::events::keys::authorized(invocation.id),
                    ] {
                        let event =
                            sample_event(&run, EventType::RunStarted, json!({}), Some(&key));
                        tx.append_event(&event)?;
                    }
                    Ok(())
                })
                .expect("an invocation and its events");
        }),
        3,
        "the run, the first append, the COMMIT"
    );
    // A lease holder's first read brings, in the same exchange, its run's open invocations
    // with the keys of their subjects and its session's event counter with ids: its reads of
    // those invocations and every append to the run's session then need no exchange.
    let leased = seed_run(&store, 2, RunStatus::Running);
    let lease = leased.lease().expect("a RUNNING sample holds its lease");
    let running: Vec<_> = (0..2)
        .map(|i| {
            let call_id = format!("r{i}");
            seed_invocation(
                &store,
                sample_invocation(200 + i, &leased, 1, &call_id, InvocationStatus::Running),
            )
        })
        .collect();
    let next_running = std::cell::Cell::new(0);
    assert_eq!(
        cost(&|| {
            let invocation = &running[next_running.get()];
            next_running.set(next_running.get() + 1);
            store
                .transact(|tx| {
                    tx.guard_lease(&lease)?;
                    let kept = tx.invocation(invocation.id)?;
                    assert_eq!(kept.as_ref(), Some(invocation), "the open invocation, kept");
                    let key = airlock_core::events::keys::result(invocation.id);
                    let event = sample_event(&leased, EventType::RunStarted, json!({}), Some(&key));
                    tx.append_event(&event)?;
                    tx.append_event(&sample_event(
                        &leased,
                        EventType::RunStarted,
                        json!({}),
                        None,
                    ))
                })
                .expect("a lease holder's reads and appends");
        }),
        2,
        "the run with its open invocations, their keys and its session's counter; the COMMIT"
    );
    let stored = store
        .read(|tx| tx.events_of_run(leased.id, None, 100))
        .expect("read");
    assert_eq!(stored.len(), 4, "every append stored: {stored:?}");
    assert!(
        stored
            .windows(2)
            .all(|w| w[0].id < w[1].id && w[0].sequence + 1 == w[1].sequence),
        "ids ascend with the sequence, which has no gap: {stored:?}"
    );
    // A write and its savepoint are one exchange.
    let mut n = 10;
    let mut write_cost = || {
        n += 1;
        let session = sample_session(n);
        let before = store.round_trips();
        commit(&store, "a session", |tx| tx.insert_session(&session));
        store.round_trips().round_trips - before.round_trips
    };
    write_cost();
    assert_eq!(write_cost(), 2);
    // A transaction that sends nothing costs nothing.
    assert_eq!(
        cost(&|| {
            store.transact(|_| Ok(())).expect("empty");
        }),
        0
    );
}

#[test]
fn an_expiry_racing_a_cancel_of_the_same_run_waits_instead_of_deadlocking() {
    let Some(url) = common::server("an_expiry_racing_a_cancel") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("order");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let run = seed_run(&store, 1, RunStatus::WaitingForApproval);
    let invocation = seed_invocation(
        &store,
        sample_invocation(
            1,
            &run,
            1,
            "c1",
            airlock_core::vocab::InvocationStatus::WaitingForApproval,
        ),
    );
    let approval = sample_approval(1, &invocation, airlock_core::vocab::ApprovalStatus::Pending);
    commit(&store, "approval", |tx| tx.insert_approval(&approval));
    let closed = |status| {
        let mut next = approval.clone();
        next.status = status;
        next.resolved_at = Some(at(50));
        next
    };
    let (locked, run_is_locked) = mpsc::channel();
    let (cancel, expire) = std::thread::scope(|scope| {
        let store = &store;
        // A cancel: the run first, then (a moment later) its approval.
        let cancel = scope.spawn(move || {
            store.transact(|tx| {
                tx.run(run.id)?;
                let _ = locked.send(());
                std::thread::sleep(Duration::from_millis(400));
                tx.update_approval(
                    airlock_core::vocab::ApprovalStatus::Pending,
                    &closed(airlock_core::vocab::ApprovalStatus::Cancelled),
                )
            })
        });
        run_is_locked
            .recv_timeout(Duration::from_secs(10))
            .expect("the cancel holds the run");
        // An expiry: the approval first, then the run (as core's EXPIRE writes them).
        let expire = store.transact(|tx| {
            tx.update_approval(
                airlock_core::vocab::ApprovalStatus::Pending,
                &closed(airlock_core::vocab::ApprovalStatus::Expired),
            )?;
            tx.run(run.id)
        });
        (cancel.join().expect("thread"), expire)
    });
    assert_eq!(cancel, Ok(()), "the first writer commits");
    assert!(
        matches!(&expire, Err(TxError::Conflict(message)) if message.contains("not the expected pending")),
        "the second waits, then finds the approval closed (no deadlock): {expire:?}"
    );
}

/// An open connection (SPEC §22.1's conversation) of `run`'s session, opened at `T0`.
fn conversation_of(run: &airlock_core::run::Run) -> airlock_core::connection::Connection {
    airlock_core::connection::Connection {
        id: airlock_core::ids::ConnectionId(uuid::Uuid::from_u128(0xc044_0001)),
        tenant_id: TENANT.to_owned(),
        principal_id: PRINCIPAL.to_owned(),
        session_id: run.session_id,
        gateway_id: WORKER.to_owned(),
        state: airlock_core::connection::ConnectionState::Open {
            alive_until: at(1000),
        },
        opened_at: T0,
        taint: None,
        call_count: 0,
        last_seen_at: T0,
        conversation_key: None,
    }
}

/// Two ADMITs of one conversation at once (§22.1 `[limits]`): the second reads the counter
/// only after the first committed, so it finds the last call taken instead of taking it too.
#[test]
fn two_admissions_of_one_conversation_count_one_after_the_other() {
    let Some(url) = common::server("two_admissions_of_one_conversation") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("admit");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let run = seed_run(&store, 1, RunStatus::Completed);
    let conversation = conversation_of(&run);
    commit(&store, "connection", |tx| {
        tx.insert_connection(&conversation)
    });
    let limits = Some(1);
    let (admitted, first_admitted) = mpsc::channel();
    let (first, second) = std::thread::scope(|scope| {
        let store = &store;
        let first = scope.spawn(move || {
            store.transact(|tx| {
                let admission = airlock_core::connection::admit_call_in_tx(
                    tx,
                    conversation.id,
                    limits,
                    None,
                    at(1),
                )?;
                let _ = admitted.send(());
                std::thread::sleep(Duration::from_millis(400));
                Ok(admission)
            })
        });
        first_admitted
            .recv_timeout(Duration::from_secs(10))
            .expect("the first admission holds the connection");
        let second = store.transact(|tx| {
            airlock_core::connection::admit_call_in_tx(tx, conversation.id, limits, None, at(2))
        });
        (first.join().expect("thread"), second)
    });
    use airlock_core::connection::CallAdmission;
    assert_eq!(first, Ok(CallAdmission::Admitted { deadline_at: None }));
    assert_eq!(
        second,
        Ok(CallAdmission::CallsSpent { max_tool_calls: 1 }),
        "the second waits and finds the conversation's one call taken"
    );
    let stored = store
        .read(|tx| tx.connection(conversation.id))
        .expect("read")
        .expect("the connection");
    assert_eq!(
        (stored.call_count, stored.last_seen_at),
        (1, at(1)),
        "counted once"
    );
}

/// DISCONNECT racing a call run's step that taints the conversation (§22.2): the step holds its
/// run and then the connection, the close locks the session's runs before the connection, so
/// it waits for the step (no deadlock) and closes the tainted row without undoing the taint.
#[test]
fn a_close_racing_a_tainting_step_waits_instead_of_deadlocking() {
    let Some(url) = common::server("a_close_racing_a_tainting_step") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("taint");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let run = seed_run(&store, 1, RunStatus::Running);
    let conversation = conversation_of(&run);
    commit(&store, "connection", |tx| {
        tx.insert_connection(&conversation)
    });
    let (locked, run_is_locked) = mpsc::channel();
    let (step, close) = std::thread::scope(|scope| {
        let store = &store;
        let run = &run;
        let step = scope.spawn(move || {
            store.transact(|tx| {
                tx.run(run.id)?;
                let _ = locked.send(());
                std::thread::sleep(Duration::from_millis(400));
                airlock_core::connection::taint_in_tx(
                    tx,
                    run.session_id,
                    Some(run.id),
                    "invocation 1",
                    at(3),
                )
            })
        });
        run_is_locked
            .recv_timeout(Duration::from_secs(10))
            .expect("the step holds its run");
        let close = store.transact(|tx| {
            airlock_core::connection::close_in_tx(
                tx,
                conversation.id,
                airlock_core::connection::CloseReason::Disconnected,
                at(4),
            )
        });
        (step.join().expect("thread"), close)
    });
    assert_eq!(step, Ok(()), "the step commits");
    assert_eq!(
        close,
        Ok(vec![run.id]),
        "the close flags the RUNNING call run"
    );
    let stored = store
        .read(|tx| tx.connection(conversation.id))
        .expect("read")
        .expect("the connection");
    assert!(!stored.is_open(), "closed");
    assert_eq!(
        stored.taint.map(|t| (t.at, t.by)),
        Some((at(3), "invocation 1".to_owned())),
        "the taint the step committed first is kept"
    );
}

#[test]
fn a_cancel_request_is_not_overwritten_by_a_workers_stale_copy_of_the_run() {
    let Some(url) = common::server("a_cancel_request_is_not_overwritten") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("stale");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let run = seed_run(&store, 1, RunStatus::Running);
    let lease = run.lease().expect("a running sample holds its lease");
    let (read, has_read) = mpsc::channel();
    std::thread::scope(|scope| {
        let store = &store;
        // A worker's transaction: it reads the run, decides, and writes its copy back.
        let worker = scope.spawn(move || {
            store.transact(|tx| {
                tx.guard_lease(&lease)?;
                let current = tx.run(run.id)?.ok_or(TxError::NotFound)?;
                let _ = read.send(());
                std::thread::sleep(Duration::from_millis(400));
                let mut next = current.clone();
                next.tool_call_count += 1;
                let guard = airlock_core::run::RunGuard {
                    run_id: run.id,
                    status: RunStatus::Running,
                    lease: Some(lease.clone()),
                };
                tx.update_run(&guard, &next).map(drop)
            })
        });
        has_read
            .recv_timeout(Duration::from_secs(10))
            .expect("the worker read the run");
        // `runs cancel` meanwhile: sets the request on the RUNNING run.
        store
            .transact(|tx| {
                let current = tx.run(run.id)?.ok_or(TxError::NotFound)?;
                let mut next = current.clone();
                next.cancel_requested_at = Some(at(60));
                let guard = airlock_core::run::RunGuard {
                    run_id: run.id,
                    status: RunStatus::Running,
                    lease: None,
                };
                tx.update_run(&guard, &next).map(drop)
            })
            .expect("the cancel request commits");
        worker.join().expect("thread").expect("the worker commits");
    });
    let stored = store
        .read(|tx| tx.run(run.id))
        .expect("read")
        .expect("the run");
    assert_eq!(stored.tool_call_count, 1, "the worker's write landed");
    assert_eq!(
        stored.cancel_requested_at,
        Some(at(60)),
        "the cancel request survived the worker's write"
    );
}

#[test]
fn identical_proposals_on_two_runs_are_ordered_by_the_twins_lock() {
    // SPEC §19.7: two gateways proposing the identical call at once must not both find no
    // twin. A transaction that read the tenant's twins and STARTed its call holds the
    // identity's lock until it commits; the second transaction's read waits, then sees the
    // first's RUNNING row. Without the lock, READ COMMITTED would show it nothing.
    let Some(url) = common::server("identical_proposals_on_two_runs_are_ordered") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("twins");
    cleanup.add(&schema);
    let store = std::sync::Arc::new(common::store_in(&url, &schema));
    let first_run = seed_run(store.as_ref(), 1, RunStatus::Running);
    seed_run(store.as_ref(), 2, RunStatus::Running);
    let row = sample_invocation(1, &first_run, 1, "c1", InvocationStatus::Running);
    let identity = || CallIdentity {
        tenant_id: TENANT,
        tool_name: TOOL,
        effective_arguments_hash: &row.effective_arguments_hash,
    };
    let (started, wait_for_start) = mpsc::channel();
    let second = {
        let store = std::sync::Arc::clone(&store);
        let row = row.clone();
        std::thread::spawn(move || {
            wait_for_start.recv().expect("the first proposal started");
            let identity = CallIdentity {
                tenant_id: TENANT,
                tool_name: TOOL,
                effective_arguments_hash: &row.effective_arguments_hash,
            };
            let began = std::time::Instant::now();
            let seen = store.transact(|tx| tx.twins(&identity, TwinScope::Tenant));
            (seen, began.elapsed())
        })
    };
    store
        .transact(|tx| {
            assert!(tx.twins(&identity(), TwinScope::Tenant)?.is_empty());
            tx.insert_invocation(&row)?;
            started.send(()).expect("the second proposal waits");
            std::thread::sleep(Duration::from_millis(400));
            Ok(())
        })
        .expect("the first proposal commits");
    let (seen, waited) = second.join().expect("the second proposal");
    let seen = seen.expect("the second read");
    assert_eq!(
        seen.iter().map(|t| t.invocation.id).collect::<Vec<_>>(),
        vec![row.id],
        "the later proposal sees the earlier one's START"
    );
    assert!(
        waited >= Duration::from_millis(200),
        "the second read waited for the first commit ({waited:?})"
    );
}

/// A write sent ahead of its answer (issue 33) whose answer is not the predicted one fails
/// its whole transaction, even when the closure ignores the error of the read that collected
/// it: nothing of the transaction is committed, and the store carries on. Here a writer that
/// ignores the run lock changes the invocation between this transaction's read and its update.
#[test]
fn a_pipelined_write_with_an_unexpected_answer_fails_its_transaction_and_leaves_nothing() {
    let Some(url) = common::server("a_pipelined_write_with_an_unexpected_answer") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("unexpected");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let run = seed_run(&store, 1, RunStatus::Queued);
    let invocation = seed_invocation(
        &store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::Authorized),
    );
    let outcome = store.transact(|tx| {
        let mut next = tx.run(run.id)?.ok_or(TxError::NotFound)?;
        next.updated_at = at(99);
        let guard = airlock_core::run::RunGuard {
            run_id: run.id,
            status: RunStatus::Queued,
            lease: None,
        };
        tx.update_run(&guard, &next)?;
        let current = tx.invocation(invocation.id)?.ok_or(TxError::NotFound)?;
        common::execute(
            &url,
            &schema,
            &format!(
                "UPDATE tool_invocations SET status = 'PROPOSED' WHERE id = '{}'",
                invocation.id
            ),
        )
        .map_err(TxError::Backend)?;
        let mut started = current.clone();
        started.status = InvocationStatus::Running;
        started.effect_sent_at = Some(at(1));
        started.updated_at = at(1);
        tx.update_invocation(InvocationStatus::Authorized, &started)?;
        let collected = tx.count_runs(RunStatus::Queued);
        assert!(
            collected.is_err(),
            "the read that collects the write reports it: {collected:?}"
        );
        Ok(())
    });
    assert!(
        matches!(&outcome, Err(TxError::Backend(m)) if m.contains("0 rows where 1")),
        "the transaction fails, saying why: {outcome:?}"
    );
    let stored = store
        .read(|tx| Ok((tx.run(run.id)?, tx.invocation(invocation.id)?)))
        .expect("read");
    assert_eq!(
        stored.0.map(|r| r.updated_at),
        Some(run.updated_at),
        "no run update"
    );
    assert_eq!(
        stored.1.map(|i| i.status),
        Some(InvocationStatus::Proposed),
        "only the other writer's change"
    );
    // The connection and the store carry on.
    commit(&store, "a later checkpoint", |tx| {
        tx.insert_checkpoint(&sample_checkpoint(run.id, 1))
    });
}

/// Appends sent ahead of their answers (issue 33) store exactly what appends that wait would:
/// the same ids and sequences as returned, a repeated key answered with the stored event (taken
/// by an earlier transaction or by this one), a clashing one refused.
#[test]
fn appends_sent_ahead_store_what_appends_that_wait_would() {
    let Some(url) = common::server("appends_sent_ahead_store_what") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("ahead");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let run = seed_run(&store, 1, RunStatus::Queued);
    let event = |n: u32, key: Option<&str>| {
        sample_event(&run, EventType::RunStarted, json!({ "n": n }), key)
    };
    let earlier = commit(&store, "an earlier key of the subject", |tx| {
        tx.append_event(&event(0, Some("tool.call.proposed:s1")))
    });
    let appended = commit(&store, "appends", |tx| {
        tx.run(run.id)?;
        let first = tx.append_event(&event(1, None))?;
        let second = tx.append_event(&event(2, Some("tool.call.authorized:s1")))?;
        let third = tx.append_event(&event(3, Some("tool.call.started:s1")))?;
        let fourth = tx.append_event(&event(4, None))?;
        let repeat = tx.append_event(&event(0, Some("tool.call.proposed:s1")))?;
        assert_eq!(
            repeat, earlier,
            "a key taken earlier answers with its event"
        );
        let again = tx.append_event(&event(3, Some("tool.call.started:s1")))?;
        assert_eq!(
            again, third,
            "a key taken by this transaction answers with its event"
        );
        let clash = tx.append_event(&event(9, Some("tool.call.started:s1")));
        assert!(
            matches!(clash, Err(TxError::Conflict(_))),
            "a different event under a taken key: {clash:?}"
        );
        Ok(vec![first, second, third, fourth])
    });
    let stored = store
        .read(|tx| tx.events_of_run(run.id, None, 100))
        .expect("read");
    let mut expected = vec![earlier.clone()];
    expected.extend(appended);
    assert_eq!(stored, expected, "stored as returned, nothing else");
    let sequences: Vec<u64> = stored.iter().map(|e| e.sequence).collect();
    assert_eq!(
        sequences,
        (earlier.sequence..earlier.sequence + 5).collect::<Vec<_>>(),
        "the session's sequence goes on without a gap"
    );
    assert!(
        stored.windows(2).all(|pair| pair[0].id < pair[1].id),
        "ids ascend: {stored:?}"
    );
    // The session's counter was advanced past the predicted sequences: a later append goes on.
    let later = commit(&store, "a later append", |tx| {
        tx.append_event(&event(5, None))
    });
    assert_eq!(later.sequence, earlier.sequence + 5);
}

/// A write transaction's run read brings the run's highest checkpoint version (issue 33). When
/// that read waits for another transaction's lock on the run, the version must be the one after
/// that transaction's commit: the holder inserts checkpoint 1, the waiter then inserts 2.
/// (Found by review: read as a subquery of the locked read, the version came from a snapshot
/// taken before the wait, and checkpoint 2 was refused as not contiguous.)
#[test]
fn a_run_read_that_waited_for_its_lock_sees_the_holders_checkpoint() {
    let Some(url) = common::server("a_run_read_that_waited_for_its_lock") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("waited");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let run = seed_run(&store, 1, RunStatus::Running);
    let (locked, run_is_locked) = mpsc::channel();
    let (first, second) = std::thread::scope(|scope| {
        let store = &store;
        let first = scope.spawn(move || {
            store.transact(|tx| {
                tx.run(run.id)?;
                let _ = locked.send(());
                std::thread::sleep(Duration::from_millis(400));
                tx.insert_checkpoint(&sample_checkpoint(run.id, 1))?;
                tx.insert_step_record(&sample_step_record(run.id, 1), None)
            })
        });
        run_is_locked
            .recv_timeout(Duration::from_secs(10))
            .expect("the first holds the run");
        let second = store.transact(|tx| {
            tx.run(run.id)?; // waits for the first
            tx.insert_checkpoint(&sample_checkpoint(run.id, 2))?;
            tx.insert_step_record(&sample_step_record(run.id, 2), None)
        });
        (first.join().expect("thread"), second)
    });
    assert_eq!(first, Ok(()));
    assert_eq!(
        second,
        Ok(()),
        "checkpoint 2 follows the committed checkpoint 1"
    );
}

/// A keyed append that waited for its session's counter knows the keys the holder committed:
/// repeating one of them answers with the stored event (issue 33). (Found by review: the keys
/// came from the waiting statement's own snapshot, and the repeat was sent ahead as new.)
#[test]
fn a_key_committed_while_an_append_waited_is_known_as_taken() {
    let Some(url) = common::server("a_key_committed_while_an_append_waited") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("waitkeys");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let run = seed_run(&store, 1, RunStatus::Running);
    let event = |n: u32, key: &str| {
        sample_event(
            &run,
            EventType::RunCheckpointed,
            json!({ "n": n }),
            Some(key),
        )
    };
    let (appended, has_appended) = mpsc::channel();
    let (first, second) = std::thread::scope(|scope| {
        let store = &store;
        let event = &event;
        let first = scope.spawn(move || {
            store.transact(|tx| {
                tx.append_event(&event(1, "a:X"))?;
                let _ = appended.send(());
                std::thread::sleep(Duration::from_millis(400));
                tx.append_event(&event(2, "b:X"))
            })
        });
        has_appended
            .recv_timeout(Duration::from_secs(10))
            .expect("the first holds the session's counter");
        let second = store.transact(|tx| {
            tx.append_event(&event(3, "c:X"))?; // waits for the first
            tx.append_event(&event(2, "b:X"))
        });
        (first.join().expect("thread"), second)
    });
    let stored_b = first.expect("the first commits");
    assert_eq!(
        second,
        Ok(stored_b),
        "the repeat answers with the first's event"
    );
}

/// Ids follow the order of a transaction's appends, also when an append to another run's
/// session waits for its answer between appends sent ahead (issue 33; found by review: the
/// later appends took ids reserved before the answered one, below it).
#[test]
fn ids_follow_the_order_of_a_transactions_appends() {
    let Some(url) = common::server("ids_follow_the_order") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("idorder");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let run = seed_run(&store, 1, RunStatus::Running);
    let other = sample_run(2, run.session_id, RunStatus::Completed);
    commit(&store, "another run of the session", |tx| {
        tx.insert_run(&other)
    });
    let stored = commit(&store, "appends", |tx| {
        tx.run(run.id)?;
        let mut stored = Vec::new();
        for (n, of) in [(1, &run), (2, &other), (3, &run)] {
            let event = sample_event(of, EventType::RunCheckpointed, json!({ "n": n }), None);
            let event = tx.append_event(&event)?;
            stored.push((event.id, event.sequence));
        }
        Ok(stored)
    });
    let mut by_id = stored.clone();
    by_id.sort();
    assert_eq!(by_id, stored, "ids in the order of the sequences");
}

/// A write sent ahead that the server refuses is reported as itself, also when the next
/// statement has to be prepared first (issue 33; found by review: the preparation's "the
/// transaction is aborted" was reported instead, as a `Backend` error).
#[test]
fn a_refused_write_sent_ahead_is_reported_as_itself_before_a_first_preparation() {
    let Some(url) = common::server("a_refused_write_sent_ahead_is_reported") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("reported");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let run = seed_run(&store, 1, RunStatus::Running);
    let result = store.transact(|tx| {
        tx.run(run.id)?;
        // Another writer, outside the run's lock, takes checkpoint 1 meanwhile.
        common::execute(
            &url,
            &schema,
            &format!(
                "INSERT INTO checkpoints (run_id, version, \"trigger\", state, created_at) \
                 VALUES ('{}', 1, 'seed', '{{}}', 0)",
                run.id
            ),
        )
        .map_err(TxError::Backend)?;
        tx.insert_checkpoint(&sample_checkpoint(run.id, 1))?; // sent ahead; the key refuses it
        tx.newest_state_key().map(drop) // a statement this connection has not prepared
    });
    assert!(
        matches!(&result, Err(TxError::Conflict(m)) if m.contains("contiguous")),
        "the refusal itself: {result:?}"
    );
}

/// A write transaction that wrote nothing does not wait for its COMMIT (issue 33), but the
/// COMMIT is sent: the row lock its run read took is released at once, and another connection
/// can lock the row without waiting.
#[test]
fn a_transaction_that_wrote_nothing_still_releases_its_locks() {
    let Some(url) = common::server("a_transaction_that_wrote_nothing_still_releases") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("released");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let run = seed_run(&store, 1, RunStatus::Running);
    store
        .transact(|tx| tx.run(run.id).map(drop))
        .expect("a locked read and nothing else");
    common::execute(
        &url,
        &schema,
        &format!(
            "SET lock_timeout = '5s'; UPDATE runs SET updated_at = updated_at WHERE id = '{}'",
            run.id
        ),
    )
    .expect("the run's row lock was released");
}

/// An invocation's insert is sent ahead of its answer (issue 33): a duplicate call is reported
/// as the `Conflict` it is, by the COMMIT, and nothing of the transaction is stored — the events
/// sent after it included — so core's re-read of the winning row finds the store as it was.
#[test]
fn a_duplicate_invocation_sent_ahead_is_a_conflict_and_stores_nothing() {
    let Some(url) = common::server("a_duplicate_invocation_sent_ahead") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("duplicate");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let run = seed_run(&store, 1, RunStatus::Running);
    let lease = run.lease().expect("a RUNNING sample holds its lease");
    let first = seed_invocation(
        &store,
        sample_invocation(1, &run, 1, "c1", InvocationStatus::Running),
    );
    let events_before = store
        .read(|tx| tx.events_of_run(run.id, None, 100))
        .expect("read")
        .len();
    let same_call = sample_invocation(2, &run, 1, "c1", InvocationStatus::Authorized);
    let outcome = store.transact(|tx| {
        tx.guard_lease(&lease)?;
        tx.insert_invocation(&same_call)?;
        for key in [
            airlock_core::events::keys::proposed(same_call.id),
            airlock_core::events::keys::authorized(same_call.id),
        ] {
            tx.append_event(&sample_event(
                &run,
                EventType::RunStarted,
                json!({}),
                Some(&key),
            ))?;
        }
        Ok(())
    });
    assert!(
        matches!(&outcome, Err(TxError::Conflict(_))),
        "the duplicate call is a conflict: {outcome:?}"
    );
    let (stored, events) = store
        .read(|tx| {
            Ok((
                tx.invocation_by_call(run.id, 1, "c1")?,
                tx.events_of_run(run.id, None, 100)?,
            ))
        })
        .expect("read");
    assert_eq!(stored.map(|i| i.id), Some(first.id), "the first row stays");
    assert_eq!(events.len(), events_before, "no event of the refused call");
    // The connection and the store carry on.
    commit(&store, "a later checkpoint", |tx| {
        tx.insert_checkpoint(&sample_checkpoint(run.id, 1))
    });
}

/// Two call runs of one conversation at once: one's lease holder reads its run and then the
/// connection (the taint check), the other holds its run and the connection (TAINT, a claim's
/// binding) and then appends. The lease holder's first read must not lock the session's event
/// counter in a conversation (issue 33's pipelined read): it would hold the counter the other
/// waits for while waiting for the connection the other holds — a deadlock PostgreSQL ends by
/// failing one of them. Instead the second waits for nothing and the first for the connection.
#[test]
fn two_call_runs_of_one_conversation_take_the_connection_and_the_counter_in_one_order() {
    let Some(url) = common::server("two_call_runs_of_one_conversation") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let schema = common::fresh_schema("order_calls");
    cleanup.add(&schema);
    let store = common::store_in(&url, &schema);
    let session = sample_session(1);
    let runs = [1, 2].map(|n| {
        let mut run = sample_run(n, session.id, RunStatus::Running);
        run.planner_kind = "mcp".to_owned();
        run
    });
    commit(&store, "a conversation's session and two call runs", |tx| {
        tx.insert_session(&session)?;
        runs.iter().try_for_each(|run| tx.insert_run(run))
    });
    let conversation = conversation_of(&runs[0]);
    commit(&store, "connection", |tx| {
        tx.insert_connection(&conversation)
    });
    let lease = runs[1].lease().expect("a RUNNING sample holds its lease");
    let (guarded, lease_is_guarded) = mpsc::channel();
    let (holder, other) = std::thread::scope(|scope| {
        let store = &store;
        let runs = &runs;
        let holder = scope.spawn(move || {
            store.transact(|tx| {
                tx.guard_lease(&lease)?;
                let _ = guarded.send(());
                std::thread::sleep(Duration::from_millis(400));
                airlock_core::connection::taint_in_tx(
                    tx,
                    runs[1].session_id,
                    Some(runs[1].id),
                    "invocation 2",
                    at(3),
                )?;
                tx.append_event(&sample_event(
                    &runs[1],
                    EventType::RunStarted,
                    json!({}),
                    None,
                ))
                .map(drop)
            })
        });
        lease_is_guarded
            .recv_timeout(Duration::from_secs(10))
            .expect("the lease holder read its run");
        let other = store.transact(|tx| {
            tx.run(runs[0].id)?;
            airlock_core::connection::taint_in_tx(
                tx,
                runs[0].session_id,
                Some(runs[0].id),
                "invocation 1",
                at(2),
            )?;
            tx.append_event(&sample_event(
                &runs[0],
                EventType::RunStarted,
                json!({}),
                None,
            ))
            .map(drop)
        });
        (holder.join().expect("thread"), other)
    });
    assert_eq!(other, Ok(()), "the run holding the connection commits");
    assert_eq!(
        holder,
        Ok(()),
        "the lease holder waits for the connection, then commits"
    );
}
