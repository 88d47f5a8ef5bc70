//! Serving the router (SPEC §20): loopback by default; a non-loopback address only with TLS
//! (`--tls-cert`, `--tls-key`) or an explicit `--insecure-remote`, because a bearer token sent
//! in clear text over a network is a token given away.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

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

/// Serves `router` on `listener` until `shutdown` resolves: plain HTTP/1.1, or TLS when a
/// configuration is given. Open connections are not waited for once the listener closes in
/// the TLS case; the caller bounds its own wait.
pub async fn serve(
    router: Router,
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let Some(config) = tls else {
        return axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await;
    };
    let acceptor = TlsAcceptor::from(config);
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
            () = &mut shutdown => return Ok(()),
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .with_upgrades();
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
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
