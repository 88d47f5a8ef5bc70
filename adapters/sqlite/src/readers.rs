//! Read-only transactions beside the writer (`Store::read`). The writer's connection is one
//! lock that closures and COMMITs hold in turn (the `group` module). A read needs none of
//! that. In WAL mode, a second connection reads a consistent snapshot of everything committed
//! before its first statement, while the writer goes on. So reads run here on a small pool of
//! `query_only` connections: they neither queue behind a group nor wait for its fsync. A write
//! inside a read fails in SQLite (`SQLITE_READONLY`) and reaches the caller as `Backend`.
//!
//! A connection joins the pool only after a clean `COMMIT` or `ROLLBACK`. One that SQLite left
//! inside a transaction is dropped, so no snapshot outlives its read.
//!
//! **`BEGIN DEFERRED`, not `IMMEDIATE`.** SPEC §14 says every transaction is `BEGIN IMMEDIATE`.
//! The reason it gives is "write lock up front, no upgrades": a transaction that starts reading
//! and then wants to write can meet `SQLITE_BUSY` at the upgrade. A `query_only` connection
//! never upgrades. Taking the write lock for a read would only queue it behind every other
//! process's writer. So reads begin deferred. Every transaction that can write still begins
//! `IMMEDIATE` (the `group` module).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::{Connection, OpenFlags};

use airlock_core::store::{StoreTx, TxError};

use super::group::control;
use super::planner_inputs::PlannerInputs;
use super::tuning::{BUSY_TIMEOUT, STATEMENT_CACHE_CAPACITY};
use super::tx::{SqliteTx, tx_error};

/// Idle connections kept for reuse; more can be open at once while reads overlap.
const MAX_IDLE: usize = 8;

pub(super) struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    inputs: Arc<PlannerInputs>,
}

impl Readers {
    pub(super) fn new(path: &Path, inputs: Arc<PlannerInputs>) -> Readers {
        Readers {
            path: path.to_owned(),
            idle: Mutex::new(Vec::new()),
            inputs,
        }
    }

    pub(super) fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        let conn = match self.take() {
            Some(conn) => conn,
            None => self.open()?,
        };
        control(&conn, "BEGIN DEFERRED").map_err(tx_error)?;
        // `finish` writes a journal row a read appended to, which the `query_only` connection
        // refuses: a write attempted in a read fails as it did before the journal.
        let returned = catch_unwind(AssertUnwindSafe(|| {
            let mut tx = SqliteTx::new(&conn, &self.inputs);
            f(&mut tx).and_then(|returned| tx.finish().map(|()| returned))
        }));
        // A read commits nothing: COMMIT only ends the snapshot. After an error, ROLLBACK.
        let end = if matches!(returned, Ok(Ok(_))) {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        let ended = if conn.is_autocommit() {
            Ok(())
        } else {
            control(&conn, end)
        };
        if ended.is_ok() && conn.is_autocommit() {
            self.give_back(conn);
        }
        match returned {
            Err(payload) => resume_unwind(payload),
            Ok(result) => {
                let value = result?;
                ended.map_err(tx_error)?;
                Ok(value)
            }
        }
    }

    fn take(&self) -> Option<Connection> {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }

    fn give_back(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// A read connection: the writer has already set WAL mode (a property of the file) and
    /// migrated the schema; this one only refuses writes and waits out a busy file.
    fn open(&self) -> Result<Connection, TxError> {
        // By path, never as a URI (`open_flags` and `by_path` in the crate root).
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(tx_error)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(tx_error)?;
        conn.pragma_update(None, "query_only", "ON")
            .map_err(tx_error)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
        Ok(conn)
    }
}
