//! Arbitrary bytes through the hardline v2 URL and shell readings (SPEC §21.2–§21.3): nothing may
//! panic, the readings are deterministic, and the URL pre-filter skips only what cannot match.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    airlock_policy::fuzzing::caught_parser_panics_are_not_crashes();
    airlock_policy::fuzzing::hardline_readings(data);
});
