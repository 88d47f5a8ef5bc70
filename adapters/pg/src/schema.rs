//! The schema and its migrations (SPEC §18 "Schema and migrations").
//!
//! Migrations are applied by refinery: versioned, checksummed, recorded in
//! `refinery_schema_history` in the store's schema. Only the commands that start work apply them
//! ([`SchemaAction::Migrate`]: `run submit`, `worker`, `demo`, `serve`, later `mcp serve`);
//! every other command opens with [`SchemaAction::RequireCurrent`] and refuses a database without
//! the schema, so a mistyped URL cannot answer "nothing pending" from tables it just created.
//!
//! Either way, open refuses a schema it does not know: a history with a version this build does
//! not have (a newer build migrated it), a recorded migration whose name or checksum differs from
//! this build's, or tables, columns, constraints, indexes, triggers or functions that differ by
//! name, kind or type from what this build's migrations create (an append-only trigger dropped
//! by hand, say). The expected objects are listed in `schema_objects.txt`, beside this file; a
//! test migrates a fresh schema and compares, so the list cannot drift from the migrations.
//!
//! Two processes migrating one database at once are serialized by an advisory lock named after
//! the schema; the second finds the work done.

use refinery::{Migration, Runner};
use tokio_postgres::Client;

use crate::engine::{Engine, describe_client_error};
use crate::error::PgError;

/// Whether opening a store may create or upgrade its schema (SPEC §18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaAction {
    /// Apply the migrations this build has and the database lacks (`run submit`, `worker`,
    /// `demo`, `serve`, `mcp serve`).
    Migrate,
    /// Refuse a database without this build's schema (every other command).
    RequireCurrent,
}

/// V1: every table of SPEC §14 with §17.2's step records, in PostgreSQL's dialect.
const V1: (&str, &str) = (
    "V1__airlock_schema",
    include_str!("../migrations/V1__airlock_schema.sql"),
);

/// V2: gateway connections (§19.4), API tokens (§20) and the functions that keep the tenant
/// event tail in commit order (see the file's comments and `tx`'s "Event ids").
const V2: (&str, &str) = (
    "V2__connections_api_tokens_event_order",
    include_str!("../migrations/V2__connections_api_tokens_event_order.sql"),
);

/// V3: the partial index the repeat check of every call reads (§19.7).
const V3: (&str, &str) = (
    "V3__call_twins",
    include_str!("../migrations/V3__call_twins.sql"),
);

/// V4: the runs of a tenant by creation (`runs list`).
const V4: (&str, &str) = (
    "V4__runs_by_tenant",
    include_str!("../migrations/V4__runs_by_tenant.sql"),
);

/// V5: a connection row is also the MCP conversation (§22.1: taint, call counter, last seen),
/// and a conversation's call runs share its session (§22.2).
const V5: (&str, &str) = (
    "V5__conversations",
    include_str!("../migrations/V5__conversations.sql"),
);

/// V6: a sessionless 2026-07-28 conversation is the connection row of its key, one open row per
/// tenant and key (§22.1, §23).
const V6: (&str, &str) = (
    "V6__conversation_keys",
    include_str!("../migrations/V6__conversation_keys.sql"),
);

/// V7: approval tasks, one per call run, append-only (§22.3 item 1).
const V7: (&str, &str) = (
    "V7__call_tasks",
    include_str!("../migrations/V7__call_tasks.sql"),
);

/// V8: the keys `requestState`s are sealed with, append-only (§22.3 item 2).
const V8: (&str, &str) = (
    "V8__state_keys",
    include_str!("../migrations/V8__state_keys.sql"),
);

/// V9: each call keeps its tool's target kind, so `policy replay` decides it again, and calls
/// are read in creation order (issue 32 item 3).
const V9: (&str, &str) = ("V9__replay", include_str!("../migrations/V9__replay.sql"));

/// V10: each tenant's notification targets with their delivery cursor, and the lease of the
/// process that delivers them (issue 32 item 1).
const V10: (&str, &str) = ("V10__notify", include_str!("../migrations/V10__notify.sql"));

/// Every migration, oldest first.
/// V11: the taken derivation keys of one subject in one index read (issue 33, `appends`).
const V11: (&str, &str) = (
    "V11__event_subjects",
    include_str!("../migrations/V11__event_subjects.sql"),
);

const MIGRATIONS: &[(&str, &str)] = &[V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11];

/// The schema version of a fully migrated store: the number of the latest migration.
pub const SCHEMA_VERSION: i32 = 11;

/// refinery's history table.
const HISTORY_TABLE: &str = "refinery_schema_history";

/// What this build's migrations create, one `kind name [detail]` per line, sorted.
const EXPECTED_OBJECTS: &str = include_str!("schema_objects.txt");

/// The catalog query behind [`objects`]: every object of the current schema that the
/// migrations create, by kind, name and the detail that matters (a column's type and
/// nullability, a constraint's kind, a trigger's table, timing and function, a sequence's
/// increment, cache and cycling: the event tail relies on `events_id_seq` handing out
/// increasing values across sessions, which a cache above 1 or a cycle would break).
const OBJECTS_SQL: &str = "
SELECT 'table ' || c.relname
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND c.relname <> $1
UNION ALL
SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
       || CASE WHEN a.attidentity <> '' THEN ' identity' ELSE '' END
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND c.relname <> $1
   AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'constraint ' || c.relname || '.' || k.conname || ' ' || k.contype::text
  FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relname <> $1
UNION ALL
SELECT 'index ' || i.tablename || '.' || i.indexname
  FROM pg_indexes i
 WHERE i.schemaname = current_schema() AND i.tablename <> $1
UNION ALL
SELECT 'trigger ' || c.relname || '.' || t.tgname || ' ' || p.proname || ' ' || t.tgtype::text
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_proc p ON p.oid = t.tgfoid
 WHERE n.nspname = current_schema() AND NOT t.tgisinternal
UNION ALL
SELECT 'function ' || p.proname
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = current_schema()
UNION ALL
SELECT 'sequence ' || c.relname || ' increment ' || s.seqincrement || ' cache ' || s.seqcache
       || CASE WHEN s.seqcycle THEN ' cycle' ELSE '' END
  FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relname NOT LIKE $1 || '%'
";

fn migrations() -> Result<Vec<Migration>, refinery::Error> {
    MIGRATIONS
        .iter()
        .map(|(name, sql)| Migration::unapplied(name, sql))
        .collect()
}

/// The schema objects of the connection's current schema, sorted.
pub(crate) async fn objects(client: &Client) -> Result<Vec<String>, tokio_postgres::Error> {
    let rows = client.query(OBJECTS_SQL, &[&HISTORY_TABLE]).await?;
    let mut objects = rows
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<Vec<String>, _>>()?;
    // Byte order, whatever the database's collation.
    objects.sort();
    Ok(objects)
}

/// The objects this build expects.
pub(crate) fn expected_objects() -> Vec<String> {
    let mut objects: Vec<String> = EXPECTED_OBJECTS
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect();
    objects.sort();
    objects
}

/// One applied migration as the history records it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Applied {
    version: i32,
    name: String,
    checksum: String,
}

/// The history, or `None` when the table does not exist.
async fn history(client: &Client) -> Result<Option<Vec<Applied>>, tokio_postgres::Error> {
    let exists = client
        .query_one(
            "SELECT to_regclass(quote_ident(current_schema()) || '.' || quote_ident($1)) \
             IS NOT NULL",
            &[&HISTORY_TABLE],
        )
        .await?;
    if !exists.try_get::<_, bool>(0)? {
        return Ok(None);
    }
    let rows = client
        .query(
            &format!("SELECT version, name, checksum FROM {HISTORY_TABLE} ORDER BY version"),
            &[],
        )
        .await?;
    let mut applied = Vec::with_capacity(rows.len());
    for row in rows {
        applied.push(Applied {
            version: row.try_get(0)?,
            name: row.try_get(1)?,
            checksum: row.try_get(2)?,
        });
    }
    Ok(Some(applied))
}

/// Compares the recorded history with this build's migrations: `Ok(n)` when the first `n` of
/// ours are applied and nothing else is.
fn known_prefix(applied: &[Applied], ours: &[Migration]) -> Result<usize, String> {
    for (index, recorded) in applied.iter().enumerate() {
        let Some(mine) = ours.get(index) else {
            return Err(format!(
                "schema version {} ({}) is newer than this build's (version {SCHEMA_VERSION}); \
                 upgrade airlock",
                recorded.version, recorded.name
            ));
        };
        let version = mine.version();
        if recorded.version != version
            || recorded.name != mine.name()
            || recorded.checksum != mine.checksum().to_string()
        {
            return Err(format!(
                "migration {} ({}) was recorded with a different name or checksum than this \
                 build's {} ({})",
                recorded.version,
                recorded.name,
                version,
                mine.name()
            ));
        }
    }
    Ok(applied.len())
}

/// Brings the schema to this build's version (`Migrate`) or checks that it is there
/// (`RequireCurrent`), then checks every object. Runs on a connection of the pool.
pub(crate) fn prepare(
    engine: &Engine,
    action: SchemaAction,
    create_schema: Option<&str>,
) -> Result<(), PgError> {
    let target = engine.target.clone();
    let client_error = |e: &tokio_postgres::Error| PgError::Query {
        target: target.clone(),
        message: describe_client_error(e),
    };
    let mut object = engine
        .wait(engine.pool.get())
        .map_err(|e| PgError::Connect {
            target: target.clone(),
            message: crate::engine::describe_pool_error(&e),
        })?;
    let ours = migrations().map_err(|e| PgError::Migration {
        target: target.clone(),
        message: e.to_string(),
    })?;
    let client: &mut Client = &mut object;
    engine.wait(async {
        if action == SchemaAction::Migrate {
            // One migrator per schema at a time (creating the schema included); the lock ends
            // with the session if the process dies.
            let key = "hashtext('airlock.migrate.' || COALESCE($1::text, current_schema()))";
            client
                .execute(
                    &format!("SELECT pg_advisory_lock({key})"),
                    &[&create_schema],
                )
                .await
                .map_err(|e| client_error(&e))?;
            let migrated = async {
                if let Some(schema) = create_schema {
                    client
                        .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
                        .await
                        .map_err(|e| client_error(&e))?;
                }
                migrate(client, &ours, &target).await
            }
            .await;
            let unlocked = client
                .execute(
                    &format!("SELECT pg_advisory_unlock({key})"),
                    &[&create_schema],
                )
                .await;
            migrated?;
            unlocked.map_err(|e| client_error(&e))?;
        }
        let applied = history(client).await.map_err(|e| client_error(&e))?;
        let applied = match applied {
            None => {
                return Err(PgError::SchemaMissing {
                    target: target.clone(),
                });
            }
            Some(applied) => applied,
        };
        let count = known_prefix(&applied, &ours).map_err(|detail| PgError::SchemaUnknown {
            target: target.clone(),
            detail,
        })?;
        if count == 0 {
            return Err(PgError::SchemaMissing {
                target: target.clone(),
            });
        }
        if count < ours.len() {
            return Err(PgError::SchemaUnknown {
                target: target.clone(),
                detail: format!(
                    "the schema is at version {count}, this build's is {SCHEMA_VERSION}: run \
                     `airlock worker` (or `run submit`) once to migrate it"
                ),
            });
        }
        let actual = objects(client).await.map_err(|e| client_error(&e))?;
        let expected = expected_objects();
        if actual != expected {
            let missing: Vec<&String> = expected.iter().filter(|o| !actual.contains(o)).collect();
            let unexpected: Vec<&String> =
                actual.iter().filter(|o| !expected.contains(o)).collect();
            return Err(PgError::SchemaUnknown {
                target: target.clone(),
                detail: format!(
                    "the tables differ from this build's: missing or changed {missing:?}; not \
                     expected {unexpected:?}"
                ),
            });
        }
        Ok(())
    })
}

/// Applies the migrations not yet recorded, after refusing a history this build does not know.
async fn migrate(client: &mut Client, ours: &[Migration], target: &str) -> Result<(), PgError> {
    let applied = history(client).await.map_err(|e| PgError::Query {
        target: target.to_owned(),
        message: describe_client_error(&e),
    })?;
    if let Some(applied) = &applied {
        known_prefix(applied, ours).map_err(|detail| PgError::SchemaUnknown {
            target: target.to_owned(),
            detail,
        })?;
    }
    Runner::new(ours)
        .set_abort_divergent(true)
        .set_abort_missing(true)
        .run_async(client)
        .await
        .map(drop)
        .map_err(|e| PgError::Migration {
            target: target.to_owned(),
            message: e.to_string(),
        })
}
