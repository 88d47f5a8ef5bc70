//! airlock-sqlite persists what core built and knows nothing else of airlock.
//!
//! `SqliteStore`: the embedded production [`Store`] (SPEC §2.2, §7.5, §13, §14, §16 #40–#41). It
//! depends on core alone: never on the host, a gateway or the HTTP crate (structural test).
//!
//! One file holds every table of §14 and Part II's additions (`schema`, applied through
//! `rusqlite_migration`, so `PRAGMA user_version` counts the migrations applied). Each store keeps one writing connection with the per-connection
//! pragmas of §14 — `journal_mode=WAL`, `synchronous=FULL` (a committed watermark must survive
//! power loss, G4), `foreign_keys=ON`, `busy_timeout=5000` — and several processes may open the
//! same file: every write transaction takes the write lock up front with `BEGIN IMMEDIATE`,
//! and a process that finds it held waits up to the busy timeout. Read-only transactions
//! (`Store::read`) run on a pool of `query_only` connections beside the writer (`readers`).
//!
//! Transactions are grouped (`group`): concurrent `transact` calls run one after another in one
//! shared `BEGIN IMMEDIATE … COMMIT` (a failed one undone alone), and return only after the
//! COMMIT that made them durable. `tx` maps each `StoreTx` method to SQL with `MemStore`'s
//! semantics; `rows` converts rows and records. The contract suite
//! (`airlock_core::testing::contract`) checks both stores alike.

mod arguments;
mod checkpoint;
mod group;
#[cfg(test)]
mod hot_statements;
mod journal;
mod kept;
mod planner_inputs;
mod readers;
mod recent;
mod results;
mod rows;
mod schema;
mod stored_events;
mod stored_json;
mod stored_state;
mod tuning;
mod tx;
mod write_log;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use airlock_core::store::{Store, StoreTx, TxError};

pub use group::GroupStats;
pub use schema::SCHEMA_VERSION;
use tuning::{BUSY_TIMEOUT, STATEMENT_CACHE_CAPACITY};

/// Why a store could not be opened or inspected.
#[derive(Debug, thiserror::Error)]
pub enum SqliteError {
    /// The file or its directory cannot be written (a read-only mount, or permissions). The
    /// store needs write access even for read commands: every process records its policy (SPEC
    /// §7.5), and WAL mode keeps its index in a `-shm` file beside the database.
    #[error(
        "the store '{path}' is read-only here ({reason}); airlock writes to its store even to \
         read it (every process records its policy, and WAL needs its -shm file beside the \
         database): make it writable, or copy the data directory to a writable place ({source})"
    )]
    ReadOnly {
        path: PathBuf,
        reason: String,
        #[source]
        source: Box<SqliteError>,
    },
    #[error("cannot open '{path}': {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot set PRAGMA {pragma}: {source}")]
    Pragma {
        pragma: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    /// The file refused a required setting (e.g. WAL on a file system without shared memory).
    #[error("PRAGMA {pragma} is {actual}, not {expected}")]
    PragmaMismatch {
        pragma: &'static str,
        expected: String,
        actual: String,
    },
    #[error("cannot migrate the schema: {0}")]
    Migration(#[from] rusqlite_migration::Error),
    #[error("cannot read the store: {0}")]
    Query(#[source] rusqlite::Error),
    /// The file claims the current schema version but its tables, indexes or triggers differ
    /// from what this build creates: a store from another build, or one edited by hand (an
    /// append-only trigger dropped, say). Nothing is written to it.
    #[error("the store's schema differs from this build's: {0}")]
    SchemaMismatch(String),
}

/// The connection settings as SQLite reports them, for tests and `doctor`-style checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PragmaReport {
    /// `wal`.
    pub journal_mode: String,
    /// 2 = FULL.
    pub synchronous: i64,
    /// 1 = enforced.
    pub foreign_keys: i64,
    pub busy_timeout_ms: i64,
    /// [`SCHEMA_VERSION`] once migrated.
    pub user_version: i64,
}

/// The SQLite store. Share it behind an `Arc`; `transact` may be called from many threads.
pub struct SqliteStore {
    path: PathBuf,
    group: group::GroupCommit,
    readers: readers::Readers,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`, sets the §14 pragmas and migrates the
    /// schema to [`SCHEMA_VERSION`].
    ///
    /// A store on a read-only file system (or in a directory this user may not write) fails
    /// with [`SqliteError::ReadOnly`], which says so, rather than with SQLite's "unable to open
    /// database file" from the first pragma that needs the WAL index.
    pub fn open(path: &Path) -> Result<SqliteStore, SqliteError> {
        without_memory_statistics();
        let conn = open_writer(path).map_err(|error| match read_only_reason(path) {
            Some(reason) => SqliteError::ReadOnly {
                path: path.to_owned(),
                reason,
                source: Box::new(error),
            },
            None => error,
        })?;
        let checkpointer = open_checkpointer(path)?;
        let inputs = Arc::new(planner_inputs::PlannerInputs::default());
        Ok(SqliteStore {
            path: path.to_owned(),
            group: group::GroupCommit::new(conn, checkpointer, Arc::clone(&inputs)),
            readers: readers::Readers::new(&by_path(path), inputs),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pragmas as this store's connection sees them.
    pub fn pragma_report(&self) -> Result<PragmaReport, SqliteError> {
        self.group.with_connection(|conn| {
            let text = |name: &str| -> Result<String, SqliteError> {
                conn.pragma_query_value(None, name, |row| row.get(0))
                    .map_err(SqliteError::Query)
            };
            let number = |name: &str| -> Result<i64, SqliteError> {
                conn.pragma_query_value(None, name, |row| row.get(0))
                    .map_err(SqliteError::Query)
            };
            Ok(PragmaReport {
                journal_mode: text("journal_mode")?,
                synchronous: number("synchronous")?,
                foreign_keys: number("foreign_keys")?,
                busy_timeout_ms: number("busy_timeout")?,
                user_version: number("user_version")?,
            })
        })
    }

    /// How many transactions have shared how many commits so far.
    pub fn group_stats(&self) -> GroupStats {
        self.group.stats()
    }
}

impl Store for SqliteStore {
    /// One atomic transaction: a member of a shared `BEGIN IMMEDIATE … COMMIT`, returned only
    /// once that COMMIT succeeded (see the `group` module).
    fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.group.transact(f)
    }

    /// On a pooled `query_only` connection, beside the writer (see the `readers` module).
    fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.readers.read(f)
    }
}

/// Turns off SQLite's memory statistics, once per process and before SQLite initializes.
///
/// With statistics on (the bundled build's default), every allocation SQLite makes takes one
/// process-wide mutex to count bytes, and a write transaction here allocates a great deal (each
/// page a member's savepoint touched was copied into an in-memory sub-journal, before members
/// lost their savepoints). `perf` put about 4 % of the worker benchmark's CPU in that counting (the mutex and the
/// size bookkeeping around `malloc`). Nothing in airlock reads the statistics
/// (`sqlite3_memory_used`, `sqlite3_status`) or sets a heap limit, which needs them, so nothing
/// else changes. SQLite accepts the setting only before it initializes; if something else in
/// the process initialized it first, the call is refused with `SQLITE_MISUSE` and changes
/// nothing, which is harmless, so the result is ignored. [`SqliteStore::open`] calls it; a
/// process that opens other SQLite connections before its first store (the benchmarks' raw
/// commit probe) calls it first, so that every connection runs with the same setting.
pub fn without_memory_statistics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: SQLITE_CONFIG_MEMSTATUS takes exactly one `int` argument. The call only sets
        // a flag of SQLite's global configuration, and is refused once SQLite is initialized.
        let _ = unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS,
                0 as std::ffi::c_int,
            )
        };
    });
}

/// The writing connection, configured, migrated and checked.
fn open_writer(path: &Path) -> Result<Connection, SqliteError> {
    let open_error = |source| SqliteError::Open {
        path: path.to_owned(),
        source,
    };
    let mut conn = Connection::open_with_flags(by_path(path), open_flags()).map_err(open_error)?;
    configure(&conn)?;
    migrate(&mut conn)?;
    verify_schema(&conn)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    Ok(conn)
}

/// The checkpointer thread on a connection of its own (see the `checkpoint` module), set up
/// like the writer for what a checkpoint does: wait for a busy file, sync fully. If the thread
/// cannot be started, `None`: the writer's commits then checkpoint inline, as SQLite's
/// automatic checkpoint did.
fn open_checkpointer(path: &Path) -> Result<Option<checkpoint::Checkpointer>, SqliteError> {
    let conn = Connection::open_with_flags(by_path(path), open_flags()).map_err(|source| {
        SqliteError::Open {
            path: path.to_owned(),
            source,
        }
    })?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|source| SqliteError::Pragma {
            pragma: "busy_timeout",
            source,
        })?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|source| SqliteError::Pragma {
            pragma: "synchronous",
            source,
        })?;
    Ok(checkpoint::Checkpointer::start(conn).ok())
}

/// Why the store at `path` cannot be written, asked only after opening it failed: the file
/// opened for writing (nothing created, nothing changed), then its directory, where SQLite
/// must create the `-wal` and `-shm` files, by creating and removing an empty probe file.
/// `None` if both can be written, so the failure had another cause.
fn read_only_reason(path: &Path) -> Option<String> {
    use std::fs::OpenOptions;
    use std::io::ErrorKind;
    let refused = |error: std::io::Error| match error.kind() {
        ErrorKind::ReadOnlyFilesystem | ErrorKind::PermissionDenied => Some(error.to_string()),
        _ => None,
    };
    if let Err(error) = OpenOptions::new().write(true).open(path)
        && let Some(reason) = refused(error)
    {
        return Some(reason);
    }
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let probe = directory.join(format!(".airlock-write-probe-{}", std::process::id()));
    match OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            None
        }
        Err(error) => refused(error).map(|reason| format!("directory: {reason}")),
    }
}

/// How every connection opens the file: by path, never as a URI. A URI would let a data
/// directory named `file:dd` put the store in `./dd` while the workspaces and the outbox go to
/// `./file:dd`, and the next command would find no store there. The bundled SQLite is built
/// with `SQLITE_USE_URI`, which reads any name beginning `file:` as a URI whatever the open
/// flags, so such a relative path is also spelled `./file:…` ([`by_path`]).
fn open_flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// `path` spelled so that SQLite cannot read it as a URI: only a name that begins with `file:`
/// is one, so a relative path that does gets a leading `./`.
fn by_path(path: &Path) -> PathBuf {
    if path.as_os_str().as_encoded_bytes().starts_with(b"file:") {
        Path::new(".").join(path)
    } else {
        path.to_owned()
    }
}

/// The per-connection pragmas of SPEC §14. The busy timeout comes first so that switching the
/// journal mode waits for another process instead of failing.
fn configure(conn: &Connection) -> Result<(), SqliteError> {
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|source| SqliteError::Pragma {
            pragma: "busy_timeout",
            source,
        })?;
    let journal_mode = switch_to_wal(conn).map_err(|source| SqliteError::Pragma {
        pragma: "journal_mode",
        source,
    })?;
    if !journal_mode.eq_ignore_ascii_case("wal") {
        return Err(SqliteError::PragmaMismatch {
            pragma: "journal_mode",
            expected: "wal".to_owned(),
            actual: journal_mode,
        });
    }
    // temp_store=MEMORY keeps statement journals (one per multi-row write) in memory rather
    // than in temporary files: they only ever undo a failed statement inside the open
    // transaction, never serve recovery, so durability is unchanged.
    for (pragma, value) in [
        ("synchronous", "FULL"),
        ("foreign_keys", "ON"),
        ("temp_store", "MEMORY"),
    ] {
        conn.pragma_update(None, pragma, value)
            .map_err(|source| SqliteError::Pragma { pragma, source })?;
    }
    checkpoint::hand_checkpoints_off(conn).map_err(|source| SqliteError::Pragma {
        pragma: "wal_autocheckpoint",
        source,
    })?;
    let foreign_keys: i64 = conn
        .pragma_query_value(None, "foreign_keys", |row| row.get(0))
        .map_err(SqliteError::Query)?;
    if foreign_keys != 1 {
        return Err(SqliteError::PragmaMismatch {
            pragma: "foreign_keys",
            expected: "1".to_owned(),
            actual: foreign_keys.to_string(),
        });
    }
    Ok(())
}

/// `PRAGMA journal_mode=WAL`, retried while the file is busy, for up to [`BUSY_TIMEOUT`].
///
/// Switching a new file to WAL upgrades this connection's read lock to the write lock. While
/// another process opening the same new file holds its own read lock, SQLite answers that
/// upgrade `SQLITE_BUSY` at once, without calling the busy handler (two upgraders waiting for
/// each other would deadlock), so `busy_timeout` does not cover it. Each retry starts a fresh
/// statement, which drops the read lock first, so the two openers cannot wait for each other;
/// once one has switched the file, the others find it in WAL already. Seen in CI as a gateway
/// exiting "cannot set PRAGMA journal_mode: database is locked" when two started at once.
fn switch_to_wal(conn: &Connection) -> Result<String, rusqlite::Error> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)) {
            Err(error)
                if error.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(WAL_SWITCH_RETRY);
            }
            answer => return answer,
        }
    }
}

/// The pause between two attempts of [`switch_to_wal`]: long enough for the winner to finish
/// its switch (one write of the header), short beside a process start.
const WAL_SWITCH_RETRY: Duration = Duration::from_millis(5);

/// Checks that the migrated store holds exactly the schema objects this build creates, with
/// the same definitions. `user_version` only counts migrations, so the version alone cannot tell an
/// older build's store, or one whose audit triggers were dropped, from a good one.
fn verify_schema(conn: &Connection) -> Result<(), SqliteError> {
    let expected = schema::expected_objects()?;
    let actual = schema::objects(conn).map_err(SqliteError::Query)?;
    if actual == expected {
        return Ok(());
    }
    let describe = |objects: Vec<&schema::SchemaObject>| {
        objects
            .iter()
            .map(|(kind, name, _)| format!("{kind} {name}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let missing = describe(expected.iter().filter(|o| !actual.contains(o)).collect());
    let unexpected = describe(actual.iter().filter(|o| !expected.contains(o)).collect());
    Err(SqliteError::SchemaMismatch(format!(
        "missing or changed: [{missing}]; not expected: [{unexpected}]"
    )))
}

/// Applies the migrations. Two processes opening a new file at once may both see version 0;
/// the loser's migration fails on the tables the winner created, and is fine if the file is now
/// at the latest version.
fn migrate(conn: &mut Connection) -> Result<(), SqliteError> {
    let migrations = schema::migrations();
    // The migration's own transaction takes the write lock up front too (SPEC §14), so a
    // second process waits for the first instead of failing on a lock upgrade.
    conn.set_transaction_behavior(TransactionBehavior::Immediate);
    match migrations.to_latest(conn) {
        Ok(()) => Ok(()),
        Err(error) => {
            let version: i64 = conn
                .pragma_query_value(None, "user_version", |row| row.get(0))
                .map_err(SqliteError::Query)?;
            if version == SCHEMA_VERSION {
                Ok(())
            } else {
                Err(SqliteError::Migration(error))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_relative_name_beginning_file_colon_is_respelled() {
        assert_eq!(
            by_path(Path::new("file:dd/airlock.sqlite3")),
            Path::new("./file:dd/airlock.sqlite3")
        );
        for unchanged in [
            "/data/file:dd/a.sqlite3",
            "dd/file:x",
            "./file:dd/a",
            "a.sqlite3",
        ] {
            assert_eq!(by_path(Path::new(unchanged)), Path::new(unchanged));
        }
    }
}
