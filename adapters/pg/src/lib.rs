//! airlock-pg persists what core built, in PostgreSQL, and knows nothing else of airlock.
//!
//! `PgStore`: the scale-out [`Store`] of SPEC §18, for deployments whose workers run in several
//! processes on several machines sharing one database. It passes the same contract suite as
//! `MemStore` and `SqliteStore` (`airlock_core::testing::contract`), and depends on core alone:
//! never on the host, a gateway or the HTTP crate (structural test).
//!
//! - **Schema** (`schema`): every table, constraint, partial unique index and append-only rule of
//!   SPEC §14 (with §17.2's step records, §19.4's connections and §20's API tokens), enforced
//!   by PostgreSQL itself; applied by refinery
//!   only when asked ([`SchemaAction::Migrate`]); open refuses a database without the schema or
//!   with one this build does not know.
//! - **Transactions** (`tx`): READ COMMITTED with the guarded writes of SPEC §8.1, the run row as
//!   the lock that orders a run's writers, `FOR UPDATE SKIP LOCKED` claims, per-session event
//!   sequences from the session row's counter, event ids that a tenant tail reads in commit
//!   order (readers wait for in-flight event writers rather than writers for each other). Reads (`Store::read`) run in one REPEATABLE READ,
//!   READ ONLY snapshot beside the writers.
//! - **Client** (`engine`): tokio-postgres through a deadpool pool, driven by a runtime the store
//!   owns; the calling thread waits (see below). BEGIN rides with the first statement, each
//!   write with its savepoint, NOTIFY with COMMIT.
//! - **Wake-ups** (`listen`): a commit that queues a run NOTIFYs its id; [`PgStore::listen`]
//!   hands ids to the host, which wakes its worker. Hints only: workers poll as well.
//! - **The lost COMMIT**: a COMMIT whose answer never arrives is reported as `Backend` and never
//!   retried; recovery decides from what the database holds (SPEC §18, G4).
//!
//! **Why the `Store` port stays synchronous (SPEC §18 asks for the decision and its figures).**
//! An allowed one-call step costs 2 write transactions after commit folding (§17.1), and each of
//! those is a chain of dependent statements: core reads the run, decides, writes, and decides
//! again from the answers. An asynchronous port would not shorten that chain, because each
//! statement needs the previous one's answer, so the round trips per transaction would be the
//! same; it would only free the waiting thread. Measured (BENCHMARKS.md, `bench/examples/
//! store_scaling.rs`): 41.7 round trips per durable call, 5.09 transactions per call (2.05 write
//! commits), 8.2 round trips per transaction. The waiting is done on the host's `block_in_place`
//! threads (`BlockingStore`), one per run inside a store call, never by a thread that polls
//! heartbeats. Making the port async would ripple through core, both other stores and the
//! simulator for no fewer round trips, so the port stays synchronous; the pipelining that an
//! async client offers is used where statements do not depend on one another (BEGIN, SAVEPOINT,
//! RELEASE, NOTIFY, COMMIT).

mod appends;
mod engine;
mod error;
mod kept;
mod listen;
mod pipeline;
mod rows;
mod schema;
mod tx;

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio_postgres::NoTls;
use tokio_postgres::config::Host;

use airlock_core::ids::RunId;
use airlock_core::store::{Store, StoreTx, TxError};

use engine::{Access, Connection, Engine};

pub use engine::{RoundTrips, WAKE_CHANNEL};
pub use error::PgError;
pub use listen::Listener;
pub use schema::{SCHEMA_VERSION, SchemaAction};

/// How long opening a connection may take before the server counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Connection settings beyond the URL.
#[derive(Debug, Clone)]
pub struct PgSettings {
    /// Connections this process keeps at most. A worker needs about two per run it executes
    /// at once (the run's transactions and its heartbeat) and a few for its loop.
    pub pool_size: usize,
    /// A schema to use (and, with [`SchemaAction::Migrate`], create) instead of the URL's
    /// `search_path`: lets tests, or several deployments, share one database. Lowercase ASCII
    /// letters, digits and `_`, starting with a letter or `_`.
    pub schema: Option<String>,
}

impl Default for PgSettings {
    fn default() -> Self {
        PgSettings {
            pool_size: 16,
            schema: None,
        }
    }
}

/// The PostgreSQL store. Share it behind an `Arc`; `transact` may be called from many threads.
pub struct PgStore {
    engine: Arc<Engine>,
    /// The connection settings, for the listener's own connection.
    config: tokio_postgres::Config,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("target", &self.engine.target)
            .finish_non_exhaustive()
    }
}

/// Whether `url` names a PostgreSQL server (`postgres://` or `postgresql://`).
pub fn is_postgres_url(url: &str) -> bool {
    let lower = url.trim_start().to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// `url` with the password of its user info replaced by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    let user = match userinfo.find(':') {
        Some(colon) => format!("{}:***", &userinfo[..colon]),
        None => userinfo.to_owned(),
    };
    format!("{}{}@{}", &url[..scheme_end + 3], user, &rest[at + 1..])
}

/// `user@host:port/database` of a parsed configuration: what messages call the server.
fn describe_target(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => match config.get_hostaddrs().first() {
            Some(addr) => addr.to_string(),
            None => "localhost".to_owned(),
        },
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let database = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    match config.get_user() {
        Some(user) => format!("{user}@{host}:{port}/{database}"),
        None => format!("{host}:{port}/{database}"),
    }
}

fn valid_schema_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 63
}

impl PgStore {
    /// Opens the store at `url` with the default settings; see [`PgStore::open_with`].
    pub fn open(url: &str, action: SchemaAction) -> Result<PgStore, PgError> {
        PgStore::open_with(url, action, &PgSettings::default())
    }

    /// Connects to `url` (`postgres://user:password@host:port/database?…`), then migrates or
    /// checks the schema as `action` says. Fails if the server cannot be reached, the schema is
    /// missing (with `RequireCurrent`) or is not this build's.
    pub fn open_with(
        url: &str,
        action: SchemaAction,
        settings: &PgSettings,
    ) -> Result<PgStore, PgError> {
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| PgError::Url {
            url: redact_url(url),
            message: scrub(&e.to_string(), url),
        })?;
        if let Some(schema) = &settings.schema {
            if !valid_schema_name(schema) {
                return Err(PgError::Url {
                    url: redact_url(url),
                    message: format!("schema name '{schema}' is not a plain lowercase name"),
                });
            }
            let options = match config.get_options() {
                Some(existing) => format!("{existing} -c search_path={schema}"),
                None => format!("-c search_path={schema}"),
            };
            config.options(&options);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("airlock");
        }
        let target = describe_target(&config);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("airlock-pg")
            .enable_all()
            .build()
            .map_err(|e| PgError::Runtime(e.to_string()))?;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(settings.pool_size.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| PgError::Runtime(e.to_string()))?;
        let engine = Engine::new(runtime, pool, target);
        schema::prepare(&engine, action, settings.schema.as_deref())?;
        Ok(PgStore {
            engine: Arc::new(engine),
            config,
        })
    }

    /// `user@host:port/database`: the server, as messages name it.
    pub fn target(&self) -> &str {
        &self.engine.target
    }

    /// Exchanges with the server, transactions and commits so far (bench, tests).
    pub fn round_trips(&self) -> RoundTrips {
        self.engine.counters.snapshot()
    }

    /// LISTENs for runs made QUEUED by any process's commit and calls `on_queued` with each
    /// run's id, on the store's own runtime thread (so `on_queued` must only wake something).
    /// Keeps reconnecting while the returned [`Listener`] lives.
    pub fn listen(&self, on_queued: impl Fn(RunId) + Send + Sync + 'static) -> Listener {
        listen::spawn(
            self.engine.handle(),
            self.config.clone(),
            Box::new(on_queued),
        )
    }

    /// One transaction on a pooled connection (see `engine` for how it ends).
    fn run_transaction<R>(
        &self,
        access: Access,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        let engine = &*self.engine;
        let object = engine.connection()?;
        engine
            .counters
            .transactions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut tx = tx::PgTx::new(engine::Session::new(engine, &object, access));
        let returned = catch_unwind(AssertUnwindSafe(|| f(&mut tx)));
        let keep = matches!(returned, Ok(Ok(_)));
        let (ended, connection) = tx.into_wire().finish(keep);
        if connection == Connection::Discard {
            drop(Object::take(object));
        }
        match returned {
            Err(payload) => resume_unwind(payload),
            Ok(result) => {
                let value = result?;
                ended?;
                Ok(value)
            }
        }
    }
}

/// `message` with any occurrence of the URL's password removed.
fn scrub(message: &str, url: &str) -> String {
    let redacted = redact_url(url);
    if redacted == url {
        return message.to_owned();
    }
    // The password is what redaction replaced.
    let password = url
        .find("://")
        .map(|i| &url[i + 3..])
        .and_then(|rest| rest.rfind('@').map(|at| &rest[..at]))
        .and_then(|userinfo| userinfo.find(':').map(|c| &userinfo[c + 1..]))
        .unwrap_or("");
    if password.is_empty() {
        message.to_owned()
    } else {
        message.replace(password, "***")
    }
}

impl Store for PgStore {
    /// One READ COMMITTED transaction: `Ok` only once COMMIT was answered.
    fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.run_transaction(Access::Write, f)
    }

    /// One REPEATABLE READ, READ ONLY snapshot; a write inside fails with `Backend`.
    fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.run_transaction(Access::Read, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_the_password_and_keeps_the_host() {
        assert_eq!(
            redact_url("postgres://alice:s3cret@db.example:5433/airlock?sslmode=disable"),
            "postgres://alice:***@db.example:5433/airlock?sslmode=disable"
        );
        assert_eq!(
            redact_url("postgresql://alice@db/airlock"),
            "postgresql://alice@db/airlock"
        );
        assert_eq!(redact_url("postgres://db/airlock"), "postgres://db/airlock");
        assert_eq!(
            scrub("bad value near s3cret", "postgres://a:s3cret@h/d"),
            "bad value near ***"
        );
    }

    #[test]
    fn only_postgres_schemes_are_postgres_urls() {
        assert!(is_postgres_url("postgres://h/d"));
        assert!(is_postgres_url("PostgreSQL://h/d"));
        assert!(!is_postgres_url("sqlite:/tmp/x"));
        assert!(!is_postgres_url("host=h dbname=d"));
    }

    #[test]
    fn the_target_names_user_host_port_and_database() {
        let config =
            tokio_postgres::Config::from_str("postgres://bob:pw@10.0.0.9:6000/prod").expect("url");
        assert_eq!(describe_target(&config), "bob@10.0.0.9:6000/prod");
    }

    #[test]
    fn a_bad_url_names_no_password() {
        let error = PgStore::open(
            "postgres://bob:hunter2@host:notaport/db",
            SchemaAction::Migrate,
        )
        .expect_err("a bad port");
        let message = error.to_string();
        assert!(!message.contains("hunter2"), "{message}");
        assert!(message.contains("invalid PostgreSQL URL"), "{message}");
    }

    #[test]
    fn an_unreachable_server_is_named_without_its_password() {
        // Port 1 on loopback: refused at once.
        let error = PgStore::open(
            "postgres://bob:hunter2@127.0.0.1:1/airlock",
            SchemaAction::RequireCurrent,
        )
        .expect_err("nothing listens on port 1");
        let message = error.to_string();
        assert!(matches!(error, PgError::Connect { .. }), "{error:?}");
        assert!(message.contains("bob@127.0.0.1:1/airlock"), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[test]
    fn schema_names_are_plain() {
        assert!(valid_schema_name("contract_1a"));
        assert!(!valid_schema_name("Bad"));
        assert!(!valid_schema_name("x;drop"));
        assert!(!valid_schema_name(""));
    }
}
