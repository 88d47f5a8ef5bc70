//! The builtin tool bodies that touch the world (SPEC §12.5): the three workspace tools and
//! `demo.external_write`. Their specs are core data (`airlock_core::tool::builtin`); this module
//! pairs each spec with a body and builds the registry of all six builtins.
//!
//! Bodies re-read their arguments defensively (the pipeline has already normalized them against
//! the schema), report only §12.5 reason codes, and keep tool-specific text in `detail`, which
//! reaches operators and never the planner (§9.3).

mod outbox;
mod workspace;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_core::action::JsonMap;
use airlock_core::canonical::sha256_hex;
use airlock_core::invocation::outcome::codes;
use airlock_core::ports::ToolFailure;
use airlock_core::tool::builtin::math::MathCalculate;
use airlock_core::tool::builtin::time::CurrentTime;
use airlock_core::tool::registry::ToolRegistry;
use airlock_core::tool::spec::ToolSpecError;
use airlock_core::vocab::ToolFailureKind;
use serde_json::Value;

pub use outbox::{ExternalWrite, OUTBOX_FILE};
pub use workspace::{ListFiles, MAX_LISTED_ENTRIES, MAX_READ_BYTES, ReadText, WriteText};

/// The registry of the six shipped builtins (§12.5), with the outbox under `data_dir`.
pub fn builtin_registry(data_dir: &Path) -> Result<ToolRegistry, ToolSpecError> {
    let mut registry = ToolRegistry::new();
    registry.register(Arc::new(ReadText::new()))?;
    registry.register(Arc::new(ListFiles::new()))?;
    registry.register(Arc::new(WriteText::new()))?;
    registry.register(Arc::new(CurrentTime::new()))?;
    registry.register(Arc::new(MathCalculate::new()))?;
    registry.register(Arc::new(ExternalWrite::new(outbox_path(data_dir))))?;
    Ok(registry)
}

/// `{data_dir}/outbox.jsonl`, where `demo.external_write` appends.
pub fn outbox_path(data_dir: &Path) -> PathBuf {
    data_dir.join(OUTBOX_FILE)
}

/// `"sha256:" + hex` of the bytes (§12.5).
pub fn checksum(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

/// Runs a body's blocking file work on tokio's blocking pool and awaits it. The pipeline races
/// the body against the call's timeout (SPEC §9.2 step 10); with `block_in_place` the body would
/// hold the very task that polls that timer, so a stuck read (a hung mount, say) could never time
/// out. Here the timer wins and the call is classified as timed out while the thread finishes or
/// stays stuck on its own. A panic in the work resumes in the caller, where the pipeline catches
/// it. Outside a tokio runtime the work runs inline.
async fn off_the_runtime<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolFailure> + Send + 'static,
) -> Result<T, ToolFailure> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => match runtime.spawn_blocking(work).await {
            Ok(result) => result,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            // A blocking task is only cancelled before it starts (runtime shutdown): no effect.
            Err(_) => Err(failure(
                codes::INTERNAL_ERROR,
                "the runtime shut down before the tool body started",
            )),
        },
        Err(_) => work(),
    }
}

/// A failure with the kind that matches its reason code's family.
fn failure(reason_code: &str, detail: impl Into<String>) -> ToolFailure {
    let kind = if reason_code == codes::INTERNAL_ERROR {
        ToolFailureKind::Internal
    } else if reason_code == codes::OUTCOME_UNKNOWN {
        ToolFailureKind::OutcomeUnknown
    } else if reason_code.starts_with("tool.not_found.") {
        ToolFailureKind::NotFound
    } else {
        ToolFailureKind::InvalidArguments
    };
    ToolFailure::new(kind, reason_code, detail)
}

fn string_arg<'a>(args: &'a JsonMap, name: &str) -> Result<&'a str, ToolFailure> {
    match args.get(name) {
        Some(Value::String(s)) => Ok(s),
        _ => Err(failure(
            codes::ARGUMENTS_INVALID,
            format!("property '{name}' must be a string"),
        )),
    }
}

fn string_arg_or<'a>(
    args: &'a JsonMap,
    name: &str,
    default: &'a str,
) -> Result<&'a str, ToolFailure> {
    match args.get(name) {
        None => Ok(default),
        Some(_) => string_arg(args, name),
    }
}

fn bool_arg_or(args: &JsonMap, name: &str, default: bool) -> Result<bool, ToolFailure> {
    match args.get(name) {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(failure(
            codes::ARGUMENTS_INVALID,
            format!("property '{name}' must be a boolean"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use airlock_core::tool::builtin::builtin_specs;

    use super::*;

    #[test]
    fn the_registry_holds_the_six_builtins_under_their_core_specs() {
        let data = tempfile::tempdir().unwrap();
        let registry = builtin_registry(data.path()).unwrap();
        assert_eq!(registry.len(), 6);
        for spec in builtin_specs() {
            let tool = registry.resolve(&spec.name, Some("1.0.0")).unwrap();
            assert_eq!(tool.spec(), &spec, "{}", spec.name);
        }
    }

    #[test]
    fn the_outbox_sits_in_the_data_directory() {
        assert_eq!(
            outbox_path(Path::new("/data")),
            PathBuf::from("/data/outbox.jsonl")
        );
    }

    #[test]
    fn checksums_are_prefixed_sha256_hex() {
        assert_eq!(
            checksum(b"hello"),
            "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
    }

    #[test]
    fn failure_kinds_follow_the_code_family() {
        assert_eq!(
            failure("tool.not_found.no_such_path", "").kind,
            ToolFailureKind::NotFound
        );
        assert_eq!(
            failure(codes::INTERNAL_ERROR, "").kind,
            ToolFailureKind::Internal
        );
        assert_eq!(
            failure("tool.invalid_arguments.not_text", "").kind,
            ToolFailureKind::InvalidArguments
        );
        assert_eq!(
            failure(codes::ARGUMENTS_INVALID, "").kind,
            ToolFailureKind::InvalidArguments
        );
        assert!(!failure(codes::ARGUMENTS_INVALID, "").retryable);
    }
}
