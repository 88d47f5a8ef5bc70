//! `demo.external_write` (SPEC §12.5): the canonical non-idempotent external effect. Each call
//! appends one JSON line to `{data_dir}/outbox.jsonl` and never deduplicates, so a repeated call
//! is visible as a second line with the same `idempotency_key` (the demo counts them).
//!
//! §9.3 allows a non-idempotent tool to return an ordinary failure only when no effect happened.
//! So a failure to open the outbox is `tool.internal_error`, while any failure once the append
//! has been attempted (a short write, a failed `fsync`) is `outcome_unknown`: the line may be
//! there.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use airlock_core::action::JsonMap;
use airlock_core::invocation::outcome::codes;
use airlock_core::ports::{BoxFut, Tool, ToolContext, ToolFailure, ToolSuccess};
use airlock_core::tool::builtin::demo_external_write_spec;
use airlock_core::tool::spec::ToolSpec;
use serde_json::json;

use super::{checksum, failure, off_the_runtime, string_arg};

/// The outbox's file name inside the data directory.
pub const OUTBOX_FILE: &str = "outbox.jsonl";

const OUTBOX_MODE: u32 = 0o600;

/// The `demo.external_write` tool.
#[derive(Debug, Clone)]
pub struct ExternalWrite {
    spec: ToolSpec,
    outbox: PathBuf,
}

impl ExternalWrite {
    /// A body appending to the outbox file at `outbox`.
    pub fn new(outbox: PathBuf) -> ExternalWrite {
        ExternalWrite {
            spec: demo_external_write_spec(),
            outbox,
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

/// Appends the line and syncs it: the effect.
fn append(outbox: &Path, prepared: Prepared) -> Result<ToolSuccess, ToolFailure> {
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(OUTBOX_MODE)
        .open(outbox)
        .map_err(|e| failure(codes::INTERNAL_ERROR, format!("open the outbox: {e}")))?;
    // One write call appends the whole line (O_APPEND); from here on the effect may exist.
    file.write_all(prepared.line.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| failure(codes::OUTCOME_UNKNOWN, format!("append to the outbox: {e}")))?;
    Ok(ToolSuccess {
        structured: prepared.structured,
        trust: None,
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
            off_the_runtime(move || append(&outbox, prepared)).await
        })
    }
}
