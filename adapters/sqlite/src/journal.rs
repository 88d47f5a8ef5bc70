//! The journal (migration M16, issue 33): what a write transaction appends of events and
//! checkpoints, gathered into as few `journal` rows as the transaction's shape allows.
//!
//! `SqliteTx` keeps the row it is filling in a [`Journal`]: `append_event` and
//! `insert_checkpoint` add to it, and it is written by one plain `INSERT … VALUES` when the
//! next addition does not fit (another session, another run, a key of another subject, a
//! second checkpoint), before a read that must see it, and when the transaction's closure
//! returns (`SqliteTx::finish`). A tool call's watermark transaction (its PENDING checkpoint and
//! `run.checkpointed`, then `tool.call.proposed`, `authorized`, `started`, all of one run and
//! one invocation) and its result transaction (`tool.call.completed`, the BATCH checkpoint and
//! its `run.checkpointed`) each become one row.
//!
//! Why the writer may assign ids, sequences and checkpoint versions from memory: it holds
//! SQLite's write lock from `BEGIN IMMEDIATE` to `COMMIT`, and every other process's writer
//! waits for it, so the values it read at its first use in a transaction cannot be taken by
//! anyone else before it commits (the group's earlier members wrote through this connection,
//! so their rows are read too). A row the INSERT refuses (nothing should; the unique indexes
//! are the last guard) poisons the transaction: the events it held were already returned as
//! appended, so the closure is made to fail and is undone (the `group` module) rather than commit
//! without them.

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::Row;

use airlock_core::events::Event;
use airlock_core::ids::{RunId, SessionId};
use airlock_core::run::checkpoint::Checkpoint;
use airlock_core::store::TxError;

use super::rows::{self, ts};
use super::stored_events::{self, Numbering, RowContext};

/// The part of a derivation key a journal row is found by: the text after its first `:`
/// (SPEC §13.1's keys name the invocation, approval or refusal they derive from there), or the
/// whole key when it has no `:`. `M_JOURNAL` computes the same for the events it moves.
pub(super) fn key_subject(key: &str) -> &str {
    key.split_once(':').map_or(key, |(_, subject)| subject)
}

/// The journal row being filled: consecutive events of one session and one run (or of no
/// run), and at most one checkpoint of that run.
#[derive(Debug)]
struct OpenRow {
    session_id: SessionId,
    run_id: Option<RunId>,
    /// The row's events as they were returned to their callers, ids and sequences consecutive.
    events: Vec<Event>,
    /// The subject of every keyed event of the row (they share one).
    key_subject: Option<String>,
    /// The checkpoint and its `state` as JSON text, encoded when it was inserted so that an
    /// unencodable state is refused by `insert_checkpoint`, not by a later flush.
    checkpoint: Option<(Checkpoint, String)>,
}

impl OpenRow {
    fn takes_event(&self, event: &Event) -> bool {
        self.session_id == event.session_id
            && self.run_id == event.run_id
            && match (
                event.derivation_key.as_deref().map(key_subject),
                self.key_subject.as_deref(),
            ) {
                (Some(new), Some(held)) => new == held,
                _ => true,
            }
    }

    fn takes_checkpoint(&self, run_id: RunId) -> bool {
        self.checkpoint.is_none() && self.run_id == Some(run_id)
    }
}

/// A transaction's journal state: the open row, the next event id (read once), and the key
/// subjects already looked up and found in no stored row.
#[derive(Debug, Default)]
pub(super) struct Journal {
    open: Option<OpenRow>,
    next_event_id: Option<i64>,
    /// Subjects no stored row had when looked up in this transaction; a subject leaves the set
    /// when a row carrying it is written.
    absent_subjects: BTreeSet<String>,
    /// Why a row could not be written, once one could not: the transaction must not commit.
    poisoned: Option<String>,
    /// The next sequence of each session this transaction appended to.
    next_sequences: BTreeMap<SessionId, i64>,
}

/// What [`Journal::take_row`] hands the writer to INSERT.
pub(super) struct RowToWrite {
    pub(super) params: [rusqlite::types::Value; 12],
    pub(super) key_subject: Option<String>,
}

/// Every column of a journal row, in the order of [`RowToWrite::params`].
pub(super) const INSERT_ROW: &str = "INSERT INTO journal (session_id, run_id, first_event_id, \
     last_event_id, first_sequence, last_sequence, key_subject, events, checkpoint_version, \
     checkpoint_trigger, checkpoint_state, checkpoint_created_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

/// The columns [`events_of_row`] reads, in its order.
macro_rules! event_row_columns {
    () => {
        "session_id, run_id, first_event_id, first_sequence, events, key_subject, \
         checkpoint_trigger, checkpoint_version"
    };
}

/// The checkpoint of a journal row, as `rows::checkpoint` reads it.
macro_rules! checkpoint_row_columns {
    () => {
        "run_id, checkpoint_version, checkpoint_trigger, checkpoint_state, checkpoint_created_at"
    };
}

/// The journal's last event id. Every read below names the `IS NOT NULL` (or a comparison that
/// implies it) of the partial index it must search; without it SQLite scans the table (a
/// plain `MAX(last_event_id)` did, on every transaction). `the_writers_reads_search_an_index`
/// holds them to that.
pub(super) const LAST_EVENT_ID: &str = "SELECT last_event_id FROM journal \
     WHERE last_event_id IS NOT NULL ORDER BY last_event_id DESC LIMIT 1";

/// Run `?1`'s last checkpoint version.
pub(super) const LAST_CHECKPOINT_VERSION: &str = "SELECT checkpoint_version FROM journal \
     WHERE run_id = ?1 AND checkpoint_version IS NOT NULL \
     ORDER BY checkpoint_version DESC LIMIT 1";

/// Run `?1`'s last checkpoint.
pub(super) const LAST_CHECKPOINT: &str = concat!(
    "SELECT ",
    checkpoint_row_columns!(),
    " FROM journal WHERE run_id = ?1 AND checkpoint_version IS NOT NULL \
     ORDER BY checkpoint_version DESC LIMIT 1"
);

/// The rows whose keyed events have subject `?1`, and whether each may hold the key whose
/// stored text is `?2` or `?3` ([`key_as_stored`]; `?2` NULL: any may): a row that cannot is
/// not decoded. An invocation's result key finds the row of its watermark (same subject)
/// without reading that row's events.
pub(super) const ROWS_OF_SUBJECT: &str = concat!(
    "SELECT ",
    event_row_columns!(),
    ", ?2 IS NULL OR instr(events, ?2) > 0 OR (?3 IS NOT NULL AND instr(events, ?3) > 0) \
     FROM journal WHERE key_subject = ?1"
);

/// The column of [`ROWS_OF_SUBJECT`] that says whether the row may hold the key.
pub(super) const MAY_HOLD_KEY: usize = 8;

/// The texts a row's `events` holds `key` as, when they are certain: the key whole as a JSON
/// string, quotes included (a row written before M19, or a key of another subject), and the
/// part before its first `:` as a JSON string: the `s` field (`stored_events`), or since M22
/// the `t` of an event whose `"s": true` says its prefix is its type (a row with another event
/// of that type passes too, and is decoded to be sure). Certain for printable ASCII
/// other than `"` and `\`, which neither serde_json (this writer) nor SQLite's `json_array`
/// (the M16 upgrade) escapes; `None` for any other key, whose rows are then all decoded.
pub(super) fn key_as_stored(key: &str) -> Option<(String, Option<String>)> {
    key.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
        .then(|| {
            (
                format!("\"{key}\""),
                key.split_once(':')
                    .map(|(prefix, _)| format!("\"{prefix}\"")),
            )
        })
}

/// Run `?1`'s rows with an event after id `?2`, at most `?3`, in event order.
pub(super) const ROWS_OF_RUN: &str = concat!(
    "SELECT ",
    event_row_columns!(),
    " FROM journal WHERE run_id = ?1 AND last_event_id > ?2 ORDER BY last_event_id LIMIT ?3"
);

/// Tenant `?1`'s rows with an event after id `?2`, at most `?3`, in event order: the journal
/// walked by event id from the cursor, each row's tenant found through a correlated session
/// lookup, so a tail costs about `?3` rows however long the log is (a join planned from
/// `sessions` would read every row of the tenant and sort them).
pub(super) const ROWS_OF_TENANT: &str = concat!(
    "SELECT ",
    event_row_columns!(),
    " FROM journal WHERE last_event_id > ?2 AND EXISTS \
     (SELECT 1 FROM sessions WHERE sessions.id = journal.session_id \
      AND sessions.tenant_id = ?1) ORDER BY last_event_id LIMIT ?3"
);

impl Journal {
    /// The error every later use of a poisoned journal returns.
    pub(super) fn check(&self) -> Result<(), TxError> {
        match &self.poisoned {
            Some(reason) => Err(TxError::Backend(format!(
                "the transaction's journal row could not be written ({reason}); it is rolled back"
            ))),
            None => Ok(()),
        }
    }

    pub(super) fn poison(&mut self, reason: String) {
        self.poisoned.get_or_insert(reason);
    }

    pub(super) fn next_event_id(&self) -> Option<i64> {
        self.next_event_id
    }

    pub(super) fn set_next_event_id(&mut self, id: i64) {
        self.next_event_id = Some(id);
    }

    pub(super) fn next_sequence_of(&self, session_id: SessionId) -> Option<i64> {
        self.next_sequences.get(&session_id).copied()
    }

    pub(super) fn keep_next_sequence(&mut self, session_id: SessionId, next: i64) {
        self.next_sequences.insert(session_id, next);
    }

    /// The next sequence of each session and the next event id, as this transaction leaves
    /// them (for the writer's cache, the `recent` module).
    pub(super) fn into_counters(self) -> (BTreeMap<SessionId, i64>, Option<i64>) {
        (self.next_sequences, self.next_event_id)
    }

    /// Whether `subject` was looked up in this transaction and no stored row had it.
    pub(super) fn known_absent(&self, subject: &str) -> bool {
        self.absent_subjects.contains(subject)
    }

    pub(super) fn note_absent(&mut self, subject: &str) {
        self.absent_subjects.insert(subject.to_owned());
    }

    /// The open row's event with `key`, if it holds one.
    pub(super) fn open_event_by_key(&self, key: &str) -> Option<Event> {
        let open = self.open.as_ref()?;
        open.events
            .iter()
            .find(|event| event.derivation_key.as_deref() == Some(key))
            .cloned()
    }

    /// The open row's checkpoint, if it is `run`'s.
    pub(super) fn open_checkpoint_of(&self, run_id: RunId) -> Option<&Checkpoint> {
        let open = self.open.as_ref()?;
        match &open.checkpoint {
            Some((checkpoint, _)) if open.run_id == Some(run_id) => Some(checkpoint),
            _ => None,
        }
    }

    /// Whether `event` joins the open row; when it does not, the caller writes the open row
    /// ([`Journal::take_row`]) and then calls [`Journal::push_event`], which opens a new one.
    pub(super) fn fits_event(&self, event: &Event) -> bool {
        self.open
            .as_ref()
            .is_none_or(|open| open.takes_event(event))
    }

    /// Adds a stored event (its id and sequence assigned) to the open row, opening one if
    /// there is none; the caller checked [`Journal::fits_event`] first. Advances the next id.
    pub(super) fn push_event(&mut self, event: Event) {
        let subject = event.derivation_key.as_deref().map(key_subject);
        self.next_event_id = Some(event.id.saturating_add(1));
        match &mut self.open {
            Some(open) => {
                if open.key_subject.is_none() {
                    open.key_subject = subject.map(str::to_owned);
                }
                open.events.push(event);
            }
            None => {
                self.open = Some(OpenRow {
                    session_id: event.session_id,
                    run_id: event.run_id,
                    key_subject: subject.map(str::to_owned),
                    events: vec![event],
                    checkpoint: None,
                });
            }
        }
    }

    /// Whether a checkpoint of `run_id` joins the open row (see [`Journal::fits_event`]).
    pub(super) fn fits_checkpoint(&self, run_id: RunId) -> bool {
        self.open
            .as_ref()
            .is_none_or(|open| open.takes_checkpoint(run_id))
    }

    /// Adds a checked checkpoint of a run of `session_id` to the open row, or opens one.
    pub(super) fn push_checkpoint(
        &mut self,
        session_id: SessionId,
        checkpoint: Checkpoint,
        state: String,
    ) {
        match &mut self.open {
            Some(open) => open.checkpoint = Some((checkpoint, state)),
            None => {
                self.open = Some(OpenRow {
                    session_id,
                    run_id: Some(checkpoint.run_id),
                    events: Vec::new(),
                    key_subject: None,
                    checkpoint: Some((checkpoint, state)),
                });
            }
        }
    }

    /// The open row as INSERT parameters, and the row closed; `None` when no row is open.
    pub(super) fn take_row(&mut self) -> Result<Option<RowToWrite>, TxError> {
        use rusqlite::types::Value;
        let Some(open) = self.open.take() else {
            return Ok(None);
        };
        let integer = |v: Option<i64>| v.map_or(Value::Null, Value::Integer);
        let text = |v: Option<String>| v.map_or(Value::Null, Value::Text);
        let context = RowContext {
            key_subject: open.key_subject.as_deref(),
            checkpoint: open.checkpoint.as_ref().map(|(checkpoint, _)| {
                (checkpoint.trigger.as_str(), i64::from(checkpoint.version))
            }),
        };
        let (first_id, last_id, first_sequence, last_sequence, events) =
            match (open.events.first(), open.events.last()) {
                (Some(first), Some(last)) => (
                    Some(first.id),
                    Some(last.id),
                    Some(rows::int(first.sequence, "events.sequence")?),
                    Some(rows::int(last.sequence, "events.sequence")?),
                    stored_events::encode(&open.events, context).map_err(|e| {
                        TxError::Backend(format!("cannot encode journal.events: {e}"))
                    })?,
                ),
                _ => (None, None, None, None, None),
            };
        let (version, trigger, state, created_at) = match open.checkpoint {
            Some((checkpoint, state)) => (
                Some(i64::from(checkpoint.version)),
                Some(checkpoint.trigger.as_str().to_owned()),
                Some(state),
                Some(ts(checkpoint.created_at)),
            ),
            None => (None, None, None, None),
        };
        Ok(Some(RowToWrite {
            params: [
                Value::Text(open.session_id.to_string()),
                text(open.run_id.map(|run| run.to_string())),
                integer(first_id),
                integer(last_id),
                integer(first_sequence),
                integer(last_sequence),
                text(open.key_subject.clone()),
                text(events),
                integer(version),
                text(trigger),
                text(state),
                integer(created_at),
            ],
            key_subject: open.key_subject,
        }))
    }

    /// After a row carrying `subject` was written, the subject is no longer absent.
    pub(super) fn wrote_subject(&mut self, subject: Option<&str>) {
        if let Some(subject) = subject {
            self.absent_subjects.remove(subject);
        }
    }
}

/// The events of one journal row, read with `event_row_columns!`.
pub(super) fn events_of_row(row: &Row<'_>) -> rusqlite::Result<Vec<Event>> {
    let numbering = Numbering {
        session_id: rows::parse(row, 0)?,
        run_id: rows::parse_opt(row, 1)?,
        first_id: row.get(2)?,
        first_sequence: row.get(3)?,
    };
    let text: String = row.get(4)?;
    let key_subject: Option<String> = row.get(5)?;
    let trigger: Option<String> = row.get(6)?;
    let version: Option<i64> = row.get(7)?;
    let context = RowContext {
        key_subject: key_subject.as_deref(),
        checkpoint: trigger.as_deref().zip(version),
    };
    stored_events::decode(&text, numbering, context).map_err(|e| rows::decode_error(4, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each read the writer and the event readers make of the journal searches an index (none
    /// scans the table, none sorts), and so do an invocation's and a step record's reads of
    /// the calls they refer to (M17, M18).
    #[test]
    fn the_writers_reads_search_an_index() {
        let mut conn = rusqlite::Connection::open_in_memory().expect("open");
        crate::schema::migrations()
            .to_latest(&mut conn)
            .expect("migrate");
        let invocation = format!(
            "SELECT {} FROM tool_invocations WHERE id = ?1",
            crate::rows::INVOCATION_COLUMNS
        );
        let step_records = format!(
            "SELECT {} FROM step_records WHERE run_id = ?1 AND step > ?2 ORDER BY step",
            crate::rows::STEP_RECORD_COLUMNS
        );
        for sql in [
            LAST_EVENT_ID,
            LAST_CHECKPOINT_VERSION,
            LAST_CHECKPOINT,
            ROWS_OF_SUBJECT,
            ROWS_OF_RUN,
            ROWS_OF_TENANT,
            crate::rows::EVENT_SLOT,
            &invocation,
            &step_records,
        ] {
            let mut statement = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .expect(sql);
            let plan: Vec<String> = statement
                .raw_query()
                .mapped(|row| row.get(3))
                .collect::<Result<_, _>>()
                .expect(sql);
            let plan = plan.join("; ");
            let journal = plan
                .split("; ")
                .filter(|step| step.contains("journal") || step.contains(" j "))
                .collect::<Vec<_>>();
            assert!(!journal.is_empty(), "{sql}: {plan}");
            assert!(
                journal.iter().all(|step| step.contains("INDEX")),
                "{sql}: {plan}"
            );
            assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
            if sql == invocation || sql == step_records {
                assert!(
                    plan.contains(
                        "SEARCH j USING INDEX uq_journal_checkpoints \
                         (run_id=? AND checkpoint_version=?)"
                    ),
                    "the referenced calls are one lookup: {plan}"
                );
            }
        }
    }

    /// Each of those reads costs the same however long the journal is: over a session of 600
    /// rows (and a run of 300 checkpoints), none runs more than a few dozen VM steps, where a
    /// scan of the journal or of a run's or session's range runs thousands.
    #[test]
    fn the_writers_reads_do_not_grow_with_the_journal() {
        let mut conn = rusqlite::Connection::open_in_memory().expect("open");
        crate::schema::migrations()
            .to_latest(&mut conn)
            .expect("migrate");
        conn.execute_batch(
            "INSERT INTO sessions (id, tenant_id, principal_id, created_at) \
             VALUES ('s', 't', 'p', 1);",
        )
        .expect("session");
        for n in 1..=600_i64 {
            conn.execute(
                "INSERT INTO journal (session_id, run_id, first_event_id, last_event_id, \
                 first_sequence, last_sequence, key_subject, events, checkpoint_version, \
                 checkpoint_trigger, checkpoint_state, checkpoint_created_at) \
                 VALUES ('s', 'r', ?1, ?1, ?1, ?1, 'k' || ?1, '[]', \
                 CASE WHEN ?1 % 2 = 0 THEN ?1 / 2 END, \
                 CASE WHEN ?1 % 2 = 0 THEN 'seed' END, CASE WHEN ?1 % 2 = 0 THEN '{}' END, \
                 CASE WHEN ?1 % 2 = 0 THEN 1 END)",
                [n],
            )
            .expect("row");
        }
        let reads: [(&str, &[&dyn rusqlite::ToSql]); 7] = [
            (LAST_EVENT_ID, &[]),
            (LAST_CHECKPOINT_VERSION, &[&"r"]),
            (LAST_CHECKPOINT, &[&"r"]),
            (ROWS_OF_SUBJECT, &[&"k7", &"\"k\"", &"\"s\":\"k\""]),
            (ROWS_OF_RUN, &[&"r", &590, &5]),
            (ROWS_OF_TENANT, &[&"t", &590, &5]),
            (crate::rows::EVENT_SLOT, &[&"s", &"r"]),
        ];
        for (sql, params) in reads {
            let mut statement = conn.prepare(sql).expect(sql);
            let mut rows = statement.query(params).expect(sql);
            while rows.next().expect(sql).is_some() {}
            drop(rows);
            let steps = statement.get_status(rusqlite::StatementStatus::VmStep);
            assert!(steps < 200, "{sql}: {steps} VM steps");
        }
    }

    #[test]
    fn a_key_is_found_by_what_follows_its_first_colon() {
        assert_eq!(
            key_subject("tool.call.proposed:6f1c"),
            "6f1c",
            "an invocation's keys share its id"
        );
        assert_eq!(
            key_subject("tool.call.refused:run:3:c1"),
            "run:3:c1",
            "a refusal keeps its run, step and call"
        );
        assert_eq!(key_subject("plain"), "plain");
        assert_eq!(
            super::key_as_stored("tool.call.result:6f1c"),
            Some((
                "\"tool.call.result:6f1c\"".to_owned(),
                Some("\"tool.call.result\"".to_owned())
            ))
        );
        assert_eq!(
            super::key_as_stored("plain"),
            Some(("\"plain\"".to_owned(), None))
        );
        for escaped in ["a\"b", "a\\b", "tab\t", "é"] {
            assert_eq!(super::key_as_stored(escaped), None, "{escaped}");
        }
        assert_eq!(key_subject("trailing:"), "");
    }
}
