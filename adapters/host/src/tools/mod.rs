//! The builtin tool bodies that touch the world (SPEC §12.5): the three workspace tools and
//! `demo.external_write`. Their specs are core data (`airlock_core::tool::builtin`); this module
//! pairs each spec with a body and builds the registry of all six builtins.
//!
//! Bodies re-read their arguments defensively (the pipeline has already normalized them against
//! the schema), report only §12.5 reason codes, and keep tool-specific text in `detail`, which
//! reaches operators and never the planner (§9.3).

mod body;
mod outbox;
mod workspace;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_core::tool::builtin::math::MathCalculate;
use airlock_core::tool::builtin::time::CurrentTime;
use airlock_core::tool::registry::ToolRegistry;
use airlock_core::tool::spec::ToolSpecError;

pub use body::checksum;
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

#[cfg(test)]
mod tests {
    use airlock_core::invocation::outcome::codes;
    use airlock_core::tool::builtin::builtin_specs;
    use airlock_core::vocab::ToolFailureKind;

    use super::body::*;
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
