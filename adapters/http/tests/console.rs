//! The web console (SPEC §20) in process: signing in with a token, the session cookie, the
//! approval and review queues and the run page, every form POST's origin and form-token
//! checks, and attacker-controlled arguments rendered as inert text.

mod common;

use axum::http::{Method, StatusCode};
use common::{Reply, SelfApproval, World};

const ORIGIN: (&str, &str) = ("origin", "http://127.0.0.1:8080");
const HOST: (&str, &str) = ("host", "127.0.0.1:8080");

/// A signed-in browser: its cookie header and its form token.
struct Browser {
    cookie: String,
    csrf: String,
}

async fn sign_in(world: &World, token: &str) -> Browser {
    let reply = world
        .send(
            Method::POST,
            "/login",
            None,
            Some(format!("token={token}")),
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ORIGIN,
                HOST,
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.text);
    assert_eq!(location(&reply), "/");
    let set_cookie = reply
        .headers
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("a session cookie")
        .to_owned();
    assert!(set_cookie.contains("HttpOnly"), "{set_cookie}");
    assert!(set_cookie.contains("SameSite=Strict"), "{set_cookie}");
    assert!(!set_cookie.contains(token), "the cookie is not the token");
    let cookie = set_cookie.split(';').next().expect("pair").to_owned();
    let page = page(world, "/", &cookie).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    let csrf = page
        .text
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a form token")
        .to_owned();
    Browser { cookie, csrf }
}

fn location(reply: &Reply) -> String {
    reply
        .headers
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

async fn page(world: &World, path: &str, cookie: &str) -> Reply {
    world
        .send(Method::GET, path, None, None, &[("cookie", cookie)])
        .await
}

async fn form(
    world: &World,
    path: &str,
    browser: &Browser,
    body: &str,
    extra: &[(&str, &str)],
) -> Reply {
    let mut headers = vec![
        ("content-type", "application/x-www-form-urlencoded"),
        ("cookie", browser.cookie.as_str()),
        HOST,
    ];
    headers.extend_from_slice(extra);
    world
        .send(Method::POST, path, None, Some(body.to_owned()), &headers)
        .await
}

#[tokio::test]
async fn signing_in_sets_a_strict_http_only_cookie_and_keeps_only_its_digest() {
    let world = World::new();
    let anonymous = world.send(Method::GET, "/", None, None, &[]).await;
    assert_eq!(anonymous.status, StatusCode::SEE_OTHER);
    assert_eq!(location(&anonymous), "/login");
    let login = world.send(Method::GET, "/login", None, None, &[]).await;
    assert_eq!(login.status, StatusCode::OK);
    assert!(login.text.contains("name=\"token\""));

    let token = world.token("acme", "bob", None);
    assert!(world.state.sessions.is_empty());
    let browser = sign_in(&world, &token).await;
    assert_eq!(world.state.sessions.len(), 1);
    let home = page(&world, "/", &browser.cookie).await;
    assert!(
        home.text.contains("bob"),
        "the signed-in principal is shown"
    );

    let wrong = world
        .send(
            Method::POST,
            "/login",
            None,
            Some(format!("token=alk_{}", "0".repeat(64))),
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ORIGIN,
                HOST,
            ],
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.headers.get("set-cookie").is_none());

    // Signing out forgets the session.
    let out = form(
        &world,
        "/logout",
        &browser,
        &format!("csrf={}", browser.csrf),
        &[ORIGIN],
    )
    .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(world.state.sessions.is_empty());
    assert_eq!(
        location(&page(&world, "/", &browser.cookie).await),
        "/login"
    );
}

#[tokio::test]
async fn a_revoked_token_signs_its_sessions_out() {
    let world = World::new();
    let token = world.token("acme", "bob", None);
    let browser = sign_in(&world, &token).await;
    world.revoke("acme", &token);
    let home = page(&world, "/", &browser.cookie).await;
    assert_eq!(home.status, StatusCode::SEE_OTHER);
    assert_eq!(location(&home), "/login");
    let fragment = page(&world, "/fragments/approvals", &browser.cookie).await;
    assert_eq!(fragment.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_approval_queue_shows_what_a_reviewer_needs_and_escapes_arguments() {
    let world = World::new();
    let hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>";
    let (run, approval) = world.parked_run("acme", "alice", hostile).await;
    let token = world.token("acme", "bob", None);
    let browser = sign_in(&world, &token).await;
    let home = page(&world, "/", &browser.cookie).await;
    let html = &home.text;
    for needed in [
        "demo.external_write",
        "risk-high",
        "4h 00m left",
        "policy.matrix.external_write",
        airlock_core::policy::shipped::SHIPPED_VERSION,
        &format!("/approvals/{approval}/approve"),
        &format!("/approvals/{approval}/deny"),
        &format!("/runs/{run}"),
        "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;",
    ] {
        assert!(html.contains(needed), "missing {needed}");
    }
    // The explanation of the decision (for approvers only).
    let explanation = world
        .control
        .approval_explanations(
            &world.control.authenticate(&token).expect("auth").principal,
            &[approval],
        )
        .expect("explanations")[&approval]
        .clone();
    assert!(!explanation.is_empty());
    assert!(html.contains(&explanation), "the explanation is shown");
    // The only script on the page is the console's own file; the arguments are inert text.
    assert_eq!(html.matches("<script").count(), 1, "{html}");
    assert!(html.contains("<script src=\"/assets/console.js\" defer></script>"));
    assert!(!html.contains("<img src=x"));
    assert_eq!(
        home.headers
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok()),
        Some(airlock_http::CONTENT_SECURITY_POLICY)
    );
    // The live fragment escapes the same way.
    let fragment = page(&world, "/fragments/approvals", &browser.cookie).await;
    assert_eq!(fragment.status, StatusCode::OK);
    assert!(fragment.text.contains("&lt;script&gt;"));
    assert!(!fragment.text.contains("<script"));
}

#[tokio::test]
async fn approving_from_the_console_resolves_once_as_the_sessions_principal() {
    let world = World::new();
    let (_run, approval) = world.parked_run("acme", "alice", "x").await;
    let token = world.token("acme", "bob", None);
    let browser = sign_in(&world, &token).await;
    let path = format!("/approvals/{approval}/approve");
    let body = format!(
        "csrf={}&reason=checked+the+destination&from=queue",
        browser.csrf
    );
    let reply = form(&world, &path, &browser, &body, &[ORIGIN]).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.text);
    assert_eq!(location(&reply), "/?notice=approved");
    let stored = world
        .control
        .get_approval(
            &world.control.authenticate(&token).expect("auth").principal,
            approval,
        )
        .expect("approval");
    assert_eq!(stored.status.as_str(), "approved");
    assert_eq!(stored.resolved_by.as_deref(), Some("bob"));
    assert_eq!(
        stored.resolution_reason.as_deref(),
        Some("checked the destination")
    );
    let notice = page(&world, "/?notice=approved", &browser.cookie).await;
    assert!(notice.text.contains("Approved. The run resumes."));

    let deny = form(
        &world,
        &format!("/approvals/{approval}/deny"),
        &browser,
        &format!("csrf={}", browser.csrf),
        &[ORIGIN],
    )
    .await;
    assert_eq!(location(&deny), "/?notice=already_resolved_differently");
}

#[tokio::test]
async fn cross_site_and_tokenless_form_posts_are_refused_and_change_nothing() {
    let world = World::new();
    let (_run, approval) = world.parked_run("acme", "alice", "x").await;
    let token = world.token("acme", "bob", None);
    let browser = sign_in(&world, &token).await;
    let path = format!("/approvals/{approval}/approve");
    let good = format!("csrf={}", browser.csrf);
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (good.as_str(), vec![("origin", "http://evil.example")]),
        (good.as_str(), vec![("origin", "null")]),
        (good.as_str(), vec![("sec-fetch-site", "cross-site")]),
        (good.as_str(), vec![ORIGIN, ("sec-fetch-site", "same-site")]),
        (good.as_str(), vec![]),
        ("csrf=", vec![ORIGIN]),
        ("csrf=0000", vec![ORIGIN]),
        ("", vec![ORIGIN]),
    ];
    for (body, headers) in cases {
        let reply = form(&world, &path, &browser, body, &headers).await;
        assert_eq!(
            reply.status,
            StatusCode::FORBIDDEN,
            "{body} {headers:?}: {}",
            reply.text
        );
    }
    // Sign-in is a form POST too.
    let cross_login = world
        .send(
            Method::POST,
            "/login",
            None,
            Some(format!("token={token}")),
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("origin", "http://evil.example"),
                HOST,
            ],
        )
        .await;
    assert_eq!(cross_login.status, StatusCode::FORBIDDEN);
    let principal = world.control.authenticate(&token).expect("auth").principal;
    assert_eq!(
        world
            .control
            .get_approval(&principal, approval)
            .expect("approval")
            .status
            .as_str(),
        "pending",
        "nothing was resolved"
    );
    // The same POST from the console itself goes through.
    let ok = form(
        &world,
        &path,
        &browser,
        &good,
        &[ORIGIN, ("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(location(&ok), "/?notice=approved");
}

#[tokio::test]
async fn self_approval_is_refused_in_the_console_too() {
    let world = World::with(SelfApproval::Refused);
    let (_run, approval) = world.parked_run("acme", "alice", "x").await;
    let token = world.token("acme", "alice", None);
    let browser = sign_in(&world, &token).await;
    let reply = form(
        &world,
        &format!("/approvals/{approval}/approve"),
        &browser,
        &format!("csrf={}", browser.csrf),
        &[ORIGIN],
    )
    .await;
    assert_eq!(location(&reply), "/?notice=self_approval");
    let shown = page(&world, &location(&reply), &browser.cookie).await;
    assert!(shown.text.contains("self-approval is disabled"));
    let principal = world.control.authenticate(&token).expect("auth").principal;
    assert_eq!(
        world
            .control
            .get_approval(&principal, approval)
            .expect("approval")
            .status
            .as_str(),
        "pending"
    );
}

#[tokio::test]
async fn the_review_queue_shows_uncertain_calls_and_settles_them() {
    let world = World::new();
    let invocation = world.uncertain_call(1, "acme", "<script>steal()</script>");
    let token = world.token("acme", "bob", None);
    let browser = sign_in(&world, &token).await;
    let review = page(&world, "/review", &browser.cookie).await;
    assert_eq!(review.status, StatusCode::OK);
    let principal = world.control.authenticate(&token).expect("auth").principal;
    let stored = world
        .control
        .list_uncertain(&principal, false)
        .expect("list");
    let key = &stored[0].idempotency_key;
    for needed in [
        key.as_str(),
        "uncertain",
        "sent ",
        &format!("/invocations/{invocation}/settle"),
        "&lt;script&gt;steal()&lt;/script&gt;",
    ] {
        assert!(review.text.contains(needed), "missing {needed}");
    }
    assert_eq!(review.text.matches("<script").count(), 1);

    let path = format!("/invocations/{invocation}/settle");
    let missing = form(
        &world,
        &path,
        &browser,
        &format!("csrf={}&outcome=failed&note=", browser.csrf),
        &[ORIGIN],
    )
    .await;
    assert_eq!(location(&missing), "/review?notice=invalid_argument");
    let body = format!(
        "csrf={}&outcome=succeeded&note=outbox+line+found",
        browser.csrf
    );
    let settled = form(&world, &path, &browser, &body, &[ORIGIN]).await;
    assert_eq!(location(&settled), "/review?notice=settled");
    let after = world
        .control
        .list_uncertain_with_settlements(&principal, true)
        .expect("list");
    let settlement = after[0].1.as_ref().expect("settled");
    assert_eq!(settlement.note, "outbox line found");
    assert_eq!(settlement.settled_by, "bob");
    let shown = page(&world, "/review", &browser.cookie).await;
    assert!(shown.text.contains("outbox line found"));
}

/// SPEC §22.3: each approval has a page of its own (an MCP client's URL elicitation and task
/// message point to it): its card and answer form while pending, which returns to it; what
/// became of it once resolved; 404 for another tenant's.
#[tokio::test]
async fn an_approval_has_a_page_that_answers_it_and_shows_its_outcome() {
    let world = World::new();
    let (_run, approval) = world.parked_run("acme", "alice", "x").await;
    let token = world.token("acme", "bob", None);
    let browser = sign_in(&world, &token).await;
    let path = format!("/approvals/{approval}");
    let pending = page(&world, &path, &browser.cookie).await;
    assert_eq!(pending.status, StatusCode::OK, "{}", pending.text);
    for needed in [
        format!("/approvals/{approval}/approve"),
        format!("approval:{approval}"),
    ] {
        assert!(pending.text.contains(&needed), "missing {needed}");
    }
    let reply = form(
        &world,
        &format!("/approvals/{approval}/approve"),
        &browser,
        &format!(
            "csrf={}&reason=seen+it&from=approval:{approval}",
            browser.csrf
        ),
        &[ORIGIN],
    )
    .await;
    assert_eq!(location(&reply), format!("{path}?notice=approved"));
    let resolved = page(&world, &path, &browser.cookie).await;
    assert_eq!(resolved.status, StatusCode::OK);
    assert!(resolved.text.contains("approved"), "{}", resolved.text);
    assert!(resolved.text.contains("seen it"), "{}", resolved.text);
    assert!(
        !resolved.text.contains("/approve\""),
        "no form once resolved"
    );

    let mallory = world.token("globex", "mallory", None);
    let theirs = sign_in(&world, &mallory).await;
    let refused = page(&world, &path, &theirs.cookie).await;
    assert_eq!(refused.status, StatusCode::NOT_FOUND);
    let unknown = page(&world, "/approvals/not-an-id", &browser.cookie).await;
    assert!(unknown.status.is_client_error(), "{}", unknown.status);
}

#[tokio::test]
async fn the_run_page_shows_the_timeline_and_another_tenants_run_is_not_found() {
    let world = World::new();
    let (run, approval) = world.parked_run("acme", "alice", "x").await;
    let token = world.token("acme", "bob", None);
    let browser = sign_in(&world, &token).await;
    let run_page = page(&world, &format!("/runs/{run}"), &browser.cookie).await;
    assert_eq!(run_page.status, StatusCode::OK);
    for needed in [
        "WAITING_FOR_APPROVAL",
        "run.queued",
        "tool.call.proposed",
        "approval.requested",
        &format!("/approvals/{approval}/approve"),
        &format!("run:{run}"),
    ] {
        assert!(run_page.text.contains(needed), "missing {needed}");
    }
    // Resolving from the run page returns to it.
    let reply = form(
        &world,
        &format!("/approvals/{approval}/approve"),
        &browser,
        &format!("csrf={}&from=run:{run}", browser.csrf),
        &[ORIGIN],
    )
    .await;
    assert_eq!(location(&reply), format!("/runs/{run}?notice=approved"));

    let mallory = world.token("globex", "mallory", None);
    let theirs = sign_in(&world, &mallory).await;
    let refused = page(&world, &format!("/runs/{run}"), &theirs.cookie).await;
    assert_eq!(refused.status, StatusCode::NOT_FOUND);
    assert!(!refused.text.contains("run.queued"));
    let home = page(&world, "/", &theirs.cookie).await;
    assert!(home.text.contains("No approvals waiting."));
}

#[tokio::test]
async fn assets_are_embedded_and_the_console_stream_needs_a_session() {
    let world = World::new();
    let css = world
        .send(Method::GET, "/assets/console.css", None, None, &[])
        .await;
    assert_eq!(css.status, StatusCode::OK);
    assert_eq!(
        css.headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"text/css; charset=utf-8"[..])
    );
    let js = world
        .send(Method::GET, "/assets/console.js", None, None, &[])
        .await;
    assert_eq!(js.status, StatusCode::OK);
    assert!(js.text.contains("EventSource"));
    assert!(
        !js.text.contains("http://") && !js.text.contains("https://"),
        "no external fetches"
    );
    assert_eq!(
        world
            .send(Method::GET, "/assets/other.js", None, None, &[])
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let events = world
        .send(Method::GET, "/events?follow=false", None, None, &[])
        .await;
    assert_eq!(events.status, StatusCode::UNAUTHORIZED);
    let (_run, _approval) = world.parked_run("acme", "alice", "x").await;
    let browser = sign_in(&world, &world.token("acme", "bob", None)).await;
    let stream = page(&world, "/events?follow=false", &browser.cookie).await;
    assert_eq!(stream.status, StatusCode::OK);
    assert!(stream.text.contains("event: approval.requested"));
    let counts = page(&world, "/fragments/counts", &browser.cookie).await;
    assert_eq!(
        counts.json,
        serde_json::json!({"approvals": 1, "review": 0})
    );
}

/// The sign-in form POSTed with `token` from `origin` to `host`.
async fn login_from(world: &World, token: &str, origin: &str, host: &str) -> Reply {
    world
        .send(
            Method::POST,
            "/login",
            None,
            Some(format!("token={token}")),
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("origin", origin),
                ("host", host),
            ],
        )
        .await
}

/// Issue 26, item 7: served with the allow-list of its listen address, a request naming another
/// Host is 421, so a DNS-rebinding page (`Host: evil.example:8080` with the same `Origin`) gets
/// no session cookie; the server's own names sign in as before.
#[tokio::test]
async fn a_rebound_host_is_misdirected_and_signs_nobody_in() {
    let world = World::new().listening_on_127_0_0_1_8080();
    let token = world.token("acme", "bob", None);
    let rebound = login_from(
        &world,
        &token,
        "http://evil.example:8080",
        "evil.example:8080",
    )
    .await;
    assert_eq!(
        rebound.status,
        StatusCode::MISDIRECTED_REQUEST,
        "{}",
        rebound.text
    );
    assert!(rebound.headers.get("set-cookie").is_none());
    assert!(world.state.sessions.is_empty());
    let api = world
        .send(
            Method::GET,
            "/healthz",
            None,
            None,
            &[("host", "evil.example:8080")],
        )
        .await;
    assert_eq!(api.status, StatusCode::MISDIRECTED_REQUEST);
    // Another of this server's own names is one of its origins.
    let ours = login_from(&world, &token, "http://localhost:8080", "127.0.0.1:8080").await;
    assert_eq!(ours.status, StatusCode::SEE_OTHER, "{}", ours.text);
    assert!(ours.headers.get("set-cookie").is_some());
}

/// Issue 26, item 6: an argument beginning with U+202E (right-to-left override) or holding a
/// zero-width space is shown with the character escaped and marked, on the approval card and
/// in the run's timeline, never raw, so nothing reorders or hides what a reviewer reads.
#[tokio::test]
async fn invisible_and_direction_changing_characters_in_arguments_are_marked() {
    let world = World::new();
    let hostile = "\u{202e}gpj.exe to pay\u{200b}pal";
    let (run, _approval) = world.parked_run("acme", "alice", hostile).await;
    let token = world.token("acme", "bob", None);
    let browser = sign_in(&world, &token).await;
    for path in ["/".to_owned(), format!("/runs/{run}")] {
        let shown = page(&world, &path, &browser.cookie).await;
        assert_eq!(shown.status, StatusCode::OK, "{path}");
        let html = &shown.text;
        assert!(!html.contains('\u{202e}'), "{path}: raw U+202E");
        assert!(!html.contains('\u{200b}'), "{path}: raw U+200B");
        assert!(
            html.contains(r#"<span class="hidden-char" title="an invisible or direction-changing character (U+202E) in this text">\u202e</span>"#),
            "{path}: {html}"
        );
        assert!(html.contains(r"\u200b</span>"), "{path}");
    }
}

/// SPEC §22.1 in the console: a conversation's page shows its status, principal, calls and its
/// taint (when, and by what: attacker-influenced text, so escaped and with hidden characters
/// marked), and while it is tainted and open, a clear-taint form with the same origin and
/// form-token checks as every other form; clearing records `conversation.taint_cleared`.
#[tokio::test]
async fn a_conversation_page_shows_its_taint_and_calls_and_clears_the_taint() {
    use common::CallEnd;
    let world = World::new();
    let mut c = world.open_conversation(1, "acme", "alice");
    world.add_call(&mut c, "test__note", CallEnd::Done);
    let by = format!(
        "<script>alert(1)</script>\u{202e}txt.exe (call call-1 of run {})",
        c.runs[0]
    );
    world.taint(&c, &by);
    world.add_call(&mut c, "test__append", CallEnd::Done);
    let token = world.token("acme", "bob", None);
    let browser = sign_in(&world, &token).await;
    let path = format!("/conversations/{}", c.id);

    let shown = page(&world, &path, &browser.cookie).await;
    assert_eq!(shown.status, StatusCode::OK, "{}", shown.text);
    let html = &shown.text;
    for needed in [
        "Conversation ",
        ">open<",
        "status-tainted",
        "Tainted since ",
        "alice",
        "2 call(s) started",
        "test__note",
        "test__append",
        &format!("/runs/{}", c.runs[0]),
        &format!("/runs/{}", c.runs[1]),
        &format!("action=\"/conversations/{}/clear-taint\"", c.id),
        &format!("name=\"csrf\" value=\"{}\"", browser.csrf),
        "name=\"reason\"",
        // The taint's text, escaped, with the direction override shown as its escape.
        "&lt;script&gt;alert(1)&lt;/script&gt;",
        r#"<span class="hidden-char" title="an invisible or direction-changing character (U+202E) in this text">\u202e</span>txt.exe"#,
    ] {
        assert!(html.contains(needed), "missing {needed}: {html}");
    }
    assert!(!html.contains('\u{202e}'), "raw U+202E");
    assert_eq!(
        html.matches("<script").count(),
        1,
        "only the console's own script"
    );
    // The live fragment renders the same way.
    let fragment = page(&world, &format!("/fragments{path}"), &browser.cookie).await;
    assert_eq!(fragment.status, StatusCode::OK);
    assert!(fragment.text.contains("&lt;script&gt;"));
    assert!(!fragment.text.contains("<script"));

    // A cross-site POST, or one without the form token, changes nothing.
    let action = format!("{path}/clear-taint");
    let seen = world.seen_taint(c.id);
    let body = format!("csrf={}&reason=the+note+is+ours&{seen}", browser.csrf);
    // The page carries the taint it shows; a form naming another one clears nothing.
    assert!(
        shown.text.contains("name=\"tainted_at\""),
        "the form names the taint it shows"
    );
    let stale = form(
        &world,
        &action,
        &browser,
        &format!(
            "csrf={}&reason=the+note+is+ours&tainted_at=2000-01-01T00%3A00%3A00Z",
            browser.csrf
        ),
        &[ORIGIN],
    )
    .await;
    assert_eq!(location(&stale), format!("{path}?notice=not_clearable"));
    for (body, headers) in [
        (body.as_str(), vec![("origin", "http://evil.example")]),
        (body.as_str(), vec![("sec-fetch-site", "cross-site")]),
        ("reason=the+note+is+ours", vec![ORIGIN]),
        ("csrf=0000&reason=x", vec![ORIGIN]),
    ] {
        let refused = form(&world, &action, &browser, body, &headers).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{body} {headers:?}");
    }
    // Without a reason: back to the page with the notice, still tainted.
    let empty = form(
        &world,
        &action,
        &browser,
        &format!("csrf={}&reason=+++&{seen}", browser.csrf),
        &[ORIGIN],
    )
    .await;
    assert_eq!(location(&empty), format!("{path}?notice=invalid_argument"));
    assert!(
        world
            .events_of_type("acme", "conversation.taint_cleared")
            .is_empty(),
        "nothing was cleared"
    );

    let cleared = form(&world, &action, &browser, &body, &[ORIGIN]).await;
    assert_eq!(cleared.status, StatusCode::SEE_OTHER, "{}", cleared.text);
    assert_eq!(location(&cleared), format!("{path}?notice=taint_cleared"));
    let events = world.events_of_type("acme", "conversation.taint_cleared");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].actor.actor_id.as_deref(), Some("bob"));
    assert_eq!(events[0].payload["reason"], "the note is ours");
    assert_eq!(events[0].payload["tainted_by"], by.as_str());
    let after = page(&world, &location(&cleared), &browser.cookie).await;
    assert!(after.text.contains("Taint cleared."), "{}", after.text);
    assert!(after.text.contains("Not tainted"));
    assert!(
        !after.text.contains("/clear-taint\""),
        "no form once untainted"
    );

    // Again (someone cleared it first): said plainly, nothing recorded twice.
    let again = form(&world, &action, &browser, &body, &[ORIGIN]).await;
    assert_eq!(location(&again), format!("{path}?notice=not_clearable"));
    let shown = page(&world, &location(&again), &browser.cookie).await;
    assert!(
        shown
            .text
            .contains("not tainted any more, or it has closed")
    );
    assert_eq!(
        world
            .events_of_type("acme", "conversation.taint_cleared")
            .len(),
        1
    );
}

/// A reviewer without `approval.resolve` sees the page but cannot clear; a closed
/// conversation keeps its taint and shows no form; another tenant's is not found.
#[tokio::test]
async fn a_conversation_page_refuses_what_core_refuses() {
    let world = World::new();
    let tainted = world.conversation(1, "acme", "alice", 1, Some("test__note (z)"));
    let closed = world.conversation(2, "acme", "alice", 1, Some("test__note (w)"));
    world.close_conversation(closed.id);

    let reader = world.token("acme", "erin", Some(&["run.read", "approval.read"]));
    let browser = sign_in(&world, &reader).await;
    let path = format!("/conversations/{}", tainted.id);
    let reply = form(
        &world,
        &format!("{path}/clear-taint"),
        &browser,
        &format!(
            "csrf={}&reason=mine+to+clear&{}",
            browser.csrf,
            world.seen_taint(tainted.id)
        ),
        &[ORIGIN],
    )
    .await;
    assert_eq!(location(&reply), format!("{path}?notice=forbidden"));
    let still = page(&world, &path, &browser.cookie).await;
    assert!(still.text.contains("status-tainted"), "{}", still.text);

    let bob = sign_in(&world, &world.token("acme", "bob", None)).await;
    let ended = page(
        &world,
        &format!("/conversations/{}", closed.id),
        &bob.cookie,
    )
    .await;
    assert_eq!(ended.status, StatusCode::OK);
    assert!(ended.text.contains(">closed<"));
    assert!(ended.text.contains("disconnected"));
    assert!(ended.text.contains("its taint stays as the record"));
    assert!(
        !ended.text.contains("/clear-taint\""),
        "no form on a closed one"
    );
    let refused = form(
        &world,
        &format!("/conversations/{}/clear-taint", closed.id),
        &bob,
        &format!("csrf={}&reason=x&{}", bob.csrf, world.seen_taint(closed.id)),
        &[ORIGIN],
    )
    .await;
    assert_eq!(
        location(&refused),
        format!("/conversations/{}?notice=not_clearable", closed.id)
    );

    let mallory = sign_in(&world, &world.token("globex", "mallory", None)).await;
    let theirs = page(&world, &path, &mallory.cookie).await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND);
    assert!(!theirs.text.contains("test__note"));
    let post = form(
        &world,
        &format!("{path}/clear-taint"),
        &mallory,
        &format!(
            "csrf={}&reason=x&{}",
            mallory.csrf,
            world.seen_taint(tainted.id)
        ),
        &[ORIGIN],
    )
    .await;
    assert_eq!(post.status, StatusCode::NOT_FOUND);
    let list = page(&world, "/conversations", &mallory.cookie).await;
    assert!(list.text.contains("No conversations yet."));
    assert!(!list.text.contains(&tainted.id.to_string()[..8]));
    assert_eq!(
        page(&world, "/conversations/not-an-id", &bob.cookie)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

/// An approval asked for by a conversation's call links to that conversation, on the queue's
/// card and on the run page; a scripted run's approval has no conversation and no link. The
/// list page shows the tenant's conversations with their taint.
#[tokio::test]
async fn approvals_link_to_their_conversation_and_the_list_shows_every_conversation() {
    use common::CallEnd;
    let world = World::new();
    let (scripted_run, scripted) = world.parked_run("acme", "alice", "scripted").await;
    let mut c = world.open_conversation(1, "acme", "alice");
    world.add_call(&mut c, "test__note", CallEnd::Done);
    world.taint(&c, "test__note (call call-1 of run r)");
    world.add_call(&mut c, "test__append", CallEnd::Parked);
    let quiet = world.conversation(2, "acme", "carol", 0, None);
    let approval = c.approval.expect("parked");
    let browser = sign_in(&world, &world.token("acme", "bob", None)).await;
    let link = format!("href=\"/conversations/{}\"", c.id);

    let home = page(&world, "/", &browser.cookie).await;
    let card = |html: &str, id: &str| {
        html.split(&format!("id=\"approval-{id}\""))
            .nth(1)
            .and_then(|rest| rest.split("</article>").next())
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no card for {id}: {html}"))
    };
    assert!(
        card(&home.text, &approval.to_string()).contains(&link),
        "{}",
        home.text
    );
    assert!(
        !card(&home.text, &scripted.to_string()).contains("/conversations/"),
        "a scripted run's approval has no conversation"
    );
    let run_page = page(&world, &format!("/runs/{}", c.runs[1]), &browser.cookie).await;
    assert_eq!(run_page.status, StatusCode::OK, "{}", run_page.text);
    assert!(run_page.text.contains(&link), "{}", run_page.text);
    let scripted_page = page(&world, &format!("/runs/{scripted_run}"), &browser.cookie).await;
    assert!(!scripted_page.text.contains("/conversations/0"));

    let list = page(&world, "/conversations", &browser.cookie).await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(list.text.contains(&link));
    assert!(
        list.text
            .contains(&format!("href=\"/conversations/{}\"", quiet.id))
    );
    assert_eq!(
        list.text.matches("class=\"taintmark\"").count(),
        1,
        "{}",
        list.text
    );
    let fragment = page(&world, "/fragments/conversations", &browser.cookie).await;
    assert!(fragment.text.contains(&link));
    // And the conversation's page names the approval its waiting call asked for.
    let shown = page(&world, &format!("/conversations/{}", c.id), &browser.cookie).await;
    assert!(
        shown.text.contains(&format!(
            "<code>{}</code> pending",
            &approval.to_string()[..8]
        )),
        "{}",
        shown.text
    );
}
