//! Arbitrary bytes as a gateway file (SPEC §19.2): the loader never panics, errors name a key,
//! and a loaded file's tools build valid core specs (`airlock_mcp::fuzzing::gateway_config`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    airlock_mcp::fuzzing::gateway_config(data);
});
