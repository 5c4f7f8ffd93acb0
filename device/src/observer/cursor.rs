//! Reading a connection's CDC messages as the host sees them go into a DMB: which move is
//! a CDC message, whether it closes, and where the sender's producer cursor may point
//! (the `Cursor` a DMB's open connection keeps in `dmb_life`).

use crate::ism::{cdc, MoveAddress};

/// The size of a DMB's data area (after the CDC message); None for a DMB with none.
pub(super) fn data_area(dmb_len: u32) -> Option<u64> {
    u64::from(dmb_len)
        .checked_sub(cdc::LEN as u64)
        .filter(|&a| a > 0)
}

/// Where a CDC message's producer cursor says the sender's data ends: its count, an
/// offset into the data area (the wrap only counts passes over it).
pub(super) fn cdc_count(data: &[u8]) -> u64 {
    u64::from(cdc::prod_count(data))
}

/// How far a CDC message's producer cursor says its sender has written since its
/// connection began: `wrap` passes over a data area of `area` bytes, and `count` more.
/// A connection's first CDC message is at most one data area (see `dmb_life`).
pub(super) fn cdc_position(data: &[u8], area: u64) -> u64 {
    u64::from(cdc::prod_wrap(data)) * area + cdc_count(data)
}

/// Where a data move at `addr` ends in the data area of a DMB of `dmb_len` bytes, if it
/// lies in it.
pub(super) fn data_end(addr: &MoveAddress, len: usize, dmb_len: u32) -> Option<u64> {
    let area = data_area(dmb_len)?;
    let start = u64::from(addr.offset).checked_sub(cdc::LEN as u64)?;
    Some((start + len as u64) % area)
}

pub(super) fn is_cdc(addr: &MoveAddress, data: &[u8]) -> bool {
    addr.offset == 0 && addr.signal && data.len() >= cdc::LEN && data[0] == cdc::TYPE
}

pub(super) fn closing_flags(data: &[u8]) -> u8 {
    data[cdc::CONN_STATE] & (cdc::PEER_CONN_CLOSED | cdc::PEER_CONN_ABORT)
}

/// Whether a move into a closed DMB may start a new connection: anything but a CDC that
/// still carries the close flags (the closing side repeats them).
pub(super) fn may_open_connection(addr: &MoveAddress, data: &[u8]) -> bool {
    !(is_cdc(addr, data) && closing_flags(data) != 0)
}

/// Where a connection's next CDC message may put its producer cursor: where its last
/// CDC message put it, or where one of the data moves since then ended. After a failed
/// write the sender does not announce what landed of it, and writes it again from the
/// cursor it had; without a failure the last move's end is the one.
#[derive(Clone, Debug, Default)]
pub(super) struct Cursor {
    announced: u64,
    ends: Vec<u64>,
    /// More data moves since the last CDC than `ends` keeps: the next CDC is not judged.
    overflow: bool,
}

/// How many data-move ends a [`Cursor`] keeps (a 1 MiB DMB written twice over in 4 KiB
/// moves), so that a peer that never sends a CDC cannot grow it.
const CURSOR_ENDS: usize = 512;

impl Cursor {
    pub(super) fn data_moved(&mut self, end: u64) {
        if self.ends.len() < CURSOR_ENDS {
            self.ends.push(end);
        } else {
            self.overflow = true;
        }
    }

    /// Whether a CDC message with producer count `seen` can be this connection's.
    pub(super) fn accepts(&self, seen: u64) -> bool {
        seen == self.announced || self.moved_to(seen)
    }

    /// Whether one of the data moves since the last CDC message ended at `seen` (or more
    /// moved than are kept, so that it may have).
    pub(super) fn moved_to(&self, seen: u64) -> bool {
        self.overflow || self.ends.contains(&seen)
    }

    /// Whether a CDC message with producer count `seen` can be this connection's;
    /// if so it is the new announced position.
    pub(super) fn announce(&mut self, seen: u64) -> bool {
        let ours = self.accepts(seen);
        if ours {
            // Cleared, not replaced: the moves' path allocates nothing per message.
            self.announced = seen;
            self.ends.clear();
            self.overflow = false;
        }
        ours
    }

    /// The data moves of `later`, which came after this cursor's, as this connection's:
    /// a connection the host held closed for a while is given back its moves since.
    pub(super) fn append(&mut self, later: &Cursor) {
        for &end in &later.ends {
            self.data_moved(end);
        }
        self.overflow |= later.overflow;
    }

    /// Where the connection's last CDC message put its producer count.
    pub(super) fn announced(&self) -> u64 {
        self.announced
    }

    /// Where the connection's data ends as far as the host saw it.
    pub(super) fn expected(&self) -> u64 {
        self.ends.last().copied().unwrap_or(self.announced)
    }
}
