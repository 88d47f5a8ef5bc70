//! Arbitrary bytes as JSON: canonical encoding (SPEC §4.2) must never panic, read back as the
//! same value, be its own fixed point and contain no whitespace outside strings.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    airlock_policy::fuzzing::canonical_json(data);
});
