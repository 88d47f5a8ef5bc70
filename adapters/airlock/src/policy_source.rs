//! Where the policy files come from: the embedded shipped files, or `default.toml` and
//! `hardline.toml` in `--policy-dir` (SPEC §7.1). Read once per process.
//!
//! Each file must be a regular file of at most [`MAX_POLICY_FILE_BYTES`]: a FIFO would block
//! the process forever and a link to `/dev/zero` would read until memory ran out. Both are
//! refused as a load error (exit 3) with a message naming the file (see `input_file`).

use std::path::Path;

use airlock_policy::{PolicyFile, PolicyLoadError, Ruleset};

use crate::input_file::{FileKind, read_bounded};

/// The largest policy file read, in bytes (1 MiB): the shipped files are a few KiB, and a
/// hardline pattern may compile to at most 1 MiB (SPEC §7.4 row 19).
pub const MAX_POLICY_FILE_BYTES: u64 = 1024 * 1024;

/// A policy that could not be loaded, ready to print as `error: {file}: …`.
#[derive(Debug, thiserror::Error)]
pub enum PolicySourceError {
    #[error("{file}: cannot read '{path}': {detail}")]
    Read {
        file: PolicyFile,
        path: String,
        detail: String,
    },
    #[error(transparent)]
    Load(#[from] PolicyLoadError),
}

/// Loads the ruleset from `dir`, or the embedded files when `dir` is `None`.
pub fn load_ruleset(dir: Option<&Path>) -> Result<Ruleset, PolicySourceError> {
    let Some(dir) = dir else {
        return Ok(Ruleset::shipped()?);
    };
    let read = |file: PolicyFile, name: &str| {
        let path = dir.join(name);
        read_bounded(&path, FileKind::Regular, MAX_POLICY_FILE_BYTES).map_err(|e| {
            PolicySourceError::Read {
                file,
                path: path.display().to_string(),
                detail: e.to_string(),
            }
        })
    };
    let profile = read(PolicyFile::Profile, "default.toml")?;
    let hardline = read(PolicyFile::Hardline, "hardline.toml")?;
    Ok(Ruleset::load(&profile, &hardline)?)
}
