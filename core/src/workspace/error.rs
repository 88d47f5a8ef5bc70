//! Why a workspace operation failed: below the path rules and the workspace port, which both
//! return it.

/// A workspace operation's failure; no variant carries a host path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkspaceError {
    #[error("path escapes the workspace")]
    Escape,
    #[error("no such path")]
    NotFound,
    #[error("not a regular file")]
    NotAFile,
    #[error("not a directory")]
    NotADirectory,
    #[error("too large")]
    TooLarge,
    #[error("too many entries")]
    TooManyEntries,
    #[error("i/o: {0}")]
    Io(String),
}
