//! `AIRLOCK_CRASH_AT=<crash point>`: aborts the process right after the named commit (or after a
//! tool returns, for `after_invoke`), for the crash tests and the demo (SPEC §2.2).

use airlock_core::ports::{BoxFut, FaultHook};
use airlock_core::vocab::CrashPoint;

/// Why `AIRLOCK_CRASH_AT` could not be used.
#[derive(Debug, thiserror::Error)]
#[error("AIRLOCK_CRASH_AT: {0}")]
pub struct CrashConfigError(String);

/// Aborts at one configured point; otherwise never interferes.
#[derive(Debug, Default, Clone, Copy)]
pub struct AbortAt(Option<CrashPoint>);

impl AbortAt {
    /// Reads `AIRLOCK_CRASH_AT`; unset or empty means no crash point.
    pub fn from_env() -> Result<AbortAt, CrashConfigError> {
        match std::env::var("AIRLOCK_CRASH_AT") {
            Ok(value) if value.is_empty() => Ok(AbortAt(None)),
            Ok(value) => value
                .parse::<CrashPoint>()
                .map(|p| AbortAt(Some(p)))
                .map_err(|e| CrashConfigError(e.to_string())),
            Err(std::env::VarError::NotPresent) => Ok(AbortAt(None)),
            Err(e) => Err(CrashConfigError(e.to_string())),
        }
    }

    pub fn point(&self) -> Option<CrashPoint> {
        self.0
    }
}

impl FaultHook for AbortAt {
    fn reached(&self, point: CrashPoint) -> BoxFut<'static, ()> {
        if self.0 == Some(point) {
            eprintln!("airlock: AIRLOCK_CRASH_AT={point} reached; aborting");
            std::process::abort();
        }
        Box::pin(std::future::ready(()))
    }
}
