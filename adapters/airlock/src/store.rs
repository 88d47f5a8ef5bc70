//! Which store a command opens (SPEC §18 "Selection"): `--store URL` or `AIRLOCK_STORE`. Absent or
//! `sqlite:PATH` → the SQLite store (default `{data-dir}/airlock.sqlite3`); `postgres://…` or
//! `postgresql://…` → the PostgreSQL store. Anything else is refused before anything is opened.
//!
//! [`AnyStore`] is the one store type the binary's `Env` holds, whichever was chosen: the choice
//! is made here, at the edge, and core keeps seeing one generic `S: Store`.

use std::path::{Path, PathBuf};

use airlock_core::store::{Store, StoreTx, TxError};
use airlock_pg::PgStore;
use airlock_sqlite::SqliteStore;

/// The store's file inside a data directory (Appendix A).
pub const STORE_FILE: &str = "airlock.sqlite3";

/// Where the store is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// An SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL server (the URL as given, password included: never print it, see
    /// [`StoreUrl::describe`]).
    Postgres(String),
}

impl StoreUrl {
    /// Reads `--store` (or `AIRLOCK_STORE`); `None` is the SQLite file in `data_dir`.
    pub fn parse(value: Option<&str>, data_dir: &Path) -> Result<StoreUrl, String> {
        let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            return Ok(StoreUrl::Sqlite(data_dir.join(STORE_FILE)));
        };
        if airlock_pg::is_postgres_url(value) {
            return Ok(StoreUrl::Postgres(value.to_owned()));
        }
        if let Some(path) = value.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err("--store sqlite:PATH needs a path".to_owned());
            }
            return Ok(StoreUrl::Sqlite(PathBuf::from(path)));
        }
        Err(format!(
            "--store '{}' is neither sqlite:PATH nor a postgres:// or postgresql:// URL",
            airlock_pg::redact_url(value)
        ))
    }

    /// The store as messages may show it: a path, or a URL without its password.
    pub fn describe(&self) -> String {
        match self {
            StoreUrl::Sqlite(path) => format!("sqlite:{}", path.display()),
            StoreUrl::Postgres(url) => airlock_pg::redact_url(url),
        }
    }
}

/// The store the binary runs on.
pub enum AnyStore {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl AnyStore {
    /// The SQLite store, if that is the one (bench and diagnostics: its commit counters).
    pub fn sqlite(&self) -> Option<&SqliteStore> {
        match self {
            AnyStore::Sqlite(store) => Some(store),
            AnyStore::Postgres(_) => None,
        }
    }

    /// The PostgreSQL store, if that is the one (bench and diagnostics: its round trips).
    pub fn postgres(&self) -> Option<&PgStore> {
        match self {
            AnyStore::Postgres(store) => Some(store),
            AnyStore::Sqlite(_) => None,
        }
    }
}

impl Store for AnyStore {
    fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        match self {
            AnyStore::Sqlite(store) => store.transact(f),
            AnyStore::Postgres(store) => store.transact(f),
        }
    }

    fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        match self {
            AnyStore::Sqlite(store) => store.read(f),
            AnyStore::Postgres(store) => store.read(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_select_the_store() {
        let dir = Path::new("/data");
        assert_eq!(
            StoreUrl::parse(None, dir),
            Ok(StoreUrl::Sqlite(PathBuf::from("/data/airlock.sqlite3")))
        );
        assert_eq!(
            StoreUrl::parse(Some("sqlite:/tmp/a.db"), dir),
            Ok(StoreUrl::Sqlite(PathBuf::from("/tmp/a.db")))
        );
        assert_eq!(
            StoreUrl::parse(Some("postgresql://u:p@h/db"), dir),
            Ok(StoreUrl::Postgres("postgresql://u:p@h/db".to_owned()))
        );
        let refused = StoreUrl::parse(Some("mysql://u:secret@h/db"), dir).expect_err("refused");
        assert!(!refused.contains("secret"), "{refused}");
        assert!(StoreUrl::parse(Some("sqlite:"), dir).is_err());
        assert_eq!(
            StoreUrl::Postgres("postgres://u:pw@h/db".to_owned()).describe(),
            "postgres://u:***@h/db"
        );
    }
}
