//! `SqliteStore` passes core's Store contract suite (SPEC §2.2, §14), the same checks
//! `MemStore` passes, each on a fresh database file.

use std::sync::atomic::{AtomicUsize, Ordering};

use airlock_core::testing::contract::run_contract;
use airlock_sqlite::SqliteStore;

#[test]
fn sqlite_store_passes_the_store_contract() {
    let dir = tempfile::tempdir().expect("temp dir");
    let next = AtomicUsize::new(0);
    run_contract(|| {
        let n = next.fetch_add(1, Ordering::Relaxed);
        SqliteStore::open(&dir.path().join(format!("contract-{n}.sqlite3")))
            .expect("open a fresh store")
    });
    assert!(
        next.load(Ordering::Relaxed) > 30,
        "every check got its own file"
    );
}
