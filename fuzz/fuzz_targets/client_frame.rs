//! Arbitrary bytes as one client JSON-RPC frame: decoding never panics, and a `tools/call`'s
//! name and arguments go through the gateway's handling (`airlock_mcp::fuzzing::client_frame`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    airlock_mcp::fuzzing::client_frame(data);
});
