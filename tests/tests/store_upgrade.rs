//! A store written by the previous build (schema M1, checkpoints carrying the whole history)
//! opens with this build, migrates in place to M2 (SPEC §17.2: step records), and every run it
//! holds continues to its end: the parked run resumes on approval, the queued run runs, the run
//! interrupted mid-step is reclaimed and finishes its checkpointed step without re-sending the
//! effect it already sent, and the completed run's audit trail still reads.
//! The fixture and how it was made: `tests/fixtures/store-v1/README.md`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use airlock_e2e::airlock_bin;
use serde_json::Value;

const PARKED: &str = "5d0781c3-d0c2-4802-9b25-195855ae1a8a";
const PARKED_APPROVAL: &str = "f68bacdd-a63e-43f7-9059-53079a8b5e31";
const INTERRUPTED: &str = "7913faf9-1031-401f-8278-9cf2855d2848";
const COMPLETED: &str = "7f4517a3-6274-4af3-9a8a-df73dcb63651";
const QUEUED: &str = "b2298aed-6023-4f67-9416-e68e51614934";

fn fixture() -> PathBuf {
    fixture_named("store-v1")
}

fn fixture_named(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Copies a directory tree (the fixture is never opened in place).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read fixture dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy fixture file");
        }
    }
}

struct Upgraded {
    _dir: tempfile::TempDir,
    data: PathBuf,
    /// The policy this build runs with.
    policy: PathBuf,
}

impl Upgraded {
    /// The fixture under the policy it was made with.
    fn new() -> Upgraded {
        Upgraded::of(&fixture())
    }

    /// The fixture at `fixture` under the policy it was made with.
    fn of(fixture: &Path) -> Upgraded {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        copy_tree(&fixture.join("data"), &data);
        Upgraded {
            _dir: dir,
            data,
            policy: fixture.join("policy"),
        }
    }

    /// The fixture under an upgraded policy: its profile with this build's shipped hardline
    /// file (v2), as an operator upgrading the binary gets: another `policy_version`.
    fn with_this_builds_hardline() -> Upgraded {
        let mut upgraded = Upgraded::new();
        let policy = upgraded._dir.path().join("policy");
        std::fs::create_dir_all(&policy).expect("policy dir");
        std::fs::copy(
            fixture().join("policy/default.toml"),
            policy.join("default.toml"),
        )
        .expect("profile");
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/hardline.toml");
        std::fs::copy(shipped, policy.join("hardline.toml")).expect("hardline");
        upgraded.policy = policy;
        upgraded
    }

    fn run(&self, principal: &str, args: &[&str]) -> Output {
        Command::new(airlock_bin())
            .arg("--data-dir")
            .arg(&self.data)
            .arg("--policy-dir")
            .arg(&self.policy)
            .args(["--tenant", "acme", "--principal", principal])
            .args(args)
            .env_remove("AIRLOCK_CRASH_AT")
            .stdin(Stdio::null())
            .output()
            .expect("airlock runs")
    }

    fn json(&self, principal: &str, args: &[&str]) -> Value {
        let output = self.run(principal, args);
        assert_eq!(
            output.status.code(),
            Some(0),
            "airlock {args:?}: stdout {} stderr {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("one JSON value")
    }

    fn worker_until_idle(&self) {
        let output = self.run(
            "operator",
            &["worker", "--until-idle", "--lease-ms", "1000"],
        );
        assert_eq!(
            output.status.code(),
            Some(0),
            "worker: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn status(&self, run: &str) -> String {
        self.json("alice", &["runs", "show", run])["status"]
            .as_str()
            .expect("status")
            .to_owned()
    }

    fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.data.join("airlock.sqlite3")).expect("open the store")
    }

    fn outbox_keys(&self) -> Vec<String> {
        std::fs::read_to_string(self.data.join("outbox.jsonl"))
            .expect("outbox")
            .lines()
            .map(|line| {
                let record: Value = serde_json::from_str(line).expect("an outbox record");
                record["idempotency_key"].as_str().expect("key").to_owned()
            })
            .collect()
    }

    fn approve_pending_of(&self, run: &str) {
        let page = self.json("alice", &["approvals", "list", "--run", run]);
        let items = page["items"].as_array().expect("items");
        assert_eq!(items.len(), 1, "one pending approval for {run}: {page}");
        let id = items[0]["id"].as_str().expect("id");
        let resolved = self.json("bob", &["approvals", "approve", id, "--reason", "upgrade"]);
        assert_eq!(resolved["state"], "applied");
    }
}

/// The four runs each fixture holds (see the fixtures' READMEs).
struct FixtureRuns {
    parked: &'static str,
    interrupted: &'static str,
    completed: &'static str,
    queued: &'static str,
}

const V1_RUNS: FixtureRuns = FixtureRuns {
    parked: PARKED,
    interrupted: INTERRUPTED,
    completed: COMPLETED,
    queued: QUEUED,
};

/// `store-v12`'s runs.
const V12_RUNS: FixtureRuns = FixtureRuns {
    parked: "301c0f3f-dfa4-4e18-9662-5a82deff8ee8",
    interrupted: "55c000a3-9296-497b-8dce-e2077209f3ec",
    completed: "4e966124-a3c1-483b-90bd-be94b190da8b",
    queued: "c56865be-f663-448e-b89b-319c2548f89c",
};

impl Upgraded {
    /// Approves the parked run and lets a worker finish it and reclaim the interrupted one, then
    /// the queued run's own park the same way; every run ends COMPLETED, and every effect went
    /// out exactly once: the fixture's `e1` not again, `c4` of the parked and queued runs once.
    fn drive_every_run_to_its_end(&self, runs: &FixtureRuns, fixture_outbox: &[String]) {
        self.approve_pending_of(runs.parked);
        self.worker_until_idle();
        assert_eq!(self.status(runs.parked), "COMPLETED");
        assert_eq!(self.status(runs.interrupted), "COMPLETED");
        assert_eq!(self.status(runs.queued), "WAITING_FOR_APPROVAL");
        self.approve_pending_of(runs.queued);
        self.worker_until_idle();
        assert_eq!(self.status(runs.queued), "COMPLETED");
        assert_eq!(self.status(runs.completed), "COMPLETED");

        let keys = self.outbox_keys();
        assert_eq!(keys.len(), 3, "{keys:?}");
        assert_eq!(
            keys[0], fixture_outbox[0],
            "the fixture's line is untouched"
        );
        let mut unique = keys.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 3, "no key twice: {keys:?}");
    }
}

/// The run's recorded steps, in order.
fn steps(db: &rusqlite::Connection, run: &str) -> Vec<i64> {
    let mut statement = db
        .prepare("SELECT step FROM step_records WHERE run_id = ?1 ORDER BY step")
        .expect("prepare");
    statement
        .query_map([run], |r| r.get(0))
        .expect("query")
        .map(|s| s.expect("step"))
        .collect()
}

#[test]
fn a_store_of_the_previous_build_upgrades_in_place_and_its_runs_finish() {
    let store = Upgraded::new();
    let fixture_outbox = store.outbox_keys();
    assert_eq!(fixture_outbox.len(), 1, "the fixture sent e1 once");

    // Opening migrates: the parked approval is listed as before.
    let page = store.json("alice", &["approvals", "list"]);
    let ids: Vec<&str> = page["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["id"].as_str())
        .collect();
    assert_eq!(ids, [PARKED_APPROVAL]);
    let db = store.db();
    let version: i64 = db
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("user_version");
    assert_eq!(
        version,
        airlock_sqlite::SCHEMA_VERSION,
        "migrated through M2 (step records) to this build's schema"
    );
    // The history of each run's latest checkpoint became its step records.
    assert_eq!(steps(&db, PARKED), [1, 2]);
    assert_eq!(steps(&db, INTERRUPTED), [1]);
    assert_eq!(steps(&db, COMPLETED), [1, 2]);
    assert!(steps(&db, QUEUED).is_empty());
    let refs: String = db
        .query_row(
            "SELECT results FROM step_records WHERE run_id = ?1 AND step = 2",
            [PARKED],
            |r| r.get(0),
        )
        .expect("step 2 of the parked run");
    let refs: Value = serde_json::from_str(&refs).expect("result references");
    assert_eq!(refs.as_array().map(Vec::len), Some(2), "c2 and c3: {refs}");
    drop(db);

    // The parked run resumes on approval; the interrupted one is reclaimed and finishes its
    // checkpointed step 2; the queued one runs to its own park.
    store.drive_every_run_to_its_end(&V1_RUNS, &fixture_outbox);

    // The runs carry on from their old step numbers: the interrupted run's step 2 came from
    // its old PENDING (not planned again), and its final FINAL counted three steps.
    let db = store.db();
    let (step_count, calls): (i64, i64) = db
        .query_row(
            "SELECT step_count, tool_call_count FROM runs WHERE id = ?1",
            [INTERRUPTED],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("the interrupted run");
    assert_eq!((step_count, calls), (4, 3));
    assert_eq!(steps(&db, INTERRUPTED), [1, 2, 3]);
    let rows: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM tool_invocations WHERE run_id = ?1 AND call_id = 'm1'",
            [INTERRUPTED],
            |r| r.get(0),
        )
        .expect("m1 rows");
    assert_eq!(rows, 1, "step 2's call has exactly one row");

    // The completed run's audit trail still reads, ending where it ended.
    let output = store.run("alice", &["runs", "events", COMPLETED]);
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8_lossy(&output.stdout);
    let last: Value = serde_json::from_str(text.lines().last().expect("events")).expect("JSON");
    assert_eq!(last["event_type"], "run.completed");

    // Replay (issue 32): the fixture's calls predate the target kind (M11) and are counted as
    // not decided again; the calls made since are decided again, alike under the same policy.
    let db = store.db();
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).expect(sql) };
    let old = count("SELECT COUNT(*) FROM tool_invocations WHERE target_kind IS NULL");
    let new = count("SELECT COUNT(*) FROM tool_invocations WHERE target_kind IS NOT NULL");
    drop(db);
    assert!(old > 0 && new > 0, "old {old}, new {new}");
    let replayed = store.json("operator", &["policy", "replay", "--json"]);
    assert_eq!(replayed["compared"], new, "{replayed}");
    assert_eq!(replayed["changed"], 0, "{replayed}");
    assert_eq!(replayed["skipped"]["no_target_kind"], old, "{replayed}");
}

/// SPEC §22.5 (issue 28, item 6): the fixture's parked approval, requested under the previous
/// build's rules, opened by this build with its v2 hardline file (a new `policy_version`):
/// `approvals get` says on stderr that the rules changed, a reviewer approves, and since the rules in force
/// still ask for the same approval (same reason, risk no higher) the call runs, once.
#[test]
fn an_approval_pending_across_an_upgrade_of_the_rules_still_runs_its_call_once() {
    let store = Upgraded::with_this_builds_hardline();
    let output = store.run("bob", &["approvals", "get", PARKED_APPROVAL]);
    assert_eq!(output.status.code(), Some(0));
    let shown: Value = serde_json::from_slice(&output.stdout).expect("the approval");
    let requested_under = shown["policy_version"]
        .as_str()
        .expect("policy_version")
        .to_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let note = stderr
        .lines()
        .find_map(|l| l.strip_prefix("note: "))
        .unwrap_or_else(|| panic!("no note: {stderr}"));
    assert!(
        note.starts_with(&format!("requested under {requested_under}; in force now ")),
        "{note}"
    );
    assert!(
        !note.ends_with(&requested_under),
        "the version changed: {note}"
    );
    let before = store.outbox_keys();
    store.approve_pending_of(PARKED);
    store.worker_until_idle();
    assert_eq!(store.status(PARKED), "COMPLETED");
    let output = store.run("alice", &["runs", "events", PARKED]);
    let events = String::from_utf8_lossy(&output.stdout);
    assert!(
        !events.contains("policy.revalidation.escalated"),
        "{events}"
    );
    assert!(!events.contains("approval.invalidated"), "{events}");
    let after = store.outbox_keys();
    assert_eq!(after.len(), before.len() + 1, "c4 was sent once: {after:?}");
}

/// Issue 33: a store of the build before the durable writer's schema changes (M12:
/// `tests/fixtures/store-v12/README.md`) migrates in place through M13 (no triggers on the hot
/// path), M14 (vocabulary checks as chains) and M15 (run inputs in their own table), and its
/// runs finish as the v1 fixture's do: every effect once, every session's events numbered on
/// from where the old trigger left them, without a gap or a repeat.
#[test]
fn a_store_of_the_release_before_the_durable_writer_upgrades_and_its_runs_finish() {
    let store = Upgraded::of(&fixture_named("store-v12"));
    let fixture_outbox = store.outbox_keys();
    assert_eq!(fixture_outbox.len(), 1, "the fixture sent e1 once");
    let before: i64 = store
        .db()
        .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
        .expect("events");

    assert_eq!(store.status(V12_RUNS.parked), "WAITING_FOR_APPROVAL");
    let db = store.db();
    let version: i64 = db
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("user_version");
    assert_eq!(version, airlock_sqlite::SCHEMA_VERSION, "migrated from M12");
    let inputs: i64 = db
        .query_row("SELECT COUNT(*) FROM run_inputs", [], |r| r.get(0))
        .expect("run_inputs");
    assert_eq!(inputs, 4, "every run's input moved to run_inputs");
    drop(db);

    store.drive_every_run_to_its_end(&V12_RUNS, &fixture_outbox);

    let db = store.db();
    let after: i64 = db
        .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
        .expect("events");
    assert!(
        after > before,
        "the runs appended events: {before} -> {after}"
    );
    let mut statement = db
        .prepare("SELECT session_id, sequence FROM events ORDER BY session_id, sequence")
        .expect("prepare");
    let mut expected: Option<(String, i64)> = None;
    for row in statement
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .expect("events")
    {
        let (session, sequence) = row.expect("event");
        let next = match &expected {
            Some((last_session, last)) if *last_session == session => last + 1,
            _ => 1,
        };
        assert_eq!(
            sequence, next,
            "session {session}: sequences 1, 2, … without a gap"
        );
        expected = Some((session, sequence));
    }
    drop(statement);
    drop(db);

    let output = store.run("alice", &["runs", "events", V12_RUNS.completed]);
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8_lossy(&output.stdout);
    let last: Value = serde_json::from_str(text.lines().last().expect("events")).expect("JSON");
    assert_eq!(last["event_type"], "run.completed");
}
