//! JSON helpers for the event stream and the snapshot: 64-bit identifiers (GIDs, tokens,
//! IOVAs) as `0x` hex strings, because JSON numbers above 2^53 lose precision in many
//! consumers, and GIDs and tokens read better in hex anyway.

/// Serde for a `u64` as a `0x` hex string.
pub mod hex {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{value:#x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        parse(&String::deserialize(d)?).map_err(D::Error::custom)
    }

    pub(super) fn parse(text: &str) -> Result<u64, crate::util::hex::HexError> {
        crate::util::hex::parse_u64(text)
    }
}

/// Serde for an `Option<u64>` as a `0x` hex string or null.
pub mod hex_opt {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => s.serialize_some(&format!("{v:#x}")),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| super::hex::parse(&text).map_err(D::Error::custom))
            .transpose()
    }
}

/// Serde for the CHID: four hex digits (`"0x1234"`).
pub mod chid {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &u16, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{value:#06x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
        let value = super::hex::parse(&String::deserialize(d)?).map_err(D::Error::custom)?;
        u16::try_from(value).map_err(D::Error::custom)
    }
}

/// Serde for a GID: always 16 hex digits (`"0x00420049534d0001"`), as the log prints it,
/// so that one GID is the same string in the log, the tables and the JSON. Reads any
/// `0x` hex number (files written before GIDs were padded).
pub mod gid {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{value:#018x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        super::hex::parse(&String::deserialize(d)?).map_err(D::Error::custom)
    }
}
