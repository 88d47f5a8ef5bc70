//! Tool catalogs that change during a world (a rolling deploy, SPEC §8.3, §9.4, §10.3): each
//! process incarnation registers one of `crate::catalog::Catalog`, and every decision that
//! depends on which tools resolve is held against the catalog of the process that made it,
//! read from the commit's actor.
//!
//! - §8.3 pins: PENDING pins each call to what that process resolves (the highest version when
//!   none is asked for), or leaves it unresolved.
//! - §8.3, §9.2 step 2: a call pinned unresolved is refused `policy.matrix.unknown_tool` on
//!   every replay and never gets a row; a pinned call is refused exactly when the process that
//!   begins it cannot resolve its pin.
//! - §10.3: an approved call is denied `policy.revalidation.changed` exactly when the resuming
//!   process's spec for the pinned tool is gone, re-normalizes the arguments to another hash,
//!   or requires other scopes (or scopes the run does not hold).
//! - §9.4: a call left RUNNING whose tool is gone in the process that recovers it ends
//!   UNCERTAIN `tool.outcome_unknown` if watermarked, else FAILED `tool.internal_error`; an
//!   AUTHORIZED one is STARTed without a watermark and closed FAILED `tool.internal_error` in
//!   one RECOVER commit.

use std::collections::BTreeMap;

use airlock_core::canonical::arguments_hash;
use airlock_core::events::{Event, EventType};
use airlock_core::invocation::Invocation;
use airlock_core::tool::spec::ToolSpec;
use airlock_core::vocab::InvocationStatus;
use serde_json::Value;

use super::world::World;
use crate::catalog::{Catalog, resolve};
use crate::store::{invocation_of, refused_call};

const UNKNOWN_TOOL: &str = "policy.matrix.unknown_tool";
const CHANGED: &str = "policy.revalidation.changed";

/// The catalog of the process that wrote `event`, if a worker of this world wrote it.
fn catalog_of(world: &World<'_>, event: &Event) -> Option<Catalog> {
    if event.actor.actor_type.as_str() != "worker" {
        return None;
    }
    let name = event.actor.actor_id.as_deref()?;
    world
        .observations
        .timeline
        .incarnations
        .get(name)
        .map(|i| i.catalog)
}

fn count(asserted: &mut BTreeMap<String, u64>, what: &str) {
    *asserted.entry(format!("check.{what}")).or_default() += 1;
}

/// Every rule of this module; `asserted` counts how often each found its premise.
pub fn pins_and_gone_tools(
    world: &World<'_>,
    asserted: &mut BTreeMap<String, u64>,
) -> Vec<(&'static str, String)> {
    let mut failures = Vec::new();
    pins(world, asserted, &mut failures);
    refusals(world, asserted, &mut failures);
    revalidations(world, asserted, &mut failures);
    gone_tools(world, asserted, &mut failures);
    failures
}

/// §8.3: the PENDING a process commits pins each call to what that process resolves.
fn pins(
    world: &World<'_>,
    asserted: &mut BTreeMap<String, u64>,
    failures: &mut Vec<(&'static str, String)>,
) {
    for event in world.commits.iter().flat_map(|c| &c.events) {
        if event.event_type != EventType::RunCheckpointed
            || event.payload["trigger"] != "tool_pending"
        {
            continue;
        }
        let (Some(run), Some(catalog)) = (event.run_id, catalog_of(world, event)) else {
            continue;
        };
        let version = event.payload["version"].as_u64().unwrap_or_default() as u32;
        let Some(batch) = world
            .snapshot
            .checkpoints
            .get(&(run, version))
            .and_then(|c| c.state.pending.as_ref())
        else {
            continue;
        };
        for call in &batch.calls {
            count(asserted, "pin_matches_the_pinning_process");
            let expected = resolve(catalog, &call.call.tool, call.call.version.as_deref())
                .map(|spec| spec.version.to_string());
            if call.pinned_version != expected {
                failures.push((
                    "pins_follow_the_pinning_process",
                    format!(
                        "run {run} step {}: {} ({}) pinned {:?} by a process whose catalog resolves {expected:?}",
                        batch.step, call.call.call_id, call.call.tool, call.pinned_version
                    ),
                ));
            }
        }
    }
}

/// §8.3, §9.2 step 2: unresolved pins are refused on every replay and never get a row; a pin
/// is refused `unknown_tool` exactly when the process that begins the call cannot resolve it.
fn refusals(
    world: &World<'_>,
    asserted: &mut BTreeMap<String, u64>,
    failures: &mut Vec<(&'static str, String)>,
) {
    // The commit that began each call: its row's PROPOSE or its refusal.
    let mut began: BTreeMap<(airlock_core::ids::RunId, u32, String), &Event> = BTreeMap::new();
    for event in world.commits.iter().flat_map(|c| &c.events) {
        if let Some((run, step, call)) = refused_call(event) {
            began.entry((run, step, call.to_owned())).or_insert(event);
        } else if event.event_type == EventType::ToolCallProposed
            && let Some(row) = invocation_of(world.snapshot, event)
        {
            began
                .entry((row.run_id, row.step_number, row.call_id.clone()))
                .or_insert(event);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for ((run, _), checkpoint) in &world.snapshot.checkpoints {
        let Some(batch) = &checkpoint.state.pending else {
            continue;
        };
        if !seen.insert((*run, batch.step)) {
            continue;
        }
        for call in &batch.calls {
            let id = (*run, batch.step, call.call.call_id.clone());
            let Some(first) = began.get(&id) else {
                continue;
            };
            let refused_unknown = first.event_type != EventType::ToolCallProposed
                && first.payload["reason_code"] == UNKNOWN_TOOL;
            let resolves = match (&call.pinned_version, catalog_of(world, first)) {
                (None, _) => Some(false),
                (Some(version), Some(catalog)) => {
                    Some(resolve(catalog, &call.call.tool, Some(version)).is_some())
                }
                (Some(_), None) => None,
            };
            let Some(resolves) = resolves else { continue };
            count(asserted, "pin_refused_iff_unresolvable");
            if resolves == refused_unknown {
                failures.push((
                    "inv_unresolved_pins_are_refused",
                    format!(
                        "run {run} step {}: {} ({} pinned {:?}) {} by a process that {} it",
                        batch.step,
                        call.call.call_id,
                        call.call.tool,
                        call.pinned_version,
                        if refused_unknown {
                            "was refused unknown_tool"
                        } else {
                            "began without that refusal"
                        },
                        if resolves {
                            "resolves"
                        } else {
                            "cannot resolve"
                        }
                    ),
                ));
            }
            if call.pinned_version.is_none()
                && world.snapshot.invocations.values().any(|i| {
                    i.run_id == *run
                        && i.step_number == batch.step
                        && i.call_id == call.call.call_id
                })
            {
                failures.push((
                    "inv_unresolved_pins_are_refused",
                    format!(
                        "run {run} step {}: {} was pinned unresolved but has an invocation row",
                        batch.step, call.call.call_id
                    ),
                ));
            }
        }
    }
}

/// The §10.3 identity rows, as the resuming process's catalog sees the pinned tool: `true` if
/// the approved action is unchanged.
fn identity_holds(world: &World<'_>, catalog: Catalog, row: &Invocation) -> Option<bool> {
    let approval = world
        .snapshot
        .approvals
        .values()
        .find(|a| a.action_id == row.id)?;
    let run = world.snapshot.runs.get(&row.run_id)?;
    let Some(spec): Option<ToolSpec> = resolve(catalog, &row.tool_name, Some(&row.tool_version))
    else {
        return Some(false);
    };
    let hash = spec
        .normalize_arguments(&row.raw_arguments)
        .ok()
        .map(|args| arguments_hash(&Value::Object(args)));
    let scopes: Vec<String> = spec
        .required_scopes
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    Some(
        hash.as_deref() == Some(approval.effective_arguments_hash.as_str())
            && scopes == approval.required_scopes
            && spec.required_scopes.is_subset(&run.principal_scopes),
    )
}

/// §10.3: `policy.revalidation.changed` exactly when the approved action's identity changed
/// in the process that revalidates it.
fn revalidations(
    world: &World<'_>,
    asserted: &mut BTreeMap<String, u64>,
    failures: &mut Vec<(&'static str, String)>,
) {
    for commit in world.commits {
        for event in &commit.events {
            let revalidated = match event.event_type {
                EventType::ApprovalInvalidated => true,
                // An authorization that is not PROPOSE's own (no proposal in this commit).
                EventType::ToolCallAuthorized => !commit.events.iter().any(|e| {
                    e.event_type == EventType::ToolCallProposed
                        && e.payload["invocation_id"] == event.payload["invocation_id"]
                }),
                _ => false,
            };
            if !revalidated {
                continue;
            }
            let (Some(row), Some(catalog)) = (
                invocation_of(world.snapshot, event),
                catalog_of(world, event),
            ) else {
                continue;
            };
            let Some(unchanged) = identity_holds(world, catalog, row) else {
                continue;
            };
            count(asserted, "revalidation_changed_iff_identity_changed");
            // §22.5: an approval kept by a newer version that asks for the same approval.
            if event.event_type == EventType::ToolCallAuthorized
                && let Some(decision) = &row.policy_decision
                && decision.decision == airlock_core::vocab::PolicyDecisionType::RequireApproval
                && world
                    .snapshot
                    .approvals
                    .values()
                    .any(|a| a.action_id == row.id && a.policy_version != decision.policy_version)
            {
                count(
                    asserted,
                    "revalidation_kept_the_same_approval_across_versions",
                );
            }
            let changed = event.event_type == EventType::ApprovalInvalidated
                && event.payload["reason_code"] == CHANGED;
            if unchanged == changed {
                failures.push((
                    "inv_25_revalidation_sees_the_changed_tool",
                    format!(
                        "invocation {} ({}@{}) revalidated by {:?} as {} ({}) although its identity {}",
                        row.id,
                        row.tool_name,
                        row.tool_version,
                        event.actor.actor_id,
                        event.event_type,
                        event.payload["reason_code"],
                        if unchanged { "held" } else { "changed" }
                    ),
                ));
            }
        }
    }
}

/// §9.4 "if the pinned tool is gone when it must re-invoke": the outcomes of calls a process
/// recovered without their tool.
fn gone_tools(
    world: &World<'_>,
    asserted: &mut BTreeMap<String, u64>,
    failures: &mut Vec<(&'static str, String)>,
) {
    let mut status: BTreeMap<String, InvocationStatus> = BTreeMap::new();
    for commit in world.commits {
        let ends_run = commit.events.iter().any(|e| {
            matches!(
                e.event_type,
                EventType::RunCompleted | EventType::RunFailed | EventType::RunCancelled
            )
        });
        let before = status.clone();
        for event in &commit.events {
            let Some(id) = event.payload["invocation_id"].as_str() else {
                continue;
            };
            let next = match event.event_type {
                EventType::ToolCallProposed => Some(InvocationStatus::WaitingForApproval),
                EventType::ToolCallAuthorized => Some(InvocationStatus::Authorized),
                EventType::ToolCallStarted => Some(InvocationStatus::Running),
                EventType::ToolCallCompleted
                | EventType::ToolCallFailed
                | EventType::ToolCallUncertain
                | EventType::ToolCallDenied => Some(InvocationStatus::Denied),
                _ => None,
            };
            if let Some(next) = next {
                status.insert(id.to_owned(), next);
            }
            let closes = matches!(
                event.event_type,
                EventType::ToolCallCompleted
                    | EventType::ToolCallFailed
                    | EventType::ToolCallUncertain
                    | EventType::ToolCallDenied
            );
            if !closes || ends_run {
                continue;
            }
            let (Some(row), Some(catalog)) = (
                invocation_of(world.snapshot, event),
                catalog_of(world, event),
            ) else {
                continue;
            };
            if resolve(catalog, &row.tool_name, Some(&row.tool_version)).is_some() {
                continue;
            }
            let started_here = commit.events.iter().any(|e| {
                e.event_type == EventType::ToolCallStarted && e.payload["invocation_id"] == id
            });
            let expected = match before.get(id) {
                Some(InvocationStatus::Running) if row.effect_sent_at.is_some() => {
                    (InvocationStatus::Uncertain, "tool.outcome_unknown")
                }
                Some(InvocationStatus::Running) => {
                    (InvocationStatus::Failed, "tool.internal_error")
                }
                Some(InvocationStatus::Authorized) if started_here => {
                    (InvocationStatus::Failed, "tool.internal_error")
                }
                _ => continue,
            };
            count(asserted, "gone_tool_recovered_per_9_4");
            let found = (row.status, row.reason_code.as_deref().unwrap_or_default());
            let unwatermarked = !started_here || row.effect_sent_at.is_none();
            if found != expected || !unwatermarked {
                failures.push((
                    "gone_tools_recover_per_9_4",
                    format!(
                        "invocation {} ({}@{}, {:?} before) recovered without its tool by {:?} as {found:?}, expected {expected:?}{}",
                        row.id,
                        row.tool_name,
                        row.tool_version,
                        before.get(id),
                        event.actor.actor_id,
                        if unwatermarked { "" } else { " and no watermark" }
                    ),
                ));
            }
        }
    }
}
