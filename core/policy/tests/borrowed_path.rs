//! The fast path of `airlock policy eval --jsonl` (issue 30 item 5, SPEC §24): the borrowed
//! action parse and the decision written from the verdict must be the owned path exactly. For
//! every action of both conformance files, every `policy_eval` fuzz seed (valid and invalid),
//! and hand-made edge cases: the same acceptance, the same error text, the same values, and
//! the same decision bytes.

mod common;

use airlock_policy::action::ProposedAction;
use airlock_policy::action_ref::ActionRef;
use airlock_policy::action_scan::{FIELD_KEYS, TARGET_KEYS, scan};
use airlock_policy::{Ruleset, decide, evaluate};
use serde_json::Value;

fn shipped() -> Ruleset {
    Ruleset::shipped().expect("the shipped policy loads")
}

/// Both paths on one text: `Ok` when both accepted it with equal values and decided it to the
/// same bytes, the shared error otherwise; a difference fails naming the text.
fn both_paths(ruleset: &Ruleset, text: &str) -> Result<(), String> {
    // The direct reader takes a text only as the serde parse reads it.
    if let Some(scanned) = scan(text) {
        let serde = ActionRef::from_json_serde(text).map(ActionRef::into_owned);
        let scanned = scanned.into_owned();
        match serde {
            // The serde parse may still refuse it in the checks both run after parsing.
            Ok(serde) => assert_eq!(scanned, serde, "the direct reader on {text}"),
            Err(error) => assert!(
                ProposedAction::from_json(text).is_err()
                    && ProposedAction::from_json(text).err() == Some(error)
                    && scanned.validate().is_err(),
                "the direct reader took {text}, which the parsers refuse"
            ),
        }
    }
    let owned = ProposedAction::from_json(text);
    let borrowed = ActionRef::from_json(text);
    match (owned, borrowed) {
        (Ok(owned), Ok(borrowed)) => {
            let mut written = Vec::new();
            decide(&borrowed, ruleset)
                .write_json(&mut written)
                .expect("a Vec takes every write");
            let serialized =
                serde_json::to_vec(&evaluate(&owned, ruleset)).expect("a decision serializes");
            assert_eq!(
                String::from_utf8_lossy(&written),
                String::from_utf8_lossy(&serialized),
                "decision bytes for {text}"
            );
            assert_eq!(
                decide(&borrowed, ruleset).to_decision(),
                evaluate(&owned, ruleset),
                "{text}"
            );
            assert_eq!(borrowed.into_owned(), owned, "values for {text}");
            Ok(())
        }
        (Err(owned), Err(borrowed)) => {
            assert_eq!(borrowed, owned, "error for {text}");
            Err(owned.to_string())
        }
        (owned, borrowed) => panic!(
            "the paths disagree on {text}: owned {:?}, borrowed {:?}",
            owned.map(|_| ()),
            borrowed.map(|_| ())
        ),
    }
}

fn conformance_actions(file: &str) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/conformance")
        .join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("conformance data missing at {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let case: Value = serde_json::from_str(line).expect("case line is JSON");
            case["action"].to_string()
        })
        .collect()
}

#[test]
fn every_conformance_action_reads_and_decides_the_same_both_ways() {
    let ruleset = shipped();
    let mut count = 0;
    for file in ["policy-cases.jsonl", "policy-v2-cases.jsonl"] {
        for action in conformance_actions(file) {
            both_paths(&ruleset, &action).unwrap_or_else(|e| panic!("{file}: {e}: {action}"));
            count += 1;
        }
    }
    assert_eq!(count, 789 + 1163);
}

/// The direct reader is the path: it takes (nearly) every conformance action, compact or
/// pretty-printed, and hands back the value the serde parse gives.
#[test]
fn the_direct_reader_takes_the_conformance_actions() {
    let mut taken = 0;
    let mut count = 0;
    for file in ["policy-cases.jsonl", "policy-v2-cases.jsonl"] {
        for action in conformance_actions(file) {
            count += 1;
            let pretty = serde_json::to_string_pretty(
                &serde_json::from_str::<Value>(&action).expect("an action is JSON"),
            )
            .expect("a value prints");
            for text in [&action, &pretty] {
                if let Some(scanned) = scan(text) {
                    taken += 1;
                    let serde = ActionRef::from_json_serde(text).expect("a conformance action");
                    assert_eq!(scanned.into_owned(), serde.into_owned(), "{text}");
                }
            }
        }
    }
    assert!(
        taken * 100 >= count * 2 * 95,
        "{taken} of {} texts taken",
        count * 2
    );
}

#[test]
fn every_policy_eval_seed_is_accepted_or_refused_the_same_both_ways() {
    let ruleset = shipped();
    let (mut accepted, mut refused) = (0, 0);
    for path in common::corpus::corpus("policy_eval") {
        let bytes = std::fs::read(&path).expect("readable corpus file");
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        match both_paths(&ruleset, text) {
            Ok(()) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(
        accepted > 0 && refused > 0,
        "{accepted} accepted, {refused} refused"
    );
}

/// Escaped strings (owned by the borrowed action), a label given twice (the last one counts,
/// as in the owned map), an unknown target kind, nesting past serde's limit (handed to the
/// owned parser, which accepts it), and errors of every kind.
#[test]
fn edge_cases_read_the_same_both_ways() {
    let ruleset = shipped();
    let base: Value = serde_json::from_str(&conformance_actions("policy-cases.jsonl")[0])
        .expect("an action is JSON");
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut action = base.clone();
        edit(&mut action);
        action.to_string()
    };
    let mut deep = Value::String("x".into());
    for _ in 0..126 {
        deep = Value::Array(vec![deep]);
    }
    let cases = [
        with(&|a| a["name"] = Value::String("demo.\"echo\"\n".into())),
        with(&|a| a["summary"] = Value::String("\\u00e9 é \u{1}".into())),
        with(&|a| a["tenant_id"] = Value::String("a\"b".into())),
        with(&|a| a["target"]["kind"] = Value::String("quantum".into())),
        with(&|a| a["target"]["server_id"] = Value::String("srv\\1".into())),
        with(&|a| a["required_scopes"] = serde_json::json!(["a", "b\"c"])),
        with(&|a| a["arguments"] = serde_json::json!({ "deep": deep.clone() })),
        with(&|a| a["tenant_id"] = Value::String(String::new())),
        with(&|a| a["normalized_arguments_hash"] = Value::String("ABC".into())),
        with(&|a| a["side_effect"] = Value::String("teleport".into())),
        with(&|a| a["step_number"] = Value::from(-1)),
        with(&|a| a["action_id"] = Value::String("E53089B4-4D78-4691-8CB8-11B066B2F2FD".into())),
        with(&|a| a["extra"] = Value::Null),
        with(&|a| {
            if let Some(target) = a["target"].as_object_mut() {
                target.remove("device_id");
            }
        }),
        with(&|a| a["version"] = Value::from(5)),
        with(&|a| a["argument_trust"] = Value::from(5)),
        "{}".to_owned(),
        "[]".to_owned(),
        "{\"kind\":".to_owned(),
    ];
    let (mut accepted, mut refused) = (0, 0);
    for case in &cases {
        match both_paths(&ruleset, case) {
            Ok(()) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    assert_eq!((accepted, refused), (7, 12));

    // A label given twice: JSON text, since a map cannot hold it.
    let twice = with(&|a| a["argument_trust"] = serde_json::json!({ "text": "user" })).replace(
        "\"argument_trust\":{\"text\":\"user\"}",
        "\"argument_trust\":{\"text\":\"external_untrusted\",\"text\":\"user\"}",
    );
    assert!(twice.contains("\"text\":\"external_untrusted\",\"text\":\"user\""));
    both_paths(&ruleset, &twice).expect("a repeated label reads the same both ways");
    let reversed = twice.replace(
        "\"text\":\"external_untrusted\",\"text\":\"user\"",
        "\"text\":\"user\",\"text\":\"external_untrusted\"",
    );
    both_paths(&ruleset, &reversed).expect("a repeated label reads the same both ways");
}

/// Each key's first `"key":` in `text` comes after the one before it.
fn assert_keys_in_order(text: &str, keys: &[&str]) {
    let at = |key: &str| {
        text.find(&format!("\"{key}\":"))
            .unwrap_or_else(|| panic!("{key} is not in {text}"))
    };
    for pair in keys.windows(2) {
        assert!(at(pair[0]) < at(pair[1]), "{pair:?} in {text}");
    }
}

/// Texts written to trip a hand-written reader: numbers JSON or `u64` does not take, keys and
/// values with escapes or raw control characters, `null` and booleans cut short, trailing
/// commas, repeated target keys, text after the object. Each must read as the parsers read it.
#[test]
fn texts_that_trip_a_reader_read_as_the_parsers_read_them() {
    let ruleset = shipped();
    let base = conformance_actions("policy-cases.jsonl")[0].clone();
    let edits: [(&str, &str); 22] = [
        ("\"step_number\":9", "\"step_number\":09"),
        ("\"step_number\":9", "\"step_number\":9.0"),
        ("\"step_number\":9", "\"step_number\":9e0"),
        ("\"step_number\":9", "\"step_number\":-9"),
        ("\"step_number\":9", "\"step_number\":18446744073709551616"),
        ("\"step_number\":9", "\"step_number\" : 9 "),
        ("\"version\":\"1.0.0\"", "\"version\":nul"),
        ("\"version\":\"1.0.0\"", "\"version\":nullx"),
        ("\"version\":\"1.0.0\"", "\"version\":null"),
        ("\"isolated\":false", "\"isolated\":fals"),
        ("\"isolated\":false", "\"isolated\":false,\"isolated\":true"),
        ("\"kind\":\"tool_call\"", "\"k\\u0069nd\":\"tool_call\""),
        ("\"kind\":\"tool_call\"", "\"kind\":\"tool\\u005fcall\""),
        ("Run demo.echo", "Run\u{1}demo.echo"),
        ("Run demo.echo", "Run\\tdemo.echo"),
        ("\"required_scopes\":[]", "\"required_scopes\":[\"a\",]"),
        (
            "\"required_scopes\":[]",
            "\"required_scopes\":[ \"a\" , \"b\" ]",
        ),
        (
            "\"argument_trust\":{}",
            "\"argument_trust\":{\"a\":\"user\",}",
        ),
        (
            "\"argument_trust\":{}",
            "\"argument_trust\":{\"a\":\"user\",\"a\":\"memory\"}",
        ),
        (
            "\"arguments\":{\"text\":\"hello\"}",
            "\"arguments\":{\"text\":\"hello\"} ",
        ),
        (
            "\"evaluated_at\":\"2026-01-15T12:00:08Z\"",
            "\"evaluated_at\":\"2026-13-15T12:00:08Z\"",
        ),
        (
            "\"server_id\":null",
            "\"server_id\":\"s\",\"server_id\":null",
        ),
    ];
    let mut texts: Vec<String> = edits
        .iter()
        .map(|(from, to)| {
            assert!(base.contains(from), "{from} is in the base action");
            base.replacen(from, to, 1)
        })
        .collect();
    // The base's keys are sorted; the reader tries the declaration order's next key first, so
    // also: the base in that order, and keys beside it (as long as the expected one, longer,
    // shorter, and two swapped).
    let ordered = serde_json::to_string(&ProposedAction::from_json(&base).expect("base reads"))
        .expect("an action serializes");
    // The reader's expected order is the order the action serializes in (its declaration).
    assert_keys_in_order(&ordered, &FIELD_KEYS);
    let target = &ordered[ordered.find("\"target\":").expect("a target is written")..];
    assert_keys_in_order(target, &TARGET_KEYS);
    texts.push(ordered.clone());
    for (from, to) in [
        ("\"kind\":", "\"kinx\":"),
        ("\"kind\":", "\"kind_\":"),
        ("\"action_id\":", "\"action_i\":"),
        (
            "\"step_number\":9,\"name\":\"demo.echo\",",
            "\"name\":\"demo.echo\",\"step_number\":9,",
        ),
    ] {
        assert!(ordered.contains(from), "{from} is in the ordered action");
        texts.push(ordered.replacen(from, to, 1));
    }
    texts.push(format!("{base} x"));
    texts.push(format!(" \n{base}\r\n "));
    texts.push(base.replacen('{', "{ ", 1));
    let (mut accepted, mut refused) = (0, 0);
    for text in &texts {
        match both_paths(&ruleset, text) {
            Ok(()) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    assert_eq!((accepted, refused), (12, 18));
}

/// An action and its target are JSON objects (SPEC §4.1): the same fields as an array, in
/// declaration order, are refused by every path (a derived `Deserialize` would read them).
#[test]
fn an_action_or_a_target_written_as_an_array_is_refused_by_every_path() {
    let ruleset = shipped();
    let base: Value = serde_json::from_str(&conformance_actions("policy-cases.jsonl")[0])
        .expect("an action is JSON");
    let target_array = Value::Array(
        TARGET_KEYS
            .iter()
            .map(|k| base["target"][k].clone())
            .collect(),
    );
    let fields = FIELD_KEYS;
    let whole = Value::Array(fields.iter().map(|k| base[k].clone()).collect()).to_string();
    let mut with_target_array = base.clone();
    with_target_array["target"] = target_array;
    for text in [whole, with_target_array.to_string()] {
        let error = both_paths(&ruleset, &text).expect_err("an array is not an action");
        assert!(error.contains("expected a JSON object"), "{error}: {text}");
    }
}
