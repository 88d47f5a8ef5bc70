//! Every `/v1` route and every error code of SPEC §20, in process through the real router, on
//! core's `ControlService` over a `MemStore`.

mod common;

use std::sync::Arc;

use airlock_core::access::{AuthError, Authenticated};
use airlock_core::approval::Approval;
use airlock_core::connection::Connection;
use airlock_core::control::{CancelOutcome, Page, Resolved, ServiceError, Submitted};
use airlock_core::events::Event;
use airlock_core::ids::{ApiTokenId, ApprovalId, ConnectionId, InvocationId, RunId, SessionId};
use airlock_core::invocation::Invocation;
use airlock_core::ports::BoxFut;
use airlock_core::principal::Principal;
use airlock_core::run::Run;
use airlock_core::session::Settlement;
use airlock_core::time::Timestamp;
use airlock_core::vocab::{ApprovalResolution, SettlementOutcome};
use airlock_http::service::Control;
use airlock_http::{AppState, Settings, router};
use axum::http::{Method, StatusCode};
use common::{SelfApproval, World};
use serde_json::json;

/// Every `/v1` route, with a well-formed path.
fn routes() -> Vec<(Method, String)> {
    let id = "0190a6f1-2b3c-7d4e-8f90-123456789abc";
    vec![
        (Method::GET, "/v1/approvals".into()),
        (Method::GET, format!("/v1/approvals/{id}")),
        (Method::POST, format!("/v1/approvals/{id}/approve")),
        (Method::POST, format!("/v1/approvals/{id}/deny")),
        (Method::GET, "/v1/invocations/uncertain".into()),
        (Method::POST, format!("/v1/invocations/{id}/settle")),
        (Method::POST, "/v1/runs".into()),
        (Method::GET, format!("/v1/runs/{id}")),
        (Method::GET, format!("/v1/runs/{id}/events")),
        (Method::POST, format!("/v1/runs/{id}/cancel")),
        (Method::GET, "/v1/conversations".into()),
        (Method::GET, format!("/v1/conversations/{id}")),
        (Method::POST, format!("/v1/conversations/{id}/clear-taint")),
        (Method::GET, "/v1/events/stream".into()),
        (Method::GET, "/v1/openapi.json".into()),
        (Method::POST, "/v1/admin/reload".into()),
    ]
}

#[tokio::test]
async fn healthz_answers_without_a_token() {
    let world = World::new();
    let reply = world.send(Method::GET, "/healthz", None, None, &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json["status"], "ok");
    assert_eq!(
        reply.json["policy_version"],
        airlock_core::policy::shipped::SHIPPED_VERSION
    );
}

#[tokio::test]
async fn every_v1_route_needs_a_valid_token() {
    let world = World::new();
    let revoked = world.token("acme", "alice", None);
    world.revoke("acme", &revoked);
    let expired = world.expiring_token("acme", "alice", 60);
    world.clock.advance_seconds(60);
    let unknown = format!("alk_{}", "0".repeat(64));
    for (method, path) in routes() {
        let no_token = world.send(method.clone(), &path, None, None, &[]).await;
        no_token.assert_problem(401, "unauthenticated");
        assert_eq!(
            no_token
                .headers
                .get("www-authenticate")
                .map(|v| v.as_bytes()),
            Some(&b"Bearer realm=\"airlock\""[..]),
            "{method} {path}"
        );
        for token in [
            "not-a-token",
            unknown.as_str(),
            revoked.as_str(),
            expired.as_str(),
        ] {
            let reply = world
                .send(method.clone(), &path, Some(token), None, &[])
                .await;
            reply.assert_problem(401, "unauthenticated");
        }
        let basic = world
            .send(
                method.clone(),
                &path,
                None,
                None,
                &[("authorization", "Basic YWxpY2U6eA==")],
            )
            .await;
        basic.assert_problem(401, "unauthenticated");
    }
}

#[tokio::test]
async fn a_token_works_until_it_expires_or_is_revoked() {
    let world = World::new();
    let token = world.expiring_token("acme", "alice", 60);
    assert_eq!(
        world.get("/v1/approvals", &token).await.status,
        StatusCode::OK
    );
    world.clock.advance_seconds(59);
    assert_eq!(
        world.get("/v1/approvals", &token).await.status,
        StatusCode::OK
    );
    world.clock.advance_seconds(1);
    world
        .get("/v1/approvals", &token)
        .await
        .assert_problem(401, "unauthenticated");
    let other = world.token("acme", "alice", None);
    assert_eq!(
        world.get("/v1/approvals", &other).await.status,
        StatusCode::OK
    );
    world.revoke("acme", &other);
    world
        .get("/v1/approvals", &other)
        .await
        .assert_problem(401, "unauthenticated");
}

#[tokio::test]
async fn the_approval_queue_lists_gets_and_resolves_once() {
    let world = World::new();
    let (run, approval) = world.parked_run("acme", "alice", "hello").await;
    let bob = world.token("acme", "bob", None);

    let page = world.get("/v1/approvals", &bob).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(page.json["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(page.json["next_cursor"], serde_json::Value::Null);
    let item = &page.json["items"][0];
    assert_eq!(item["id"], approval.to_string());
    assert_eq!(item["run_id"], run.to_string());
    assert_eq!(item["tool_name"], "demo.external_write");
    assert_eq!(item["risk"], "high");
    assert_eq!(item["status"], "pending");
    assert_eq!(
        item["arguments"],
        json!({"destination": "demo", "content": "hello"})
    );
    assert_eq!(item["resolution"], serde_json::Value::Null);

    let one = world.get(&format!("/v1/approvals/{approval}"), &bob).await;
    assert_eq!(one.status, StatusCode::OK);
    assert_eq!(&one.json, item);

    let path = format!("/v1/approvals/{approval}/approve");
    let applied = world
        .post(&path, &bob, json!({"reason": "looks right"}))
        .await;
    assert_eq!(applied.status, StatusCode::OK, "{}", applied.text);
    assert_eq!(applied.json["state"], "applied");
    assert_eq!(applied.json["approval"]["status"], "approved");
    assert_eq!(applied.json["approval"]["resolution_reason"], "looks right");
    assert_eq!(applied.json["approval"]["resolved_by"], "bob");

    // The same answer again: 200, nothing changes.
    let again = world.send(Method::POST, &path, Some(&bob), None, &[]).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    assert_eq!(again.json["state"], "already_resolved_identically");
    assert_eq!(again.json["approval"], applied.json["approval"]);

    // A different answer: 409 already_resolved_differently, with the approval as it stands.
    let deny = world
        .post(&format!("/v1/approvals/{approval}/deny"), &bob, json!({}))
        .await;
    deny.assert_problem(409, "already_resolved_differently");
    assert_eq!(deny.json["approval"]["status"], "approved");
    world
        .post(&path, &bob, json!({"reason": "r".repeat(4097)}))
        .await
        .assert_problem(400, "invalid_argument");

    // Resolved approvals leave the pending queue; the run was re-queued.
    let page = world.get("/v1/approvals", &bob).await;
    assert_eq!(page.json["items"], json!([]));
    let run_record = world.get(&format!("/v1/runs/{run}"), &bob).await;
    assert_eq!(run_record.json["status"], "QUEUED");
}

#[tokio::test]
async fn deny_then_deny_again_is_identical_and_approve_is_refused() {
    let world = World::new();
    let (_run, approval) = world.parked_run("acme", "alice", "x").await;
    let bob = world.token("acme", "bob", None);
    let deny = format!("/v1/approvals/{approval}/deny");
    let first = world.post(&deny, &bob, json!({"reason": "no"})).await;
    assert_eq!(first.json["state"], "applied", "{}", first.text);
    assert_eq!(first.json["approval"]["status"], "denied");
    let second = world.post(&deny, &bob, json!({"reason": "still no"})).await;
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(second.json["state"], "already_resolved_identically");
    world
        .post(
            &format!("/v1/approvals/{approval}/approve"),
            &bob,
            json!({}),
        )
        .await
        .assert_problem(409, "already_resolved_differently");
}

#[tokio::test]
async fn another_tenants_ids_are_not_found() {
    let world = World::new();
    let (run, approval) = world.parked_run("acme", "alice", "secret plans").await;
    let invocation = world.uncertain_call(1, "acme", "acme's call");
    let mallory = world.token("globex", "mallory", None);
    for path in [
        format!("/v1/approvals/{approval}"),
        format!("/v1/runs/{run}"),
        format!("/v1/runs/{run}/events"),
    ] {
        world
            .get(&path, &mallory)
            .await
            .assert_problem(404, "not_found");
    }
    for path in [
        format!("/v1/approvals/{approval}/approve"),
        format!("/v1/approvals/{approval}/deny"),
        format!("/v1/runs/{run}/cancel"),
    ] {
        world
            .post(&path, &mallory, json!({}))
            .await
            .assert_problem(404, "not_found");
    }
    world
        .post(
            &format!("/v1/invocations/{invocation}/settle"),
            &mallory,
            json!({"outcome": "failed", "note": "not mine"}),
        )
        .await
        .assert_problem(404, "not_found");
    assert_eq!(
        world.get("/v1/approvals", &mallory).await.json["items"],
        json!([])
    );
    assert_eq!(
        world
            .get(&format!("/v1/approvals?run={run}"), &mallory)
            .await
            .json["items"],
        json!([])
    );
    assert_eq!(
        world
            .get("/v1/invocations/uncertain?all=true", &mallory)
            .await
            .json["items"],
        json!([])
    );
    // And nothing of acme's changed.
    let alice = world.token("acme", "alice", None);
    let still = world
        .get(&format!("/v1/approvals/{approval}"), &alice)
        .await;
    assert_eq!(still.json["status"], "pending");
}

#[tokio::test]
async fn the_runs_own_principal_cannot_approve_when_self_approval_is_off() {
    let world = World::with(SelfApproval::Refused);
    let (_run, approval) = world.parked_run("acme", "alice", "x").await;
    let alice = world.token("acme", "alice", None);
    for verb in ["approve", "deny"] {
        world
            .post(
                &format!("/v1/approvals/{approval}/{verb}"),
                &alice,
                json!({}),
            )
            .await
            .assert_problem(403, "self_approval");
    }
    let still = world
        .get(&format!("/v1/approvals/{approval}"), &alice)
        .await;
    assert_eq!(still.json["status"], "pending", "the row stays pending");
    let bob = world.token("acme", "bob", None);
    let applied = world
        .post(
            &format!("/v1/approvals/{approval}/approve"),
            &bob,
            json!({}),
        )
        .await;
    assert_eq!(applied.json["state"], "applied", "{}", applied.text);
}

#[tokio::test]
async fn an_expired_approval_answers_410_then_409() {
    let world = World::new();
    let (run, approval) = world.parked_run("acme", "alice", "x").await;
    let bob = world.token("acme", "bob", None);
    // demo.external_write is high risk: 14400 s (SPEC §7.2).
    world.clock.advance_seconds(14_400);
    world
        .post(
            &format!("/v1/approvals/{approval}/approve"),
            &bob,
            json!({}),
        )
        .await
        .assert_problem(410, "expired");
    // The expiry was committed by that request: the next answer is no_longer_pending.
    world
        .post(
            &format!("/v1/approvals/{approval}/approve"),
            &bob,
            json!({}),
        )
        .await
        .assert_problem(409, "no_longer_pending");
    let record = world.get(&format!("/v1/runs/{run}"), &bob).await;
    assert_eq!(
        record.json["status"], "QUEUED",
        "the run re-queued to record the expiry"
    );
}

#[tokio::test]
async fn missing_scopes_are_forbidden() {
    let world = World::new();
    let (run, approval) = world.parked_run("acme", "alice", "x").await;
    let reader = world.token("acme", "bob", Some(&["approval.read"]));
    assert_eq!(
        world.get("/v1/approvals", &reader).await.status,
        StatusCode::OK
    );
    world
        .post(
            &format!("/v1/approvals/{approval}/approve"),
            &reader,
            json!({}),
        )
        .await
        .assert_problem(403, "forbidden");
    world
        .get(&format!("/v1/runs/{run}"), &reader)
        .await
        .assert_problem(403, "forbidden");
    world
        .get("/v1/events/stream", &reader)
        .await
        .assert_problem(403, "forbidden");
    world
        .get("/v1/invocations/uncertain", &reader)
        .await
        .assert_problem(403, "forbidden");
    world
        .post(&format!("/v1/runs/{run}/cancel"), &reader, json!({}))
        .await
        .assert_problem(403, "forbidden");
    let none = world.token("acme", "carol", Some(&[]));
    world
        .get("/v1/approvals", &none)
        .await
        .assert_problem(403, "forbidden");
}

#[tokio::test]
async fn malformed_requests_are_invalid_arguments() {
    let world = World::new();
    let (_run, approval) = world.parked_run("acme", "alice", "x").await;
    let bob = world.token("acme", "bob", None);
    for path in [
        "/v1/approvals/not-a-uuid".to_owned(),
        "/v1/approvals/0190A6F1-2B3C-7D4E-8F90-123456789ABC".to_owned(),
        "/v1/approvals?limit=0".to_owned(),
        "/v1/approvals?limit=101".to_owned(),
        "/v1/approvals?limit=ten".to_owned(),
        "/v1/approvals?cursor=nonsense".to_owned(),
        "/v1/approvals?run=x".to_owned(),
        "/v1/runs/x".to_owned(),
        "/v1/runs/0190a6f1-2b3c-7d4e-8f90-123456789abc/events?limit=0".to_owned(),
        "/v1/runs/0190a6f1-2b3c-7d4e-8f90-123456789abc/events?after_id=x".to_owned(),
        "/v1/runs/0190a6f1-2b3c-7d4e-8f90-123456789abc/events?after_id=-1".to_owned(),
        "/v1/invocations/uncertain?all=maybe".to_owned(),
        "/v1/events/stream?after=-1".to_owned(),
        "/v1/events/stream?follow=perhaps".to_owned(),
    ] {
        world
            .get(&path, &bob)
            .await
            .assert_problem(400, "invalid_argument");
    }
    let approve = format!("/v1/approvals/{approval}/approve");
    for body in [
        "{",
        "[]",
        r#"{"reason": 5}"#,
        r#"{"reason": "x", "extra": 1}"#,
    ] {
        world
            .send(Method::POST, &approve, Some(&bob), Some(body.into()), &[])
            .await
            .assert_problem(400, "invalid_argument");
    }
    world
        .post(&approve, &bob, json!({"reason": "x".repeat(4097)}))
        .await
        .assert_problem(400, "invalid_argument");
    let resume = world
        .send(
            Method::GET,
            "/v1/events/stream",
            Some(&bob),
            None,
            &[("last-event-id", "seven")],
        )
        .await;
    resume.assert_problem(400, "invalid_argument");
    world
        .send(
            Method::POST,
            "/v1/runs",
            Some(&bob),
            Some("not a script".into()),
            &[],
        )
        .await
        .assert_problem(400, "invalid_argument");
}

#[tokio::test]
async fn bodies_over_one_mebibyte_are_refused() {
    let world = World::new();
    let bob = world.token("acme", "bob", None);
    let big = "x".repeat(airlock_http::BODY_LIMIT_BYTES + 1);
    let length = big.len().to_string();
    // Announced by Content-Length: refused before it is read.
    world
        .send(
            Method::POST,
            "/v1/runs",
            Some(&bob),
            Some(big.clone()),
            &[("content-length", &length)],
        )
        .await
        .assert_problem(413, "payload_too_large");
    // Not announced: refused while it is read.
    world
        .send(Method::POST, "/v1/runs", Some(&bob), Some(big), &[])
        .await
        .assert_problem(413, "payload_too_large");
    // Exactly the limit is read (and then refused for what it says, not its size).
    let exact = "x".repeat(airlock_http::BODY_LIMIT_BYTES);
    world
        .send(Method::POST, "/v1/runs", Some(&bob), Some(exact), &[])
        .await
        .assert_problem(400, "invalid_argument");
}

#[tokio::test]
async fn runs_are_submitted_shown_paged_and_cancelled() {
    let world = World::new();
    let alice = world.token("acme", "alice", None);
    let script = json!({
        "schema_version": 1, "tenant_id": "acme", "principal_id": "alice",
        "principal_scopes": ["run.read"], "steps": [],
    });
    let submitted = world.post("/v1/runs", &alice, script.clone()).await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.text);
    assert_eq!(submitted.json["status"], "QUEUED");
    let run = submitted.json["run_id"]
        .as_str()
        .expect("run_id")
        .to_owned();
    assert_eq!(
        submitted
            .headers
            .get("location")
            .and_then(|v| v.to_str().ok()),
        Some(format!("/v1/runs/{run}").as_str())
    );

    let record = world.get(&format!("/v1/runs/{run}"), &alice).await;
    assert_eq!(record.status, StatusCode::OK);
    assert_eq!(record.json["id"], run);
    assert_eq!(record.json["principal_scopes"], json!(["run.read"]));
    assert!(
        record.json.get("planner_input").is_none(),
        "the script is not shown"
    );

    let first = world
        .get(&format!("/v1/runs/{run}/events?limit=1"), &alice)
        .await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.json["items"][0]["event_type"], "run.queued");
    let cursor = first.json["next_cursor"].as_str().expect("more").to_owned();
    let rest = world
        .get(&format!("/v1/runs/{run}/events?after_id={cursor}"), &alice)
        .await;
    assert_eq!(rest.json["items"][0]["event_type"], "run.checkpointed");
    assert_eq!(rest.json["next_cursor"], serde_json::Value::Null);

    let cancel = world
        .post(&format!("/v1/runs/{run}/cancel"), &alice, json!({}))
        .await;
    assert_eq!(cancel.status, StatusCode::OK);
    assert_eq!(
        cancel.json,
        json!({"accepted": true, "status": "CANCELLED"})
    );
    let again = world
        .post(&format!("/v1/runs/{run}/cancel"), &alice, json!({}))
        .await;
    assert_eq!(
        again.json,
        json!({"accepted": false, "status": "CANCELLED"})
    );

    // The script must be the caller's own: another principal's is forbidden.
    let bob = world.token("acme", "bob", None);
    world
        .post("/v1/runs", &bob, script)
        .await
        .assert_problem(403, "forbidden");
}

#[tokio::test]
async fn a_second_run_in_a_busy_session_is_a_conflict() {
    let world = World::new();
    let (run, _approval) = world.parked_run("acme", "alice", "x").await;
    let alice = world.token("acme", "alice", None);
    let record = world.get(&format!("/v1/runs/{run}"), &alice).await;
    let session = record.json["session_id"].as_str().expect("session");
    let script = json!({
        "schema_version": 1, "tenant_id": "acme", "principal_id": "alice",
        "principal_scopes": [], "session_id": session, "steps": [],
    });
    world
        .post("/v1/runs", &alice, script)
        .await
        .assert_problem(409, "conflict");
}

#[tokio::test]
async fn the_review_queue_lists_and_settles_uncertain_calls() {
    let world = World::new();
    let invocation = world.uncertain_call(1, "acme", "<script>alert(1)</script>");
    let alice = world.token("acme", "alice", None);
    let queue = world.get("/v1/invocations/uncertain", &alice).await;
    assert_eq!(queue.status, StatusCode::OK);
    let item = &queue.json["items"][0];
    assert_eq!(item["id"], invocation.to_string());
    assert_eq!(item["status"], "UNCERTAIN");
    assert_eq!(item["settlement"], serde_json::Value::Null);
    assert_eq!(
        item["raw_arguments"]["content"],
        "<script>alert(1)</script>"
    );
    assert_eq!(
        queue.headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/json"[..])
    );

    let settle = format!("/v1/invocations/{invocation}/settle");
    world
        .post(&settle, &alice, json!({"outcome": "succeeded"}))
        .await
        .assert_problem(400, "invalid_argument");
    world
        .post(&settle, &alice, json!({"outcome": "maybe", "note": "x"}))
        .await
        .assert_problem(400, "invalid_argument");
    world
        .post(&settle, &alice, json!({"outcome": "succeeded", "note": ""}))
        .await
        .assert_problem(400, "invalid_argument");
    let settled = world
        .post(
            &settle,
            &alice,
            json!({"outcome": "succeeded", "note": "outbox has it"}),
        )
        .await;
    assert_eq!(settled.status, StatusCode::OK, "{}", settled.text);
    assert_eq!(settled.json["outcome"], "succeeded");
    assert_eq!(settled.json["settled_by"], "alice");
    let repeat = world
        .post(
            &settle,
            &alice,
            json!({"outcome": "succeeded", "note": "again"}),
        )
        .await;
    assert_eq!(repeat.status, StatusCode::OK);
    assert_eq!(
        repeat.json["id"], settled.json["id"],
        "the stored settlement"
    );
    world
        .post(
            &settle,
            &alice,
            json!({"outcome": "failed", "note": "changed my mind"}),
        )
        .await
        .assert_problem(409, "conflict");

    assert_eq!(
        world.get("/v1/invocations/uncertain", &alice).await.json["items"],
        json!([])
    );
    let all = world
        .get("/v1/invocations/uncertain?all=true", &alice)
        .await;
    assert_eq!(all.json["items"][0]["settlement"]["id"], settled.json["id"]);
    assert_eq!(
        all.json["items"][0]["status"], "UNCERTAIN",
        "it stays UNCERTAIN"
    );

    // Settling something that is not UNCERTAIN is a conflict.
    let (run, _approval) = world.parked_run("acme", "alice", "x").await;
    let parked = world
        .control
        .env()
        .read(|tx| tx.invocations_of_run(run))
        .expect("read")[0]
        .id;
    world
        .post(
            &format!("/v1/invocations/{parked}/settle"),
            &alice,
            json!({"outcome": "failed", "note": "n"}),
        )
        .await
        .assert_problem(409, "conflict");
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_problems() {
    let world = World::new();
    let bob = world.token("acme", "bob", None);
    world
        .get("/v1/nothing", &bob)
        .await
        .assert_problem(404, "not_found");
    let wrong = world
        .send(Method::DELETE, "/v1/approvals", Some(&bob), None, &[])
        .await;
    wrong.assert_problem(405, "method_not_allowed");
    assert!(wrong.headers.get("allow").is_some());
}

/// `POST /v1/admin/reload` (issue 32 item 4) needs `policy.admin`, which no default token holds;
/// a server without a reload (this in-process router) answers 404 even to an admin.
#[tokio::test]
async fn reloading_the_policy_needs_policy_admin() {
    let world = World::new();
    let bob = world.token("acme", "bob", None);
    let reply = world.post("/v1/admin/reload", &bob, json!({})).await;
    reply.assert_problem(403, "forbidden");
    let admin = world.token("acme", "ops", Some(&["policy.admin"]));
    let reply = world.post("/v1/admin/reload", &admin, json!({})).await;
    reply.assert_problem(404, "not_found");
}

#[tokio::test]
async fn the_openapi_document_is_served_to_token_holders() {
    let world = World::new();
    let bob = world.token("acme", "bob", None);
    let reply = world.get("/v1/openapi.json", &bob).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.text, airlock_http::openapi::document_text());
}

#[tokio::test]
async fn responses_carry_the_security_headers() {
    let world = World::new();
    let reply = world.send(Method::GET, "/healthz", None, None, &[]).await;
    for (name, value) in [
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "same-origin"),
        ("cache-control", "no-store"),
        (
            "content-security-policy",
            airlock_http::CONTENT_SECURITY_POLICY,
        ),
    ] {
        assert_eq!(
            reply.headers.get(name).and_then(|v| v.to_str().ok()),
            Some(value),
            "{name}"
        );
    }
}

/// A `Control` whose store is down: every read and write answers `Storage`.
struct StoreDown;

fn down<T>() -> Result<T, ServiceError> {
    Err(ServiceError::Storage(
        "disk I/O error at /var/lib/airlock".into(),
    ))
}

impl Control for StoreDown {
    fn authenticate(&self, _: &str) -> Result<Authenticated, AuthError> {
        Err(AuthError::Storage("disk".into()))
    }
    fn authenticate_id(&self, _: ApiTokenId) -> Result<Authenticated, AuthError> {
        Err(AuthError::Storage("disk".into()))
    }
    fn get_approval(&self, _: &Principal, _: ApprovalId) -> Result<Approval, ServiceError> {
        down()
    }
    fn list_pending(
        &self,
        _: &Principal,
        _: Option<RunId>,
        _: Option<usize>,
        _: Option<&str>,
    ) -> Result<Page<Approval>, ServiceError> {
        down()
    }
    fn approval_explanations(
        &self,
        _: &Principal,
        _: &[ApprovalId],
    ) -> Result<std::collections::BTreeMap<ApprovalId, String>, ServiceError> {
        down()
    }
    fn resolve<'a>(
        &'a self,
        _: &'a Principal,
        _: ApprovalId,
        _: ApprovalResolution,
        _: Option<&'a str>,
    ) -> BoxFut<'a, Result<Resolved, ServiceError>> {
        Box::pin(async { down() })
    }
    fn list_uncertain(
        &self,
        _: &Principal,
        _: bool,
    ) -> Result<Vec<(Invocation, Option<Settlement>)>, ServiceError> {
        down()
    }
    fn settle<'a>(
        &'a self,
        _: &'a Principal,
        _: InvocationId,
        _: SettlementOutcome,
        _: &'a str,
    ) -> BoxFut<'a, Result<Settlement, ServiceError>> {
        Box::pin(async { down() })
    }
    fn submit_run<'a>(
        &'a self,
        _: &'a Principal,
        _: &'a str,
    ) -> BoxFut<'a, Result<Submitted, ServiceError>> {
        Box::pin(async { down() })
    }
    fn get_run(&self, _: &Principal, _: RunId) -> Result<Run, ServiceError> {
        down()
    }
    fn list_events(
        &self,
        _: &Principal,
        _: RunId,
        _: Option<i64>,
        _: Option<usize>,
    ) -> Result<Page<Event>, ServiceError> {
        down()
    }
    fn cancel_run<'a>(
        &'a self,
        _: &'a Principal,
        _: RunId,
    ) -> BoxFut<'a, Result<CancelOutcome, ServiceError>> {
        Box::pin(async { down() })
    }
    fn tenant_events(
        &self,
        _: &Principal,
        _: Option<i64>,
        _: Option<usize>,
    ) -> Result<Page<Event>, ServiceError> {
        down()
    }
    fn last_event_id(&self, _: &Principal) -> Result<Option<i64>, ServiceError> {
        down()
    }
    fn list_conversations(
        &self,
        _: &Principal,
        _: Option<usize>,
    ) -> Result<Vec<Connection>, ServiceError> {
        down()
    }
    fn get_conversation(&self, _: &Principal, _: ConnectionId) -> Result<Connection, ServiceError> {
        down()
    }
    fn conversation_calls(
        &self,
        _: &Principal,
        _: ConnectionId,
        _: usize,
    ) -> Result<(Connection, airlock_http::service::Calls), ServiceError> {
        down()
    }
    fn clear_conversation_taint(
        &self,
        _: &Principal,
        _: ConnectionId,
        _: &str,
        _: Option<airlock_core::time::Timestamp>,
    ) -> Result<Connection, ServiceError> {
        down()
    }
    fn conversations_of_sessions(
        &self,
        _: &Principal,
        _: &[SessionId],
    ) -> Result<std::collections::BTreeMap<SessionId, ConnectionId>, ServiceError> {
        down()
    }
    fn list_notify_targets(
        &self,
        _: &str,
    ) -> Result<Vec<airlock_core::notify::NotifyTarget>, ServiceError> {
        down()
    }
    fn add_notify_target(
        &self,
        _: &str,
        _: &str,
        _: &airlock_core::notify::TargetSpec,
    ) -> Result<airlock_core::notify::NotifyTarget, ServiceError> {
        down()
    }
    fn remove_notify_target(
        &self,
        _: &str,
        _: &str,
        _: airlock_core::ids::NotifyTargetId,
    ) -> Result<airlock_core::notify::NotifyTarget, ServiceError> {
        down()
    }
    fn check_store(&self) -> Result<(), ServiceError> {
        down()
    }
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(0)
    }
    fn policy_version(&self) -> String {
        "down".into()
    }
}

#[tokio::test]
async fn a_store_that_does_not_answer_is_503_storage_without_details() {
    use tower::ServiceExt;
    let app = router(AppState::new(Arc::new(StoreDown), Settings::default()));
    for (method, path, token) in [
        (Method::GET, "/healthz", None),
        (
            Method::GET,
            "/v1/approvals",
            Some(format!("alk_{}", "1".repeat(64))),
        ),
    ] {
        let mut request = axum::http::Request::builder().method(method).uri(path);
        if let Some(token) = &token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let response = app
            .clone()
            .oneshot(request.body(axum::body::Body::empty()).expect("request"))
            .await
            .expect("infallible");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{path}");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let json: serde_json::Value = serde_json::from_slice(&body).expect("problem json");
        assert_eq!(json["code"], "storage");
        assert!(
            !json["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("/var/lib")
        );
    }
}
