//! What a write transaction knows about the events it may append next (issue 33: round trips).
//!
//! An append takes the session's next sequence (advancing `sessions.next_event_sequence`), an
//! id from the identity sequence, and returns the stored event when its derivation key is
//! already taken. Each of those is an answer from the server, so an append was one exchange.
//! After the transaction's first append the answers are known in advance:
//!
//! - **The session's next sequence.** The first append's `UPDATE sessions` locks the session
//!   row until COMMIT, so nobody else advances its counter: the next sequence is the last one
//!   plus one.
//! - **Ids.** The first append also takes [`RESERVED_IDS`] more ids from the sequence, after
//!   its own and after registering as an event writer (`tx`'s "Event ids"): the tail's horizon
//!   waits for this transaction like for any id it took. Ids reserved and not used are gaps,
//!   as a rolled-back append leaves.
//! - **Which keys are taken.** A derivation key's *subject* is the text after its first `:`
//!   (an invocation, an approval, a refused call). Every key of one subject is read at once,
//!   through `ix_events_key_subject` (V11): by the first append of that subject (a read sent
//!   in the same exchange, after its insert, so that it sees what the previous holder of the
//!   session's counter committed), with a lease holder's first read of its run for the run's
//!   open invocations, or by one read before the first append that can be predicted. A tool call's
//!   `proposed`, `authorized` and `started` events then need no answer after the first.
//!
//! A lease holder's transaction knows all three before its first append: its first read of
//! the run (`PgTx::leased_run_row`) locks the session's counter and takes the ids in the same
//! exchange, and brings the keys of the run's open invocations; an invocation it inserts has a
//! new id, whose subject has no key yet. Its appends are then all sent ahead.
//!
//! An append whose id, sequence and key are all known is sent ahead (`pipeline`), guarded so
//! that a counter that is not the predicted one changes no row, which fails the transaction.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use airlock_core::ids::SessionId;
use airlock_core::store::TxError;
use tokio_postgres::Row;

/// How many ids an append that waits for its answer reserves for the appends after it: a tool
/// call's watermark transaction appends four events, its result transaction two.
pub(crate) const RESERVED_IDS: i64 = 7;

/// The SQL of a key's subject, for `$n`: what `ix_events_key_subject` indexes.
pub(crate) fn subject_sql(key: &str) -> String {
    format!("substr({key}, strpos({key}, ':') + 1)")
}

/// Every taken key of the subject `$1`, through `ix_events_key_subject`.
pub(crate) fn subject_keys_sql() -> String {
    format!(
        "SELECT derivation_key FROM events WHERE derivation_key IS NOT NULL AND {} = $1",
        subject_sql("derivation_key")
    )
}

/// The keys of [`subject_keys_sql`]'s rows.
pub(crate) fn keys_of(rows: &[Row]) -> Result<Vec<String>, TxError> {
    rows.iter()
        .map(|row| row.try_get::<_, String>(0))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TxError::Backend(format!("events.derivation_key: {e}")))
}

/// A derivation key's subject: the text after its first `:`, or the whole key without one
/// (as [`subject_sql`] computes it).
pub(crate) fn subject(key: &str) -> &str {
    key.split_once(':').map_or(key, |(_, subject)| subject)
}

#[derive(Debug, Default)]
pub(crate) struct Appends {
    /// The next sequence of each session this transaction appended to (and holds locked).
    next_sequence: BTreeMap<SessionId, i64>,
    /// Ids taken from the sequence for this transaction, ascending.
    ids: VecDeque<i64>,
    /// Subjects whose taken keys are all known: the keys.
    subjects: BTreeMap<String, BTreeSet<String>>,
}

/// Where a predicted append goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) id: i64,
    pub(crate) sequence: i64,
}

/// Whether a key is free, taken, or not known here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyState {
    Free,
    Taken,
    Unknown,
}

impl Appends {
    /// The id and sequence an append to `session` would take, if both are known.
    pub(crate) fn slot(&self, session: SessionId) -> Option<Slot> {
        Some(Slot {
            id: *self.ids.front()?,
            sequence: *self.next_sequence.get(&session)?,
        })
    }

    /// Notes an append stored at `slot` (predicted or answered).
    pub(crate) fn took(&mut self, session: SessionId, slot: Slot, key: Option<&str>) {
        if self.ids.front() == Some(&slot.id) {
            self.ids.pop_front();
        }
        self.next_sequence.insert(session, slot.sequence + 1);
        if let Some(key) = key
            && let Some(keys) = self.subjects.get_mut(subject(key))
        {
            keys.insert(key.to_owned());
        }
    }

    /// The next sequence of `session`, read under the session row's lock (see
    /// `PgTx::leased_run_row`): the appends after it are predicted from it.
    pub(crate) fn know_sequence(&mut self, session: SessionId, next_sequence: i64) {
        self.next_sequence.insert(session, next_sequence);
    }

    /// Ids reserved by an append that waited for its answer. Any left from an earlier
    /// reservation are dropped: they are lower than the id that append just took, and ids must
    /// follow the order of the appends.
    pub(crate) fn reserve(&mut self, ids: impl IntoIterator<Item = i64>) {
        self.ids.clear();
        self.ids.extend(ids);
    }

    /// Records every taken key of `subject`.
    pub(crate) fn know_subject(&mut self, subject: &str, keys: impl IntoIterator<Item = String>) {
        self.subjects
            .insert(subject.to_owned(), keys.into_iter().collect());
    }

    /// Records `key` as taken, its subject's keys being known (read with it).
    pub(crate) fn know_taken(&mut self, key: &str) {
        self.subjects
            .entry(subject(key).to_owned())
            .or_default()
            .insert(key.to_owned());
    }

    pub(crate) fn key(&self, key: &str) -> KeyState {
        match self.subjects.get(subject(key)) {
            Some(keys) if keys.contains(key) => KeyState::Taken,
            Some(_) => KeyState::Free,
            None => KeyState::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_is_the_text_after_the_first_colon() {
        assert_eq!(subject("tool.call.proposed:abc"), "abc");
        assert_eq!(subject("tool.call.refused:run:2:c1"), "run:2:c1");
        assert_eq!(subject("plain"), "plain");
    }

    #[test]
    fn slots_follow_each_other_and_keys_are_known_per_subject() {
        let session = SessionId(uuid::Uuid::from_u128(1));
        let mut appends = Appends::default();
        assert_eq!(
            appends.slot(session),
            None,
            "nothing known before an append"
        );
        appends.reserve([11, 12]);
        assert_eq!(appends.slot(session), None, "the sequence is not known yet");
        appends.took(
            session,
            Slot {
                id: 10,
                sequence: 4,
            },
            None,
        );
        assert_eq!(
            appends.slot(session),
            Some(Slot {
                id: 11,
                sequence: 5
            })
        );
        appends.know_subject("inv", ["k:inv".to_owned()]);
        assert_eq!(appends.key("k:inv"), KeyState::Taken);
        assert_eq!(appends.key("j:inv"), KeyState::Free);
        assert_eq!(appends.key("j:other"), KeyState::Unknown);
        appends.took(
            session,
            Slot {
                id: 11,
                sequence: 5,
            },
            Some("j:inv"),
        );
        assert_eq!(appends.key("j:inv"), KeyState::Taken);
        assert_eq!(
            appends.slot(session),
            Some(Slot {
                id: 12,
                sequence: 6
            })
        );
        appends.took(
            session,
            Slot {
                id: 12,
                sequence: 6,
            },
            None,
        );
        assert_eq!(appends.slot(session), None, "the reserved ids are used up");
        appends.reserve([13, 14]);
        appends.took(
            session,
            Slot {
                id: 20,
                sequence: 7,
            },
            None,
        );
        appends.reserve([21]);
        assert_eq!(
            appends.slot(session),
            Some(Slot {
                id: 21,
                sequence: 8
            }),
            "ids left from before an answered append are dropped: ids follow the appends"
        );
    }
}
