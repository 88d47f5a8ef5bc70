//! The §12.5 outputs of the workspace tools and `demo.external_write`, §12.3 provenance across a
//! restart (a new factory), and the listing's order, truncation and visit limit.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_core::ids::{InvocationId, RunId, SessionId};
use airlock_core::ports::{
    BoxFut, Clock, EntryKind, Provenance, Tool, ToolContext, ToolFailure, ToolSuccess, Workspace,
    WorkspaceError, WorkspaceFactory, WsPath,
};
use airlock_core::time::Timestamp;
use airlock_core::vocab::{ToolFailureKind, TrustLevel};
use airlock_host::tools::{
    ExternalWrite, ListFiles, ReadText, WriteText, builtin_registry, outbox_path,
};
use airlock_host::workspace::{LocalWorkspaces, MAX_VISITED_ENTRIES};
use serde_json::{Value, json};
use uuid::Uuid;

const HELLO_CHECKSUM: &str =
    "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

struct FixedClock;

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(1_700_000_000_123_456)
    }

    fn sleep_until(&self, _t: Timestamp) -> BoxFut<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

fn run_id() -> RunId {
    RunId(Uuid::from_u128(0x5eed))
}

fn path(s: &str) -> WsPath {
    WsPath::parse(s).unwrap()
}

/// Invokes a body with arguments normalized by its own schema, as the pipeline does.
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
        run_id: run_id(),
        session_id: SessionId(Uuid::from_u128(1)),
        invocation_id: InvocationId(Uuid::from_u128(0xabc)),
        call_id: "c1",
        step_number: 1,
        idempotency_key: key,
        replay: false,
        workspace,
        clock: &clock,
    };
    tool.invoke(&ctx, &args).await
}

struct Fixture {
    data: tempfile::TempDir,
    factory: LocalWorkspaces,
}

impl Fixture {
    fn new() -> Fixture {
        let data = tempfile::tempdir().unwrap();
        let factory = LocalWorkspaces::new(data.path());
        Fixture { data, factory }
    }

    fn workspace(&self) -> Arc<dyn Workspace> {
        self.factory.for_run("acme", run_id()).unwrap()
    }

    fn root(&self) -> PathBuf {
        self.factory.root_of("acme", run_id())
    }

    /// A new process: same data directory, fresh factory, empty provenance.
    fn restart(&self) -> LocalWorkspaces {
        LocalWorkspaces::new(self.data.path())
    }

    async fn tool(&self, tool: &dyn Tool, args: Value) -> Result<ToolSuccess, ToolFailure> {
        call(tool, Some(self.workspace()), "k", args).await
    }
}

fn code(result: Result<ToolSuccess, ToolFailure>) -> String {
    match result {
        Ok(success) => panic!("expected a failure, got {}", success.structured),
        Err(failure) => failure.reason_code,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_external_write_records_the_spec_example() {
    let data = tempfile::tempdir().unwrap();
    let tool = ExternalWrite::new(outbox_path(data.path()));
    let out = call(
        &tool,
        None,
        "key-1",
        json!({"destination": "demo", "content": "hello"}),
    )
    .await
    .unwrap();
    assert_eq!(
        out.structured,
        json!({"recorded": true, "destination": "demo", "byte_count": 5, "checksum": HELLO_CHECKSUM})
    );
    assert_eq!(out.trust, None);

    let text = std::fs::read_to_string(data.path().join("outbox.jsonl")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        lines,
        vec![json!({
            "idempotency_key": "key-1",
            "invocation_id": "00000000-0000-0000-0000-000000000abc",
            "destination": "demo",
            "content": "hello",
            "checksum": HELLO_CHECKSUM,
            "recorded_at": "2023-11-14T22:13:20.123456Z",
        })]
    );
    assert!(text.ends_with('\n'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_external_write_never_deduplicates() {
    let data = tempfile::tempdir().unwrap();
    let registry = builtin_registry(data.path()).unwrap();
    let tool = registry.resolve("demo.external_write", None).unwrap();
    for _ in 0..2 {
        call(
            tool.as_ref(),
            None,
            "same-key",
            json!({"destination": "demo", "content": "hello"}),
        )
        .await
        .unwrap();
    }
    let text = std::fs::read_to_string(outbox_path(data.path())).unwrap();
    let keys: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["idempotency_key"].clone())
        .collect();
    assert_eq!(keys, vec![json!("same-key"), json!("same-key")]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(outbox_path(data.path()))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_external_write_without_a_data_directory_fails_before_any_effect() {
    let data = tempfile::tempdir().unwrap();
    let tool = ExternalWrite::new(data.path().join("missing").join("outbox.jsonl"));
    let failure = call(
        &tool,
        None,
        "k",
        json!({"destination": "demo", "content": "x"}),
    )
    .await
    .unwrap_err();
    assert_eq!(failure.reason_code, "tool.internal_error");
    assert_eq!(failure.kind, ToolFailureKind::Internal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_text_reports_created_then_not_with_the_same_checksum() {
    let f = Fixture::new();
    let args = json!({"path": "notes/a.txt", "content": "hello"});
    let first = f.tool(&WriteText::new(), args.clone()).await.unwrap();
    assert_eq!(
        first.structured,
        json!({"path": "notes/a.txt", "byte_count": 5, "checksum": HELLO_CHECKSUM, "created": true})
    );
    let second = f.tool(&WriteText::new(), args).await.unwrap();
    assert_eq!(
        second.structured,
        json!({"path": "notes/a.txt", "byte_count": 5, "checksum": HELLO_CHECKSUM, "created": false})
    );
    // Bytes verbatim, and a shorter rewrite truncates.
    f.tool(
        &WriteText::new(),
        json!({"path": "notes/a.txt", "content": "hi\r\n"}),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read(f.root().join("notes/a.txt")).unwrap(),
        b"hi\r\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_text_after_a_write_in_this_process_is_internal_tool() {
    let f = Fixture::new();
    f.tool(
        &WriteText::new(),
        json!({"path": "notes/a.txt", "content": "hello"}),
    )
    .await
    .unwrap();
    let read = f
        .tool(&ReadText::new(), json!({"path": "notes/a.txt"}))
        .await
        .unwrap();
    assert_eq!(
        read.structured,
        json!({"path": "notes/a.txt", "content": "hello", "byte_count": 5, "checksum": HELLO_CHECKSUM})
    );
    assert_eq!(read.trust, Some(TrustLevel::InternalTool));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_same_file_reads_as_external_untrusted() {
    let f = Fixture::new();
    f.workspace().write(&path("notes/a.txt"), b"hello").unwrap();
    assert_eq!(
        f.workspace()
            .provenance(&path("notes/a.txt"), Some(b"hello")),
        Provenance::Written
    );

    let restarted = f.restart();
    let workspace = restarted.for_run("acme", run_id()).unwrap();
    assert_eq!(
        workspace.provenance(&path("notes/a.txt"), Some(b"hello")),
        Provenance::Unknown
    );
    assert_eq!(
        workspace.provenance(&path("notes/a.txt"), None),
        Provenance::Unknown
    );
    let read = call(
        &ReadText::new(),
        Some(Arc::clone(&workspace)),
        "k",
        json!({"path": "notes/a.txt"}),
    )
    .await
    .unwrap();
    assert_eq!(read.structured["content"], json!("hello"));
    assert_eq!(read.trust, Some(TrustLevel::ExternalUntrusted));
    let listed = call(
        &ListFiles::new(),
        Some(Arc::clone(&workspace)),
        "k",
        json!({"recursive": true}),
    )
    .await
    .unwrap();
    assert_eq!(listed.trust, Some(TrustLevel::ExternalUntrusted));

    // Writing it again in the new process makes it this handle's own.
    workspace.write(&path("notes/a.txt"), b"hello").unwrap();
    assert_eq!(
        workspace.provenance(&path("notes/a.txt"), Some(b"hello")),
        Provenance::Written
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_changed_behind_the_handle_reads_as_external_untrusted() {
    let f = Fixture::new();
    f.workspace().write(&path("a.txt"), b"mine").unwrap();
    std::fs::write(f.root().join("a.txt"), b"theirs").unwrap();
    let read = f
        .tool(&ReadText::new(), json!({"path": "a.txt"}))
        .await
        .unwrap();
    assert_eq!(read.structured["content"], json!("theirs"));
    assert_eq!(read.trust, Some(TrustLevel::ExternalUntrusted));
    // A file that this handle never wrote, planted next to it.
    std::fs::write(f.root().join("planted.txt"), b"mine").unwrap();
    let read = f
        .tool(&ReadText::new(), json!({"path": "planted.txt"}))
        .await
        .unwrap();
    assert_eq!(read.trust, Some(TrustLevel::ExternalUntrusted));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_text_refuses_non_text_and_large_files() {
    let f = Fixture::new();
    let root = f.root();
    f.workspace().write(&path("x"), b"").unwrap();
    std::fs::write(root.join("nul.txt"), b"a\0b").unwrap();
    std::fs::write(root.join("latin1.txt"), b"caf\xe9").unwrap();
    std::fs::write(root.join("limit.txt"), vec![b'a'; 1_048_576]).unwrap();
    std::fs::write(root.join("over.txt"), vec![b'a'; 1_048_577]).unwrap();
    assert_eq!(
        code(f.tool(&ReadText::new(), json!({"path": "nul.txt"})).await),
        "tool.invalid_arguments.not_text"
    );
    assert_eq!(
        code(
            f.tool(&ReadText::new(), json!({"path": "latin1.txt"}))
                .await
        ),
        "tool.invalid_arguments.not_text"
    );
    assert_eq!(
        code(f.tool(&ReadText::new(), json!({"path": "over.txt"})).await),
        "tool.invalid_arguments.too_large"
    );
    let limit = f
        .tool(&ReadText::new(), json!({"path": "limit.txt"}))
        .await
        .unwrap();
    assert_eq!(limit.structured["byte_count"], json!(1_048_576));
    let empty = f
        .tool(&ReadText::new(), json!({"path": "x"}))
        .await
        .unwrap();
    assert_eq!(
        empty.structured,
        json!({"path": "x", "content": "", "byte_count": 0,
               "checksum": "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"})
    );
    assert_eq!(
        f.workspace().read_bounded(&path("limit.txt"), 10),
        Err(WorkspaceError::TooLarge)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_tools_without_a_handle_fail_internally() {
    for (tool, args) in [
        (
            Box::new(ReadText::new()) as Box<dyn Tool>,
            json!({"path": "a"}),
        ),
        (Box::new(ListFiles::new()), json!({})),
        (
            Box::new(WriteText::new()),
            json!({"path": "a", "content": "x"}),
        ),
    ] {
        let failure = call(tool.as_ref(), None, "k", args).await.unwrap_err();
        assert_eq!(failure.reason_code, "tool.internal_error");
        assert_eq!(failure.kind, ToolFailureKind::Internal);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn bodies_also_run_on_a_current_thread_runtime() {
    let f = Fixture::new();
    let out = f
        .tool(&WriteText::new(), json!({"path": "a", "content": "x"}))
        .await
        .unwrap();
    assert_eq!(out.structured["created"], json!(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_files_sorts_by_utf8_bytes_of_the_relative_path() {
    let f = Fixture::new();
    let ws = f.workspace();
    for p in [
        "b.txt",
        "a/z.txt",
        "a.txt",
        "a-b",
        "B",
        "é.txt",
        "a/b/c.txt",
    ] {
        ws.write(&path(p), p.as_bytes()).unwrap();
    }
    let listed = f
        .tool(&ListFiles::new(), json!({"recursive": true}))
        .await
        .unwrap();
    assert_eq!(
        listed.structured,
        json!({"path": "", "truncated": false, "entries": [
            {"path": "B", "kind": "file", "byte_count": 1},
            {"path": "a", "kind": "directory", "byte_count": 0},
            {"path": "a-b", "kind": "file", "byte_count": 3},
            {"path": "a.txt", "kind": "file", "byte_count": 5},
            {"path": "a/b", "kind": "directory", "byte_count": 0},
            {"path": "a/b/c.txt", "kind": "file", "byte_count": 9},
            {"path": "a/z.txt", "kind": "file", "byte_count": 7},
            {"path": "b.txt", "kind": "file", "byte_count": 5},
            {"path": "é.txt", "kind": "file", "byte_count": 6},
        ]})
    );
    assert_eq!(listed.trust, Some(TrustLevel::InternalTool));

    let shallow = f
        .tool(&ListFiles::new(), json!({"path": "a"}))
        .await
        .unwrap();
    assert_eq!(
        shallow.structured,
        json!({"path": "a", "truncated": false, "entries": [
            {"path": "a/b", "kind": "directory", "byte_count": 0},
            {"path": "a/z.txt", "kind": "file", "byte_count": 7},
        ]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_listing_is_internal_tool_and_a_planted_entry_is_not() {
    let f = Fixture::new();
    let empty = f.tool(&ListFiles::new(), json!({})).await.unwrap();
    assert_eq!(
        empty.structured,
        json!({"path": "", "entries": [], "truncated": false})
    );
    assert_eq!(empty.trust, Some(TrustLevel::InternalTool));

    f.workspace().write(&path("mine.txt"), b"1").unwrap();
    std::fs::create_dir(f.root().join("theirs")).unwrap();
    let mixed = f.tool(&ListFiles::new(), json!({})).await.unwrap();
    assert_eq!(mixed.trust, Some(TrustLevel::ExternalUntrusted));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_files_skips_names_that_are_not_utf8() {
    let f = Fixture::new();
    f.workspace().write(&path("ok.txt"), b"1").unwrap();
    let bad = f.root().join(OsStr::from_bytes(b"bad\xff.txt"));
    std::fs::write(bad, b"x").unwrap();
    let listed = f.tool(&ListFiles::new(), json!({})).await.unwrap();
    assert_eq!(
        listed.structured["entries"],
        json!([{"path": "ok.txt", "kind": "file", "byte_count": 1}])
    );
}

fn fill(dir: &Path, count: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..count {
        std::fs::write(dir.join(format!("f{i:05}")), b"").unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_files_keeps_the_first_1000_entries() {
    let f = Fixture::new();
    f.workspace();
    fill(&f.root().join("many"), 1001);
    let listed = f
        .tool(&ListFiles::new(), json!({"path": "many"}))
        .await
        .unwrap();
    let entries = listed.structured["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1000);
    assert_eq!(listed.structured["truncated"], json!(true));
    assert_eq!(entries[0]["path"], json!("many/f00000"));
    assert_eq!(entries[999]["path"], json!("many/f00999"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_files_visits_at_most_10000_entries() {
    let f = Fixture::new();
    f.workspace();
    // Exactly the limit is fine, recursively: 1 directory + 9 999 files.
    fill(&f.root().join("tree"), MAX_VISITED_ENTRIES - 1);
    let listed = f
        .tool(&ListFiles::new(), json!({"recursive": true}))
        .await
        .unwrap();
    assert_eq!(listed.structured["truncated"], json!(true));
    assert_eq!(
        f.workspace().list(&path(""), true).unwrap().len(),
        MAX_VISITED_ENTRIES
    );
    // One more entry anywhere in the walk is too many.
    std::fs::write(f.root().join("tree/one-more"), b"").unwrap();
    assert_eq!(
        code(f.tool(&ListFiles::new(), json!({"recursive": true})).await),
        "tool.invalid_arguments.too_many_entries"
    );
    assert_eq!(
        f.workspace().list(&path(""), true).err(),
        Some(WorkspaceError::TooManyEntries)
    );
    // The same tree listed without recursion visits only the root's one entry.
    let shallow = f.tool(&ListFiles::new(), json!({})).await.unwrap();
    assert_eq!(
        shallow.structured["entries"],
        json!([{"path": "tree", "kind": "directory", "byte_count": 0}])
    );
    // Entries that are not listed (symlinks) still count as visited: 9 999 files and two links.
    std::fs::remove_file(f.root().join("tree/one-more")).unwrap();
    std::os::unix::fs::symlink("/", f.root().join("tree/link")).unwrap();
    assert!(f.workspace().list(&path("tree"), false).is_ok());
    std::os::unix::fs::symlink("/", f.root().join("tree/link2")).unwrap();
    assert_eq!(
        f.workspace().list(&path("tree"), false).err(),
        Some(WorkspaceError::TooManyEntries)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_tree_lists_without_running_out_of_descriptors() {
    let f = Fixture::new();
    // 1 500 nested directories: deeper than a typical descriptor limit of 1 024.
    let deep: Vec<String> = (0..1500).map(|i| format!("{}", i % 10)).collect();
    let file = format!("{}/leaf.txt", deep.join("/"));
    f.workspace().write(&path(&file), b"leaf").unwrap();
    let entries = f.workspace().list(&path(""), true).unwrap();
    assert_eq!(entries.len(), 1501);
    let last = entries.iter().find(|e| e.kind == EntryKind::File).unwrap();
    assert_eq!(last.path, file);
    let read = f
        .tool(&ReadText::new(), json!({"path": file}))
        .await
        .unwrap();
    assert_eq!(read.trust, Some(TrustLevel::InternalTool));
}

/// A workspace whose every operation blocks until the test releases it, like a hung mount.
struct StuckWorkspace {
    release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl StuckWorkspace {
    fn wait(&self) {
        let release = self.release.lock().unwrap();
        let _ = release.recv_timeout(std::time::Duration::from_secs(10));
    }
}

impl Workspace for StuckWorkspace {
    fn read_bounded(&self, _: &WsPath, _: u64) -> Result<Vec<u8>, WorkspaceError> {
        self.wait();
        Ok(b"late".to_vec())
    }
    fn write(&self, _: &WsPath, _: &[u8]) -> Result<bool, WorkspaceError> {
        self.wait();
        Ok(true)
    }
    fn list(
        &self,
        _: &WsPath,
        _: bool,
    ) -> Result<Vec<airlock_core::ports::WorkspaceEntry>, WorkspaceError> {
        self.wait();
        Ok(Vec::new())
    }
    fn provenance(&self, _: &WsPath, _: Option<&[u8]>) -> Provenance {
        Provenance::Unknown
    }
}

/// SPEC §9.2 step 10 races the body against the call's timeout. A body stuck in the file system
/// must not hold the task that polls the timer, or the timeout could never fire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_workspace_body_does_not_keep_its_timeout_from_firing() {
    let cases: [(&dyn Tool, Value); 3] = [
        (&ReadText::new(), json!({"path": "a.txt"})),
        (&WriteText::new(), json!({"path": "a.txt", "content": "x"})),
        (&ListFiles::new(), json!({"path": ""})),
    ];
    for (tool, args) in cases {
        let (release, stuck) = std::sync::mpsc::channel();
        let workspace: Arc<dyn Workspace> = Arc::new(StuckWorkspace {
            release: std::sync::Mutex::new(stuck),
        });
        let timed = tokio::time::timeout(
            std::time::Duration::from_millis(100),
            call(tool, Some(workspace), "k", args),
        )
        .await;
        let _ = release.send(());
        assert!(
            timed.is_err(),
            "{}: the body finished before its timeout could fire",
            tool.spec().name
        );
    }
}
