//! The console's HTML, rendered with maud: every interpolated value is escaped by the template
//! engine, and nothing in this file marks a value as pre-escaped, so text from tool arguments,
//! notes or reasons can only ever appear as text (SPEC §20). The only raw markup is the static
//! doctype.

use std::collections::BTreeMap;

use airlock_core::approval::Approval;
use airlock_core::approval::redact::redact;
use airlock_core::connection::{Connection, ConnectionState};
use airlock_core::events::Event;
use airlock_core::ids::{ApprovalId, ConnectionId, RunId, SessionId};
use airlock_core::invocation::Invocation;
use airlock_core::principal::Principal;
use airlock_core::run::{Run, RunState};
use airlock_core::session::Settlement;
use airlock_core::time::Timestamp;
use maud::{DOCTYPE, Markup, html};

use super::visible::visible;

/// Which page is shown, for the navigation and the live-update wiring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    Approvals,
    Review,
    Run,
    Conversations,
    Conversation,
}

/// What every signed-in page shows around its content.
pub struct Frame<'a> {
    pub principal: &'a Principal,
    pub policy_version: &'a str,
    pub csrf: &'a str,
    pub now: Timestamp,
    /// The event id the page was rendered at: the live stream starts after it.
    pub after: Option<i64>,
    pub pending: usize,
    pub uncertain: usize,
    pub notice: Option<Notice>,
}

/// A message after a form POST, chosen from a fixed list (never request text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    Approved,
    Denied,
    AlreadyResolved,
    Settled,
    TaintCleared,
    Error(&'static str),
}

impl Notice {
    /// The query value that carries it through the redirect.
    pub fn as_query(self) -> &'static str {
        match self {
            Notice::Approved => "approved",
            Notice::Denied => "denied",
            Notice::AlreadyResolved => "already_resolved",
            Notice::Settled => "settled",
            Notice::TaintCleared => "taint_cleared",
            Notice::Error(code) => code,
        }
    }

    /// The notice a query value names, if it names one.
    pub fn from_query(text: &str) -> Option<Notice> {
        Some(match text {
            "approved" => Notice::Approved,
            "denied" => Notice::Denied,
            "already_resolved" => Notice::AlreadyResolved,
            "settled" => Notice::Settled,
            "taint_cleared" => Notice::TaintCleared,
            "not_clearable" => Notice::Error("not_clearable"),
            "self_approval" => Notice::Error("self_approval"),
            "forbidden" => Notice::Error("forbidden"),
            "not_found" => Notice::Error("not_found"),
            "expired" => Notice::Error("expired"),
            "no_longer_pending" => Notice::Error("no_longer_pending"),
            "already_resolved_differently" => Notice::Error("already_resolved_differently"),
            "conflict" => Notice::Error("conflict"),
            "invalid_argument" => Notice::Error("invalid_argument"),
            "storage" => Notice::Error("storage"),
            _ => return None,
        })
    }

    fn text(self) -> (&'static str, &'static str) {
        match self {
            Notice::Approved => ("ok", "Approved. The run resumes."),
            Notice::Denied => ("ok", "Denied. The run records the denial and continues."),
            Notice::AlreadyResolved => ("ok", "That approval already had this answer."),
            Notice::Settled => (
                "ok",
                "Settlement recorded. The call stays UNCERTAIN, with your finding.",
            ),
            Notice::TaintCleared => (
                "ok",
                "Taint cleared. The conversation's next calls are proposed untainted again.",
            ),
            Notice::Error("not_clearable") => (
                "error",
                "That conversation is not tainted any more, or it has closed; nothing changed.",
            ),
            Notice::Error("self_approval") => (
                "error",
                "You may not resolve an approval for your own run (self-approval is disabled).",
            ),
            Notice::Error("forbidden") => ("error", "Your token lacks the scope for that."),
            Notice::Error("not_found") => (
                "error",
                "Not found: it may belong to another tenant or be gone.",
            ),
            Notice::Error("expired") => (
                "error",
                "That approval expired before your answer; the call was not performed.",
            ),
            Notice::Error("no_longer_pending") => (
                "error",
                "That approval is no longer pending (expired or cancelled).",
            ),
            Notice::Error("already_resolved_differently") => (
                "error",
                "Someone already resolved that approval the other way; their answer stands.",
            ),
            Notice::Error("invalid_argument") => ("error", "The form was incomplete or too long."),
            Notice::Error("storage") => ("error", "The store is unavailable; try again."),
            Notice::Error(_) => ("error", "That could not be done (conflict)."),
        }
    }
}

/// `2026-01-15 12:00:03 UTC` for a §2.2 timestamp.
pub fn clock(t: Timestamp) -> String {
    let text = t.to_string();
    let trimmed = text.get(..19).unwrap_or(&text).replace('T', " ");
    format!("{trimmed} UTC")
}

fn time_tag(t: Timestamp) -> Markup {
    html! { time datetime=(t.to_string()) { (clock(t)) } }
}

/// `3h 59m`, `12m 05s`, `45s`; `expired` at or after the deadline.
pub fn time_left(now: Timestamp, until: Timestamp) -> String {
    let seconds = (until.as_micros() - now.as_micros()) / 1_000_000;
    if seconds <= 0 {
        return "expired".to_owned();
    }
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds % 86_400 / 3600,
        seconds % 3600 / 60,
        seconds % 60,
    );
    if d > 0 {
        format!("{d}d {h}h left")
    } else if h > 0 {
        format!("{h}h {m:02}m left")
    } else if m > 0 {
        format!("{m}m {s:02}s left")
    } else {
        format!("{s}s left")
    }
}

/// How close an expiry is, for colour: under 15 minutes is urgent, under an hour soon.
fn urgency(now: Timestamp, until: Timestamp) -> &'static str {
    let seconds = (until.as_micros() - now.as_micros()) / 1_000_000;
    if seconds < 15 * 60 {
        "urgent"
    } else if seconds < 3600 {
        "soon"
    } else {
        "calm"
    }
}

fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

fn short(id: impl std::fmt::Display) -> String {
    let text = id.to_string();
    text.get(..8).unwrap_or(&text).to_owned()
}

/// A whole page.
pub fn page(title: &str, current: Page, frame: &Frame<'_>, content: Markup) -> Markup {
    let live = match current {
        Page::Approvals => "approvals",
        Page::Review => "review",
        Page::Run => "run",
        Page::Conversations => "conversations",
        Page::Conversation => "conversation",
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · airlock" }
                link rel="stylesheet" href="/assets/console.css";
                script src="/assets/console.js" defer {}
            }
            body data-after=(frame.after.unwrap_or(0)) data-live=(live)
                data-server-now=(frame.now.to_string()) {
                header.bar {
                    a.brand href="/" { span.mark { "◆" } " airlock" }
                    nav {
                        a href="/" class=[(current == Page::Approvals).then_some("active")]
                            title="Approvals (g a)" {
                            "Approvals "
                            span.count #count-approvals data-zero=(frame.pending == 0) { (frame.pending) }
                        }
                        a href="/review" class=[(current == Page::Review).then_some("active")]
                            title="Review queue (g r)" {
                            "Review "
                            span.count #count-review data-zero=(frame.uncertain == 0) { (frame.uncertain) }
                        }
                        a href="/conversations"
                            class=[matches!(current, Page::Conversations | Page::Conversation).then_some("active")]
                            title="MCP conversations: their calls and taint" {
                            "Conversations"
                        }
                    }
                    div.who {
                        span.live #live title="Live updates from the event stream" { "connecting" }
                        span.identity {
                            (frame.principal.principal_id) " @ " (frame.principal.tenant_id)
                        }
                        span.policy title="Policy version in force on this server" {
                            code { (frame.policy_version) }
                        }
                        form method="post" action="/logout" {
                            input type="hidden" name="csrf" value=(frame.csrf);
                            button.link type="submit" { "Sign out" }
                        }
                    }
                }
                @if let Some(notice) = frame.notice {
                    @let (kind, text) = notice.text();
                    div.notice.(kind) role="status" { (text) }
                }
                main #main { (content) }
                footer.keys {
                    kbd { "j" } "/" kbd { "k" } " next/previous · "
                    kbd { "a" } " approve · " kbd { "d" } " deny · " kbd { "r" } " reason · "
                    kbd { "g" } kbd { "a" } "/" kbd { "g" } kbd { "r" } " approvals/review · "
                    "buttons need " kbd { "Enter" } " to confirm"
                }
            }
        }
    }
}

/// The approval queue's live part.
pub fn approvals_fragment(
    approvals: &[Approval],
    explanations: &BTreeMap<ApprovalId, String>,
    conversations: &BTreeMap<SessionId, ConnectionId>,
    frame: &Frame<'_>,
    more: bool,
    from: &str,
) -> Markup {
    html! {
        section #approvals data-fragment="/fragments/approvals" data-count=(approvals.len()) {
            @if approvals.is_empty() {
                div.empty {
                    p.big { "No approvals waiting." }
                    p { "New requests appear here as soon as a run parks for one." }
                }
            }
            @for approval in approvals {
                (approval_card(
                    approval,
                    explanations.get(&approval.id),
                    conversations.get(&approval.session_id).copied(),
                    frame,
                    from,
                ))
            }
            @if more {
                p.more { "Showing the newest " (approvals.len()) "; resolve these to see older ones." }
            }
        }
    }
}

/// One approval on its own page: its card with the answer form while pending, else what became
/// of it (who resolved it, when and why; or that it expired).
pub fn approval_fragment(
    a: &Approval,
    explanation: Option<&String>,
    conversation: Option<ConnectionId>,
    frame: &Frame<'_>,
) -> Markup {
    html! {
        section #approval {
            @if a.status == airlock_core::vocab::ApprovalStatus::Pending {
                (approval_card(a, explanation, conversation, frame, &format!("approval:{}", a.id)))
            } @else {
                article.card.approval.resolved id=(format!("approval-{}", a.id)) data-id=(a.id) {
                    header {
                        h2.tool { (a.tool_name) " " span.version { (a.tool_version) } }
                        span.status { (a.status.as_str()) }
                    }
                    p.summary { (visible(&a.action_summary)) }
                    dl.facts {
                        dt { "Status" }
                        dd { code { (a.status.as_str()) } }
                        @if let Some(by) = &a.resolved_by {
                            dt { "Resolved by" }
                            dd { strong { (by) } @if let Some(at) = a.resolved_at { " · " (time_tag(at)) } }
                        }
                        @if let Some(reason) = &a.resolution_reason {
                            dt { "Reason" }
                            dd { (visible(reason)) }
                        }
                        dt { "Run" }
                        dd { a href=(format!("/runs/{}", a.run_id)) { code { (short(a.run_id)) } } }
                    }
                }
            }
        }
    }
}

/// One approval with its answer form. `conversation` is the MCP conversation whose call asked
/// for it (SPEC §22.1), when its session belongs to one: the reviewer can see what else that
/// conversation did and whether an untrusted result tainted it.
fn approval_card(
    a: &Approval,
    explanation: Option<&String>,
    conversation: Option<ConnectionId>,
    frame: &Frame<'_>,
    from: &str,
) -> Markup {
    let risk = a.risk.as_str();
    html! {
        article.card.approval.(format!("risk-{risk}")) tabindex="0" id=(format!("approval-{}", a.id))
            data-id=(a.id) {
            header {
                span.risk.(format!("risk-{risk}")) title="Risk of the tool" { (risk) }
                h2.tool { (a.tool_name) " " span.version { (a.tool_version) } }
                span.timeleft.(urgency(frame.now, a.expires_at)) data-expires=(a.expires_at.to_string())
                    title=(format!("Expires {}", clock(a.expires_at))) {
                    (time_left(frame.now, a.expires_at))
                }
            }
            p.summary { (visible(&a.action_summary)) }
            dl.facts {
                dt { "Reason" }
                dd {
                    code { (a.policy_reason) }
                    @if let Some(explanation) = explanation { " — " (visible(explanation)) }
                }
                dt { "Policy" }
                dd {
                    code { (a.policy_version) } " · decision " code { (a.policy_decision.as_str()) }
                    @if a.policy_version != frame.policy_version {
                        // §22.5: an approval asked for under rules since replaced still runs if
                        // the rules in force ask for the same approval; the reviewer sees both.
                        br;
                        span.policy-changed {
                            "requested under " code { (a.policy_version) }
                            "; in force now " code { (frame.policy_version) }
                        }
                    }
                }
                dt { "Run" }
                dd {
                    a href=(format!("/runs/{}", a.run_id)) { code { (short(a.run_id)) } }
                    " · principal " strong { (a.principal_id) }
                    @if let Some(requested) = a.requested_at { " · requested " (time_tag(requested)) }
                }
                @if let Some(conversation) = conversation {
                    dt { "Conversation" }
                    dd {
                        a.conversation href=(format!("/conversations/{conversation}")) {
                            code { (short(conversation)) }
                        }
                        " · its calls and taint"
                    }
                }
                dt { "Scopes" }
                dd { @for scope in &a.required_scopes { code { (scope) } " " } }
            }
            details.args open {
                summary { "Arguments (redacted)" }
                pre { (visible(&pretty(&a.arguments))) }
            }
            form.resolve method="post" {
                input type="hidden" name="csrf" value=(frame.csrf);
                input type="hidden" name="from" value=(from);
                label {
                    span { "Reason" }
                    input type="text" name="reason" maxlength="4096" autocomplete="off"
                        placeholder="optional, recorded with your answer";
                }
                button.approve type="submit" formaction=(format!("/approvals/{}/approve", a.id)) {
                    "Approve"
                }
                button.deny type="submit" formaction=(format!("/approvals/{}/deny", a.id)) {
                    "Deny"
                }
            }
        }
    }
}

/// The review queue's live part.
pub fn review_fragment(items: &[(Invocation, Option<Settlement>)], frame: &Frame<'_>) -> Markup {
    let open = items.iter().filter(|(_, s)| s.is_none()).count();
    html! {
        section #review data-fragment="/fragments/review" data-count=(open) {
            @if items.is_empty() {
                div.empty {
                    p.big { "Nothing to review." }
                    p { "A call whose effect may or may not have happened (a crash after its watermark) appears here. It is never repeated automatically." }
                }
            }
            @for (invocation, settlement) in items {
                (review_card(invocation, settlement.as_ref(), frame))
            }
        }
    }
}

fn review_card(i: &Invocation, settlement: Option<&Settlement>, frame: &Frame<'_>) -> Markup {
    let arguments = serde_json::from_str::<serde_json::Value>(&i.arguments)
        .map(|v| redact(&v))
        .unwrap_or(serde_json::Value::Null);
    html! {
        article.card.uncertain tabindex="0" id=(format!("invocation-{}", i.id)) data-id=(i.id) {
            header {
                span.risk.risk-uncertain { "uncertain" }
                h2.tool { (i.tool_name) " " span.version { (i.tool_version) } }
                span.watermark title="When the effect was sent (the watermark)" {
                    "sent "
                    @if let Some(sent) = i.effect_sent_at { (time_tag(sent)) } @else { "—" }
                }
            }
            dl.facts {
                dt { "Idempotency key" }
                dd { code.key { (i.idempotency_key) } }
                dt { "Call" }
                dd {
                    code { (i.call_id) } " at step " (i.step_number) " · run "
                    a href=(format!("/runs/{}", i.run_id)) { code { (short(i.run_id)) } }
                    " · invocation " code { (short(i.id)) }
                }
                dt { "Class" }
                dd {
                    code { (i.side_effect.as_str()) } " · " code { (i.idempotency_class.as_str()) }
                    " · risk " code { (i.risk.as_str()) }
                    @if let Some(code) = &i.reason_code { " · " code { (code) } }
                }
            }
            details.args open {
                summary { "Arguments (redacted)" }
                pre { (visible(&pretty(&arguments))) }
            }
            @if let Some(s) = settlement {
                p.settled {
                    "Settled " strong { (s.outcome.as_str()) } " by " (s.settled_by) " at "
                    (time_tag(s.settled_at)) ": " q { (visible(&s.note)) }
                }
            } @else {
                form.settle method="post" action=(format!("/invocations/{}/settle", i.id)) {
                    input type="hidden" name="csrf" value=(frame.csrf);
                    fieldset {
                        legend { "What happened?" }
                        label { input type="radio" name="outcome" value="succeeded" required; " The effect happened" }
                        label { input type="radio" name="outcome" value="failed"; " It did not happen" }
                    }
                    label.note {
                        span { "Note" }
                        textarea name="note" required maxlength="4096" rows="2"
                            placeholder="How you checked (e.g. the outbox line with this key)" {}
                    }
                    button.settle type="submit" { "Settle" }
                }
            }
        }
    }
}

/// The run page's live part: the run, its waiting approvals and its event timeline.
pub fn run_fragment(
    run: &Run,
    pending: &[Approval],
    explanations: &BTreeMap<ApprovalId, String>,
    conversation: Option<ConnectionId>,
    events: &[Event],
    truncated: bool,
    frame: &Frame<'_>,
) -> Markup {
    let status = run.status().as_str();
    let from = format!("run:{}", run.id);
    html! {
        section #run data-fragment=(format!("/fragments/runs/{}", run.id)) data-run=(run.id) {
            div.runhead {
                h1 { "Run " code { (run.id) } }
                span.status.(format!("status-{}", status.to_ascii_lowercase())) { (status) }
            }
            dl.facts.wide {
                dt { "Principal" } dd { strong { (run.principal_id) } " @ " (run.tenant_id) }
                dt { "Progress" } dd { (run.step_count) " step(s), " (run.tool_call_count) " tool call(s); limits "
                    (run.limits.max_steps) " steps, " (run.limits.max_tool_calls) " calls" }
                dt { "Created" } dd { (time_tag(run.created_at)) " · updated " (time_tag(run.updated_at)) }
                @if let Some(conversation) = conversation {
                    dt { "Conversation" }
                    dd { a.conversation href=(format!("/conversations/{conversation}")) { code { (short(conversation)) } } }
                }
                @if let Some(deadline) = run.deadline_at { dt { "Deadline" } dd { (time_tag(deadline)) } }
                @match &run.state {
                    RunState::Completed { final_message } => { dt { "Final message" } dd { q { (visible(final_message)) } } }
                    RunState::Failed { failure } => {
                        dt { "Failure" } dd { code { (failure.reason.as_str()) } " — " (visible(&failure.message)) }
                    }
                    _ => {}
                }
            }
            @if !pending.is_empty() {
                h2 { "Waiting for you" }
                @for approval in pending {
                    (approval_card(approval, explanations.get(&approval.id), conversation, frame, &from))
                }
            }
            h2 { "Timeline" }
            @if truncated { p.more { "Showing the first " (events.len()) " events." } }
            ol.timeline {
                @for event in events {
                    li class=(format!("ev ev-{}", event.event_type.as_str().split('.').next().unwrap_or("other"))) {
                        span.evid { "#" (event.id) }
                        (time_tag(event.created_at))
                        span.evtype { (event.event_type.as_str()) }
                        span.actor {
                            (event.actor.actor_type.as_str())
                            @if let Some(id) = &event.actor.actor_id { " " (id) }
                        }
                        details {
                            summary { "payload" }
                            pre { (visible(&pretty(&event.payload))) }
                        }
                    }
                }
            }
        }
    }
}

/// `open` or `closed`, as the status badge shows it.
fn conversation_status(c: &Connection) -> &'static str {
    c.status().as_str()
}

/// The conversations list's live part: the tenant's newest conversations.
pub fn conversations_fragment(conversations: &[Connection], more: bool) -> Markup {
    html! {
        section #conversations data-fragment="/fragments/conversations" data-count=(conversations.len()) {
            h1 { "Conversations" }
            @if conversations.is_empty() {
                div.empty {
                    p.big { "No conversations yet." }
                    p { "Each MCP client connection to " code { "airlock mcp serve" } " is a conversation: its calls, and its taint once an untrusted result reached it." }
                }
            } @else {
                table.list {
                    thead {
                        tr {
                            th { "Conversation" } th { "Status" } th { "Principal" } th { "Calls" }
                            th { "Tainted" } th { "Opened" } th { "Last call" }
                        }
                    }
                    tbody {
                        @for c in conversations {
                            tr.tainted[c.taint.is_some()] {
                                td { a href=(format!("/conversations/{}", c.id)) { code { (short(c.id)) } } }
                                td { span.status.(format!("status-{}", conversation_status(c))) { (conversation_status(c)) } }
                                td { (visible(&c.principal_id)) }
                                td.num { (c.call_count) }
                                td {
                                    @if let Some(taint) = &c.taint { span.taintmark { "tainted" } " " (time_tag(taint.at)) }
                                    @else { "no" }
                                }
                                td { (time_tag(c.opened_at)) }
                                td { (time_tag(c.last_seen_at)) }
                            }
                        }
                    }
                }
            }
            @if more { p.more { "Showing the newest " (conversations.len()) "." } }
        }
    }
}

/// The run a taint's `by` names, if it names one: a tool result's taint reads
/// `{tool} (call {call_id} of run {run_id})`. Only a link is derived from it; the text itself
/// is always shown as untrusted text.
fn tainting_run(by: &str) -> Option<RunId> {
    let (_, rest) = by.rsplit_once(" of run ")?;
    rest.strip_suffix(')')?.parse().ok()
}

/// A conversation page's live part: the conversation, its taint with the clear-taint form
/// (while it is tainted and open), and its newest calls.
pub fn conversation_fragment(
    c: &Connection,
    calls: &[crate::service::Call],
    truncated: bool,
    frame: &Frame<'_>,
) -> Markup {
    let status = conversation_status(c);
    html! {
        section #conversation data-fragment=(format!("/fragments/conversations/{}", c.id)) data-conversation=(c.id) {
            div.runhead {
                h1 { "Conversation " code { (c.id) } }
                span.status.(format!("status-{status}")) { (status) }
                @if c.taint.is_some() { span.status.status-tainted { "tainted" } }
            }
            dl.facts.wide {
                dt { "Principal" } dd { strong { (visible(&c.principal_id)) } " @ " (visible(&c.tenant_id)) }
                dt { "Calls" } dd { (c.call_count) " call(s) started" }
                dt { "Opened" } dd { (time_tag(c.opened_at)) " · last call " (time_tag(c.last_seen_at)) }
                @match &c.state {
                    ConnectionState::Open { alive_until } => {
                        dt { "Alive until" } dd { (time_tag(*alive_until)) " (renewed by its gateway)" }
                    }
                    ConnectionState::Closed { closed_at, reason } => {
                        dt { "Closed" } dd { (time_tag(*closed_at)) " · " code { (reason.as_str()) } }
                    }
                }
                dt { "Gateway" } dd { code { (visible(&c.gateway_id)) } }
                dt { "Session" } dd { code { (c.session_id) } }
            }
            @if let Some(taint) = &c.taint {
                article.card.taint tabindex="0" id=(format!("taint-{}", c.id)) {
                    header {
                        span.risk.risk-high { "tainted" }
                        h2 { "Tainted since " (time_tag(taint.at)) }
                    }
                    dl.facts {
                        dt { "By" }
                        dd {
                            q.tainted-by { (visible(&taint.by)) }
                            @if let Some(run) = tainting_run(&taint.by) {
                                " · " a href=(format!("/runs/{run}")) { "run " code { (short(run)) } }
                            }
                        }
                    }
                    p.explain {
                        "An untrusted result reached this conversation's client. Every call proposed since then is decided as "
                        code { "external_untrusted" } ": its effects wait for approval."
                    }
                    @if c.is_open() {
                        form.clear-taint method="post" action=(format!("/conversations/{}/clear-taint", c.id)) {
                            input type="hidden" name="csrf" value=(frame.csrf);
                            input type="hidden" name="tainted_at" value=(taint.at.to_string());
                            label {
                                span { "Reason" }
                                input type="text" name="reason" required maxlength="4096" autocomplete="off"
                                    placeholder="why the content that tainted it is trusted now (recorded)";
                            }
                            button.clear type="submit" { "Clear taint" }
                        }
                    } @else {
                        p.settled { "This conversation has closed: it proposes no more calls, and its taint stays as the record of what happened." }
                    }
                }
            } @else {
                p.untainted { "Not tainted: its calls are decided with the gateway's own trust." }
            }
            h2 { "Calls" }
            @if calls.is_empty() {
                p.more { "No calls yet." }
            } @else {
                table.list.calls {
                    thead {
                        tr {
                            th { "Proposed" } th { "Tool" } th { "Status" } th { "Trust" } th { "Approval" } th { "Run" } th { "Invocation" }
                        }
                    }
                    tbody {
                        @for call in calls {
                            @let i = &call.invocation;
                            tr id=(format!("call-{}", i.id)) {
                                td { (time_tag(i.created_at)) }
                                td { code { (visible(&i.tool_name)) } }
                                td {
                                    span.status.(format!("status-{}", i.status.as_str().to_ascii_lowercase())) { (i.status.as_str()) }
                                    @if let Some(code) = &i.reason_code { " " code { (visible(code)) } }
                                }
                                td.trust.(i.origin_trust.as_str()) { (i.origin_trust.as_str()) }
                                td {
                                    @if let Some(a) = &call.approval {
                                        code { (short(a.id)) } " " (a.status.as_str())
                                        @if let Some(by) = &a.resolved_by { " by " (visible(by)) }
                                    } @else { "—" }
                                }
                                td { a href=(format!("/runs/{}", i.run_id)) { code { (short(i.run_id)) } } }
                                td { code { (short(i.id)) } }
                            }
                        }
                    }
                }
            }
            @if truncated { p.more { "Showing the newest " (calls.len()) " calls." } }
        }
    }
}

/// The sign-in page.
pub fn login(error: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Sign in · airlock" }
                link rel="stylesheet" href="/assets/console.css";
            }
            body.login {
                main {
                    form.signin method="post" action="/login" {
                        h1 { span.mark { "◆" } " airlock" }
                        p { "Sign in with an API token (" code { "airlock tokens create" } ")." }
                        @if let Some(error) = error { p.notice.error role="alert" { (error) } }
                        label {
                            span { "Token" }
                            input type="password" name="token" autocomplete="off" autofocus
                                required placeholder="alk_…" spellcheck="false";
                        }
                        button.approve type="submit" { "Sign in" }
                        p.fine { "The token is checked and forgotten; your browser keeps only a session cookie." }
                    }
                }
            }
        }
    }
}

/// A page for a refused or failed request.
pub fn error_page(title: &str, detail: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · airlock" }
                link rel="stylesheet" href="/assets/console.css";
            }
            body.login {
                main {
                    div.signin {
                        h1 { (title) }
                        p { (detail) }
                        p { a href="/" { "Back to the console" } }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_reads_like_a_countdown() {
        let now = Timestamp::from_micros(0);
        let at = |s: i64| Timestamp::from_micros(s * 1_000_000);
        assert_eq!(time_left(now, at(0)), "expired");
        assert_eq!(time_left(now, at(-5)), "expired");
        assert_eq!(time_left(now, at(45)), "45s left");
        assert_eq!(time_left(now, at(12 * 60 + 5)), "12m 05s left");
        assert_eq!(time_left(now, at(3 * 3600 + 59 * 60)), "3h 59m left");
        assert_eq!(time_left(now, at(2 * 86_400 + 3600)), "2d 1h left");
        assert_eq!(urgency(now, at(60)), "urgent");
        assert_eq!(urgency(now, at(1800)), "soon");
        assert_eq!(urgency(now, at(7200)), "calm");
    }

    #[test]
    fn notices_round_trip_through_their_query_values_only() {
        for notice in [
            Notice::Approved,
            Notice::Denied,
            Notice::Settled,
            Notice::Error("self_approval"),
            Notice::Error("expired"),
        ] {
            assert_eq!(Notice::from_query(notice.as_query()), Some(notice));
        }
        assert_eq!(Notice::from_query("<script>"), None);
    }

    /// §22.5: an approval requested under rules since replaced says so on its card.
    #[test]
    fn an_approval_requested_under_other_rules_is_marked() {
        use airlock_core::testing::fixtures::{
            sample_approval, sample_invocation, sample_run, sample_session,
        };
        use airlock_core::vocab::{ApprovalStatus, InvocationStatus, RunStatus};
        let run = sample_run(1, sample_session(1).id, RunStatus::WaitingForApproval);
        let call = sample_invocation(1, &run, 1, "c1", InvocationStatus::WaitingForApproval);
        let approval = sample_approval(1, &call, ApprovalStatus::Pending);
        let principal = Principal {
            tenant_id: approval.tenant_id.clone(),
            principal_id: "bob".into(),
            scopes: Default::default(),
        };
        let card = |in_force: &str| {
            let frame = Frame {
                principal: &principal,
                policy_version: in_force,
                csrf: "t",
                now: Timestamp::from_micros(0),
                after: None,
                pending: 1,
                uncertain: 0,
                notice: None,
            };
            approval_card(&approval, None, None, &frame, "home").into_string()
        };
        let same = card(&approval.policy_version);
        assert!(!same.contains("policy-changed"), "{same}");
        let upgraded = card("default@newer+hnewer");
        assert!(upgraded.contains("class=\"policy-changed\""), "{upgraded}");
        assert!(
            upgraded.contains(&format!(
                "requested under <code>{}</code>; in force now <code>default@newer+hnewer</code>",
                approval.policy_version
            )),
            "{upgraded}"
        );
    }

    #[test]
    fn text_is_escaped() {
        let markup =
            html! { pre { (pretty(&serde_json::json!({"x": "<script>alert(1)</script>"}))) } };
        let text = markup.into_string();
        assert!(
            text.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{text}"
        );
        assert!(!text.contains("<script>"), "{text}");
    }
}
