//! Run scripts and the scripted planner (SPEC §15).
//!
//! [`RunScript::parse`] checks every §15 rule that does not depend on the caller (tenant and
//! principal equality, the scope subset and the session's state are checked at submission).
//! It walks a JSON tree rather than deriving `Deserialize` so that each message names the exact
//! place, such as `steps[1].calls[0].call_id`: indices are zero-based JSON positions, so step
//! `k` of the run is `steps[k-1]`. Choices the spec leaves open: `steps` is required (it may be
//! empty) and so is each call's `arguments`; only `session_id` and a call's `version` accept
//! `null`; a key repeated in one object anywhere in the document is rejected; `session_id` must
//! be a lowercase hyphenated UUID (§2.2).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value, json};

use crate::action::{JsonMap, MAX_ARGUMENT_DEPTH, max_nesting};
use crate::canonical::is_valid_call_id;
use crate::ids::SessionId;
use crate::ports::{
    BoxFut, Planner, PlannerError, PlannerFactory, PlannerInput, PlannerTurn, ProposedCall,
};
use crate::principal::{IdentityError, check_identity};
use crate::run::{Limits, Run};
use crate::scope::{Scope, ScopeSet};
use crate::vocab::TrustLevel;

/// The only `schema_version` v1 reads.
pub const SCHEMA_VERSION: u32 = 1;
/// The most steps a script may hold.
pub const MAX_SCRIPT_STEPS: usize = 999;
/// The longest final message, in characters.
pub const MAX_FINAL_MESSAGE_CHARS: usize = 4096;
/// The final message when a script gives none.
pub const DEFAULT_FINAL_MESSAGE: &str = "done";
/// The largest run script `submit_run` accepts unless configured otherwise, in bytes (2 MiB): room
/// for a `workspace.write_text` of the largest content (1 MiB of plain text, SPEC §12.5), and far
/// beyond what a plan of calls needs. Also the bound on the `planner_input` stored from it.
pub const DEFAULT_MAX_SCRIPT_BYTES: usize = 2 * 1024 * 1024;

/// How much of a script-supplied value a message quotes, so that a hostile script cannot make
/// error messages (which are stored and shown) arbitrarily large.
const MAX_QUOTED_CHARS: usize = 64;

const TOP_LEVEL_FIELDS: [&str; 9] = [
    "schema_version",
    "tenant_id",
    "principal_id",
    "principal_scopes",
    "session_id",
    "origin_trust",
    "limits",
    "steps",
    "final_message",
];
const STEP_FIELDS: [&str; 1] = ["calls"];
const CALL_FIELDS: [&str; 5] = ["call_id", "tool", "version", "arguments", "argument_trust"];

/// Why a run script was rejected; each message names the field, step or call at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    #[error("invalid JSON: {0}")]
    Json(String),
    #[error("the script nests more than {0} levels deep (a call's arguments may nest 128)")]
    TooDeep(usize),
    #[error("{path}: expected {expected}")]
    Type {
        path: String,
        expected: &'static str,
    },
    #[error("unknown field '{0}'")]
    UnknownField(String),
    #[error("missing required field '{0}'")]
    MissingField(String),
    #[error("schema_version must be 1")]
    SchemaVersion,
    #[error("{0} must be 1..=128 characters")]
    IdentityLength(&'static str),
    #[error("{0} must not contain control characters")]
    IdentityControl(&'static str),
    #[error("{path}: invalid scope '{value}'")]
    Scope { path: String, value: String },
    #[error("session_id: expected a lowercase hyphenated UUID, got '{0}'")]
    SessionId(String),
    #[error("{path}: unknown trust level '{value}'")]
    UnknownTrust { path: String, value: String },
    #[error("{path}: a script may not declare trust level '{value}'")]
    UndeclarableTrust { path: String, value: TrustLevel },
    #[error("{0}")]
    Limits(String),
    #[error("steps: at most 999 steps are allowed, got {0}")]
    TooManySteps(usize),
    #[error("{0}: a step needs at least one call")]
    EmptyStep(String),
    #[error("{path}: invalid call_id '{value}' (expected 1 to 128 of A-Z a-z 0-9 . _ : -)")]
    CallId { path: String, value: String },
    #[error("{path}: call_id '{value}' is already used in step {step}")]
    DuplicateCallId {
        path: String,
        value: String,
        step: usize,
    },
    #[error("final_message must be at most 4096 characters")]
    FinalMessage,
    #[error(
        "{steps} steps need limits.max_steps of at least {needed} (the final message is a step \
         too), got {max_steps}"
    )]
    StepsExceedMaxSteps {
        steps: usize,
        needed: usize,
        max_steps: u32,
    },
}

/// A parsed, validated run script: what `runs.planner_input` holds (via [`RunScript::to_json`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunScript {
    pub schema_version: u32,
    pub tenant_id: String,
    pub principal_id: String,
    pub principal_scopes: ScopeSet,
    pub session_id: Option<SessionId>,
    pub origin_trust: TrustLevel,
    pub limits: Limits,
    pub steps: Vec<ScriptStep>,
    pub final_message: String,
}

/// One planner turn of a script: the calls step `k` proposes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptStep {
    pub calls: Vec<ProposedCall>,
}

/// Quotes at most [`MAX_QUOTED_CHARS`] characters of a script-supplied string.
fn shown(s: &str) -> String {
    if s.chars().count() <= MAX_QUOTED_CHARS {
        s.to_owned()
    } else {
        let head: String = s.chars().take(MAX_QUOTED_CHARS).collect();
        format!("{head}…")
    }
}

/// The deepest a script may nest: the levels above a call's `arguments` plus the arguments'
/// own limit.
const MAX_SCRIPT_DEPTH: usize = 5 + MAX_ARGUMENT_DEPTH;

/// A JSON value whose objects never repeat a key: serde_json keeps the last of repeated keys
/// silently, and a script that means two things must not be read as one of them.
struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number must be finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = JsonMap::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format!(
                    "duplicate key '{}'",
                    shown(&key)
                )));
            }
            let StrictValue(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// `prefix.key`, or just `key` at the top level.
fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

fn as_object<'a>(value: &'a Value, path: &str) -> Result<&'a JsonMap, ScriptError> {
    value.as_object().ok_or_else(|| ScriptError::Type {
        path: path.to_owned(),
        expected: "an object",
    })
}

fn as_array<'a>(value: &'a Value, path: &str) -> Result<&'a Vec<Value>, ScriptError> {
    value.as_array().ok_or_else(|| ScriptError::Type {
        path: path.to_owned(),
        expected: "an array",
    })
}

fn as_string<'a>(value: &'a Value, path: &str) -> Result<&'a str, ScriptError> {
    value.as_str().ok_or_else(|| ScriptError::Type {
        path: path.to_owned(),
        expected: "a string",
    })
}

fn only_fields(object: &JsonMap, allowed: &[&str], prefix: &str) -> Result<(), ScriptError> {
    match object.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(key) => Err(ScriptError::UnknownField(join(prefix, &shown(key)))),
        None => Ok(()),
    }
}

fn required<'a>(object: &'a JsonMap, key: &str, prefix: &str) -> Result<&'a Value, ScriptError> {
    object
        .get(key)
        .ok_or_else(|| ScriptError::MissingField(join(prefix, key)))
}

fn identity(object: &JsonMap, field: &'static str) -> Result<String, ScriptError> {
    let value = as_string(required(object, field, "")?, field)?;
    match check_identity(value) {
        Ok(()) => Ok(value.to_owned()),
        Err(IdentityError::Length) => Err(ScriptError::IdentityLength(field)),
        Err(IdentityError::Control) => Err(ScriptError::IdentityControl(field)),
    }
}

/// A trust label a script may declare: any but `platform` and `trusted_configuration` (§3).
fn declarable_trust(value: &Value, path: &str) -> Result<TrustLevel, ScriptError> {
    let text = as_string(value, path)?;
    let trust: TrustLevel = text.parse().map_err(|_| ScriptError::UnknownTrust {
        path: path.to_owned(),
        value: shown(text),
    })?;
    if !trust.is_declarable() {
        return Err(ScriptError::UndeclarableTrust {
            path: path.to_owned(),
            value: trust,
        });
    }
    Ok(trust)
}

fn parse_call(value: &Value, path: &str) -> Result<ProposedCall, ScriptError> {
    let object = as_object(value, path)?;
    only_fields(object, &CALL_FIELDS, path)?;
    let call_id_path = join(path, "call_id");
    let call_id = as_string(required(object, "call_id", path)?, &call_id_path)?;
    if !is_valid_call_id(call_id) {
        return Err(ScriptError::CallId {
            path: call_id_path,
            value: shown(call_id),
        });
    }
    let tool = as_string(required(object, "tool", path)?, &join(path, "tool"))?;
    let version = match object.get("version") {
        None | Some(Value::Null) => None,
        Some(version) => Some(as_string(version, &join(path, "version"))?.to_owned()),
    };
    let arguments = required(object, "arguments", path)?.clone();
    let mut argument_trust = BTreeMap::new();
    if let Some(trust) = object.get("argument_trust") {
        let trust_path = join(path, "argument_trust");
        for (name, level) in as_object(trust, &trust_path)? {
            let level = declarable_trust(level, &join(&trust_path, &shown(name)))?;
            argument_trust.insert(name.clone(), level);
        }
    }
    Ok(ProposedCall {
        call_id: call_id.to_owned(),
        tool: tool.to_owned(),
        version,
        arguments,
        argument_trust,
    })
}

fn parse_steps(value: &Value) -> Result<Vec<ScriptStep>, ScriptError> {
    let steps = as_array(value, "steps")?;
    if steps.len() > MAX_SCRIPT_STEPS {
        return Err(ScriptError::TooManySteps(steps.len()));
    }
    let mut parsed = Vec::with_capacity(steps.len());
    for (index, step) in steps.iter().enumerate() {
        let path = format!("steps[{index}]");
        let object = as_object(step, &path)?;
        only_fields(object, &STEP_FIELDS, &path)?;
        let calls_path = join(&path, "calls");
        let calls = as_array(required(object, "calls", &path)?, &calls_path)?;
        if calls.is_empty() {
            return Err(ScriptError::EmptyStep(path));
        }
        let mut seen = BTreeSet::new();
        let mut step_calls = Vec::with_capacity(calls.len());
        for (call_index, call) in calls.iter().enumerate() {
            let call_path = format!("{calls_path}[{call_index}]");
            let call = parse_call(call, &call_path)?;
            if !seen.insert(call.call_id.clone()) {
                return Err(ScriptError::DuplicateCallId {
                    path: join(&call_path, "call_id"),
                    value: call.call_id,
                    step: index + 1,
                });
            }
            step_calls.push(call);
        }
        parsed.push(ScriptStep { calls: step_calls });
    }
    Ok(parsed)
}

impl RunScript {
    /// Parses and validates a script; fields are checked in §15 table order, unknown fields
    /// first at each level, and the first violation is reported.
    pub fn parse(text: &str) -> Result<RunScript, ScriptError> {
        // A call's `arguments` may nest 128 deep (SPEC §4.1) and sit 5 levels down (script,
        // steps, step, calls, call), past serde_json's default limit of 128; the pipeline, not
        // the parser, judges them (§15). The bound here keeps the stack safe.
        if max_nesting(text.as_bytes(), MAX_SCRIPT_DEPTH) > MAX_SCRIPT_DEPTH {
            return Err(ScriptError::TooDeep(MAX_SCRIPT_DEPTH));
        }
        let mut deserializer = serde_json::Deserializer::from_str(text);
        deserializer.disable_recursion_limit();
        let StrictValue(document) = StrictValue::deserialize(&mut deserializer)
            .map_err(|e| ScriptError::Json(e.to_string()))?;
        deserializer
            .end()
            .map_err(|e| ScriptError::Json(e.to_string()))?;
        let object = document.as_object().ok_or_else(|| ScriptError::Type {
            path: "the script".to_owned(),
            expected: "an object",
        })?;
        only_fields(object, &TOP_LEVEL_FIELDS, "")?;

        let schema_version = required(object, "schema_version", "")?;
        if schema_version.as_u64() != Some(u64::from(SCHEMA_VERSION)) {
            return Err(ScriptError::SchemaVersion);
        }
        let tenant_id = identity(object, "tenant_id")?;
        let principal_id = identity(object, "principal_id")?;

        let mut principal_scopes = ScopeSet::new();
        for (index, scope) in as_array(
            required(object, "principal_scopes", "")?,
            "principal_scopes",
        )?
        .iter()
        .enumerate()
        {
            let path = format!("principal_scopes[{index}]");
            let text = as_string(scope, &path)?;
            let scope = Scope::parse(text).map_err(|_| ScriptError::Scope {
                path,
                value: shown(text),
            })?;
            principal_scopes.insert(scope);
        }

        let session_id = match object.get("session_id") {
            None | Some(Value::Null) => None,
            Some(value) => {
                let text = as_string(value, "session_id")?;
                let id: SessionId = text
                    .parse()
                    .map_err(|_| ScriptError::SessionId(shown(text)))?;
                Some(id)
            }
        };

        let origin_trust = match object.get("origin_trust") {
            None => TrustLevel::ExternalUntrusted,
            Some(value) => declarable_trust(value, "origin_trust")?,
        };

        let limits = match object.get("limits") {
            None => Limits::default(),
            Some(value) => {
                let limits: Limits = serde_json::from_value(value.clone())
                    .map_err(|e| ScriptError::Limits(format!("limits: {e}")))?;
                limits.validate().map_err(ScriptError::Limits)?;
                limits
            }
        };

        let steps = parse_steps(required(object, "steps", "")?)?;

        let final_message = match object.get("final_message") {
            None => DEFAULT_FINAL_MESSAGE.to_owned(),
            Some(value) => {
                let text = as_string(value, "final_message")?;
                if text.chars().count() > MAX_FINAL_MESSAGE_CHARS {
                    return Err(ScriptError::FinalMessage);
                }
                text.to_owned()
            }
        };

        // A step is one planner turn, the final one included (§8.4): N steps need N + 1.
        let max_steps = limits.max_steps;
        if steps.len() >= max_steps as usize {
            return Err(ScriptError::StepsExceedMaxSteps {
                steps: steps.len(),
                needed: steps.len() + 1,
                max_steps,
            });
        }

        Ok(RunScript {
            schema_version: SCHEMA_VERSION,
            tenant_id,
            principal_id,
            principal_scopes,
            session_id,
            origin_trust,
            limits,
            steps,
            final_message,
        })
    }

    /// The stored form: compact JSON with every field present, which [`RunScript::parse`] reads
    /// back to an equal script. A submitted script is stored in this form, so a stored script's
    /// scopes are already sorted and deduplicated and its defaults are explicit.
    pub fn to_json(&self) -> String {
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|step| {
                let calls: Vec<Value> = step
                    .calls
                    .iter()
                    .map(|call| {
                        let trust: JsonMap = call
                            .argument_trust
                            .iter()
                            .map(|(name, level)| (name.clone(), Value::from(level.as_str())))
                            .collect();
                        json!({
                            "call_id": call.call_id,
                            "tool": call.tool,
                            "version": call.version,
                            "arguments": call.arguments,
                            "argument_trust": trust,
                        })
                    })
                    .collect();
                json!({ "calls": calls })
            })
            .collect();
        let scopes: Vec<&str> = self.principal_scopes.iter().map(Scope::as_str).collect();
        json!({
            "schema_version": self.schema_version,
            "tenant_id": self.tenant_id,
            "principal_id": self.principal_id,
            "principal_scopes": scopes,
            "session_id": self.session_id.map(|id| id.to_string()),
            "origin_trust": self.origin_trust.as_str(),
            "limits": {
                "max_steps": self.limits.max_steps,
                "max_tool_calls": self.limits.max_tool_calls,
                "deadline_seconds": self.limits.deadline_seconds,
            },
            "steps": steps,
            "final_message": self.final_message,
        })
        .to_string()
    }
}

/// The shipped planner: deterministic and blind to results, so a resumed run on any worker asks
/// for step `k` and gets the same answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedPlanner {
    script: RunScript,
}

impl ScriptedPlanner {
    pub fn new(script: RunScript) -> ScriptedPlanner {
        ScriptedPlanner { script }
    }

    pub fn script(&self) -> &RunScript {
        &self.script
    }

    /// The turn for step `k` (1-based): `steps[k-1]` as calls, then the final message once `k`
    /// is past the last step. Step 0 does not exist (§8.3 asks for `checkpoint.step + 1`).
    pub fn turn(&self, step: u32) -> Result<PlannerTurn, PlannerError> {
        let Some(index) = (step as usize).checked_sub(1) else {
            return Err(PlannerError("step numbers start at 1".to_owned()));
        };
        Ok(match self.script.steps.get(index) {
            Some(script_step) => PlannerTurn::Calls(script_step.calls.clone()),
            None => PlannerTurn::Final {
                message: self.script.final_message.clone(),
            },
        })
    }
}

impl Planner for ScriptedPlanner {
    /// The script ignores results (SPEC §15), so no history is ever loaded for it.
    fn wants_history(&self) -> bool {
        false
    }

    fn next_turn<'a>(
        &'a self,
        input: PlannerInput<'a>,
    ) -> BoxFut<'a, Result<PlannerTurn, PlannerError>> {
        Box::pin(std::future::ready(self.turn(input.step)))
    }
}

/// Builds a [`ScriptedPlanner`] from `runs.planner_input`, so any worker can resume any run.
#[derive(Debug, Default, Clone, Copy)]
pub struct ScriptedPlannerFactory;

impl PlannerFactory for ScriptedPlannerFactory {
    fn for_run(&self, run: &Run) -> Result<Arc<dyn Planner>, PlannerError> {
        let script = RunScript::parse(&run.planner_input)
            .map_err(|e| PlannerError(format!("invalid run script: {e}")))?;
        Ok(Arc::new(ScriptedPlanner::new(script)))
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::ids::RunId;
    use crate::run::RunState;
    use crate::time::Timestamp;
    use uuid::Uuid;

    const EXAMPLE: &str = r#"{"schema_version": 1, "tenant_id": "acme", "principal_id": "alice",
 "principal_scopes": ["workspace.read", "workspace.write", "demo.write"],
 "session_id": null, "origin_trust": "user",
 "limits": {"max_steps": 4, "max_tool_calls": 8, "deadline_seconds": 3600},
 "steps": [
  {"calls": [{"call_id": "c1", "tool": "workspace.write_text",
              "arguments": {"path": "notes/a.txt", "content": "hello"},
              "argument_trust": {"path": "user", "content": "user"}}]},
  {"calls": [{"call_id": "c2", "tool": "workspace.read_text", "arguments": {"path": "notes/a.txt"}},
             {"call_id": "c3", "tool": "system.current_time", "arguments": {}}]},
  {"calls": [{"call_id": "c4", "tool": "demo.external_write",
              "arguments": {"destination": "demo", "content": "hello"}}]}],
 "final_message": "done"}"#;

    fn example() -> Value {
        serde_json::from_str(EXAMPLE).unwrap()
    }

    /// The example with one edit applied, as script text.
    fn edited(edit: impl FnOnce(&mut Value)) -> String {
        let mut value = example();
        edit(&mut value);
        value.to_string()
    }

    fn message(text: &str) -> String {
        RunScript::parse(text).unwrap_err().to_string()
    }

    /// `{"a": {"a": … {}}}` nested `depth` deep (depth 1 is `{}`).
    fn nested(depth: usize) -> Value {
        (1..depth).fold(json!({}), |inner, _| json!({ "a": inner }))
    }

    #[test]
    fn arguments_may_nest_as_deep_as_an_action_allows() {
        // §15: arguments are any JSON and the pipeline judges them; §4.1 allows 128 levels.
        let deep = edited(|v| v["steps"][0]["calls"][0]["arguments"] = nested(MAX_ARGUMENT_DEPTH));
        let script = RunScript::parse(&deep).expect("128-deep arguments are a valid script");
        assert_eq!(
            crate::action::value_depth(&script.steps[0].calls[0].arguments),
            MAX_ARGUMENT_DEPTH
        );
        // One level more is refused before parsing, with a message (a document thousands
        // deep must not reach the parser's recursion at all).
        let deeper =
            edited(|v| v["steps"][0]["calls"][0]["arguments"] = nested(MAX_ARGUMENT_DEPTH + 1));
        assert_eq!(
            message(&deeper),
            "the script nests more than 133 levels deep (a call's arguments may nest 128)"
        );
    }

    fn block_on<F: Future>(future: F) -> F::Output {
        let mut future = pin!(future);
        match future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(output) => output,
            Poll::Pending => panic!("the scripted planner is always ready"),
        }
    }

    fn minimal() -> Value {
        json!({"schema_version": 1, "tenant_id": "t", "principal_id": "p", "principal_scopes": [],
               "steps": []})
    }

    #[test]
    fn the_section_15_example_parses() {
        let script = RunScript::parse(EXAMPLE).unwrap();
        assert_eq!(script.schema_version, 1);
        assert_eq!(script.tenant_id, "acme");
        assert_eq!(script.principal_id, "alice");
        let scopes: Vec<&str> = script.principal_scopes.iter().map(Scope::as_str).collect();
        assert_eq!(scopes, ["demo.write", "workspace.read", "workspace.write"]);
        assert_eq!(script.session_id, None);
        assert_eq!(script.origin_trust, TrustLevel::User);
        assert_eq!(
            script.limits,
            Limits {
                max_steps: 4,
                max_tool_calls: 8,
                deadline_seconds: Some(3600)
            }
        );
        assert_eq!(script.steps.len(), 3);
        let call_ids: Vec<Vec<&str>> = script
            .steps
            .iter()
            .map(|step| {
                step.calls
                    .iter()
                    .map(|call| call.call_id.as_str())
                    .collect()
            })
            .collect();
        assert_eq!(call_ids, [vec!["c1"], vec!["c2", "c3"], vec!["c4"]]);
        let c1 = &script.steps[0].calls[0];
        assert_eq!(c1.tool, "workspace.write_text");
        assert_eq!(c1.version, None);
        assert_eq!(
            c1.arguments,
            json!({"path": "notes/a.txt", "content": "hello"})
        );
        assert_eq!(c1.argument_trust["path"], TrustLevel::User);
        assert!(script.steps[1].calls[1].argument_trust.is_empty());
        assert_eq!(script.final_message, "done");
    }

    #[test]
    fn defaults_and_round_trip() {
        let script = RunScript::parse(&minimal().to_string()).unwrap();
        assert_eq!(script.origin_trust, TrustLevel::ExternalUntrusted);
        assert_eq!(script.limits, Limits::default());
        assert_eq!(script.final_message, "done");
        assert!(script.steps.is_empty());
        for script in [script, RunScript::parse(EXAMPLE).unwrap()] {
            assert_eq!(RunScript::parse(&script.to_json()).unwrap(), script);
        }
        let session = "0190a6f1-2b3c-7d4e-8f90-123456789abc";
        let pinned = edited(|v| {
            v["session_id"] = json!(session);
            v["steps"][0]["calls"][0]["version"] = json!("1.0.0");
            v["principal_scopes"] = json!(["b.b", "a.a", "b.b"]);
        });
        let script = RunScript::parse(&pinned).unwrap();
        assert_eq!(script.session_id.unwrap().to_string(), session);
        assert_eq!(script.steps[0].calls[0].version.as_deref(), Some("1.0.0"));
        assert_eq!(script.principal_scopes.len(), 2);
        let stored = script.to_json();
        assert!(
            stored.contains(r#""principal_scopes":["a.a","b.b"]"#),
            "{stored}"
        );
        assert_eq!(RunScript::parse(&stored).unwrap(), script);
    }

    #[test]
    fn unknown_fields_are_rejected_at_every_level() {
        let cases = [
            (edited(|v| v["extra"] = json!(1)), "unknown field 'extra'"),
            (
                edited(|v| v["steps"][1]["note"] = json!("x")),
                "unknown field 'steps[1].note'",
            ),
            (
                edited(|v| v["steps"][1]["calls"][1]["trust"] = json!("user")),
                "unknown field 'steps[1].calls[1].trust'",
            ),
            (
                edited(|v| v["limits"]["max_retries"] = json!(1)),
                "limits: unknown field `max_retries`, expected one of `max_steps`, `max_tool_calls`, `deadline_seconds`",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(message(&text), expected);
        }
    }

    #[test]
    fn the_json_itself_must_be_one_unambiguous_object() {
        assert!(message("").starts_with("invalid JSON: "));
        assert!(message("{} {}").starts_with("invalid JSON: trailing characters"));
        assert_eq!(message("[]"), "the script: expected an object");
        let repeated = r#"{"schema_version": 1, "tenant_id": "a", "tenant_id": "b"}"#;
        assert!(
            message(repeated).starts_with("invalid JSON: duplicate key 'tenant_id'"),
            "{}",
            message(repeated)
        );
        let nested = EXAMPLE.replace(
            r#""content": "hello"}"#,
            r#""content": "hello", "content": "bye"}"#,
        );
        assert!(message(&nested).starts_with("invalid JSON: duplicate key 'content'"));
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(
            message(&deep),
            "the script nests more than 133 levels deep (a call's arguments may nest 128)"
        );
    }

    #[test]
    fn each_top_level_rule_has_its_message() {
        let cases = [
            (
                edited(|v| v["schema_version"] = json!(2)),
                "schema_version must be 1",
            ),
            (
                edited(|v| v["schema_version"] = json!("1")),
                "schema_version must be 1",
            ),
            (
                edited(|v| drop(v.as_object_mut().unwrap().remove("schema_version"))),
                "missing required field 'schema_version'",
            ),
            (
                edited(|v| drop(v.as_object_mut().unwrap().remove("tenant_id"))),
                "missing required field 'tenant_id'",
            ),
            (
                edited(|v| v["tenant_id"] = json!("")),
                "tenant_id must be 1..=128 characters",
            ),
            (
                edited(|v| v["tenant_id"] = json!("é".repeat(129))),
                "tenant_id must be 1..=128 characters",
            ),
            (
                edited(|v| v["tenant_id"] = json!(7)),
                "tenant_id: expected a string",
            ),
            (
                edited(|v| v["principal_id"] = json!("al\nice")),
                "principal_id must not contain control characters",
            ),
            (
                edited(|v| v["principal_id"] = json!("\u{85}")),
                "principal_id must not contain control characters",
            ),
            (
                edited(|v| drop(v.as_object_mut().unwrap().remove("principal_scopes"))),
                "missing required field 'principal_scopes'",
            ),
            (
                edited(|v| v["principal_scopes"] = json!("run.read")),
                "principal_scopes: expected an array",
            ),
            (
                edited(|v| v["principal_scopes"][1] = json!("Workspace.Write")),
                "principal_scopes[1]: invalid scope 'Workspace.Write'",
            ),
            (
                edited(|v| v["principal_scopes"][2] = json!(1)),
                "principal_scopes[2]: expected a string",
            ),
            (
                edited(|v| v["session_id"] = json!("not-a-uuid")),
                "session_id: expected a lowercase hyphenated UUID, got 'not-a-uuid'",
            ),
            (
                edited(|v| v["session_id"] = json!("0190A6F1-2B3C-7D4E-8F90-123456789ABC")),
                "session_id: expected a lowercase hyphenated UUID, got '0190A6F1-2B3C-7D4E-8F90-123456789ABC'",
            ),
            (
                edited(|v| v["origin_trust"] = json!("platform")),
                "origin_trust: a script may not declare trust level 'platform'",
            ),
            (
                edited(|v| v["origin_trust"] = json!("trusted_configuration")),
                "origin_trust: a script may not declare trust level 'trusted_configuration'",
            ),
            (
                edited(|v| v["origin_trust"] = json!("User")),
                "origin_trust: unknown trust level 'User'",
            ),
            (
                edited(|v| v["origin_trust"] = Value::Null),
                "origin_trust: expected a string",
            ),
            (
                edited(|v| v["limits"]["max_steps"] = json!(0)),
                "limits.max_steps must be in 1..=1000",
            ),
            (
                edited(|v| v["limits"]["max_tool_calls"] = json!(10_001)),
                "limits.max_tool_calls must be in 1..=10000",
            ),
            (
                edited(|v| v["limits"]["deadline_seconds"] = json!(604_801)),
                "limits.deadline_seconds must be in 1..=604800",
            ),
            (
                edited(|v| v["limits"]["max_steps"] = json!(-1)),
                "limits: invalid value: integer `-1`, expected u32",
            ),
            (
                edited(|v| v["final_message"] = json!("x".repeat(4097))),
                "final_message must be at most 4096 characters",
            ),
            (
                edited(|v| v["final_message"] = json!(["done"])),
                "final_message: expected a string",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(message(&text), expected);
        }
        let longest = edited(|v| {
            v["tenant_id"] = json!("é".repeat(128));
            v["final_message"] = json!("😀".repeat(4096));
        });
        assert!(RunScript::parse(&longest).is_ok());
    }

    #[test]
    fn each_step_and_call_rule_names_its_place() {
        let cases = [
            (
                edited(|v| drop(v.as_object_mut().unwrap().remove("steps"))),
                "missing required field 'steps'",
            ),
            (
                edited(|v| v["steps"] = json!({})),
                "steps: expected an array",
            ),
            (
                edited(|v| v["steps"][2] = json!([])),
                "steps[2]: expected an object",
            ),
            (
                edited(|v| v["steps"][1] = json!({})),
                "missing required field 'steps[1].calls'",
            ),
            (
                edited(|v| v["steps"][1]["calls"] = json!([])),
                "steps[1]: a step needs at least one call",
            ),
            (
                edited(|v| v["steps"][1]["calls"][0]["call_id"] = json!("c 2")),
                "steps[1].calls[0].call_id: invalid call_id 'c 2' (expected 1 to 128 of A-Z a-z 0-9 . _ : -)",
            ),
            (
                edited(|v| v["steps"][1]["calls"][0]["call_id"] = json!("")),
                "steps[1].calls[0].call_id: invalid call_id '' (expected 1 to 128 of A-Z a-z 0-9 . _ : -)",
            ),
            (
                edited(|v| v["steps"][1]["calls"][1]["call_id"] = json!("c2")),
                "steps[1].calls[1].call_id: call_id 'c2' is already used in step 2",
            ),
            (
                edited(|v| {
                    drop(
                        v["steps"][0]["calls"][0]
                            .as_object_mut()
                            .unwrap()
                            .remove("tool"),
                    )
                }),
                "missing required field 'steps[0].calls[0].tool'",
            ),
            (
                edited(|v| {
                    drop(
                        v["steps"][0]["calls"][0]
                            .as_object_mut()
                            .unwrap()
                            .remove("arguments"),
                    )
                }),
                "missing required field 'steps[0].calls[0].arguments'",
            ),
            (
                edited(|v| v["steps"][0]["calls"][0]["version"] = json!(1)),
                "steps[0].calls[0].version: expected a string",
            ),
            (
                edited(|v| v["steps"][0]["calls"][0]["argument_trust"]["path"] = json!("platform")),
                "steps[0].calls[0].argument_trust.path: a script may not declare trust level 'platform'",
            ),
            (
                edited(|v| {
                    v["steps"][0]["calls"][0]["argument_trust"]["content"] =
                        json!("trusted_configuration")
                }),
                "steps[0].calls[0].argument_trust.content: a script may not declare trust level 'trusted_configuration'",
            ),
            (
                edited(|v| v["steps"][0]["calls"][0]["argument_trust"] = json!(["user"])),
                "steps[0].calls[0].argument_trust: expected an object",
            ),
            (
                edited(|v| v["steps"][0]["calls"][0]["argument_trust"]["path"] = json!("root")),
                "steps[0].calls[0].argument_trust.path: unknown trust level 'root'",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(message(&text), expected);
        }
        // The same call id in different steps is fine: ids are unique per step.
        let reused = edited(|v| v["steps"][2]["calls"][0]["call_id"] = json!("c1"));
        assert!(RunScript::parse(&reused).is_ok());
        // Arguments are any JSON here; the pipeline validates them against the tool's schema.
        let odd = edited(|v| v["steps"][0]["calls"][0]["arguments"] = json!([1, null]));
        assert!(RunScript::parse(&odd).is_ok());
    }

    #[test]
    fn the_step_count_is_bounded_and_leaves_room_for_the_final_turn() {
        let with_steps = |count: usize, max_steps: u32| {
            let mut value = minimal();
            let step =
                json!({"calls": [{"call_id": "c", "tool": "math.calculate", "arguments": {}}]});
            value["steps"] = Value::Array(vec![step; count]);
            value["limits"] = json!({"max_steps": max_steps});
            value.to_string()
        };
        assert!(RunScript::parse(&with_steps(3, 4)).is_ok());
        assert_eq!(
            message(&with_steps(3, 3)),
            "3 steps need limits.max_steps of at least 4 (the final message is a step too), got 3"
        );
        // No steps: the only turn is the final one, which one step of budget covers.
        assert!(RunScript::parse(&with_steps(0, 1)).is_ok());
        assert!(RunScript::parse(&with_steps(999, 1000)).is_ok());
        assert_eq!(
            message(&with_steps(1000, 1000)),
            "steps: at most 999 steps are allowed, got 1000"
        );
        // Without limits the default max_steps of 16 applies.
        let mut value = minimal();
        value["steps"] = Value::Array(vec![
            json!({"calls": [{"call_id": "c", "tool": "t", "arguments": {}}]});
            16
        ]);
        assert_eq!(
            message(&value.to_string()),
            "16 steps need limits.max_steps of at least 17 (the final message is a step too), got 16"
        );
    }

    #[test]
    fn the_planner_replays_steps_then_the_final_message() {
        let script = RunScript::parse(EXAMPLE).unwrap();
        let planner = ScriptedPlanner::new(script.clone());
        for (k, step) in script.steps.iter().enumerate() {
            assert_eq!(
                planner.turn(k as u32 + 1),
                Ok(PlannerTurn::Calls(step.calls.clone()))
            );
        }
        for k in [4, 5, 1000] {
            assert_eq!(
                planner.turn(k),
                Ok(PlannerTurn::Final {
                    message: "done".to_owned()
                })
            );
        }
        assert_eq!(
            planner.turn(0),
            Err(PlannerError("step numbers start at 1".to_owned()))
        );
        // Asking twice gives the same answer: the planner ignores history and results.
        assert_eq!(planner.turn(2), planner.turn(2));
    }

    fn run_with(planner_input: String) -> Run {
        let now = Timestamp::from_micros(0);
        Run {
            id: RunId(Uuid::nil()),
            session_id: SessionId(Uuid::nil()),
            tenant_id: "acme".to_owned(),
            principal_id: "alice".to_owned(),
            principal_scopes: ScopeSet::new(),
            origin_trust: TrustLevel::User,
            planner_kind: crate::planner::SCRIPTED_PLANNER_KIND.to_owned(),
            planner_input: planner_input.into(),
            state: RunState::Queued {
                scheduled_for: None,
            },
            step_count: 0,
            tool_call_count: 0,
            limits: Limits::default(),
            deadline_at: None,
            lease_epoch: 0,
            attempts: 0,
            cancel_requested_at: None,
            created_at: now,
            updated_at: now,
        }
    }

    #[test]
    fn the_factory_builds_a_planner_from_the_stored_script() {
        let stored = RunScript::parse(EXAMPLE).unwrap().to_json();
        let run = run_with(stored);
        let planner = ScriptedPlannerFactory.for_run(&run).unwrap();
        let turn = |step: u32| {
            block_on(planner.next_turn(PlannerInput {
                run: &run,
                step,
                history: &[],
                tainted: false,
            }))
        };
        match turn(2).unwrap() {
            PlannerTurn::Calls(calls) => assert_eq!(calls.len(), 2),
            other => panic!("expected calls, got {other:?}"),
        }
        assert_eq!(
            turn(4),
            Ok(PlannerTurn::Final {
                message: "done".to_owned()
            })
        );

        let broken = run_with("{}".to_owned());
        let error = ScriptedPlannerFactory.for_run(&broken).err().unwrap();
        assert_eq!(
            error,
            PlannerError("invalid run script: missing required field 'schema_version'".to_owned())
        );
    }
}
