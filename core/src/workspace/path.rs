//! `WsPath` (SPEC §12.2): the only way a workspace path exists is through [`WsPath::parse`],
//! which rejects rather than normalizes.

use super::error::WorkspaceError;

const MAX_COMPONENT_BYTES: usize = 255;
const MAX_PATH_BYTES: usize = 4096;

/// A validated relative path: zero components (the root) or more, none empty, `.` or `..`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WsPath {
    components: Vec<String>,
}

impl WsPath {
    /// The rules of SPEC §12.2, in order.
    pub fn parse(s: &str) -> Result<WsPath, WorkspaceError> {
        if s.contains('\0') || s.starts_with('/') {
            return Err(WorkspaceError::Escape);
        }
        if s.is_empty() {
            return Ok(WsPath {
                components: Vec::new(),
            });
        }
        let components: Vec<String> = s.split('/').map(str::to_owned).collect();
        if components
            .iter()
            .any(|c| matches!(c.as_str(), "" | "." | ".."))
        {
            return Err(WorkspaceError::Escape);
        }
        if s.len() > MAX_PATH_BYTES || components.iter().any(|c| c.len() > MAX_COMPONENT_BYTES) {
            return Err(WorkspaceError::Escape);
        }
        Ok(WsPath { components })
    }

    pub fn components(&self) -> &[String] {
        &self.components
    }

    pub fn is_root(&self) -> bool {
        self.components.is_empty()
    }

    /// The relative path as text (`""` for the root).
    pub fn as_relative(&self) -> String {
        self.components.join("/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_examples() {
        for ok in ["notes/a.txt", "", "a\\b", "a", "x/y/z.md"] {
            assert!(WsPath::parse(ok).is_ok(), "{ok:?} should be accepted");
        }
        for bad in [
            "../outside",
            "/etc/passwd",
            "a//b",
            "a/./b",
            "a/",
            "./a",
            "nul\0path",
            "a/..",
        ] {
            assert_eq!(
                WsPath::parse(bad),
                Err(WorkspaceError::Escape),
                "{bad:?} should be rejected"
            );
        }
        assert!(WsPath::parse(&"a".repeat(255)).is_ok());
        assert_eq!(WsPath::parse(&"a".repeat(256)), Err(WorkspaceError::Escape));
        let long = vec!["abcdefg"; 600].join("/");
        assert_eq!(WsPath::parse(&long), Err(WorkspaceError::Escape));
        assert!(WsPath::parse("").unwrap().is_root());
        assert_eq!(WsPath::parse("a/b").unwrap().as_relative(), "a/b");
    }
}
