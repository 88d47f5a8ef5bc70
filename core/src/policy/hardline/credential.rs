//! The `credential_shaped` source of `trust_flow` rules (SPEC §6.3), shared with the approval
//! view's redaction (SPEC §10.1).

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::strings::{any_member_in, any_string_in, is_ws};

/// The compiled detectors. The patterns are fixed data, so building them once per process keeps
/// evaluation free of regex compilation.
struct Detectors {
    assignment: Regex,
    bearer: Regex,
    authorization: Regex,
    pem: Regex,
    github: Regex,
    aws: Regex,
}

static DETECTORS: LazyLock<Option<Detectors>> = LazyLock::new(|| {
    Some(Detectors {
        assignment: Regex::new(
            r#"(?i)(?:ap[iıİ][_-]?key|secret|password|token|bearer)["']?[\s\x1C-\x1F]*[:=][\s\x1C-\x1F]*["']?[^\s\x1C-\x1F]"#,
        )
        .ok()?,
        bearer: Regex::new(r"(?i)bearer").ok()?,
        authorization: Regex::new(
            r"(?i)(?:^|[\r\n])[\s\x1C-\x1F]*author[iıİ]zat[iıİ]on[\s\x1C-\x1F]*:[\s\x1C-\x1F]*[^\s\x1C-\x1F]",
        )
        .ok()?,
        pem: Regex::new(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----").ok()?,
        github: Regex::new(r"gh[pousr]_[A-Za-z0-9]{36,}").ok()?,
        aws: Regex::new(r"(?:^|[^A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?:$|[^A-Za-z0-9])").ok()?,
    })
});

/// Object member names that mark their string value as a credential, after ASCII lowercasing and
/// reading `-` as `_`.
const CREDENTIAL_KEYS: [&str; 14] = [
    "password",
    "passwd",
    "api_key",
    "apikey",
    "x_api_key",
    "secret",
    "client_secret",
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "auth_token",
    "authorization",
    "private_key",
];

/// Whether one string has a credential's shape.
pub fn is_credential_shaped(s: &str) -> bool {
    // The patterns are constants covered by tests; if they ever failed to compile, every string
    // counts as credential-shaped (fail closed).
    let Some(d) = DETECTORS.as_ref() else {
        return true;
    };
    d.assignment.is_match(s)
        || d.bearer
            .find_iter(s)
            .any(|m| bearer_token_follows(&s[m.end()..]))
        || d.authorization.is_match(s)
        || d.pem.is_match(s)
        || d.github.is_match(s)
        || d.aws.is_match(s)
}

/// Shape (2): one or more WS, then a maximal run of token characters that is at least 8 long
/// and holds an ASCII digit. Every occurrence of `bearer` is tried, so `Bearer Bearer abc12345`
/// matches at the second one.
fn bearer_token_follows(rest: &str) -> bool {
    let after_space = rest.trim_start_matches(is_ws);
    if after_space.len() == rest.len() {
        return false;
    }
    let token_len = after_space
        .bytes()
        .take_while(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'+' | b'/' | b'=' | b'-')
        })
        .count();
    let token = &after_space[..token_len];
    token.len() >= 8 && token.bytes().any(|b| b.is_ascii_digit())
}

/// Whether an object member's key names a credential.
pub fn is_credential_key(key: &str) -> bool {
    let normalized: String = key
        .chars()
        .map(|c| {
            if c == '-' {
                '_'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    CREDENTIAL_KEYS.contains(&normalized.as_str())
}

/// Whether any collected string is credential-shaped, or any object member is a credential-named
/// key with a non-blank string value.
pub fn contains_credential(arguments: &Map<String, Value>) -> bool {
    any_string_in(arguments, &mut |s| is_credential_shaped(s))
        || any_member_in(arguments, &mut |key, item| {
            is_credential_key(key)
                && item
                    .as_str()
                    .is_some_and(|s| !s.trim_matches(is_ws).is_empty())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn detectors_compile() {
        assert!(DETECTORS.is_some());
    }

    #[test]
    fn spec_examples() {
        for s in [
            "api_key=secret-value",
            "token: abc",
            "ſecret=1",
            "Bearer eyJhbGciOi1",
            "Authorization: Basic x",
            r#"{"password": "x"}"#,
            "-----BEGIN RSA PRIVATE KEY-----",
        ] {
            assert!(is_credential_shaped(s), "{s} should be credential-shaped");
        }
        for s in [
            "send the name of a credential reference",
            "Bearer abc",
            "the bearer of bad news",
            "max_tokens: 100",
            "token_count=5",
        ] {
            assert!(
                !is_credential_shaped(s),
                "{s} should not be credential-shaped"
            );
        }
    }

    #[test]
    fn tightened_shapes() {
        for s in [
            "APİKEY = 'x'",
            "apı-key:x",
            "bearer\u{1c}abcdefg1",
            "Bearer Bearer abc12345",
            "x\nauthorızation:\tq",
            "key AKIAABCDEFGHIJKLMNOP end",
            "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "-----BEGIN OPENSSH PRIVATE KEY-----",
        ] {
            assert!(is_credential_shaped(s), "{s:?} should be credential-shaped");
        }
        for s in [
            "Bearer abcdefgh",
            "Bearer 1234567",
            "xAKIAABCDEFGHIJKLMNOP",
            "my authorization: x",
        ] {
            assert!(
                !is_credential_shaped(s),
                "{s:?} should not be credential-shaped"
            );
        }
    }

    fn contains_credential(value: &Value) -> bool {
        super::contains_credential(value.as_object().unwrap())
    }

    #[test]
    fn credential_named_members() {
        assert!(contains_credential(&json!({"api_key": "sk-1"})));
        assert!(contains_credential(
            &json!({"nested": [{"Client-Secret": "x"}]})
        ));
        assert!(!contains_credential(&json!({"token_count": 5})));
        assert!(!contains_credential(&json!({"max_tokens": "100"})));
        assert!(!contains_credential(&json!({"password": " \u{1c} "})));
        assert!(!contains_credential(&json!({"password": 12345})));
    }
}
