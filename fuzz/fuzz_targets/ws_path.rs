//! Arbitrary bytes as a workspace path (SPEC §12.2): `WsPath::parse` must never panic, and an
//! accepted path's components, joined with `/`, must give the input back.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    airlock_core::fuzzing::ws_path(data);
});
