//! The handle's process-local record of what it wrote (SPEC §12.3).
//!
//! A write forgets the path before it touches the file and records `path → SHA-256(bytes)` only
//! once the bytes are on disk, so a failed or partial write never reads as `Written`. Ancestors
//! (the root included) are marked as written directories. The record lives only in memory: after
//! a restart every file reads as `Unknown`, which is the point (§16 #38).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use airlock_core::canonical::sha256_hex;
use airlock_core::workspace::{Provenance, WsPath};

/// What this handle wrote at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mark {
    /// A file, with the SHA-256 (hex) of the bytes last written.
    File(String),
    /// A directory that holds something this handle wrote.
    Directory,
}

/// Relative path components → mark.
#[derive(Debug, Default)]
pub struct WrittenPaths {
    marks: Mutex<HashMap<Vec<String>, Mark>>,
}

impl WrittenPaths {
    fn lock(&self) -> MutexGuard<'_, HashMap<Vec<String>, Mark>> {
        // The map is only ever updated by single inserts and removes, so a panic elsewhere
        // cannot leave it half-changed.
        self.marks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Called before a write: the content at `path` is about to change.
    pub fn forget(&self, path: &WsPath) {
        self.lock().remove(path.components());
    }

    /// Called after a successful write of `data` to `path`.
    pub fn record(&self, path: &WsPath, data: &[u8]) {
        let components = path.components();
        let mut marks = self.lock();
        for depth in 0..components.len() {
            marks.insert(components[..depth].to_vec(), Mark::Directory);
        }
        marks.insert(components.to_vec(), Mark::File(sha256_hex(data)));
    }

    /// `Written` only if this handle wrote `path` and, when `content` is given, it wrote exactly
    /// those bytes there.
    pub fn provenance(&self, path: &WsPath, content: Option<&[u8]>) -> Provenance {
        let marks = self.lock();
        match (marks.get(path.components()), content) {
            (Some(_), None) => Provenance::Written,
            (Some(Mark::File(hash)), Some(content)) if *hash == sha256_hex(content) => {
                Provenance::Written
            }
            _ => Provenance::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(s: &str) -> WsPath {
        WsPath::parse(s).unwrap()
    }

    #[test]
    fn written_only_for_the_same_bytes_at_the_same_path() {
        let written = WrittenPaths::default();
        assert_eq!(
            written.provenance(&path("a/b.txt"), None),
            Provenance::Unknown
        );
        written.record(&path("a/b.txt"), b"hello");
        assert_eq!(
            written.provenance(&path("a/b.txt"), Some(b"hello")),
            Provenance::Written
        );
        assert_eq!(
            written.provenance(&path("a/b.txt"), Some(b"hello!")),
            Provenance::Unknown
        );
        assert_eq!(
            written.provenance(&path("a/b.txt"), None),
            Provenance::Written
        );
        assert_eq!(
            written.provenance(&path("a/c.txt"), None),
            Provenance::Unknown
        );
    }

    #[test]
    fn ancestors_are_written_directories_without_content() {
        let written = WrittenPaths::default();
        written.record(&path("x/y/z.md"), b"z");
        for ancestor in ["", "x", "x/y"] {
            assert_eq!(
                written.provenance(&path(ancestor), None),
                Provenance::Written
            );
            assert_eq!(
                written.provenance(&path(ancestor), Some(b"z")),
                Provenance::Unknown,
                "a directory never matches content"
            );
        }
    }

    #[test]
    fn forgetting_before_a_write_clears_the_file_mark() {
        let written = WrittenPaths::default();
        written.record(&path("f"), b"one");
        written.forget(&path("f"));
        assert_eq!(written.provenance(&path("f"), None), Provenance::Unknown);
        assert_eq!(written.provenance(&path(""), None), Provenance::Written);
    }
}
