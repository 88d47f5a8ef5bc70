//! The collected strings of SPEC §6.3: every string value, object key and array element,
//! recursively; non-strings are skipped. Also the shared whitespace class `WS` and the one
//! percent-decoder every reading uses.

use serde_json::{Map, Value};

/// `WS` = Unicode White_Space plus U+001C–U+001F.
pub fn is_ws(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Calls `test` on every collected string of `value` until it returns true.
pub fn any_string<'a>(value: &'a Value, test: &mut impl FnMut(&'a str) -> bool) -> bool {
    match value {
        Value::String(s) => test(s),
        Value::Array(items) => items.iter().any(|item| any_string(item, test)),
        Value::Object(map) => map
            .iter()
            .any(|(key, item)| test(key) || any_string(item, test)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// Calls `test` on every object member `(key, value)` of `value`, recursively, until it returns
/// true.
pub fn any_member(value: &Value, test: &mut impl FnMut(&str, &Value) -> bool) -> bool {
    match value {
        Value::Array(items) => items.iter().any(|item| any_member(item, test)),
        Value::Object(map) => map
            .iter()
            .any(|(key, item)| test(key, item) || any_member(item, test)),
        Value::Null | Value::Bool(_) | Value::String(_) | Value::Number(_) => false,
    }
}

/// Calls `test` on every array's string elements joined by single spaces (argv form), until it
/// returns true. Non-string elements are left out of the join.
pub fn any_joined_array(value: &Value, test: &mut impl FnMut(&str) -> bool) -> bool {
    match value {
        Value::Array(items) => {
            let joined = items
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" ");
            test(&joined) || items.iter().any(|item| any_joined_array(item, test))
        }
        Value::Object(map) => map.values().any(|item| any_joined_array(item, test)),
        Value::Null | Value::Bool(_) | Value::String(_) | Value::Number(_) => false,
    }
}

/// [`any_string`] over an object's members (the arguments map).
pub fn any_string_in<'a>(
    map: &'a Map<String, Value>,
    test: &mut impl FnMut(&'a str) -> bool,
) -> bool {
    map.iter()
        .any(|(key, item)| test(key) || any_string(item, test))
}

/// [`any_member`] over an object's members, its own included.
pub fn any_member_in(
    map: &Map<String, Value>,
    test: &mut impl FnMut(&str, &Value) -> bool,
) -> bool {
    map.iter()
        .any(|(key, item)| test(key, item) || any_member(item, test))
}

/// [`any_joined_array`] over an object's values.
pub fn any_joined_array_in(map: &Map<String, Value>, test: &mut impl FnMut(&str) -> bool) -> bool {
    map.values().any(|item| any_joined_array(item, test))
}

/// Percent-decoding of one level (the `file:` URL path of §6.3, the URL readings of §21.2); malformed escapes stay as they are, invalid UTF-8 is replaced.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    if !bytes.contains(&b'%') {
        return s.to_owned();
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).and_then(|b| hex(*b)),
                bytes.get(i + 2).and_then(|b| hex(*b)),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn collects_values_keys_and_elements_recursively() {
        let value = json!({"k1": "v1", "n": 5, "arr": ["e1", 2, {"deep": ["e2"]}]});
        let mut seen = Vec::new();
        let matched = any_string(&value, &mut |s| {
            seen.push(s.to_owned());
            false
        });
        assert!(!matched);
        seen.sort();
        assert_eq!(seen, ["arr", "deep", "e1", "e2", "k1", "n", "v1"]);
    }

    #[test]
    fn joins_each_array_separately() {
        let value = json!({"argv": ["rm", "-rf", "/"], "other": [["a", 1, "b"]]});
        let mut joined = Vec::new();
        any_joined_array(&value, &mut |s| {
            joined.push(s.to_owned());
            false
        });
        joined.sort();
        assert_eq!(joined, ["", "a b", "rm -rf /"]);
    }

    #[test]
    fn percent_decoding_keeps_malformed_escapes() {
        assert_eq!(percent_decode("%2Fa%zz%4"), "/a%zz%4");
        assert_eq!(percent_decode("no escapes"), "no escapes");
        assert_eq!(percent_decode("%ff%41"), "\u{fffd}A");
    }

    #[test]
    fn whitespace_class_includes_information_separators() {
        assert!(is_ws(' ') && is_ws('\u{1c}') && is_ws('\u{1f}') && is_ws('\u{3000}'));
        assert!(!is_ws('a') && !is_ws('\u{1b}'));
    }
}
