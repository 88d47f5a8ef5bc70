//! The builtin bodies' file effects under injected faults (the `file_faults` seam): a short
//! write, `ENOSPC`, `EIO` and a failed `fsync` in the middle of an outbox record or a workspace
//! file. An outbox record is all or nothing, a failure is reported as SPEC §9.3 requires, and
//! the next effect is intact.

use std::path::Path;
use std::sync::Arc;

use airlock_core::ids::{InvocationId, RunId, SessionId};
use airlock_core::ports::{
    BoxFut, Clock, Provenance, Tool, ToolContext, ToolFailure, ToolSuccess, Workspace,
    WorkspaceFactory, WsPath,
};
use airlock_core::time::Timestamp;
use airlock_core::vocab::ToolFailureKind;
use airlock_host::file_faults::{FaultPlan, FileFault, FileFaults};
use airlock_host::tools::{ExternalWrite, ReadText, WriteText, outbox_path};
use airlock_host::workspace::LocalWorkspaces;
use serde_json::{Value, json};
use uuid::Uuid;

const FAULTS: [FileFault; 4] = [
    FileFault::ShortWrite,
    FileFault::NoSpace,
    FileFault::Io,
    FileFault::SyncFails,
];

struct FixedClock;

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(1_700_000_000_000_000)
    }

    fn sleep_until(&self, _t: Timestamp) -> BoxFut<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

async fn call(
    tool: &dyn Tool,
    workspace: Option<Arc<dyn Workspace>>,
    key: &str,
    args: Value,
) -> Result<ToolSuccess, ToolFailure> {
    let args = tool.spec().normalize_arguments(&args).unwrap();
    let clock = FixedClock;
    let ctx = ToolContext {
        tenant_id: "acme",
        run_id: RunId(Uuid::from_u128(0xfa17)),
        session_id: SessionId(Uuid::from_u128(1)),
        invocation_id: InvocationId(Uuid::from_u128(2)),
        call_id: "c1",
        step_number: 1,
        idempotency_key: key,
        replay: false,
        workspace,
        clock: &clock,
    };
    tool.invoke(&ctx, &args).await
}

async fn send(tool: &ExternalWrite, key: &str, content: &str) -> Result<ToolSuccess, ToolFailure> {
    call(
        tool,
        None,
        key,
        json!({"destination": "demo", "content": content}),
    )
    .await
}

/// The outbox's records by idempotency key; panics on a line that is not a record.
fn records(outbox: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(outbox).unwrap_or_default();
    assert!(text.is_empty() || text.ends_with('\n'), "{text:?}");
    text.lines()
        .map(|line| {
            let record: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("an unparseable outbox line ({e}): {line:?}"));
            record["idempotency_key"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_append_leaves_no_partial_record_and_the_next_one_is_intact() {
    for fault in FAULTS {
        let data = tempfile::tempdir().unwrap();
        let outbox = outbox_path(data.path());
        let faults = FileFaults::injectable();
        let tool = ExternalWrite::with_faults(outbox.clone(), faults.clone());
        send(&tool, "e1", "first").await.unwrap();
        let before = std::fs::read(&outbox).unwrap();

        // The record is about 4.2 KB; the fault strikes after 100 of its bytes.
        faults.arm(FaultPlan {
            fault,
            after_bytes: 100,
        });
        let failed = send(&tool, "e2", &"x".repeat(4000)).await.unwrap_err();
        assert_eq!(
            (failed.kind, failed.reason_code.as_str()),
            (ToolFailureKind::OutcomeUnknown, "tool.outcome_unknown"),
            "{fault:?}: the effect may have happened (§9.3)"
        );
        assert!(
            failed.detail.contains("the partial record was removed"),
            "{fault:?}: {}",
            failed.detail
        );
        assert_eq!(
            std::fs::read(&outbox).unwrap(),
            before,
            "{fault:?}: nothing of the failed record is left"
        );

        send(&tool, "e3", "third").await.unwrap();
        assert_eq!(records(&outbox), ["e1", "e3"], "{fault:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_starts_on_a_fresh_line_after_a_torn_one() {
    // A process killed part-way through a write (or a truncation that failed) leaves a fragment
    // without its newline; the next record must not be glued onto it.
    let data = tempfile::tempdir().unwrap();
    let outbox = outbox_path(data.path());
    let tool = ExternalWrite::new(outbox.clone());
    send(&tool, "e1", "first").await.unwrap();
    let mut torn = std::fs::read(&outbox).unwrap();
    torn.extend_from_slice(br#"{"idempotency_key":"e2","conte"#);
    std::fs::write(&outbox, &torn).unwrap();

    send(&tool, "e3", "third").await.unwrap();

    let text = std::fs::read_to_string(&outbox).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[1], r#"{"idempotency_key":"e2","conte"#);
    let third: Value = serde_json::from_str(lines[2]).unwrap();
    assert_eq!(third["idempotency_key"], "e3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_workspace_write_is_an_internal_error_and_a_rewrite_repairs_it() {
    // `workspace.write_text` is idempotent: a failure is `tool.internal_error` (§12.5, `Io`), the
    // half-written file is not reported as this handle's, and writing again replaces it.
    for fault in FAULTS {
        let data = tempfile::tempdir().unwrap();
        let faults = FileFaults::injectable();
        let factory = LocalWorkspaces::with_faults(data.path(), faults.clone());
        let workspace = factory
            .for_run("acme", RunId(Uuid::from_u128(0xfa17)))
            .unwrap();
        let writer = WriteText::new();
        let write = |content: &str| {
            call(
                &writer,
                Some(Arc::clone(&workspace)),
                "k",
                json!({"path": "notes/a.txt", "content": content}),
            )
        };
        let content = "y".repeat(3000);

        faults.arm(FaultPlan {
            fault,
            after_bytes: 1000,
        });
        let failed = write(&content).await.unwrap_err();
        assert_eq!(
            (failed.kind, failed.reason_code.as_str()),
            (ToolFailureKind::Internal, "tool.internal_error"),
            "{fault:?}"
        );
        let path = WsPath::parse("notes/a.txt").unwrap();
        let on_disk = std::fs::read(
            factory
                .root_of("acme", RunId(Uuid::from_u128(0xfa17)))
                .join("notes/a.txt"),
        )
        .unwrap();
        assert_eq!(
            workspace.provenance(&path, Some(&on_disk)),
            Provenance::Unknown,
            "{fault:?}: a failed write is never provenance `Written`"
        );

        write(&content).await.unwrap();
        let read = call(
            &ReadText::new(),
            Some(Arc::clone(&workspace)),
            "k",
            json!({"path": "notes/a.txt"}),
        )
        .await
        .unwrap();
        assert_eq!(read.structured["content"], content.as_str(), "{fault:?}");
    }
}
