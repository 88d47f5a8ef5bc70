//! Serving the router (SPEC §20): loopback by default; a non-loopback address only with TLS
//! (`--tls-cert`, `--tls-key`) or an explicit `--insecure-remote`, because a bearer token sent
//! in clear text over a network is a token given away.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::Router;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

/// How the server is exposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// Only this machine can connect.
    Loopback,
    /// Reachable from the network, encrypted.
    RemoteTls,
    /// Reachable from the network in clear text, because the operator said so.
    RemoteInsecure,
}

/// Why `serve` will not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "{0} is not a loopback address: pass --tls-cert and --tls-key, or --insecure-remote to \
         send tokens in clear text"
    )]
    RemoteNeedsTls(SocketAddr),
    #[error("--tls-cert and --tls-key go together")]
    HalfTls,
    #[error("cannot read {what} '{path}': {detail}")]
    TlsFile {
        what: &'static str,
        path: String,
        detail: String,
    },
    #[error("the TLS certificate and key do not work together: {0}")]
    TlsConfig(String),
}

/// The loopback rule: a loopback address may be served any way; any other needs TLS or the
/// explicit opt-out.
pub fn exposure(
    listen: SocketAddr,
    tls: bool,
    insecure_remote: bool,
) -> Result<Exposure, ServeError> {
    if listen.ip().is_loopback() {
        return Ok(Exposure::Loopback);
    }
    match (tls, insecure_remote) {
        (true, _) => Ok(Exposure::RemoteTls),
        (false, true) => Ok(Exposure::RemoteInsecure),
        (false, false) => Err(ServeError::RemoteNeedsTls(listen)),
    }
}

/// A rustls server configuration from a PEM certificate chain and a PEM private key.
pub fn load_tls(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, ServeError> {
    let file_error = |what: &'static str, path: &Path, detail: String| ServeError::TlsFile {
        what,
        path: path.display().to_string(),
        detail,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file_error("certificate", cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error("certificate", cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(file_error(
            "certificate",
            cert,
            "no CERTIFICATE block".to_owned(),
        ));
    }
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| file_error("private key", key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ServeError::TlsConfig(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| ServeError::TlsConfig(e.to_string()))?;
    Ok(Arc::new(config))
}

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client may take to send a request's headers, counted from when the connection
/// waits for them (a new connection, or a kept-alive one after its last response): a
/// connection that sends half its headers, or nothing, is closed after this.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client may take to send a request's whole body, counted from when its headers
/// arrived. A body still incomplete then fails to read (the handler answers 400 and the
/// connection closes). Bodies are at most a few MiB (§20: 1 MiB; the MCP listener: 4 MiB), so
/// this only ever stops a client that trickles.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `router` on `listener` until `shutdown` resolves: HTTP/1.1, plain or over TLS when a
/// configuration is given, every connection with [`HEADER_READ_TIMEOUT`] and every request
/// body with [`BODY_READ_TIMEOUT`], so a slow client holds a connection no longer than these.
/// On shutdown the listener closes; plain connections finish their requests first (as
/// `axum::serve` did), TLS ones are not waited for and the caller bounds its own wait.
pub async fn serve(
    router: Router,
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let acceptor = tls.map(TlsAcceptor::from);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    // A full descriptor table or an aborted connection: keep serving.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(with_body_deadline(router.clone()));
        match &acceptor {
            None => {
                let connection = graceful
                    .watch(connection_builder().serve_connection(TokioIo::new(stream), service));
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%peer, %error, "connection ended with an error");
                    }
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                        .await
                    {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, %error, "TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    let connection =
                        connection_builder().serve_connection(TokioIo::new(tls), service);
                    if let Err(error) = connection.await {
                        tracing::debug!(%peer, %error, "connection ended with an error");
                    }
                });
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// HTTP/1.1 with the header read timeout (hyper needs a timer for it).
fn connection_builder() -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
}

/// `router` with every request body bounded by [`BODY_READ_TIMEOUT`].
fn with_body_deadline(
    router: Router,
) -> impl tower::Service<
    Request<Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<axum::response::Response, std::convert::Infallible>>
             + Send
             + 'static,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |request: Request<Incoming>| {
        let router = router.clone();
        let request = request.map(|body| DeadlineBody::new(body, BODY_READ_TIMEOUT));
        router.oneshot(request)
    })
}

/// A request body that fails once its deadline passes before its last frame arrived.
struct DeadlineBody {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl DeadlineBody {
    fn new(inner: Incoming, within: Duration) -> DeadlineBody {
        DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(within)),
        }
    }
}

/// The error a body past its deadline reads as.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} s", BODY_READ_TIMEOUT.as_secs())]
struct BodyTooSlow;

impl hyper::body::Body for DeadlineBody {
    type Data = hyper::body::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTooSlow)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_may_be_served_without_tls_or_the_explicit_opt_out() {
        let loopback: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
        let v6_loopback: SocketAddr = "[::1]:8080".parse().expect("addr");
        let remote: SocketAddr = "0.0.0.0:8080".parse().expect("addr");
        assert_eq!(
            exposure(loopback, false, false).ok(),
            Some(Exposure::Loopback)
        );
        assert_eq!(
            exposure(v6_loopback, false, false).ok(),
            Some(Exposure::Loopback)
        );
        assert!(matches!(
            exposure(remote, false, false),
            Err(ServeError::RemoteNeedsTls(_))
        ));
        assert_eq!(
            exposure(remote, true, false).ok(),
            Some(Exposure::RemoteTls)
        );
        assert_eq!(
            exposure(remote, false, true).ok(),
            Some(Exposure::RemoteInsecure)
        );
    }
}
