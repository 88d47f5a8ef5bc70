//! The Host and Origin allow-list of airlock's HTTP servers (`airlock serve`, `airlock mcp serve
//! --listen`): a request must name this server in `Host`, and a browser's `Origin` must be one of
//! its own origins. A page on a name an attacker controls that now resolves to this server
//! (DNS rebinding) reaches nothing: its `Host` is the attacker's name (421), and its `Origin` is
//! not this server's (403). Both servers use this one rule, so it is stated once.

use std::collections::BTreeSet;
use std::net::SocketAddr;

/// One `host` + `port` a client may name in `Host` or `Origin`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Authority {
    host: String,
    port: u16,
}

impl std::fmt::Display for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Reads `host[:port]` (brackets around IPv6), lower-cased; `default_port` when absent.
pub fn parse_authority(text: &str, default_port: u16) -> Option<Authority> {
    let authority: http::uri::Authority = text.parse().ok()?;
    if text.contains('@') {
        return None;
    }
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    Some(Authority {
        host,
        port: authority.port_u16().unwrap_or(default_port),
    })
}

/// The Host and Origin authorities this listener answers to.
#[derive(Debug, Clone)]
pub struct AllowedHosts(BTreeSet<Authority>);

/// A `--listen-host` value that is not a host name or `host:port`.
#[derive(Debug, thiserror::Error)]
#[error("--listen-host '{0}' is not a host name or host:port")]
pub struct BadListenHost(pub String);

impl AllowedHosts {
    /// The bound address (its real port), and the operator's extra names (`host` takes the
    /// bound port, `host:port` its own).
    pub fn new(bound: SocketAddr, extra: &[String]) -> Result<AllowedHosts, BadListenHost> {
        let port = bound.port();
        let mut set = BTreeSet::new();
        let ip = bound.ip();
        if !ip.is_unspecified() {
            set.insert(Authority {
                host: ip.to_string(),
                port,
            });
        }
        if ip.is_loopback() || ip.is_unspecified() {
            for host in ["localhost", "127.0.0.1", "::1"] {
                set.insert(Authority {
                    host: host.to_owned(),
                    port,
                });
            }
        }
        for name in extra {
            let authority =
                parse_authority(name, port).ok_or_else(|| BadListenHost(name.clone()))?;
            set.insert(authority);
        }
        Ok(AllowedHosts(set))
    }

    pub fn allows(&self, authority: &Authority) -> bool {
        self.0.contains(authority)
    }

    /// The allowed authorities, for a refusal's message.
    pub fn listing(&self) -> String {
        self.0
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Whether `host` (a `Host` header, or the request target's authority) names this server.
/// `default_port`: 443 under TLS, else 80.
pub fn host_allowed(hosts: &AllowedHosts, host: Option<&str>, default_port: u16) -> bool {
    host.and_then(|h| parse_authority(h, default_port))
        .is_some_and(|a| hosts.allows(&a))
}

/// Whether an `Origin` header value (`scheme://host[:port]`) is one of this server's origins:
/// `http` or `https` and an allowed authority (the scheme's port when none is given).
pub fn origin_allowed(hosts: &AllowedHosts, origin: &str) -> bool {
    origin
        .split_once("://")
        .and_then(|(scheme, rest)| {
            let port = match scheme.to_ascii_lowercase().as_str() {
                "http" => 80,
                "https" => 443,
                _ => return None,
            };
            parse_authority(rest, port)
        })
        .is_some_and(|a| hosts.allows(&a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(listen: &str, extra: &[&str]) -> AllowedHosts {
        let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        AllowedHosts::new(listen.parse().expect("addr"), &extra).expect("hosts")
    }

    fn allows(hosts: &AllowedHosts, text: &str) -> bool {
        parse_authority(text, 80).is_some_and(|a| hosts.allows(&a))
    }

    #[test]
    fn a_loopback_listener_answers_to_its_loopback_names_on_its_port_only() {
        let h = hosts("127.0.0.1:8931", &[]);
        for ok in [
            "127.0.0.1:8931",
            "localhost:8931",
            "LOCALHOST:8931",
            "[::1]:8931",
        ] {
            assert!(allows(&h, ok), "{ok}");
        }
        for bad in [
            "evil.example:8931",
            "127.0.0.1:8932",
            "localhost",
            "127.0.0.1",
            "user@127.0.0.1:8931",
            "",
        ] {
            assert!(!allows(&h, bad), "{bad}");
        }
    }

    #[test]
    fn a_specific_address_answers_to_itself_and_the_named_hosts() {
        let h = hosts(
            "10.1.2.3:443",
            &["mcp.example.com", "proxy.example.com:8443"],
        );
        assert!(allows(&h, "10.1.2.3:443"));
        assert!(allows(&h, "mcp.example.com:443"));
        assert!(allows(&h, "proxy.example.com:8443"));
        assert!(!allows(&h, "localhost:443"));
        assert!(!allows(&h, "proxy.example.com:443"));
        assert!(
            AllowedHosts::new("10.1.2.3:443".parse().expect("addr"), &["a b".to_owned()]).is_err()
        );
    }

    #[test]
    fn origins_must_be_http_or_https_and_name_an_allowed_authority() {
        let h = hosts("127.0.0.1:8080", &[]);
        assert!(origin_allowed(&h, "http://127.0.0.1:8080"));
        assert!(origin_allowed(&h, "http://localhost:8080"));
        assert!(!origin_allowed(&h, "http://evil.example:8080"));
        assert!(!origin_allowed(&h, "null"));
        assert!(!origin_allowed(&h, "ftp://127.0.0.1:8080"));
        assert!(!origin_allowed(&h, "http://127.0.0.1"));
        assert!(host_allowed(&h, Some("localhost:8080"), 80));
        assert!(!host_allowed(&h, Some("evil.example:8080"), 80));
        assert!(!host_allowed(&h, None, 80));
    }
}
