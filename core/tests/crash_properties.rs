//! Property: random run scripts with a random crash point, run through `MemStore` by core's
//! worker and resumed by a fresh "process" over the same store, always end terminal or parked
//! with every S invariant of SPEC §16 intact (checked by `testing::invariants`).

mod common;

use std::sync::{Arc, Mutex};

use airlock_core::action::JsonMap;
use airlock_core::mem_store::MemStore;
use airlock_core::policy::Ruleset;
use airlock_core::ports::{BoxFut, Tool, ToolContext, ToolFailure, ToolSpec, ToolSuccess};
use airlock_core::testing::invariants::{Effect, check};
use airlock_core::vocab::{
    ApprovalResolution, CrashPoint, IdempotencyClass, RunStatus, SideEffectClass, TrustLevel,
};
use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::{Value, json};

/// A tool that records each body entry as the ground truth, checking the watermark first.
struct LedgerTool {
    spec: ToolSpec,
    store: Arc<MemStore>,
    effects: Arc<Mutex<Vec<Effect>>>,
    untrusted: bool,
}

impl Tool for LedgerTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn invoke<'a>(
        &'a self,
        ctx: &'a ToolContext<'a>,
        args: &'a JsonMap,
    ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>> {
        let key = ctx.idempotency_key.to_owned();
        let (watermarked, running) = self.store.inspect(|s| {
            let row = s.invocations.values().find(|i| i.idempotency_key == key);
            (
                row.is_some_and(|i| i.effect_sent_at.is_some()),
                row.is_some_and(|i| i.status == airlock_core::vocab::InvocationStatus::Running),
            )
        });
        self.effects.lock().unwrap().push(Effect {
            tool_name: self.spec.name.clone(),
            idempotency_key: key,
            idempotency: self.spec.idempotency,
            replay: ctx.replay,
            watermarked_at_entry: watermarked,
            transaction_open_at_entry: false,
            started_at_entry: running,
        });
        let trust = if self.untrusted {
            Some(TrustLevel::ExternalUntrusted)
        } else {
            None
        };
        Box::pin(async move {
            Ok(ToolSuccess {
                structured: Value::Object(args.clone()),
                trust,
            })
        })
    }
}

fn ledger_tools(store: &Arc<MemStore>, effects: &Arc<Mutex<Vec<Effect>>>) -> Vec<Arc<dyn Tool>> {
    use IdempotencyClass::*;
    use SideEffectClass::*;
    let make = |name: &str,
                side: SideEffectClass,
                class: IdempotencyClass,
                parallel: bool,
                untrusted: bool| {
        Arc::new(LedgerTool {
            spec: test_spec(name, side, class, parallel),
            store: Arc::clone(store),
            effects: Arc::clone(effects),
            untrusted,
        }) as Arc<dyn Tool>
    };
    vec![
        make("prop.read", None, ReadOnly, true, false),
        make("prop.untrusted", None, ReadOnly, true, true),
        make(
            "prop.write_once",
            WorkspaceWrite,
            NonIdempotent,
            false,
            false,
        ),
        make(
            "prop.write_cond",
            WorkspaceWrite,
            ConditionallyIdempotent,
            false,
            false,
        ),
        make("prop.write_idem", WorkspaceWrite, Idempotent, false, false),
        make("prop.send", ExternalWrite, NonIdempotent, false, false),
    ]
}

/// One call from the menu; `n` varies the arguments.
fn call(kind: u8, n: u8, call_id: String) -> Value {
    let trust = json!({"text": "user", "path": "user"});
    match kind % 8 {
        0 => {
            json!({"call_id": call_id, "tool": "prop.read", "arguments": {"text": format!("r{n}")}, "argument_trust": trust})
        }
        1 => {
            json!({"call_id": call_id, "tool": "prop.untrusted", "arguments": {"text": "u"}, "argument_trust": trust})
        }
        2 => {
            json!({"call_id": call_id, "tool": "prop.write_once", "arguments": {"path": format!("f{}.txt", n % 3)}, "argument_trust": trust})
        }
        3 => {
            json!({"call_id": call_id, "tool": "prop.write_cond", "arguments": {"path": "c.txt", "text": format!("{n}")}, "argument_trust": trust})
        }
        4 => {
            json!({"call_id": call_id, "tool": "prop.write_idem", "arguments": {"path": "i.txt"}, "argument_trust": trust})
        }
        5 => {
            json!({"call_id": call_id, "tool": "prop.send", "arguments": {"text": format!("s{}", n % 2)}, "argument_trust": trust})
        }
        6 => json!({"call_id": call_id, "tool": "prop.missing", "arguments": {}}),
        _ => {
            json!({"call_id": call_id, "tool": "prop.write_once", "arguments": {"path": "/etc/passwd"}, "argument_trust": trust})
        }
    }
}

fn script_strategy() -> impl Strategy<Value = Vec<Vec<(u8, u8)>>> {
    prop::collection::vec(prop::collection::vec((0u8..8, 0u8..6), 1..4), 1..5)
}

async fn run_case(
    steps: Vec<Vec<(u8, u8)>>,
    crash_at: Option<(CrashPoint, usize)>,
    approve: bool,
) -> Result<(), String> {
    let store = Arc::new(MemStore::new());
    let effects = Arc::new(Mutex::new(Vec::new()));
    let ledger = Arc::new(Ledger::default());
    let tools = |list: &mut Vec<Arc<dyn Tool>>| list.extend(ledger_tools(&store, &effects));
    let first = Harness::over_with_ledger(
        Arc::clone(&store),
        Ruleset::shipped().unwrap(),
        Arc::clone(&ledger),
        tools,
    );
    let script_steps: Vec<Value> = steps
        .iter()
        .enumerate()
        .map(|(s, calls)| {
            Value::Array(
                calls
                    .iter()
                    .enumerate()
                    .map(|(i, (k, n))| call(*k, *n, format!("s{s}c{i}")))
                    .collect(),
            )
        })
        .collect();
    let mut script = first.script(Value::Array(script_steps));
    script["limits"] = json!({"max_steps": 8, "max_tool_calls": 64});
    let run = first.submit(script).await;
    if let Some((point, nth)) = crash_at {
        first.crash.arm_nth(point, nth);
    }
    let worker = first.worker("w1");
    let crashed = first.drive_one_until_crash(&worker).await.is_none();
    drop(worker);
    // A new process over the same store; the old one's memory is gone.
    let second = Harness::over_with_ledger(
        Arc::clone(&store),
        Ruleset::shipped().unwrap(),
        Arc::clone(&ledger),
        |list| list.extend(ledger_tools(&store, &effects)),
    );
    let worker = second.worker("w2");
    if crashed {
        second.advance(31).await;
        worker.reclaim().await.map_err(|e| e.to_string())?;
    }
    for _round in 0..24 {
        second.advance(5).await;
        worker.reclaim().await.map_err(|e| e.to_string())?;
        second.drive(&worker).await;
        let status = second.run(run).status();
        if status.is_terminal() {
            break;
        }
        if status == RunStatus::WaitingForApproval {
            let pending = second
                .control
                .list_pending(&second.bob(), Some(run), None, None)
                .map_err(|e| e.to_string())?;
            for approval in pending.items {
                let resolution = if approve {
                    ApprovalResolution::ApproveOnce
                } else {
                    ApprovalResolution::Deny
                };
                second
                    .control
                    .resolve(&second.bob(), approval.id, resolution, None)
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    let status = second.run(run).status();
    if !(status.is_terminal() || status == RunStatus::WaitingForApproval) {
        return Err(format!("run ended {status}, neither terminal nor parked"));
    }
    let max_attempts = airlock_core::worker::WorkerSettings::new("w").max_attempts;
    let violations = check(&store.snapshot(), &effects.lock().unwrap(), max_attempts);
    if violations.is_empty() {
        Ok(())
    } else {
        Err(format!("{violations:#?}"))
    }
}

/// A crash point and which of its occurrences fires (1-based); worker-side points only, since
/// the first process runs nothing but the worker.
fn crash_point_strategy() -> impl Strategy<Value = Option<(CrashPoint, usize)>> {
    use CrashPoint::*;
    let worker_points = vec![
        AfterClaim,
        AfterPending,
        AfterRefuse,
        AfterPropose,
        AfterStart,
        AfterInvoke,
        AfterFinish,
        AfterBatch,
        AfterPark,
        AfterFinal,
    ];
    prop::option::weighted(0.9, (prop::sample::select(worker_points), 1usize..4))
}

proptest! {
    #![proptest_config(Config { cases: 256, rng_seed: RngSeed::Fixed(0xA1_2C_0C_4E), failure_persistence: None, ..Config::default() })]

    #[test]
    fn random_scripts_with_a_crash_keep_every_invariant(steps in script_strategy(), crash_at in crash_point_strategy(), approve in any::<bool>()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        let result = runtime.block_on(run_case(steps.clone(), crash_at, approve));
        prop_assert!(result.is_ok(), "steps {steps:?} crash {crash_at:?}: {}", result.unwrap_err());
    }
}
