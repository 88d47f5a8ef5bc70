//! Scenarios of a live client connection (SPEC §19.1, §19.3, §19.4) on core alone: a mailbox
//! stands in for the MCP client, the test tools for the upstream servers.

mod common;

use std::sync::Arc;

use airlock_core::connection::ConnectionStatus;
use airlock_core::connection::answer::CallAnswer;
use airlock_core::connection::live::{
    ANSWERED_MESSAGE, CONVERSATION_CALLS_SPENT, ClientCall, ConnectionDriver, LiveConnection,
    LivePlanner, MCP_PLANNER_KIND, RunTemplate, Ticket, TicketEnd, TicketStatus,
};
use airlock_core::env::Env;
use airlock_core::ids::{ApprovalId, ConnectionId, RunId};
use airlock_core::mem_store::MemStore;
use airlock_core::ports::{Clock, Planner, PlannerError, PlannerFactory};
use airlock_core::run::{Limits, Run, RunState};
use airlock_core::scope::{Scope, ScopeSet};
use airlock_core::store::Store;
use airlock_core::vocab::{ApprovalResolution, InvocationStatus, RunStatus, TrustLevel};
use airlock_core::worker::{Worker, WorkerSettings};
use common::*;
use serde_json::json;

/// Plans `mcp` runs from the one live connection of the test.
struct LiveFactory<S: Store = MemStore> {
    live: Arc<LiveConnection>,
    store: Arc<S>,
}

impl<S: Store + 'static> PlannerFactory for LiveFactory<S> {
    fn for_run(&self, run: &Run) -> Result<Arc<dyn Planner>, PlannerError> {
        if run.planner_kind != MCP_PLANNER_KIND {
            return Err(PlannerError("not an mcp run".into()));
        }
        Ok(Arc::new(LivePlanner::new(
            Arc::clone(&self.live),
            Arc::clone(&self.store),
        )))
    }
}

struct Gateway {
    driver: Arc<ConnectionDriver<MemStore>>,
    live: Arc<LiveConnection>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Gateway {
    /// The process dies: its tasks are dropped where they stand.
    fn kill(self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

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
        conversation_calls: None,
        upstreams: String::new(),
    }
}

/// A gateway process on `h`'s store: its worker, one connection and its driver (running).
fn gateway(h: &Harness, id: &str) -> Gateway {
    gateway_with(h, id, template())
}

fn gateway_with(h: &Harness, id: &str, template: RunTemplate) -> Gateway {
    let live = LiveConnection::new(ConnectionId(uuid::Uuid::new_v4()), true);
    let mut env: Env<MemStore> = h.env_over(Arc::clone(&h.store));
    env.planners = Arc::new(LiveFactory {
        live: Arc::clone(&live),
        store: Arc::clone(&h.store),
    });
    let mut settings = WorkerSettings::new(id);
    settings.lease_ms = 3_000;
    let worker = Worker::new(env, settings);
    let driver = Arc::new(
        ConnectionDriver::open(
            Arc::clone(&worker),
            Arc::clone(&live),
            "acme",
            "alice",
            template,
        )
        .expect("open"),
    );
    let running = Arc::clone(&driver);
    let run_task = tokio::spawn(async move {
        let _ = running.run().await;
    });
    let renewing = Arc::clone(&driver);
    let renew_task = tokio::spawn(async move { renewing.keep_alive().await });
    Gateway {
        driver,
        live,
        tasks: vec![run_task, renew_task],
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

/// Waits (in paused time) until the ticket is parked; returns its approval.
async fn parked(ticket: &Ticket) -> ApprovalId {
    for _ in 0..1000 {
        if let TicketStatus::Parked { approval_id, .. } = ticket.status() {
            return approval_id;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("never parked: {:?}", ticket.status());
}

fn session_runs(h: &Harness, g: &Gateway) -> Vec<Run> {
    runs_in(h, g.driver.connection().session_id)
}

fn runs_in(h: &Harness, session: airlock_core::ids::SessionId) -> Vec<Run> {
    h.store
        .snapshot()
        .runs
        .into_values()
        .filter(|r| r.session_id == session)
        .collect()
}

/// Every call of the conversation, in the order its runs were created (one call per run).
fn conversation_calls(h: &Harness, g: &Gateway) -> Vec<airlock_core::invocation::Invocation> {
    let mut runs = session_runs(h, g);
    runs.sort_by_key(|r| (r.created_at, r.id));
    runs.iter().flat_map(|r| h.invocations(r.id)).collect()
}

fn conversation(h: &Harness, g: &Gateway) -> airlock_core::connection::Connection {
    h.store
        .read(|tx| tx.connection(g.driver.connection().id))
        .unwrap()
        .unwrap()
}

async fn settle_for(seconds: u64) {
    tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
}

/// A reviewer approves `approval`; the request `waiting` is answered with the result, the
/// effect (`test.send`) is done once and the call's run `run` completes.
async fn approved_runs_once(h: &Harness, approval: ApprovalId, waiting: &Ticket, run: RunId) {
    h.control
        .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .expect("approve");
    assert!(matches!(
        answer(waiting).await,
        TicketEnd::Answered(CallAnswer::Executed { .. })
    ));
    assert_eq!(h.ledger.count("test.send"), 1, "the effect, once");
    assert_eq!(h.run(run).status(), RunStatus::Completed);
}

/// A gateway whose conversation deadline (30 s) bounds an approval's expiry (§10.1), with one
/// `test.send` of "hello" parked for approval: the gateway, the call's ticket and its approval.
async fn parked_with_a_30_s_deadline(h: &Harness) -> (Gateway, Ticket, ApprovalId) {
    let mut short = template();
    short.limits.deadline_seconds = Some(30);
    let g = gateway_with(h, "gateway-a", short);
    let ticket = g.live.submit(1, call("test.send", "hello"));
    let approval = parked(&ticket).await;
    (g, ticket, approval)
}

/// A client of a new gateway sends `tool` with `text`, waits until it parks, and disconnects
/// (SPEC §22.3: the approval stays pending). Returns the approval.
async fn parked_and_left(h: &Harness, tool: &str, text: &str) -> ApprovalId {
    let g = gateway(h, "gateway-a");
    let first = g.live.submit(1, call(tool, text));
    let approval = parked(&first).await;
    g.driver.disconnect().expect("disconnect");
    assert_eq!(answer(&first).await, TicketEnd::Dropped);
    approval
}

/// §22.2: every `tools/call` is its own run of one step with one call, answered from what
/// committed; the conversation counts its calls.
#[tokio::test(start_paused = true)]
async fn each_call_is_its_own_run_answered_with_its_result() {
    let h = Harness::new();
    let g = gateway(&h, "gateway-a");
    let first = g.live.submit(1, call("test.echo", "one"));
    let TicketEnd::Answered(CallAnswer::Executed { structured, .. }) = answer(&first).await else {
        panic!("executed");
    };
    assert_eq!(structured, json!({"text": "one"}));
    // The answer follows the committed FINISH: the row is closed when the client hears of it.
    let runs = session_runs(&h, &g);
    assert_eq!(runs.len(), 1);
    let rows = h.invocations(runs[0].id);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].call_id, "r1");
    assert_eq!(rows[0].status, InvocationStatus::Succeeded);
    let second = g.live.submit(2, call("test.echo", "two"));
    assert!(matches!(
        answer(&second).await,
        TicketEnd::Answered(CallAnswer::Executed { .. })
    ));
    settle_for(1).await;
    let runs = session_runs(&h, &g);
    assert_eq!(runs.len(), 2, "a run per call");
    for run in &runs {
        assert_eq!(
            run.state,
            RunState::Completed {
                final_message: ANSWERED_MESSAGE.to_owned()
            }
        );
        assert_eq!(h.invocations(run.id)[0].call_id, "r1");
    }
    assert_eq!(conversation(&h, &g).call_count, 2);
    g.driver.disconnect().expect("disconnect");
    settle_for(5).await;
    assert_eq!(conversation(&h, &g).status(), ConnectionStatus::Closed);
}

/// §22.2: a call waiting for approval delays no other call of its conversation.
#[tokio::test(start_paused = true)]
async fn a_parked_write_delays_no_read_of_the_same_conversation() {
    let h = Harness::new();
    let g = gateway(&h, "gateway-a");
    let write = g.live.submit(1, call("test.send", "hello"));
    parked(&write).await;
    let read = g.live.submit(2, call("test.echo", "meanwhile"));
    let asked = h.clock.now();
    assert!(matches!(
        answer(&read).await,
        TicketEnd::Answered(CallAnswer::Executed { .. })
    ));
    let waited = h.clock.now().as_micros() - asked.as_micros();
    assert!(
        waited < 2_000_000,
        "answered within a poll or two, not after the write: {waited} µs"
    );
    assert!(
        write.end().is_none(),
        "the write still waits for its approval"
    );
}

/// §22.3: a client's cancel (or a host's timeout) of a parked call leaves its approval
/// pending; the identical call sent again binds to the parked run, and once approved it is
/// answered with the result, the effect done once.
#[tokio::test(start_paused = true)]
async fn a_cancelled_parked_call_keeps_its_approval_and_the_identical_call_binds_to_it() {
    let h = Harness::new();
    let g = gateway(&h, "gateway-a");
    let first = g.live.submit(7, call("test.send", "hello"));
    let approval = parked(&first).await;
    g.live.cancel(7);
    assert_eq!(answer(&first).await, TicketEnd::Dropped);
    settle_for(2).await;
    let runs = session_runs(&h, &g);
    assert_eq!(h.run(runs[0].id).status(), RunStatus::WaitingForApproval);
    // The reviewer approves after the host gave up: nothing is sent while no request waits.
    h.control
        .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .expect("the approval is still pending");
    settle_for(5).await;
    assert_eq!(h.ledger.count("test.send"), 0, "no request waits for it");
    // The host retries the same call: it binds to the approved run, no second approval. Its
    // ticket is never `Parked` (a host without a progressToken would be told "needs approval"
    // and detached while the approved call runs).
    let retry = g.live.submit(8, call("test.send", "hello"));
    while retry.end().is_none() {
        assert!(
            !matches!(retry.status(), TicketStatus::Parked { .. }),
            "an approved call's request is not parked"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(matches!(
        answer(&retry).await,
        TicketEnd::Answered(CallAnswer::Executed { .. })
    ));
    assert_eq!(h.ledger.count("test.send"), 1);
    assert_eq!(session_runs(&h, &g).len(), 1, "bound, not a new run");
    // A different call is a new run.
    let other = g.live.submit(9, call("test.send", "other"));
    parked(&other).await;
    assert_eq!(session_runs(&h, &g).len(), 2);
}

/// §22.3, found in review: a retry bound to an approved call is never told that its call waits
/// for approval while that call runs (a host without a progressToken would be answered "needs
/// approval" and detached, and the result lost).
#[tokio::test(start_paused = true)]
async fn a_retry_bound_to_an_approved_call_is_never_told_it_waits_while_it_runs() {
    let (h, gate) = gated_write_harness_as(airlock_core::vocab::SideEffectClass::ExternalWrite);
    let g = gateway(&h, "gateway-a");
    let write = || ClientCall {
        tool: "test.gated_write".into(),
        arguments: json!({"path": "notes/a.txt", "text": "x"}),
    };
    let first = g.live.submit(1, write());
    let approval = parked(&first).await;
    g.live.cancel(1);
    assert_eq!(answer(&first).await, TicketEnd::Dropped);
    h.control
        .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .unwrap();
    settle_for(2).await;
    let retry = g.live.submit(2, write());
    gate.entered.notified().await;
    settle_for(1).await;
    assert!(
        !matches!(retry.status(), TicketStatus::Parked { .. }),
        "the approved call runs; its request is not parked: {:?}",
        retry.status()
    );
    gate.release.notify_one();
    assert!(matches!(
        answer(&retry).await,
        TicketEnd::Answered(CallAnswer::Executed { .. })
    ));
    assert_eq!(h.ledger.count("test.gated_write"), 1);
}

/// §22.3: an approved call that no request claims before its approval's expiry is cancelled,
/// never sent.
#[tokio::test(start_paused = true)]
async fn an_approved_call_no_request_claims_is_cancelled_at_its_expiry() {
    let h = Harness::new();
    let g = gateway(&h, "gateway-a");
    let first = g.live.submit(7, call("test.send", "hello"));
    let approval = parked(&first).await;
    let TicketStatus::Parked { expires_at, .. } = first.status() else {
        panic!("parked")
    };
    assert!(g.live.detach(7), "answered at once: detached");
    h.control
        .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .unwrap();
    let wait = expires_at.as_micros() - h.clock.now().as_micros() + 2_000_000;
    settle_for(u64::try_from(wait / 1_000_000).unwrap() + 1).await;
    let runs = session_runs(&h, &g);
    assert_eq!(h.run(runs[0].id).status(), RunStatus::Cancelled);
    assert_eq!(h.ledger.count("test.send"), 0);
    // After that, the same call asks again.
    let again = g.live.submit(8, call("test.send", "hello"));
    parked(&again).await;
    assert_eq!(session_runs(&h, &g).len(), 2);
}

/// §22.1: `[limits]` count per conversation, across its call runs.
#[tokio::test(start_paused = true)]
async fn the_conversations_limits_count_calls_across_its_runs() {
    let h = Harness::new();
    let mut limited = template();
    limited.conversation_calls = Some(2);
    let g = gateway_with(&h, "gateway-a", limited);
    for key in 1..=2 {
        let ticket = g.live.submit(key, call("test.echo", "x"));
        assert!(matches!(
            answer(&ticket).await,
            TicketEnd::Answered(CallAnswer::Executed { .. })
        ));
    }
    let third = g.live.submit(3, call("test.echo", "x"));
    match answer(&third).await {
        TicketEnd::Answered(CallAnswer::Denied { reason_code, .. }) => {
            assert_eq!(reason_code, CONVERSATION_CALLS_SPENT)
        }
        other => panic!("refused by the conversation's limit: {other:?}"),
    }
    assert_eq!(session_runs(&h, &g).len(), 2, "no run for the refused call");
}

#[tokio::test(start_paused = true)]
async fn a_parked_write_is_answered_after_another_process_approves_it() {
    let h = Harness::new();
    let g = gateway(&h, "gateway-a");
    let ticket = g.live.submit(1, call("test.send", "hello"));
    let approval = parked(&ticket).await;
    assert_eq!(h.ledger.count("test.send"), 0, "nothing sent while parked");
    // Another process: the control service over the same store.
    h.control
        .resolve(
            &h.bob(),
            approval,
            ApprovalResolution::ApproveOnce,
            Some("ok"),
        )
        .await
        .expect("approve");
    assert!(matches!(
        answer(&ticket).await,
        TicketEnd::Answered(CallAnswer::Executed { .. })
    ));
    assert_eq!(h.ledger.count("test.send"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_reviewer_denial_is_answered_with_the_reviewers_reason() {
    let h = Harness::new();
    let g = gateway(&h, "gateway-a");
    let ticket = g.live.submit(1, call("test.send", "hello"));
    let approval = parked(&ticket).await;
    h.control
        .resolve(
            &h.bob(),
            approval,
            ApprovalResolution::Deny,
            Some("not today"),
        )
        .await
        .expect("deny");
    assert_eq!(
        answer(&ticket).await,
        TicketEnd::Answered(CallAnswer::ReviewerDenied {
            reason: Some("not today".to_owned())
        })
    );
    assert_eq!(h.ledger.count("test.send"), 0);
}

/// §22.3: a client that left keeps its parked call's approval pending; approved and claimed by
/// no request before the approval expires, the call is cancelled by the orphan sweep, never
/// sent.
#[tokio::test(start_paused = true)]
async fn an_approved_call_of_a_client_that_left_is_never_sent() {
    let h = Harness::new();
    let (g, ticket, approval) = parked_with_a_30_s_deadline(&h).await;
    g.driver.disconnect().expect("disconnect");
    assert_eq!(answer(&ticket).await, TicketEnd::Dropped);
    h.control
        .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .expect("the approval outlived the client");
    let run = session_runs(&h, &g)[0].id;
    let sweeper = h.worker("sweeper");
    sweeper.sweep_connections().await.expect("sweep");
    assert_eq!(
        h.run(run).status(),
        RunStatus::Queued,
        "approved and unexpired: it waits for an identical call sent again"
    );
    settle_for(31).await;
    sweeper.sweep_connections().await.expect("sweep");
    assert_eq!(h.run(run).status(), RunStatus::Cancelled);
    assert_eq!(
        h.ledger.count("test.send"),
        0,
        "the approved call was never sent"
    );
}

/// §22.3: a client's disconnect no longer cancels its parked call's approval: the run stays
/// parked, and the identical call sent on a new connection (the host reconnected) binds to it,
/// asks nothing again, and is answered once approved, the effect done once.
#[tokio::test(start_paused = true)]
async fn a_disconnect_keeps_the_approval_and_the_identical_call_on_a_new_connection_binds() {
    let h = Harness::new();
    let g = gateway(&h, "gateway-a");
    let first = g.live.submit(1, call("test.send", "hello"));
    let approval = parked(&first).await;
    g.driver.disconnect().expect("disconnect");
    assert_eq!(answer(&first).await, TicketEnd::Dropped);
    settle_for(2).await;
    let run = session_runs(&h, &g)[0].id;
    assert_eq!(
        h.run(run).status(),
        RunStatus::WaitingForApproval,
        "the disconnect left the parked run"
    );
    assert_eq!(conversation(&h, &g).status(), ConnectionStatus::Closed);
    let again = gateway(&h, "gateway-b");
    let retried = again.live.submit(1, call("test.send", "hello"));
    assert_eq!(
        parked(&retried).await,
        approval,
        "bound to the same approval"
    );
    assert!(
        session_runs(&h, &again).is_empty(),
        "the new conversation asked for no run of its own"
    );
    // A different call is not bound.
    let other = again.live.submit(2, call("test.send", "another"));
    assert_ne!(parked(&other).await, approval);
    approved_runs_once(&h, approval, &retried, run).await;
}

/// §22.3, §19.7: a gateway killed while a call waits leaves its approval (its connection is
/// still open until it expires); the restarted host's identical call binds to it at once, and
/// once approved the call is executed for that request, once.
#[tokio::test(start_paused = true)]
async fn a_gateway_killed_while_a_call_waits_leaves_the_approval_to_the_retried_call() {
    let h = Harness::new();
    let g = gateway(&h, "gateway-a");
    let first = g.live.submit(1, call("test.send", "hello"));
    let approval = parked(&first).await;
    let run = session_runs(&h, &g)[0].id;
    let dead_session = g.driver.connection().id;
    g.kill();
    let again = gateway(&h, "gateway-b");
    let retried = again.live.submit(1, call("test.send", "hello"));
    assert_eq!(
        parked(&retried).await,
        approval,
        "bound to the surviving approval"
    );
    approved_runs_once(&h, approval, &retried, run).await;
    let dead = h
        .store
        .read(|tx| tx.connection(dead_session))
        .unwrap()
        .unwrap();
    assert!(
        dead.is_open(),
        "executed before the dead connection was even swept"
    );
}

/// §22.2 with §22.3: the untrusted result of a call bound from another conversation taints
/// the conversation it is answered on, before the answer (under-taint never happens).
#[tokio::test(start_paused = true)]
async fn a_bound_calls_untrusted_result_taints_the_conversation_it_is_answered_on() {
    let h = Harness::new();
    let approval = parked_and_left(&h, "test.send_untrusted", "x").await;
    let again = gateway(&h, "gateway-b");
    let retried = again.live.submit(1, call("test.send_untrusted", "x"));
    assert_eq!(parked(&retried).await, approval);
    assert!(conversation(&h, &again).taint.is_none());
    h.control
        .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .expect("approve");
    assert!(matches!(
        answer(&retried).await,
        TicketEnd::Answered(CallAnswer::Executed {
            trust: TrustLevel::ExternalUntrusted,
            ..
        })
    ));
    assert!(
        conversation(&h, &again).taint.is_some(),
        "the conversation that was answered untrusted content is tainted"
    );
}

/// §22.3: a call binds only to a parked call of the same upstreams (the same gateway file's
/// servers): two files of one principal may name different servers alike.
#[tokio::test(start_paused = true)]
async fn a_call_through_other_upstreams_does_not_bind() {
    let h = Harness::new();
    let approval = parked_and_left(&h, "test.send", "hello").await;
    let mut elsewhere = template();
    elsewhere.upstreams = "another gateway file".to_owned();
    let again = gateway_with(&h, "gateway-b", elsewhere);
    let retried = again.live.submit(1, call("test.send", "hello"));
    assert_ne!(
        parked(&retried).await,
        approval,
        "asked for its own approval"
    );
}

/// §22.3 with §19.4: a close cancels its conversation's running call runs (nothing STARTs after
/// its client left), except one another gateway process executes for a request bound to its
/// parked call: that request has not left with this client.
#[tokio::test(start_paused = true)]
async fn a_close_leaves_a_call_another_gateway_executes_for_its_request() {
    for (claimant, cancelled) in [("gateway-b", false), ("gateway-a", true)] {
        let h = Harness::new();
        let g = gateway(&h, "gateway-a");
        let ticket = g.live.submit(1, call("test.send", "hello"));
        let approval = parked(&ticket).await;
        // The host gives up: gateway-a withholds the approved call it holds no request for.
        g.live.cancel(1);
        settle_for(1).await;
        h.control
            .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
            .await
            .expect("approve");
        let run = session_runs(&h, &g)[0].id;
        let other = gateway(&h, "gateway-b");
        let requester = if claimant == "gateway-b" {
            other.driver.connection().id
        } else {
            g.driver.connection().id
        };
        let (claimed, _lease) = h
            .worker(claimant)
            .claim_for_connection(run, requester)
            .await
            .unwrap()
            .expect("claimed for a request");
        assert_eq!(claimed.status(), RunStatus::Running);
        g.driver.disconnect().expect("disconnect");
        assert_eq!(
            h.run(run).cancel_requested_at.is_some(),
            cancelled,
            "the close of gateway-a, the run executed by {claimant}"
        );
    }
}

/// §22.3: a gateway claims another conversation's parked call only for a request of the run's
/// own tenant and principal on a connection open in the store, and never an approved call past
/// its approval's expiry (the gateway that parked it is dead here, so nothing else ends it).
#[tokio::test(start_paused = true)]
async fn a_claim_for_a_request_needs_the_runs_principal_and_an_unexpired_approval() {
    let h = Harness::new();
    let (g, _ticket, approval) = parked_with_a_30_s_deadline(&h).await;
    let run = session_runs(&h, &g)[0].id;
    g.kill();
    h.control
        .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .expect("approve");
    // Another principal's open connection.
    let mallory = ConnectionDriver::open(
        h.worker("gateway-m"),
        LiveConnection::new(ConnectionId(uuid::Uuid::new_v4()), true),
        "acme",
        "mallory",
        template(),
    )
    .expect("open");
    let claimer = h.worker("gateway-b");
    assert!(
        claimer
            .claim_for_connection(run, mallory.connection().id)
            .await
            .unwrap()
            .is_none(),
        "not for another principal's request"
    );
    settle_for(31).await;
    let alice = gateway(&h, "gateway-b");
    assert!(
        claimer
            .claim_for_connection(run, alice.driver.connection().id)
            .await
            .unwrap()
            .is_none(),
        "not an approved call past its expiry"
    );
    assert_eq!(h.run(run).status(), RunStatus::Queued);
}

/// §22.3 and issue 26: binding never widens a token's reach: a conversation whose scopes lack
/// one the parked run held asks for its own approval instead of binding.
#[tokio::test(start_paused = true)]
async fn a_conversation_with_fewer_scopes_does_not_bind_to_a_wider_parked_call() {
    let h = Harness::new();
    let approval = parked_and_left(&h, "test.send", "hello").await;
    let mut narrower = template();
    narrower
        .principal_scopes
        .retain(|scope| scope.as_str() != "demo.write");
    let again = gateway_with(&h, "gateway-b", narrower);
    let retried = again.live.submit(1, call("test.send", "hello"));
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            if let TicketStatus::Parked { approval_id, .. } = retried.status() {
                return Some(approval_id);
            }
            if retried.end().is_some() {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("decided in time");
    assert_ne!(outcome, Some(approval), "not bound to the wider run");
    assert_eq!(session_runs(&h, &again).len(), 1, "a run of its own");
}

/// §19.3: a client's cancel of a call in flight lets the call finish and be recorded (its
/// outcome must be known), and drops its answer.
#[tokio::test(start_paused = true)]
async fn a_client_cancel_of_a_call_in_flight_is_recorded_and_sends_no_answer() {
    let (h, gate) = gated_write_harness();
    let g = gateway(&h, "gateway-a");
    let ticket = g.live.submit(
        7,
        ClientCall {
            tool: "test.gated_write".into(),
            arguments: json!({"path": "notes/a.txt", "text": "x"}),
        },
    );
    gate.entered.notified().await;
    g.live.cancel(7);
    settle_for(1).await;
    gate.release.notify_one();
    assert_eq!(answer(&ticket).await, TicketEnd::Dropped);
    settle_for(2).await;
    let runs = session_runs(&h, &g);
    assert!(h.run(runs[0].id).status().is_terminal());
    assert_eq!(
        h.invocations(runs[0].id)[0].status,
        InvocationStatus::Succeeded
    );
    assert_eq!(
        h.ledger.count("test.gated_write"),
        1,
        "the call in flight finished"
    );
}

#[tokio::test(start_paused = true)]
async fn an_ordinary_worker_never_claims_a_live_connections_run() {
    let h = Harness::new();
    let g = gateway(&h, "gateway-a");
    let ticket = g.live.submit(1, call("test.send", "hello"));
    let approval = parked(&ticket).await;
    // Resolve without letting the gateway run: the run is QUEUED and bound.
    let worker = h.worker("plain-worker");
    h.control
        .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .unwrap();
    let run = session_runs(&h, &g)[0].id;
    assert!(worker.claim(None).await.unwrap().is_none());
    assert!(
        worker.claim(Some(run)).await.unwrap().is_none(),
        "not even by id (runs resume, the inline dispatcher)"
    );
    assert!(
        worker
            .claim_for_connection(run, ConnectionId(uuid::Uuid::new_v4()))
            .await
            .unwrap()
            .is_none(),
        "nor for a request of a connection the store does not have open"
    );
    assert!(matches!(
        answer(&ticket).await,
        TicketEnd::Answered(CallAnswer::Executed { .. })
    ));
}

/// A harness whose `test.gated_write` (non-idempotent, allowed by the shipped profile) takes its
/// effect, then waits at `gate` until released: a call in flight for as long as a test needs.
fn gated_write_harness() -> (Harness, Gate) {
    gated_write_harness_as(airlock_core::vocab::SideEffectClass::WorkspaceWrite)
}

/// [`gated_write_harness`] with the write of class `side_effect` (`external_write`: it waits
/// for approval).
fn gated_write_harness_as(side_effect: airlock_core::vocab::SideEffectClass) -> (Harness, Gate) {
    let gate = Gate {
        entered: Arc::new(tokio::sync::Notify::new()),
        release: Arc::new(tokio::sync::Notify::new()),
    };
    let ledger = Arc::new(Ledger::default());
    let parts = (gate.clone(), Arc::clone(&ledger));
    let h = Harness::over_with_ledger(
        Arc::new(MemStore::new()),
        airlock_core::policy::Ruleset::shipped().unwrap(),
        ledger,
        move |tools| {
            let mut spec = test_spec(
                "test.gated_write",
                side_effect,
                airlock_core::vocab::IdempotencyClass::NonIdempotent,
                false,
            );
            spec.timeout_ms = 120_000;
            tools.push(Arc::new(GatedTool {
                spec,
                gate: parts.0,
                ledger: parts.1,
            }));
        },
    );
    (h, gate)
}

/// A gateway that dies while a non-idempotent call is in flight: any process's sweep closes
/// the connection and RECLAIM ends the run; the call is UNCERTAIN, never sent again, and a new
/// connection's identical call is refused `policy.uncertain.repeat` (§19.3, tenant-wide).
#[tokio::test(start_paused = true)]
async fn a_dead_gateways_run_ends_uncertain_and_its_twin_is_refused_across_runs() {
    let (h, gate) = gated_write_harness();
    let g = gateway(&h, "gateway-a");
    let arguments = json!({"path": "notes/a.txt", "text": "x"});
    let ticket = g.live.submit(
        1,
        ClientCall {
            tool: "test.gated_write".into(),
            arguments: arguments.clone(),
        },
    );
    gate.entered.notified().await;
    let run = session_runs(&h, &g)[0].id;
    // kill -9: every task of the gateway stops where it is; only committed state remains.
    g.kill();
    drop(ticket);
    // Another process's worker: within one lease plus one sweep the run is terminal.
    settle_for(4).await;
    let sweeper = h.worker("plain-worker");
    let report = sweeper.tick(&TokioSpawner, &h.control).await.expect("tick");
    assert_eq!(report.closed, 1, "the dead gateway's connection is closed");
    let ended = h.run(run);
    assert_eq!(ended.status(), RunStatus::Failed, "{:?}", ended.state);
    let rows = h.invocations(run);
    assert_eq!(rows[0].status, InvocationStatus::Uncertain);
    assert_eq!(
        h.ledger.count("test.gated_write"),
        1,
        "sent once, never again"
    );
    // The agent restarts: a new connection repeats the call.
    let g2 = gateway(&h, "gateway-b");
    let retry = g2.live.submit(
        1,
        ClientCall {
            tool: "test.gated_write".into(),
            arguments,
        },
    );
    match answer(&retry).await {
        TicketEnd::Answered(CallAnswer::Denied { reason_code, .. }) => {
            assert_eq!(reason_code, "policy.uncertain.repeat")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(h.ledger.count("test.gated_write"), 1);
}

/// §19.7: the host restarts after a gateway crash and retries at once, while the first
/// invocation is still RUNNING under its unexpired lease. The retry is refused
/// `policy.uncertain.in_flight`, naming the twin, and nothing is sent; once recovery made the
/// twin UNCERTAIN, the same retry is refused `policy.uncertain.repeat`.
#[tokio::test(start_paused = true)]
async fn a_retry_racing_recovery_is_refused_in_flight_then_repeat() {
    let (h, gate) = gated_write_harness();
    let g = gateway(&h, "gateway-a");
    let arguments = json!({"path": "notes/a.txt", "text": "x"});
    let call = || ClientCall {
        tool: "test.gated_write".into(),
        arguments: arguments.clone(),
    };
    let ticket = g.live.submit(1, call());
    gate.entered.notified().await;
    let run = session_runs(&h, &g)[0].id;
    let twin = h.invocations(run)[0].id;
    g.kill();
    drop(ticket);
    // At once, before any lease ran out: a new gateway on the same store, the same call.
    let g2 = gateway(&h, "gateway-b");
    let retry = g2.live.submit(1, call());
    match answer(&retry).await {
        TicketEnd::Answered(CallAnswer::Denied {
            reason_code,
            message,
        }) => {
            assert_eq!(reason_code, "policy.uncertain.in_flight");
            assert!(message.contains(&twin.to_string()), "{message}");
        }
        other => panic!("expected an in-flight refusal, got {other:?}"),
    }
    assert_eq!(h.ledger.count("test.gated_write"), 1, "not sent again");
    assert_eq!(h.invocations(run)[0].status, InvocationStatus::Running);
    // Recovery ends the dead gateway's run; the twin is UNCERTAIN now.
    settle_for(4).await;
    let sweeper = h.worker("plain-worker");
    sweeper.tick(&TokioSpawner, &h.control).await.expect("tick");
    assert_eq!(h.invocations(run)[0].status, InvocationStatus::Uncertain);
    let again = g2.live.submit(2, call());
    match answer(&again).await {
        TicketEnd::Answered(CallAnswer::Denied { reason_code, .. }) => {
            assert_eq!(reason_code, "policy.uncertain.repeat")
        }
        other => panic!("expected a repeat refusal, got {other:?}"),
    }
    assert_eq!(h.ledger.count("test.gated_write"), 1);
}

/// §19.7: a twin that has an outcome refuses nothing; an identical call is a new call.
#[tokio::test(start_paused = true)]
async fn an_identical_call_after_its_twin_finished_is_a_new_call() {
    let h = Harness::new();
    let g = gateway(&h, "gateway-a");
    let first = g.live.submit(1, call("test.send", "hello"));
    let approval = parked(&first).await;
    h.control
        .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .unwrap();
    assert!(matches!(
        answer(&first).await,
        TicketEnd::Answered(CallAnswer::Executed { .. })
    ));
    let g2 = gateway(&h, "gateway-b");
    let second = g2.live.submit(1, call("test.send", "hello"));
    let approval = parked(&second).await;
    h.control
        .resolve(&h.bob(), approval, ApprovalResolution::ApproveOnce, None)
        .await
        .unwrap();
    assert!(matches!(
        answer(&second).await,
        TicketEnd::Answered(CallAnswer::Executed { .. })
    ));
}

/// §19.3 Trust, §22.2: with `origin_trust = "user"` the client's arguments are the user's
/// until the conversation is tainted; an untrusted result taints the conversation's row in the
/// transaction that records it, so every later call run is tainted, until a human clears it.
#[tokio::test(start_paused = true)]
async fn an_untrusted_result_taints_the_conversation_until_a_human_clears_it() {
    let h = Harness::new();
    let g = gateway(&h, "gateway-a");
    for (key, tool, text) in [
        (1, "test.echo", "mine"),
        (2, "test.untrusted", "read"),
        (3, "test.echo", "after"),
    ] {
        let ticket = g.live.submit(key, call(tool, text));
        assert!(
            matches!(
                answer(&ticket).await,
                TicketEnd::Answered(CallAnswer::Executed { .. })
            ),
            "{tool} executed"
        );
        if key == 2 {
            assert!(
                conversation(&h, &g).taint.is_some(),
                "tainted before the untrusted result was answered"
            );
        }
    }
    let trust: Vec<Option<TrustLevel>> = conversation_calls(&h, &g)
        .iter()
        .map(|row| row.argument_trust.get("text").copied())
        .collect();
    assert_eq!(
        trust,
        [
            Some(TrustLevel::User),
            Some(TrustLevel::User),
            Some(TrustLevel::ExternalUntrusted)
        ],
        "the call after the untrusted result is not the user's"
    );
    let taint = conversation(&h, &g).taint.expect("tainted");
    assert!(taint.by.contains("test.untrusted"), "{}", taint.by);
    // Only approval.resolve clears it, with a reason; the next call is the user's again.
    let id = g.driver.connection().id;
    let reader = airlock_core::principal::Principal {
        scopes: [Scope::parse("run.read").unwrap()].into_iter().collect(),
        ..h.bob()
    };
    assert!(
        h.control
            .clear_conversation_taint(&reader, id, "read it", None)
            .is_err()
    );
    assert!(
        h.control
            .clear_conversation_taint(&h.mallory(), id, "theirs", None)
            .is_err(),
        "another tenant's conversation is not found"
    );
    assert!(
        h.control
            .clear_conversation_taint(&h.bob(), id, " ", None)
            .is_err()
    );
    // A reviewer who saw another taint (one cleared and set again since) clears nothing.
    let earlier = taint.at.saturating_add_micros(-1);
    match h
        .control
        .clear_conversation_taint(&h.bob(), id, "seen", Some(earlier))
    {
        Err(airlock_core::control::ServiceError::Conflict(message)) => {
            assert!(message.contains("tainted again"), "{message}")
        }
        other => panic!("a stale clear is a conflict: {other:?}"),
    }
    assert!(conversation(&h, &g).taint.is_some());
    h.control
        .clear_conversation_taint(&h.bob(), id, "the page was ours", Some(taint.at))
        .expect("cleared");
    assert!(conversation(&h, &g).taint.is_none());
    let after = g.live.submit(4, call("test.echo", "cleared"));
    answer(&after).await;
    let rows = conversation_calls(&h, &g);
    assert_eq!(
        rows[3].argument_trust.get("text").copied(),
        Some(TrustLevel::User)
    );
}

/// §19.3: a parked call whose approval expires is answered "approval expired", not as a
/// reviewer's denial or a policy denial, and nothing is sent.
#[tokio::test(start_paused = true)]
async fn a_parked_call_whose_approval_expires_is_answered_approval_expired() {
    let h = Harness::new();
    let g = gateway(&h, "gateway-a");
    let ticket = g.live.submit(1, call("test.send", "hello"));
    let approval = parked(&ticket).await;
    let expires_at = match ticket.status() {
        TicketStatus::Parked {
            approval_id,
            expires_at,
            ..
        } if approval_id == approval => expires_at,
        other => panic!("parked: {other:?}"),
    };
    let wait = expires_at.as_micros() - h.clock.now().as_micros() + 1_000_000;
    // One jump past the expiry (no poll in between: the driver's next look sees the result).
    tokio::time::advance(std::time::Duration::from_micros(wait as u64)).await;
    let expired = h
        .control
        .expire_due_all(h.clock.now())
        .await
        .expect("expiry");
    assert_eq!(expired, 1);
    assert_eq!(
        answer(&ticket).await,
        TicketEnd::Answered(CallAnswer::ApprovalExpired)
    );
    assert_eq!(h.ledger.count("test.send"), 0);
}

/// §19.6: a resource read outside the journal that returned untrusted content taints the
/// connection's run from its next step on, even when no run existed at the read; trusted
/// content taints nothing.
#[tokio::test(start_paused = true)]
async fn an_untrusted_read_outside_the_journal_taints_the_next_step_durably() {
    let h = Harness::new();
    let g = gateway(&h, "gateway-a");
    g.live.note_read_content(TrustLevel::InternalTool, "a read");
    let first = g.live.submit(1, call("test.echo", "before"));
    assert!(matches!(
        answer(&first).await,
        TicketEnd::Answered(CallAnswer::Executed { .. })
    ));
    g.live
        .note_read_content(TrustLevel::ExternalUntrusted, "a read");
    let second = g.live.submit(2, call("test.echo", "after"));
    assert!(matches!(
        answer(&second).await,
        TicketEnd::Answered(CallAnswer::Executed { .. })
    ));
    let rows = conversation_calls(&h, &g);
    let seen: Vec<(TrustLevel, Option<TrustLevel>)> = rows
        .iter()
        .map(|row| (row.origin_trust, row.argument_trust.get("text").copied()))
        .collect();
    assert_eq!(
        seen,
        [
            (TrustLevel::User, Some(TrustLevel::User)),
            (
                TrustLevel::ExternalUntrusted,
                Some(TrustLevel::ExternalUntrusted)
            ),
        ],
        "the call after the untrusted read is tainted"
    );
    let taint = conversation(&h, &g)
        .taint
        .expect("the conversation's row is tainted");
    assert_eq!(taint.by, "a read");
    // A human's clear reaches a read's taint too: the next call is the user's again.
    h.control
        .clear_conversation_taint(
            &h.bob(),
            g.driver.connection().id,
            "our page",
            Some(taint.at),
        )
        .expect("cleared");
    let third = g.live.submit(3, call("test.echo", "cleared"));
    answer(&third).await;
    let rows = conversation_calls(&h, &g);
    assert_eq!(
        (
            rows[2].origin_trust,
            rows[2].argument_trust.get("text").copied()
        ),
        (TrustLevel::User, Some(TrustLevel::User)),
        "cleared"
    );
}

/// A gateway's connection over `store` (the harness's `MemStore` behind a wrapper that counts
/// or fails), its planner reading through the same store; driven until the task is aborted.
fn gateway_over<S: Store + 'static>(
    h: &Harness,
    store: Arc<S>,
) -> (
    Arc<LiveConnection>,
    Arc<ConnectionDriver<S>>,
    tokio::task::JoinHandle<()>,
) {
    gateway_over_env(h, store, |_, _| {})
}

/// [`gateway_over`], its environment edited first (a fault hook, say).
fn gateway_over_env<S: Store + 'static>(
    h: &Harness,
    store: Arc<S>,
    edit: impl FnOnce(&Arc<LiveConnection>, &mut Env<S>),
) -> (
    Arc<LiveConnection>,
    Arc<ConnectionDriver<S>>,
    tokio::task::JoinHandle<()>,
) {
    let live = LiveConnection::new(ConnectionId(uuid::Uuid::new_v4()), true);
    let mut env = h.env_over(Arc::clone(&store));
    env.planners = Arc::new(LiveFactory {
        live: Arc::clone(&live),
        store,
    });
    edit(&live, &mut env);
    let mut settings = WorkerSettings::new("gateway-a");
    settings.lease_ms = 600_000;
    let worker = Worker::new(env, settings);
    let driver = Arc::new(
        ConnectionDriver::open(worker, Arc::clone(&live), "acme", "alice", template())
            .expect("open"),
    );
    let running = Arc::clone(&driver);
    let task = tokio::spawn(async move {
        let _ = running.run().await;
    });
    (live, driver, task)
}

/// Counts write transactions.
#[derive(Default)]
struct CountWrites(std::sync::atomic::AtomicUsize);

impl StoreHook for CountWrites {
    fn before_transact(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Counts read transactions.
#[derive(Default)]
struct CountReads(std::sync::atomic::AtomicUsize);

impl StoreHook for CountReads {
    fn before_read(&self) -> Result<(), airlock_core::store::TxError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// Issue 33: an allowed call reads the store three times on its way to its answer: the parked
/// twin it could bind to, the conversation's taint for its arguments' trust, and its answer
/// with the conversation's taint beside it (telemetry's attribute). The execution of the run
/// its admission claimed begins from that claim, not from a read of the run and its seed
/// checkpoint; the finished run is settled with the status its FINAL committed, not read
/// back; the answer's read serves the taint the gateway reports.
#[tokio::test(start_paused = true)]
async fn an_allowed_call_reads_the_store_three_times() {
    let h = Harness::new();
    let store = Arc::new(HookedStore {
        inner: Arc::clone(&h.store),
        hook: CountReads::default(),
    });
    let (live, driver, task) = gateway_over(&h, Arc::clone(&store));
    for (n, text) in [(1, "one"), (2, "two")] {
        let before = store.hook.0.load(std::sync::atomic::Ordering::SeqCst);
        let ticket = live.submit(n, call("test.echo", text));
        assert!(matches!(
            answer(&ticket).await,
            TicketEnd::Answered(CallAnswer::Executed { .. })
        ));
        settle_for(1).await;
        let read = store.hook.0.load(std::sync::atomic::Ordering::SeqCst) - before;
        assert_eq!(read, 3, "read transactions of allowed call {n}");
        assert_eq!(
            ticket.conversation_tainted_at_end(),
            Some(false),
            "the conversation's taint is read with the answer"
        );
    }
    let runs = runs_in(&h, driver.connection().session_id);
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r.status() == RunStatus::Completed));
    task.abort();
}

/// Fails the next `fail_next` write transactions (a storage error), and passes the rest.
struct FailingWrites {
    inner: Arc<MemStore>,
    fail_next: std::sync::atomic::AtomicUsize,
}

impl Store for FailingWrites {
    fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn airlock_core::store::StoreTx) -> Result<R, airlock_core::store::TxError>,
    ) -> Result<R, airlock_core::store::TxError> {
        use std::sync::atomic::Ordering::SeqCst;
        if self
            .fail_next
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(airlock_core::store::TxError::Backend(
                "disk I/O error".into(),
            ));
        }
        self.inner.transact(f)
    }
    fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn airlock_core::store::StoreTx) -> Result<R, airlock_core::store::TxError>,
    ) -> Result<R, airlock_core::store::TxError> {
        self.inner.read(f)
    }
}

/// Issue 33: a new call's admission, submission and claim are written by its first write
/// transaction. When that transaction fails, nothing of the call is in the store and its
/// request is answered that nothing ran; the next call of the conversation is admitted as
/// usual (its conversation's count was not taken by the failed one).
#[tokio::test(start_paused = true)]
async fn a_call_whose_first_write_fails_is_answered_that_nothing_ran_and_leaves_nothing() {
    let h = Harness::new();
    let store = Arc::new(FailingWrites {
        inner: Arc::clone(&h.store),
        fail_next: std::sync::atomic::AtomicUsize::new(0),
    });
    let (live, driver, task) = gateway_over(&h, Arc::clone(&store));
    store
        .fail_next
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let failed = live.submit(1, call("test.echo", "lost"));
    match answer(&failed).await {
        TicketEnd::Answered(CallAnswer::Failed {
            reason_code,
            message,
        }) => {
            assert_eq!(reason_code, "tool.internal_error");
            assert!(message.starts_with("Not performed."), "{message}");
        }
        other => panic!("answered that nothing ran, not {other:?}"),
    }
    let session = driver.connection().session_id;
    assert!(runs_in(&h, session).is_empty(), "no run of the failed call");
    assert!(
        h.store.snapshot().invocations.is_empty(),
        "no invocation of the failed call"
    );
    let next = live.submit(2, call("test.echo", "kept"));
    assert!(matches!(
        answer(&next).await,
        TicketEnd::Answered(CallAnswer::Executed { .. })
    ));
    let runs = runs_in(&h, session);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status(), RunStatus::Completed);
    task.abort();
}

/// Closes the live connection when a call run's claim is decided, before its first write.
struct LeaveBeforeFirstWrite(Arc<LiveConnection>);

impl airlock_core::ports::FaultHook for LeaveBeforeFirstWrite {
    fn reached(
        &self,
        point: airlock_core::vocab::CrashPoint,
    ) -> airlock_core::ports::BoxFut<'static, ()> {
        if point == airlock_core::vocab::CrashPoint::AfterClaim {
            self.0.close();
        }
        Box::pin(std::future::ready(()))
    }
}

/// Issue 33, §19.3: a client that leaves after its call was admitted in memory but before the
/// call's first write is told nothing, and nothing of the call is written (its admission,
/// submission and claim ride in that write, which never happens).
#[tokio::test(start_paused = true)]
async fn a_client_gone_before_its_calls_first_write_leaves_nothing_and_is_told_nothing() {
    let h = Harness::new();
    let (live, driver, task) = gateway_over_env(&h, Arc::clone(&h.store), |live, env| {
        env.faults = Arc::new(LeaveBeforeFirstWrite(Arc::clone(live)));
    });
    let ticket = live.submit(1, call("test.echo", "gone"));
    assert_eq!(answer(&ticket).await, TicketEnd::Dropped);
    settle_for(1).await;
    assert!(
        runs_in(&h, driver.connection().session_id).is_empty(),
        "no run of the call"
    );
    assert!(h.store.snapshot().invocations.is_empty(), "no invocation");
    task.abort();
}

/// Issue 33: an allowed call's run commits two write transactions, ADMIT·SUBMIT·CLAIM·PENDING·
/// PROPOSE·START and FINISH·BATCH·FINAL: its admission, submission and claim are carried by the
/// execution's first write (the run is never seen QUEUED, nor before its call), and the run's
/// FINAL is folded into the transaction that records its step (the live planner's next turn is
/// known to be the end).
#[tokio::test(start_paused = true)]
async fn an_allowed_call_is_admitted_claimed_and_started_in_one_transaction() {
    let h = Harness::new();
    let store = Arc::new(HookedStore {
        inner: Arc::clone(&h.store),
        hook: CountWrites::default(),
    });
    let (live, driver, task) = gateway_over(&h, Arc::clone(&store));
    let before = store.hook.0.load(std::sync::atomic::Ordering::SeqCst);
    let ticket = live.submit(1, call("test.echo", "one"));
    assert!(matches!(
        answer(&ticket).await,
        TicketEnd::Answered(CallAnswer::Executed { .. })
    ));
    settle_for(1).await;
    let written = store.hook.0.load(std::sync::atomic::Ordering::SeqCst) - before;
    assert_eq!(written, 2, "write transactions of one allowed call");
    let run = runs_in(&h, driver.connection().session_id);
    assert_eq!(run.len(), 1);
    assert_eq!(run[0].status(), RunStatus::Completed);
    task.abort();
}
