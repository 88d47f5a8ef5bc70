//! Replays the committed cargo-fuzz seed corpora of the policy gate's targets through the very
//! entry points the fuzz targets call, so CI covers every seed and every crash regression input
//! without installing cargo-fuzz. A panic in an entry point fails the test and names the file.

mod common;

use common::corpus::replay;

#[test]
fn policy_load_corpus_replays_clean() {
    replay("policy_load", airlock_policy::fuzzing::policy_load);
}

#[test]
fn policy_eval_corpus_replays_clean() {
    replay("policy_eval", airlock_policy::fuzzing::policy_eval);
}

#[test]
fn hardline_readings_corpus_replays_clean() {
    replay(
        "hardline_readings",
        airlock_policy::fuzzing::hardline_readings,
    );
}

#[test]
fn canonical_json_corpus_replays_clean() {
    replay("canonical_json", airlock_policy::fuzzing::canonical_json);
}
