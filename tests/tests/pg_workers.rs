//! Many worker processes on one PostgreSQL database (SPEC §18 "Many processes"): three
//! `airlock worker --store postgres://…` processes share the runs while approvals are resolved
//! from other processes; a kill -9 torture with three workers per round; `airlock demo` on
//! PostgreSQL; a worker whose server is lost mid-run stops claiming and exits 4 with nothing
//! committed lost; and `airlock serve` on PostgreSQL streaming a run's events. Skipped (with a message) without `AIRLOCK_TEST_PG_URL`; under `CI=true` they
//! fail instead.

use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use airlock_e2e::pg::{Proxy, server, via_port};
use airlock_e2e::*;
use serde_json::json;

/// A long-running worker (no `--until-idle`) on `data`'s store, or on `store` if given.
fn spawn_worker(data: &DataDir, lease_ms: u64, store: Option<&str>) -> Child {
    let mut command = data.command("operator", &["worker", "--lease-ms", &lease_ms.to_string()]);
    if let Some(url) = store {
        command.env("AIRLOCK_STORE", url);
    }
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("worker starts")
}

/// SIGTERM: the worker stops claiming and exits once its runs ended or parked.
fn terminate(worker: Child) -> Output {
    let pid = worker.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(status.success(), "SIGTERM {pid}");
    worker.wait_with_output().expect("worker exits")
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn count_status(data: &DataDir, status: &str) -> i64 {
    data.count(&format!(
        "SELECT COUNT(*) FROM runs WHERE status = '{status}'"
    ))
}

#[test]
fn three_workers_share_one_database_and_approvals_come_from_other_processes() {
    let Some(server) = server("three_workers_share_one_database") else {
        return;
    };
    let data = DataDir::on_postgres(&server);
    let runs = 12;
    for i in 0..runs {
        data.submit(&script(json!([
            [workspace_write("w1", &format!("r{i}.txt"), "first")],
            [external_write("x", &format!("effect {i}"))],
            [workspace_write("w2", &format!("r{i}.txt"), "second")]
        ])));
    }
    let workers: Vec<Child> = (0..3).map(|_| spawn_worker(&data, 3000, None)).collect();
    wait_until("every run parks", Duration::from_secs(90), || {
        count_status(&data, "WAITING_FOR_APPROVAL") == runs
    });
    // Resolved by CLI processes that are not workers; the workers resume the runs.
    let mut approved = 0;
    wait_until("every run completes", Duration::from_secs(90), || {
        approved += data.approve_all();
        count_status(&data, "COMPLETED") == runs
    });
    assert_eq!(
        approved, runs as usize,
        "one approval per run, each resolved once"
    );
    for worker in workers {
        let output = terminate(worker);
        assert_eq!(
            output.status.code(),
            Some(0),
            "a terminated worker exits 0: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let claimers =
        data.count("SELECT COUNT(DISTINCT actor_id) FROM events WHERE event_type = 'run.started'");
    assert!(
        claimers >= 2,
        "the runs were shared, not claimed by {claimers} worker"
    );
    let claims = data.count("SELECT COUNT(*) FROM events WHERE event_type = 'run.started'");
    assert_eq!(
        claims,
        2 * runs,
        "each run was claimed once to park and once to resume"
    );
    assert_eq!(data.outbox().len(), runs as usize, "one effect per run");
    assert_no_duplicate_effects(&data);
}

#[test]
fn sigkilled_workers_on_postgres_never_duplicate_an_effect_or_lose_an_approval() {
    let Some(server) = server("sigkilled_workers_on_postgres") else {
        return;
    };
    let data = DataDir::on_postgres(&server);
    let runs: i64 = 30;
    for i in 0..runs {
        data.submit(&script(json!([
            [workspace_write("w1", &format!("r{i}.txt"), "first")],
            [external_write("x", &format!("effect {i}"))],
            [workspace_write("w2", &format!("r{i}.txt"), "second")],
            [workspace_write("w3", &format!("r{i}/b.txt"), "third")]
        ])));
    }
    let open = || {
        data.count(
            "SELECT COUNT(*) FROM runs WHERE status IN ('QUEUED','RUNNING','WAITING_FOR_APPROVAL')",
        )
    };
    let mut rng = Rng(0x5EED_A1C0_C4E5_0002);
    let started = Instant::now();
    let mut kills = 0;
    for _round in 0..40 {
        if open() == 0 || started.elapsed() > Duration::from_secs(150) {
            break;
        }
        let mut workers: Vec<Child> = (0..3).map(|_| data.spawn_worker(400, None)).collect();
        std::thread::sleep(Duration::from_millis(30 + rng.below(300)));
        for worker in &mut workers {
            if rng.below(4) != 0 && worker.try_wait().expect("try_wait").is_none() {
                worker.kill().expect("SIGKILL");
                kills += 1;
            }
        }
        for mut worker in workers {
            let _ = worker.kill();
            worker.wait().expect("reaped");
        }
        data.approve_all();
    }
    assert!(kills >= 10, "the torture killed only {kills} workers");
    for _ in 0..20 {
        if open() == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(450));
        assert_eq!(data.worker_until_idle(400).status.code(), Some(0));
        data.approve_all();
    }
    assert_eq!(open(), 0, "every run ends once no worker is killed");
    // A kill -9 rarely lands between a watermark and its outcome (the window is the tool body:
    // one outbox append), so two more runs are interrupted exactly there, on the same database:
    // a worker that aborts right after the watermark commit (the effect not sent) and one that
    // aborts right after the effect. A worker that takes the run over must leave both calls
    // UNCERTAIN, send neither again, and end the run.
    for (point, effects) in [("after_start", 0), ("after_invoke", 1)] {
        let content = format!("interrupted {point}");
        let run = data.submit(&script(json!([[external_write("x", &content)]])));
        assert_eq!(data.worker_until_idle(400).status.code(), Some(0));
        data.approve_first_pending(&run);
        let crashed = data
            .spawn_worker(400, Some(point))
            .wait_with_output()
            .expect("the crashing worker is reaped");
        assert_eq!(crashed.status.code(), None, "{point}: the worker aborted");
        for _ in 0..20 {
            if data.run_status(&run) == "COMPLETED" {
                break;
            }
            std::thread::sleep(Duration::from_millis(450));
            assert_eq!(data.worker_until_idle(400).status.code(), Some(0));
        }
        assert_eq!(data.run_status(&run), "COMPLETED", "{point}");
        let uncertain = data.count(&format!(
            "SELECT COUNT(*) FROM tool_invocations WHERE run_id = '{run}' \
             AND tool_name = 'demo.external_write' AND status = 'UNCERTAIN' \
             AND effect_sent_at IS NOT NULL"
        ));
        assert_eq!(uncertain, 1, "{point}: the interrupted call is UNCERTAIN");
        let sent = data
            .outbox()
            .iter()
            .filter(|line| line.to_string().contains(&content))
            .count();
        assert_eq!(sent, effects, "{point}: the effect was sent {sent} times");
    }
    assert_no_duplicate_effects(&data);
    let lost = data.count(
        "SELECT COUNT(*) FROM tool_invocations i WHERE i.tool_name = 'demo.external_write' \
         AND (SELECT COUNT(*) FROM approvals a WHERE a.action_id = i.id) <> 1",
    );
    assert_eq!(lost, 0, "every external write has exactly one approval");
    let waiting_without_approval = data.count(
        "SELECT COUNT(*) FROM tool_invocations i WHERE i.status = 'WAITING_FOR_APPROVAL' \
         AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.action_id = i.id \
         AND a.status = 'pending')",
    );
    assert_eq!(
        waiting_without_approval, 0,
        "no waiting call lost its approval"
    );
    // G4: a watermarked non-idempotent call whose run was interrupted is UNCERTAIN, never
    // FAILED as merely interrupted and never repeated.
    let interrupted_not_uncertain = data.count(
        "SELECT COUNT(*) FROM tool_invocations WHERE idempotency_class = 'non_idempotent' \
         AND effect_sent_at IS NOT NULL AND status NOT IN ('SUCCEEDED', 'UNCERTAIN')",
    );
    assert_eq!(
        interrupted_not_uncertain, 0,
        "every watermarked non-idempotent interrupted call is UNCERTAIN"
    );
    let finished =
        data.count("SELECT COUNT(*) FROM runs WHERE status IN ('COMPLETED','FAILED','CANCELLED')");
    assert_eq!(finished, runs + 2);
    let reclaimed = data.count("SELECT COUNT(*) FROM runs WHERE attempts > 0");
    assert!(
        reclaimed >= 1,
        "{kills} kills interrupted no run; the torture tested nothing"
    );
    eprintln!(
        "postgres torture: {kills} kills, {reclaimed} runs reclaimed, {} UNCERTAIN (2 planted)",
        data.count("SELECT COUNT(*) FROM tool_invocations WHERE status = 'UNCERTAIN'")
    );
}

#[test]
fn the_demo_runs_on_postgres() {
    let Some(server) = server("the_demo_runs_on_postgres") else {
        return;
    };
    let data = DataDir::on_postgres(&server);
    let output = data.run("operator", &["demo"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "demo: {stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("holds exactly 1 line with that idempotency_key"),
        "{stdout}"
    );
    assert!(
        stdout.contains("store:"),
        "the demo names its store: {stdout}"
    );
    assert_eq!(
        count_status(&data, "COMPLETED"),
        2,
        "both demo runs complete"
    );
    // A second demo on a database whose runs have all ended is welcome; one with an open run
    // is refused, since its workers would claim someone else's run.
    data.submit(&script(json!([[external_write("x", "pending")]])));
    let refused = data.run("operator", &["demo"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
}

#[test]
fn a_worker_that_loses_its_server_stops_and_exits_4_losing_nothing_committed() {
    let Some(server) = server("a_worker_that_loses_its_server") else {
        return;
    };
    let data = DataDir::on_postgres(&server);
    let runs = 8;
    for i in 0..runs {
        data.submit(&script(json!([
            [workspace_write("a", &format!("r{i}/1.txt"), "one")],
            [workspace_write("b", &format!("r{i}/2.txt"), "two")],
            [workspace_write("c", &format!("r{i}/3.txt"), "three")],
            [workspace_write("d", &format!("r{i}/4.txt"), "four")],
            [workspace_write("e", &format!("r{i}/5.txt"), "five")]
        ])));
    }
    let proxy = Proxy::start(&server);
    let through_proxy = via_port(data.store_url().expect("postgres"), proxy.port);
    let worker = spawn_worker(&data, 1500, Some(&through_proxy));
    wait_until("the worker is mid-run", Duration::from_secs(60), || {
        data.count("SELECT COUNT(*) FROM events WHERE event_type = 'tool.call.completed'") >= 3
    });
    let committed_before = data.count("SELECT COUNT(*) FROM events");
    proxy.cut();
    let started = Instant::now();
    let output = worker.wait_with_output().expect("the worker exits");
    assert_eq!(
        output.status.code(),
        Some(4),
        "a worker without its server exits 4: {} {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("\"storage\""),
        "a storage error: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "it stopped within a minute"
    );
    // Everything committed before the loss is still there, and another worker finishes.
    assert!(data.count("SELECT COUNT(*) FROM events") >= committed_before);
    std::thread::sleep(Duration::from_millis(1600));
    assert_eq!(data.worker_until_idle(1500).status.code(), Some(0));
    assert_eq!(count_status(&data, "COMPLETED"), runs, "every run finishes");
    assert_no_duplicate_effects(&data);
}

/// One Server-Sent Event as `airlock serve` sends it.
#[derive(Debug)]
struct Sse {
    id: i64,
    event: String,
    data: serde_json::Value,
}

/// Opens `GET /v1/events/stream` with an HTTP/1.0 request (so the body is the bare stream, not
/// chunked) and forwards each event to the returned channel from a reader thread.
fn follow_events(addr: &str, token: &str) -> std::sync::mpsc::Receiver<Sse> {
    use std::io::{BufRead, BufReader, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to serve");
    write!(
        stream,
        "GET /v1/events/stream HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Accept: text/event-stream\r\n\r\n"
    )
    .expect("request");
    let (sender, events) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stream).lines();
        let status = lines.next().and_then(Result::ok).unwrap_or_default();
        assert!(status.contains(" 200 "), "the stream answers 200: {status}");
        let (mut id, mut event, mut data) = (None, String::new(), None);
        for line in lines {
            let Ok(line) = line else { return };
            if let Some(value) = line.strip_prefix("id:") {
                id = value.trim().parse::<i64>().ok();
            } else if let Some(value) = line.strip_prefix("event:") {
                event = value.trim().to_owned();
            } else if let Some(value) = line.strip_prefix("data:") {
                data = serde_json::from_str(value.trim()).ok();
            } else if line.is_empty()
                && let (Some(id), Some(data)) = (id.take(), data.take())
                && sender
                    .send(Sse {
                        id,
                        event: std::mem::take(&mut event),
                        data,
                    })
                    .is_err()
            {
                return;
            }
        }
    });
    events
}

/// `airlock serve --store postgres://…` (SPEC §18 with §20): a token minted by the CLI on the
/// database opens the event stream, the server's own worker (woken by NOTIFY) executes a run
/// another process submitted, and the stream delivers that run's events as they commit, in id
/// order, exactly the run's audit trail; nothing is written to a SQLite file.
#[test]
fn serve_on_postgres_streams_the_events_of_a_run_its_worker_executes() {
    use std::io::{BufRead, BufReader};
    let Some(server) = server("serve_on_postgres_streams_events") else {
        return;
    };
    let data = DataDir::on_postgres(&server);
    let minted = data.json("bob", &["tokens", "create", "--label", "pg-e2e"]);
    let token = minted["token"].as_str().expect("the token, shown once");
    let mut serve = data
        .command("operator", &["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve starts");
    let mut first = String::new();
    BufReader::new(serve.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("the listening line");
    let listening: serde_json::Value = serde_json::from_str(&first).expect("JSON line");
    assert_eq!(listening["worker"], true, "{listening}");
    let addr = listening["listening"].as_str().expect("address").to_owned();
    let events = follow_events(&addr, token);

    let run = data.submit(&script(json!([[workspace_write(
        "w1",
        "streamed.txt",
        "hello"
    )]])));
    let started = Instant::now();
    let mut streamed = Vec::new();
    loop {
        let left = Duration::from_secs(60).saturating_sub(started.elapsed());
        let event = events
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no run.completed streamed; got {streamed:?}"));
        let done = event.event == "run.completed" && event.data["run_id"] == run.as_str();
        streamed.push(event);
        if done {
            break;
        }
    }
    assert!(
        streamed.windows(2).all(|w| w[0].id < w[1].id),
        "ids increase along the stream: {streamed:?}"
    );
    assert!(
        streamed.iter().all(|e| e.data["id"] == e.id),
        "the SSE id is the event's id"
    );
    let of_run: Vec<(i64, String)> = streamed
        .iter()
        .filter(|e| e.data["run_id"] == run.as_str())
        .map(|e| (e.id, e.event.clone()))
        .collect();
    let trail: Vec<(i64, String)> = data
        .events(&run)
        .iter()
        .map(|e| {
            (
                e["id"].as_i64().expect("id"),
                e["event_type"].as_str().expect("type").to_owned(),
            )
        })
        .collect();
    assert_eq!(of_run, trail, "the stream carries the run's audit trail");
    assert_eq!(data.run_status(&run), "COMPLETED");
    assert_eq!(data.count("SELECT COUNT(*) FROM api_tokens"), 1);
    assert!(
        !data.path().join("airlock.sqlite3").exists(),
        "no SQLite store beside the PostgreSQL one"
    );
    let output = terminate(serve);
    assert_eq!(
        output.status.code(),
        Some(0),
        "SIGTERM ends serve: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
