//! Arbitrary bytes as action JSON, evaluated against the shipped ruleset: parsing and evaluation
//! must never panic, and evaluation must be deterministic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    airlock_policy::fuzzing::caught_parser_panics_are_not_crashes();
    airlock_policy::fuzzing::policy_eval(data);
});
