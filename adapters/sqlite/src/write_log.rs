//! The statements a group's members wrote with, kept so that a failed member can be undone
//! without a savepoint per member (issue 33).
//!
//! A group's members share one transaction. Undoing one member's writes used to take a
//! `SAVEPOINT` around each member, and SQLite copies every page a savepoint's statements touch
//! for the first time into its sub-journal: with seven indexes on `tool_invocations` and five
//! on `journal`, a tool call's two members copied some thirty 4 KB pages, about 40 µs of the
//! writer's SQL per call, to undo members that almost never fail after writing.
//!
//! Instead each member's write statements are logged as they ran (SQL, parameters, rows
//! changed, last insert rowid). A member that fails before writing anything needs nothing
//! undone. A member that fails after writing (rare: a guard that fails after a write of the
//! same closure, a panic) is undone by rolling the group's transaction back, beginning it
//! again, and running the logged writes of the members that ended well, in their order, on the
//! database as it was when the group began:
//!
//! - the group checks that no other connection committed in between (`PRAGMA data_version`
//!   unchanged since the group's `BEGIN IMMEDIATE`), so the replayed members meet exactly the
//!   rows they met the first time;
//! - each replayed statement must change as many rows, and leave the same last insert rowid,
//!   as it did the first time;
//! - a member whose writes could not be logged (a parameter type the log does not hold) makes
//!   the group unreplayable.
//!
//! Anything else breaks the group: every member gets `Backend`, as for a failed COMMIT, and
//! nothing of it is kept. A replay can never commit something the members did not see.

use rusqlite::types::{ToSqlOutput, Value};
use rusqlite::{Connection, ToSql, params_from_iter};

/// One write statement as it ran.
#[derive(Debug, Clone, PartialEq)]
struct LoggedWrite {
    sql: String,
    params: Vec<Value>,
    changes: u64,
    /// The rowid an `INSERT` gave its (last) row. Another statement leaves the connection's
    /// last insert rowid as an earlier statement set it, perhaps one that a rollback undid, so
    /// it says nothing about that statement.
    inserted_rowid: Option<i64>,
}

/// Whether `sql` is an `INSERT`, whose rowid the connection reports afterwards.
fn is_insert(sql: &str) -> bool {
    sql.trim_start()
        .get(..6)
        .is_some_and(|verb| verb.eq_ignore_ascii_case("INSERT"))
}

/// The writes of one member, or of a group's members that ended well, in the order they ran.
#[derive(Debug, Clone, Default)]
pub(super) struct WriteLog {
    writes: Vec<LoggedWrite>,
    /// The rows the logged statements changed, triggers' changes included (`total_changes`):
    /// a member whose own count differs wrote something the log does not hold.
    accounted: u64,
    /// Why these writes cannot be replayed, once one could not be logged.
    unreplayable: Option<String>,
}

impl WriteLog {
    /// Logs a write statement that ran on `conn` with `params`, just completed, and moved the
    /// connection's `total_changes` by `moved`.
    pub(super) fn record(
        &mut self,
        conn: &Connection,
        sql: &str,
        params: &[&dyn ToSql],
        moved: u64,
    ) {
        self.accounted = self.accounted.wrapping_add(moved);
        if self.unreplayable.is_some() {
            return;
        }
        let mut values = Vec::with_capacity(params.len());
        for (n, param) in params.iter().enumerate() {
            match owned(*param) {
                Some(value) => values.push(value),
                None => {
                    self.unreplayable = Some(format!(
                        "parameter {} of a write could not be logged: {sql}",
                        n + 1
                    ));
                    return;
                }
            }
        }
        self.writes.push(LoggedWrite {
            sql: sql.to_owned(),
            params: values,
            changes: conn.changes(),
            inserted_rowid: is_insert(sql).then(|| conn.last_insert_rowid()),
        });
    }

    /// Marks the log unreplayable: a member changed rows that no logged statement accounts for.
    pub(super) fn mark_unreplayable(&mut self, reason: String) {
        self.unreplayable.get_or_insert(reason);
    }

    /// Whether there is nothing to replay: no write logged, and none that could not be.
    pub(super) fn nothing_to_replay(&self) -> bool {
        self.writes.is_empty() && self.unreplayable.is_none()
    }

    /// The rows the logged statements changed (see `accounted`).
    pub(super) fn accounted(&self) -> u64 {
        self.accounted
    }

    /// Appends a member's log (the member ended well).
    pub(super) fn extend(&mut self, member: WriteLog) {
        if let Some(reason) = member.unreplayable {
            self.mark_unreplayable(reason);
        }
        self.writes.extend(member.writes);
        self.accounted = self.accounted.wrapping_add(member.accounted);
    }

    /// Forgets every write (a new group begins).
    pub(super) fn clear(&mut self) {
        self.writes.clear();
        self.accounted = 0;
        self.unreplayable = None;
    }

    /// Runs every logged write again, in order, checking that each changes as many rows and
    /// leaves the same last insert rowid as the first time. The caller has rolled the
    /// transaction back and begun it again on an unchanged database.
    pub(super) fn replay(&self, conn: &Connection) -> Result<(), String> {
        if let Some(reason) = &self.unreplayable {
            return Err(format!("the group's writes cannot be replayed: {reason}"));
        }
        for (n, write) in self.writes.iter().enumerate() {
            let mut statement = conn
                .prepare_cached(&write.sql)
                .map_err(|e| format!("replaying write {}: {e}", n + 1))?;
            let mut rows = statement
                .query(params_from_iter(&write.params))
                .map_err(|e| format!("replaying write {}: {e}", n + 1))?;
            while rows
                .next()
                .map_err(|e| format!("replaying write {}: {e}", n + 1))?
                .is_some()
            {}
            drop(rows);
            let changes = conn.changes();
            let rowid = write.inserted_rowid.map(|_| conn.last_insert_rowid());
            if (changes, rowid) != (write.changes, write.inserted_rowid) {
                return Err(format!(
                    "replaying write {} changed {changes} rows (rowid {rowid:?}), not {} \
                     (rowid {:?}) as the first time: {}",
                    n + 1,
                    write.changes,
                    write.inserted_rowid,
                    write.sql
                ));
            }
        }
        Ok(())
    }
}

/// A parameter as an owned value, if it is one SQLite stores.
fn owned(param: &dyn ToSql) -> Option<Value> {
    match param.to_sql().ok()? {
        ToSqlOutput::Borrowed(value) => Value::try_from(value).ok(),
        ToSqlOutput::Owned(value) => Some(value),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
            .unwrap();
        conn
    }

    fn write(conn: &Connection, log: &mut WriteLog, sql: &str, params: &[&dyn ToSql]) {
        let moved = conn.prepare_cached(sql).unwrap().execute(params).unwrap();
        log.record(conn, sql, params, moved as u64);
    }

    /// Logs two writes: row 'a' inserted, then renamed 'c'.
    fn insert_a_then_rename_it(conn: &Connection) -> WriteLog {
        let mut log = WriteLog::default();
        write(conn, &mut log, "INSERT INTO t (v) VALUES (?1)", &[&"a"]);
        write(
            conn,
            &mut log,
            "UPDATE t SET v = ?1 WHERE v = ?2",
            &[&"c", &"a"],
        );
        log
    }

    #[test]
    fn a_replay_on_the_same_rows_does_the_same_writes() {
        let conn = table();
        conn.execute_batch("BEGIN").unwrap();
        let mut log = insert_a_then_rename_it(&conn);
        write(&conn, &mut log, "INSERT INTO t (v) VALUES (?1)", &[&"b"]);
        conn.execute_batch("ROLLBACK; BEGIN").unwrap();
        log.replay(&conn).unwrap();
        let rows: Vec<(i64, String)> = conn
            .prepare("SELECT id, v FROM t ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(rows, vec![(1, "c".to_owned()), (2, "b".to_owned())]);
    }

    #[test]
    fn a_replay_that_meets_other_rows_is_refused() {
        let conn = table();
        conn.execute_batch("BEGIN").unwrap();
        let log = insert_a_then_rename_it(&conn);
        conn.execute_batch("ROLLBACK").unwrap();
        // Another writer's row: the insert gets another rowid.
        conn.execute_batch("INSERT INTO t (v) VALUES ('other'); BEGIN")
            .unwrap();
        let error = log.replay(&conn).unwrap_err();
        assert!(error.contains("rowid Some(2)"), "{error}");
    }

    #[test]
    fn a_replay_whose_update_changes_fewer_rows_is_refused() {
        let conn = table();
        conn.execute_batch("INSERT INTO t (v) VALUES ('a'); BEGIN")
            .unwrap();
        let mut log = WriteLog::default();
        write(
            &conn,
            &mut log,
            "UPDATE t SET v = ?1 WHERE v = ?2",
            &[&"c", &"a"],
        );
        conn.execute_batch("ROLLBACK; UPDATE t SET v = 'z'; BEGIN")
            .unwrap();
        let error = log.replay(&conn).unwrap_err();
        assert!(error.contains("changed 0 rows"), "{error}");
    }

    #[test]
    fn an_unreplayable_member_makes_its_group_unreplayable() {
        let conn = table();
        let mut group = WriteLog::default();
        let mut member = WriteLog::default();
        member.mark_unreplayable("a write nobody logged".to_owned());
        group.extend(member);
        let error = group.replay(&conn).unwrap_err();
        assert!(error.contains("a write nobody logged"), "{error}");
    }
}
