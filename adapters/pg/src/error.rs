//! Why a PostgreSQL store could not be opened (a module of its own, below the schema and the
//! store that both return it).

/// Why a store could not be opened. Messages name the server (host, port, database, user),
/// never the password.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("invalid PostgreSQL URL {url}: {message}")]
    Url { url: String, message: String },
    #[error("cannot start the PostgreSQL client: {0}")]
    Runtime(String),
    #[error("cannot reach PostgreSQL at {target}: {message}")]
    Connect { target: String, message: String },
    #[error("PostgreSQL at {target} refused to open the store: {message}")]
    Query { target: String, message: String },
    #[error(
        "no airlock schema in PostgreSQL at {target}: nothing was submitted to this database \
         (check --store, or run `airlock worker` or `run submit` once to create it)"
    )]
    SchemaMissing { target: String },
    #[error("the airlock schema in PostgreSQL at {target} is not this build's: {detail}")]
    SchemaUnknown { target: String, detail: String },
    #[error("cannot migrate the airlock schema in PostgreSQL at {target}: {message}")]
    Migration { target: String, message: String },
}
