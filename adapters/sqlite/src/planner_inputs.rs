//! The planner inputs of recently read runs, shared by the writer and the readers (issue 33).
//!
//! A run's `planner_input` is its whole script: 1 MB for a 990-step run of 1 KB writes. Core
//! reads the run row several times per tool call (`StoreTx::run`, and `update_run` reads the
//! current row for its guards), and reading the input meant following its overflow pages,
//! copying it and checking its UTF-8 every time: the largest single cost in a profile of a
//! long scripted run. Yet the input never changes: no statement of this store updates the
//! column (`update_run` writes only the mutable columns), and run ids are never reused.
//!
//! So a run row is read with the input's length in bytes (`octet_length`, which SQLite answers
//! from the record header without loading the text) instead of the input, and the input comes
//! from here when an entry of that run and length is kept; otherwise it is read once more and
//! kept. The length in the key means a row that a writer outside airlock rewrote to another
//! length is read afresh; one rewritten to the same length by hand would not be noticed, as
//! no other immutable column's hand edit is.
//!
//! At most [`MAX_ENTRIES`] inputs and [`MAX_BYTES`] in all are kept, oldest dropped first: the
//! runs a process executes at once are far fewer.
//!
//! Beside an input its script's calls are kept once read (`stored_state`, M21): the PENDING
//! checkpoints of a scripted run refer to them, so each PENDING write compares its calls with
//! them and a read of a reference resolves it. They are parsed at most once per entry. The
//! bounds count the inputs' text only; the calls kept beside an input take about as much
//! again. They are found by run alone (a read of a reference does not know the input's
//! length), so an input rewritten by hand after it was kept is not noticed here.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::stored_state::ScriptCalls;

/// Inputs kept at most.
const MAX_ENTRIES: usize = 64;
/// Bytes of inputs kept at most.
const MAX_BYTES: usize = 64 << 20;

/// One kept input: the run's id as stored, the text, its script's calls once read.
struct Entry {
    run: String,
    input: Arc<str>,
    calls: OnceLock<Option<Arc<ScriptCalls>>>,
}

#[derive(Default)]
pub(super) struct PlannerInputs {
    recent: Mutex<VecDeque<Arc<Entry>>>,
}

impl PlannerInputs {
    /// The kept input of `run` if it is `bytes` long.
    pub(super) fn get(&self, run: &str, bytes: i64) -> Option<Arc<str>> {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent
            .iter()
            .find(|entry| entry.run == run && i64::try_from(entry.input.len()) == Ok(bytes))
            .map(|entry| Arc::clone(&entry.input))
    }

    /// The script calls of `run`'s kept input (`Some(None)`: the input is not a script), read
    /// from the input the first time they are asked for; `None` when no input of `run` is kept.
    pub(super) fn script_calls(&self, run: &str) -> Option<Option<Arc<ScriptCalls>>> {
        let entry = {
            let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(recent.iter().find(|entry| entry.run == run)?)
        };
        Some(
            entry
                .calls
                .get_or_init(|| ScriptCalls::of_input(&entry.input).map(Arc::new))
                .clone(),
        )
    }

    /// Keeps `input` as `run`'s, in place of any earlier entry of it, dropping the oldest
    /// entries beyond the bounds (an input larger than [`MAX_BYTES`] is not kept).
    pub(super) fn keep(&self, run: &str, input: Arc<str>) {
        if input.len() > MAX_BYTES {
            return;
        }
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.retain(|entry| entry.run != run);
        recent.push_back(Arc::new(Entry {
            run: run.to_owned(),
            input,
            calls: OnceLock::new(),
        }));
        let mut bytes: usize = recent.iter().map(|entry| entry.input.len()).sum();
        while recent.len() > MAX_ENTRIES || bytes > MAX_BYTES {
            match recent.pop_front() {
                Some(dropped) => bytes -= dropped.input.len(),
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_is_found_by_run_and_length_and_the_oldest_go_first() {
        let inputs = PlannerInputs::default();
        inputs.keep("r1", Arc::from("{\"steps\":[]}"));
        assert_eq!(inputs.get("r1", 12).as_deref(), Some("{\"steps\":[]}"));
        assert_eq!(
            inputs.get("r1", 11),
            None,
            "another length is another input"
        );
        assert_eq!(inputs.get("r2", 12), None);
        for n in 0..MAX_ENTRIES {
            inputs.keep(&format!("x{n}"), Arc::from("{}"));
        }
        assert_eq!(inputs.get("r1", 12), None, "the oldest entry went first");
        assert!(inputs.get(&format!("x{}", MAX_ENTRIES - 1), 2).is_some());
    }

    #[test]
    fn a_kept_inputs_script_calls_are_read_from_it() {
        let inputs = PlannerInputs::default();
        assert_eq!(inputs.script_calls("r1"), None, "nothing kept");
        inputs.keep("r1", Arc::from("{\"connection\":\"c\"}"));
        assert_eq!(
            inputs.script_calls("r1"),
            Some(Some(Arc::new(ScriptCalls::default()))),
            "an input without steps has no calls"
        );
        inputs.keep("r2", Arc::from("not JSON"));
        assert_eq!(inputs.script_calls("r2"), Some(None));
    }
}
