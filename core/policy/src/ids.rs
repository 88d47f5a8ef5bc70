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
pub fn parse_canonical_uuid(text: &str) -> Result<Uuid, IdSyntaxError> {
    Uuid::parse_str(text)
        .ok()
        .filter(|uuid| {
            let mut buffer = Uuid::encode_buffer();
            uuid.hyphenated().encode_lower(&mut buffer) == text
        })
        .ok_or_else(|| IdSyntaxError(text.to_owned()))
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
