//! The config file of `airlock serve --config FILE` (TOML). Today it holds one section,
//! `[auth]`: the OAuth issuer whose bearer tokens the API takes beside airlock's own (issue 31;
//! `airlock-oauth` documents its keys). Unknown sections and keys are refused, naming them.

use std::path::Path;

use airlock_oauth::{AuthConfig, AuthSection};
use serde::Deserialize;

use crate::input_file::{FileKind, read_bounded};

/// The largest config file read.
const MAX_BYTES: u64 = 64 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerFile {
    auth: Option<AuthSection>,
}

/// The checked `[auth]` section of `path`, if it has one. The message of an error names the
/// file and the key.
pub fn auth_of(path: &Path) -> Result<Option<AuthConfig>, String> {
    let bytes = read_bounded(path, FileKind::Regular, MAX_BYTES)
        .map_err(|e| format!("cannot read the server config '{}': {e}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("the server config '{}' is not UTF-8", path.display()))?;
    let file: ServerFile = toml::from_str(&text)
        .map_err(|e| format!("the server config '{}': {}", path.display(), e.message()))?;
    file.auth
        .map(|section| section.check(None))
        .transpose()
        .map_err(|e| format!("the server config '{}': {e}", path.display()))
}
