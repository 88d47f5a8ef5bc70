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

use airlock_core::workspace::EntryKind;

/// What this handle wrote at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mark {
    /// A file, with the SHA-256 (hex) and the length of the bytes last written.
    File { sha256: String, byte_count: u64 },
    /// A directory that holds something this handle wrote.
    Directory,
}

/// One path of the record and the paths below it. A tree, not a map from whole paths: a write
/// to a path of n components then costs n entries, where a map keyed by each ancestor's
/// component list cost about n²/2 strings (a few 2,048-component writes took gigabytes).
#[derive(Debug, Default)]
struct Node {
    mark: Option<Mark>,
    children: HashMap<String, Node>,
}

/// Drops the tree iteratively: a path may be 2,048 components deep, and the default recursive
/// drop of nested maps would use one stack frame per level.
impl Drop for Node {
    fn drop(&mut self) {
        let mut pending: Vec<Node> = self.children.drain().map(|(_, child)| child).collect();
        while let Some(mut node) = pending.pop() {
            pending.extend(node.children.drain().map(|(_, child)| child));
        }
    }
}

impl Node {
    fn find(&self, components: &[String]) -> Option<&Node> {
        components
            .iter()
            .try_fold(self, |node, component| node.children.get(component))
    }
}

/// The record, rooted at the workspace root.
#[derive(Debug, Default)]
pub struct WrittenPaths {
    root: Mutex<Node>,
}

impl WrittenPaths {
    fn lock(&self) -> MutexGuard<'_, Node> {
        // Every update below leaves the tree well-formed at each step, so a panic elsewhere
        // cannot leave it half-changed.
        self.root.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Called before a write: the content at `path` is about to change.
    pub fn forget(&self, path: &WsPath) {
        let mut root = self.lock();
        let mut node = &mut *root;
        for component in path.components() {
            match node.children.get_mut(component) {
                Some(child) => node = child,
                None => return,
            }
        }
        node.mark = None;
    }

    /// Called after a successful write of `data` to `path`: the path is a written file and
    /// each ancestor (the root included) a written directory.
    pub fn record(&self, path: &WsPath, data: &[u8]) {
        let mut root = self.lock();
        let mut node = &mut *root;
        for component in path.components() {
            node.mark = Some(Mark::Directory);
            node = node.children.entry(component.clone()).or_default();
        }
        node.mark = Some(Mark::File {
            sha256: sha256_hex(data),
            byte_count: u64::try_from(data.len()).unwrap_or(u64::MAX),
        });
    }

    /// `Written` only if this handle wrote `path` and, when `content` is given, it wrote exactly
    /// those bytes there.
    pub fn provenance(&self, path: &WsPath, content: Option<&[u8]>) -> Provenance {
        let root = self.lock();
        let mark = root
            .find(path.components())
            .and_then(|node| node.mark.as_ref());
        match (mark, content) {
            (Some(_), None) => Provenance::Written,
            (Some(Mark::File { sha256, .. }), Some(content)) if *sha256 == sha256_hex(content) => {
                Provenance::Written
            }
            _ => Provenance::Unknown,
        }
    }

    /// What this handle left at `path`, as a listing reports it (kind and byte count, 0 for a
    /// directory), for a check against the disk when no content is at hand.
    pub fn written_shape(&self, path: &WsPath) -> Option<(EntryKind, u64)> {
        let root = self.lock();
        match root.find(path.components())?.mark.as_ref()? {
            Mark::File { byte_count, .. } => Some((EntryKind::File, *byte_count)),
            Mark::Directory => Some((EntryKind::Directory, 0)),
        }
    }

    /// The bytes of path components the record holds (for tests of its size).
    #[cfg(test)]
    fn stored_bytes(&self) -> usize {
        let root = self.lock();
        let mut pending = vec![&*root];
        let mut bytes = 0;
        while let Some(node) = pending.pop() {
            bytes += node.children.keys().map(String::len).sum::<usize>();
            pending.extend(node.children.values());
        }
        bytes
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

    #[test]
    fn a_deep_path_costs_one_entry_per_component() {
        let written = WrittenPaths::default();
        let deep = vec!["a"; 2_048].join("/");
        written.record(&path(&format!("0/{}", &deep[..deep.len() - 2])), b"x");
        written.record(&path(&format!("1/{}", &deep[..deep.len() - 2])), b"x");
        // Each component once: 2 × 2,048 one-byte names. Keyed by every ancestor's whole
        // path, the same two writes held about 4 million bytes of names. Dropping the record
        // at the end must not recurse 2,048 deep either.
        assert_eq!(written.stored_bytes(), 2 * 2_048);
        let ancestor = format!("1/{}", &deep[..deep.len() - 4]);
        assert_eq!(
            written.provenance(&path(&ancestor), None),
            Provenance::Written
        );
    }
}
