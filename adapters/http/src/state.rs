//! What every handler holds (the control service, the server's settings, console sessions, the
//! closing signal): below the routes, the stream and the console, which all take it.

use std::sync::Arc;
use std::time::Duration;

use airlock_host::authority::AllowedHosts;
use airlock_oauth::ResourceServer;

use crate::console::session::Sessions;
use crate::service::SharedControl;

/// Knobs of one server.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How often an event stream that is caught up asks the store for more.
    pub stream_poll: Duration,
    /// How often an open event stream re-checks its token, so revoking a token also ends the
    /// streams it opened.
    pub stream_reauthenticate: Duration,
    /// Whether the console is served over TLS: its cookie is then `Secure` and the origin
    /// it expects is `https://`.
    pub tls: bool,
    /// The names this server answers to: a request with another `Host` is 421 (DNS
    /// rebinding), and a console form's `Origin` must be one of them. `airlock serve` always
    /// sets it (the listen address and `--listen-host`); `None` only for a router driven in
    /// process, where a form's `Origin` is compared with its own `Host`.
    pub hosts: Option<AllowedHosts>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            stream_poll: Duration::from_millis(500),
            stream_reauthenticate: Duration::from_secs(5),
            tls: false,
            hosts: None,
        }
    }
}

/// What every handler holds.
#[derive(Clone)]
pub struct AppState {
    pub control: SharedControl,
    pub settings: Arc<Settings>,
    pub sessions: Arc<Sessions>,
    /// Set when the server shuts down: open event streams end, so a graceful shutdown does
    /// not wait for them forever.
    pub closing: Arc<tokio::sync::watch::Sender<bool>>,
    /// The `[auth]` issuer whose bearer tokens `/v1` also takes (issue 31); `None`: only
    /// airlock's own tokens.
    pub issuer: Option<Arc<ResourceServer>>,
    /// The process's policy reload (`POST /v1/admin/reload`); `None`: the route is 404.
    pub reload: Option<Arc<dyn crate::policy_reload::PolicyReload>>,
}

impl AppState {
    pub fn new(control: SharedControl, settings: Settings) -> AppState {
        AppState {
            control,
            settings: Arc::new(settings),
            sessions: Arc::new(Sessions::default()),
            closing: Arc::new(tokio::sync::watch::Sender::new(false)),
            issuer: None,
            reload: None,
        }
    }

    /// The same state, reloading the policy on `POST /v1/admin/reload`.
    pub fn with_reload(mut self, reload: Arc<dyn crate::policy_reload::PolicyReload>) -> AppState {
        self.reload = Some(reload);
        self
    }

    /// The same state, also taking `issuer`'s tokens.
    pub fn with_issuer(mut self, issuer: Arc<ResourceServer>) -> AppState {
        self.issuer = Some(issuer);
        self
    }

    /// Ends every open event stream (at its next poll) and refuses new ones.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }
}
