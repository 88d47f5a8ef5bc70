//! The sessionless 2026-07-28 conversations one gateway process serves now (SPEC §22.1, §23).
//!
//! A 2026-07-28 client over HTTP sends no `initialize` and no `Mcp-Session-Id`: each request
//! carries its version, its client's name and capabilities. Its conversation (taint, `[limits]`,
//! call runs) is the store's row of the key (tenant, principal, token id, `clientInfo.name`),
//! which any gateway process of the store joins ([`ConnectionDriver::join`]); nothing here is
//! needed for correctness. What this process keeps, per key it served lately, is its own hold
//! on the row: a live connection (the mailbox its requests are handed to), the driver that runs
//! their calls, and the counter of request keys, so a client's requests share one mailbox and
//! one driver instead of one per request.
//!
//! A hold is let go after the file's `conversation_idle_seconds` without a request here and
//! with no call of its requests still running ([`Holds::let_go_of_idle`]), or at shutdown.
//! Letting go closes nothing in the store: the conversation ends when no process has seen a
//! request for that long (the sweep closes the row, `alive_until` having passed). A hold whose
//! row the sweep closed is replaced by a new join at the next request.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use airlock_core::connection::live::{ConnectionDriver, RunTemplate};
use airlock_core::conversation::ConversationKey;
use airlock_core::ids::SessionId;
use airlock_core::store::{Store, TxError};
use airlock_core::worker::Worker;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// This process's hold on one sessionless conversation.
pub struct Hold<S: Store> {
    /// Who it was joined for (a token id, or the tokenless caller), for the caps.
    owner: String,
    driver: Arc<ConnectionDriver<S>>,
    run_task: Mutex<Option<JoinHandle<Result<(), TxError>>>>,
    keep_alive: JoinHandle<()>,
    request_keys: Arc<AtomicU64>,
    last_request: Mutex<Instant>,
}

impl<S: Store + 'static> Hold<S> {
    pub fn driver(&self) -> &Arc<ConnectionDriver<S>> {
        &self.driver
    }

    pub fn request_keys(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.request_keys)
    }

    pub fn session_id(&self) -> SessionId {
        self.driver.connection().session_id
    }

    fn idle_since(&self) -> Instant {
        *self.last_request.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets go: the calls of this process's requests that are not parked are cancelled (they
    /// have no request any more), and the driver returns once they ended.
    async fn release(&self) {
        if let Err(error) = self.driver.disconnect() {
            tracing::warn!(%error, "letting go of a sessionless conversation failed; its calls end with their requests");
        }
        let task = self
            .run_task
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(task) = task {
            let _ = task.await;
        }
        self.keep_alive.abort();
    }
}

/// What a new hold is joined with: the process's worker and the file's settings.
pub struct JoinWith<'a, S: Store> {
    /// Who the request is from (a token id, or the tokenless caller).
    pub owner: &'a str,
    pub worker: &'a Arc<Worker<S>>,
    pub tenant_id: &'a str,
    pub principal_id: &'a str,
    pub idle_seconds: u32,
    pub arguments_from_user: bool,
    pub template: RunTemplate,
}

/// Why a hold was let go, for what follows it (detaching relays, forgetting the planner).
pub type OnRelease<'a> = &'a (dyn Fn(SessionId) + Send + Sync);

/// The holds of one process, by key.
pub struct Holds<S: Store> {
    held: Mutex<BTreeMap<ConversationKey, Arc<Hold<S>>>>,
}

impl<S: Store + 'static> Default for Holds<S> {
    fn default() -> Self {
        Holds {
            held: Mutex::new(BTreeMap::new()),
        }
    }
}

impl<S: Store + 'static> Holds<S> {
    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<ConversationKey, Arc<Hold<S>>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The hold for a request of `key`, now: the one this process has, its row's `alive_until`
    /// pushed ahead ([`ConnectionDriver::touch`]), or a new join (`Ok((hold, true))`, for the
    /// caller to register). A hold whose conversation ended is returned in `ended` for the
    /// caller to let go of.
    pub fn for_request(
        &self,
        key: &ConversationKey,
        join: JoinWith<'_, S>,
    ) -> Result<Request<S>, TxError> {
        let mut table = self.table();
        let mut ended = None;
        if let Some(hold) = table.get(key) {
            // A store that cannot be written now must not refuse the request: the row's
            // horizon is pushed again at its next call, in that call's own transaction.
            let open = hold.driver.touch().unwrap_or_else(|error| {
                tracing::warn!(%error, "a sessionless conversation's horizon was not pushed");
                true
            });
            if open {
                *hold.last_request.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                return Ok(Request {
                    hold: Arc::clone(hold),
                    joined: false,
                    ended: None,
                });
            }
            ended = table.remove(key);
        }
        let driver = Arc::new(ConnectionDriver::join(
            Arc::clone(join.worker),
            join.tenant_id,
            join.principal_id,
            key.clone(),
            join.idle_seconds,
            join.arguments_from_user,
            join.template,
        )?);
        let running = Arc::clone(&driver);
        let run_task = tokio::spawn(async move { running.run().await });
        let renewing = Arc::clone(&driver);
        let keep_alive = tokio::spawn(async move { renewing.keep_alive().await });
        let hold = Arc::new(Hold {
            owner: join.owner.to_owned(),
            driver,
            run_task: Mutex::new(Some(run_task)),
            keep_alive,
            request_keys: Arc::new(AtomicU64::new(1)),
            last_request: Mutex::new(Instant::now()),
        });
        table.insert(key.clone(), Arc::clone(&hold));
        Ok(Request {
            hold,
            joined: true,
            ended,
        })
    }

    /// Lets go of every hold idle for `idle` with no call of its requests in flight.
    pub async fn let_go_of_idle(&self, idle: std::time::Duration, on_release: OnRelease<'_>) {
        let now = Instant::now();
        let idle_holds: Vec<Arc<Hold<S>>> = {
            let mut table = self.table();
            let keys: Vec<ConversationKey> = table
                .iter()
                .filter(|(_, hold)| {
                    now.saturating_duration_since(hold.idle_since()) >= idle
                        && !hold.driver.is_busy()
                })
                .map(|(key, _)| key.clone())
                .collect();
            keys.iter().filter_map(|key| table.remove(key)).collect()
        };
        for hold in idle_holds {
            Self::let_go(&hold, on_release).await;
        }
    }

    /// Lets go of every hold (shutdown).
    pub async fn let_go_of_all(&self, on_release: OnRelease<'_>) {
        let all: Vec<Arc<Hold<S>>> = std::mem::take(&mut *self.table()).into_values().collect();
        for hold in all {
            Self::let_go(&hold, on_release).await;
        }
    }

    pub async fn let_go(hold: &Hold<S>, on_release: OnRelease<'_>) {
        on_release(hold.session_id());
        hold.release().await;
    }

    /// Whether a request of `key` from `owner` may be served now: a key this process holds
    /// always is; a new one only while `owner` holds fewer than `per_owner` and the process
    /// fewer than `total` (the caps of HTTP sessions, which a sessionless client takes no slot
    /// of: without them, a client naming itself anew on each request would open a conversation
    /// row, a hold and its tasks per request). Checked before the join, so concurrent first
    /// requests may overshoot by their number.
    pub fn room_for(
        &self,
        key: &ConversationKey,
        owner: &str,
        (per_owner, total): (usize, usize),
    ) -> Result<(), Full> {
        let table = self.table();
        if table.contains_key(key) {
            return Ok(());
        }
        if table.values().filter(|hold| hold.owner == owner).count() >= per_owner {
            return Err(Full::Owner(per_owner));
        }
        if table.len() >= total {
            return Err(Full::Process(total));
        }
        Ok(())
    }

    /// How many conversations this process holds now.
    pub fn len(&self) -> usize {
        self.table().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a new sessionless conversation was not opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The caller holds this many already.
    Owner(usize),
    /// The process holds this many already.
    Process(usize),
}

/// One request's hold, and what changed to get it.
pub struct Request<S: Store> {
    pub hold: Arc<Hold<S>>,
    /// A new join: its planner and relays are to be registered.
    pub joined: bool,
    /// The hold this one replaced, whose conversation ended: to be let go of.
    pub ended: Option<Arc<Hold<S>>>,
}
