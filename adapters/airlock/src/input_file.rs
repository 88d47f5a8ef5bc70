//! Reading a file an operator names on the command line (a policy file, a run script) with a
//! size limit, so that no path can make the process hang or read without bound.
//!
//! A policy file must be a regular file: it is opened with `O_NONBLOCK` (so a FIFO does not
//! block the open itself) and the *opened* file's metadata is checked, so there is no window
//! between a check and the open in which the path could be swapped. Whatever the file, at most
//! one byte past the limit is read, so a file that grows after the check (or a device such as
//! `/dev/zero`) is refused rather than read to the end.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why an input file was not read.
#[derive(Debug, thiserror::Error)]
pub enum InputFileError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a regular file (a {0})")]
    NotRegular(&'static str),
    #[error("larger than the limit of {max_bytes} bytes")]
    TooLarge { max_bytes: u64 },
}

/// Which files [`read_bounded`] accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Regular files only (policy files).
    Regular,
    /// Anything that can be read: a pipe from process substitution as well (run scripts).
    Readable,
}

/// The bytes of `path`, at most `max_bytes` of them.
pub fn read_bounded(
    path: &Path,
    kind: FileKind,
    max_bytes: u64,
) -> Result<Vec<u8>, InputFileError> {
    let mut options = OpenOptions::new();
    options.read(true);
    if kind == FileKind::Regular {
        options.custom_flags(nonblocking_flag());
    }
    let file = options.open(path)?;
    if kind == FileKind::Regular {
        let metadata = file.metadata()?;
        if !metadata.file_type().is_file() {
            return Err(InputFileError::NotRegular(describe(&metadata.file_type())));
        }
        if metadata.len() > max_bytes {
            return Err(InputFileError::TooLarge { max_bytes });
        }
    }
    read_at_most(file, max_bytes)
}

fn read_at_most(file: File, max_bytes: u64) -> Result<Vec<u8>, InputFileError> {
    let mut bytes = Vec::new();
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(InputFileError::TooLarge { max_bytes });
    }
    Ok(bytes)
}

fn nonblocking_flag() -> i32 {
    i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0)
}

fn describe(file_type: &std::fs::FileType) -> &'static str {
    if file_type.is_dir() {
        "directory"
    } else if file_type.is_fifo() {
        "FIFO"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_block_device() {
        "block device"
    } else if file_type.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_within_the_limit_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345").unwrap();
        for kind in [FileKind::Regular, FileKind::Readable] {
            assert_eq!(read_bounded(&path, kind, 5).unwrap(), b"12345");
            assert!(matches!(
                read_bounded(&path, kind, 4),
                Err(InputFileError::TooLarge { max_bytes: 4 })
            ));
        }
    }

    #[test]
    fn devices_fifos_and_directories_are_refused_as_policy_files_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        for (path, what) in [
            (fifo.as_path(), "FIFO"),
            (Path::new("/dev/zero"), "character device"),
            (dir.path(), "directory"),
        ] {
            match read_bounded(path, FileKind::Regular, 1024) {
                Err(InputFileError::NotRegular(kind)) => assert_eq!(kind, what),
                other => panic!("{}: {other:?}", path.display()),
            }
        }
        // A device that never ends is cut off at the limit when any file is accepted.
        assert!(matches!(
            read_bounded(Path::new("/dev/zero"), FileKind::Readable, 1024),
            Err(InputFileError::TooLarge { max_bytes: 1024 })
        ));
    }
}
