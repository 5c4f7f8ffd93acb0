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
//! "A new connection" is any move into a closed DMB except a CDC that still carries the
//! close flags (the closing side may repeat them). The reuse check reads the whole DMB
//! *before* that first move is applied; the fabric does the reading, outside its lock and
//! within a byte budget, and hands the result in ([`ReuseCheck`]). A read that did not
//! happen is an *unknown* reuse, never a clean one.
//!
//! The zeroing watch resumes where it stopped: bytes up to `scan_from` were seen zero, and
//! a byte seen nonzero is looked at first next time (one page, not the whole DMB, while a
//! guest keeps it dirty).

use std::collections::BTreeMap;
use std::time::Duration;

use super::summary::{ConnRecord, ConnState, DmbSummary, RECENT_CONNS};
use super::{ObservedEvent, ReuseCheck, Unread, What, ZeroScan, ZeroWatch, ZERO_WATCH_LIMIT};
use crate::dmb::{now_us, Dmb};
use crate::ism::MoveAddress;
use crate::util::histogram::DelayHistogram;
use crate::util::ratelimit::guest_log;

/// CDC message layout (net/smc/smc_cdc.h, struct smcd_cdc_msg).
pub mod cdc {
    pub const LEN: usize = 32;
    pub const TYPE: u8 = 0xfe;
    pub const CONN_STATE: usize = 23;
    pub const PEER_DONE_WRITING: u8 = 0x80;
    pub const PEER_CONN_CLOSED: u8 = 0x40;
    pub const PEER_CONN_ABORT: u8 = 0x20;
}

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

fn is_cdc(addr: &MoveAddress, data: &[u8]) -> bool {
    addr.offset == 0 && addr.signal && data.len() >= cdc::LEN && data[0] == cdc::TYPE
}

fn closing_flags(data: &[u8]) -> u8 {
    data[cdc::CONN_STATE] & (cdc::PEER_CONN_CLOSED | cdc::PEER_CONN_ABORT)
}

/// Whether a move into a closed DMB starts a new connection: anything but a CDC that
/// still carries the close flags (the closing side may repeat them).
fn opens_connection(addr: &MoveAddress, data: &[u8]) -> bool {
    !(is_cdc(addr, data) && closing_flags(data) != 0)
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
                    recent: Vec::new(),
                },
                closed_us: None,
                watch_done: false,
                scan_from: 0,
                dirty_at: None,
                looked_at: 0,
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

    /// Whether `data` at `addr` would open a new connection on a closed DMB.
    pub fn wants_reuse_check(&self, dmb: &Dmb, addr: &MoveAddress, data: &[u8]) -> bool {
        self.dmbs.get(&dmb.token).is_some_and(|life| {
            life.summary.state == ConnState::Closed && opens_connection(addr, data)
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

    /// The connection this move starts, if it starts one.
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
        let s = &mut life.summary;
        let starts_connection = match s.state {
            ConnState::Fresh => true,
            ConnState::Open => false,
            ConnState::Closed => opens_connection(addr, data),
        };
        if !starts_connection {
            return Vec::new();
        }
        let mut events = Vec::new();
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
        if s.state == ConnState::Closed {
            s.reuses += 1;
            let reuse = reuse.unwrap_or(ReuseCheck::Unknown(Unread::NotRead));
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
        events.push(s.event(What::ConnOpened { rgid: s.rgid, conn }));
        events
    }

    fn after_move(&mut self, dmb: &Dmb, addr: &MoveAddress, data: &[u8]) -> Vec<ObservedEvent> {
        let Some(life) = self.dmbs.get_mut(&dmb.token) else {
            return Vec::new();
        };
        life.summary.bytes += data.len() as u64;
        life.summary.signals += u64::from(addr.signal);
        if !is_cdc(addr, data) {
            if let Some(record) = life.current() {
                record.bytes += data.len() as u64;
            }
            return Vec::new();
        }
        let flags = closing_flags(data);
        if life.summary.state != ConnState::Open || flags == 0 {
            return Vec::new();
        }
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
        let s = &mut life.summary;
        s.state = ConnState::Closed;
        s.closes += 1;
        vec![s.event(What::ConnClosed {
            conn: s.connections,
            how: how.to_string(),
            bytes,
        })]
    }

    fn watched(life: &DmbLife) -> bool {
        life.summary.registered && life.summary.state == ConnState::Closed && !life.watch_done
    }

    /// The DMBs whose connection closed and whose zeroing has not been seen yet, the
    /// longest-unlooked-at first (so a budget that stops early starves nobody).
    pub fn zero_watch(&self) -> Vec<ZeroWatch> {
        let mut watch: Vec<(u64, ZeroWatch)> = self
            .dmbs
            .values()
            .filter(|l| Self::watched(l))
            .map(|l| {
                let w = ZeroWatch {
                    token: l.summary.token,
                    scan_from: l.scan_from,
                    dirty_at: l.dirty_at,
                };
                (l.looked_at, w)
            })
            .collect();
        watch.sort_by_key(|(looked_at, _)| *looked_at);
        watch.into_iter().map(|(_, w)| w).collect()
    }

    /// Records what the watcher found. Returns the events and how many DMBs are still
    /// watched. A DMB still not zero `ZERO_WATCH_LIMIT` after its close is given up on,
    /// looked at this tick or not.
    pub fn zero_scanned(&mut self, results: &[(u64, ZeroScan)]) -> (Vec<ObservedEvent>, usize) {
        self.tick += 1;
        let mut events = Vec::new();
        for &(token, scan) in results {
            let Some(life) = self.dmbs.get_mut(&token) else {
                continue;
            };
            if !Self::watched(life) {
                continue;
            }
            life.looked_at = self.tick;
            match scan {
                ZeroScan::Zero => {
                    let waited = since(life.closed_us);
                    let delay_ms = waited.as_secs_f64() * 1e3;
                    if let Some(record) = life.current() {
                        record.zeroed_after_ms = Some(delay_ms);
                    }
                    life.watch_done = true;
                    let s = &mut life.summary;
                    s.zeroed_after_close += 1;
                    s.zero_delays_ms.record(delay_ms);
                    events.push(s.event(What::DmbZeroed {
                        conn: s.connections,
                        delay_ms,
                    }));
                }
                ZeroScan::Dirty(at) => {
                    life.scan_from = at;
                    life.dirty_at = Some(at);
                }
                ZeroScan::ZeroUpTo(at) => {
                    life.scan_from = at;
                    life.dirty_at = None;
                }
                ZeroScan::Unreadable => {}
            }
        }
        let mut pending = 0;
        for life in self.dmbs.values_mut().filter(|l| Self::watched(l)) {
            let waited = since(life.closed_us);
            if waited < ZERO_WATCH_LIMIT {
                pending += 1;
                continue;
            }
            life.watch_done = true;
            if let Some(record) = life.current() {
                record.not_zeroed = true;
            }
            let s = &mut life.summary;
            s.not_zeroed += 1;
            events.push(s.event(What::DmbNotZeroed {
                conn: s.connections,
                watched_ms: waited.as_secs_f64() * 1e3,
            }));
        }
        (events, pending)
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

    fn cdc_msg(conn_state: u8) -> Vec<u8> {
        let mut m = vec![0u8; 32];
        m[0] = cdc::TYPE;
        m[cdc::CONN_STATE] = conn_state;
        m
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

    #[test]
    fn close_flags_are_closed_or_abort_not_done_writing() {
        assert_eq!(closing_flags(&cdc_msg(cdc::PEER_DONE_WRITING)), 0);
        assert_ne!(closing_flags(&cdc_msg(cdc::PEER_CONN_CLOSED)), 0);
        assert_ne!(closing_flags(&cdc_msg(cdc::PEER_CONN_ABORT)), 0);
    }
}
