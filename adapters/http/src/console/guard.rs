//! Cross-site request checks for every console form POST (SPEC §20): the request must say it
//! comes from this origin. `Sec-Fetch-Site`, when sent, must be `same-origin`; `Origin`, when
//! sent, must be one of this server's own origins (its allow-list of names, never merely the
//! request's own `Host`, which a DNS-rebinding page controls); a POST with neither is refused,
//! since every browser
//! that could carry the session cookie sends at least one of them. The SameSite=Strict cookie
//! and the per-session form token are further layers, not replacements.

use airlock_host::authority::{AllowedHosts, origin_allowed};
use axum::http::{HeaderMap, header};

/// Why a form POST was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CrossSite {
    #[error("the request comes from another site (Sec-Fetch-Site)")]
    FetchSite,
    #[error("the request comes from another origin (Origin)")]
    Origin,
    #[error("the request says neither where it comes from (no Origin, no Sec-Fetch-Site)")]
    Unknown,
}

/// Checks a form POST's provenance against this server's origins: those of `hosts`, or,
/// for a router driven in process without one, `http[s]://` + the request's `Host`.
pub fn same_origin(
    headers: &HeaderMap,
    tls: bool,
    hosts: Option<&AllowedHosts>,
) -> Result<(), CrossSite> {
    let fetch_site = headers
        .get("sec-fetch-site")
        .map(|v| v.to_str().unwrap_or_default());
    if let Some(site) = fetch_site
        && site != "same-origin"
    {
        return Err(CrossSite::FetchSite);
    }
    let origin = headers
        .get(header::ORIGIN)
        .map(|v| v.to_str().unwrap_or_default());
    if let Some(origin) = origin {
        let scheme = if tls { "https" } else { "http" };
        let ours = match hosts {
            Some(hosts) => {
                origin
                    .get(..scheme.len() + 3)
                    .is_some_and(|s| s.eq_ignore_ascii_case(&format!("{scheme}://")))
                    && origin_allowed(hosts, origin)
            }
            None => headers
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|host| origin.eq_ignore_ascii_case(&format!("{scheme}://{host}"))),
        };
        if !ours {
            return Err(CrossSite::Origin);
        }
    }
    if fetch_site.is_none() && origin.is_none() {
        return Err(CrossSite::Unknown);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_an_allow_list_the_origin_must_be_one_of_its_names_whatever_the_host_says() {
        let hosts = AllowedHosts::new("127.0.0.1:8080".parse().expect("addr"), &[]).expect("hosts");
        // DNS rebinding: the page's Host and Origin agree, and both are the attacker's.
        let rebound = headers(&[
            ("host", "evil.example:8080"),
            ("origin", "http://evil.example:8080"),
        ]);
        assert_eq!(
            same_origin(&rebound, false, None),
            Ok(()),
            "the old rule passed it"
        );
        assert_eq!(
            same_origin(&rebound, false, Some(&hosts)),
            Err(CrossSite::Origin)
        );
        let ours = headers(&[
            ("host", "localhost:8080"),
            ("origin", "http://localhost:8080"),
        ]);
        assert_eq!(same_origin(&ours, false, Some(&hosts)), Ok(()));
        let wrong_scheme = headers(&[("origin", "https://127.0.0.1:8080")]);
        assert_eq!(
            same_origin(&wrong_scheme, false, Some(&hosts)),
            Err(CrossSite::Origin)
        );
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().expect("header value"));
        }
        map
    }

    #[test]
    fn same_origin_posts_pass_and_everything_else_is_refused() {
        let host = ("host", "127.0.0.1:8080");
        let ok = [
            headers(&[host, ("origin", "http://127.0.0.1:8080")]),
            headers(&[host, ("sec-fetch-site", "same-origin")]),
            headers(&[
                host,
                ("origin", "http://127.0.0.1:8080"),
                ("sec-fetch-site", "same-origin"),
            ]),
        ];
        for h in &ok {
            assert_eq!(same_origin(h, false, None), Ok(()), "{h:?}");
        }
        let refused = [
            (headers(&[host]), CrossSite::Unknown),
            (
                headers(&[host, ("origin", "http://evil.example")]),
                CrossSite::Origin,
            ),
            (headers(&[host, ("origin", "null")]), CrossSite::Origin),
            (
                headers(&[host, ("origin", "https://127.0.0.1:8080")]),
                CrossSite::Origin,
            ),
            (
                headers(&[host, ("sec-fetch-site", "cross-site")]),
                CrossSite::FetchSite,
            ),
            (
                headers(&[host, ("sec-fetch-site", "same-site")]),
                CrossSite::FetchSite,
            ),
            (
                headers(&[host, ("sec-fetch-site", "none")]),
                CrossSite::FetchSite,
            ),
            (
                headers(&[
                    host,
                    ("origin", "http://127.0.0.1:8080"),
                    ("sec-fetch-site", "cross-site"),
                ]),
                CrossSite::FetchSite,
            ),
        ];
        for (h, why) in &refused {
            assert_eq!(same_origin(h, false, None), Err(*why), "{h:?}");
        }
        assert_eq!(
            same_origin(
                &headers(&[host, ("origin", "https://127.0.0.1:8080")]),
                true,
                None
            ),
            Ok(())
        );
    }
}
