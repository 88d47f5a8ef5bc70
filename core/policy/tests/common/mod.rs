//! Support shared by this crate's integration tests.

// Each test binary compiles this module and uses part of it.
#[allow(dead_code, reason = "each test binary uses part of the helpers")]
pub mod corpus;
