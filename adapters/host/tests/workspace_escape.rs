//! Workspace escape tests (SPEC §12.2, §12.5, §16 #37): symlinks planted in a run's workspace (to
//! an outside file and an outside directory, as final and intermediate components, dangling, and
//! swapped in between two calls), hard links, absolute and traversal paths, NUL, over-long
//! components and paths, and FIFOs. Each case drives both the `Workspace` trait and the tool
//! bodies, asserts the exact error and reason code, and checks that the directory outside the
//! root was neither read nor modified.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use airlock_core::ids::{InvocationId, RunId, SessionId};
use airlock_core::ports::{
    BoxFut, Clock, Tool, ToolContext, ToolFailure, ToolSuccess, Workspace, WorkspaceError,
    WorkspaceFactory, WsPath,
};
use airlock_core::time::Timestamp;
use airlock_core::vocab::ToolFailureKind;
use airlock_host::tools::{ListFiles, ReadText, WriteText};
use airlock_host::workspace::LocalWorkspaces;
use serde_json::{Value, json};
use uuid::Uuid;

const SECRET: &[u8] = b"outside secret\n";

struct FixedClock;

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(1_700_000_000_000_000)
    }

    fn sleep_until(&self, _t: Timestamp) -> BoxFut<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// A run's workspace next to a directory outside it that holds a secret file.
struct Fixture {
    _data: tempfile::TempDir,
    outside_dir: tempfile::TempDir,
    root: PathBuf,
    workspace: Arc<dyn Workspace>,
}

impl Fixture {
    fn new() -> Fixture {
        let data = tempfile::tempdir().unwrap();
        let outside_dir = tempfile::tempdir().unwrap();
        std::fs::write(outside_dir.path().join("secret.txt"), SECRET).unwrap();
        let factory = LocalWorkspaces::new(data.path());
        let run = RunId(Uuid::from_u128(0xe5ca9e));
        let workspace = factory.for_run("acme", run).unwrap();
        let root = factory.root_of("acme", run);
        Fixture {
            _data: data,
            outside_dir,
            root,
            workspace,
        }
    }

    fn outside(&self) -> &Path {
        self.outside_dir.path()
    }

    fn secret(&self) -> PathBuf {
        self.outside().join("secret.txt")
    }

    /// Every file and directory below the outside directory, with each file's content: proof
    /// that nothing outside was written. That nothing was read rests on each call's error (no
    /// content comes back); access times would prove little on a `relatime` mount.
    fn outside_snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(dir: &Path, into: &mut BTreeMap<PathBuf, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let entry = entry.unwrap();
                let kind = entry.file_type().unwrap();
                if kind.is_dir() {
                    into.insert(entry.path(), b"<dir>".to_vec());
                    walk(&entry.path(), into);
                } else {
                    into.insert(entry.path(), std::fs::read(entry.path()).unwrap());
                }
            }
        }
        let mut files = BTreeMap::new();
        walk(self.outside(), &mut files);
        files
    }

    fn plant_symlink(&self, relative: &str, target: &Path) {
        let at = self.root.join(relative);
        if let Some(parent) = at.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        symlink(target, at).unwrap();
    }

    fn ws(&self) -> &dyn Workspace {
        self.workspace.as_ref()
    }

    async fn call(&self, tool: &dyn Tool, args: Value) -> Result<ToolSuccess, ToolFailure> {
        // Normalized as the pipeline would; a schema failure is the pipeline's own
        // `tool.arguments_invalid` and never reaches a body.
        let args = tool.spec().normalize_arguments(&args).unwrap();
        let clock = FixedClock;
        let ctx = ToolContext {
            tenant_id: "acme",
            run_id: RunId(Uuid::from_u128(0xe5ca9e)),
            session_id: SessionId(Uuid::from_u128(1)),
            invocation_id: InvocationId(Uuid::from_u128(2)),
            call_id: "c1",
            step_number: 1,
            idempotency_key: "k",
            replay: false,
            workspace: Some(Arc::clone(&self.workspace)),
            clock: &clock,
        };
        // A FIFO must never block a body: every call is bounded.
        tokio::time::timeout(Duration::from_secs(10), tool.invoke(&ctx, &args))
            .await
            .expect("a workspace tool body returned within 10 s")
    }

    async fn read_code(&self, path: &str) -> String {
        code(self.call(&ReadText::new(), json!({ "path": path })).await)
    }

    async fn write_code(&self, path: &str, content: &str) -> String {
        code(
            self.call(
                &WriteText::new(),
                json!({ "path": path, "content": content }),
            )
            .await,
        )
    }

    async fn list_code(&self, path: &str, recursive: bool) -> String {
        code(
            self.call(
                &ListFiles::new(),
                json!({ "path": path, "recursive": recursive }),
            )
            .await,
        )
    }
}

/// The reason code of a failure (panics on success, naming the output).
fn code(result: Result<ToolSuccess, ToolFailure>) -> String {
    match result {
        Ok(success) => panic!("expected a failure, got {}", success.structured),
        Err(failure) => {
            assert!(!failure.retryable, "{failure:?}");
            failure.reason_code
        }
    }
}

fn path(s: &str) -> WsPath {
    WsPath::parse(s).unwrap()
}

const ESCAPE: &str = "tool.arguments_invalid";
const NO_SUCH_PATH: &str = "tool.not_found.no_such_path";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_to_an_outside_file_is_never_followed() {
    let f = Fixture::new();
    f.plant_symlink("leak.txt", &f.secret());
    let before = f.outside_snapshot();

    assert_eq!(
        f.ws().read_bounded(&path("leak.txt"), 1 << 20),
        Err(WorkspaceError::Escape)
    );
    assert_eq!(
        f.ws().write(&path("leak.txt"), b"pwned"),
        Err(WorkspaceError::Escape)
    );
    assert_eq!(f.read_code("leak.txt").await, ESCAPE);
    assert_eq!(f.write_code("leak.txt", "pwned").await, ESCAPE);
    // As an intermediate component it is neither a directory nor followed.
    assert_eq!(
        f.ws().read_bounded(&path("leak.txt/x"), 1 << 20),
        Err(WorkspaceError::Escape)
    );
    assert_eq!(f.write_code("leak.txt/x", "pwned").await, ESCAPE);
    assert_eq!(f.list_code("leak.txt", false).await, ESCAPE);

    assert_eq!(f.outside_snapshot(), before);
    assert!(
        std::fs::symlink_metadata(f.root.join("leak.txt"))
            .unwrap()
            .is_symlink()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_to_an_outside_directory_is_never_followed() {
    let f = Fixture::new();
    f.plant_symlink("out", f.outside());
    f.plant_symlink("real/nested/out", f.outside());
    let before = f.outside_snapshot();

    for through in ["out/secret.txt", "real/nested/out/secret.txt"] {
        assert_eq!(
            f.ws().read_bounded(&path(through), 1 << 20),
            Err(WorkspaceError::Escape),
            "{through}"
        );
        assert_eq!(f.read_code(through).await, ESCAPE, "{through}");
    }
    for target in [
        "out/secret.txt",
        "out/new.txt",
        "out/sub/new.txt",
        "real/nested/out/new.txt",
    ] {
        assert_eq!(
            f.ws().write(&path(target), b"pwned"),
            Err(WorkspaceError::Escape),
            "{target}"
        );
        assert_eq!(f.write_code(target, "pwned").await, ESCAPE, "{target}");
    }
    for listed in ["out", "real/nested/out"] {
        assert_eq!(
            f.ws().list(&path(listed), true),
            Err(WorkspaceError::Escape)
        );
        assert_eq!(f.list_code(listed, false).await, ESCAPE);
    }
    // A recursive listing of the root neither shows nor descends the links.
    let entries = f.ws().list(&path(""), true).unwrap();
    let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["real", "real/nested"]);

    assert_eq!(f.outside_snapshot(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dangling_symlink_is_not_created_through() {
    let f = Fixture::new();
    let target = f.outside().join("created-by-escape.txt");
    f.plant_symlink("dangling", &target);
    f.plant_symlink("dangling-dir", &f.outside().join("made-dir"));
    let before = f.outside_snapshot();

    assert_eq!(
        f.ws().write(&path("dangling"), b"x"),
        Err(WorkspaceError::Escape)
    );
    assert_eq!(f.write_code("dangling", "x").await, ESCAPE);
    assert_eq!(f.read_code("dangling").await, ESCAPE);
    assert_eq!(f.write_code("dangling-dir/a.txt", "x").await, ESCAPE);

    assert!(!target.exists());
    assert!(!f.outside().join("made-dir").exists());
    assert_eq!(f.outside_snapshot(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_symlink_between_calls_is_refused() {
    let f = Fixture::new();
    let first = f
        .call(
            &WriteText::new(),
            json!({"path": "work/a.txt", "content": "mine"}),
        )
        .await
        .unwrap();
    assert_eq!(first.structured["created"], json!(true));
    let read = f
        .call(&ReadText::new(), json!({"path": "work/a.txt"}))
        .await
        .unwrap();
    assert_eq!(read.structured["content"], json!("mine"));

    // Between calls, something on the host replaces the directory with a link to the outside.
    std::fs::rename(f.root.join("work"), f.root.join("work-moved")).unwrap();
    std::fs::write(f.outside().join("a.txt"), b"outside a\n").unwrap();
    symlink(f.outside(), f.root.join("work")).unwrap();
    let before = f.outside_snapshot();

    assert_eq!(f.read_code("work/a.txt").await, ESCAPE);
    assert_eq!(f.read_code("work/secret.txt").await, ESCAPE);
    assert_eq!(f.write_code("work/a.txt", "pwned").await, ESCAPE);
    assert_eq!(f.write_code("work/b.txt", "pwned").await, ESCAPE);
    assert_eq!(f.list_code("work", true).await, ESCAPE);
    assert_eq!(f.outside_snapshot(), before);

    // The same for a file swapped for a symlink to the secret.
    std::fs::remove_file(f.root.join("work-moved/a.txt")).unwrap();
    symlink(f.secret(), f.root.join("work-moved/a.txt")).unwrap();
    assert_eq!(f.read_code("work-moved/a.txt").await, ESCAPE);
    assert_eq!(f.write_code("work-moved/a.txt", "pwned").await, ESCAPE);
    assert_eq!(f.outside_snapshot(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_inside_the_root_is_not_followed_either() {
    let f = Fixture::new();
    f.ws().write(&path("dir/file.txt"), b"inside").unwrap();
    symlink("dir", f.root.join("alias")).unwrap();
    symlink("dir/file.txt", f.root.join("file-alias")).unwrap();
    assert_eq!(f.read_code("alias/file.txt").await, ESCAPE);
    assert_eq!(f.read_code("file-alias").await, ESCAPE);
    assert_eq!(f.list_code("alias", false).await, ESCAPE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_hard_link_to_an_outside_file_is_refused() {
    let f = Fixture::new();
    std::fs::hard_link(f.secret(), f.root.join("hard.txt")).unwrap();
    let before = f.outside_snapshot();
    assert_eq!(
        f.ws().read_bounded(&path("hard.txt"), 1 << 20),
        Err(WorkspaceError::Escape)
    );
    assert_eq!(
        f.ws().write(&path("hard.txt"), b"pwned"),
        Err(WorkspaceError::Escape)
    );
    assert_eq!(f.read_code("hard.txt").await, ESCAPE);
    assert_eq!(f.write_code("hard.txt", "pwned").await, ESCAPE);
    assert_eq!(f.outside_snapshot(), before);

    // Nor does a listing report it: its byte count would be the outside file's.
    std::fs::write(f.root.join("mine.txt"), b"ab").unwrap();
    let listed = f.ws().list(&path(""), true).unwrap();
    assert_eq!(
        listed.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(),
        ["mine.txt"],
        "{listed:?}"
    );
    let tool = f
        .call(&ListFiles::new(), json!({"path": "", "recursive": true}))
        .await
        .unwrap();
    assert!(
        !tool.structured.to_string().contains("hard.txt"),
        "{}",
        tool.structured
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_traversal_and_malformed_paths_are_escapes() {
    let f = Fixture::new();
    let secret = f.secret().to_str().unwrap().to_owned();
    let long_component = "a".repeat(256);
    let nested_long = format!("ok/{}", "b".repeat(256));
    // 4098 bytes in 2049 characters, so the schema's 4096-character limit lets it through.
    let long_path = vec!["é".repeat(127); 17].join("/") + "/ééééé";
    assert!(long_path.len() > 4096 && long_path.chars().count() <= 4096);
    let before = f.outside_snapshot();
    for bad in [
        secret.as_str(),
        "/etc/passwd",
        "../outside",
        "../../../../../../etc/passwd",
        "a/../../secret.txt",
        "..",
        ".",
        "a//b",
        "a/./b",
        "a/",
        "./a",
        "/",
        "nul\0path",
        "\0",
        long_component.as_str(),
        nested_long.as_str(),
        long_path.as_str(),
    ] {
        assert_eq!(WsPath::parse(bad), Err(WorkspaceError::Escape), "{bad:?}");
        assert_eq!(f.read_code(bad).await, ESCAPE, "read {bad:?}");
        assert_eq!(f.write_code(bad, "pwned").await, ESCAPE, "write {bad:?}");
        assert_eq!(f.list_code(bad, true).await, ESCAPE, "list {bad:?}");
    }
    // A 255-byte component is fine.
    let longest = "c".repeat(255);
    f.call(&WriteText::new(), json!({"path": longest, "content": "x"}))
        .await
        .unwrap();
    assert_eq!(f.outside_snapshot(), before);
    assert_eq!(
        f.ws().list(&path(""), false).unwrap().len(),
        1,
        "only the 255-byte file was written"
    );
}

/// Runs `work` on its own thread and fails the test unless it returns within 10 s.
fn within_10s<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(work());
    });
    result
        .recv_timeout(Duration::from_secs(10))
        .expect("the workspace calls returned within 10 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_neither_blocks_nor_is_read_written_or_listed() {
    let f = Fixture::new();
    let dir = rustix::fs::open(
        &f.root,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    rustix::fs::mkfifoat(&dir, "pipe", rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
    // With no writer, a blocking open for reading would hang forever; every call must return.
    // The trait calls run on their own thread with a deadline, so a regression fails the test
    // instead of hanging it (the tool calls are bounded by `Fixture::call`).
    let ws = Arc::clone(&f.workspace);
    let (read, write, list, listing) = within_10s(move || {
        (
            ws.read_bounded(&path("pipe"), 1 << 20),
            ws.write(&path("pipe"), b"x"),
            ws.list(&path("pipe"), false),
            ws.list(&path(""), true),
        )
    });
    assert_eq!(read, Err(WorkspaceError::NotAFile));
    assert_eq!(write, Err(WorkspaceError::NotAFile));
    assert_eq!(list, Err(WorkspaceError::NotADirectory));
    assert_eq!(listing, Ok(vec![]));
    assert_eq!(
        f.read_code("pipe").await,
        "tool.invalid_arguments.not_a_file"
    );
    assert_eq!(f.write_code("pipe", "x").await, ESCAPE);
    assert_eq!(
        f.list_code("pipe", false).await,
        "tool.invalid_arguments.not_a_directory"
    );
    assert_eq!(f.read_code("pipe/x").await, NO_SUCH_PATH);
    assert_eq!(f.write_code("pipe/x", "x").await, ESCAPE);
    // The FIFO is still a FIFO.
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(f.root.join("pipe"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_and_directories_in_the_way_give_the_section_12_5_codes() {
    let f = Fixture::new();
    f.ws().write(&path("a.txt"), b"text").unwrap();
    f.ws().write(&path("dir/b.txt"), b"text").unwrap();
    // A file as an intermediate component.
    assert_eq!(
        f.ws().read_bounded(&path("a.txt/b"), 10),
        Err(WorkspaceError::NotADirectory)
    );
    assert_eq!(f.read_code("a.txt/b").await, NO_SUCH_PATH);
    assert_eq!(
        f.ws().write(&path("a.txt/b"), b"x"),
        Err(WorkspaceError::NotADirectory)
    );
    assert_eq!(f.write_code("a.txt/b", "x").await, ESCAPE);
    assert_eq!(
        f.list_code("a.txt", false).await,
        "tool.invalid_arguments.not_a_directory"
    );
    // A directory where a file is expected.
    assert_eq!(
        f.ws().write(&path("dir"), b"x"),
        Err(WorkspaceError::NotAFile)
    );
    assert_eq!(f.write_code("dir", "x").await, ESCAPE);
    assert_eq!(
        f.read_code("dir").await,
        "tool.invalid_arguments.not_a_file"
    );
    assert_eq!(f.read_code("").await, "tool.invalid_arguments.not_a_file");
    assert_eq!(f.write_code("", "x").await, ESCAPE);
    // Missing paths.
    assert_eq!(
        f.ws().read_bounded(&path("nope"), 10),
        Err(WorkspaceError::NotFound)
    );
    assert_eq!(f.read_code("nope").await, NO_SUCH_PATH);
    assert_eq!(f.read_code("nope/deeper.txt").await, NO_SUCH_PATH);
    assert_eq!(f.list_code("nope", false).await, NO_SUCH_PATH);
    let failure = f
        .call(&ReadText::new(), json!({"path": "nope"}))
        .await
        .unwrap_err();
    assert_eq!(failure.kind, ToolFailureKind::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_root_planted_as_a_symlink_is_not_used() {
    let data = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let factory = LocalWorkspaces::new(data.path());
    let run = RunId(Uuid::from_u128(99));
    let root = factory.root_of("acme", run);
    std::fs::create_dir_all(root.parent().unwrap()).unwrap();
    symlink(outside.path(), &root).unwrap();
    match factory.for_run("acme", run) {
        Err(WorkspaceError::Io(_)) => {}
        Err(other) => panic!("expected an I/O error, got {other:?}"),
        Ok(_) => panic!("a symlinked root must not be opened"),
    }
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_file_gets_the_workspace_file_mode_once_the_tool_writes_it() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new();
    let planted = f.root.join("shared.txt");
    std::fs::write(&planted, b"host").unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(f.ws().write(&path("shared.txt"), b"tool"), Ok(false));
    let mode = std::fs::metadata(&planted).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        mode, 0o600,
        "tool-written bytes are not left world-readable"
    );
    assert_eq!(std::fs::read(&planted).unwrap(), b"tool");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recursive_listing_shows_but_does_not_enter_a_directory_at_the_path_limit() {
    // 17 nested directories of 240 bytes: the deepest one's relative path is exactly 4096 bytes,
    // the longest a WsPath may name, so none of its children could be named. Planted from the
    // host with *at calls, as an absolute path this long exceeds PATH_MAX.
    let f = Fixture::new();
    let name = "d".repeat(240);
    let mut dir = rustix::fs::open(
        &f.root,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    for _ in 0..17 {
        rustix::fs::mkdirat(&dir, name.as_str(), rustix::fs::Mode::from_raw_mode(0o700)).unwrap();
        dir = rustix::fs::openat(
            &dir,
            name.as_str(),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
    }
    rustix::fs::mkdirat(&dir, "x", rustix::fs::Mode::from_raw_mode(0o700)).unwrap();
    let deepest = vec![name.as_str(); 17].join("/");
    assert_eq!(deepest.len(), 4096);
    let entries = f.ws().list(&path(""), true).expect("the listing succeeds");
    assert_eq!(
        entries.len(),
        17,
        "every named directory, nothing below the limit"
    );
    assert_eq!(
        entries.last().map(|e| e.path.as_str()),
        Some(deepest.as_str())
    );
    assert!(
        entries
            .iter()
            .all(|e| e.kind == airlock_core::ports::EntryKind::Directory)
    );
}
