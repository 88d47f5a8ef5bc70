//! `network_range` matching (SPEC §6.3): find every IP literal a string could name, in every
//! spelling a resolver might accept, and test it against the rule's ranges. No DNS: hostnames
//! never match here, and `host_on_allowlist` denies them anyway.

// Address *values* only: `core::net` holds the IP types and their parsers, and no socket or
// resolver API, so matching stays pure and deterministic (no port is needed for it).
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::borrow::Cow;

use ipnet::IpNet;

use super::prefilter::Prefilter;
use super::strings::is_ws;

/// A compiled `cidrs` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkRanges {
    ranges: Vec<IpNet>,
}

impl NetworkRanges {
    pub fn new(ranges: Vec<IpNet>) -> NetworkRanges {
        NetworkRanges { ranges }
    }

    fn contains(&self, address: IpAddr) -> bool {
        self.ranges.iter().any(|range| range.contains(&address))
    }

    /// Whether an address found by a v2 reading (SPEC §21.2) is in a range, directly or through
    /// any IPv4 it embeds (the v1 embeddings and the two v2 adds).
    pub fn matches_address(&self, address: IpAddr) -> bool {
        match address {
            IpAddr::V6(v6) => any_in_v6(v6, Embeddings::V2, &mut |a| self.contains(a)),
            IpAddr::V4(_) => self.contains(address),
        }
    }

    /// Whether `s` names, in any accepted spelling, an address inside a range (SPEC §6.3, the v1
    /// reading).
    pub fn matches_string(&self, s: &str, prefilter: Prefilter) -> bool {
        self.matches_string_with(s, Embeddings::V1, prefilter)
    }

    /// The v1 candidates of `s` read again with the IPv4-in-IPv6 embeddings SPEC §21.2 adds
    /// (SIIT and local-use NAT64): a v2 reading, so pass 2 only. Only an IPv6 literal can embed,
    /// so the pre-filter skips a string without `:`.
    pub fn matches_string_v2(&self, s: &str, prefilter: Prefilter) -> bool {
        (prefilter == Prefilter::Off || s.contains(':'))
            && self.matches_string_with(s, Embeddings::V2, prefilter)
    }

    fn matches_string_with(&self, s: &str, embeddings: Embeddings, prefilter: Prefilter) -> bool {
        // Pre-filter: every spelling `any_address` accepts holds an ASCII digit or a `:` (IPv6
        // needs a `:`, every dotted-decimal and `inet_aton` part a digit, `0x`/`0` prefixes
        // included), and a candidate is a piece of `s` with tabs and line breaks removed and `\`
        // turned into `/`, which adds neither. So a string with neither can name no address.
        if prefilter == Prefilter::On && !s.bytes().any(|b| b.is_ascii_digit() || b == b':') {
            return false;
        }
        let cleaned: Cow<'_, str> = if s.bytes().any(|b| matches!(b, b'\t' | b'\n' | b'\r')) {
            Cow::Owned(
                s.chars()
                    .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
                    .collect(),
            )
        } else {
            Cow::Borrowed(s)
        };
        let trimmed =
            cleaned.trim_matches(|c: char| is_ws(c) || c.is_control() && (c as u32) < 0x20);
        let reading = Reading {
            embeddings,
            prefilter,
        };
        if self.any_candidate_matches(trimmed, reading) {
            return true;
        }
        // The slashed spelling differs from the trimmed one only when it has a `\`.
        trimmed.bytes().any(|b| b == b'\\')
            && self.any_candidate_matches(&trimmed.replace('\\', "/"), reading)
    }

    fn any_candidate_matches(&self, text: &str, reading: Reading) -> bool {
        let mut found = false;
        for_each_candidate(text, &mut |candidate| {
            found = found || self.candidate_matches(candidate, reading);
        });
        found
    }

    /// A candidate as given, without one trailing `.`, without a `%zone`, and without both.
    fn candidate_matches(&self, candidate: &str, reading: Reading) -> bool {
        // Pre-filter: each of the four texts holds the candidate's part before its first `%`
        // (less at most a trailing `.`), and `any_address` refuses a text with a byte outside
        // its spelling alphabet; so one such byte before the first `%` refuses all four, before
        // any of them is built.
        if reading.prefilter == Prefilter::On
            && candidate
                .bytes()
                .find(|b| !is_address_byte(*b))
                .is_some_and(|b| b != b'%')
        {
            return false;
        }
        let without_dot = candidate.strip_suffix('.');
        let without_zone = ascii_position(candidate, b'%').map(|i| &candidate[..i]);
        let without_both = without_dot.and_then(|c| ascii_position(c, b'%').map(|i| &c[..i]));
        [Some(candidate), without_dot, without_zone, without_both]
            .into_iter()
            .flatten()
            .any(|text| any_address(text, reading, &mut |address| self.contains(address)))
    }
}

/// Calls `f` with each candidate of SPEC §6.3 (a)–(c) and the host parts of their authorities.
fn for_each_candidate<'a>(text: &'a str, f: &mut impl FnMut(&'a str)) {
    // (a) the string itself.
    f(text);
    // (b) the authority after every `//`, overlapping occurrences included.
    let bytes = text.as_bytes();
    for i in 0..bytes.len().saturating_sub(1) {
        if bytes[i] == b'/' && bytes[i + 1] == b'/' {
            let after = &text[i + 2..];
            let end = ascii_delimiter(after).unwrap_or(after.len());
            authority_hosts(strip_userinfo(&after[..end]), f);
        }
    }
    // (c) the text before the first `/`, `?` or `#`, read as an authority (scheme-less URLs).
    let end = ascii_delimiter(text).unwrap_or(text.len());
    let head = &text[..end];
    authority_hosts(head, f);
    // Without userinfo, the same text unless it has an `@`: a candidate given twice can only
    // repeat its answer, so it is given once.
    let host = strip_userinfo(head);
    if host.len() != head.len() {
        authority_hosts(host, f);
    }
}

/// The first `/`, `?` or `#`, as `str::find` with those three would give it, by bytes: they
/// are ASCII, so a match is always a character boundary.
fn ascii_delimiter(text: &str) -> Option<usize> {
    text.bytes().position(|b| matches!(b, b'/' | b'?' | b'#'))
}

fn strip_userinfo(authority: &str) -> &str {
    authority
        .bytes()
        .rposition(|b| b == b'@')
        .map_or(authority, |i| &authority[i + 1..])
}

/// The first `byte` (ASCII, so always a character boundary), as `str::find` with its `char`
/// would give it: a plain loop, which the short texts read here favour over `memchr`'s set-up.
fn ascii_position(text: &str, byte: u8) -> Option<usize> {
    text.bytes().position(|b| b == byte)
}

/// The host candidates of an authority: the bracketed part, or the text before the first `:`,
/// before the last `:`, and the whole.
fn authority_hosts<'a>(authority: &'a str, f: &mut impl FnMut(&'a str)) {
    if let Some(open) = ascii_position(authority, b'[') {
        let inner = &authority[open + 1..];
        f(ascii_position(inner, b']').map_or(inner, |close| &inner[..close]));
        return;
    }
    // Before the first and before the last `:` are one text when there is one `:`; it is given
    // once (a repeated candidate can only repeat its answer).
    let first = ascii_position(authority, b':');
    if let Some(first) = first {
        f(&authority[..first]);
    }
    if let Some(last) = authority.bytes().rposition(|b| b == b':')
        && Some(last) != first
    {
        f(&authority[..last]);
    }
    f(authority);
}

/// Which IPv4-in-IPv6 embeddings a reading unwraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Embeddings {
    /// SPEC §6.3's four.
    V1,
    /// Those and SPEC §21.2's two.
    V2,
}

/// How one string is read: which embeddings are unwrapped, and whether the pre-filters skip
/// what cannot match.
#[derive(Debug, Clone, Copy)]
struct Reading {
    embeddings: Embeddings,
    prefilter: Prefilter,
}

/// The bytes an address spelling of [`any_address`] is made of: hex digits, `x`, `.` and `:`.
fn is_address_byte(b: u8) -> bool {
    b.is_ascii_hexdigit() || matches!(b, b'.' | b':' | b'x' | b'X')
}

/// Whether `test` holds for any address a candidate denotes: IPv6, strict dotted-decimal IPv4
/// (leading zeros decimal), `inet_aton` IPv4, and the IPv4 embedded in an IPv6 address. Built
/// without allocating: it runs on every collected string of every action.
fn any_address(text: &str, reading: Reading, test: &mut impl FnMut(IpAddr) -> bool) -> bool {
    // Pre-filter: every spelling below is made of hex digits, `x`, `.` and `:` only, so a
    // candidate with any other byte (most of them: whole sentences, paths, commands) is refused
    // before parsing.
    if reading.prefilter == Prefilter::On && !text.bytes().all(is_address_byte) {
        return false;
    }
    // An IPv6 literal always has a `:`; skipping the parse without one changes no answer.
    if text.contains(':')
        && let Ok(v6) = text.parse::<Ipv6Addr>()
        && any_in_v6(v6, reading.embeddings, test)
    {
        return true;
    }
    strict_dotted_decimal(text).is_some_and(|v4| test(IpAddr::V4(v4)))
        || inet_aton(text).is_some_and(|v4| test(IpAddr::V4(v4)))
}

/// Whether `test` holds for an IPv6 address or an IPv4 it embeds (SPEC §6.3's embeddings, and
/// with [`Embeddings::V2`] also §21.2's).
fn any_in_v6(v6: Ipv6Addr, embeddings: Embeddings, test: &mut impl FnMut(IpAddr) -> bool) -> bool {
    test(IpAddr::V6(v6))
        || embedded_ipv4(v6).is_some_and(|v4| test(IpAddr::V4(v4)))
        || (embeddings == Embeddings::V2
            && embedded_ipv4_v2(v6).is_some_and(|v4| test(IpAddr::V4(v4))))
}

/// Every address a candidate denotes, in [`any_address`]'s order (for tests).
#[cfg(test)]
fn addresses(text: &str, embeddings: Embeddings) -> Vec<IpAddr> {
    let mut out = Vec::new();
    let reading = Reading {
        embeddings,
        prefilter: Prefilter::On,
    };
    any_address(text, reading, &mut |address| {
        out.push(address);
        false
    });
    out
}

/// IPv4-mapped (`::ffff:0:0/96`), IPv4-compatible (`::/96`), NAT64 (`64:ff9b::/96`) and 6to4
/// (`2002::/16`, bits 16–47).
fn embedded_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let o = v6.octets();
    let low = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    let s = v6.segments();
    if s[..5] == [0, 0, 0, 0, 0] && (s[5] == 0xffff || s[5] == 0) {
        return Some(low);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    None
}

/// SPEC §21.2's additions: SIIT (`::ffff:0:0:0/96`) and local-use NAT64 (`64:ff9b:1::/48`, the
/// last 32 bits).
fn embedded_ipv4_v2(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let o = v6.octets();
    let low = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    let s = v6.segments();
    if s[..6] == [0, 0, 0, 0, 0xffff, 0] || s[..3] == [0x64, 0xff9b, 1] {
        return Some(low);
    }
    None
}

/// Four decimal parts, each ≤ 255; leading zeros are read as decimal, however many there are
/// (`100.100.100.0000000000200` is 100.100.100.200): integer parsing takes any number of them
/// and fails only when the value is too large.
fn strict_dotted_decimal(text: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = text.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *octet = part.parse::<u8>().ok()?;
    }
    parts.next().is_none().then(|| Ipv4Addr::from(octets))
}

/// One `inet_aton` part: decimal, `0x` hex, or `0`-prefixed octal, with any number of leading
/// zeros (a value past `u64` is refused by the parse).
fn aton_part(part: &str) -> Option<u64> {
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// The classic resolver reading: 1–4 parts; the last part fills the remaining bytes.
fn inet_aton(text: &str) -> Option<Ipv4Addr> {
    let mut values = [0u64; 4];
    let mut count = 0;
    for part in text.split('.') {
        // A fifth part refuses the text, whatever the parts before it were.
        let slot = values.get_mut(count)?;
        *slot = aton_part(part)?;
        count += 1;
    }
    let (last, leading) = values[..count].split_last()?;
    let mut address: u64 = 0;
    for (i, value) in leading.iter().enumerate() {
        if *value > 255 {
            return None;
        }
        address |= value << (24 - 8 * i);
    }
    let last_bits = 8 * (4 - leading.len()) as u32;
    if *last >= 1u64 << last_bits {
        return None;
    }
    Some(Ipv4Addr::from((address | last) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The v1 reading with its pre-filters, checked against the same reading without them.
    fn matches(r: &NetworkRanges, text: &str) -> bool {
        let filtered = r.matches_string(text, Prefilter::On);
        assert_eq!(
            filtered,
            r.matches_string(text, Prefilter::Off),
            "{text:?}: the pre-filter changed the answer"
        );
        filtered
    }

    fn metadata() -> NetworkRanges {
        NetworkRanges::new(
            [
                "169.254.0.0/16",
                "fe80::/10",
                "fd00:ec2::254/128",
                "100.100.100.200/32",
                "168.63.129.16/32",
            ]
            .iter()
            .map(|c| c.parse().unwrap())
            .collect(),
        )
    }

    #[test]
    fn inet_aton_spellings() {
        let target = Some(Ipv4Addr::new(169, 254, 169, 254));
        assert_eq!(inet_aton("0xA9FEA9FE"), target);
        assert_eq!(inet_aton("0251.0376.0251.0376"), target);
        assert_eq!(inet_aton("169.254.43518"), target);
        assert_eq!(inet_aton("2852039166"), target);
        assert_eq!(inet_aton("169.16689662"), target);
        assert_eq!(inet_aton("256.1.1.1"), None);
        assert_eq!(inet_aton("1.2.3.4.5"), None);
        assert_eq!(inet_aton("08.1.1.1"), None);
        assert_eq!(inet_aton("4294967296"), None);
        assert_eq!(
            strict_dotted_decimal("010.001.1.1"),
            Some(Ipv4Addr::new(10, 1, 1, 1))
        );
    }

    #[test]
    fn leading_zeros_do_not_count_towards_a_parts_length() {
        let target = Some(Ipv4Addr::new(100, 100, 100, 200));
        assert_eq!(strict_dotted_decimal("100.100.100.0000000000200"), target);
        assert_eq!(
            strict_dotted_decimal("0000000000169.254.169.254"),
            Some(Ipv4Addr::new(169, 254, 169, 254))
        );
        assert_eq!(
            strict_dotted_decimal("0.00.000.0000000000000"),
            Some(Ipv4Addr::UNSPECIFIED)
        );
        assert_eq!(strict_dotted_decimal("1.1.1.0000000000256"), None);
        // inet_aton reads the same spellings as octal or hex with any number of zeros.
        assert_eq!(
            inet_aton("0x00000000000000000000000000000000000a9fea9fe"),
            Some(Ipv4Addr::new(169, 254, 169, 254))
        );
        assert_eq!(
            inet_aton("00000000000000000000000000000000000000251.0376.0251.0376"),
            Some(Ipv4Addr::new(169, 254, 169, 254))
        );
        assert_eq!(inet_aton("0x0.0.0.0"), Some(Ipv4Addr::UNSPECIFIED));
        let r = metadata();
        for text in [
            "http://100.100.100.0000000000200/",
            "http://0000000000169.254.169.254/latest",
        ] {
            assert!(matches(&r, text), "{text} should match");
        }
    }

    #[test]
    fn embedded_ipv4_forms() {
        let target = Some(Ipv4Addr::new(169, 254, 169, 254));
        for text in [
            "::ffff:169.254.169.254",
            "::169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::1",
        ] {
            assert_eq!(embedded_ipv4(text.parse().unwrap()), target, "{text}");
        }
        assert_eq!(embedded_ipv4("2001:db8::1".parse().unwrap()), None);
    }

    #[test]
    fn spec_examples_match() {
        let r = metadata();
        for text in [
            "http://169.254.169.254/latest",
            "http://[fd00:ec2::254]/",
            "100.100.100.200",
            "168.63.129.16",
            "169.254.169.254:80",
            "http://[fe80::1]/x",
            "[fe80::1%eth0]:8080",
            "http://[::ffff:169.254.169.254]/",
            "0xA9FEA9FE",
            "0251.0376.0251.0376",
            "169.254.43518",
            "2852039166",
        ] {
            assert!(matches(&r, text), "{text} should match");
        }
        for text in ["https://example.com/", "http://169.254.169.254.nip.io/"] {
            assert!(!matches(&r, text), "{text} should not match");
        }
    }

    /// The pre-filters skip a string with no ASCII digit and no `:`, and a candidate with a
    /// byte outside hex digits, `x`, `.` and `:`; addresses spelled at those edges still match.
    #[test]
    fn prefilters_keep_spellings_at_their_edges() {
        let r = metadata();
        for text in [
            // No decimal digit at all: the `:` keeps it.
            "febf::",
            "http://[febf::]/",
            "\tfebf::%eth0\n",
            "http:\\\\[febf::]\\x",
            // Hex and `x` only in the address part.
            "0xA9FEA9FE",
            "http://0XA9FEA9FE./x",
            "user@0xa9.0xfe.0xa9.0xfe:80",
        ] {
            assert!(matches(&r, text), "{text:?} should match");
        }
        for text in ["febf", "fe80-1", "febf:", "no address here", ""] {
            assert!(!matches(&r, text), "{text:?} should not match");
        }
        assert_eq!(addresses("0xA9FEA9FE", Embeddings::V1).len(), 1);
        assert_eq!(addresses("febf::", Embeddings::V1).len(), 1);
        assert!(addresses("febg::", Embeddings::V1).is_empty());
    }

    #[test]
    fn tightenings_match() {
        let r = metadata();
        for text in [
            "https:///169.254.169.254",
            "http://user:pw@169.254.169.254/",
            "169.254.169.254/latest",
            "169.254.169.254?x",
            " \t169.254.169.254.\n",
            "http:\\\\169.254.169.254\\x",
            "fe80::1%25eth0",
            "see //169.254.169.254#frag",
        ] {
            assert!(matches(&r, text), "{text:?} should match");
        }
        assert!(!matches(&r, "169.253.1.1"));
        assert!(!matches(&r, "metadata.google.internal"));
    }
}
