//! Serde helper: byte strings as lowercase hex in JSON documents.

use serde::{Deserialize, Deserializer, Serializer};

/// Serializes bytes as hex.
pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(bytes))
}

/// Deserializes hex into bytes.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let s = String::deserialize(d)?;
    hex::decode(s).map_err(serde::de::Error::custom)
}

/// The same for optional byte strings.
pub mod option {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes optional bytes as hex or null.
    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => s.serialize_some(&hex::encode(b)),
            None => s.serialize_none(),
        }
    }

    /// Deserializes hex or null.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| hex::decode(s).map_err(serde::de::Error::custom))
            .transpose()
    }
}
