//! Issue 33: no statement on a tool call's write path makes SQLite build a temporary b-tree
//! (`OpenEphemeral`: an `IN (…)` list of more than two constants, an `INSERT … SELECT` into a
//! table with a trigger, `RETURNING`) or run a trigger's sub-program (`Program`) per row.
//!
//! The statements are not listed by hand: the whole store contract runs on stores whose writer
//! records every statement it executes (SQLite's statement trace), and each recorded `INSERT`
//! or `UPDATE` of a table a call writes, and each read `append_event` makes, is compiled with
//! `EXPLAIN` and its opcodes checked. A statement added to `tx.rs` later is covered as soon as
//! the contract exercises it.
//!
//! One statement is allowed a temporary b-tree ([`KNOWN_EPHEMERAL`]): the lease heartbeat's
//! `UPDATE … RETURNING`, SPEC §8.2's one statement, which runs once per third of a lease, not
//! per call. `Program` is allowed nowhere.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use rusqlite::trace::{TraceEvent, TraceEventCodes};

use airlock_core::testing::contract::run_contract;

use crate::SqliteStore;

/// Every statement text the traced writers executed.
static EXECUTED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn record(event: TraceEvent<'_>) {
    if let TraceEvent::Stmt(_, sql) = event {
        EXECUTED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(sql.to_owned());
    }
}

/// The tables a tool call writes (claim, checkpoints, proposal, watermark, outcome, step
/// record, approval, the run's end, a policy decision's text) and the events it appends.
const CALL_TABLES: [&str; 8] = [
    "journal",
    "policy_decision_texts",
    "run_inputs",
    "tool_invocations",
    "step_records",
    "runs",
    "approvals",
    "sessions",
];

/// Whether `sql` is on a call's write path: an INSERT or UPDATE of one of [`CALL_TABLES`],
/// `append_event`'s read of the next sequence, or a read of the journal (the next id, a key's
/// subject, a run's last checkpoint).
fn on_call_path(sql: &str) -> bool {
    let sql = sql.trim_start();
    if sql == crate::rows::EVENT_SLOT || sql.contains(" FROM journal ") {
        return true;
    }
    let target = sql
        .strip_prefix("INSERT INTO ")
        .or_else(|| sql.strip_prefix("UPDATE "))
        .and_then(|rest| rest.split_whitespace().next());
    target.is_some_and(|table| CALL_TABLES.contains(&table))
}

/// The `OpenEphemeral` count each call-path statement may still have, by the start of its
/// text, and why; any other statement may have none. See the module docs.
const KNOWN_EPHEMERAL: [(&str, usize, &str); 1] = [(
    "UPDATE runs SET lease_expires_at = ?1 ",
    1,
    "the heartbeat's RETURNING: SPEC §8.2's one statement, once per lease third, not per call",
)];

/// How many `OpenEphemeral` opcodes `sql` may have (see [`KNOWN_EPHEMERAL`]).
fn allowed_ephemeral(sql: &str) -> usize {
    KNOWN_EPHEMERAL
        .iter()
        .find(|(start, _, _)| sql.trim_start().starts_with(start))
        .map_or(0, |(_, count, _)| *count)
}

/// The opcodes `EXPLAIN` gives for `sql`.
fn opcodes(conn: &rusqlite::Connection, sql: &str) -> Vec<String> {
    let mut statement = conn
        .prepare(&format!("EXPLAIN {sql}"))
        .unwrap_or_else(|e| panic!("EXPLAIN {sql}: {e}"));
    // `raw_query`: the parameters stay unbound, which EXPLAIN does not need.
    let mut rows = statement.raw_query();
    let mut ops = Vec::new();
    while let Some(row) = rows.next().unwrap_or_else(|e| panic!("EXPLAIN {sql}: {e}")) {
        ops.push(row.get(1).unwrap_or_else(|e| panic!("EXPLAIN {sql}: {e}")));
    }
    ops
}

#[test]
fn no_call_path_statement_builds_a_temporary_btree_or_runs_a_trigger() {
    let dirs = Mutex::new(Vec::new());
    run_contract(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::open(&dir.path().join("airlock.sqlite3")).expect("open");
        store.group.with_connection(|conn| {
            conn.trace_v2(TraceEventCodes::SQLITE_TRACE_STMT, Some(record));
        });
        dirs.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(dir);
        store
    });

    let executed = EXECUTED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let hot: Vec<&String> = executed.iter().filter(|sql| on_call_path(sql)).collect();
    for table in CALL_TABLES {
        assert!(
            hot.iter().any(|sql| sql.contains(&format!(" {table} "))),
            "the contract wrote no {table} row: the trace missed the writer"
        );
    }

    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("airlock.sqlite3")).expect("open");
    let offending: Vec<String> = store.group.with_connection(|conn| {
        hot.iter()
            .filter_map(|sql| {
                let ops = opcodes(conn, sql);
                let count = |name: &str| ops.iter().filter(|op| *op == name).count();
                let (programs, ephemeral) = (count("Program"), count("OpenEphemeral"));
                (programs > 0 || ephemeral > allowed_ephemeral(sql))
                    .then(|| format!("{programs} × Program, {ephemeral} × OpenEphemeral: {sql}"))
            })
            .collect()
    });
    assert!(
        offending.is_empty(),
        "{} of {} call-path statements:\n{}",
        offending.len(),
        hot.len(),
        offending.join("\n")
    );
}
