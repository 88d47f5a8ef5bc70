//! An in-process airlock for the HTTP tests: core's `ControlService` over a `MemStore`, the
//! host's builtin tools and workspaces, a clock the test moves, and the real router.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use airlock_core::access::{TokenGrant, TokenSecret};
use airlock_core::control::ControlService;
use airlock_core::env::Env;
use airlock_core::ids::{ApprovalId, RunId};
use airlock_core::mem_store::MemStore;
use airlock_core::planner::script::ScriptedPlannerFactory;
use airlock_core::policy::Ruleset;
use airlock_core::policy::shipped;
use airlock_core::ports::{BoxFut, Clock, Dispatcher, NoFaults};
use airlock_core::scope::{Scope, ScopeSet, platform_scopes};
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
            ruleset: Arc::new(ruleset),
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
