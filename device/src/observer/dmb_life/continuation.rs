//! A close that was not the connection's: an old connection's late data and CDC message
//! (docs/known-bugs.md, section 9) that landed while a new one used the DMB, and passed
//! the cursor test because the late data moves came first. The host takes that CDC
//! message as the open connection's close, and only learns better when the connection
//! writes on: its next CDC message says it has sent more than one pass of the data ring,
//! which no connection's first message can.
//!
//! A new connection starts with its cursors at 0 and may fill the ring once before the
//! receiver's first consumer-cursor update (net/smc: `peer_rmbe_space` starts at the
//! data area's size), so its first CDC message is at most one data area on. And the
//! closed connection cannot be the writer either: net/smc keeps `peer_conn_closed` and
//! `peer_conn_abort` set in every CDC message after its close.

use super::{DmbLife, Moved, Pending, Tracker};
use crate::observer::cursor::{cdc_count, cdc_position, data_area, Cursor};
use crate::observer::summary::ConnState;
use crate::observer::{ObservedEvent, What, FOUND_CONTINUATION};
use crate::util::ratelimit::guest_log;

/// The open connection's last close, kept until a new connection opens the DMB: what to
/// give back should the connection turn out to go on.
#[derive(Clone, Debug)]
pub(super) struct LastClose {
    /// The connection's cursor before the closing CDC message.
    pub(super) cursor: Cursor,
    /// The closing message's producer count and connection-state byte.
    pub(super) seen: u64,
    pub(super) conn_state: u8,
    /// Data moves between the connection's CDC message before it and the close.
    pub(super) moved: Moved,
}

/// Whether `data`, a CDC message without close flags into a DMB of `dmb_len` bytes that
/// has been closed since `close`, continues the closed connection: it is past one data
/// area, and its cursor is where the connection's last CDC message or a data move since
/// (before the close or after it: `pending`) put it. `zeroed`: the owner was seen to zero
/// the DMB since the close, so its kernel released the DMB and the close was real to it.
pub(super) fn continues(
    close: &LastClose,
    zeroed: bool,
    dmb_len: u32,
    data: &[u8],
    pending: Option<&Pending>,
) -> bool {
    let Some(area) = data_area(dmb_len) else {
        return false;
    };
    if zeroed || cdc_position(data, area) <= area {
        return false;
    }
    let seen = cdc_count(data);
    close.cursor.accepts(seen) || pending.is_some_and(|p| p.cursor.moved_to(seen))
}

impl Tracker {
    /// `close` was another connection's CDC message: the connection it closed in the host's
    /// view goes on, with the moves since (`pending`) as its own; the message that starts
    /// again is announced by `after_move`. No connection opens and nothing is reused.
    pub(super) fn reopened(
        life: &mut DmbLife,
        close: LastClose,
        pending: Option<Pending>,
    ) -> ObservedEvent {
        let expected = close.cursor.announced();
        life.cursor = close.cursor;
        let mut bytes = 0;
        if let Some(p) = &pending {
            life.cursor.append(&p.cursor);
            bytes = p.bytes;
        }
        // The zeroing watch starts again at the connection's next close.
        life.closed_us = None;
        life.watch_done = false;
        life.scan_from = 0;
        life.dirty_at = None;
        let gave_up = life.current().is_some_and(|record| {
            record.closed_us = None;
            record.how = None;
            record.bytes += bytes;
            std::mem::take(&mut record.not_zeroed)
        });
        let s = &mut life.summary;
        s.state = ConnState::Open;
        s.closes = s.closes.saturating_sub(1);
        s.not_zeroed = s.not_zeroed.saturating_sub(u64::from(gave_up));
        s.foreign_cdcs += 1;
        guest_log!(
            Warn, s.function, s.gid,
            "DMB {:#x}: connection {} wrote on past one pass of the data ring, so the CDC message that closed it (producer cursor at {}, state {:#04x}, after {} data moves) was another connection's",
            s.token, s.connections, close.seen, close.conn_state, close.moved.moves
        );
        s.event(What::ForeignCdc {
            conn: s.connections,
            expected,
            seen: close.seen,
            conn_state: close.conn_state,
            found: Some(FOUND_CONTINUATION.to_string()),
            late_moves: Some(close.moved.moves),
            late_bytes: Some(close.moved.bytes),
        })
    }
}
