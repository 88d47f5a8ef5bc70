//! Cross-site request checks for every console form POST (SPEC §20): the request must say it
//! comes from this origin. `Sec-Fetch-Site`, when sent, must be `same-origin`; `Origin`, when
//! sent, must be this server's own origin; a POST with neither is refused, since every browser
//! that could carry the session cookie sends at least one of them. The SameSite=Strict cookie
//! and the per-session form token are further layers, not replacements.

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

/// Checks a form POST's provenance against this server's origin (`http[s]://` + its `Host`).
pub fn same_origin(headers: &HeaderMap, tls: bool) -> Result<(), CrossSite> {
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
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .ok_or(CrossSite::Origin)?;
        let scheme = if tls { "https" } else { "http" };
        if !origin.eq_ignore_ascii_case(&format!("{scheme}://{host}")) {
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
            assert_eq!(same_origin(h, false), Ok(()), "{h:?}");
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
            assert_eq!(same_origin(h, false), Err(*why), "{h:?}");
        }
        assert_eq!(
            same_origin(
                &headers(&[host, ("origin", "https://127.0.0.1:8080")]),
                true
            ),
            Ok(())
        );
    }
}
