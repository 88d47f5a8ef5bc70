//! Writes sent ahead of their answers (issue 33: round trips).
//!
//! Most of a tool call's writes have an answer known before they are sent: `update_run` and
//! `update_invocation` compare against a row this transaction holds locked (`kept`), so their
//! guarded `UPDATE` changes exactly one row; a checkpoint's or step record's contiguity is
//! checked against the highest version or step this transaction read or wrote under the run's
//! lock. Waiting for such an answer is a round trip that tells nothing, so these writes are
//! sent at once and answered later: the request goes to the connection when the write is made,
//! and its answer is collected together with the next statement that needs one (a read, a write
//! whose answer is not known, the COMMIT). PostgreSQL runs a connection's requests in order,
//! so a read sent after them sees them, and the whole batch costs the one exchange the next
//! statement costs anyway.
//!
//! **If an answer is not the one predicted** (a write refused by a constraint, or a different
//! row count), the transaction cannot commit: there is no savepoint around a pipelined write
//! (one would cost the exchange this saves), PostgreSQL aborts the transaction at the failed
//! statement, and the write was already reported done to core. The error is returned, with its
//! kind (`Conflict`, `NotFound`, `Backend`), by the statement that collects it, every later
//! statement fails, and the end is a rollback — as with the SQLite store's journal row that
//! cannot be written. Nothing of the transaction is committed.

use std::error::Error;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use futures_util::task::noop_waker_ref;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use airlock_core::store::TxError;

/// A request already sent, whose answer is collected later.
pub(crate) type Pending<'e> = Pin<Box<dyn Future<Output = Result<(), TxError>> + 'e>>;

/// Polls `future` once, which is when a tokio-postgres request is encoded and handed to the
/// connection (it is written to the socket by the connection's task, in the order handed
/// over). `Ready` when it could not even be sent (a closed connection).
pub(crate) fn send<'e>(mut future: Pending<'e>) -> Result<Option<Pending<'e>>, TxError> {
    let mut context = Context::from_waker(noop_waker_ref());
    match future.as_mut().poll(&mut context) {
        Poll::Pending => Ok(Some(future)),
        Poll::Ready(Ok(())) => Ok(None),
        Poll::Ready(Err(error)) => Err(error),
    }
}

/// A parameter already encoded in the binary format of its statement's parameter type, so
/// that a request sent ahead owns its parameters instead of borrowing the caller's.
#[derive(Debug)]
pub(crate) struct Encoded(Option<Vec<u8>>);

impl Encoded {
    /// Encodes `params` for a statement whose parameter types are `types`, with each value's
    /// own type check.
    pub(crate) fn all(
        params: &[&(dyn ToSql + Sync)],
        types: &[Type],
    ) -> Result<Vec<Encoded>, TxError> {
        if params.len() != types.len() {
            return Err(TxError::Backend(format!(
                "a statement with {} parameters was given {}",
                types.len(),
                params.len()
            )));
        }
        params
            .iter()
            .zip(types)
            .map(|(param, ty)| {
                let mut buffer = BytesMut::new();
                match param.to_sql_checked(ty, &mut buffer) {
                    Ok(IsNull::Yes) => Ok(Encoded(None)),
                    Ok(IsNull::No) => Ok(Encoded(Some(buffer.to_vec()))),
                    Err(e) => Err(TxError::Backend(format!(
                        "cannot encode a parameter of type {ty}: {e}"
                    ))),
                }
            })
            .collect()
    }
}

impl ToSql for Encoded {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match &self.0 {
            Some(bytes) => {
                out.extend_from_slice(bytes);
                Ok(IsNull::No)
            }
            None => Ok(IsNull::Yes),
        }
    }

    /// Checked when it was encoded, against this statement's own types.
    fn accepts(_ty: &Type) -> bool {
        true
    }

    to_sql_checked!();
}
