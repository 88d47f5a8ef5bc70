//! Arbitrary bytes as a bearer JWT and as a JWK Set (issue 31): the check never panics, is
//! deterministic, and verifies nothing against keys nobody holds
//! (`airlock_oauth::fuzzing::bearer_token`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    airlock_oauth::fuzzing::bearer_token(data);
});
