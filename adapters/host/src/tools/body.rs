//! What every builtin body needs: its arguments read defensively, failures with the kind of
//! their reason code, blocking file work off the runtime, and checksums (SPEC §12.5). Below the
//! bodies, which all use it.

use airlock_core::action::JsonMap;
use airlock_core::canonical::sha256_hex;
use airlock_core::invocation::outcome::codes;
use airlock_core::ports::ToolFailure;
use airlock_core::vocab::ToolFailureKind;
use serde_json::Value;

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
pub(super) async fn off_the_runtime<T: Send + 'static>(
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
pub(super) fn failure(reason_code: &str, detail: impl Into<String>) -> ToolFailure {
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

pub(super) fn string_arg<'a>(args: &'a JsonMap, name: &str) -> Result<&'a str, ToolFailure> {
    match args.get(name) {
        Some(Value::String(s)) => Ok(s),
        _ => Err(failure(
            codes::ARGUMENTS_INVALID,
            format!("property '{name}' must be a string"),
        )),
    }
}

pub(super) fn string_arg_or<'a>(
    args: &'a JsonMap,
    name: &str,
    default: &'a str,
) -> Result<&'a str, ToolFailure> {
    match args.get(name) {
        None => Ok(default),
        Some(_) => string_arg(args, name),
    }
}

pub(super) fn bool_arg_or(args: &JsonMap, name: &str, default: bool) -> Result<bool, ToolFailure> {
    match args.get(name) {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(failure(
            codes::ARGUMENTS_INVALID,
            format!("property '{name}' must be a boolean"),
        )),
    }
}
