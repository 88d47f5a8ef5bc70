//! How every connection of the store is set up, the writer's and the readers' alike: one place,
//! below both, so the reader pool does not reach back into the store's root.

use std::time::Duration;

/// How long a connection waits for another process's write lock (SPEC §14).
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_millis(5000);

/// Room for every distinct statement `SqliteTx` prepares, so none is ever re-prepared.
pub(crate) const STATEMENT_CACHE_CAPACITY: usize = 128;
