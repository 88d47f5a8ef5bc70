//! Arbitrary bytes as a run script (SPEC §15): `RunScript::parse` must never panic, and a parsed
//! script's stored form (`to_json`) must parse again to an equal script.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    airlock_core::fuzzing::run_script(data);
});
