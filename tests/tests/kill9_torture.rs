//! kill -9 torture (adapter issue, acceptance 3): workers are SIGKILLed at pseudo-random moments
//! over 50 runs that mix `demo.external_write` and workspace writes, and restarted each time.
//! Kills come 10–250 ms after a worker starts, while approved runs are executing (about 10 of the
//! 50 runs are typically reclaimed mid-run; the test requires at least one).
//! Afterwards no effect was duplicated, no approval was lost, and every run is terminal or
//! parked.

use std::time::{Duration, Instant};

use airlock_e2e::*;
use serde_json::json;

fn open_runs(data: &DataDir) -> i64 {
    db(data)
        .query_row(
            "SELECT COUNT(*) FROM runs WHERE status IN ('QUEUED','RUNNING','WAITING_FOR_APPROVAL')",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn sigkilled_workers_never_duplicate_an_effect_or_lose_an_approval() {
    let data = DataDir::new();
    let runs = 50;
    for i in 0..runs {
        data.submit(&script(json!([
            [workspace_write("w1", &format!("r{i}.txt"), "first")],
            [external_write("x", &format!("effect {i}"))],
            [workspace_write("w2", &format!("r{i}.txt"), "second")],
            [workspace_write("w3", &format!("r{i}/b.txt"), "third")],
            [workspace_write("w4", &format!("r{i}.txt"), "fourth")]
        ])));
    }
    let mut rng = Rng(0x5EED_A1C0_C4E5_0001);
    let started = Instant::now();
    let mut kills = 0;
    for _round in 0..40 {
        if open_runs(&data) == 0 || started.elapsed() > Duration::from_secs(150) {
            break;
        }
        let mut workers: Vec<_> = (0..2).map(|_| data.spawn_worker(400, None)).collect();
        std::thread::sleep(Duration::from_millis(10 + rng.below(240)));
        for worker in &mut workers {
            if rng.below(4) != 0 && worker.try_wait().unwrap().is_none() {
                worker.kill().unwrap();
                kills += 1;
            }
        }
        for mut worker in workers {
            let _ = worker.kill();
            worker.wait().unwrap();
        }
        data.approve_all();
    }
    assert!(kills >= 10, "the torture killed only {kills} workers");
    // A quiet phase: workers run to idle, approvals keep coming, until every run settles.
    for _ in 0..20 {
        if open_runs(&data) == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(450));
        assert_eq!(data.worker_until_idle(400).status.code(), Some(0));
        data.approve_all();
    }
    assert_eq!(
        open_runs(&data),
        0,
        "every run ends (terminal) once no worker is killed"
    );
    assert_no_duplicate_effects(&data);
    let conn = db(&data);
    let lost: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM tool_invocations i WHERE i.tool_name = 'demo.external_write' AND (SELECT COUNT(*) FROM approvals a WHERE a.action_id = i.id) <> 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(lost, 0, "every external write has exactly one approval");
    let waiting_without_approval: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM tool_invocations i WHERE i.status = 'WAITING_FOR_APPROVAL' AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.action_id = i.id AND a.status = 'pending')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        waiting_without_approval, 0,
        "no waiting call lost its approval"
    );
    let finished: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM runs WHERE status IN ('COMPLETED','FAILED','CANCELLED')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(finished, runs);
    // The kills must have landed inside executions, not only between them: a run whose worker
    // died mid-run is reclaimed after its lease expires, which counts an attempt.
    let reclaimed: i64 = conn
        .query_row("SELECT COUNT(*) FROM runs WHERE attempts > 0", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(
        reclaimed >= 1,
        "{kills} kills interrupted no run; the torture tested nothing"
    );
}
