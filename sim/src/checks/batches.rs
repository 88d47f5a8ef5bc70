//! §16 #36 and §8.3 from the commit log: a sequential batch runs its calls one after another in
//! planner order, and a batch, once recorded, is the batch of its step for good (calls, pins and
//! admission, the parallel group included, SPEC §8.3 "a resumed batch reuses both").

use std::collections::BTreeMap;

use airlock_core::events::{Event, EventType};
use airlock_core::ids::RunId;
use airlock_core::run::checkpoint::{Admission, PendingBatch};

use super::world::World;
use crate::store::{closed_in, invocation_of, refused_call};

/// Every batch recorded for each `(run, step)`, as its checkpoints hold it, in version order.
fn batches<'a>(world: &World<'a>) -> BTreeMap<(RunId, u32), Vec<&'a PendingBatch>> {
    let mut out: BTreeMap<(RunId, u32), Vec<&PendingBatch>> = BTreeMap::new();
    for ((run, _), checkpoint) in &world.snapshot.checkpoints {
        if let Some(batch) = &checkpoint.state.pending {
            out.entry((*run, batch.step)).or_default().push(batch);
        }
    }
    out
}

/// Where in the commit log each call of each step first appeared (its PROPOSE or REFUSE) and
/// where it ended (its terminal event, or the refusal), keyed `(run, step, call_id)`.
struct CallCommits {
    begun: BTreeMap<(RunId, u32, String), usize>,
    ended: BTreeMap<(RunId, u32, String), usize>,
}

fn call_commits(world: &World<'_>) -> CallCommits {
    let mut begun = BTreeMap::new();
    let mut ended = BTreeMap::new();
    let call_of = |event: &Event| -> Option<(RunId, u32, String)> {
        let row = invocation_of(world.snapshot, event)?;
        Some((row.run_id, row.step_number, row.call_id.clone()))
    };
    for (n, commit) in world.commits.iter().enumerate() {
        for event in &commit.events {
            if event.event_type == EventType::ToolCallProposed
                && let Some(call) = call_of(event)
            {
                begun.entry(call).or_insert(n);
            } else if let Some((run, step, call_id)) = refused_call(event) {
                begun.entry((run, step, call_id.to_owned())).or_insert(n);
                ended.entry((run, step, call_id.to_owned())).or_insert(n);
            } else if let Some(row) = invocation_of(world.snapshot, event)
                && closed_in(std::slice::from_ref(event), row.id)
            {
                ended
                    .entry((row.run_id, row.step_number, row.call_id.clone()))
                    .or_insert(n);
            }
        }
    }
    CallCommits { begun, ended }
}

/// §8.3, §9.2, §11: in a sequential batch, call i+1 is proposed (or refused) only in a commit
/// after the one that closed call i; a call that never closes (it parked and the run ended)
/// has no successor in the log.
pub fn sequential_batches_in_order(world: &World<'_>) -> Vec<String> {
    let calls = call_commits(world);
    let mut failures = Vec::new();
    for ((run, step), recorded) in batches(world) {
        let batch = recorded[0];
        if batch.admission != Admission::Sequential {
            continue;
        }
        for pair in batch.calls.windows(2) {
            let before = (run, step, pair[0].call.call_id.clone());
            let after = (run, step, pair[1].call.call_id.clone());
            let Some(next_begun) = calls.begun.get(&after) else {
                continue;
            };
            match calls.ended.get(&before) {
                Some(closed) if closed < next_begun => {}
                closed => failures.push(format!(
                    "run {run} step {step}: sequential call {} began at commit {next_begun} while {} had {}",
                    after.2,
                    before.2,
                    closed.map_or("not ended".to_owned(), |c| format!("ended at commit {c}"))
                )),
            }
        }
    }
    failures
}

/// §8.3, §11: every checkpoint of a step holds the same batch (calls, pins, admission), and
/// every row of the step carries the batch's parallel group (a resumed parallel batch reuses
/// the group id drawn at PENDING; a sequential batch has none).
pub fn parallel_groups_kept(world: &World<'_>) -> Vec<String> {
    let recorded = batches(world);
    let mut failures = Vec::new();
    for ((run, step), versions) in &recorded {
        if versions.iter().any(|b| *b != versions[0]) {
            failures.push(format!(
                "run {run} step {step}: its recorded batch changed between checkpoints"
            ));
        }
    }
    for row in world.snapshot.invocations.values() {
        let Some(batch) = recorded.get(&(row.run_id, row.step_number)).map(|v| v[0]) else {
            continue;
        };
        let expected = match batch.admission {
            Admission::Parallel { parallel_group } => Some(parallel_group),
            Admission::Sequential => None,
        };
        if row.parallel_group != expected {
            failures.push(format!(
                "run {} step {}: call {} ({}) has parallel group {:?}, its batch {:?}",
                row.run_id, row.step_number, row.call_id, row.id, row.parallel_group, expected
            ));
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::fixtures::{commit, event, pending_batch, run};
    use crate::checks::world::Observations;
    use crate::plan::Plan;
    use airlock_core::events::Actor;
    use airlock_core::mem_store::MemSnapshot;
    use serde_json::json;

    fn refusal(call_id: &str) -> Event {
        Event {
            derivation_key: Some(airlock_core::events::keys::refused(run(), 1, call_id)),
            ..event(
                EventType::ToolCallDenied,
                Actor::worker("w0.1"),
                json!({"call_id": call_id}),
            )
        }
    }

    #[test]
    fn a_sequential_call_that_begins_before_its_predecessor_ended_is_caught() {
        let plan = Plan::new(1);
        let observations = Observations::default();
        let snapshot = pending_batch(2, Admission::Sequential);
        let in_order = vec![
            commit(0, vec![refusal("c1")]),
            commit(1, vec![refusal("c2")]),
        ];
        let world = |commits| World {
            plan: &plan,
            snapshot: &snapshot,
            commits,
            observations: &observations,
        };
        assert!(sequential_batches_in_order(&world(&in_order)).is_empty());
        let swapped = vec![
            commit(0, vec![refusal("c2")]),
            commit(1, vec![refusal("c1")]),
        ];
        assert_eq!(sequential_batches_in_order(&world(&swapped)).len(), 1);
        let parallel = snapshot_parallel();
        let world = World {
            plan: &plan,
            snapshot: &parallel,
            commits: &swapped,
            observations: &observations,
        };
        assert!(sequential_batches_in_order(&world).is_empty());
    }

    fn snapshot_parallel() -> MemSnapshot {
        pending_batch(
            2,
            Admission::Parallel {
                parallel_group: airlock_core::ids::ParallelGroupId(uuid::Uuid::from_u128(9)),
            },
        )
    }

    #[test]
    fn a_batch_that_changes_between_checkpoints_is_caught() {
        let plan = Plan::new(1);
        let observations = Observations::default();
        let mut snapshot = pending_batch(2, Admission::Sequential);
        let kept = |snapshot: &MemSnapshot| {
            parallel_groups_kept(&World {
                plan: &plan,
                snapshot,
                commits: &[],
                observations: &observations,
            })
        };
        assert!(kept(&snapshot).is_empty());
        // A later checkpoint of the same step whose batch is now parallel.
        let mut resumed = snapshot.checkpoints[&(run(), 2)].clone();
        resumed.version = 3;
        resumed.state.pending = snapshot_parallel().checkpoints[&(run(), 2)]
            .state
            .pending
            .clone();
        snapshot.checkpoints.insert((run(), 3), resumed);
        assert_eq!(kept(&snapshot).len(), 1);
    }
}
