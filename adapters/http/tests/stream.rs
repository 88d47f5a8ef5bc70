//! The event stream on a bound port (SPEC §20): a real TCP client reads Server-Sent Events,
//! drops the connection, and resumes with `Last-Event-ID`; what it receives over all its
//! connections is exactly the tenant's event log, in order, nothing missed or repeated, even
//! while events commit between and during its connections.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use airlock_core::store::Store;
use axum::http::{Request, StatusCode};
use common::World;
use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// One SSE message.
#[derive(Debug, Clone, PartialEq)]
struct Message {
    id: i64,
    event: String,
    data: Value,
}

/// Serves the world's router on an ephemeral loopback port.
async fn bind(world: &World) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = world.app.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// An open stream: the response body and what has been read of it.
struct Client {
    body: Incoming,
    buffer: String,
}

async fn connect(
    addr: SocketAddr,
    token: &str,
    query: &str,
    last_event_id: Option<i64>,
) -> (StatusCode, Client) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut request = Request::builder()
        .uri(format!("/v1/events/stream{query}"))
        .header("host", addr.to_string())
        .header("authorization", format!("Bearer {token}"))
        .header("accept", "text/event-stream");
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id.to_string());
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).expect("request"))
        .await
        .expect("response");
    let status = response.status();
    assert!(
        status != StatusCode::OK
            || response.headers().get("content-type").map(|v| v.as_bytes())
                == Some(&b"text/event-stream"[..]),
        "an event stream"
    );
    (
        status,
        Client {
            body: response.into_body(),
            buffer: String::new(),
        },
    )
}

impl Client {
    /// The next message, or `None` when the stream ended or `wait` passed without one.
    async fn next(&mut self, wait: Duration) -> Option<Message> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut id = None;
                let mut event = String::new();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().parse().ok();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                match id {
                    Some(id) => {
                        let data = serde_json::from_str(&data).expect("data is JSON");
                        return Some(Message { id, event, data });
                    }
                    None => continue, // a keep-alive comment
                }
            }
            let frame = tokio::time::timeout(wait, self.body.frame()).await.ok()??;
            let frame = frame.expect("body frame");
            if let Ok(bytes) = frame.into_data() {
                self.buffer.push_str(&String::from_utf8_lossy(&bytes));
            }
        }
    }

    /// Reads until the stream ends (a `follow=false` read).
    async fn drain(&mut self) -> Vec<Message> {
        let mut out = Vec::new();
        while let Some(m) = self.next(Duration::from_secs(5)).await {
            out.push(m);
        }
        out
    }
}

/// The tenant's whole log as the store holds it: `(id, type)`.
fn log(world: &World, tenant: &str) -> Vec<(i64, String)> {
    world
        .store
        .read(|tx| tx.events_of_tenant(tenant, None, usize::MAX))
        .expect("read")
        .into_iter()
        .map(|e| (e.id, e.event_type.as_str().to_owned()))
        .collect()
}

fn seen(messages: &[Message]) -> Vec<(i64, String)> {
    messages.iter().map(|m| (m.id, m.event.clone())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resumes_with_last_event_id_and_misses_nothing() {
    let world = World::new();
    let (run, approval) = world.parked_run("acme", "alice", "hello").await;
    let bob = world.token("acme", "bob", None);
    let addr = bind(&world).await;

    // A fresh client starts at the beginning of the log: every event committed before it
    // connected is delivered.
    let before = log(&world, "acme");
    let (status, mut client) = connect(addr, &bob, "", None).await;
    assert_eq!(status, StatusCode::OK);
    let mut received = Vec::new();
    while received.len() < before.len() {
        received.push(
            client
                .next(Duration::from_secs(5))
                .await
                .expect("a backlog event"),
        );
    }
    assert_eq!(seen(&received), before);
    let first = &received[0];
    assert_eq!(first.data["id"], first.id, "data is the §13.1 envelope");
    assert_eq!(first.data["event_type"], first.event);
    assert_eq!(first.data["run_id"], run.to_string());

    // Live: events committed while connected arrive.
    let approved = world
        .post(
            &format!("/v1/approvals/{approval}/approve"),
            &bob,
            json!({}),
        )
        .await;
    assert_eq!(approved.json["state"], "applied");
    for expected in ["approval.resolved", "run.requeued"] {
        let m = client
            .next(Duration::from_secs(5))
            .await
            .expect("a live event");
        assert_eq!(m.event, expected);
        received.push(m);
    }
    let last = received.last().expect("received").id;
    drop(client);

    // While disconnected, the run resumes and completes (many commits).
    world.worker.run_inline(run).await.expect("executes");
    let everything = log(&world, "acme");
    assert!(
        everything.len() > received.len() + 3,
        "the run wrote more events"
    );

    // Reconnect with Last-Event-ID (it wins over `after`): exactly the rest, in order.
    let (status, mut resumed) = connect(addr, &bob, "?after=0&follow=false", Some(last)).await;
    assert_eq!(status, StatusCode::OK);
    received.extend(resumed.drain().await);
    assert_eq!(
        seen(&received),
        everything,
        "nothing missed, nothing repeated"
    );
    assert!(received.iter().any(|m| m.event == "run.completed"));

    // Another tenant sees none of it.
    let mallory = world.token("globex", "mallory", None);
    let (status, mut theirs) = connect(addr, &mallory, "?follow=false", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(theirs.drain().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_while_events_commit_loses_and_repeats_nothing() {
    let world = std::sync::Arc::new(World::new());
    let alice = world.token("acme", "alice", None);
    let addr = bind(&world).await;
    // A writer submits runs (two events each) while the client keeps dropping its connection.
    let writer = {
        let world = std::sync::Arc::clone(&world);
        let alice = alice.clone();
        tokio::spawn(async move {
            for _ in 0..30 {
                let script = json!({"schema_version": 1, "tenant_id": "acme",
                    "principal_id": "alice", "principal_scopes": [], "steps": []});
                let reply = world.post("/v1/runs", &alice, script).await;
                assert_eq!(reply.status, StatusCode::CREATED);
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        })
    };
    let mut received: Vec<Message> = Vec::new();
    let mut connections = 0;
    while !writer.is_finished() || connections == 0 {
        let cursor = received.last().map(|m| m.id);
        let (status, mut client) = connect(addr, &alice, "", cursor).await;
        assert_eq!(status, StatusCode::OK);
        connections += 1;
        // Read a few, then hang up mid-stream.
        for _ in 0..3 {
            match client.next(Duration::from_millis(200)).await {
                Some(m) => received.push(m),
                None => break,
            }
        }
    }
    writer.await.expect("writer");
    let cursor = received.last().map(|m| m.id);
    let (_, mut last) = connect(addr, &alice, "?follow=false", cursor).await;
    received.extend(last.drain().await);
    assert!(
        connections > 3,
        "the client reconnected ({connections} connections)"
    );
    assert_eq!(seen(&received), log(&world, "acme"));
    assert_eq!(received.len(), 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_token_ends_its_open_streams_and_shutdown_ends_all() {
    let world = World::new();
    let addr = bind(&world).await;
    let token = world.token("acme", "alice", None);
    let (status, mut client) = connect(addr, &token, "", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        client.next(Duration::from_millis(100)).await.is_none(),
        "nothing yet"
    );
    world.revoke("acme", &token);
    let ended = tokio::time::timeout(Duration::from_secs(5), client.body.frame()).await;
    assert!(
        matches!(ended, Ok(None)),
        "the stream ended after revocation: {ended:?}"
    );

    let other = world.token("acme", "bob", None);
    let (_, mut open) = connect(addr, &other, "", None).await;
    world.state.close();
    let ended = tokio::time::timeout(Duration::from_secs(5), open.body.frame()).await;
    assert!(
        matches!(ended, Ok(None)),
        "closing ends open streams: {ended:?}"
    );
}
