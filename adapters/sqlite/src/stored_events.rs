//! How a journal row's `events` column holds its events (M19, issue 33).
//!
//! A row's events share far more than its columns say: one actor (a worker's id is 44
//! characters), nearly one time, and the keyed ones one subject (an invocation's id), which
//! each event repeated. A PENDING row's `run.checkpointed` repeats the row's own checkpoint
//! trigger and version, and every payload was a JSON string inside the array, so its quotes
//! were escaped once more (a result item, itself JSON text inside a payload, twice more). In
//! the 990-step run that was 1.9 KB of event text per step, a quarter of the database.
//!
//! So a row written since M19 holds one object:
//!
//! ```json
//! {"a": "worker", "i": "inline-…", "c": 1796657828071220, "v": 1,
//!  "e": [{"t": "run.checkpointed"},
//!        {"t": "tool.call.proposed", "p": {…}, "s": "tool.call.proposed"}, …]}
//! ```
//!
//! - `a`, `i`, `c`, `v`: the first event's actor type, actor id (`null` for none), time in
//!   microseconds and payload schema version; an event carries its own only where it differs
//!   (`"i": null` says "no actor id" under a head that has one).
//! - `t`: the event type; `p`: the payload as JSON, not as a string. A `run.checkpointed`
//!   whose payload is exactly `{"trigger": …, "version": …}` of the row's own checkpoint omits
//!   it.
//! - `s`: a key that is `s` + `:` + the row's `key_subject` (every keyed event of a row shares
//!   its subject, see `journal::key_subject`); `k`: any other key, whole.
//!
//! Rows written before M19 keep the array of arrays `[type, version, actor type, actor id,
//! payload text, key, time]` and are read as they were. The `events` view reads both shapes,
//! so SQL over the journal sees the same columns as before. Unknown fields are refused: a row
//! this build cannot read fully is an error, never a guess.
//!
//! A payload is now JSON that SQLite parses when the view reads a row, and SQLite's parser
//! refuses nesting deeper than 1,000. Payloads are a few levels deep around what they quote,
//! and what they quote is bounded far below that (a call's arguments at 128 levels,
//! `MAX_ARGUMENT_DEPTH`; a result item is a string); the store's own reader has no limit.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};

use airlock_core::events::{Actor, Event, EventType};
use airlock_core::ids::{RunId, SessionId};
use airlock_core::time::Timestamp;

/// What a row says beside its events that the stored form leaves out: the subject of its keys
/// and its checkpoint's trigger and version.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowContext<'a> {
    pub(super) key_subject: Option<&'a str>,
    pub(super) checkpoint: Option<(&'a str, i64)>,
}

/// The payload a `run.checkpointed` of a row with `checkpoint` (trigger, version) leaves out.
fn checkpointed_payload((trigger, version): (&str, i64)) -> Value {
    json!({"trigger": trigger, "version": version})
}

#[derive(Serialize)]
struct HeadOut<'a> {
    a: &'a str,
    i: Option<&'a str>,
    c: i64,
    v: u32,
    e: Vec<EventOut<'a>>,
}

#[derive(Serialize)]
struct EventOut<'a> {
    t: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    v: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    a: Option<&'a str>,
    /// `Some(None)` is written as `null`: no actor id under a head that has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    i: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    c: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    k: Option<&'a str>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeadIn {
    a: String,
    i: Option<String>,
    c: i64,
    v: u32,
    e: Vec<EventIn>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventIn {
    t: String,
    #[serde(default)]
    v: Option<u32>,
    #[serde(default)]
    a: Option<String>,
    #[serde(default, deserialize_with = "present")]
    i: Option<Option<String>>,
    #[serde(default)]
    c: Option<i64>,
    /// Present (`null` included) is the payload; absent is the row's checkpoint's.
    #[serde(default, deserialize_with = "present")]
    p: Option<Value>,
    #[serde(default)]
    s: Option<String>,
    #[serde(default)]
    k: Option<String>,
}

/// A field that is present, `null` included (`Some(None)`); an absent one stays `None` by the
/// field's `default`.
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// One event as a row written before M19 holds it.
type LegacyEvent = (
    String,
    u32,
    String,
    Option<String>,
    String,
    Option<String>,
    i64,
);

/// Why a row's `events` cannot be read back.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unreadable {
    #[error("not JSON of a known shape: {0}")]
    Json(#[from] serde_json::Error),
    #[error("an event type, actor type or id is unknown: {0}")]
    Vocabulary(String),
    #[error(
        "an event leaves out its payload, which only a run.checkpointed of a row with a checkpoint may"
    )]
    NoPayload,
    #[error("an event's key is given by its subject, but the row has none")]
    NoSubject,
    #[error("an event has both a key prefix and a whole key")]
    TwoKeys,
    #[error("an event id or sequence is out of range")]
    OutOfRange,
}

/// The row's events as `events` stores them; `None` for a row without events (its `events` is
/// NULL). The caller checked that every keyed event's subject is `context.key_subject`; this
/// form is only shorter when it is.
pub(super) fn encode(
    events: &[Event],
    context: RowContext<'_>,
) -> Result<Option<String>, serde_json::Error> {
    let Some(first) = events.first() else {
        return Ok(None);
    };
    let head_actor_type = first.actor.actor_type.as_str();
    let head_actor_id = first.actor.actor_id.as_deref();
    let head_at = first.created_at.as_micros();
    let head_version = first.payload_schema_version;
    let derived = context.checkpoint.map(checkpointed_payload);
    let stored = events
        .iter()
        .map(|event| {
            let actor_type = event.actor.actor_type.as_str();
            let actor_id = event.actor.actor_id.as_deref();
            let at = event.created_at.as_micros();
            let payload_left_out = event.event_type == EventType::RunCheckpointed
                && derived.as_ref() == Some(&event.payload);
            let by_subject = event.derivation_key.as_deref().and_then(|key| {
                let (prefix, subject) = key.split_once(':')?;
                (Some(subject) == context.key_subject).then_some(prefix)
            });
            EventOut {
                t: event.event_type.as_str(),
                v: (event.payload_schema_version != head_version)
                    .then_some(event.payload_schema_version),
                a: (actor_type != head_actor_type).then_some(actor_type),
                i: (actor_id != head_actor_id).then_some(actor_id),
                c: (at != head_at).then_some(at),
                p: (!payload_left_out).then_some(&event.payload),
                s: by_subject,
                k: match by_subject {
                    Some(_) => None,
                    None => event.derivation_key.as_deref(),
                },
            }
        })
        .collect();
    serde_json::to_string(&HeadOut {
        a: head_actor_type,
        i: head_actor_id,
        c: head_at,
        v: head_version,
        e: stored,
    })
    .map(Some)
}

/// Where a row's events are numbered from: its first event's id and session sequence.
#[derive(Debug, Clone, Copy)]
pub(super) struct Numbering {
    pub(super) session_id: SessionId,
    pub(super) run_id: Option<RunId>,
    pub(super) first_id: i64,
    pub(super) first_sequence: i64,
}

/// The events of a row's `events` text, in either stored shape.
pub(super) fn decode(
    text: &str,
    numbering: Numbering,
    context: RowContext<'_>,
) -> Result<Vec<Event>, Unreadable> {
    if text.starts_with('[') {
        return decode_legacy(text, numbering);
    }
    let head: HeadIn = crate::rows::from_json(text)?;
    let mut events = Vec::with_capacity(head.e.len());
    for (offset, stored) in head.e.into_iter().enumerate() {
        let event_type: EventType = stored
            .t
            .parse()
            .map_err(|_| Unreadable::Vocabulary(stored.t.clone()))?;
        let payload = match stored.p {
            Some(payload) => payload,
            None => match context.checkpoint {
                Some(checkpoint) if event_type == EventType::RunCheckpointed => {
                    checkpointed_payload(checkpoint)
                }
                _ => return Err(Unreadable::NoPayload),
            },
        };
        let derivation_key = match (stored.s, stored.k) {
            (Some(prefix), None) => {
                let subject = context.key_subject.ok_or(Unreadable::NoSubject)?;
                Some(format!("{prefix}:{subject}"))
            }
            (None, key) => key,
            (Some(_), Some(_)) => return Err(Unreadable::TwoKeys),
        };
        let actor_type = stored.a.as_deref().unwrap_or(&head.a);
        events.push(numbered(
            numbering,
            offset,
            Unnumbered {
                event_type,
                payload_schema_version: stored.v.unwrap_or(head.v),
                actor: Actor {
                    actor_type: actor_type
                        .parse()
                        .map_err(|_| Unreadable::Vocabulary(actor_type.to_owned()))?,
                    actor_id: stored.i.unwrap_or_else(|| head.i.clone()),
                },
                payload,
                derivation_key,
                created_at: stored.c.unwrap_or(head.c),
            },
        )?);
    }
    Ok(events)
}

/// A decoded event before its id and sequence are given.
struct Unnumbered {
    event_type: EventType,
    payload_schema_version: u32,
    actor: Actor,
    payload: Value,
    derivation_key: Option<String>,
    created_at: i64,
}

fn numbered(numbering: Numbering, offset: usize, event: Unnumbered) -> Result<Event, Unreadable> {
    let offset = i64::try_from(offset).map_err(|_| Unreadable::OutOfRange)?;
    let sequence = numbering
        .first_sequence
        .checked_add(offset)
        .and_then(|s| u64::try_from(s).ok())
        .ok_or(Unreadable::OutOfRange)?;
    Ok(Event {
        id: numbering
            .first_id
            .checked_add(offset)
            .ok_or(Unreadable::OutOfRange)?,
        session_id: numbering.session_id,
        run_id: numbering.run_id,
        sequence,
        event_type: event.event_type,
        payload_schema_version: event.payload_schema_version,
        actor: event.actor,
        payload: event.payload,
        derivation_key: event.derivation_key,
        created_at: Timestamp::from_micros(event.created_at),
    })
}

/// A row written before M19: an array of `[type, version, actor type, actor id, payload text,
/// key, time]`.
fn decode_legacy(text: &str, numbering: Numbering) -> Result<Vec<Event>, Unreadable> {
    let stored: Vec<LegacyEvent> = crate::rows::from_json(text)?;
    let mut events = Vec::with_capacity(stored.len());
    for (offset, (kind, version, actor_type, actor_id, payload, key, created_at)) in
        stored.into_iter().enumerate()
    {
        events.push(numbered(
            numbering,
            offset,
            Unnumbered {
                event_type: kind.parse().map_err(|_| Unreadable::Vocabulary(kind))?,
                payload_schema_version: version,
                actor: Actor {
                    actor_type: actor_type
                        .parse()
                        .map_err(|_| Unreadable::Vocabulary(actor_type))?,
                    actor_id,
                },
                payload: crate::rows::from_json(&payload)?,
                derivation_key: key,
                created_at,
            },
        )?);
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NUMBERING: Numbering = Numbering {
        session_id: SessionId(uuid::Uuid::from_u128(1)),
        run_id: None,
        first_id: 10,
        first_sequence: 4,
    };

    const CONTEXT: RowContext<'static> = RowContext {
        key_subject: Some("inv-1"),
        checkpoint: Some(("tool_pending", 3)),
    };

    fn refused(text: &str, context: RowContext<'_>) -> String {
        match decode(text, NUMBERING, context) {
            Ok(events) => panic!("{text} was read as {events:?}"),
            Err(error) => error.to_string(),
        }
    }

    /// A row this build cannot read whole is refused, never guessed at.
    #[test]
    fn a_row_of_an_unknown_shape_is_refused() {
        let head = r#""a":"worker","i":null,"c":5,"v":1"#;
        let unknown_field = format!(r#"{{{head},"e":[{{"t":"run.started","p":{{}},"x":1}}]}}"#);
        assert!(refused(&unknown_field, CONTEXT).contains("unknown field"));
        let no_payload = format!(r#"{{{head},"e":[{{"t":"run.started"}}]}}"#);
        assert!(refused(&no_payload, CONTEXT).contains("leaves out its payload"));
        let checkpointed = format!(r#"{{{head},"e":[{{"t":"run.checkpointed"}}]}}"#);
        let without_checkpoint = RowContext {
            checkpoint: None,
            ..CONTEXT
        };
        assert!(refused(&checkpointed, without_checkpoint).contains("leaves out its payload"));
        let by_subject = format!(r#"{{{head},"e":[{{"t":"run.started","p":{{}},"s":"k"}}]}}"#);
        let without_subject = RowContext {
            key_subject: None,
            ..CONTEXT
        };
        assert!(refused(&by_subject, without_subject).contains("the row has none"));
        let both =
            format!(r#"{{{head},"e":[{{"t":"run.started","p":{{}},"s":"k","k":"k:inv-1"}}]}}"#);
        assert!(refused(&both, CONTEXT).contains("both a key prefix and a whole key"));
        let unknown_type = format!(r#"{{{head},"e":[{{"t":"run.exploded","p":{{}}}}]}}"#);
        assert!(refused(&unknown_type, CONTEXT).contains("run.exploded"));
    }

    /// A row written before M19 reads as it did, numbered from the row's first id and sequence.
    #[test]
    fn a_row_written_before_m19_reads_as_it_did() {
        let legacy = r#"[["run.started",1,"worker","w-1","{\"n\":1}",null,5],
                         ["run.checkpointed",1,"maintenance",null,"{}","k:inv-1",6]]"#;
        let events = decode(legacy, NUMBERING, CONTEXT).expect("legacy row");
        assert_eq!(events.len(), 2);
        assert_eq!((events[1].id, events[1].sequence), (11, 5));
        assert_eq!(events[0].payload, json!({"n": 1}));
        assert_eq!(events[0].actor.actor_id.as_deref(), Some("w-1"));
        assert_eq!(events[1].actor.actor_id, None);
        assert_eq!(
            events[1].payload,
            json!({}),
            "a legacy payload is never derived"
        );
        assert_eq!(events[1].derivation_key.as_deref(), Some("k:inv-1"));
    }
}
