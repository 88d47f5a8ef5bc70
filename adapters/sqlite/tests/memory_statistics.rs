//! `SqliteStore::open` turns SQLite's memory statistics off before SQLite's first connection in
//! the process (they cost a process-wide mutex per allocation and nothing reads them). Alone in
//! its own test binary, so no other test initializes SQLite first.

use airlock_sqlite::SqliteStore;

#[test]
fn a_store_opened_first_runs_without_memory_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("store.sqlite3")).unwrap();
    assert_eq!(store.pragma_report().unwrap().synchronous, 2, "still FULL");
    // With statistics on, opening and migrating a store leaves hundreds of KB counted.
    // SAFETY: a plain read of SQLite's counter; it takes no arguments.
    let counted = unsafe { rusqlite::ffi::sqlite3_memory_used() };
    assert_eq!(counted, 0, "SQLite still counts its memory");
}
