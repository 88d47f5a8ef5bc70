//! JSON text this store wrote, read back (issue 33): one parser for every stored JSON column.

use serde::de::DeserializeOwned;

/// Parses stored JSON without serde_json's recursion limit: the text was serialized by this
/// store from a value core had already bounded (SPEC §4.2 caps argument depth at 128, and a
/// checkpoint nests arguments a few levels deeper), so the default limit of 128 would reject
/// rows the store itself wrote.
pub(super) fn from_json<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    deserializer.disable_recursion_limit();
    let value = T::deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}
