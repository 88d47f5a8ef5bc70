//! A fault-injection seam for the file effects of the builtin tools: the record
//! `demo.external_write` appends to the outbox and the file `workspace.write_text` replaces.
//! Every byte such a body writes, and the sync that makes it durable, passes through a
//! [`FileFaults`]. Production hosts use [`FileFaults::none`], which costs one branch per call.
//! Tests arm a [`FaultPlan`]: the next effect stores a chosen number of bytes on the real file
//! and then fails the way a full or failing disk does (a short write, `ENOSPC`, `EIO`, or a
//! failed `fsync`). The fault hits the real file, so a test sees on disk exactly what the body's
//! own failure handling leaves there.

use std::fs::File;
use std::io::{self, Write};
use std::sync::{Arc, Mutex, PoisonError};

/// How the armed effect fails once it has stored [`FaultPlan::after_bytes`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFault {
    /// The device takes nothing more: the write that reaches the limit is cut short there, and
    /// the next write stores nothing and reports 0 bytes (`WriteZero` to `write_all`).
    ShortWrite,
    /// As a full disk: a short write up to the limit, then `ENOSPC`.
    NoSpace,
    /// As a failing disk: a short write up to the limit, then `EIO`.
    Io,
    /// Every write succeeds; the `fsync` that should make them durable fails with `EIO`.
    SyncFails,
}

/// One armed fault: which, and after how many bytes of the effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultPlan {
    pub fault: FileFault,
    /// Bytes of the effect stored before the fault (ignored by [`FileFault::SyncFails`]).
    pub after_bytes: u64,
}

/// The seam. Cheap to clone; clones share the armed plan.
#[derive(Debug, Clone, Default)]
pub struct FileFaults {
    armed: Option<Arc<Mutex<Option<FaultPlan>>>>,
}

impl FileFaults {
    /// No faults, ever: the production seam.
    pub fn none() -> FileFaults {
        FileFaults::default()
    }

    /// A seam that [`FileFaults::arm`] can arm; until then it behaves like [`FileFaults::none`].
    pub fn injectable() -> FileFaults {
        FileFaults {
            armed: Some(Arc::new(Mutex::new(None))),
        }
    }

    /// Arms `plan` for the next effect only; the one after it runs normally again.
    pub fn arm(&self, plan: FaultPlan) {
        if let Some(armed) = &self.armed {
            *armed.lock().unwrap_or_else(PoisonError::into_inner) = Some(plan);
        }
    }

    /// Starts one effect, taking the armed plan if there is one.
    pub(crate) fn begin(&self) -> Effect {
        let plan = self
            .armed
            .as_ref()
            .and_then(|armed| armed.lock().unwrap_or_else(PoisonError::into_inner).take());
        Effect { plan, stored: 0 }
    }
}

/// One effect's writes and sync, with its plan (if armed) applied.
#[derive(Debug)]
pub(crate) struct Effect {
    plan: Option<FaultPlan>,
    stored: u64,
}

impl Effect {
    /// `write_all` of `bytes` to `file`, faulted as planned.
    pub(crate) fn write_all(&mut self, file: &mut File, bytes: &[u8]) -> io::Result<()> {
        Faulted { effect: self, file }.write_all(bytes)
    }

    /// `fsync` of `file`, faulted as planned.
    pub(crate) fn sync(&self, file: &File) -> io::Result<()> {
        match self.plan {
            Some(FaultPlan {
                fault: FileFault::SyncFails,
                ..
            }) => Err(io::Error::from_raw_os_error(
                rustix::io::Errno::IO.raw_os_error(),
            )),
            _ => file.sync_all(),
        }
    }
}

/// The writer an [`Effect`] hands its bytes to.
struct Faulted<'a> {
    effect: &'a mut Effect,
    file: &'a mut File,
}

impl Write for Faulted<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let limit = match self.effect.plan {
            Some(plan) if plan.fault != FileFault::SyncFails => plan,
            _ => return self.file.write(bytes),
        };
        let room = limit.after_bytes.saturating_sub(self.effect.stored);
        if room == 0 && !bytes.is_empty() {
            return match limit.fault {
                FileFault::ShortWrite | FileFault::SyncFails => Ok(0),
                FileFault::NoSpace => Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::NOSPC.raw_os_error(),
                )),
                FileFault::Io => Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::IO.raw_os_error(),
                )),
            };
        }
        let allowed = usize::try_from(room).unwrap_or(usize::MAX).min(bytes.len());
        let written = self.file.write(&bytes[..allowed])?;
        self.effect.stored = self.effect.stored.saturating_add(written as u64);
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn written(faults: &FileFaults, bytes: &[u8]) -> (io::Result<()>, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut file = File::create(&path).unwrap();
        let mut effect = faults.begin();
        let result = effect
            .write_all(&mut file, bytes)
            .and_then(|()| effect.sync(&file));
        let mut stored = Vec::new();
        File::open(&path).unwrap().read_to_end(&mut stored).unwrap();
        (result, stored)
    }

    #[test]
    fn each_fault_stores_the_planned_prefix_and_fails_its_own_way() {
        for (fault, kind, os_error) in [
            (FileFault::ShortWrite, io::ErrorKind::WriteZero, None),
            (FileFault::NoSpace, io::ErrorKind::StorageFull, Some(28)),
            (FileFault::Io, io::ErrorKind::Other, Some(5)),
            (FileFault::SyncFails, io::ErrorKind::Other, Some(5)),
        ] {
            let faults = FileFaults::injectable();
            faults.arm(FaultPlan {
                fault,
                after_bytes: 3,
            });
            let (result, stored) = written(&faults, b"abcdef");
            let error = result.expect_err("the armed effect fails");
            assert_eq!(error.raw_os_error(), os_error, "{fault:?}");
            if fault != FileFault::Io && fault != FileFault::SyncFails {
                assert_eq!(error.kind(), kind, "{fault:?}");
            }
            let expected: &[u8] = if fault == FileFault::SyncFails {
                b"abcdef"
            } else {
                b"abc"
            };
            assert_eq!(stored, expected, "{fault:?}");

            // Armed for one effect only.
            let (again, stored) = written(&faults, b"abcdef");
            assert!(again.is_ok(), "{fault:?}");
            assert_eq!(stored, b"abcdef");
        }
    }

    #[test]
    fn the_production_seam_never_faults_and_cannot_be_armed() {
        let faults = FileFaults::none();
        faults.arm(FaultPlan {
            fault: FileFault::Io,
            after_bytes: 0,
        });
        let (result, stored) = written(&faults, b"abcdef");
        assert!(result.is_ok());
        assert_eq!(stored, b"abcdef");
    }

    #[test]
    fn a_fault_at_byte_zero_stores_nothing() {
        let faults = FileFaults::injectable();
        faults.arm(FaultPlan {
            fault: FileFault::NoSpace,
            after_bytes: 0,
        });
        let (result, stored) = written(&faults, b"abcdef");
        assert_eq!(result.unwrap_err().raw_os_error(), Some(28));
        assert!(stored.is_empty());
    }
}
