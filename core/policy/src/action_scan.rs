//! A direct reader for the common shape of an action line (SPEC §24, issue 30 item 5): one
//! pass over the bytes, keys matched as they are read, strings without escapes taken as slices,
//! the arguments handed to serde_json in place. It takes only what it reads with certainty and
//! returns `None` for anything else (an escape in a key or an audit string, an unknown or
//! repeated key, a missing one, a number that is not a plain integer, a value a field does not
//! take, arguments nested past `SCAN_DEPTH`), and the caller then reads the text with
//! [`ActionRef`]'s serde parse and, failing that, the owned parser. So the reader decides
//! nothing: what it returns is what those parsers return for the same text, and every error is
//! theirs.

use std::collections::BTreeMap;

use crate::action::{ActionError, JsonMap, value_depth};
use crate::action_ref::{ActionRef, TargetRef, TrustLabels};
use crate::ids::parse_canonical_uuid;
use crate::time::Timestamp;
use crate::vocab::{TargetKind, TrustLevel};
use crate::wire_text::WireStr;

/// Arguments nested deeper than this are left to the parsers (whose depth rules depend on the
/// whole document's nesting and on which check runs first).
const SCAN_DEPTH: usize = 100;

impl<'a> ActionRef<'a> {
    /// Parses and validates one action document, borrowing from `text`. Accepts and refuses
    /// exactly what [`ProposedAction::from_json`](crate::action::ProposedAction::from_json) does, with the same error.
    pub fn from_json(text: &'a str) -> Result<ActionRef<'a>, ActionError> {
        // The direct reader first: what it takes, the serde parse below takes with the same
        // values (`action_scan`), so the same checks decide.
        if let Some(action) = scan(text) {
            return action.validated();
        }
        Self::from_json_serde(text)
    }
}

/// Reads `text` when it has the common shape; `None` hands it to the parsers. Runs none of the
/// checks after parsing (tenant, hash, depth): [`ActionRef::from_json`] does. Public for the
/// tests that hold it to the parsers.
#[doc(hidden)]
pub fn scan(text: &str) -> Option<ActionRef<'_>> {
    let mut reader = Reader {
        text,
        bytes: text.as_bytes(),
        at: 0,
    };
    let action = reader.action()?;
    reader.skip_ws();
    (reader.at == reader.bytes.len()).then_some(action)
}

struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

/// The action's keys in declaration order: a key's position is its field's bit in the set
/// already read, and the order writers use, so the reader tries the next one first. Public for
/// the tests that hold it to the order the action serializes in.
#[doc(hidden)]
pub const FIELD_KEYS: [&str; 19] = [
    "kind",
    "action_id",
    "tenant_id",
    "session_id",
    "run_id",
    "step_number",
    "name",
    "version",
    "summary",
    "side_effect",
    "risk",
    "idempotency",
    "required_scopes",
    "arguments",
    "normalized_arguments_hash",
    "argument_trust",
    "origin_trust",
    "target",
    "evaluated_at",
];

/// The target's keys in declaration order (public for the same tests).
#[doc(hidden)]
pub const TARGET_KEYS: [&str; 5] = [
    "kind",
    "isolated",
    "network_enabled",
    "device_id",
    "server_id",
];

/// Where the first byte that ends or stops a plain string is: a quote, a backslash or a
/// control character. Eight bytes at a time: in each word, a byte equal to `"` or `\\` or
/// below 0x20 sets its high bit in the mask (the lowest set bit is always exact; borrows can
/// only mark bytes above it), then the rest byte by byte.
fn stop_at(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    fn zero_bytes(word: u64) -> u64 {
        word.wrapping_sub(ONES) & !word & HIGH
    }
    let mut words = bytes.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let mask = zero_bytes(word ^ (ONES * u64::from(b'"')))
            | zero_bytes(word ^ (ONES * u64::from(b'\\')))
            | (word.wrapping_sub(ONES * 0x20) & !word & HIGH);
        if mask != 0 {
            return Some(offset + (mask.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20)
        .map(|at| offset + at)
}

/// `a == b`, eight bytes at a time and inline: for keys of 4 to 25 bytes a call to `memcmp`
/// cost more than the comparison (3 % of `policy eval --jsonl` in a profile).
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    fn word(bytes: &[u8]) -> u64 {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[..8]);
        u64::from_le_bytes(word)
    }
    let len = a.len();
    if len != b.len() {
        return false;
    }
    if len < 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    let mut at = 0;
    while at + 8 <= len {
        if word(&a[at..]) != word(&b[at..]) {
            return false;
        }
        at += 8;
    }
    // The last eight bytes, overlapping what was compared: the tail without a byte loop.
    word(&a[len - 8..]) == word(&b[len - 8..])
}

impl<'a> Reader<'a> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// Skips whitespace, then takes `byte` if it is next.
    fn eat(&mut self, byte: u8) -> bool {
        self.skip_ws();
        if self.bytes.get(self.at) == Some(&byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// A string with no escape and no control character, as a slice of the input.
    fn plain_str(&mut self) -> Option<&'a str> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.at;
        let end = start + stop_at(&self.bytes[start..])?;
        if self.bytes[end] != b'"' {
            return None;
        }
        self.at = end + 1;
        // Both ends are ASCII quotes, so the slice lies on character boundaries.
        self.text.get(start..end)
    }

    /// The next key's index in `keys`, trying `keys[expected]` first as its bytes between
    /// quotes: a key without escapes or control characters is read as exactly that text by
    /// [`Reader::plain_str`], so this takes what it would, only sooner. Any other key is read
    /// and looked up; `None` for one that is not in `keys`.
    fn key(&mut self, keys: &[&str], expected: usize) -> Option<usize> {
        self.skip_ws();
        if let Some(key) = keys.get(expected) {
            let key = key.as_bytes();
            let rest = &self.bytes[self.at..];
            if rest.len() > key.len() + 1
                && rest[0] == b'"'
                && same_bytes(&rest[1..=key.len()], key)
                && rest[key.len() + 1] == b'"'
            {
                self.at += key.len() + 2;
                return Some(expected);
            }
        }
        let key = self.plain_str()?;
        keys.iter().position(|k| *k == key)
    }

    fn wire_str(&mut self) -> Option<WireStr<'a>> {
        self.plain_str()
            .map(|text| WireStr(std::borrow::Cow::Borrowed(text)))
    }

    /// `null`, or a plain string.
    fn nullable_str(&mut self) -> Option<Option<WireStr<'a>>> {
        self.skip_ws();
        if self.bytes[self.at..].starts_with(b"null") {
            self.at += 4;
            Some(None)
        } else {
            self.wire_str().map(Some)
        }
    }

    fn boolean(&mut self) -> Option<bool> {
        self.skip_ws();
        let rest = &self.bytes[self.at..];
        if rest.starts_with(b"true") {
            self.at += 4;
            Some(true)
        } else if rest.starts_with(b"false") {
            self.at += 5;
            Some(false)
        } else {
            None
        }
    }

    /// A JSON integer within `u64`, without sign, fraction or exponent.
    fn unsigned(&mut self) -> Option<u64> {
        self.skip_ws();
        let start = self.at;
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        let digits = &self.text[start..self.at];
        let next = self.bytes.get(self.at);
        let plain = matches!(
            next,
            None | Some(b' ' | b'\t' | b'\n' | b'\r' | b',' | b'}')
        );
        if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) || !plain {
            return None;
        }
        digits.parse().ok()
    }

    fn parsed<T: std::str::FromStr>(&mut self) -> Option<T> {
        self.plain_str()?.parse().ok()
    }

    fn scopes(&mut self) -> Option<Vec<WireStr<'a>>> {
        if !self.eat(b'[') {
            return None;
        }
        let mut scopes = Vec::new();
        if self.eat(b']') {
            return Some(scopes);
        }
        loop {
            scopes.push(self.wire_str()?);
            if self.eat(b']') {
                return Some(scopes);
            }
            if !self.eat(b',') {
                return None;
            }
        }
    }

    fn labels(&mut self) -> Option<TrustLabels<'a>> {
        if !self.eat(b'{') {
            return None;
        }
        let mut labels = BTreeMap::new();
        if self.eat(b'}') {
            return Some(TrustLabels(labels));
        }
        loop {
            let name = self.wire_str()?;
            if !self.eat(b':') {
                return None;
            }
            let level: TrustLevel = self.parsed()?;
            labels.insert(name, level);
            if self.eat(b'}') {
                return Some(TrustLabels(labels));
            }
            if !self.eat(b',') {
                return None;
            }
        }
    }

    /// The arguments object, read by serde_json from where it starts.
    fn arguments(&mut self) -> Option<JsonMap> {
        self.skip_ws();
        let rest = &self.text[self.at..];
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<JsonMap>();
        let arguments = stream.next()?.ok()?;
        self.at += stream.byte_offset();
        (arguments.values().map(value_depth).max().unwrap_or(0) < SCAN_DEPTH).then_some(arguments)
    }

    fn target(&mut self) -> Option<TargetRef<'a>> {
        if !self.eat(b'{') {
            return None;
        }
        let (mut kind, mut isolated, mut network_enabled) = (None, None, None);
        let (mut device_id, mut server_id) = (None, None);
        let mut expected = 0;
        loop {
            let index = self.key(&TARGET_KEYS, expected)?;
            expected = index + 1;
            if !self.eat(b':') {
                return None;
            }
            let fresh = match index {
                0 => kind.replace(TargetKind::parse(self.plain_str()?)).is_none(),
                1 => isolated.replace(self.boolean()?).is_none(),
                2 => network_enabled.replace(self.boolean()?).is_none(),
                3 => device_id.replace(self.nullable_str()?).is_none(),
                _ => server_id.replace(self.nullable_str()?).is_none(),
            };
            if !fresh {
                return None;
            }
            if self.eat(b'}') {
                break;
            }
            if !self.eat(b',') {
                return None;
            }
        }
        Some(TargetRef {
            kind: kind?,
            isolated: isolated?,
            network_enabled: network_enabled?,
            device_id: device_id?,
            server_id: server_id?,
        })
    }

    fn action(&mut self) -> Option<ActionRef<'a>> {
        if !self.eat(b'{') {
            return None;
        }
        let mut seen = 0u32;
        let mut fields = Partial::default();
        let mut expected = 0;
        loop {
            let index = self.key(&FIELD_KEYS, expected)?;
            expected = index + 1;
            let index = index as u32;
            if seen & (1 << index) != 0 || !self.eat(b':') {
                return None;
            }
            seen |= 1 << index;
            match index {
                0 => fields.kind = Some(self.parsed()?),
                1 => fields.action_id = Some(parse_canonical_uuid(self.plain_str()?).ok()?),
                2 => fields.tenant_id = Some(self.wire_str()?),
                3 => fields.session_id = Some(parse_canonical_uuid(self.plain_str()?).ok()?),
                4 => fields.run_id = Some(parse_canonical_uuid(self.plain_str()?).ok()?),
                5 => fields.step_number = Some(self.unsigned()?),
                6 => fields.name = Some(self.wire_str()?),
                7 => fields.version = Some(self.nullable_str()?),
                8 => fields.summary = Some(self.wire_str()?),
                9 => fields.side_effect = Some(self.parsed()?),
                10 => fields.risk = Some(self.parsed()?),
                11 => fields.idempotency = Some(self.parsed()?),
                12 => fields.required_scopes = Some(self.scopes()?),
                13 => fields.arguments = Some(self.arguments()?),
                14 => fields.normalized_arguments_hash = Some(self.wire_str()?),
                15 => fields.argument_trust = Some(self.labels()?),
                16 => fields.origin_trust = Some(self.parsed()?),
                17 => fields.target = Some(self.target()?),
                _ => fields.evaluated_at = Some(self.parsed::<Timestamp>()?),
            }
            if self.eat(b'}') {
                break;
            }
            if !self.eat(b',') {
                return None;
            }
        }
        fields.complete()
    }
}

/// The fields read so far.
#[derive(Default)]
struct Partial<'a> {
    kind: Option<crate::vocab::ActionKind>,
    action_id: Option<uuid::Uuid>,
    tenant_id: Option<WireStr<'a>>,
    session_id: Option<uuid::Uuid>,
    run_id: Option<uuid::Uuid>,
    step_number: Option<u64>,
    name: Option<WireStr<'a>>,
    version: Option<Option<WireStr<'a>>>,
    summary: Option<WireStr<'a>>,
    side_effect: Option<crate::vocab::SideEffectClass>,
    risk: Option<crate::vocab::RiskLevel>,
    idempotency: Option<crate::vocab::IdempotencyClass>,
    required_scopes: Option<Vec<WireStr<'a>>>,
    arguments: Option<JsonMap>,
    normalized_arguments_hash: Option<WireStr<'a>>,
    argument_trust: Option<TrustLabels<'a>>,
    origin_trust: Option<TrustLevel>,
    target: Option<TargetRef<'a>>,
    evaluated_at: Option<Timestamp>,
}

impl<'a> Partial<'a> {
    fn complete(self) -> Option<ActionRef<'a>> {
        Some(ActionRef {
            kind: self.kind?,
            action_id: self.action_id?,
            tenant_id: self.tenant_id?,
            session_id: self.session_id?,
            run_id: self.run_id?,
            step_number: self.step_number?,
            name: self.name?,
            version: self.version?,
            summary: self.summary?,
            side_effect: self.side_effect?,
            risk: self.risk?,
            idempotency: self.idempotency?,
            required_scopes: self.required_scopes?,
            arguments: self.arguments?,
            normalized_arguments_hash: self.normalized_arguments_hash?,
            argument_trust: self.argument_trust?,
            origin_trust: self.origin_trust?,
            target: self.target?,
            evaluated_at: self.evaluated_at?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time comparison is `==`: every length to 40, a difference at each
    /// position (every bit of it), and unequal lengths.
    #[test]
    fn same_bytes_is_equality() {
        for len in 0..40usize {
            let a: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert!(same_bytes(&a, &a.clone()), "{len}");
            for at in 0..len {
                for bit in 0..8 {
                    let mut b = a.clone();
                    b[at] ^= 1 << bit;
                    assert!(!same_bytes(&a, &b), "{len} {at} {bit}");
                }
            }
            let mut longer = a.clone();
            longer.push(0);
            assert!(!same_bytes(&a, &longer), "{len}");
        }
    }

    /// The word-at-a-time search finds the byte a plain search finds, wherever it is and
    /// whatever precedes it (every byte value, every position in and across words).
    #[test]
    fn the_word_search_finds_the_first_stop_byte() {
        let reference = |bytes: &[u8]| {
            bytes
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        };
        for length in 0..20 {
            for at in 0..length {
                for stop in 0..=255u8 {
                    for filler in [b'a', 0x7f, 0x80, 0xff, 0x21, b'#'] {
                        let mut bytes = vec![filler; length];
                        bytes[at] = stop;
                        if at + 1 < length {
                            bytes[at + 1] = b'"';
                        }
                        assert_eq!(stop_at(&bytes), reference(&bytes), "{bytes:?}");
                    }
                }
            }
            assert_eq!(stop_at(&vec![b'x'; length]), None);
        }
    }
}
