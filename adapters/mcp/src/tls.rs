//! The TLS crypto provider for Streamable HTTP upstreams: the workspace uses rustls with ring
//! (no C toolchain beyond the one SQLite needs), so the HTTP client is built without a provider
//! of its own and this process installs ring as the default once.

use std::sync::Once;

/// Installs ring as rustls' process-wide provider; later calls change nothing.
pub fn install_default_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Another part of the process may have installed one already: that one stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
