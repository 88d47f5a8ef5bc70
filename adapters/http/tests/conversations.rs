//! The conversation routes of the API (SPEC §20 over §22.1) in process, through the real
//! router: the list, one conversation with its calls, and CLEAR-TAINT with each of its
//! refusals, on conversations written with core's own gateway transactions.

mod common;

use axum::http::{Method, StatusCode};
use common::{CallEnd, World};
use serde_json::{Value, json};

/// The fields of a conversation record: the CLI's `conversations show` prints exactly these.
const RECORD_FIELDS: [&str; 14] = [
    "alive_until",
    "call_count",
    "close_reason",
    "closed_at",
    "gateway_id",
    "id",
    "last_seen_at",
    "opened_at",
    "principal_id",
    "session_id",
    "status",
    "tainted_at",
    "tainted_by",
    "tenant_id",
];

/// The object's keys, sorted.
fn keys(v: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = v
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    keys.sort_unstable();
    keys
}

#[tokio::test]
async fn the_tenants_conversations_are_listed_newest_first() {
    let world = World::new();
    let by = "test__note (call call-1 of run 0190a6f1-2b3c-7d4e-8f90-123456789abc)";
    let tainted = world.conversation(1, "acme", "alice", 3, Some(by));
    let quiet = world.conversation(2, "acme", "carol", 1, None);
    let _theirs = world.conversation(3, "globex", "mallory", 2, Some("x"));
    let bob = world.token("acme", "bob", None);

    let page = world.get("/v1/conversations", &bob).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    let items = page.json["items"].as_array().expect("items");
    assert_eq!(items.len(), 2, "acme's only: {}", page.text);
    assert_eq!(items[0]["id"], quiet.id.to_string(), "newest first");
    assert_eq!(items[1]["id"], tainted.id.to_string());
    let item = &items[1];
    assert_eq!(keys(item), RECORD_FIELDS, "{item}");
    assert_eq!(item["session_id"], tainted.session.to_string());
    assert_eq!(item["principal_id"], "alice");
    assert_eq!(item["status"], "open");
    assert_eq!(item["call_count"], 3);
    assert_eq!(item["tainted_by"], by);
    assert!(item["tainted_at"].is_string(), "{item}");
    assert!(item["alive_until"].is_string());
    assert_eq!(item["closed_at"], Value::Null);
    assert_eq!(items[0]["tainted_at"], Value::Null);
    assert_eq!(items[0]["tainted_by"], Value::Null);

    let one = world.get("/v1/conversations?limit=1", &bob).await;
    assert_eq!(one.json["items"].as_array().map(Vec::len), Some(1));
    for bad in ["limit=0", "limit=101", "limit=ten", "limit=-1"] {
        world
            .get(&format!("/v1/conversations?{bad}"), &bob)
            .await
            .assert_problem(400, "invalid_argument");
    }
    // `run.read` reads them; without it, 403.
    let approver = world.token("acme", "dave", Some(&["approval.read"]));
    world
        .get("/v1/conversations", &approver)
        .await
        .assert_problem(403, "forbidden");
}

#[tokio::test]
async fn a_conversation_shows_its_own_calls_newest_first() {
    let world = World::new();
    let mut mine = world.open_conversation(1, "acme", "alice");
    let mut other = world.open_conversation(2, "acme", "alice");
    // The two conversations' calls interleave, and a scripted run of the tenant lands between
    // them: only the conversation's own session's calls are its calls.
    world.add_call(&mut mine, "test__read", CallEnd::Done);
    world.add_call(&mut other, "test__other", CallEnd::Done);
    let _scripted = world
        .parked_run("acme", "alice", "not a conversation's")
        .await;
    world.add_call(&mut mine, "test__note", CallEnd::Done);
    world.taint(&mine, "test__note (call call-1 of run x)");
    world.add_call(&mut mine, "test__append", CallEnd::Parked);
    world.add_call(&mut other, "test__other", CallEnd::Done);
    let bob = world.token("acme", "bob", None);

    let reply = world
        .get(&format!("/v1/conversations/{}", mine.id), &bob)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let detail = &reply.json;
    let listed = world.get("/v1/conversations", &bob).await;
    let record = listed.json["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["id"] == mine.id.to_string()))
        .cloned()
        .expect("listed");
    for field in RECORD_FIELDS {
        assert_eq!(detail[field], record[field], "{field}: the list's record");
    }
    assert_eq!(detail["call_count"], 3);
    assert_eq!(detail["calls_truncated"], false);
    let calls = detail["calls"].as_array().expect("calls");
    let ids: Vec<&str> = calls
        .iter()
        .map(|c| c["invocation_id"].as_str().unwrap_or_default())
        .collect();
    let expected: Vec<String> = mine
        .invocations
        .iter()
        .rev()
        .map(|i| i.to_string())
        .collect();
    assert_eq!(
        ids, expected,
        "its three calls, newest first: {}",
        reply.text
    );
    let tools: Vec<&str> = calls
        .iter()
        .map(|c| c["tool_name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(tools, ["test__append", "test__note", "test__read"]);
    let newest = &calls[0];
    assert_eq!(newest["run_id"], mine.runs[2].to_string());
    assert_eq!(newest["status"], "WAITING_FOR_APPROVAL");
    assert_eq!(
        newest["approval_id"],
        mine.approval.map(|a| a.to_string()).expect("parked")
    );
    assert_eq!(newest["approval_status"], "pending");
    assert_eq!(calls[1]["approval_id"], Value::Null);
    assert_eq!(calls[1]["approval_status"], Value::Null);
    assert_eq!(calls[1]["status"], "SUCCEEDED");
    assert_eq!(calls[1]["origin_trust"], "user");
    for call in calls {
        assert!(call["created_at"].is_string());
        assert_eq!(call["step_number"], 1);
    }

    // The other conversation's calls are its own.
    let theirs = world
        .get(&format!("/v1/conversations/{}", other.id), &bob)
        .await;
    let tools: Vec<&str> = theirs.json["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .map(|c| c["tool_name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(tools, ["test__other", "test__other"]);
}

#[tokio::test]
async fn a_long_conversation_shows_its_newest_hundred_calls() {
    let world = World::new();
    let long = world.conversation(1, "acme", "alice", 101, None);
    let bob = world.token("acme", "bob", None);
    let reply = world
        .get(&format!("/v1/conversations/{}", long.id), &bob)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let calls = reply.json["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 100);
    assert_eq!(reply.json["calls_truncated"], true);
    assert_eq!(calls[0]["invocation_id"], long.invocations[100].to_string());
    assert_eq!(calls[99]["invocation_id"], long.invocations[1].to_string());
    assert_eq!(reply.json["call_count"], 101);
}

#[tokio::test]
async fn clearing_a_taint_records_who_and_why_and_answers_the_untainted_conversation() {
    let world = World::new();
    let by = "test__note (call call-1 of run 0190a6f1-2b3c-7d4e-8f90-123456789abc)";
    let tainted = world.conversation(1, "acme", "alice", 2, Some(by));
    let bob = world.token("acme", "bob", None);
    let path = format!("/v1/conversations/{}/clear-taint", tainted.id);

    // Naming a taint the caller did not see (or an unreadable time) clears nothing.
    world
        .post(
            &path,
            &bob,
            json!({"reason": "x", "tainted_at": "2000-01-01T00:00:00Z"}),
        )
        .await
        .assert_problem(409, "conflict");
    world
        .post(
            &path,
            &bob,
            json!({"reason": "x", "tainted_at": "yesterday"}),
        )
        .await
        .assert_problem(400, "invalid_argument");
    let seen = world
        .get(&format!("/v1/conversations/{}", tainted.id), &bob)
        .await
        .json["tainted_at"]
        .clone();
    let cleared = world
        .post(
            &path,
            &bob,
            json!({"reason": "the note is our own", "tainted_at": seen}),
        )
        .await;
    assert_eq!(cleared.status, StatusCode::OK, "{}", cleared.text);
    assert_eq!(keys(&cleared.json), RECORD_FIELDS);
    assert_eq!(cleared.json["id"], tainted.id.to_string());
    assert_eq!(cleared.json["tainted_at"], Value::Null);
    assert_eq!(cleared.json["tainted_by"], Value::Null);
    assert_eq!(cleared.json["status"], "open");
    let shown = world
        .get(&format!("/v1/conversations/{}", tainted.id), &bob)
        .await;
    assert_eq!(shown.json["tainted_at"], Value::Null, "it stays cleared");

    let events = world.events_of_type("acme", "conversation.taint_cleared");
    assert_eq!(events.len(), 1, "{events:?}");
    let event = &events[0];
    assert_eq!(event.actor.actor_id.as_deref(), Some("bob"));
    assert_eq!(event.session_id, tainted.session);
    assert_eq!(event.payload["reason"], "the note is our own");
    assert_eq!(event.payload["tainted_by"], by);
    assert_eq!(event.payload["conversation_id"], tainted.id.to_string());

    // Not tainted any more: 409, and nothing more is recorded.
    world
        .post(&path, &bob, json!({"reason": "again"}))
        .await
        .assert_problem(409, "conflict");
    assert_eq!(
        world
            .events_of_type("acme", "conversation.taint_cleared")
            .len(),
        1
    );
}

#[tokio::test]
async fn clear_taint_refuses_untainted_closed_reasonless_and_unentitled_callers() {
    let world = World::new();
    let tainted = world.conversation(1, "acme", "alice", 1, Some("test__note (x)"));
    let quiet = world.conversation(2, "acme", "alice", 1, None);
    let closed = world.conversation(3, "acme", "alice", 1, Some("test__note (y)"));
    world.close_conversation(closed.id);
    let bob = world.token("acme", "bob", None);
    let path = |id: &airlock_core::ids::ConnectionId| format!("/v1/conversations/{id}/clear-taint");
    let ok = json!({"reason": "checked"});

    world
        .post(&path(&quiet.id), &bob, ok.clone())
        .await
        .assert_problem(409, "conflict");
    let refused = world.post(&path(&closed.id), &bob, ok.clone()).await;
    refused.assert_problem(409, "conflict");
    assert!(
        refused.json["detail"]
            .as_str()
            .is_some_and(|d| d.contains("closed")),
        "{}",
        refused.text
    );

    // A reason is required: missing, empty, only spaces, too long; and the body is strict.
    for body in [
        json!({}),
        json!({"reason": ""}),
        json!({"reason": "   "}),
        json!({"reason": "r".repeat(4097)}),
        json!({"reason": 5}),
        json!({"reason": "x", "extra": 1}),
    ] {
        world
            .post(&path(&tainted.id), &bob, body)
            .await
            .assert_problem(400, "invalid_argument");
    }
    for raw in ["", "[]", "{"] {
        world
            .send(
                Method::POST,
                &path(&tainted.id),
                Some(&bob),
                Some(raw.to_owned()),
                &[],
            )
            .await
            .assert_problem(400, "invalid_argument");
    }

    // `run.read` shows a conversation; clearing its taint needs `approval.resolve`.
    let reader = world.token("acme", "erin", Some(&["run.read", "approval.read"]));
    assert_eq!(
        world
            .get(&format!("/v1/conversations/{}", tainted.id), &reader)
            .await
            .status,
        StatusCode::OK
    );
    world
        .post(&path(&tainted.id), &reader, ok.clone())
        .await
        .assert_problem(403, "forbidden");

    // Another tenant's conversation is not found, read or cleared; their list is their own.
    let mallory = world.token("globex", "mallory", None);
    world
        .get(&format!("/v1/conversations/{}", tainted.id), &mallory)
        .await
        .assert_problem(404, "not_found");
    world
        .post(&path(&tainted.id), &mallory, ok.clone())
        .await
        .assert_problem(404, "not_found");
    assert_eq!(
        world.get("/v1/conversations", &mallory).await.json["items"],
        json!([])
    );
    // Unknown and malformed ids.
    let unknown = "0190a6f1-2b3c-7d4e-8f90-123456789abc";
    world
        .get(&format!("/v1/conversations/{unknown}"), &bob)
        .await
        .assert_problem(404, "not_found");
    world
        .post(
            &format!("/v1/conversations/{unknown}/clear-taint"),
            &bob,
            ok,
        )
        .await
        .assert_problem(404, "not_found");
    world
        .get("/v1/conversations/not-a-uuid", &bob)
        .await
        .assert_problem(400, "invalid_argument");

    // None of that changed the taint.
    let still = world
        .get(&format!("/v1/conversations/{}", tainted.id), &bob)
        .await;
    assert_eq!(still.json["tainted_by"], "test__note (x)");
    assert!(
        world
            .events_of_type("acme", "conversation.taint_cleared")
            .is_empty()
    );
}
