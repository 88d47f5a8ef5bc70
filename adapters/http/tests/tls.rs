//! `airlock serve --tls-cert --tls-key` (SPEC §20): the router served over TLS with a PEM
//! certificate and key, reached by a client that trusts only a test CA. tests/data holds that
//! CA's certificate and a leaf certificate for 127.0.0.1 with its key, made with openssl for
//! this test only (the CA's key was discarded).

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use airlock_http::server::{ServeError, load_tls, serve};
use common::World;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_is_served_over_tls_with_a_pem_certificate_and_key() {
    let world = World::new();
    let config = load_tls(&data("test-cert.pem"), &data("test-key.pem")).expect("TLS config");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(world.app.clone(), listener, Some(config), async {
        let _ = stopped.await;
    }));

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(data("test-ca.pem")).expect("cert"))
        .expect("root");
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = connector.connect(name, tcp).await.expect("TLS handshake");
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut response = String::new();
    tls.read_to_string(&mut response).await.expect("read");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("\"status\":\"ok\""), "{response}");

    // A plain-text client gets no answer from the TLS port.
    let mut plain = tokio::net::TcpStream::connect(addr).await.expect("connect");
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut buffer = Vec::new();
    let _ = plain.read_to_end(&mut buffer).await;
    assert!(!String::from_utf8_lossy(&buffer).contains("200"));

    let _ = stop.send(());
    server.await.expect("join").expect("serve ends cleanly");
}

#[test]
fn unreadable_or_mismatched_tls_files_are_configuration_errors() {
    assert!(matches!(
        load_tls(&data("missing.pem"), &data("test-key.pem")),
        Err(ServeError::TlsFile {
            what: "certificate",
            ..
        })
    ));
    assert!(matches!(
        load_tls(&data("test-cert.pem"), &data("test-cert.pem")),
        Err(ServeError::TlsFile {
            what: "private key",
            ..
        })
    ));
    assert!(matches!(
        load_tls(&data("test-key.pem"), &data("test-key.pem")),
        Err(ServeError::TlsFile {
            what: "certificate",
            ..
        })
    ));
}
