//! What the PostgreSQL tests share: the server from `AIRLOCK_TEST_PG_URL` (or a printed skip;
//! with `CI=true`, a failure), scratch schemas, and raw SQL for checks the store does not expose.

#![allow(dead_code)]

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use airlock_pg::{PgSettings, PgStore, SchemaAction};

/// The test server's URL. Without one the test prints that it was skipped and returns `None`;
/// under `CI=true` a missing server fails the test instead (SPEC §18 "Tests").
pub fn server(test: &str) -> Option<String> {
    match std::env::var("AIRLOCK_TEST_PG_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(
                !ci,
                "{test}: AIRLOCK_TEST_PG_URL is not set and CI=true: the PostgreSQL tests must \
                 run in CI (.ci/run sources .ci/postgres.sh)"
            );
            // Straight to the process's stderr, not `eprintln!`: the test harness captures
            // the macro's output of a passing test, and a skip nobody sees reads as a pass. One
            // write of the whole line, so lines of tests running in parallel do not interleave.
            // The skip line every test of the workspace prints (`airlock_e2e::skip::skip_line`).
            let line = format!(
                "SKIPPED {test}: AIRLOCK_TEST_PG_URL is not set; include it with `. \
                 .ci/postgres.sh` (starts a private PostgreSQL on loopback and sets it)\n"
            );
            let _ = std::io::stderr().write_all(line.as_bytes());
            None
        }
    }
}

/// A schema name no other test (or earlier run) uses.
pub fn fresh_schema(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A migrated store in its own new schema.
pub fn store_in(url: &str, schema: &str) -> PgStore {
    PgStore::open_with(
        url,
        SchemaAction::Migrate,
        &PgSettings {
            schema: Some(schema.to_owned()),
            ..PgSettings::default()
        },
    )
    .unwrap_or_else(|e| panic!("open a store in schema {schema}: {e}"))
}

/// Runs SQL statements (no results) on their own connection with `search_path` = `schema`.
pub fn execute(url: &str, schema: &str, sql: &str) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        client
            .batch_execute(&format!("SET search_path = \"{schema}\"; {sql}"))
            .await
            .map_err(|e| match e.as_db_error() {
                Some(db) => db.message().to_owned(),
                None => e.to_string(),
            })
    })
}

/// The first column of every row of `sql`, as text.
pub fn query_texts(url: &str, schema: &str, sql: &str) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        client
            .batch_execute(&format!("SET search_path = \"{schema}\""))
            .await
            .expect("search_path");
        client
            .simple_query(sql)
            .await
            .expect("query")
            .into_iter()
            .filter_map(|message| match message {
                tokio_postgres::SimpleQueryMessage::Row(row) => {
                    Some(row.get(0).unwrap_or("NULL").to_owned())
                }
                _ => None,
            })
            .collect()
    })
}

/// Drops scratch schemas when the test ends, whatever happened.
pub struct Cleanup {
    pub url: String,
    pub schemas: std::sync::Mutex<Vec<String>>,
}

impl Cleanup {
    pub fn new(url: &str) -> Cleanup {
        Cleanup {
            url: url.to_owned(),
            schemas: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub fn add(&self, schema: &str) {
        self.schemas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(schema.to_owned());
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let schemas = self
            .schemas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for schema in schemas {
            let _ = execute(
                &self.url,
                "public",
                &format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"),
            );
        }
    }
}
