//! The fabric's event seam: the [`EventSink`] it reports to under its lock (the observer,
//! above the fabric, implements it), and the types the two speak: what the fabric reads
//! of guest memory for it outside the lock (the check of a reused DMB before its first
//! move, the zeroing watch's looks at closed DMBs). The trace records the same types.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::dmb::Dmb;
use crate::fault::Fired;
use crate::ism::MoveAddress;

pub use super::late_writes::{Kept, LateWrites};

/// What the fabric reports, under its lock, as functions and DMBs come and go and data
/// moves. The observer implements it; the fabric knows only this trait.
pub trait EventSink: Send + Sync {
    fn function_attached(&self, function: &str, gid: u64);
    fn function_detached(&self, function: &str, gid: u64, reason: &str);
    fn dmb_registered(&self, dmb: &Dmb, function: &str);
    fn dmb_gone(&self, dmb: &Dmb, reason: &str, function: &str);
    /// Whether this move would start a new connection on a closed DMB. If so, the fabric
    /// reads the DMB before applying the move (outside its lock) and passes the result
    /// to `moved`.
    fn wants_reuse_check(&self, dmb: &Dmb, addr: &MoveAddress, data: &[u8]) -> bool;
    /// A move has been applied (rejected moves are not reported). `reuse` is the DMB's
    /// content before it, when `wants_reuse_check` asked for it.
    fn moved(&self, dmb: &Dmb, addr: &MoveAddress, data: &[u8], reuse: Option<ReuseCheck>);
    /// The closed DMBs to look at for zeroing, the longest-unlooked-at first.
    fn zero_watch(&self) -> Vec<ZeroWatch>;
    /// What the watcher found; returns how many DMBs are still watched.
    fn zero_scanned(&self, results: &[(u64, ZeroScan)]) -> usize;
    /// An injected fault fired at `function` (about DMB `token`, if one).
    fn fault_injected(&self, function: &str, gid: u64, token: Option<u64>, fired: &Fired);
    /// The function's VLAN table or its VLAN-required flag changed (a command that
    /// changed nothing, or failed, is not reported).
    fn vlan_changed(&self, function: &str, gid: u64, change: VlanChange);
}

/// A change of a function's VLAN state, by ADD_VLAN_ID, DEL_VLAN_ID, SET_VLAN or
/// RESET_VLAN. The ID is the command's 64-bit field as the guest stored it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VlanChange {
    Added(u64),
    Deleted(u64),
    Required(bool),
}

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

/// Builds [`Unread`] and its texts from one list, so that `ALL` cannot miss a reason.
macro_rules! unread {
    ($($(#[doc = $doc:literal])* $variant:ident => $text:literal,)*) => {
        /// Why a reuse check went unread. Its text is what events, snapshots and traces
        /// carry.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Unread {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Unread {
            const ALL: &[Unread] = &[$(Unread::$variant,)*];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Unread::$variant => $text,)*
                }
            }
        }
    };
}

unread! {
    /// The fabric's byte budget for reuse checks was spent.
    OverBudget => "over the read budget",
    /// Part of the DMB is not mapped for DMA.
    NotAllMapped => "DMB not all mapped",
    /// The read failed.
    Unreadable => "unreadable",
    /// Nobody read it (the check was not asked for in time).
    NotRead => "not read",
    /// A reason this version does not know (from a file written by another).
    Other => "unknown",
}

impl Unread {
    /// The reason with this text (a recorded trace's), or [`Unread::Other`].
    pub fn from_text(text: &str) -> Self {
        Self::ALL
            .iter()
            .copied()
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

/// A closed DMB to look at: scan from `scan_from`, or first look at `dirty_at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZeroWatch {
    pub token: u64,
    pub scan_from: u64,
    pub dirty_at: Option<u64>,
    /// What the closed connection's peer wrote into the DMB since the close, once its
    /// CDC message said the writes were the old connection's. A DMB that holds nothing
    /// but zeros and those bytes was zeroed by its owner, and they landed behind the
    /// zeroing ([`ZeroScan::ZeroButLate`]).
    pub late: Option<Arc<LateWrites>>,
}

/// What one look at a watched DMB found; also the trace's record of it (`"zero"`,
/// `{"zero_but_late":{"cdc":B,"bytes":N}}`, `{"dirty":OFF}`, `{"zero_up_to":OFF}`,
/// `"unreadable"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZeroScan {
    /// All zero from `scan_from` to the end: zeroed.
    Zero,
    /// Zeroed, but for bytes the closed connection's late writes put there, each the
    /// late byte of its offset: the owner zeroed the whole DMB (the data the old
    /// connection left is gone) and those writes came in behind the zeroing.
    ZeroButLate(Kept),
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
        for &reason in Unread::ALL {
            assert_eq!(Unread::from_text(reason.as_str()), reason);
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(serde_json::from_str::<Unread>(&json).unwrap(), reason);
        }
        assert_eq!(Unread::from_text("cosmic rays"), Unread::Other);
        assert_eq!(Unread::OverBudget.to_string(), "over the read budget");
    }
}
