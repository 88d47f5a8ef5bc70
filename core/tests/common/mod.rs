//! The scenario harness: core's unchanged worker, executor and control service over a
//! `MemStore`, with a paused tokio clock that jumps to the next deadline, deterministic ids,
//! scripted planners, in-memory workspaces, test tools with an effect ledger, and a fault hook
//! that "crashes" an execution at a chosen `CrashPoint` by dropping it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use airlock_core::action::JsonMap;
use airlock_core::control::ControlService;
use airlock_core::env::Env;
use airlock_core::events::Event;
use airlock_core::ids::RunId;
use airlock_core::invocation::Invocation;
use airlock_core::live_policy::LivePolicy;
use airlock_core::mem_store::MemStore;
use airlock_core::planner::script::ScriptedPlannerFactory;
use airlock_core::policy::Ruleset;
use airlock_core::ports::{
    BoxFut, Clock, Dispatcher, EntryKind, FaultHook, IdSource, Provenance, Spawner, Tool,
    ToolContext, ToolFailure, ToolSpec, ToolSuccess, Workspace, WorkspaceEntry, WorkspaceError,
    WorkspaceFactory, WsPath,
};
use airlock_core::principal::Principal;
use airlock_core::run::Run;
use airlock_core::run::executor::ExecutionEnd;
use airlock_core::scope::{Scope, ScopeSet, platform_scopes};
use airlock_core::store::{Store, StoreTx, TxError};
use airlock_core::time::Timestamp;
use airlock_core::tool::builtin::math::MathCalculate;
use airlock_core::tool::builtin::time::CurrentTime;
use airlock_core::tool::builtin::{math_calculate_spec, system_current_time_spec};
use airlock_core::tool::registry::ToolRegistry;
use airlock_core::tool::spec::{InputSchema, ToolVersion};
use airlock_core::vocab::{
    CrashPoint, IdempotencyClass, RiskLevel, SideEffectClass, TargetKind, ToolFailureKind,
    TrustLevel,
};
use airlock_core::worker::{Worker, WorkerSettings};
use serde_json::{Value, json};

/// 2026-01-01T00:00:00Z.
pub const EPOCH_MICROS: i64 = 1_767_225_600_000_000;

/// Time from tokio's (paused) clock, offset to a fixed date. Every clock on a test's thread
/// (tokio tests run on one thread) counts from one start, so a "new process" built later in the
/// same test reads the same time line.
pub struct TokioClock;

thread_local! {
    static CLOCK_START: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
}

fn clock_start() -> std::time::Instant {
    CLOCK_START.with(|start| match start.get() {
        Some(instant) => instant,
        None => {
            let instant = tokio::time::Instant::now().into_std();
            start.set(Some(instant));
            instant
        }
    })
}

impl TokioClock {
    pub fn new() -> Self {
        clock_start();
        TokioClock
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = tokio::time::Instant::now()
            .into_std()
            .saturating_duration_since(clock_start());
        Timestamp::from_micros(EPOCH_MICROS + elapsed.as_micros() as i64)
    }
    fn sleep_until(&self, t: Timestamp) -> BoxFut<'static, ()> {
        let offset = (t.as_micros() - EPOCH_MICROS).max(0) as u64;
        let deadline = clock_start() + std::time::Duration::from_micros(offset);
        Box::pin(tokio::time::sleep_until(tokio::time::Instant::from_std(
            deadline,
        )))
    }
}

/// Sequential UUIDs, unique across every harness ("process") in the test binary, as v4 ids are
/// in production.
pub struct SeqIds;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl IdSource for SeqIds {
    fn new_uuid(&self) -> uuid::Uuid {
        let n = NEXT_ID.fetch_add(1, Ordering::SeqCst);
        uuid::Builder::from_u128(0x1000_0000_0000_4000_8000_0000_0000_0000 | u128::from(n))
            .into_uuid()
    }
}

/// Records dispatch hints; runs are found by polling.
#[derive(Default)]
pub struct RecordingDispatcher {
    pub dispatched: Mutex<Vec<RunId>>,
    pub resumed: Mutex<Vec<RunId>>,
}

impl Dispatcher for RecordingDispatcher {
    fn dispatch(&self, run: RunId) {
        self.dispatched.lock().unwrap().push(run);
    }
    fn resume(&self, run: RunId) {
        self.resumed.lock().unwrap().push(run);
    }
}

pub struct TokioSpawner;

impl Spawner for TokioSpawner {
    fn spawn(&self, f: BoxFut<'static, ()>) {
        tokio::spawn(f);
    }
}

/// Stops the execution that reaches the armed point: its future never completes and the
/// harness drops it, which is all a crash leaves behind (committed state survives).
#[derive(Default)]
pub struct CrashHook {
    /// The armed point and how many more times it must be reached before it fires.
    armed: Mutex<Option<(CrashPoint, usize)>>,
    fired: AtomicBool,
    notify: tokio::sync::Notify,
    pub reached: Mutex<Vec<CrashPoint>>,
}

impl CrashHook {
    /// Fires the first time `point` is reached.
    pub fn arm(&self, point: CrashPoint) {
        self.arm_nth(point, 1);
    }

    /// Fires the `nth` time (1-based) `point` is reached.
    pub fn arm_nth(&self, point: CrashPoint, nth: usize) {
        *self.armed.lock().unwrap() = Some((point, nth.max(1)));
        self.fired.store(false, Ordering::SeqCst);
    }
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
    pub async fn crashed(&self) {
        loop {
            let notified = self.notify.notified();
            if self.fired() {
                return;
            }
            notified.await;
        }
    }
}

impl FaultHook for CrashHook {
    fn reached(&self, point: CrashPoint) -> BoxFut<'static, ()> {
        self.reached.lock().unwrap().push(point);
        let mut armed = self.armed.lock().unwrap();
        if let Some((armed_point, remaining)) = armed.as_mut()
            && *armed_point == point
        {
            *remaining -= 1;
            if *remaining == 0 {
                *armed = None;
                self.fired.store(true, Ordering::SeqCst);
                self.notify.notify_waiters();
                return Box::pin(std::future::pending());
            }
        }
        Box::pin(std::future::ready(()))
    }
}

/// The ground truth of external effects: every body entry, by idempotency key.
#[derive(Default)]
pub struct Ledger {
    pub effects: Mutex<Vec<(String, String, bool)>>,
}

impl Ledger {
    pub fn record(&self, tool: &str, key: &str, replay: bool) {
        self.effects
            .lock()
            .unwrap()
            .push((tool.to_owned(), key.to_owned(), replay));
    }
    pub fn count(&self, tool: &str) -> usize {
        self.effects
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.0 == tool)
            .count()
    }
}

/// What a test tool does when invoked.
#[derive(Clone)]
pub enum Behaviour {
    /// Returns its arguments.
    Echo,
    /// Returns `{"ok":true}` with this trust claim.
    Claim(TrustLevel),
    /// Fails with this kind and reason code.
    Fail(ToolFailureKind, &'static str),
    /// Never returns (the timeout decides).
    Hang,
    /// Panics.
    Panic,
    /// Returns output larger than its max_output_bytes.
    Oversized,
}

pub struct TestTool {
    pub spec: ToolSpec,
    pub behaviour: Behaviour,
    pub ledger: Arc<Ledger>,
}

impl Tool for TestTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn invoke<'a>(
        &'a self,
        ctx: &'a ToolContext<'a>,
        args: &'a JsonMap,
    ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>> {
        self.ledger
            .record(&self.spec.name, ctx.idempotency_key, ctx.replay);
        let behaviour = self.behaviour.clone();
        Box::pin(async move {
            match behaviour {
                Behaviour::Echo => Ok(ToolSuccess {
                    structured: Value::Object(args.clone()),
                    trust: None,
                }),
                Behaviour::Claim(trust) => Ok(ToolSuccess {
                    structured: json!({"ok": true}),
                    trust: Some(trust),
                }),
                Behaviour::Fail(kind, code) => Err(ToolFailure::new(kind, code, "test failure")),
                Behaviour::Hang => std::future::pending().await,
                Behaviour::Panic => panic!("test tool panicked"),
                Behaviour::Oversized => Ok(ToolSuccess {
                    structured: json!({"blob": "x".repeat(64)}),
                    trust: None,
                }),
            }
        })
    }
}

/// A test tool spec: `{text?: string, path?: string}` arguments, `in_process`.
pub fn test_spec(
    name: &str,
    side_effect: SideEffectClass,
    idempotency: IdempotencyClass,
    allow_parallel: bool,
) -> ToolSpec {
    let schema = InputSchema::from_json(&json!({
        "type": "object",
        "properties": {
            "text": {"type": "string", "maxLength": 1000},
            "path": {"type": "string", "maxLength": 4096}
        },
        "additionalProperties": false
    }))
    .expect("test schema");
    ToolSpec {
        name: name.to_owned(),
        version: ToolVersion {
            major: 1,
            minor: 0,
            patch: 0,
        },
        description: format!("test tool {name}"),
        input_schema: schema.into(),
        side_effect,
        risk: RiskLevel::Medium,
        idempotency,
        required_scopes: ScopeSet::new(),
        timeout_ms: 5_000,
        max_output_bytes: 4096,
        allow_parallel,
        target: TargetKind::InProcess,
        output_trust: TrustLevel::InternalTool,
    }
}

/// Files of every in-memory workspace, by tenant, run and relative path.
type Files = Arc<Mutex<BTreeMap<(String, RunId, String), Vec<u8>>>>;

/// An in-memory workspace per run.
#[derive(Default)]
pub struct MemWorkspaces {
    files: Files,
}

struct MemWorkspace {
    files: Files,
    tenant: String,
    run: RunId,
}

impl WorkspaceFactory for MemWorkspaces {
    fn for_run(&self, tenant: &str, run: RunId) -> Result<Arc<dyn Workspace>, WorkspaceError> {
        Ok(Arc::new(MemWorkspace {
            files: Arc::clone(&self.files),
            tenant: tenant.to_owned(),
            run,
        }))
    }
}

impl Workspace for MemWorkspace {
    fn read_bounded(&self, path: &WsPath, _max: u64) -> Result<Vec<u8>, WorkspaceError> {
        let key = (self.tenant.clone(), self.run, path.as_relative());
        self.files
            .lock()
            .unwrap()
            .get(&key)
            .cloned()
            .ok_or(WorkspaceError::NotFound)
    }
    fn write(&self, path: &WsPath, data: &[u8]) -> Result<bool, WorkspaceError> {
        let key = (self.tenant.clone(), self.run, path.as_relative());
        Ok(self
            .files
            .lock()
            .unwrap()
            .insert(key, data.to_vec())
            .is_none())
    }
    fn list(
        &self,
        _path: &WsPath,
        _recursive: bool,
    ) -> Result<Vec<WorkspaceEntry>, WorkspaceError> {
        Ok(self
            .files
            .lock()
            .unwrap()
            .iter()
            .filter(|((t, r, _), _)| *t == self.tenant && *r == self.run)
            .map(|((_, _, p), d)| WorkspaceEntry {
                path: p.clone(),
                kind: EntryKind::File,
                byte_count: d.len() as u64,
            })
            .collect())
    }
    fn provenance(&self, _path: &WsPath, _content: Option<&[u8]>) -> Provenance {
        Provenance::Unknown
    }
}

pub struct Harness {
    pub store: Arc<MemStore>,
    pub env: Env<MemStore>,
    pub control: ControlService<MemStore>,
    pub crash: Arc<CrashHook>,
    pub ledger: Arc<Ledger>,
    pub dispatcher: Arc<RecordingDispatcher>,
    pub clock: Arc<TokioClock>,
}

/// The standard test tools.
pub fn test_tools(ledger: &Arc<Ledger>) -> Vec<TestTool> {
    use IdempotencyClass::*;
    use SideEffectClass::*;
    let tool = |spec: ToolSpec, behaviour: Behaviour| TestTool {
        spec,
        behaviour,
        ledger: Arc::clone(ledger),
    };
    let mut scoped = test_spec("test.scoped", None, ReadOnly, false);
    scoped.required_scopes = ["test.use", "demo.write"]
        .iter()
        .map(|s| Scope::parse_required(s).unwrap())
        .collect();
    let mut oversized = test_spec("test.oversized", None, ReadOnly, false);
    oversized.max_output_bytes = 16;
    vec![
        tool(
            test_spec("test.echo", None, ReadOnly, true),
            Behaviour::Echo,
        ),
        tool(
            test_spec("test.read", None, ReadOnly, true),
            Behaviour::Echo,
        ),
        tool(
            test_spec("test.send", ExternalWrite, NonIdempotent, false),
            Behaviour::Echo,
        ),
        tool(
            test_spec("test.write_once", WorkspaceWrite, NonIdempotent, false),
            Behaviour::Echo,
        ),
        tool(
            test_spec(
                "test.write_cond",
                WorkspaceWrite,
                ConditionallyIdempotent,
                false,
            ),
            Behaviour::Echo,
        ),
        tool(
            test_spec("test.write_idem", WorkspaceWrite, Idempotent, false),
            Behaviour::Echo,
        ),
        tool(
            test_spec("test.untrusted", None, ReadOnly, false),
            Behaviour::Claim(TrustLevel::ExternalUntrusted),
        ),
        tool(
            test_spec("test.send_untrusted", ExternalWrite, NonIdempotent, false),
            Behaviour::Claim(TrustLevel::ExternalUntrusted),
        ),
        tool(
            test_spec("test.fail", None, ReadOnly, false),
            Behaviour::Fail(ToolFailureKind::UpstreamError, "tool.upstream.unavailable"),
        ),
        tool(
            test_spec("test.hang", None, ReadOnly, false),
            Behaviour::Hang,
        ),
        tool(
            test_spec("test.hang_write", WorkspaceWrite, NonIdempotent, false),
            Behaviour::Hang,
        ),
        tool(
            test_spec("test.panic", None, ReadOnly, false),
            Behaviour::Panic,
        ),
        tool(oversized, Behaviour::Oversized),
        tool(scoped, Behaviour::Echo),
    ]
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with(Ruleset::shipped().expect("shipped policy"), |_| {})
    }

    /// A harness with a given ruleset; `customize` may add or replace tools before freezing.
    pub fn with(ruleset: Ruleset, customize: impl FnOnce(&mut Vec<Arc<dyn Tool>>)) -> Harness {
        let store = Arc::new(MemStore::new());
        Harness::over(store, ruleset, customize)
    }

    /// A harness over an existing store: a "new process" after a crash.
    pub fn over(
        store: Arc<MemStore>,
        ruleset: Ruleset,
        customize: impl FnOnce(&mut Vec<Arc<dyn Tool>>),
    ) -> Harness {
        Harness::over_with_ledger(store, ruleset, Arc::new(Ledger::default()), customize)
    }

    /// A "new process" that shares the ground-truth ledger of the previous one.
    pub fn over_with_ledger(
        store: Arc<MemStore>,
        ruleset: Ruleset,
        ledger: Arc<Ledger>,
        customize: impl FnOnce(&mut Vec<Arc<dyn Tool>>),
    ) -> Harness {
        let mut tools: Vec<Arc<dyn Tool>> = test_tools(&ledger)
            .into_iter()
            .map(|t| Arc::new(t) as Arc<dyn Tool>)
            .collect();
        tools.push(Arc::new(MathCalculate::new()));
        tools.push(Arc::new(CurrentTime::new()));
        customize(&mut tools);
        let mut registry = ToolRegistry::new();
        for tool in tools {
            registry.register(tool).expect("tool registers");
        }
        let _ = (math_calculate_spec(), system_current_time_spec());
        let clock = Arc::new(TokioClock::new());
        let crash = Arc::new(CrashHook::default());
        let dispatcher = Arc::new(RecordingDispatcher::default());
        let env = Env {
            store: Arc::clone(&store),
            clock: clock.clone(),
            ids: Arc::new(SeqIds),
            policy: LivePolicy::fixed(ruleset),
            tools: Arc::new(registry),
            workspaces: Some(Arc::new(MemWorkspaces::default())),
            planners: Arc::new(ScriptedPlannerFactory),
            faults: crash.clone(),
        };
        let control = ControlService::new(env.clone(), dispatcher.clone(), None);
        Harness {
            store,
            env,
            control,
            crash,
            ledger,
            dispatcher,
            clock,
        }
    }

    pub fn alice(&self) -> Principal {
        let mut scopes = platform_scopes();
        scopes.insert(Scope::parse("test.use").unwrap());
        Principal {
            tenant_id: "acme".into(),
            principal_id: "alice".into(),
            scopes,
        }
    }

    pub fn bob(&self) -> Principal {
        Principal {
            tenant_id: "acme".into(),
            principal_id: "bob".into(),
            scopes: platform_scopes(),
        }
    }

    pub fn mallory(&self) -> Principal {
        Principal {
            tenant_id: "evil".into(),
            principal_id: "mallory".into(),
            scopes: platform_scopes(),
        }
    }

    /// A run script for alice with these steps (`[[call, …], …]` as JSON objects).
    pub fn script(&self, steps: Value) -> Value {
        let steps: Vec<Value> = steps
            .as_array()
            .expect("steps")
            .iter()
            .map(|calls| json!({"calls": calls}))
            .collect();
        json!({
            "schema_version": 1,
            "tenant_id": "acme",
            "principal_id": "alice",
            "principal_scopes": ["workspace.read", "workspace.write", "demo.write", "run.read", "test.use"],
            "origin_trust": "user",
            "limits": {"max_steps": 8, "max_tool_calls": 16},
            "steps": steps,
            "final_message": "done"
        })
    }

    pub async fn submit(&self, script: Value) -> RunId {
        self.control
            .submit_run(&self.alice(), &script.to_string())
            .await
            .expect("submit")
            .run_id
    }

    /// This harness's environment over another store (a wrapper of its `MemStore`, usually).
    pub fn env_over<S: Store>(&self, store: Arc<S>) -> Env<S> {
        Env {
            store,
            clock: self.env.clock.clone(),
            ids: self.env.ids.clone(),
            policy: self.env.policy.clone(),
            tools: self.env.tools.clone(),
            workspaces: self.env.workspaces.clone(),
            planners: self.env.planners.clone(),
            faults: self.env.faults.clone(),
        }
    }

    pub fn worker(&self, id: &str) -> Arc<Worker<MemStore>> {
        Worker::new(self.env.clone(), WorkerSettings::new(id))
    }

    /// Claims and executes runs one at a time until none is claimable now.
    pub async fn drive(&self, worker: &Arc<Worker<MemStore>>) -> Vec<ExecutionEnd> {
        let mut ends = Vec::new();
        while let Some((run, lease)) = worker.claim(None).await.expect("claim") {
            ends.push(worker.execute(run, lease).await);
            assert!(ends.len() < 100, "drive is bounded");
        }
        ends
    }

    /// Claims one run and executes it until it ends or the armed crash point fires; returns
    /// `None` on a crash (the execution was dropped).
    pub async fn drive_one_until_crash(
        &self,
        worker: &Arc<Worker<MemStore>>,
    ) -> Option<ExecutionEnd> {
        let claim_and_execute = async {
            let (run, lease) = worker
                .claim(None)
                .await
                .expect("claim")
                .expect("a claimable run");
            worker.execute(run, lease).await
        };
        tokio::select! {
            end = claim_and_execute => Some(end),
            () = self.crash.crashed() => None,
        }
    }

    pub fn run(&self, id: RunId) -> Run {
        self.store
            .transact(|tx| tx.run(id))
            .unwrap()
            .expect("run exists")
    }

    pub fn invocations(&self, id: RunId) -> Vec<Invocation> {
        self.store.transact(|tx| tx.invocations_of_run(id)).unwrap()
    }

    pub fn events(&self, id: RunId) -> Vec<Event> {
        self.store
            .transact(|tx| tx.events_of_run(id, None, 10_000))
            .unwrap()
    }

    pub fn event_types(&self, id: RunId) -> Vec<String> {
        self.events(id)
            .iter()
            .map(|e| e.event_type.as_str().to_owned())
            .collect()
    }

    /// Lets virtual time pass.
    pub async fn advance(&self, seconds: u64) {
        tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
    }
}

/// The gate a test holds on `test.gated`: `entered` fires once the body runs, `release` lets it
/// return.
#[derive(Clone)]
pub struct Gate {
    pub entered: Arc<tokio::sync::Notify>,
    pub release: Arc<tokio::sync::Notify>,
}

/// A read-only tool that signals when its body is entered and then waits until the test
/// releases it, so a test can act while a call is deterministically `RUNNING` after START.
pub struct GatedTool {
    pub spec: ToolSpec,
    pub gate: Gate,
    pub ledger: Arc<Ledger>,
}

impl Tool for GatedTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn invoke<'a>(
        &'a self,
        ctx: &'a ToolContext<'a>,
        _args: &'a JsonMap,
    ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>> {
        self.ledger
            .record(&self.spec.name, ctx.idempotency_key, ctx.replay);
        Box::pin(async move {
            self.gate.entered.notify_one();
            self.gate.release.notified().await;
            Ok(ToolSuccess {
                structured: json!({"released": true}),
                trust: None,
            })
        })
    }
}

/// A harness with `test.gated` registered (its bodies are counted in the harness's ledger);
/// its timeout (120 s) outlasts several heartbeats.
pub fn gated_harness() -> (Harness, Gate) {
    let gate = Gate {
        entered: Arc::new(tokio::sync::Notify::new()),
        release: Arc::new(tokio::sync::Notify::new()),
    };
    let ledger = Arc::new(Ledger::default());
    let tool = (gate.clone(), Arc::clone(&ledger));
    let h = Harness::over_with_ledger(
        Arc::new(MemStore::new()),
        Ruleset::shipped().expect("shipped policy"),
        ledger,
        move |tools| {
            let mut spec = test_spec(
                "test.gated",
                SideEffectClass::None,
                IdempotencyClass::ReadOnly,
                false,
            );
            spec.timeout_ms = 120_000;
            tools.push(Arc::new(GatedTool {
                spec,
                gate: tool.0,
                ledger: tool.1,
            }));
        },
    );
    (h, gate)
}

/// What a [`HookedStore`] does before it hands a transaction to its `MemStore`: a test's way of
/// making the store wait, fail or record, without writing a `Store` of its own.
pub trait StoreHook: Send + Sync {
    /// Before every write transaction.
    fn before_transact(&self) {}
    /// Before every read; an error is the read's answer.
    fn before_read(&self) -> Result<(), TxError> {
        Ok(())
    }
}

/// A harness `MemStore` behind a [`StoreHook`].
pub struct HookedStore<H: StoreHook> {
    pub inner: Arc<MemStore>,
    pub hook: H,
}

impl<H: StoreHook> Store for HookedStore<H> {
    fn transact<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.hook.before_transact();
        self.inner.transact(f)
    }
    fn read<R>(
        &self,
        f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>,
    ) -> Result<R, TxError> {
        self.hook.before_read()?;
        self.inner.read(f)
    }
}
