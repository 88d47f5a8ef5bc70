//! The local workspace (SPEC §12.1–§12.3): one private directory per `(tenant, run)` under
//! `{data_dir}/workspaces/{sha256_hex(tenant_id)}/{run_id}`, reached only by contained walks.
//!
//! [`LocalWorkspaces`] is the [`WorkspaceFactory`]: it keeps one [`LocalWorkspace`] per `(tenant,
//! run)`, so the provenance a handle records (§12.3) lasts as long as the process does, for the
//! [`MAX_HANDLES`] runs it touched last. An older handle is dropped so that a long-lived worker's
//! memory does not grow with every run it ever served; its run then reads every file as
//! `Unknown`, the answer a restart gives, which only ever asks for more approval. A handle holds no open descriptor between calls: each call opens the
//! root afresh (creating it on demand, directories 0700) and walks from it, so a process serving
//! many runs holds no descriptor per run. No method takes or returns a host path; the only host
//! path handed out is [`LocalWorkspaces::root_of`], for operators and tests.

mod contained;
mod provenance;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use airlock_core::canonical::sha256_hex;
use airlock_core::ids::RunId;
use airlock_core::ports::{
    Provenance, Workspace, WorkspaceEntry, WorkspaceError, WorkspaceFactory, WsPath,
};

use crate::file_faults::FileFaults;

pub use contained::MAX_VISITED_ENTRIES;

use provenance::WrittenPaths;

/// The directory under the data directory that holds every workspace.
const WORKSPACES_DIR: &str = "workspaces";

/// Handles kept per process; see the module docs.
pub const MAX_HANDLES: usize = 1024;

/// Hands out one workspace handle per `(tenant, run)` per process.
pub struct LocalWorkspaces {
    data_dir: PathBuf,
    handles: Mutex<Handles>,
    faults: FileFaults,
}

/// The handles, each with when it was last handed out.
#[derive(Default)]
struct Handles {
    by_run: HashMap<(String, RunId), (Arc<LocalWorkspace>, u64)>,
    /// Counts hand-outs; a handle's stamp is the count at its last one.
    clock: u64,
}

impl Handles {
    fn get(&mut self, key: &(String, RunId)) -> Option<Arc<LocalWorkspace>> {
        self.clock += 1;
        let (handle, last_used) = self.by_run.get_mut(key)?;
        *last_used = self.clock;
        Some(Arc::clone(handle))
    }

    fn insert(&mut self, key: (String, RunId), handle: Arc<LocalWorkspace>) {
        if self.by_run.len() >= MAX_HANDLES
            && let Some(oldest) = self
                .by_run
                .iter()
                .min_by_key(|(_, (_, last_used))| *last_used)
                .map(|(key, _)| key.clone())
        {
            self.by_run.remove(&oldest);
        }
        self.clock += 1;
        self.by_run.insert(key, (handle, self.clock));
    }
}

impl LocalWorkspaces {
    pub fn new(data_dir: &Path) -> LocalWorkspaces {
        LocalWorkspaces::with_faults(data_dir, FileFaults::none())
    }

    /// [`LocalWorkspaces::new`] whose file writes go through `faults` (tests).
    pub fn with_faults(data_dir: &Path, faults: FileFaults) -> LocalWorkspaces {
        // Made absolute once, so a later change of working directory cannot move the roots.
        let data_dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
        LocalWorkspaces {
            data_dir,
            handles: Mutex::new(Handles::default()),
            faults,
        }
    }

    /// The host directory of a run's workspace. The tenant id is hashed so that a hostile id
    /// cannot name another directory.
    pub fn root_of(&self, tenant: &str, run: RunId) -> PathBuf {
        let mut root = self.data_dir.clone();
        root.extend(layout(tenant, run));
        root
    }
}

/// The components of a workspace root below the data directory.
fn layout(tenant: &str, run: RunId) -> [String; 3] {
    [
        WORKSPACES_DIR.to_owned(),
        sha256_hex(tenant.as_bytes()),
        run.to_string(),
    ]
}

impl fmt::Debug for LocalWorkspaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalWorkspaces").finish_non_exhaustive()
    }
}

impl WorkspaceFactory for LocalWorkspaces {
    fn for_run(&self, tenant: &str, run: RunId) -> Result<Arc<dyn Workspace>, WorkspaceError> {
        let mut handles = self.handles.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (tenant.to_owned(), run);
        if let Some(handle) = handles.get(&key) {
            return Ok(handle as Arc<dyn Workspace>);
        }
        let handle = Arc::new(LocalWorkspace {
            data_dir: self.data_dir.clone(),
            layout: layout(tenant, run),
            written: WrittenPaths::default(),
            faults: self.faults.clone(),
        });
        // Create the root now, so a data directory that cannot hold it fails here.
        handle.open_root()?;
        handles.insert(key, Arc::clone(&handle));
        Ok(handle)
    }
}

/// One run's workspace.
pub struct LocalWorkspace {
    data_dir: PathBuf,
    layout: [String; 3],
    written: WrittenPaths,
    faults: FileFaults,
}

impl LocalWorkspace {
    fn open_root(&self) -> Result<std::os::fd::OwnedFd, WorkspaceError> {
        contained::open_root(&self.data_dir, &self.layout)
    }
}

impl fmt::Debug for LocalWorkspace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The run id is in the layout; the host path is deliberately left out.
        f.debug_struct("LocalWorkspace")
            .field("run", &self.layout[2])
            .finish_non_exhaustive()
    }
}

impl Workspace for LocalWorkspace {
    fn read_bounded(&self, path: &WsPath, max_bytes: u64) -> Result<Vec<u8>, WorkspaceError> {
        contained::read_file(self.open_root()?, path.components(), max_bytes)
    }

    fn write(&self, path: &WsPath, data: &[u8]) -> Result<bool, WorkspaceError> {
        let root = self.open_root()?;
        self.written.forget(path);
        let created = contained::write_file(root, path.components(), data, &self.faults)?;
        self.written.record(path, data);
        Ok(created)
    }

    fn list(&self, path: &WsPath, recursive: bool) -> Result<Vec<WorkspaceEntry>, WorkspaceError> {
        contained::list_dir(self.open_root()?, path.components(), recursive)
    }

    /// SPEC §12.3, with one tightening for the case without content (a listing): the path must
    /// also still hold what this handle left there, a directory or a regular file of the
    /// length it wrote. Otherwise a listing could report, as `internal_tool`, the size or kind
    /// of an entry someone changed behind the handle.
    fn provenance(&self, path: &WsPath, content: Option<&[u8]>) -> Provenance {
        if content.is_some() {
            return self.written.provenance(path, content);
        }
        let Some(expected) = self.written.written_shape(path) else {
            return Provenance::Unknown;
        };
        let on_disk = self
            .open_root()
            .and_then(|root| contained::entry_shape(root, path.components()));
        if matches!(on_disk, Ok(Some(now)) if now == expected) {
            Provenance::Written
        } else {
            Provenance::Unknown
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use airlock_core::ports::EntryKind;
    use uuid::Uuid;

    use super::*;

    fn path(s: &str) -> WsPath {
        WsPath::parse(s).unwrap()
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_root_is_hashed_per_tenant_and_private() {
        let data = tempfile::tempdir().unwrap();
        let factory = LocalWorkspaces::new(data.path());
        let run = RunId(Uuid::from_u128(7));
        factory.for_run("../../etc", run).unwrap();
        let root = factory.root_of("../../etc", run);
        assert_eq!(
            root,
            data.path()
                .join("workspaces")
                .join(sha256_hex(b"../../etc"))
                .join(run.to_string())
        );
        assert!(root.is_dir());
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(root.parent().unwrap()), 0o700);
    }

    #[test]
    fn the_least_recently_used_handle_goes_first_and_forgets_what_it_wrote() {
        let data = tempfile::tempdir().unwrap();
        let factory = LocalWorkspaces::new(data.path());
        let run = |n: usize| RunId(Uuid::from_u128(n as u128));
        let zero = factory.for_run("t", run(0)).unwrap();
        let one = factory.for_run("t", run(1)).unwrap();
        one.write(&path("b.txt"), b"mine").unwrap();
        for n in 2..MAX_HANDLES {
            factory.for_run("t", run(n)).unwrap();
        }
        // Full. Run 0 is used again, so run 1 is now the oldest and the next new run evicts it.
        assert!(Arc::ptr_eq(&zero, &factory.for_run("t", run(0)).unwrap()));
        factory.for_run("t", run(MAX_HANDLES)).unwrap();
        assert_eq!(factory.handles.lock().unwrap().by_run.len(), MAX_HANDLES);
        assert!(Arc::ptr_eq(&zero, &factory.for_run("t", run(0)).unwrap()));

        // Run 1 gets a fresh handle: what the old one wrote now reads as a restart would.
        let fresh = factory.for_run("t", run(1)).unwrap();
        assert!(!Arc::ptr_eq(&one, &fresh));
        assert_eq!(
            one.provenance(&path("b.txt"), Some(b"mine")),
            Provenance::Written
        );
        assert_eq!(
            fresh.provenance(&path("b.txt"), Some(b"mine")),
            Provenance::Unknown
        );
        assert_eq!(factory.handles.lock().unwrap().by_run.len(), MAX_HANDLES);
    }

    #[test]
    fn without_content_written_also_needs_the_entry_this_handle_left_on_disk() {
        let data = tempfile::tempdir().unwrap();
        let factory = LocalWorkspaces::new(data.path());
        let run = RunId(Uuid::from_u128(3));
        let workspace = factory.for_run("t", run).unwrap();
        let root = factory.root_of("t", run);
        workspace.write(&path("d/a.txt"), b"x").unwrap();
        let listed = |p: &str| workspace.provenance(&path(p), None);
        assert_eq!(listed("d/a.txt"), Provenance::Written);
        assert_eq!(listed("d"), Provenance::Written);
        assert_eq!(listed(""), Provenance::Written);

        // Grown behind the handle: a listing would show a size it never wrote.
        std::fs::write(root.join("d/a.txt"), b"xyz").unwrap();
        assert_eq!(listed("d/a.txt"), Provenance::Unknown);
        // Same length again: without content only the shape can be compared.
        std::fs::write(root.join("d/a.txt"), b"y").unwrap();
        assert_eq!(listed("d/a.txt"), Provenance::Written);
        assert_eq!(
            workspace.provenance(&path("d/a.txt"), Some(b"y")),
            Provenance::Unknown,
            "with content the bytes decide"
        );

        // Replaced by a directory, or by a file where a directory was.
        std::fs::remove_file(root.join("d/a.txt")).unwrap();
        std::fs::create_dir(root.join("d/a.txt")).unwrap();
        assert_eq!(listed("d/a.txt"), Provenance::Unknown);
        std::fs::remove_dir_all(root.join("d")).unwrap();
        std::fs::write(root.join("d"), b"").unwrap();
        assert_eq!(listed("d"), Provenance::Unknown);
        assert_eq!(listed("d/a.txt"), Provenance::Unknown);
    }

    #[test]
    fn existing_layout_directories_are_made_private_or_refused() {
        use std::os::unix::fs::PermissionsExt;
        let data = tempfile::tempdir().unwrap();
        let factory = LocalWorkspaces::new(data.path());
        let run = RunId(Uuid::from_u128(4));
        let root = factory.root_of("t", run);
        // Pre-created by someone else's umask: world-writable.
        std::fs::create_dir_all(&root).unwrap();
        for dir in [
            root.parent().unwrap().parent().unwrap(),
            root.parent().unwrap(),
            &root,
        ] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        factory.for_run("t", run).unwrap();
        for dir in [
            root.parent().unwrap().parent().unwrap(),
            root.parent().unwrap(),
            &root,
        ] {
            assert_eq!(mode(dir), 0o700, "{}", dir.display());
        }

        // Another user's directory is refused (checkable only where chown is allowed).
        if rustix::process::geteuid().is_root() {
            let other = RunId(Uuid::from_u128(5));
            let foreign = factory.root_of("t", other);
            std::fs::create_dir(&foreign).unwrap();
            std::os::unix::fs::chown(&foreign, Some(65_534), Some(65_534)).unwrap();
            let Err(error) = factory.for_run("t", other) else {
                panic!("a root owned by another user was accepted");
            };
            assert!(error.to_string().contains("another user"), "{error}");
        }
    }

    #[test]
    fn one_handle_per_tenant_and_run() {
        let data = tempfile::tempdir().unwrap();
        let factory = LocalWorkspaces::new(data.path());
        let run = RunId(Uuid::from_u128(1));
        let first = factory.for_run("acme", run).unwrap();
        let again = factory.for_run("acme", run).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let other_tenant = factory.for_run("globex", run).unwrap();
        assert!(!Arc::ptr_eq(&first, &other_tenant));
        first.write(&path("a.txt"), b"x").unwrap();
        assert_eq!(
            again.provenance(&path("a.txt"), Some(b"x")),
            Provenance::Written
        );
        assert_eq!(
            other_tenant.list(&path(""), false).unwrap(),
            Vec::<WorkspaceEntry>::new()
        );
    }

    #[test]
    fn files_are_private_and_parents_are_created() {
        let data = tempfile::tempdir().unwrap();
        let factory = LocalWorkspaces::new(data.path());
        let run = RunId(Uuid::from_u128(2));
        let ws = factory.for_run("acme", run).unwrap();
        assert!(ws.write(&path("notes/deep/a.txt"), b"hello").unwrap());
        let root = factory.root_of("acme", run);
        assert_eq!(mode(&root.join("notes/deep/a.txt")), 0o600);
        assert_eq!(mode(&root.join("notes/deep")), 0o700);
        assert_eq!(
            ws.list(&path("notes"), true).unwrap(),
            vec![
                WorkspaceEntry {
                    path: "notes/deep".into(),
                    kind: EntryKind::Directory,
                    byte_count: 0
                },
                WorkspaceEntry {
                    path: "notes/deep/a.txt".into(),
                    kind: EntryKind::File,
                    byte_count: 5
                },
            ]
        );
    }

    #[test]
    fn a_deleted_root_is_created_again_on_demand() {
        let data = tempfile::tempdir().unwrap();
        let factory = LocalWorkspaces::new(data.path());
        let run = RunId(Uuid::from_u128(3));
        let ws = factory.for_run("acme", run).unwrap();
        std::fs::remove_dir_all(data.path().join("workspaces")).unwrap();
        assert_eq!(ws.list(&path(""), false).unwrap(), vec![]);
        assert!(ws.write(&path("a"), b"1").unwrap());
    }
}
