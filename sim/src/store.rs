//! `SimStore`: the one durable store of a simulated world. It is core's `MemStore` (committed
//! transactions survive a node kill; SPEC §14's crash model) plus an observer that the checkers
//! need and the store itself cannot keep: whether a transaction is open right now (§16 #12), the
//! events each commit appended (commit boundaries, for #20, #28, #32, #40) and every status an
//! invocation row was seen in after a commit (#15).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use airlock_core::events::Event;
use airlock_core::ids::InvocationId;
use airlock_core::invocation::Invocation;
use airlock_core::mem_store::{MemSnapshot, MemStore, is_rule_breach};
use airlock_core::store::{Store, StoreTx, TxError};

/// What the observer saw across all commits.
#[derive(Debug, Default)]
pub struct CommitLog {
    /// The events of each commit that appended any, in commit order.
    pub commits: Vec<Vec<Event>>,
    /// The first version of every invocation row seen after a commit (its immutable fields).
    first: BTreeMap<InvocationId, Invocation>,
    /// The latest version seen.
    last: BTreeMap<InvocationId, Invocation>,
    /// §16 #15 breaches found at commit time.
    pub violations: Vec<String>,
    /// Writes the store refused because they broke a rule of the rows (§8.1, §8.2, §9.1,
    /// §10.1, §13, §14), not because another writer got there first. Core then abandons the
    /// execution and recovery ends the run in some legal state, so without this list a core
    /// bug that attempts such a write would look like a harmless retry.
    pub refused: Vec<String>,
}

impl CommitLog {
    fn observe(&mut self, row: &Invocation) {
        let first = self.first.entry(row.id).or_insert_with(|| row.clone());
        if !first.same_identity(row) {
            self.violations
                .push(format!("invocation {}: an immutable field changed", row.id));
        }
        if let Some(last) = self.last.get(&row.id) {
            if last.status.is_terminal() && last != row {
                self.violations
                    .push(format!("terminal invocation {} changed", row.id));
            }
            if last.status != row.status && !last.status.may_become(row.status) {
                self.violations.push(format!(
                    "invocation {} moved {} -> {}",
                    row.id, last.status, row.status
                ));
            }
        }
        self.last.insert(row.id, row.clone());
    }
}

pub struct SimStore {
    inner: MemStore,
    open: AtomicUsize,
    log: Mutex<CommitLog>,
}

impl Default for SimStore {
    fn default() -> Self {
        SimStore::new()
    }
}

impl SimStore {
    pub fn new() -> SimStore {
        SimStore {
            inner: MemStore::new(),
            open: AtomicUsize::new(0),
            log: Mutex::new(CommitLog::default()),
        }
    }

    pub fn shared() -> Arc<SimStore> {
        Arc::new(SimStore::new())
    }

    /// Whether a transaction is open at this moment.
    pub fn transaction_open(&self) -> bool {
        self.open.load(Ordering::SeqCst) > 0
    }

    pub fn snapshot(&self) -> MemSnapshot {
        self.inner.snapshot()
    }

    pub fn inspect<R>(&self, f: impl FnOnce(&MemSnapshot) -> R) -> R {
        self.inner.inspect(f)
    }

    /// Whether the invocation with this idempotency key carries a committed watermark.
    pub fn watermarked(&self, key: &str) -> bool {
        self.inner.inspect(|s| {
            s.invocations
                .values()
                .any(|i| i.idempotency_key == key && i.effect_sent_at.is_some())
        })
    }

    /// Whether START has committed for the invocation with this idempotency key: it is RUNNING
    /// or in a status only RUNNING leads to (§9.1).
    pub fn started(&self, key: &str) -> bool {
        use airlock_core::vocab::InvocationStatus::Running;
        self.inner.inspect(|s| {
            s.invocations.values().any(|i| {
                i.idempotency_key == key && (i.status == Running || Running.may_become(i.status))
            })
        })
    }

    /// The last step of `run` whose batch is checkpointed (PENDING or BATCH): the planner
    /// must never be asked for it, or for an earlier step, again (§8.3: a resumed step
    /// re-dispatches its stored batch). `None` when the asking execution's lease epoch is no
    /// longer the run's: a paused worker that wakes may still ask, and is fenced at its next
    /// write.
    pub fn planned_through(&self, run: &airlock_core::run::Run) -> Option<u32> {
        self.inner.inspect(|s| {
            let current = s.runs.get(&run.id)?;
            if current.lease_epoch != run.lease_epoch {
                return None;
            }
            Some(
                s.checkpoints
                    .range((run.id, 0)..=(run.id, u32::MAX))
                    .next_back()
                    .map_or(0, |(_, checkpoint)| checkpoint.state.current_step()),
            )
        })
    }

    pub fn log(&self) -> MutexGuard<'_, CommitLog> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Store for SimStore {
    fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        let before = self.inner.inspect(|s| s.events.len());
        self.open.fetch_add(1, Ordering::SeqCst);
        let result = self.inner.transact(f);
        self.open.fetch_sub(1, Ordering::SeqCst);
        if let Err(error) = &result
            && is_rule_breach(error)
        {
            self.log().refused.push(error.to_string());
        }
        if result.is_ok() {
            let (events, rows) = self.inner.inspect(|s| {
                let events: Vec<Event> = s.events[before..].to_vec();
                let rows: Vec<Invocation> = events
                    .iter()
                    .filter_map(|e| e.payload["invocation_id"].as_str())
                    .filter_map(|id| id.parse().ok())
                    .filter_map(|id: uuid::Uuid| s.invocations.get(&InvocationId(id)).cloned())
                    .collect();
                (events, rows)
            });
            if !events.is_empty() {
                let mut log = self.log();
                for row in &rows {
                    log.observe(row);
                }
                log.commits.push(events);
            }
        }
        result
    }

    /// `MemStore`'s read: a write inside is refused, as the SQLite store's read connections
    /// refuse it, so a core read that writes fails here too. Reads commit nothing to log.
    fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.open.fetch_add(1, Ordering::SeqCst);
        let result = self.inner.read(f);
        self.open.fetch_sub(1, Ordering::SeqCst);
        result
    }
}
