//! Reading JSON strings in place. Every wire enum, target kind and timestamp is parsed from the
//! text the deserializer already holds, and the borrowed action keeps its strings as slices of
//! the input, so reading an action allocates only for what it keeps and cannot borrow.
//!
//! The visitors expect "a string", as `String`'s own does, so a value of the wrong type is
//! reported with the same words as before.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, Error, Visitor};

/// Deserializes a string field through `parse` without an owned copy of the text.
pub fn deserialize_parsed<'de, D, T, E>(
    d: D,
    parse: impl FnOnce(&str) -> Result<T, E>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    E: fmt::Display,
{
    struct Parsed<F, T>(F, PhantomData<T>);
    impl<T, E: fmt::Display, F: FnOnce(&str) -> Result<T, E>> Visitor<'_> for Parsed<F, T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<Er: Error>(self, text: &str) -> Result<T, Er> {
            (self.0)(text).map_err(Er::custom)
        }
    }
    d.deserialize_str(Parsed(parse, PhantomData))
}

/// A string of the input, borrowed when it has no escape sequence and owned when unescaping
/// had to build it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct WireStr<'a>(pub Cow<'a, str>);

impl WireStr<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_owned(self) -> String {
        self.0.into_owned()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for WireStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct InPlace;
        impl<'de> Visitor<'de> for InPlace {
            type Value = WireStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: Error>(self, text: &'de str) -> Result<WireStr<'de>, E> {
                Ok(WireStr(Cow::Borrowed(text)))
            }
            fn visit_str<E: Error>(self, text: &str) -> Result<WireStr<'de>, E> {
                Ok(WireStr(Cow::Owned(text.to_owned())))
            }
            fn visit_string<E: Error>(self, text: String) -> Result<WireStr<'de>, E> {
                Ok(WireStr(Cow::Owned(text)))
            }
        }
        d.deserialize_str(InPlace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_strings_are_borrowed_and_escaped_ones_owned() {
        let plain: WireStr = serde_json::from_str(r#""abc""#).expect("a string");
        assert!(matches!(plain.0, Cow::Borrowed("abc")));
        let escaped: WireStr = serde_json::from_str(r#""a\nb""#).expect("a string");
        assert!(matches!(escaped.0, Cow::Owned(ref s) if s == "a\nb"));
    }

    #[test]
    fn a_wrong_type_is_reported_as_string_reports_it() {
        let ours = serde_json::from_str::<WireStr>("5")
            .map(|_| ())
            .unwrap_err();
        let strings = serde_json::from_str::<String>("5").map(|_| ()).unwrap_err();
        assert_eq!(ours.to_string(), strings.to_string());
        let parsed = deserialize_parsed(&mut serde_json::Deserializer::from_str("[1]"), |s| {
            s.parse::<u8>()
        })
        .unwrap_err();
        let strings = serde_json::from_str::<String>("[1]")
            .map(|_| ())
            .unwrap_err();
        assert_eq!(parsed.to_string(), strings.to_string());
    }
}
