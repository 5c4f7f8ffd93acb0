//! What the fabric reads of guest memory for the observer, outside its lock: the check of
//! a reused DMB before its first move, and the zeroing watch's looks at closed DMBs.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The DMB's content before the first move of a reused connection. Also the trace's
/// record of it (`{"read":{"stale":N,"first":OFF}}`, `{"unknown":"why"}`): one type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReuseCheck {
    /// Read: `stale` nonzero bytes, the first at `first`.
    Read { stale: u64, first: Option<u64> },
    /// Not read, and why.
    Unknown(Unread),
}

/// Why a reuse check went unread. Its text is what events, snapshots and traces carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unread {
    /// The fabric's byte budget for reuse checks was spent.
    OverBudget,
    /// Part of the DMB is not mapped for DMA.
    NotAllMapped,
    /// The read failed.
    Unreadable,
    /// Nobody read it (the check was not asked for in time).
    NotRead,
    /// A reason this version does not know (from a file written by another).
    Other,
}

impl Unread {
    const ALL: [Unread; 5] = [
        Unread::OverBudget,
        Unread::NotAllMapped,
        Unread::Unreadable,
        Unread::NotRead,
        Unread::Other,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Unread::OverBudget => "over the read budget",
            Unread::NotAllMapped => "DMB not all mapped",
            Unread::Unreadable => "unreadable",
            Unread::NotRead => "not read",
            Unread::Other => "unknown",
        }
    }

    /// The reason with this text (a recorded trace's), or [`Unread::Other`].
    pub fn from_text(text: &str) -> Self {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == text)
            .unwrap_or(Unread::Other)
    }
}

impl fmt::Display for Unread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Unread {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Unread {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self::from_text(&String::deserialize(d)?))
    }
}

impl ReuseCheck {
    /// The reason with this text (a recorded trace's); see [`Unread::from_text`].
    pub fn reason(text: &str) -> Unread {
        Unread::from_text(text)
    }
}

/// A closed DMB to look at: scan from `scan_from`, or first look at `dirty_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZeroWatch {
    pub token: u64,
    pub scan_from: u64,
    pub dirty_at: Option<u64>,
}

/// What one look at a watched DMB found; also the trace's record of it (`"zero"`,
/// `{"dirty":OFF}`, `{"zero_up_to":OFF}`, `"unreadable"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZeroScan {
    /// All zero from `scan_from` to the end: zeroed.
    Zero,
    /// The byte at this offset is nonzero.
    Dirty(u64),
    /// Zero from `scan_from` up to this offset; the rest next time.
    ZeroUpTo(u64),
    /// The memory could not be read (unmapped): counts as not zero.
    Unreadable,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unread_reasons_read_back_from_their_text() {
        for reason in Unread::ALL {
            assert_eq!(Unread::from_text(reason.as_str()), reason);
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(serde_json::from_str::<Unread>(&json).unwrap(), reason);
        }
        assert_eq!(ReuseCheck::reason("cosmic rays"), Unread::Other);
        assert_eq!(Unread::OverBudget.to_string(), "over the read budget");
    }
}
