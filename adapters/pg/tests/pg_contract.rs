//! `PgStore` passes core's Store contract suite (SPEC §2.2, §14, §18), the same checks
//! `MemStore` and `SqliteStore` pass, each in a schema of its own on the server named by
//! `AIRLOCK_TEST_PG_URL`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use airlock_core::testing::contract::run_contract;

#[test]
fn pg_store_passes_the_store_contract() {
    let Some(url) = common::server("pg_store_passes_the_store_contract") else {
        return;
    };
    let cleanup = common::Cleanup::new(&url);
    let made = AtomicUsize::new(0);
    run_contract(|| {
        made.fetch_add(1, Ordering::Relaxed);
        let schema = common::fresh_schema("contract");
        cleanup.add(&schema);
        common::store_in(&url, &schema)
    });
    assert!(
        made.load(Ordering::Relaxed) > 30,
        "every check got its own schema"
    );
}
