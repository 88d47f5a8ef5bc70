//! Where the policy files come from: the embedded shipped files, or `default.toml` and
//! `hardline.toml` in `--policy-dir` (SPEC §7.1). Read once per process.

use std::path::Path;

use airlock_core::policy::{PolicyFile, PolicyLoadError, Ruleset};

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
        std::fs::read(&path).map_err(|e| PolicySourceError::Read {
            file,
            path: path.display().to_string(),
            detail: e.to_string(),
        })
    };
    let profile = read(PolicyFile::Profile, "default.toml")?;
    let hardline = read(PolicyFile::Hardline, "hardline.toml")?;
    Ok(Ruleset::load(&profile, &hardline)?)
}
