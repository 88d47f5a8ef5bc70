//! The local workspace (SPEC §12.1–§12.3): one private directory per `(tenant, run)` under
//! `{data_dir}/workspaces/{sha256_hex(tenant_id)}/{run_id}`, reached only by contained walks.
//!
//! [`LocalWorkspaces`] is the [`WorkspaceFactory`]: it keeps one [`LocalWorkspace`] per `(tenant,
//! run)` for the life of the process, so the provenance a handle records (§12.3) lasts exactly as
//! long as the process does. A handle holds no open descriptor between calls: each call opens the
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

pub use contained::MAX_VISITED_ENTRIES;

use provenance::WrittenPaths;

/// The directory under the data directory that holds every workspace.
const WORKSPACES_DIR: &str = "workspaces";

/// Hands out one workspace handle per `(tenant, run)` per process.
pub struct LocalWorkspaces {
    data_dir: PathBuf,
    handles: Mutex<HashMap<(String, RunId), Arc<LocalWorkspace>>>,
}

impl LocalWorkspaces {
    pub fn new(data_dir: &Path) -> LocalWorkspaces {
        // Made absolute once, so a later change of working directory cannot move the roots.
        let data_dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
        LocalWorkspaces {
            data_dir,
            handles: Mutex::new(HashMap::new()),
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
            return Ok(Arc::clone(handle) as Arc<dyn Workspace>);
        }
        let handle = Arc::new(LocalWorkspace {
            data_dir: self.data_dir.clone(),
            layout: layout(tenant, run),
            written: WrittenPaths::default(),
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
        let created = contained::write_file(root, path.components(), data)?;
        self.written.record(path, data);
        Ok(created)
    }

    fn list(&self, path: &WsPath, recursive: bool) -> Result<Vec<WorkspaceEntry>, WorkspaceError> {
        contained::list_dir(self.open_root()?, path.components(), recursive)
    }

    fn provenance(&self, path: &WsPath, content: Option<&[u8]>) -> Provenance {
        self.written.provenance(path, content)
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
