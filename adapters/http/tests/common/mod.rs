//! An in-process airlock for the HTTP tests: core's `ControlService` over a `MemStore`, the
//! host's builtin tools and workspaces, a clock the test moves, and the real router.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use airlock_core::access::{TokenGrant, TokenSecret};
use airlock_core::control::ControlService;
use airlock_core::env::Env;
use airlock_core::ids::{ApprovalId, RunId};
use airlock_core::live_policy::LivePolicy;
use airlock_core::mem_store::MemStore;
use airlock_core::planner::script::ScriptedPlannerFactory;
use airlock_core::policy::Ruleset;
use airlock_core::policy::shipped;
use airlock_core::ports::{BoxFut, Clock, Dispatcher, NoFaults};
use airlock_core::scope::{Scope, ScopeSet, platform_scopes};
use airlock_core::store::Store as _;
use airlock_core::time::Timestamp;
use airlock_core::worker::{Worker, WorkerSettings};
use airlock_host::V4Ids;
use airlock_host::tools::builtin_registry;
use airlock_host::workspace::LocalWorkspaces;
use airlock_http::{AppState, Settings, router};
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt;

/// A clock that moves only when the test says so.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn advance_seconds(&self, seconds: i64) {
        self.0.fetch_add(seconds * 1_000_000, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(self.0.load(Ordering::SeqCst))
    }
    fn sleep_until(&self, _t: Timestamp) -> BoxFut<'static, ()> {
        Box::pin(async {})
    }
}

/// Dispatch hints go nowhere: tests execute runs explicitly.
struct NoDispatch;

impl Dispatcher for NoDispatch {
    fn dispatch(&self, _run: RunId) {}
    fn resume(&self, _run: RunId) {}
}

/// Which profile the server loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelfApproval {
    Allowed,
    Refused,
}

pub struct World {
    pub dir: tempfile::TempDir,
    pub store: Arc<MemStore>,
    pub clock: Arc<ManualClock>,
    pub control: Arc<ControlService<MemStore>>,
    pub worker: Arc<Worker<MemStore>>,
    pub state: AppState,
    pub app: Router,
}

pub const T0_MICROS: i64 = 1_768_478_400_000_000;

impl World {
    pub fn new() -> World {
        World::with(SelfApproval::Allowed)
    }

    pub fn with(self_approval: SelfApproval) -> World {
        let dir = tempfile::tempdir().expect("temp dir");
        let profile = match self_approval {
            SelfApproval::Allowed => shipped::DEFAULT_PROFILE.to_vec(),
            SelfApproval::Refused => String::from_utf8(shipped::DEFAULT_PROFILE.to_vec())
                .expect("utf-8")
                .replace(
                    "[self_approval]\nenabled = true",
                    "[self_approval]\nenabled = false",
                )
                .into_bytes(),
        };
        let ruleset = Ruleset::load(&profile, shipped::HARDLINE).expect("policy loads");
        assert_eq!(
            ruleset.profile.self_approval_enabled,
            self_approval == SelfApproval::Allowed
        );
        let store = Arc::new(MemStore::new());
        let clock = Arc::new(ManualClock(AtomicI64::new(T0_MICROS)));
        let env = Env {
            store: Arc::clone(&store),
            clock: clock.clone(),
            ids: Arc::new(V4Ids),
            policy: LivePolicy::fixed(ruleset),
            tools: Arc::new(builtin_registry(dir.path()).expect("builtins")),
            workspaces: Some(Arc::new(LocalWorkspaces::new(dir.path()))),
            planners: Arc::new(ScriptedPlannerFactory),
            faults: Arc::new(NoFaults),
        };
        let worker = Worker::new(env.clone(), WorkerSettings::new("test-worker"));
        let control = Arc::new(ControlService::new(env, Arc::new(NoDispatch), None));
        let settings = Settings {
            stream_poll: std::time::Duration::from_millis(20),
            stream_reauthenticate: std::time::Duration::from_millis(50),
            tls: false,
            hosts: None,
        };
        let state = AppState::new(control.clone(), settings);
        let app = router(state.clone());
        World {
            dir,
            store,
            clock,
            control,
            worker,
            state,
            app,
        }
    }

    /// The same world served as `airlock serve --listen 127.0.0.1:8080` serves it: with the
    /// Host allow-list of that address.
    pub fn listening_on_127_0_0_1_8080(mut self) -> World {
        let hosts = airlock_host::authority::AllowedHosts::new(
            "127.0.0.1:8080".parse().expect("addr"),
            &[],
        )
        .expect("hosts");
        let mut settings = (*self.state.settings).clone();
        settings.hosts = Some(hosts);
        self.state = AppState {
            settings: Arc::new(settings),
            ..self.state.clone()
        };
        self.app = router(self.state.clone());
        self
    }

    /// A token for `tenant`/`principal` with `scopes` (the platform scopes if `None`).
    pub fn token(&self, tenant: &str, principal: &str, scopes: Option<&[&str]>) -> String {
        let scopes: ScopeSet = match scopes {
            None => platform_scopes(),
            Some(list) => list
                .iter()
                .map(|s| Scope::parse(s).expect("grammatical"))
                .collect(),
        };
        let secret = airlock_http::secret::new_token().expect("random");
        self.control
            .issue_token(
                &TokenGrant {
                    tenant_id: tenant.to_owned(),
                    principal_id: principal.to_owned(),
                    scopes,
                    label: None,
                    expires_at: None,
                },
                &secret,
            )
            .expect("issue");
        secret.expose().to_owned()
    }

    /// A token that expires in `seconds`.
    pub fn expiring_token(&self, tenant: &str, principal: &str, seconds: i64) -> String {
        let secret = airlock_http::secret::new_token().expect("random");
        self.control
            .issue_token(
                &TokenGrant {
                    tenant_id: tenant.to_owned(),
                    principal_id: principal.to_owned(),
                    scopes: platform_scopes(),
                    label: None,
                    expires_at: Some(self.clock.now().saturating_add_seconds(seconds)),
                },
                &secret,
            )
            .expect("issue");
        secret.expose().to_owned()
    }

    pub fn revoke(&self, tenant: &str, token: &str) {
        let secret = TokenSecret::parse(token).expect("token");
        let id = self
            .control
            .list_tokens(tenant)
            .expect("list")
            .into_iter()
            .find(|t| t.token_sha256 == secret.digest())
            .expect("token is listed")
            .id;
        self.control.revoke_token(tenant, id).expect("revoke");
    }

    /// Sends one request through the real router.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<String>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(body.map_or_else(Body::empty, Body::from))
            .expect("request");
        let response = self.app.clone().oneshot(request).await.expect("infallible");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            text,
            json,
        }
    }

    pub async fn get(&self, path: &str, token: &str) -> Reply {
        self.send(Method::GET, path, Some(token), None, &[]).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Reply {
        self.send(
            Method::POST,
            path,
            Some(token),
            Some(body.to_string()),
            &[("content-type", "application/json")],
        )
        .await
    }

    /// Submits a run whose only step calls `demo.external_write` with `content`, executes it
    /// until it parks, and returns the run and its announced approval.
    pub async fn parked_run(
        &self,
        tenant: &str,
        principal: &str,
        content: &str,
    ) -> (RunId, ApprovalId) {
        let token = self.token(tenant, principal, None);
        let script = json!({
            "schema_version": 1, "tenant_id": tenant, "principal_id": principal,
            "principal_scopes": ["demo.write"], "origin_trust": "user",
            "steps": [{"calls": [{"call_id": "c1", "tool": "demo.external_write",
                "arguments": {"destination": "demo", "content": content},
                "argument_trust": {"destination": "user", "content": "user"}}]}],
        });
        let reply = self.post("/v1/runs", &token, script).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        let run: RunId = reply.json["run_id"]
            .as_str()
            .expect("run_id")
            .parse()
            .expect("id");
        self.worker.run_inline(run).await.expect("executes");
        let page = self.get(&format!("/v1/approvals?run={run}"), &token).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.text);
        let approval: ApprovalId = page.json["items"][0]["id"]
            .as_str()
            .expect("an approval")
            .parse()
            .expect("id");
        (run, approval)
    }
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Reply {
    /// Asserts a problem+json answer with this status and code.
    #[track_caller]
    pub fn assert_problem(&self, status: u16, code: &str) {
        assert_eq!(self.status.as_u16(), status, "{}", self.text);
        assert_eq!(
            self.headers
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("application/problem+json"),
            "{}",
            self.text
        );
        assert_eq!(self.json["code"], code, "{}", self.text);
        assert_eq!(self.json["status"], status, "{}", self.text);
    }
}

impl World {
    /// An UNCERTAIN invocation of `tenant` whose arguments carry `content`, written straight to
    /// the store (what a crash after the watermark leaves, SPEC §9.4). `n` keeps ids apart.
    pub fn uncertain_call(
        &self,
        n: u128,
        tenant: &str,
        content: &str,
    ) -> airlock_core::ids::InvocationId {
        use airlock_core::testing::fixtures::{
            commit, sample_invocation, sample_run, sample_session,
        };
        use airlock_core::vocab::{InvocationStatus, RunStatus};
        let mut session = sample_session(1000 + n);
        session.tenant_id = tenant.to_owned();
        let mut run = sample_run(1000 + n, session.id, RunStatus::Failed);
        run.tenant_id = tenant.to_owned();
        let mut invocation =
            sample_invocation(1000 + n, &run, 1, "c1", InvocationStatus::Uncertain);
        invocation.tenant_id = tenant.to_owned();
        let arguments = json!({"destination": "demo", "content": content});
        invocation.raw_arguments = arguments.clone();
        invocation.arguments = arguments.to_string();
        commit(&*self.store, "seed an UNCERTAIN call", |tx| {
            tx.insert_session(&session)?;
            tx.insert_run(&run)?;
            tx.insert_invocation(&invocation)
        });
        invocation.id
    }
}

/// A conversation seeded by [`World::open_conversation`].
pub struct Seeded {
    pub id: airlock_core::ids::ConnectionId,
    pub session: airlock_core::ids::SessionId,
    pub tenant: String,
    pub principal: String,
    /// Keeps the ids of this conversation's rows apart from every other's.
    base: u128,
    /// The call runs, oldest first.
    pub runs: Vec<RunId>,
    /// The calls' invocations, oldest first.
    pub invocations: Vec<airlock_core::ids::InvocationId>,
    /// The approval of the call [`World::add_call`] parked, if it parked one.
    pub approval: Option<ApprovalId>,
}

/// How a seeded call ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEnd {
    /// SUCCEEDED.
    Done,
    /// It waits for an approval (pending, announced).
    Parked,
}

impl World {
    /// OPEN of an MCP conversation of `tenant`/`principal`, written with core's own
    /// transaction as a gateway writes it (SPEC §19.4, §22.1). `n` keeps ids apart between the
    /// conversations of one world.
    pub fn open_conversation(&self, n: u128, tenant: &str, principal: &str) -> Seeded {
        use airlock_core::connection::{self, Connection, ConnectionState};
        use airlock_core::ids::{ConnectionId, SessionId};
        use airlock_core::session::Session;
        let base = 0xc0_0000 + n * 10_000;
        let now = self.clock.now();
        let session = SessionId(uuid::Uuid::from_u128(base));
        let conversation = Connection {
            id: ConnectionId(uuid::Uuid::from_u128(base + 1)),
            tenant_id: tenant.to_owned(),
            principal_id: principal.to_owned(),
            session_id: session,
            gateway_id: "gw-test".to_owned(),
            state: ConnectionState::Open {
                alive_until: now.saturating_add_seconds(86_400),
            },
            opened_at: now,
            taint: None,
            call_count: 0,
            last_seen_at: now,
            conversation_key: None,
        };
        airlock_core::testing::fixtures::commit(&*self.store, "open the conversation", |tx| {
            tx.insert_session(&Session {
                id: session,
                tenant_id: tenant.to_owned(),
                principal_id: principal.to_owned(),
                next_event_sequence: 1,
                created_at: now,
            })?;
            connection::open_in_tx(tx, &conversation, now)
        });
        Seeded {
            id: conversation.id,
            session,
            tenant: tenant.to_owned(),
            principal: principal.to_owned(),
            base,
            runs: Vec::new(),
            invocations: Vec::new(),
            approval: None,
        }
    }

    /// One second later, one `tools/call` of the conversation as the gateway starts it (SPEC
    /// §22.2): ADMIT (which counts it and sets `last_seen_at`) and its `mcp` run of one call
    /// `tool`, in one transaction; the call SUCCEEDED or waits for an approval.
    pub fn add_call(&self, c: &mut Seeded, tool: &str, end: CallEnd) {
        use airlock_core::connection::{self, CallAdmission};
        use airlock_core::run::RunState;
        use airlock_core::testing::fixtures::{
            commit, sample_approval, sample_invocation, sample_run,
        };
        use airlock_core::vocab::{ApprovalStatus, InvocationStatus, RunStatus};
        self.clock.advance_seconds(1);
        let now = self.clock.now();
        let n = c.base + 100 + c.runs.len() as u128;
        let parked = end == CallEnd::Parked;
        let mut run = sample_run(
            n,
            c.session,
            if parked {
                RunStatus::WaitingForApproval
            } else {
                RunStatus::Completed
            },
        );
        run.tenant_id = c.tenant.clone();
        run.principal_id = c.principal.clone();
        run.planner_kind = connection::live::MCP_PLANNER_KIND.to_owned();
        run.created_at = now;
        run.updated_at = now;
        if !parked {
            run.state = RunState::Completed {
                final_message: "answered".to_owned(),
            };
        }
        let status = if parked {
            InvocationStatus::WaitingForApproval
        } else {
            InvocationStatus::Succeeded
        };
        let mut call = sample_invocation(n, &run, 1, "call-1", status);
        call.tool_name = tool.to_owned();
        call.created_at = now;
        call.updated_at = now;
        let approval = parked.then(|| {
            let mut approval = sample_approval(n, &call, ApprovalStatus::Pending);
            approval.principal_id = c.principal.clone();
            approval.created_at = now;
            approval.requested_at = Some(now);
            approval.expires_at = now.saturating_add_seconds(3600);
            approval
        });
        commit(&*self.store, "one call of the conversation", |tx| {
            let admission = connection::admit_call_in_tx(tx, c.id, None, None, now)?;
            assert!(
                matches!(admission, CallAdmission::Admitted { .. }),
                "{admission:?}"
            );
            tx.insert_run(&run)?;
            tx.insert_invocation(&call)?;
            if let Some(approval) = &approval {
                tx.insert_approval(approval)?;
            }
            Ok(())
        });
        c.runs.push(run.id);
        c.invocations.push(call.id);
        if let Some(approval) = approval {
            c.approval = Some(approval.id);
        }
    }

    /// One second later, TAINT by `by` as the transaction recording an untrusted result does
    /// (SPEC §22.2): the row and `conversation.tainted`.
    pub fn taint(&self, c: &Seeded, by: &str) {
        self.clock.advance_seconds(1);
        let now = self.clock.now();
        let run = c.runs.last().copied();
        airlock_core::testing::fixtures::commit(&*self.store, "taint the conversation", |tx| {
            airlock_core::connection::taint_in_tx(tx, c.session, run, by, now)
        });
    }

    /// The `tainted_at=…` form field of conversation `id`'s taint as a page shows it (empty
    /// when untainted), URL-encoded.
    pub fn seen_taint(&self, id: airlock_core::ids::ConnectionId) -> String {
        let at = self
            .store
            .read(|tx| tx.connection(id))
            .ok()
            .flatten()
            .and_then(|c| c.taint)
            .map(|t| t.at.to_string())
            .unwrap_or_default();
        format!("tainted_at={}", at.replace(':', "%3A"))
    }

    /// An open conversation with `calls` successful calls `test__tool_{k}`, tainted by
    /// `taint_by` when given.
    pub fn conversation(
        &self,
        n: u128,
        tenant: &str,
        principal: &str,
        calls: usize,
        taint_by: Option<&str>,
    ) -> Seeded {
        let mut c = self.open_conversation(n, tenant, principal);
        for k in 0..calls {
            self.add_call(&mut c, &format!("test__tool_{k}"), CallEnd::Done);
        }
        if let Some(by) = taint_by {
            self.taint(&c, by);
        }
        c
    }

    /// Closes a conversation as its gateway does when the client goes.
    pub fn close_conversation(&self, id: airlock_core::ids::ConnectionId) {
        let now = self.clock.now();
        airlock_core::testing::fixtures::commit(&*self.store, "close the conversation", |tx| {
            airlock_core::connection::close_in_tx(
                tx,
                id,
                airlock_core::connection::CloseReason::Disconnected,
                now,
            )
            .map(drop)
        });
    }

    /// The tenant's events of `event_type`, read from the store.
    pub fn events_of_type(
        &self,
        tenant: &str,
        event_type: &str,
    ) -> Vec<airlock_core::events::Event> {
        self.control
            .env()
            .read(|tx| tx.events_of_tenant(tenant, None, 10_000))
            .expect("read events")
            .into_iter()
            .filter(|e| e.event_type.as_str() == event_type)
            .collect()
    }
}
