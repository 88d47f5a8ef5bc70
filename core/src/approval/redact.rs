//! The approver's view of arguments (SPEC §10.1): credentials replaced, long strings, wide
//! objects and arrays, and deep nesting truncated. A display copy only; never evaluated.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use crate::policy::hardline::is_credential_shaped;

const REDACTED: &str = "[REDACTED]";
const MAX_STRING_CHARS: usize = 512;
const MAX_MEMBERS: usize = 50;
const MAX_DEPTH: usize = 16;

static SECRET_KEY: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)api[_-]?key|secret|password|token|authorization|credential").ok()
});

fn is_secret_key(key: &str) -> bool {
    // Fail closed: if the constant pattern could not compile, every key is treated as secret.
    SECRET_KEY.as_ref().is_none_or(|re| re.is_match(key))
}

/// The redacted copy of an arguments value.
pub fn redact(value: &Value) -> Value {
    redact_at(value, 1)
}

fn redact_at(value: &Value, depth: usize) -> Value {
    if depth > MAX_DEPTH && matches!(value, Value::Array(_) | Value::Object(_)) {
        return Value::String("[TRUNCATED]".to_owned());
    }
    match value {
        Value::String(s) => redact_string(s),
        Value::Array(items) => {
            let mut out: Vec<Value> = items
                .iter()
                .take(MAX_MEMBERS)
                .map(|item| redact_at(item, depth + 1))
                .collect();
            if items.len() > MAX_MEMBERS {
                out.push(Value::String(format!(
                    "[TRUNCATED: {} item(s) omitted]",
                    items.len() - MAX_MEMBERS
                )));
            }
            Value::Array(out)
        }
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, item) in map.iter().take(MAX_MEMBERS) {
                let shown = if is_secret_key(key) {
                    Value::String(REDACTED.to_owned())
                } else {
                    redact_at(item, depth + 1)
                };
                out.insert(key.clone(), shown);
            }
            if map.len() > MAX_MEMBERS {
                out.insert(
                    "[TRUNCATED]".to_owned(),
                    Value::String(format!("{} field(s) omitted", map.len() - MAX_MEMBERS)),
                );
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

fn redact_string(s: &str) -> Value {
    if is_credential_shaped(s) {
        return Value::String(REDACTED.to_owned());
    }
    match s.char_indices().nth(MAX_STRING_CHARS) {
        Some((cut, _)) => Value::String(format!("{}…[TRUNCATED]", &s[..cut])),
        None => Value::String(s.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_redacted_by_key_and_by_shape() {
        let view =
            redact(&json!({"API-Key": "x", "note": "password=hunter2", "path": "a.txt", "n": 3}));
        assert_eq!(
            view,
            json!({"API-Key": "[REDACTED]", "note": "[REDACTED]", "path": "a.txt", "n": 3})
        );
    }

    #[test]
    fn long_and_wide_values_are_truncated() {
        let long = "é".repeat(600);
        let view = redact(&json!({"content": long}));
        let shown = view["content"].as_str().unwrap();
        assert!(shown.ends_with("…[TRUNCATED]"));
        assert_eq!(shown.chars().count(), 512 + "…[TRUNCATED]".chars().count());
        let items: Vec<u32> = (0..60).collect();
        let view = redact(&json!({"items": items}));
        assert_eq!(view["items"].as_array().unwrap().len(), 51);
        assert_eq!(view["items"][50], "[TRUNCATED: 10 item(s) omitted]");
        let wide: Map<String, Value> = (0..55).map(|i| (format!("k{i:02}"), json!(i))).collect();
        let view = redact(&Value::Object(wide));
        assert_eq!(view["[TRUNCATED]"], "5 field(s) omitted");
    }

    #[test]
    fn deep_nesting_is_cut() {
        let mut value = json!(1);
        for _ in 0..20 {
            value = json!([value]);
        }
        let view = redact(&value);
        let mut cursor = &view;
        let mut depth = 0;
        while let Value::Array(items) = cursor {
            cursor = &items[0];
            depth += 1;
        }
        assert_eq!(depth, 16);
        assert_eq!(cursor, &json!("[TRUNCATED]"));
    }
}
