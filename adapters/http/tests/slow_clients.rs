//! `server::serve` bounds what a slow client can hold (issue 26): a connection that sends half
//! its headers, or nothing, is closed after `HEADER_READ_TIMEOUT`; a body that trickles fails
//! after `BODY_READ_TIMEOUT`. Both servers (`airlock serve` and `airlock mcp serve --listen`)
//! serve through this function. Time is tokio's paused clock, so the bounds are exact and the
//! test takes milliseconds.

use std::time::Duration;

use airlock_http::server::{BODY_READ_TIMEOUT, HEADER_READ_TIMEOUT, serve};
use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

async fn server() -> std::net::SocketAddr {
    let router = Router::new().route(
        "/echo",
        post(|body: Bytes| async move { body.len().to_string() }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve(router, listener, None, std::future::pending()));
    addr
}

/// Reads until the server closes the connection (or a minute passes); what it sent, and when
/// it closed.
async fn read_to_close(stream: &mut TcpStream) -> (String, Option<Instant>) {
    let mut received = Vec::new();
    let mut buffer = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(60), stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return (
                    String::from_utf8_lossy(&received).into_owned(),
                    Some(Instant::now()),
                );
            }
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
            Err(_) => return (String::from_utf8_lossy(&received).into_owned(), None),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn half_sent_headers_and_silent_connections_are_closed_after_the_header_timeout() {
    let addr = server().await;
    for first_bytes in [&b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n"[..], &b""[..]] {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let began = Instant::now();
        stream.write_all(first_bytes).await.expect("write");
        let (_, closed) = read_to_close(&mut stream).await;
        let closed = closed.expect("the server closed the connection");
        let held = closed - began;
        assert!(
            held >= HEADER_READ_TIMEOUT && held < HEADER_READ_TIMEOUT + Duration::from_secs(1),
            "held for {held:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_trickling_body_fails_after_the_body_timeout_and_a_whole_one_is_served() {
    let addr = server().await;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let began = Instant::now();
    stream
        .write_all(
            b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n0123456789",
        )
        .await
        .expect("write");
    let (answer, closed) = read_to_close(&mut stream).await;
    let closed = closed.expect("the server closed the connection");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let held = closed - began;
    assert!(
        held >= BODY_READ_TIMEOUT && held < BODY_READ_TIMEOUT + Duration::from_secs(1),
        "held for {held:?}"
    );

    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(
            b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
        )
        .await
        .expect("write");
    let (answer, _) = read_to_close(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("\r\n\r\n5"), "{answer}");
}
