//! Canonical JSON, the argument hash and the idempotency key (SPEC §4.2).
//!
//! The encoder sorts object keys itself (by UTF-8 bytes) rather than trusting serde_json's map
//! order, so the hash cannot change if a dependency enables `preserve_order`.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The canonical bytes of a JSON value.
pub fn to_canonical_string(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        // serde_json prints integers as plain decimal and floats in its shortest round-trip form.
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

/// Escapes only `"`, `\` and U+0000–U+001F; everything else is raw UTF-8.
fn write_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let byte = c as u8;
                out.push_str("\\u00");
                out.push(HEX[usize::from(byte >> 4)] as char);
                out.push(HEX[usize::from(byte & 0xf)] as char);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Lowercase hex SHA-256 of some bytes: the one hashing path for arguments, keys and policy files.
pub fn sha256_hex(bytes: &[u8]) -> String {
    crate::hex::encode(&Sha256::digest(bytes))
}

/// `normalized_arguments_hash`: SHA-256 of the canonical bytes of the normalized arguments.
pub fn arguments_hash(arguments: &Value) -> String {
    sha256_hex(to_canonical_string(arguments).as_bytes())
}

/// Whether `s` is a lowercase hex SHA-256 digest.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A planner's call id: `^[A-Za-z0-9._:-]{1,128}$` (SPEC §4.2).
pub fn is_valid_call_id(call_id: &str) -> bool {
    (1..=128).contains(&call_id.len())
        && call_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// What identifies one effect of one call across attempts (SPEC §4.2 item 4).
#[derive(Debug, Clone, Copy)]
pub struct IdempotencyKeyInput<'a> {
    pub run_id: uuid::Uuid,
    pub step_number: u64,
    pub call_id: &'a str,
    pub tool_name: &'a str,
    pub tool_version: &'a str,
    pub effective_arguments_hash: &'a str,
}

/// The idempotency key: attempts are excluded so recovery reuses it; the step is included so a
/// later step gets a new one.
pub fn idempotency_key(input: &IdempotencyKeyInput<'_>) -> String {
    let mut bytes = Vec::with_capacity(256);
    bytes.extend_from_slice(b"airlock.tool.v1");
    let run_id = input.run_id.hyphenated().to_string();
    let step = input.step_number.to_string();
    for part in [
        run_id.as_str(),
        step.as_str(),
        input.call_id,
        input.tool_name,
        input.tool_version,
        input.effective_arguments_hash,
    ] {
        bytes.push(0);
        bytes.extend_from_slice(part.as_bytes());
    }
    sha256_hex(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn spec_example_hash() {
        assert_eq!(
            arguments_hash(&json!({"text": "hello"})),
            "cbbbdcd27692344de5dbab3abcaba413fb0f45307267de7081401576df1cb176"
        );
    }

    #[test]
    fn keys_sort_by_utf8_bytes_and_whitespace_is_dropped() {
        let value: Value =
            serde_json::from_str(r#"{ "b": 1, "a": [true, null, 1.5], "é": "x", "Z": {} }"#)
                .unwrap();
        assert_eq!(
            to_canonical_string(&value),
            r#"{"Z":{},"a":[true,null,1.5],"b":1,"é":"x"}"#
        );
    }

    #[test]
    fn escapes_only_quote_backslash_and_controls() {
        let value = json!("a\"b\\c\u{1}\u{8}\u{c}\n\r\t\u{1f}/é\u{7f}\u{2028}");
        assert_eq!(
            to_canonical_string(&value),
            "\"a\\\"b\\\\c\\u0001\\b\\f\\n\\r\\t\\u001f/é\u{7f}\u{2028}\""
        );
    }

    #[test]
    fn integers_are_plain_decimal() {
        assert_eq!(
            to_canonical_string(&json!([-0, 10, u64::MAX, -9007199254740993i64])),
            "[0,10,18446744073709551615,-9007199254740993]"
        );
    }

    #[test]
    fn idempotency_key_depends_on_step_and_arguments() {
        let base = IdempotencyKeyInput {
            run_id: uuid::Uuid::nil(),
            step_number: 1,
            call_id: "c1",
            tool_name: "demo.external_write",
            tool_version: "1.0.0",
            effective_arguments_hash: "00",
        };
        let key = idempotency_key(&base);
        assert!(is_sha256_hex(&key));
        assert_eq!(key, idempotency_key(&base));
        assert_ne!(
            key,
            idempotency_key(&IdempotencyKeyInput {
                step_number: 2,
                ..base
            })
        );
        assert_ne!(
            key,
            idempotency_key(&IdempotencyKeyInput {
                effective_arguments_hash: "01",
                ..base
            })
        );
        let mut manual = b"airlock.tool.v1\x0000000000-0000-0000-0000-000000000000\x001\x00c1\x00demo.external_write\x001.0.0\x0000".to_vec();
        assert_eq!(key, sha256_hex(&manual));
        manual.push(b'x');
        assert_ne!(key, sha256_hex(&manual));
    }

    #[test]
    fn call_id_grammar() {
        assert!(is_valid_call_id("c1"));
        assert!(is_valid_call_id("a.B_c:d-9"));
        assert!(is_valid_call_id(&"x".repeat(128)));
        assert!(!is_valid_call_id(""));
        assert!(!is_valid_call_id(&"x".repeat(129)));
        assert!(!is_valid_call_id("c 1"));
        assert!(!is_valid_call_id("c/1"));
    }
}
