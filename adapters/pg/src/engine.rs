//! The synchronous face of an asynchronous client (SPEC §18 "Client").
//!
//! core's `Store` port is synchronous: `transact` runs a closure that calls `StoreTx` methods one
//! after another, each needing its answer before core decides the next. The client,
//! tokio-postgres, is asynchronous. The store therefore owns a small tokio runtime of its own
//! (one worker thread, `airlock-pg`) that drives every connection's socket, and the thread that
//! called `transact` waits on each request with a plain `futures_executor::block_on`. That thread
//! is never a runtime thread that also polls heartbeats: the host calls stores through
//! `BlockingStore` (`block_in_place`), and a caller that is not on a runtime at all (tests, the
//! contract suite) works the same. Nothing here depends on which runtime, if any, the caller is
//! on, so no "runtime inside a runtime" can arise.
//!
//! **Round trips.** Each wait for the server's answers is one exchange, counted in
//! [`Counters`]: `BEGIN` travels in the same exchange as the transaction's first statement, a
//! write whose answer is not known is pipelined with the `SAVEPOINT` before it and the
//! `RELEASE` after it, a write whose answer is known is sent ahead and answered with the next
//! statement that waits (`pipeline`), and `NOTIFY` shares the exchange of `COMMIT`. A
//! transaction that wrote nothing sends its `COMMIT` without waiting for it. Statements are
//! prepared once per connection (the pool's statement cache); a first use on a connection
//! costs one more exchange.
//!
//! **A failed statement does not end the transaction** (the Store contract lets a caller handle
//! an `Err` and carry on, as SQLite and `MemStore` do): each write runs inside its own savepoint,
//! and a refused write rolls back to it, leaving the transaction as it was. A read that fails,
//! or a savepoint that cannot be restored, marks the transaction failed: every later method
//! answers `Backend`, and the end is a `ROLLBACK`, never a `COMMIT` that PostgreSQL would turn
//! into a silent rollback.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use deadpool_postgres::{ClientWrapper, Object, Pool};
use futures_util::future::{join, join_all, join3};
use futures_util::task::noop_waker_ref;
use std::task::{Context, Poll};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use airlock_core::ids::RunId;
use airlock_core::store::TxError;

use crate::pipeline::{self, Encoded, Pending};

/// The channel a commit that queued a run notifies (SPEC §18 "Wake-up"); the payload is the
/// run id.
pub const WAKE_CHANNEL: &str = "airlock_run_queued";

/// Per-statement savepoint name.
const WRITE_SAVEPOINT: &str = "airlock_write";

/// How many exchanges with the server and transactions a store made; for the bench and tests.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub round_trips: AtomicU64,
    pub transactions: AtomicU64,
    pub commits: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundTrips {
    /// Exchanges with the server (each a request, or several pipelined, and their answers).
    pub round_trips: u64,
    /// `transact` and `read` calls that reached the server.
    pub transactions: u64,
    /// COMMITs of write transactions that succeeded.
    pub commits: u64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> RoundTrips {
        RoundTrips {
            round_trips: self.round_trips.load(Ordering::Relaxed),
            transactions: self.transactions.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
        }
    }

    fn exchange(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }
}

/// The store's own runtime, connection pool and counters.
pub(crate) struct Engine {
    /// `None` only while dropping (see `Drop`).
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    pub(crate) pool: Pool,
    pub(crate) counters: Counters,
    /// Where the server is, for messages: host, port, database, never the password.
    pub(crate) target: String,
}

impl Drop for Engine {
    /// A runtime may not be dropped (a blocking wait) inside another runtime's task, which is
    /// where a host usually drops its store: shut it down in the background instead. Every
    /// connection task ends with it.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Engine {
    pub(crate) fn new(runtime: tokio::runtime::Runtime, pool: Pool, target: String) -> Engine {
        let handle = runtime.handle().clone();
        Engine {
            runtime: Some(runtime),
            handle,
            pool,
            counters: Counters::default(),
            target,
        }
    }

    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }

    /// Waits on `future` from this (synchronous) thread. The store's runtime is entered, so
    /// that connecting (a socket registered with its reactor, a connection task spawned onto
    /// it, a connect timeout) happens there; the future itself is polled here.
    pub(crate) fn wait<F: Future>(&self, future: F) -> F::Output {
        let _entered = self.handle.enter();
        futures_executor::block_on(future)
    }

    /// A pooled connection, or `Backend` naming the server.
    pub(crate) fn connection(&self) -> Result<Object, TxError> {
        self.wait(self.pool.get()).map_err(|e| {
            TxError::Backend(format!(
                "cannot reach PostgreSQL at {}: {}",
                self.target,
                describe_pool_error(&e)
            ))
        })
    }
}

/// Two statements' rows, both requests sent on the first poll, in this order (the server runs
/// them in that order; the second starts once the first is done).
async fn in_order(
    client: &ClientWrapper,
    first: (&Statement, &[&(dyn ToSql + Sync)]),
    second: (&Statement, &[&(dyn ToSql + Sync)]),
) -> Result<(Vec<Row>, Vec<Row>), tokio_postgres::Error> {
    let (first, second) = join(
        client.query(first.0, first.1),
        client.query(second.0, second.1),
    )
    .await;
    Ok((first?, second?))
}

/// A pool error in words, with the client error's cause when there is one.
pub(crate) fn describe_pool_error(error: &deadpool_postgres::PoolError) -> String {
    match error {
        deadpool_postgres::PoolError::Backend(e) => describe_client_error(e),
        other => other.to_string(),
    }
}

/// A client error in words: the server's message for a database error, else the error and its
/// cause (tokio-postgres keeps e.g. "Connection refused" in the source).
pub(crate) fn describe_client_error(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    match std::error::Error::source(error) {
        Some(source) => format!("{error}: {source}"),
        None => error.to_string(),
    }
}

/// Maps a statement's error to core's kinds (SPEC §18: unique violations → `Conflict`):
/// uniqueness, CHECK, NOT NULL and the append-only and contiguity triggers are `Conflict`
/// (phrased like the SQLite store's messages, which name the constraint), a missing parent row
/// is `NotFound` (as in `MemStore`), and everything else — a lost connection, a write inside a
/// read-only transaction, a deadlock — is `Backend`.
pub(crate) fn tx_error(error: &tokio_postgres::Error) -> TxError {
    let Some(db) = error.as_db_error() else {
        return TxError::Backend(describe_client_error(error));
    };
    let constraint = db.constraint().unwrap_or("");
    let code = db.code();
    if *code == SqlState::FOREIGN_KEY_VIOLATION {
        TxError::NotFound
    } else if *code == SqlState::UNIQUE_VIOLATION {
        let table = db.table().unwrap_or("");
        if constraint.ends_with("_pkey") {
            TxError::Conflict(format!("{table}: duplicate id ({constraint})"))
        } else {
            TxError::Conflict(format!("UNIQUE {constraint}: {}", db.message()))
        }
    } else if *code == SqlState::CHECK_VIOLATION {
        TxError::Conflict(format!("CHECK {constraint}: {}", db.message()))
    } else if *code == SqlState::NOT_NULL_VIOLATION || *code == SqlState::RESTRICT_VIOLATION {
        TxError::Conflict(db.message().to_owned())
    } else {
        TxError::Backend(format!("{} ({})", db.message(), code.code()))
    }
}

/// Whether a transaction may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// `transact`: READ COMMITTED, guarded writes, row locks on the rows it reads to change.
    Write,
    /// `read`: one REPEATABLE READ, READ ONLY snapshot; a write inside fails (`Backend`).
    Read,
}

impl Access {
    fn begin(self) -> &'static str {
        match self {
            Access::Write => "BEGIN ISOLATION LEVEL READ COMMITTED, READ WRITE",
            Access::Read => "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
        }
    }
}

/// How a transaction ended, for the pool: whether its connection can be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Connection {
    Reusable,
    /// The connection's state is unknown (a lost answer, a failed ROLLBACK): drop it.
    Discard,
}

/// One transaction on one pooled connection: the I/O half of `PgTx`.
pub(crate) struct Session<'e> {
    engine: &'e Engine,
    client: &'e ClientWrapper,
    pub(crate) access: Access,
    /// Whether `BEGIN` has been sent (with the first statement).
    begun: bool,
    /// Why the transaction can no longer commit, once something went wrong that a savepoint
    /// could not undo.
    failed: Option<String>,
    /// Runs this transaction made QUEUED: their ids are notified with the COMMIT.
    pub(crate) queued: Vec<RunId>,
    /// Writes sent whose answers are not collected yet (see `pipeline`).
    pending: Vec<Pending<'e>>,
    /// Whether a write was sent: a transaction without one ends without waiting.
    wrote: bool,
}

impl<'e> Session<'e> {
    pub(crate) fn new(engine: &'e Engine, client: &'e ClientWrapper, access: Access) -> Self {
        Session {
            engine,
            client,
            access,
            begun: false,
            failed: None,
            queued: Vec::new(),
            pending: Vec::new(),
            wrote: false,
        }
    }

    fn check_open(&self) -> Result<(), TxError> {
        match &self.failed {
            Some(reason) => Err(TxError::Backend(format!(
                "the transaction can no longer commit: {reason}"
            ))),
            None => Ok(()),
        }
    }

    fn fail(&mut self, error: TxError) -> TxError {
        if self.failed.is_none() {
            self.failed = Some(match &error {
                TxError::Backend(message) | TxError::Conflict(message) => message.clone(),
                other => other.to_string(),
            });
        }
        error
    }

    /// The prepared statement for `sql` on this connection (one exchange on its first use).
    ///
    /// With writes sent ahead, a statement not prepared yet waits together with their answers:
    /// a refused write is then reported as itself, not as the "transaction is aborted" the
    /// server answers the preparation with.
    fn statement(&mut self, sql: &str) -> Result<Statement, TxError> {
        self.check_open()?;
        let cached = self.client.statement_cache.size();
        let client = self.client;
        let mut prepare = Box::pin(client.prepare_cached(sql));
        let prepared = if self.pending.is_empty() {
            self.engine.wait(prepare)
        } else {
            // A cached statement is ready at once; otherwise the first poll sent the request.
            match prepare
                .as_mut()
                .poll(&mut Context::from_waker(noop_waker_ref()))
            {
                Poll::Ready(prepared) => prepared,
                Poll::Pending => {
                    let (settled, prepared) = self.settle_with(prepare);
                    settled?;
                    prepared
                }
            }
        };
        if self.client.statement_cache.size() != cached || prepared.is_err() {
            self.engine.counters.exchange();
        }
        prepared.map_err(|e| {
            let error = tx_error(&e);
            self.fail(error)
        })
    }

    /// A read: rows of one statement. Its failure fails the transaction.
    pub(crate) fn rows(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, TxError> {
        let statement = self.statement(sql)?;
        let client = self.client;
        self.read_with(|| client.query(&statement, params))
    }

    /// Reads sent in one exchange and answered in order. At READ COMMITTED each statement takes
    /// its own snapshot when it starts, so a later one sees everything committed while an
    /// earlier one waited for a row lock (a subquery of the earlier one would not).
    pub(crate) fn rows_each<const N: usize>(
        &mut self,
        statements: [(&str, &[&(dyn ToSql + Sync)]); N],
    ) -> Result<[Vec<Row>; N], TxError> {
        let prepared = statements
            .iter()
            .map(|(sql, _)| self.statement(sql))
            .collect::<Result<Vec<_>, _>>()?;
        let client = self.client;
        let answers: Vec<Vec<Row>> = self.read_with(|| async {
            // `join_all` polls its futures in order, so the requests go out in this order.
            join_all(
                prepared
                    .iter()
                    .zip(&statements)
                    .map(|(statement, (_, params))| client.query(statement, params)),
            )
            .await
            .into_iter()
            .collect()
        })?;
        // `join_all` answers each future once: N statements, N answers.
        answers.try_into().map_err(|answers: Vec<Vec<Row>>| {
            TxError::Backend(format!("{} answers to {N} pipelined reads", answers.len()))
        })
    }

    /// One exchange for a read: with `BEGIN` before it on the transaction's first statement,
    /// else with the answers of the writes sent ahead. Its failure fails the transaction.
    fn read_with<T, F>(&mut self, request: impl FnOnce() -> F) -> Result<T, TxError>
    where
        F: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let client = self.client;
        self.engine.counters.exchange();
        let result = if self.begun {
            let (settled, answer) = self.settle_with(request());
            settled?;
            answer
        } else {
            self.begun = true;
            let (begin, answer) = self
                .engine
                .wait(join(client.batch_execute(self.access.begin()), request()));
            begin.and(answer)
        };
        result.map_err(|e| {
            let error = tx_error(&e);
            self.fail(error)
        })
    }

    /// At most one row of a read.
    pub(crate) fn row(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, TxError> {
        Ok(self.rows(sql, params)?.into_iter().next())
    }

    /// A write returning rows (`RETURNING`), in its own savepoint: a refused write leaves the
    /// transaction as it was before it.
    pub(crate) fn write_rows(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, TxError> {
        self.write_rows_after(None, sql, params)
    }

    /// [`Session::write_rows`], with `setup` (plain SQL, no parameters) run inside the same
    /// savepoint just before the statement, in the same exchange: a refused statement rolls
    /// `setup`'s effects back with its own, locks included.
    pub(crate) fn write_rows_after(
        &mut self,
        setup: Option<&str>,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, TxError> {
        let statement = self.statement(sql)?;
        let client = self.client;
        self.guarded(setup, || client.query(&statement, params))
    }

    /// A write returning how many rows it changed, in its own savepoint.
    pub(crate) fn write(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, TxError> {
        let statement = self.statement(sql)?;
        let client = self.client;
        self.guarded(None, || client.execute(&statement, params))
    }

    /// [`Session::write_rows_after`] followed by a read, in the same savepoint and the same
    /// exchange: for a read whose answer the caller will want next anyway, taken (a statement
    /// of its own) after the write got its locks. A refused write fails the read with it; a
    /// failed read undoes the write (the savepoint) and is reported as the write's error.
    pub(crate) fn write_then_read(
        &mut self,
        setup: Option<&str>,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        read_sql: &str,
        read_params: &[&(dyn ToSql + Sync)],
    ) -> Result<(Vec<Row>, Vec<Row>), TxError> {
        let statement = self.statement(sql)?;
        let read = self.statement(read_sql)?;
        let client = self.client;
        self.guarded(setup, || {
            in_order(client, (&statement, params), (&read, read_params))
        })
    }

    /// A read run before the transaction begins, as a statement of its own (autocommit), in
    /// one exchange: for work whose effect the transaction's snapshot must already include
    /// (the event horizon's waits, `tx`'s "Event ids"). `Backend` once the transaction has
    /// begun, since its snapshot may then be older than the statement.
    pub(crate) fn row_before_begin(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, TxError> {
        if self.begun {
            return Err(TxError::Backend(
                "a statement meant to run before the transaction began came after it began"
                    .to_owned(),
            ));
        }
        let statement = self.statement(sql)?;
        self.engine.counters.exchange();
        let rows = self
            .engine
            .wait(self.client.query(&statement, params))
            .map_err(|e| tx_error(&e))?;
        Ok(rows.into_iter().next())
    }

    /// A write whose answer is known (it changes exactly one row), sent now and answered with
    /// the next statement that waits (see `pipeline`): no exchange of its own, no savepoint. A
    /// different answer fails the transaction. In a read transaction it is sent as any write
    /// there, and refused at once.
    pub(crate) fn write_later(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<(), TxError> {
        if self.access == Access::Read {
            return self.write(sql, params).map(drop);
        }
        let statement = self.statement(sql)?;
        let encoded = Encoded::all(params, statement.params())?;
        let client = self.client;
        if !self.begun {
            self.begun = true;
            let begin = self.access.begin();
            self.send_ahead(Box::pin(async move {
                client
                    .batch_execute(begin)
                    .await
                    .map_err(|e| TxError::Backend(describe_client_error(&e)))
            }))?;
        }
        self.wrote = true;
        self.send_ahead(Box::pin(async move {
            match client.execute_raw(&statement, encoded).await {
                Ok(1) => Ok(()),
                Ok(changed) => Err(TxError::Backend(format!(
                    "a pipelined write changed {changed} rows where 1 was certain"
                ))),
                Err(e) => Err(tx_error(&e)),
            }
        }))
    }

    /// Sends `request` and keeps it for its answer; a request that cannot be sent fails the
    /// transaction.
    fn send_ahead(&mut self, request: Pending<'e>) -> Result<(), TxError> {
        match pipeline::send(request) {
            Ok(Some(pending)) => {
                self.pending.push(pending);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(error) => Err(self.fail(error)),
        }
    }

    /// Waits for `next` (sent after every pending write: it is first polled here) together
    /// with the pending writes' answers, in one exchange. The first write whose answer was
    /// not the predicted one fails the transaction and is returned.
    fn settle_with<F: Future>(&mut self, next: F) -> (Result<(), TxError>, F::Output) {
        if self.pending.is_empty() {
            return (Ok(()), self.engine.wait(next));
        }
        let pending = std::mem::take(&mut self.pending);
        let (answers, output) = self.engine.wait(join(join_all(pending), next));
        match answers.into_iter().find_map(Result::err) {
            Some(error) => (Err(self.fail(error)), output),
            None => (Ok(()), output),
        }
    }

    /// Whether `BEGIN` has been sent.
    pub(crate) fn begun(&self) -> bool {
        self.begun
    }

    /// `SAVEPOINT` (after `BEGIN` on the first statement), `setup` if any, the statement and
    /// `RELEASE`, sent together in one exchange; on a refusal, `ROLLBACK TO` in a second.
    fn guarded<T, F>(
        &mut self,
        setup: Option<&str>,
        statement: impl FnOnce() -> F,
    ) -> Result<T, TxError>
    where
        F: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let mut prefix = if self.begun {
            format!("SAVEPOINT {WRITE_SAVEPOINT}")
        } else {
            format!("{}; SAVEPOINT {WRITE_SAVEPOINT}", self.access.begin())
        };
        if let Some(setup) = setup {
            prefix.push_str("; ");
            prefix.push_str(setup);
        }
        self.begun = true;
        let release = format!("RELEASE SAVEPOINT {WRITE_SAVEPOINT}");
        let client = self.client;
        self.engine.counters.exchange();
        self.wrote = true;
        let (settled, (opened, result, released)) = self.settle_with(join3(
            client.batch_execute(&prefix),
            statement(),
            client.batch_execute(&release),
        ));
        settled?;
        if let Err(e) = opened {
            let error = TxError::Backend(describe_client_error(&e));
            return Err(self.fail(error));
        }
        match (result, released) {
            (Ok(value), Ok(())) => Ok(value),
            (Ok(_), Err(e)) => {
                let error = TxError::Backend(describe_client_error(&e));
                Err(self.fail(error))
            }
            (Err(e), _) => {
                let error = tx_error(&e);
                self.engine.counters.exchange();
                let undo = format!(
                    "ROLLBACK TO SAVEPOINT {WRITE_SAVEPOINT}; RELEASE SAVEPOINT {WRITE_SAVEPOINT}"
                );
                match self.engine.wait(client.batch_execute(&undo)) {
                    Ok(()) => Err(error),
                    Err(undo_error) => {
                        self.fail(TxError::Backend(describe_client_error(&undo_error)));
                        Err(error)
                    }
                }
            }
        }
    }

    /// Ends the transaction: `COMMIT` (with the NOTIFYs of runs it queued) if `keep` and
    /// nothing failed, else `ROLLBACK`.
    ///
    /// **The lost COMMIT** (SPEC §18): if the connection breaks while COMMIT is on its way, the
    /// transaction may or may not have committed. The answer is `Backend` — the caller abandons
    /// what it was doing, exactly as for any storage error — and the connection is dropped.
    /// Nothing here retries: a START whose COMMIT answer was lost is decided later by recovery
    /// from what the database holds, never by sending the effect again.
    pub(crate) fn finish(mut self, keep: bool) -> (Result<(), TxError>, Connection) {
        if !self.begun {
            return (
                self.failed
                    .map_or(Ok(()), |reason| Err(TxError::Backend(reason))),
                Connection::Reusable,
            );
        }
        let client = self.client;
        if keep && self.failed.is_none() && !self.wrote && self.queued.is_empty() {
            // Nothing to make durable and nothing to check: the COMMIT (which releases any row
            // locks) is sent and the connection handed back without waiting for its answer,
            // which the connection reads before the answer of its next request.
            let commit: Pending<'_> = Box::pin(async move {
                client
                    .batch_execute("COMMIT")
                    .await
                    .map_err(|e| TxError::Backend(describe_client_error(&e)))
            });
            return match pipeline::send(commit) {
                Ok(_) => (Ok(()), Connection::Reusable),
                Err(_) => (Ok(()), Connection::Discard),
            };
        }
        self.engine.counters.exchange();
        if keep && self.failed.is_none() {
            let mut sql = String::new();
            let mut notified: Vec<RunId> = Vec::new();
            for run in &self.queued {
                if !notified.contains(run) {
                    // A run id is a hyphenated UUID: nothing in it needs quoting.
                    sql.push_str(&format!("NOTIFY {WAKE_CHANNEL}, '{run}'; "));
                    notified.push(*run);
                }
            }
            sql.push_str("COMMIT");
            // A pipelined write refused: PostgreSQL has aborted the transaction, and answers
            // the COMMIT by rolling it back.
            let (settled, committed) = self.settle_with(client.batch_execute(&sql));
            match (settled, committed) {
                (Err(error), committed) => {
                    let connection = if committed.is_ok() {
                        Connection::Reusable
                    } else {
                        Connection::Discard
                    };
                    (Err(error), connection)
                }
                (Ok(()), Ok(())) => {
                    if self.access == Access::Write {
                        self.engine.counters.commits.fetch_add(1, Ordering::Relaxed);
                    }
                    (Ok(()), Connection::Reusable)
                }
                (Ok(()), Err(e)) => (
                    Err(TxError::Backend(format!(
                        "the COMMIT's outcome is unknown: {}",
                        describe_client_error(&e)
                    ))),
                    Connection::Discard,
                ),
            }
        } else {
            let (_, rolled_back) = self.settle_with(client.batch_execute("ROLLBACK"));
            let connection = if rolled_back.is_ok() {
                Connection::Reusable
            } else {
                Connection::Discard
            };
            let result = match self.failed {
                Some(reason) if keep => Err(TxError::Backend(format!(
                    "the transaction was rolled back: {reason}"
                ))),
                _ => Ok(()),
            };
            (result, connection)
        }
    }
}
