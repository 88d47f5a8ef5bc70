//! Contained file-system walks for the local workspace (SPEC §12.2): every open starts from a
//! directory descriptor and names one component at a time, so no symlink is ever followed and no
//! host path beyond the workspace root is ever formed.
//!
//! Each directory component is opened with `O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`; each final file
//! with `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`, so neither a planted symlink nor a FIFO can redirect
//! or block the call. When an open fails with `ELOOP` or `ENOTDIR` the component is classified
//! again with `fstatat(AT_SYMLINK_NOFOLLOW)`: Linux reports a symlink opened with `O_DIRECTORY |
//! O_NOFOLLOW` as `ENOTDIR`, not `ELOOP`, and the spec's errors need to tell the two apart.
//!
//! Choices the spec leaves open:
//! - Files are checked with `fstatat` before they are opened (so a device or FIFO is never opened
//!   at all) and with `fstat` after (so a file swapped in between is still caught).
//! - A regular file with more than one hard link is refused as [`WorkspaceError::Escape`]: the
//!   workspace tools never create hard links, so one can only have been planted, and its other
//!   name may lie outside the root. Listings leave such a file out, as they leave out symlinks:
//!   its byte count is that of an inode that may live outside the root, and listing it with a
//!   size would leak what reading it refuses.
//! - A listing descends into a subdirectory by reopening it from the root with `openat2(…,
//!   RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` (or the component walk where `openat2` is missing), so
//!   at most two directory descriptors are open at a time however deep the tree is. A directory
//!   that changed between being listed and being reopened is listed but not descended.
//! - Entries whose relative path would exceed 4096 bytes cannot be named by a `WsPath`, so they
//!   are skipped like names that are not UTF-8. Directories report `byte_count` 0.

use std::ffi::CString;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use airlock_core::workspace::{EntryKind, WorkspaceEntry, WorkspaceError};
use rustix::fs::{
    AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags, Stat, fchmod, fstat, ftruncate, mkdirat,
    openat, openat2, statat,
};
use rustix::io::Errno;

use crate::file_faults::FileFaults;

/// The most directory entries one listing may visit (SPEC §12.5).
pub const MAX_VISITED_ENTRIES: usize = 10_000;
/// The longest relative path a `WsPath` can name (SPEC §12.2).
const MAX_RELATIVE_PATH_BYTES: usize = 4096;

const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

/// How many times a write retries after losing a create/open race with another writer.
const MAX_OPEN_ATTEMPTS: usize = 3;

/// Set once `openat2` has been found missing (old kernel, or a seccomp filter refusing it).
static OPENAT2_MISSING: AtomicBool = AtomicBool::new(false);

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn io(what: &str, errno: Errno) -> WorkspaceError {
    WorkspaceError::Io(format!("{what}: {errno}"))
}

fn file_type(stat: &Stat) -> FileType {
    FileType::from_raw_mode(stat.st_mode)
}

/// The type of `name` in `dir` without following it; `None` when it does not exist.
fn kind_at(dir: &OwnedFd, name: &str) -> Result<Option<FileType>, WorkspaceError> {
    match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(file_type(&stat))),
        Err(Errno::NOENT) => Ok(None),
        Err(errno) => Err(io("stat", errno)),
    }
}

/// Why `name` could not be opened as a directory, decided from what it is now.
fn classify_not_a_directory(dir: &OwnedFd, name: &str) -> WorkspaceError {
    match kind_at(dir, name) {
        Ok(None) => WorkspaceError::NotFound,
        Ok(Some(FileType::Symlink)) => WorkspaceError::Escape,
        Ok(Some(FileType::Directory)) => {
            WorkspaceError::Io("a directory changed during the walk".to_owned())
        }
        Ok(Some(_)) => WorkspaceError::NotADirectory,
        Err(error) => error,
    }
}

/// Why `name` could not be opened as a regular file, decided from what it is now.
fn classify_not_a_file(dir: &OwnedFd, name: &str) -> WorkspaceError {
    match kind_at(dir, name) {
        Ok(None) => WorkspaceError::NotFound,
        Ok(Some(FileType::Symlink)) => WorkspaceError::Escape,
        Ok(Some(FileType::RegularFile)) => {
            WorkspaceError::Io("a file changed during the walk".to_owned())
        }
        Ok(Some(_)) => WorkspaceError::NotAFile,
        Err(error) => error,
    }
}

/// Opens the directory `name` inside `dir`, creating it (0700) first when asked.
fn open_subdir(dir: &OwnedFd, name: &str, create: bool) -> Result<OwnedFd, WorkspaceError> {
    let mut created = false;
    loop {
        match openat(dir, name, dir_flags(), Mode::empty()) {
            Ok(fd) => return Ok(fd),
            // Create once, then open again; EEXIST means another caller created it first.
            Err(Errno::NOENT) if create && !created => {
                created = true;
                match mkdirat(dir, name, Mode::from_raw_mode(DIR_MODE)) {
                    Ok(()) | Err(Errno::EXIST) => continue,
                    Err(errno) => return Err(io("mkdir", errno)),
                }
            }
            Err(Errno::NOENT) => return Err(WorkspaceError::NotFound),
            Err(Errno::LOOP | Errno::NOTDIR) => return Err(classify_not_a_directory(dir, name)),
            Err(errno) => return Err(io("open directory", errno)),
        }
    }
}

/// Walks `components` from `start`, one directory at a time.
pub fn walk_dirs(
    start: OwnedFd,
    components: &[String],
    create: bool,
) -> Result<OwnedFd, WorkspaceError> {
    components
        .iter()
        .try_fold(start, |dir, name| open_subdir(&dir, name, create))
}

/// What a listing reports for an entry: its kind and byte count (0 for a directory), or
/// `None` for what it leaves out (symlinks, special files, regular files with another hard
/// link, see the module docs).
fn listed_shape(stat: &Stat) -> Option<(EntryKind, u64)> {
    match file_type(stat) {
        FileType::RegularFile if stat.st_nlink > 1 => None,
        FileType::RegularFile => Some((EntryKind::File, u64::try_from(stat.st_size).unwrap_or(0))),
        FileType::Directory => Some((EntryKind::Directory, 0)),
        _ => None,
    }
}

/// What a listing would report for `components` under `root` now, without following anything;
/// `None` when it is missing, left out, or below something that is not a directory.
pub fn entry_shape(
    root: OwnedFd,
    components: &[String],
) -> Result<Option<(EntryKind, u64)>, WorkspaceError> {
    let Some((name, parents)) = components.split_last() else {
        return Ok(Some((EntryKind::Directory, 0)));
    };
    let dir = match walk_dirs(root, parents, false) {
        Ok(dir) => dir,
        Err(WorkspaceError::Io(message)) => return Err(WorkspaceError::Io(message)),
        Err(_) => return Ok(None),
    };
    match statat(&dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(listed_shape(&stat)),
        Err(Errno::NOENT | Errno::NOTDIR) => Ok(None),
        Err(errno) => Err(io("stat", errno)),
    }
}

/// Opens (and creates on demand) `base/layout[0]/layout[1]/…`, the workspace root. `base` is the
/// operator's data directory and is trusted; the layout components below it are not followed if
/// they are symlinks.
pub fn open_root(base: &Path, layout: &[String]) -> Result<OwnedFd, WorkspaceError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let base_fd = match rustix::fs::open(base, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(base)
                .map_err(|e| WorkspaceError::Io(format!("create data directory: {e}")))?;
            rustix::fs::open(base, flags, Mode::empty())
                .map_err(|errno| io("open data directory", errno))?
        }
        Err(errno) => return Err(io("open data directory", errno)),
    };
    layout
        .iter()
        .try_fold(base_fd, |dir, name| {
            let sub = open_subdir(&dir, name, true)?;
            keep_private(&sub, name)?;
            Ok(sub)
        })
        .map_err(|error| match error {
            WorkspaceError::Io(message) => WorkspaceError::Io(format!("workspace root: {message}")),
            other => WorkspaceError::Io(format!("workspace root: {other}")),
        })
}

/// A layout directory (the workspaces directory, a tenant's, a run's root) must be this
/// process's and private (SPEC §12.2: directories 0700), also when it already existed: another
/// user who owns it, or may write to it, could swap a run's root between two calls or read what
/// the agent writes. One of ours that is too open is made 0700; anyone else's is refused.
fn keep_private(dir: &OwnedFd, name: &str) -> Result<(), WorkspaceError> {
    let stat = fstat(dir).map_err(|errno| io("stat workspace directory", errno))?;
    if stat.st_uid != rustix::process::geteuid().as_raw() {
        return Err(WorkspaceError::Io(format!(
            "workspace directory '{name}' belongs to another user"
        )));
    }
    if stat.st_mode & 0o077 != 0 {
        fchmod(dir, Mode::from_raw_mode(DIR_MODE))
            .map_err(|errno| io("make workspace directory private", errno))?;
    }
    Ok(())
}

/// Splits a non-root path into its parent components and final name.
fn split(components: &[String]) -> Result<(&[String], &str), WorkspaceError> {
    match components.split_last() {
        Some((name, parents)) => Ok((parents, name.as_str())),
        // The root is a directory, never a file.
        None => Err(WorkspaceError::NotAFile),
    }
}

/// Checks what an opened descriptor turned out to be.
fn require_single_regular_file(fd: &OwnedFd) -> Result<Stat, WorkspaceError> {
    let stat = fstat(fd).map_err(|errno| io("fstat", errno))?;
    if file_type(&stat) != FileType::RegularFile {
        return Err(WorkspaceError::NotAFile);
    }
    if stat.st_nlink > 1 {
        return Err(WorkspaceError::Escape);
    }
    Ok(stat)
}

/// Reads at most `max_bytes` of the regular file at `components`.
pub fn read_file(
    root: OwnedFd,
    components: &[String],
    max_bytes: u64,
) -> Result<Vec<u8>, WorkspaceError> {
    let (parents, name) = split(components)?;
    let dir = walk_dirs(root, parents, false)?;
    match kind_at(&dir, name)? {
        None => return Err(WorkspaceError::NotFound),
        Some(FileType::Symlink) => return Err(WorkspaceError::Escape),
        Some(FileType::RegularFile) => {}
        Some(_) => return Err(WorkspaceError::NotAFile),
    }
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = match openat(&dir, name, flags | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Err(WorkspaceError::NotFound),
        Err(Errno::LOOP) => return Err(WorkspaceError::Escape),
        Err(Errno::NXIO | Errno::ISDIR | Errno::NOTDIR) => {
            return Err(classify_not_a_file(&dir, name));
        }
        Err(errno) => return Err(io("open file", errno)),
    };
    let stat = require_single_regular_file(&fd)?;
    if u64::try_from(stat.st_size).unwrap_or(u64::MAX) > max_bytes {
        return Err(WorkspaceError::TooLarge);
    }
    // Read one byte past the limit so a file that grew after the fstat is still refused.
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| WorkspaceError::Io(format!("read: {e}")))?;
    if bytes.len() as u64 > max_bytes {
        return Err(WorkspaceError::TooLarge);
    }
    Ok(bytes)
}

/// Replaces the content of the regular file at `components` with `data`, creating it and its
/// parents as needed; returns whether the file was created.
pub fn write_file(
    root: OwnedFd,
    components: &[String],
    data: &[u8],
    faults: &FileFaults,
) -> Result<bool, WorkspaceError> {
    let (parents, name) = split(components)?;
    let dir = walk_dirs(root, parents, true)?;
    let (fd, created) = open_for_write(&dir, name)?;
    let stat = require_single_regular_file(&fd)?;
    // A file planted by the host keeps the host's mode until the tool first writes it; from then
    // on it holds tool-written bytes, so it gets the workspace's file mode (§12.2: files 0600).
    if stat.st_mode & 0o7777 != FILE_MODE {
        fchmod(&fd, Mode::from_raw_mode(FILE_MODE)).map_err(|errno| io("chmod", errno))?;
    }
    ftruncate(&fd, 0).map_err(|errno| io("truncate", errno))?;
    let mut file = std::fs::File::from(fd);
    let mut effect = faults.begin();
    effect
        .write_all(&mut file, data)
        .map_err(|e| WorkspaceError::Io(format!("write: {e}")))?;
    effect
        .sync(&file)
        .map_err(|e| WorkspaceError::Io(format!("fsync: {e}")))?;
    Ok(created)
}

/// Opens `name` for writing without following it: creates it exclusively (0600) when it is
/// missing, otherwise opens the existing regular file. Losing a race to a concurrent create or
/// delete is retried a bounded number of times.
fn open_for_write(dir: &OwnedFd, name: &str) -> Result<(OwnedFd, bool), WorkspaceError> {
    let base = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    for _ in 0..MAX_OPEN_ATTEMPTS {
        match kind_at(dir, name)? {
            None => {
                let flags = base | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
                match openat(dir, name, flags, Mode::from_raw_mode(FILE_MODE)) {
                    Ok(fd) => return Ok((fd, true)),
                    Err(Errno::EXIST) => continue,
                    Err(errno) => return Err(io("create file", errno)),
                }
            }
            Some(FileType::Symlink) => return Err(WorkspaceError::Escape),
            Some(FileType::RegularFile) => {
                match openat(dir, name, base | OFlags::CLOEXEC, Mode::empty()) {
                    Ok(fd) => return Ok((fd, false)),
                    Err(Errno::NOENT) => continue,
                    Err(Errno::LOOP) => return Err(WorkspaceError::Escape),
                    Err(Errno::NXIO | Errno::ISDIR | Errno::NOTDIR) => {
                        return Err(classify_not_a_file(dir, name));
                    }
                    Err(errno) => return Err(io("open file", errno)),
                }
            }
            Some(_) => return Err(WorkspaceError::NotAFile),
        }
    }
    Err(WorkspaceError::Io(
        "the file kept changing while it was opened".to_owned(),
    ))
}

/// Reopens the directory at `components` below `root` without following any symlink: one
/// `openat2` call, or the component walk where `openat2` is unavailable.
fn reopen_beneath(root: &OwnedFd, relative: &str) -> Result<OwnedFd, WorkspaceError> {
    if !OPENAT2_MISSING.load(Ordering::Relaxed) {
        let resolve =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        match openat2(root, relative, dir_flags(), Mode::empty(), resolve) {
            Ok(fd) => return Ok(fd),
            Err(Errno::NOSYS | Errno::PERM) => OPENAT2_MISSING.store(true, Ordering::Relaxed),
            // A concurrent rename made the kernel give up, or a component is not a directory
            // (which `O_DIRECTORY` also reports for a final symlink): walk instead, this once,
            // so the component is classified exactly.
            Err(Errno::AGAIN | Errno::NOTDIR) => {}
            Err(Errno::NOENT) => return Err(WorkspaceError::NotFound),
            Err(Errno::LOOP | Errno::XDEV) => return Err(WorkspaceError::Escape),
            Err(errno) => return Err(io("reopen directory", errno)),
        }
    }
    reopen_by_walk(root, relative)
}

/// The fallback of [`reopen_beneath`]: the component walk from a duplicate of the root.
fn reopen_by_walk(root: &OwnedFd, relative: &str) -> Result<OwnedFd, WorkspaceError> {
    let start = rustix::io::fcntl_dupfd_cloexec(root, 0).map_err(|errno| io("dup", errno))?;
    let components: Vec<String> = relative.split('/').map(str::to_owned).collect();
    walk_dirs(start, &components, false)
}

/// Lists the directory at `components` (recursively when asked), sorted by the UTF-8 bytes of
/// each entry's path relative to the root.
pub fn list_dir(
    root: OwnedFd,
    components: &[String],
    recursive: bool,
) -> Result<Vec<WorkspaceEntry>, WorkspaceError> {
    let start = rustix::io::fcntl_dupfd_cloexec(&root, 0).map_err(|errno| io("dup", errno))?;
    let first = walk_dirs(start, components, false)?;
    let mut visited = 0usize;
    let mut entries = Vec::new();
    let mut pending = Vec::new();
    // Directories still to be listed, by relative path (names never contain '/').
    let mut next = Some((first, components.join("/")));
    // Bounded: every directory pushed onto `pending` was a visited entry, and visits are capped.
    while let Some((dir, at)) = next.take() {
        list_one(
            &dir,
            &at,
            recursive,
            &mut visited,
            &mut entries,
            &mut pending,
        )?;
        drop(dir);
        while let Some(candidate) = pending.pop() {
            match reopen_beneath(&root, &candidate) {
                Ok(fd) => {
                    next = Some((fd, candidate));
                    break;
                }
                // Changed since it was listed: keep the entry, skip its contents.
                Err(
                    WorkspaceError::NotFound
                    | WorkspaceError::Escape
                    | WorkspaceError::NotADirectory,
                ) => {}
                Err(error) => return Err(error),
            }
        }
    }
    entries.sort_by(|a: &WorkspaceEntry, b: &WorkspaceEntry| a.path.cmp(&b.path));
    Ok(entries)
}

/// Reads one directory: every entry counts toward the visit limit; only regular files and
/// directories with UTF-8 names are kept, and directories are queued when recursing.
fn list_one(
    dir: &OwnedFd,
    at: &str,
    recursive: bool,
    visited: &mut usize,
    entries: &mut Vec<WorkspaceEntry>,
    pending: &mut Vec<String>,
) -> Result<(), WorkspaceError> {
    let mut names: Vec<CString> = Vec::new();
    let mut reader = Dir::read_from(dir).map_err(|errno| io("read directory", errno))?;
    for entry in reader.by_ref() {
        let entry = entry.map_err(|errno| io("read directory", errno))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        *visited += 1;
        if *visited > MAX_VISITED_ENTRIES {
            return Err(WorkspaceError::TooManyEntries);
        }
        names.push(entry.file_name().to_owned());
    }
    drop(reader);
    for name in names {
        let Ok(name) = name.into_string() else {
            continue;
        };
        let relative = if at.is_empty() {
            name.clone()
        } else {
            format!("{at}/{name}")
        };
        if relative.len() > MAX_RELATIVE_PATH_BYTES {
            continue;
        }
        let stat = match statat(dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => continue,
            Err(errno) => return Err(io("stat entry", errno)),
        };
        let Some((kind, byte_count)) = listed_shape(&stat) else {
            continue;
        };
        // A directory whose children could not be named within the path limit is listed but
        // not entered: reopening it would itself exceed the kernel's PATH_MAX.
        if kind == EntryKind::Directory
            && recursive
            && relative.len() + 2 <= MAX_RELATIVE_PATH_BYTES
        {
            pending.push(relative.clone());
        }
        entries.push(WorkspaceEntry {
            path: relative,
            kind,
            byte_count,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// Both ways of reopening a directory refuse the same links and find the same directories.
    #[test]
    fn openat2_and_the_walk_agree() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/file"), b"x").unwrap();
        symlink(outside.path(), dir.path().join("a/link")).unwrap();
        symlink("b", dir.path().join("a/inner")).unwrap();
        let root = rustix::fs::open(dir.path(), dir_flags(), Mode::empty()).unwrap();
        for (relative, expected) in [
            ("a", None),
            ("a/b", None),
            ("a/link", Some(WorkspaceError::Escape)),
            ("a/link/x", Some(WorkspaceError::Escape)),
            ("a/inner", Some(WorkspaceError::Escape)),
            ("a/file", Some(WorkspaceError::NotADirectory)),
            ("a/missing", Some(WorkspaceError::NotFound)),
        ] {
            for (how, result) in [
                ("openat2", reopen_beneath(&root, relative)),
                ("walk", reopen_by_walk(&root, relative)),
            ] {
                assert_eq!(result.err(), expected, "{how} {relative}");
            }
        }
    }
}
