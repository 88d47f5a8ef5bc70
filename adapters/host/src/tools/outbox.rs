//! `demo.external_write` (SPEC §12.5): the canonical non-idempotent external effect. Each call
//! appends one JSON line to `{data_dir}/outbox.jsonl` and never deduplicates, so a repeated call
//! is visible as a second line with the same `idempotency_key` (the demo counts them).
//!
//! §9.3 allows a non-idempotent tool to return an ordinary failure only when no effect happened.
//! So a failure to open or lock the outbox is `tool.internal_error`, while any failure once the
//! append has been attempted (a short write, `ENOSPC`, `EIO`, a failed `fsync`) is
//! `outcome_unknown`: the line may be there.
//!
//! **A record is all or nothing.** A failed append must not leave part of a line behind: the
//! next record would be glued onto it and a call that SUCCEEDED would have an unparseable
//! effect record. Three rules keep every complete record on a line of its own:
//! - appenders take an exclusive `flock` on the outbox for the append, so records of concurrent
//!   workers (several processes may share a data directory) never interleave, and while the
//!   lock is held the bytes past the length read under it are this append's alone;
//! - a failed append truncates the file back to that length (and syncs it): the partial record
//!   is cut off. The call still reports `outcome_unknown`, since a reader may have seen the
//!   bytes meanwhile;
//! - a record starts on a fresh line: if the file does not end with a newline (a process killed
//!   part-way through a write, or a truncation that itself failed), the record is prefixed with
//!   one, so the fragment stays an unparseable line of its own and the new record is intact.
//!
//! The writes and the sync go through the host's [`FileFaults`] seam, which tests arm with a
//! short write, `ENOSPC` or `EIO`.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use airlock_core::action::JsonMap;
use airlock_core::invocation::outcome::codes;
use airlock_core::ports::{BoxFut, Tool, ToolContext, ToolFailure, ToolSuccess};
use airlock_core::tool::builtin::demo_external_write_spec;
use airlock_core::tool::spec::ToolSpec;
use serde_json::json;

use super::body::{checksum, failure, off_the_runtime, string_arg};
use crate::file_faults::FileFaults;

/// The outbox's file name inside the data directory.
pub const OUTBOX_FILE: &str = "outbox.jsonl";

const OUTBOX_MODE: u32 = 0o600;

/// The `demo.external_write` tool.
#[derive(Debug, Clone)]
pub struct ExternalWrite {
    spec: ToolSpec,
    outbox: PathBuf,
    faults: FileFaults,
}

impl ExternalWrite {
    /// A body appending to the outbox file at `outbox`.
    pub fn new(outbox: PathBuf) -> ExternalWrite {
        ExternalWrite::with_faults(outbox, FileFaults::none())
    }

    /// [`ExternalWrite::new`] whose appends go through `faults` (tests).
    pub fn with_faults(outbox: PathBuf, faults: FileFaults) -> ExternalWrite {
        ExternalWrite {
            spec: demo_external_write_spec(),
            outbox,
            faults,
        }
    }

    /// Everything but the effect: arguments, the line (its `recorded_at` from the clock) and
    /// the result.
    fn prepare(ctx: &ToolContext<'_>, args: &JsonMap) -> Result<Prepared, ToolFailure> {
        let destination = string_arg(args, "destination")?;
        let content = string_arg(args, "content")?;
        let checksum = checksum(content.as_bytes());
        let mut line = json!({
            "idempotency_key": ctx.idempotency_key,
            "invocation_id": ctx.invocation_id.to_string(),
            "destination": destination,
            "content": content,
            "checksum": checksum,
            "recorded_at": ctx.clock.now().to_string(),
        })
        .to_string();
        line.push('\n');
        let structured = json!({
            "recorded": true,
            "destination": destination,
            "byte_count": content.len(),
            "checksum": checksum,
        });
        Ok(Prepared { line, structured })
    }
}

/// The line to append and the result to return once it is durable.
struct Prepared {
    line: String,
    structured: serde_json::Value,
}

/// Appends the line and syncs it: the effect. See the module docs for why a record is all or
/// nothing.
fn append(
    outbox: &Path,
    prepared: Prepared,
    faults: &FileFaults,
) -> Result<ToolSuccess, ToolFailure> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(OUTBOX_MODE)
        .open(outbox)
        .map_err(|e| failure(codes::INTERNAL_ERROR, format!("open the outbox: {e}")))?;
    // Held until `file` is dropped, after the sync or the truncation.
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| failure(codes::INTERNAL_ERROR, format!("lock the outbox: {e}")))?;
    let start = file
        .metadata()
        .map_err(|e| failure(codes::INTERNAL_ERROR, format!("stat the outbox: {e}")))?
        .len();
    let record = on_a_fresh_line(&file, start, prepared.line)
        .map_err(|e| failure(codes::INTERNAL_ERROR, format!("read the outbox: {e}")))?;
    // One write call appends the whole record (O_APPEND); from here on the effect may exist.
    let mut effect = faults.begin();
    let appended = effect
        .write_all(&mut file, record.as_bytes())
        .and_then(|()| effect.sync(&file));
    if let Err(error) = appended {
        let undone = match file.set_len(start).and_then(|()| file.sync_all()) {
            Ok(()) => "the partial record was removed".to_owned(),
            Err(e) => format!("removing the partial record failed too: {e}"),
        };
        return Err(failure(
            codes::OUTCOME_UNKNOWN,
            format!("append to the outbox: {error}; {undone}"),
        ));
    }
    Ok(ToolSuccess {
        structured: prepared.structured,
        trust: None,
    })
}

/// `line`, prefixed with a newline when the outbox's last byte (of `length`) is not one.
fn on_a_fresh_line(file: &File, length: u64, line: String) -> std::io::Result<String> {
    if length == 0 {
        return Ok(line);
    }
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, length - 1)?;
    Ok(if last[0] == b'\n' {
        line
    } else {
        format!("\n{line}")
    })
}

impl Tool for ExternalWrite {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn invoke<'a>(
        &'a self,
        ctx: &'a ToolContext<'a>,
        args: &'a JsonMap,
    ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>> {
        Box::pin(async move {
            let prepared = ExternalWrite::prepare(ctx, args)?;
            let outbox = self.outbox.clone();
            let faults = self.faults.clone();
            off_the_runtime(move || append(&outbox, prepared, &faults)).await
        })
    }
}
