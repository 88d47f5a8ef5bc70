//! Arbitrary bytes as either policy file: the first byte picks which one (even: profile, odd:
//! hardline), the rest replaces it; the other file is the shipped one. Loading must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    airlock_policy::fuzzing::policy_load(data);
});
