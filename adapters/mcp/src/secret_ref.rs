//! Header values that name a secret instead of holding it (issue 31 item 3): an HTTP upstream's
//! `headers` in the gateway file may say `Authorization = "Bearer ${env:GITHUB_TOKEN}"` or
//! `X-Api-Key = "${file:/run/secrets/api-key}"`, so the secret stays out of the file.
//!
//! - `${env:NAME}` is the environment variable `NAME` (letters, digits, `_`, not starting with a
//!   digit) of the gateway process; unset or not UTF-8 is an error, never an empty value.
//! - `${file:PATH}` is the content of the file at the absolute `PATH`, without one trailing
//!   newline (`\n` or `\r\n`), at most [`MAX_SECRET_FILE_BYTES`].
//! - `$${` is a literal `${`; any other `${…}` is refused when the file loads, so a misspelt
//!   reference never reaches an upstream as text.
//!
//! The file is checked when it loads (`GatewayConfig::parse`); references are resolved each time
//! the gateway connects to the server, so a rotated secret is picked up on the next connection.
//! The gateway file's fingerprint (`upstreams_fingerprint`) hashes the values as written, never
//! the secrets. No error names a secret's value: only the header, the variable or the path.

/// Bytes read from a `${file:…}` at most: a token, a key or a certificate fits many times.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// One piece of a header value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Literal(String),
    Env(String),
    File(String),
}

/// A header value as written: literal text and references, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretTemplate(pub Vec<Piece>);

/// Why a header value as written is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("'${{' is not closed (write $${{ for a literal ${{)")]
    Unclosed,
    // No message repeats the text between the braces: in a value meant as a literal, that text
    // may be part of a secret.
    #[error(
        "unknown reference '${{…}}' (use ${{env:NAME}} or ${{file:/absolute/path}}; write $${{ for a literal ${{)"
    )]
    Unknown,
    #[error("${{env:…}} needs a variable name: letters, digits and '_', not starting with a digit")]
    VariableName,
    #[error("${{file:…}} needs an absolute path")]
    RelativePath,
}

/// Why a reference could not be resolved when the gateway connected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("environment variable {0} is not set")]
    EnvUnset(String),
    #[error("environment variable {0} is not valid UTF-8")]
    EnvNotUnicode(String),
    #[error("cannot read secret file '{path}': {reason}")]
    File { path: String, reason: String },
}

/// Where references are looked up: the process (in production) or a table (in tests).
pub trait Secrets {
    fn env(&self, name: &str) -> Result<String, ResolveError>;
    fn file(&self, path: &str) -> Result<String, ResolveError>;
}

impl SecretTemplate {
    /// Reads a header value as written.
    pub fn parse(text: &str) -> Result<SecretTemplate, TemplateError> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            literal.push_str(&rest[..at]);
            let after = &rest[at..];
            if let Some(tail) = after.strip_prefix("$${") {
                literal.push_str("${");
                rest = tail;
            } else if let Some(tail) = after.strip_prefix("${") {
                let end = tail.find('}').ok_or(TemplateError::Unclosed)?;
                let reference = &tail[..end];
                if !literal.is_empty() {
                    pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                }
                pieces.push(Self::reference(reference)?);
                rest = &tail[end + 1..];
            } else {
                literal.push('$');
                rest = &after[1..];
            }
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Literal(literal));
        }
        Ok(SecretTemplate(pieces))
    }

    fn reference(reference: &str) -> Result<Piece, TemplateError> {
        if let Some(name) = reference.strip_prefix("env:") {
            let valid = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(TemplateError::VariableName);
            }
            Ok(Piece::Env(name.to_owned()))
        } else if let Some(path) = reference.strip_prefix("file:") {
            if !path.starts_with('/') {
                return Err(TemplateError::RelativePath);
            }
            Ok(Piece::File(path.to_owned()))
        } else {
            Err(TemplateError::Unknown)
        }
    }

    /// Whether the value names any secret (a literal value needs no lookup).
    pub fn has_references(&self) -> bool {
        self.0
            .iter()
            .any(|piece| !matches!(piece, Piece::Literal(_)))
    }

    /// The value with every reference replaced by what it names.
    pub fn resolve(&self, secrets: &dyn Secrets) -> Result<String, ResolveError> {
        let mut value = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Literal(text) => value.push_str(text),
                Piece::Env(name) => value.push_str(&secrets.env(name)?),
                Piece::File(path) => {
                    let content = secrets.file(path)?;
                    let content = content
                        .strip_suffix("\r\n")
                        .or_else(|| content.strip_suffix('\n'))
                        .unwrap_or(&content);
                    value.push_str(content);
                }
            }
        }
        Ok(value)
    }
}

/// The gateway process's environment and files.
pub struct ProcessSecrets;

impl Secrets for ProcessSecrets {
    fn env(&self, name: &str) -> Result<String, ResolveError> {
        std::env::var(name).map_err(|error| match error {
            std::env::VarError::NotPresent => ResolveError::EnvUnset(name.to_owned()),
            std::env::VarError::NotUnicode(_) => ResolveError::EnvNotUnicode(name.to_owned()),
        })
    }

    fn file(&self, path: &str) -> Result<String, ResolveError> {
        use std::io::Read;
        let failed = |reason: String| ResolveError::File {
            path: path.to_owned(),
            reason,
        };
        // A FIFO or a device would block the connect (opening a FIFO waits for a writer): only
        // a regular file is read, checked before opening and again on what was opened.
        let regular = |metadata: std::fs::Metadata| {
            if metadata.is_file() {
                Ok(())
            } else {
                Err(failed("not a regular file".to_owned()))
            }
        };
        // Opened without blocking (a FIFO put in the file's place after the first check does
        // not wait for a writer), then checked on what was opened.
        use std::os::unix::fs::OpenOptionsExt;
        regular(std::fs::metadata(path).map_err(|e| failed(e.to_string()))?)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| failed(e.to_string()))?;
        regular(file.metadata().map_err(|e| failed(e.to_string()))?)?;
        let mut content = String::new();
        file.take(MAX_SECRET_FILE_BYTES + 1)
            .read_to_string(&mut content)
            .map_err(|e| failed(e.to_string()))?;
        if content.len() as u64 > MAX_SECRET_FILE_BYTES {
            return Err(failed(format!("larger than {MAX_SECRET_FILE_BYTES} bytes")));
        }
        Ok(content)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    struct Table(BTreeMap<String, String>);

    impl Secrets for Table {
        fn env(&self, name: &str) -> Result<String, ResolveError> {
            self.0
                .get(&format!("env:{name}"))
                .cloned()
                .ok_or_else(|| ResolveError::EnvUnset(name.to_owned()))
        }
        fn file(&self, path: &str) -> Result<String, ResolveError> {
            self.0
                .get(&format!("file:{path}"))
                .cloned()
                .ok_or_else(|| ResolveError::File {
                    path: path.to_owned(),
                    reason: "No such file or directory".to_owned(),
                })
        }
    }

    fn table() -> Table {
        Table(BTreeMap::from([
            ("env:TOKEN".to_owned(), "s3cr3t".to_owned()),
            ("file:/run/secrets/key".to_owned(), "k3y\n".to_owned()),
            ("file:/run/secrets/crlf".to_owned(), "line\r\n".to_owned()),
            ("file:/run/secrets/two".to_owned(), "a\n\n".to_owned()),
        ]))
    }

    fn resolved(text: &str) -> Result<String, String> {
        SecretTemplate::parse(text)
            .map_err(|e| e.to_string())?
            .resolve(&table())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn references_resolve_in_place_and_literals_stay() {
        assert_eq!(
            resolved("Bearer ${env:TOKEN}"),
            Ok("Bearer s3cr3t".to_owned())
        );
        assert_eq!(resolved("${file:/run/secrets/key}"), Ok("k3y".to_owned()));
        assert_eq!(resolved("${file:/run/secrets/crlf}"), Ok("line".to_owned()));
        assert_eq!(resolved("${file:/run/secrets/two}"), Ok("a\n".to_owned()));
        assert_eq!(
            resolved("${env:TOKEN}:${file:/run/secrets/key}"),
            Ok("s3cr3t:k3y".to_owned())
        );
        assert_eq!(resolved("plain $5 value"), Ok("plain $5 value".to_owned()));
        assert_eq!(
            resolved("cost $${env:TOKEN}"),
            Ok("cost ${env:TOKEN}".to_owned())
        );
        assert_eq!(resolved("$"), Ok("$".to_owned()));
        assert!(
            !SecretTemplate::parse("Bearer abc")
                .expect("literal")
                .has_references()
        );
        assert!(
            SecretTemplate::parse("${env:TOKEN}")
                .expect("ref")
                .has_references()
        );
    }

    #[test]
    fn a_bad_reference_is_refused_when_the_file_loads() {
        for (text, message) in [
            ("${env:TOKEN", "'${' is not closed"),
            ("${TOKEN}", "unknown reference '${…}'"),
            ("${vault:x}", "unknown reference '${…}'"),
            ("${env:}", "needs a variable name"),
            ("${env:1X}", "needs a variable name"),
            ("${env:A-B}", "needs a variable name"),
            ("${file:secrets/key}", "needs an absolute path"),
            ("${file:}", "needs an absolute path"),
        ] {
            let error = SecretTemplate::parse(text).expect_err(text).to_string();
            assert!(error.contains(message), "{text}: {error}");
        }
        // The text between the braces is never repeated: it may be part of a literal secret.
        let error = SecretTemplate::parse("Basic dXNl${pw-s3cr3t}")
            .expect_err("not a reference")
            .to_string();
        assert!(!error.contains("s3cr3t"), "{error}");
    }

    #[test]
    fn a_missing_secret_is_an_error_that_names_where_not_what() {
        assert_eq!(
            resolved("${env:MISSING}"),
            Err("environment variable MISSING is not set".to_owned())
        );
        let error = resolved("${file:/run/secrets/none}").expect_err("no such file");
        assert!(error.contains("/run/secrets/none"), "{error}");
    }

    /// The process reader takes a regular file of at most 64 KiB of UTF-8, and refuses a FIFO
    /// (which would block), a directory, a larger file and bytes that are not UTF-8, naming
    /// the path and never the content.
    #[test]
    fn the_process_reads_only_small_regular_utf8_files() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = |name: &str| dir.path().join(name).display().to_string();
        std::fs::write(path("ok"), "t0k3n\n").expect("write");
        assert_eq!(ProcessSecrets.file(&path("ok")), Ok("t0k3n\n".to_owned()));
        let limit = usize::try_from(MAX_SECRET_FILE_BYTES).expect("fits");
        std::fs::write(path("limit"), "a".repeat(limit)).expect("write");
        assert!(ProcessSecrets.file(&path("limit")).is_ok());
        std::fs::write(path("big"), "s".repeat(limit + 1)).expect("write");
        std::fs::write(path("binary"), [0xff, 0xfe, b's']).expect("write");
        let made = std::process::Command::new("mkfifo")
            .arg(path("fifo"))
            .status()
            .expect("mkfifo runs");
        assert!(made.success(), "a FIFO is made");
        for (name, reason) in [
            ("big", "larger than 65536 bytes"),
            ("binary", "valid UTF-8"),
            ("fifo", "not a regular file"),
            (".", "not a regular file"),
            ("missing", "No such file"),
        ] {
            let error = ProcessSecrets
                .file(&path(name))
                .expect_err(name)
                .to_string();
            assert!(
                error.contains(reason) && error.contains(&path(name)),
                "{error}"
            );
            assert!(!error.contains("sss"), "{error}");
        }
    }
}
