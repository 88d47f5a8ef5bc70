//! A PENDING checkpoint's calls by reference to the run's script (migration M21, issue 33).
//!
//! A PENDING checkpoint fixes the batch a step executes, so that a restarted worker runs the
//! same calls. A scripted run's planner proposes step k's calls as its script's
//! `steps[k − 1].calls`, verbatim, and the script is already stored whole, once, as the run's
//! `planner_input` in `run_inputs` (which never changes: its triggers refuse updates and
//! deletes). So each PENDING checkpoint repeated a call of the script, arguments and all: in
//! the 990-step run of 1 KB writes, 1.2 MB of a 7.5 MB file.
//!
//! Now a pending call that is exactly its script's call at (batch step − 1, its own index) is
//! stored as `{"script_call": [step index, call index]}` in place of the call (its
//! `pinned_version` stays beside it). Any other call, every call of a run whose input is not a
//! script (the gateway's call runs), and every call of a store written before M21 is stored
//! whole. A `call` object with a `script_call` field cannot be a stored call: a call always has
//! a `call_id`, a `tool` and `arguments`, and a reference has exactly one field.
//!
//! The rule is the store's own: the script is read as plain JSON, each `steps[i].calls[j]`
//! decoded as a [`ProposedCall`] (not through core's script parser, whose checks may change in a
//! later release), and a reference is written only after the call it names was compared with
//! the call in hand. A read resolves a reference from the same input (kept by
//! `planner_inputs`, or read from `run_inputs`) and refuses one that names no call.
//!
//! SQL readers: the `checkpoints` view resolves references with `json_extract` on the input,
//! so its `state` shows each referenced call as the script holds it (keys in canonical order,
//! `version` as the script writes it), a whole call as stored (the struct's field order).

use std::sync::Arc;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use airlock_core::ports::ProposedCall;
use airlock_core::run::checkpoint::{CheckpointState, PendingBatch};

use super::stored_json::from_json;

/// The field that marks a stored call as a reference.
pub(super) const REFERENCE: &str = "script_call";

/// The calls of a run's script, as the store reads them from its planner input.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct ScriptCalls {
    steps: Vec<Vec<ProposedCall>>,
}

/// A planner input, as far as this module reads it: a script's steps and their calls. An
/// input without `steps` (a call run's) has none.
#[derive(Deserialize)]
struct Input {
    #[serde(default)]
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Step {
    calls: Vec<ProposedCall>,
}

impl ScriptCalls {
    /// The calls of `input`; `None` when it is not JSON or holds steps whose calls do not read
    /// as calls (then no call of its run is stored by reference, and none can be read so).
    pub(super) fn of_input(input: &str) -> Option<ScriptCalls> {
        let input: Input = from_json(input).ok()?;
        Some(ScriptCalls {
            steps: input.steps.into_iter().map(|step| step.calls).collect(),
        })
    }

    /// Call `index` of script step `step` (both from 0).
    fn call(&self, step: usize, index: usize) -> Option<&ProposedCall> {
        self.steps.get(step)?.get(index)
    }

    /// Where `batch`'s calls are in the script: per call, `(step index, call index)` when the
    /// script's call there is exactly the call.
    fn references(&self, batch: &PendingBatch) -> Vec<Option<(usize, usize)>> {
        let step = usize::try_from(batch.step)
            .ok()
            .and_then(|step| step.checked_sub(1));
        batch
            .calls
            .iter()
            .enumerate()
            .map(|(index, pinned)| {
                let step = step?;
                (self.call(step, index) == Some(&pinned.call)).then_some((step, index))
            })
            .collect()
    }
}

/// The stored text of a checkpoint's `state`: each pending call that is its script's call
/// (`script`, the run's, if its input is a script) as a reference.
pub(super) fn encode_state(
    state: &CheckpointState,
    script: Option<&ScriptCalls>,
) -> Result<String, serde_json::Error> {
    let references = match (&state.pending, script) {
        (Some(batch), Some(script)) => script.references(batch),
        _ => Vec::new(),
    };
    if references.iter().all(Option::is_none) {
        return serde_json::to_string(state);
    }
    let mut value = serde_json::to_value(state)?;
    if let Some(calls) = value
        .pointer_mut("/pending/calls")
        .and_then(Value::as_array_mut)
    {
        for (pinned, at) in calls.iter_mut().zip(&references) {
            if let (Some(pinned), Some((step, index))) = (pinned.as_object_mut(), at) {
                pinned.insert("call".to_owned(), json!({ REFERENCE: [step, index] }));
            }
        }
    }
    serde_json::to_string(&value)
}

/// Why a stored checkpoint's calls cannot be read back.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unresolved {
    #[error("its stored JSON cannot be read: {0}")]
    NotJson(serde_json::Error),
    #[error("a `{REFERENCE}` must be a call's only field, as [step index, call index]")]
    Malformed,
    #[error(
        "it refers to call {index} of script step {step}, which the run's planner input does \
         not hold"
    )]
    NoSuchCall { step: usize, index: usize },
    #[error("the run's planner input could not be read: {0}")]
    Input(String),
}

/// The script calls of a run (its id as stored), asked for only when a stored call is a
/// reference: `Ok(None)` when the run's input is not a script.
pub(super) type Scripts<'a> = &'a dyn Fn(&str) -> Result<Option<Arc<ScriptCalls>>, String>;

/// `(step index, call index)` of a stored call that is a reference; `None` for a whole call.
fn reference_of(call: &Map<String, Value>) -> Result<Option<(usize, usize)>, Unresolved> {
    let Some(at) = call.get(REFERENCE) else {
        return Ok(None);
    };
    let index = |i: usize| {
        at.get(i)
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
    };
    match (call.len(), at.as_array().map(Vec::len), index(0), index(1)) {
        (1, Some(2), Some(step), Some(index)) => Ok(Some((step, index))),
        _ => Err(Unresolved::Malformed),
    }
}

/// Replaces a stored call (`call`, a JSON value) that is a reference by the call it names.
fn resolve(call: &mut Value, scripts: Scripts<'_>, run: &str) -> Result<(), Unresolved> {
    let Some(object) = call.as_object() else {
        return Ok(());
    };
    let Some((step, index)) = reference_of(object)? else {
        return Ok(());
    };
    let calls = scripts(run).map_err(Unresolved::Input)?;
    let found = calls
        .as_deref()
        .and_then(|calls| calls.call(step, index))
        .ok_or(Unresolved::NoSuchCall { step, index })?;
    *call = serde_json::to_value(found).map_err(Unresolved::NotJson)?;
    Ok(())
}

/// Resolves the references among the calls of a stored pending batch (`batch`, a JSON value).
fn resolve_batch(batch: &mut Value, scripts: Scripts<'_>, run: &str) -> Result<(), Unresolved> {
    if let Some(calls) = batch.get_mut("calls").and_then(Value::as_array_mut) {
        for pinned in calls {
            if let Some(call) = pinned.get_mut("call") {
                resolve(call, scripts, run)?;
            }
        }
    }
    Ok(())
}

/// Whether stored JSON text may hold a reference: a pre-filter. Text without the field name
/// quoted (as a key, or as a string) holds none and is decoded directly; text with it (a
/// reference, or an argument of that name or value) is decoded through a JSON value, where
/// only a pending call's own `call` object is taken for a reference.
fn may_refer(text: &str) -> bool {
    text.contains("\"script_call\"")
}

/// A `T` from stored text whose references `resolve` replaces (read through a JSON value only
/// when the text may hold one).
fn decode<T: DeserializeOwned>(
    text: &str,
    resolve: impl FnOnce(&mut Value) -> Result<(), Unresolved>,
) -> Result<T, Unresolved> {
    if !may_refer(text) {
        return from_json(text).map_err(Unresolved::NotJson);
    }
    let mut value: Value = from_json(text).map_err(Unresolved::NotJson)?;
    resolve(&mut value)?;
    serde_json::from_value(value).map_err(Unresolved::NotJson)
}

/// A checkpoint's state from its stored text.
pub(super) fn decode_state(
    text: &str,
    scripts: Scripts<'_>,
    run: &str,
) -> Result<CheckpointState, Unresolved> {
    decode(text, |state| match state.get_mut("pending") {
        Some(batch) => resolve_batch(batch, scripts, run),
        None => Ok(()),
    })
}

/// A pending batch from its stored text (a checkpoint state's `pending`).
pub(super) fn decode_batch(
    text: &str,
    scripts: Scripts<'_>,
    run: &str,
) -> Result<PendingBatch, Unresolved> {
    decode(text, |batch| resolve_batch(batch, scripts, run))
}

/// A pending call from its stored text (a pending batch's `calls[i].call`).
pub(super) fn decode_call(
    text: &str,
    scripts: Scripts<'_>,
    run: &str,
) -> Result<ProposedCall, Unresolved> {
    decode(text, |call| resolve(call, scripts, run))
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_core::run::checkpoint::PinnedCall;

    const INPUT: &str = r#"{"final_message":"done","steps":[
        {"calls":[{"argument_trust":{"path":"user"},"arguments":{"path":"a.txt"},
                   "call_id":"c1","tool":"workspace.read_text"}]},
        {"calls":[{"arguments":{"content":"x","path":"b.txt"},"call_id":"c2",
                   "tool":"workspace.write_text"},
                  {"arguments":{},"call_id":"c3","tool":"system.current_time"}]}]}"#;

    fn script() -> Arc<ScriptCalls> {
        Arc::new(ScriptCalls::of_input(INPUT).expect("a script"))
    }

    fn state_of(step: u32, calls: Vec<ProposedCall>) -> CheckpointState {
        let batch: PendingBatch = serde_json::from_value(json!({
            "step": step, "calls": [], "admission": {"mode": "sequential"}}))
        .expect("a batch");
        CheckpointState {
            step: step - 1,
            pending: Some(PendingBatch {
                calls: calls
                    .into_iter()
                    .map(|call| PinnedCall {
                        call,
                        pinned_version: Some("1.0.0".to_owned()),
                    })
                    .collect(),
                ..batch
            }),
            ..CheckpointState::default()
        }
    }

    fn script_call(step: usize, index: usize) -> ProposedCall {
        script().call(step, index).expect("in the script").clone()
    }

    #[test]
    fn a_scripts_calls_are_stored_by_reference_and_read_back_whole() {
        let mut changed = script_call(1, 1);
        changed.arguments = json!({"tz": "UTC"});
        let state = state_of(2, vec![script_call(1, 0), changed]);
        let calls = script();
        let text = encode_state(&state, Some(&calls)).expect("encodes");
        let value: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(
            value["pending"]["calls"][0]["call"],
            json!({"script_call": [1, 0]})
        );
        assert_eq!(value["pending"]["calls"][0]["pinned_version"], "1.0.0");
        assert_eq!(
            value["pending"]["calls"][1]["call"]["arguments"],
            json!({"tz": "UTC"}),
            "a call that differs from its script's is stored whole"
        );
        let read = decode_state(&text, &|_| Ok(Some(Arc::clone(&calls))), "r").expect("resolves");
        assert_eq!(read, state);
        let batch = value["pending"].to_string();
        let read_batch =
            decode_batch(&batch, &|_| Ok(Some(Arc::clone(&calls))), "r").expect("batch");
        assert_eq!(Some(read_batch), state.pending);
        let call = value["pending"]["calls"][0]["call"].to_string();
        let read_call = decode_call(&call, &|_| Ok(Some(Arc::clone(&calls))), "r").expect("call");
        assert_eq!(read_call, script_call(1, 0));
    }

    #[test]
    fn a_call_at_another_place_or_of_a_run_without_a_script_is_stored_whole() {
        // Step 1's batch holding step 2's first call: the script's call at (0, 0) is another.
        let state = state_of(1, vec![script_call(1, 0)]);
        let whole = serde_json::to_string(&state).expect("encodes");
        assert_eq!(
            encode_state(&state, Some(&script())).expect("encodes"),
            whole
        );
        assert_eq!(encode_state(&state, None).expect("encodes"), whole);
        let call_run = ScriptCalls::of_input(r#"{"connection":"c","upstreams":"u"}"#);
        assert_eq!(call_run, Some(ScriptCalls::default()));
        let state = state_of(1, vec![script_call(0, 0)]);
        assert_eq!(
            encode_state(&state, call_run.as_ref()).expect("encodes"),
            serde_json::to_string(&state).expect("encodes")
        );
        // Whole text is read without asking for the script.
        let read = decode_state(&whole, &|_| Err("not asked".to_owned()), "r").expect("reads");
        assert_eq!(read.pending.map(|b| b.step), Some(1));
    }

    #[test]
    fn a_reference_that_names_no_call_or_is_malformed_is_refused() {
        let calls = script();
        let scripts = |_: &str| Ok(Some(Arc::clone(&calls)));
        let state = |call: Value| {
            json!({"step": 0, "pending": {"step": 1, "admission": {"mode": "sequential"},
                "calls": [{"call": call, "pinned_version": null}]},
                "tainted": false, "denial_counts": {}})
            .to_string()
        };
        let refused = |call: Value| {
            decode_state(&state(call), &scripts, "r")
                .expect_err("refused")
                .to_string()
        };
        assert_eq!(
            refused(json!({"script_call": [5, 0]})),
            "it refers to call 0 of script step 5, which the run's planner input does not hold"
        );
        for malformed in [
            json!({"script_call": [0]}),
            json!({"script_call": [0, -1]}),
            json!({"script_call": "0,0"}),
            json!({"script_call": [0, 0], "call_id": "c1"}),
        ] {
            assert_eq!(
                refused(malformed.clone()),
                "a `script_call` must be a call's only field, as [step index, call index]",
                "{malformed}"
            );
        }
        let no_script = decode_state(&state(json!({"script_call": [0, 0]})), &|_| Ok(None), "r")
            .expect_err("a run without a script holds no reference");
        assert!(matches!(no_script, Unresolved::NoSuchCall { .. }));
        let unreadable = decode_call(r#"{"script_call":[0,0]}"#, &|_| Err("gone".to_owned()), "r")
            .expect_err("refused");
        assert_eq!(
            unreadable.to_string(),
            "the run's planner input could not be read: gone"
        );
    }
}
