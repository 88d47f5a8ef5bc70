//! The workspace handle (SPEC §12.1–§12.3): relative paths only, no host path in or out.

pub mod error;
pub mod path;

pub use error::WorkspaceError;
pub use path::WsPath;

/// Whether this handle wrote the bytes it is asked about (SPEC §12.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    Written,
    Unknown,
}

impl Provenance {
    /// `Written` content is `internal_tool`; anything else is `external_untrusted`.
    pub fn trust(self) -> crate::vocab::TrustLevel {
        match self {
            Provenance::Written => crate::vocab::TrustLevel::InternalTool,
            Provenance::Unknown => crate::vocab::TrustLevel::ExternalUntrusted,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Directory,
}

/// One listed entry; `path` is relative to the workspace root.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkspaceEntry {
    pub path: String,
    pub kind: EntryKind,
    pub byte_count: u64,
}

/// A contained per-run directory. No method takes or returns a host path.
pub trait Workspace: Send + Sync {
    fn read_bounded(&self, path: &WsPath, max_bytes: u64) -> Result<Vec<u8>, WorkspaceError>;
    /// Returns whether the file was created.
    fn write(&self, path: &WsPath, data: &[u8]) -> Result<bool, WorkspaceError>;
    fn list(&self, path: &WsPath, recursive: bool) -> Result<Vec<WorkspaceEntry>, WorkspaceError>;
    fn provenance(&self, path: &WsPath, content: Option<&[u8]>) -> Provenance;
}
