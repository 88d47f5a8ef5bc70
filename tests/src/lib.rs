//! airlock-e2e: end-to-end tests that drive the real `airlock` binary in separate processes.
//! This library holds only the helpers the tests in `tests/` share.
