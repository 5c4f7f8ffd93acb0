//! The one place where hex is read and written: `0x` numbers (CHIDs, GIDs, tokens, IOVAs
//! on the command line, in fault rules and in JSON) and the hex text of recorded bytes.

use std::fmt;

/// Why a text is not the number asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HexError {
    /// No `0x` prefix where one is required.
    NoPrefix(String),
    /// Not a number of this width (bad digit, empty, too large).
    Invalid { text: String, why: String },
}

impl fmt::Display for HexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HexError::NoPrefix(text) => write!(f, "{text:?} is not a 0x hex number"),
            HexError::Invalid { text, why } => write!(f, "{text:?}: {why}"),
        }
    }
}

impl std::error::Error for HexError {}

impl HexError {
    /// The reason alone, for messages that already quote the text.
    pub fn why(&self) -> String {
        match self {
            HexError::NoPrefix(_) => "not a 0x hex number".into(),
            HexError::Invalid { why, .. } => why.clone(),
        }
    }
}

fn digits(text: &str) -> Option<&str> {
    text.strip_prefix("0x").or_else(|| text.strip_prefix("0X"))
}

/// A `0x` hex number (`0x` or `0X`; the prefix is required).
pub fn parse_u64(text: &str) -> Result<u64, HexError> {
    let hex = digits(text).ok_or_else(|| HexError::NoPrefix(text.to_string()))?;
    u64::from_str_radix(hex, 16).map_err(|e| HexError::Invalid {
        text: text.to_string(),
        why: e.to_string(),
    })
}

/// A `0x` hex number that fits in 16 bits (a CHID).
pub fn parse_u16(text: &str) -> Result<u16, HexError> {
    let value = parse_u64(text)?;
    u16::try_from(value).map_err(|e| HexError::Invalid {
        text: text.to_string(),
        why: e.to_string(),
    })
}

/// A number written either way: `0x` hex, or decimal without a prefix (fault rules,
/// where counts are decimal and tokens hex).
pub fn parse_number(text: &str) -> Result<u64, HexError> {
    match digits(text) {
        Some(_) => parse_u64(text),
        None => text
            .parse()
            .map_err(|e: std::num::ParseIntError| HexError::Invalid {
                text: text.to_string(),
                why: e.to_string(),
            }),
    }
}

/// Lower-case hex of `data`, into one allocation (a recorded 4 KiB move is 8 KiB of
/// text; a `format!` per byte made 4,096 small strings of it).
pub fn to_hex(data: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(data.len() * 2);
    for b in data {
        text.push(char::from(DIGITS[usize::from(b >> 4)]));
        text.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    text
}

/// The bytes of a hex string (`None` if it is not one).
pub fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_need_their_prefix_and_fit_their_width() {
        assert_eq!(parse_u64("0x1f"), Ok(0x1f));
        assert_eq!(parse_u64("0X1F"), Ok(0x1f));
        assert!(matches!(parse_u64("31"), Err(HexError::NoPrefix(_))));
        assert!(matches!(parse_u64("0x"), Err(HexError::Invalid { .. })));
        assert!(matches!(parse_u64("0xg"), Err(HexError::Invalid { .. })));
        assert!(parse_u64("0x1_0000_0000_0000_0000").is_err());
        assert_eq!(parse_u16("0xffff"), Ok(0xffff));
        assert!(parse_u16("0x10000").is_err());
        assert_eq!(parse_number("31"), Ok(31));
        assert_eq!(parse_number("0x1f"), Ok(31));
        assert!(parse_number("1f").is_err());
    }

    #[test]
    fn bytes_round_trip() {
        assert_eq!(to_hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(
            from_hex(&to_hex(&[0, 1, 0xfe, 0xff])),
            Some(vec![0, 1, 0xfe, 0xff])
        );
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
    }
}
