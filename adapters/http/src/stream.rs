//! `GET /v1/events/stream` (SPEC §20): the tenant's events as Server-Sent Events, read from the
//! durable log, so the stream is exactly the log and a reconnect resumes exactly after the
//! last event received.
//!
//! **Where a stream starts.** After `Last-Event-ID` if the client sends one (EventSource does on
//! every reconnect), else after the `after` query parameter, else at the beginning of the
//! tenant's log. Starting at the beginning rather than "now" is what makes a fresh client safe:
//! an event that committed just before it connected is still delivered. A view that already
//! shows the current state (the console) passes the `after` it rendered at.
//!
//! **Nothing missed or repeated.** Each event is sent with `id` = its store id; the next read
//! asks for ids strictly greater than the last one sent. The store guarantees that ids follow
//! commit order (`StoreTx::events_of_tenant`), so an id below one already read never appears
//! later. New events are found by polling the store (`poll`), because they may be committed by
//! another process (a worker on the same store), which no in-process signal would see.
//!
//! The token is re-checked every few seconds, so revoking it ends its open streams too.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use airlock_core::access::{Verified, VouchedBy};
use airlock_core::events::Event;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::extract::{ApiQuery, Caller};
use crate::problem::{Problem, ProblemBody};
use crate::service::SharedControl;
use crate::state::AppState;
use crate::wire::EventRecord;

/// Events read per store query.
const PAGE: usize = 200;

/// `GET /v1/events/stream` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Start after this event id when no `Last-Event-ID` header is sent.
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// `false`: send the events after the cursor that exist now, then end the response
    /// (a catch-up read for scripts); default `true`: keep the stream open.
    pub follow: Option<bool>,
}

/// Where to start: `Last-Event-ID` wins over `after`; either must be a non-negative integer.
pub fn start_after(headers: &HeaderMap, after: Option<i64>) -> Result<Option<i64>, Problem> {
    let header = headers
        .get("last-event-id")
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|t| t.trim().parse::<i64>().ok())
                .filter(|id| *id >= 0)
                .ok_or_else(|| Problem::invalid("Last-Event-ID must be a non-negative integer"))
        })
        .transpose()?;
    if after.is_some_and(|a| a < 0) {
        return Err(Problem::invalid("after must be a non-negative integer"));
    }
    Ok(header.or(after))
}

/// One stored event as an SSE message: `id` = the event id, `event` = its type, `data` = the
/// §13.1 envelope as one line of JSON.
fn message(event: &Event) -> SseEvent {
    let data = serde_json::to_string(&EventRecord::from(event)).unwrap_or_else(|_| "{}".into());
    SseEvent::default()
        .id(event.id.to_string())
        .event(event.event_type.as_str())
        .data(data)
}

/// What a tail holds between polls.
struct Tail {
    control: SharedControl,
    caller: Verified,
    after: Option<i64>,
    buffered: VecDeque<Event>,
    follow: bool,
    poll: Duration,
    reauthenticate: Duration,
    checked_at: tokio::time::Instant,
    closing: tokio::sync::watch::Receiver<bool>,
}

/// Whether the caller's credential still holds: an airlock token is asked of the store again
/// (revoked or expired ends the stream), an issuer's token holds until its `exp`.
fn still_vouched_for(tail: &Tail) -> bool {
    match &tail.caller.by {
        VouchedBy::ApiToken(id) => tail.control.authenticate_id(*id).is_ok(),
        VouchedBy::Issuer(token) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
            now < token.expires_at.as_micros()
        }
    }
}

/// The tenant's events after `after`, as a stream that polls the store every `poll` while it
/// is caught up and re-checks the token every `reauthenticate`, and ends when `follow` is false and it is caught up, when the token stops
/// being valid, or on a store error (the client reconnects with `Last-Event-ID`).
pub fn tail(
    control: SharedControl,
    caller: Verified,
    after: Option<i64>,
    follow: bool,
    (poll, reauthenticate): (Duration, Duration),
    closing: tokio::sync::watch::Receiver<bool>,
) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send {
    let state = Tail {
        control,
        caller,
        after,
        buffered: VecDeque::new(),
        follow,
        poll,
        reauthenticate,
        checked_at: tokio::time::Instant::now(),
        closing,
    };
    futures_util::stream::unfold(state, |mut tail| async move {
        loop {
            if *tail.closing.borrow() {
                return None;
            }
            if let Some(event) = tail.buffered.pop_front() {
                tail.after = Some(event.id);
                let item = message(&event);
                return Some((Ok(item), tail));
            }
            if tail.checked_at.elapsed() >= tail.reauthenticate {
                if !still_vouched_for(&tail) {
                    return None;
                }
                tail.checked_at = tokio::time::Instant::now();
            }
            let page =
                match tail
                    .control
                    .tenant_events(&tail.caller.principal, tail.after, Some(PAGE))
                {
                    Ok(page) => page,
                    Err(error) => {
                        tracing::warn!(%error, "event stream ends on a read error");
                        return None;
                    }
                };
            if page.items.is_empty() {
                if !tail.follow {
                    return None;
                }
                tokio::select! {
                    () = tokio::time::sleep(tail.poll) => {}
                    _ = tail.closing.changed() => return None,
                }
                continue;
            }
            tail.buffered.extend(page.items);
        }
    })
}

/// The tenant's events as they commit (`run.read`): Server-Sent Events whose `id` is the event
/// id and whose `data` is the event envelope. Resume with `Last-Event-ID`.
#[utoipa::path(get, path = "/v1/events/stream", tag = "events", params(
        StreamQuery,
        ("Last-Event-ID" = Option<String>, Header, nullable = false, pattern = "^[0-9]{1,18}$", description = "Resume after this event id (sent by EventSource on reconnect)"),
    ),
    responses(
        (status = 200, description = "A `text/event-stream`; each message's `data` is an event envelope", content_type = "text/event-stream", body = crate::wire::SseMessageDoc),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 403, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn stream(
    State(state): State<AppState>,
    Caller(caller): Caller,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<StreamQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>> + Send>, Problem> {
    let after = start_after(&headers, query.after)?;
    open(&state, caller, after, query.follow.unwrap_or(true))
}

/// Checks the scope once up front (so a caller without `run.read` gets a 403, not an empty
/// stream), then opens the tail.
pub fn open(
    state: &AppState,
    caller: Verified,
    after: Option<i64>,
    follow: bool,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>> + Send + use<>>, Problem> {
    state
        .control
        .tenant_events(&caller.principal, after, Some(1))?;
    let events = tail(
        state.control.clone(),
        caller,
        after,
        follow,
        (
            state.settings.stream_poll,
            state.settings.stream_reauthenticate,
        ),
        state.closing.subscribe(),
    );
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
