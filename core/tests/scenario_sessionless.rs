//! Sessionless conversations (SPEC §22.1, §23): a 2026-07-28 HTTP client has no session, so its
//! conversation is the row of the tuple (tenant, principal, token id, `clientInfo.name`), which
//! any gateway process of the store joins. Two workers on one store stand in for two gateway
//! processes; a mailbox for each process's requests.

mod common;

use std::sync::{Arc, OnceLock};

use airlock_core::connection::answer::CallAnswer;
use airlock_core::connection::live::{
    ClientCall, ConnectionDriver, LiveConnection, LivePlanner, Liveness, MCP_PLANNER_KIND,
    RunTemplate, Ticket, TicketEnd, TicketStatus,
};
use airlock_core::connection::tasks::Tasks;
use airlock_core::conversation::ConversationKey;
use airlock_core::conversation::task::{TaskRefused, TaskView};
use airlock_core::env::Env;
use airlock_core::ids::ApprovalId;
use airlock_core::mem_store::MemStore;
use airlock_core::ports::{Planner, PlannerError, PlannerFactory};
use airlock_core::run::{Limits, Run};
use airlock_core::scope::{Scope, ScopeSet};
use airlock_core::store::Store;
use airlock_core::vocab::TrustLevel;
use airlock_core::vocab::{ApprovalResolution, RunStatus};
use airlock_core::worker::{Worker, WorkerSettings};
use common::*;
use serde_json::json;

/// Plans `mcp` runs from the live connection its process joined.
struct JoinedFactory {
    live: Arc<OnceLock<Arc<LiveConnection>>>,
    store: Arc<MemStore>,
}

impl PlannerFactory for JoinedFactory {
    fn for_run(&self, run: &Run) -> Result<Arc<dyn Planner>, PlannerError> {
        let live = self
            .live
            .get()
            .filter(|_| run.planner_kind == MCP_PLANNER_KIND);
        let live = live.ok_or_else(|| PlannerError("no joined conversation".into()))?;
        Ok(Arc::new(LivePlanner::new(
            Arc::clone(live),
            Arc::clone(&self.store),
        )))
    }
}

/// One gateway process's hold on a sessionless conversation.
struct Process {
    driver: Arc<ConnectionDriver<MemStore>>,
    live: Arc<LiveConnection>,
    run_task: tokio::task::JoinHandle<()>,
    keep_alive: tokio::task::JoinHandle<()>,
}

const IDLE_SECONDS: u32 = 600;

fn template() -> RunTemplate {
    let scopes: ScopeSet = ["test.use", "demo.write"]
        .iter()
        .map(|s| Scope::parse(s).unwrap())
        .collect();
    RunTemplate {
        principal_scopes: scopes,
        origin_trust: TrustLevel::User,
        limits: Limits {
            max_steps: 1000,
            max_tool_calls: 1000,
            deadline_seconds: None,
        },
        conversation_calls: Some(3),
        upstreams: String::new(),
    }
}

fn key(client: &str) -> ConversationKey {
    ConversationKey::of("alice", Some("token-1"), client)
}

/// The tasks of alice in `h`'s tenant.
fn tasks(h: &Harness) -> Tasks<MemStore> {
    Tasks::new(h.env_over(Arc::clone(&h.store)), "acme", "alice")
}

/// Waits (in paused time) until the ticket is parked; returns its run and approval.
async fn parked(ticket: &Ticket) -> (airlock_core::ids::RunId, ApprovalId) {
    for _ in 0..1000 {
        if let TicketStatus::Parked {
            run, approval_id, ..
        } = ticket.status()
        {
            return (run, approval_id);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("never parked: {:?}", ticket.status());
}

/// Polls task `id` (in paused time) until its view satisfies `done`.
async fn polled_until(
    tasks: &Tasks<MemStore>,
    id: &str,
    done: impl Fn(&TaskView) -> bool,
) -> TaskView {
    for _ in 0..1000 {
        let polled = tasks.poll(id).expect("poll").expect("ours");
        if done(&polled.view) {
            return polled.view;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("task {id} never got there");
}

/// Process `id` joins the conversation of `key`.
fn join(h: &Harness, id: &str, key: ConversationKey) -> Process {
    let slot = Arc::new(OnceLock::new());
    let mut env: Env<MemStore> = h.env_over(Arc::clone(&h.store));
    env.planners = Arc::new(JoinedFactory {
        live: Arc::clone(&slot),
        store: Arc::clone(&h.store),
    });
    let mut settings = WorkerSettings::new(id);
    settings.lease_ms = 3_000;
    let worker = Worker::new(env, settings);
    let driver = Arc::new(
        ConnectionDriver::join(worker, "acme", "alice", key, IDLE_SECONDS, true, template())
            .expect("join"),
    );
    let live = Arc::clone(driver.live());
    let _ = slot.set(Arc::clone(&live));
    let running = Arc::clone(&driver);
    let run_task = tokio::spawn(async move {
        let _ = running.run().await;
    });
    let renewing = Arc::clone(&driver);
    let keep_alive = tokio::spawn(async move { renewing.keep_alive().await });
    Process {
        driver,
        live,
        run_task,
        keep_alive,
    }
}

fn call(tool: &str, text: &str) -> ClientCall {
    ClientCall {
        tool: tool.to_owned(),
        arguments: json!({"text": text}),
    }
}

async fn answer(ticket: &Ticket) -> TicketEnd {
    tokio::time::timeout(std::time::Duration::from_secs(600), ticket.ended())
        .await
        .expect("answered in time")
}

async fn executed(process: &Process, request: u64, tool: &str, text: &str) {
    let ticket = process.live.submit(request, call(tool, text));
    assert!(
        matches!(
            answer(&ticket).await,
            TicketEnd::Answered(CallAnswer::Executed { .. })
        ),
        "{tool} executed"
    );
}

fn row(h: &Harness, process: &Process) -> airlock_core::connection::Connection {
    h.store
        .read(|tx| tx.connection(process.driver.connection().id))
        .unwrap()
        .unwrap()
}

/// The trust of each call's `text` in the conversation, in the order its runs were created.
fn trust_of_calls(h: &Harness, process: &Process) -> Vec<Option<TrustLevel>> {
    let session = process.driver.connection().session_id;
    let mut runs: Vec<Run> = h
        .store
        .snapshot()
        .runs
        .into_values()
        .filter(|r| r.session_id == session)
        .collect();
    runs.sort_by_key(|r| (r.created_at, r.id));
    runs.iter()
        .flat_map(|r| h.invocations(r.id))
        .map(|row| row.argument_trust.get("text").copied())
        .collect()
}

/// §22.1, §23 "no session state in memory is needed for correctness": two processes joining
/// one key serve one conversation (one row, one session); an untrusted result answered
/// through one taints the next call sent through the other, and `[limits] max_tool_calls`
/// counts the calls of both.
#[tokio::test(start_paused = true)]
async fn two_processes_serve_one_sessionless_conversation_with_one_taint_and_one_budget() {
    let h = Harness::new();
    let a = join(&h, "gateway-a", key("claude-code"));
    let b = join(&h, "gateway-b", key("claude-code"));
    assert_eq!(a.driver.connection().id, b.driver.connection().id);
    assert_eq!(
        a.driver.connection().session_id,
        b.driver.connection().session_id
    );
    assert!(matches!(a.driver.liveness(), Liveness::Idle { .. }));

    executed(&a, 1, "test.echo", "mine").await;
    assert!(!b.live.conversation_tainted(), "nothing untrusted yet");
    executed(&a, 2, "test.untrusted", "read").await;
    assert!(
        b.live.conversation_tainted(),
        "the read gate of the other process sees the conversation's taint"
    );
    executed(&b, 1, "test.echo", "after").await;
    assert_eq!(
        trust_of_calls(&h, &a),
        [
            Some(TrustLevel::User),
            Some(TrustLevel::User),
            Some(TrustLevel::ExternalUntrusted)
        ],
        "the call through the other process is tainted by the first one's result"
    );
    let spent = b.live.submit(2, call("test.echo", "fourth"));
    match answer(&spent).await {
        TicketEnd::Answered(CallAnswer::Denied { reason_code, .. }) => {
            assert_eq!(reason_code, "conversation.max_tool_calls")
        }
        other => panic!("the fourth call of the conversation is over its 3: {other:?}"),
    }
    assert_eq!(row(&h, &a).call_count, 3);

    // Another client name, or another token, is another conversation.
    let other = join(&h, "gateway-a", key("cursor"));
    assert_ne!(other.driver.connection().id, a.driver.connection().id);
    let other_token = join(
        &h,
        "gateway-b",
        ConversationKey::of("alice", Some("token-2"), "claude-code"),
    );
    assert_ne!(other_token.driver.connection().id, a.driver.connection().id);
    executed(&other, 1, "test.echo", "fresh").await;
    assert_eq!(trust_of_calls(&h, &other), [Some(TrustLevel::User)]);
}

/// §22.1: a process letting go of the conversation (its requests are over) does not end it
/// for the others; it ends after `conversation_idle_seconds` without a request, when the
/// sweep closes it, and the key's next request starts a new, untainted conversation. A request
/// before then keeps it.
#[tokio::test(start_paused = true)]
async fn a_sessionless_conversation_ends_only_after_its_idle_time() {
    let h = Harness::new();
    let a = join(&h, "gateway-a", key("claude-code"));
    executed(&a, 1, "test.untrusted", "read").await;
    let first = a.driver.connection().id;
    let held = row(&h, &a);
    a.driver.disconnect().expect("let go");
    let _ = a.run_task.await;
    a.keep_alive.abort();
    let after = h.store.read(|tx| tx.connection(first)).unwrap().unwrap();
    assert!(after.is_open(), "letting go closes nothing");
    assert_eq!(after, held, "nor changes the row");

    let sweeper = h.worker("sweeper");
    tokio::time::sleep(std::time::Duration::from_secs(u64::from(IDLE_SECONDS) - 60)).await;
    sweeper.sweep_connections().await.expect("sweep");
    let b = join(&h, "gateway-b", key("claude-code"));
    assert_eq!(b.driver.connection().id, first, "within the idle time");
    // A call some time after the join: its request, not the join, sets the horizon.
    tokio::time::sleep(std::time::Duration::from_secs(50)).await;
    executed(&b, 1, "test.echo", "still tainted").await;
    assert_eq!(
        trust_of_calls(&h, &b).last().copied().flatten(),
        Some(TrustLevel::ExternalUntrusted)
    );
    tokio::time::sleep(std::time::Duration::from_secs(u64::from(IDLE_SECONDS) - 30)).await;
    sweeper.sweep_connections().await.expect("sweep");
    assert!(
        row(&h, &b).is_open(),
        "the call pushed its end past the join's"
    );

    tokio::time::sleep(std::time::Duration::from_secs(40)).await;
    sweeper.sweep_connections().await.expect("sweep");
    assert!(!row(&h, &b).is_open(), "idle for its whole idle time");
    assert!(
        !b.driver.touch().expect("touch"),
        "its holder learns it ended"
    );

    let c = join(&h, "gateway-a", key("claude-code"));
    assert_ne!(c.driver.connection().id, first, "a new conversation");
    executed(&c, 1, "test.echo", "new").await;
    assert_eq!(trust_of_calls(&h, &c), [Some(TrustLevel::User)]);
}

/// §22.3 item 1: a call answered as a task executes once approved, with no request waiting
/// (the task stands for it), and its poll reads the result from the store; another principal
/// (or an unknown id) learns nothing of it.
#[tokio::test(start_paused = true)]
async fn a_task_executes_once_approved_with_no_request_waiting() {
    let h = Harness::new();
    let a = join(&h, "gateway-a", key("claude-code"));
    let ticket = a.live.submit(1, call("test.send", "by task"));
    let (run, approval) = parked(&ticket).await;
    let desk = tasks(&h);
    let id = desk.open(run).expect("task");
    a.live.adopt(run);
    assert!(a.live.detach(1), "the request is answered with the task");
    assert!(matches!(
        desk.poll(&id).unwrap().unwrap().view,
        TaskView::Waiting { .. }
    ));
    let mallory = Tasks::new(h.env_over(Arc::clone(&h.store)), "acme", "mallory");
    assert!(matches!(
        mallory.poll(&id).unwrap(),
        Err(TaskRefused::Unknown(_))
    ));
    assert!(matches!(
        desk.poll("tsk_guess").unwrap(),
        Err(TaskRefused::Unknown(_))
    ));

    h.control
        .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .expect("approve");
    let view = polled_until(&desk, &id, |v| matches!(v, TaskView::Answered(_))).await;
    assert!(
        matches!(view, TaskView::Answered(CallAnswer::Executed { .. })),
        "{view:?}"
    );
    assert_eq!(h.ledger.count("test.send"), 1, "executed once");
    assert_eq!(h.run(run).status(), RunStatus::Completed);
}

/// §22.3 item 1 and §23: the process that answered the task is killed while it waits; once
/// approved, a poll through another process of the store finds it adoptable, adopts it, and the
/// call executes exactly once, even when a third process adopts it at the same time.
#[tokio::test(start_paused = true)]
async fn a_task_whose_process_died_executes_once_through_the_next_poll() {
    let h = Harness::new();
    let a = join(&h, "gateway-a", key("claude-code"));
    let ticket = a.live.submit(1, call("test.send", "survives"));
    let (run, approval) = parked(&ticket).await;
    let desk = tasks(&h);
    let id = desk.open(run).expect("task");
    a.live.adopt(run);
    a.live.detach(1);
    a.run_task.abort();
    a.keep_alive.abort();

    h.control
        .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .expect("approve");
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(h.ledger.count("test.send"), 0, "nobody drives it yet");
    let polled = desk.poll(&id).unwrap().unwrap();
    assert!(polled.adoptable, "{polled:?}");
    let b = join(&h, "gateway-b", key("claude-code"));
    let c = join(&h, "gateway-c", key("claude-code"));
    b.live.adopt(run);
    c.live.adopt(run);
    let view = polled_until(&desk, &id, |v| matches!(v, TaskView::Answered(_))).await;
    assert!(
        matches!(view, TaskView::Answered(CallAnswer::Executed { .. })),
        "{view:?}"
    );
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(h.ledger.count("test.send"), 1, "exactly once");
    assert!(!desk.poll(&id).unwrap().unwrap().adoptable);
}

/// §22.3 item 1: `tasks/cancel` is a client cancel of the task's run (§8.5): another principal
/// (or a guessed id) cancels nothing; the owner's cancel ends the waiting call without sending
/// it, the task reads `cancelled`, the approval no longer moves it, and a second cancel is told
/// the task has ended.
#[tokio::test(start_paused = true)]
async fn a_task_cancel_ends_its_call_and_only_its_principal_may_cancel() {
    let h = Harness::new();
    let a = join(&h, "gateway-a", key("claude-code"));
    let ticket = a.live.submit(1, call("test.send", "cancelled"));
    let (run, approval) = parked(&ticket).await;
    let desk = tasks(&h);
    let id = desk.open(run).expect("task");
    a.live.adopt(run);
    a.live.detach(1);

    let mallory = Tasks::new(h.env_over(Arc::clone(&h.store)), "acme", "mallory");
    assert!(matches!(
        mallory.cancel(&id).unwrap(),
        Err(TaskRefused::Unknown(_))
    ));
    assert!(matches!(
        desk.cancel("tsk_guess").unwrap(),
        Err(TaskRefused::Unknown(_))
    ));
    assert!(!h.run(run).status().is_terminal(), "nothing was cancelled");

    assert_eq!(desk.cancel(&id).unwrap(), Ok(run));
    let view = polled_until(&desk, &id, |v| !matches!(v, TaskView::Waiting { .. })).await;
    assert_eq!(view, TaskView::Cancelled);
    assert_eq!(h.run(run).status(), RunStatus::Cancelled);
    let late = h
        .control
        .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(h.ledger.count("test.send"), 0, "never sent ({late:?})");
    assert!(matches!(
        desk.cancel(&id).unwrap(),
        Err(TaskRefused::Ended(_))
    ));
}
