//! The latency `airlock mcp serve` adds to an allowed call (SPEC §19.5), and its commits per call.
//!
//! One upstream: this program run as `--upstream`, a minimal rmcp server on stdio with one tool,
//! `echo`. One client: an rmcp client in this process, the same code for both measurements.
//!
//! - **direct**: the client calls `echo` on the upstream child over its stdio pipes.
//! - **gateway**: the client calls `up__echo` on airlock's gateway (`airlock_mcp::serve::serve_on`,
//!   the code `airlock mcp serve` runs, here over an in-memory pipe instead of the process's
//!   stdio) over a SQLite store in a temporary data directory; the gateway calls the same
//!   upstream program over stdio. `echo` is classified `none`/`read_only`/`low`, so every call is
//!   allowed: scope, the policy gate with the hardline rules, PROPOSE·START, the upstream call,
//!   FINISH·BATCH and the answer after the commit.
//!
//! Each side makes `--warmup` calls, then `--calls` timed calls, one at a time (an agent waits
//! for each answer). Commits per call come from the store's group-commit counters over the timed
//! calls (write transactions, and the COMMITs they shared), and so does the time the writer
//! was held per call, statements and COMMITs apart (`GroupStats`).
//!
//! - **beside a parked call** (SPEC §22.2): the same client first sends `up__write` (classified
//!   `external_write`, so it parks for approval, with a `progressToken` so its request stays
//!   open), then makes the same timed `up__echo` calls while that call waits. Its p50 is reported
//!   as a ratio to the gateway's unblocked p50 of the same run (the issue's bar: within 2×).
//!
//! ```sh
//! cd bench && cargo run --release --example mcp_gateway -- --calls 2000
//! ```

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock::app::App;
use airlock_core::worker::WorkerSettings;
use airlock_mcp::config::GatewayConfig;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    NumberOrString, PaginatedRequestParams, ProgressToken, RequestParamsMeta, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ErrorData, ServerHandler, ServiceExt};

/// The upstream: one tool that answers its `text` argument.
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema =
            serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let serde_json::Value::Object(schema) = schema else {
            return Err(ErrorData::internal_error("schema", None));
        };
        let tool = Tool::new(
            Cow::Borrowed("echo"),
            Cow::Borrowed("Answers its text."),
            Arc::new(schema),
        );
        let write = Tool::new(
            Cow::Borrowed("write"),
            Cow::Borrowed("Writes somewhere (parks for approval)."),
            tool.input_schema.clone(),
        );
        Ok(ListToolsResult::with_all_items(vec![tool, write]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == "write" {
            return Ok(CallToolResponse::from(CallToolResult::success(vec![
                ContentBlock::text("written"),
            ])));
        }
        let text = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("text"))
            .and_then(|t| t.as_str())
            .unwrap_or_default()
            .to_owned();
        Ok(CallToolResponse::from(CallToolResult::success(vec![
            ContentBlock::text(text),
        ])))
    }
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn upstream_command() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(std::env::current_exe().expect("own path"));
    command.arg("--upstream");
    command
}

/// `calls` timed calls of `tool` after `warmup` untimed ones; the latencies.
async fn measure(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    warmup: usize,
    calls: usize,
    before_timed: impl FnOnce(),
) -> Vec<Duration> {
    let call = |n: usize| {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        let serde_json::Value::Object(arguments) = serde_json::json!({"text": format!("call {n}")})
        else {
            unreachable!("an object literal")
        };
        params.arguments = Some(arguments);
        params
    };
    for n in 0..warmup {
        let result = client
            .peer()
            .call_tool(call(n))
            .await
            .expect("warm-up call");
        assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    }
    before_timed();
    let mut latencies = Vec::with_capacity(calls);
    for n in 0..calls {
        let started = Instant::now();
        let result = client.peer().call_tool(call(n)).await.expect("call");
        latencies.push(started.elapsed());
        assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    }
    latencies
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn summary(name: &str, mut latencies: Vec<Duration>) -> (Duration, Duration, Duration) {
    latencies.sort();
    let mean = latencies.iter().sum::<Duration>() / latencies.len() as u32;
    let (p50, p99) = (percentile(&latencies, 0.50), percentile(&latencies, 0.99));
    println!(
        "{name:8} calls {:5}  p50 {:8.1} µs  p99 {:8.1} µs  mean {:8.1} µs  max {:8.1} µs",
        latencies.len(),
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6,
        mean.as_secs_f64() * 1e6,
        latencies[latencies.len() - 1].as_secs_f64() * 1e6,
    );
    (p50, p99, mean)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    if std::env::args().any(|a| a == "--upstream") {
        runtime.block_on(async {
            let service = Echo
                .serve(rmcp::transport::stdio())
                .await
                .expect("upstream serves");
            let _ = service.waiting().await;
        });
        return;
    }
    let calls = arg("--calls", 2_000);
    let warmup = arg("--warmup", 200);
    runtime.block_on(async move {
        // Direct.
        let transport = TokioChildProcess::new(upstream_command()).expect("start the upstream");
        let client = ().serve(transport).await.expect("direct handshake");
        let direct = measure(&client, "echo", warmup, calls, || {}).await;
        let _ = client.cancel().await;

        // Through the gateway.
        let data = tempfile::tempdir().expect("temp dir");
        let app = App::open(data.path(), None, None).await.expect("data dir");
        let exe = std::env::current_exe().expect("own path");
        let config = GatewayConfig::parse(&format!(
            "schema_version = 1\ntenant_id = \"bench\"\nprincipal_id = \"agent\"\n\
             scopes = [\"mcp.up.call\"]\norigin_trust = \"user\"\n\
             [servers.up]\ncommand = \"{}\"\nargs = [\"--upstream\"]\n\
             [servers.up.tools.echo]\nside_effect = \"none\"\nidempotency = \"read_only\"\nrisk = \"low\"\n\
             [servers.up.tools.write]\nside_effect = \"external_write\"\nidempotency = \"non_idempotent\"\nrisk = \"medium\"\n",
            exe.display()
        ))
        .expect("the gateway file loads");
        let store = Arc::clone(&app.env.store);
        let (client_io, gateway_io) = tokio::io::duplex(1 << 16);
        let settings = WorkerSettings::new("bench-gateway");
        let gateway = tokio::spawn(airlock_mcp::serve::serve_on(
            config,
            app.env.clone(),
            settings,
            gateway_io,
        ));
        let client = ().serve(client_io).await.expect("gateway handshake");
        let mut at_start = None;
        let through = measure(&client, "up__echo", warmup, calls, || {
            at_start = store.0.sqlite().map(|sqlite| sqlite.group_stats());
        })
        .await;
        let at_end = store.0.sqlite().map(|sqlite| sqlite.group_stats());

        // Beside a parked call of the same conversation (§22.2).
        let mut write = CallToolRequestParams::new("up__write");
        write.set_progress_token(ProgressToken(NumberOrString::Number(1)));
        let parked_peer = client.peer().clone();
        let parked = tokio::spawn(async move { parked_peer.call_tool(write).await });
        let control = app.control(None);
        let reviewer = airlock_core::principal::Principal {
            tenant_id: "bench".into(),
            principal_id: "reviewer".into(),
            scopes: ["approval.read"]
                .iter()
                .filter_map(|s| airlock_core::scope::Scope::parse(s).ok())
                .collect(),
        };
        let mut waiting = false;
        for _ in 0..200 {
            if control
                .list_pending(&reviewer, None, Some(10), None)
                .is_ok_and(|page| !page.items.is_empty())
            {
                waiting = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(waiting, "up__write parks for approval");
        let beside = measure(&client, "up__echo", warmup, calls, || {}).await;
        assert!(!parked.is_finished(), "the write still waits for its approval");
        parked.abort();
        let _ = client.cancel().await;
        let _ = gateway.await;

        println!("airlock mcp gateway vs direct, {calls} sequential calls each after {warmup} warm-up calls");
        let (d50, d99, dmean) = summary("direct", direct);
        let (g50, g99, gmean) = summary("gateway", through);
        let (b50, b99, _) = summary("beside", beside);
        println!(
            "beside a parked call: p50 {:.2}× and p99 {:.2}× the unblocked gateway's",
            b50.as_secs_f64() / g50.as_secs_f64(),
            b99.as_secs_f64() / g99.as_secs_f64(),
        );
        let micros = |a: Duration, b: Duration| (a.as_secs_f64() - b.as_secs_f64()) * 1e6;
        println!(
            "added    p50 {:8.1} µs  p99 {:8.1} µs  mean {:8.1} µs",
            micros(g50, d50),
            micros(g99, d99),
            micros(gmean, dmean)
        );
        if let (Some(start), Some(at_end)) = (at_start, at_end) {
            let stats = at_end.since(&start);
            let (transactions, groups) = (stats.transactions, stats.groups);
            println!(
                "store    {:.2} write transactions per call, {:.2} COMMITs per call ({transactions} transactions, {groups} COMMITs over {calls} calls)",
                transactions as f64 / calls as f64,
                groups as f64 / calls as f64,
            );
            // Of the added latency, the part the writer was held, and of that the COMMITs
            // (the store's own clock, `GroupStats`): the rest is hand-offs and waiting.
            let per_call = |nanos: u64| nanos as f64 / 1000.0 / calls as f64;
            println!(
                "writer   held {:.0} µs per call: statements {:.0} µs (inside SQLite {:.0} µs), COMMITs {:.0} µs",
                per_call(stats.held_nanos),
                per_call(stats.statement_nanos()),
                per_call(stats.sql_nanos),
                per_call(stats.commit_nanos),
            );
        }
    });
}
