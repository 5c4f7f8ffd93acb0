//! The life of every DMB as seen from the device: registration, the connections that use
//! it, their close, the owner zeroing it, and reuse by the next connection.
//!
//! A DMB receives the CDC messages of one direction of one connection at a time: the peer
//! writes its 32-byte CDC at offset 0 with the signal flag after each send. The state of a
//! DMB therefore follows the peer's CDCs:
//!
//! ```text
//!   registered --first move--> open --CDC with closed/abort flag--> closed
//!       closed --owner's memory all zero--> closed (zeroed at release, delay recorded)
//!       closed --first move of a new connection--> open (a reuse: clean or stale?)
//! ```
//!
//! A closed connection's peer may still write: after an abort the kernel keeps sending on
//! the old connection (more data, then a CDC that repeats the abort flag), and its own
//! close writes one more CDC, possibly after the owner released the DMB. So a move into a
//! closed DMB only *may* start a new connection, and the peer's next CDC decides:
//!
//! ```text
//!   closed --data move--> closed, pending (the reuse check is taken before it lands)
//!   closed[, pending] --CDC without close flags--> open (a reuse: pending's check)
//!   closed[, pending] --CDC with close flags--> closed (a late write of the old
//!                                               connection: no reuse; `late_write`)
//! ```
//!
//! A new connection's first CDC never carries the close flags (it is the CDC of its
//! first send), and the flags stay set in every CDC an aborted or closed connection
//! sends afterwards (net/smc keeps them in `local_tx_ctrl`). Nor is a new connection's
//! first CDC more than one pass of the data ring on; one that is continues the closed
//! connection, whose close was another connection's CDC message (see `continuation`):
//!
//! ```text
//!   closed[, pending] --CDC without close flags, past one ring--> open again (no reuse;
//!                                               `foreign_cdc` found as a continuation)
//! ```
//!
//! The reuse check reads the whole DMB *before* the first move that may start a
//! connection is applied; the fabric does the reading, outside its lock and within a byte
//! budget, and hands the result in ([`ReuseCheck`]). A read that did not happen is an
//! *unknown* reuse, never a clean one.
//!
//! The zeroing watch resumes where it stopped: bytes up to `scan_from` were seen zero, and
//! a byte seen nonzero is looked at first next time (one page, not the whole DMB, while a
//! guest keeps it dirty).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

mod continuation;
mod zero_watch;

use continuation::{continues, LastClose};

use super::cursor::{
    cdc_count, closing_flags, data_area, data_end, is_cdc, may_open_connection, Cursor,
};
use super::summary::{ConnRecord, ConnState, DmbSummary, RECENT_CONNS};
use super::{ObservedEvent, What};
use crate::dmb::{now_us, Dmb};
use crate::fabric::{Kept, LateWrites, ReuseCheck, Unread};
use crate::ism::{cdc, MoveAddress};
use crate::util::histogram::DelayHistogram;
use crate::util::ratelimit::guest_log;

#[derive(Clone, Debug)]
pub struct DmbLife {
    summary: DmbSummary,
    /// When the last connection closed (`now_us`).
    closed_us: Option<u64>,
    /// Zeroing was seen after the close, or the watch gave up.
    watch_done: bool,
    scan_from: u64,
    dirty_at: Option<u64>,
    /// The watch tick that last looked at this DMB.
    looked_at: u64,
    /// Moves into the closed DMB that the peer's next CDC will tell apart: the start of
    /// a new connection or the old one's late writes.
    pending: Option<Pending>,
    /// The open connection's producer cursor, as far as the host can follow it.
    cursor: Cursor,
    /// The open connection's data moves since its last CDC message.
    since_cdc: Moved,
    /// Closed: what the close took, should the connection turn out to go on.
    last_close: Option<LastClose>,
    /// Closed, zeroing not yet seen: what the old connection's peer wrote since the
    /// close (data and CDC messages its next CDC message owned), byte for byte, for the
    /// watch to recognise behind the owner's zeroing. Shared with the watch's look.
    late: Option<Arc<LateWrites>>,
}

/// Data moves counted: how many, and their bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Moved {
    moves: u64,
    bytes: u64,
}

/// Data moves into a closed DMB before the peer's next CDC (see the module's text).
#[derive(Clone, Debug)]
struct Pending {
    since_us: u64,
    /// What the DMB held before the first of them.
    check: ReuseCheck,
    moves: u64,
    bytes: u64,
    /// The cursor a new connection would have after them.
    cursor: Cursor,
    /// The read before one of them found the DMB all zero. When they turn out to be
    /// the old connection's late writes, that was its owner's zeroing at release (the
    /// old connection wrote into the DMB, its closing CDC message at least); when they
    /// start a new connection, it may be zeroing at hand-out (5.10), which the clean
    /// reuse says.
    found_zero: bool,
    /// Their bytes, while the zeroing watch runs: the old connection's late writes if
    /// a CDC message with the close flags follows them (see `DmbLife::late`).
    writes: LateWrites,
}

impl DmbLife {
    fn current(&mut self) -> Option<&mut ConnRecord> {
        self.summary.recent.last_mut()
    }
}

#[derive(Default)]
pub struct Tracker {
    /// By token; unregistered DMBs stay listed (a token is only reused after a full
    /// rotation) until a new registration of the same token replaces them.
    dmbs: BTreeMap<u64, DmbLife>,
    /// Zeroing-watch ticks so far.
    tick: u64,
}

/// The time since `then` (both `now_us`), zero if there was none.
fn since(then: Option<u64>) -> Duration {
    then.map_or(Duration::ZERO, |t| {
        Duration::from_micros(now_us().saturating_sub(t))
    })
}

impl Tracker {
    pub fn register(&mut self, dmb: &Dmb, function: &str) {
        self.dmbs.insert(
            dmb.token,
            DmbLife {
                summary: DmbSummary {
                    function: function.to_string(),
                    gid: dmb.owner_gid,
                    token: dmb.token,
                    rgid: dmb.rgid,
                    len: dmb.len,
                    sba_idx: dmb.sba_idx,
                    registered: true,
                    state: ConnState::Fresh,
                    connections: 0,
                    reuses: 0,
                    clean_reuses: 0,
                    stale_reuses: 0,
                    unchecked_reuses: 0,
                    closes: 0,
                    zeroed_after_close: 0,
                    not_zeroed: 0,
                    zero_delays_ms: DelayHistogram::default(),
                    bytes: 0,
                    signals: 0,
                    late_writes: 0,
                    late_writes_after_zeroed: 0,
                    foreign_cdcs: 0,
                    recent: Vec::new(),
                },
                closed_us: None,
                watch_done: false,
                scan_from: 0,
                dirty_at: None,
                looked_at: 0,
                pending: None,
                cursor: Cursor::default(),
                since_cdc: Moved::default(),
                last_close: None,
                late: None,
            },
        );
    }

    pub fn unregister(&mut self, dmb: &Dmb, reason: &str, function: &str) -> Vec<ObservedEvent> {
        let connections = self.dmbs.get_mut(&dmb.token).map_or(0, |life| {
            life.summary.registered = false;
            life.summary.connections
        });
        let reason = reason.to_string();
        let what = What::DmbUnregistered {
            reason,
            connections,
        };
        vec![ObservedEvent::dmb(function, dmb.owner_gid, dmb.token, what)]
    }

    /// Whether the DMB's content should be read before `data` lands at `addr`, a move
    /// into a closed DMB: when it may be the first move of a new connection (the first
    /// since the close that is not a late CDC of the old one), and before every move
    /// while the zeroing watch has not seen the owner zero the DMB. The watch looks every
    /// few milliseconds; a late write of the old connection that follows the owner's
    /// zeroing closely leaves the DMB never all zero at any of its looks, and only the
    /// read before that write tells that it landed in a buffer already zeroed.
    pub fn wants_reuse_check(&self, dmb: &Dmb, addr: &MoveAddress, data: &[u8]) -> bool {
        self.dmbs.get(&dmb.token).is_some_and(|life| {
            life.summary.state == ConnState::Closed
                && ((life.pending.is_none() && may_open_connection(addr, data)) || !life.watch_done)
        })
    }

    /// A move into `dmb` was applied; `reuse` is what the DMB held before it, when
    /// [`Self::wants_reuse_check`] asked.
    pub fn moved(
        &mut self,
        dmb: &Dmb,
        addr: &MoveAddress,
        data: &[u8],
        reuse: Option<ReuseCheck>,
    ) -> Vec<ObservedEvent> {
        let mut events = self.opened(dmb, addr, data, reuse);
        events.extend(self.after_move(dmb, addr, data));
        events
    }

    /// The connection this move starts, if it starts one; into a closed DMB, what the
    /// peer's CDC decides about the moves since the close.
    fn opened(
        &mut self,
        dmb: &Dmb,
        addr: &MoveAddress,
        data: &[u8],
        reuse: Option<ReuseCheck>,
    ) -> Vec<ObservedEvent> {
        let Some(life) = self.dmbs.get_mut(&dmb.token) else {
            return Vec::new();
        };
        let reuse = match life.summary.state {
            ConnState::Open => return Vec::new(),
            ConnState::Fresh => {
                life.cursor = Cursor::default();
                None
            }
            ConnState::Closed => {
                let check = reuse.unwrap_or(ReuseCheck::Unknown(Unread::NotRead));
                let found_zero = matches!(check, ReuseCheck::Read { stale: 0, .. });
                if !is_cdc(addr, data) {
                    // Not yet known whose: the peer's next CDC tells.
                    let watching = !life.watch_done;
                    let pending = life.pending.get_or_insert(Pending {
                        since_us: now_us(),
                        check,
                        moves: 0,
                        bytes: 0,
                        cursor: Cursor::default(),
                        found_zero: false,
                        writes: LateWrites::default(),
                    });
                    if watching {
                        pending.writes.record(addr.offset, data);
                    }
                    pending.found_zero |= found_zero;
                    pending.moves += 1;
                    pending.bytes += data.len() as u64;
                    if let Some(end) = data_end(addr, data.len(), dmb.len) {
                        pending.cursor.data_moved(end);
                    }
                    return Vec::new();
                }
                let pending = life.pending.take();
                if closing_flags(data) != 0 {
                    let zeroed = found_zero || pending.as_ref().is_some_and(|p| p.found_zero);
                    let mut events = Vec::new();
                    if zeroed && !life.watch_done {
                        events.push(Self::zeroing_seen(life, Kept::default()));
                    }
                    // for the watch, which stops once it has seen the zeroing
                    if !life.watch_done {
                        let late = Arc::make_mut(life.late.get_or_insert_default());
                        if let Some(p) = &pending {
                            late.extend(&p.writes);
                        }
                        late.record(addr.offset, data);
                    }
                    events.push(Self::late_write(life, pending));
                    return events;
                }
                let zeroed = found_zero
                    || pending.as_ref().is_some_and(|p| p.found_zero)
                    || life.current().is_some_and(|r| r.zeroed_after_ms.is_some());
                let continued = life
                    .last_close
                    .take_if(|close| continues(close, zeroed, dmb.len, data, pending.as_ref()));
                if let Some(close) = continued {
                    return vec![Self::reopened(life, close, pending)];
                }
                let (since_us, check, bytes, cursor) = pending
                    .map_or((now_us(), check, 0, Cursor::default()), |p| {
                        (p.since_us, p.check, p.bytes, p.cursor)
                    });
                life.cursor = cursor;
                Some((since_us, check, bytes))
            }
        };
        let mut events = Vec::new();
        let s = &mut life.summary;
        let conn = s.connections + 1;
        let mut record = ConnRecord {
            conn,
            opened_us: now_us(),
            closed_us: None,
            how: None,
            bytes: 0,
            reuse_clean: None,
            reuse_unknown: None,
            stale_bytes: 0,
            zeroed_after_ms: None,
            not_zeroed: false,
        };
        if let Some((since_us, reuse, bytes)) = reuse {
            record.opened_us = since_us;
            record.bytes = bytes;
            s.reuses += 1;
            let what = match reuse {
                ReuseCheck::Read { stale, first } => {
                    record.reuse_clean = Some(stale == 0);
                    record.stale_bytes = stale;
                    if stale == 0 {
                        s.clean_reuses += 1;
                    } else {
                        s.stale_reuses += 1;
                        guest_log!(
                            Warn, s.function, s.gid,
                            "DMB {:#x} reused with {stale} stale bytes from connection {} (first at offset {:#x})",
                            s.token, s.connections, first.unwrap_or(0)
                        );
                    }
                    What::DmbReused {
                        conn,
                        clean: Some(stale == 0),
                        stale_bytes: stale,
                        first_stale_offset: first,
                        unknown: None,
                    }
                }
                ReuseCheck::Unknown(why) => {
                    s.unchecked_reuses += 1;
                    record.reuse_unknown = Some(why.to_string());
                    What::DmbReused {
                        conn,
                        clean: None,
                        stale_bytes: 0,
                        first_stale_offset: None,
                        unknown: Some(why.to_string()),
                    }
                }
            };
            events.push(s.event(what));
        }
        s.connections = conn;
        s.state = ConnState::Open;
        if s.recent.len() == RECENT_CONNS {
            s.recent.remove(0);
        }
        s.recent.push(record);
        life.closed_us = None;
        life.watch_done = false;
        life.last_close = None;
        life.late = None;
        events.push(s.event(What::ConnOpened { rgid: s.rgid, conn }));
        events
    }

    /// The closed connection's peer wrote again: `pending`'s data moves and a CDC that
    /// repeats the close flags. Written after the owner zeroed the DMB, they are in a
    /// buffer the owner's kernel has already put back in its pool.
    fn late_write(life: &mut DmbLife, pending: Option<Pending>) -> ObservedEvent {
        let (moves, bytes) = pending.map_or((0, 0), |p| (p.moves, p.bytes));
        let after_zeroed = life
            .summary
            .recent
            .last()
            .is_some_and(|r| r.zeroed_after_ms.is_some());
        let s = &mut life.summary;
        s.late_writes += 1;
        s.late_writes_after_zeroed += u64::from(after_zeroed);
        if after_zeroed {
            guest_log!(
                Warn,
                s.function,
                s.gid,
                "DMB {:#x}: the peer of closed connection {} wrote into it after it was zeroed",
                s.token,
                s.connections
            );
        }
        s.event(What::LateWrite {
            conn: s.connections,
            moves: moves + 1,
            bytes,
            after_zeroed,
        })
    }

    /// A CDC message that does not belong to the open connection (see `after_move`).
    /// Its flags are not the connection's: the connection stays open in the host's view,
    /// whatever the owner's kernel makes of the message.
    fn foreign_cdc(life: &mut DmbLife, seen: u64, data: &[u8]) -> ObservedEvent {
        let expected = life.cursor.expected();
        let s = &mut life.summary;
        s.foreign_cdcs += 1;
        guest_log!(
            Warn, s.function, s.gid,
            "DMB {:#x}: a CDC message that is not connection {}'s (its producer cursor is at {seen}, the connection's data ends at {expected})",
            s.token, s.connections
        );
        s.event(What::ForeignCdc {
            conn: s.connections,
            expected,
            seen,
            conn_state: data[cdc::CONN_STATE],
            found: None,
            late_moves: None,
            late_bytes: None,
        })
    }

    fn after_move(&mut self, dmb: &Dmb, addr: &MoveAddress, data: &[u8]) -> Vec<ObservedEvent> {
        let Some(life) = self.dmbs.get_mut(&dmb.token) else {
            return Vec::new();
        };
        life.summary.bytes += data.len() as u64;
        life.summary.signals += u64::from(addr.signal);
        if !is_cdc(addr, data) {
            // Into a closed DMB they are pending's until the peer's next CDC.
            if life.summary.state == ConnState::Open {
                if let Some(end) = data_end(addr, data.len(), dmb.len) {
                    life.cursor.data_moved(end);
                }
                life.since_cdc.moves += 1;
                life.since_cdc.bytes += data.len() as u64;
                if let Some(record) = life.current() {
                    record.bytes += data.len() as u64;
                }
            }
            return Vec::new();
        }
        if life.summary.state != ConnState::Open {
            return Vec::new();
        }
        // A sender writes its data, then the CDC message whose producer cursor says where
        // that data ends. A CDC message whose cursor is anywhere else was written by
        // another connection's sender.
        let seen = cdc_count(data);
        let flags = closing_flags(data);
        // What a close takes, should it turn out to be another connection's.
        let before = (flags != 0).then(|| life.cursor.clone());
        if data_area(dmb.len).is_some() && !life.cursor.announce(seen) {
            return vec![Self::foreign_cdc(life, seen, data)];
        }
        let moved = std::mem::take(&mut life.since_cdc);
        let Some(cursor) = before else {
            return Vec::new();
        };
        life.last_close = Some(LastClose {
            cursor,
            seen,
            conn_state: data[cdc::CONN_STATE],
            moved,
        });
        let how = if flags & cdc::PEER_CONN_ABORT != 0 {
            "abort"
        } else {
            "close"
        };
        let bytes = life.current().map_or(0, |record| {
            record.closed_us = Some(now_us());
            record.how = Some(how.to_string());
            record.bytes
        });
        life.closed_us = Some(now_us());
        life.scan_from = 0;
        life.dirty_at = None;
        life.late = None;
        let s = &mut life.summary;
        s.state = ConnState::Closed;
        s.closes += 1;
        vec![s.event(What::ConnClosed {
            conn: s.connections,
            how: how.to_string(),
            bytes,
        })]
    }

    pub fn summaries(&self) -> Vec<DmbSummary> {
        self.dmbs.values().map(|l| l.summary.clone()).collect()
    }

    /// The tokens known, for a snapshot taken one DMB at a time.
    pub fn tokens(&self) -> Vec<u64> {
        self.dmbs.keys().copied().collect()
    }

    pub fn summary(&self, token: u64) -> Option<DmbSummary> {
        self.dmbs.get(&token).map(|l| l.summary.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::ZeroScan;
    use crate::observer::cursor::cdc_position;
    use crate::observer::FOUND_CONTINUATION;

    fn cdc_msg(conn_state: u8) -> Vec<u8> {
        cdc_at(conn_state, 0)
    }

    /// A CDC message whose producer cursor says `prod` bytes were sent (into a 64 KiB
    /// DMB, whose data area is 65,504 bytes).
    fn cdc_at(conn_state: u8, prod: u64) -> Vec<u8> {
        let prod = cdc::Cursor {
            wrap: u16::try_from(prod / 65504).unwrap(),
            count: u32::try_from(prod % 65504).unwrap(),
        };
        cdc::message(prod, cdc::Cursor::default(), 0, conn_state).to_vec()
    }

    #[test]
    fn only_a_signalled_cdc_at_offset_0_counts_as_cdc() {
        let at0 = MoveAddress {
            token: 1 << 32,
            dmbe: 0,
            signal: true,
            offset: 0,
        };
        let data_move = MoveAddress {
            signal: false,
            offset: 32,
            ..at0
        };
        assert!(is_cdc(&at0, &cdc_msg(0)));
        assert!(!is_cdc(&data_move, &cdc_msg(0)));
        assert!(!is_cdc(&at0, &[0xfe; 8]));
    }

    const TOKEN: u64 = 1 << 32;

    fn dmb() -> Dmb {
        Dmb {
            token: TOKEN,
            owner: 0,
            owner_gid: 1,
            rgid: 2,
            rgid_generation: Some(0),
            iova: 0x10000,
            len: 65536,
            sba_idx: 32,
            vlan_valid: false,
            vlan_id: 0,
            registered_at_us: 0,
        }
    }

    fn cdc_at0() -> MoveAddress {
        MoveAddress {
            token: TOKEN,
            dmbe: 0,
            signal: true,
            offset: 0,
        }
    }

    fn data_at(offset: u32) -> MoveAddress {
        MoveAddress {
            signal: false,
            offset,
            ..cdc_at0()
        }
    }

    /// One move through the tracker as the fabric makes it: the reuse check taken only
    /// where the tracker asks for one (`found` is what the DMB held then).
    fn mv(t: &mut Tracker, addr: MoveAddress, data: &[u8], found: u64) -> Vec<What> {
        let check = t
            .wants_reuse_check(&dmb(), &addr, data)
            .then_some(ReuseCheck::Read {
                stale: found,
                first: (found > 0).then_some(0),
            });
        t.moved(&dmb(), &addr, data, check)
            .into_iter()
            .map(|e| e.what)
            .collect()
    }

    fn zeroed(t: &mut Tracker) {
        let (events, _) = t.zero_scanned(&[(TOKEN, ZeroScan::Zero)]);
        assert!(matches!(
            events[..],
            [ObservedEvent {
                what: What::DmbZeroed { .. },
                ..
            }]
        ));
    }

    fn kinds(whats: &[What]) -> Vec<&'static str> {
        whats
            .iter()
            .map(|w| match w {
                What::ConnOpened { .. } => "opened",
                What::ConnClosed { .. } => "closed",
                What::DmbReused { .. } => "reused",
                What::LateWrite { .. } => "late",
                _ => "other",
            })
            .collect()
    }

    /// The `make faults` move-reject run that reported a 65,267-byte stale reuse
    /// (issue 42, run 6): after the failed write the sender kept sending on the aborted
    /// connection (data, then a CDC that repeats the abort flag), and its close wrote
    /// one more abort CDC after the owner had zeroed the DMB. Neither is a connection;
    /// the next real one finds what that last CDC left.
    #[test]
    fn an_aborted_connections_late_writes_are_not_a_new_connection() {
        let mut t = Tracker::default();
        t.register(&dmb(), "ism0");
        assert_eq!(kinds(&mv(&mut t, data_at(32), &[7; 4096], 0)), ["opened"]);
        assert!(mv(&mut t, cdc_at0(), &cdc_at(0, 4096), 0).is_empty());
        let abort = cdc_at(cdc::PEER_CONN_ABORT, 4096);
        assert_eq!(kinds(&mv(&mut t, cdc_at0(), &abort, 0)), ["closed"]);
        // The old connection's tail, onto its unzeroed bytes: pending until its CDC.
        assert!(mv(&mut t, data_at(4128), &[7; 60000], 65267).is_empty());
        let abort = cdc_at(cdc::PEER_CONN_ABORT, 64096);
        let tail = mv(&mut t, cdc_at0(), &abort, 65267);
        assert_eq!(
            tail,
            [What::LateWrite {
                conn: 1,
                moves: 2,
                bytes: 60000,
                after_zeroed: false
            }]
        );
        zeroed(&mut t);
        // The close's abort CDC, into the buffer the owner had released.
        let late = mv(&mut t, cdc_at0(), &abort, 0);
        assert_eq!(
            late,
            [What::LateWrite {
                conn: 1,
                moves: 1,
                bytes: 0,
                after_zeroed: true
            }]
        );
        // The next connection: its first data move is checked (7 bytes of that CDC
        // still there), its first CDC makes it one.
        assert!(mv(&mut t, data_at(32), &[1; 100], 7).is_empty());
        let opened = mv(&mut t, cdc_at0(), &cdc_at(0, 100), 0);
        assert_eq!(kinds(&opened), ["reused", "opened"]);
        assert!(matches!(
            opened[0],
            What::DmbReused {
                conn: 2,
                clean: Some(false),
                stale_bytes: 7,
                ..
            }
        ));
        let d = t.summary(TOKEN).unwrap();
        assert_eq!((d.connections, d.reuses, d.stale_reuses), (2, 1, 1));
        assert_eq!((d.late_writes, d.late_writes_after_zeroed), (2, 1));
        assert_eq!(
            d.recent[1].bytes, 100,
            "the pending move counts for the new connection"
        );
        assert_eq!(
            d.recent[0].bytes, 4096,
            "the tail is not the old connection's data"
        );
    }

    /// CI's late-write run of stop 46: the owner zeroed its DMB and the old connection's
    /// peer wrote its late CDC before the watch's next look, so no look ever found the
    /// DMB zero. The read before the late CDC finds it zero: that is the zeroing.
    #[test]
    fn a_late_cdc_right_after_the_zeroing_is_after_the_zeroing() {
        let mut t = Tracker::default();
        t.register(&dmb(), "ism0");
        assert_eq!(kinds(&mv(&mut t, data_at(32), &[7; 4096], 0)), ["opened"]);
        let abort = cdc_at(cdc::PEER_CONN_ABORT, 4096);
        assert_eq!(kinds(&mv(&mut t, cdc_at0(), &abort, 0)), ["closed"]);
        // Before the owner zeroes: the DMB still holds the stream (4,128 bytes).
        assert!(t.wants_reuse_check(&dmb(), &cdc_at0(), &abort));
        let early = mv(&mut t, cdc_at0(), &abort, 4128);
        assert!(matches!(
            early[..],
            [What::LateWrite {
                after_zeroed: false,
                ..
            }]
        ));
        // A late data move, read before it lands (the stream still there); the owner
        // zeroes (wiping that move too); its CDC comes before any look of the watch.
        assert!(mv(&mut t, data_at(4128), &[7; 100], 4128).is_empty());
        let late = mv(&mut t, cdc_at0(), &abort, 0);
        assert!(
            matches!(
                late[..],
                [
                    What::DmbZeroed { conn: 1, .. },
                    What::LateWrite {
                        conn: 1,
                        moves: 2,
                        after_zeroed: true,
                        ..
                    }
                ]
            ),
            "{late:?}"
        );
        // Seen once: the watch stops and late CDCs are not read again.
        assert!(t.zero_watch().is_empty());
        assert!(!t.wants_reuse_check(&dmb(), &cdc_at0(), &abort));
        let d = t.summary(TOKEN).unwrap();
        assert_eq!((d.late_writes, d.late_writes_after_zeroed), (2, 1));
        assert_eq!(d.zeroed_after_close, 1);
    }

    /// fault/002 (move-reject) on 7.3.4, CI of stop 59: the read before the late CDC
    /// message found the owner's zeroing under way (16,294 bytes of the stream left),
    /// the message landed behind it, and no look ever found the DMB all zero. The
    /// watch finds it zero but for that message: the zeroing, and a late write after it.
    #[test]
    fn a_late_cdc_that_crossed_the_zeroing_is_after_the_zeroing() {
        let mut t = Tracker::default();
        t.register(&dmb(), "ism0");
        assert_eq!(kinds(&mv(&mut t, data_at(32), &[7; 4096], 0)), ["opened"]);
        let abort = cdc_at(cdc::PEER_CONN_ABORT, 4096);
        assert_eq!(kinds(&mv(&mut t, cdc_at0(), &abort, 0)), ["closed"]);
        assert_eq!(t.zero_watch()[0].late, None, "no late write yet");
        let late = mv(&mut t, cdc_at0(), &abort, 16294);
        assert!(matches!(
            late[..],
            [What::LateWrite {
                after_zeroed: false,
                ..
            }]
        ));
        let watch = t.zero_watch();
        let mut msg = [0u8; 65536];
        msg[..32].copy_from_slice(&abort);
        let nonzero = abort.iter().filter(|&&b| b != 0).count() as u64;
        let cdc_only = Kept {
            cdc: true,
            bytes: nonzero,
        };
        assert_eq!(watch[0].late.as_ref().unwrap().compare(&msg), Ok(cdc_only));
        let (events, pending) = t.zero_scanned(&[(TOKEN, ZeroScan::ZeroButLate(cdc_only))]);
        assert_eq!(pending, 0);
        assert!(
            matches!(
                events[..],
                [ObservedEvent {
                    what: What::DmbZeroed {
                        conn: 1,
                        late_cdc_kept: true,
                        ..
                    },
                    ..
                }]
            ),
            "{events:?}"
        );
        let d = t.summary(TOKEN).unwrap();
        assert_eq!((d.late_writes, d.late_writes_after_zeroed), (1, 1));
        assert_eq!(d.zeroed_after_close, 1);
        // The next connection finds what that message left: 6 nonzero bytes at 0.
        assert!(mv(&mut t, data_at(32), &[1; 48], 6).is_empty());
        let opened = mv(&mut t, cdc_at0(), &cdc_at(0, 48), 6);
        assert_eq!(kinds(&opened), ["reused", "opened"]);
        // A new close forgets the old message.
        mv(&mut t, cdc_at0(), &cdc_at(cdc::PEER_CONN_CLOSED, 48), 0);
        assert_eq!(t.zero_watch()[0].late, None);
    }

    /// fault/010 (late-data) on 6.12.117, CI of stop 60: one of the sender's late
    /// chunks crossed the owner's zeroing, and every chunk after it added to a DMB that
    /// was never all zero again. The watch knows each chunk and CDC message the old
    /// connection's close flags claimed, byte for byte; data not yet claimed is not
    /// among them (it may be a new connection's).
    #[test]
    fn late_data_that_crossed_the_zeroing_is_after_the_zeroing() {
        let mut t = Tracker::default();
        t.register(&dmb(), "ism0");
        assert_eq!(kinds(&mv(&mut t, data_at(32), &[7; 4096], 0)), ["opened"]);
        let abort = cdc_at(cdc::PEER_CONN_ABORT, 4096);
        assert_eq!(kinds(&mv(&mut t, cdc_at0(), &abort, 0)), ["closed"]);
        // A chunk read before it lands with the zeroing under way, then its CDC.
        assert!(mv(&mut t, data_at(4128), &[9; 4096], 2000).is_empty());
        let late = mv(&mut t, cdc_at0(), &cdc_at(cdc::PEER_CONN_ABORT, 8192), 6000);
        assert!(matches!(
            late[..],
            [What::LateWrite {
                after_zeroed: false,
                bytes: 4096,
                ..
            }]
        ));
        // The next chunk, not yet claimed: the watch does not know it.
        assert!(mv(&mut t, data_at(8224), &[5; 100], 6100).is_empty());
        let watch = t.zero_watch();
        let known = watch[0].late.as_ref().unwrap();
        let mut dmb = vec![0u8; 65536];
        dmb[..32].copy_from_slice(&cdc_at(cdc::PEER_CONN_ABORT, 8192));
        dmb[4128..8224].fill(9);
        let cdc_bytes = dmb[..32].iter().filter(|&&b| b != 0).count() as u64;
        let kept = Kept {
            cdc: true,
            bytes: cdc_bytes + 4096,
        };
        assert_eq!(known.compare(&dmb), Ok(kept));
        dmb[8224..8324].fill(5);
        assert_eq!(known.compare(&dmb), Err(8224));
        let (events, _) = t.zero_scanned(&[(TOKEN, ZeroScan::ZeroButLate(kept))]);
        assert!(
            matches!(
                events[..],
                [ObservedEvent {
                    what: What::DmbZeroed {
                        late_cdc_kept: true,
                        late_bytes_kept,
                        ..
                    },
                    ..
                }] if late_bytes_kept == kept.bytes
            ),
            "{events:?}"
        );
        // The claimed chunk's successor is now a late write after the zeroing.
        let late = mv(&mut t, cdc_at0(), &cdc_at(cdc::PEER_CONN_ABORT, 8292), 6200);
        assert!(matches!(
            late[..],
            [What::LateWrite {
                after_zeroed: true,
                bytes: 100,
                ..
            }]
        ));
        let d = t.summary(TOKEN).unwrap();
        assert_eq!((d.late_writes, d.late_writes_after_zeroed), (2, 2));
    }

    /// What `make faults`' late-write scenario shows: the old connection's close writes
    /// its CDC message (abort flag, its own cursors) into the DMB after the owner handed
    /// it to a new connection. The owner's kernel reads that message as the new
    /// connection's; the host names it and keeps the new connection open.
    #[test]
    fn another_connections_cdc_in_an_open_dmb_is_foreign() {
        let mut t = Tracker::default();
        t.register(&dmb(), "ism0");
        mv(&mut t, data_at(32), &[7; 1000], 0);
        mv(&mut t, cdc_at0(), &cdc_at(cdc::PEER_CONN_ABORT, 1000), 0);
        zeroed(&mut t);
        mv(&mut t, data_at(32), &[1; 64], 0);
        assert_eq!(
            kinds(&mv(&mut t, cdc_at0(), &cdc_at(0, 64), 0)),
            ["reused", "opened"]
        );
        let old_close = cdc_at(cdc::PEER_CONN_ABORT | cdc::PEER_CONN_CLOSED, 18_087_952);
        let foreign = mv(&mut t, cdc_at0(), &old_close, 0);
        assert_eq!(
            foreign,
            [What::ForeignCdc {
                conn: 2,
                expected: 64,
                seen: 18_087_952 % 65504,
                conn_state: 0x60,
                found: None,
                late_moves: None,
                late_bytes: None,
            }]
        );
        // The new connection goes on, and its own cursors are still its own.
        mv(&mut t, data_at(96), &[1; 64], 0);
        assert!(mv(&mut t, cdc_at0(), &cdc_at(0, 128), 0).is_empty());
        let d = t.summary(TOKEN).unwrap();
        assert_eq!(
            (d.state, d.connections, d.foreign_cdcs),
            (ConnState::Open, 2, 1)
        );
    }

    /// A connection that fills the 65,504-byte ring once, its CDC message at 1/0: the
    /// most a new connection's first message may say.
    fn fill_the_ring(t: &mut Tracker) -> Vec<What> {
        let mut whats = mv(t, data_at(32), &[7; 65504], 0);
        whats.extend(mv(t, cdc_at0(), &cdc_at(0, 65504), 0));
        whats
    }

    /// The 4,176 bytes of chaos round 554400509 (known-bugs section 9): 32 bytes, then
    /// the next 4 KiB chunk, at the offsets a second pass over the ring writes them.
    fn second_pass(t: &mut Tracker, found: u64) {
        for (offset, len) in [(32, 32), (64, 4032), (4096, 112)] {
            assert!(mv(t, data_at(offset), &vec![9; len], found).is_empty());
        }
    }

    /// Chaos round 554400509: b's old connection, blocked since its first pass, closed
    /// with 4,176 bytes unsent; when it learned the ring was free it wrote them, and its
    /// CDC message with `peer_conn_closed`, into the DMB a's next connection had taken.
    /// The cursor test passes that message (the late moves end where it says), so the
    /// host took it as the live connection's close. The live connection's own next
    /// message, past one ring, cannot be a new connection's first: the close is withdrawn.
    #[test]
    fn a_connection_that_writes_on_past_one_ring_was_closed_by_another_connections_cdc() {
        let mut t = Tracker::default();
        t.register(&dmb(), "ism0");
        assert_eq!(kinds(&fill_the_ring(&mut t)), ["opened"]);
        let close = cdc_at(cdc::PEER_CONN_CLOSED, 65504);
        assert_eq!(kinds(&mv(&mut t, cdc_at0(), &close, 0)), ["closed"]);
        zeroed(&mut t);
        assert_eq!(kinds(&fill_the_ring(&mut t)), ["reused", "opened"]);
        // The old connection's late data and close, into the live connection's DMB.
        second_pass(&mut t, 0);
        let late_close = cdc_at(cdc::PEER_CONN_CLOSED, 65504 + 4176);
        assert_eq!(kinds(&mv(&mut t, cdc_at0(), &late_close, 0)), ["closed"]);
        // The live connection's own second pass, then its CDC message: 1/4176.
        second_pass(&mut t, 65269);
        let went_on = mv(&mut t, cdc_at0(), &cdc_at(0, 65504 + 4176), 65267);
        assert_eq!(
            went_on,
            [What::ForeignCdc {
                conn: 2,
                expected: 0,
                seen: 4176,
                conn_state: cdc::PEER_CONN_CLOSED,
                found: Some(FOUND_CONTINUATION.to_string()),
                late_moves: Some(3),
                late_bytes: Some(4176),
            }]
        );
        let d = t.summary(TOKEN).unwrap();
        assert_eq!(
            (d.state, d.connections, d.reuses, d.stale_reuses),
            (ConnState::Open, 2, 1, 0)
        );
        assert_eq!((d.closes, d.foreign_cdcs), (1, 1));
        let live = &d.recent[1];
        assert_eq!((live.closed_us, live.how.as_deref()), (None, None));
        assert_eq!(
            live.bytes,
            65504 + 2 * 4176,
            "its own bytes and the late ones"
        );
        // Its real close is its own, at its own cursor.
        let real_close = mv(&mut t, cdc_at0(), &late_close, 0);
        assert!(matches!(
            real_close[..],
            [What::ConnClosed {
                conn: 2,
                bytes: 73856,
                ..
            }]
        ));
        let d = t.summary(TOKEN).unwrap();
        assert_eq!(
            (d.state, d.closes, d.foreign_cdcs),
            (ConnState::Closed, 2, 1)
        );
    }

    /// Past one ring but not where the closed connection's cursor could be: not its
    /// continuation, whatever else it is.
    #[test]
    fn a_cdc_past_one_ring_elsewhere_than_the_closed_connections_cursor_continues_nothing() {
        let mut t = Tracker::default();
        t.register(&dmb(), "ism0");
        fill_the_ring(&mut t);
        second_pass(&mut t, 0);
        let close = cdc_at(cdc::PEER_CONN_CLOSED, 65504 + 4176);
        assert_eq!(kinds(&mv(&mut t, cdc_at0(), &close, 0)), ["closed"]);
        // No data since the close, and a count the closed connection never reached.
        let other = mv(&mut t, cdc_at0(), &cdc_at(0, 65504 + 100), 4208);
        assert_eq!(kinds(&other), ["reused", "opened", "other"]);
        assert!(
            matches!(&other[2], What::ForeignCdc { conn: 2, seen: 100, found: None, .. }),
            "the cursor test's, as for any first message at a count its data never reached: {other:?}"
        );
        let d = t.summary(TOKEN).unwrap();
        assert_eq!((d.connections, d.closes), (2, 1));
    }

    /// Once the owner zeroed the DMB its kernel had released it: the close was real to
    /// the owner, and the host does not take it back.
    #[test]
    fn a_close_the_owner_zeroed_after_is_not_withdrawn() {
        let mut t = Tracker::default();
        t.register(&dmb(), "ism0");
        fill_the_ring(&mut t);
        let close = cdc_at(cdc::PEER_CONN_CLOSED, 65504);
        assert_eq!(kinds(&mv(&mut t, cdc_at0(), &close, 0)), ["closed"]);
        zeroed(&mut t);
        second_pass(&mut t, 0);
        let next = mv(&mut t, cdc_at0(), &cdc_at(0, 65504 + 4176), 0);
        assert_eq!(kinds(&next), ["reused", "opened"]);
        let d = t.summary(TOKEN).unwrap();
        assert_eq!((d.connections, d.closes, d.foreign_cdcs), (2, 1, 0));
    }

    #[test]
    fn a_data_move_ends_where_the_next_cdc_cursor_must_point() {
        // 65,504 bytes of data area in a 64 KiB DMB; the cursor's count is an offset in it.
        assert_eq!(data_end(&data_at(32), 100, 65536), Some(100));
        assert_eq!(
            data_end(&data_at(32 + 65404), 100, 65536),
            Some(0),
            "to the end: wraps"
        );
        assert_eq!(data_end(&data_at(8), 8, 65536), None, "inside the CDC area");
        assert_eq!(
            data_end(&data_at(32), 1, 32),
            None,
            "a DMB with no data area"
        );
        assert_eq!(
            cdc_count(&cdc_at(0, 2 * 65504 + 7)),
            7,
            "the wrap counts passes only"
        );
        assert_eq!(
            cdc_position(&cdc_at(0, 2 * 65504 + 7), 65504),
            2 * 65504 + 7
        );
        assert_eq!(cdc_position(&cdc_at(0, 65504), 65504), 65504, "one ring");
    }

    /// After a failed write the sender writes the same data again from its old cursor:
    /// the data moved in is then more than the cursor says, and the CDC is the
    /// connection's own.
    #[test]
    fn data_written_again_after_a_failed_write_is_not_foreign() {
        let mut t = Tracker::default();
        t.register(&dmb(), "ism0");
        mv(&mut t, data_at(32), &[7; 4096], 0);
        mv(&mut t, data_at(32 + 4096), &[7; 4096], 0);
        // (the next write failed: no CDC, the cursor stays at 0; then both again)
        mv(&mut t, data_at(32), &[7; 4096], 0);
        mv(&mut t, data_at(32 + 4096), &[7; 8192], 0);
        assert!(mv(&mut t, cdc_at0(), &cdc_at(0, 12288), 0).is_empty());
        assert_eq!(t.summary(TOKEN).unwrap().foreign_cdcs, 0);
    }

    /// A write that failed half-way and was never written again: what landed of it is
    /// not announced, and the sender's close still carries the cursor it had.
    #[test]
    fn a_close_after_a_failed_write_keeps_the_old_cursor_and_is_not_foreign() {
        let mut t = Tracker::default();
        t.register(&dmb(), "ism0");
        mv(&mut t, data_at(32), &[7; 100], 0);
        mv(&mut t, cdc_at0(), &cdc_at(0, 100), 0);
        mv(&mut t, data_at(132), &[7; 4096], 0);
        let close = mv(
            &mut t,
            cdc_at0(),
            &cdc_at(cdc::PEER_CONN_ABORT | cdc::PEER_CONN_CLOSED, 100),
            0,
        );
        assert_eq!(kinds(&close), ["closed"]);
    }

    /// A new connection whose first write is its CDC (it received before it sent) is
    /// checked before that CDC, as before.
    #[test]
    fn a_reuse_that_starts_with_a_cdc_is_checked_before_it() {
        let mut t = Tracker::default();
        t.register(&dmb(), "ism0");
        mv(&mut t, cdc_at0(), &cdc_msg(0), 0);
        mv(&mut t, cdc_at0(), &cdc_msg(cdc::PEER_CONN_CLOSED), 0);
        zeroed(&mut t);
        let opened = mv(&mut t, cdc_at0(), &cdc_msg(0), 0);
        assert_eq!(kinds(&opened), ["reused", "opened"]);
        assert!(matches!(
            opened[0],
            What::DmbReused {
                clean: Some(true),
                ..
            }
        ));
    }

    #[test]
    fn close_flags_are_closed_or_abort_not_done_writing() {
        assert_eq!(closing_flags(&cdc_msg(cdc::PEER_DONE_WRITING)), 0);
        assert_ne!(closing_flags(&cdc_msg(cdc::PEER_CONN_CLOSED)), 0);
        assert_ne!(closing_flags(&cdc_msg(cdc::PEER_CONN_ABORT)), 0);
    }
}
