//! §16 #28 by lease epoch: a fenced worker commits nothing. The observer knows which lease each
//! transaction guarded and which heartbeats it ran, and how each run row looked after every
//! commit, so every worker commit is held against the lease the run really had when it landed:
//! its owner *and* its epoch. Tracking the owner alone would miss the commonest zombie: a worker
//! that lost a run's lease, claimed the same run again under a new epoch, and still has the old
//! execution running.

use std::collections::BTreeMap;

use airlock_core::events::EventType;
use airlock_core::ids::RunId;
use airlock_core::run::Lease;
use airlock_core::vocab::RunStatus;

use crate::store::{CommitRecord, RunView};

/// Whether `view` (the run before a commit) is held by `lease`.
fn held(view: Option<&RunView>, lease: &Lease) -> bool {
    view.is_some_and(|v| {
        v.status == RunStatus::Running
            && v.lease_epoch == lease.lease_epoch
            && v.lease_owner.as_deref() == Some(lease.worker_id.as_str())
    })
}

/// #28: every lease a committed transaction guarded, and every heartbeat that renewed, was
/// the run's lease (owner and epoch) when the transaction began; every event a worker wrote
/// about a run came from a transaction that guarded that run's lease, or from the CLAIM that
/// took it.
pub fn fenced_workers_commit_nothing(commits: &[CommitRecord]) -> Vec<String> {
    let mut runs: BTreeMap<RunId, RunView> = BTreeMap::new();
    let mut failures = Vec::new();
    for commit in commits {
        let n = commit.seq;
        for lease in &commit.guards {
            if !held(runs.get(&lease.run_id), lease) {
                failures.push(format!(
                    "commit {n}: {} committed under lease epoch {} of run {}, which it did not hold (the run was {:?})",
                    lease.worker_id,
                    lease.lease_epoch,
                    lease.run_id,
                    runs.get(&lease.run_id)
                        .map(|v| (v.status, v.lease_owner.clone(), v.lease_epoch))
                ));
            }
        }
        for beat in commit.heartbeats.iter().filter(|b| b.renewed) {
            if !held(runs.get(&beat.lease.run_id), &beat.lease) {
                failures.push(format!(
                    "commit {n}: a heartbeat of {} renewed epoch {} of run {} without holding it",
                    beat.lease.worker_id, beat.lease.lease_epoch, beat.lease.run_id
                ));
            }
        }
        for event in &commit.events {
            let (Some(run), true) = (event.run_id, event.actor.actor_type.as_str() == "worker")
            else {
                continue;
            };
            let worker = event.actor.actor_id.as_deref().unwrap_or_default();
            let claimed_here = commit.events.iter().any(|e| {
                e.event_type == EventType::RunStarted
                    && e.run_id == Some(run)
                    && e.payload["worker_id"].as_str() == Some(worker)
            });
            let guarded = commit
                .guards
                .iter()
                .any(|l| l.run_id == run && l.worker_id == worker);
            if !claimed_here && !guarded {
                failures.push(format!(
                    "commit {n}: worker {worker} wrote {} for run {run} without guarding its lease",
                    event.event_type
                ));
                break;
            }
        }
        for view in &commit.runs {
            runs.insert(view.id, view.clone());
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::fixtures::{self, event, run};
    use crate::store::HeartbeatNote;
    use airlock_core::events::{Actor, Event};
    use airlock_core::time::Timestamp;
    use serde_json::json;

    fn view(status: RunStatus, owner: Option<&str>, epoch: u64) -> RunView {
        fixtures::view(status, epoch, owner.map(|o| (o, Timestamp::from_micros(1))))
    }

    fn lease(worker: &str, epoch: u64) -> Lease {
        Lease {
            run_id: run(),
            worker_id: worker.to_owned(),
            lease_epoch: epoch,
        }
    }

    fn commit(seq: usize, events: Vec<Event>, guards: Vec<Lease>, after: RunView) -> CommitRecord {
        CommitRecord {
            guards,
            runs: vec![after],
            ..fixtures::commit(seq, events)
        }
    }

    fn claim(seq: usize, worker: &str, epoch: u64) -> CommitRecord {
        commit(
            seq,
            vec![event(
                EventType::RunStarted,
                Actor::worker(worker),
                json!({"worker_id": worker, "lease_epoch": epoch}),
            )],
            Vec::new(),
            view(RunStatus::Running, Some(worker), epoch),
        )
    }

    fn reclaim(seq: usize, epoch: u64) -> CommitRecord {
        commit(
            seq,
            vec![event(
                EventType::RunRequeued,
                Actor::maintenance(),
                json!({"reason": "lease_expired"}),
            )],
            Vec::new(),
            view(RunStatus::Queued, None, epoch),
        )
    }

    fn checkpoint_by(seq: usize, worker: &str, epoch: u64, now: u64) -> CommitRecord {
        commit(
            seq,
            vec![event(
                EventType::RunCheckpointed,
                Actor::worker(worker),
                json!({}),
            )],
            vec![lease(worker, epoch)],
            view(RunStatus::Running, Some(worker), now),
        )
    }

    #[test]
    fn a_zombie_of_an_earlier_epoch_of_the_same_worker_is_caught() {
        // w1 holds epoch 1, loses it, claims the run again as epoch 2; its old execution then
        // commits under epoch 1. By worker id alone w1 "holds the lease".
        let commits = vec![
            claim(0, "w1.1", 1),
            checkpoint_by(1, "w1.1", 1, 1),
            reclaim(2, 1),
            claim(3, "w1.1", 2),
            checkpoint_by(4, "w1.1", 1, 2),
        ];
        let found = fenced_workers_commit_nothing(&commits);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("commit 4:"), "{found:?}");
        assert!(fenced_workers_commit_nothing(&commits[..4]).is_empty());
    }

    #[test]
    fn events_without_a_guard_and_stale_heartbeats_are_caught() {
        let unguarded = commit(
            1,
            vec![event(
                EventType::RunCheckpointed,
                Actor::worker("w1.1"),
                json!({}),
            )],
            Vec::new(),
            view(RunStatus::Running, Some("w1.1"), 1),
        );
        assert_eq!(
            fenced_workers_commit_nothing(&[claim(0, "w1.1", 1), unguarded]).len(),
            1
        );
        let mut beat = commit(2, Vec::new(), Vec::new(), view(RunStatus::Queued, None, 1));
        beat.heartbeats.push(HeartbeatNote {
            lease: lease("w1.1", 1),
            renewed: true,
            cancel_seen: false,
        });
        assert_eq!(
            fenced_workers_commit_nothing(&[claim(0, "w1.1", 1), reclaim(1, 1), beat]).len(),
            1
        );
    }
}
