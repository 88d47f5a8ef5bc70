//! The `credential_shaped` source of `trust_flow` rules (SPEC §6.3, extended by §21.4), shared
//! with the approval view's redaction (SPEC §10.1).
//!
//! The §21.4 additions — more secret formats, a URL with a password, credential names and header
//! shapes — are rule data: they hold in both passes, with the v1 file as with the shipped one.

use std::sync::LazyLock;

use heck::ToSnakeCase;
use regex::Regex;
use serde_json::{Map, Value};

use super::strings::{any_member_in, any_string_in, is_ws};

/// The fixed shapes of SPEC §6.3 (1), (3), (4) and §21.4, one pattern each. They are compiled
/// into one alternation: a string is scanned once, however many shapes there are.
const SHAPES: [&str; 9] = [
    // (1) an assignment to a credential-sounding name.
    r#"(?i:(?:ap[iıİ][_-]?key|secret|password|token|bearer)["']?[\s\x1C-\x1F]*[:=][\s\x1C-\x1F]*["']?[^\s\x1C-\x1F])"#,
    // (3) an Authorization header at a line start.
    r"(?i:(?:^|[\r\n])[\s\x1C-\x1F]*author[iıİ]zat[iıİ]on[\s\x1C-\x1F]*:[\s\x1C-\x1F]*[^\s\x1C-\x1F])",
    // (4) PEM private keys, GitHub tokens, AWS access key ids.
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----",
    r"gh[pousr]_[A-Za-z0-9]{36,}",
    r"(?:^|[^A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?:$|[^A-Za-z0-9])",
    // §21.4: well-known formats, delimited by ASCII non-alphanumerics.
    concat!(
        r"(?:^|[^A-Za-z0-9])(?:",
        r"github_pat_[A-Za-z0-9_]{22,}",
        r"|gh[pousr]_[A-Za-z0-9]{30,}",
        r"|glpat-[A-Za-z0-9_-]{20,}",
        r"|xox[abposre]-[A-Za-z0-9-]{10,}",
        r"|xapp-[A-Za-z0-9-]{10,}",
        r"|hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]{20,}",
        r"|ATATT[A-Za-z0-9_=-]{20,}",
        r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
        r"|sk-ant-[A-Za-z0-9_-]{20,}",
        r"|sk-(?:proj-)?[A-Za-z0-9_-]{20,}",
        r"|AIza[0-9A-Za-z_-]{35}",
        r"|npm_[A-Za-z0-9]{36}",
        r"|pypi-[A-Za-z0-9_-]{50,}",
        r"|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",
        r"|-----BEGIN PGP PRIVATE KEY BLOCK-----",
        r")(?:$|[^A-Za-z0-9])",
    ),
    // §21.4: a URL with a password, `scheme://user:password@`.
    r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]+:[^\s/@]+@",
    // §21.4: Authorization, Proxy-Authorization, Cookie and Set-Cookie headers.
    r#"(?i:(?:^|[\n\r\x0B\x0C\x{85}\x{2028}\x{2029}'"])[\s\x1C-\x1F]*(?:(?:proxy-)?author[iıİ]zat[iıİ]on|(?:set-)?cookie)[\s\x1C-\x1F]*:[\s\x1C-\x1F]*[^\s\x1C-\x1F])"#,
    // Shape (2) starts at any `bearer`; the token after it is checked in code.
    r"(?i:bearer)",
];

/// The compiled detectors, built once per process so evaluation never compiles a regex.
struct Detectors {
    /// Every shape but the last (`bearer`), as one alternation.
    shapes: Regex,
    bearer: Regex,
}

static DETECTORS: LazyLock<Option<Detectors>> = LazyLock::new(|| {
    let (bearer, fixed) = SHAPES.split_last()?;
    let alternation = fixed
        .iter()
        .map(|p| format!("(?:{p})"))
        .collect::<Vec<_>>()
        .join("|");
    Some(Detectors {
        shapes: Regex::new(&alternation).ok()?,
        bearer: Regex::new(bearer).ok()?,
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
    d.shapes.is_match(s)
        || d.bearer
            .find_iter(s)
            .any(|m| bearer_token_follows(&s[m.end()..]))
        || has_credential_assignment(s)
}

/// Whether a name, converted to snake_case as `heck` does and split at `_`, ends with a
/// credential word (SPEC §21.4): `password`, `passwd`, `secret`, `token`, `credentials`,
/// `cookie`, or `key` after `api`, `private`, `access` or `secret`.
pub fn is_credential_name(name: &str) -> bool {
    let snake = name.to_snake_case();
    let mut segments = snake.rsplit('_').filter(|s| !s.is_empty());
    matches!(
        (segments.next(), segments.next()),
        (
            Some("password" | "passwd" | "secret" | "token" | "credentials" | "cookie"),
            _
        ) | (Some("key"), Some("api" | "private" | "access" | "secret"))
    )
}

/// The characters of a credential-name identifier in text (SPEC §21.4).
fn is_identifier_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

/// An identifier (maximal `[A-Za-z0-9_.-]+`, optionally quoted), optional WS, `:` or `=`,
/// optional WS and a non-WS character, whose name is a credential name
/// (`AWS_SECRET_ACCESS_KEY=…`, `"clientSecret": "…"`, `passwd: x`).
fn has_credential_assignment(s: &str) -> bool {
    let bytes = s.as_bytes();
    for (at, _) in s.match_indices([':', '=']) {
        // A value must follow: optional WS, then a non-WS character.
        if s[at + 1..].trim_start_matches(is_ws).is_empty() {
            continue;
        }
        let before = s[..at].trim_end_matches(is_ws);
        let before = before.strip_suffix(['"', '\'']).unwrap_or(before);
        let end = before.len();
        let start = bytes[..end]
            .iter()
            .rposition(|b| !is_identifier_byte(*b))
            .map_or(0, |p| p + 1);
        let name = &s[start..end];
        if name.is_empty() || !mentions_credential_word(name) {
            continue;
        }
        if is_credential_name(name) {
            return true;
        }
    }
    false
}

/// A cheap test before the snake_case conversion: an ASCII identifier can only end with a
/// credential word if it contains one, in any case.
fn mentions_credential_word(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ["pass", "secret", "token", "credentials", "cookie", "key"]
        .iter()
        .any(|w| lower.contains(w))
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

/// Whether any collected string is credential-shaped, any object member is a credential-named
/// key (the v1 list, or a credential name) with a non-blank string value, or any object is a
/// `{name|key, value}` pair naming a credential (`{"name": "DB_PASSWORD", "value": "…"}`).
pub fn contains_credential(arguments: &Map<String, Value>) -> bool {
    let non_blank = |item: &Value| {
        item.as_str()
            .is_some_and(|s| !s.trim_matches(is_ws).is_empty())
    };
    any_string_in(arguments, &mut |s| is_credential_shaped(s))
        || any_member_in(arguments, &mut |key, item| {
            non_blank(item) && (is_credential_key(key) || is_credential_name(key))
        })
        || is_named_credential(arguments)
        || any_member_in(arguments, &mut |_, item| match item {
            Value::Object(map) => is_named_credential(map),
            Value::Array(items) => items
                .iter()
                .any(|i| i.as_object().is_some_and(is_named_credential)),
            _ => false,
        })
}

/// `{"name" | "key": NAME, "value": VALUE}` with a credential NAME and a non-blank VALUE.
fn is_named_credential(map: &Map<String, Value>) -> bool {
    let value_present = map
        .get("value")
        .and_then(Value::as_str)
        .is_some_and(|v| !v.trim_matches(is_ws).is_empty());
    value_present
        && ["name", "key"]
            .iter()
            .filter_map(|k| map.get(*k).and_then(Value::as_str))
            .any(is_credential_name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn detectors_compile() {
        assert!(DETECTORS.is_some());
        for shape in SHAPES {
            assert!(Regex::new(shape).is_ok(), "{shape}");
        }
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
    fn spec_21_formats_and_shapes() {
        for s in [
            "github_pat_11ABCDEFG0123456789abcdefghij",
            "xoxb-781236542736-2364535789652-GkwFDQoHqzXDVsC6GzqYUypD",
            "xoxe.xoxp-1-Mi0yLTM0MTQwNDE0MDE3Ni0zNjU5",
            "glpat-abcdefghijklmnopqrst",
            "https://hooks.slack.com/services/T024TTTTT/BBB72BBL/AZAAA9u0pA4ad666eMgbi555",
            "STRIPE_SECRET_KEY=sk_live_4eC39HqLyjWDarjtT1zdp7dc",
            "sk-ant-api03-abc123xyz-456def789ghij",
            "sk-proj-abcdefghijklmnopqrstuvwx",
            "AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
            "-----BEGIN PGP PRIVATE KEY BLOCK-----",
            "DATABASE_URL=postgres://admin:S3cr3t@db/prod",
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI",
            "clientSecret := \"s-s4t2ud-\"",
            "passwd: hunter2",
            "credentials=user:hunter2",
            "  \"genericToken\" => \"CLOJARS_34bf\"",
            "curl -H 'Authorization: Basic abc'",
            "Cookie: session=abc",
            "x\nSet-Cookie: a=b",
        ] {
            assert!(is_credential_shaped(s), "{s:?} should be credential-shaped");
        }
        for s in [
            "ghp_ tokens are GitHub PATs",
            "hooks.slack.com/services/",
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Eby8",
            "$genericToken .= \"CLOJARS_34bf\"",
            "var perplexityToken string = \"pplx-d7m9\"",
            "password：hunter2",
            "password -> hunter2",
            "https://api.example.com/?key=AIzaSyDaGmWKa4JsXZ",
            "https://cdn.example.com/lib@1.2.3/dist/x.js",
            "Use the Authorization header with a bearer token.",
            "token_count=5",
            "max_tokens: 100",
            "keyboard: us",
        ] {
            assert!(
                !is_credential_shaped(s),
                "{s:?} should not be credential-shaped"
            );
        }
    }

    #[test]
    fn credential_names_follow_heck() {
        for name in [
            "AWSSecretKey",
            "X-Auth-Token",
            "clientSecret",
            "STRIPE_SECRET_KEY",
            "db.password",
            "api-key",
        ] {
            assert!(is_credential_name(name), "{name}");
        }
        for name in [
            "token_count",
            "max_tokens",
            "keyboard",
            "password_hint",
            "to\u{212a}en",
            "DB_PASS",
            "AccountKey",
        ] {
            assert!(!is_credential_name(name), "{name}");
        }
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
        assert!(contains_credential(
            &json!({"headers": {"X-Auth-Token": "abc"}})
        ));
        assert!(contains_credential(
            &json!({"env": [{"name": "DB_PASSWORD", "value": "hunter2"}]})
        ));
        assert!(!contains_credential(
            &json!({"env": [{"name": "DB_HOST", "value": "db"}]})
        ));
        assert!(!contains_credential(
            &json!({"headers": {"Proxy-Authorization": "Basic x"}})
        ));
    }
}
