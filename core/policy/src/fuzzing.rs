//! Entry points shared by the policy cargo-fuzz targets and the corpus-replay test, so CI
//! exercises exactly what the fuzzer ran.

use crate::action::ProposedAction;
use crate::action_ref::ActionRef;
use crate::canonical::{sha256_hex, to_canonical_string};
use crate::{Ruleset, decide, evaluate, shipped};

/// `policy_load`: the first byte chooses which file the rest replaces (even: profile, odd:
/// hardline); the other file is the shipped one. Loading must return, never panic.
pub fn policy_load(data: &[u8]) {
    let Some((selector, bytes)) = data.split_first() else {
        return;
    };
    let result = if selector % 2 == 0 {
        Ruleset::load(bytes, shipped::HARDLINE)
    } else {
        Ruleset::load(shipped::DEFAULT_PROFILE, bytes)
    };
    if let Ok(ruleset) = result {
        assert!(
            ruleset.rule_count() > 15,
            "a loaded ruleset has at least one hardline rule"
        );
    }
}

/// `policy_eval`: arbitrary bytes as action JSON; a parsed action must evaluate to the same
/// decision twice. The CLI's path must be the owned one exactly: the borrowed parse (its direct
/// reader included) accepts and refuses the same texts with the same values and errors, and
/// the decision it writes is the owned decision's JSON byte for byte (SPEC §24).
pub fn policy_eval(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let owned = ProposedAction::from_json(text);
    let borrowed = ActionRef::from_json(text);
    if let Some(scanned) = crate::action_scan::scan(text)
        && let Ok(serde) = ActionRef::from_json_serde(text)
    {
        assert_eq!(
            scanned.into_owned(),
            serde.into_owned(),
            "the direct reader reads as serde"
        );
    }
    let action = match (owned, borrowed) {
        (Ok(owned), Ok(borrowed)) => {
            let Some(ruleset) = shipped_ruleset() else {
                return;
            };
            let mut written = Vec::new();
            if decide(&borrowed, ruleset).write_json(&mut written).is_err() {
                panic!("a Vec takes every write");
            }
            assert_eq!(
                serde_json::to_vec(&evaluate(&owned, ruleset)).ok(),
                Some(written),
                "the written decision is the serialized one"
            );
            assert_eq!(
                borrowed.into_owned(),
                owned,
                "the borrowed action is the owned one"
            );
            owned
        }
        (Err(owned), Err(borrowed)) => {
            assert_eq!(borrowed, owned, "the same error both ways");
            return;
        }
        _ => panic!("the owned and borrowed parsers disagree on acceptance"),
    };
    let Some(ruleset) = shipped_ruleset() else {
        return;
    };
    let first = evaluate(&action, ruleset);
    assert_eq!(
        first,
        evaluate(&action, ruleset),
        "evaluation must be deterministic"
    );
}

/// For the cargo-fuzz targets that reach the shell reading: a panic raised inside brush-parser
/// is not a crash. The reading catches it by design (`parser::caught`: such a text has no
/// reading), but libFuzzer's panic hook aborts the process at any panic, caught or not, before
/// unwinding starts. This hook lets a panic located in brush-parser's own source unwind to that
/// catch and hands every other panic to the hook it replaces (libFuzzer's: abort), so a panic
/// of airlock's code is still a crash. Installed once, at the target's first input.
pub fn caught_parser_panics_are_not_crashes() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_parser = info
                .location()
                .is_some_and(|at| at.file().contains("brush-parser"));
            if !in_parser {
                previous(info);
            }
        }));
    });
}

/// `hardline_readings`: arbitrary bytes (read as UTF-8, invalid sequences replaced) through the
/// v2 readings of SPEC §21.2–§21.3. Nothing may panic, the readings are deterministic, the
/// URL reading's pre-filter skips only candidates that give nothing, and the shell reading's
/// plain-word fast path reads as the parser.
pub fn hardline_readings(data: &[u8]) {
    use crate::hardline::{Prefilter, is_credential_shaped, shell, url};
    let text = String::from_utf8_lossy(data);
    let filtered = url::read_urls(&text, Prefilter::On);
    assert_eq!(
        filtered,
        url::read_urls(&text, Prefilter::Off),
        "§21.1: the URL pre-filter skips only what cannot match"
    );
    let reading = shell::read_shell(&text, Prefilter::On);
    assert_eq!(
        reading,
        shell::read_shell(&text, Prefilter::On),
        "the shell reading is deterministic"
    );
    assert_eq!(
        reading,
        shell::read_shell(&text, Prefilter::Off),
        "§21.1: the plain-word fast path reads as the parser"
    );
    let words: Vec<&str> = text.split_whitespace().collect();
    let _ = shell::read_argv(&words, Prefilter::On);
    let _ = is_credential_shaped(&text);
}

fn shipped_ruleset() -> Option<&'static Ruleset> {
    static SHIPPED: std::sync::OnceLock<Option<Ruleset>> = std::sync::OnceLock::new();
    SHIPPED.get_or_init(|| Ruleset::shipped().ok()).as_ref()
}

/// `canonical_json`: arbitrary bytes as JSON (SPEC §4.2). Encoding must never panic; the
/// canonical text parses back to the same value, encodes to itself again (one spelling per value,
/// whatever order the keys arrived in), has no whitespace outside strings, and hashes through the
/// one hashing path.
pub fn canonical_json(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let canonical = to_canonical_string(&value);
    let again: serde_json::Value = match serde_json::from_str(&canonical) {
        Ok(again) => again,
        Err(error) => panic!("canonical JSON must parse: {error}: {canonical}"),
    };
    assert_eq!(
        again, value,
        "the canonical text reads back as the same value"
    );
    assert_eq!(
        to_canonical_string(&again),
        canonical,
        "canonical JSON is a fixed point"
    );
    let mut in_string = false;
    let mut escaped = false;
    for c in canonical.chars() {
        match (in_string, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (_, false, '"') => in_string = !in_string,
            (false, _, c) => assert!(!c.is_whitespace(), "no whitespace: {canonical}"),
            _ => {}
        }
    }
    assert_eq!(
        crate::canonical::arguments_hash(&value),
        sha256_hex(canonical.as_bytes()),
        "the hash is of the canonical bytes"
    );
}
