//! Wake-up hints (SPEC §18 "Wake-up"): a commit that makes a run QUEUED notifies
//! [`WAKE_CHANNEL`] with the run id (`engine::Session::finish`); a [`Listener`] holds one
//! dedicated connection that LISTENs and hands each id to a callback.
//!
//! A notification is a hint, never the truth: the committed QUEUED row is. Workers poll as well
//! (every 250 ms by default, SPEC §8.2), so a notification lost with a dropped connection only
//! delays a claim. The listener reconnects by itself, once a second while the server is away,
//! and never reports an error to anyone: the store's own transactions do that.

use std::future::{Future, poll_fn};
use std::task::Poll;
use std::time::Duration;

use tokio_postgres::{AsyncMessage, NoTls};

use airlock_core::ids::RunId;

use crate::engine::WAKE_CHANNEL;

/// How long the listener waits before connecting again after losing its connection.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// A running LISTEN; dropping it stops listening.
pub struct Listener {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Drives the connection until the LISTEN is answered: `true` if it succeeded.
async fn poll_listen<F>(
    mut listen: std::pin::Pin<&mut F>,
    connection: &mut tokio_postgres::Connection<
        tokio_postgres::Socket,
        tokio_postgres::tls::NoTlsStream,
    >,
) -> bool
where
    F: Future<Output = Result<(), tokio_postgres::Error>>,
{
    poll_fn(|cx| {
        if let Poll::Ready(answer) = listen.as_mut().poll(cx) {
            return Poll::Ready(answer.is_ok());
        }
        match connection.poll_message(cx) {
            Poll::Ready(Some(Ok(_))) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Ready(_) => Poll::Ready(false),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

pub(crate) fn spawn(
    handle: &tokio::runtime::Handle,
    config: tokio_postgres::Config,
    on_queued: Box<dyn Fn(RunId) + Send + Sync>,
) -> Listener {
    let task = handle.spawn(async move {
        loop {
            if let Ok((client, mut connection)) = config.connect(NoTls).await {
                // The connection must be polled for the LISTEN's answer to arrive: send the
                // LISTEN and drive the connection until it is answered.
                let statement = format!("LISTEN {WAKE_CHANNEL}");
                let listening = {
                    let mut listen = std::pin::pin!(client.batch_execute(&statement));
                    poll_listen(listen.as_mut(), &mut connection).await
                };
                if !listening {
                    drop(client);
                    tokio::time::sleep(RECONNECT_AFTER).await;
                    continue;
                }
                loop {
                    match poll_fn(|cx| connection.poll_message(cx)).await {
                        Some(Ok(AsyncMessage::Notification(note))) => {
                            if let Ok(run) = note.payload().parse::<RunId>() {
                                on_queued(run);
                            }
                        }
                        Some(Ok(_)) => {}
                        Some(Err(_)) | None => break,
                    }
                }
                drop(client);
            }
            tokio::time::sleep(RECONNECT_AFTER).await;
        }
    });
    Listener { task }
}
