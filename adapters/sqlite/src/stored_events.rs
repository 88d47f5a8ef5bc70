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
//! Since M22 an event also leaves out what its row says already:
//! - `"s": true`: the key's prefix is the event type (`tool.call.proposed:<invocation id>`).
//! - `"q": true`: the payload's `invocation_id` is the row's `key_subject`, and `p` leaves it
//!   out (every `tool.call.*` payload names its invocation, which is the row's subject).
//! - `"r": [content, is_error, trust]`: the payload's `result_item` is the canonical item of
//!   the payload's `call_id` and `name` with these three fields (`results::canonical_item`),
//!   and `p` leaves it out. A result item is JSON text whose `content` is JSON text, so it
//!   was escaped twice inside the payload: 430 of a BATCH row's 630 characters.
//!
//! Each is written only when rebuilding it gives back exactly the value in hand; anything else
//! is stored as before. A reader restores the keys it leaves out into the payload object (whose
//! keys are in order), so the store reads back the payload it was given; the `events` view
//! restores them with `json_set`, which puts them last in the payload's text.
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

use std::borrow::Cow;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value, json};

use airlock_core::events::{Actor, Event, EventType};
use airlock_core::ids::{RunId, SessionId};
use airlock_core::time::Timestamp;

use super::results::canonical_item;

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
    p: Option<Cow<'a, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<PrefixOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    k: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    q: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    r: Option<(String, bool, String)>,
}

/// A key's prefix: the event type (`true`), or its own text.
#[derive(Serialize)]
#[serde(untagged)]
enum PrefixOut<'a> {
    EventType(bool),
    Text(&'a str),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum PrefixIn {
    EventType(bool),
    Text(String),
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
    s: Option<PrefixIn>,
    #[serde(default)]
    k: Option<String>,
    #[serde(default)]
    q: Option<bool>,
    #[serde(default)]
    r: Option<(String, bool, String)>,
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
    #[error(
        "an event's `s`, `q` or `r` is not one this build writes, or its payload cannot take \
         back what it leaves out"
    )]
    LeftOut,
}

/// What an event's payload leaves out since M22 (see the module docs), and the payload without
/// it.
struct Shortened {
    payload: Map<String, Value>,
    own_invocation: bool,
    item: Option<(String, bool, String)>,
}

/// The M22 form of `payload` under a row whose keys have `key_subject`; `None` when it leaves
/// out nothing.
fn shortened(payload: &Value, key_subject: Option<&str>) -> Option<Shortened> {
    let object = payload.as_object()?;
    let own_invocation =
        key_subject.is_some() && object.get("invocation_id").and_then(Value::as_str) == key_subject;
    let item = object
        .get("result_item")
        .and_then(Value::as_str)
        .and_then(|text| item_parts(object, text));
    if !own_invocation && item.is_none() {
        return None;
    }
    let mut payload = object.clone();
    if own_invocation {
        payload.remove("invocation_id");
    }
    if item.is_some() {
        payload.remove("result_item");
    }
    Some(Shortened {
        payload,
        own_invocation,
        item,
    })
}

/// `(content, is_error, trust)` of result item `text` when the item is exactly the canonical
/// item of `payload`'s `call_id` and `name` with them.
fn item_parts(payload: &Map<String, Value>, text: &str) -> Option<(String, bool, String)> {
    let call_id = payload.get("call_id")?.as_str()?;
    let name = payload.get("name")?.as_str()?;
    let item: Map<String, Value> = serde_json::from_str(text).ok()?;
    let content = item.get("content")?.as_str()?;
    let is_error = item.get("is_error")?.as_bool()?;
    let trust = item.get("trust")?.as_str()?;
    (canonical_item(call_id, content, is_error, name, trust) == text)
        .then(|| (content.to_owned(), is_error, trust.to_owned()))
}

/// The payload with what an M22 event left out put back.
fn restored(
    payload: Value,
    own_invocation: Option<bool>,
    item: Option<(String, bool, String)>,
    key_subject: Option<&str>,
) -> Result<Value, Unreadable> {
    if own_invocation.is_none() && item.is_none() {
        return Ok(payload);
    }
    let Value::Object(mut object) = payload else {
        return Err(Unreadable::LeftOut);
    };
    match own_invocation {
        None => {}
        Some(true) => {
            let subject = key_subject.ok_or(Unreadable::NoSubject)?;
            if object
                .insert("invocation_id".to_owned(), Value::from(subject))
                .is_some()
            {
                return Err(Unreadable::LeftOut);
            }
        }
        Some(false) => return Err(Unreadable::LeftOut),
    }
    if let Some((content, is_error, trust)) = item {
        let text = |key: &str| object.get(key).and_then(Value::as_str);
        let (Some(call_id), Some(name)) = (text("call_id"), text("name")) else {
            return Err(Unreadable::LeftOut);
        };
        let item = canonical_item(call_id, &content, is_error, name, &trust);
        if object
            .insert("result_item".to_owned(), Value::String(item))
            .is_some()
        {
            return Err(Unreadable::LeftOut);
        }
    }
    Ok(Value::Object(object))
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
            let (p, q, r) = if payload_left_out {
                (None, None, None)
            } else {
                match shortened(&event.payload, context.key_subject) {
                    Some(short) => (
                        Some(Cow::Owned(Value::Object(short.payload))),
                        short.own_invocation.then_some(true),
                        short.item,
                    ),
                    None => (Some(Cow::Borrowed(&event.payload)), None, None),
                }
            };
            EventOut {
                t: event.event_type.as_str(),
                v: (event.payload_schema_version != head_version)
                    .then_some(event.payload_schema_version),
                a: (actor_type != head_actor_type).then_some(actor_type),
                i: (actor_id != head_actor_id).then_some(actor_id),
                c: (at != head_at).then_some(at),
                p,
                s: by_subject.map(|prefix| match prefix == event.event_type.as_str() {
                    true => PrefixOut::EventType(true),
                    false => PrefixOut::Text(prefix),
                }),
                k: match by_subject {
                    Some(_) => None,
                    None => event.derivation_key.as_deref(),
                },
                q,
                r,
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
    let head: HeadIn = crate::stored_json::from_json(text)?;
    let mut events = Vec::with_capacity(head.e.len());
    for (offset, stored) in head.e.into_iter().enumerate() {
        let event_type: EventType = stored
            .t
            .parse()
            .map_err(|_| Unreadable::Vocabulary(stored.t.clone()))?;
        if stored.p.is_none() && (stored.q.is_some() || stored.r.is_some()) {
            return Err(Unreadable::LeftOut);
        }
        let payload = match stored.p {
            Some(payload) => payload,
            None => match context.checkpoint {
                Some(checkpoint) if event_type == EventType::RunCheckpointed => {
                    checkpointed_payload(checkpoint)
                }
                _ => return Err(Unreadable::NoPayload),
            },
        };
        let payload = restored(payload, stored.q, stored.r, context.key_subject)?;
        let derivation_key = match (stored.s, stored.k) {
            (Some(prefix), None) => {
                let subject = context.key_subject.ok_or(Unreadable::NoSubject)?;
                let prefix = match &prefix {
                    PrefixIn::EventType(true) => &stored.t,
                    PrefixIn::Text(prefix) => prefix,
                    PrefixIn::EventType(false) => return Err(Unreadable::LeftOut),
                };
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
    let stored: Vec<LegacyEvent> = crate::stored_json::from_json(text)?;
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
                payload: crate::stored_json::from_json(&payload)?,
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

    /// What an M22 event leaves out must come back exactly, or the row is refused.
    #[test]
    fn an_event_that_cannot_take_back_what_it_left_out_is_refused() {
        let head = r#""a":"worker","i":null,"c":5,"v":1"#;
        let left_out = "is not one this build writes";
        let event =
            |fields: &str| format!(r#"{{{head},"e":[{{"t":"tool.call.completed",{fields}}}]}}"#);
        for fields in [
            r#""p":{},"s":false"#,
            r#""p":{},"q":false"#,
            r#""p":{"invocation_id":"x"},"q":true"#,
            r#""p":[],"q":true"#,
            r#""q":true"#,
            r#""p":{"name":"n"},"r":["{}",false,"user"]"#,
            r#""p":{"call_id":"c","name":"n","result_item":"x"},"r":["{}",false,"user"]"#,
        ] {
            assert!(
                refused(&event(fields), CONTEXT).contains(left_out),
                "{fields}"
            );
        }
        let without_subject = RowContext {
            key_subject: None,
            ..CONTEXT
        };
        assert!(refused(&event(r#""p":{},"q":true"#), without_subject).contains("has none"));
        let events = decode(
            &event(r#""p":{"call_id":"c","name":"n"},"q":true,"r":["{}",true,"user"],"s":true"#),
            NUMBERING,
            CONTEXT,
        )
        .expect("an M22 event");
        assert_eq!(
            events[0].payload,
            json!({"call_id": "c", "invocation_id": "inv-1", "name": "n",
                   "result_item": r#"{"call_id":"c","content":"{}","is_error":true,"name":"n","trust":"user"}"#})
        );
        assert_eq!(
            events[0].derivation_key.as_deref(),
            Some("tool.call.completed:inv-1")
        );
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
