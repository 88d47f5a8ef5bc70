//! The `[auth]` section of a server's config file (`airlock serve --config`, and the gateway
//! file of `airlock mcp serve --listen`): which issuer's tokens let callers in, what they must be
//! meant for, where the issuer's keys are, and how their claims become a caller.
//!
//! ```toml
//! [auth]
//! issuer = "https://idp.example.com/realms/acme"
//! resource = "https://airlock.example.com/mcp"   # this server, as clients name it (RFC 8707)
//! jwks_url = "https://idp.example.com/realms/acme/protocol/openid-connect/certs"
//! tenant = "acme"                                # or: tenant_claim = "org_id"
//! ```
//!
//! Every URL is `https`, except on a loopback host (a development issuer). Unknown keys are
//! refused, as everywhere in airlock's files, so a misspelt `audience` cannot silently leave the
//! audience unchecked.

use std::collections::BTreeSet;
use std::path::PathBuf;

use airlock_core::principal::check_identity;
use serde::Deserialize;
use url::Url;

use crate::algorithm::Algorithm;
use crate::token::{ClaimMapping, Rules, TenantRule};

/// The leeway for `exp` and `nbf` unless configured: clocks of an issuer and a server drift.
pub const DEFAULT_LEEWAY_SECONDS: i64 = 60;
/// The largest leeway accepted: more would keep an expired token useful for too long.
pub const MAX_LEEWAY_SECONDS: i64 = 300;

/// The section as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// The issuer identifier; a token's `iss` must equal it exactly.
    pub issuer: String,
    /// This server's resource identifier: what clients ask the issuer a token for (RFC 8707
    /// `resource`), and where its protected-resource metadata says it is (RFC 9728).
    pub resource: String,
    /// What a token's `aud` must hold; `resource` unless set (an issuer that puts a client id
    /// or an API name in `aud`).
    pub audience: Option<String>,
    /// Where the issuer publishes its JWK Set; or `jwks_file`.
    pub jwks_url: Option<String>,
    /// A JWK Set file (absolute path), for an issuer whose keys are distributed as files.
    pub jwks_file: Option<PathBuf>,
    /// Every caller of this issuer acts for this tenant; or `tenant_claim`.
    pub tenant: Option<String>,
    /// The claim naming the caller's tenant.
    pub tenant_claim: Option<String>,
    /// The claim naming the principal; `sub` unless set.
    pub principal_claim: Option<String>,
    /// The claim holding the scopes; `scope` unless set (`scp` for some issuers).
    pub scopes_claim: Option<String>,
    /// Seconds of clock difference allowed for `exp` and `nbf`; 60 unless set, at most 300.
    pub leeway_seconds: Option<i64>,
    /// The signature algorithms accepted; every asymmetric one airlock knows unless set.
    pub algorithms: Option<Vec<String>>,
    /// Scopes the metadata document advertises (RFC 9728 `scopes_supported`).
    pub scopes_supported: Option<Vec<String>>,
}

/// Where the issuer's keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyOrigin {
    Url(Url),
    File(PathBuf),
}

/// The section, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    pub rules: Rules,
    pub resource: Url,
    pub keys: KeyOrigin,
    pub scopes_supported: Vec<String>,
}

/// What is wrong with an `[auth]` section; each names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthConfigError {
    #[error("auth.{key}: {why}")]
    Key { key: &'static str, why: String },
    #[error("auth: set exactly one of jwks_url and jwks_file")]
    KeySource,
    #[error("auth: set tenant or tenant_claim, not both")]
    BothTenants,
    #[error("auth: set tenant (every caller's tenant) or tenant_claim (the claim naming it)")]
    NoTenant,
}

fn bad(key: &'static str, why: impl Into<String>) -> AuthConfigError {
    AuthConfigError::Key {
        key,
        why: why.into(),
    }
}

impl AuthSection {
    /// Checks the section. `default_tenant` is the tenant when the section names none (the
    /// gateway's own tenant); `None` makes one of `tenant`/`tenant_claim` required.
    pub fn check(self, default_tenant: Option<&str>) -> Result<AuthConfig, AuthConfigError> {
        let issuer = self.issuer.trim().to_owned();
        if issuer.is_empty() {
            return Err(bad("issuer", "must not be empty"));
        }
        secure_url("issuer", &issuer)?;
        let resource = secure_url("resource", &self.resource)?;
        if resource.fragment().is_some() {
            return Err(bad("resource", "must not have a fragment (RFC 8707)"));
        }
        if resource
            .path_segments()
            .into_iter()
            .flatten()
            .any(|segment| segment.starts_with(':') || segment.starts_with('*'))
        {
            return Err(bad(
                "resource",
                "a path segment may not begin with ':' or '*' (the metadata's path form is routed)",
            ));
        }
        // The resource as the metadata document spells it (normalized: `https://a.example`
        // is `https://a.example/`), which is what clients ask the issuer for.
        let audience = self
            .audience
            .unwrap_or_else(|| resource.as_str().to_owned());
        if audience.is_empty() {
            return Err(bad("audience", "must not be empty"));
        }
        let keys = match (self.jwks_url, self.jwks_file) {
            (Some(url), None) => KeyOrigin::Url(secure_url("jwks_url", &url)?),
            (None, Some(path)) if path.is_absolute() => KeyOrigin::File(path),
            (None, Some(_)) => return Err(bad("jwks_file", "must be an absolute path")),
            _ => return Err(AuthConfigError::KeySource),
        };
        let tenant = match (self.tenant, self.tenant_claim, default_tenant) {
            (Some(_), Some(_), _) => return Err(AuthConfigError::BothTenants),
            (Some(tenant), None, _) => {
                check_identity(&tenant).map_err(|e| bad("tenant", e.to_string()))?;
                TenantRule::Fixed(tenant)
            }
            (None, Some(claim), _) => TenantRule::Claim(claim_name("tenant_claim", claim)?),
            (None, None, Some(tenant)) => TenantRule::Fixed(tenant.to_owned()),
            (None, None, None) => return Err(AuthConfigError::NoTenant),
        };
        let leeway_seconds = self.leeway_seconds.unwrap_or(DEFAULT_LEEWAY_SECONDS);
        if !(0..=MAX_LEEWAY_SECONDS).contains(&leeway_seconds) {
            return Err(bad(
                "leeway_seconds",
                format!("must be 0 to {MAX_LEEWAY_SECONDS}"),
            ));
        }
        let algorithms = match self.algorithms {
            None => Algorithm::ALL.into_iter().collect(),
            Some(names) => algorithms(&names)?,
        };
        Ok(AuthConfig {
            rules: Rules {
                issuer,
                audience,
                algorithms,
                leeway_seconds,
                claims: ClaimMapping {
                    principal: claim_name(
                        "principal_claim",
                        self.principal_claim.unwrap_or_else(|| "sub".to_owned()),
                    )?,
                    scopes: claim_name(
                        "scopes_claim",
                        self.scopes_claim.unwrap_or_else(|| "scope".to_owned()),
                    )?,
                    tenant,
                },
            },
            resource,
            keys,
            scopes_supported: self.scopes_supported.unwrap_or_default(),
        })
    }
}

fn claim_name(key: &'static str, name: String) -> Result<String, AuthConfigError> {
    if name.is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
        return Err(bad(
            key,
            "must be a claim name of 1 to 128 printable characters",
        ));
    }
    Ok(name)
}

fn algorithms(names: &[String]) -> Result<BTreeSet<Algorithm>, AuthConfigError> {
    if names.is_empty() {
        return Err(bad("algorithms", "must name at least one algorithm"));
    }
    names
        .iter()
        .map(|name| {
            Algorithm::named(name).ok_or_else(|| {
                let why = if name.eq_ignore_ascii_case("none") || name.starts_with("HS") {
                    format!(
                        "{name:?} is never accepted: an unsigned or shared-secret token could be \
                         made by anyone who knows the issuer's public keys"
                    )
                } else {
                    let known: Vec<_> = Algorithm::ALL.iter().map(|a| a.name()).collect();
                    format!("{name:?} is not one of {}", known.join(", "))
                };
                bad("algorithms", why)
            })
        })
        .collect()
}

/// An absolute `https` URL, or `http` on a loopback host.
fn secure_url(key: &'static str, text: &str) -> Result<Url, AuthConfigError> {
    let url = Url::parse(text).map_err(|e| bad(key, format!("is not a URL ({e})")))?;
    let loopback = match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => return Err(bad(key, "must name a host")),
    };
    match url.scheme() {
        "https" => Ok(url),
        "http" if loopback => Ok(url),
        "http" => Err(bad(key, "must be https (http only on a loopback host)")),
        other => Err(bad(key, format!("must be https, not {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section() -> AuthSection {
        AuthSection {
            issuer: "https://idp.example.com/realms/acme".to_owned(),
            resource: "https://airlock.example.com/mcp".to_owned(),
            audience: None,
            jwks_url: Some("https://idp.example.com/certs".to_owned()),
            jwks_file: None,
            tenant: Some("acme".to_owned()),
            tenant_claim: None,
            principal_claim: None,
            scopes_claim: None,
            leeway_seconds: None,
            algorithms: None,
            scopes_supported: None,
        }
    }

    #[test]
    fn defaults_audience_is_the_resource_and_every_asymmetric_algorithm() {
        let config = section().check(None).expect("valid");
        assert_eq!(config.rules.audience, "https://airlock.example.com/mcp");
        assert_eq!(config.rules.algorithms.len(), Algorithm::ALL.len());
        assert_eq!(config.rules.leeway_seconds, DEFAULT_LEEWAY_SECONDS);
        assert_eq!(config.rules.claims.principal, "sub");
        assert_eq!(config.rules.claims.scopes, "scope");
        assert_eq!(
            config.rules.claims.tenant,
            TenantRule::Fixed("acme".to_owned())
        );
    }

    #[test]
    fn each_mistake_names_its_key() {
        let cases: Vec<(AuthSection, &str)> = vec![
            (
                AuthSection {
                    issuer: "http://idp.example.com".to_owned(),
                    ..section()
                },
                "auth.issuer: must be https (http only on a loopback host)",
            ),
            (
                AuthSection {
                    resource: "https://a.example/mcp#x".to_owned(),
                    ..section()
                },
                "auth.resource: must not have a fragment (RFC 8707)",
            ),
            (
                AuthSection {
                    jwks_file: Some("/etc/jwks.json".into()),
                    ..section()
                },
                "auth: set exactly one of jwks_url and jwks_file",
            ),
            (
                AuthSection {
                    jwks_url: None,
                    jwks_file: Some("jwks.json".into()),
                    ..section()
                },
                "auth.jwks_file: must be an absolute path",
            ),
            (
                AuthSection {
                    tenant_claim: Some("org".to_owned()),
                    ..section()
                },
                "auth: set tenant or tenant_claim, not both",
            ),
            (
                AuthSection {
                    tenant: None,
                    ..section()
                },
                "auth: set tenant (every caller's tenant) or tenant_claim (the claim naming it)",
            ),
            (
                AuthSection {
                    leeway_seconds: Some(301),
                    ..section()
                },
                "auth.leeway_seconds: must be 0 to 300",
            ),
            (
                AuthSection {
                    algorithms: Some(vec!["RS256".to_owned(), "HS256".to_owned()]),
                    ..section()
                },
                "auth.algorithms: \"HS256\" is never accepted: an unsigned or shared-secret token \
                 could be made by anyone who knows the issuer's public keys",
            ),
            (
                AuthSection {
                    algorithms: Some(vec!["none".to_owned()]),
                    ..section()
                },
                "auth.algorithms: \"none\" is never accepted: an unsigned or shared-secret token \
                 could be made by anyone who knows the issuer's public keys",
            ),
        ];
        for (section, expected) in cases {
            assert_eq!(
                section.check(None).map(|_| ()).unwrap_err().to_string(),
                expected
            );
        }
    }

    /// The default audience is the resource as the metadata spells it, which is what clients
    /// ask the issuer for; a path the metadata route could not take is refused at load.
    #[test]
    fn the_default_audience_is_the_normalized_resource() {
        let config = AuthSection {
            resource: "https://Airlock.Example.com:443".to_owned(),
            ..section()
        }
        .check(None)
        .expect("valid");
        assert_eq!(config.rules.audience, "https://airlock.example.com/");
        assert_eq!(config.resource.as_str(), config.rules.audience);
        let refused = AuthSection {
            resource: "https://a.example/api/:id".to_owned(),
            ..section()
        }
        .check(None)
        .map(|_| ())
        .unwrap_err()
        .to_string();
        assert!(
            refused.starts_with("auth.resource: a path segment"),
            "{refused}"
        );
    }

    #[test]
    fn a_loopback_issuer_may_use_http_and_the_gateway_tenant_is_the_default() {
        let config = AuthSection {
            issuer: "http://127.0.0.1:9000".to_owned(),
            jwks_url: Some("http://localhost:9000/jwks".to_owned()),
            tenant: None,
            ..section()
        }
        .check(Some("gateway-tenant"))
        .expect("valid");
        assert_eq!(
            config.rules.claims.tenant,
            TenantRule::Fixed("gateway-tenant".to_owned())
        );
    }
}
