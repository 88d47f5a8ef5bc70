//! The one spelling of a UUID in input JSON (SPEC §2.2): lowercase and hyphenated. The action's
//! ids are read with it; `airlock-core`'s typed ids parse through it too.

use std::fmt;

use uuid::Uuid;

/// Text that is not a UUID in the one spelling SPEC §2.2 allows: lowercase, hyphenated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected a lowercase hyphenated UUID, got '{0}'")]
pub struct IdSyntaxError(pub String);

/// Parses a UUID written the §2.2 way and nothing else: `Uuid::parse_str` alone would also take
/// upper case, braces, `urn:uuid:` and the simple form, so two spellings could name one record.
/// Reads the 36 bytes directly (32 lowercase hex digits, hyphens after the 8th, 12th, 16th and
/// 20th): every action carries three ids, and this is on the path of every decision.
pub fn parse_canonical_uuid(text: &str) -> Result<Uuid, IdSyntaxError> {
    decode_hyphenated_lower(text.as_bytes())
        .map(Uuid::from_bytes)
        .ok_or_else(|| IdSyntaxError(text.to_owned()))
}

/// Each byte's value as a lowercase hex digit, or `0xff` when it is not one.
const NIBBLE: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut digit = 0;
    while digit < 10 {
        table[b'0' as usize + digit] = digit as u8;
        digit += 1;
    }
    let mut letter = 0;
    while letter < 6 {
        table[b'a' as usize + letter] = 10 + letter as u8;
        letter += 1;
    }
    table
};

/// Where each of the 16 bytes' two digits start: the groups are 8-4-4-4-12 digits long, each
/// even, so a pair never straddles a hyphen.
const PAIRS: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];

fn decode_hyphenated_lower(text: &[u8]) -> Option<[u8; 16]> {
    let text: &[u8; 36] = text.try_into().ok()?;
    if [text[8], text[13], text[18], text[23]] != [b'-'; 4] {
        return None;
    }
    let mut bytes = [0u8; 16];
    let mut invalid = 0u8;
    for (byte, &at) in bytes.iter_mut().zip(&PAIRS) {
        let (high, low) = (
            NIBBLE[usize::from(text[at])],
            NIBBLE[usize::from(text[at + 1])],
        );
        invalid |= high | low;
        *byte = (high << 4) | (low & 0x0f);
    }
    // A digit's value fits in four bits; `0xff` does not.
    (invalid & 0xf0 == 0).then_some(bytes)
}

/// `deserialize_with` for a UUID field of input JSON: only the §2.2 spelling is accepted.
pub fn deserialize_canonical_uuid<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Uuid, D::Error> {
    // A visitor that reads the text in place (no `String` per id); it expects "a string" as
    // `String`'s own visitor does, so a wrong type is reported with the same words.
    struct CanonicalUuid;
    impl serde::de::Visitor<'_> for CanonicalUuid {
        type Value = Uuid;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Uuid, E> {
            parse_canonical_uuid(text).map_err(E::custom)
        }
    }
    d.deserialize_str(CanonicalUuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spelling rule as it was first written: parse any spelling, keep it only if the
    /// lowercase hyphenated form gives the text back. The direct reading must agree with it.
    fn by_round_trip(text: &str) -> Option<Uuid> {
        Uuid::parse_str(text).ok().filter(|uuid| {
            let mut buffer = Uuid::encode_buffer();
            uuid.hyphenated().encode_lower(&mut buffer) == text
        })
    }

    #[test]
    fn the_direct_reading_agrees_with_the_round_trip_on_every_one_byte_change() {
        let canonical = "0190a6f1-2b3c-7d4e-8f90-123456789abc";
        let mut texts = vec![
            canonical.to_owned(),
            canonical.to_uppercase(),
            format!("{{{canonical}}}"),
            format!("urn:uuid:{canonical}"),
            canonical.replace('-', ""),
            String::new(),
            format!("{canonical}0"),
            canonical[1..].to_owned(),
        ];
        for at in 0..canonical.len() {
            for byte in [b'0', b'9', b'a', b'f', b'g', b'A', b'F', b'-', b' ', b'{'] {
                let mut bytes = canonical.as_bytes().to_vec();
                bytes[at] = byte;
                texts.push(String::from_utf8(bytes).expect("ASCII"));
            }
        }
        for text in &texts {
            assert_eq!(
                parse_canonical_uuid(text).ok(),
                by_round_trip(text),
                "{text:?}"
            );
        }
        assert_eq!(
            parse_canonical_uuid(canonical).map(|u| u.to_string()),
            Ok(canonical.to_owned())
        );
    }
}
