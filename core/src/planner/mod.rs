//! Planners (SPEC §15): the shipped planner replays a run script. Planners only propose; the
//! executor validates each turn (§8.3) and the pipeline decides every call.

pub mod script;

pub use script::{RunScript, ScriptError, ScriptStep, ScriptedPlanner, ScriptedPlannerFactory};

/// The `runs.planner_kind` of a scripted run (SPEC §14).
pub const SCRIPTED_PLANNER_KIND: &str = "scripted";

pub use crate::conversation::MCP_PLANNER_KIND;
