//! Why a store transaction did not commit: below the store port and the event log, which both
//! answer it.

/// Why a transaction did not commit. Any error rolls back everything the transaction wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxError {
    /// A lease guard failed: another worker owns the run now, or it left RUNNING.
    #[error("fenced")]
    Fenced,
    /// A uniqueness rule or a guarded status did not hold.
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("not found")]
    NotFound,
    #[error("storage: {0}")]
    Backend(String),
}
